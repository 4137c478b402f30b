// The CUDA backend as the engine sees it: host-only declarations (no CUDA headers), implemented in
// cuda/backend.cu, and by lib/device/no_cuda.cpp in builds without CUDA (where each call fails with
// MINFER_ERR_UNSUPPORTED; the engine never makes them there, because probe_cuda() reports no backend).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/ops.h"
#include "engine/runner.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "options/options.h"

namespace minfer::device {

// Device memory in bytes by category: one model's weights, its f16 weight cache, and the KV caches and
// scratch buffers of its live contexts.
struct Vram {
    uint64_t weights = 0;
    uint64_t w16_cache = 0;
    uint64_t kv_cache = 0;
    uint64_t scratch = 0;
};

// The device address of a registered weight. Invariant: it is stable for the lifetime of the model that
// registered it (WeightRegistry never frees or moves a copy while the registry lives), so it can key
// caches of derived data, such as the f16 weight cache.
using WeightKey = const void*;

// Device copies of weights, uploaded once. register_weight() with a name already registered at the same
// size returns the existing copy (no upload); with a different size it uploads a new copy and retires the
// old one, which stays allocated until the registry is destroyed, so no pointer handed out ever dangles.
class WeightRegistry {
public:
    struct Entry {
        WeightKey device = nullptr;
        uint64_t bytes = 0;
        int32_t type = 0;
        int64_t shape[4] = {1, 1, 1, 1};
    };

    WeightRegistry() = default;
    WeightRegistry(const WeightRegistry&) = delete;
    WeightRegistry& operator=(const WeightRegistry&) = delete;
    ~WeightRegistry();

    // Throws Error: MINFER_ERR_OUT_OF_MEMORY (nothing is registered then), MINFER_ERR_DEVICE.
    const Entry& register_weight(const std::string& name, const void* host, uint64_t bytes, int32_t type,
                                 const int64_t shape[4]);
    // Several weights uploaded into one allocation in the order given, each copy at the next 256-byte
    // boundary after the one before: f16 matrices of one width whose sizes are multiples of 256 bytes lie
    // back to back, one matrix of their rows together (a layer's q, k and v; its gate and up), which a
    // prefill step multiplies in one GEMM (cuda/model.cuh, PrefillGemm::run_concat). A name already
    // registered takes register_weight's rules instead, alone; the rest are still grouped. Same errors.
    struct Upload {
        const std::string* name;
        const void* host;
        uint64_t bytes;
        int32_t type;
        const int64_t* shape;  // 4 extents
    };
    std::vector<const Entry*> register_group(const std::vector<Upload>& weights);
    const Entry* find(const std::string& name) const {
        auto it = live_.find(name);
        return it == live_.end() ? nullptr : &it->second;
    }
    // Device bytes held, live and retired copies alike.
    uint64_t device_bytes() const { return device_bytes_; }
    size_t retired() const { return retired_.size(); }

private:
    Entry& add_live(const std::string& name, const void* device, uint64_t bytes, int32_t type, const int64_t shape[4]);
    std::unordered_map<std::string, Entry> live_;
    std::vector<Entry> retired_;
    std::vector<void*> allocations_;  // every upload's allocation (a group's copies share one), freed with the registry
    uint64_t device_bytes_ = 0;
};

class CudaModel;  // defined in cuda/backend.cu

// How prefill matmuls (n_tokens > 1) get f16 weights (decode always reads the quantized bytes):
//   two_pass   dequantize each weight into a per-context f16 scratch on every call, then GEMM;
//   w16_cache  read a persistent f16 copy made once at load by a warm pass (keyed by WeightKey);
//   fused      dequantize B tiles in registers inside the GEMM: no cache, no scratch.
enum class PrefillPath { two_pass, w16_cache, fused };
const char* prefill_path_name(PrefillPath p);
// "12.3 MiB", for messages about device memory.
std::string mib(uint64_t bytes);

// The load options that shape the CUDA backend (options.h enum values).
struct CudaSettings {
    int64_t w16_cache = 0;  // options::kAuto / kOn / kOff
    uint64_t w16_enable_bytes = uint64_t{2} << 30;
    bool fused_b = false;
    int64_t mmq = 0;   // options::kAuto / kOn / kOff
    int64_t gemm = 0;  // options::kGemmAuto / kGemmOwn / kGemmCublas
    bool gemm_tune = false;
};

// The CudaSettings of a model's load options (w16_cache, w16_enable_bytes, fused_b, mmq, gemm, gemm_tune).
CudaSettings cuda_settings(const options::Values& opts);

struct PathChoice {
    PrefillPath path = PrefillPath::two_pass;
    std::string reason;  // one line for the log
};

// The prefill path policy (host-only, unit-tested without a GPU). convert_bytes: the bytes of the matmul
// weights that are not f16 (they need dequantization); f16_bytes: their size as f16; free_bytes: free
// device memory after the upload. Device memory for contexts is kept in reserve (kW16Reserve).
inline constexpr uint64_t kW16Reserve = uint64_t{2} << 30;
PathChoice choose_prefill_path(const CudaSettings& s, uint64_t convert_bytes, uint64_t f16_bytes, uint64_t free_bytes);

// Why the CUDA backend cannot run this model, or "" when it can (head_dim, tensor types, row lengths).
std::string cuda_unsupported_reason(const model::Config& config, const model::Plan& plan);
// Uploads every tensor of the file through a WeightRegistry, reporting progress as stage "upload".
// Throws Error: MINFER_ERR_OUT_OF_MEMORY, MINFER_ERR_DEVICE, MINFER_ERR_CANCELLED; frees all on failure.
// Then chooses the prefill path (choose_prefill_path; the log says which and why) and, for the f16
// cache, runs the warm pass over `matmul_weights` (stage "warm"), then (MINFER_Q80_GROUPS, cuda/model.cuh)
// regroups their q8_0 matrices for the mat-vecs, never `embedding` (the token embedding table, which the
// lookup reads by rows in the file's layout; null: no table among them). gemm=cublas fails with
// MINFER_ERR_UNSUPPORTED when libcublas cannot be loaded.
std::shared_ptr<CudaModel> cuda_load(const gguf::File& file, const std::vector<const gguf::TensorInfo*>& matmul_weights,
                                     const gguf::TensorInfo* embedding, const CudaSettings& settings, int log_level);
PrefillPath cuda_prefill_path(const CudaModel& model);
const char* cuda_gemm_name(const CudaModel& model);  // "own" or "cublas"
double cuda_warm_ms(const CudaModel& model);         // the warm pass's time, 0 without one
// engine::Ops on the GPU, the kernels one call at a time (tests compare each with the CPU backend's, and
// run the plain forward over them): a paged KV cache (f16) of kv_rows rows per layer for sequences of up
// to n_ctx positions, and scratch for max_tokens tokens, allocated now. Throws Error
// (MINFER_ERR_OUT_OF_MEMORY with nothing leaked, MINFER_ERR_DEVICE).
std::unique_ptr<engine::Ops> cuda_make_ops(std::shared_ptr<CudaModel> model, const model::Config& config, int n_ctx,
                                           int64_t kv_rows, int max_tokens);
// The forward pass of a context or a batch (cuda/forward.cu): a paged KV cache (f16) of shape.pages()
// pages shared by shape.n_seq slots, scratch for chunks of up to `prefill_chunk` tokens (auto: 2,048 to
// 8,192 by free memory; at most the slots' positions and shape.max_tokens), decode steps of a one-slot
// runner through a CUDA graph unless the `cuda_graph` option is off. Throws Error like cuda_make_ops. The
// model and plan must outlive it.
std::unique_ptr<engine::Runner> cuda_make_runner(std::shared_ptr<CudaModel> model, const model::Config& config,
                                                 const model::Plan& plan, const engine::RunnerShape& shape,
                                                 const options::Values& opts);
Vram cuda_vram(const CudaModel& model);
// Median milliseconds of one dequantization of every weight in `weights` to f16 (an f16 scratch of the
// largest is allocated for the call), over `reps` runs.
double cuda_dequant_sweep_ms(CudaModel& model, const std::vector<engine::Weight>& weights, int reps);
// Tests only: makes a kernel fault on the device (an out-of-bounds write), a sticky error.
void cuda_inject_fault();

}  // namespace minfer::device

namespace minfer::device::testing {
// Kernel entry points for tests: each uploads its inputs, runs one kernel on a private stream, waits and
// downloads the result. Throws Error.
// f16 bit patterns of dequant(bytes) for rows x cols elements of `type`.
std::vector<uint16_t> cuda_dequant_f16(int32_t type, const void* bytes, uint64_t n_bytes, int64_t rows, int64_t cols);
// C[m][n] = sum_k A[m][k] * B[n][k] on f16 bit patterns, by the tensor-core GEMM (narrow: the narrow GEMM
// of up to 64 tokens, B split into `parts` matrices of consecutive rows in one launch, as q, k and v are).
// With c0 ([m][n]): C = c0 + A B^T (the accumulate epilogue, the residual add). With bq (narrow only): the
// narrow GEMM on B's quantized rows of type bq_type instead (b unused), as the forward runs it.
std::vector<float> cuda_gemm_f16(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, int m, int n, int k,
                                 const std::vector<float>* c0 = nullptr, bool narrow = false, int parts = 1,
                                 const std::vector<uint8_t>* bq = nullptr, int32_t bq_type = 0);
// GEMMs over concatenated f16 copies (PrefillGemm::run_concat) issued in this process so far; f16_out,
// given, receives how many of them wrote an f16 product (the gate/up GEMM through cuBLAS).
uint64_t cuda_concat_gemms(uint64_t* f16_out = nullptr);
// Output and down projections whose residual add went to the next RMSNorm or the final gather
// (MINFER_DEFER_RESIDUAL) in this process so far.
uint64_t cuda_deferred_residuals();
// MINFER_PRUNE_LAST at run time: mode 1 runs the last layer past its K/V store (attention, output
// projection, feed-forward block) on the rows whose logits are wanted alone, 0 on every row, -1 as the
// build's knob says (the default); forward calls from now on follow it. Returns the previous mode.
// cuda_pruned_layers: the last layers run that way in this process so far; dropped, given, receives how
// many rows they left out, multi how many of them kept two rows or more.
int cuda_prune_last(int mode);
uint64_t cuda_pruned_layers(uint64_t* dropped = nullptr, uint64_t* multi = nullptr);
// MINFER_Q16 at run time (modes and result as cuda_prune_last's): a prefill step's attention reads q in
// f16, written so by qkv_finish. cuda_q16_layers: the layers that did so in this process so far.
int cuda_q16(int mode);
uint64_t cuda_q16_layers();
// MINFER_ATTN_ONE_CHUNK at run time: decode rows of at most `keys` keys attend in one chunk (0: always the
// split; -1: the build's value) in forward calls from now on. Returns the previous setting (-1: the
// build's). cuda_attn_one_chunk_launches: the decode attention launches of one chunk a row enqueued in this
// process so far, and (combines, given) the split's combine launches (a CUDA graph's counted once, when it
// is captured).
int cuda_attn_one_chunk(int keys);
uint64_t cuda_attn_one_chunk_launches(uint64_t* combines = nullptr);
// Timing only (tests/bench_decode_parts): in contexts created while a mask is set, forward calls leave
// out the operations of a one-token step whose decode_part bits are set in the mask at the time, in
// every layer (a CUDA graph captured then too), so that a benchmark can take each operation's marginal
// cost inside the running graph; contexts created with the mask 0 never leave anything out. The logits
// are then wrong but finite, so the sampling goes on: an operation whose input a left-out one writes,
// where that input may hold bytes of another layout (the quantized input, q/k/v for qkv_finish, gate
// and up for the SwiGLU), reads zeros instead; the other inputs keep what an earlier operation or step
// wrote, and the context's buffers start zeroed. Returns the previous mask.
namespace decode_part {
constexpr uint32_t kAttnNorm = 1u << 0;   // the attention's RMSNorm (and the input's quantization)
constexpr uint32_t kQkv = 1u << 1;        // the q/k/v mat-vecs
constexpr uint32_t kQkvFinish = 1u << 2;  // qkv_finish: biases, q/k norms, RoPE, the K/V store
constexpr uint32_t kAttention = 1u << 3;  // the decode attention (and its combine, past one chunk)
constexpr uint32_t kO = 1u << 4;          // the output projection (its residual add, its input's quantization where the attention does not write it)
constexpr uint32_t kFfnNorm = 1u << 5;    // the feed-forward block's RMSNorm
constexpr uint32_t kGateUp = 1u << 6;     // the gate/up mat-vec
constexpr uint32_t kSwiglu = 1u << 7;     // the SwiGLU's quantization for the down projection (int8 down weights only)
constexpr uint32_t kDown = 1u << 8;       // the down projection (and the residual add in it)
constexpr int kCount = 9;
}  // namespace decode_part
uint32_t cuda_decode_skip(uint32_t mask);
// gemm_tune: force the fastest cuBLASLt candidate over cuBLAS's own choice in decisions made from now on
// (so a test runs that path whatever the timings say); the decisions made and the GEMMs run through
// cuBLASLt in this process so far.
void cuda_gemm_tune_force(bool on);
void cuda_gemm_tune_counts(uint64_t* decisions, uint64_t* lt_runs);
// Groups of f16 weights uploaded back to back by model loads in this process so far (MINFER_F16_GROUPS:
// a layer's q, k and v; its gate and up).
uint64_t cuda_f16_groups();
// MINFER_Q80_GROUPS at run time (modes and result as cuda_prune_last's), for models loaded from now on:
// their q8_0 matmul weights regrouped for the mat-vecs (cuda/model.cuh). cuda_q80_grouped: the matrices
// regrouped by model loads in this process so far.
int cuda_q80_groups(int mode);
uint64_t cuda_q80_grouped();
// MINFER_Q6K_PAD at run time (modes and result as cuda_prune_last's), for models loaded from now on:
// padded copies of their q6_K matmul weights for the one-token mat-vec (cuda/model.cuh). cuda_q6k_padded:
// the matrices copied by model loads in this process so far; cuda_q6k_pad_reads: the mat-vec launches that
// read such a copy so far.
int cuda_q6k_pad(int mode);
uint64_t cuda_q6k_padded();
uint64_t cuda_q6k_pad_reads();
// MINFER_Q80_COPY at run time (modes and result as cuda_prune_last's), for models loaded from now on:
// grouped copies of their q8_0 matmul weights that the load does not regroup in place, for the one-token
// mat-vec (cuda/model.cuh). cuda_q80_copied: the matrices copied by model loads in this process so far;
// cuda_q80g_reads: the one-input dp4a launches on grouped q8_0 (copied or regrouped in place) so far.
int cuda_q80_copy(int mode);
uint64_t cuda_q80_copied();
uint64_t cuda_q80g_reads();
// MINFER_Q50_COPY at run time (modes and result as cuda_prune_last's), for models loaded from now on:
// grouped copies of their q5_0 matmul weights for the one-token mat-vec (cuda/model.cuh).
// cuda_q50_copied: the matrices copied by model loads in this process so far; cuda_q50g_reads: the
// one-input dp4a launches on them so far.
int cuda_q50_copy(int mode);
uint64_t cuda_q50_copied();
uint64_t cuda_q50g_reads();
// MINFER_K23_COPY at run time (modes and result as cuda_prune_last's), for models loaded from now on:
// arranged copies of their q2_K and q3_K matmul weights for the one-token mat-vec (cuda/model.cuh).
// cuda_k23_copied: the matrices copied by model loads in this process so far; cuda_k23_reads: the
// one-input dp4a launches on them so far.
int cuda_k23_copy(int mode);
uint64_t cuda_k23_copied();
uint64_t cuda_k23_reads();
// The one-input dp4a mat-vec's launches on q4_1 and q5_1 matrices (MINFER_DP4A_Q41_Q51) so far.
uint64_t cuda_q41_q51_reads();
// Whether this build's one-input int8 mat-vec reads grouped q8_0 rows with a padded last group (its dp4a
// kernel; no copy of such rows is made where it does not).
bool cuda_matvec_padded_q80();
// Whether this build takes q4_K beside padded q6_K in one mat-vec launch (cuda::matvec_xq_pairs:
// -DMINFER_DP4A_MIXED, default on), and how many such launches this process has made so far.
bool cuda_matvec_pair_knob();
uint64_t cuda_matvec_pair_launches();
// cuda::qkv_finish of n = pos.size() tokens (qkv: their [n][q_dim + 2 kv_dim] projections, no biases or
// q/k norms) at positions pos[t] of one sequence (KV rows = positions), RoPE base rope_base; table 0
// computes the rotations in the kernel, 1 reads them from a table of table_rows positions (rope_table),
// 2 from that table zeroed (so the positions it covers must come out different). Returns the bytes of
// q's output ([n][q_dim] f32) and then of the K and V caches ([max pos + 1][kv_dim] f16 each, rows no
// position names poisoned with NaN).
std::vector<uint8_t> cuda_qkv_finish(const std::vector<float>& qkv, const std::vector<int32_t>& pos, int n_head, int n_head_kv,
                                     int head_dim, double rope_base, int table, int table_rows);
// `bytes` bytes of device memory from `device` on, copied to the host.
std::vector<uint8_t> cuda_download(const void* device, uint64_t bytes);
// Free device memory in bytes (cudaMemGetInfo).
uint64_t cuda_free_bytes();
// The current device's compute capability, major * 10 + minor (90 for an H100 or H200).
int cuda_compute_capability();
// Whether this build lets the prefill attention's wgmma kernel run (-DMINFER_ATTN_WGMMA, default on).
bool cuda_attention_wgmma_knob();
// Whether the decode mat-vec's int8 path has `type` for ncols input columns (cuda::matvec_int8_supported).
bool cuda_matvec_int8_supported(int32_t type, int ncols);
// Whether it takes a matrix of `type` and `cols` columns (cuda::matvec_int8_takes: q4_1 and q5_1 on rows
// that start 16-byte aligned only).
bool cuda_matvec_int8_takes(int32_t type, int ncols, int64_t cols);
// y = W x for `rows` rows of `cols` elements of `type` (bytes: the rows, back to back) by the decode
// mat-vec, or by its reference kernel; y is poisoned with NaN before the launch. type
// quant::Type::Q8_0_GROUPED_DEVICE: the bytes are q8_0's, regrouped on the device (cuda::q80_group) before
// the mat-vec reads them so (both hooks; not with `reference`, whose kernel reads the file's layout only);
// quant::Type::Q6_K_PADDED_DEVICE (cuda_matvec_int8 with ncols = 1 only): the bytes are q6_K's, copied on
// the device into the padded layout (cuda::q6k_pad) that the mat-vec then reads;
// quant::Type::Q5_0_GROUPED_DEVICE (the same): q5_0's, copied grouped (cuda::q50_group_copy);
// Q2_K_ARRANGED_DEVICE and Q3_K_ARRANGED_DEVICE (the same): q2_K's or q3_K's, copied arranged
// (cuda::k23_arrange). (q8_0 given
// as Q8_0_GROUPED_DEVICE on rows that are not whole 256-column groups is copied grouped too.)
std::vector<float> cuda_matvec(int32_t type, const void* bytes, uint64_t n_bytes, int64_t rows, int64_t cols,
                               const std::vector<float>& x, bool reference = false);
// The same by the int8 path: x quantized on the device (quantize_x), then matvec_xq; x_used receives x
// as the kernel saw it (d (256 hi + lo) per column). Types and widths with matvec_int8_takes only. ncols > 1:
// x holds ncols inputs of cols values (one launch for all, the few-token path); y is [ncols][rows].
std::vector<float> cuda_matvec_int8(int32_t type, const void* bytes, uint64_t n_bytes, int64_t rows, int64_t cols,
                                    const std::vector<float>& x, std::vector<float>* x_used, int ncols = 1);
// One decode attention (a query at position L - 1 over cache rows 0 .. L-1: k16, v16 f16 bit patterns,
// [n_ctx >= L][n_head_kv * head_dim]), the position given on the host or read on the device (the launch
// of a CUDA graph: the kernels find the key split themselves); the output is poisoned first.
std::vector<float> cuda_attention_decode(const std::vector<float>& q, const std::vector<uint16_t>& k16, const std::vector<uint16_t>& v16,
                                         int L, int n_head, int n_head_kv, int head_dim, bool device_pos);
// The prefill attention of n queries (q: [n][n_head * head_dim], token t at position pos0 + t) over the
// positions 0 .. pos0 + n - 1 of one sequence in a paged cache (k16, v16: [pool rows][n_head_kv *
// head_dim] f16 bit patterns; pages: its page table, pages of 16 rows); the output is poisoned first.
// force_mma: the mma.sync kernels even where the wgmma kernel runs; kernel: receives the kernel's name;
// f16_out: the kernel writes its f16 output (the output projection's input) alone, returned as f32 values.
std::vector<float> cuda_attention_prefill(const std::vector<float>& q, const std::vector<uint16_t>& k16, const std::vector<uint16_t>& v16,
                                          const std::vector<int32_t>& pages, int n, int pos0, int n_head, int n_head_kv, int head_dim,
                                          bool force_mma = false, std::string* kernel = nullptr, bool f16_out = false);
// The decode attention of `rows` sequences in one launch over a paged cache (k16, v16: [pool rows]
// [n_head_kv * head_dim]): row r's query q[r] (q: [rows][n_head * head_dim]) at position pos[r] of the
// sequence whose page table is pages[r * stride ..] (pages of 16 cache rows). Outputs poisoned first.
// out16: also the output as f16 bit patterns (the launch's f16 copy for the next GEMM). xq: also the
// output as the int8 mat-vec's input, written by the launch (rows 0 .. rows-1 of rows); xq_ref: what
// quantize_x makes of the f32 output (the launch the fused form replaces).
std::vector<float> cuda_attention_decode_rows(const std::vector<float>& q, const std::vector<uint16_t>& k16, const std::vector<uint16_t>& v16,
                                              const std::vector<int32_t>& pages, int stride, const std::vector<int32_t>& pos,
                                              int n_head, int n_head_kv, int head_dim, std::vector<uint16_t>* out16 = nullptr,
                                              std::vector<uint8_t>* xq = nullptr, std::vector<uint8_t>* xq_ref = nullptr);
}  // namespace minfer::device::testing
