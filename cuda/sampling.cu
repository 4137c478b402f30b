// Sampling on the GPU: the greedy choice (argmax) of logit rows, so a greedy decode step brings back 8
// bytes instead of the whole vocabulary's logits.
//
// Each logit becomes a 64-bit key that orders like (logit, -index): the float's bits mapped to an
// unsigned integer that sorts like the float (negative values bit-inverted, positive ones with the sign
// bit set), NaN mapped to -INFINITY's key, then 0xFFFFFFFF - index below them, so of equal logits the
// lowest index has the largest key. A block reduces its share of a row with warp shuffles and
// atomicMax-es its best key into the row's slot, which a memset zeroed first (0 is below every key).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/kernels.cuh"

namespace minfer::cuda {
namespace {

constexpr unsigned kNegInfBits = 0xFF800000u;

__host__ __device__ inline unsigned order_bits(unsigned u) { return (u & 0x80000000u) ? ~u : (u | 0x80000000u); }

__device__ __forceinline__ unsigned long long key_of(float v, int i) {
    unsigned u = __float_as_uint(v);
    if (v != v) u = kNegInfBits;  // NaN never wins
    return static_cast<unsigned long long>(order_bits(u)) << 32 | (0xFFFFFFFFu - static_cast<unsigned>(i));
}

__device__ __forceinline__ unsigned long long warp_max_u64(unsigned long long v) {
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long w = __shfl_xor_sync(kFull, v, o);
        v = w > v ? w : v;
    }
    return v;
}

constexpr int kThreads = 256, kPerThread = 16;  // a block covers 4096 logits

__global__ __launch_bounds__(kThreads) void argmax_kernel(const float* __restrict__ logits, int n_vocab,
                                                         unsigned long long* __restrict__ keys) {
    pdl_wait();  // launched as a programmatic dependent (cuda/pdl.cuh)
    pdl_launch_dependents();
    const float* row = logits + static_cast<int64_t>(blockIdx.y) * n_vocab;
    const int base = static_cast<int>(blockIdx.x) * kThreads * kPerThread;
    unsigned long long best = 0;
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) {
        const int i = base + e * kThreads + static_cast<int>(threadIdx.x);  // coalesced
        if (i < n_vocab) {
            const unsigned long long k = key_of(row[i], i);
            best = k > best ? k : best;
        }
    }
    best = warp_max_u64(best);
    __shared__ unsigned long long red[kThreads / 32];
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = best;
    __syncthreads();
    if (threadIdx.x < 32) {
        unsigned long long v = threadIdx.x < kThreads / 32 ? red[threadIdx.x] : 0;
        v = warp_max_u64(v);
        if (threadIdx.x == 0) atomicMax(keys + blockIdx.y, v);
    }
}

}  // namespace

void argmax_keys(const float* logits, int rows, int n_vocab, unsigned long long* keys, cudaStream_t stream) {
    if (rows <= 0 || n_vocab <= 0) return;
    check(cudaMemsetAsync(keys, 0, static_cast<size_t>(rows) * sizeof(unsigned long long), stream), "argmax reset");
    const dim3 grid(blocks_for(n_vocab, kThreads * kPerThread), static_cast<unsigned>(rows));
    check(launch_pdl(argmax_kernel, grid, dim3(kThreads), 0, stream, logits, n_vocab, keys), "argmax");
}

int32_t argmax_token(unsigned long long key) {
    const unsigned hi = static_cast<unsigned>(key >> 32);
    if (hi <= order_bits(kNegInfBits)) return -1;  // nothing above -INFINITY (or no key at all)
    return static_cast<int32_t>(0xFFFFFFFFu - static_cast<unsigned>(key & 0xFFFFFFFFu));
}

}  // namespace minfer::cuda
