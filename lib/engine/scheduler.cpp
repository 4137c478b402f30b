#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "core/log.h"
#include "cpu/cpu_ops.h"
#include "cpu/threadpool.h"
#include "device/device.h"
#include "engine/ops_runner.h"
#include "engine/testing.h"

namespace minfer::engine {

struct Scheduler::Seq {
    uint64_t id = 0;
    std::vector<int32_t> prompt;
    int32_t max_tokens = 0;
    sampling::Sampler sampler;
    bool greedy = true;
    std::vector<std::string> stops;
    int slot = -1;
    int n_past = 0;            // positions in the KV cache
    size_t fed = 0;            // prompt tokens in the KV cache
    int feeding = 0;           // tokens of this sequence in the current forward
    int32_t next = -1;         // the sampled token the next forward feeds; -1 while reading the prompt
    int32_t n_generated = 0;
    std::vector<int32_t> history;  // the tokens in the KV cache, oldest first (for penalties)
    std::vector<int32_t> affected;  // scratch: the tokens its penalties and bias change (sample_rows)
    tokenizer::StreamDecoder decoder;
    std::string held;          // decoded text kept back: it may be the start of a stop string
    bool cancelled = false, done = false;
};

namespace {
constexpr int kMaxBatchCpu = 256;  // tokens per CPU forward of the plain loop (as a context's)
}

Scheduler::Scheduler(std::shared_ptr<Model> model, const BatchParams& params) : model_(std::move(model)), params_(params) {
    const model::Config& c = model_->config();
    if (params_.max_sequences < 1 || params_.max_sequences > 4096)
        fail(MINFER_ERR_INVALID_ARGUMENT, "batch: max_sequences = %d is outside [1, 4096]", params_.max_sequences);
    // Every sequence passes through the queue (it is admitted at a step), so a queue of 0 could take none.
    if (params_.max_queue < 1) fail(MINFER_ERR_INVALID_ARGUMENT, "batch: max_queue = %d (at least 1)", params_.max_queue);
    if (params_.max_step_tokens < params_.max_sequences)
        fail(MINFER_ERR_INVALID_ARGUMENT, "batch: max_step_tokens = %d is less than max_sequences = %d (each sequence needs a token per step)",
             params_.max_step_tokens, params_.max_sequences);
    // A sequence's positions are bounded as a context's are (the ctx_len option's range): buffers are
    // sized by them (the CPU backend's attention scores, one n_ctx row per thread and head of a group).
    const int64_t max_ctx = options::def(options::Id::ctx_len).max;
    if (params_.n_ctx > max_ctx)
        fail(MINFER_ERR_INVALID_ARGUMENT, "batch: n_ctx = %d is above %lld (the ctx_len option's bound)", params_.n_ctx,
             static_cast<long long>(max_ctx));
    const int64_t len = params_.n_ctx > 0 ? params_.n_ctx : model_->options().get(options::Id::ctx_len);
    n_ctx_ = static_cast<int>(len == 0 ? c.n_ctx_train : len);
    if (n_ctx_ < 1) fail(MINFER_ERR_INVALID_ARGUMENT, "batch: n_ctx = %d", n_ctx_);
    if (params_.kv_tokens < 0) fail(MINFER_ERR_INVALID_ARGUMENT, "batch: kv_tokens = %lld is negative", static_cast<long long>(params_.kv_tokens));
    const int64_t kv_tokens = params_.kv_tokens > 0 ? params_.kv_tokens : std::max<int64_t>(n_ctx_, int64_t{256} * params_.max_sequences);
    if (kv_tokens > (int64_t{1} << 30)) fail(MINFER_ERR_INVALID_ARGUMENT, "batch: kv_tokens = %lld is too large", static_cast<long long>(kv_tokens));

    RunnerShape shape;
    shape.n_ctx = n_ctx_;
    shape.n_seq = params_.max_sequences;
    shape.max_out = params_.max_sequences;
    shape.kv_pages = KvPool::pages_for(kv_tokens);
    shape.max_tokens = params_.max_step_tokens;
    if (model_->backend() == Backend::cuda) {
        runner_ = device::cuda_make_runner(model_->cuda(), c, model_->plan(), shape, model_->options());
    } else {
        const options::Values* opts = &model_->options();
        runner_ = make_ops_runner(
            c, model_->plan(), shape, std::max(kMaxBatchCpu, params_.max_step_tokens),
            [&](int n, int64_t rows) { return cpu::make_ops(c, n, rows); }, [opts] { return opts->get(options::Id::threads); });
    }
    for (int s = params_.max_sequences - 1; s >= 0; --s) free_slots_.push_back(s);
    try {
        tok_ = &model_->tokenizer();
    } catch (const Error&) {
        tok_ = nullptr;  // token ids only: no text, no stop strings
    }
    stats_.kv_pages = stats_.kv_pages_free = runner_->kv().n_pages();
    log_line(model_->log_level(), MINFER_LOG_INFO, "batch: %d sequences of up to %d positions, KV pool of %d positions, %d tokens per step",
             params_.max_sequences, n_ctx_, runner_->kv().n_pages() * kKvPage, params_.max_step_tokens);
}

Scheduler::~Scheduler() = default;

uint64_t Scheduler::add(SequenceSpec spec) {
    const int32_t n_vocab = model_->config().n_vocab;
    if (spec.prompt.empty()) fail(MINFER_ERR_INVALID_ARGUMENT, "batch: the prompt is empty");
    for (size_t i = 0; i < spec.prompt.size(); ++i)
        if (spec.prompt[i] < 0 || spec.prompt[i] >= n_vocab)
            fail(MINFER_ERR_INVALID_ARGUMENT, "batch: prompt token %d at index %zu is outside the vocabulary [0, %d)", spec.prompt[i], i, n_vocab);
    if (spec.prompt.size() > static_cast<size_t>(n_ctx_))
        fail(MINFER_ERR_INVALID_ARGUMENT, "batch: a prompt of %zu tokens does not fit a sequence of %d positions", spec.prompt.size(), n_ctx_);
    const int pool = runner_->kv().n_pages();  // constant after construction
    if (KvPool::pages_for(static_cast<int64_t>(spec.prompt.size())) > pool)
        fail(MINFER_ERR_INVALID_ARGUMENT, "batch: a prompt of %zu tokens does not fit the KV pool of %d positions", spec.prompt.size(),
             pool * kKvPage);
    if (spec.max_tokens < 0) fail(MINFER_ERR_INVALID_ARGUMENT, "batch: max_tokens = %d is negative", spec.max_tokens);
    for (const std::string& s : spec.stops)
        if (s.empty()) fail(MINFER_ERR_INVALID_ARGUMENT, "batch: an empty stop string would stop at once");
    if (!spec.stops.empty() && !tok_) model_->tokenizer();  // throws: stop strings need the vocabulary's text

    auto s = std::make_unique<Seq>();
    if (spec.sampler) s->sampler.configure(*spec.sampler);  // validates; throws naming the field
    s->greedy = s->sampler.greedy_only();
    s->prompt = std::move(spec.prompt);
    s->max_tokens = spec.max_tokens;
    s->stops = std::move(spec.stops);
    s->history.reserve(s->prompt.size() + 64);

    std::lock_guard<std::mutex> lock(mutex_);
    if (stats_.queued >= params_.max_queue)
        fail(MINFER_ERR_BUSY, "batch: the queue is full (%d sequences wait)", stats_.queued);
    s->id = next_id_++;
    live_.push_back(s->id);  // ids only grow: live_ stays sorted
    incoming_.push_back(std::move(s));
    ++stats_.queued;
    wake_.notify_one();
    return live_.back();
}

void Scheduler::cancel(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!std::binary_search(live_.begin(), live_.end(), id))
        fail(MINFER_ERR_NOT_FOUND, "batch: no sequence %llu (unknown or finished)", static_cast<unsigned long long>(id));
    cancels_.push_back(id);
    wake_.notify_one();
}

BatchStats Scheduler::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

void Scheduler::take_incoming() {
    std::vector<uint64_t> cancels;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        while (!incoming_.empty()) {
            queue_.push_back(std::move(incoming_.front()));
            incoming_.pop_front();
        }
        cancels.swap(cancels_);
    }
    for (uint64_t id : cancels) {
        for (auto& s : queue_)
            if (s->id == id) s->cancelled = true;
        for (auto& s : active_)
            if (s->id == id) s->cancelled = true;
    }
    for (auto& s : queue_)
        if (s->cancelled && !s->done) finish(*s, MINFER_ERR_CANCELLED, MINFER_STOP_NONE, "cancelled");
    for (auto& s : active_)
        if (s->cancelled && !s->done) finish(*s, MINFER_ERR_CANCELLED, MINFER_STOP_NONE, "cancelled");
}

// A queued sequence gets a slot when one is free and the free pages hold its prompt beyond what is
// already promised: the rest of the prompts of admitted sequences still reading theirs, and one page of
// headroom per decoding sequence. So a burst of long prompts waits in the queue instead of being
// admitted together and then starving the running sequences of pages.
void Scheduler::admit() {
    KvPool& kv = runner_->kv();
    int promised = 0;
    for (const auto& a : active_) {
        if (a->done) continue;
        const int held = static_cast<int>(kv.table(a->slot).size());
        promised += a->next < 0 ? std::max(0, KvPool::pages_for(static_cast<int64_t>(a->prompt.size())) - held) : 1;
    }
    while (!free_slots_.empty() && !queue_.empty()) {
        Seq& s = *queue_.front();
        if (s.done) break;  // dropped at the end of the step
        const int need = KvPool::pages_for(static_cast<int64_t>(s.prompt.size()));
        if (need + promised > kv.free_pages() && !active_.empty()) break;
        if (need > kv.free_pages()) break;
        promised += need;
        s.slot = free_slots_.back();
        free_slots_.pop_back();
        active_.push_back(std::move(queue_.front()));
        queue_.pop_front();
    }
}

// The forward's tokens: one decode token per running sequence, then prefill chunks in admission order.
void Scheduler::build() {
    KvPool& kv = runner_->kv();
    tokens_.clear();
    pos_.clear();
    seq_.clear();
    out_rows_.clear();
    row_seq_.clear();
    int budget = params_.max_step_tokens;
    for (auto& sp : active_) {
        Seq& s = *sp;
        s.feeding = 0;
        if (s.done || s.next < 0) continue;
        if (!kv.reserve(s.slot, s.n_past + 1)) {
            finish(s, MINFER_ERR_OUT_OF_MEMORY, MINFER_STOP_NONE,
                   "the KV pool is exhausted (" + std::to_string(kv.n_pages() * kKvPage) + " positions shared by the batch's sequences)");
            continue;
        }
        out_rows_.push_back(static_cast<int32_t>(tokens_.size()));
        row_seq_.push_back(&s);
        tokens_.push_back(s.next);
        pos_.push_back(s.n_past);
        seq_.push_back(s.slot);
        s.feeding = 1;
        --budget;
    }
    Seq* waiting = nullptr;  // the last prefill that got no page
    for (auto& sp : active_) {
        Seq& s = *sp;
        if (s.done || s.next >= 0 || budget <= 0) continue;
        int chunk = static_cast<int>(std::min<size_t>(s.prompt.size() - s.fed, static_cast<size_t>(budget)));
        if (!kv.reserve(s.slot, s.n_past + chunk)) {
            // As much as the free pages hold.
            chunk = std::min(chunk, kv.capacity(s.slot) + kv.free_pages() * kKvPage - s.n_past);
            if (chunk <= 0 || !kv.reserve(s.slot, s.n_past + chunk)) {
                waiting = &s;
                continue;
            }
        }
        for (int i = 0; i < chunk; ++i) {
            tokens_.push_back(s.prompt[s.fed + static_cast<size_t>(i)]);
            pos_.push_back(s.n_past + i);
            seq_.push_back(s.slot);
        }
        s.feeding = chunk;
        budget -= chunk;
        if (s.fed + static_cast<size_t>(chunk) == s.prompt.size()) {
            out_rows_.push_back(static_cast<int32_t>(tokens_.size() - 1));
            row_seq_.push_back(&s);
        }
    }
    // Every active sequence waits for pages that only they could free: the newest gives its pages up.
    if (tokens_.empty() && waiting)
        finish(*waiting, MINFER_ERR_OUT_OF_MEMORY, MINFER_STOP_NONE,
               "the KV pool is exhausted (" + std::to_string(kv.n_pages() * kKvPage) + " positions) by sequences still reading their prompts");
}

void Scheduler::run_forward() {
    engine::Batch b;
    b.tokens = tokens_;
    b.pos = pos_;
    b.seq = seq_;
    b.out_rows = out_rows_;
    try {
        runner_->forward(b);
    } catch (...) {
        // The sequences of this forward cannot go on (their KV cache is partly written); the others can.
        // Whatever failed (host memory, a thread that cannot start), the step itself goes on: a failure
        // that escaped here would come back at every step, and no sequence would ever end.
        const Error e = current_error();
        log_line(model_->log_level(), MINFER_LOG_WARN, "batch: a forward of %zu tokens failed: %s", tokens_.size(), e.what());
        for (auto& sp : active_)
            if (sp->feeding > 0 && !sp->done) finish(*sp, e.status(), MINFER_STOP_NONE, e.what());
        return;
    }
    for (auto& sp : active_) {
        Seq& s = *sp;
        if (s.feeding == 0 || s.done) continue;
        if (s.next >= 0) {
            s.history.push_back(s.next);
        } else {
            s.history.insert(s.history.end(), s.prompt.begin() + static_cast<std::ptrdiff_t>(s.fed),
                             s.prompt.begin() + static_cast<std::ptrdiff_t>(s.fed) + s.feeding);
            s.fed += static_cast<size_t>(s.feeding);
        }
        s.n_past += s.feeding;
    }
    // Each output row's token: the greedy ones from the runner's argmax, the sampled ones in groups of
    // up to Runner::kFetchRows rows, whose logits come to the host in one transfer and whose samplers
    // then run side by side (each sequence has its own generator, so the threads change no draw). The
    // events then go out in row order, as one at a time would give them.
    const size_t n_rows = row_seq_.size();
    picked_.assign(n_rows, Pick{});
    sampled_.clear();
    for (size_t i = 0; i < n_rows; ++i) {
        Seq& s = *row_seq_[i];
        if (s.done) continue;
        if (!s.greedy) {
            sampled_.push_back(i);
            continue;
        }
        try {
            picked_[i].token = runner_->argmax(i);
        } catch (...) {
            const Error e = current_error();
            picked_[i].status = e.status();
            picked_[i].error = e.what();
        }
    }
    for (size_t g = 0; g < sampled_.size(); g += Runner::kFetchRows)
        sample_rows(std::span<const size_t>(sampled_).subspan(g, std::min(Runner::kFetchRows, sampled_.size() - g)));
    for (size_t i = 0; i < n_rows; ++i) {
        Seq& s = *row_seq_[i];
        if (s.done) continue;
        Pick& p = picked_[i];
        if (p.status == MINFER_OK && p.token < 0) {
            p.status = MINFER_ERR_INVALID_ARGUMENT;
            p.error = "every token is banned: each logit is -INFINITY or NaN";
        }
        if (p.status != MINFER_OK)
            finish(s, p.status, MINFER_STOP_NONE, p.error);
        else
            emit_token(s, p.token);
    }
}

void Scheduler::sample_rows(std::span<const size_t> rows) {
    // The rows whose samplers cut them short (top-k) take their tokens from the runner's candidates, a
    // few hundred bytes a row, where the runner brings them; the others (and those, where it does not)
    // read their logits whole.
    const size_t nv = static_cast<size_t>(model_->config().n_vocab);
    whole_.clear();
    cand_rows_.clear();
    size_t m = 0;
    for (size_t i : rows) {
        Seq& s = *row_seq_[i];
        const size_t need = testing::sample_candidates() ? s.sampler.candidates_needed(nv, s.history, s.affected) : 0;
        if (need > 0 && need <= Runner::kCandidatesMax) {  // (the affected tokens are at most need)
            cand_rows_.push_back(i);
            m = std::max(m, need);  // more than a row needs is no harm: the best m of them are among them
        } else {
            whole_.push_back(i);
        }
    }
    bool by_candidates = false;
    if (!cand_rows_.empty()) {
        extra_.clear();
        for (size_t i : cand_rows_) extra_.emplace_back(row_seq_[i]->affected);
        try {
            by_candidates = runner_->fetch_candidates(cand_rows_, m, extra_);
        } catch (...) {
            const Error e = current_error();
            // (A device fault poisons the model: the rows then fail below, each with its message.)
            log_line(model_->log_level(), MINFER_LOG_WARN, "batch: %zu rows' candidates could not come back (%s): their logits whole",
                     cand_rows_.size(), e.what());
        }
        if (!by_candidates) {
            whole_.insert(whole_.end(), cand_rows_.begin(), cand_rows_.end());
            std::sort(whole_.begin(), whole_.end());
            cand_rows_.clear();
        }
    }
    bool together = testing::batch_fetch();
    try {
        if (together && !whole_.empty()) runner_->fetch_logits(whole_);
    } catch (...) {
        const Error e = current_error();
        // When they cannot (no pinned memory for them, say), each row is read back alone below and fails
        // alone if it must.
        log_line(model_->log_level(), MINFER_LOG_WARN, "batch: %zu rows' logits could not come back together (%s): one at a time", whole_.size(),
                 e.what());
        together = false;
    }
    // Task k < cand_rows_.size(): candidates row k; then the whole rows.
    auto one = [&](size_t k) {
        const bool cand = k < cand_rows_.size();
        const size_t i = cand ? cand_rows_[k] : whole_[k - cand_rows_.size()];
        Seq& s = *row_seq_[i];
        try {
            if (cand) {
                const Runner::Candidates c = runner_->candidates(k);
                picked_[i].token = s.sampler.sample_candidates(nv, c.ids, c.logits, s.history);
            } else {
                picked_[i].token = s.sampler.sample(runner_->logits(i), s.history);
            }
        } catch (...) {
            const Error e = current_error();
            picked_[i] = Pick{-1, e.status(), e.what()};
        }
    };
    const size_t tasks = cand_rows_.size() + whole_.size();
    cpu::ThreadPool* pool = (together || whole_.empty()) && tasks > 1 ? sampling_pool() : nullptr;
    if (!pool) {
        for (size_t k = 0; k < tasks; ++k) one(k);
        return;
    }
    try {
        pool->parallel_for(static_cast<int64_t>(tasks), [&](int64_t k, int) { one(static_cast<size_t>(k)); });
    } catch (const std::exception& e) {  // not from a row (each catches its own): the pool itself
        for (size_t i : rows) picked_[i] = Pick{-1, MINFER_ERR_INTERNAL, std::string("sampling threads: ") + e.what()};
    }
}

// The threads that sample a step's rows: the `threads` option's count (0: one per physical core), at
// most a group's rows, read at each step so a change applies at the next one; none (the stepping thread
// alone) for one thread or when they cannot be started.
cpu::ThreadPool* Scheduler::sampling_pool() {
    const int want = std::min<int>(cpu::resolve_threads(model_->options().get(options::Id::threads)), static_cast<int>(Runner::kFetchRows));
    if (want <= 1 || want == pool_failed_) return nullptr;
    if (!pool_ || pool_->size() != want) {
        pool_.reset();
        try {
            pool_ = std::make_unique<cpu::ThreadPool>(want);
        } catch (const std::exception& e) {
            log_line(model_->log_level(), MINFER_LOG_WARN, "batch: %d sampling threads could not start (%s): sampling on one", want, e.what());
            pool_failed_ = want;  // not tried again until the option changes
            return nullptr;
        }
    }
    return pool_.get();
}

// The longest suffix of `text` that is a proper prefix of one of the stop strings.
static size_t held_back(const std::string& text, const std::vector<std::string>& stops) {
    size_t keep = 0;
    for (const std::string& stop : stops)
        for (size_t k = std::min(text.size(), stop.size() - 1); k > keep; --k)
            if (text.compare(text.size() - k, k, stop, 0, k) == 0) {
                keep = k;
                break;
            }
    return keep;
}

void Scheduler::emit_token(Seq& s, int32_t token) {
    ++s.n_generated;
    Event e;
    e.id = s.id;
    e.token = token;
    minfer_stop_reason reason = MINFER_STOP_NONE;
    if (model_->is_eog(token)) {
        reason = MINFER_STOP_EOG;  // the end-of-generation token's own text is not part of the answer
    } else if (tok_) {
        s.held += s.decoder.push(tok_->piece(token));
        size_t cut = std::string::npos;
        for (const std::string& stop : s.stops) cut = std::min(cut, s.held.find(stop));
        if (cut != std::string::npos) {
            e.text = s.held.substr(0, cut);
            s.held.clear();
            reason = MINFER_STOP_STRING;
        } else {
            const size_t keep = held_back(s.held, s.stops);
            e.text = s.held.substr(0, s.held.size() - keep);
            s.held.erase(0, s.held.size() - keep);
        }
    }
    if (reason == MINFER_STOP_NONE && ((s.max_tokens > 0 && s.n_generated >= s.max_tokens) || s.n_past >= n_ctx_))
        reason = MINFER_STOP_LENGTH;  // no more tokens wanted, or no position left to feed this one
    if (reason != MINFER_STOP_NONE) {
        if (reason != MINFER_STOP_STRING && tok_) {
            e.text += s.held + s.decoder.flush();
            s.held.clear();
        }
        e.finished = true;
        e.reason = reason;
        s.done = true;
    } else {
        s.next = token;
    }
    pending_.push_back(std::move(e));
}

void Scheduler::finish(Seq& s, minfer_status status, minfer_stop_reason reason, const std::string& error) {
    Event e;
    e.id = s.id;
    e.finished = true;
    e.status = status;
    e.reason = reason;
    e.error = error;
    s.done = true;
    pending_.push_back(std::move(e));
}

void Scheduler::drop_finished() {
    KvPool& kv = runner_->kv();
    std::vector<uint64_t> gone;
    for (auto& sp : active_)
        if (sp->done) {
            kv.release(sp->slot, 0);
            free_slots_.push_back(sp->slot);
            gone.push_back(sp->id);
        }
    std::erase_if(active_, [](const std::unique_ptr<Seq>& s) { return s->done; });
    for (auto& sp : queue_)
        if (sp->done) gone.push_back(sp->id);
    std::erase_if(queue_, [](const std::unique_ptr<Seq>& s) { return s->done; });
    std::lock_guard<std::mutex> lock(mutex_);
    for (uint64_t id : gone) {
        auto it = std::lower_bound(live_.begin(), live_.end(), id);
        if (it != live_.end() && *it == id) live_.erase(it);
    }
}

void Scheduler::publish_stats(size_t step_tokens, int step_sequences, size_t generated) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (step_tokens > 0) {
        stats_.last_step_tokens = static_cast<int>(step_tokens);
        stats_.last_step_sequences = step_sequences;
        ++stats_.steps;
        stats_.tokens_generated += generated;
    }
    stats_.active = static_cast<int>(active_.size());
    stats_.queued = static_cast<int>(queue_.size() + incoming_.size());
    stats_.kv_pages_free = runner_->kv().free_pages();
}

size_t Scheduler::step(Event* out, size_t cap, int wait_ms) {
    if (pending_.empty()) {
        {
            std::unique_lock<std::mutex> lock(mutex_);
            auto has_work = [&] { return !incoming_.empty() || !cancels_.empty() || !active_.empty() || !queue_.empty(); };
            if (!has_work() && wait_ms > 0) wake_.wait_for(lock, std::chrono::milliseconds(wait_ms), has_work);
        }
        take_incoming();
        admit();
        build();
        int n_seq = 0;
        for (auto& sp : active_) n_seq += sp->feeding > 0 ? 1 : 0;
        const size_t n_tokens = tokens_.size();
        size_t generated = 0;
        if (n_tokens > 0) {
            run_forward();
            for (const Event& e : pending_) generated += e.token >= 0 ? 1 : 0;
        }
        drop_finished();
        admit();  // into the slots and pages just freed: the sequence starts its prefill at the next step
        publish_stats(n_tokens, n_seq, generated);
    }
    size_t n = 0;
    while (n < cap && !pending_.empty()) {
        out[n++] = std::move(pending_.front());
        pending_.pop_front();
    }
    return n;
}

}  // namespace minfer::engine
