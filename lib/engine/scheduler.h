// Continuous batching: many sequences of one model share each forward pass.
//
// A Scheduler (the C ABI's minfer_batch) owns a runner with `max_sequences` slots over one paged KV
// pool (engine/kv_pool.h). Sequences join with their prompt, sampler settings, stop strings and token limit, wait in a queue, get a slot
// when one is free, and leave when they finish, fail or are cancelled. Each step() runs one forward over
// every active sequence: one decode token of each running sequence first, then prefill chunks of the
// sequences still reading their prompt, within `max_step_tokens`; each sequence whose logits came out
// samples its next token with its own sampler. KV pages are taken as positions are written: a sequence
// that needs a page when the pool has none fails alone (MINFER_ERR_OUT_OF_MEMORY) and its pages go back
// to the others; a waiting prefill simply waits while other sequences may still free pages.
//
// Threads: add(), cancel() and stats() may be called from any thread at any time; step() by one thread at
// a time (a second concurrent step fails with MINFER_ERR_BUSY). Additions and cancellations reach the
// running sequences at the next step.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cpu/threadpool.h"
#include "engine/engine.h"
#include "engine/runner.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace minfer::engine {

struct BatchParams {
    int max_sequences = 64;     // sequences in the forward passes at once (runner slots)
    int max_queue = 256;        // sequences waiting for a slot; add() beyond fails with MINFER_ERR_BUSY
    int max_step_tokens = 512;  // tokens per forward pass (decode tokens first, then prefill chunks)
    int n_ctx = 0;              // the most positions of one sequence; 0: the model's ctx_len option
    int64_t kv_tokens = 0;      // positions in the shared KV pool; 0: max(n_ctx, 256 * max_sequences)
};

struct SequenceSpec {
    std::vector<int32_t> prompt;
    int32_t max_tokens = 0;  // new tokens at most; 0: until the sequence's n_ctx positions are used
    std::optional<minfer_sampler_params> sampler;  // none: greedy
    std::vector<std::string> stops;
};

// What step() reports about one sequence.
struct Event {
    uint64_t id = 0;
    int32_t token = -1;       // the new token; -1 when none (cancelled, failed before sampling)
    bool finished = false;    // the sequence is over; its id is no longer known
    minfer_stop_reason reason = MINFER_STOP_NONE;  // EOG, STRING or LENGTH when finished with OK
    minfer_status status = MINFER_OK;              // why it failed or ended early (CANCELLED)
    std::string text;         // the text this token completes (whole UTF-8 characters, stop strings cut)
    std::string error;        // the message when status != OK
};

struct BatchStats {
    int active = 0, queued = 0;                // sequences with a slot, and waiting for one
    int last_step_tokens = 0, last_step_sequences = 0;
    int kv_pages = 0, kv_pages_free = 0;
    uint64_t steps = 0, tokens_generated = 0;
};

class Scheduler {
public:
    // Throws Error: bad parameters (MINFER_ERR_INVALID_ARGUMENT), memory (MINFER_ERR_OUT_OF_MEMORY).
    Scheduler(std::shared_ptr<Model> model, const BatchParams& params);
    ~Scheduler();

    // Queues a sequence and returns its id (never 0). Validates first and throws Error:
    // INVALID_ARGUMENT for an empty prompt, a token outside the vocabulary, a prompt that leaves no room
    // for a new token in n_ctx or in the whole pool, bad sampler settings or an empty stop string; BUSY
    // when the queue is full.
    uint64_t add(SequenceSpec spec);
    // Cancels a queued or running sequence: its memory goes back at the next step, which reports it
    // (finished, MINFER_ERR_CANCELLED). Throws Error(MINFER_ERR_NOT_FOUND) for an unknown or finished id.
    void cancel(uint64_t id);

    // Writes up to `cap` events to `out` and returns their count. Events left from the previous step
    // come first, and while any are left no forward runs. Otherwise: applies additions and cancellations,
    // runs one forward over the active sequences (waiting up to wait_ms for work when there is none)
    // and reports it. Returns 0 when there was nothing to do. The text of an event stays valid until the
    // next call.
    size_t step(Event* out, size_t cap, int wait_ms);

    BatchStats stats() const;
    int n_ctx() const { return n_ctx_; }

    bool try_acquire() { return !busy_.exchange(true, std::memory_order_acquire); }
    void release() { busy_.store(false, std::memory_order_release); }

private:
    struct Seq;
    void take_incoming();
    void admit();
    void build();
    void run_forward();
    void sample_rows(std::span<const size_t> rows);
    cpu::ThreadPool* sampling_pool();
    void finish(Seq& s, minfer_status status, minfer_stop_reason reason, const std::string& error);
    void emit_token(Seq& s, int32_t token);
    void drop_finished();
    void publish_stats(size_t step_tokens, int step_sequences, size_t generated);

    std::shared_ptr<Model> model_;
    BatchParams params_;
    int n_ctx_ = 0;
    std::unique_ptr<Runner> runner_;
    const tokenizer::Tokenizer* tok_ = nullptr;  // null when the model has no usable tokenizer

    // Shared with add() and cancel().
    mutable std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<std::unique_ptr<Seq>> incoming_;
    std::vector<uint64_t> cancels_;
    std::vector<uint64_t> live_;  // ids queued or running, sorted
    uint64_t next_id_ = 1;
    BatchStats stats_;

    // The stepping thread's own.
    std::deque<std::unique_ptr<Seq>> queue_;   // waiting for a slot, in arrival order
    std::vector<std::unique_ptr<Seq>> active_; // with a slot, in admission order
    std::vector<int> free_slots_;
    std::deque<Event> pending_;                // events not yet handed out
    std::vector<int32_t> tokens_, pos_, seq_, out_rows_;
    std::vector<Seq*> row_seq_;                // the sequence of each output row
    struct Pick {                              // an output row's next token, or why it has none
        int32_t token = -1;
        minfer_status status = MINFER_OK;
        std::string error;
    };
    std::vector<Pick> picked_;                 // per output row
    std::vector<size_t> sampled_;              // the rows whose sequences sample (not greedy)
    std::vector<size_t> whole_, cand_rows_;    // sample_rows: a group's rows by their logits whole, by candidates
    std::vector<std::span<const int32_t>> extra_;  // sample_rows: each candidates row's affected tokens
    std::unique_ptr<cpu::ThreadPool> pool_;    // sampling threads, started at the first step that samples two rows
    int pool_failed_ = 0;                      // a thread count that could not start
    std::atomic<bool> busy_{false};
};

}  // namespace minfer::engine
