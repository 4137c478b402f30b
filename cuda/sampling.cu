// Sampling on the GPU: the greedy choice (argmax) of logit rows, so a greedy decode step brings back 8
// bytes instead of the whole vocabulary's logits; and a sampled row's best logits (cuda/topk.cuh), so a
// sampled one brings back a few hundred.
//
// The argmax takes each logit as the candidates' 64-bit key (cuda/topk.cuh: it orders like (logit, -id),
// NaN as -INFINITY, 0 below every key). A block reduces its share of a row with warp shuffles and
// atomicMax-es its best key into the row's slot, which a memset zeroed first.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "cuda/common.cuh"
#include "cuda/kernels.cuh"
#include "cuda/topk.cuh"

namespace minfer::cuda {
namespace {

constexpr unsigned kNegInfBits = 0xFF800000u;
using tk::key_of;  // the candidates' keys (cuda/topk.cuh) are the argmax's
using tk::order_bits;

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

int topk_chunks(int n_vocab) { return (n_vocab + tk::kChunk - 1) / tk::kChunk; }

// The largest dynamic shared memory a CTA may have here (0 where the query fails), granted to both
// candidate kernels once per process: the attribute is one value per kernel for the whole process, so a
// call setting it to its own size could lower it under another thread's launch.
static int topk_smem_limit() {
    static const int limit = [] {
        int dev = 0, v = 0;
        if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
            cudaGetLastError();  // (not sticky) the candidates are then not chosen here
            return 0;
        }
        for (const void* k : {reinterpret_cast<const void*>(tk::topk_chunk_kernel), reinterpret_cast<const void*>(tk::topk_row_kernel)})
            if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, v) != cudaSuccess) {
                cudaGetLastError();
                return 0;
            }
        return v;
    }();
    return limit;
}

bool topk_fits(int n_vocab, int m) {
    if (n_vocab <= 0 || m < 1 || m > tk::kMaxM || topk_chunks(n_vocab) > (1 << 20) / m) return false;
    const size_t limit = static_cast<size_t>(topk_smem_limit());
    return tk::top_keys_smem(topk_chunks(n_vocab) * m) <= limit && tk::top_keys_smem(tk::kChunk) <= limit;
}

void topk_rows(const float* logits, int n_vocab, const int32_t* rows, int n_rows, int m, unsigned long long* part, unsigned long long* keys,
               const int32_t* extra, int n_extra, float* extra_out, cudaStream_t stream) {
    if (n_rows <= 0) return;
    if (!topk_fits(n_vocab, m)) fail(MINFER_ERR_INTERNAL, "candidates: %d of a vocabulary of %d do not fit this GPU", m, n_vocab);
    const int chunks = topk_chunks(n_vocab);
    tk::topk_chunk_kernel<<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(n_rows)), tk::kThreads, tk::top_keys_smem(tk::kChunk),
                            stream>>>(logits, n_vocab, rows, m, part);
    check(cudaGetLastError(), "candidates: the chunks' best");
    tk::topk_row_kernel<<<n_rows, tk::kThreads, tk::top_keys_smem(chunks * m), stream>>>(logits, n_vocab, rows, m, chunks, part, keys, extra, n_extra,
                                                                                         extra_out);
    check(cudaGetLastError(), "candidates: the rows' best");
}

void topk_decode(unsigned long long key, int32_t& id, float& logit) {
    id = static_cast<int32_t>(0xFFFFFFFFu - static_cast<unsigned>(key & 0xFFFFFFFFu));
    const unsigned bits = tk::float_bits_of(static_cast<unsigned>(key >> 32));
    std::memcpy(&logit, &bits, sizeof logit);
}

int32_t argmax_token(unsigned long long key) {
    const unsigned hi = static_cast<unsigned>(key >> 32);
    if (hi <= order_bits(kNegInfBits)) return -1;  // nothing above -INFINITY (or no key at all)
    return static_cast<int32_t>(0xFFFFFFFFu - static_cast<unsigned>(key & 0xFFFFFFFFu));
}

}  // namespace minfer::cuda
