/*
 * What the host and CUDA FP8 writers share besides the arithmetic of
 * fp8.h: the checking of their arguments, so that both accept and refuse
 * the same calls with the same log lines. Internal.
 */
#ifndef WEFT_KERNELS_QUANT_INTERNAL_H
#define WEFT_KERNELS_QUANT_INTERNAL_H

#include <weft/quant.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_QUANT_BLOCK_DEFAULT 128u
#define WEFT_QUANT_BLOCK_MAX     1024u

/* A call's parameters with the defaults filled in. */
typedef struct weft_quant_config {
    uint32_t block;
    int      ue8m0;
    int      write_wt;
    int      reference; /* WEFT_QUANT_FORMULA_REFERENCE */
} weft_quant_config_t;

/*
 * Checks every argument of weft_quant_host/_cuda (`who` names the call in
 * the log line of a refusal) and fills *config. Pointers are only checked
 * for NULL. WEFT_ERR_INVALID_PARAM, logged, on the first bad argument.
 */
weft_status_t weft_quant_check(const char *who, const weft_quant_params_t *params, weft_dtype_t x_dtype,
                               uint64_t rows, uint64_t cols, const weft_quant_matrix_t *matrices,
                               size_t count, weft_quant_config_t *config);

/* The same for weft_dequant_host/_cuda. */
weft_status_t weft_dequant_check(const char *who, uint32_t block, uint64_t rows, uint64_t cols,
                                 const uint8_t *w, const float *scale_inv, const float *out);

#ifdef __cplusplus
}
#endif

#endif
