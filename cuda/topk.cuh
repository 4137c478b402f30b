// The best logits of a row, chosen on the GPU, so that a sampled decode step brings back a few hundred
// bytes instead of the row (cuda/sampling.cu launches these; sampling::Sampler::sample_candidates draws
// from them the token the whole row gives). Device code only; like cuda/norm_rope.cuh it includes
// cuda/matvec_ptx.cuh first, which tests/emu replaces with its CUDA stand-ins, so that
// tests/test_topk_emu.cpp runs these kernels on the CPU.
//
// Each logit becomes a 64-bit key that orders like the sampler's candidate order, (logit, -id): the
// float's bits mapped to an unsigned integer that sorts like the float (negative values bit-inverted,
// positive ones with the sign bit set), NaN taken as -INFINITY and -0 as +0, then 0xFFFFFFFF - id below them. Keys of
// distinct ids differ, so "the m largest keys" is one set, ties of equal logits included; 0 is below every
// key and stands for none.
//
// Two passes. The first takes a row's logits in chunks of kChunk, a CTA each, and writes each chunk's m
// largest keys; the second takes those lists, a CTA a row, and writes the row's m largest keys, plus the
// logits of the row's extra tokens (the sampler's penalized and biased ones). A CTA's selection
// (top_keys): each thread takes a group of keys (every 256th) and its maximum; the m-th largest maximum
// bounds the m-th largest key from below (m groups hold a key at least that large), so only the keys of
// those m groups that reach it are candidates, usually a little more than m; they are sorted in shared
// memory by a bitonic network and the first m written. Worst case (equal logits everywhere, NaN rows) the
// candidates are m whole groups: slower, not wrong.
#pragma once

#include <cstdint>

#include "cuda/matvec_ptx.cuh"  // first: CUDA (or, in tests/emu, its stand-ins)

namespace minfer::cuda::tk {
namespace {  // local to the one file that includes this header (cuda/sampling.cu, or an emulator test)

constexpr int kThreads = 256;  // a CTA of either pass
constexpr int kChunk = 4096;   // logits a CTA of the first pass takes (16 a thread)
constexpr int kMaxM = kThreads;  // the m-th largest group maximum needs m groups

__host__ __device__ inline unsigned order_bits(unsigned u) { return (u & 0x80000000u) ? ~u : (u | 0x80000000u); }
// The inverse, for the host: the logit of a key (NaN came in as -INFINITY, -0 as +0: neither is told
// apart from the other by anything the sampler does).
__host__ __device__ inline unsigned float_bits_of(unsigned o) { return (o & 0x80000000u) ? (o & 0x7FFFFFFFu) : ~o; }

__device__ __forceinline__ unsigned long long key_of(float v, int i) {
    unsigned u = __float_as_uint(v);
    if (v != v) u = 0xFF800000u;  // NaN as -INFINITY
    if (u == 0x80000000u) u = 0;  // -0 as +0: equal logits, the lower id first
    return static_cast<unsigned long long>(order_bits(u)) << 32 | (0xFFFFFFFFu - static_cast<unsigned>(i));
}

// The shared memory top_keys needs for `count` keys: kThreads maxima, then up to pow2(count) candidates,
// then the candidates' counter.
__host__ __device__ constexpr int pow2_at_least(int n) {
    int p = 2;
    while (p < n) p <<= 1;
    return p;
}
__host__ __device__ constexpr size_t top_keys_smem(int count) {
    return (static_cast<size_t>(kThreads) + static_cast<size_t>(pow2_at_least(count))) * sizeof(unsigned long long) + 16;
}

// Sorts s[0 .. n) in descending order (n a power of two), every thread of the CTA taking part; s must be
// written and visible (a barrier before), and is sorted and visible after.
__device__ __forceinline__ void bitonic_desc(unsigned long long* s, int n) {
    for (int k = 2; k <= n; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int t = static_cast<int>(threadIdx.x); t < n / 2; t += kThreads) {
                const int i = ((t & ~(j - 1)) << 1) | (t & (j - 1)), p = i + j;  // the pair (i, i + j)
                const unsigned long long a = s[i], b = s[p];
                if ((i & k) == 0 ? a < b : a > b) {  // descending where bit k of i is clear (all of it at k = n)
                    s[i] = b;
                    s[p] = a;
                }
            }
            __syncthreads();
        }
}

// The m largest nonzero keys of key(0) .. key(count - 1) (distinct where nonzero), descending, into out[0 ..
// m), zeros past the last where fewer; 1 <= m <= kMaxM. smem: top_keys_smem(count) bytes, 8-aligned.
template <class Key>
__device__ __forceinline__ void top_keys(Key key, int count, int m, unsigned long long* out, unsigned long long* smem) {
    unsigned long long* gmax = smem;
    unsigned long long* cand = smem + kThreads;
    int* counter = reinterpret_cast<int*>(cand + pow2_at_least(count));
    const int t = static_cast<int>(threadIdx.x);
    unsigned long long best = 0;
    for (int i = t; i < count; i += kThreads) {  // thread t's group: every kThreads-th key (coalesced loads)
        const unsigned long long k = key(i);
        best = k > best ? k : best;
    }
    gmax[t] = best;
    if (t == 0) *counter = 0;
    __syncthreads();
    bitonic_desc(gmax, kThreads);
    const unsigned long long floor = gmax[m - 1] > 0 ? gmax[m - 1] : 1;  // fewer than m groups with keys: every key
    for (int i = t; i < count; i += kThreads) {
        const unsigned long long k = key(i);
        if (k >= floor) cand[atomicAdd(counter, 1)] = k;
    }
    __syncthreads();
    const int c = *counter, n2 = pow2_at_least(c);
    for (int i = c + t; i < n2; i += kThreads) cand[i] = 0;
    __syncthreads();
    bitonic_desc(cand, n2);
    for (int i = t; i < m; i += kThreads) out[i] = i < c ? cand[i] : 0;
}

// Pass 1: grid (chunks, rows). Row r is logits + rows[r] * n_vocab; its chunk b's m largest keys go to
// part[(r * gridDim.x + b) * m ..]. Dynamic shared memory: top_keys_smem(kChunk).
__global__ __launch_bounds__(kThreads) void topk_chunk_kernel(const float* __restrict__ logits, int n_vocab, const int32_t* __restrict__ rows,
                                                              int m, unsigned long long* __restrict__ part) {
    const float* row = logits + static_cast<int64_t>(rows[blockIdx.y]) * n_vocab;
    const int base = static_cast<int>(blockIdx.x) * kChunk;
    const int count = n_vocab - base < kChunk ? n_vocab - base : kChunk;
    auto* smem = reinterpret_cast<unsigned long long*>(mv::mv_smem);
    top_keys([&](int i) { return key_of(row[base + i], base + i); }, count, m,
             part + (static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x) * m, smem);
}

// Pass 2: a CTA a row. The row's `chunks` lists (pass 1's) give its m largest keys, to keys + r * m; its
// n_extra tokens extra[r * n_extra ..] give their logits as they are (NaN included), to
// extra_out[r * n_extra ..]. Dynamic shared memory: top_keys_smem(chunks * m).
__global__ __launch_bounds__(kThreads) void topk_row_kernel(const float* __restrict__ logits, int n_vocab, const int32_t* __restrict__ rows,
                                                            int m, int chunks, const unsigned long long* __restrict__ part,
                                                            unsigned long long* __restrict__ keys, const int32_t* __restrict__ extra, int n_extra,
                                                            float* __restrict__ extra_out) {
    const int r = static_cast<int>(blockIdx.x);
    const unsigned long long* lists = part + static_cast<int64_t>(r) * chunks * m;
    auto* smem = reinterpret_cast<unsigned long long*>(mv::mv_smem);
    top_keys([&](int i) { return lists[i]; }, chunks * m, m, keys + static_cast<int64_t>(r) * m, smem);
    const float* row = logits + static_cast<int64_t>(rows[r]) * n_vocab;
    for (int i = static_cast<int>(threadIdx.x); i < n_extra; i += kThreads)
        extra_out[static_cast<int64_t>(r) * n_extra + i] = row[extra[static_cast<int64_t>(r) * n_extra + i]];
}

}  // namespace
}  // namespace minfer::cuda::tk
