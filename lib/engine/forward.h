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

// A run of the tokens of a forward call: rows begin .. begin+n-1 are one sequence's positions pos0 ..
// pos0+n-1, its KV cache at `pages`.
struct Run {
    KvPages pages;
    int begin = 0, n = 0, pos0 = 0;
};

// Runs n tokens (n <= scratch.max_tokens), cut into runs of sequences, through the model: every matmul
// takes all n tokens at once (each weight is read once per call), RoPE, the KV store and attention go
// run by run. Writes the KV caches and copies the logits of the tokens `out_rows` (indices below n) to
// `logits` ([out_rows.size()][n_vocab] floats, host memory).
void forward(const model::Config& c, const model::Plan& plan, Ops& ops, Scratch& s, const int32_t* tokens, int n,
             std::span<const Run> runs, std::span<const int32_t> out_rows, float* logits);

}  // namespace minfer::engine
