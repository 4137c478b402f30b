// The backend seam: a forward pass over a batch of tokens. Each backend owns its layer loop: the CPU
// backend runs the plain forward of engine/forward.cpp over engine::Ops (the reference, readable top to
// bottom like the model's math); the CUDA backend runs its own loop in cuda/forward.cu (fused kernels, a
// CUDA graph per decode step, the greedy choice made on the GPU).
//
// A Runner holds the KV memory of `n_seq` sequence slots, paged (engine/kv_pool.h: the slots share one
// pool of pages, each slot holds up to n_ctx positions), plus the scratch of one forward call; a context
// is a runner with one slot and its own sampler, a batch (engine/batch.h) one with many. A batch lists
// tokens with their slot and position, so several sequences share one call: each weight is read once for
// all of their tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/error.h"
#include "engine/kv_pool.h"
#include "model/config.h"
#include "options/options.h"

namespace minfer::engine {

struct Batch {
    std::span<const int32_t> tokens;
    std::span<const int32_t> pos;       // each token's position in its sequence, < n_ctx
    std::span<const int32_t> seq;       // each token's sequence slot, < n_seq
    std::span<const int32_t> out_rows;  // the batch rows whose logits are wanted, ascending, at most max_out
};

// A sampled row's candidates, what sampling::Sampler::sample_candidates takes: token ids and their
// logits as the forward left them (before penalties and bias).
struct Candidates {
    std::span<const int32_t> ids;
    std::span<const float> logits;
};

// The candidates of the rows of one fetch_candidates, one row after another: what a runner's
// candidates(k) hands out.
class CandidateRows {
public:
    void clear() { ids_.clear(), logits_.clear(), at_.clear(); }
    void begin_row() { at_.push_back(ids_.size()); }
    void add(int32_t id, float logit) { ids_.push_back(id), logits_.push_back(logit); }
    void end() { at_.push_back(ids_.size()); }  // after the last row
    // Row k's; Error(MINFER_ERR_INTERNAL) past the rows fetched.
    Candidates row(size_t k) const {
        if (k + 1 >= at_.size()) fail(MINFER_ERR_INTERNAL, "candidates %zu: %zu rows fetched", k, at_.empty() ? size_t{0} : at_.size() - 1);
        const size_t a = at_[k], b = at_[k + 1];
        return {std::span<const int32_t>(ids_).subspan(a, b - a), std::span<const float>(logits_).subspan(a, b - a)};
    }

private:
    std::vector<int32_t> ids_;
    std::vector<float> logits_;
    std::vector<size_t> at_;  // where each row begins, then the end
};

class Runner {
public:
    virtual ~Runner() = default;

    // Runs the batch: each token attends to the positions 0 .. pos of its slot (the earlier ones written
    // by earlier calls or earlier in this batch) and writes its K/V at (slot, pos); every position must be
    // backed by the slot's pages (kv().reserve first). The tokens of one slot come in position order. Throws Error. On
    // success the outputs of `out_rows` replace the previous ones; when the call fails they are left as
    // they were (a device fault poisons the CUDA model instead: no later call succeeds).
    virtual void forward(const Batch& batch) = 0;

    // Output row i of the last successful forward (i < out_rows.size()):
    // the greedy token: the highest logit, the lowest id among equal ones, NaN never chosen; -1 when every
    // logit is -INFINITY or NaN. On the GPU it is chosen there: the logits stay on the device.
    virtual int32_t argmax(size_t i) = 0;
    // its n_vocab logits, in host memory owned by the runner and valid until the next call on it
    // (fetch_logits excepted: the rows it brought stay valid until the next forward or fetch).
    virtual std::span<const float> logits(size_t i) = 0;
    // Brings the logits of output rows `rows` (ascending, distinct, at most kFetchRows) to host memory in
    // one transfer and one wait, instead of one of each per row: logits(i) of those rows is then a read,
    // safe from several threads at once, until the next forward or fetch_logits. A backend that keeps its
    // logits in host memory has nothing to do. Throws Error (a device fault poisons the CUDA model).
    static constexpr size_t kFetchRows = 64;
    virtual void fetch_logits(std::span<const size_t> rows) { (void)rows; }

    using Candidates = engine::Candidates;
    static constexpr size_t kCandidatesMax = 256;  // m, and the tokens of one extra list, at most
    // For each output row rows[k] (ascending, distinct, at most kFetchRows): its m best logits in the
    // sampler's candidate order (Sampler::candidates_needed: higher logit first, lower id among equal
    // ones, NaN as -INFINITY; all of them where the vocabulary is smaller), then the logits of the tokens
    // extra[k], brought to host memory in one transfer and one wait, so that a sampled step moves a few
    // hundred bytes a row instead of the row. candidates(k) reads row rows[k]'s, from several threads at
    // once, until the next forward or fetch_candidates (fetch_logits leaves them). False, with nothing
    // fetched, where the backend chooses no candidates (the CPU's logits are in host memory already: read
    // them whole) or m or an extra list is longer than it takes (kCandidatesMax). Throws Error (a device
    // fault poisons the CUDA model).
    virtual bool fetch_candidates(std::span<const size_t> rows, size_t m, std::span<const std::span<const int32_t>> extra) {
        (void)rows, (void)m, (void)extra;
        return false;
    }
    virtual Candidates candidates(size_t k) {
        (void)k;
        return {};
    }

    // The page bookkeeping of the KV cache.
    virtual KvPool& kv() = 0;
};

struct RunnerShape {
    int n_ctx = 0;    // positions per sequence slot
    int n_seq = 1;    // sequence slots
    int max_out = 1;  // output rows per forward call
    int kv_pages = 0; // pages of the KV pool; 0: every slot's n_ctx positions (KvPool::pages_for(n_ctx) * n_seq)
    int max_tokens = 0;  // tokens per forward call at most (a batch's step); 0: up to n_ctx * n_seq

    int pages() const { return kv_pages > 0 ? kv_pages : KvPool::pages_for(n_ctx) * n_seq; }
};

}  // namespace minfer::engine
