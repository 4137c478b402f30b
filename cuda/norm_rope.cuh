// The row kernels of the forward pass that the emulator tests run on the CPU (tests/test_norm_rope_emu.cpp):
// RMSNorm (with the deferred residual add), qkv_finish and its RoPE table, the gather of the logits rows.
// Device code only; cuda/kernels.cu launches them. Like cuda/attention_mma.cuh it includes
// cuda/matvec_ptx.cuh first, which tests/emu replaces with its CUDA stand-ins.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/matvec_ptx.cuh"  // first: CUDA (or, in tests/emu, its stand-ins)
#include "cuda/kv_map.cuh"
#include "cuda/matvec_impl.cuh"  // mv::xq_put4: the int8 mat-vec's input
#include "cuda/rope_table.cuh"

namespace minfer::cuda::nr {
namespace {  // local to the one file that includes this header (cuda/kernels.cu, or an emulator test)

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// 1 / sqrt(mean of squares + eps) of a row whose threads hold the partial sums of squares `ss`: the
// block's sum through `partial` (32 floats of shared memory), the root in double as the CPU takes it.
__device__ __forceinline__ float rms_scale(float ss, int dim, float eps, float* partial) {
    ss = warp_sum(ss);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.0f;
        v = warp_sum(v);
        if (threadIdx.x == 0) partial[0] = v;
    }
    __syncthreads();
    return static_cast<float>(1.0 / sqrt(static_cast<double>(partial[0]) / dim + eps));
}

// add (optional): x[row] += add[row] first, written back (a residual add deferred from the GEMM before,
// rounded as its epilogue rounds it: one f32 addition); the normalization then reads the sum. Each thread
// reads back only the elements it wrote.
__global__ void rms_norm_kernel(float* x, const float* add, int dim, const float* w, float eps, float* out, __half* out16) {
    pdl_wait();  // launched as a programmatic dependent (cuda/pdl.cuh)
    pdl_launch_dependents();
    __shared__ float partial[32];
    float* in = x + static_cast<int64_t>(blockIdx.x) * dim;
    float* o = out ? out + static_cast<int64_t>(blockIdx.x) * dim : nullptr;
    float ss = 0.0f;
    if (add) {
        const float* d = add + static_cast<int64_t>(blockIdx.x) * dim;
        for (int i = threadIdx.x; i < dim; i += blockDim.x) in[i] = __fadd_rn(in[i], d[i]);
    }
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += in[i] * in[i];
    const float scale = rms_scale(ss, dim, eps, partial);
    __half* o16 = out16 ? out16 + static_cast<int64_t>(blockIdx.x) * dim : nullptr;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        const float y = __fmul_rn(__fmul_rn(in[i], scale), w[i]);
        if (o) o[i] = y;
        if (o16) o16[i] = __float2half_rn(y);
    }
}

// The same normalization for rows of up to kRmsVec * 4 * 1024 elements (dim a multiple of 4): every load
// of the row and of w is issued before any is used (one memory latency, not one per loop iteration: the
// loop form above waits dim / blockDim times, which made it the slowest kernel of a decode step). kAdd:
// with the deferred residual add (add given); the other form, a decode step's, carries none of it.
constexpr int kRmsVec = 4;
// The launcher's choice (cuda/kernels.cu; the emulator test runs the same): the vector kernel where it
// takes rows of dim elements (and they are 16-byte aligned), and the threads of the kernel chosen.
inline bool rms_vec(int dim) { return dim % 4 == 0 && dim <= kRmsVec * 4 * 1024; }
inline int rms_threads(int dim, bool vec) {
    if (!vec) return dim >= 1024 ? 256 : 128;
    const int per = kRmsVec * 4;  // elements per thread at most
    const int threads = ((dim + per - 1) / per + 31) / 32 * 32;
    return threads < 32 ? 32 : threads > 1024 ? 1024 : threads;
}
// kEarly: the norm's weights (which nothing writes) are loaded before pdl_wait, so their latency is
// spent under the kernel before instead of after it (MINFER_ROW_PREWAIT, cuda/kernels.cu); the same
// arithmetic either way.
template <bool kAdd, bool kEarly>
__global__ __launch_bounds__(1024) void rms_norm_vec_kernel(float* x, const float* add, int dim, const float* w, float eps,
                                                            float* out, __half* out16, uint8_t* xq) {
    const float4* wv = reinterpret_cast<const float4*>(w);
    const int n4 = dim / 4;
    float4 v[kRmsVec], g[kRmsVec], d[kRmsVec];
    if (kEarly) {
#pragma unroll
        for (int e = 0; e < kRmsVec; ++e) {
            const int i = static_cast<int>(threadIdx.x) + e * static_cast<int>(blockDim.x);
            g[e] = i < n4 ? __ldg(wv + i) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }
    pdl_enter<kEarlyNorm>();  // launched as a programmatic dependent (cuda/pdl.cuh: the early trigger)
    __shared__ float partial[32];
    float4* in = reinterpret_cast<float4*>(x + static_cast<int64_t>(blockIdx.x) * dim);
    float4* o = out ? reinterpret_cast<float4*>(out + static_cast<int64_t>(blockIdx.x) * dim) : nullptr;
    const float4* ad = kAdd ? reinterpret_cast<const float4*>(add + static_cast<int64_t>(blockIdx.x) * dim) : nullptr;
#pragma unroll
    for (int e = 0; e < kRmsVec; ++e) {
        const int i = static_cast<int>(threadIdx.x) + e * static_cast<int>(blockDim.x);
        v[e] = i < n4 ? in[i] : make_float4(0.f, 0.f, 0.f, 0.f);
        if (!kEarly) g[e] = i < n4 ? __ldg(wv + i) : make_float4(0.f, 0.f, 0.f, 0.f);
        d[e] = kAdd && i < n4 ? ad[i] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    if (kAdd) {  // the deferred residual add (rms_norm_kernel), written back before anything reads x again
#pragma unroll
        for (int e = 0; e < kRmsVec; ++e) {
            const int i = static_cast<int>(threadIdx.x) + e * static_cast<int>(blockDim.x);
            v[e] = make_float4(__fadd_rn(v[e].x, d[e].x), __fadd_rn(v[e].y, d[e].y), __fadd_rn(v[e].z, d[e].z), __fadd_rn(v[e].w, d[e].w));
            if (i < n4) in[i] = v[e];
        }
    }
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < kRmsVec; ++e) ss += v[e].x * v[e].x + v[e].y * v[e].y + v[e].z * v[e].z + v[e].w * v[e].w;
    const float scale = rms_scale(ss, dim, eps, partial);
#pragma unroll
    for (int e = 0; e < kRmsVec; ++e) {
        const int i = static_cast<int>(threadIdx.x) + e * static_cast<int>(blockDim.x);
        float4 y = make_float4(0.f, 0.f, 0.f, 0.f);
        if (i < n4) {
            y = make_float4(__fmul_rn(__fmul_rn(v[e].x, scale), g[e].x), __fmul_rn(__fmul_rn(v[e].y, scale), g[e].y),
                            __fmul_rn(__fmul_rn(v[e].z, scale), g[e].z), __fmul_rn(__fmul_rn(v[e].w, scale), g[e].w));
            if (o) o[i] = y;
            if (out16) {  // the f16 copy a GEMM reads, as to_f16 would make it
                __half2* h = reinterpret_cast<__half2*>(out16 + static_cast<int64_t>(blockIdx.x) * dim) + 2 * i;
                h[0] = __halves2half2(__float2half_rn(y.x), __float2half_rn(y.y));
                h[1] = __halves2half2(__float2half_rn(y.z), __float2half_rn(y.w));
            }
        }
        if (xq) mv::xq_put4(y, 4 * int64_t{i}, dim, xq, i < n4, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));  // warp-uniform
    }
}

// One warp per (token, head) of q, k and v: the bias, the per-head RMS norm (q and k), NeoX RoPE (q and
// k) at the token's position, then q into its output rows and k, v as f16 into the cache rows of their positions.
// The same roundings as add_bias, rms_norm, rope and store_kv one after another. q16 (optional): q's rows
// go there instead, times q16_scale and rounded to f16, the operand the prefill attention kernels make of
// f32 q themselves (the same product and rounding, so the same bits).
// kEarly (MINFER_ROW_PREWAIT, cuda/kernels.cu): everything but the projections is read before pdl_wait,
// the unit's rotations computed and its cache row looked up there too: the bias and the norms' weights
// are weights, inv_freq and the RoPE table are made when the context is created, and the positions,
// slots and page tables are copied by the host before the step's first kernel, which every kernel of the
// step starts after (a programmatic dependent launches only once every CTA of the kernel before has
// started). Only the q, k and v rows the kernel before wrote are read after the wait. The same
// arithmetic either way.
template <bool kEarly>
__global__ void qkv_finish_kernel(const float* q_in, const float* __restrict__ k, const float* __restrict__ v, int64_t ld_q,
                                  int64_t ld_kv, float* q, int n, int n_head, int n_head_kv, int head_dim, const float* bq,
                                  const float* bk, const float* bv,
                                  const float* q_norm, const float* k_norm, float eps, const double* __restrict__ inv_freq,
                                  int pos0, const int32_t* pos_dev, __half* __restrict__ kc, __half* __restrict__ vc, KvMap kv,
                                  RopeTable rope, __half* __restrict__ q16, float q16_scale) {
    if (!kEarly) {
        pdl_enter<kEarlyFinish>();  // launched as a programmatic dependent (cuda/pdl.cuh: the early trigger)
    }
    const int unit = static_cast<int>(blockIdx.x) * (blockDim.x / 32) + static_cast<int>(threadIdx.x / 32);
    const int per_token = n_head + 2 * n_head_kv;
    if (unit >= n * per_token) return;  // warp-uniform (a CTA's trigger: all its threads triggered or exited)
    const int lane = threadIdx.x % 32, t = unit / per_token, u = unit % per_token;
    const int pos = pos_dev ? pos_dev[t] : pos0 + t;
    const int kind = u < n_head ? 0 : u < n_head + n_head_kv ? 1 : 2;  // q, k, v
    const int head = kind == 0 ? u : kind == 1 ? u - n_head : u - n_head - n_head_kv;
    const int64_t kv_dim = static_cast<int64_t>(n_head_kv) * head_dim;
    const float* src = kind == 0 ? q_in + t * ld_q : (kind == 1 ? k : v) + t * ld_kv;
    src += static_cast<int64_t>(head) * head_dim;
    const float* bias = kind == 0 ? bq : kind == 1 ? bk : bv;
    const float* norm = kind == 0 ? q_norm : kind == 1 ? k_norm : nullptr;
    const int half = head_dim / 2;  // at most 64: two pairs (j, j + half) per lane
    // The rotation of pair j at the token's position: the context's table where it reaches, else computed.
    auto rotation = [&](int j, float& c, float& sv) {
        if (pos < rope.rows) {  // pos >= 0: a position of the context
            const float2 cs = rope.cs[static_cast<int64_t>(pos) * half + j];
            c = cs.x, sv = cs.y;
        } else {
            double sn, cs;
            sincos(static_cast<double>(pos) * inv_freq[j], &sn, &cs);
            c = static_cast<float>(cs), sv = static_cast<float>(sn);
        }
    };
    auto cache_row = [&] { return kv_row(kv, t, pos) * kv_dim + static_cast<int64_t>(head) * head_dim; };
    // The early form's values (unused by the other, which reads each where it is used).
    float ba[2] = {0.0f, 0.0f}, bb[2] = {0.0f, 0.0f}, na[2] = {0.0f, 0.0f}, nb[2] = {0.0f, 0.0f}, rc[2] = {0.0f, 0.0f},
          rs[2] = {0.0f, 0.0f};
    int64_t row = 0;
    if (kEarly) {
#pragma unroll
        for (int p = 0; p < 2; ++p) {
            const int j = lane + 32 * p;
            if (j >= half) continue;
            if (bias) {
                ba[p] = bias[static_cast<int64_t>(head) * head_dim + j];
                bb[p] = bias[static_cast<int64_t>(head) * head_dim + j + half];
            }
            if (norm) na[p] = norm[j], nb[p] = norm[j + half];
            if (kind != 2) rotation(j, rc[p], rs[p]);
        }
        if (kind != 0) row = cache_row();
        pdl_enter<kEarlyFinish>();  // launched as a programmatic dependent (cuda/pdl.cuh: the early trigger)
    }
    float a[2] = {0.0f, 0.0f}, b[2] = {0.0f, 0.0f};
#pragma unroll
    for (int p = 0; p < 2; ++p) {
        const int j = lane + 32 * p;
        if (j < half) {
            a[p] = src[j];
            b[p] = src[j + half];
            if (bias) {
                a[p] += kEarly ? ba[p] : bias[static_cast<int64_t>(head) * head_dim + j];
                b[p] += kEarly ? bb[p] : bias[static_cast<int64_t>(head) * head_dim + j + half];
            }
        }
    }
    if (norm) {
        const float ss = warp_sum(a[0] * a[0] + b[0] * b[0] + a[1] * a[1] + b[1] * b[1]);
        const float scale = static_cast<float>(1.0 / sqrt(static_cast<double>(ss) / head_dim + eps));
#pragma unroll
        for (int p = 0; p < 2; ++p) {
            const int j = lane + 32 * p;
            if (j < half) {
                a[p] = __fmul_rn(__fmul_rn(a[p], scale), kEarly ? na[p] : norm[j]);
                b[p] = __fmul_rn(__fmul_rn(b[p], scale), kEarly ? nb[p] : norm[j + half]);
            }
        }
    }
#pragma unroll
    for (int p = 0; p < 2; ++p) {
        const int j = lane + 32 * p;
        if (j >= half) continue;
        float x0 = a[p], x1 = b[p];
        if (kind != 2) {
            float c = rc[p], sv = rs[p];
            if (!kEarly) rotation(j, c, sv);
            x0 = __fsub_rn(__fmul_rn(a[p], c), __fmul_rn(b[p], sv));
            x1 = __fadd_rn(__fmul_rn(a[p], sv), __fmul_rn(b[p], c));
        }
        if (kind == 0) {
            const int64_t at = static_cast<int64_t>(t) * n_head * head_dim + static_cast<int64_t>(head) * head_dim;
            if (q16) {
                q16[at + j] = __float2half_rn(__fmul_rn(x0, q16_scale));
                q16[at + j + half] = __float2half_rn(__fmul_rn(x1, q16_scale));
            } else {
                q[at + j] = x0;
                q[at + j + half] = x1;
            }
        } else {
            __half* dst = (kind == 1 ? kc : vc) + (kEarly ? row : cache_row());
            dst[j] = __float2half_rn(x0);
            dst[j + half] = __float2half_rn(x1);
        }
    }
}

// out[p * half + j] = the (cos, sin) qkv_finish_kernel takes for position p and pair j.
__global__ void rope_table_kernel(const double* __restrict__ inv_freq, int half, int rows, float2* __restrict__ out) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= static_cast<int64_t>(rows) * half) return;
    const int p = static_cast<int>(i / half), j = static_cast<int>(i % half);
    double sn, cs;
    sincos(static_cast<double>(p) * inv_freq[j], &sn, &cs);
    out[i] = make_float2(static_cast<float>(cs), static_cast<float>(sn));
}

__global__ void gather_rows_kernel(const float* __restrict__ x, const float* __restrict__ add, const int32_t* __restrict__ rows, int dim,
                                   float* __restrict__ out) {
    pdl_wait();  // launched as a programmatic dependent (cuda/pdl.cuh)
    pdl_launch_dependents();
    const int i = blockIdx.y, d = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    if (d >= dim) return;
    const int64_t at = static_cast<int64_t>(rows[i]) * dim + d;
    out[static_cast<int64_t>(i) * dim + d] = add ? __fadd_rn(x[at], add[at]) : x[at];
}

}  // namespace
}  // namespace minfer::cuda::nr
