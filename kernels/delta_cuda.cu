/*
 * Delta versions on the GPU (<weft/delta.h>): the same bytes as the host
 * encoder, and the delta applied in place into device views.
 *
 * A call takes a batch of tensors (a version's), their chunks numbered
 * one after another, so that a version is a few launches and one scan,
 * not as many per tensor (a tensor of a few MB is encoded in microseconds:
 * launches per tensor would cost more than the work). The batch itself
 * rides in the parameters of the first launches (upload_kernel): a copy
 * from the caller's pageable array would be staged by the driver, and may
 * wait for the stream.
 *
 * One warp a 4 KiB chunk: lane l holds the 16 bytes at l·16 + j·512 for
 * j = 0..7, so each of the warp's loads is 512 contiguous bytes; a lane
 * loads its pieces in two parts of four, eight loads in flight; the
 * chunk's changes are ordered by warp scans (piece j of every lane before
 * piece j + 1), with no block barrier. A lane's bytes stay in registers:
 * its bytes are picked out with shifts, never by indexing an array (which
 * would put it in local memory).
 *
 * Encoding reads each byte of the two versions once, like the host's:
 *   1. each chunk's changes, offsets and values, into a slot of its own in
 *      the workspace (kSlotChanges changes: 6 % of a chunk, where RL steps
 *      change ~1 %), its count, its part of the new bytes' checksum (a sum
 *      mod 2^64: order does not matter; skipped where the caller knows the
 *      checksum, as a registry that stores one does), and its count added
 *      to its tensor's and its group's totals (a group: kGroupChunks
 *      chunks of one tensor);
 *   2. two blocks a group place it: its chunks' first changes (a block
 *      scan of their counts, after the totals of the tensor's groups
 *      before it), each chunk's slot copied to its place in the delta by
 *      a warp's lanes, a change each (a chunk whose changes overflowed its
 *      slot compares its bytes again and writes them directly), and the
 *      header; or nothing where the delta does not fit.
 * So an encode moves the two versions once plus ~9 bytes a change: about
 * what a copy of one version moves (a read and a write). Step 2 reads
 * only counts and slots. On an H100, a 100 MB version at 1.25 % of its
 * bytes changed: step 1 takes ~75 µs, where reading the two versions
 * alone takes ~64 µs and a copy ~73 µs; step 2 ~9 µs.
 *
 * Applying first checks the whole delta on the GPU (a warp a chunk, one
 * verdict word a delta); the scatter that follows writes only where the
 * verdict is clean, so a malformed delta writes nothing, as on the host.
 */
#include "config.h"

#include "block_sum.cuh"
#include "checksum.h"
#include "common/cuda_util.h"
#include "common/env_config.h"
#include "common/log.h"
#include "delta_internal.h"

#include <cub/block/block_scan.cuh>
#include <cuda_runtime.h>
#include <weft/checksum.h>
#include <weft/delta.h>

#include <cstdint>
#include <cstring>
#include <strings.h>
#include <new>

namespace {

constexpr uint32_t kMagic = 0x31444657u; /* "WFD1", as delta_host.c */
constexpr int      kThreads = 256;       /* a block: 8 warps, a chunk each */
constexpr int      kWarps = kThreads / 32;
constexpr int      kPieceBytes = 16;                                    /* a lane's load */
constexpr int      kPieces = WEFT_DELTA_CHUNK_BYTES / (32 * kPieceBytes); /* a lane's loads a chunk */
static_assert(kPieces * 32 * kPieceBytes == WEFT_DELTA_CHUNK_BYTES, "a warp covers a chunk");
constexpr uint32_t kSlotChanges = 256; /* a chunk's changes kept in the workspace */
constexpr uint64_t kMaxBlocks = 1u << 20; /* beyond, warps take several chunks */

uint64_t chunks_of(uint64_t bytes) { return (bytes + WEFT_DELTA_CHUNK_BYTES - 1) / WEFT_DELTA_CHUNK_BYTES; }
size_t   align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

/* Blocks for a warp a chunk (and at least one). */
unsigned grid_for(uint64_t chunks)
{
    const uint64_t blocks = (chunks + kWarps - 1) / kWarps;
    return static_cast<unsigned>(blocks == 0 ? 1 : blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

/* The last i < n with first[i] <= x, by bisection: first[] is
 * non-decreasing and first[0] <= x (where items' numbered units begin:
 * the tensor of a chunk or of a group). An item with no unit begins
 * where the next does, so the last such i is the one holding x. */
__device__ __forceinline__ uint32_t holder_of(const uint64_t *first, uint32_t n, uint64_t x)
{
    uint32_t lo = 0, hi = n; /* first[lo] <= x < first[hi] */
    while (hi - lo > 1) {
        const uint32_t mid = (lo + hi) / 2;
        if (first[mid] <= x) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/* The batch's chunks numbered one after another: tensor t has chunks
 * start[t] .. start[t + 1] − 1. The tensor of chunk g. */
__device__ __forceinline__ uint32_t tensor_of(const uint64_t *start, uint32_t count, uint64_t g)
{
    return holder_of(start, count, g);
}

/* The chunks a warp takes: its first, and the stride between them. */
__device__ __forceinline__ uint64_t first_chunk() { return static_cast<uint64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; }
__device__ __forceinline__ uint64_t chunk_stride() { return static_cast<uint64_t>(gridDim.x) * kWarps; }

constexpr uint32_t kGroupChunks = kThreads; /* step 2: a block's chunks, a thread each */
constexpr int      kFindParts = 2;         /* step 1: a lane's pieces of a chunk in two parts */
constexpr int      kFindBlocksPerSm = 3;   /* step 1: registers for at least three blocks an SM */
constexpr unsigned kPlaceSplit = 2;        /* step 2: blocks a group */
constexpr unsigned kWarpChunks = kGroupChunks / (kWarps * kPlaceSplit); /* step 2: a warp's chunks */
constexpr int      kPlaceInFlight = 4;     /* step 2: changes a lane copies at a time */
static_assert(kPieces % kFindParts == 0, "parts of equal pieces");
static_assert(kWarpChunks >= 1 && kWarpChunks <= 32, "a warp's chunks, a lane each");

uint64_t groups_of(uint64_t chunks) { return (chunks + kGroupChunks - 1) / kGroupChunks; }

/* A tensor of an encode batch as the kernels take it. */
struct EncodeItem {
    weft_delta_cuda_tensor_t t;
    uint64_t                 checksum; /* the new bytes' checksum, where known */
    uint32_t                 known;    /* 1: checksum is given, not summed */
};

/* A patch of an apply batch as the kernels take it. */
struct ApplyItem {
    weft_delta_cuda_patch_t p;
    uint32_t                rewritten; /* 1: a WT the pair's rewrite writes whole (rewrite_kernel), not scattered */
};

/* The workspace of a batch's encode, carved from one allocation. */
struct EncodeWork {
    EncodeItem         *items;         /* the batch, copied here */
    uint64_t           *start;         /* count + 1: each tensor's first chunk */
    uint64_t           *group_start;   /* count + 1: each tensor's first group */
    unsigned long long *sums;          /* count: the new bytes' checksum sums */
    unsigned long long *totals;        /* count: each tensor's changes */
    unsigned long long *group_totals;  /* a group's changes */
    uint64_t           *counts;        /* a chunk's changes */
    uint16_t           *slot_offsets;  /* kSlotChanges a chunk */
    uint8_t            *slot_values;
};

size_t encode_work_bytes(uint32_t count, uint64_t chunks, uint64_t groups)
{
    return align256(count * sizeof(EncodeItem)) + 2 * align256((count + 1) * 8ull) + 2 * align256(count * 8ull) +
           align256(groups * 8) + align256(chunks * 8) + align256(chunks * kSlotChanges * 2) +
           align256(chunks * kSlotChanges);
}

EncodeWork carve_encode(void *base, uint32_t count, uint64_t chunks, uint64_t groups)
{
    char      *p = static_cast<char *>(base);
    EncodeWork w;
    w.items = reinterpret_cast<EncodeItem *>(p);
    p += align256(count * sizeof(EncodeItem));
    w.start = reinterpret_cast<uint64_t *>(p);
    p += align256((count + 1) * 8ull);
    w.group_start = reinterpret_cast<uint64_t *>(p);
    p += align256((count + 1) * 8ull);
    w.sums = reinterpret_cast<unsigned long long *>(p);
    p += align256(count * 8ull);
    w.totals = reinterpret_cast<unsigned long long *>(p);
    p += align256(count * 8ull);
    w.group_totals = reinterpret_cast<unsigned long long *>(p);
    p += align256(groups * 8);
    w.counts = reinterpret_cast<uint64_t *>(p);
    p += align256(chunks * 8);
    w.slot_offsets = reinterpret_cast<uint16_t *>(p);
    p += align256(chunks * kSlotChanges * 2);
    w.slot_values = reinterpret_cast<uint8_t *>(p);
    return w;
}

/* 16 bytes at `at` of a tensor of `bytes` (zero past its end), streamed:
 * each byte of a version is read once. */
__device__ __forceinline__ uint4 load_piece(const uint8_t *data, uint64_t bytes, uint64_t at, bool vector)
{
    if (vector && at + kPieceBytes <= bytes) {
        return __ldcs(reinterpret_cast<const uint4 *>(data + at));
    }
    uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < kPieceBytes; i++) {
        if (at + i < bytes) {
            w[i / 4] |= static_cast<uint32_t>(data[at + i]) << (8 * (i % 4));
        }
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* Bit i set where byte i of x and y differ (i = 0..3): the top bit of
 * each nonzero byte of x ^ y (no carry crosses a byte), bits 7, 15, 23
 * and 31 gathered into 21..24 by one multiplication (the products' bits
 * 8i + 7j are all distinct). Integer arithmetic: __vcmpne4 is emulated
 * by several instructions on sm_90, and the find step was issue-bound
 * enough for it to show (Nsight Compute: 40 % of issue slots busy, 1440
 * instructions a chunk). */
__device__ __forceinline__ unsigned differing(uint32_t x, uint32_t y)
{
    const uint32_t d = x ^ y;
    const uint32_t top = (((d & 0x7F7F7F7Fu) + 0x7F7F7F7Fu) | d) & 0x80808080u;
    return ((top >> 7) * 0x00204081u) >> 21 & 0xFu;
}

/* Byte i (0..15, not known at compile time) of v, from registers. */
__device__ __forceinline__ uint8_t byte_of(const uint4 &v, int i)
{
    const uint32_t word = i < 8 ? (i < 4 ? v.x : v.y) : (i < 12 ? v.z : v.w);
    return static_cast<uint8_t>(word >> (8 * (i & 3)));
}

__device__ __forceinline__ uint32_t warp_inclusive_sum(uint32_t v, unsigned lane)
{
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
        const uint32_t u = __shfl_up_sync(0xffffffffu, v, d);
        if (lane >= static_cast<unsigned>(d)) {
            v += u;
        }
    }
    return v;
}

__device__ __forceinline__ uint64_t warp_sum(uint64_t v)
{
#pragma unroll
    for (int d = 16; d > 0; d /= 2) {
        v += __shfl_xor_sync(0xffffffffu, v, d);
    }
    return v;
}

/* In-chunk offset of byte i of a lane's piece j. */
__device__ __forceinline__ int piece_offset(int j, unsigned lane) { return j * 32 * kPieceBytes + static_cast<int>(lane) * kPieceBytes; }

/* Piece j of a lane's chunk compared, old bytes a, new b (every lane of
 * the warp calls it, pieces in order): bit i of the result set where
 * byte i changed; *place: where the lane's first change of the piece goes
 * among the chunk's; *ahead: the chunk's changes before the piece, then
 * after it. */
__device__ __forceinline__ unsigned compare_piece(const uint4 &a, const uint4 &b, unsigned lane, uint32_t *ahead,
                                                  uint32_t *place)
{
    const unsigned changed = differing(a.x, b.x) | differing(a.y, b.y) << 4 | differing(a.z, b.z) << 8 |
                             differing(a.w, b.w) << 12;
    const uint32_t n = static_cast<uint32_t>(__popc(changed));
    const uint32_t inclusive = warp_inclusive_sum(n, lane);

    *place = *ahead + inclusive - n;
    *ahead += __shfl_sync(0xffffffffu, inclusive, 31);
    return changed;
}

/* The lane's changes of piece j (new bytes b) into offsets[] and
 * values[] from index place on; InSlot: only those that fit a slot
 * (kSlotChanges). */
template <bool InSlot>
__device__ __forceinline__ void put_piece(unsigned changed, const uint4 &b, int j, unsigned lane, uint32_t place,
                                          uint16_t *offsets, uint8_t *values)
{
    for (unsigned m = changed; m != 0 && (!InSlot || place < kSlotChanges); m &= m - 1) {
        const int i = __ffs(static_cast<int>(m)) - 1;
        offsets[place] = static_cast<uint16_t>(piece_offset(j, lane) + i);
        values[place] = byte_of(b, i);
        place++;
    }
}

/* A lane's part of one chunk: its new bytes, which of them changed, and
 * where its changes go among the chunk's (in offset order). */
struct LaneChunk {
    uint4    fresh[kPieces];   /* the new bytes */
    unsigned changed[kPieces]; /* bit i: byte i of piece j differs */
    uint32_t before[kPieces];  /* the chunk's changes ahead of piece j's */
    uint32_t total;            /* the chunk's changes (every lane) */
};

/* Compares chunk k of t (the whole warp calls it). */
__device__ __forceinline__ void compare_chunk(const weft_delta_cuda_tensor_t &t, uint64_t k, unsigned lane,
                                              LaneChunk *c)
{
    const uint8_t *old_data = static_cast<const uint8_t *>(t.old_data);
    const uint8_t *new_data = static_cast<const uint8_t *>(t.new_data);
    const bool     vector = ((reinterpret_cast<uintptr_t>(old_data) | reinterpret_cast<uintptr_t>(new_data)) & 15) == 0;
    const uint64_t chunk_at = k * WEFT_DELTA_CHUNK_BYTES;
    uint4          stale[kPieces];
    uint32_t       ahead = 0;

#pragma unroll
    for (int j = 0; j < kPieces; j++) { /* every load issued before any is used */
        stale[j] = load_piece(old_data, t.bytes, chunk_at + piece_offset(j, lane), vector);
        c->fresh[j] = load_piece(new_data, t.bytes, chunk_at + piece_offset(j, lane), vector);
    }
#pragma unroll
    for (int j = 0; j < kPieces; j++) {
        c->changed[j] = compare_piece(stale[j], c->fresh[j], lane, &ahead, &c->before[j]);
    }
    c->total = ahead;
}

/* Writes a lane's changes of the chunk into offsets[] and values[] (the
 * chunk's first change at index 0). */
__device__ __forceinline__ void put_changes(const LaneChunk &c, unsigned lane, uint16_t *offsets, uint8_t *values)
{
#pragma unroll
    for (int j = 0; j < kPieces; j++) {
        put_piece<false>(c.changed[j], c.fresh[j], j, lane, c.before[j], offsets, values);
    }
}

/* 16 bytes of a version, streamed past L1. The asm has no memory
 * clobber on purpose: the versions do not change while an encode runs,
 * so the compiler may issue a part's loads ahead of the slot stores of
 * the part before (with __ldcs it may not, as a store might alias). */
__device__ __forceinline__ uint4 load_version_piece(const uint8_t *data, uint64_t bytes, uint64_t at, bool vector)
{
    if (vector && at + kPieceBytes <= bytes) {
        uint4 v;
        asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
            : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
            : "l"(data + at));
        return v;
    }
    return load_piece(data, bytes, at, false);
}

/* Step 1 for chunk g: its changes into its slot, its count, its part of
 * its tensor's checksum (unless known), and its tensor's and group's
 * totals. A lane's pieces are taken in kFindParts parts, each part's
 * loads issued together and its changes written as soon as they are
 * placed (a change's place never depends on a later part): about half
 * the registers of holding a lane's whole chunk (64 against 117), so
 * three or four blocks fit an SM instead of two, and more of the
 * versions' bytes are in flight. */
__device__ __forceinline__ void find_chunk(const EncodeWork &w, uint32_t count, uint64_t g, unsigned lane)
{
    constexpr int     kPartPieces = kPieces / kFindParts;
    const uint32_t    ti = tensor_of(w.start, count, g);
    const EncodeItem &item = w.items[ti];
    const uint8_t    *old_data = static_cast<const uint8_t *>(item.t.old_data);
    const uint8_t    *new_data = static_cast<const uint8_t *>(item.t.new_data);
    const uint64_t    bytes = item.t.bytes, k = g - w.start[ti], chunk_at = k * WEFT_DELTA_CHUNK_BYTES;
    const bool        sum_it = item.known == 0;
    const bool vector = ((reinterpret_cast<uintptr_t>(old_data) | reinterpret_cast<uintptr_t>(new_data)) & 15) == 0;
    /* A whole aligned chunk (all but a tensor's last, as a rule): its
     * loads at constant offsets from one address, no bounds checks. */
    const bool        whole = vector && chunk_at + WEFT_DELTA_CHUNK_BYTES <= bytes;
    const uint8_t    *lane_old = old_data + chunk_at + lane * kPieceBytes;
    const uint8_t    *lane_new = new_data + chunk_at + lane * kPieceBytes;
    uint16_t         *offsets = w.slot_offsets + g * kSlotChanges;
    uint8_t          *values = w.slot_values + g * kSlotChanges;
    uint32_t          ahead = 0; /* the chunk's changes in the pieces before */
    uint64_t          sum = 0;

#pragma unroll
    for (int part = 0; part < kFindParts; part++) {
        uint4 stale[kPartPieces], fresh[kPartPieces];
#pragma unroll
        for (int q = 0; q < kPartPieces; q++) {
            const int j = part * kPartPieces + q;
            if (whole) {
                stale[q] = load_version_piece(lane_old + j * 32 * kPieceBytes, kPieceBytes, 0, true);
                fresh[q] = load_version_piece(lane_new + j * 32 * kPieceBytes, kPieceBytes, 0, true);
            } else {
                const uint64_t at = chunk_at + piece_offset(j, lane);
                stale[q] = load_version_piece(old_data, bytes, at, vector);
                fresh[q] = load_version_piece(new_data, bytes, at, vector);
            }
        }
#pragma unroll
        for (int q = 0; q < kPartPieces; q++) {
            const int      j = part * kPartPieces + q;
            const uint4    a = stale[q], b = fresh[q];
            uint32_t       place;
            const unsigned changed = compare_piece(a, b, lane, &ahead, &place);

            if (sum_it) {
                const uint64_t at = chunk_at + piece_offset(j, lane);
                if (at < bytes) {
                    sum += weft_checksum_term(b.x | static_cast<uint64_t>(b.y) << 32, at / 8);
                }
                if (at + 8 < bytes) {
                    sum += weft_checksum_term(b.z | static_cast<uint64_t>(b.w) << 32, at / 8 + 1);
                }
            }
            /* Past the slot's end the chunk has overflowed: step 2
             * compares it again, so the rest is not kept. */
            put_piece<true>(changed, b, j, lane, place, offsets, values);
        }
    }
    if (sum_it) {
        sum = warp_sum(sum);
    }
    if (lane == 0) {
        w.counts[g] = ahead;
        if (sum_it) {
            atomicAdd(&w.sums[ti], static_cast<unsigned long long>(sum));
        }
        if (ahead != 0) {
            atomicAdd(&w.totals[ti], static_cast<unsigned long long>(ahead));
            atomicAdd(&w.group_totals[w.group_start[ti] + k / kGroupChunks], static_cast<unsigned long long>(ahead));
        }
    }
}

/* Step 1: a warp a chunk. */
__global__ void __launch_bounds__(kThreads, kFindBlocksPerSm) find_kernel(EncodeWork w, uint32_t count, uint64_t chunks)
{
    const unsigned lane = threadIdx.x & 31;

    for (uint64_t g = first_chunk(); g < chunks; g += chunk_stride()) {
        find_chunk(w, count, g, lane);
    }
}

/* Step 2: kPlaceSplit blocks a group of kGroupChunks chunks of one
 * tensor. Each block takes the group's first changes (a block scan of
 * its chunks' counts, after the totals of the tensor's groups before
 * it); its warps each copy the changes of kWarpChunks consecutive chunks
 * from their slots, a lane a change, in order; chunks whose changes
 * overflowed their slots are compared again. The group's first block
 * writes its chunks' first changes; the tensor's first group's, the
 * header and size, or a size of 0 where the delta does not fit in its
 * capacity (nothing written then). */
__global__ void __launch_bounds__(kThreads) place_kernel(EncodeWork w, uint32_t count, uint64_t groups,
                                                         uint64_t *out_bytes)
{
    using Scan = cub::BlockScan<unsigned long long, kThreads>;
    __shared__ typename Scan::TempStorage scan;
    __shared__ unsigned long long         carry_shared;
    __shared__ uint32_t                   locals[kGroupChunks + 1]; /* each chunk's first change in the group, and the group's changes */
    __shared__ uint32_t                   ns[kGroupChunks];
    const unsigned                        lane = threadIdx.x & 31, warp = threadIdx.x / 32;

    for (uint64_t unit = blockIdx.x; unit < groups * kPlaceSplit; unit += gridDim.x) {
        const uint64_t                  group = unit / kPlaceSplit;
        const unsigned                  split = static_cast<unsigned>(unit % kPlaceSplit);
        const uint32_t                  ti = tensor_of(w.group_start, count, group);
        const EncodeItem               &item = w.items[ti];
        const weft_delta_cuda_tensor_t &t = item.t;
        const uint64_t                  tchunks = w.start[ti + 1] - w.start[ti], first_group = w.group_start[ti];
        const uint64_t                  k0 = (group - first_group) * kGroupChunks, changes = w.totals[ti];
        const uint64_t                  size = WEFT_DELTA_HEADER_BYTES + 4 * tchunks + 3 * changes;

        if (size > t.out_capacity || changes > UINT32_MAX) {
            if (group == first_group && split == 0 && threadIdx.x == 0) {
                out_bytes[ti] = 0;
            }
            continue; /* the same for the whole block */
        }
        uint8_t  *out = static_cast<uint8_t *>(t.out);
        uint32_t *first = reinterpret_cast<uint32_t *>(out + WEFT_DELTA_HEADER_BYTES);
        uint16_t *offsets = reinterpret_cast<uint16_t *>(out + WEFT_DELTA_HEADER_BYTES + 4 * tchunks);
        uint8_t  *values = out + WEFT_DELTA_HEADER_BYTES + 4 * tchunks + 2 * changes;

        if (group == first_group && split == 0 && threadIdx.x == 0) {
            uint32_t *h32 = reinterpret_cast<uint32_t *>(out);
            uint64_t *h64 = reinterpret_cast<uint64_t *>(out);
            h32[0] = kMagic;
            h32[1] = WEFT_DELTA_CHUNK_BYTES;
            h64[1] = t.bytes;
            h64[2] = changes;
            h64[3] = item.known != 0 ? item.checksum : weft_checksum_final(w.sums[ti], t.bytes);
            out_bytes[ti] = size;
        }
        if (warp == 0) { /* the changes of the tensor's groups before this one */
            unsigned long long before = 0;
            for (uint64_t q = first_group + lane; q < group; q += 32) {
                before += w.group_totals[q];
            }
            before = warp_sum(before);
            if (lane == 0) {
                carry_shared = before;
            }
        }
        const uint64_t     k = k0 + threadIdx.x;
        const uint32_t     n = k < tchunks ? static_cast<uint32_t>(w.counts[w.start[ti] + k]) : 0;
        unsigned long long local = 0, group_changes = 0;
        Scan(scan).ExclusiveSum(static_cast<unsigned long long>(n), local, group_changes);
        __syncthreads(); /* carry */
        const unsigned long long carry = carry_shared;
        if (split == 0 && k < tchunks) {
            first[k] = static_cast<uint32_t>(carry + local);
        }
        locals[threadIdx.x] = static_cast<uint32_t>(local); /* at most kGroupChunks · 4096 */
        ns[threadIdx.x] = n;
        if (threadIdx.x == 0) {
            locals[kGroupChunks] = static_cast<uint32_t>(group_changes);
        }
        __syncthreads();

        /* The warp's chunks c0 .. c0 + kWarpChunks − 1, their first
         * changes held a lane each; change p's chunk is found among them
         * by a bisection of shuffles. A thread a change with a bisection
         * through shared memory per change, or a warp a chunk at a time,
         * each took 3–4 × as long. */
        const unsigned c0 = (split * kWarps + warp) * kWarpChunks;
        const uint32_t lane_start = lane < kWarpChunks ? locals[c0 + lane] : UINT32_MAX;
        const uint32_t run_end = locals[c0 + kWarpChunks];
        const uint64_t slot0 = (w.start[ti] + k0 + c0) * kSlotChanges;
        for (uint32_t p0 = locals[c0] + lane; __any_sync(0xffffffffu, p0 < run_end); p0 += 32 * kPlaceInFlight) {
            uint16_t o[kPlaceInFlight];
            uint8_t  v[kPlaceInFlight];
            bool     copy[kPlaceInFlight];
#pragma unroll
            for (int u = 0; u < kPlaceInFlight; u++) {
                const uint32_t p = p0 + 32 * u;
                unsigned       c = 0; /* the last of the warp's chunks starting at or before p */
#pragma unroll
                for (unsigned step = 16; step > 0; step /= 2) {
                    const uint32_t s = __shfl_sync(0xffffffffu, lane_start, (c + step) & 31);
                    if (c + step < kWarpChunks && s <= p) {
                        c += step;
                    }
                }
                const uint32_t c_start = __shfl_sync(0xffffffffu, lane_start, c);
                copy[u] = p < run_end && ns[c0 + c] <= kSlotChanges;
                if (copy[u]) {
                    o[u] = w.slot_offsets[slot0 + c * kSlotChanges + (p - c_start)];
                    v[u] = w.slot_values[slot0 + c * kSlotChanges + (p - c_start)];
                }
            }
#pragma unroll
            for (int u = 0; u < kPlaceInFlight; u++) {
                if (copy[u]) {
                    offsets[carry + p0 + 32 * u] = o[u];
                    values[carry + p0 + 32 * u] = v[u];
                }
            }
        }
        /* Chunks whose changes overflowed their slots: compared again. */
        for (uint32_t i = warp * kPlaceSplit + split; i < kGroupChunks && k0 + i < tchunks; i += kWarps * kPlaceSplit) {
            if (ns[i] > kSlotChanges) {
                LaneChunk c;
                compare_chunk(t, k0 + i, lane, &c);
                put_changes(c, lane, offsets + carry + locals[i], values + carry + locals[i]);
            }
        }
        __syncthreads(); /* the shared arrays, before the next unit */
    }
}

/*
 * The batch, in pieces that fit a launch's parameters (CUDA 12.1 and
 * later take 32,764 bytes of them on every GPU libweft builds for): items
 * first .. first + n − 1 and their chunk starts (n + 1 of them).
 */
template <typename T, uint32_t Items> struct BatchPiece {
    static constexpr uint32_t kItems = Items;
    uint32_t                  first, n;
    T                         items[Items];
    uint64_t                  starts[Items + 1];
    uint64_t                  group_starts[Items + 1]; /* each item's first group of kGroupChunks chunks */
};
/* A small piece stays within the 4 KB of parameters of older CUDA. */
template <typename T> using SmallPiece = BatchPiece<T, (4 * 1024 - 256 - 24) / (sizeof(T) + 16) - 1>;
template <typename T> using LargePiece = BatchPiece<T, (24 * 1024 - 24) / (sizeof(T) + 16) - 1>;
static_assert(sizeof(SmallPiece<EncodeItem>) <= 4 * 1024 - 256, "a small piece within 4 KB of parameters");
static_assert(sizeof(SmallPiece<ApplyItem>) <= 4 * 1024 - 256, "a small piece within 4 KB of parameters");
static_assert(sizeof(LargePiece<ApplyItem>) <= 24 * 1024, "a piece within a launch's parameters");
static_assert(sizeof(LargePiece<EncodeItem>) <= 24 * 1024, "a piece within a launch's parameters");

/* An encode batch's piece into the workspace; each tensor's sums and
 * totals zeroed, and a tensor of no bytes (no chunk, so no warp of steps
 * 1 and 2) given its header alone. */
template <typename Piece>
__global__ void upload_tensors_kernel(const __grid_constant__ Piece piece, EncodeWork w, uint64_t *out_bytes)
{
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i > piece.n) {
        return;
    }
    w.start[piece.first + i] = piece.starts[i];
    w.group_start[piece.first + i] = piece.group_starts[i];
    if (i == piece.n) {
        return;
    }
    const uint32_t    ti = piece.first + i;
    const EncodeItem &item = piece.items[i];
    w.items[ti] = item;
    w.sums[ti] = 0;
    w.totals[ti] = 0;
    for (uint64_t q = piece.group_starts[i]; q < piece.group_starts[i + 1]; q++) {
        w.group_totals[q] = 0;
    }
    if (item.t.bytes == 0) {
        uint32_t *h32 = reinterpret_cast<uint32_t *>(item.t.out);
        uint64_t *h64 = reinterpret_cast<uint64_t *>(item.t.out);
        h32[0] = kMagic;
        h32[1] = WEFT_DELTA_CHUNK_BYTES;
        h64[1] = 0;
        h64[2] = 0;
        h64[3] = item.known != 0 ? item.checksum : weft_checksum_final(0, 0);
        out_bytes[ti] = WEFT_DELTA_HEADER_BYTES;
    }
}

/* What check_kernel may find wrong: bits of the verdict word. */
enum : unsigned {
    kBadIndex = 1u,   /* a chunk's first change out of order */
    kBadOffset = 2u,  /* an offset out of its chunk or out of order */
    kBadMagic = 4u,   /* not a delta */
    kBadVersion = 8u, /* a delta of another layout version */
    kBadTensor = 16u, /* its chunk or tensor size is not the target's */
    kBadCount = 32u,  /* its size does not match its change count */
    kBadSum = WEFT_DELTA_VERDICT_SUM, /* applied, but the target does not sum to the checksum it carries */
};

/* The header's verdict (0: sound) for a target of tensor_bytes. */
__device__ __forceinline__ unsigned header_verdict(const uint8_t *delta, uint64_t delta_bytes, uint64_t tensor_bytes)
{
    if (delta_bytes < WEFT_DELTA_HEADER_BYTES) {
        return kBadCount;
    }
    const uint32_t *h32 = reinterpret_cast<const uint32_t *>(delta);
    const uint64_t *h64 = reinterpret_cast<const uint64_t *>(delta);
    const uint64_t  chunks = (tensor_bytes + WEFT_DELTA_CHUNK_BYTES - 1) / WEFT_DELTA_CHUNK_BYTES;

    if (h32[0] != kMagic) {
        return (h32[0] & 0x00FFFFFFu) == (kMagic & 0x00FFFFFFu) ? kBadVersion : kBadMagic;
    }
    if (h32[1] != WEFT_DELTA_CHUNK_BYTES || h64[1] != tensor_bytes) {
        return kBadTensor;
    }
    if (h64[2] > tensor_bytes || delta_bytes != WEFT_DELTA_HEADER_BYTES + 4 * chunks + 3 * h64[2]) {
        return kBadCount;
    }
    return 0;
}

/* The workspace of a batch's apply. */
struct ApplyWork {
    ApplyItem *patches; /* the batch, copied here */
    uint64_t  *start;   /* count + 1: each patch's first chunk */
};

size_t apply_work_bytes(uint32_t count)
{
    return align256(count * sizeof(ApplyItem)) + align256((count + 1) * 8ull);
}

ApplyWork carve_apply(void *base, uint32_t count)
{
    char     *p = static_cast<char *>(base);
    ApplyWork w;
    w.patches = reinterpret_cast<ApplyItem *>(p);
    p += align256(count * sizeof(ApplyItem));
    w.start = reinterpret_cast<uint64_t *>(p);
    return w;
}

/* An apply batch's piece into the workspace, each verdict zeroed. */
template <typename Piece>
__global__ void upload_patches_kernel(const __grid_constant__ Piece piece, ApplyWork w, unsigned *verdicts)
{
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i > piece.n) {
        return;
    }
    w.start[piece.first + i] = piece.starts[i];
    if (i < piece.n) {
        w.patches[piece.first + i] = piece.items[i];
        verdicts[piece.first + i] = 0;
    }
}

/* The entries of chunk k of a sound delta: changes begin .. end − 1. */
struct ChunkEntries {
    const uint16_t *offsets;
    const uint8_t  *values;
    uint64_t        begin, end, changes;
};

__device__ __forceinline__ ChunkEntries entries_of(const uint8_t *delta, uint64_t k, uint64_t tchunks)
{
    const uint64_t  changes = reinterpret_cast<const uint64_t *>(delta)[2];
    const uint32_t *first = reinterpret_cast<const uint32_t *>(delta + WEFT_DELTA_HEADER_BYTES);
    ChunkEntries    e;
    e.offsets = reinterpret_cast<const uint16_t *>(delta + WEFT_DELTA_HEADER_BYTES + 4 * tchunks);
    e.values = delta + WEFT_DELTA_HEADER_BYTES + 4 * tchunks + 2 * changes;
    e.begin = first[k];
    e.end = k + 1 < tchunks ? first[k + 1] : changes;
    e.changes = changes;
    return e;
}

/* Every patch's header, index and offsets checked: verdicts[t] gets the
 * bits of what is wrong with patch t (0: nothing). Entries are read only
 * once the header says how many there are. Patches without a chunk have
 * their header checked by one thread each. */
__global__ void __launch_bounds__(kThreads) check_kernel(ApplyWork w, uint32_t count, uint64_t chunks,
                                                         unsigned *verdicts)
{
    const unsigned lane = threadIdx.x & 31;

    for (uint32_t ti = blockIdx.x * blockDim.x + threadIdx.x; ti < count; ti += gridDim.x * blockDim.x) {
        const weft_delta_cuda_patch_t &p = w.patches[ti].p;
        const unsigned                 v = header_verdict(static_cast<const uint8_t *>(p.delta), p.delta_bytes,
                                                          p.target.tensor_bytes);
        if (v != 0) {
            atomicOr(&verdicts[ti], v);
        }
    }
    for (uint64_t g = first_chunk(); g < chunks; g += chunk_stride()) {
        const uint32_t ti = tensor_of(w.start, count, g);
        if (w.patches[ti].rewritten != 0) {
            continue; /* its W's delta, checked there: rewrite_kernel copies that verdict */
        }
        const weft_delta_cuda_patch_t &p = w.patches[ti].p;
        const uint8_t                 *delta = static_cast<const uint8_t *>(p.delta);
        const uint64_t                 tensor_bytes = p.target.tensor_bytes, k = g - w.start[ti];

        if (header_verdict(delta, p.delta_bytes, tensor_bytes) != 0) {
            continue;
        }
        const ChunkEntries e = entries_of(delta, k, w.start[ti + 1] - w.start[ti]);
        const uint64_t     start = k * WEFT_DELTA_CHUNK_BYTES;
        const uint64_t n = tensor_bytes - start < WEFT_DELTA_CHUNK_BYTES ? tensor_bytes - start : WEFT_DELTA_CHUNK_BYTES;
        if ((k == 0 && e.begin != 0) || e.begin > e.end || e.end > e.changes || e.end - e.begin > n) {
            if (lane == 0) {
                atomicOr(&verdicts[ti], kBadIndex);
            }
            continue;
        }
        bool bad = false;
        for (uint64_t j = e.begin + lane; j < e.end; j += 32) {
            bad |= e.offsets[j] >= n || (j > e.begin && e.offsets[j] <= e.offsets[j - 1]);
        }
        if (__any_sync(0xffffffffu, bad) && lane == 0) {
            atomicOr(&verdicts[ti], kBadOffset);
        }
    }
}

/*
 * A transposed target's offsets without a 64-bit division a change
 * (emulated, ~100 instructions, three of them in weft_delta_target_offset):
 * the chunk's first byte is placed once (matrix, row r0, column c0 of W),
 * and a change `offset` bytes further is column c0 + offset carried into
 * the rows below, a few subtractions where W's rows are at least
 * kSteppedCols bytes (a chunk spans at most 4096 / kSteppedCols + 1 of
 * them). Narrower matrices take the general formula.
 */
constexpr uint64_t kSteppedCols = 512;

struct TransposedStart {
    uint64_t matrix;  /* the first byte of the chunk's first matrix */
    uint64_t r0, c0;  /* the chunk's first byte in it: W's row and column */
};

__device__ __forceinline__ TransposedStart transposed_start(const weft_delta_target_t &t, uint64_t pos)
{
    const uint64_t in = pos % (t.transpose_rows * t.transpose_cols);
    return TransposedStart{pos - in, in / t.transpose_cols, in % t.transpose_cols};
}

__device__ __forceinline__ uint64_t transposed_offset(const weft_delta_target_t &t, const TransposedStart &at,
                                                      uint64_t offset)
{
    const uint64_t n = t.transpose_rows, k = t.transpose_cols;
    uint64_t       matrix = at.matrix, r = at.r0, c = at.c0 + offset;

    while (c >= k) {
        c -= k;
        r++;
    }
    while (r >= n) { /* the chunk goes on into the next matrix */
        r -= n;
        matrix += n * k;
    }
    return weft_delta_row_offset(&t, matrix + c * n + r); /* WT's byte */
}

/* The scatter, for the patches check_kernel found nothing wrong with. */
__global__ void __launch_bounds__(kThreads) apply_kernel(ApplyWork w, uint32_t count, uint64_t chunks,
                                                         const unsigned *verdicts)
{
    const unsigned lane = threadIdx.x & 31;

    for (uint64_t g = first_chunk(); g < chunks; g += chunk_stride()) {
        const uint32_t ti = tensor_of(w.start, count, g);
        if (verdicts[ti] != 0 || w.patches[ti].rewritten != 0) {
            continue;
        }
        const weft_delta_cuda_patch_t &p = w.patches[ti].p;
        const weft_delta_target_t     &t = p.target;
        const uint64_t                 k = g - w.start[ti];
        const ChunkEntries             e = entries_of(static_cast<const uint8_t *>(p.delta), k,
                                                      w.start[ti + 1] - w.start[ti]);
        uint8_t                       *data = static_cast<uint8_t *>(t.data);
        const bool                     contiguous = t.row_stride == t.row_bytes && t.transpose_rows == 0;

        if (t.transpose_cols >= kSteppedCols) {
            const TransposedStart at = transposed_start(t, k * WEFT_DELTA_CHUNK_BYTES);
            for (uint64_t j = e.begin + lane; j < e.end; j += 32) {
                data[transposed_offset(t, at, e.offsets[j])] = e.values[j];
            }
            continue;
        }
        for (uint64_t j = e.begin + lane; j < e.end; j += 32) {
            const uint64_t pos = k * WEFT_DELTA_CHUNK_BYTES + e.offsets[j];
            data[contiguous ? pos : weft_delta_target_offset(&t, pos)] = e.values[j];
        }
    }
}

/* Logical bytes [pos, pos + n) of a target (n ≤ 8, inside the tensor)
 * as a little-endian word, the last partial one zero-padded: one load
 * where the word lies aligned inside a row, bytes gathered otherwise. */
__device__ __forceinline__ uint64_t target_word(const weft_delta_target_t &t, uint64_t pos, uint64_t n)
{
    const uint8_t *data = static_cast<const uint8_t *>(t.data);
    const uint64_t col = pos % t.row_bytes;
    const uint8_t *at = data + pos / t.row_bytes * t.row_stride + col;

    if (n == 8 && col + 8 <= t.row_bytes && (reinterpret_cast<uintptr_t>(at) & 7) == 0) {
        return *reinterpret_cast<const uint64_t *>(at);
    }
    uint64_t word = 0;
    for (uint64_t b = 0; b < n; b++) {
        const uint64_t q = pos + b;
        word |= static_cast<uint64_t>(data[q / t.row_bytes * t.row_stride + q % t.row_bytes]) << (8 * b);
    }
    return word;
}

/* The checksum terms of each applied target, read back after the
 * scatter, a warp a chunk (a chunk is whole words: 4096 is a multiple of
 * 8), into sums[t] (zeroed before). */
__global__ void __launch_bounds__(kThreads) sum_kernel(ApplyWork w, uint32_t count, uint64_t chunks,
                                                       const unsigned *verdicts, unsigned long long *sums)
{
    const unsigned lane = threadIdx.x & 31;

    for (uint64_t g = first_chunk(); g < chunks; g += chunk_stride()) {
        const uint32_t ti = tensor_of(w.start, count, g);
        if (verdicts[ti] != 0) {
            continue;
        }
        const weft_delta_target_t &t = w.patches[ti].p.target;
        const uint64_t             start = (g - w.start[ti]) * WEFT_DELTA_CHUNK_BYTES;
        const uint64_t n = t.tensor_bytes - start < WEFT_DELTA_CHUNK_BYTES ? t.tensor_bytes - start : WEFT_DELTA_CHUNK_BYTES;
        uint64_t       local = 0;

        for (uint64_t at = 8 * lane; at < n; at += 8 * 32) {
            local += weft_checksum_term(target_word(t, start + at, n - at < 8 ? n - at : 8), (start + at) / 8);
        }
        for (int offset = 16; offset > 0; offset /= 2) {
            local += __shfl_down_sync(0xffffffffu, local, offset);
        }
        if (lane == 0) {
            atomicAdd(&sums[ti], static_cast<unsigned long long>(local));
        }
    }
}

/* Each applied target's checksum finished, and compared with the one its
 * delta carries (header word 3): kBadSum where they differ. Not for a
 * transposed target: its delta carries W's, and the caller compares. */
__global__ void sum_verdict_kernel(ApplyWork w, uint32_t count, unsigned *verdicts, unsigned long long *sums)
{
    const uint32_t ti = blockIdx.x * blockDim.x + threadIdx.x;
    if (ti >= count || verdicts[ti] != 0) {
        return;
    }
    const weft_delta_cuda_patch_t &p = w.patches[ti].p;
    const uint64_t                 sum = weft_checksum_final(sums[ti], p.target.tensor_bytes);
    sums[ti] = sum;
    if (p.target.transpose_rows == 0 && sum != reinterpret_cast<const uint64_t *>(p.delta)[3]) {
        verdicts[ti] = kBadSum;
    }
}

#include "delta_rewrite.cuh" /* rewrite_kernel, RewriteBatch: a dense pair's WT written whole */

/*
 * Enqueues the batch's pieces into the workspace (Kernel's launch for
 * each, small or large pieces as the batch needs). The host array may go
 * once this returns.
 */
template <template <typename> class Kernel, typename T, typename Item, typename Bytes, typename... Args>
weft_status_t upload(Item item_at, uint32_t count, Bytes bytes_of, cudaStream_t st, Args... args)
{
    LargePiece<T> *large = nullptr;
    uint64_t       start = 0, group = 0;
    weft_status_t  status = WEFT_OK;

    /* A piece's items and where their chunks and groups start. */
    auto fill = [&](auto &piece, uint32_t first, uint32_t n) {
        piece.first = first;
        piece.n = n;
        for (uint32_t i = 0; i < n; i++) {
            const uint64_t chunks = chunks_of(bytes_of(item_at(first + i)));
            piece.items[i] = item_at(first + i);
            piece.starts[i] = start;
            piece.group_starts[i] = group;
            start += chunks;
            group += groups_of(chunks);
        }
        piece.starts[n] = start;
        piece.group_starts[n] = group;
    };
    for (uint32_t first = 0; first < count && status == WEFT_OK;) {
        const uint32_t left = count - first;
        if (left <= SmallPiece<T>::kItems) {
            SmallPiece<T> piece;
            fill(piece, first, left);
            Kernel<SmallPiece<T>>::launch(piece, st, args...);
            first += left;
        } else {
            if (large == nullptr && (large = new (std::nothrow) LargePiece<T>) == nullptr) {
                return WEFT_ERR_NO_MEMORY;
            }
            const uint32_t n = left < LargePiece<T>::kItems ? left : LargePiece<T>::kItems;
            fill(*large, first, n);
            Kernel<LargePiece<T>>::launch(*large, st, args...);
            first += n;
        }
        status = WEFT_CUDA_CHECK(cudaGetLastError());
    }
    delete large;
    return status;
}

template <typename Piece> struct UploadTensors {
    static void launch(const Piece &piece, cudaStream_t st, EncodeWork w, uint64_t *out_bytes)
    {
        upload_tensors_kernel<Piece><<<(piece.n + 1 + 255) / 256, 256, 0, st>>>(piece, w, out_bytes);
    }
};

template <typename Piece> struct UploadPatches {
    static void launch(const Piece &piece, cudaStream_t st, ApplyWork w, unsigned *verdicts)
    {
        upload_patches_kernel<Piece><<<(piece.n + 1 + 255) / 256, 256, 0, st>>>(piece, w, verdicts);
    }
};

} // namespace

/* What a verdict word says, for the log. */
static const char *verdict_why(unsigned v)
{
    return (v & kBadMagic) != 0     ? "not a delta (magic)"
           : (v & kBadVersion) != 0 ? "another layout version"
           : (v & kBadTensor) != 0  ? "its chunk or tensor size is not this tensor's"
           : (v & kBadCount) != 0   ? "its size does not match its change count"
           : (v & kBadIndex) != 0   ? "its chunk index is out of order"
           : (v & kBadSum) != 0     ? "applied, the target does not sum to the checksum the delta carries"
                                    : "an offset is out of its chunk or out of order";
}

static bool target_sound(const weft_delta_target_t *t) { return weft_delta_target_sound(t) != 0; }

static uint64_t item_bytes_of(const EncodeItem &item) { return item.t.bytes; }
static uint64_t patch_bytes_of(const ApplyItem &item) { return item.p.target.tensor_bytes; }

/*
 * Whether patch i is a WT that its pair's rewrite writes (rewrite_kernel):
 * the patch before it is its W's (the same delta, not transposed), both
 * contiguous and 16-byte aligned, in matrices whose sides are multiples
 * of the tile, and the delta dense enough for a transpose to beat the
 * scatter (its change count from its size; a size that does not match is
 * refused by check_kernel, and the pair then writes nothing).
 */
static bool rewritten_wt(const weft_delta_cuda_patch_t *patches, uint32_t i)
{
    if (i == 0) {
        return false;
    }
    const weft_delta_cuda_patch_t &w = patches[i - 1], &wt = patches[i];
    const weft_delta_target_t     &a = w.target, &b = wt.target;
    const uint64_t                 index = WEFT_DELTA_HEADER_BYTES + 4 * chunks_of(a.tensor_bytes);

    if (b.transpose_rows == 0 || a.transpose_rows != 0 || w.delta != wt.delta || w.delta_bytes != wt.delta_bytes ||
        a.tensor_bytes != b.tensor_bytes || a.data == b.data || a.tensor_bytes == 0) {
        return false;
    }
    const uintptr_t addresses = reinterpret_cast<uintptr_t>(a.data) | reinterpret_cast<uintptr_t>(b.data);
    if (a.row_stride != a.row_bytes || b.row_stride != b.row_bytes || b.transpose_rows % kRewriteTile != 0 ||
        b.transpose_cols % kRewriteTile != 0 || (addresses & 15) != 0) {
        return false;
    }
    return w.delta_bytes >= index && (w.delta_bytes - index) / 3 * kRewriteBytesPerChange >= a.tensor_bytes;
}

/* WEFT_DELTA_WT_REWRITE: whether dense pairs are rewritten (auto) or
 * scattered like any transposed target (off, the default until the
 * rewrite has been measured against the scatter on a GPU). */
static bool rewrite_enabled(void)
{
    const char *value = weft_config_value(WEFT_CONFIG_DELTA_WT_REWRITE);

    if (strcasecmp(value, "auto") == 0) {
        return true;
    }
    if (strcasecmp(value, "off") != 0) {
        weft_log_error("WEFT_DELTA_WT_REWRITE=%s: expected off or auto; taken as off", value);
    }
    return false;
}

/* Enqueues the rewrite of each pair's WT, kRewritePairs pairs a launch. */
static weft_status_t enqueue_rewrites(const weft_delta_cuda_patch_t *patches, uint32_t count, unsigned *verdicts,
                                      cudaStream_t st)
{
    RewriteBatch *batch = new (std::nothrow) RewriteBatch;
    weft_status_t status = WEFT_OK;

    if (batch == nullptr) {
        return WEFT_ERR_NO_MEMORY;
    }
    batch->count = 0;
    batch->tiles = 0;
    for (uint32_t i = 1; i <= count && status == WEFT_OK; i++) {
        if (i < count && rewritten_wt(patches, i)) {
            const weft_delta_target_t &wt = patches[i].target;
            batch->pairs[batch->count++] = RewritePair{static_cast<const uint8_t *>(patches[i - 1].target.data),
                                                       static_cast<uint8_t *>(wt.data),
                                                       wt.transpose_rows,
                                                       wt.transpose_cols,
                                                       batch->tiles,
                                                       i - 1,
                                                       i};
            batch->tiles += wt.tensor_bytes / (kRewriteTile * kRewriteTile);
        }
        if (batch->count > 0 && (batch->count == kRewritePairs || i == count)) {
            const uint64_t blocks = batch->tiles < kMaxBlocks ? batch->tiles : kMaxBlocks;
            rewrite_kernel<<<static_cast<unsigned>(blocks), kRewriteThreads, 0, st>>>(*batch, verdicts);
            status = WEFT_CUDA_CHECK(cudaGetLastError());
            batch->count = 0;
            batch->tiles = 0;
        }
    }
    delete batch;
    return status;
}

/* A batch's chunks and groups. */
static void batch_units(const weft_delta_cuda_tensor_t *tensors, uint32_t count, uint64_t *chunks, uint64_t *groups)
{
    *chunks = 0;
    *groups = 0;
    for (uint32_t i = 0; tensors != nullptr && i < count; i++) {
        const uint64_t c = chunks_of(tensors[i].bytes);
        *chunks += c;
        *groups += groups_of(c);
    }
}

extern "C" size_t weft_delta_cuda_encode_work_bytes(const weft_delta_cuda_tensor_t *tensors, uint32_t count)
{
    uint64_t chunks, groups;
    batch_units(tensors, count, &chunks, &groups);
    return encode_work_bytes(count, chunks > 0 ? chunks : 1, groups > 0 ? groups : 1);
}

extern "C" size_t weft_delta_cuda_apply_work_bytes(uint32_t count) { return apply_work_bytes(count); }

/* The encode, each tensor's checksum summed here (checksums NULL) or given. */
static weft_status_t encode_batch(const weft_delta_cuda_tensor_t *tensors, const uint64_t *checksums, uint32_t count,
                                  uint64_t *out_bytes, void *work, size_t work_size, void *stream)
{
    cudaStream_t st = static_cast<cudaStream_t>(stream);

    if (count == 0) {
        return WEFT_OK;
    }
    if (tensors == nullptr || out_bytes == nullptr || work == nullptr || (reinterpret_cast<uintptr_t>(work) & 255) != 0) {
        weft_log_error("weft_delta_encode_cuda_async: NULL tensors, sizes or workspace, or a workspace not 256-byte "
                       "aligned");
        return WEFT_ERR_INVALID_PARAM;
    }
    for (uint32_t i = 0; i < count; i++) {
        const weft_delta_cuda_tensor_t &t = tensors[i];
        if (t.out == nullptr || (reinterpret_cast<uintptr_t>(t.out) & 7) != 0 ||
            (t.bytes > 0 && (t.old_data == nullptr || t.new_data == nullptr)) || chunks_of(t.bytes) > UINT32_MAX) {
            weft_log_error("weft_delta_encode_cuda_async: tensor %u: NULL pointers, an output not 8-byte aligned, or "
                           "%llu bytes (more than 2^32 chunks)",
                           i, static_cast<unsigned long long>(t.bytes));
            return WEFT_ERR_INVALID_PARAM;
        }
        if (t.out_capacity < weft_delta_bytes(t.bytes, 0)) {
            weft_log_error("weft_delta_encode_cuda_async: tensor %u: %llu bytes of output, below the %llu of a delta "
                           "of no change",
                           i, static_cast<unsigned long long>(t.out_capacity),
                           static_cast<unsigned long long>(weft_delta_bytes(t.bytes, 0)));
            return WEFT_ERR_NO_SPACE;
        }
    }
    const size_t need = weft_delta_cuda_encode_work_bytes(tensors, count);
    if (work_size < need) {
        weft_log_error("weft_delta_encode_cuda_async: a workspace of %zu bytes, %zu needed", work_size, need);
        return WEFT_ERR_INVALID_PARAM;
    }
    uint64_t chunks, groups;
    batch_units(tensors, count, &chunks, &groups);
    const EncodeWork w = carve_encode(work, count, chunks > 0 ? chunks : 1, groups > 0 ? groups : 1);
    const auto       item_at = [tensors, checksums](uint32_t i) {
        EncodeItem item = {};
        item.t = tensors[i];
        item.checksum = checksums != nullptr ? checksums[i] : 0;
        item.known = checksums != nullptr;
        return item;
    };
    weft_status_t status = upload<UploadTensors, EncodeItem>(item_at, count, item_bytes_of, st, w, out_bytes);

    if (status == WEFT_OK && chunks > 0) {
        find_kernel<<<grid_for(chunks), kThreads, 0, st>>>(w, count, chunks);
        const uint64_t units = groups * kPlaceSplit;
        place_kernel<<<static_cast<unsigned>(units < kMaxBlocks ? units : kMaxBlocks), kThreads, 0, st>>>(
            w, count, groups, out_bytes);
        status = WEFT_CUDA_CHECK(cudaGetLastError());
    }
    return status;
}

extern "C" weft_status_t weft_delta_encode_cuda_async(const weft_delta_cuda_tensor_t *tensors, uint32_t count,
                                                      uint64_t *out_bytes, void *work, size_t work_size, void *stream)
{
    return encode_batch(tensors, nullptr, count, out_bytes, work, work_size, stream);
}

extern "C" weft_status_t weft_delta_encode_cuda_with_checksums_async(const weft_delta_cuda_tensor_t *tensors,
                                                             const uint64_t *checksums, uint32_t count,
                                                             uint64_t *out_bytes, void *work, size_t work_size,
                                                             void *stream)
{
    if (count > 0 && checksums == nullptr) {
        weft_log_error("weft_delta_encode_cuda_with_checksums_async: NULL checksums");
        return WEFT_ERR_INVALID_PARAM;
    }
    return encode_batch(tensors, checksums, count, out_bytes, work, work_size, stream);
}

extern "C" weft_status_t weft_delta_encode_cuda(const void *old_data, const void *new_data, uint64_t bytes, void *out,
                                                uint64_t out_capacity, uint64_t *out_bytes, void *stream)
{
    cudaStream_t                   st = static_cast<cudaStream_t>(stream);
    const weft_delta_cuda_tensor_t t = {old_data, new_data, bytes, out, out_capacity};
    const size_t                   need = weft_delta_cuda_encode_work_bytes(&t, 1);
    void                          *work = nullptr;
    uint64_t                       size = 0;
    weft_status_t                  status;

    if (out_bytes == nullptr) {
        weft_log_error("weft_delta_encode_cuda: NULL out_bytes");
        return WEFT_ERR_INVALID_PARAM;
    }
    if (out != nullptr && out_capacity < weft_delta_bytes(bytes, 0)) {
        return WEFT_ERR_NO_SPACE; /* as the host encoder, without a word logged */
    }
    /* The workspace and, after it, the word the kernel leaves the size in. */
    status = WEFT_CUDA_CHECK(cudaMallocAsync(&work, need + 256, st));
    if (status == WEFT_OK) {
        uint64_t *answer = reinterpret_cast<uint64_t *>(static_cast<char *>(work) + need);
        status = weft_delta_encode_cuda_async(&t, 1, answer, work, need, stream);
        if (status == WEFT_OK) {
            status = WEFT_CUDA_CHECK(cudaMemcpyAsync(&size, answer, sizeof(size), cudaMemcpyDeviceToHost, st));
        }
        const weft_status_t freed = WEFT_CUDA_CHECK(cudaFreeAsync(work, st));
        status = status == WEFT_OK ? freed : status;
    }
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaStreamSynchronize(st));
    }
    if (status == WEFT_OK) {
        if (size == 0) {
            status = WEFT_ERR_NO_SPACE;
        } else {
            *out_bytes = size;
        }
    }
    return status;
}

/* The apply, and where sums is not NULL each applied target summed and
 * compared with its carried checksum (weft_delta_apply_cuda_summed_async). */
static weft_status_t apply_batch(const weft_delta_cuda_patch_t *patches, uint32_t count, unsigned *verdicts,
                                 uint64_t *sums, void *work, size_t work_size, void *stream)
{
    cudaStream_t st = static_cast<cudaStream_t>(stream);

    if (count == 0) {
        return WEFT_OK;
    }
    if (patches == nullptr || verdicts == nullptr || work == nullptr || (reinterpret_cast<uintptr_t>(work) & 255) != 0 ||
        work_size < apply_work_bytes(count)) {
        weft_log_error("weft_delta_apply_cuda_async: NULL patches, verdicts or workspace, or a workspace not 256-byte "
                       "aligned or below %zu bytes",
                       apply_work_bytes(count));
        return WEFT_ERR_INVALID_PARAM;
    }
    for (uint32_t i = 0; i < count; i++) {
        if (patches[i].delta == nullptr || (reinterpret_cast<uintptr_t>(patches[i].delta) & 7) != 0 ||
            !target_sound(&patches[i].target)) {
            weft_log_error("weft_delta_apply_cuda_async: patch %u: a NULL or unaligned delta, or rows or transposed "
                           "matrices that do not tile the tensor",
                           i);
            return WEFT_ERR_INVALID_PARAM;
        }

    }
    uint64_t chunks = 0;
    for (uint32_t i = 0; i < count; i++) {
        chunks += chunks_of(patches[i].target.tensor_bytes);
    }
    const ApplyWork w = carve_apply(work, count);
    const bool      rewrite = rewrite_enabled();
    const auto      patch_at = [patches, rewrite](uint32_t i) {
        return ApplyItem{patches[i], rewrite && rewritten_wt(patches, i) ? 1u : 0u};
    };
    weft_status_t status = upload<UploadPatches, ApplyItem>(patch_at, count, patch_bytes_of, st, w, verdicts);

    if (status == WEFT_OK) {
        const uint64_t units = chunks > count ? chunks : count; /* a warp a chunk; a thread a header */
        check_kernel<<<grid_for(units), kThreads, 0, st>>>(w, count, chunks, verdicts);
        apply_kernel<<<grid_for(chunks), kThreads, 0, st>>>(w, count, chunks, verdicts);
        status = WEFT_CUDA_CHECK(cudaGetLastError());
    }
    if (status == WEFT_OK && rewrite) {
        status = enqueue_rewrites(patches, count, verdicts, st);
    }
    if (status == WEFT_OK && sums != nullptr) {
        unsigned long long *s = reinterpret_cast<unsigned long long *>(sums);
        status = WEFT_CUDA_CHECK(cudaMemsetAsync(s, 0, count * sizeof(*s), st));
        if (status == WEFT_OK) {
            sum_kernel<<<grid_for(chunks), kThreads, 0, st>>>(w, count, chunks, verdicts, s);
            sum_verdict_kernel<<<(count + 255) / 256, 256, 0, st>>>(w, count, verdicts, s);
            status = WEFT_CUDA_CHECK(cudaGetLastError());
        }
    }
    return status;
}

extern "C" weft_status_t weft_delta_apply_cuda_async(const weft_delta_cuda_patch_t *patches, uint32_t count,
                                                     unsigned *verdicts, void *work, size_t work_size, void *stream)
{
    return apply_batch(patches, count, verdicts, nullptr, work, work_size, stream);
}

extern "C" weft_status_t weft_delta_apply_cuda_summed_async(const weft_delta_cuda_patch_t *patches, uint32_t count,
                                                            unsigned *verdicts, uint64_t *sums, void *work,
                                                            size_t work_size, void *stream)
{
    if (count > 0 && sums == nullptr) {
        weft_log_error("weft_delta_apply_cuda_summed_async: NULL sums");
        return WEFT_ERR_INVALID_PARAM;
    }
    return apply_batch(patches, count, verdicts, sums, work, work_size, stream);
}

extern "C" weft_status_t weft_delta_apply_cuda(const void *delta, uint64_t delta_bytes,
                                               const weft_delta_target_t *target, uint64_t *checksum, void *stream)
{
    cudaStream_t  st = static_cast<cudaStream_t>(stream);
    const size_t  need = apply_work_bytes(1);
    void         *work = nullptr;
    unsigned      verdict = 0; /* the verdict: on the GPU, then here */
    uint64_t      carried = 0;
    weft_status_t status;

    if (delta == nullptr || target == nullptr || !target_sound(target) || (reinterpret_cast<uintptr_t>(delta) & 7) != 0) {
        weft_log_error("weft_delta_apply_cuda: a NULL or unaligned delta, a NULL target, or rows or transposed "
                       "matrices that do not tile the tensor");
        return WEFT_ERR_INVALID_PARAM;
    }
    if (delta_bytes < WEFT_DELTA_HEADER_BYTES) {
        weft_log_error("weft_delta_apply_cuda: the delta is refused: shorter than its header");
        return WEFT_ERR_CORRUPT;
    }
    const weft_delta_cuda_patch_t patch = {delta, delta_bytes, *target};
    status = WEFT_CUDA_CHECK(cudaMallocAsync(&work, need + 256, st));
    if (status == WEFT_OK) {
        unsigned *answer = reinterpret_cast<unsigned *>(static_cast<char *>(work) + need);
        status = weft_delta_apply_cuda_async(&patch, 1, answer, work, need, stream);
        if (status == WEFT_OK) {
            status = WEFT_CUDA_CHECK(cudaMemcpyAsync(&verdict, answer, sizeof(verdict), cudaMemcpyDeviceToHost, st));
        }
        if (status == WEFT_OK) {
            status = WEFT_CUDA_CHECK(cudaMemcpyAsync(&carried, static_cast<const uint8_t *>(delta) + 24,
                                                     sizeof(carried), cudaMemcpyDeviceToHost, st));
        }
        const weft_status_t freed = WEFT_CUDA_CHECK(cudaFreeAsync(work, st));
        status = status == WEFT_OK ? freed : status;
    }
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaStreamSynchronize(st));
    }
    if (status == WEFT_OK && verdict != 0) {
        weft_log_error("weft_delta_apply_cuda: the delta is refused: %s", verdict_why(verdict));
        status = (verdict & kBadVersion) != 0 ? WEFT_ERR_VERSION : WEFT_ERR_CORRUPT;
    }
    if (status == WEFT_OK && checksum != nullptr) {
        *checksum = carried;
    }
    return status;
}
