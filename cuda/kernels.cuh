// Host launchers of the CUDA kernels (cuda/kernels.cu; attention: cuda/attention.cu). Everything is
// asynchronous on `stream`; launch errors are checked and thrown as minfer::Error; errors during execution
// surface at the next synchronization (CudaOps::read). Device pointers only. Shapes follow engine/ops.h.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "quant/types.h"

namespace minfer::cuda {

// True when the CUDA kernels compute with weights of type t.
bool type_supported(quant::Type t);

// out[r][c] = f16(dequant(w)[r][c]) for `rows` rows of `cols` (a multiple of 8 and of the block size).
void dequant_f16(quant::Type t, const void* w, int64_t rows, int64_t cols, __half* out, cudaStream_t stream);
// out[r][c] = dequant(w)[r][c] as f32: the rows tokens[0..n) of an embedding table (tokens on the device).
void embed_rows(quant::Type t, const void* table, int64_t cols, const int32_t* tokens, int n, float* out,
                cudaStream_t stream);
// y[r] = dot(dequant(W row r), x) for every row: the decode mat-vec, reading the quantized bytes
// (cuda/matvec.cu). w and x must be 16-byte aligned (cudaMalloc'd buffers are), cols a multiple of 8 and
// of the block size. f32-accurate for every type; one kernel launch, no allocation (graph-capturable).
void matvec(quant::Type t, const void* w, int64_t rows, int64_t cols, const float* x, float* y, cudaStream_t stream);
// The same product by the simple per-8-element kernel (deq8, f32 FMAs): the path of q8_1 and q8_K, and
// the baseline that tests/bench_matvec compares against.
void matvec_reference(quant::Type t, const void* w, int64_t rows, int64_t cols, const float* x, float* y,
                      cudaStream_t stream);
// y[i] = f16(x[i]).
void to_f16(const float* x, __half* y, int64_t n, cudaStream_t stream);
// C[m][n] = sum_k A[m][k] * B[n][k]: f16 inputs, f32 accumulation and output, tensor cores (64x64 tiles,
// cp.async double buffering). K must be a multiple of 8; M and N are arbitrary.
void gemm_f16(const __half* a, const __half* b, float* c, int m, int n, int k, cudaStream_t stream);
// The fused dequant-in-GEMM: as gemm_f16 with B = dequant(w) ([n] rows of k elements of type t), each B
// tile dequantized in registers as it is staged; bit-identical to dequant_f16 followed by gemm_f16.
void gemm_fused(quant::Type t, const __half* a, const void* w, float* c, int m, int n, int k, cudaStream_t stream);

void rms_norm(const float* x, int64_t rows, int dim, const float* w, float eps, float* out, cudaStream_t stream);
void add_bias(float* x, int64_t rows, int cols, const float* b, cudaStream_t stream);
// NeoX rotary embedding in place; inv_freq[i] = base^(-2i/head_dim) in double, on the device.
void rope(float* x, int n, int n_heads, int head_dim, int pos0, const double* inv_freq, cudaStream_t stream);
// Converts n f32 values of k and of v to f16 into the caches.
void store_kv(const float* k, const float* v, __half* k_cache, __half* v_cache, int64_t n, cudaStream_t stream);
void swiglu(float* gate, const float* up, int64_t n, cudaStream_t stream);
void add(float* x, const float* y, int64_t n, cudaStream_t stream);

// Attention of one layer. q: [n][n_head * head_dim] (token t at position pos0 + t), caches
// [n_ctx][n_head_kv * head_dim] f16 holding positions 0 .. pos0 + n - 1 (16-byte aligned), out like q;
// query head h uses KV head h / (n_head / n_head_kv). head_dim 64 or 128 (Qwen2 and Qwen3). `partial` is
// scratch for the decode split: attention_partial_floats(n_head, n_head_kv, head_dim) floats, enough for
// any context length.
bool attention_head_dim_supported(int head_dim);
int64_t attention_partial_floats(int n_head, int n_head_kv, int head_dim);
void attention(const float* q, const __half* k_cache, const __half* v_cache, float* out, int n, int pos0, int n_head,
               int n_head_kv, int head_dim, float* partial, cudaStream_t stream);

}  // namespace minfer::cuda
