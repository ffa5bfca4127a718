/*
 * weft_fp8_e4m3_encode against CUDA's __nv_cvt_float_to_fp8(x,
 * __NV_SATFINITE, __NV_E4M3) for every one of the 2^32 float bit patterns.
 * CUDA's function runs on the CPU here (cuda_fp8.h has a host path), so
 * this needs the CUDA headers but no GPU, and never skips. One thread per
 * CPU; a few seconds at -O2. Exit 0: identical; 1: the first mismatches
 * are printed.
 *
 * The reference formula's per-element step (quant.h) is e4m3(RN(x × f))
 * with PyTorch's conversion, which differs from saturation above 464 (it
 * rounds (464, 480) to 0x7F, a NaN, and gives NaN from 480 up) and keeps a
 * NaN's sign. So the same sweep also holds the encoder against PyTorch's
 * conversion, written here from its definition (round to nearest even in
 * double arithmetic), on every finite |y| <= 464; and a second sweep over
 * every amax the formula can see (1e-4 up to FLT_MAX) checks that
 * RN(amax × RN(RN(1/amax) × 448)), the largest |x × f| of a block, stays
 * at or below 448 (1 + 2^-21), far under 464: the two conversions never
 * part on what the reference formula feeds them (its NaN is the GPU's
 * canonical one, positive: 0x7F in both).
 */
#include <weft/weft.h>

#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <cmath>
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
    uint64_t torch_mismatches = 0; /* against PyTorch's conversion, |y| <= 464 */
    uint32_t torch_first = 0;
};

/* PyTorch's float → float8_e4m3fn for finite |y| <= 464, from its
 * definition: the nearest e4m3 value, ties to the even code, computed in
 * double (every step here is exact but the one rounding, nearbyint's). */
uint8_t torch_encode(uint32_t bits)
{
    float y;
    std::memcpy(&y, &bits, sizeof(y));
    const double  a = std::fabs(static_cast<double>(y));
    const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
    const double  min_normal = std::ldexp(1.0, -6);
    int           e;
    double        step;

    if (a < min_normal) {
        step = std::ldexp(1.0, -9); /* the subnormal spacing */
    } else {
        (void)std::frexp(a, &e); /* a in [2^(e-1), 2^e): 8 steps of 2^(e-4) */
        step = std::ldexp(1.0, e - 4);
    }
    const double v = std::nearbyint(a / step) * step;
    if (v == 0.0) {
        return sign;
    }
    if (v < min_normal) {
        return static_cast<uint8_t>(sign | static_cast<uint8_t>(v / std::ldexp(1.0, -9)));
    }
    const double m = std::frexp(v, &e); /* v = m 2^e, m in [0.5, 1) */
    return static_cast<uint8_t>(sign | ((e - 1 + 7) << 3) | static_cast<int>((2.0 * m - 1.0) * 8.0));
}

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
            if ((bits & 0x7FFFFFFFu) <= 0x43E80000u && weft_encode(bits) != torch_encode(bits)) {
                r->torch_first = r->torch_mismatches++ == 0 ? bits : r->torch_first;
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
    uint64_t torch_mismatches = 0;
    for (const Result &r : results) {
        if (r.torch_mismatches != 0 && torch_mismatches == 0) {
            std::printf("MISMATCH with PyTorch's conversion: bits 0x%08" PRIx32 ": weft 0x%02x, torch 0x%02x\n",
                        r.torch_first, weft_encode(r.torch_first), torch_encode(r.torch_first));
        }
        torch_mismatches += r.torch_mismatches;
    }
    /* Every amax of the reference formula: the largest product it makes. */
    uint64_t above = 0;
    float    worst = 0.0f;
    for (uint32_t bits = 0x38D1B717u; bits <= 0x7F7FFFFFu; bits++) { /* 1e-4f .. FLT_MAX */
        float amax;
        std::memcpy(&amax, &bits, sizeof(amax));
        const volatile float r = 1.0f / amax; /* volatile: each step rounded to FP32, as on the GPU */
        const volatile float f = r * 448.0f;
        const float          top = amax * f;
        worst = std::max(worst, top);
        above += top > 448.0f * (1.0f + std::ldexp(1.0f, -21));
    }
    std::printf("reference formula: largest |x f| %a over every amax (bound 448 (1 + 2^-21) = %a), %" PRIu64
                " above; PyTorch's conversion: %" PRIu64 " of the finite |y| <= 464 differ\n",
                static_cast<double>(worst), static_cast<double>(448.0f * (1.0f + std::ldexp(1.0f, -21))), above,
                torch_mismatches);
    mismatches += above + torch_mismatches;
    /* What CUDA does with NaN, for the record (the test above covers every NaN). */
    std::printf("cuda: +NaN (0x7fc00000) -> 0x%02x, -NaN (0xffc00000) -> 0x%02x, +Inf -> 0x%02x, -Inf -> 0x%02x\n",
                cuda_encode(0x7fc00000u), cuda_encode(0xffc00000u), cuda_encode(0x7f800000u),
                cuda_encode(0xff800000u));
    std::printf("%s: %" PRIu64 " of 2^32 float bit patterns differ; %u threads, %.1f s\n",
                mismatches == 0 ? "ok" : "FAIL", mismatches, threads, seconds);
    return mismatches == 0 ? 0 : 1;
}
