/* A remote consumer's delta versions (remote/remote_delta.h). */
#include "config.h"

#include "transport/remote/remote_delta.h"
#include "transport/remote/remote_delta_gpu.h"

#include "common/env_config.h"
#include "common/log.h"
#include "common/pool.h"
#include "kernels/delta_internal.h"
#include "transport/core/delta_mode.h"
#include "transport/core/view_layout.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define INBOX_ALIGN 4096u
/* Views are applied and checked on this many threads at most (each view
 * on one), and only where there is at least this much to read per
 * thread: the check reads every byte of a patched view. */
#define APPLY_THREADS_MAX  8
#define APPLY_THREAD_BYTES (UINT64_C(4) << 20)

/*
 * Where a view's bytes lie, as <weft/delta.h>'s rows: its innermost
 * dimension contiguous and every row the same stride apart (a contiguous
 * view is one row). 0 and *t, or -1 for any other layout.
 */
static int view_rows(const weft_recv_view_t *view, weft_delta_target_t *t)
{
    uint64_t strides[WEFT_TENSOR_MAX_DIMS], dense[WEFT_TENSOR_MAX_DIMS];
    uint64_t elements = 1;
    size_t   elem = weft_dtype_size(view->dtype);
    uint32_t n = view->ndim;

    if (n == 0 || n > WEFT_TENSOR_MAX_DIMS || elem == 0) {
        return -1;
    }
    weft_view_strides(view, strides);
    weft_contiguous_strides(n, view->shape, dense);
    for (uint32_t i = 0; i < n; i++) {
        elements *= view->shape[i];
    }
    /* A dimension of size 1 has no stride that matters (PyTorch gives such
     * ones any): taken as if dense within the dimensions inside it. */
    for (uint32_t i = n; i-- > 0;) {
        if (view->shape[i] == 1) {
            strides[i] = i + 1 == n ? 1 : strides[i + 1] * view->shape[i + 1];
        }
    }
    *t = (weft_delta_target_t){.data = view->data, .tensor_bytes = elements * elem};
    if (memcmp(strides, dense, n * sizeof(*strides)) == 0 || elements == 0) {
        t->row_bytes = t->row_stride = t->tensor_bytes;
        return 0;
    }
    /* Rows [.., rows, cols]: cols contiguous, rows `strides[n-2]` apart,
     * every outer dimension a whole number of such rows further. */
    if (n < 2 || strides[n - 1] != 1) {
        return -1;
    }
    for (uint32_t i = 0; i + 2 < n; i++) {
        if (strides[i] != strides[i + 1] * view->shape[i + 1]) {
            return -1;
        }
    }
    t->row_bytes = view->shape[n - 1] * elem;
    t->row_stride = strides[n - 2] * elem;
    if (elements / view->shape[n - 1] == 1) {
        t->row_stride = t->row_bytes; /* one row */
    }
    return t->row_bytes == 0 || t->row_stride < t->row_bytes ? -1 : 0;
}

/* The inbox for views of `bytes` bytes per version (WEFT_DELTA_INBOX). */
static weft_status_t inbox_size(uint64_t bytes, uint64_t *out)
{
    if (strcasecmp(weft_config_value(WEFT_CONFIG_DELTA_INBOX), "auto") == 0) {
        uint64_t share = bytes / WEFT_DELTA_INBOX_SHARE;

        *out = share > WEFT_DELTA_INBOX_MIN ? share : WEFT_DELTA_INBOX_MIN;
        return WEFT_OK;
    }
    return weft_config_size(WEFT_CONFIG_DELTA_INBOX, out);
}

/* The inbox: host memory of our own for host views, the device side's
 * (remote_delta_gpu.h) for device views. WEFT_ERR_UNSUPPORTED (said at
 * info level) when device views take no deltas in this build. */
static weft_status_t make_inbox(weft_remote_delta_t *d, uint64_t inbox, uint32_t count, int device,
                                weft_memory_kind_t inbox_memory)
{
    weft_status_t status;

    if (device < 0) {
        d->inbox = aligned_alloc(INBOX_ALIGN, inbox);
        return d->inbox != NULL ? WEFT_OK : WEFT_ERR_NO_MEMORY;
    }
    status = weft_remote_delta_gpu_create(device, count, inbox, inbox_memory, &d->gpu, &d->inbox);
    if (status == WEFT_ERR_UNSUPPORTED) {
        weft_log_info("remote: device views take every version whole (libweft built without CUDA)");
    }
    return status;
}

weft_status_t weft_remote_delta_init(weft_remote_delta_t *d, const weft_recv_view_t *views, uint32_t count,
                                     int device, weft_memory_kind_t inbox_memory)
{
    uint64_t bytes = 0, inbox = 0;
    weft_status_t status;

    memset(d, 0, sizeof(*d));
    if (weft_delta_mode() == WEFT_DELTA_OFF) {
        return WEFT_OK;
    }
    d->targets = calloc(count ? count : 1, sizeof(*d->targets));
    if (d->targets == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < count; i++) {
        if (view_rows(&views[i], &d->targets[i]) != 0) {
            weft_log_info("remote: view \"%s\" is not laid out in rows of one stride: every version "
                          "comes whole", views[i].name);
            weft_remote_delta_fini(d);
            return WEFT_OK;
        }
        bytes += d->targets[i].tensor_bytes;
    }
    status = inbox_size(bytes, &inbox);
    if (status != WEFT_OK || inbox == 0) {
        weft_remote_delta_fini(d);
        return status;
    }
    inbox = (inbox + INBOX_ALIGN - 1) / INBOX_ALIGN * INBOX_ALIGN;
    status = make_inbox(d, inbox, count, device, inbox_memory);
    if (status != WEFT_OK) {
        weft_remote_delta_fini(d);
        return status == WEFT_ERR_UNSUPPORTED ? WEFT_OK : status;
    }
    d->patched = calloc(count ? count : 1, sizeof(*d->patched));
    d->carried = calloc(count ? count : 1, sizeof(*d->carried));
    if (d->patched == NULL || d->carried == NULL) {
        weft_remote_delta_fini(d);
        return WEFT_ERR_NO_MEMORY;
    }
    d->inbox_bytes = inbox;
    d->view_count = count;
    return WEFT_OK;
}

void weft_remote_delta_fini(weft_remote_delta_t *d)
{
    if (d->gpu != NULL) {
        weft_remote_delta_gpu_destroy(d->gpu); /* and its inbox */
    } else {
        free(d->inbox);
    }
    free(d->targets);
    free(d->map);
    free(d->patched);
    free(d->carried);
    memset(d, 0, sizeof(*d));
}

void weft_remote_delta_forget(weft_remote_delta_t *d)
{
    d->holds = 0;
}

weft_status_t weft_remote_delta_take_map(weft_remote_delta_t *d, const weft_ctl_msg_t *msg, const char *server)
{
    const weft_status_t status = weft_remote_delta_on_map(d, msg);

    if (status == WEFT_ERR_CORRUPT) {
        weft_log_error("remote: a malformed DELTA from %s", server);
    }
    return status;
}

weft_status_t weft_remote_delta_on_map(weft_remote_delta_t *d, const weft_ctl_msg_t *msg)
{
    weft_wire_delta_entry_t *map = NULL;
    uint64_t                 version, base;
    uint32_t                 count;
    weft_status_t            status;

    if (d->inbox == NULL) {
        return WEFT_ERR_CORRUPT; /* no inbox was announced */
    }
    status = weft_wire_get_delta(msg, d->inbox_bytes, &version, &base, &map, &count);
    if (status == WEFT_OK && count != d->view_count) {
        free(map);
        status = WEFT_ERR_CORRUPT;
    }
    if (status != WEFT_OK) {
        return status;
    }
    free(d->map);
    d->map = map;
    d->map_count = count;
    d->map_version = version;
    d->map_base = base;
    return WEFT_OK;
}

/* Copies a whole tensor from the inbox into its view, row by row. */
static void put_whole(const uint8_t *src, const weft_delta_target_t *t)
{
    uint64_t rows = t->tensor_bytes / t->row_bytes;

    for (uint64_t r = 0; r < rows; r++) {
        memcpy((uint8_t *)t->data + r * t->row_stride, src + r * t->row_bytes, t->row_bytes);
    }
}

/* One view's entry: applied (a patch, checked against its checksum; a
 * WT's patch, its W's delta transposed, against WT's checksum) or copied
 * (whole). */
static weft_status_t apply_entry(weft_remote_delta_t *d, uint32_t i)
{
    const weft_wire_delta_entry_t *e = &d->map[i];
    weft_delta_target_t            view = d->targets[i];
    const weft_delta_target_t     *t = &view;
    uint64_t                       want, got;
    weft_status_t                  status;

    if (t->tensor_bytes == 0) {
        return e->bytes == 0 ? WEFT_OK : WEFT_ERR_CORRUPT;
    }
    if (e->kind == WEFT_WIRE_DELTA_WHOLE) {
        if (e->bytes != t->tensor_bytes) {
            return WEFT_ERR_CORRUPT;
        }
        put_whole(d->inbox + e->offset, t);
        return WEFT_OK; /* checked as a whole version's views are (WEFT_VERIFY) */
    }
    if (e->kind == WEFT_WIRE_DELTA_PATCH_T) {
        view.transpose_rows = e->rows;
        view.transpose_cols = e->cols;
    }
    /* Applied and summed in one pass over the view. */
    status = weft_delta_apply_host_summed(d->inbox + e->offset, e->bytes, t, &want, &got);
    if (status != WEFT_OK) {
        return WEFT_ERR_CORRUPT;
    }
    if (e->kind == WEFT_WIRE_DELTA_PATCH_T) {
        want = e->checksum; /* the delta carries W's */
    }
    if (got != want) {
        weft_log_error("remote: view %u after its delta: checksum 0x%016" PRIx64 ", the version's is 0x%016" PRIx64,
                       i, got, want);
        return WEFT_ERR_CORRUPT;
    }
    d->patched[i] = 1;
    d->carried[i] = want;
    return WEFT_OK;
}

weft_status_t weft_remote_delta_vouch(const weft_remote_delta_t *d, weft_wire_sums_t *sums)
{
    for (uint32_t i = 0; d->patched != NULL && i < d->view_count && i < sums->count; i++) {
        if (!d->patched[i] || !sums->known[i]) {
            continue;
        }
        if (sums->sums[i] != d->carried[i]) {
            weft_log_error("remote: view %u: its delta carried checksum 0x%016" PRIx64
                           ", the version's is 0x%016" PRIx64,
                           i, d->carried[i], sums->sums[i]);
            return WEFT_ERR_CORRUPT;
        }
        sums->known[i] = 0; /* its bytes were summed after the patch */
    }
    return WEFT_OK;
}

/* A part's share of the views: first, first + step, ... */
typedef struct apply_part {
    weft_remote_delta_t *d;
    uint32_t             first, step, bad;
    weft_status_t        status;
} apply_part_t;

static void apply_part_run(void *arg, uint32_t part)
{
    apply_part_t *p = (apply_part_t *)arg + part;

    for (uint32_t i = p->first; i < p->d->map_count && p->status == WEFT_OK; i += p->step) {
        p->status = apply_entry(p->d, i);
        p->bad = i;
    }
}

/* Every entry applied (views side by side on the library's workers); the
 * first failure's status, its view in *bad. */
static weft_status_t apply_all(weft_remote_delta_t *d, uint32_t *bad)
{
    apply_part_t  parts[APPLY_THREADS_MAX];
    uint64_t      bytes = 0;
    uint32_t      n;
    weft_status_t status = WEFT_OK;

    for (uint32_t i = 0; i < d->map_count; i++) {
        bytes += d->targets[i].tensor_bytes;
    }
    n = (uint32_t)(bytes / APPLY_THREAD_BYTES);
    n = n < weft_pool_width() ? n : weft_pool_width();
    n = n < APPLY_THREADS_MAX ? n : APPLY_THREADS_MAX;
    n = n < d->map_count ? n : d->map_count;
    n = n > 1 ? n : 1;
    for (uint32_t k = 0; k < n; k++) {
        parts[k] = (apply_part_t){.d = d, .first = k, .step = n, .status = WEFT_OK};
    }
    weft_pool_run(n, apply_part_run, parts);
    for (uint32_t k = 0; k < n; k++) {
        if (status == WEFT_OK && parts[k].status != WEFT_OK) {
            status = parts[k].status;
            *bad = parts[k].bad;
        }
    }
    return status;
}

weft_status_t weft_remote_delta_apply(weft_remote_delta_t *d, uint64_t version, int *applied)
{
    weft_status_t status = WEFT_OK;
    uint32_t      bad = 0;

    *applied = 0;
    d->failed_transposed = 0;
    if (d->patched != NULL) {
        memset(d->patched, 0, d->view_count);
    }
    if (d->map == NULL || d->map_version != version) {
        return WEFT_OK; /* v came whole */
    }
    *applied = 1;
    if (d->map_base != d->holds || d->holds == 0) {
        weft_log_error("remote: a delta of version %" PRIu64 " from version %" PRIu64
                       ", but the views hold %" PRIu64,
                       version, d->map_base, d->holds);
        status = WEFT_ERR_CORRUPT;
    }
    if (status == WEFT_OK) {
        status = d->gpu != NULL ? weft_remote_delta_gpu_apply(d->gpu, d->map, d->targets, d->map_count, d->patched,
                                                              d->carried, &bad)
                                : apply_all(d, &bad);
        if (status != WEFT_OK) {
            weft_log_error("remote: the delta of version %" PRIu64 " does not apply to view %u", version, bad);
            d->failed_transposed = bad < d->map_count && d->map[bad].kind == WEFT_WIRE_DELTA_PATCH_T;
        }
    }
    free(d->map);
    d->map = NULL;
    d->map_count = 0;
    d->map_version = 0;
    d->holds = status == WEFT_OK ? version : 0;
    return status;
}

/* An entry's place in the inbox, sorted by. */
typedef struct place {
    uint64_t offset, bytes;
    uint32_t view;
} place_t;

static int by_offset(const void *a, const void *b)
{
    const uint64_t x = ((const place_t *)a)->offset, y = ((const place_t *)b)->offset;

    return x < y ? -1 : x > y;
}

weft_status_t weft_remote_delta_places(const weft_remote_delta_t *d, uint64_t *offsets, uint64_t *sizes,
                                       uint32_t *count)
{
    place_t *places;
    uint32_t n = 0;
    uint64_t end = 0;

    *count = 0;
    if (d->map == NULL) {
        return WEFT_ERR_CORRUPT;
    }
    places = calloc(d->map_count + 1, sizeof(*places));
    if (places == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < d->map_count; i++) {
        if (d->map[i].bytes != 0) {
            places[n++] = (place_t){.offset = d->map[i].offset, .bytes = d->map[i].bytes, .view = i};
        }
    }
    qsort(places, n, sizeof(*places), by_offset);
    for (uint32_t k = 0; k < n; k++) {
        const place_t *e = &places[k];

        if (*count > 0 && e->offset == offsets[*count - 1] && e->bytes == sizes[*count - 1]) {
            continue; /* a WT's at its W's place */
        }
        if (*count > 0 && e->offset < end) {
            weft_log_error("remote: a DELTA whose entries overlap in the inbox (view %u)", e->view);
            free(places);
            *count = 0;
            return WEFT_ERR_CORRUPT;
        }
        offsets[*count] = e->offset;
        sizes[*count] = e->bytes;
        end = e->offset + e->bytes;
        (*count)++;
    }
    free(places);
    return WEFT_OK;
}

weft_status_t weft_remote_delta_redo(const weft_remote_delta_t *d, weft_remote_base_t *base, uint64_t v)
{
    weft_ctl_buf_t buf = {0};
    weft_status_t  status;

    weft_log_warn("remote: version %" PRIu64 " from %s did not check out after its delta; asking for it whole", v,
                  base->server);
    weft_ctl_put_u64(&buf, v);
    weft_ctl_put_u32(&buf, d->failed_transposed ? 1u : 0u);
    status = weft_remote_base_send(base, WEFT_CTL_REDO, &buf);
    weft_ctl_buf_free(&buf);
    if (status != WEFT_OK) {
        weft_remote_base_disconnect(base);
    }
    return status;
}
