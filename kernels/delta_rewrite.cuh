/*
 * The rewrite of a dense pair's WT on the GPU (delta_cuda.cu): the tile
 * kernel, in a header of its own so that tests/test_delta_rewrite.cc runs
 * the same code on the CPU, a thread a CUDA thread, where there is no GPU.
 * Included inside delta_cuda.cu's anonymous namespace, after <stdint.h>
 * and CUDA's runtime header; the test gives stand-ins for the built-ins it
 * uses (uint4, __byte_perm, __ldcs, __stcs, atomicOr, __syncthreads, the
 * thread and block indices). Internal.
 */
#ifndef WEFT_KERNELS_DELTA_REWRITE_CUH
#define WEFT_KERNELS_DELTA_REWRITE_CUH

/*
 * A pair's rewrite: where a batch patches a W and then its WT with the
 * same delta (<weft/delta.h>'s transposed target) and the delta is dense,
 * WT is not scattered into but written whole from W's new bytes, once the
 * scatter has patched W. Why: W's changed bytes land in WT a row of WT
 * apart (N bytes), so each is a sector of its own written in part, which
 * HBM takes as a read and a write of the whole sector, in no order the
 * memory can stream; at ~1 % of the bytes changed a third of WT's sectors
 * are touched so, and the apply (W's scatter and WT's) took 1.13-1.18 ×
 * a copy of the whole version on an H200 at AdamW lr 1e-5
 * (perf/results/2026-12-07-delta-staged-h200-d795a00.json). A transpose
 * streams: it reads W and writes WT once, whole sectors, about half of a
 * copy's bytes, whatever the density. WEFT_DELTA_WT_REWRITE=auto turns it
 * on (default off until it has been measured against the scatter on a
 * GPU).
 *
 * One block a 128 × 128 tile of a matrix: 16 KB of W read by 16-byte
 * loads (a warp: 4 rows × 128 bytes), put into shared memory as words,
 * row r's 16-byte groups XOR-swizzled by (r / 16) mod 8; thread i then
 * takes rows 16·(i mod 8) .. +15 of column word i / 8 (16 words: 4
 * columns × 16 rows), bank-conflict free (a warp's 32 words fall in 32
 * banks), transposes them by byte permutes, and stores its 4 columns' 16
 * bytes into 4 rows of WT (a warp: 4 rows × 128 bytes).
 */
constexpr uint64_t kRewriteTile = 128;            /* N and K multiples of it */
constexpr int      kRewriteThreads = 256;
constexpr uint64_t kRewriteBytesPerChange = 256;  /* rewritten from one change in this many bytes on */
constexpr uint32_t kRewritePairs = 256;           /* pairs a launch */

struct RewritePair {
    const uint8_t *w;          /* W's matrices, end to end (contiguous, 16-byte aligned) */
    uint8_t       *wt;         /* WT's */
    uint64_t       rows, cols; /* N, K */
    uint64_t       first_tile; /* of the launch's tiles, the pair's first */
    uint32_t       w_index, wt_index;
};

struct RewriteBatch {
    uint32_t    count;
    uint64_t    tiles;
    RewritePair pairs[kRewritePairs];
};
static_assert(sizeof(RewriteBatch) <= 24 * 1024, "a rewrite batch within a launch's parameters");

/* 4 words (rows a..a+3, 4 bytes of 4 columns each) → 4 words, one a
 * column: byte c of each row gathered. */
__device__ __forceinline__ void transpose4(uint32_t x0, uint32_t x1, uint32_t x2, uint32_t x3, uint32_t col[4])
{
    const uint32_t t0 = __byte_perm(x0, x1, 0x5140), t1 = __byte_perm(x2, x3, 0x5140); /* bytes 0, 1 */
    const uint32_t t2 = __byte_perm(x0, x1, 0x7362), t3 = __byte_perm(x2, x3, 0x7362); /* bytes 2, 3 */
    col[0] = __byte_perm(t0, t1, 0x5410);
    col[1] = __byte_perm(t0, t1, 0x7632);
    col[2] = __byte_perm(t2, t3, 0x5410);
    col[3] = __byte_perm(t2, t3, 0x7632);
}

__global__ void __launch_bounds__(kRewriteThreads) rewrite_kernel(const __grid_constant__ RewriteBatch b,
                                                                   unsigned *verdicts)
{
    constexpr int kWords = static_cast<int>(kRewriteTile / 4); /* a tile row's words */
    __shared__ __align__(16) uint32_t tile[kRewriteTile * kWords];
    const unsigned                    i = threadIdx.x;

    for (uint64_t g = blockIdx.x; g < b.tiles; g += gridDim.x) {
        uint32_t lo = 0, hi = b.count; /* the pair: b.pairs[lo].first_tile <= g < b.pairs[hi].first_tile */
        while (hi - lo > 1) {
            const uint32_t mid = (lo + hi) / 2;
            if (b.pairs[mid].first_tile <= g) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        const RewritePair &pr = b.pairs[lo];
        const uint64_t     t = g - pr.first_tile, n = pr.rows, k = pr.cols;
        const unsigned     v = verdicts[pr.w_index];

        if (t == 0 && i == 0 && v != 0) {
            atomicOr(&verdicts[pr.wt_index], v); /* WT's delta is W's: refused with it */
        }
        if (v != 0) {
            continue; /* the same for the whole block */
        }
        const uint64_t tn = n / kRewriteTile, tk = k / kRewriteTile, e = t / (tn * tk), rem = t % (tn * tk);
        const uint64_t r0 = rem / tk * kRewriteTile, c0 = rem % tk * kRewriteTile;
        const uint8_t *src = pr.w + e * n * k + r0 * k + c0;
        uint8_t       *dst = pr.wt + e * n * k + c0 * n + r0;
        uint4          piece[4];

#pragma unroll
        for (int j = 0; j < 4; j++) { /* every load issued before any is stored */
            const unsigned p = i + kRewriteThreads * j, row = p / 8, group = p % 8;
            piece[j] = __ldcs(reinterpret_cast<const uint4 *>(src + row * k + group * 16));
        }
        __syncthreads(); /* the tile's last readers done */
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const unsigned p = i + kRewriteThreads * j, row = p / 8, group = p % 8;
            *reinterpret_cast<uint4 *>(&tile[row * kWords + (group ^ (row / 16 % 8)) * 4]) = piece[j];
        }
        __syncthreads();
        const unsigned cw = i / 8, rg = i % 8; /* columns 4cw .. 4cw + 3, rows 16rg .. 16rg + 15 */
        uint32_t       x[16];
#pragma unroll
        for (int q = 0; q < 16; q++) {
            const unsigned row = rg * 16 + q;
            x[q] = tile[row * kWords + (((cw / 4) ^ rg) * 4) + cw % 4];
        }
        uint32_t col[4][4]; /* [column][rows 4a .. 4a + 3] */
#pragma unroll
        for (int a = 0; a < 4; a++) {
            uint32_t c[4];
            transpose4(x[4 * a], x[4 * a + 1], x[4 * a + 2], x[4 * a + 3], c);
#pragma unroll
            for (int cc = 0; cc < 4; cc++) {
                col[cc][a] = c[cc];
            }
        }
#pragma unroll
        for (int cc = 0; cc < 4; cc++) {
            __stcs(reinterpret_cast<uint4 *>(dst + (4 * cw + cc) * n + rg * 16),
                   make_uint4(col[cc][0], col[cc][1], col[cc][2], col[cc][3]));
        }
    }
}

#endif
