#include "cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <vector>

#include "cpu/threadpool.h"
#include "quant/quant.h"

namespace minfer::cpu {
namespace {

thread_local int t_faults = 0;        // testing::fail_next_forwards
thread_local int t_setup_faults = 0;  // testing::fail_next_thread_setups

using engine::Buf;
using engine::Weight;

class CpuOps final : public engine::Ops {
public:
    CpuOps(const model::Config& c, int n_ctx, int64_t kv_rows)
        : c_(c),
          n_ctx_(n_ctx),
          kv_rows_(static_cast<size_t>(kv_rows)),
          kv_dim_(static_cast<size_t>(c.n_head_kv) * c.head_dim),
          k_cache_(static_cast<size_t>(c.n_layer) * kv_rows_ * kv_dim_),
          v_cache_(k_cache_.size()),
          inv_freq_(engine::rope_inv_freq(c.rope_freq_base, c.head_dim)) {}

    void begin(int64_t threads_option) override {
        const int want = resolve_threads(threads_option);
        if (pool_ && pool_->size() == want) return;
        // The attention's scores (a row of n_ctx per thread and head of a group) sized for the new pool,
        // allocated before anything is replaced: a std::bad_alloc leaves the previous pool and its buffer.
        // A thread that cannot start leaves no pool (the next call builds one), never a pool over a buffer
        // sized for fewer threads.
        if (t_setup_faults > 0) {
            --t_setup_faults;
            throw std::bad_alloc();
        }
        std::vector<float> scores(static_cast<size_t>(want) * static_cast<size_t>(c_.n_head / c_.n_head_kv) * n_ctx_, 0.0f);
        pool_.reset();  // its threads stopped before the new ones start
        pool_ = std::make_unique<ThreadPool>(want);
        scores_.swap(scores);
    }

    Buf alloc(size_t n) override {
        buffers_.emplace_back(n);
        return Buf{buffers_.back().data(), n};
    }

    void embed(const Weight& table, const int32_t* tokens, int n, Buf out) override {
        const size_t row = quant::row_bytes(table.type, table.cols);
        const auto* base = static_cast<const uint8_t*>(table.host);
        pool_->parallel_for(n, [&](int64_t t, int) {
            quant::dequantize_row(table.type, base + row * static_cast<size_t>(tokens[t]), out.data + t * table.cols, table.cols);
        });
    }

    void rms_norm(Buf x, int64_t rows, int64_t dim, const Weight& w, float eps, Buf out) override {
        const float* weight = static_cast<const float*>(w.host);
        const int64_t per_task = std::max<int64_t>(1, 4096 / dim);
        pool_->parallel_for((rows + per_task - 1) / per_task, [&](int64_t task, int) {
            for (int64_t r = task * per_task; r < std::min(rows, (task + 1) * per_task); ++r) {
                const float* in = x.data + r * dim;
                float* o = out.data + r * dim;
                double ss = 0;
                for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(in[i]) * in[i];
                const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
                for (int64_t i = 0; i < dim; ++i) o[i] = in[i] * scale * weight[i];
            }
        });
    }

    void matmul(const Weight& w, Buf x, int n, Buf out, bool same_input) override {
        // Prepare each token's activation row once in the format the weight type's dot product takes (once
        // for q, k and v, and for gate and up, when their types take the same format).
        const quant::Type at = quant::vec_dot_type(w.type);
        const size_t arow = quant::row_bytes(at, w.cols);
        const bool reuse = same_input && act_type_ == at && act_x_ == x.data && act_n_ == n && act_cols_ == w.cols;
        if (!reuse) {
            if (act_.size() < arow * static_cast<size_t>(n)) act_.resize(arow * static_cast<size_t>(n));
            pool_->parallel_for(n, [&](int64_t t, int) {
                quant::prepare_activation(w.type, x.data + t * w.cols, act_.data() + static_cast<size_t>(t) * arow, w.cols);
            });
            act_type_ = at;
            act_x_ = x.data;
            act_n_ = n;
            act_cols_ = w.cols;
            act_scales_ = false;
        }
        // Rows in blocks: each block of weight rows stays in cache while every token passes over it.
        const quant::VecDotFn dot = quant::vec_dot_fn(w.type);
        const size_t wrow = quant::row_bytes(w.type, w.cols);
        const auto* wb = static_cast<const uint8_t*>(w.host);
        const int64_t rows = w.rows;
        // Prefill: tiles of kTileRows rows x kTileCols tokens where the type has them (each weight block
        // decoded once per tile, the same bits as dot); the rest one dot product at a time.
        const quant::VecDotTileFn tile = n >= quant::kTileCols ? quant::vec_dot_tile_fn(w.type) : nullptr;
        // The q8_0-family tiles read both sides' block scales as f32: the input's converted once per input,
        // the weight's per block of rows by the thread that runs it, just before its tiles read those rows
        // (a pass over the whole weight first meant one more trip through memory for every row, twice for
        // a 512-token prompt in 256-token chunks; perf now charges the rows' first cache misses to this
        // conversion instead of the tiles).
        const size_t nb = static_cast<size_t>(w.cols / 32);
        const bool scales = tile && at == quant::Type::Q8_0;
        if (scales && !act_scales_) {
            if (act_scale_.size() < nb * static_cast<size_t>(n)) act_scale_.resize(nb * static_cast<size_t>(n));
            quant::block_scales(quant::Type::Q8_0, act_.data(), arow, n, w.cols, act_scale_.data());
            act_scales_ = true;
        }
        // Decode streams each row once: a few long contiguous runs per thread keep its stream (and the
        // prefetches ahead of it) unbroken. Prefill reuses a block of rows for every token: blocks small
        // enough to stay in cache.
#ifndef MINFER_DECODE_RUNS
#define MINFER_DECODE_RUNS 4
#endif
        const int64_t runs = static_cast<int64_t>(pool_->size()) * MINFER_DECODE_RUNS;
        const int64_t block = n == 1 ? std::max<int64_t>(16, (rows + runs - 1) / runs)
                                     : std::max<int64_t>(2, std::clamp<int64_t>(rows / (pool_->size() * 8), 1, 16) / 2 * 2);
        if (scales && w_scale_.size() < nb * static_cast<size_t>(block * pool_->size()))
            w_scale_.resize(nb * static_cast<size_t>(block * pool_->size()));
        pool_->parallel_for((rows + block - 1) / block, [&](int64_t task, int thread) {
            const int64_t r0 = task * block, r1 = std::min(rows, r0 + block);
            float* ws = scales ? w_scale_.data() + nb * static_cast<size_t>(block * thread) : nullptr;  // rows r0 .. r1
            if (scales) quant::block_scales(w.type, wb + wrow * static_cast<size_t>(r0), wrow, r1 - r0, w.cols, ws);
            int t = 0;
            if (tile) {
                for (; t + quant::kTileCols <= n; t += quant::kTileCols) {
                    const uint8_t* a = act_.data() + static_cast<size_t>(t) * arow;
                    float* o = out.data + static_cast<int64_t>(t) * rows;
                    int64_t r = r0;
                    for (; r + quant::kTileRows <= r1; r += quant::kTileRows)
                        tile(w.cols, wb + static_cast<size_t>(r) * wrow, wrow, a, arow, scales ? ws + static_cast<size_t>(r - r0) * nb : nullptr,
                             scales ? act_scale_.data() + static_cast<size_t>(t) * nb : nullptr, nb, o + r, static_cast<size_t>(rows));
                    for (; r < r1; ++r)
                        for (int tt = 0; tt < quant::kTileCols; ++tt)
                            o[tt * rows + r] = dot(w.cols, wb + static_cast<size_t>(r) * wrow, a + static_cast<size_t>(tt) * arow);
                }
            }
            for (; t < n; ++t) {
                const uint8_t* a = act_.data() + static_cast<size_t>(t) * arow;
                float* o = out.data + static_cast<int64_t>(t) * rows;
                for (int64_t r = r0; r < r1; ++r) o[r] = dot(w.cols, wb + static_cast<size_t>(r) * wrow, a);
            }
        });
    }

    void add_bias(Buf x, int64_t rows, const Weight& b) override {
        const float* bias = static_cast<const float*>(b.host);
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t i = 0; i < b.cols; ++i) x.data[r * b.cols + i] += bias[i];
    }

    void rope(Buf x, int n, int n_heads, int pos0) override {
        const int head_dim = c_.head_dim, half = head_dim / 2;
        pool_->parallel_for(n, [&](int64_t t, int) {
            const double pos = static_cast<double>(pos0 + t);
            for (int i = 0; i < half; ++i) {
                const double theta = pos * inv_freq_[static_cast<size_t>(i)];
                const float cs = static_cast<float>(std::cos(theta)), sn = static_cast<float>(std::sin(theta));
                for (int h = 0; h < n_heads; ++h) {
                    float* v = x.data + (t * n_heads + h) * head_dim;
                    const float a = v[i], b = v[i + half];
                    v[i] = a * cs - b * sn;
                    v[i + half] = a * sn + b * cs;
                }
            }
        });
    }

    void store_kv(int layer, engine::KvPages pages, int pos0, int n, Buf k, Buf v) override {
        const size_t base = static_cast<size_t>(layer) * kv_rows_;
        for (int t = 0; t < n; ++t) {
            const size_t at = (base + engine::kv_row(pages, pos0 + t)) * kv_dim_, from = static_cast<size_t>(t) * kv_dim_;
            std::memcpy(k_cache_.data() + at, k.data + from, kv_dim_ * sizeof(float));
            std::memcpy(v_cache_.data() + at, v.data + from, kv_dim_ * sizeof(float));
        }
    }

    void attention(int layer, engine::KvPages pages, Buf q, int n, int pos0, Buf out) override {
        const int hd = c_.head_dim, n_head = c_.n_head, group = c_.n_head / c_.n_head_kv;
        const size_t q_dim = static_cast<size_t>(n_head) * hd;
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        const float* kl = k_cache_.data() + static_cast<size_t>(layer) * kv_rows_ * kv_dim_;
        const float* vl = v_cache_.data() + static_cast<size_t>(layer) * kv_rows_ * kv_dim_;
        // Row of position j: page j / kKvPage of the table; within a page the rows are consecutive.
        auto krow = [&](int j) { return kl + engine::kv_row(pages, j) * kv_dim_; };
        auto vrow = [&](int j) { return vl + engine::kv_row(pages, j) * kv_dim_; };
        const quant::VecDotFn dot = quant::vec_dot_fn(quant::Type::F32);
        const quant::AxpyFn axpy = quant::axpy_fn();
        // A task is one token and `heads` consecutive query heads of one KV head: every head's scores,
        // softmax and weighted sum are computed exactly as alone (the same operations in the same order),
        // but each K and V row is read once for the heads (from cache, not once per head from memory).
        // Several tokens: all heads of a KV group per task; one token: a head per task (the parallelism).
        constexpr int kMaxGroup = 64;
        const int heads = n > 1 && group <= kMaxGroup ? group : 1;
        // AVX-512 or AVX2 (head size a multiple of 16 or 8): each head in turn, its scores and weighted sum
        // a page of rows (kKvPage consecutive rows) per call, the output held in registers across the page,
        // the softmax's exponentials a vector at a time.
        const quant::AttnKernels ak = quant::attn_kernels(hd);
        pool_->parallel_for(int64_t{n} * (n_head / heads), [&](int64_t task, int thread) {
            const int t = static_cast<int>(task / (n_head / heads)), h0 = static_cast<int>(task % (n_head / heads)) * heads;
            const int kvh = h0 / group, last = pos0 + t;  // attends to positions 0 .. last
            const size_t kv_off = static_cast<size_t>(kvh) * hd;
            const float* qv = q.data + t * q_dim + static_cast<size_t>(h0) * hd;  // head h0 + i at qv + i * hd
            float* sc = scores_.data() + static_cast<size_t>(thread) * static_cast<size_t>(group) * n_ctx_;  // head i's at sc + i * n_ctx_
            if (ak.scores) {
                for (int i = 0; i < heads; ++i) {
                    float* si = sc + static_cast<size_t>(i) * n_ctx_;
                    for (int j0 = 0; j0 <= last; j0 += engine::kKvPage)
                        ak.scores(hd, qv + static_cast<size_t>(i) * hd, krow(j0) + kv_off, kv_dim_, std::min(engine::kKvPage, last + 1 - j0),
                                  scale, si + j0);
                    const float inv = ak.softmax(si, last + 1);
                    float* o = out.data + t * q_dim + static_cast<size_t>(h0 + i) * hd;
                    std::fill(o, o + hd, 0.0f);
                    for (int j0 = 0; j0 <= last; j0 += engine::kKvPage)
                        ak.weighted_sum(hd, si + j0, inv, vrow(j0) + kv_off, kv_dim_, std::min(engine::kKvPage, last + 1 - j0), o);
                }
                return;
            }
            float mx[kMaxGroup];
            for (int i = 0; i < heads; ++i) mx[i] = -std::numeric_limits<float>::infinity();
            for (int j = 0; j <= last; ++j) {
                const float* kr = krow(j) + kv_off;
                for (int i = 0; i < heads; ++i) {
                    float& v = sc[static_cast<size_t>(i) * n_ctx_ + j];
                    v = dot(hd, kr, qv + static_cast<size_t>(i) * hd) * scale;
                    mx[i] = std::max(mx[i], v);
                }
            }
            float inv[kMaxGroup];
            for (int i = 0; i < heads; ++i) {
                float* si = sc + static_cast<size_t>(i) * n_ctx_;
                double sum = 0;
                for (int j = 0; j <= last; ++j) {
                    si[j] = std::exp(si[j] - mx[i]);
                    sum += si[j];
                }
                inv[i] = static_cast<float>(1.0 / sum);
                float* o = out.data + t * q_dim + static_cast<size_t>(h0 + i) * hd;
                std::fill(o, o + hd, 0.0f);
            }
            float* o = out.data + t * q_dim + static_cast<size_t>(h0) * hd;
            for (int j = 0; j <= last; ++j) {
                const float* vr = vrow(j) + kv_off;
                for (int i = 0; i < heads; ++i)
                    axpy(hd, sc[static_cast<size_t>(i) * n_ctx_ + j] * inv[i], vr, o + static_cast<size_t>(i) * hd);
            }
        });
    }

    void swiglu(Buf gate, Buf up) override {
        const int64_t chunk = 4096;
        const quant::SiluMulFn silu_mul = quant::silu_mul_fn();
        pool_->parallel_for((static_cast<int64_t>(gate.n) + chunk - 1) / chunk, [&](int64_t task, int) {
            const size_t i0 = static_cast<size_t>(task * chunk), i1 = std::min(gate.n, i0 + chunk);
            silu_mul(gate.data + i0, up.data + i0, i1 - i0);
        });
    }

    void add(Buf x, Buf y) override {
        for (size_t i = 0; i < x.n; ++i) x.data[i] += y.data[i];
    }

    void read(Buf src, float* host) override {
        if (t_faults > 0) {
            --t_faults;
            fail(MINFER_ERR_INTERNAL, "injected fault (testing::fail_next_forwards)");
        }
        std::memcpy(host, src.data, src.n * sizeof(float));
    }
    void write(const float* host, Buf dst) override { std::memcpy(dst.data, host, dst.n * sizeof(float)); }

private:
    model::Config c_;
    int n_ctx_;       // the most positions of one sequence
    size_t kv_rows_;  // KV rows per layer: the pages of all sequences
    size_t kv_dim_;
    std::vector<float> k_cache_;  // [n_layer][kv_rows][n_head_kv * head_dim]
    std::vector<float> v_cache_;  // [n_layer][kv_rows][n_head_kv * head_dim]
    std::vector<double> inv_freq_;  // [head_dim / 2] RoPE frequencies of c_
    std::unique_ptr<ThreadPool> pool_;
    std::vector<float> scores_;    // [threads][n_ctx] attention scores
    std::vector<uint8_t> act_;     // prepared activations of the current matmul
    // What act_ was prepared from (reused only when the caller says the input is unchanged)
    quant::Type act_type_ = quant::Type::F32;
    const float* act_x_ = nullptr;
    int act_n_ = -1;
    int64_t act_cols_ = -1;
    std::vector<float> act_scale_;  // act_'s Q8_0 block scales as f32 ([n][cols / 32]) when act_scales_
    bool act_scales_ = false;
    std::vector<float> w_scale_;    // per thread, a row block's q8_0-family block scales as f32 ([rows][cols / 32])
    std::vector<std::vector<float>> buffers_;
};

}  // namespace

namespace testing {
void fail_next_forwards(int count) { t_faults = count; }
void fail_next_thread_setups(int count) { t_setup_faults = count; }
}  // namespace testing

std::unique_ptr<engine::Ops> make_ops(const model::Config& config, int n_ctx, int64_t kv_rows) {
    return std::make_unique<CpuOps>(config, n_ctx, kv_rows);
}

}  // namespace minfer::cpu
