/* Which of a registry's WT tensors their W's delta can patch
 * (server/delta_pairs.h). */
#include "config.h"

#include "transport/server/delta_pairs.h"

#include <stdlib.h>

/* What pairs a W with its WT: the same layer and expert. */
typedef struct pair_key {
    int32_t            layer, expert;
    weft_tensor_role_t role;
    uint32_t           tensor;
} pair_key_t;

static int pair_key_order(const void *a, const void *b)
{
    const pair_key_t *x = a, *y = b;

    if (x->layer != y->layer) {
        return x->layer < y->layer ? -1 : 1;
    }
    if (x->expert != y->expert) {
        return x->expert < y->expert ? -1 : 1;
    }
    return x->tensor < y->tensor ? -1 : x->tensor > y->tensor;
}

/* Whether wt's bytes can be w's transposed: both dense bytes of the same
 * count, w [..., N, K] and wt [..., K, N]. */
static int transposes(const weft_tensor_info_t *w, const weft_tensor_info_t *wt)
{
    const uint32_t n = w->ndim;

    if (n < 2 || wt->ndim != n || weft_dtype_size(w->dtype) != 1 || weft_dtype_size(wt->dtype) != 1 ||
        w->bytes != wt->bytes || w->shape[n - 2] != wt->shape[n - 1] || w->shape[n - 1] != wt->shape[n - 2]) {
        return 0;
    }
    for (uint32_t d = 0; d + 2 < n; d++) {
        if (w->shape[d] != wt->shape[d]) {
            return 0;
        }
    }
    return 1;
}

weft_status_t weft_delta_pairs_find(weft_registry_h reg, const uint8_t *dense, uint32_t count, int32_t *pair,
                                    uint64_t *rows, uint64_t *cols)
{
    pair_key_t   *keys = calloc(count ? count : 1, sizeof(*keys));
    uint32_t      n = 0;
    weft_status_t status = keys != NULL ? WEFT_OK : WEFT_ERR_NO_MEMORY;

    for (uint32_t t = 0; t < count; t++) {
        pair[t] = -1;
    }
    for (uint32_t t = 0; t < count && status == WEFT_OK; t++) {
        weft_tensor_info_t info;

        status = weft_registry_tensor_info(reg, t, &info);
        if (status == WEFT_OK && dense[t] && (info.role == WEFT_ROLE_W || info.role == WEFT_ROLE_WT)) {
            keys[n++] = (pair_key_t){.layer = info.layer, .expert = info.expert, .role = info.role, .tensor = t};
        }
    }
    qsort(keys, n, sizeof(*keys), pair_key_order);
    for (uint32_t i = 0, end; i < n && status == WEFT_OK; i = end) {
        uint32_t           ws = 0, wts = 0, w = 0, wt = 0;
        weft_tensor_info_t wi, wti;

        for (end = i; end < n && keys[end].layer == keys[i].layer && keys[end].expert == keys[i].expert; end++) {
            if (keys[end].role == WEFT_ROLE_W) {
                ws++, w = keys[end].tensor;
            } else {
                wts++, wt = keys[end].tensor;
            }
        }
        if (ws != 1 || wts != 1 || w > wt) {
            continue;
        }
        status = weft_registry_tensor_info(reg, w, &wi);
        if (status == WEFT_OK) {
            status = weft_registry_tensor_info(reg, wt, &wti);
        }
        if (status == WEFT_OK && transposes(&wi, &wti)) {
            pair[wt] = (int32_t)w;
            rows[wt] = wi.shape[wi.ndim - 2];
            cols[wt] = wi.shape[wi.ndim - 1];
        }
    }
    free(keys);
    return status;
}
