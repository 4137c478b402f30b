// Host launchers of the CUDA kernels (cuda/kernels.cu; attention: cuda/attention.cu). Everything is
// asynchronous on `stream`; launch errors are checked and thrown as minfer::Error; errors during execution
// surface at the next synchronization (CudaOps::read). Device pointers only. Shapes follow engine/ops.h.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kv_map.cuh"
#include "cuda/rope_table.cuh"  // RopeTable
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
// With accumulate, y[r] += the product (each row is written by one thread: a residual add for free).
void matvec(quant::Type t, const void* w, int64_t rows, int64_t cols, const float* x, float* y, cudaStream_t stream,
            bool accumulate = false);
// n (1 to 3) mat-vecs of one type and width on the same x, y[i] = W_i x (q, k, v; gate, up): one launch
// when every W_i but the last ends on the kernel's row granule (16 rows for the quantized types, 1 or 4
// for f32/f16/bf16), else one per matrix.
void matvec_multi(quant::Type t, int n, const void* const* w, const int64_t* rows, int64_t cols, const float* x, float* const* y,
                  cudaStream_t stream, bool accumulate = false);
// The down projection of SwiGLU: y (+)= W (silu(gate) * up), gate and up of `cols` floats. The quantized
// types form the product as the kernel loads its input (one launch); the others overwrite gate with it
// first (the swiglu kernel).
void matvec_swiglu(quant::Type t, const void* w, int64_t rows, int64_t cols, float* gate, const float* up, float* y,
                   cudaStream_t stream, bool accumulate = false);
// The int8 path of the decode mat-vec (q4_0, q8_0 and its grouped layout, q4_K, q6_K; for one input also
// the types and copies matvec_int8_supported lists, at the widths matvec_int8_takes allows): the input is
// quantized once into xq (matvec_xq_bytes(cols) bytes, 16-byte aligned) by quantize_x or rms_norm's xq
// output, and every matrix that multiplies it reads xq: two int8 digits a value (about 15 bits), integer
// products, an error of about 1e-5 of the largest input per 32 columns. up (optional): input silu(x) * up.
//
// Several inputs (a few tokens: ncols of them, up to kMatvecMaxCols) take ncols * matvec_xq_bytes(cols)
// bytes in a block-interleaved layout (cuda/matvec_impl.cuh, xq_slot) that quantize_x and rms_norm write
// for `rows` > 1 rows; every weight is then read once for all of them, and y[i] is [ncols][rows[i]],
// token-major as the GEMMs write it.
constexpr int kMatvecMaxCols = 8;  // mv::kColsN
// Whether the int8 path has type t for ncols input columns (at some row length): the four types above for 1 to
// kMatvecMaxCols, and q5_K, q4_1, q5_1, padded q6_K (mv::kQ6_KP, q6k_pad below), grouped q5_0 (mv::kQ5_0G,
// q50_group_copy below) and arranged q2_K and q3_K (mv::kQ2_KP, kQ3_KP, k23_arrange below) for one
// (q5_K unless built with -DMINFER_DP4A_Q5K=0, q4_1 and q5_1 with -DMINFER_DP4A_Q41_Q51=1, cuda/matvec.cu;
// the copies only in builds with the dp4a kernel).
bool matvec_int8_supported(quant::Type t, int ncols = 1);
// Whether it takes a matrix of type t and `cols` columns: matvec_int8_supported, cols a multiple of 32, and
// for q4_1 (q5_1) of 128 (64), so that the file's rows start 16-byte aligned.
bool matvec_int8_takes(quant::Type t, int ncols, int64_t cols);
int64_t matvec_xq_bytes(int64_t cols);
void quantize_x(const float* x, const float* up, int64_t cols, void* xq, cudaStream_t stream, int rows = 1);
// As matvec_multi, the input being xq (ncols vectors).
void matvec_xq(quant::Type t, int n, const void* const* w, const int64_t* rows, int64_t cols, const void* xq, float* const* y,
               cudaStream_t stream, bool accumulate = false, int ncols = 1);
// Whether matvec_xq_pair takes types t0 and t1 in one launch: q4_K beside the padded q6_K copy (mv::kQ6_KP),
// one input column (a Q4_K_M layer's q and k beside a v of more bits), unless built with
// -DMINFER_DP4A_MIXED=0 or without the dp4a kernels (cuda/matvec.cu).
bool matvec_xq_pairs(quant::Type t0, quant::Type t1);
// As matvec_xq (one input column) over n matrices, the first n0 of type t0 and the rest of t1, in one
// launch (matvec_xq_pairs(t0, t1) must hold); as two matvec_xq launches where the rows don't allow one
// (a matrix but the last whose rows are not a multiple of 16).
void matvec_xq_pair(quant::Type t0, int n0, quant::Type t1, int n, const void* const* w, const int64_t* rows, int64_t cols, const void* xq,
                    float* const* y, cudaStream_t stream, bool accumulate = false);
// The one-launch matvec_xq_pair calls in this process so far (a test's proof that the forward takes them).
uint64_t matvec_pair_launches();
// Regroups a q8_0 matrix in place (rows x cols, cols a multiple of 256, 16-byte aligned) into the layout
// that the mat-vecs read as mv::kQ8_0G (cuda/block_bits.cuh): the same bytes per 256 columns, the eight
// blocks' scales first, then their codes. After it, only the mat-vec functions above (given kQ8_0G) read the
// matrix for their results; nothing else on the device knows the layout (cuda/backend.cu groups only
// matrices that have an f16 copy and are not the embedding table; its dequantization sweep, a timing,
// reads them as q8_0 and discards the values).
void q80_group(void* w, int64_t rows, int64_t cols, cudaStream_t stream);
// Writes dst, a copy of the q8_0 matrix src (rows x cols, cols a multiple of 32, src 2-byte aligned) in the
// grouped layout, rows of mv::q80g_row_bytes(cols) bytes (a padded last group where cols is not a multiple
// of 256; dst 16-byte aligned): the one-token mat-vec's copy of a matrix the load does not regroup in place
// (MINFER_Q80_COPY, cuda/model.cuh). matvec_xq with ncols = 1 is the only reader of a padded one.
void q80_group_copy(const void* src, void* dst, int64_t rows, int64_t cols, cudaStream_t stream);
// The one-input dp4a mat-vec launches on grouped q8_0 (in place or copied) in this process so far.
uint64_t q80g_matvec_launches();
// Whether this build's one-input int8 mat-vec reads grouped q8_0 rows with a padded last group (its dp4a
// kernel does; builds without it, -DMINFER_MATVEC_DP4A=0, take the int8 MMA kernel, which does not).
bool matvec_reads_padded_q80();
// Writes dst, a copy of the q5_0 matrix src (rows x cols, cols a multiple of 32, src 2-byte aligned) in the
// grouped layout that the one-input int8 mat-vec reads as mv::kQ5_0G (cuda/block_bits.cuh; rows of
// mv::q50g_row_bytes(cols) bytes, a padded last group where cols is not a multiple of 256; dst 16-byte
// aligned): the load's copy for the one-token mat-vec (MINFER_Q50_COPY, cuda/model.cuh). matvec_xq with
// ncols = 1 is its only reader, in builds with the one-input dp4a kernel (matvec_int8_supported(kQ5_0G, 1)).
void q50_group_copy(const void* src, void* dst, int64_t rows, int64_t cols, cudaStream_t stream);
// The mat-vec launches on grouped q5_0 copies in this process so far (a test's proof that the copies are read).
uint64_t q50g_matvec_launches();
// Writes dst, a copy of the q2_K or q3_K (t) matrix src (rows x cols, cols a multiple of 256, src 2-byte
// aligned) in the arranged layout that the one-input int8 mat-vec reads as mv::kQ2_KP or kQ3_KP
// (cuda/block_bits.cuh; rows of mv::k23p_row_bytes(kQ2_KP or kQ3_KP, cols) bytes, dst 16-byte aligned): the
// load's copy for the one-token mat-vec (MINFER_K23_COPY, cuda/model.cuh). matvec_xq with ncols = 1 is its
// only reader, in builds with the one-input dp4a kernel (matvec_int8_supported(kQ2_KP, 1)).
void k23_arrange(quant::Type t, const void* src, void* dst, int64_t rows, int64_t cols, cudaStream_t stream);
// The mat-vec launches on arranged q2_K and q3_K copies in this process so far.
uint64_t k23p_matvec_launches();
// The one-input dp4a launches on q4_1 and q5_1 matrices in this process so far.
uint64_t q41_q51_matvec_launches();
// Writes dst, a copy of the q6_K matrix src (rows x cols, cols a multiple of 256) in the padded layout
// that the one-input int8 mat-vec reads as mv::kQ6_KP (cuda/block_bits.cuh; rows of mv::q6kp_row_bytes(cols)
// bytes, dst 16-byte aligned). matvec_xq with ncols = 1 is its only reader (matvec_int8_supported says so).
void q6k_pad(const void* src, void* dst, int64_t rows, int64_t cols, cudaStream_t stream);
// The mat-vec launches on padded q6_K copies in this process so far (a test's proof that the copies are read).
uint64_t q6kp_matvec_launches();
// The same product by the simple per-8-element kernel (deq8, f32 FMAs): the path of q8_1 and q8_K, and
// the baseline that tests/bench_matvec compares against.
void matvec_reference(quant::Type t, const void* w, int64_t rows, int64_t cols, const float* x, float* y,
                      cudaStream_t stream);
// y[i] = f16(x[i]).
void to_f16(const float* x, __half* y, int64_t n, cudaStream_t stream);
// C[m][n] = sum_k A[m][k] * B[n][k]: f16 inputs, f32 accumulation and output, tensor cores (cuda/gemm.cu,
// cuda/gemm_tc.cuh: 128- or 256-token by 128-row tiles, cp.async stages, wgmma on sm_90a). K must be a
// multiple of 8 and A and B 16-byte aligned; M and N are arbitrary. With accumulate, C[m][n] += the sum
// (a residual add in the epilogue).
void gemm_f16(const __half* a, const __half* b, float* c, int m, int n, int k, cudaStream_t stream, bool accumulate = false);
// The narrow GEMM (cuda/gemm_narrow.cu): y_i[t][r] = sum_k x[t][k] * w_i[r][k] (accumulate: +=) for m <=
// kNarrowMaxTokens tokens and nseg (1 to 3) f16 weights of the same width k that share x (q, k, v; gate,
// up): one launch that reads each weight once, split over every SM whatever the shapes, deterministic.
// k a multiple of 8, x and every w 16-byte aligned. Scratch: a workspace of gemm_narrow_ws_floats() floats
// and gemm_narrow_counters(rows) ints, zeroed once before the first launch (launches leave them zero),
// for launches of up to `rows` weight rows in all; one launch at a time may use them (one stream).
constexpr int kNarrowMaxTokens = 64;
struct NarrowScratch {
    float* ws = nullptr;
    int64_t ws_floats = 0;
    int* counters = nullptr;
    int64_t n_counters = 0;
};
int64_t gemm_narrow_ws_floats();
int64_t gemm_narrow_counters(int64_t rows);
void gemm_narrow(const __half* x, int m, int64_t k, int nseg, const __half* const* w, const int64_t* rows, float* const* y,
                 bool accumulate, const NarrowScratch& scratch, cudaStream_t stream);
// The same on quantized weights as stored (the types gemm_narrow_quant_supports, each weight its own: rows
// of row_bytes(type, k) bytes back to back from a 16-byte-aligned start), dequantized in shared memory to
// the bits of the f16 cache: the result is gemm_narrow's on the cache, bit for bit, where both launches
// cut the work alike (same tile width and CTA count), for a third to a half of the bytes read.
bool gemm_narrow_quant_supports(quant::Type t, int64_t k);
void gemm_narrow_quant(const __half* x, int m, int64_t k, int nseg, const quant::Type* types, const void* const* w, const int64_t* rows,
                       float* const* y, bool accumulate, const NarrowScratch& scratch, cudaStream_t stream);
// The fused dequant-in-GEMM: as gemm_f16 with B = dequant(w) ([n] rows of k elements of type t), each B
// k-tile dequantized into shared memory as the GEMM runs (q4_K, q6_K, q8_0 from the raw bytes its stages
// bring, other types from global memory); bit-identical to dequant_f16 followed by gemm_f16.
void gemm_fused(quant::Type t, const __half* a, const void* w, float* c, int m, int n, int k, cudaStream_t stream,
                bool accumulate = false);

// out16 (optional, 16-byte aligned): also writes each result as f16 (what to_f16 of out gives); with it,
// out may be null (only the f16 copy is written, for a GEMM that reads nothing else). xq
// (optional; dim a multiple of 32): also writes each row quantized as quantize_x would (matvec_xq_bytes(dim)
// bytes per row).
void rms_norm(const float* x, int64_t rows, int dim, const float* w, float eps, float* out, cudaStream_t stream,
              __half* out16 = nullptr, void* xq = nullptr);
// rms_norm of x + add (rows like x), the sum written back to x first: a residual add deferred from the
// GEMM before it (MINFER_DEFER_RESIDUAL), one f32 addition a value as the GEMM's epilogue adds it. x,
// add and out are three different arrays (the sum stays in x).
void add_rms_norm(float* x, const float* add, int64_t rows, int dim, const float* w, float eps, float* out, cudaStream_t stream,
                  __half* out16 = nullptr, void* xq = nullptr);
void add_bias(float* x, int64_t rows, int cols, const float* b, cudaStream_t stream);
// NeoX rotary embedding in place; inv_freq[i] = base^(-2i/head_dim) in double, on the device.
void rope(float* x, int n, int n_heads, int head_dim, int pos0, const double* inv_freq, cudaStream_t stream);
// Converts n rows of kv_dim f32 values of k and of v (token t at position pos0 + t) to f16 into the cache
// rows kv_row(kv, t, pos0 + t).
void store_kv(const float* k, const float* v, __half* k_cache, __half* v_cache, int n, int64_t kv_dim, int pos0, const KvMap& kv,
              cudaStream_t stream);
// Everything between the q/k/v projections and attention, for n tokens, token t at position pos_dev[t]
// (read on the device) or, with pos_dev null, pos0 + t: q += bq, k += bk, v += bv (null: none), per-head
// RMS norm of q and k by q_norm, k_norm (null: none), RoPE of q and k (inv_freq as for rope), q written to
// `q` (below) and k, v as f16 into the cache rows kv_row(kv, t, position) (caches of one layer). head_dim <= 128.
// The projections as the GEMMs left them: token t's q at in.q + t * in.ld_q, its k and v likewise at
// in.ld_kv (three matrices, or one [n][q_dim + 2 kv_dim] of a GEMM over the concatenated weights); q,
// rotated, goes to `q` ([n][n_head * head_dim]; in.q itself when ld_q is q's width). rope (optional):
// the context's rotations (MINFER_ROPE_TABLE), read instead of computed, the same values.
struct QkvIn {
    const float *q, *k, *v;
    int64_t ld_q, ld_kv;
};
// q16 (optional): q's rows go there instead of q, as f16 of q times q16_scale (attention_qscale: the
// prefill attention's input, attention(..., q16), the same bits as the kernels make of f32 q).
void qkv_finish(const QkvIn& in, float* q, int n, int n_head, int n_head_kv, int head_dim, const float* bq, const float* bk,
                const float* bv, const float* q_norm, const float* k_norm, float eps, const double* inv_freq, int pos0,
                const int32_t* pos_dev, __half* k_cache, __half* v_cache, const KvMap& kv, cudaStream_t stream,
                const RopeTable& rope = {}, __half* q16 = nullptr, float q16_scale = 0.0f);
// The rotations qkv_finish applies at positions 0 .. rows - 1, computed once for a context instead of once
// per head and layer (MINFER_ROPE_TABLE): out[p * head_dim / 2 + j] = (cos, sin) of p * inv_freq[j], in
// double rounded to float, the values qkv_finish computes itself without the table (so its output is
// the same either way).
void rope_table(const double* inv_freq, int head_dim, int rows, float2* out, cudaStream_t stream);
// out[i][:] = x[rows[i]][:] for i < n (rows on the device), dim floats per row; add (optional, like x):
// x[rows[i]][:] + add[rows[i]][:] (a deferred residual add, as add_rms_norm adds it).
void gather_rows(const float* x, const int32_t* rows, int n, int dim, float* out, cudaStream_t stream, const float* add = nullptr);
void swiglu(float* gate, const float* up, int64_t n, cudaStream_t stream);
// out = f16(silu(gate) * up): the swiglu product as a GEMM's input, gate left as it was.
void swiglu_f16(const float* gate, const float* up, __half* out, int64_t n, cudaStream_t stream);
// The same over `rows` rows of `width` elements: row r of gate and up from r * ld on (the gate/up GEMM over
// the concatenated weights: up = gate + n_ff, ld = 2 n_ff), out [rows][width].
void swiglu_f16_rows(const float* gate, const float* up, int rows, int64_t width, int64_t ld, __half* out, cudaStream_t stream);
// The same from an f16 gate/up product (the concatenated GEMM's f16 output).
void swiglu_f16_rows(const __half* gate, const __half* up, int rows, int64_t width, int64_t ld, __half* out, cudaStream_t stream);
void add(float* x, const float* y, int64_t n, cudaStream_t stream);

// Attention of one layer over one sequence. q: [n][n_head * head_dim] (token t at position pos0 + t),
// caches of one layer (16-byte aligned) holding the sequence's positions 0 .. pos0 + n - 1 at the rows
// kv_row(kv, 0, p), out like q; query head h uses KV head h / (n_head / n_head_kv). head_dim 64 or 128
// (Qwen2 and Qwen3). `partial` is scratch for the decode split: attention_partial_floats(n_head,
// n_head_kv, head_dim, 1) floats, enough for any context length.
bool attention_head_dim_supported(int head_dim);
// The decode split scratch of a decode launch of up to max_rows rows.
int64_t attention_partial_floats(int n_head, int n_head_kv, int head_dim, int max_rows);
// pos_dev (decode only, n = 1): the query's position is read on the device (*pos_dev; pos0 is ignored),
// the launch covers the most chunks any length gets and the kernels find the split themselves, so one
// launch serves every position (a CUDA graph replays it). out16 (optional, like out in f16): n > 1, the
// output is written there instead of out (the output projection's GEMM input); n = 1, there as well.
// q16 (optional, n > 1): the queries as qkv_finish's f16 q16 rows (times attention_qscale(head_dim)),
// read instead of q; the same result to the bit.
void attention(const float* q, const __half* k_cache, const __half* v_cache, float* out, int n, int pos0, int n_head,
               int n_head_kv, int head_dim, float* partial, cudaStream_t stream, const int32_t* pos_dev = nullptr,
               const KvMap& kv = KvMap{}, __half* out16 = nullptr, const __half* q16 = nullptr);
// The scale the attention kernels multiply q by (1 / sqrt(head_dim), times log2(e): they work in exp2).
float attention_qscale(int head_dim);
// The kernel `attention` takes for n > 1 queries of head_dim on this device: "wgmma" (sm_90a, cuda/
// attention_wg.cuh), "mma.sync, 2 row tiles" or "mma.sync, 1 row tile" (cuda/attention_mma.cuh).
const char* attention_prefill_kernel(int head_dim, int n);
namespace testing_hooks {
// The mma.sync kernels even where the wgmma kernel runs (so the tests check both on a Hopper GPU).
void attention_force_mma(bool on);
// Whether this build lets the wgmma kernel run at all (-DMINFER_ATTN_WGMMA).
bool attention_wgmma_knob();
// Decode launches of one chunk a row on positions read on the device (attention_decode_rows' one_chunk),
// and (combines, given) the combine launches, enqueued in this process so far (a graph's at its capture).
uint64_t attention_decode_launches(uint64_t* combines = nullptr);
}  // namespace testing_hooks
// Decode attention of `rows` tokens, each the newest of its own sequence: row r (q and out rows r, as
// above) is at position pos_dev[r] of slot kv.slot[r] (both on the device) and attends to its positions
// 0 .. pos_dev[r]. One launch (and a combine) for all rows; `partial` holds
// attention_partial_floats(n_head, n_head_kv, head_dim, rows) floats. out16 (optional): out rounded to
// f16 as well, [rows][n_head * head_dim] (the next GEMM's input, without a conversion pass). xq
// (optional): out as the int8 mat-vec's input (the bytes quantize_x writes), row r as row xq_row0 + r of
// xq_rows (the next mat-vec's input, without a quantize_x launch). one_chunk: every row's keys in one chunk
// (no split, no combine launch), for rows the caller knows to be short (cuda/forward.cu,
// MINFER_ATTN_ONE_CHUNK); the outputs are the same either way to within the merge's rounding.
// last_launch: no decode launch of this step follows whose rows read keys the step writes (the attention's
// early trigger, cuda/early_trigger.h, is allowed only then: cuda/batch_runs.h).
void attention_decode_rows(const float* q, const __half* k_cache, const __half* v_cache, float* out, int rows, const int32_t* pos_dev,
                           int n_head, int n_head_kv, int head_dim, float* partial, cudaStream_t stream, const KvMap& kv,
                           __half* out16 = nullptr, void* xq = nullptr, int xq_row0 = 0, int xq_rows = 1, bool one_chunk = false,
                           bool last_launch = true);

// Argmax of each of `rows` rows of n_vocab logits, as keys: keys[r] = (order-preserving bits of the
// largest logit) << 32 | (0xFFFFFFFF - its lowest index); NaN counts as -INFINITY (cuda/sampling.cu).
// argmax_token(key) decodes one: the token, or -1 when every logit is -INFINITY or NaN.
void argmax_keys(const float* logits, int rows, int n_vocab, unsigned long long* keys, cudaStream_t stream);
int32_t argmax_token(unsigned long long key);

// A sampled row's candidates (cuda/topk.cuh): for each of the n_rows rows rows[r] (device ids) of `logits`,
// its m best logits as keys in descending order into keys[r * m ..] (0: none, where the vocabulary is
// smaller), and the logits of its n_extra tokens extra[r * n_extra ..] into extra_out[r * n_extra ..].
// part: n_rows * topk_chunks(n_vocab) * m keys of scratch. topk_fits says whether this GPU takes m (at most
// 256) for this vocabulary (its shared memory); topk_decode gives a key's token and logit (NaN came as
// -INFINITY).
int topk_chunks(int n_vocab);
bool topk_fits(int n_vocab, int m);
void topk_rows(const float* logits, int n_vocab, const int32_t* rows, int n_rows, int m, unsigned long long* part, unsigned long long* keys,
               const int32_t* extra, int n_extra, float* extra_out, cudaStream_t stream);
void topk_decode(unsigned long long key, int32_t& id, float& logit);

}  // namespace minfer::cuda
