#include "engine/ops_runner.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "engine/testing.h"
#include "sampling/sampler.h"

namespace minfer::engine {
namespace {

class OpsRunner final : public Runner {
public:
    OpsRunner(const model::Config& c, const model::Plan& plan, const RunnerShape& shape, int max_tokens,
              const std::function<std::unique_ptr<Ops>(int, int64_t)>& make_ops, std::function<int64_t()> threads)
        : c_(c), plan_(plan), shape_(shape), threads_(std::move(threads)), kv_(shape.n_seq, shape.n_ctx, shape.pages()) {
        ops_ = make_ops(shape.n_ctx, int64_t{shape.pages()} * kKvPage);
        scratch_ = make_scratch(*ops_, c, static_cast<int>(std::min<int64_t>(max_tokens, int64_t{shape.n_ctx} * shape.n_seq)));
        const size_t v = static_cast<size_t>(c.n_vocab) * static_cast<size_t>(shape.max_out);
        logits_.assign(v, 0.0f);
        pending_.assign(v, 0.0f);
        // The backend's threads and per-thread buffers now (minfer_batch_create promises its scratch at
        // creation): what cannot be had fails here, not at the first forward. Each forward calls it again
        // for the threads option of its time.
        ops_->begin(threads_());
    }

    void forward(const Batch& b) override {
        const size_t n = b.tokens.size();
        if (b.pos.size() != n || b.seq.size() != n || b.out_rows.size() > static_cast<size_t>(shape_.max_out))
            fail(MINFER_ERR_INTERNAL, "forward: a batch of %zu tokens with %zu positions, %zu slots and %zu output rows", n,
                 b.pos.size(), b.seq.size(), b.out_rows.size());
        for (size_t i = 0; i < n; ++i)
            if (b.seq[i] < 0 || b.seq[i] >= shape_.n_seq || b.pos[i] < 0 || b.pos[i] >= kv_.capacity(b.seq[i]))
                fail(MINFER_ERR_INTERNAL, "forward: token %zu at slot %d position %d, which has no KV page", i, b.seq[i], b.pos[i]);
        const size_t nv = static_cast<size_t>(c_.n_vocab);
        const size_t chunk = static_cast<size_t>(scratch_.max_tokens);
        try {
            ops_->begin(threads_());
            size_t out = 0;  // the next entry of b.out_rows
            for (size_t c0 = 0; c0 < n; c0 += chunk) {  // chunks of the scratch size, each cut in runs of one slot
                const size_t c1 = std::min(n, c0 + chunk);
                runs_.clear();
                for (size_t i = c0; i < c1;) {
                    size_t j = i + 1;
                    while (j < c1 && b.seq[j] == b.seq[i] && b.pos[j] == b.pos[j - 1] + 1) ++j;
                    runs_.push_back(Run{kv_.table(b.seq[i]), static_cast<int>(i - c0), static_cast<int>(j - i), b.pos[i]});
                    i = j;
                }
                rows_.clear();
                for (; out + rows_.size() < b.out_rows.size() && static_cast<size_t>(b.out_rows[out + rows_.size()]) < c1;)
                    rows_.push_back(static_cast<int32_t>(static_cast<size_t>(b.out_rows[out + rows_.size()]) - c0));
                engine::forward(c_, plan_, *ops_, scratch_, b.tokens.data() + c0, static_cast<int>(c1 - c0), runs_, rows_,
                                pending_.data() + out * nv);
                out += rows_.size();
            }
            n_out_pending_ = out;
        } catch (...) {
            const Error e = current_error();  // std::bad_alloc and the like as statuses too
            ops_->on_error(e);
            throw e;
        }
        logits_.swap(pending_);
        n_out_ = n_out_pending_;
        argmax_.assign(n_out_, -2);
        cand_.clear();
    }

    int32_t argmax(size_t i) override {
        check_row(i);
        if (argmax_[i] == -2) argmax_[i] = sampling::argmax(logits(i));
        return argmax_[i];
    }

    std::span<const float> logits(size_t i) override {
        check_row(i);
        const size_t nv = static_cast<size_t>(c_.n_vocab);
        return std::span<const float>(logits_.data() + i * nv, nv);
    }

    // Only under testing::host_candidates (the tests' way through the candidates path without a GPU):
    // the m best by a partial sort of the row's ids, as the GPU's passes choose them.
    bool fetch_candidates(std::span<const size_t> rows, size_t m, std::span<const std::span<const int32_t>> extra) override {
        cand_.clear();
        if (!testing::host_candidates() || m == 0 || m > kCandidatesMax || extra.size() != rows.size()) return false;
        for (std::span<const int32_t> e : extra)
            if (e.size() > kCandidatesMax) return false;
        const size_t nv = static_cast<size_t>(c_.n_vocab);
        std::vector<int32_t> order(nv);
        for (size_t k = 0; k < rows.size(); ++k) {
            const std::span<const float> row = logits(rows[k]);
            auto key = [&](int32_t i) { return std::isnan(row[static_cast<size_t>(i)]) ? -INFINITY : row[static_cast<size_t>(i)]; };
            std::iota(order.begin(), order.end(), 0);
            const size_t take = std::min(m, nv);
            std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(take), order.end(),
                              [&](int32_t a, int32_t b) { return key(a) > key(b) || (key(a) == key(b) && a < b); });
            cand_.begin_row();
            for (size_t j = 0; j < take; ++j) cand_.add(order[j], key(order[j]));
            for (int32_t t : extra[k]) cand_.add(t, row[static_cast<size_t>(t)]);
        }
        cand_.end();
        return true;
    }
    Candidates candidates(size_t k) override { return cand_.row(k); }

    KvPool& kv() override { return kv_; }

private:
    void check_row(size_t i) const {
        if (i >= n_out_) fail(MINFER_ERR_INTERNAL, "forward output %zu: the last call had %zu", i, n_out_);
    }

    model::Config c_;
    const model::Plan& plan_;
    RunnerShape shape_;
    std::function<int64_t()> threads_;
    KvPool kv_;
    std::unique_ptr<Ops> ops_;
    Scratch scratch_;
    std::vector<float> logits_, pending_;  // [max_out][n_vocab]: the last call's, and the one in progress
    std::vector<int32_t> argmax_;          // per output row; -2 until asked
    CandidateRows cand_;                   // fetch_candidates' rows
    std::vector<int32_t> rows_;
    std::vector<Run> runs_;
    size_t n_out_ = 0, n_out_pending_ = 0;
};

}  // namespace

std::unique_ptr<Runner> make_ops_runner(const model::Config& config, const model::Plan& plan, const RunnerShape& shape,
                                        int max_tokens, const std::function<std::unique_ptr<Ops>(int, int64_t)>& make_ops,
                                        std::function<int64_t()> threads) {
    return std::make_unique<OpsRunner>(config, plan, shape, max_tokens, make_ops, std::move(threads));
}

}  // namespace minfer::engine
