/*
 * One AdamW step of libweft's kernels on raw FP32 files, for
 * optim_torch.py to hold against PyTorch:
 *   adamw_files host|cuda DIR N T LR BETA1 BETA2 EPS WD
 * reads DIR/{p,m,v,g}.f32 (N floats each), writes DIR/{p,m,v}.<host|cuda>.f32.
 * Not a test by itself.
 */
#include "config.h"

#include "kernels/adamw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static int load(const char *dir, const char *name, float *out, size_t n)
{
    char  path[4096];
    FILE *f;
    int   ok;

    snprintf(path, sizeof(path), "%s/%s.f32", dir, name);
    f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return 0;
    }
    ok = fread(out, sizeof(float), n, f) == n;
    fclose(f);
    if (!ok) {
        fprintf(stderr, "%s: short file\n", path);
    }
    return ok;
}

static int save(const char *dir, const char *name, const char *mode, const float *data, size_t n)
{
    char  path[4096];
    FILE *f;
    int   ok;

    snprintf(path, sizeof(path), "%s/%s.%s.f32", dir, name, mode);
    f = fopen(path, "wb");
    if (f == NULL) {
        perror(path);
        return 0;
    }
    ok = fwrite(data, sizeof(float), n, f) == n;
    return fclose(f) == 0 && ok;
}

#ifdef HAVE_CUDA
static int on_gpu(const weft_adamw_scalars_t *s, float *arrays[4], size_t n)
{
    float *d[4];
    int    ok = 1;

    for (int i = 0; i < 4; i++) {
        if (cudaMalloc((void **)&d[i], n * sizeof(float)) != cudaSuccess ||
            cudaMemcpy(d[i], arrays[i], n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
            fprintf(stderr, "adamw_files: CUDA allocation or copy failed\n");
            return 0;
        }
    }
    ok = weft_adamw_cuda(s, d[0], d[1], d[2], d[3], WEFT_DTYPE_FP32, n, NULL) == WEFT_OK &&
         cudaDeviceSynchronize() == cudaSuccess;
    for (int i = 0; i < 3 && ok; i++) {
        ok = cudaMemcpy(arrays[i], d[i], n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess;
    }
    for (int i = 0; i < 4; i++) {
        cudaFree(d[i]);
    }
    return ok;
}
#endif

int main(int argc, char **argv)
{
    static const char   *names[4] = {"p", "m", "v", "g"};
    float               *arrays[4];
    weft_adamw_scalars_t s;
    size_t               n;
    int                  cuda, ok = 1;

    if (argc != 10 || (strcmp(argv[1], "host") != 0 && strcmp(argv[1], "cuda") != 0)) {
        fprintf(stderr, "usage: adamw_files host|cuda DIR N T LR BETA1 BETA2 EPS WD\n");
        return 2;
    }
    cuda = strcmp(argv[1], "cuda") == 0;
    n    = (size_t)strtoull(argv[3], NULL, 10);
    weft_adamw_scalars(strtod(argv[5], NULL), strtod(argv[6], NULL), strtod(argv[7], NULL), strtod(argv[8], NULL),
                       strtod(argv[9], NULL), strtoull(argv[4], NULL, 10), &s);
    for (int i = 0; i < 4; i++) {
        arrays[i] = malloc(n * sizeof(float));
        if (arrays[i] == NULL || !load(argv[2], names[i], arrays[i], n)) {
            return 1;
        }
    }
    if (cuda) {
#ifdef HAVE_CUDA
        ok = on_gpu(&s, arrays, n);
#else
        fprintf(stderr, "adamw_files: built without CUDA\n");
        return 77;
#endif
    } else {
        weft_adamw_host(&s, arrays[0], arrays[1], arrays[2], arrays[3], WEFT_DTYPE_FP32, n);
    }
    for (int i = 0; i < 3 && ok; i++) {
        ok = save(argv[2], names[i], argv[1], arrays[i], n);
    }
    for (int i = 0; i < 4; i++) {
        free(arrays[i]);
    }
    return ok ? 0 : 1;
}
