/*
 * The HOST placement's step: the AdamW groups' elements are split evenly
 * over the optimizer's threads (a group's matrices are contiguous, so a
 * thread takes one range that may cross groups); the Muon groups'
 * matrices are dealt to the threads whole, each thread with its own
 * Newton–Schulz workspace. Then the writer sees each updated matrix in
 * order on the calling thread. The bytes do not depend on the thread
 * count: every element, and every Muon matrix, is updated on its own.
 */
#include "config.h"

#include "optim_impl.h"

#include "common/log.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct host_work {
    weft_optim_h             opt;
    const weft_optim_grad_t *grads;
    const optim_scalars_t   *scalars;
    uint64_t                 begin, end; /* AdamW elements, counted over the AdamW groups in order */
    uint32_t                 thread, threads;
    float                   *muon_work;  /* this thread's Muon buffers: u, X, NS workspace */
} host_work_t;

static void adamw_range(const host_work_t *w)
{
    uint64_t base = 0;

    for (uint32_t i = 0; i < w->opt->group_count && base < w->end; i++) {
        const optim_group_t *g = &w->opt->groups[i];
        const uint64_t       n = g->units * g->unit_elems;
        uint64_t             first, last;

        if (g->algo != WEFT_OPTIM_ADAMW) {
            continue;
        }
        first = w->begin > base ? w->begin - base : 0;
        last  = w->end - base < n ? w->end - base : n;
        if (first < last) {
            const size_t elem = weft_dtype_size(w->grads[i].dtype);
            weft_adamw_host(&w->scalars[i].adamw, g->state[0] + first, g->state[1] + first, g->state[2] + first,
                            (const char *)w->grads[i].data + first * elem, w->grads[i].dtype,
                            (size_t)(last - first));
        }
        base += n;
    }
}

/* The Muon matrices numbered thread, thread + threads, … over all Muon
 * groups in order. */
static void muon_matrices(const host_work_t *w)
{
    uint64_t k = 0;

    for (uint32_t i = 0; i < w->opt->group_count; i++) {
        const optim_group_t *g = &w->opt->groups[i];
        if (g->algo != WEFT_OPTIM_MUON) {
            continue;
        }
        for (uint32_t u = 0; u < g->units; u++, k++) {
            const uint64_t n = g->unit_elems, off = (uint64_t)u * n;
            const size_t   elem = weft_dtype_size(w->grads[i].dtype);
            float         *dir = w->muon_work, *x = dir + n, *ns = x + n;

            if (k % w->threads != w->thread) {
                continue;
            }
            weft_muon_momentum_host(&w->scalars[i].muon, g->state[1] + off,
                                    (const char *)w->grads[i].data + off * elem, w->grads[i].dtype, dir, (size_t)n);
            weft_muon_ns_host(dir, g->rows, g->cols, (int)g->muon.schedule, g->muon.ns_steps, x, ns);
            weft_muon_apply_host(&w->scalars[i].muon, g->state[0] + off, x, (size_t)n);
        }
    }
}

static void *host_range(void *arg)
{
    const host_work_t *w = arg;

    adamw_range(w);
    if (w->muon_work != NULL) {
        muon_matrices(w);
    }
    return NULL;
}

weft_status_t optim_host_step(weft_optim_h opt, const weft_optim_grad_t *grads, const optim_scalars_t *scalars,
                              const weft_optim_step_params_t *params)
{
    uint64_t     total = 0, muon_units = 0;
    size_t       muon_floats = 0;
    uint32_t     threads;
    host_work_t *work;
    pthread_t   *tids;
    uint32_t     started = 0;
    int          oom = 0;

    for (uint32_t i = 0; i < opt->group_count; i++) {
        const optim_group_t *g = &opt->groups[i];
        if (g->algo == WEFT_OPTIM_MUON) {
            const size_t need = 2 * (size_t)g->unit_elems + weft_muon_ns_host_work(g->rows, g->cols);
            muon_units += g->units;
            muon_floats = need > muon_floats ? need : muon_floats;
        } else {
            total += g->units * g->unit_elems;
        }
    }
    /* A thread for less than 64 Ki elements costs more than it saves. */
    threads = opt->threads;
    if (total / 65536 + 1 < threads && muon_units < threads) {
        threads = (uint32_t)(total / 65536 + 1 > muon_units ? total / 65536 + 1 : muon_units);
    }
    work = calloc(threads, sizeof(*work));
    tids = calloc(threads, sizeof(*tids));
    if (work == NULL || tids == NULL) {
        free(work);
        free(tids);
        return WEFT_ERR_NO_MEMORY;
    }
    for (uint32_t t = 0; t < threads; t++) {
        /* Ranges end on 16-element boundaries so that every thread but the
         * last runs whole vector chunks. */
        work[t] = (host_work_t){.opt     = opt,
                                .grads   = grads,
                                .scalars = scalars,
                                .begin   = total * t / threads / 16 * 16,
                                .end     = t + 1 == threads ? total : total * (t + 1) / threads / 16 * 16,
                                .thread  = t,
                                .threads = threads};
        if (muon_units > 0) {
            work[t].muon_work = malloc(muon_floats * sizeof(float));
            oom |= work[t].muon_work == NULL;
        }
    }
    if (oom) {
        for (uint32_t t = 0; t < threads; t++) {
            free(work[t].muon_work);
        }
        free(work);
        free(tids);
        weft_log_error("weft_optim_step: cannot allocate Muon's workspace (%zu bytes a thread)",
                       muon_floats * sizeof(float));
        return WEFT_ERR_NO_MEMORY;
    }
    /* The calling thread takes the first range; a thread that cannot be
     * started leaves its range to the calling thread too. */
    for (uint32_t t = 1; t < threads; t++) {
        if (pthread_create(&tids[t], NULL, host_range, &work[t]) != 0) {
            break;
        }
        started = t;
    }
    host_range(&work[0]);
    for (uint32_t t = 1; t <= started; t++) {
        pthread_join(tids[t], NULL);
    }
    for (uint32_t t = started + 1; t < threads; t++) {
        host_range(&work[t]);
    }
    for (uint32_t t = 0; t < threads; t++) {
        free(work[t].muon_work);
    }
    free(work);
    free(tids);

    if (params->field_mask & WEFT_OPTIM_STEP_FIELD_WRITER) {
        for (uint32_t i = 0; i < opt->group_count; i++) {
            const optim_group_t *g = &opt->groups[i];
            for (uint32_t u = 0; u < g->units; u++) {
                weft_optim_unit_t unit;
                weft_status_t     status;

                optim_unit_init(opt, i, u, g->state[0] + (uint64_t)u * g->unit_elems, WEFT_MEMORY_HOST, NULL,
                                &unit);
                status = params->writer(params->writer_arg, &unit);
                if (status != WEFT_OK) {
                    /* Every master is updated already; only the writes are
                     * incomplete. The state is still that of a whole step. */
                    weft_log_error("weft_optim_step: the writer failed on group \"%s\" matrix %u: %s", g->name,
                                   u, weft_status_string(status));
                    opt->step++;
                    return status;
                }
            }
        }
    }
    return WEFT_OK;
}
