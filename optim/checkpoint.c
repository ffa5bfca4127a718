/*
 * Checkpoint and restore of the whole optimizer state. The file:
 *
 *   header  64 B   "WEFTOPT\0", format 1, header bytes, group count, step,
 *                  the checksum of the group table, the header's checksum
 *   table   one record a group: name, algorithm, shape, hyperparameters,
 *                  where its data is, and a checksum of each of its arrays
 *   data    a group after another: master, exp_avg, exp_avg_sq (AdamW) or
 *                  master, momentum (Muon), FP32
 *
 * all little-endian, checksums by <weft/checksum.h>'s definition. Saving
 * writes "<path>.tmp", syncs it and renames it over path, so a crash
 * leaves the old file or the new one. Restoring checks everything (the
 * header, the table against the optimizer's groups, the size, then every
 * array's checksum in a first pass over the file) before it changes
 * anything, then reads the arrays into place.
 */
#include "config.h"

#include "optim_impl.h"

#include "common/log.h"
#include "kernels/checksum.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_MAGIC   "WEFTOPT"
#define CKPT_FORMAT  2u /* 1 had no Muon fields */
#define CKPT_CHUNK   (8u << 20) /* bytes read or written at a time; a multiple of 8 */

typedef struct ckpt_header {
    char     magic[8];
    uint32_t format;
    uint32_t header_bytes;
    uint32_t groups;
    uint32_t reserved0;
    uint64_t step;
    uint64_t table_checksum;
    uint64_t reserved[2];
    uint64_t header_checksum; /* of the header with this field zero */
} ckpt_header_t;

typedef struct ckpt_group {
    char     name[WEFT_OPTIM_NAME_MAX];
    uint32_t algo;
    uint32_t experts;
    uint64_t rows, cols;
    double   lr, beta1, beta2, eps, weight_decay; /* AdamW */
    double   muon_lr, muon_momentum, muon_weight_decay;
    uint32_t muon_nesterov, muon_ns_steps, muon_scale, muon_schedule;
    uint32_t arrays;        /* 3 (AdamW) or 2 (Muon) */
    uint32_t muon_rounding; /* a weft_muon_rounding_t; 0 (files before it): EAGER */
    uint64_t data_offset;
    uint64_t array_bytes;   /* each array */
    uint64_t checksum[3];   /* of each array; 0 past `arrays` */
} ckpt_group_t;

_Static_assert(sizeof(ckpt_header_t) == 64, "the header is 64 bytes");
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoints are little-endian; this host is not"
#endif

/* A checksum computed over a stream of chunks, each a multiple of 8 bytes
 * but the last: the same value as weft_checksum_host of the whole. */
typedef struct sum_stream {
    uint64_t sum, words, bytes;
} sum_stream_t;

static void sum_update(sum_stream_t *s, const void *data, size_t bytes)
{
    const unsigned char *p = data;
    size_t               full = bytes / 8;

    for (size_t i = 0; i < full; i++) {
        uint64_t word;
        memcpy(&word, p + 8 * i, sizeof(word));
        s->sum += weft_checksum_term(word, s->words++);
    }
    if (bytes % 8 != 0) {
        uint64_t word = 0;
        memcpy(&word, p + 8 * full, bytes % 8);
        s->sum += weft_checksum_term(word, s->words++);
    }
    s->bytes += bytes;
}

static uint64_t sum_final(const sum_stream_t *s)
{
    return weft_checksum_final(s->sum, s->bytes);
}

/* Where array a of group g is for reading and writing here: the state
 * itself on the host, or a bounce buffer through which the GPU's copies
 * go (RESIDENT). */
static weft_status_t array_read(weft_optim_h opt, optim_group_t *g, int a, uint64_t offset, void *out, size_t bytes)
{
    if (opt->placement == WEFT_OPTIM_RESIDENT) {
        return optim_gpu_state_copy(opt, g, a, offset, out, bytes, 0);
    }
    memcpy(out, (const char *)g->state[a] + offset, bytes);
    return WEFT_OK;
}

static weft_status_t array_write(weft_optim_h opt, optim_group_t *g, int a, uint64_t offset, void *in, size_t bytes)
{
    if (opt->placement == WEFT_OPTIM_RESIDENT) {
        return optim_gpu_state_copy(opt, g, a, offset, in, bytes, 1);
    }
    memcpy((char *)g->state[a] + offset, in, bytes);
    return WEFT_OK;
}

static weft_status_t io_error(const char *what, const char *path)
{
    weft_log_error("weft_optim checkpoint: %s \"%s\": %s", what, path, strerror(errno));
    return errno == ENOENT ? WEFT_ERR_NOT_FOUND : errno == EACCES || errno == EPERM ? WEFT_ERR_PERMISSION : WEFT_ERR_IO;
}

static int write_all(int fd, const void *data, size_t bytes)
{
    const char *p = data;
    while (bytes > 0) {
        ssize_t n = write(fd, p, bytes);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return -1;
        }
        p += n;
        bytes -= (size_t)n;
    }
    return 0;
}

/* 1: all read; 0: the file ended first; -1: an error (errno). */
static int read_all(int fd, void *data, size_t bytes)
{
    char *p = data;
    while (bytes > 0) {
        ssize_t n = read(fd, p, bytes);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return -1;
        }
        if (n == 0) {
            return 0;
        }
        p += n;
        bytes -= (size_t)n;
    }
    return 1;
}

static void table_fill(weft_optim_h opt, ckpt_group_t *table, uint64_t *data_bytes)
{
    uint64_t offset = sizeof(ckpt_header_t) + opt->group_count * sizeof(ckpt_group_t);

    for (uint32_t i = 0; i < opt->group_count; i++) {
        const optim_group_t *g = &opt->groups[i];
        ckpt_group_t        *t = &table[i];

        memset(t, 0, sizeof(*t));
        memcpy(t->name, g->name, sizeof(t->name));
        t->algo         = (uint32_t)g->algo;
        t->experts      = g->experts;
        t->rows         = g->rows;
        t->cols         = g->cols;
        t->lr           = g->adamw.lr;
        t->beta1        = g->adamw.beta1;
        t->beta2        = g->adamw.beta2;
        t->eps          = g->adamw.eps;
        t->weight_decay = g->adamw.weight_decay;
        t->muon_lr           = g->muon.lr;
        t->muon_momentum     = g->muon.momentum;
        t->muon_weight_decay = g->muon.weight_decay;
        t->muon_nesterov     = (uint32_t)g->muon.nesterov;
        t->muon_ns_steps     = g->muon.ns_steps;
        t->muon_scale        = (uint32_t)g->muon.scale;
        t->muon_schedule     = (uint32_t)g->muon.schedule;
        t->muon_rounding     = (uint32_t)g->muon_rounding;
        t->arrays       = (uint32_t)g->arrays;
        t->data_offset  = offset;
        t->array_bytes  = g->units * g->unit_elems * sizeof(float);
        offset += t->arrays * t->array_bytes;
    }
    *data_bytes = offset;
}

weft_status_t weft_optim_save(weft_optim_h opt, const char *path)
{
    ckpt_header_t h;
    ckpt_group_t *table;
    char         *tmp, *chunk;
    uint64_t      total;
    weft_status_t status = WEFT_OK;
    int           fd;

    if (opt == NULL || path == NULL || path[0] == '\0') {
        weft_log_error("weft_optim_save: NULL optimizer or path");
        return WEFT_ERR_INVALID_PARAM;
    }
    if (opt->broken) {
        weft_log_error("weft_optim_save: an earlier step stopped part-way; the state is not a step's");
        return WEFT_ERR_STATE;
    }
    table = calloc(opt->group_count ? opt->group_count : 1, sizeof(*table));
    chunk = malloc(CKPT_CHUNK);
    tmp   = malloc(strlen(path) + 5);
    if (table == NULL || chunk == NULL || tmp == NULL) {
        free(table);
        free(chunk);
        free(tmp);
        return WEFT_ERR_NO_MEMORY;
    }
    sprintf(tmp, "%s.tmp", path);
    table_fill(opt, table, &total);
    /* The checksums first: one pass over the state. */
    for (uint32_t i = 0; i < opt->group_count && status == WEFT_OK; i++) {
        for (int a = 0; a < (int)table[i].arrays && status == WEFT_OK; a++) {
            sum_stream_t s = {0};
            for (uint64_t off = 0; off < table[i].array_bytes && status == WEFT_OK; off += CKPT_CHUNK) {
                const size_t n = (size_t)(table[i].array_bytes - off < CKPT_CHUNK ? table[i].array_bytes - off : CKPT_CHUNK);
                status = array_read(opt, &opt->groups[i], a, off, chunk, n);
                sum_update(&s, chunk, n);
            }
            table[i].checksum[a] = sum_final(&s);
        }
    }
    memset(&h, 0, sizeof(h));
    memcpy(h.magic, CKPT_MAGIC, sizeof(CKPT_MAGIC));
    h.format          = CKPT_FORMAT;
    h.header_bytes    = sizeof(h);
    h.groups          = opt->group_count;
    h.step            = opt->step;
    h.table_checksum  = weft_checksum_host(table, opt->group_count * sizeof(*table));
    h.header_checksum = weft_checksum_host(&h, sizeof(h));

    fd = status == WEFT_OK ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
    if (status == WEFT_OK && fd < 0) {
        status = io_error("cannot create", tmp);
    }
    if (status == WEFT_OK && (write_all(fd, &h, sizeof(h)) != 0 ||
                              write_all(fd, table, opt->group_count * sizeof(*table)) != 0)) {
        status = io_error("cannot write", tmp);
    }
    for (uint32_t i = 0; i < opt->group_count && status == WEFT_OK; i++) {
        for (int a = 0; a < (int)table[i].arrays && status == WEFT_OK; a++) {
            for (uint64_t off = 0; off < table[i].array_bytes && status == WEFT_OK; off += CKPT_CHUNK) {
                const size_t n = (size_t)(table[i].array_bytes - off < CKPT_CHUNK ? table[i].array_bytes - off : CKPT_CHUNK);
                status = array_read(opt, &opt->groups[i], a, off, chunk, n);
                if (status == WEFT_OK && write_all(fd, chunk, n) != 0) {
                    status = io_error("cannot write", tmp);
                }
            }
        }
    }
    if (status == WEFT_OK && fsync(fd) != 0) {
        status = io_error("cannot sync", tmp);
    }
    if (fd >= 0 && close(fd) != 0 && status == WEFT_OK) {
        status = io_error("cannot close", tmp);
    }
    if (status == WEFT_OK && rename(tmp, path) != 0) {
        status = io_error("cannot rename the checkpoint to", path);
    }
    if (status != WEFT_OK && fd >= 0) {
        unlink(tmp);
    }
    free(table);
    free(chunk);
    free(tmp);
    return status;
}

/* The header and table of `path`, checked against the optimizer. */
static weft_status_t restore_check(weft_optim_h opt, const char *path, int fd, ckpt_header_t *h, ckpt_group_t *table)
{
    static const char *who = "weft_optim_restore";
    uint64_t           want_checksum, total;
    ckpt_group_t      *mine;
    struct stat        st;
    int                r;

    r = read_all(fd, h, sizeof(*h));
    if (r < 0) {
        return io_error("cannot read", path);
    }
    want_checksum      = h->header_checksum;
    h->header_checksum = 0;
    if (r == 0 || memcmp(h->magic, CKPT_MAGIC, sizeof(CKPT_MAGIC)) != 0 ||
        weft_checksum_host(h, sizeof(*h)) != want_checksum) {
        weft_log_error("%s: \"%s\" is not a libweft optimizer checkpoint, or its header is damaged", who, path);
        return WEFT_ERR_CORRUPT;
    }
    if (h->format != CKPT_FORMAT || h->header_bytes != sizeof(*h)) {
        weft_log_error("%s: \"%s\" has format %u; this library reads format %u", who, path, h->format, CKPT_FORMAT);
        return WEFT_ERR_VERSION;
    }
    if (h->groups != opt->group_count) {
        weft_log_error("%s: \"%s\" holds %u groups; this optimizer has %u", who, path, h->groups, opt->group_count);
        return WEFT_ERR_INVALID_PARAM;
    }
    r = read_all(fd, table, h->groups * sizeof(*table));
    if (r < 0) {
        return io_error("cannot read", path);
    }
    if (r == 0 || weft_checksum_host(table, h->groups * sizeof(*table)) != h->table_checksum) {
        weft_log_error("%s: \"%s\": the group table is truncated or damaged", who, path);
        return WEFT_ERR_CORRUPT;
    }
    mine = calloc(h->groups ? h->groups : 1, sizeof(*mine));
    if (mine == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    table_fill(opt, mine, &total);
    for (uint32_t i = 0; i < h->groups; i++) {
        const ckpt_group_t *t = &table[i], *m = &mine[i];
        if (memcmp(t->name, m->name, sizeof(t->name)) != 0 || t->algo != m->algo || t->experts != m->experts ||
            t->rows != m->rows || t->cols != m->cols || t->arrays != m->arrays ||
            t->data_offset != m->data_offset || t->array_bytes != m->array_bytes) {
            weft_log_error("%s: \"%s\": group %u is \"%.*s\" [%u, %llu, %llu]; this optimizer's is \"%s\" "
                           "[%u, %llu, %llu]",
                           who, path, i, (int)sizeof(t->name), t->name, t->experts, (unsigned long long)t->rows,
                           (unsigned long long)t->cols, m->name, m->experts, (unsigned long long)m->rows,
                           (unsigned long long)m->cols);
            free(mine);
            return WEFT_ERR_INVALID_PARAM;
        }
        if (t->muon_rounding > WEFT_MUON_ROUNDING_FUSED) {
            weft_log_error("%s: \"%s\": group %u has an unknown Muon rounding %u", who, path, i, t->muon_rounding);
            free(mine);
            return WEFT_ERR_CORRUPT;
        }
    }
    free(mine);
    if (fstat(fd, &st) != 0) {
        return io_error("cannot stat", path);
    }
    if ((uint64_t)st.st_size != total) {
        weft_log_error("%s: \"%s\" is %llu bytes; its table says %llu", who, path, (unsigned long long)st.st_size,
                       (unsigned long long)total);
        return WEFT_ERR_CORRUPT;
    }
    return WEFT_OK;
}

weft_status_t weft_optim_restore(weft_optim_h opt, const char *path)
{
    ckpt_header_t h;
    ckpt_group_t *table;
    char         *chunk;
    weft_status_t status;
    int           fd, pass2 = 0;

    if (opt == NULL || path == NULL) {
        weft_log_error("weft_optim_restore: NULL optimizer or path");
        return WEFT_ERR_INVALID_PARAM;
    }
    memset(&h, 0, sizeof(h));
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return io_error("cannot open", path);
    }
    table = calloc(opt->group_count ? opt->group_count : 1, sizeof(*table));
    chunk = malloc(CKPT_CHUNK);
    if (table == NULL || chunk == NULL) {
        status = WEFT_ERR_NO_MEMORY;
        goto out;
    }
    status = restore_check(opt, path, fd, &h, table);
    /* Pass 1: every array's checksum, before anything changes. */
    for (uint32_t i = 0; status == WEFT_OK && i < h.groups; i++) {
        for (int a = 0; a < (int)table[i].arrays && status == WEFT_OK; a++) {
            sum_stream_t s = {0};
            for (uint64_t off = 0; off < table[i].array_bytes && status == WEFT_OK; off += CKPT_CHUNK) {
                const size_t n = (size_t)(table[i].array_bytes - off < CKPT_CHUNK ? table[i].array_bytes - off : CKPT_CHUNK);
                int          r = read_all(fd, chunk, n);
                if (r <= 0) {
                    status = r < 0 ? io_error("cannot read", path) : WEFT_ERR_CORRUPT;
                }
                sum_update(&s, chunk, n);
            }
            if (status == WEFT_OK && sum_final(&s) != table[i].checksum[a]) {
                weft_log_error("weft_optim_restore: \"%s\": array %d of group \"%s\" fails its checksum", path, a,
                               table[i].name);
                status = WEFT_ERR_CORRUPT;
            }
        }
    }
    /* Pass 2: into place. A failure from here on leaves the optimizer
     * part-restored, which later steps refuse. */
    if (status == WEFT_OK && h.groups > 0 && lseek(fd, (off_t)table[0].data_offset, SEEK_SET) < 0) {
        status = io_error("cannot seek in", path);
    }
    pass2 = status == WEFT_OK;
    for (uint32_t i = 0; status == WEFT_OK && i < h.groups; i++) {
        for (int a = 0; a < (int)table[i].arrays && status == WEFT_OK; a++) {
            for (uint64_t off = 0; off < table[i].array_bytes && status == WEFT_OK; off += CKPT_CHUNK) {
                const size_t n = (size_t)(table[i].array_bytes - off < CKPT_CHUNK ? table[i].array_bytes - off : CKPT_CHUNK);
                if (read_all(fd, chunk, n) <= 0) {
                    /* The file changed under us after its check. */
                    weft_log_error("weft_optim_restore: \"%s\" changed while it was read; the optimizer is left "
                                   "part-restored",
                                   path);
                    status = WEFT_ERR_IO;
                    break;
                }
                status = array_write(opt, &opt->groups[i], a, off, chunk, n);
            }
        }
        if (status == WEFT_OK) {
            optim_group_t *g = &opt->groups[i];
            g->adamw = (weft_adamw_hparams_t){.lr = table[i].lr, .beta1 = table[i].beta1, .beta2 = table[i].beta2,
                                              .eps = table[i].eps, .weight_decay = table[i].weight_decay};
            g->muon  = (weft_muon_hparams_t){.lr           = table[i].muon_lr,
                                             .momentum     = table[i].muon_momentum,
                                             .weight_decay = table[i].muon_weight_decay,
                                             .nesterov     = (int)table[i].muon_nesterov,
                                             .ns_steps     = table[i].muon_ns_steps,
                                             .scale        = (weft_muon_scale_t)table[i].muon_scale,
                                             .schedule     = (weft_muon_schedule_t)table[i].muon_schedule};
            g->muon_rounding = table[i].muon_rounding == WEFT_MUON_ROUNDING_FUSED ? WEFT_MUON_ROUNDING_FUSED
                                                                                   : WEFT_MUON_ROUNDING_EAGER;
        }
    }
    if (status == WEFT_OK) {
        opt->step   = h.step;
        opt->broken = 0;
    } else if (pass2) {
        opt->broken = 1;
    }
out:
    close(fd);
    free(table);
    free(chunk);
    return status;
}
