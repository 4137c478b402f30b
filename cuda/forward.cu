// The CUDA backend's forward pass (engine::Runner): its own layer loop over the kernels of cuda/.
//
// A call runs the batch's tokens in chunks of up to max_tokens_ tokens (option prefill_chunk), whatever
// sequences they belong to: every projection takes all tokens of the chunk at once (one read of each weight
// for all sequences), qkv_finish stores each token's K and V at its own sequence's page (the KV cache is
// paged: the slots share one pool, engine/kv_pool.h), and attention goes by run: a run of several
// positions of one sequence (a prefill chunk) takes the prefill kernel, and consecutive single-token runs
// (decode tokens of different sequences) share one decode launch. Per layer and chunk: RMSNorm; q, k, v projections; qkv_finish
// (bias, q/k norm, RoPE and the f16 KV store in one kernel); attention; the output projection; RMSNorm;
// gate and up projections; SwiGLU; the down projection. The output and down projections add into the
// residual stream in the mat-vec's or the GEMM's epilogue (no add kernel). A single-token chunk (decode)
// runs q, k, v as one mat-vec launch and gate and up as another when their weights share a type (or are
// q4_K beside a padded q6_K copy: a Q4_K_M layer's v of more bits, cuda::matvec_xq_pair); the
// norms write the int8 mat-vecs' input, the attention (or its combine) the output projection's, and
// SwiGLU is formed by one quantize_x launch (int8 weights) or as the down projection loads its input
// (others): 9 launches per layer for int8 weights (norm, qkv, qkv_finish, attention, output projection,
// norm, gate/up, quantize_x, down; 10 with the combine past 64 keys), instead of 20 on the op-by-op path of
// engine/forward.cpp over cuda/backend.cu's Ops. A chunk of 2 to 8 tokens (a decode step of a few
// sequences, a short prompt) takes the same launches with the int8 mat-vec over several inputs where the
// weights have the int8 path (each weight read once for all the tokens, cuda/matvec_impl.cuh); longer
// chunks take the GEMMs (the f16 weight cache, or dequantization per call); on the cache, whose arena holds
// a layer's q, k and v copies (and its gate and up) back to back, each group is one GEMM whose output rows
// hold the group's results side by side, read with a row stride by qkv_finish and the SwiGLU (qkv_,
// gate_up_). The rows asked for get the final RMSNorm,
// the output projection and the argmax on the GPU; the host receives 8 bytes per row and copies logits
// only when asked.
//
// A decode step (one token of a one-slot runner) reads its token and position from device memory, which
// one 16-byte copy from pinned host memory fills first; so the whole step is the same sequence of
// operations for every position, and it is captured as a CUDA graph and replayed per token (the
// attention kernels find their key split on the device): one graph for each form of the decode attention
// (MINFER_ATTN_ONE_CHUNK below: one chunk a row while the rows are short, the split past that). The first
// step of each form runs eagerly (launchers initialize kernel attributes once, which a capture must not
// see); cuda_graph=false keeps every step eager: the same kernels with the same arguments, so the same
// tokens.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "cuda/batch_runs.h"
#include "cuda/common.cuh"
#include "cuda/kernels.cuh"
#include "cuda/model.cuh"
#include "engine/ops.h"
#include "engine/testing.h"

// Several tokens (prefill chunks, decode steps of many sequences): the attention writes the output
// projection's f16 input itself (1), or a conversion pass does (0; the A/B knob).
#ifndef MINFER_ATT_F16_OUT
#define MINFER_ATT_F16_OUT 1
#endif
// The RMSNorms before GEMMs write the GEMMs' f16 input alone (1), or also their f32 output, which nothing
// then reads (0; the A/B knob).
#ifndef MINFER_NORM_F16_ONLY
#define MINFER_NORM_F16_ONLY 1
#endif
// A decode step whose output projection takes the int8 mat-vec: the attention (or its combine) writes the
// quantized input itself (1), or a quantize_x launch does (0; the A/B knob).
#ifndef MINFER_ATT_XQ_OUT
#define MINFER_ATT_XQ_OUT 1
#endif
// The RoPE rotations of every position of a context, computed once when it is created (cuda::rope_table:
// head_dim / 2 (cos, sin) pairs a position, 512 bytes on the 7B against its 57 KB of KV cache), which the
// qkv_finish of every layer of a step of more than MINFER_GEMM_NARROW_MAX tokens reads instead of taking
// a double-precision sincos per head, pair and layer (32 times per position and pair in each of the 7B's
// layers); the same values either way. Measured on the H200 (docs/perf.md, 2026-12-04, sixth session):
// prefill +0.4-1.6% at 2,048 and 8,192 tokens; decode steps read it too in a first form, which cost the
// 0.5B 0.7% (1,320 against 1,329 t/s), so they keep computing. 0: no table.
#ifndef MINFER_ROPE_TABLE
#define MINFER_ROPE_TABLE 1
#endif

// The last layer of a step runs on the rows whose logits are wanted alone once its K/V store is done (1):
// q/k/v and the K/V store take every row (later steps read those keys and values), then the wanted rows'
// queries are packed and attend as decode rows at their own positions (the decode attention, keys up to
// each row's position), their x is packed, and the output projection, feed-forward block and residual
// adds run as a step of that many tokens (one row: the mat-vecs); a step without wanted rows (a long
// prompt's earlier passes) ends after the last layer's K/V store. Nothing later reads the other rows'
// hidden states. At 2,048 prompt tokens on the 7B that drops about 3% of the call's matmul work (the o,
// gate/up and down GEMMs of one layer of 28) and the last layer's attention. 0: every row through every
// layer (the A/B knob). Written without a GPU (2026-12-04, seventh session); measured on the H200 with
// MINFER_Q16 (docs/perf.md, 2026-12-05): pp2048 +2-5% on the 7B's q4_K_M, q8_0 and f16 files and the 8B's
// q4_K_M, every round; on (device::testing::cuda_prune_last turns it on or off at run time for the tests).
#ifndef MINFER_PRUNE_LAST
#define MINFER_PRUNE_LAST 1
#endif

// The layers of a prefill step (every run of it two tokens or more) whose q/k/v come from the concatenated
// GEMM (the f16 cache, f16 weights) take q from qkv_finish as the prefill attention's f16 operand (q times
// the attention's scale, rounded: cuda::attention's q16) instead of f32 rows the attention converts: the
// same bits (a test compares the logits' bytes), half the bytes written and read (29.4 MB of f32 q a layer
// at 2,048 tokens on the 7B become 14.7). Not in a step with decode rows (their kernel reads f32 q), nor
// in a last layer run on the wanted rows alone (MINFER_PRUNE_LAST: its packed rows take the decode
// kernel), nor where q_ holds the q product qkv_finish reads. 0: f32 q everywhere (the A/B knob).
// Written without a GPU (2026-12-04, seventh session); measured on the H200 together with
// MINFER_PRUNE_LAST (their sum above), on (device::testing::cuda_q16 turns it on or off for the tests).
#ifndef MINFER_Q16
#define MINFER_Q16 1
#endif

// A decode step (one token of a sequence, or decode rows of several) whose rows all attend to at most
// MINFER_ATTN_ONE_CHUNK keys runs its attention in one chunk a row (cuda::attention_decode_rows'
// one_chunk): the kernel writes the output and its int8 form itself and the combine launch goes, one
// kernel boundary a layer fewer. A longer row takes the split (flash-decoding) and the combine as before.
// The host knows every row's position, so the step picks its form, and a CUDA graph is captured for each
// form (the graph's launches are fixed). Up to 64 keys (4 warps of 16-key tiles, one slot pair a warp:
// MINFER_ATTN_SLOTS) the one chunk is the split's own single chunk (MINFER_ATTN_MIN_CHUNK), every key
// copied before the kernel's pdl_wait, so the form saves the combine launch and changes nothing else;
// past that a warp refills its slots after the wait and one block a KV head streams the keys alone, where
// the split spreads them over the GPU. Measured on an H100 (docs/perf.md, 2026-12-06): one chunk up to
// 256 keys gave tg128 (1 to 128 keys) +0.4% on the 7B's q4_K_M and +1.7% on the 0.5B's q8_0, and lost
// 7% and 9% at 129 to 256 keys. The limit measured (H100, 2026-12-06, sixteenth session): 64 against the
// split, tg128 +0.9% (7B) and +1.9% (0.5B); 128 against 64 over 65 to 128 keys, -0.8% on the 7B and +1%
// on the 0.5B: 64 stays. 0: always the split (the A/B knob; device::testing::cuda_attn_one_chunk sets it
// at run time for the tests).
#ifndef MINFER_ATTN_ONE_CHUNK
#define MINFER_ATTN_ONE_CHUNK 64
#endif

namespace minfer::device {
namespace {

using cuda::check;
using cuda::DeviceMemory;

std::atomic<uint64_t> g_deferred_residuals{0};  // testing::cuda_deferred_residuals

RuntimeKnob<MINFER_PRUNE_LAST> g_prune_last;  // testing::cuda_prune_last
RuntimeKnob<MINFER_Q16> g_q16;                // testing::cuda_q16
std::atomic<uint64_t> g_pruned_layers{0};     // testing::cuda_pruned_layers: last layers run on the wanted rows alone
std::atomic<uint64_t> g_pruned_rows{0};       // ... the rows they dropped
std::atomic<uint64_t> g_pruned_multi{0};      // ... those of them that kept two rows or more
std::atomic<uint64_t> g_q16_layers{0};        // testing::cuda_q16_layers: layers whose attention read f16 q
std::atomic<int> g_one_chunk{-1};             // testing::cuda_attn_one_chunk: keys, -1 the build's MINFER_ATTN_ONE_CHUNK
std::atomic<uint32_t> g_decode_skip{0};       // testing::cuda_decode_skip: a one-token step's operations left out (timing only)

// The longest decode row that takes one chunk (MINFER_ATTN_ONE_CHUNK, or the tests' value).
int one_chunk_keys() {
    const int k = g_one_chunk.load(std::memory_order_relaxed);
    return k < 0 ? MINFER_ATTN_ONE_CHUNK : k;
}

// Page-locked host memory (the staging of every copy between host and device).
class Pinned {
public:
    explicit Pinned(size_t bytes) { check(cudaMallocHost(&p_, bytes), "pinned host memory"); }
    ~Pinned() {
        if (p_) cudaFreeHost(p_);
    }
    Pinned(const Pinned&) = delete;
    Pinned& operator=(const Pinned&) = delete;
    template <typename T>
    T* as() const { return static_cast<T*>(p_); }

private:
    void* p_ = nullptr;
};

// A matmul weight as the loop uses it.
struct Mat {
    quant::Type type = quant::Type::F32;
    const void* w = nullptr;
    int64_t rows = 0, cols = 0;
    const char* name = "";
    // What the one-input int8 mat-vec reads instead (CudaModel::MatvecCopies: a padded q6_K copy, a
    // grouped q8_0 or q5_0 one, or an arranged q2_K or q3_K one), or null.
    quant::Type type1 = quant::Type::F32;
    const void* w1 = nullptr;

    // The matrix for the int8 mat-vec over ncols inputs.
    Mat for_xq(int ncols) const { return ncols == 1 && w1 ? Mat{type1, w1, rows, cols, name} : *this; }
};

struct LayerDev {
    const float *attn_norm = nullptr, *ffn_norm = nullptr;
    const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *q_norm = nullptr, *k_norm = nullptr;
    Mat wq, wk, wv, wo, gate, up, down;
};

// Device bytes a token of a chunk takes in the runner's activations: the f32 buffers below (x, xb, q,
// qkv, att, gate_up) and the GEMMs' f16 input (PrefillGemm's widest matmul input).
uint64_t scratch_per_token(const model::Config& c) {
    const uint64_t q_dim = uint64_t{static_cast<uint32_t>(c.n_head)} * c.head_dim, kv_dim = uint64_t{static_cast<uint32_t>(c.n_head_kv)} * c.head_dim;
    const uint64_t embd = static_cast<uint32_t>(c.n_embd), ff = static_cast<uint32_t>(c.n_ff);
    return 4 * (2 * embd + 3 * q_dim + 2 * kv_dim + 2 * ff) + 2 * std::max({embd, q_dim, ff}) + 6 * sizeof(int32_t);
}

// Tokens per forward pass of a long prompt (option prefill_chunk; 0: auto). A chunk's layers run over all
// its tokens before the next chunk starts, so a longer chunk sends each attention launch more queries over
// the same keys (fewer launches, fuller last waves) and each GEMM more rows: on the H200, 8,192-token
// chunks prefilled 8,192 tokens 4.6% faster than 2,048-token ones (docs/perf.md, 2026-12-04, fifth
// session), for 0.27 MB of scratch a token on a 7B. Auto takes the largest of 8,192, 4,096 and 2,048 whose
// scratch fits in an eighth of the GPU memory left free once the context's KV cache is allocated (2,048
// where none does: the size before the option); so the choice depends on the memory free when a context
// is created, and with it, in the last bits, the logits of prompts longer than 2,048 tokens (the GEMMs'
// algorithms differ with their row counts). At least 64 tokens and the context's slots (a decode step of
// every slot is one chunk), never more than a forward is given.
int prefill_chunk(int64_t option, const model::Config& c, const engine::RunnerShape& shape) {
    int64_t chunk = option;
    if (chunk <= 0) {
        size_t free_b = 0, total_b = 0;
        check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
        const uint64_t kv_bytes = uint64_t{2} * sizeof(__half) * static_cast<uint32_t>(c.n_layer) * static_cast<uint64_t>(shape.pages()) *
                                  engine::kKvPage * static_cast<uint32_t>(c.n_head_kv) * static_cast<uint32_t>(c.head_dim);
        const uint64_t left = free_b > kv_bytes ? free_b - kv_bytes : 0;
        const uint64_t per_token = scratch_per_token(c);
        for (chunk = 8192; chunk > 2048 && per_token * static_cast<uint64_t>(chunk) > left / 8;) chunk /= 2;
    }
    chunk = std::max<int64_t>({chunk, 64, shape.n_seq});
    chunk = std::min<int64_t>(chunk, int64_t{shape.n_ctx} * shape.n_seq);
    if (shape.max_tokens > 0) chunk = std::min<int64_t>(chunk, shape.max_tokens);
    return static_cast<int>(chunk);
}

static_assert(cuda::kKvPageShift == engine::kKvPageShift, "the CUDA kernels and the engine page the KV cache alike");

class CudaRunner final : public engine::Runner {
public:
    // chunk: tokens per forward pass (prefill_chunk above).
    // log_level: the context's; at debug level each multi-token call logs its time on the GPU's stream.
    CudaRunner(std::shared_ptr<CudaModel> model, const model::Config& c, const model::Plan& plan, const engine::RunnerShape& shape,
               bool graphs, bool int8, int chunk, int log_level)
        : m_(std::move(model)), c_(c), shape_(shape), graphs_(graphs), int8_(int8), log_level_(log_level),
          kv_(shape.n_seq, shape.n_ctx, shape.pages()) {
        m_->check_healthy();
        check(cudaSetDevice(0), "cudaSetDevice");
        max_tokens_ = chunk;
        kv_dim_ = int64_t{c.n_head_kv} * c.head_dim;
        q_dim_ = int64_t{c.n_head} * c.head_dim;
        kv_rows_ = int64_t{shape.pages()} * engine::kKvPage;
        const uint64_t kv_elems = static_cast<uint64_t>(c.n_layer) * static_cast<uint64_t>(kv_rows_) * static_cast<uint64_t>(kv_dim_);
        k_cache_ = DeviceMemory(kv_elems * sizeof(__half), &m_->kv_bytes, "KV cache (keys)");
        v_cache_ = DeviceMemory(kv_elems * sizeof(__half), &m_->kv_bytes, "KV cache (values)");
        pages_ = DeviceMemory(static_cast<uint64_t>(shape.n_seq) * kv_.max_table() * sizeof(int32_t), &m_->scratch_bytes, "page tables");

        const uint64_t nt = static_cast<uint64_t>(max_tokens_);
        auto f32 = [&](uint64_t n, const char* what) { return DeviceMemory(n * sizeof(float), &m_->scratch_bytes, what); };
        x_ = f32(nt * c.n_embd, "residual stream");
        xb_ = f32(nt * c.n_embd, "normed activations");
        q_ = f32(nt * q_dim_, "queries");
        // The projections: [nt][q_dim + 2 kv_dim] from one GEMM over the concatenated weights, else keys
        // and values as two matrices [nt][kv_dim] (q then goes straight to q_).
        qkv_ = f32(nt * (q_dim_ + 2 * kv_dim_), "q/k/v projections");
        att_ = f32(nt * q_dim_, "attention output");
        gate_up_ = f32(2 * nt * c.n_ff, "gate and up");  // [nt][2 n_ff] from one GEMM, else gate [nt][n_ff] then up
        logits_ = f32(static_cast<uint64_t>(shape.max_out) * c.n_vocab, "logits");
        partial_ = f32(static_cast<uint64_t>(cuda::attention_partial_floats(c.n_head, c.n_head_kv, c.head_dim, std::min(max_tokens_, shape.n_seq))),
                       "attention scratch");
        batch_ = DeviceMemory(6 * nt * sizeof(int32_t), &m_->scratch_bytes, "batch tokens, positions, slots, output rows and theirs");
        io_ = DeviceMemory(4 * sizeof(int32_t), &m_->scratch_bytes, "decode step token and position");

        if (int8_) {
            const int64_t widest = std::max({int64_t{c.n_embd}, q_dim_, int64_t{c.n_ff}});
            xq_ = DeviceMemory(static_cast<uint64_t>(cuda::kMatvecMaxCols * cuda::matvec_xq_bytes((widest + 31) / 32 * 32)),
                               &m_->scratch_bytes, "int8 mat-vec input");
        }
        keys_ = DeviceMemory(static_cast<uint64_t>(shape.max_out) * sizeof(unsigned long long), &m_->scratch_bytes, "argmax keys");
        const std::vector<double> inv = engine::rope_inv_freq(c.rope_freq_base, c.head_dim);
        inv_freq_ = DeviceMemory(inv.size() * sizeof(double), &m_->scratch_bytes, "RoPE table");
        // On the runner's stream, which does not wait for the legacy one (the table below reads it at once):
        // from pageable memory, the call returns once the bytes are staged.
        check(cudaMemcpyAsync(inv_freq_.as<void>(), inv.data(), inv.size() * sizeof(double), cudaMemcpyHostToDevice, s()), "RoPE table");
        if (MINFER_ROPE_TABLE && max_tokens_ > MINFER_GEMM_NARROW_MAX) {
            rope_ = DeviceMemory(static_cast<uint64_t>(shape.n_ctx) * static_cast<uint64_t>(c.head_dim / 2) * sizeof(float2), &m_->scratch_bytes,
                                 "RoPE rotations");
            cuda::rope_table(inv_freq_.as<double>(), c.head_dim, shape.n_ctx, rope_.as<float2>(), s());
        }
        // tests/bench_decode_parts (testing::cuda_decode_skip, in contexts created while a mask is set): a
        // step with operations left out reads what no operation of it wrote. Where that input may hold
        // bytes of another layout (the quantized input, whose scale records sit by its width; q/k/v for
        // qkv_finish, which adds q's bias in place; gate and up for the SwiGLU, which a prefill step may
        // leave in f16), the reader takes zero_ instead: zeros, the same bytes read. The other inputs keep
        // what an earlier operation or step wrote, and the buffers (the keys and values of positions whose
        // qkv_finish is left out among them) start zeroed here. So a timing run's logits, wrong anyway,
        // stay finite and its sampling goes on.
        if (g_decode_skip.load(std::memory_order_relaxed) != 0) {
            const uint64_t floats = static_cast<uint64_t>(std::max<int64_t>(q_dim_ + 2 * kv_dim_, c.n_ff));
            zero_ = DeviceMemory(std::max<uint64_t>(xq_.bytes(), floats * sizeof(float)), &m_->scratch_bytes, "zeros for operations left out");
            for (DeviceMemory* b : {&k_cache_, &v_cache_, &x_, &xb_, &q_, &qkv_, &att_, &gate_up_, &xq_, &zero_})
                if (b->bytes()) check(cudaMemsetAsync(b->as<void>(), 0, b->bytes(), s()), "zeroed buffers");
        }
        io_host_ = std::make_unique<Pinned>(4 * sizeof(int32_t));
        batch_host_ = std::make_unique<Pinned>(6 * nt * sizeof(int32_t));
        keys_host_ = std::make_unique<Pinned>(static_cast<size_t>(shape.max_out) * sizeof(unsigned long long));
        logits_host_ = std::make_unique<Pinned>(static_cast<size_t>(c.n_vocab) * sizeof(float));
        gemm_ = std::make_unique<cuda::PrefillGemm>(*m_, c, max_tokens_, s());
        // The prefill attention's choice of kernel is made once per process, on its first call; made here,
        // it never falls inside a graph capture (it reads a device symbol).
        if (cuda::attention_head_dim_supported(c.head_dim)) (void)cuda::attention_prefill_kernel(c.head_dim, max_tokens_);

        auto vec = [&](const gguf::TensorInfo* t) { return t ? static_cast<const float*>(m_->device_of(engine::Weight::of(t))) : nullptr; };
        auto mat = [&](const gguf::TensorInfo* t) {
            const engine::Weight w = engine::Weight::of(t);
            const WeightKey key = m_->device_of(w);
            // The one-token mat-vec's copy, if the load made one (a weight is in one set at most): padded
            // q6_K, grouped q8_0 (MINFER_Q80_COPY), grouped q5_0 (MINFER_Q50_COPY) or arranged q2_K / q3_K
            // (MINFER_K23_COPY).
            Mat out{m_->device_type(key, w.type), key, w.rows, w.cols, t->name.c_str()};
            for (const CudaModel::MatvecCopies* set : {&m_->q6k, &m_->q80, &m_->q50, &m_->q2k, &m_->q3k})
                if (const void* copy = set->of(key)) out.w1 = copy, out.type1 = set->type;
            return out;
        };
        const bool no_qk_bias = (c.planted & engine::testing::kPlantNoQkBias) != 0;
        for (const model::Layer& L : plan.layers) {
            LayerDev d;
            d.attn_norm = vec(L.attn_norm);
            d.ffn_norm = vec(L.ffn_norm);
            if (c.qkv_bias) {
                d.bq = no_qk_bias ? nullptr : vec(L.bq);
                d.bk = no_qk_bias ? nullptr : vec(L.bk);
                d.bv = vec(L.bv);
            }
            if (c.qk_norm) {
                d.q_norm = vec(L.q_norm);
                d.k_norm = vec(L.k_norm);
            }
            d.wq = mat(L.wq), d.wk = mat(L.wk), d.wv = mat(L.wv), d.wo = mat(L.wo);
            d.gate = mat(L.w_gate), d.up = mat(L.w_up), d.down = mat(L.w_down);
            layers_.push_back(d);
        }
        tok_embd_ = mat(plan.tok_embd);
        output_ = mat(plan.output);
        output_norm_ = vec(plan.output_norm);
    }

    ~CudaRunner() override {
        if (stream_.get()) cudaStreamSynchronize(stream_.get());  // no kernel may outlive the buffers it uses
        for (cudaEvent_t e : timing_)
            if (e) cudaEventDestroy(e);
        for (cudaEvent_t e : step_ev_)
            if (e) cudaEventDestroy(e);
        for (StepGraph& g : step_graphs_)
            if (g.exec) cudaGraphExecDestroy(g.exec);
        for (StepGraph& g : batch_graphs_)
            if (g.exec) cudaGraphExecDestroy(g.exec);
    }

    void forward(const engine::Batch& b) override {
        const size_t n = b.tokens.size();
        if (b.pos.size() != n || b.seq.size() != n || b.out_rows.size() > static_cast<size_t>(shape_.max_out))
            fail(MINFER_ERR_INTERNAL, "forward: a batch of %zu tokens with %zu positions, %zu slots and %zu output rows", n,
                 b.pos.size(), b.seq.size(), b.out_rows.size());
        for (size_t i = 0; i < n; ++i)
            if (b.seq[i] < 0 || b.seq[i] >= shape_.n_seq || b.pos[i] < 0 || b.pos[i] >= kv_.capacity(b.seq[i]))
                fail(MINFER_ERR_INTERNAL, "forward: token %zu at slot %d position %d, which has no KV page", i, b.seq[i], b.pos[i]);
        m_->check_healthy();
        // Whether every decode row of the call attends in one chunk (MINFER_ATTN_ONE_CHUNK): the longest
        // row of the batch bounds them all.
        int32_t longest = 0;
        for (int32_t p : b.pos) longest = std::max(longest, p + 1);
        one_chunk_ = longest <= one_chunk_keys();
        try {
            check(cudaSetDevice(0), "cudaSetDevice");
            upload_tables();
            if (n == 1 && shape_.n_seq == 1 && b.out_rows.size() == 1) {
                decode_step(b.tokens[0], b.pos[0]);
            } else {
                step_window_reset();  // the debug timing's next decode step has no step just before it
                const size_t chunk = static_cast<size_t>(max_tokens_);
                size_t out = 0;
                // Debug level: the call's time on the stream (its first launch to the logits' argmax read back)
                // against the host's, so the time a call spends outside its kernels (launch gaps, clocks) can
                // be told from ncu's sums. A diagnostic: where an event call fails, the line is left out.
                const bool timed = log_level_ >= MINFER_LOG_DEBUG && timing_start();
                const auto host0 = std::chrono::steady_clock::now();
                for (size_t c0 = 0; c0 < n; c0 += chunk) {
                    const size_t c1 = std::min(n, c0 + chunk), m = c1 - c0;
                    // Staging: tokens, positions, slots, then the output rows of the chunk.
                    int32_t* h = batch_host_->as<int32_t>();
                    std::copy(b.tokens.begin() + c0, b.tokens.begin() + c1, h);
                    std::copy(b.pos.begin() + c0, b.pos.begin() + c1, h + m);
                    std::copy(b.seq.begin() + c0, b.seq.begin() + c1, h + 2 * m);
                    rows_.clear();
                    for (; out + rows_.size() < b.out_rows.size() && static_cast<size_t>(b.out_rows[out + rows_.size()]) < c1;)
                        rows_.push_back(static_cast<int32_t>(static_cast<size_t>(b.out_rows[out + rows_.size()]) - c0));
                    // ... and where the last layer runs on the output rows alone (MINFER_PRUNE_LAST: fewer rows
                    // than tokens), their positions and slots.
                    const size_t nr = rows_.size();
                    const bool prune = nr < m && g_prune_last.on();
                    std::copy(rows_.begin(), rows_.end(), h + 3 * m);
                    for (size_t i = 0; prune && i < nr; ++i) {
                        h[3 * m + nr + i] = b.pos[c0 + static_cast<size_t>(rows_[i])];
                        h[3 * m + 2 * nr + i] = b.seq[c0 + static_cast<size_t>(rows_[i])];
                    }
                    check(cudaMemcpyAsync(batch_.as<void>(), h, (3 * m + (prune ? 3 : 1) * nr) * sizeof(int32_t), cudaMemcpyHostToDevice,
                                          s()),
                          "batch upload");
                    cuda::batch_runs(b.pos, b.seq, c0, c1, runs_);
                    const int32_t* d = batch_.as<int32_t>();
                    // The batch graphs run every row in one decode attention launch: a slot with two rows
                    // takes run_chunk, which gives its second row a launch of its own (decode_group_end).
                    const bool decode_only = m == n && runs_.size() == m && rows_.size() == m && !cuda::slot_repeats(runs_);
                    if (graphs_ && decode_only && batch_graphs_ok_) decode_rows_step(static_cast<int>(m));
                    else run_chunk(static_cast<int>(m), d, d + m, d + 2 * m, d + 3 * m, runs_, rows_, out, prune ? d + 3 * m + nr : nullptr);
                    out += rows_.size();
                    // The staging is rewritten by the next chunk: wait for this one's upload.
                    if (c1 < n) stream_.sync("batch upload");
                }
                const bool ended = finish(out, timed ? timing_[1] : nullptr);
                float gpu_ms = 0.0f;
                if (ended && cudaEventElapsedTime(&gpu_ms, timing_[0], timing_[1]) == cudaSuccess) {
                    const double host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host0).count();
                    log_line(log_level_, MINFER_LOG_DEBUG, "CUDA: a forward call of %zu tokens in passes of up to %d: %.3f ms on the stream, %.3f ms on the host",
                             n, max_tokens_, gpu_ms, host_ms);
                } else if (ended) {
                    cudaGetLastError();  // not sticky: the diagnostic's failure stays its own
                }
            }
        } catch (const Error& e) {
            if (e.status() == MINFER_ERR_DEVICE) m_->poison(e.what());
            throw;
        }
    }

    engine::KvPool& kv() override { return kv_; }

    int32_t argmax(size_t i) override {
        check_row(i);
        return cuda::argmax_token(keys_host_->as<unsigned long long>()[i]);
    }

    std::span<const float> logits(size_t i) override {
        check_row(i);
        const size_t nv = static_cast<size_t>(c_.n_vocab);
        if (const auto at = std::lower_bound(fetched_.begin(), fetched_.end(), i); at != fetched_.end() && *at == i)
            return std::span<const float>(rows_host_->as<float>() + static_cast<size_t>(at - fetched_.begin()) * nv, nv);
        if (host_row_ != static_cast<int64_t>(i)) {
            m_->check_healthy();
            try {
                check(cudaMemcpyAsync(logits_host_->as<float>(), logits_.as<float>() + i * nv, nv * sizeof(float), cudaMemcpyDeviceToHost, s()),
                      "logits read back");
                stream_.sync("logits read back");
            } catch (const Error& e) {
                if (e.status() == MINFER_ERR_DEVICE) m_->poison(e.what());
                throw;
            }
            host_row_ = static_cast<int64_t>(i);
        }
        return std::span<const float>(logits_host_->as<float>(), nv);
    }

    bool fetch_candidates(std::span<const size_t> rows, size_t m, std::span<const std::span<const int32_t>> extra) override {
        cand_.clear();
        if (rows.empty()) return true;
        if (rows.size() > kFetchRows || extra.size() != rows.size())
            fail(MINFER_ERR_INTERNAL, "fetch_candidates: %zu rows and %zu extra lists, at most %zu rows", rows.size(), extra.size(), kFetchRows);
        size_t n_extra = 0;
        for (size_t k = 0; k < rows.size(); ++k) {
            check_row(rows[k]);
            if (k > 0 && rows[k] <= rows[k - 1]) fail(MINFER_ERR_INTERNAL, "fetch_candidates: the rows are not ascending");
            for (int32_t t : extra[k])
                if (t < 0 || t >= c_.n_vocab) fail(MINFER_ERR_INTERNAL, "fetch_candidates: token %d of %d", t, c_.n_vocab);
            n_extra = std::max(n_extra, extra[k].size());
        }
        if (m == 0 || m > kCandidatesMax || n_extra > kCandidatesMax || !cuda::topk_fits(c_.n_vocab, static_cast<int>(m))) return false;
        m_->check_healthy();
        const size_t nr = rows.size(), nk = nr * m, ne = nr * n_extra;
        // Room for kFetchRows rows (max_out if fewer: a context's one) of kCandidatesMax each, taken at the
        // first sampled step that cuts its row short (for Qwen2's vocabulary 5 MB of GPU memory and 260 KB
        // pinned for a batch, 80 KB and 4 KB for a context); where it cannot be had, the rows are read whole.
        if (cand_failed_) return false;
        const uint64_t rows_max = std::min<uint64_t>(kFetchRows, static_cast<uint64_t>(shape_.max_out));
        const uint64_t part_keys = rows_max * static_cast<uint64_t>(cuda::topk_chunks(c_.n_vocab)) * kCandidatesMax;  // pass 1's lists
        if (!cand_dev_.bytes()) {
            // All three or none: a later call finds either every buffer or none.
            DeviceMemory dev;
            std::unique_ptr<Pinned> in, out;
            try {
                dev = DeviceMemory((part_keys + rows_max * kCandidatesMax) * sizeof(unsigned long long) + rows_max * kCandidatesMax * sizeof(float) +
                                       (rows_max + rows_max * kCandidatesMax) * sizeof(int32_t),
                                   &m_->scratch_bytes, "sampling candidates");
                in = std::make_unique<Pinned>((rows_max + rows_max * kCandidatesMax) * sizeof(int32_t));
                out = std::make_unique<Pinned>(rows_max * kCandidatesMax * (sizeof(unsigned long long) + sizeof(float)));
            } catch (const Error& e) {
                if (e.status() == MINFER_ERR_DEVICE) {
                    m_->poison(e.what());
                    throw;
                }
                log_line(log_level_, MINFER_LOG_WARN, "CUDA: no room for the sampling candidates (%s): sampled rows come back whole", e.what());
                cand_failed_ = true;  // not tried again: one warning
                return false;
            }
            cand_dev_ = std::move(dev);
            cand_in_ = std::move(in);
            cand_out_ = std::move(out);
        }
        // Device layout: part, keys, the extra tokens' logits, then the rows and the extra tokens (uploaded).
        auto* part = cand_dev_.as<unsigned long long>();
        auto* keys = part + part_keys;  // [nr][m], then the extra logits [nr][n_extra] right after
        auto* extra_out = reinterpret_cast<float*>(keys + nk);
        auto* d_rows = reinterpret_cast<int32_t*>(reinterpret_cast<float*>(part + part_keys + rows_max * kCandidatesMax) + rows_max * kCandidatesMax);
        int32_t* h = cand_in_->as<int32_t>();
        for (size_t k = 0; k < nr; ++k) {
            h[k] = static_cast<int32_t>(rows[k]);
            int32_t* e = h + nr + k * n_extra;
            std::copy(extra[k].begin(), extra[k].end(), e);
            std::fill(e + extra[k].size(), e + n_extra, 0);  // (token 0's logit, not read back)
        }
        try {
            check(cudaMemcpyAsync(d_rows, h, (nr + ne) * sizeof(int32_t), cudaMemcpyHostToDevice, s()), "candidates upload");
            cuda::topk_rows(logits_.as<float>(), c_.n_vocab, d_rows, static_cast<int>(nr), static_cast<int>(m), part, keys, d_rows + nr,
                            static_cast<int>(n_extra), extra_out, s());
            check(cudaMemcpyAsync(cand_out_->as<void>(), keys, nk * sizeof(unsigned long long) + ne * sizeof(float), cudaMemcpyDeviceToHost, s()),
                  "candidates read back");
            stream_.sync("candidates read back");
        } catch (const Error& e) {
            if (e.status() == MINFER_ERR_DEVICE) m_->poison(e.what());
            throw;
        }
        const auto* hk = cand_out_->as<unsigned long long>();
        const auto* hx = reinterpret_cast<const float*>(hk + nk);
        for (size_t k = 0; k < nr; ++k) {
            cand_.begin_row();
            for (size_t j = 0; j < m && hk[k * m + j] != 0; ++j) {
                int32_t id = 0;
                float v = 0.0f;
                cuda::topk_decode(hk[k * m + j], id, v);
                cand_.add(id, v);
            }
            for (size_t j = 0; j < extra[k].size(); ++j) cand_.add(extra[k][j], hx[k * n_extra + j]);
        }
        cand_.end();
        return true;
    }

    Candidates candidates(size_t k) override { return cand_.row(k); }

    void fetch_logits(std::span<const size_t> rows) override {
        fetched_.clear();
        if (rows.empty()) return;
        if (rows.size() > kFetchRows) fail(MINFER_ERR_INTERNAL, "fetch_logits: %zu rows, at most %zu", rows.size(), kFetchRows);
        for (size_t k = 0; k < rows.size(); ++k) {
            check_row(rows[k]);
            if (k > 0 && rows[k] <= rows[k - 1]) fail(MINFER_ERR_INTERNAL, "fetch_logits: the rows are not ascending");
        }
        m_->check_healthy();
        const size_t nv = static_cast<size_t>(c_.n_vocab);
        // Room for kFetchRows rows (39 MB for Qwen2's vocabulary), or max_out if fewer, taken at the first
        // fetch: a batch that only ever decodes greedily never holds it.
        if (!rows_host_) rows_host_ = std::make_unique<Pinned>(std::min<size_t>(kFetchRows, static_cast<size_t>(shape_.max_out)) * nv * sizeof(float));
        try {
            // Row rows[k] goes to place k; a run of consecutive rows is one copy.
            for (size_t k = 0; k < rows.size();) {
                size_t e = k + 1;
                while (e < rows.size() && rows[e] == rows[e - 1] + 1) ++e;
                check(cudaMemcpyAsync(rows_host_->as<float>() + k * nv, logits_.as<float>() + rows[k] * nv, (e - k) * nv * sizeof(float),
                                      cudaMemcpyDeviceToHost, s()),
                      "logits read back");
                k = e;
            }
            stream_.sync("logits read back");
        } catch (const Error& e) {
            if (e.status() == MINFER_ERR_DEVICE) m_->poison(e.what());
            throw;
        }
        fetched_.assign(rows.begin(), rows.end());
    }

private:
    cudaStream_t s() const { return stream_.get(); }

    // The debug timing's events, made on first use, and the start recorded; false (errors cleared) where
    // an event call fails: the call then goes untimed.
    bool timing_start() {
        for (cudaEvent_t& e : timing_)
            if (!e && cudaEventCreate(&e) != cudaSuccess) {
                e = nullptr;
                cudaGetLastError();
                return false;
            }
        if (cudaEventRecord(timing_[0], s()) == cudaSuccess) return true;
        cudaGetLastError();
        return false;
    }

    void check_row(size_t i) const {
        if (i >= n_out_) fail(MINFER_ERR_INTERNAL, "forward output %zu: the last call had %zu", i, n_out_);
    }

    // Copies the page tables that changed since the last call (a few entries per slot and 16 tokens).
    void upload_tables() {
        const size_t stride = static_cast<size_t>(kv_.max_table());
        for (int slot = 0; slot < shape_.n_seq; ++slot) {
            if (!kv_.changed(slot)) continue;
            const engine::KvPages t = kv_.table(slot);
            if (!t.empty())
                check(cudaMemcpyAsync(pages_.as<int32_t>() + static_cast<size_t>(slot) * stride, t.data(), t.size() * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, s()),
                      "page table upload");
            kv_.clear_changed(slot);
        }
    }

    // One token of slot 0 at position pos: the graph (or the same operations eagerly).
    void decode_step(int32_t token, int32_t pos) {
        int32_t* io = io_host_->as<int32_t>();
        io[0] = token;
        io[1] = pos;
        io[2] = 0;  // slot
        io[3] = 0;  // output row
        StepGraph& g = step_graphs_[one_chunk_];  // the attention's form for this step
        const bool eager = !graphs_ || !g.warmed;  // each form's first step eagerly
        g.warmed = true;
        if (!eager && !g.exec) g.exec = capture_graph([&] { enqueue_step(); });
        const bool timed = log_level_ >= MINFER_LOG_DEBUG && step_record(0);
        if (eager) enqueue_step();
        else check(cudaGraphLaunch(g.exec, s()), "decode step (graph launch)");
        const bool ended = timed && step_record(1);
        stream_.sync("decode step");
        n_out_ = 1;
        host_row_ = -1;
        fetched_.clear();
        cand_.clear();
        if (ended) step_account();
        else step_window_reset();
    }

    // Debug level: decode steps timed on the stream (their start and end recorded around the graph
    // launch), with the stream's idle time from one step's end to the next one's start: what a token
    // spends outside the GPU (the sync's wake-up, the sampling, the API call, the graph launch), which
    // ncu's kernel sums cannot show. Logged once every kStepWindow consecutive steps (a forward pass of
    // another kind, or an untimed step, starts the count again). A diagnostic: where an event call fails,
    // the step goes untimed and the error is cleared.
    static constexpr int kStepWindow = 64;
    void step_window_reset() {
        step_prev_ = false;
        step_count_ = 0;
        step_busy_ms_ = step_idle_ms_ = step_idle_max_ms_ = 0.0;
    }
    bool step_record(int i) {
        if (!step_ev_[i] && cudaEventCreate(&step_ev_[i]) != cudaSuccess) {
            step_ev_[i] = nullptr;
            cudaGetLastError();
            return false;
        }
        if (cudaEventRecord(step_ev_[i], s()) == cudaSuccess) return true;
        cudaGetLastError();
        return false;
    }
    void step_account() {
        float busy = 0.0f, idle = 0.0f;
        if (cudaEventElapsedTime(&busy, step_ev_[0], step_ev_[1]) != cudaSuccess) {
            cudaGetLastError();
            step_window_reset();
            return;
        }
        const bool gap = step_prev_ && cudaEventElapsedTime(&idle, step_ev_[2], step_ev_[0]) == cudaSuccess;
        if (step_prev_ && !gap) cudaGetLastError();
        std::swap(step_ev_[1], step_ev_[2]);  // this step's end: the next step's "previous end"
        step_prev_ = true;
        if (!gap) return;  // counted from the second step of a run
        step_busy_ms_ += busy;
        step_idle_ms_ += idle;
        step_idle_max_ms_ = std::max(step_idle_max_ms_, static_cast<double>(idle));
        if (++step_count_ < kStepWindow) return;
        log_line(log_level_, MINFER_LOG_DEBUG,
                 "CUDA: %d decode steps: %.1f us a step on the stream, %.1f us a step idle between steps (the host's turn; at most %.1f)",
                 step_count_, 1e3 * step_busy_ms_ / step_count_, 1e3 * step_idle_ms_ / step_count_, 1e3 * step_idle_max_ms_);
        step_window_reset();
        step_prev_ = true;  // the next window goes on from this step's end
    }

    // The decode step's operations, reading the token and position that io_host_ holds at execution.
    void enqueue_step() {
        check(cudaMemcpyAsync(io_.as<void>(), io_host_->as<void>(), 4 * sizeof(int32_t), cudaMemcpyHostToDevice, s()), "decode step input");
        static const int32_t kLast = 0;
        static const cuda::BatchRun kRun{0, 1, -1, 0};  // its position is read on the device
        const int32_t* d = io_.as<int32_t>();
        run_chunk(1, d, d + 1, d + 2, d + 3, std::span<const cuda::BatchRun>(&kRun, 1), std::span<const int32_t>(&kLast, 1), 0);
        cuda::argmax_keys(logits_.as<float>(), 1, c_.n_vocab, keys_.as<unsigned long long>(), s());
        check(cudaMemcpyAsync(keys_host_->as<void>(), keys_.as<void>(), sizeof(unsigned long long), cudaMemcpyDeviceToHost, s()),
              "argmax read back");
    }

    template <class F>
    cudaGraphExec_t capture_graph(F&& enqueue) {
        cudaGraph_t g = nullptr;
        check(cudaStreamBeginCapture(s(), cudaStreamCaptureModeThreadLocal), "graph capture");
        try {
            enqueue();
        } catch (...) {
            cudaStreamEndCapture(s(), &g);  // leaves the stream usable; the partial graph is dropped
            if (g) cudaGraphDestroy(g);
            throw;
        }
        check(cudaStreamEndCapture(s(), &g), "graph capture");
        cudaGraphExec_t exec = nullptr;
        const cudaError_t err = cudaGraphInstantiate(&exec, g, 0);
        cudaGraphDestroy(g);
        check(err, "graph instantiate");
        return exec;
    }

    // A batch step of m decode tokens (each the newest of its own sequence, all rows wanted): its kernels
    // and their arguments depend on m alone (tokens, positions, slots and page tables are read on the
    // device), so it is captured once per m, on its second occurrence, and replayed after. A capture that
    // fails (a library that allocates while capturing) turns batch graphs off for this runner: the step
    // runs eagerly, and a real device error shows there.
    void decode_rows_step(int m) {
        const int32_t* d = batch_.as<int32_t>();
        auto enqueue = [&] { run_chunk(m, d, d + m, d + 2 * m, d + 3 * m, runs_, rows_, 0); };
        const size_t at = 2 * static_cast<size_t>(m) + one_chunk_;  // a graph per m and attention form
        if (batch_graphs_.size() <= at) batch_graphs_.resize(at + 1);
        StepGraph& g = batch_graphs_[at];
        if (!g.warmed) {
            enqueue();
            g.warmed = true;
            return;
        }
        if (!g.exec) {
            try {
                g.exec = capture_graph(enqueue);
            } catch (const Error&) {
                cudaGetLastError();  // a capture error is not sticky
                batch_graphs_ok_ = false;
                enqueue();
                return;
            }
        }
        check(cudaGraphLaunch(g.exec, s()), "batch decode step (graph launch)");
    }

    // The argmax of every output row, and the keys brought back.
    // done (optional): recorded once the keys are read back, before the wait (the debug timing); whether
    // it was.
    bool finish(size_t n_out, cudaEvent_t done = nullptr) {
        if (n_out > 0) {
            cuda::argmax_keys(logits_.as<float>(), static_cast<int>(n_out), c_.n_vocab, keys_.as<unsigned long long>(), s());
            check(cudaMemcpyAsync(keys_host_->as<void>(), keys_.as<void>(), n_out * sizeof(unsigned long long), cudaMemcpyDeviceToHost, s()),
                  "argmax read back");
        }
        const bool recorded = done && cudaEventRecord(done, s()) == cudaSuccess;
        if (done && !recorded) cudaGetLastError();  // the timing's own failure, not sticky
        stream_.sync("forward pass");
        n_out_ = n_out;
        host_row_ = -1;
        fetched_.clear();
        cand_.clear();
        return recorded;
    }

    // n tokens: their ids, positions, slots and the chunk rows whose logits are wanted (`rows`, also on the
    // host) in device memory; `runs` cut them into sequences (a run of one token reads its position on the
    // device: the graph's step). Logits go to output rows out0 ... rows_at (fewer rows than tokens only):
    // the rows' positions, then their slots, in device memory; given, the last layer runs on those rows
    // alone past its K/V store (MINFER_PRUNE_LAST).
    void run_chunk(int n, const int32_t* tokens, const int32_t* pos_dev, const int32_t* slot_dev, const int32_t* rows_dev,
                   std::span<const cuda::BatchRun> runs, std::span<const int32_t> rows, size_t out0, const int32_t* rows_at = nullptr) {
        const model::Config& c = c_;
        const float eps = static_cast<float>(c.rms_norm_eps);
        float *x = x_.as<float>(), *xb = xb_.as<float>(), *q = q_.as<float>(), *qkv = qkv_.as<float>();
        float *k = qkv, *v = k + static_cast<int64_t>(max_tokens_) * kv_dim_;
        float *att = att_.as<float>(), *gate = gate_up_.as<float>(), *up = gate + static_cast<int64_t>(max_tokens_) * c.n_ff;
        // n, single and few change once, where the last layer goes on with the wanted rows alone
        // (MINFER_PRUNE_LAST); the lambdas below read them as they stand.
        bool single = n == 1;
        // The one-token step's operations that tests/bench_decode_parts leaves out to time them in the
        // running graph (testing::cuda_decode_skip; 0 but there). Each `left(bit)` below is true for an
        // operation that runs.
        const uint32_t skip = single && zero_.bytes() ? g_decode_skip.load(std::memory_order_relaxed) : 0;
        auto left = [skip](uint32_t bit) { return (skip & bit) == 0; };
        namespace dp = testing::decode_part;
        // A few tokens (a decode step of several sequences, a short prompt): the int8 mat-vecs take them all
        // in one read of each weight, where the weights allow; the GEMMs take the rest.
        bool few = n > 1 && n <= cuda::kMatvecMaxCols;
        // same_input: `in` is the previous matmul's input (its f16 copy is reused).
        // out = W in (accumulate: out += W in, the residual add in the mat-vec's or the GEMM's epilogue).
        auto matmul = [&](const Mat& w, const float* in, float* out, bool accumulate, bool same_input = false) {
            if (single) cuda::matvec(w.type, w.w, w.rows, w.cols, in, out, s(), accumulate);
            else gemm_->run(w.type, w.w, w.rows, w.cols, in, n, out, w.name, same_input, accumulate);
        };
        // The GEMMs of several weights on one input (its f16 copy written by the norm before them): one
        // narrow-GEMM launch for all where it applies.
        auto gemm_joint = [&](std::initializer_list<const Mat*> ws, std::initializer_list<float*> ys, const float* in) {
            cuda::PrefillGemm::Weight w[3];
            int nw = 0;
            for (const Mat* m : ws) w[nw++] = {m->type, m->w, m->rows, m->name};
            gemm_->run_joint(nw, w, ws.begin()[0]->cols, in, n, ys.begin(), true);
        };
        // One GEMM over the weights' concatenated f16 copies into `out` (PrefillGemm::run_concat), if it
        // takes them: bit 1 q/k/v, 2 gate/up.
        auto gemm_concat = [&](int bit, std::initializer_list<const Mat*> ws, float* out, const float* in, __half** out16 = nullptr) {
            cuda::PrefillGemm::Weight w[3];
            int nw = 0;
            for (const Mat* m : ws) w[nw++] = {m->type, m->w, m->rows, m->name};
            return gemm_->run_concat(bit, nw, w, ws.begin()[0]->cols, in, n, out, true, out16);
        };
        // The int8 mat-vec for w (one token, or a few): its input is xq, written by the RMSNorm or quantize_x
        // before it (a vector per token).
        void* xq = xq_.as<void>();
        // The quantized input of a reader whose writer (bit) is left out: zeros of the same layout.
        auto input_of = [&](uint32_t bit) { return left(bit) || !xq_.bytes() ? xq_.as<void>() : zero_.as<void>(); };
        // (The matrix it reads: a q5_0 weight has the int8 path only through its copy, for one input.)
        auto i8w = [&](const Mat& w, int ncols) {
            return int8_ && cuda::matvec_int8_takes(w.for_xq(ncols).type, ncols, w.cols);
        };
        auto i8 = [&](const Mat& w) { return (single || few) && i8w(w, n); };
        // Mat-vecs of one input (`in`, and xq when the norm wrote it): consecutive weights of one type and
        // width share a launch (the int8 mat-vec's matrices as Mat::for_xq gives them), and so do those of
        // two types where the int8 mat-vec has a launch for the pair (cuda::matvec_xq_pairs: a Q4_K_M
        // layer's q4_K q and k and padded q6_K v). Several tokens: only int8 weights (xq holds n vectors).
        auto joint = [&](std::initializer_list<const Mat*> ws, std::initializer_list<float*> ys, const float* in) {
            const Mat* const* wm = ws.begin();
            float* const* ym = ys.begin();
            const int nm = static_cast<int>(ws.size());
            for (int i = 0; i < nm;) {
                const bool int8 = i8(*wm[i]);
                auto take = [&](int e) { return int8 ? wm[e]->for_xq(n) : *wm[e]; };
                const Mat first = take(i);
                const void* w[3] = {first.w};
                int64_t r[3] = {first.rows};
                int j = i + 1, j1 = 0;  // j1: the first matrix of the second type (0: one type)
                quant::Type t1 = first.type;
                for (; j < nm; ++j) {
                    const Mat next = take(j);
                    if (next.cols != first.cols) break;
                    if (next.type != (j1 ? t1 : first.type)) {
                        if (j1 || !int8 || n != 1 || !cuda::matvec_xq_pairs(first.type, next.type)) break;  // one input column
                        j1 = j, t1 = next.type;
                    }
                    w[j - i] = next.w, r[j - i] = next.rows;
                }
                if (int8 && j1) cuda::matvec_xq_pair(first.type, j1 - i, t1, j - i, w, r, first.cols, xq, ym + i, s());
                else if (int8) cuda::matvec_xq(first.type, j - i, w, r, first.cols, xq, ym + i, s(), false, n);
                else cuda::matvec_multi(first.type, j - i, w, r, first.cols, in, ym + i, s());
                i = j;
            }
        };
        const bool all_rows = std::all_of(runs.begin(), runs.end(), [](const cuda::BatchRun& r) { return r.n == 1; });
        // Every run a prefill chunk: the attention may read q in f16 (MINFER_Q16).
        const bool q16_step = g_q16.on() && std::all_of(runs.begin(), runs.end(), [](const cuda::BatchRun& r) { return r.n > 1; });
        // A residual add deferred from a GEMM (MINFER_DEFER_RESIDUAL): its product, waiting in gate_up_'s
        // memory (free from the SwiGLU's read until the next gate/up GEMM) to be added to x by the next
        // RMSNorm or the final gather; null when x is up to date.
        const float* pending = nullptr;
        float* const deferred = gate;
        // x += W in by the matmul's epilogue, or W in into `deferred` for the next norm or the final gather
        // to add where the knob defers it (a GEMM on cuBLAS past MINFER_GEMM_NARROW_MAX tokens).
        auto add_to_x = [&](const Mat& w, const float* in, bool same_input) {
            const bool fits = 2 * int64_t{c.n_ff} >= c.n_embd;  // the product ([n][n_embd]) in gate_up_ ([n][2 n_ff])
            if (MINFER_DEFER_RESIDUAL && n > MINFER_GEMM_NARROW_MAX && fits && gemm_->cublas_runs(w.type, w.w, n, w.cols)) {
                matmul(w, in, deferred, false, same_input);
                pending = deferred;
                g_deferred_residuals.fetch_add(1, std::memory_order_relaxed);
            } else {
                matmul(w, in, x, true, same_input);
            }
        };
        // The RMSNorm of x (adding the deferred product first, if one waits) into out and out16 / xq.
        auto norm = [&](const float* w, float* out, __half* out16, void* xq_out) {
            if (pending) cuda::add_rms_norm(x, pending, n, c.n_embd, w, eps, out, s(), out16, xq_out);
            else cuda::rms_norm(x, n, c.n_embd, w, eps, out, s(), out16, xq_out);
            pending = nullptr;
        };
        cuda::embed_rows(tok_embd_.type, tok_embd_.w, tok_embd_.cols, tokens, n, x, s());
        // The context's rotations for a long step (none without MINFER_ROPE_TABLE, and for decode steps).
        const cuda::RopeTable rope =
            n > MINFER_GEMM_NARROW_MAX && rope_.as<void>() ? cuda::RopeTable{rope_.as<float2>(), shape_.n_ctx} : cuda::RopeTable{};
        cuda::KvMap per_token;  // each token's slot from slot_dev
        per_token.pages = pages_.as<int32_t>();
        per_token.slot = slot_dev;
        per_token.stride = kv_.max_table();
        // The last layer on the wanted rows alone (rows_at): x holds them packed, in order, once `pruned` is set.
        if (rows_at && rows.size() >= static_cast<size_t>(n)) fail(MINFER_ERR_INTERNAL, "forward: %zu rows of %d pruned", rows.size(), n);
        bool pruned = false;
        for (int il = 0; il < c.n_layer; ++il) {
            const LayerDev& L = layers_[static_cast<size_t>(il)];
            const uint64_t at = static_cast<uint64_t>(il) * static_cast<uint64_t>(kv_rows_) * static_cast<uint64_t>(kv_dim_);
            __half* kc = k_cache_.as<__half>() + at;
            __half* vc = v_cache_.as<__half>() + at;

            // Many tokens: the norm also writes the f16 copy the GEMMs read; one: the int8 copy if wanted; a
            // few: the int8 copies when every weight of the group has the int8 path, else the f16 copy.
            const bool qkv_few = few && i8(L.wq) && i8(L.wk) && i8(L.wv);
            const bool qkv_xq = single ? i8(L.wq) || i8(L.wk) || i8(L.wv) : qkv_few;
            // The GEMMs read the f16 copy alone: no f32 output then (MINFER_NORM_F16_ONLY).
            const bool qkv16 = !single && !qkv_few;
            if (left(dp::kAttnNorm))
                norm(L.attn_norm, qkv16 && MINFER_NORM_F16_ONLY ? nullptr : xb,
                     qkv16 ? gemm_->input16(xb, n, c.n_embd, !MINFER_NORM_F16_ONLY) : nullptr, qkv_xq ? xq : nullptr);
            cuda::QkvIn proj{q, k, v, q_dim_, kv_dim_};
            if (single || qkv_few) {
                xq = input_of(dp::kAttnNorm);
                if (left(dp::kQkv)) joint({&L.wq, &L.wk, &L.wv}, {q, k, v}, xb);
                xq = xq_.as<void>();
                // (qkv_finish adds the biases to q in place: without the projections it reads zeros instead)
                if (!left(dp::kQkv)) proj = {zero_.as<float>(), zero_.as<float>() + q_dim_, zero_.as<float>() + q_dim_ + kv_dim_, q_dim_, kv_dim_};
            } else if (gemm_concat(1, {&L.wq, &L.wk, &L.wv}, qkv, xb)) {
                const int64_t ld = q_dim_ + 2 * kv_dim_;
                proj = {qkv, qkv + q_dim_, qkv + q_dim_ + kv_dim_, ld, ld};
            } else {
                gemm_joint({&L.wq, &L.wk, &L.wv}, {q, k, v}, xb);
            }
            const bool last_pruned = rows_at && il + 1 == c.n_layer;
            // q in f16 (MINFER_Q16), in q_'s memory: where the projections came from the concatenated GEMM
            // (qkv_), not where q_ holds the q product that qkv_finish reads.
            __half* const q16 = q16_step && !last_pruned && proj.q != q ? reinterpret_cast<__half*>(q) : nullptr;
            if (left(dp::kQkvFinish))
                cuda::qkv_finish(proj, q, n, c.n_head, c.n_head_kv, c.head_dim, L.bq, L.bk, L.bv, L.q_norm, L.k_norm, eps,
                                 inv_freq_.as<double>(), 0, pos_dev, kc, vc, per_token, s(), rope, q16,
                                 q16 ? cuda::attention_qscale(c.head_dim) : 0.0f);
            if (q16) g_q16_layers.fetch_add(1, std::memory_order_relaxed);
            if (last_pruned) {
                const int m = static_cast<int>(rows.size());
                g_pruned_layers.fetch_add(1, std::memory_order_relaxed);
                g_pruned_rows.fetch_add(static_cast<uint64_t>(n - m), std::memory_order_relaxed);
                if (m > 1) g_pruned_multi.fetch_add(1, std::memory_order_relaxed);
                if (m == 0) break;  // the K/V store was all this step needed of the last layer
                // The wanted rows alone from here on: their q packed into att (free until an attention writes
                // it), their attention as decode rows at their own positions and slots (rows_at) into q (free
                // once packed), and their x packed through xb into x's first rows (no product is pending:
                // the attention norm took it); then the rest of the layer is a step of those rows. The order
                // matters: the decode kernel copies the keys before a row's own before its pdl_wait, as an
                // earlier step's; here qkv_finish wrote them, and the gather between them (which waits for
                // qkv_finish before it lets the attention start: it keeps pdl_wait before its trigger,
                // cuda/pdl.cuh) keeps those copies after the writes. Do not launch the attention right after
                // qkv_finish.
                cuda::gather_rows(q, rows_dev, m, static_cast<int>(q_dim_), att, s());
                const int group = std::min(max_tokens_, shape_.n_seq);  // the rows partial_ holds
                for (int r0 = 0; r0 < m; r0 += group) {
                    cuda::KvMap rows_map = per_token;
                    rows_map.slot = rows_at + m + r0;
                    cuda::attention_decode_rows(att + r0 * q_dim_, kc, vc, q + r0 * q_dim_, std::min(group, m - r0), rows_at + r0,
                                                c.n_head, c.n_head_kv, c.head_dim, partial_.as<float>(), s(), rows_map, nullptr, nullptr, 0, 0,
                                                one_chunk_, r0 + group >= m);
                }
                att = q;
                cuda::gather_rows(x, rows_dev, m, c.n_embd, xb, s());
                check(cudaMemcpyAsync(x, xb, static_cast<size_t>(m) * static_cast<size_t>(c.n_embd) * sizeof(float), cudaMemcpyDeviceToDevice,
                                      s()),
                      "last layer's rows");
                n = m;
                single = m == 1;
                few = m > 1 && m <= cuda::kMatvecMaxCols;
                pruned = true;
            }
            // Several tokens whose output projection takes the GEMM: the attention writes the GEMM's f16 input
            // itself (a prefill chunk's kernel that alone; the decode rows' kernel both copies).
            __half* att16 = MINFER_ATT_F16_OUT && !pruned && !single && !i8(L.wo) ? gemm_->input16(att, n, q_dim_, all_rows) : nullptr;
            // ... and where it takes the int8 mat-vec, its int8 input (no quantize_x launch).
            void* att_xq = MINFER_ATT_XQ_OUT && !pruned && i8(L.wo) && all_rows ? xq : nullptr;
            for (size_t r = 0; r < runs.size() && !pruned;) {
                const cuda::BatchRun& run = runs[r];
                if (run.n > 1) {  // a prefill chunk of one sequence
                    cuda::KvMap one = per_token;
                    one.slot = nullptr;
                    one.slot0 = run.slot;
                    cuda::attention(q + run.begin * q_dim_, kc, vc, att + run.begin * q_dim_, run.n, run.pos0, c.n_head, c.n_head_kv,
                                    c.head_dim, partial_.as<float>(), s(), nullptr, one, att16 ? att16 + run.begin * q_dim_ : nullptr,
                                    q16 ? q16 + run.begin * q_dim_ : nullptr);
                    ++r;
                    continue;
                }
                // Single tokens of different sequences: one decode launch (a slot's second row starts the next).
                const size_t e = cuda::decode_group_end(runs, r, static_cast<size_t>(shape_.n_seq));
                cuda::KvMap rows_map = per_token;
                rows_map.slot = slot_dev + run.begin;
                if (left(dp::kAttention))
                    cuda::attention_decode_rows(q + run.begin * q_dim_, kc, vc, att + run.begin * q_dim_, static_cast<int>(e - r),
                                                pos_dev + run.begin, c.n_head, c.n_head_kv, c.head_dim, partial_.as<float>(), s(), rows_map,
                                                att16 ? att16 + run.begin * q_dim_ : nullptr, att_xq, static_cast<int>(run.begin), n,
                                                one_chunk_, cuda::decode_launch_last(runs, e));
                r = e;
            }
            if (!left(dp::kO)) {
            } else if (i8(L.wo)) {
                if (!att_xq) cuda::quantize_x(att, nullptr, q_dim_, xq, s(), n);
                const Mat wo = L.wo.for_xq(n);
                cuda::matvec_xq(wo.type, 1, &wo.w, &wo.rows, wo.cols, att_xq ? input_of(dp::kAttention) : xq, &x, s(), true,
                                n);  // x += Wo att
            } else {
                add_to_x(L.wo, att, att16 != nullptr);  // x += Wo att
            }

            const bool gate_up_few = few && i8(L.gate) && i8(L.up);
            const bool gate_up_xq = single ? i8(L.gate) || i8(L.up) : gate_up_few;
            const bool gate_up16 = !single && !gate_up_few;
            if (left(dp::kFfnNorm))
                norm(L.ffn_norm, gate_up16 && MINFER_NORM_F16_ONLY ? nullptr : xb,
                     gate_up16 ? gemm_->input16(xb, n, c.n_embd, !MINFER_NORM_F16_ONLY) : nullptr, gate_up_xq ? xq : nullptr);
            if (single) {
                xq = input_of(dp::kFfnNorm);
                if (left(dp::kGateUp)) joint({&L.gate, &L.up}, {gate, up}, xb);
                xq = xq_.as<void>();
                // (gate and up as the SwiGLU reads them: zeros where the gate/up mat-vec is left out)
                float* g = left(dp::kGateUp) ? gate : zero_.as<float>();
                const float* u = left(dp::kGateUp) ? up : zero_.as<float>();
                if (i8(L.down)) {  // x += W_down h, h = silu(gate) * up quantized
                    if (left(dp::kSwiglu)) cuda::quantize_x(g, u, c.n_ff, xq, s());
                    const Mat down = L.down.for_xq(1);
                    if (left(dp::kDown))
                        cuda::matvec_xq(down.type, 1, &down.w, &down.rows, down.cols, input_of(dp::kSwiglu), &x, s(), true);
                } else if (left(dp::kDown)) {
                    cuda::matvec_swiglu(L.down.type, L.down.w, L.down.rows, L.down.cols, g, u, x, s(), true);  // x += W_down h
                }
            } else {
                int64_t ld = c.n_ff;  // of gate and up
                float* u = up;
                // The concatenated gate/up product of a step of more than MINFER_GEMM_NARROW_MAX tokens (a
                // prefill chunk, or a batch step of many sequences) in f16, in gate_up_'s memory
                // (MINFER_GATEUP_F16): offered to run_concat, which leaves it null unless it wrote there
                // (gate_up_few steps have at most kMatvecMaxCols tokens, so never offer it).
                static_assert(cuda::kMatvecMaxCols <= MINFER_GEMM_NARROW_MAX, "the int8 mat-vec's steps take f32 gate/up");
                __half* gu16 = MINFER_GATEUP_F16 && n > MINFER_GEMM_NARROW_MAX ? reinterpret_cast<__half*>(gate) : nullptr;
                if (gate_up_few) {
                    joint({&L.gate, &L.up}, {gate, up}, xb);
                } else if (gemm_concat(2, {&L.gate, &L.up}, gate, xb, &gu16)) {
                    ld = 2 * int64_t{c.n_ff};
                    u = gate + c.n_ff;
                } else {
                    gemm_joint({&L.gate, &L.up}, {gate, up}, xb);
                }
                if (i8(L.down) && ld == c.n_ff) {  // x += W_down h, h = silu(gate) * up quantized per token
                    cuda::quantize_x(gate, up, c.n_ff, xq, s(), n);
                    const Mat down = L.down.for_xq(n);
                    cuda::matvec_xq(down.type, 1, &down.w, &down.rows, down.cols, xq, &x, s(), true, n);
                } else {
                    __half* h = gemm_->input16(gate, n, c.n_ff, false);
                    if (gu16) cuda::swiglu_f16_rows(gu16, gu16 + c.n_ff, n, c.n_ff, ld, h, s());
                    else cuda::swiglu_f16_rows(gate, u, n, c.n_ff, ld, h, s());
                    add_to_x(L.down, gate, true);  // x += W_down h
                }
            }
        }
        // The rows asked for, gathered and normed, through the output projection: the int8 mat-vec for up
        // to kMatvecMaxCols rows where the weight has it, else one GEMM for several rows when the weight is
        // f16, in the f16 cache or taken by the quantized narrow GEMM (up to 64 rows), else the int8
        // mat-vec kMatvecMaxCols rows at a time where the weight has it, else a mat-vec per row.
        const int n_rows = static_cast<int>(rows.size());
        const bool out8 = n_rows >= 1 && n_rows <= cuda::kMatvecMaxCols && i8w(output_, n_rows);
        if (n_rows > 0 && pruned) {  // x holds the rows, packed
            norm(output_norm_, xb, nullptr, out8 ? xq : nullptr);
        } else if (n_rows > 0) {
            cuda::gather_rows(x, rows_dev, n_rows, c.n_embd, xb, s(), pending);
            cuda::rms_norm(xb, n_rows, c.n_embd, output_norm_, eps, xb, s(), nullptr, out8 ? xq : nullptr);
        }
        float* logits = logits_.as<float>() + out0 * static_cast<size_t>(c.n_vocab);
        if (out8) {
            const Mat out = output_.for_xq(n_rows);
            cuda::matvec_xq(out.type, 1, &out.w, &out.rows, out.cols, xq, &logits, s(), false, n_rows);
        } else if (n_rows > 1 && (output_.type == quant::Type::F16 || m_->w16_of(output_.w) ||
                                  gemm_->narrow_quant(output_.type, output_.w, n_rows, output_.cols))) {
            gemm_->run(output_.type, output_.w, output_.rows, output_.cols, xb, n_rows, logits, output_.name);
        } else if (n_rows > 1 && i8w(output_, 2)) {  // 2 or more columns a launch (the last launch may take 1)
            // No f16 copy (the two-pass and fused paths; a tied embedding below the cache's size gate): the
            // int8 mat-vec over up to kMatvecMaxCols rows per read of the matrix, not one read per row.
            for (int r0 = 0; r0 < n_rows; r0 += cuda::kMatvecMaxCols) {
                const int nr = std::min(cuda::kMatvecMaxCols, n_rows - r0);
                float* out = logits + static_cast<size_t>(r0) * c.n_vocab;
                cuda::quantize_x(xb + int64_t{r0} * c.n_embd, nullptr, c.n_embd, xq, s(), nr);
                cuda::matvec_xq(output_.type, 1, &output_.w, &output_.rows, output_.cols, xq, &out, s(), false, nr);
            }
        } else {
            for (int i = 0; i < n_rows; ++i) {
                float* out = logits + static_cast<size_t>(i) * c.n_vocab;
                cuda::matvec(output_.type, output_.w, output_.rows, output_.cols, xb + int64_t{i} * c.n_embd, out, s());
            }
        }
    }

    std::shared_ptr<CudaModel> m_;
    model::Config c_;
    engine::RunnerShape shape_;
    bool graphs_;
    bool int8_;  // the matvec_int8 option
    int log_level_;
    cudaEvent_t timing_[2] = {nullptr, nullptr};  // a timed call's first and last point on the stream (debug level)
    cudaEvent_t step_ev_[3] = {nullptr, nullptr, nullptr};  // a timed decode step's start and end, the previous one's end
    bool step_prev_ = false;  // step_ev_[2] holds the end of the decode step just before
    int step_count_ = 0;      // steps of the current window
    double step_busy_ms_ = 0.0, step_idle_ms_ = 0.0, step_idle_max_ms_ = 0.0;
    int max_tokens_ = 0;
    int64_t kv_dim_ = 0, q_dim_ = 0;
    int64_t kv_rows_ = 0;  // KV rows per layer: the pool's pages * kKvPage
    engine::KvPool kv_;
    cuda::Stream stream_;
    DeviceMemory k_cache_, v_cache_;  // [n_layer][kv_rows][n_head_kv * head_dim] f16
    DeviceMemory pages_;              // [n_seq][kv_.max_table()] the page tables
    DeviceMemory x_, xb_, q_, qkv_, att_, gate_up_, logits_, partial_;
    DeviceMemory xq_;      // the int8 mat-vecs' quantized input (int8_ only)
    DeviceMemory zero_;    // zeros read in place of a left-out operation's output (testing::cuda_decode_skip only)
    DeviceMemory batch_;   // [6][max_tokens]: a chunk's token ids, positions, slots, output rows, and those rows' positions and slots
    DeviceMemory io_;      // the decode step's token, position, slot and output row
    DeviceMemory keys_;    // [max_out] argmax keys
    DeviceMemory inv_freq_;
    DeviceMemory rope_;  // [n_ctx][head_dim / 2] (cos, sin) of every position (MINFER_ROPE_TABLE, passes past 64 tokens)
    std::unique_ptr<Pinned> io_host_, batch_host_, keys_host_, logits_host_;
    std::unique_ptr<cuda::PrefillGemm> gemm_;
    std::vector<LayerDev> layers_;
    Mat tok_embd_, output_;
    const float* output_norm_ = nullptr;
    std::vector<int32_t> rows_;
    std::vector<cuda::BatchRun> runs_;
    // The forward call's decode rows all attend in one chunk (MINFER_ATTN_ONE_CHUNK); set by forward().
    bool one_chunk_ = false;
    // A decode step's graph, captured on its second use (the first runs eagerly).
    struct StepGraph {
        bool warmed = false;  // ran eagerly once
        cudaGraphExec_t exec = nullptr;
    };
    StepGraph step_graphs_[2];              // the one-slot decode step, by one_chunk_
    std::vector<StepGraph> batch_graphs_;  // by decode token count m and one_chunk_: 2 m + one_chunk_
    bool batch_graphs_ok_ = true;
    size_t n_out_ = 0;
    int64_t host_row_ = -1;  // the output row logits_host_ holds, -1: none
    std::unique_ptr<Pinned> rows_host_;  // [min(kFetchRows, max_out)][n_vocab]: the rows of fetch_logits
    std::vector<size_t> fetched_;        // the output rows rows_host_ holds, in its order (ascending)
    // fetch_candidates: the GPU's scratch and the transfers' pinned buffers (taken at its first call), and
    // the rows' candidates decoded.
    DeviceMemory cand_dev_;
    std::unique_ptr<Pinned> cand_in_, cand_out_;
    engine::CandidateRows cand_;
    bool cand_failed_ = false;
};

}  // namespace

std::unique_ptr<engine::Runner> cuda_make_runner(std::shared_ptr<CudaModel> model, const model::Config& config,
                                                 const model::Plan& plan, const engine::RunnerShape& shape,
                                                 const options::Values& opts) {
    model->check_healthy();  // a poisoned model answers with its first error, before any CUDA call here
    check(cudaSetDevice(0), "cudaSetDevice");
    const int chunk = prefill_chunk(opts.get(options::Id::prefill_chunk), config, shape);
    const int log_level = static_cast<int>(opts.get(options::Id::log_level));
    const uint64_t scratch0 = model->scratch_bytes.load();
    CudaModel& m = *model;
    auto runner = std::make_unique<CudaRunner>(std::move(model), config, plan, shape, opts.get(options::Id::cuda_graph) != 0,
                                               opts.get(options::Id::matvec_int8) != 0, chunk, log_level);
    const uint64_t scratch1 = m.scratch_bytes.load();
    log_line(log_level, MINFER_LOG_INFO,
             "CUDA: a context of %d positions x %d sequences: forward passes of up to %d tokens (prefill_chunk=%lld), %s of scratch",
             shape.n_ctx, shape.n_seq, chunk, static_cast<long long>(opts.get(options::Id::prefill_chunk)),
             mib(scratch1 > scratch0 ? scratch1 - scratch0 : 0).c_str());
    return runner;
}

uint64_t testing::cuda_deferred_residuals() { return g_deferred_residuals.load(); }
int testing::cuda_prune_last(int mode) { return g_prune_last.set(mode); }
int testing::cuda_q16(int mode) { return g_q16.set(mode); }
uint64_t testing::cuda_q16_layers() { return g_q16_layers.load(); }
int testing::cuda_attn_one_chunk(int keys) { return g_one_chunk.exchange(keys < 0 ? -1 : keys, std::memory_order_relaxed); }
uint32_t testing::cuda_decode_skip(uint32_t mask) { return g_decode_skip.exchange(mask, std::memory_order_relaxed); }
uint64_t testing::cuda_attn_one_chunk_launches(uint64_t* combines) { return cuda::testing_hooks::attention_decode_launches(combines); }
uint64_t testing::cuda_pruned_layers(uint64_t* dropped, uint64_t* multi) {
    if (dropped) *dropped = g_pruned_rows.load();
    if (multi) *multi = g_pruned_multi.load();
    return g_pruned_layers.load();
}

}  // namespace minfer::device
