/*
 * libweft's FP8 writer on a raw file, for quant_torch.py to hold against
 * PyTorch's evaluation of the same formula:
 *   quant_files host|cuda DIR fp32|bf16 ROWS COLS exact|reference
 * reads DIR/x.bin (ROWS × COLS elements of the dtype, row-major), writes
 * DIR/{w,wt,s}.<host|cuda>.bin (W, WT, scale_inv with block 128).
 * Not a test by itself.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <weft/weft.h>
#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static void *load(const char *dir, size_t bytes)
{
    char  path[4096];
    void *data = malloc(bytes ? bytes : 1);
    FILE *f;

    snprintf(path, sizeof(path), "%s/x.bin", dir);
    f = fopen(path, "rb");
    if (f == NULL || data == NULL || fread(data, 1, bytes, f) != bytes) {
        fprintf(stderr, "quant_files: cannot read %zu bytes of %s\n", bytes, path);
        if (f != NULL) {
            fclose(f);
        }
        free(data);
        return NULL;
    }
    fclose(f);
    return data;
}

static int save(const char *dir, const char *name, const char *mode, const void *data, size_t bytes)
{
    char  path[4096];
    FILE *f;
    int   ok;

    snprintf(path, sizeof(path), "%s/%s.%s.bin", dir, name, mode);
    f = fopen(path, "wb");
    if (f == NULL) {
        perror(path);
        return 0;
    }
    ok = fwrite(data, 1, bytes, f) == bytes;
    return fclose(f) == 0 && ok;
}

#ifdef HAVE_CUDA
/* The same call on the GPU; out[] gets the results back. */
static int on_gpu(const weft_quant_params_t *p, weft_dtype_t dtype, uint64_t rows, uint64_t cols, const void *x,
                  size_t x_bytes, void *out[3], const size_t bytes[3])
{
    void               *dx = NULL, *d[3] = {NULL, NULL, NULL};
    weft_quant_matrix_t m;
    int                 ok = cudaMalloc(&dx, x_bytes) == cudaSuccess &&
                             cudaMemcpy(dx, x, x_bytes, cudaMemcpyHostToDevice) == cudaSuccess;

    for (int i = 0; i < 3 && ok; i++) {
        ok = cudaMalloc(&d[i], bytes[i]) == cudaSuccess && cudaMemset(d[i], 0xAB, bytes[i]) == cudaSuccess;
    }
    m = (weft_quant_matrix_t){.x = dx, .w = d[0], .wt = d[1], .scale_inv = d[2]};
    ok = ok && weft_quant_cuda(p, dtype, rows, cols, &m, 1, NULL) == WEFT_OK &&
         cudaDeviceSynchronize() == cudaSuccess;
    for (int i = 0; i < 3 && ok; i++) {
        ok = cudaMemcpy(out[i], d[i], bytes[i], cudaMemcpyDeviceToHost) == cudaSuccess;
    }
    if (!ok) {
        fprintf(stderr, "quant_files: the CUDA writer failed\n");
    }
    cudaFree(dx);
    for (int i = 0; i < 3; i++) {
        cudaFree(d[i]);
    }
    return ok;
}
#endif

int main(int argc, char **argv)
{
    static const char  *names[3] = {"w", "wt", "s"};
    weft_quant_params_t p = {.field_mask = WEFT_QUANT_FIELD_FORMULA};
    weft_dtype_t        dtype;
    uint64_t            rows, cols;
    size_t              x_bytes, bytes[3];
    void               *x, *out[3];
    int                 ok = 1;

    if (argc != 7 || (strcmp(argv[1], "host") != 0 && strcmp(argv[1], "cuda") != 0) ||
        (strcmp(argv[3], "fp32") != 0 && strcmp(argv[3], "bf16") != 0) ||
        weft_quant_formula_parse(argv[6], &p.formula) != WEFT_OK) {
        fprintf(stderr, "usage: quant_files host|cuda DIR fp32|bf16 ROWS COLS exact|reference\n");
        return 2;
    }
    dtype = strcmp(argv[3], "fp32") == 0 ? WEFT_DTYPE_FP32 : WEFT_DTYPE_BF16;
    rows = strtoull(argv[4], NULL, 10);
    cols = strtoull(argv[5], NULL, 10);
    x_bytes = (size_t)(rows * cols) * (dtype == WEFT_DTYPE_FP32 ? 4 : 2);
    bytes[0] = bytes[1] = (size_t)(rows * cols);
    bytes[2] = (size_t)(((rows + 127) / 128) * ((cols + 127) / 128)) * sizeof(float);
    x = load(argv[2], x_bytes);
    for (int i = 0; i < 3; i++) {
        out[i] = malloc(bytes[i]);
        ok &= out[i] != NULL;
    }
    if (x == NULL || !ok) {
        return 1;
    }
    if (strcmp(argv[1], "cuda") == 0) {
#ifdef HAVE_CUDA
        ok = on_gpu(&p, dtype, rows, cols, x, x_bytes, out, bytes);
#else
        fprintf(stderr, "quant_files: built without CUDA\n");
        return 77;
#endif
    } else {
        weft_quant_matrix_t m = {.x = x, .w = out[0], .wt = out[1], .scale_inv = out[2]};
        ok = weft_quant_host(&p, dtype, rows, cols, &m, 1) == WEFT_OK;
    }
    for (int i = 0; i < 3 && ok; i++) {
        ok = save(argv[2], names[i], argv[1], out[i], bytes[i]);
    }
    for (int i = 0; i < 3; i++) {
        free(out[i]);
    }
    free(x);
    return ok ? 0 : 1;
}
