// Quantized tensor formats on the CPU: dequantization exactly as GGUF defines it, quantizers from f32,
// activation preparation and dot products on quantized blocks. Block layouts are in quant/blocks.h
// (one copy, shared with cuda/). One runtime switch per operation picks the per-type code; the SIMD
// level (AVX2+FMA or portable) is chosen once at run time, and both give the same results within
// rounding.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/types.h"

namespace minfer::quant {

// Bytes of a row of n elements of type t (n a multiple of the block size).
size_t row_bytes(Type t, int64_t n);

// Dequantizes n elements (a multiple of the type's block size) of type t into f32.
// Supported for every type with TypeStatus::supported and for Q8_0, Q8_1, Q8_K.
void dequantize_row(Type t, const void* src, float* dst, int64_t n);

// Quantizes n f32 values into blocks of type t: scales and minimums derived from the data, so the blocks
// are valid and representative. Supported for the same types as dequantize_row.
void quantize_row(Type t, const float* src, void* dst, int64_t n);

// The activation format a weight type's dot product consumes: F32 for f32/f16/bf16, Q8_0 for
// q4_0/q5_0/q8_0, Q8_1 for q4_1/q5_1, Q8_K for q2_K..q6_K.
Type vec_dot_type(Type weight);

// Prepares one activation row of n floats for dot products with weights of type `weight`, writing
// row_bytes(vec_dot_type(weight), n) bytes to dst.
void prepare_activation(Type weight, const float* x, void* dst, int64_t n);

// Dot product of one weight row (type t, n elements) with one prepared activation row.
using VecDotFn = float (*)(int64_t n, const void* w, const void* a);
VecDotFn vec_dot_fn(Type weight);  // the active implementation (AVX2 when available)
inline float vec_dot(Type weight, int64_t n, const void* w, const void* a) { return vec_dot_fn(weight)(n, w, a); }

// A tile of dot products: out[t * out_stride + r] = vec_dot(n, w + r * w_stride, a + t * a_stride) for
// r < kTileRows weight rows and t < kTileCols prepared activation rows, bit for bit the vec_dot values,
// each weight block decoded once for all the activation rows. For q8_0, q4_0 and q5_0 weights (whose
// activations are Q8_0) the tile also reads both sides' block scales as f32: w_scale[r * s_stride + b]
// and a_scale[t * s_stride + b] (block_scales writes them; null for the other types). Null when the
// active implementation has no tile for this type (callers use vec_dot).
inline constexpr int kTileRows = 2, kTileCols = 4;
using VecDotTileFn = void (*)(int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride, const float* w_scale,
                              const float* a_scale, size_t s_stride, float* out, size_t out_stride);
// The forms of the tiles, each giving the same bits: 256-bit AVX2 (maddubs + madd), 256-bit AVX-VNNI
// (vpdpbusd; the q8_0 family), and AVX-512 (two weight rows per 512-bit register; vpdpbusd for the q8_0
// family). The K-quant tiles are the AVX2 ones under avx_vnni.
enum class TileIsa { avx2, avx_vnni, avx512_vnni };
VecDotTileFn vec_dot_tile_fn(Type weight);  // the fastest form this CPU has
// That form; null where the CPU lacks it (or the active implementation has no tile for the type).
VecDotTileFn vec_dot_tile_fn(Type weight, TileIsa isa);
bool cpu_has(TileIsa isa);

// The f16 block scales of `rows` rows of n elements (stride bytes apart) of type t, one of q4_0, q5_0 and
// q8_0 (each block starts with its scale; prepared Q8_0 activations too), as f32: out[r * (n / 32) + b].
// The tiles read them converted once per matmul instead of once per tile.
void block_scales(Type t, const void* rows_base, size_t stride, int64_t rows, int64_t n, float* out);

// y[i] += a * x[i] for i < n (f32): attention's weighted sum of value rows. The active implementation.
using AxpyFn = void (*)(int64_t n, float a, const float* x, float* y);
AxpyFn axpy_fn();

// Attention over f32 K/V rows (the CPU backend's cache) for one query head. scores: out[j] = scale *
// dot(q, k + j * k_stride) for j < count. softmax: s[j] = e^(s[j] - max) for j < len (a NaN score left
// out of the max; e^ within 1e-6 relative, or below 1e-38), returning 1 / their sum (summed in double).
// weighted_sum: o[d] += (p[j] * scale) * v[j * v_stride + d] for j < count in order of j, one FMA each
// (axpy's operations), d < hd.
struct AttnKernels {
    void (*scores)(int hd, const float* q, const float* k, size_t k_stride, int count, float scale, float* out);
    float (*softmax)(float* s, int len);
    void (*weighted_sum)(int hd, const float* p, float scale, const float* v, size_t v_stride, int count, float* o);
};
// The kernels for head size hd: AVX-512 where the CPU has it and hd is a multiple of 16 (allow_512), else
// AVX2 where hd is a multiple of 8; else all null (the caller uses vec_dot_fn(F32), std::exp and axpy_fn).
AttnKernels attn_kernels(int hd, bool allow_512 = true);

// swiglu's element-wise step: g[i] = g[i] / (1 + e^-g[i]) * u[i] for i < n. The active implementation
// (AVX-512, or AVX2 with allow_512 false or no AVX-512: e^ as attention's; else std::exp).
using SiluMulFn = void (*)(float* g, const float* u, size_t n);
SiluMulFn silu_mul_fn(bool allow_512 = true);

// "avx2" or "scalar". force_portable(true) makes vec_dot_fn return the portable code (tests compare
// the two); it is process-wide and not meant for production use.
const char* simd_level();
void force_portable(bool on);

}  // namespace minfer::quant
