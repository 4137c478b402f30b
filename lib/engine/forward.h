// The forward pass of Qwen2 and Qwen3, once, in terms of backend operations.
#pragma once

#include <memory>
#include <span>

#include "engine/ops.h"
#include "model/config.h"

namespace minfer::engine {

// Activation buffers for up to `max_tokens` tokens per call, allocated from the backend.
struct Scratch {
    int max_tokens = 0;
    Buf x;       // [n][n_embd] residual stream
    Buf xb;      // [n][n_embd] normed input / projection output
    Buf q;       // [n][n_head * head_dim]
    Buf k;       // [n][n_head_kv * head_dim]
    Buf v;       // [n][n_head_kv * head_dim]
    Buf att;     // [n][n_head * head_dim] attention output
    Buf gate;    // [n][n_ff]
    Buf up;      // [n][n_ff]
    Buf logits;  // [n_vocab]
};

Scratch make_scratch(Ops& ops, const model::Config& c, int max_tokens);

// Runs n tokens (n <= scratch.max_tokens) of one sequence at positions pos0 .. pos0+n-1 through the
// model, writing the KV cache, and copies the logits of the tokens `out_rows` (indices below n) to
// `logits` ([out_rows.size()][n_vocab] floats, host memory).
void forward(const model::Config& c, const model::Plan& plan, Ops& ops, Scratch& s, const int32_t* tokens, int n, int pos0,
             std::span<const int32_t> out_rows, float* logits);

}  // namespace minfer::engine
