/*
 * weft_fp8_e4m3_encode against CUDA's __nv_cvt_float_to_fp8(x,
 * __NV_SATFINITE, __NV_E4M3) for every one of the 2^32 float bit patterns.
 * CUDA's function runs on the CPU here (cuda_fp8.h has a host path), so
 * this needs the CUDA headers but no GPU, and never skips. One thread per
 * CPU; a few seconds at -O2. Exit 0: identical; 1: the first mismatches
 * are printed.
 */
#include <weft/weft.h>

#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <sched.h>
#include <thread>
#include <vector>

namespace {

constexpr uint64_t kAll = 1ull << 32;
constexpr uint64_t kChunk = 1ull << 24; /* 256 chunks, taken in turn */
constexpr int      kShow = 8;           /* mismatches printed */

struct Result {
    uint64_t mismatches = 0;
    uint32_t first[kShow] = {};
    int      shown = 0;
};

uint8_t cuda_encode(uint32_t bits)
{
    float x;
    std::memcpy(&x, &bits, sizeof(x));
    return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

uint8_t weft_encode(uint32_t bits)
{
    float x;
    std::memcpy(&x, &bits, sizeof(x));
    return weft_fp8_e4m3_encode(x);
}

void worker(std::atomic<uint64_t> *next, Result *r)
{
    for (;;) {
        const uint64_t start = next->fetch_add(kChunk);
        if (start >= kAll) {
            return;
        }
        for (uint64_t i = start; i < start + kChunk; i++) {
            const uint32_t bits = static_cast<uint32_t>(i);
            if (weft_encode(bits) != cuda_encode(bits)) {
                if (r->shown < kShow) {
                    r->first[r->shown++] = bits;
                }
                r->mismatches++;
            }
        }
    }
}

unsigned cpu_count()
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) {
        return static_cast<unsigned>(CPU_COUNT(&set));
    }
    return std::max(1u, std::thread::hardware_concurrency());
}

} // namespace

int main()
{
    const unsigned        threads = cpu_count();
    std::vector<Result>   results(threads);
    std::vector<std::thread> pool;
    std::atomic<uint64_t> next{0};
    const auto            t0 = std::chrono::steady_clock::now();

    for (unsigned t = 0; t < threads; t++) {
        pool.emplace_back(worker, &next, &results[t]);
    }
    for (auto &t : pool) {
        t.join();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    uint64_t              mismatches = 0;
    std::vector<uint32_t> first;
    for (const Result &r : results) {
        mismatches += r.mismatches;
        first.insert(first.end(), r.first, r.first + r.shown);
    }
    std::sort(first.begin(), first.end());
    for (size_t i = 0; i < first.size() && i < static_cast<size_t>(kShow); i++) {
        float x;
        std::memcpy(&x, &first[i], sizeof(x));
        std::printf("MISMATCH: bits 0x%08" PRIx32 " (%a): weft 0x%02x, cuda 0x%02x\n", first[i], static_cast<double>(x),
                    weft_encode(first[i]), cuda_encode(first[i]));
    }
    /* What CUDA does with NaN, for the record (the test above covers every NaN). */
    std::printf("cuda: +NaN (0x7fc00000) -> 0x%02x, -NaN (0xffc00000) -> 0x%02x, +Inf -> 0x%02x, -Inf -> 0x%02x\n",
                cuda_encode(0x7fc00000u), cuda_encode(0xffc00000u), cuda_encode(0x7f800000u),
                cuda_encode(0xff800000u));
    std::printf("%s: %" PRIu64 " of 2^32 float bit patterns differ; %u threads, %.1f s\n",
                mismatches == 0 ? "ok" : "FAIL", mismatches, threads, seconds);
    return mismatches == 0 ? 0 : 1;
}
