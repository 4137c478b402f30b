#include "engine/ops_runner.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "sampling/sampler.h"

namespace minfer::engine {
namespace {

class OpsRunner final : public Runner {
public:
    OpsRunner(const model::Config& c, const model::Plan& plan, const RunnerShape& shape, int max_tokens,
              const std::function<std::unique_ptr<Ops>(int)>& make_ops, std::function<int64_t()> threads)
        : c_(c), plan_(plan), shape_(shape), threads_(std::move(threads)) {
        for (int i = 0; i < shape.n_seq; ++i) {
            slots_.push_back(make_ops(shape.n_ctx));
            scratch_.push_back(make_scratch(*slots_.back(), c, std::min(max_tokens, shape.n_ctx)));
        }
        const size_t v = static_cast<size_t>(c.n_vocab) * static_cast<size_t>(shape.max_out);
        logits_.assign(v, 0.0f);
        pending_.assign(v, 0.0f);
    }

    void forward(const Batch& b) override {
        const size_t n = b.tokens.size();
        if (b.pos.size() != n || b.seq.size() != n || b.out_rows.size() > static_cast<size_t>(shape_.max_out))
            fail(MINFER_ERR_INTERNAL, "forward: a batch of %zu tokens with %zu positions, %zu slots and %zu output rows", n,
                 b.pos.size(), b.seq.size(), b.out_rows.size());
        const size_t nv = static_cast<size_t>(c_.n_vocab);
        size_t out = 0;  // the next entry of b.out_rows
        Ops* failed = nullptr;
        try {
            for (auto& ops : slots_) ops->begin(threads_());
            // Runs of one slot at consecutive positions, cut at the scratch size.
            for (size_t i = 0; i < n;) {
                const int slot = b.seq[i];
                if (slot < 0 || slot >= shape_.n_seq || b.pos[i] < 0 || b.pos[i] >= shape_.n_ctx)
                    fail(MINFER_ERR_INTERNAL, "forward: token %zu at slot %d position %d", i, slot, b.pos[i]);
                Scratch& s = scratch_[static_cast<size_t>(slot)];
                size_t j = i + 1;
                while (j < n && j - i < static_cast<size_t>(s.max_tokens) && b.seq[j] == slot && b.pos[j] == b.pos[j - 1] + 1 &&
                       b.pos[j] < shape_.n_ctx)
                    ++j;
                rows_.clear();
                for (size_t k = out; k < b.out_rows.size() && static_cast<size_t>(b.out_rows[k]) < j; ++k)
                    rows_.push_back(static_cast<int32_t>(b.out_rows[k] - static_cast<int32_t>(i)));
                failed = slots_[static_cast<size_t>(slot)].get();
                engine::forward(c_, plan_, *failed, s, b.tokens.data() + i, static_cast<int>(j - i), b.pos[i], rows_,
                                pending_.data() + out * nv);
                out += rows_.size();
                i = j;
            }
        } catch (const Error& e) {
            if (failed) failed->on_error(e);
            throw;
        }
        logits_.swap(pending_);
        n_out_ = out;
        argmax_.assign(out, -2);
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

private:
    void check_row(size_t i) const {
        if (i >= n_out_) fail(MINFER_ERR_INTERNAL, "forward output %zu: the last call had %zu", i, n_out_);
    }

    model::Config c_;
    const model::Plan& plan_;
    RunnerShape shape_;
    std::function<int64_t()> threads_;
    std::vector<std::unique_ptr<Ops>> slots_;
    std::vector<Scratch> scratch_;
    std::vector<float> logits_, pending_;  // [max_out][n_vocab]: the last call's, and the one in progress
    std::vector<int32_t> argmax_;          // per output row; -2 until asked
    std::vector<int32_t> rows_;
    size_t n_out_ = 0;
};

}  // namespace

std::unique_ptr<Runner> make_ops_runner(const model::Config& config, const model::Plan& plan, const RunnerShape& shape,
                                        int max_tokens, const std::function<std::unique_ptr<Ops>(int)>& make_ops,
                                        std::function<int64_t()> threads) {
    return std::make_unique<OpsRunner>(config, plan, shape, max_tokens, make_ops, std::move(threads));
}

}  // namespace minfer::engine
