/*
 * Muon on the GPU, a group's matrices in one batch:
 *   1. momentum, update direction u, X = bf16(u) (transposed so that X is
 *      wide), and each matrix's sum of squares in per-block partial sums;
 *   2. each matrix's norm from its partials, in a fixed order (the same
 *      bits every run), and X /= (norm + 1e-7);
 *   3. ns_steps × (A = X·Xᵀ; B = b·A + c·A·A; X = a·X + B·X): batched
 *      BF16 GEMMs on tensor cores, FP32 accumulation (cuBLASLt, whose
 *      Hopper kernels run these shapes 10-20 % faster than the classic
 *      cuBLAS entry points pick; the first algorithm of its heuristic,
 *      not a timed search, so the same GPU and library give the same
 *      bits every run, which a restored checkpoint relies on); A and B
 *      are symmetric, so only their blocks on and below the diagonal are
 *      multiplied (gram_blocks row blocks, one GEMM a row block) and a
 *      tiled kernel mirrors them (for A while it forms c·A, which costs no
 *      more memory traffic than forming c·A); on 1536 rows in 4 blocks
 *      that multiplies 10 of A's 16 blocks and 10 of B's: the reference
 *      multiplies all of both;
 *      rounding EAGER: each product and scaled term rounded to BF16 where
 *      the reference Muon (eager PyTorch) rounds it: b·A, c·A, (c·A)·A,
 *      their sum, a·X, B·X and that sum, in element-wise passes between
 *      the GEMMs; rounding FUSED: b·A + c·A·A and a·X + B·X formed in
 *      FP32 in the GEMMs' epilogues (cuBLASLt's α·P·Q + β·C) and rounded
 *      once, as torch.compile's fused reference and torch.baddbmm round;
 *      no element-wise pass but A's mirror. FUSED is nearer the FP64
 *      iteration, EAGER nearer the eager reference (they land ~2 %
 *      apart, as any two BF16 roundings of five iterations do);
 *   4. θ = θ·decay − lr·scale·X, X read back in θ's layout.
 * Row-major matrices are handed to column-major cuBLAS as their
 * transposes: row-major C = P·Q is column-major Cᵀ = Qᵀ·Pᵀ.
 */
#include "config.h"

#include "muon.h"
#include "muon_math.h"

#include "common/cuda_util.h"
#include "common/log.h"

#include "kernels/blas_api.h" /* cuBLAS's headers; its functions, loaded at run time */

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <new>

namespace {

constexpr int kThreads = 256;
constexpr int kPartials = 64; /* blocks a matrix in the first kernel */

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

/* The symmetric products A = X·Xᵀ and B = c·A·A + b·A are computed in
 * up to this many row blocks, each block's row only up to the diagonal. */
constexpr int kGramBlocksMax = 4;

/* cuBLASLt's workspace, part of the step's: its faster kernels split K. */
constexpr size_t kLtWorkspaceBytes = 32u << 20;

struct Work {
    __nv_bfloat16 *x, *xn, *a, *b, *p;
    float         *partial, *norm;
    void          *lt;
};

Work carve(void *base, uint64_t m, uint64_t n, uint64_t count)
{
    char *p = static_cast<char *>(base);
    Work  w;
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
    p += align256(count * sizeof(float));
    w.lt = p;
    return w;
}

__device__ __forceinline__ float grad_at(const float *g, size_t i) { return g[i]; }
__device__ __forceinline__ float grad_at(const uint16_t *g, size_t i) { return weft_bf16_to_float(g[i]); }

/*
 * The element-wise kernels around Newton–Schulz walk θ's layout in 32 × 32
 * tiles, 32 × 8 threads a block: a warp reads 32 consecutive FP32 of a
 * row (coalesced), and X, which holds a tall matrix transposed ([c][r]),
 * is written or read through the tile in shared memory so that its rows
 * are coalesced too. Tile coordinates come once a tile, not from a 64-bit
 * division an element.
 */
constexpr int kTile = 32, kTileRows = 8; /* threads: kTile × kTileRows */

struct TileAt {
    uint64_t r0, c0; /* θ's row and column of the tile's corner */
};

__device__ __forceinline__ TileAt tile_at(uint64_t t, uint64_t cols)
{
    const uint64_t tiles_across = (cols + kTile - 1) / kTile;
    return {t / tiles_across * kTile, t % tiles_across * kTile};
}

/* Grid (kPartials, count): block b of matrix e takes tiles b, b +
 * kPartials, … and leaves its sum of squares of bf16(u) in partial[e][b],
 * summed in a fixed order (the same bits every run). */
template <typename G>
__global__ void momentum_kernel(weft_muon_scalars_t s, float *momentum, const G *grad, __nv_bfloat16 *x,
                                float *partial, uint64_t rows, uint64_t cols, int transposed)
{
    __shared__ float         sums[kTile * kTileRows];
    __shared__ __nv_bfloat16 tile[kTile][kTile + 1];
    const uint64_t           e = blockIdx.y, n = rows * cols;
    const uint64_t           tiles = (rows + kTile - 1) / kTile * ((cols + kTile - 1) / kTile);
    const int                tx = threadIdx.x, ty = threadIdx.y, me = ty * kTile + tx;
    float                   *m = momentum + e * n;
    const G                 *g = grad + e * n;
    __nv_bfloat16           *xe = x + e * n;
    float                    sum = 0.0f;

    for (uint64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const TileAt at = tile_at(t, cols);
        for (int j = ty; j < kTile; j += kTileRows) {
            const uint64_t r = at.r0 + j, c = at.c0 + tx;
            if (r < rows && c < cols) {
                const uint64_t      i = r * cols + c;
                const __nv_bfloat16 b = __float2bfloat16_rn(weft_muon_momentum_element(&s, &m[i], grad_at(g, i)));
                const float         bv = __bfloat162float(b);
                sum = __fmaf_rn(bv, bv, sum);
                if (transposed) {
                    tile[j][tx] = b;
                } else {
                    xe[i] = b;
                }
            }
        }
        if (transposed) { /* X[c][r]: the tile's columns become rows */
            __syncthreads();
            for (int j = ty; j < kTile; j += kTileRows) {
                const uint64_t c = at.c0 + j, r = at.r0 + tx;
                if (r < rows && c < cols) {
                    xe[c * rows + r] = tile[tx][j];
                }
            }
            __syncthreads();
        }
    }
    sums[me] = sum;
    __syncthreads();
    for (int half = kTile * kTileRows / 2; half > 0; half /= 2) {
        if (me < half) {
            sums[me] = __fadd_rn(sums[me], sums[me + half]);
        }
        __syncthreads();
    }
    if (me == 0) {
        partial[e * kPartials + blockIdx.x] = sums[0];
    }
}

/* The element-wise steps move 16 bytes (8 BF16) a thread a load: 2-byte
 * loads leave most of HBM's bandwidth unused. Buffers start 256-byte
 * aligned (carve); a tail of fewer than 8 elements goes one at a time. */
constexpr int kVec = 8;
union Vec8 {
    uint4         raw;
    __nv_bfloat16 h[kVec];
};

/* Grid (kNormBlocks, count): each block sums matrix e's partials in the
 * same order (the same norm bits), then X /= norm + 1e-7 over its share,
 * 8 BF16 a load; the norm and the sum rounded to BF16 as the reference's
 * tensors are. */
constexpr int kNormBlocks = 16;

__global__ void normalize_kernel(__nv_bfloat16 *x, const float *partial, float *norm, uint64_t n)
{
    __shared__ float denom;
    const uint64_t   e = blockIdx.y;
    __nv_bfloat16   *xe = x + e * n;

    if (threadIdx.x == 0) {
        float sum = 0.0f;
        for (int i = 0; i < kPartials; i++) {
            sum = __fadd_rn(sum, partial[e * kPartials + i]);
        }
        const float nv = __bfloat162float(__float2bfloat16_rn(__fsqrt_rn(sum)));
        if (blockIdx.x == 0) {
            norm[e] = nv;
        }
        denom = __bfloat162float(__float2bfloat16_rn(__fadd_rn(nv, 1e-7f)));
    }
    __syncthreads();
    /* Matrix e starts at e·n elements: 16-byte aligned when n is a
     * multiple of 8 (X's buffer is); otherwise one element at a time. */
    const uint64_t first = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
    const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
    const uint64_t vecs = n % kVec == 0 ? n / kVec : 0;
    for (uint64_t v = first; v < vecs; v += stride) {
        Vec8 a;
        a.raw = reinterpret_cast<const uint4 *>(xe)[v];
        for (int j = 0; j < kVec; j++) {
            a.h[j] = __float2bfloat16_rn(__fdiv_rn(__bfloat162float(a.h[j]), denom));
        }
        reinterpret_cast<uint4 *>(xe)[v] = a.raw;
    }
    for (uint64_t i = vecs * kVec + first; i < n; i += stride) {
        xe[i] = __float2bfloat16_rn(__fdiv_rn(__bfloat162float(xe[i]), denom));
    }
}

__device__ __forceinline__ float bf(const __nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ __nv_bfloat16 to_bf(float v) { return __float2bfloat16_rn(v); }

__device__ __forceinline__ __nv_bfloat16 scale_one(__nv_bfloat16 in, float k) { return to_bf(__fmul_rn(bf(in), k)); }
__device__ __forceinline__ __nv_bfloat16 scale_add_one(__nv_bfloat16 in, float k, __nv_bfloat16 add)
{
    return to_bf(__fadd_rn(bf(scale_one(in, k)), bf(add)));
}

/* out = bf16(k·in), n elements. */
__global__ void scale_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *in, float k, uint64_t n)
{
    const uint64_t first = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
    const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x, vecs = n / kVec;

    for (uint64_t v = first; v < vecs; v += stride) {
        Vec8 a;
        a.raw = reinterpret_cast<const uint4 *>(in)[v];
        for (int j = 0; j < kVec; j++) {
            a.h[j] = scale_one(a.h[j], k);
        }
        reinterpret_cast<uint4 *>(out)[v] = a.raw;
    }
    for (uint64_t i = vecs * kVec + first; i < n; i += stride) {
        out[i] = scale_one(in[i], k);
    }
}

/* out = bf16(bf16(k·in) + add), n elements (out may be add). */
__global__ void scale_add_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *in, float k, const __nv_bfloat16 *add,
                                 uint64_t n)
{
    const uint64_t first = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
    const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x, vecs = n / kVec;

    for (uint64_t v = first; v < vecs; v += stride) {
        Vec8 a, d;
        a.raw = reinterpret_cast<const uint4 *>(in)[v];
        d.raw = reinterpret_cast<const uint4 *>(add)[v];
        for (int j = 0; j < kVec; j++) {
            a.h[j] = scale_add_one(a.h[j], k, d.h[j]);
        }
        reinterpret_cast<uint4 *>(out)[v] = a.raw;
    }
    for (uint64_t i = vecs * kVec + first; i < n; i += stride) {
        out[i] = scale_add_one(in[i], k, add[i]);
    }
}

/*
 * After the lower blocks of a symmetric A (or B): its blocks above the
 * diagonal mirrored from below, and (out not null) out = bf16(k·A)
 * everywhere.
 *
 * 64 × 64 tiles (bs is a multiple of 64, so a tile is wholly above the
 * diagonal blocks or not), 256 threads, 16 bytes a global load and store:
 * a tile row is 128 bytes, 8 threads' worth. The grid is (tiles, count):
 * with out null only the tiles above, blocks·(blocks − 1)/2 block pairs of
 * (bs/64)² tiles (on 1536 rows in 4 blocks, 6 of 16 blocks), so no block
 * is launched to do nothing; with out, every tile. A tile above reads only
 * its mirror image below and writes only itself: no tile is both read and
 * written. The 32 × 32 version this replaces, a grid over every tile
 * moving 64 bytes a warp row, took 0.43 ms an iteration on 128 × 1536²
 * (H200), a tenth of the iteration.
 */
constexpr int kMirrorTile = 64;
constexpr int kMirrorPitch = kMirrorTile + 1; /* odd: a column read spreads over the banks */

__device__ __forceinline__ void mirror_tile_at(uint64_t t, bool all, uint64_t m, uint64_t bs, uint64_t *row0,
                                               uint64_t *col0)
{
    if (all) {
        const uint64_t across = m / kMirrorTile;
        *row0 = t / across * kMirrorTile;
        *col0 = t % across * kMirrorTile;
        return;
    }
    const uint64_t side = bs / kMirrorTile, per_pair = side * side;
    uint64_t       pair = t / per_pair, bi = 0, bj = 1;
    const uint64_t w = t % per_pair, blocks = m / bs;
    while (pair >= blocks - bj) { /* pairs above in order (0,1) … (0,T−1) (1,2) … */
        pair -= blocks - bj;
        bi++;
        bj = bi + 1;
    }
    bj += pair;
    *row0 = bi * bs + w / side * kMirrorTile;
    *col0 = bj * bs + w % side * kMirrorTile;
}

__global__ void gram_mirror_scale_kernel(__nv_bfloat16 *a, __nv_bfloat16 *out, float k, uint64_t m, uint64_t bs)
{
    __shared__ __nv_bfloat16 tile[kMirrorTile][kMirrorPitch];
    const uint64_t           e = blockIdx.y;
    __nv_bfloat16           *ae = a + e * m * m, *oe = out != nullptr ? out + e * m * m : nullptr;
    uint64_t                 row0, col0;
    const int                chunk = threadIdx.x % 8, sub = threadIdx.x / 8; /* 8 chunks of a row, 32 rows */

    mirror_tile_at(blockIdx.x, oe != nullptr, m, bs, &row0, &col0);
    const bool above = row0 / bs < col0 / bs;
    if (!above) { /* on or below the diagonal (out only): scaled where it is */
        for (int r = sub; r < kMirrorTile; r += 32) {
            const uint64_t at = (row0 + r) * m + col0 + chunk * 8;
            Vec8           v;
            v.raw = *reinterpret_cast<const uint4 *>(ae + at);
            for (int j = 0; j < 8; j++) {
                v.h[j] = to_bf(__fmul_rn(bf(v.h[j]), k));
            }
            *reinterpret_cast<uint4 *>(oe + at) = v.raw;
        }
        return;
    }
    for (int r = sub; r < kMirrorTile; r += 32) { /* the mirror image, rows col0…, columns row0… */
        Vec8 v;
        v.raw = *reinterpret_cast<const uint4 *>(ae + (col0 + r) * m + row0 + chunk * 8);
        for (int j = 0; j < 8; j++) {
            tile[r][chunk * 8 + j] = v.h[j];
        }
    }
    __syncthreads();
    for (int r = sub; r < kMirrorTile; r += 32) {
        const uint64_t at = (row0 + r) * m + col0 + chunk * 8;
        Vec8           v, scaled;
        for (int j = 0; j < 8; j++) {
            v.h[j] = tile[chunk * 8 + j][r];
            scaled.h[j] = to_bf(__fmul_rn(bf(v.h[j]), k));
        }
        *reinterpret_cast<uint4 *>(ae + at) = v.raw;
        if (oe != nullptr) {
            *reinterpret_cast<uint4 *>(oe + at) = scaled.raw;
        }
    }
}

/* gram_mirror_scale_kernel's grid: the tiles it visits, by count. */
dim3 gram_mirror_grid(uint64_t m, uint64_t bs, uint64_t count, bool all)
{
    const uint64_t side = m / kMirrorTile, blocks = m / bs, pair_side = bs / kMirrorTile;
    const uint64_t tiles = all ? side * side : blocks * (blocks - 1) / 2 * pair_side * pair_side;
    return dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(count));
}

unsigned blocks_for(uint64_t n)
{
    const uint64_t want = n / kThreads + 1;
    return static_cast<unsigned>(want < 132 * 16 ? want : 132 * 16);
}

/* Grid (tile blocks, count): θ = θ·decay − lr·scale·X, X read back in
 * θ's layout through the tile when it holds the matrix transposed. */
__global__ void apply_kernel(weft_muon_scalars_t s, float *param, const __nv_bfloat16 *x, uint64_t rows,
                             uint64_t cols, int transposed)
{
    __shared__ __nv_bfloat16 tile[kTile][kTile + 1];
    const uint64_t           e = blockIdx.y, n = rows * cols;
    const uint64_t           tiles = (rows + kTile - 1) / kTile * ((cols + kTile - 1) / kTile);
    const int                tx = threadIdx.x, ty = threadIdx.y;
    float                   *p = param + e * n;
    const __nv_bfloat16     *xe = x + e * n;

    for (uint64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const TileAt at = tile_at(t, cols);
        if (transposed) {
            for (int j = ty; j < kTile; j += kTileRows) {
                const uint64_t c = at.c0 + j, r = at.r0 + tx;
                if (r < rows && c < cols) {
                    tile[j][tx] = xe[c * rows + r];
                }
            }
            __syncthreads();
        }
        for (int j = ty; j < kTile; j += kTileRows) {
            const uint64_t r = at.r0 + j, c = at.c0 + tx;
            if (r < rows && c < cols) {
                const uint64_t i = r * cols + c;
                const float    xv = __bfloat162float(transposed ? tile[tx][j] : xe[i]);
                p[i] = weft_muon_apply_element(&s, p[i], xv);
            }
        }
        if (transposed) {
            __syncthreads();
        }
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

/* The shape of one batched product, row-major C[count] (rows_c × cols_c,
 * leading dimension ldc) = P·Q, P and Q each (transposed?, row-major
 * leading dimension, batch stride): what a cuBLASLt plan is built for. */
struct GemmShape {
    int       count, rows_c, cols_c, inner;
    bool      p_t, q_t;
    int       ldp, ldq, ldc;
    long long sp, sq, sc;

    bool operator==(const GemmShape &o) const
    {
        return count == o.count && rows_c == o.rows_c && cols_c == o.cols_c && inner == o.inner &&
               p_t == o.p_t && q_t == o.q_t && ldp == o.ldp && ldq == o.ldq && ldc == o.ldc && sp == o.sp &&
               sq == o.sq && sc == o.sc;
    }
};

/* A cuBLASLt plan: descriptors and the heuristic's algorithm for one
 * shape, made on first use and kept (a step replays 2·gram_blocks + 1
 * shapes a group; an optimizer of several groups and placements keeps
 * them all, so that no step makes plans again). */
struct GemmPlan {
    GemmShape              shape;
    cublasLtMatmulDesc_t   op;
    cublasLtMatrixLayout_t q, p, c;
    cublasLtMatmulAlgo_t   algo;
    bool                   valid, lt; /* lt: false if cuBLASLt has no algorithm (classic cuBLAS then) */
};

constexpr int kPlans = 64;

/* What weft_muon_blas_create hands out. */
struct Blas {
    cublasHandle_t   h; /* classic cuBLAS: where cuBLASLt has no algorithm for a shape */
    cublasLtHandle_t lt;
    GemmPlan         plans[kPlans];
    int              next; /* the plan a new shape replaces when all are taken */
};

void plan_release(GemmPlan *pl)
{
    if (pl->valid && pl->lt) {
        cublasLtMatrixLayoutDestroy(pl->c);
        cublasLtMatrixLayoutDestroy(pl->p);
        cublasLtMatrixLayoutDestroy(pl->q);
        cublasLtMatmulDescDestroy(pl->op);
    }
    pl->valid = false;
}

weft_status_t layout(cublasLtMatrixLayout_t *l, uint64_t rows, uint64_t cols, int64_t ld, int count,
                     long long stride)
{
    weft_status_t status = blas_check(cublasLtMatrixLayoutCreate(l, CUDA_R_16BF, rows, cols, ld),
                                      "cublasLtMatrixLayoutCreate");
    if (status == WEFT_OK) {
        status = blas_check(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                             sizeof(count)),
                            "cublasLtMatrixLayoutSetAttribute");
    }
    if (status == WEFT_OK) {
        status = blas_check(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                             &stride, sizeof(stride)),
                            "cublasLtMatrixLayoutSetAttribute");
    }
    return status;
}

/* Column-major, as cuBLAS sees them: Cᵀ (cols_c × rows_c) = Qᵀ·Pᵀ; a
 * row-major operand is its own transpose seen column-major, so
 * "transposed" flips the op, and a transposed operand is stored with its
 * dimensions swapped. */
weft_status_t plan_make(Blas *b, const GemmShape &g, GemmPlan *pl)
{
    const cublasOperation_t         ta = g.q_t ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.p_t ? CUBLAS_OP_T : CUBLAS_OP_N;
    const size_t                    ws = kLtWorkspaceBytes;
    cublasLtMatmulPreference_t      pref = nullptr;
    cublasLtMatmulHeuristicResult_t result = {};
    int                             found = 0;
    weft_status_t                   status;

    pl->shape = g;
    pl->lt = true;
    status = blas_check(cublasLtMatmulDescCreate(&pl->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    if (status != WEFT_OK) {
        return status;
    }
    pl->q = pl->p = pl->c = nullptr;
    status = blas_check(cublasLtMatmulDescSetAttribute(pl->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)),
                        "cublasLtMatmulDescSetAttribute");
    if (status == WEFT_OK) {
        status = blas_check(cublasLtMatmulDescSetAttribute(pl->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)),
                            "cublasLtMatmulDescSetAttribute");
    }
    if (status == WEFT_OK) {
        status = g.q_t ? layout(&pl->q, g.inner, g.cols_c, g.ldq, g.count, g.sq)
                       : layout(&pl->q, g.cols_c, g.inner, g.ldq, g.count, g.sq);
    }
    if (status == WEFT_OK) {
        status = g.p_t ? layout(&pl->p, g.rows_c, g.inner, g.ldp, g.count, g.sp)
                       : layout(&pl->p, g.inner, g.rows_c, g.ldp, g.count, g.sp);
    }
    if (status == WEFT_OK) {
        status = layout(&pl->c, g.cols_c, g.rows_c, g.ldc, g.count, g.sc);
    }
    if (status == WEFT_OK) {
        status = blas_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    }
    if (status == WEFT_OK) {
        status = blas_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                                 sizeof(ws)),
                            "cublasLtMatmulPreferenceSetAttribute");
    }
    if (status == WEFT_OK &&
        cublasLtMatmulAlgoGetHeuristic(b->lt, pl->op, pl->q, pl->p, pl->c, pl->c, pref, 1, &result, &found) !=
            CUBLAS_STATUS_SUCCESS) {
        found = 0;
    }
    if (pref != nullptr) {
        cublasLtMatmulPreferenceDestroy(pref);
    }
    pl->valid = true; /* from here plan_release frees what was made */
    if (status != WEFT_OK) {
        plan_release(pl);
        return status;
    }
    if (found == 0) { /* no Lt algorithm for this shape: classic cuBLAS, which always has one */
        plan_release(pl);
        pl->shape = g;
        pl->valid = true;
        pl->lt = false;
        weft_log_debug("muon: no cuBLASLt algorithm for a %d x %d x %d batch of %d; classic cuBLAS", g.rows_c,
                       g.cols_c, g.inner, g.count);
        return WEFT_OK;
    }
    pl->algo = result.algo;
    return WEFT_OK;
}

/* What a GEMM adds to its product: D = alpha·P·Q + beta·C, in FP32 and
 * rounded to BF16 once; C (laid out as D) is read only when beta ≠ 0. */
struct Epilogue {
    float                alpha, beta;
    const __nv_bfloat16 *c;
};

constexpr Epilogue kProductOnly = {1.0f, 0.0f, nullptr};

/* Row-major D[count] (rows_c × cols_c) = alpha·P·Q + beta·C, P and Q
 * row-major, each given as (pointer, transposed?, its row-major leading
 * dimension); D is c, leading dimension ldc (0: contiguous, cols_c), and
 * C is laid out as D. */
weft_status_t gemm(Blas *b, cudaStream_t st, void *lt_work, int count, int rows_c, int cols_c, int inner,
                   const __nv_bfloat16 *p, bool p_t, int ldp, long long sp, const __nv_bfloat16 *q, bool q_t,
                   int ldq, long long sq, __nv_bfloat16 *c, long long sc, Epilogue ep = kProductOnly, int ldc = 0)
{
    const GemmShape g = {count, rows_c, cols_c, inner, p_t, q_t, ldp, ldq, ldc > 0 ? ldc : cols_c, sp, sq, sc};
    const __nv_bfloat16 *cin = ep.beta != 0.0f ? ep.c : c;
    GemmPlan       *pl = nullptr;

    for (int i = 0; i < kPlans && pl == nullptr; i++) {
        if (b->plans[i].valid && b->plans[i].shape == g) {
            pl = &b->plans[i];
        }
    }
    if (pl == nullptr) {
        pl = &b->plans[b->next];
        b->next = (b->next + 1) % kPlans;
        plan_release(pl);
        const weft_status_t status = plan_make(b, g, pl);
        if (status != WEFT_OK) {
            return status;
        }
    }
    if (!pl->lt) {
        /* The classic entry point reads C where it writes D: C's part
         * (count × rows_c × cols_c, rows g.ldc apart, matrices sc apart;
         * sc is a whole number of rows in every product here) copied
         * there, and nothing around it. */
        if (cin != c) {
            cudaMemcpy3DParms copy = {};
            const size_t      pitch = static_cast<size_t>(g.ldc) * 2;
            const size_t      slice_rows = static_cast<size_t>(sc) / static_cast<size_t>(g.ldc);
            copy.srcPtr = make_cudaPitchedPtr(const_cast<__nv_bfloat16 *>(cin), pitch, static_cast<size_t>(cols_c) * 2,
                                              slice_rows);
            copy.dstPtr = make_cudaPitchedPtr(c, pitch, static_cast<size_t>(cols_c) * 2, slice_rows);
            copy.extent = make_cudaExtent(static_cast<size_t>(cols_c) * 2, static_cast<size_t>(rows_c),
                                          static_cast<size_t>(count));
            copy.kind = cudaMemcpyDeviceToDevice;
            const weft_status_t status = WEFT_CUDA_CHECK(cudaMemcpy3DAsync(&copy, st));
            if (status != WEFT_OK) {
                return status;
            }
        }
        return blas_check(cublasGemmStridedBatchedEx(b->h, q_t ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                     p_t ? CUBLAS_OP_T : CUBLAS_OP_N, cols_c, rows_c, inner, &ep.alpha,
                                                     q, CUDA_R_16BF, ldq, sq, p, CUDA_R_16BF, ldp, sp, &ep.beta, c,
                                                     CUDA_R_16BF, g.ldc, sc, count, CUBLAS_COMPUTE_32F,
                                                     CUBLAS_GEMM_DEFAULT),
                          "cublasGemmStridedBatchedEx");
    }
    return blas_check(cublasLtMatmul(b->lt, pl->op, &ep.alpha, q, pl->q, p, pl->p, &ep.beta, cin, pl->c, c, pl->c,
                                     &pl->algo, lt_work, kLtWorkspaceBytes, st),
                      "cublasLtMatmul");
}

/*
 * The blocks on and below the diagonal of a symmetric m × m product
 * D = alpha·Y·Yᵀ + beta·C, Y m × k (row-major, leading dimension k, batch
 * stride m·k), D and C m × m contiguous: row block i (bs = m / blocks rows)
 * is one batched GEMM, D_i[:, 0 : (i+1)·bs] = alpha·Y_i·Y[0 : (i+1)·bs]ᵀ +
 * beta·C_i[…], its rows only as far as the diagonal block. The blocks
 * above the diagonal are left to gram_mirror_scale_kernel.
 */
weft_status_t symmetric_lower(Blas *bl, cudaStream_t st, void *lt_work, uint64_t count, uint64_t m, uint64_t k,
                              int blocks, const __nv_bfloat16 *y, __nv_bfloat16 *d, Epilogue ep = kProductOnly)
{
    const uint64_t bs = m / static_cast<uint64_t>(blocks);
    weft_status_t  status = WEFT_OK;

    for (int i = 0; i < blocks && status == WEFT_OK; i++) {
        const uint64_t row0 = static_cast<uint64_t>(i) * bs;
        Epilogue       e = ep;
        if (e.c != nullptr) {
            e.c += row0 * m;
        }
        status = gemm(bl, st, lt_work, (int)count, (int)bs, (int)((i + 1) * bs), (int)k, y + row0 * k, false, (int)k,
                      (long long)(m * k), y, true, (int)k, (long long)(m * k), d + row0 * m, (long long)(m * m), e,
                      (int)m);
    }
    return status;
}

/* ns_steps × (A = X·Xᵀ; B = b·A + c·A·A; X = a·X + B·X) over the count
 * matrices of the workspace w, on stream st, X ping-ponging between w.x
 * and w.xn (it ends in w.x after an even number of steps); the terms
 * summed in the GEMM epilogues (fused) or rounded as eager PyTorch rounds
 * them. */
weft_status_t ns_iterations(Blas *bl, cudaStream_t st, const Work &w, uint64_t count, uint64_t m, uint64_t n,
                            int blocks, int schedule, bool fused, uint32_t steps)
{
    const uint64_t mm = count * m * m, mn = count * m * n, bs = m / static_cast<uint64_t>(blocks);
    __nv_bfloat16 *x = w.x, *xn = w.xn;
    weft_status_t  status = blas_check(cublasSetStream(bl->h, st), "cublasSetStream");

    for (uint32_t step = 0; step < steps && status == WEFT_OK; step++) {
        float abc[3];
        weft_muon_coefficients(schedule, step, abc);
        /* A = X·Xᵀ, and (eager) bf16(c·A) into b */
        if (blocks == 1) {
            status = gemm(bl, st, w.lt, (int)count, (int)m, (int)m, (int)n, x, false, (int)n,
                          (long long)(m * n), x, true, (int)n, (long long)(m * n), w.a, (long long)(m * m));
            if (status == WEFT_OK && !fused) {
                scale_kernel<<<blocks_for(mm), kThreads, 0, st>>>(w.b, w.a, abc[2], mm);
                status = WEFT_CUDA_CHECK(cudaGetLastError());
            }
        } else {
            status = symmetric_lower(bl, st, w.lt, count, m, n, blocks, x, w.a);
            if (status == WEFT_OK) {
                gram_mirror_scale_kernel<<<gram_mirror_grid(m, bs, count, !fused), 256, 0, st>>>(
                    w.a, fused ? nullptr : w.b, abc[2], m, bs);
                status = WEFT_CUDA_CHECK(cudaGetLastError());
            }
        }
        if (fused) {
            /* B = c·A·A + b·A (A·A = A·Aᵀ: symmetric, its lower blocks
             * multiplied, then mirrored); X' = B·X + a·X, each rounded once */
            if (status == WEFT_OK && blocks == 1) {
                status = gemm(bl, st, w.lt, (int)count, (int)m, (int)m, (int)m, w.a, false, (int)m,
                              (long long)(m * m), w.a, false, (int)m, (long long)(m * m), w.b, (long long)(m * m),
                              Epilogue{abc[2], abc[1], w.a});
            } else if (status == WEFT_OK) {
                status = symmetric_lower(bl, st, w.lt, count, m, m, blocks, w.a, w.b, Epilogue{abc[2], abc[1], w.a});
                if (status == WEFT_OK) {
                    gram_mirror_scale_kernel<<<gram_mirror_grid(m, bs, count, false), 256, 0, st>>>(w.b, nullptr,
                                                                                                  1.0f, m, bs);
                    status = WEFT_CUDA_CHECK(cudaGetLastError());
                }
            }
            if (status == WEFT_OK) {
                status = gemm(bl, st, w.lt, (int)count, (int)m, (int)n, (int)m, w.b, false, (int)m,
                              (long long)(m * m), x, false, (int)n, (long long)(m * n), xn, (long long)(m * n),
                              Epilogue{1.0f, abc[0], x});
            }
            __nv_bfloat16 *t = x;
            x = xn;
            xn = t;
            continue;
        }
        /* B = bf16(b·A) + (bf16(c·A))·A */
        if (status == WEFT_OK) {
            status = gemm(bl, st, w.lt, (int)count, (int)m, (int)m, (int)m, w.b, false, (int)m,
                          (long long)(m * m), w.a, false, (int)m, (long long)(m * m), w.p, (long long)(m * m));
        }
        if (status == WEFT_OK) {
            scale_add_kernel<<<blocks_for(mm), kThreads, 0, st>>>(w.b, w.a, abc[1], w.p, mm);
            status = WEFT_CUDA_CHECK(cudaGetLastError());
        }
        /* X' = bf16(a·X) + B·X */
        if (status == WEFT_OK) {
            status = gemm(bl, st, w.lt, (int)count, (int)m, (int)n, (int)m, w.b, false, (int)m,
                          (long long)(m * m), x, false, (int)n, (long long)(m * n), xn, (long long)(m * n));
        }
        if (status == WEFT_OK) {
            scale_add_kernel<<<blocks_for(mn), kThreads, 0, st>>>(xn, x, abc[0], xn, mn);
            status = WEFT_CUDA_CHECK(cudaGetLastError());
        }
        __nv_bfloat16 *t = x;
        x = xn;
        xn = t;
    }
    return status;
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
    return 2 * align256(count * m * n * 2) + 3 * align256(count * m * m * 2) +
           align256(count * kPartials * sizeof(float)) + align256(count * sizeof(float)) + kLtWorkspaceBytes;
}

extern "C" weft_status_t weft_muon_blas_create(void **blas)
{
    Blas         *b;
    weft_status_t status;
    const char   *why;

    if (weft_blas_api_load(&why) != WEFT_OK) {
        weft_log_error("muon: cuBLAS could not be loaded (libweft was built with CUDA %d; its cuBLAS is "
                       "missing here?): %s",
                       CUBLAS_VER_MAJOR, why);
        return WEFT_ERR_UNSUPPORTED;
    }
    b = new (std::nothrow) Blas();
    if (b == nullptr) {
        return WEFT_ERR_NO_MEMORY;
    }
    status = blas_check(cublasCreate(&b->h), "cublasCreate");
    if (status == WEFT_OK) {
        status = blas_check(cublasLtCreate(&b->lt), "cublasLtCreate");
    }
    if (status != WEFT_OK) {
        weft_muon_blas_destroy(b);
        return status;
    }
    *blas = b;
    return WEFT_OK;
}

extern "C" void weft_muon_blas_destroy(void *blas)
{
    Blas *b = static_cast<Blas *>(blas);

    if (b != nullptr) {
        for (int i = 0; i < kPlans; i++) {
            plan_release(&b->plans[i]);
        }
        /* Members not made are null (value-initialized): skipped. */
        if (b->lt != nullptr) {
            cublasLtDestroy(b->lt);
        }
        if (b->h != nullptr) {
            cublasDestroy(b->h);
        }
        delete b;
    }
}

extern "C" weft_status_t weft_muon_cuda_step(const weft_muon_scalars_t *s, int schedule, int rounding,
                                             uint32_t steps, float *param, float *momentum, const void *grad,
                                             weft_dtype_t grad_dtype, uint64_t rows, uint64_t cols, uint64_t count,
                                             int gram_blocks, void *work, void *blas, void *stream)
{
    cudaStream_t   st = static_cast<cudaStream_t>(stream);
    Blas          *b = static_cast<Blas *>(blas);
    const int      transposed = rows > cols;
    const uint64_t m = transposed ? cols : rows, n = transposed ? rows : cols;
    const Work     w = carve(work, m, n, count);
    const dim3     grid(kPartials, static_cast<unsigned>(count));
    const int      blocks = gram_blocks > 0 ? gram_blocks : weft_muon_gram_blocks(m);
    weft_status_t  status;
    __nv_bfloat16 *x = w.x; /* X in θ's order, then (steps done) where the iterations left it */

    /* blocks > 1: the mirror kernel's 64-row tiles lie wholly on one side
     * of the diagonal blocks, and every GEMM operand starts 128-byte aligned */
    if (blocks > kGramBlocksMax || m % static_cast<uint64_t>(blocks) != 0 ||
        (blocks > 1 && (m / blocks) % kMirrorTile != 0)) {
        weft_log_error("weft_muon_cuda_step: %d Gram blocks do not split %llu rows in whole 64-row tiles", blocks,
                       static_cast<unsigned long long>(m));
        return WEFT_ERR_INVALID_PARAM;
    }

    if (count == 0) {
        return WEFT_OK;
    }
    if (grad_dtype == WEFT_DTYPE_BF16) {
        momentum_kernel<uint16_t><<<grid, dim3(kTile, kTileRows), 0, st>>>(
            *s, momentum, static_cast<const uint16_t *>(grad), x, w.partial, rows, cols, transposed);
    } else {
        momentum_kernel<float><<<grid, dim3(kTile, kTileRows), 0, st>>>(
            *s, momentum, static_cast<const float *>(grad), x, w.partial, rows, cols, transposed);
    }
    normalize_kernel<<<dim3(kNormBlocks, static_cast<unsigned>(count)), 1024, 0, st>>>(x, w.partial, w.norm, m * n);
    status = WEFT_CUDA_CHECK(cudaGetLastError());
    if (status == WEFT_OK) {
        status = ns_iterations(b, st, w, count, m, n, blocks, schedule, rounding == WEFT_MUON_ROUNDING_FUSED,
                               steps);
    }
    x = steps % 2 == 0 ? w.x : w.xn;
    if (status == WEFT_OK) {
        /* About 16 blocks an SM over the batch, at least 16 a matrix. */
        const uint64_t tiles = (rows + kTile - 1) / kTile * ((cols + kTile - 1) / kTile);
        const uint64_t want = 132 * 16 / count > 16 ? 132 * 16 / count : 16;
        const dim3     tgrid(static_cast<unsigned>(want < tiles ? want : tiles), static_cast<unsigned>(count));
        apply_kernel<<<tgrid, dim3(kTile, kTileRows), 0, st>>>(*s, param, x, rows, cols, transposed);
        status = WEFT_CUDA_CHECK(cudaGetLastError());
    }
    return status;
}
