/*
 * The FP8 writer on the GPU: X [rows, cols] (FP32 or BF16) → W e4m3
 * [rows, cols], WT e4m3 [cols, rows], scale_inv f32 per block, for a batch
 * of same-shaped matrices in one launch. Bytes identical to the host
 * reference (quant_host.c): the same fp8.h arithmetic, IEEE division.
 *
 * Fast path (block 128; rows, cols multiples of 16; inputs and their rows
 * 16-byte aligned, W 4-byte, WT 16-byte):
 *  - Bytes should bound it: per element 4 B read (FP32) and 2 B written.
 *    At HBM speed an SM gets only a few cycles per element, so the
 *    instructions per element must stay few: with an earlier division
 *    check (about 7 integer instructions an element) Nsight Compute rated
 *    the SMs' throughput at 76% of peak against DRAM's 56%
 *    (perf/results/2026-11-29-quant-h200-ncu-483d7e9.json) and the kernel
 *    ran at 0.83-0.86 of a copy; with the division in three FP
 *    instructions HBM is the bound.
 *  - One CTA of 512 threads per 128×128 tile; the grid runs over every
 *    tile of every matrix. The whole tile (64 KB of FP32) is requested at
 *    once with cp.async, 16 B per thread per instruction, one 512-B row
 *    per warp instruction, straight into shared memory: no registers held
 *    by loads in flight, so the kernel fits in 40 registers and three CTAs
 *    share an SM (3 × 64 KB of shared memory): up to ~192 KB requested
 *    per SM, several times the ~60 KB that Little's law asks of 132 SMs
 *    at ~4.3 TB/s and ~2 µs loaded latency. While one CTA reduces,
 *    quantizes and stores, the other two keep HBM busy. (A first version
 *    held the tile in registers, 62 of them, two CTAs per SM: 0.72-0.80
 *    of the copy.)
 *  - Warp w then reads tile rows 8w..8w+7 from shared memory, lane l
 *    columns 4l..4l+3 (conflict-free: a warp reads one whole row).
 *  - amax: fmaxf (NaN ignored) over the thread's 32 values, a warp
 *    shuffle reduction, then 16 warp maxima through shared memory.
 *  - q = e4m3(x / s): the correctly rounded quotient from RN(1/s) in one
 *    multiplication and two FMAs (div_by_scale has the argument), then the
 *    hardware's cvt.rn.satfinite.e4m3x2 (two values per instruction),
 *    which matches fp8.h's encoder bit for bit (tested exhaustively over
 *    the sign, exponent and top mantissa bits); NaN bytes set to 0x7F.
 *    (An earlier version multiplied by RN(1/s) and fell back to the IEEE
 *    division near e4m3 rounding boundaries: ~7 integer instructions an
 *    element for the check, which made the SMs, not HBM, the bound.)
 *  - W: each lane stores its 4 bytes of a row: a warp writes whole 128-B
 *    lines. WT: the thread's 8 rows × 4 columns are transposed in
 *    registers (byte_perm) into 4 columns × 8 rows and stored as 8-byte
 *    chunks into a 16 KB shared tile, XOR-swizzled so that neither the
 *    8-byte stores nor the 16-byte reads conflict on banks; the tile then
 *    leaves as 16-byte stores, 8 lanes per 128-B WT row.
 *  - What bounds it: HBM bandwidth (reads and writes share it): 0.98-0.99
 *    of a D2D copy's bytes per second on the batched expert shapes on an
 *    H200 (perf/results/2026-11-29-quant-h200-fc2eaf3.json); the part of
 *    each CTA's life with no loads in flight (reduce, quantize, transpose,
 *    stores) is covered by the other resident CTAs. 8192² reaches 0.93
 *    on an H200: after the last CTA starts, the kernel drains for about
 *    one CTA's lifetime, most of it that CTA's load queued behind the
 *    ~25 MB the others have in flight, a fixed cost that weighs most on
 *    small calls (traced per CTA in
 *    perf/results/2026-12-07-ab-quant-trace-persistent-h100.json).
 *  - The reference formula (quant.h) is the same kernel instantiated with
 *    Ref: the amax is an unsigned max over the bits (NaN kept), and each
 *    element is one multiplication by f before the same conversion.
 * Generic path (any block size, any alignment, odd shapes): one CTA per
 * block, grid-strided; amax by a strided loop, then W and WT each written
 * in their own order (coalesced stores, strided loads), with fp8.h's
 * software encoder. Slower, exact.
 *
 * Descriptors: up to kParamMatrices matrices travel in the kernel's
 * parameters (Hopper and CUDA 12.1+ take up to 32 KB), which keeps the
 * call asynchronous; the parameter block is sized to the count (1, 128 or
 * kParamMatrices descriptors); more are copied to a stream-ordered device
 * buffer.
 */
#include "config.h"

#include "common/cuda_util.h"
#include "fp8.h"
#include "quant_cuda.h"
#include "quant_internal.h"

#include <cuda_fp8.h>
#include <atomic>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

namespace {

constexpr int      kTile = 128;
constexpr int      kThreads = 512;
constexpr int      kRowsPerWarp = kTile / (kThreads / 32); /* 8 */
constexpr int      kGenericThreads = 256;
constexpr uint32_t kParamMatrices = 760;

struct QuantDesc {
    const void *x;
    uint8_t    *w;
    uint8_t    *wt;
    float      *scale_inv;
    uint64_t    stride;
};

/* Everything but the descriptors. */
struct QuantHead {
    const QuantDesc *descs; /* device copy when count > kParamMatrices */
    uint64_t         rows, cols;
    uint64_t         blocks_n, blocks_k; /* scale grid */
    uint64_t         total;              /* blocks of all matrices */
    uint32_t         block;
    uint32_t         count;
    int              ue8m0, write_wt;
    int              reference; /* WEFT_QUANT_FORMULA_REFERENCE */
};

/* The maxima the kernels take: floats with fmaxf (NaN ignored: the
 * default formula's amax), unsigned bits with an integer max (the
 * reference formula's, on the bits: NaN kept). */
__device__ __forceinline__ float max_of(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ uint32_t max_of(uint32_t a, uint32_t b) { return a > b ? a : b; }

/* The max over a warp; every lane gets it. */
template <typename V>
__device__ __forceinline__ V warp_max(V v)
{
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
        v = max_of(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
    }
    return v;
}

/* Kernel parameters, sized by the call's count (N = 1, 128 or
 * kParamMatrices): the driver copies the whole block at every launch, and
 * ~30 KB of it for one matrix was measurable on small problems. */
template <uint32_t N>
struct QuantArgs : QuantHead {
    QuantDesc local[N];
};
static_assert(sizeof(QuantArgs<kParamMatrices>) <= 32764, "kernel parameters over the limit");

template <uint32_t N>
__device__ __forceinline__ QuantDesc desc_of(const QuantArgs<N> &a, uint64_t m)
{
    return a.descs != nullptr ? a.descs[m] : a.local[m];
}

__device__ __forceinline__ float load1(const float *p) { return *p; }
__device__ __forceinline__ float load1(const uint16_t *p) { return weft_fp8_bf16_float(*p); }

/*
 * RN(y / s) without a division, for s normal and finite (2^-22 <= s <
 * 2^120, so rcp = RN(1/s) is a normal float): q0 = RN(|y| × rcp) is
 * within a few ulps of |y| / s, the remainder r = |y| - q0 s is exact in
 * one FMA, and RN(q0 + r × rcp) is the correctly rounded quotient
 * (Markstein's theorem: a correctly rounded reciprocal known in advance
 * gives a correctly rounded division in one multiplication and two FMAs;
 * J.-M. Muller, S. K. Raina, N. Brisebarre, "Accelerating Correctly
 * Rounded Floating-Point Division when the Divisor Is Known in Advance",
 * IEEE Trans. Computers 53(8), 2004). It needs r not to underflow: r is a
 * multiple of ulp(q0) ulp(s), above 2^-126 whenever |y| / s >= 2^-11;
 * below that both the quotient and RN(y / s) are under 2^-10, where e4m3
 * is a signed zero. The sign is copied from y afterwards, so that -0 and
 * tiny negatives keep it as the IEEE division does. NaN stays NaN. For a
 * power-of-two s the reciprocal is exact, r is 0 and q0 is the answer.
 * The result equals __fdiv_rn(y, s) bit for bit; test_quant_cuda checks
 * it against the host's IEEE division on random blocks and on values
 * placed at every e4m3 rounding boundary.
 */
__device__ __forceinline__ float div_by_scale(float y, float s, float rcp)
{
    const float a = fabsf(y);
    const float q0 = __fmul_rn(a, rcp);
    const float r = __fmaf_rn(-q0, s, a);
    const float q1 = __fmaf_rn(r, rcp, q0);

    return __uint_as_float((__float_as_uint(q1) & 0x7FFFFFFFu) | (__float_as_uint(y) & 0x80000000u));
}

/*
 * fp8.h writes every NaN as 0x7F; the hardware may keep a NaN's sign
 * (0xFF). 0xFF is NaN only (satfinite sends every finite value to
 * 0x00..0x7E or 0x80..0xFE), so clearing bit 7 of the bytes equal to 0xFF
 * is the whole fix: the bytes of ~q that are zero, found without carries
 * between bytes, give the bits to flip.
 */
__device__ __forceinline__ uint32_t nan_bytes_to_7f(uint32_t q)
{
    const uint32_t t = ~q;
    const uint32_t zero = ~(((t & 0x7F7F7F7Fu) + 0x7F7F7F7Fu) | t | 0x7F7F7F7Fu); /* 0x80 per zero byte */

    return q ^ zero;
}

/* e4m3 of two floats in one instruction (a → low byte); NaN → 0x7F as in
 * fp8.h. */
__device__ __forceinline__ uint32_t encode2(float a, float b)
{
    return nan_bytes_to_7f(__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ uint32_t encode4(float4 v)
{
    const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(v.x, v.y), __NV_SATFINITE, __NV_E4M3);
    const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(v.z, v.w), __NV_SATFINITE, __NV_E4M3);

    return nan_bytes_to_7f(lo | (hi << 16));
}

/* 16 bytes global → shared without registers (zero-filled when !valid). */
__device__ __forceinline__ void copy16_async(void *smem, const void *gmem, bool valid)
{
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));

    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0)
                 : "memory");
}

__device__ __forceinline__ float4 lds4(const float *p)
{
    return *reinterpret_cast<const float4 *>(p);
}

__device__ __forceinline__ float4 lds4(const uint16_t *p)
{
    const uint2 v = *reinterpret_cast<const uint2 *>(p);
    return make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xFFFF0000u),
                       __uint_as_float(v.y << 16), __uint_as_float(v.y & 0xFFFF0000u));
}

template <typename T>
constexpr int tile_smem_bytes()
{
    return kTile * kTile * static_cast<int>(sizeof(T));
}

/*
 * The tile kernel's default formula over one thread's 8 rows × 4 columns
 * (`mine`, in shared memory): the tile's amax (fmaxf, NaN ignored; a warp
 * shuffle, then the 16 warps' maxima through warp_amax), its scale s, and
 * the thread's bytes q = e4m3(x / s). Returns s.
 */
template <typename T>
__device__ __forceinline__ float tile_quant_exact(const T *mine, float *warp_amax, int ue8m0,
                                                  uint32_t q[kRowsPerWarp])
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float     amax = 0.0f;

#pragma unroll
    for (int i = 0; i < kRowsPerWarp; i++) {
        const float4 v = lds4(mine + i * kTile);

        amax = fmaxf(amax, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
    }
    amax = warp_max(amax);
    if (lane == 0) {
        warp_amax[warp] = amax;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kThreads / 32; i++) {
        amax = fmaxf(amax, warp_amax[i]);
    }

    /* amax has no NaN and no sign: its bits are weft_fp8_abs_bits' max. */
    const float    s = weft_fp8_block_scale(__float_as_uint(amax), ue8m0);
    const uint32_t sb = __float_as_uint(s);
    /* A block holding an Inf has s = Inf: the IEEE division there. */
    const bool     finite_scale = sb < 0x7F800000u;
    const float    rcp = finite_scale ? __frcp_rn(s) : 0.0f;

#pragma unroll
    for (int i = 0; i < kRowsPerWarp; i++) {
        const float4 v = lds4(mine + i * kTile);
        float4       r;

        if (!finite_scale) {
            r = make_float4(__fdiv_rn(v.x, s), __fdiv_rn(v.y, s), __fdiv_rn(v.z, s), __fdiv_rn(v.w, s));
        } else {
            r = make_float4(div_by_scale(v.x, s, rcp), div_by_scale(v.y, s, rcp), div_by_scale(v.z, s, rcp),
                            div_by_scale(v.w, s, rcp));
        }
        q[i] = encode4(r);
    }
    return s;
}

/*
 * The same with the reference formula (fp8.h's weft_fp8_ref_*): the amax
 * on the bits with NaN kept (an unsigned max), f = RN(RN(1/amax) × 448),
 * q = e4m3(RN(x × f)): one multiplication an element, cheaper than the
 * default's division. Returns scale_inv = RN(amax × RN(1/448)).
 */
template <typename T>
__device__ __forceinline__ float tile_quant_reference(const T *mine, uint32_t *warp_amax_bits,
                                                      uint32_t q[kRowsPerWarp])
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    uint32_t  bits = 0;

#pragma unroll
    for (int i = 0; i < kRowsPerWarp; i++) {
        const float4   v = lds4(mine + i * kTile);
        const uint32_t a01 =
            max(weft_fp8_ref_abs_bits(__float_as_uint(v.x)), weft_fp8_ref_abs_bits(__float_as_uint(v.y)));
        const uint32_t a23 =
            max(weft_fp8_ref_abs_bits(__float_as_uint(v.z)), weft_fp8_ref_abs_bits(__float_as_uint(v.w)));

        bits = max(bits, max(a01, a23));
    }
    bits = warp_max(bits);
    if (lane == 0) {
        warp_amax_bits[warp] = bits;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kThreads / 32; i++) {
        bits = max(bits, warp_amax_bits[i]);
    }

    const float amax = weft_fp8_ref_amax(bits);
    const float f = __fmul_rn(__frcp_rn(amax), WEFT_FP8_E4M3_MAX);

#pragma unroll
    for (int i = 0; i < kRowsPerWarp; i++) {
        const float4 v = lds4(mine + i * kTile);

        q[i] = encode4(make_float4(__fmul_rn(v.x, f), __fmul_rn(v.y, f), __fmul_rn(v.z, f), __fmul_rn(v.w, f)));
    }
    return weft_fp8_ref_scale_inv(amax);
}

template <typename T, uint32_t N, bool Ref>
__global__ void __launch_bounds__(kThreads, 3) quant_tile_kernel(const __grid_constant__ QuantArgs<N> a)
{
    extern __shared__ __align__(16) unsigned char smem[]; /* the input tile, then WT's bytes */
    __shared__ float    warp_amax[kThreads / 32];
    __shared__ uint32_t warp_amax_bits[kThreads / 32]; /* Ref */
    constexpr int    kRowChunks = kTile * static_cast<int>(sizeof(T)) / 16;
    const T         *tile = reinterpret_cast<const T *>(smem);
    uint8_t         *tile_t = smem; /* [col][row], swizzled; reuses the input's space */
    const uint64_t   tiles = a.blocks_n * a.blocks_k;
    const uint64_t   m = blockIdx.x / tiles;
    const uint64_t   t = blockIdx.x % tiles;
    const QuantDesc  d = desc_of(a, m);
    const uint64_t   br = t / a.blocks_k, bc = t % a.blocks_k;
    const uint64_t   r0 = br * kTile, c0 = bc * kTile;
    const int        warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const uint64_t   col = c0 + 4 * lane;
    const uint64_t   row0 = r0 + kRowsPerWarp * warp;
    /* rows and cols are multiples of 16: 16-byte pieces are all in or all out. */
    const bool       col_ok = col < a.cols;

    /* The whole tile in flight at once, each warp instruction one row. */
#pragma unroll
    for (int i = 0; i < kTile * kRowChunks / kThreads; i++) {
        const int      id = i * kThreads + threadIdx.x;
        const int      r = id / kRowChunks, ch = id % kRowChunks;
        const uint64_t gc = c0 + ch * (16 / sizeof(T));
        const bool     ok = r0 + r < a.rows && gc < a.cols;
        const T       *src = static_cast<const T *>(d.x) + (ok ? (r0 + r) * d.stride + gc : 0);

        copy16_async(smem + r * kRowChunks * 16 + ch * 16, src, ok);
    }
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
    __syncthreads();

    const T *mine = tile + (kRowsPerWarp * warp) * kTile + 4 * lane;
    uint32_t q[kRowsPerWarp];
    float    scale_inv;

    if constexpr (Ref) {
        scale_inv = tile_quant_reference(mine, warp_amax_bits, q);
    } else {
        scale_inv = tile_quant_exact(mine, warp_amax, a.ue8m0, q);
    }
    if (threadIdx.x == 0) {
        d.scale_inv[t] = scale_inv;
    }
    if (col_ok) {
        uint8_t *w = d.w + row0 * a.cols + col;
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; i++) {
            if (row0 + i < a.rows) {
                __stcs(reinterpret_cast<unsigned int *>(w + i * a.cols), q[i]);
            }
        }
    }
    if (!a.write_wt) {
        return;
    }

    /* 8 rows × 4 columns → 4 columns × 8 rows (two 4×4 byte transposes). */
    uint32_t lo[4], hi[4];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const uint32_t ab_lo = __byte_perm(q[4 * h], q[4 * h + 1], 0x5140);
        const uint32_t ab_hi = __byte_perm(q[4 * h], q[4 * h + 1], 0x7362);
        const uint32_t cd_lo = __byte_perm(q[4 * h + 2], q[4 * h + 3], 0x5140);
        const uint32_t cd_hi = __byte_perm(q[4 * h + 2], q[4 * h + 3], 0x7362);
        uint32_t      *dst = h == 0 ? lo : hi;

        dst[0] = __byte_perm(ab_lo, cd_lo, 0x5410);
        dst[1] = __byte_perm(ab_lo, cd_lo, 0x7632);
        dst[2] = __byte_perm(ab_hi, cd_hi, 0x5410);
        dst[3] = __byte_perm(ab_hi, cd_hi, 0x7632);
    }
    __syncthreads(); /* every input read before WT's bytes overwrite them */
    /* Column c's 128 bytes: 16 chunks of 8; chunk k lives at k ^ ((c/4)%16). */
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int c = 4 * lane + j;
        const int chunk = warp ^ (lane & 15);

        *reinterpret_cast<uint2 *>(tile_t + c * kTile + 8 * chunk) = make_uint2(lo[j], hi[j]);
    }
    __syncthreads();
#pragma unroll
    for (int p = 0; p < kTile * kTile / 16 / kThreads; p++) {
        const int      idx = p * kThreads + threadIdx.x;
        const int      c = idx >> 3, m16 = idx & 7; /* WT row c, rows 16·m16.. */
        const int      f = (c >> 2) & 15;
        uint4          val = *reinterpret_cast<const uint4 *>(tile_t + c * kTile + 16 * (m16 ^ (f >> 1)));
        const uint64_t wt_row = c0 + c, x_row = r0 + 16 * m16;

        if (f & 1) {
            val = make_uint4(val.z, val.w, val.x, val.y);
        }
        if (wt_row < a.cols && x_row < a.rows) {
            __stcs(reinterpret_cast<uint4 *>(d.wt + wt_row * a.rows + x_row), val);
        }
    }
}

/* Block reduce of a max; every thread gets the result. */
template <typename V>
__device__ V block_max(V v, V *scratch)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;

    v = warp_max(v);
    if (lane == 0) {
        scratch[warp] = v;
    }
    __syncthreads();
    for (int i = 0; i < warps; i++) {
        v = max_of(v, scratch[i]);
    }
    __syncthreads(); /* scratch is reused by the next block */
    return v;
}

template <typename T, uint32_t N, bool Ref>
__global__ void __launch_bounds__(kGenericThreads) quant_generic_kernel(const __grid_constant__ QuantArgs<N> a)
{
    __shared__ float    scratch[kGenericThreads / 32];
    __shared__ uint32_t scratch_bits[kGenericThreads / 32];
    const uint64_t   per_matrix = a.blocks_n * a.blocks_k;
    const uint32_t   b = a.block;

    for (uint64_t id = blockIdx.x; id < a.total; id += gridDim.x) {
        const uint64_t  m = id / per_matrix, t = id % per_matrix;
        const QuantDesc d = desc_of(a, m);
        const uint64_t  r0 = t / a.blocks_k * b, c0 = t % a.blocks_k * b;
        const uint32_t  h = static_cast<uint32_t>(a.rows - r0 < b ? a.rows - r0 : b);
        const uint32_t  wd = static_cast<uint32_t>(a.cols - c0 < b ? a.cols - c0 : b);
        const uint32_t  n = h * wd;
        const T        *x = static_cast<const T *>(d.x) + r0 * d.stride + c0;
        uint32_t        amax_bits = 0;

        for (uint32_t e = threadIdx.x; e < n; e += blockDim.x) {
            const uint32_t bits = __float_as_uint(load1(x + e / wd * d.stride + e % wd));
            const uint32_t u = Ref ? weft_fp8_ref_abs_bits(bits) : weft_fp8_abs_bits(bits);
            amax_bits = u > amax_bits ? u : amax_bits;
        }
        float s, f = 0.0f;
        if constexpr (Ref) {
            const float ref_amax = weft_fp8_ref_amax(block_max(amax_bits, scratch_bits));

            f = __fmul_rn(__frcp_rn(ref_amax), WEFT_FP8_E4M3_MAX);
            s = weft_fp8_ref_scale_inv(ref_amax);
        } else {
            /* The abs bits are non-negative floats: a float max orders them alike. */
            s = weft_fp8_block_scale(__float_as_uint(block_max(__uint_as_float(amax_bits), scratch)), a.ue8m0);
        }
        /* One element's byte in either formula. */
        auto quantize = [&](float v) -> uint8_t {
            return Ref ? weft_fp8_e4m3_encode_float(__fmul_rn(v, f)) : weft_fp8_quantize(v, s);
        };

        if (threadIdx.x == 0) {
            d.scale_inv[t] = s;
        }
        for (uint32_t e = threadIdx.x; e < n; e += blockDim.x) {
            const uint32_t r = e / wd, c = e % wd;

            d.w[(r0 + r) * a.cols + c0 + c] = quantize(load1(x + r * d.stride + c));
        }
        if (a.write_wt) {
            for (uint32_t e = threadIdx.x; e < n; e += blockDim.x) {
                const uint32_t c = e / h, r = e % h;

                d.wt[(c0 + c) * a.rows + r0 + r] = quantize(load1(x + r * d.stride + c));
            }
        }
    }
}

__global__ void dequant_kernel(uint32_t block, uint64_t rows, uint64_t cols, uint64_t blocks_k,
                               const uint8_t *w, const float *scale_inv, float *out)
{
    const uint64_t n = rows * cols;

    for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
        const uint64_t r = i / cols, c = i % cols;

        out[i] = weft_fp8_e4m3_decode_byte(w[i]) * scale_inv[r / block * blocks_k + c / block];
    }
}

__global__ void encode_kernel(const float *x, uint8_t *q, size_t n)
{
    for (size_t i = 2 * (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x); i < n;
         i += 2 * static_cast<size_t>(gridDim.x) * blockDim.x) {
        const uint32_t pair = encode2(x[i], i + 1 < n ? x[i + 1] : 0.0f);

        q[i] = static_cast<uint8_t>(pair);
        if (i + 1 < n) {
            q[i + 1] = static_cast<uint8_t>(pair >> 8);
        }
    }
}

bool aligned(const void *p, uintptr_t a)
{
    return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0;
}

/* Whether every matrix fits the tile kernel's assumptions. */
bool tile_path_fits(const weft_quant_config_t &cfg, weft_dtype_t dtype, uint64_t rows, uint64_t cols,
                    const weft_quant_matrix_t *matrices, size_t count)
{
    const uint64_t per16 = dtype == WEFT_DTYPE_FP32 ? 4 : 8; /* elements in 16 bytes (cp.async) */

    if (cfg.block != kTile || rows % 16 != 0 || cols % 16 != 0) {
        return false;
    }
    for (size_t i = 0; i < count; i++) {
        const weft_quant_matrix_t *m = &matrices[i];
        const uint64_t             stride = m->x_row_stride != 0 ? m->x_row_stride : cols;

        if (!aligned(m->x, 16) || stride % per16 != 0 || !aligned(m->w, 4) ||
            (cfg.write_wt && !aligned(m->wt, 16))) {
            return false;
        }
    }
    return true;
}

int device_sms(void)
{
    int device = 0, sms = 0;

    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0) {
        (void)cudaGetLastError();
        return 132;
    }
    return sms;
}

/* Raises the FP32 tile kernel's dynamic shared memory limit once per
 * device (a per-function, per-device attribute), not at every call. */
template <uint32_t N, bool Ref>
weft_status_t tile_attribute_ready(void)
{
    static std::atomic<uint64_t> done{0}; /* bit d: device d is set up */
    int                          device = 0;
    weft_status_t                status = WEFT_CUDA_CHECK(cudaGetDevice(&device));

    if (status != WEFT_OK) {
        return status;
    }
    if (device < 64 && (done.load(std::memory_order_acquire) >> device & 1u) != 0) {
        return WEFT_OK;
    }
    status = WEFT_CUDA_CHECK(cudaFuncSetAttribute(quant_tile_kernel<float, N, Ref>,
                                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  tile_smem_bytes<float>()));
    if (status == WEFT_OK && device < 64) {
        done.fetch_or(uint64_t{1} << device, std::memory_order_release);
    }
    return status;
}

/* The parameters on the stack up to 128 descriptors (~5 KB), on the heap
 * beyond (~30 KB, kept off the caller's stack). */
template <uint32_t N, bool Heap = (N > 128)>
struct ArgsStore {
    QuantArgs<N>  v;
    QuantArgs<N> *get() { return &v; }
};

template <uint32_t N>
struct ArgsStore<N, true> {
    QuantArgs<N> *p = static_cast<QuantArgs<N> *>(malloc(sizeof(QuantArgs<N>)));

    ArgsStore() = default;
    ArgsStore(const ArgsStore &) = delete;
    ArgsStore &operator=(const ArgsStore &) = delete;
    ~ArgsStore() { free(p); }
    QuantArgs<N> *get() { return p; }
};

/* Launches the kernel of the call's dtype and path for one formula. */
template <uint32_t N, bool Ref>
weft_status_t launch_kernel(const QuantArgs<N> &args, weft_dtype_t x_dtype, bool tile, cudaStream_t s)
{
    const QuantHead &head = args;
    weft_status_t    status = WEFT_OK;

    if (tile) {
        if (x_dtype == WEFT_DTYPE_FP32) {
            status = tile_attribute_ready<N, Ref>();
            if (status == WEFT_OK) {
                quant_tile_kernel<float, N, Ref>
                    <<<static_cast<unsigned>(head.total), kThreads, tile_smem_bytes<float>(), s>>>(args);
            }
        } else {
            quant_tile_kernel<uint16_t, N, Ref>
                <<<static_cast<unsigned>(head.total), kThreads, tile_smem_bytes<uint16_t>(), s>>>(args);
        }
    } else {
        const uint64_t cap = static_cast<uint64_t>(device_sms()) * 16;
        const unsigned grid = static_cast<unsigned>(head.total < cap ? head.total : cap);
        const unsigned threads = head.block * head.block >= kGenericThreads
                                     ? kGenericThreads
                                     : (head.block * head.block + 31) / 32 * 32;

        if (x_dtype == WEFT_DTYPE_FP32) {
            quant_generic_kernel<float, N, Ref><<<grid, threads, 0, s>>>(args);
        } else {
            quant_generic_kernel<uint16_t, N, Ref><<<grid, threads, 0, s>>>(args);
        }
    }
    return status;
}

/* Fills the parameters for capacity N and launches; descs holds count
 * descriptors when head.descs is null. */
template <uint32_t N>
weft_status_t launch_quant(const QuantHead &head, const QuantDesc *descs, weft_dtype_t x_dtype, bool tile,
                           cudaStream_t s)
{
    ArgsStore<N>  store;
    QuantArgs<N> *args = store.get();
    weft_status_t status;

    if (args == nullptr) {
        return WEFT_ERR_NO_MEMORY;
    }
    static_cast<QuantHead &>(*args) = head;
    if (head.descs == nullptr) {
        memcpy(args->local, descs, head.count * sizeof(*descs));
    }
    status = head.reference ? launch_kernel<N, true>(*args, x_dtype, tile, s)
                            : launch_kernel<N, false>(*args, x_dtype, tile, s);
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaGetLastError());
    }
    return status;
}

} // namespace

extern "C" weft_status_t weft_quant_cuda(const weft_quant_params_t *params, weft_dtype_t x_dtype, uint64_t rows,
                                         uint64_t cols, const weft_quant_matrix_t *matrices, size_t count,
                                         void *stream)
{
    cudaStream_t        s = static_cast<cudaStream_t>(stream);
    weft_quant_config_t cfg;
    QuantHead           head = {};
    QuantDesc           one;
    QuantDesc          *descs;
    QuantDesc          *d_descs = nullptr;
    weft_status_t       status;
    bool                tile;

    status = weft_quant_check("weft_quant_cuda", params, x_dtype, rows, cols, matrices, count, &cfg);
    if (status != WEFT_OK || count == 0) {
        return status;
    }
    descs = count == 1 ? &one : static_cast<QuantDesc *>(malloc(count * sizeof(*descs)));
    if (descs == nullptr) {
        return WEFT_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < count; i++) {
        descs[i].x = matrices[i].x;
        descs[i].w = matrices[i].w;
        descs[i].wt = cfg.write_wt ? matrices[i].wt : nullptr;
        descs[i].scale_inv = matrices[i].scale_inv;
        descs[i].stride = matrices[i].x_row_stride != 0 ? matrices[i].x_row_stride : cols;
    }
    head.rows = rows;
    head.cols = cols;
    head.block = cfg.block;
    head.ue8m0 = cfg.ue8m0;
    head.write_wt = cfg.write_wt;
    head.reference = cfg.reference;
    head.count = static_cast<uint32_t>(count);
    head.blocks_n = (rows + cfg.block - 1) / cfg.block;
    head.blocks_k = (cols + cfg.block - 1) / cfg.block;
    head.total = head.blocks_n * head.blocks_k * count;
    tile = tile_path_fits(cfg, x_dtype, rows, cols, matrices, count) && head.total <= 0x7FFFFFFFu;

    if (count > kParamMatrices) {
        /* Pageable source: the copy is staged before the call returns, so
         * `matrices` may be reused; the buffer is freed in stream order. */
        status = WEFT_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void **>(&d_descs), count * sizeof(*descs), s));
        if (status != WEFT_OK) {
            goto out;
        }
        status = WEFT_CUDA_CHECK(cudaMemcpyAsync(d_descs, descs, count * sizeof(*descs), cudaMemcpyHostToDevice, s));
        if (status != WEFT_OK) {
            goto out_free;
        }
        head.descs = d_descs;
        status = launch_quant<1>(head, descs, x_dtype, tile, s);
    } else if (count == 1) {
        status = launch_quant<1>(head, descs, x_dtype, tile, s);
    } else if (count <= 128) {
        status = launch_quant<128>(head, descs, x_dtype, tile, s);
    } else {
        status = launch_quant<kParamMatrices>(head, descs, x_dtype, tile, s);
    }

out_free:
    if (d_descs != nullptr) {
        weft_status_t free_status = WEFT_CUDA_CHECK(cudaFreeAsync(d_descs, s));

        if (status == WEFT_OK) {
            status = free_status;
        }
    }
out:
    if (descs != &one) {
        free(descs);
    }
    return status;
}

extern "C" weft_status_t weft_dequant_cuda(uint32_t block, uint64_t rows, uint64_t cols, const uint8_t *w,
                                           const float *scale_inv, float *out, void *stream)
{
    cudaStream_t   s = static_cast<cudaStream_t>(stream);
    weft_status_t  status = weft_dequant_check("weft_dequant_cuda", block, rows, cols, w, scale_inv, out);
    const uint64_t n = rows * cols;
    const uint64_t cap = static_cast<uint64_t>(device_sms()) * 8;

    if (status != WEFT_OK || n == 0) {
        return status;
    }
    {
        const uint64_t blocks = (n + 255) / 256;

        dequant_kernel<<<static_cast<unsigned>(blocks < cap ? blocks : cap), 256, 0, s>>>(
            block, rows, cols, (cols + block - 1) / block, w, scale_inv, out);
    }
    return WEFT_CUDA_CHECK(cudaGetLastError());
}

extern "C" weft_status_t weft_fp8_e4m3_encode_cuda(const float *x, uint8_t *q, size_t n, void *stream)
{
    cudaStream_t   s = static_cast<cudaStream_t>(stream);
    const uint64_t cap = static_cast<uint64_t>(device_sms()) * 8;
    const uint64_t blocks = (n / 2 + 256) / 256;

    if ((x == nullptr || q == nullptr) && n > 0) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (n == 0) {
        return WEFT_OK;
    }
    encode_kernel<<<static_cast<unsigned>(blocks < cap ? blocks : cap), 256, 0, s>>>(x, q, n);
    return WEFT_CUDA_CHECK(cudaGetLastError());
}
