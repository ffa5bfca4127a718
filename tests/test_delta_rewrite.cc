/*
 * The GPU's rewrite of a dense pair's WT (kernels/delta_rewrite.cuh) run on
 * the CPU: the kernel's own code, compiled by the host compiler with
 * stand-ins for CUDA's built-ins, each CUDA thread a thread (a barrier for
 * __syncthreads, the block's shared tile one static array), the blocks of
 * a grid one after another. So the tile logic (which pair a tile is, the
 * XOR swizzle of the shared tile, the byte permutes, where each 16 bytes
 * land in WT) is checked where there is no GPU; test_delta_cuda runs it on
 * one. Pairs of several shapes in one batch, one of them with its W's
 * delta refused (WT untouched, W's verdict copied to WT's), on grids of
 * one block and of three (each block then takes several tiles); each WT
 * must be its W transposed, every byte. Exit 0, or 1 naming what differs.
 */
#include <pthread.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

/* CUDA's built-ins, as the kernel uses them. */
struct uint4 {
    uint32_t x, y, z, w;
};
static inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return uint4{x, y, z, w}; }
struct ThreadIndex {
    unsigned x;
};
static thread_local unsigned thread_x;
static unsigned              block_x, grid_x;
static pthread_barrier_t     block_barrier;
#define threadIdx (ThreadIndex{thread_x})
#define blockIdx (ThreadIndex{block_x})
#define gridDim (ThreadIndex{grid_x})
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(threads)
#define __grid_constant__
#define __shared__ static /* one array for the block's threads */
#define __align__(n) __attribute__((aligned(n)))
static inline void __syncthreads() { pthread_barrier_wait(&block_barrier); }
static inline unsigned atomicOr(unsigned *at, unsigned v) { return __atomic_fetch_or(at, v, __ATOMIC_SEQ_CST); }
static inline uint4 __ldcs(const uint4 *at)
{
    uint4 v;
    memcpy(&v, at, sizeof(v));
    return v;
}
static inline void __stcs(uint4 *at, uint4 v) { memcpy(at, &v, sizeof(v)); }
/* Byte i of the result: byte (s >> 4i) & 7 of b:a. */
static inline uint32_t __byte_perm(uint32_t a, uint32_t b, uint32_t s)
{
    const uint64_t both = static_cast<uint64_t>(b) << 32 | a;
    uint32_t       r = 0;
    for (int i = 0; i < 4; i++) {
        r |= static_cast<uint32_t>(both >> (8 * ((s >> (4 * i)) & 7)) & 0xFF) << (8 * i);
    }
    return r;
}

#include "kernels/delta_rewrite.cuh"

namespace {

struct Pair {
    uint64_t             e, rows, cols;
    unsigned             w_verdict; /* non-zero: its W's delta refused */
    std::vector<uint8_t> w, wt;
};

struct Launch {
    const RewriteBatch *batch;
    unsigned           *verdicts;
    unsigned            thread;
};

void *run_thread(void *arg)
{
    const Launch *l = static_cast<const Launch *>(arg);
    thread_x = l->thread;
    rewrite_kernel(*l->batch, l->verdicts);
    return nullptr;
}

/* The grid, a block at a time: kRewriteThreads threads each. */
bool launch(const RewriteBatch &batch, unsigned *verdicts, unsigned grid)
{
    grid_x = grid;
    for (block_x = 0; block_x < grid; block_x++) {
        std::vector<pthread_t> threads(kRewriteThreads);
        std::vector<Launch>    args(kRewriteThreads);

        if (pthread_barrier_init(&block_barrier, nullptr, kRewriteThreads) != 0) {
            return false;
        }
        for (unsigned t = 0; t < static_cast<unsigned>(kRewriteThreads); t++) {
            args[t] = Launch{&batch, verdicts, t};
            if (pthread_create(&threads[t], nullptr, run_thread, &args[t]) != 0) {
                fprintf(stderr, "pthread_create failed\n");
                return false; /* the threads started wait at the barrier: the test ends here */
            }
        }
        for (pthread_t &t : threads) {
            pthread_join(t, nullptr);
        }
        pthread_barrier_destroy(&block_barrier);
    }
    return true;
}

} // namespace

int main()
{
    std::vector<Pair> pairs = {{1, 128, 128, 0, {}, {}},
                               {3, 256, 384, 0, {}, {}},
                               {2, 128, 640, 5, {}, {}},
                               {1, 512, 256, 0, {}, {}}};
    static RewriteBatch batch; /* 12 KB: not on the stack */
    uint64_t            seed = 0x243F6A8885A308D3ull;
    int                 failed = 0;

    for (Pair &p : pairs) {
        p.w.resize(p.e * p.rows * p.cols);
        for (uint8_t &b : p.w) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            b = static_cast<uint8_t>(seed >> 56);
        }
    }
    for (unsigned grid : {1u, 3u}) {
        std::vector<unsigned> verdicts(2 * pairs.size(), 0);

        batch.count = 0;
        batch.tiles = 0;
        for (size_t i = 0; i < pairs.size(); i++) {
            Pair &p = pairs[i];
            p.wt.assign(p.w.size(), 0xEE);
            verdicts[2 * i] = p.w_verdict;
            batch.pairs[batch.count++] = RewritePair{p.w.data(), p.wt.data(), p.rows, p.cols, batch.tiles,
                                                     static_cast<uint32_t>(2 * i), static_cast<uint32_t>(2 * i + 1)};
            batch.tiles += p.w.size() / (kRewriteTile * kRewriteTile);
        }
        if (!launch(batch, verdicts.data(), grid)) {
            return 1;
        }
        for (size_t i = 0; i < pairs.size(); i++) {
            const Pair &p = pairs[i];
            uint64_t    wrong = 0;

            for (uint64_t m = 0; m < p.e; m++) {
                const uint64_t at = m * p.rows * p.cols;
                for (uint64_t r = 0; r < p.rows; r++) {
                    for (uint64_t c = 0; c < p.cols; c++) {
                        const uint8_t want = p.w_verdict != 0 ? 0xEE : p.w[at + r * p.cols + c];
                        wrong += p.wt[at + c * p.rows + r] != want;
                    }
                }
            }
            printf("grid %u, pair %zu (%llu x %llu x %llu, W's verdict %u): %llu wrong bytes, WT's verdict %u\n", grid,
                   i, static_cast<unsigned long long>(p.e), static_cast<unsigned long long>(p.rows),
                   static_cast<unsigned long long>(p.cols), p.w_verdict, static_cast<unsigned long long>(wrong),
                   verdicts[2 * i + 1]);
            if (wrong != 0 || verdicts[2 * i + 1] != p.w_verdict) {
                printf("FAIL: grid %u, pair %zu\n", grid, i);
                failed = 1;
            }
        }
    }
    return failed;
}
