// The CUDA kernels of the forward pass and their launchers. Written for clarity first; each one is
// checked against the CPU backend in tests/test_cuda.cpp.
#include "cuda/kernels.cuh"

#include <algorithm>
#include <cmath>

#include "cuda/common.cuh"
#include "cuda/dequant.cuh"
#include "cuda/matvec_impl.cuh"  // mv::xq_put4: the quantized input of the int8 mat-vec
#include "cuda/norm_rope.cuh"  // the row kernels the emulator tests run too

namespace minfer::cuda {
namespace {

// ---- dequantization, embedding --------------------------------------------------------------------

template <Type T>
__global__ void dequant_f16_kernel(const uint8_t* w, int64_t rows, int64_t cols, __half* out) {
    const int64_t per_row = cols / 8;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows * per_row) return;
    const int64_t r = i / per_row, e0 = (i % per_row) * 8;
    float y[8];
    deq8<T>(w + r * row_bytes_of<T>(cols), e0, y);
    __align__(16) __half h[8];
    for (int j = 0; j < 8; ++j) h[j] = __float2half_rn(y[j]);
    *reinterpret_cast<uint4*>(out + r * cols + e0) = *reinterpret_cast<const uint4*>(h);
}

template <Type T>
__global__ void embed_kernel(const uint8_t* table, int64_t cols, const int32_t* tokens, int n, float* out) {
    pdl_wait();  // launched as a programmatic dependent (cuda/pdl.cuh)
    pdl_launch_dependents();
    const int64_t per_row = cols / 8;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n * per_row) return;
    const int64_t t = i / per_row, e0 = (i % per_row) * 8;
    float y[8];
    deq8<T>(table + tokens[t] * row_bytes_of<T>(cols), e0, y);
    float4* o = reinterpret_cast<float4*>(out + t * cols + e0);
    o[0] = make_float4(y[0], y[1], y[2], y[3]);
    o[1] = make_float4(y[4], y[5], y[6], y[7]);
}

// Element-wise kernels over f32 arrays take 4 elements per thread: one 16-byte load per input and an
// 8-byte f16 store where the 4 lie inside the array and `vec` says the pointers allow it (inputs 16-byte,
// output 8-byte aligned: vec_ok), element by element otherwise.
constexpr int kVec = 4, kVecThreads = 256;
inline unsigned vec_blocks(int64_t n) { return blocks_for((n + kVec - 1) / kVec, kVecThreads); }
inline bool vec_ok(const void* in0, const void* in1, const void* out) {
    return ((reinterpret_cast<uintptr_t>(in0) | reinterpret_cast<uintptr_t>(in1)) % 16 | reinterpret_cast<uintptr_t>(out) % 8) == 0;
}

// y[i .. i+3] = f(i) as f16 for the 4 elements of thread `i / 4` (f: element index -> float).
template <class F>
__device__ __forceinline__ void store4_f16(__half* y, int64_t i, int64_t n, bool vec, F f) {
    if (vec && i + kVec <= n) {
        const float4 v = f(i);
        __half2 h[2] = {__floats2half2_rn(v.x, v.y), __floats2half2_rn(v.z, v.w)};
        *reinterpret_cast<uint2*>(y + i) = *reinterpret_cast<const uint2*>(h);
    } else {
        for (int64_t j = i; j < i + kVec && j < n; ++j) {
            const float4 v = f(j);
            y[j] = __float2half_rn(v.x);
        }
    }
}
// The 4 floats of p from i on (vec and inside n), else element i alone (in x).
__device__ __forceinline__ float4 load4(const float* p, int64_t i, int64_t n, bool vec) {
    if (vec && i + kVec <= n) return *reinterpret_cast<const float4*>(p + i);
    return make_float4(p[i], 0.0f, 0.0f, 0.0f);
}

__global__ void to_f16_kernel(const float* x, __half* y, int64_t n, bool vec) {
    const int64_t i = kVec * (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x);
    if (i < n) store4_f16(y, i, n, vec, [&](int64_t at) { return load4(x, at, n, vec); });
}

// ---- element-wise and normalization -------------------------------------------------------------------

__global__ void add_bias_kernel(float* x, int64_t total, int cols, const float* b) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < total) x[i] += b[i % cols];
}

__global__ void rope_kernel(float* x, int n, int n_heads, int head_dim, int pos0, const double* inv_freq) {
    const int half = head_dim / 2;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= static_cast<int64_t>(n) * n_heads * half) return;
    const int j = static_cast<int>(i % half);
    const int64_t th = i / half;  // token * n_heads + head
    const int t = static_cast<int>(th / n_heads);
    double sn, cs;
    sincos(static_cast<double>(pos0 + t) * inv_freq[j], &sn, &cs);
    const float c = static_cast<float>(cs), s = static_cast<float>(sn);
    float* v = x + th * head_dim;
    const float a = v[j], b = v[j + half];
    v[j] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    v[j + half] = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
}

__global__ void store_kv_kernel(const float* k, const float* v, __half* kc, __half* vc, int64_t kv_dim, int pos0, KvMap kv) {
    const int t = blockIdx.y;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < kv_dim) {
        const int64_t at = kv_row(kv, t, pos0 + t) * kv_dim + i;
        kc[at] = __float2half_rn(k[t * kv_dim + i]);
        vc[at] = __float2half_rn(v[t * kv_dim + i]);
    }
}

// silu(g) * u as f16 only: the input of the down projection's GEMM (the f32 product is not needed).
__device__ __forceinline__ float silu_times(float x, float u) { return x / (1.0f + expf(-x)) * u; }

// Row blockIdx.y: width elements of g and u from row * ld on, out from row * width on.
__device__ __forceinline__ float4 load4(const __half* p, int64_t i, int64_t n, bool vec) {
    if (vec && i + kVec <= n) {
        const uint2 w = *reinterpret_cast<const uint2*>(p + i);
        const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&w.x)), b = __half22float2(*reinterpret_cast<const __half2*>(&w.y));
        return make_float4(a.x, a.y, b.x, b.y);
    }
    return make_float4(__half2float(p[i]), 0.0f, 0.0f, 0.0f);
}

template <class T>
__global__ void swiglu_f16_kernel(const T* g, const T* u, __half* out, int64_t width, int64_t ld, bool vec) {
    const int64_t i = kVec * (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x), row = blockIdx.y;
    g += row * ld, u += row * ld, out += row * width;
    if (i < width)
        store4_f16(out, i, width, vec, [&](int64_t at) {
            const float4 x = load4(g, at, width, vec), y = load4(u, at, width, vec);
            return make_float4(silu_times(x.x, y.x), silu_times(x.y, y.y), silu_times(x.z, y.z), silu_times(x.w, y.w));
        });
}

__global__ void swiglu_kernel(float* g, const float* u, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) {
        const float x = g[i];
        g[i] = x / (1.0f + expf(-x)) * u[i];
    }
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}

}  // namespace

bool type_supported(Type t) {
    return dispatch_type(t, [](auto) {});
}

void dequant_f16(Type t, const void* w, int64_t rows, int64_t cols, __half* out, cudaStream_t stream) {
    const int64_t n = rows * (cols / 8);
    const bool known = dispatch_type(t, [&](auto tag) {
        dequant_f16_kernel<decltype(tag)::value><<<blocks_for(n, 256), 256, 0, stream>>>(static_cast<const uint8_t*>(w), rows, cols, out);
    });
    if (!known) fail(MINFER_ERR_UNSUPPORTED, "CUDA dequant: tensor type %d", static_cast<int>(t));
    check_launch("dequant_f16");
}

void embed_rows(Type t, const void* table, int64_t cols, const int32_t* tokens, int n, float* out, cudaStream_t stream) {
    const int64_t total = n * (cols / 8);
    const bool known = dispatch_type(t, [&](auto tag) {
        check(launch_pdl(embed_kernel<decltype(tag)::value>, dim3(blocks_for(total, 256)), dim3(256), 0, stream,
                         static_cast<const uint8_t*>(table), cols, tokens, n, out),
              "embed");
    });
    if (!known) fail(MINFER_ERR_UNSUPPORTED, "CUDA embedding: tensor type %d", static_cast<int>(t));
}

void to_f16(const float* x, __half* y, int64_t n, cudaStream_t stream) {
    to_f16_kernel<<<vec_blocks(n), kVecThreads, 0, stream>>>(x, y, n, vec_ok(x, x, y));
    check_launch("to_f16");
}

// The RMSNorm's weights, and qkv_finish's bias, norm weights, rotations and cache rows, read before the
// kernels' pdl_wait (1), or after it as measured until 2026-12-05 (0; cuda/norm_rope.cuh, `kEarly`).
// Written without a GPU (2026-12-05, thirteenth session); measured on an H100 (docs/perf.md, 2026-12-06):
// tg128 +0.1-0.3% on the 7B's q4_K_M, -0.3% on the 0.5B's q8_0, within the noise: off.
#ifndef MINFER_ROW_PREWAIT
#define MINFER_ROW_PREWAIT 0
#endif
constexpr bool kRowPrewait = MINFER_ROW_PREWAIT != 0;

namespace {
void launch_rms_norm(float* x, const float* add, int64_t rows, int dim, const float* w, float eps, float* out, cudaStream_t stream,
                     __half* out16, void* xq) {
    if (!out && !out16) fail(MINFER_ERR_INTERNAL, "rms_norm: no output");
    if (add && (add == out || add == x || out == x))
        fail(MINFER_ERR_INTERNAL, "rms_norm: with a residual add, x, its input and the output must be apart");
    const bool aligned = (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(add) | reinterpret_cast<uintptr_t>(w) |
                          reinterpret_cast<uintptr_t>(out) | reinterpret_cast<uintptr_t>(out16) | reinterpret_cast<uintptr_t>(xq)) %
                          16 ==
                      0;
    if (xq && (dim % 32 != 0 || !aligned || dim > nr::kRmsVec * 4 * 1024))
        fail(MINFER_ERR_INTERNAL, "rms_norm: a quantized copy needs aligned rows of a multiple of 32 (%d)", dim);
    const bool vec = aligned && nr::rms_vec(dim);
    const dim3 grid(static_cast<unsigned>(rows)), block(static_cast<unsigned>(nr::rms_threads(dim, vec)));
    if (vec) {
        check(launch_pdl(add ? nr::rms_norm_vec_kernel<true, kRowPrewait> : nr::rms_norm_vec_kernel<false, kRowPrewait>, grid, block, 0,
                         stream, x, add, dim, w, eps, out, out16, static_cast<uint8_t*>(xq)),
              "rms_norm");
    } else {
        check(launch_pdl(nr::rms_norm_kernel, grid, block, 0, stream, x, add, dim, w, eps, out, out16), "rms_norm");
    }
}
}  // namespace

void rms_norm(const float* x, int64_t rows, int dim, const float* w, float eps, float* out, cudaStream_t stream, __half* out16,
              void* xq) {
    // x is only read without an add: the kernels' pointer is writable for the add's sake alone
    launch_rms_norm(const_cast<float*>(x), nullptr, rows, dim, w, eps, out, stream, out16, xq);
}

void add_rms_norm(float* x, const float* add, int64_t rows, int dim, const float* w, float eps, float* out, cudaStream_t stream,
                  __half* out16, void* xq) {
    if (!add) fail(MINFER_ERR_INTERNAL, "add_rms_norm: nothing to add");
    launch_rms_norm(x, add, rows, dim, w, eps, out, stream, out16, xq);
}

void add_bias(float* x, int64_t rows, int cols, const float* b, cudaStream_t stream) {
    const int64_t total = rows * cols;
    add_bias_kernel<<<blocks_for(total, 256), 256, 0, stream>>>(x, total, cols, b);
    check_launch("add_bias");
}

void rope(float* x, int n, int n_heads, int head_dim, int pos0, const double* inv_freq, cudaStream_t stream) {
    const int64_t total = static_cast<int64_t>(n) * n_heads * (head_dim / 2);
    rope_kernel<<<blocks_for(total, 256), 256, 0, stream>>>(x, n, n_heads, head_dim, pos0, inv_freq);
    check_launch("rope");
}

void store_kv(const float* k, const float* v, __half* k_cache, __half* v_cache, int n, int64_t kv_dim, int pos0, const KvMap& kv,
              cudaStream_t stream) {
    if (n <= 0) return;
    store_kv_kernel<<<dim3(blocks_for(kv_dim, 256), static_cast<unsigned>(n)), 256, 0, stream>>>(k, v, k_cache, v_cache, kv_dim, pos0, kv);
    check_launch("store_kv");
}

void qkv_finish(const QkvIn& in, float* q, int n, int n_head, int n_head_kv, int head_dim, const float* bq, const float* bk,
                const float* bv, const float* q_norm, const float* k_norm, float eps, const double* inv_freq, int pos0,
                const int32_t* pos_dev, __half* k_cache, __half* v_cache, const KvMap& kv, cudaStream_t stream, const RopeTable& rope,
                __half* q16, float q16_scale) {
    if (head_dim > 128 || head_dim % 2 != 0) fail(MINFER_ERR_INTERNAL, "qkv_finish: head_dim %d", head_dim);
    if (q16 && !(q16_scale > 0.0f)) fail(MINFER_ERR_INTERNAL, "qkv_finish: an f16 q without its scale");
    if (q16 && n > 0) {  // its rows are narrower than the input's: no in-place form
        const auto* a = reinterpret_cast<const char*>(in.q);
        const auto* b = reinterpret_cast<const char*>(q16);
        const int64_t in_bytes = ((n - 1) * in.ld_q + int64_t{n_head} * head_dim) * int64_t{sizeof(float)};
        const int64_t out_bytes = int64_t{n} * n_head * head_dim * int64_t{sizeof(__half)};
        if (a < b + out_bytes && b < a + in_bytes) fail(MINFER_ERR_INTERNAL, "qkv_finish: the f16 q overlaps the projections");
    }
    if (rope.rows > 0 && !rope.cs) fail(MINFER_ERR_INTERNAL, "qkv_finish: a RoPE table without rotations");
    const int64_t q_dim = static_cast<int64_t>(n_head) * head_dim, kv_dim = static_cast<int64_t>(n_head_kv) * head_dim;
    if (in.ld_q < q_dim || in.ld_kv < kv_dim || (in.q == q && in.ld_q != q_dim))
        fail(MINFER_ERR_INTERNAL, "qkv_finish: row strides %lld, %lld", static_cast<long long>(in.ld_q), static_cast<long long>(in.ld_kv));
    const int64_t units = static_cast<int64_t>(n) * (n_head + 2 * n_head_kv);
    check(launch_pdl(nr::qkv_finish_kernel<kRowPrewait>, dim3(blocks_for(units, 4)), dim3(128), 0, stream, in.q, in.k, in.v, in.ld_q, in.ld_kv, q, n,
                     n_head, n_head_kv, head_dim, bq, bk, bv, q_norm, k_norm, eps, inv_freq, pos0, pos_dev, k_cache, v_cache, kv, rope,
                     q16, q16_scale),
          "qkv_finish");
}

void rope_table(const double* inv_freq, int head_dim, int rows, float2* out, cudaStream_t stream) {
    if (rows <= 0) return;
    const int half = head_dim / 2;
    nr::rope_table_kernel<<<blocks_for(static_cast<int64_t>(rows) * half, 256), 256, 0, stream>>>(inv_freq, half, rows, out);
    check_launch("rope_table");
}

void gather_rows(const float* x, const int32_t* rows, int n, int dim, float* out, cudaStream_t stream, const float* add) {
    if (n <= 0) return;
    check(launch_pdl(nr::gather_rows_kernel, dim3(blocks_for(dim, 256), static_cast<unsigned>(n)), dim3(256), 0, stream, x, add, rows, dim,
                     out),
          "gather_rows");
}

void swiglu(float* gate, const float* up, int64_t n, cudaStream_t stream) {
    swiglu_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(gate, up, n);
    check_launch("swiglu");
}

void swiglu_f16(const float* gate, const float* up, __half* out, int64_t n, cudaStream_t stream) { swiglu_f16_rows(gate, up, 1, n, n, out, stream); }

namespace {
template <class T>
void launch_swiglu_f16(const T* gate, const T* up, int rows, int64_t width, int64_t ld, __half* out, cudaStream_t stream) {
    if (rows <= 0 || width <= 0) return;
    if (rows > 65535) fail(MINFER_ERR_INTERNAL, "swiglu_f16: %d rows", rows);
    const bool vec = vec_ok(gate, up, out) && (rows == 1 || (ld % kVec == 0 && width % kVec == 0));
    swiglu_f16_kernel<T><<<dim3(vec_blocks(width), static_cast<unsigned>(rows)), kVecThreads, 0, stream>>>(gate, up, out, width, ld, vec);
    check_launch("swiglu_f16");
}
}  // namespace

void swiglu_f16_rows(const float* gate, const float* up, int rows, int64_t width, int64_t ld, __half* out, cudaStream_t stream) {
    launch_swiglu_f16(gate, up, rows, width, ld, out, stream);
}
void swiglu_f16_rows(const __half* gate, const __half* up, int rows, int64_t width, int64_t ld, __half* out, cudaStream_t stream) {
    launch_swiglu_f16(gate, up, rows, width, ld, out, stream);
}

void add(float* x, const float* y, int64_t n, cudaStream_t stream) {
    add_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(x, y, n);
    check_launch("add");
}

}  // namespace minfer::cuda
