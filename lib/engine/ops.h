// The backend seam. The forward pass (engine/forward.cpp) is written once per architecture in terms of
// these operations; each backend implements them on its own memory: the CPU (lib/cpu/cpu_ops.cpp) and
// CUDA (cuda/backend.cu). An Ops object belongs to one runner (engine/ops_runner.h): it owns the KV
// cache of the runner's sequences (paged, below) and its scratch buffers.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "quant/types.h"

namespace minfer::engine {

// A weight as the forward pass sees it: a 1-D vector or a matrix of `rows` rows of `cols` elements
// (GGUF ne0 = cols, ne1 = rows), stored in `type`. `host` points into the mapped file.
struct Weight {
    const gguf::TensorInfo* info = nullptr;
    quant::Type type = quant::Type::F32;
    int64_t cols = 0;  // ne0: elements per row (the input dimension of a matmul)
    int64_t rows = 1;  // ne1: rows (the output dimension of a matmul)
    const void* host = nullptr;

    static Weight of(const gguf::TensorInfo* t) {
        Weight w;
        w.info = t;
        w.type = static_cast<quant::Type>(t->type);
        w.cols = t->ne[0];
        w.rows = t->ne[1];
        w.host = t->data;
        return w;
    }
};

// A span of floats in the backend's memory.
struct Buf {
    float* data = nullptr;
    size_t n = 0;
    Buf at(size_t offset, size_t count) const { return Buf{data + offset, count}; }
};

// RoPE frequencies base^(-2i / head_dim) for i < head_dim / 2, in double: the table both backends use.
inline std::vector<double> rope_inv_freq(double base, int head_dim) {
    std::vector<double> inv(static_cast<size_t>(head_dim / 2));
    for (int i = 0; i < head_dim / 2; ++i) inv[static_cast<size_t>(i)] = std::pow(base, -2.0 * i / head_dim);
    return inv;
}

// KV memory is paged: a backend's KV cache holds `rows` positions per layer, in pages of kKvPage
// consecutive rows, and each sequence has a page table (engine/kv_pool.h hands the pages out). Position p
// of a sequence lives in row pages[p / kKvPage] * kKvPage + p % kKvPage.
constexpr int kKvPageShift = 4;
constexpr int kKvPage = 1 << kKvPageShift;
using KvPages = std::span<const int32_t>;
inline size_t kv_row(KvPages pages, int pos) {
    return (static_cast<size_t>(pages[static_cast<size_t>(pos >> kKvPageShift)]) << kKvPageShift) | static_cast<size_t>(pos & (kKvPage - 1));
}

class Ops {
public:
    virtual ~Ops() = default;

    // Called before each forward call. `threads_option` is the model's `threads` option (0: one thread per
    // hardware thread), passed each call because it may change between calls. Only the CPU backend uses it
    // (it sizes its thread pool); the CUDA backend ignores it and checks the model's device health instead.
    virtual void begin(int64_t threads_option) = 0;

    // Scratch in backend memory, alive as long as this Ops.
    virtual Buf alloc(size_t n_floats) = 0;

    // out[t][:] = row tokens[t] of the embedding table (dequantized). out: [n][table.cols]
    virtual void embed(const Weight& table, const int32_t* tokens, int n, Buf out) = 0;
    // out[r] = x[r] / rms(x[r]) * w, for `rows` rows of `dim`; out may be x.
    virtual void rms_norm(Buf x, int64_t rows, int64_t dim, const Weight& w, float eps, Buf out) = 0;
    // out[t][r] = dot(W row r, x[t]) for t < n. x: [n][w.cols], out: [n][w.rows]. same_input: x (and n)
    // is the previous matmul call's input, unchanged since (k and v after q, up after gate), so a backend
    // may reuse what it derived from it; false always works.
    virtual void matmul(const Weight& w, Buf x, int n, Buf out, bool same_input = false) = 0;
    // x[r][:] += b for `rows` rows of b.cols.
    virtual void add_bias(Buf x, int64_t rows, const Weight& b) = 0;
    // Rotary embedding, NeoX layout (pairs i and i + head_dim/2), token t at position pos0 + t, in place,
    // angle (pos0 + t) * rope_inv_freq(...)[i] with the head_dim and base of the config the Ops were made
    // for (each backend keeps that table). x: [n][n_heads * head_dim]
    virtual void rope(Buf x, int n, int n_heads, int pos0) = 0;
    // Writes k, v ([n][n_head_kv * head_dim]) into the cache of `layer` at positions pos0 .. pos0+n-1 of
    // the sequence whose page table is `pages` (covering those positions).
    virtual void store_kv(int layer, KvPages pages, int pos0, int n, Buf k, Buf v) = 0;
    // Causal grouped-query attention of q ([n][n_head * head_dim], token t at position pos0 + t) over the
    // cache of `layer`, positions 0 .. pos0+t of the sequence of `pages`. out: [n][n_head * head_dim]
    virtual void attention(int layer, KvPages pages, Buf q, int n, int pos0, Buf out) = 0;
    // gate[i] = silu(gate[i]) * up[i]
    virtual void swiglu(Buf gate, Buf up) = 0;
    // x[i] += y[i]
    virtual void add(Buf x, Buf y) = 0;
    // Copies src.n floats to host memory, waiting for the work before it.
    virtual void read(Buf src, float* host) = 0;
    // Copies dst.n floats from host memory into dst.
    virtual void write(const float* host, Buf dst) = 0;
    // Called when a forward call failed with e (the CUDA backend poisons its model on device errors).
    virtual void on_error(const minfer::Error& e) { (void)e; }
};

}  // namespace minfer::engine
