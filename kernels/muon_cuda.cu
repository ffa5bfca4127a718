/*
 * Muon on the GPU, a group's matrices in one batch:
 *   1. momentum, update direction u, X = bf16(u) (transposed so that X is
 *      wide), and each matrix's sum of squares in per-block partial sums;
 *   2. each matrix's norm from its partials, in a fixed order (the same
 *      bits every run), and X /= (norm + 1e-7);
 *   3. ns_steps × (A = X·Xᵀ; B = b·A + c·A·A; X = a·X + B·X): batched
 *      BF16 GEMMs on tensor cores, FP32 accumulation (cuBLAS); A is
 *      symmetric, so only its blocks on and below the diagonal are
 *      multiplied (gram_blocks) and a tiled kernel mirrors them while it
 *      forms c·A, which costs no more memory traffic than forming c·A;
 *      each product and scaled term rounded to BF16 where the reference
 *      Muon (eager PyTorch) rounds it: b·A, c·A, (c·A)·A, their sum, a·X,
 *      B·X and that sum. A shorter chain (the sums in GEMM epilogues) is
 *      as accurate but lands ~2.5 % (relative Frobenius) from the
 *      reference's own BF16 result; this one stays close to it;
 *   4. θ = θ·decay − lr·scale·X, X read back in θ's layout.
 * Row-major matrices are handed to column-major cuBLAS as their
 * transposes: row-major C = P·Q is column-major Cᵀ = Qᵀ·Pᵀ.
 */
#include "config.h"

#include "muon.h"
#include "muon_math.h"

#include "common/cuda_util.h"
#include "common/log.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kPartials = 64; /* blocks a matrix in the first kernel */

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

/* The Gram products of one batch: for each parity of the X ping-pong
 * (X in x or in xn), the cuBLAS pointer arrays of every block pair. */
constexpr int kGramBlocksMax = 4;
constexpr int kGramPairsMax  = kGramBlocksMax * (kGramBlocksMax + 1) / 2;

struct Work {
    __nv_bfloat16 *x, *xn, *a, *b, *p;
    float         *partial, *norm;
    const void   **gram_q[2], **gram_p[2];
    void         **gram_c;
};

size_t gram_pointer_bytes(uint64_t count) { return align256(count * kGramPairsMax * sizeof(void *)); }

Work carve(void *base, uint64_t m, uint64_t n, uint64_t count)
{
    char *p = static_cast<char *>(base);
    Work  w;
    for (int parity = 0; parity < 2; parity++) {
        w.gram_q[parity] = reinterpret_cast<const void **>(p);
        p += gram_pointer_bytes(count);
        w.gram_p[parity] = reinterpret_cast<const void **>(p);
        p += gram_pointer_bytes(count);
    }
    w.gram_c = reinterpret_cast<void **>(p);
    p += gram_pointer_bytes(count);
    w.x = reinterpret_cast<__nv_bfloat16 *>(p);
    p += align256(count * m * n * 2);
    w.xn = reinterpret_cast<__nv_bfloat16 *>(p);
    p += align256(count * m * n * 2);
    w.a = reinterpret_cast<__nv_bfloat16 *>(p);
    p += align256(count * m * m * 2);
    w.b = reinterpret_cast<__nv_bfloat16 *>(p);
    p += align256(count * m * m * 2);
    w.p = reinterpret_cast<__nv_bfloat16 *>(p);
    p += align256(count * m * m * 2);
    w.partial = reinterpret_cast<float *>(p);
    p += align256(count * kPartials * sizeof(float));
    w.norm = reinterpret_cast<float *>(p);
    return w;
}

__device__ __forceinline__ float grad_at(const float *g, size_t i) { return g[i]; }
__device__ __forceinline__ float grad_at(const uint16_t *g, size_t i) { return weft_bf16_to_float(g[i]); }

/* Grid (kPartials, count). Element i of matrix e is row i / cols, column
 * i % cols of θ's layout; X holds it at [c][r] when transposed. */
template <typename G>
__global__ void momentum_kernel(weft_muon_scalars_t s, float *momentum, const G *grad, __nv_bfloat16 *x,
                                float *partial, uint64_t rows, uint64_t cols, int transposed)
{
    __shared__ float sums[kThreads];
    const uint64_t   e = blockIdx.y, n = rows * cols;
    float           *m = momentum + e * n;
    const G         *g = grad + e * n;
    __nv_bfloat16   *xe = x + e * n;
    float            sum = 0.0f;

    for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
        const float         u = weft_muon_momentum_element(&s, &m[i], grad_at(g, i));
        const __nv_bfloat16 b = __float2bfloat16_rn(u);
        const float         bf = __bfloat162float(b);
        const uint64_t      r = i / cols, c = i % cols;
        xe[transposed ? c * rows + r : i] = b;
        sum = __fmaf_rn(bf, bf, sum);
    }
    sums[threadIdx.x] = sum;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            sums[threadIdx.x] = __fadd_rn(sums[threadIdx.x], sums[threadIdx.x + half]);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        partial[e * kPartials + blockIdx.x] = sums[0];
    }
}

/* One block a matrix: its norm from the partials, then X /= norm + 1e-7,
 * the norm and the sum rounded to BF16 as the reference's tensors are. */
__global__ void normalize_kernel(__nv_bfloat16 *x, const float *partial, float *norm, uint64_t n)
{
    __shared__ float denom;
    const uint64_t   e = blockIdx.x;
    __nv_bfloat16   *xe = x + e * n;

    if (threadIdx.x == 0) {
        float sum = 0.0f;
        for (int i = 0; i < kPartials; i++) {
            sum = __fadd_rn(sum, partial[e * kPartials + i]);
        }
        norm[e] = __bfloat162float(__float2bfloat16_rn(__fsqrt_rn(sum)));
        denom   = __bfloat162float(__float2bfloat16_rn(__fadd_rn(norm[e], 1e-7f)));
    }
    __syncthreads();
    for (uint64_t i = threadIdx.x; i < n; i += blockDim.x) {
        xe[i] = __float2bfloat16_rn(__fdiv_rn(__bfloat162float(xe[i]), denom));
    }
}

__device__ __forceinline__ float bf(const __nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ __nv_bfloat16 to_bf(float v) { return __float2bfloat16_rn(v); }

/* out = bf16(k·in), n elements. */
__global__ void scale_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *in, float k, uint64_t n)
{
    for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
        out[i] = to_bf(__fmul_rn(bf(in[i]), k));
    }
}

/* out = bf16(bf16(k·in) + add), n elements (out may be add). */
__global__ void scale_add_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *in, float k, const __nv_bfloat16 *add,
                                 uint64_t n)
{
    for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
        out[i] = to_bf(__fadd_rn(bf(to_bf(__fmul_rn(bf(in[i]), k))), bf(add[i])));
    }
}

/*
 * The lower blocks of A = X·Xᵀ, T × T blocks of bs = m / T rows: pair
 * (i, j), i ≥ j, of matrix e is C_ij = X_i·X_jᵀ, X_i the bs rows of X from
 * i·bs. One thread a (matrix, pair) fills the cuBLAS pointer arrays for
 * both X buffers (q: X_j, p: X_i, c: C_ij inside A).
 */
__global__ void gram_pointers_kernel(const void **q0, const void **p0, const void **q1, const void **p1, void **c,
                                     const __nv_bfloat16 *x0, const __nv_bfloat16 *x1, __nv_bfloat16 *a,
                                     uint64_t count, uint64_t m, uint64_t n, int blocks)
{
    const int      pairs = blocks * (blocks + 1) / 2;
    const uint64_t k = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
    const uint64_t bs = m / static_cast<uint64_t>(blocks);

    if (k >= count * static_cast<uint64_t>(pairs)) {
        return;
    }
    const uint64_t e = k / static_cast<uint64_t>(pairs);
    int            pair = static_cast<int>(k % static_cast<uint64_t>(pairs)), i = 0;
    while (pair > i) { /* pairs in order (0,0) (1,0) (1,1) (2,0) … */
        pair -= i + 1;
        i++;
    }
    const int      j = pair;
    const uint64_t xi = e * m * n + static_cast<uint64_t>(i) * bs * n, xj = e * m * n + static_cast<uint64_t>(j) * bs * n;
    q0[k] = x0 + xj;
    p0[k] = x0 + xi;
    q1[k] = x1 + xj;
    p1[k] = x1 + xi;
    c[k]  = a + e * m * m + static_cast<uint64_t>(i) * bs * m + static_cast<uint64_t>(j) * bs;
}

/*
 * After the lower blocks of A: A's blocks above the diagonal mirrored
 * from below, and out = bf16(k·A) everywhere. 32 × 32 tiles (bs is a
 * multiple of 32, so a tile is wholly above or not); grid (m/32, m/32,
 * count), 32 × 8 threads. Tiles above read only tiles below and write
 * only themselves: no tile is both read and written.
 */
__global__ void gram_mirror_scale_kernel(__nv_bfloat16 *a, __nv_bfloat16 *out, float k, uint64_t m, uint64_t bs)
{
    __shared__ __nv_bfloat16 tile[32][33];
    const uint64_t           e = blockIdx.z, row0 = blockIdx.y * 32ull, col0 = blockIdx.x * 32ull;
    __nv_bfloat16           *ae = a + e * m * m, *oe = out + e * m * m;
    const bool               above = row0 / bs < col0 / bs;

    if (above) {
        for (int r = threadIdx.y; r < 32; r += blockDim.y) { /* tile (col0, row0), rows of it */
            tile[r][threadIdx.x] = ae[(col0 + r) * m + row0 + threadIdx.x];
        }
        __syncthreads();
    }
    for (int r = threadIdx.y; r < 32; r += blockDim.y) {
        const uint64_t      at = (row0 + r) * m + col0 + threadIdx.x;
        const __nv_bfloat16 v = above ? tile[threadIdx.x][r] : ae[at];
        if (above) {
            ae[at] = v;
        }
        oe[at] = to_bf(__fmul_rn(bf(v), k));
    }
}

unsigned blocks_for(uint64_t n)
{
    const uint64_t want = n / kThreads + 1;
    return static_cast<unsigned>(want < 132 * 16 ? want : 132 * 16);
}

__global__ void apply_kernel(weft_muon_scalars_t s, float *param, const __nv_bfloat16 *x, uint64_t rows,
                             uint64_t cols, uint64_t count, int transposed)
{
    const uint64_t n = rows * cols, total = n * count;

    for (uint64_t k = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; k < total;
         k += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
        const uint64_t e = k / n, i = k % n, r = i / cols, c = i % cols;
        const float    xv = __bfloat162float(x[e * n + (transposed ? c * rows + r : i)]);
        param[k] = weft_muon_apply_element(&s, param[k], xv);
    }
}

weft_status_t blas_check(cublasStatus_t st, const char *what)
{
    if (st == CUBLAS_STATUS_SUCCESS) {
        return WEFT_OK;
    }
    weft_log_error("%s failed: cuBLAS status %d", what, static_cast<int>(st));
    return st == CUBLAS_STATUS_ALLOC_FAILED ? WEFT_ERR_NO_MEMORY : WEFT_ERR_CUDA;
}

/* Row-major C[count] (rows_c × cols_c) = α·P·Q + β·C, P and Q row-major,
 * each given as (pointer, transposed?, its row-major leading dimension). */
weft_status_t gemm(cublasHandle_t h, int count, int rows_c, int cols_c, int inner, float alpha,
                   const __nv_bfloat16 *p, bool p_t, int ldp, long long sp, const __nv_bfloat16 *q, bool q_t,
                   int ldq, long long sq, float beta, __nv_bfloat16 *c, long long sc)
{
    /* Column-major: Cᵀ = Qᵀ·Pᵀ; a row-major operand is its own transpose
     * seen column-major, so "transposed" flips the op. */
    return blas_check(cublasGemmStridedBatchedEx(h, q_t ? CUBLAS_OP_T : CUBLAS_OP_N, p_t ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                 cols_c, rows_c, inner, &alpha, q, CUDA_R_16BF, ldq, sq, p,
                                                 CUDA_R_16BF, ldp, sp, &beta, c, CUDA_R_16BF, cols_c, sc, count,
                                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                      "cublasGemmStridedBatchedEx");
}

/* Row-major C_ij = X_i·X_jᵀ of every pair of the batch (pointer arrays). */
weft_status_t gram_lower(cublasHandle_t h, const void **q, const void **p, void **c, int batch, int bs, int n, int m)
{
    const float one = 1.0f, zero = 0.0f;
    return blas_check(cublasGemmBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, bs, bs, n, &one, q, CUDA_R_16BF, n, p,
                                          CUDA_R_16BF, n, &zero, c, CUDA_R_16BF, m, batch, CUBLAS_COMPUTE_32F,
                                          CUBLAS_GEMM_DEFAULT),
                      "cublasGemmBatchedEx");
}

} // namespace

extern "C" int weft_muon_gram_blocks(uint64_t m)
{
    /* Blocks of at least 256 rows keep each GEMM large enough to run at
     * the tensor cores' rate; a multiple of 64 keeps tiles whole. */
    for (int t = kGramBlocksMax; t > 1; t--) {
        const uint64_t bs = m / static_cast<uint64_t>(t);
        if (m % static_cast<uint64_t>(t) == 0 && bs % 64 == 0 && bs >= 256) {
            return t;
        }
    }
    return 1;
}

extern "C" size_t weft_muon_cuda_work_bytes(uint64_t rows, uint64_t cols, uint64_t count)
{
    const uint64_t m = rows < cols ? rows : cols, n = rows < cols ? cols : rows;
    return 5 * gram_pointer_bytes(count) + 2 * align256(count * m * n * 2) + 3 * align256(count * m * m * 2) +
           align256(count * kPartials * sizeof(float)) + align256(count * sizeof(float));
}

extern "C" weft_status_t weft_muon_blas_create(void **blas)
{
    cublasHandle_t h = nullptr;
    weft_status_t  status = blas_check(cublasCreate(&h), "cublasCreate");
    if (status == WEFT_OK) {
        *blas = h;
    }
    return status;
}

extern "C" void weft_muon_blas_destroy(void *blas)
{
    if (blas != nullptr) {
        cublasDestroy(static_cast<cublasHandle_t>(blas));
    }
}

extern "C" weft_status_t weft_muon_cuda_step(const weft_muon_scalars_t *s, int schedule, uint32_t steps,
                                             float *param, float *momentum, const void *grad,
                                             weft_dtype_t grad_dtype, uint64_t rows, uint64_t cols, uint64_t count,
                                             int gram_blocks, void *work, void *blas, void *stream)
{
    cudaStream_t   st = static_cast<cudaStream_t>(stream);
    cublasHandle_t h = static_cast<cublasHandle_t>(blas);
    const int      transposed = rows > cols;
    const uint64_t m = transposed ? cols : rows, n = transposed ? rows : cols;
    const Work     w = carve(work, m, n, count);
    const dim3     grid(kPartials, static_cast<unsigned>(count));
    const int      blocks = gram_blocks > 0 ? gram_blocks : weft_muon_gram_blocks(m);
    const int      pairs = blocks * (blocks + 1) / 2;
    weft_status_t  status;
    __nv_bfloat16 *x = w.x, *xn = w.xn;

    if (blocks > kGramBlocksMax || m % static_cast<uint64_t>(blocks) != 0 || (m / blocks) % 32 != 0) {
        weft_log_error("weft_muon_cuda_step: %d Gram blocks do not split %llu rows in whole 32-row tiles", blocks,
                       static_cast<unsigned long long>(m));
        return WEFT_ERR_INVALID_PARAM;
    }

    if (count == 0) {
        return WEFT_OK;
    }
    if (grad_dtype == WEFT_DTYPE_BF16) {
        momentum_kernel<uint16_t><<<grid, kThreads, 0, st>>>(*s, momentum, static_cast<const uint16_t *>(grad), x,
                                                             w.partial, rows, cols, transposed);
    } else {
        momentum_kernel<float><<<grid, kThreads, 0, st>>>(*s, momentum, static_cast<const float *>(grad), x,
                                                          w.partial, rows, cols, transposed);
    }
    normalize_kernel<<<static_cast<unsigned>(count), 1024, 0, st>>>(x, w.partial, w.norm, m * n);
    if (blocks > 1) {
        const uint64_t jobs = count * static_cast<uint64_t>(pairs);
        gram_pointers_kernel<<<static_cast<unsigned>((jobs + 127) / 128), 128, 0, st>>>(
            w.gram_q[0], w.gram_p[0], w.gram_q[1], w.gram_p[1], w.gram_c, w.x, w.xn, w.a, count, m, n, blocks);
    }
    status = WEFT_CUDA_CHECK(cudaGetLastError());
    if (status == WEFT_OK) {
        status = blas_check(cublasSetStream(h, st), "cublasSetStream");
    }
    for (uint32_t step = 0; step < steps && status == WEFT_OK; step++) {
        float abc[3];
        weft_muon_coefficients(schedule, step, abc);
        const uint64_t mm = count * m * m, mn = count * m * n;
        /* A = X·Xᵀ, and bf16(c·A) into b */
        if (blocks == 1) {
            status = gemm(h, (int)count, (int)m, (int)m, (int)n, 1.0f, x, false, (int)n, (long long)(m * n), x,
                          true, (int)n, (long long)(m * n), 0.0f, w.a, (long long)(m * m));
            if (status == WEFT_OK) {
                scale_kernel<<<blocks_for(mm), kThreads, 0, st>>>(w.b, w.a, abc[2], mm);
                status = WEFT_CUDA_CHECK(cudaGetLastError());
            }
        } else {
            const int parity = x == w.x ? 0 : 1;
            status = gram_lower(h, w.gram_q[parity], w.gram_p[parity], w.gram_c, (int)(count * pairs),
                                (int)(m / blocks), (int)n, (int)m);
            if (status == WEFT_OK) {
                const dim3 tiles(static_cast<unsigned>(m / 32), static_cast<unsigned>(m / 32),
                                 static_cast<unsigned>(count));
                gram_mirror_scale_kernel<<<tiles, dim3(32, 8), 0, st>>>(w.a, w.b, abc[2], m, m / blocks);
                status = WEFT_CUDA_CHECK(cudaGetLastError());
            }
        }
        /* B = bf16(b·A) + (bf16(c·A))·A */
        if (status == WEFT_OK) {
            status = gemm(h, (int)count, (int)m, (int)m, (int)m, 1.0f, w.b, false, (int)m, (long long)(m * m), w.a,
                          false, (int)m, (long long)(m * m), 0.0f, w.p, (long long)(m * m));
        }
        if (status == WEFT_OK) {
            scale_add_kernel<<<blocks_for(mm), kThreads, 0, st>>>(w.b, w.a, abc[1], w.p, mm);
            status = WEFT_CUDA_CHECK(cudaGetLastError());
        }
        /* X' = bf16(a·X) + B·X */
        if (status == WEFT_OK) {
            status = gemm(h, (int)count, (int)m, (int)n, (int)m, 1.0f, w.b, false, (int)m, (long long)(m * m), x,
                          false, (int)n, (long long)(m * n), 0.0f, xn, (long long)(m * n));
        }
        if (status == WEFT_OK) {
            scale_add_kernel<<<blocks_for(mn), kThreads, 0, st>>>(xn, x, abc[0], xn, mn);
            status = WEFT_CUDA_CHECK(cudaGetLastError());
        }
        __nv_bfloat16 *t = x;
        x = xn;
        xn = t;
    }
    if (status == WEFT_OK) {
        const uint64_t total = rows * cols * count;
        const unsigned blocks = static_cast<unsigned>(total / kThreads + 1 < 132 * 16 ? total / kThreads + 1 : 132 * 16);
        apply_kernel<<<blocks, kThreads, 0, st>>>(*s, param, x, rows, cols, count, transposed);
        status = WEFT_CUDA_CHECK(cudaGetLastError());
    }
    return status;
}
