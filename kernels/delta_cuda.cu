/*
 * Delta versions on the GPU (<weft/delta.h>): the same bytes as the host
 * encoder, and the delta applied in place into device views.
 *
 * A call takes a batch of tensors (a version's), their chunks numbered
 * one after another, so that a version is three launches and one scan,
 * not as many per tensor (a tensor of a few MB is encoded in microseconds:
 * launches per tensor would cost more than the work).
 *
 * Encoding reads each byte of the two versions once, like the host's:
 *   1. one block a 4 KiB chunk (256 threads × 16 bytes) compares the old
 *      and new bytes, scans its threads' counts (so its changes come out
 *      in offset order) and writes them, offsets and values, into a slot
 *      of its own in the workspace (kSlotChanges changes: 6 % of a chunk,
 *      where RL steps change ~1 %); it leaves its count, and adds its part
 *      of the new bytes' checksum (a sum mod 2^64: order does not matter);
 *   2. CUB's device-wide scan turns the counts into each chunk's first
 *      change (across the batch; a tensor's own index subtracts its
 *      first chunk's);
 *   3. one block a chunk copies its slot to its place in the delta (a
 *      chunk whose changes overflowed its slot compares its bytes again
 *      and writes them directly), and the header is written, or nothing
 *      where the delta does not fit.
 * So an encode moves the two versions once plus ~9 bytes a change: about
 * what a copy of one version moves (a read and a write).
 *
 * Applying first checks the whole delta on the GPU (a block a chunk, one
 * verdict word); the scatter that follows writes only where the verdict
 * is clean, so a malformed delta writes nothing, as on the host.
 */
#include "config.h"

#include "block_sum.cuh"
#include "checksum.h"
#include "common/cuda_util.h"
#include "common/log.h"

#include <cub/device/device_scan.cuh>
#include <cuda_runtime.h>
#include <weft/checksum.h>
#include <weft/delta.h>

#include <cstdint>
#include <cstring>
#include <new>

namespace {

constexpr uint32_t kMagic = 0x31444657u; /* "WFD1", as delta_host.c */
constexpr int      kThreads = 256;
constexpr int      kBytesAThread = 16;
static_assert(kThreads * kBytesAThread == WEFT_DELTA_CHUNK_BYTES, "a block covers a chunk");
constexpr uint32_t kSlotChanges = 256; /* a chunk's changes kept in the workspace */
constexpr unsigned kMaxBlocks = 132 * 16;

uint64_t chunks_of(uint64_t bytes) { return (bytes + WEFT_DELTA_CHUNK_BYTES - 1) / WEFT_DELTA_CHUNK_BYTES; }
size_t   align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

/* The batch's chunks numbered one after another: tensor t has chunks
 * start[t] .. start[t + 1] − 1. The tensor of chunk g, by bisection. */
__device__ __forceinline__ uint32_t tensor_of(const uint64_t *start, uint32_t count, uint64_t g)
{
    uint32_t lo = 0, hi = count; /* start[lo] <= g < start[hi] */
    while (hi - lo > 1) {
        const uint32_t mid = (lo + hi) / 2;
        if (start[mid] <= g) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/* The workspace of a batch's encode, carved from one allocation. */
struct EncodeWork {
    weft_delta_cuda_tensor_t *tensors;       /* the batch, copied here */
    uint64_t                 *start;         /* count + 1: each tensor's first chunk */
    unsigned long long       *sums;          /* count: the new bytes' checksum sums */
    uint64_t                 *counts, *firsts; /* a chunk's changes; their exclusive scan */
    uint16_t                 *slot_offsets;  /* kSlotChanges a chunk */
    uint8_t                  *slot_values;
    void                     *scan;          /* CUB's temporary storage */
    size_t                    scan_bytes;
};

size_t scan_storage_bytes(uint64_t chunks)
{
    size_t bytes = 0;
    cub::DeviceScan::ExclusiveSum(nullptr, bytes, static_cast<const uint64_t *>(nullptr),
                                  static_cast<uint64_t *>(nullptr), static_cast<int64_t>(chunks));
    return bytes;
}

size_t encode_work_bytes(uint32_t count, uint64_t chunks)
{
    return align256(count * sizeof(weft_delta_cuda_tensor_t)) + align256((count + 1) * 8ull) +
           align256(count * 8ull) + 2 * align256(chunks * 8) + align256(chunks * kSlotChanges * 2) +
           align256(chunks * kSlotChanges) + align256(scan_storage_bytes(chunks));
}

EncodeWork carve_encode(void *base, uint32_t count, uint64_t chunks)
{
    char      *p = static_cast<char *>(base);
    EncodeWork w;
    w.tensors = reinterpret_cast<weft_delta_cuda_tensor_t *>(p);
    p += align256(count * sizeof(weft_delta_cuda_tensor_t));
    w.start = reinterpret_cast<uint64_t *>(p);
    p += align256((count + 1) * 8ull);
    w.sums = reinterpret_cast<unsigned long long *>(p);
    p += align256(count * 8ull);
    w.counts = reinterpret_cast<uint64_t *>(p);
    p += align256(chunks * 8);
    w.firsts = reinterpret_cast<uint64_t *>(p);
    p += align256(chunks * 8);
    w.slot_offsets = reinterpret_cast<uint16_t *>(p);
    p += align256(chunks * kSlotChanges * 2);
    w.slot_values = reinterpret_cast<uint8_t *>(p);
    p += align256(chunks * kSlotChanges);
    w.scan = p;
    w.scan_bytes = align256(scan_storage_bytes(chunks));
    return w;
}

/* A thread's 16 bytes of chunk k: the old and new bytes (past the
 * tensor's end: zero in both) and which of them differ (bit i: byte i). */
struct Piece {
    uint8_t  a[kBytesAThread], b[kBytesAThread];
    unsigned changed;
    int      n; /* bytes of the piece inside the tensor */
};

__device__ __forceinline__ Piece load_piece(const uint8_t *old_data, const uint8_t *new_data, uint64_t bytes,
                                            uint64_t at, bool vector)
{
    Piece p;
    p.n = bytes > at ? (bytes - at < kBytesAThread ? static_cast<int>(bytes - at) : kBytesAThread) : 0;
    if (vector && p.n == kBytesAThread) {
        *reinterpret_cast<uint4 *>(p.a) = *reinterpret_cast<const uint4 *>(old_data + at);
        *reinterpret_cast<uint4 *>(p.b) = *reinterpret_cast<const uint4 *>(new_data + at);
    } else {
        for (int i = 0; i < kBytesAThread; i++) {
            p.a[i] = i < p.n ? old_data[at + i] : 0;
            p.b[i] = i < p.n ? new_data[at + i] : 0;
        }
    }
    p.changed = 0;
    for (int i = 0; i < kBytesAThread; i++) {
        p.changed |= (p.a[i] != p.b[i] ? 1u : 0u) << i;
    }
    return p;
}

/* The exclusive prefix of `count` over the block's threads in order, and
 * the block's total into *total (every thread). */
__device__ __forceinline__ uint32_t block_prefix(uint32_t count, uint32_t *total)
{
    __shared__ uint32_t warp_totals[kThreads / 32];
    const int           lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    uint32_t            inclusive = count;

    for (int d = 1; d < 32; d *= 2) {
        const uint32_t v = __shfl_up_sync(0xffffffffu, inclusive, d);
        if (lane >= d) {
            inclusive += v;
        }
    }
    if (lane == 31) {
        warp_totals[warp] = inclusive;
    }
    __syncthreads();
    uint32_t before = 0, all = 0;
    for (int w = 0; w < kThreads / 32; w++) {
        before += w < warp ? warp_totals[w] : 0;
        all += warp_totals[w];
    }
    __syncthreads(); /* warp_totals is read before a next call writes it */
    *total = all;
    return before + inclusive - count;
}

/* Writes the piece's changed bytes: offsets (in-chunk) and values, from
 * index `at` of the two arrays. */
__device__ __forceinline__ void put_changes(const Piece &p, int first_offset, uint16_t *offsets, uint8_t *values,
                                            uint32_t at)
{
    for (unsigned m = p.changed; m != 0; m &= m - 1) {
        const int i = __ffs(static_cast<int>(m)) - 1;
        offsets[at] = static_cast<uint16_t>(first_offset + i);
        values[at] = p.b[i];
        at++;
    }
}

/* The piece's new bytes' checksum terms (8-byte words, zero past the end,
 * as weft_checksum_host's last partial word). */
__device__ __forceinline__ uint64_t piece_sum(const Piece &p, uint64_t at)
{
    uint64_t sum = 0;
    for (int w = 0; w < kBytesAThread / 8; w++) {
        if (8 * w < p.n) {
            uint64_t word = 0;
            for (int i = 0; i < 8; i++) {
                word |= static_cast<uint64_t>(p.b[8 * w + i]) << (8 * i);
            }
            sum += weft_checksum_term(word, at / 8 + static_cast<uint64_t>(w));
        }
    }
    return sum;
}


/* Whether a tensor's bytes can be read 16 at a time. */
__device__ __forceinline__ bool vector_ok(const weft_delta_cuda_tensor_t &t)
{
    return ((reinterpret_cast<uintptr_t>(t.old_data) | reinterpret_cast<uintptr_t>(t.new_data)) & 15) == 0;
}

/* Step 1: each chunk's changes into its slot, its count, its tensor's
 * checksum. */
__global__ void find_kernel(EncodeWork w, uint32_t count, uint64_t chunks)
{
    for (uint64_t g = blockIdx.x; g < chunks; g += gridDim.x) {
        const uint32_t                  ti = tensor_of(w.start, count, g);
        const weft_delta_cuda_tensor_t &t = w.tensors[ti];
        const int                       first_offset = static_cast<int>(threadIdx.x) * kBytesAThread;
        const uint64_t at = (g - w.start[ti]) * WEFT_DELTA_CHUNK_BYTES + static_cast<uint64_t>(first_offset);
        const Piece    p = load_piece(static_cast<const uint8_t *>(t.old_data), static_cast<const uint8_t *>(t.new_data),
                                      t.bytes, at, vector_ok(t));
        uint32_t       total;
        const uint32_t before = block_prefix(static_cast<uint32_t>(__popc(p.changed)), &total);

        if (total <= kSlotChanges) {
            put_changes(p, first_offset, w.slot_offsets + g * kSlotChanges, w.slot_values + g * kSlotChanges, before);
        }
        if (threadIdx.x == 0) {
            w.counts[g] = total;
        }
        weft_block_add<kThreads>(piece_sum(p, at), &w.sums[ti]);
    }
}

/* A tensor's changes in all and its delta's size, from the scan. */
__device__ __forceinline__ uint64_t tensor_changes(const EncodeWork &w, uint32_t ti)
{
    const uint64_t last = w.start[ti + 1] - 1;
    return w.firsts[last] + w.counts[last] - w.firsts[w.start[ti]];
}

/* Step 3: each delta in place, from the slots (or the bytes again where a
 * chunk overflowed its slot); headers and sizes, or a size of 0 where a
 * delta does not fit in its capacity (nothing written then). */
__global__ void write_kernel(EncodeWork w, uint32_t count, uint64_t chunks, uint64_t *out_bytes)
{
    for (uint64_t g = blockIdx.x; g < chunks; g += gridDim.x) {
        const uint32_t                  ti = tensor_of(w.start, count, g);
        const weft_delta_cuda_tensor_t &t = w.tensors[ti];
        const uint64_t                  k = g - w.start[ti], tchunks = w.start[ti + 1] - w.start[ti];
        const uint64_t                  changes = tensor_changes(w, ti);
        const uint64_t                  size = WEFT_DELTA_HEADER_BYTES + 4 * tchunks + 3 * changes;

        if (size > t.out_capacity || changes > UINT32_MAX) {
            if (k == 0 && threadIdx.x == 0) {
                out_bytes[ti] = 0;
            }
            continue;
        }
        uint8_t       *out = static_cast<uint8_t *>(t.out);
        uint32_t      *first = reinterpret_cast<uint32_t *>(out + WEFT_DELTA_HEADER_BYTES);
        uint16_t      *offsets = reinterpret_cast<uint16_t *>(out + WEFT_DELTA_HEADER_BYTES + 4 * tchunks);
        uint8_t       *values = out + WEFT_DELTA_HEADER_BYTES + 4 * tchunks + 2 * changes;
        const uint64_t base = w.firsts[g] - w.firsts[w.start[ti]], n = w.counts[g];

        if (threadIdx.x == 0) {
            first[k] = static_cast<uint32_t>(base);
        }
        if (k == 0 && threadIdx.x == 0) {
            uint32_t *h32 = reinterpret_cast<uint32_t *>(out);
            uint64_t *h64 = reinterpret_cast<uint64_t *>(out);
            h32[0] = kMagic;
            h32[1] = WEFT_DELTA_CHUNK_BYTES;
            h64[1] = t.bytes;
            h64[2] = changes;
            h64[3] = weft_checksum_final(w.sums[ti], t.bytes);
            out_bytes[ti] = size;
        }
        if (n <= kSlotChanges) {
            for (uint32_t j = threadIdx.x; j < n; j += kThreads) {
                offsets[base + j] = w.slot_offsets[g * kSlotChanges + j];
                values[base + j] = w.slot_values[g * kSlotChanges + j];
            }
            continue;
        }
        const int      first_offset = static_cast<int>(threadIdx.x) * kBytesAThread;
        const uint64_t at = k * WEFT_DELTA_CHUNK_BYTES + static_cast<uint64_t>(first_offset);
        const Piece    p = load_piece(static_cast<const uint8_t *>(t.old_data), static_cast<const uint8_t *>(t.new_data),
                                      t.bytes, at, vector_ok(t));
        uint32_t       total;
        const uint32_t before = block_prefix(static_cast<uint32_t>(__popc(p.changed)), &total);
        put_changes(p, first_offset, offsets + base, values + base, before);
    }
}

/* Before step 1: the checksum sums zeroed; tensors of no bytes (no
 * chunk, so no block of steps 1 and 3) get their header alone. */
__global__ void prepare_kernel(const weft_delta_cuda_tensor_t *tensors, uint32_t count, unsigned long long *sums,
                               uint64_t *out_bytes)
{
    const uint32_t ti = blockIdx.x * blockDim.x + threadIdx.x;
    if (ti < count) {
        sums[ti] = 0;
    }
    if (ti < count && tensors[ti].bytes == 0) {
        uint32_t *h32 = reinterpret_cast<uint32_t *>(tensors[ti].out);
        uint64_t *h64 = reinterpret_cast<uint64_t *>(tensors[ti].out);
        h32[0] = kMagic;
        h32[1] = WEFT_DELTA_CHUNK_BYTES;
        h64[1] = 0;
        h64[2] = 0;
        h64[3] = weft_checksum_final(0, 0);
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
    weft_delta_cuda_patch_t *patches; /* the batch, copied here */
    uint64_t                *start;   /* count + 1: each patch's first chunk */
};

size_t apply_work_bytes(uint32_t count)
{
    return align256(count * sizeof(weft_delta_cuda_patch_t)) + align256((count + 1) * 8ull);
}

ApplyWork carve_apply(void *base, uint32_t count)
{
    char     *p = static_cast<char *>(base);
    ApplyWork w;
    w.patches = reinterpret_cast<weft_delta_cuda_patch_t *>(p);
    p += align256(count * sizeof(weft_delta_cuda_patch_t));
    w.start = reinterpret_cast<uint64_t *>(p);
    return w;
}

/* Every patch's header, index and offsets checked: verdicts[t] gets the
 * bits of what is wrong with patch t (0: nothing). Entries are read only
 * once the header says how many there are. Patches without a chunk have
 * their header checked by one thread each. */
__global__ void check_kernel(ApplyWork w, uint32_t count, uint64_t chunks, unsigned *verdicts)
{
    for (uint32_t ti = blockIdx.x * blockDim.x + threadIdx.x; ti < count; ti += gridDim.x * blockDim.x) {
        const weft_delta_cuda_patch_t &p = w.patches[ti];
        const unsigned                 v = header_verdict(static_cast<const uint8_t *>(p.delta), p.delta_bytes,
                                                          p.target.tensor_bytes);
        if (v != 0) {
            atomicOr(&verdicts[ti], v);
        }
    }
    for (uint64_t g = blockIdx.x; g < chunks; g += gridDim.x) {
        const uint32_t                 ti = tensor_of(w.start, count, g);
        const weft_delta_cuda_patch_t &p = w.patches[ti];
        const uint8_t                 *delta = static_cast<const uint8_t *>(p.delta);
        const uint64_t                 tensor_bytes = p.target.tensor_bytes, k = g - w.start[ti];
        const uint64_t                 tchunks = w.start[ti + 1] - w.start[ti];

        if (header_verdict(delta, p.delta_bytes, tensor_bytes) != 0) {
            continue;
        }
        const uint64_t  changes = reinterpret_cast<const uint64_t *>(delta)[2];
        const uint32_t *first = reinterpret_cast<const uint32_t *>(delta + WEFT_DELTA_HEADER_BYTES);
        const uint16_t *offsets = reinterpret_cast<const uint16_t *>(delta + WEFT_DELTA_HEADER_BYTES + 4 * tchunks);
        const uint64_t  begin = first[k], end = k + 1 < tchunks ? first[k + 1] : changes;
        const uint64_t  start = k * WEFT_DELTA_CHUNK_BYTES;
        const uint64_t  n = tensor_bytes - start < WEFT_DELTA_CHUNK_BYTES ? tensor_bytes - start : WEFT_DELTA_CHUNK_BYTES;
        if ((k == 0 && begin != 0) || begin > end || end > changes || end - begin > n) {
            if (threadIdx.x == 0) {
                atomicOr(&verdicts[ti], kBadIndex);
            }
            continue;
        }
        for (uint64_t j = begin + threadIdx.x; j < end; j += kThreads) {
            if (offsets[j] >= n || (j > begin && offsets[j] <= offsets[j - 1])) {
                atomicOr(&verdicts[ti], kBadOffset);
            }
        }
    }
}

/* The scatter, for the patches check_kernel found nothing wrong with. */
__global__ void apply_kernel(ApplyWork w, uint32_t count, uint64_t chunks, const unsigned *verdicts)
{
    for (uint64_t g = blockIdx.x; g < chunks; g += gridDim.x) {
        const uint32_t ti = tensor_of(w.start, count, g);
        if (verdicts[ti] != 0) {
            continue;
        }
        const weft_delta_cuda_patch_t &p = w.patches[ti];
        const uint8_t                 *delta = static_cast<const uint8_t *>(p.delta);
        const weft_delta_target_t     &t = p.target;
        const uint64_t                 k = g - w.start[ti], tchunks = w.start[ti + 1] - w.start[ti];
        const uint64_t                 changes = reinterpret_cast<const uint64_t *>(delta)[2];
        const uint32_t                *first = reinterpret_cast<const uint32_t *>(delta + WEFT_DELTA_HEADER_BYTES);
        const uint16_t *offsets = reinterpret_cast<const uint16_t *>(delta + WEFT_DELTA_HEADER_BYTES + 4 * tchunks);
        const uint8_t  *values = delta + WEFT_DELTA_HEADER_BYTES + 4 * tchunks + 2 * changes;
        uint8_t        *data = static_cast<uint8_t *>(t.data);
        const bool      contiguous = t.row_stride == t.row_bytes;
        const uint64_t  begin = first[k], end = k + 1 < tchunks ? first[k + 1] : changes;

        for (uint64_t j = begin + threadIdx.x; j < end; j += kThreads) {
            const uint64_t pos = k * WEFT_DELTA_CHUNK_BYTES + offsets[j];
            data[contiguous ? pos : pos / t.row_bytes * t.row_stride + pos % t.row_bytes] = values[j];
        }
    }
}

unsigned grid_for(uint64_t chunks) { return static_cast<unsigned>(chunks == 0 ? 1 : chunks < kMaxBlocks ? chunks : kMaxBlocks); }

/*
 * The batch and its chunk starts (prefix sums of its items' chunk counts)
 * into the workspace, laid out there as carve_* has them (the items, then
 * the starts), in one copy from a host buffer (pageable: staged, so the
 * caller's array may go once this returns). *chunks gets the batch's
 * chunks in all.
 */
template <typename T, typename Bytes>
weft_status_t upload(void *work, const T *items, uint32_t count, Bytes bytes_of, uint64_t *chunks, cudaStream_t st)
{
    const size_t items_bytes = align256(count * sizeof(T)), bytes = items_bytes + (count + 1) * sizeof(uint64_t);
    char        *host = new (std::nothrow) char[bytes];

    if (host == nullptr) {
        return WEFT_ERR_NO_MEMORY;
    }
    uint64_t *start = reinterpret_cast<uint64_t *>(host + items_bytes);
    memcpy(host, items, count * sizeof(T));
    start[0] = 0;
    for (uint32_t i = 0; i < count; i++) {
        start[i + 1] = start[i] + chunks_of(bytes_of(items[i]));
    }
    *chunks = start[count];
    const weft_status_t status = WEFT_CUDA_CHECK(cudaMemcpyAsync(work, host, bytes, cudaMemcpyHostToDevice, st));
    delete[] host;
    return status;
}

} // namespace

/* What a verdict word says, for the log. */
static const char *verdict_why(unsigned v)
{
    return (v & kBadMagic) != 0     ? "not a delta (magic)"
           : (v & kBadVersion) != 0 ? "another layout version"
           : (v & kBadTensor) != 0  ? "its chunk or tensor size is not this tensor's"
           : (v & kBadCount) != 0   ? "its size does not match its change count"
           : (v & kBadIndex) != 0   ? "its chunk index is out of order"
                                    : "an offset is out of its chunk or out of order";
}

static bool target_sound(const weft_delta_target_t *t)
{
    return (t->data != nullptr || t->tensor_bytes == 0) && t->row_bytes != 0 && t->tensor_bytes % t->row_bytes == 0 &&
           t->row_stride >= t->row_bytes;
}

static uint64_t tensor_bytes_of(const weft_delta_cuda_tensor_t &t) { return t.bytes; }
static uint64_t patch_bytes_of(const weft_delta_cuda_patch_t &p) { return p.target.tensor_bytes; }

extern "C" size_t weft_delta_cuda_encode_work_bytes(const weft_delta_cuda_tensor_t *tensors, uint32_t count)
{
    uint64_t chunks = 0;
    for (uint32_t i = 0; tensors != nullptr && i < count; i++) {
        chunks += chunks_of(tensors[i].bytes);
    }
    return encode_work_bytes(count, chunks > 0 ? chunks : 1);
}

extern "C" size_t weft_delta_cuda_apply_work_bytes(uint32_t count) { return apply_work_bytes(count); }

extern "C" weft_status_t weft_delta_encode_cuda_async(const weft_delta_cuda_tensor_t *tensors, uint32_t count,
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
    uint64_t         chunks = 0;
    weft_status_t    status = upload(work, tensors, count, tensor_bytes_of, &chunks, st);
    const EncodeWork w = carve_encode(work, count, chunks > 0 ? chunks : 1);
    size_t           scan_bytes = w.scan_bytes;

    if (status == WEFT_OK) {
        prepare_kernel<<<(count + 255) / 256, 256, 0, st>>>(w.tensors, count, w.sums, out_bytes);
        status = WEFT_CUDA_CHECK(cudaGetLastError());
    }
    if (status == WEFT_OK && chunks > 0) {
        find_kernel<<<grid_for(chunks), kThreads, 0, st>>>(w, count, chunks);
        status = WEFT_CUDA_CHECK(cudaGetLastError());
        if (status == WEFT_OK) {
            status = WEFT_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(w.scan, scan_bytes, w.counts, w.firsts,
                                                                   static_cast<int64_t>(chunks), st));
        }
        if (status == WEFT_OK) {
            write_kernel<<<grid_for(chunks), kThreads, 0, st>>>(w, count, chunks, out_bytes);
            status = WEFT_CUDA_CHECK(cudaGetLastError());
        }
    }
    return status;
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

extern "C" weft_status_t weft_delta_apply_cuda_async(const weft_delta_cuda_patch_t *patches, uint32_t count,
                                                     unsigned *verdicts, void *work, size_t work_size, void *stream)
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
            weft_log_error("weft_delta_apply_cuda_async: patch %u: a NULL or unaligned delta, or rows that do not "
                           "tile the tensor",
                           i);
            return WEFT_ERR_INVALID_PARAM;
        }
    }
    uint64_t        chunks = 0;
    weft_status_t   status = upload(work, patches, count, patch_bytes_of, &chunks, st);
    const ApplyWork w = carve_apply(work, count);

    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaMemsetAsync(verdicts, 0, count * sizeof(*verdicts), st));
    }
    if (status == WEFT_OK) {
        const unsigned grid = grid_for(chunks > count ? chunks : count);
        check_kernel<<<grid, kThreads, 0, st>>>(w, count, chunks, verdicts);
        apply_kernel<<<grid, kThreads, 0, st>>>(w, count, chunks, verdicts);
        status = WEFT_CUDA_CHECK(cudaGetLastError());
    }
    return status;
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
        weft_log_error("weft_delta_apply_cuda: a NULL or unaligned delta, a NULL target, or rows that do not tile "
                       "the tensor");
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
