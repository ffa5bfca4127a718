/*
 * A thread block's sum of one 64-bit word a thread, folded into a word in
 * global memory with one atomicAdd a block: warps reduce with shuffles.
 * Addition mod 2^64 commutes, so the result does not depend on
 * scheduling (the checksums rely on it). Every thread of the block must
 * call it; it ends with a barrier, so it may be called in a loop.
 * Internal, CUDA only.
 */
#ifndef WEFT_KERNELS_BLOCK_SUM_CUH
#define WEFT_KERNELS_BLOCK_SUM_CUH

#include <cstdint>

template <int Threads>
__device__ __forceinline__ void weft_block_add(uint64_t local, unsigned long long *target)
{
    static_assert(Threads % 32 == 0, "whole warps");
    __shared__ uint64_t warp_sums[Threads / 32];

    for (int offset = 16; offset > 0; offset /= 2) {
        local += __shfl_down_sync(0xffffffffu, local, offset);
    }
    if ((threadIdx.x & 31) == 0) {
        warp_sums[threadIdx.x / 32] = local;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        uint64_t block = 0;
        for (int w = 0; w < Threads / 32; w++) {
            block += warp_sums[w];
        }
        atomicAdd(target, static_cast<unsigned long long>(block));
    }
    __syncthreads(); /* warp_sums is read before a next call writes it */
}

#endif
