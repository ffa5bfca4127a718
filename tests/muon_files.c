/*
 * One Muon step of libweft's CUDA path on raw FP32 files, for
 * optim_torch.py to hold against PyTorch's reference Muon:
 *   muon_files DIR E ROWS COLS LR MOMENTUM WD NESTEROV NS_STEPS
 * reads DIR/{p,m,g}.f32 (E × ROWS × COLS floats each) and writes
 * DIR/{p,m}.batched.f32 (every matrix in one batch), DIR/p.single.f32
 * (one matrix at a time), DIR/p.full.f32 (in one batch, X·Xᵀ
 * multiplied whole instead of its lower blocks) and DIR/p.fused.f32 (in
 * one batch, WEFT_MUON_ROUNDING_FUSED). Not a test by itself.
 */
#include "config.h"

#include "kernels/muon.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#ifdef HAVE_CUDA
static int file_io(const char *dir, const char *name, float *data, size_t n, int write)
{
    char  path[4096];
    FILE *f;
    int   ok;

    snprintf(path, sizeof(path), "%s/%s.f32", dir, name);
    f = fopen(path, write ? "wb" : "rb");
    if (f == NULL) {
        perror(path);
        return 0;
    }
    ok = (write ? fwrite(data, sizeof(float), n, f) : fread(data, sizeof(float), n, f)) == n;
    return fclose(f) == 0 && ok;
}
#endif

int main(int argc, char **argv)
{
#ifndef HAVE_CUDA
    (void)argc;
    (void)argv;
    fprintf(stderr, "muon_files: built without CUDA\n");
    return 77;
#else
    uint64_t            E, rows, cols, n;
    double              lr, beta, wd;
    int                 nesterov, steps;
    weft_muon_scalars_t s;
    float              *p, *m, *g, *dp, *dm, *dg;
    void               *work, *blas;
    int                 ok;

    if (argc != 10) {
        fprintf(stderr, "usage: muon_files DIR E ROWS COLS LR MOMENTUM WD NESTEROV NS_STEPS\n");
        return 2;
    }
    E        = strtoull(argv[2], NULL, 10);
    rows     = strtoull(argv[3], NULL, 10);
    cols     = strtoull(argv[4], NULL, 10);
    lr       = strtod(argv[5], NULL);
    beta     = strtod(argv[6], NULL);
    wd       = strtod(argv[7], NULL);
    nesterov = atoi(argv[8]);
    steps    = atoi(argv[9]);
    n        = rows * cols;
    weft_muon_scalars(lr, beta, wd, nesterov, sqrt(rows > cols ? (double)rows / (double)cols : 1.0), &s);
    p = malloc(E * n * 4);
    m = malloc(E * n * 4);
    g = malloc(E * n * 4);
    ok = p && m && g && file_io(argv[1], "p", p, E * n, 0) && file_io(argv[1], "m", m, E * n, 0) &&
         file_io(argv[1], "g", g, E * n, 0) && cudaMalloc((void **)&dp, E * n * 4) == cudaSuccess &&
         cudaMalloc((void **)&dm, E * n * 4) == cudaSuccess && cudaMalloc((void **)&dg, E * n * 4) == cudaSuccess &&
         cudaMalloc(&work, weft_muon_cuda_work_bytes(rows, cols, E)) == cudaSuccess &&
         weft_muon_blas_create(&blas) == WEFT_OK;
    /* Batched, one at a time, batched with the whole Gram product, batched
     * with the sums rounded in the GEMMs; each from the same inputs. */
    for (int pass = 0; pass < 4 && ok; pass++) {
        static const char *const out_name[4] = {"p.batched", "p.single", "p.full", "p.fused"};
        const int rounding = pass == 3 ? WEFT_MUON_ROUNDING_FUSED : WEFT_MUON_ROUNDING_EAGER;
        ok = cudaMemcpy(dp, p, E * n * 4, cudaMemcpyHostToDevice) == cudaSuccess &&
             cudaMemcpy(dm, m, E * n * 4, cudaMemcpyHostToDevice) == cudaSuccess &&
             cudaMemcpy(dg, g, E * n * 4, cudaMemcpyHostToDevice) == cudaSuccess;
        for (uint64_t e = 0; e < (pass == 1 ? E : 1) && ok; e++) {
            const uint64_t off = pass == 1 ? e * n : 0, count = pass == 1 ? 1 : E;
            ok = weft_muon_cuda_step(&s, WEFT_MUON_NS_SIMPLE, rounding, (uint32_t)steps, dp + off, dm + off,
                                     dg + off, WEFT_DTYPE_FP32, rows, cols, count, pass == 2 ? 1 : 0, work, blas,
                                     NULL) == WEFT_OK;
        }
        if (ok) {
            float *out = malloc(E * n * 4);
            ok = out != NULL && cudaDeviceSynchronize() == cudaSuccess &&
                 cudaMemcpy(out, dp, E * n * 4, cudaMemcpyDeviceToHost) == cudaSuccess &&
                 file_io(argv[1], out_name[pass], out, E * n, 1);
            if (ok && pass == 0) {
                ok = cudaMemcpy(out, dm, E * n * 4, cudaMemcpyDeviceToHost) == cudaSuccess &&
                     file_io(argv[1], "m.batched", out, E * n, 1);
            }
            free(out);
        }
    }
    if (!ok) {
        fprintf(stderr, "muon_files: failed\n");
    }
    return ok ? 0 : 1;
#endif
}
