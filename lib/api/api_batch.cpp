// The C ABI of batches (engine/scheduler.h): argument checks, the structs' size fields, and the event
// strings kept alive until the next step.
#include <algorithm>
#include <vector>

#include "api/api_internal.h"
#include "engine/scheduler.h"

struct minfer_batch {
    std::unique_ptr<minfer::engine::Scheduler> b;
    std::vector<minfer::engine::Event> delivered;  // the last step's events: their strings back the C events
};

using minfer::fail;
using minfer::api::guard;
using minfer::api::need;

namespace {

// The stepping thread's guard: a second concurrent step is refused.
template <class F>
minfer_status with_batch(minfer_batch* batch, F&& f) {
    if (!batch) return minfer::api::set_error(MINFER_ERR_INVALID_ARGUMENT, "batch is NULL");
    if (!batch->b->try_acquire())
        return minfer::api::set_error(MINFER_ERR_BUSY, "batch: another thread is stepping this batch");
    const minfer_status st = guard(f);
    batch->b->release();
    return st;
}

}  // namespace

extern "C" {

void minfer_batch_params_init(minfer_batch_params* params) {
    if (!params) return;
    const minfer::engine::BatchParams d;
    params->size = sizeof(minfer_batch_params);
    params->max_sequences = d.max_sequences;
    params->max_queue = d.max_queue;
    params->max_step_tokens = d.max_step_tokens;
    params->n_ctx = d.n_ctx;
    params->kv_tokens = d.kv_tokens;
}

minfer_status minfer_batch_create(minfer_model* model, const minfer_batch_params* params, minfer_batch** out) {
    if (out) *out = nullptr;
    return guard([&] {
        need(out, "out");
        need(model, "model");
        need(params, "params");
        if (params->size != sizeof(minfer_batch_params))
            fail(MINFER_ERR_INVALID_ARGUMENT, "batch params: size is %u, expected %zu (fill them with minfer_batch_params_init)",
                 params->size, sizeof(minfer_batch_params));
        minfer::engine::BatchParams p;
        p.max_sequences = params->max_sequences;
        p.max_queue = params->max_queue;
        p.max_step_tokens = params->max_step_tokens;
        p.n_ctx = params->n_ctx;
        p.kv_tokens = params->kv_tokens;
        if (p.n_ctx < 0) fail(MINFER_ERR_INVALID_ARGUMENT, "batch params: n_ctx = %d is negative", p.n_ctx);
        auto handle = std::make_unique<minfer_batch>();
        handle->b = std::make_unique<minfer::engine::Scheduler>(model->m, p);
        *out = handle.release();
    });
}

void minfer_batch_free(minfer_batch* batch) { delete batch; }

void minfer_sequence_params_init(minfer_sequence_params* params) {
    if (!params) return;
    *params = minfer_sequence_params{};
    params->size = sizeof(minfer_sequence_params);
}

minfer_status minfer_batch_add(minfer_batch* batch, const minfer_sequence_params* params, uint64_t* id_out) {
    return guard([&] {
        need(batch, "batch");
        need(params, "params");
        need(id_out, "id_out");
        if (params->size != sizeof(minfer_sequence_params))
            fail(MINFER_ERR_INVALID_ARGUMENT, "sequence params: size is %u, expected %zu (fill them with minfer_sequence_params_init)",
                 params->size, sizeof(minfer_sequence_params));
        if (params->n_prompt == 0) fail(MINFER_ERR_INVALID_ARGUMENT, "sequence params: the prompt is empty");
        need(params->prompt, "sequence params: prompt");
        // The length is checked before any token is read: n_prompt beyond the caller's buffer is refused.
        if (params->n_prompt > static_cast<size_t>(batch->b->n_ctx()))
            fail(MINFER_ERR_INVALID_ARGUMENT, "batch: a prompt of %zu tokens does not fit a sequence of %d positions", params->n_prompt,
                 batch->b->n_ctx());
        if (params->n_stops > 0) need(params->stops, "sequence params: stops");
        minfer::engine::SequenceSpec spec;
        spec.prompt.assign(params->prompt, params->prompt + params->n_prompt);
        spec.max_tokens = params->max_tokens;
        if (params->sampler) spec.sampler = *params->sampler;
        for (size_t i = 0; i < params->n_stops; ++i) {
            if (!params->stops[i]) fail(MINFER_ERR_INVALID_ARGUMENT, "sequence params: stop string %zu is NULL", i);
            spec.stops.emplace_back(params->stops[i]);
        }
        *id_out = batch->b->add(std::move(spec));
    });
}

minfer_status minfer_batch_cancel(minfer_batch* batch, uint64_t id) {
    return guard([&] {
        need(batch, "batch");
        batch->b->cancel(id);
    });
}

minfer_status minfer_batch_step(minfer_batch* batch, int32_t wait_ms, minfer_batch_event* events, size_t cap, size_t* n_out) {
    if (n_out) *n_out = 0;
    return with_batch(batch, [&] {
        need(n_out, "n_out");
        if (cap == 0) fail(MINFER_ERR_INVALID_ARGUMENT, "batch step: no room for events (cap = 0)");
        need(events, "events");
        if (wait_ms < 0) fail(MINFER_ERR_INVALID_ARGUMENT, "batch step: wait_ms = %d is negative", wait_ms);
        const size_t room = std::min<size_t>(cap, size_t{1} << 16);  // more than any step reports at once
        batch->delivered.resize(room);
        const size_t n = batch->b->step(batch->delivered.data(), room, wait_ms);
        batch->delivered.resize(n);
        for (size_t i = 0; i < n; ++i) {
            const minfer::engine::Event& e = batch->delivered[i];
            minfer_batch_event& c = events[i];
            c.id = e.id;
            c.token = e.token;
            c.finished = e.finished ? 1 : 0;
            c.reason = e.reason;
            c.status = e.status;
            c.text = e.text.c_str();
            c.text_len = e.text.size();
            c.error = e.error.c_str();
        }
        *n_out = n;
    });
}

minfer_status minfer_batch_stats_get(const minfer_batch* batch, minfer_batch_stats* out) {
    return guard([&] {
        need(batch, "batch");
        need(out, "out");
        if (out->size != sizeof(minfer_batch_stats))
            fail(MINFER_ERR_INVALID_ARGUMENT, "batch stats: size is %u, expected %zu", out->size, sizeof(minfer_batch_stats));
        const minfer::engine::BatchStats s = batch->b->stats();
        out->active = s.active;
        out->queued = s.queued;
        out->last_step_tokens = s.last_step_tokens;
        out->last_step_sequences = s.last_step_sequences;
        out->kv_pages = s.kv_pages;
        out->kv_pages_free = s.kv_pages_free;
        out->steps = s.steps;
        out->tokens_generated = s.tokens_generated;
    });
}

}  // extern "C"
