/*
 * The CUDA AdamW and the FP32 → BF16 conversion: element-wise, four
 * elements a thread through 16-byte loads where every array is aligned,
 * one at a time otherwise. The arithmetic is adamw_math.h's, written with
 * explicitly rounded intrinsics, so the bytes equal the host reference's.
 * The update is memory-bound (16 B read and 12 B written an element for
 * FP32 gradients); a grid of a few blocks per SM strides over it.
 */
#include "config.h"

#include "adamw.h"
#include "adamw_math.h"

#include "common/cuda_util.h"

#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;

int grid_for(size_t items)
{
    static int sms = 0;
    if (sms == 0) {
        int device = 0;
        if (cudaGetDevice(&device) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
            sms = 132;
        }
    }
    const size_t want = (items + kThreads - 1) / kThreads;
    const size_t cap  = static_cast<size_t>(sms) * 8;
    return static_cast<int>(want < cap ? (want > 0 ? want : 1) : cap);
}

__device__ __forceinline__ float grad_at(const float *g, size_t i) { return g[i]; }
__device__ __forceinline__ float grad_at(const uint16_t *g, size_t i) { return weft_bf16_to_float(g[i]); }

template <typename G, bool kDecay>
__global__ void adamw_scalar_kernel(weft_adamw_scalars_t s, float *p, float *m, float *v, const G *g, size_t n)
{
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        weft_adamw_element(&s, kDecay, &p[i], &m[i], &v[i], grad_at(g, i));
    }
}

__device__ __forceinline__ float4 grad4_at(const float *g, size_t q)
{
    return reinterpret_cast<const float4 *>(g)[q];
}

__device__ __forceinline__ float4 grad4_at(const uint16_t *g, size_t q)
{
    const uint2 raw = reinterpret_cast<const uint2 *>(g)[q];
    return make_float4(weft_bf16_to_float(static_cast<uint16_t>(raw.x & 0xffffu)),
                       weft_bf16_to_float(static_cast<uint16_t>(raw.x >> 16)),
                       weft_bf16_to_float(static_cast<uint16_t>(raw.y & 0xffffu)),
                       weft_bf16_to_float(static_cast<uint16_t>(raw.y >> 16)));
}

/* n4 groups of four; the caller handles the tail. */
template <typename G, bool kDecay>
__global__ void adamw_vec4_kernel(weft_adamw_scalars_t s, float4 *p, float4 *m, float4 *v, const G *g, size_t n4)
{
    for (size_t q = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; q < n4;
         q += static_cast<size_t>(gridDim.x) * blockDim.x) {
        float4       pp = p[q], mm = m[q], vv = v[q];
        const float4 gg = grad4_at(g, q);
        weft_adamw_element(&s, kDecay, &pp.x, &mm.x, &vv.x, gg.x);
        weft_adamw_element(&s, kDecay, &pp.y, &mm.y, &vv.y, gg.y);
        weft_adamw_element(&s, kDecay, &pp.z, &mm.z, &vv.z, gg.z);
        weft_adamw_element(&s, kDecay, &pp.w, &mm.w, &vv.w, gg.w);
        p[q] = pp;
        m[q] = mm;
        v[q] = vv;
    }
}

bool aligned(const void *ptr, size_t to) { return (reinterpret_cast<uintptr_t>(ptr) % to) == 0; }

template <typename G, bool kDecay>
void launch(const weft_adamw_scalars_t &s, float *p, float *m, float *v, const G *g, size_t n, cudaStream_t st)
{
    const size_t g_align = sizeof(G) * 4;
    size_t       head    = 0;

    if (aligned(p, 16) && aligned(m, 16) && aligned(v, 16) && aligned(g, g_align)) {
        const size_t n4 = n / 4;
        if (n4 > 0) {
            adamw_vec4_kernel<G, kDecay><<<grid_for(n4), kThreads, 0, st>>>(
                s, reinterpret_cast<float4 *>(p), reinterpret_cast<float4 *>(m), reinterpret_cast<float4 *>(v), g, n4);
        }
        head = n4 * 4;
    }
    if (head < n) {
        adamw_scalar_kernel<G, kDecay><<<grid_for(n - head), kThreads, 0, st>>>(s, p + head, m + head, v + head,
                                                                               g + head, n - head);
    }
}

__global__ void bf16_kernel(const float *x, uint16_t *out, size_t n)
{
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        out[i] = weft_float_to_bf16(x[i]);
    }
}

} // namespace

extern "C" weft_status_t weft_adamw_cuda(const weft_adamw_scalars_t *s, float *param, float *exp_avg,
                                         float *exp_avg_sq, const void *grad, weft_dtype_t grad_dtype, size_t n,
                                         void *stream)
{
    cudaStream_t st = static_cast<cudaStream_t>(stream);

    if (n == 0) {
        return WEFT_OK;
    }
    if (grad_dtype == WEFT_DTYPE_BF16) {
        const uint16_t *g = static_cast<const uint16_t *>(grad);
        s->decay ? launch<uint16_t, true>(*s, param, exp_avg, exp_avg_sq, g, n, st)
                 : launch<uint16_t, false>(*s, param, exp_avg, exp_avg_sq, g, n, st);
    } else {
        const float *g = static_cast<const float *>(grad);
        s->decay ? launch<float, true>(*s, param, exp_avg, exp_avg_sq, g, n, st)
                 : launch<float, false>(*s, param, exp_avg, exp_avg_sq, g, n, st);
    }
    return WEFT_CUDA_CHECK(cudaGetLastError());
}

extern "C" weft_status_t weft_bf16_from_float_cuda(const float *x, uint16_t *out, size_t n, void *stream)
{
    if (n == 0) {
        return WEFT_OK;
    }
    bf16_kernel<<<grid_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, out, n);
    return WEFT_CUDA_CHECK(cudaGetLastError());
}
