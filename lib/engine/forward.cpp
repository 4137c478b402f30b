#include "engine/forward.h"

#include "engine/testing.h"

namespace minfer::engine {

Scratch make_scratch(Ops& ops, const model::Config& c, int max_tokens) {
    const size_t n = static_cast<size_t>(max_tokens);
    const size_t q = static_cast<size_t>(c.n_head) * c.head_dim, kv = static_cast<size_t>(c.n_head_kv) * c.head_dim;
    Scratch s;
    s.max_tokens = max_tokens;
    s.x = ops.alloc(n * c.n_embd);
    s.xb = ops.alloc(n * c.n_embd);
    s.q = ops.alloc(n * q);
    s.k = ops.alloc(n * kv);
    s.v = ops.alloc(n * kv);
    s.att = ops.alloc(n * q);
    s.gate = ops.alloc(n * c.n_ff);
    s.up = ops.alloc(n * c.n_ff);
    s.logits = ops.alloc(static_cast<size_t>(c.n_vocab));
    return s;
}

void forward(const model::Config& c, const model::Plan& plan, Ops& ops, Scratch& s, const int32_t* tokens, int n,
             std::span<const Run> runs, std::span<const int32_t> out_rows, float* logits) {
    const size_t nt = static_cast<size_t>(n);
    const size_t d = static_cast<size_t>(c.n_embd);
    const size_t q_dim = static_cast<size_t>(c.n_head) * c.head_dim;
    const size_t kv_dim = static_cast<size_t>(c.n_head_kv) * c.head_dim;
    const size_t ff = static_cast<size_t>(c.n_ff);
    const float eps = static_cast<float>(c.rms_norm_eps);
    Buf x = s.x.at(0, nt * d), xb = s.xb.at(0, nt * d);
    Buf q = s.q.at(0, nt * q_dim), k = s.k.at(0, nt * kv_dim), v = s.v.at(0, nt * kv_dim), att = s.att.at(0, nt * q_dim);
    Buf gate = s.gate.at(0, nt * ff), up = s.up.at(0, nt * ff);

    ops.embed(Weight::of(plan.tok_embd), tokens, n, x);
    for (int il = 0; il < c.n_layer; ++il) {
        const model::Layer& L = plan.layers[static_cast<size_t>(il)];

        // Attention block: x += Wo · attention(rope(norm_q(Wq·h + bq)), rope(norm_k(Wk·h + bk)), Wv·h + bv)
        ops.rms_norm(x, n, c.n_embd, Weight::of(L.attn_norm), eps, xb);
        ops.matmul(Weight::of(L.wq), xb, n, q);
        ops.matmul(Weight::of(L.wk), xb, n, k, true);
        ops.matmul(Weight::of(L.wv), xb, n, v, true);
        if (c.qkv_bias) {
            if (!(c.planted & testing::kPlantNoQkBias)) {
                ops.add_bias(q, n, Weight::of(L.bq));
                ops.add_bias(k, n, Weight::of(L.bk));
            }
            ops.add_bias(v, n, Weight::of(L.bv));
        }
        if (c.qk_norm) {
            ops.rms_norm(q, int64_t{n} * c.n_head, c.head_dim, Weight::of(L.q_norm), eps, q);
            ops.rms_norm(k, int64_t{n} * c.n_head_kv, c.head_dim, Weight::of(L.k_norm), eps, k);
        }
        for (const Run& r : runs) {  // each sequence over its own positions and KV cache
            const size_t b = static_cast<size_t>(r.begin);
            Buf rq = q.at(b * q_dim, r.n * q_dim), rk = k.at(b * kv_dim, r.n * kv_dim), rv = v.at(b * kv_dim, r.n * kv_dim);
            ops.rope(rq, r.n, c.n_head, r.pos0);
            ops.rope(rk, r.n, c.n_head_kv, r.pos0);
            ops.store_kv(il, r.pages, r.pos0, r.n, rk, rv);
            ops.attention(il, r.pages, rq, r.n, r.pos0, att.at(b * q_dim, r.n * q_dim));
        }
        ops.matmul(Weight::of(L.wo), att, n, xb);
        ops.add(x, xb);

        // Feed-forward block: x += W_down · (silu(W_gate·h) * (W_up·h))
        ops.rms_norm(x, n, c.n_embd, Weight::of(L.ffn_norm), eps, xb);
        ops.matmul(Weight::of(L.w_gate), xb, n, gate);
        ops.matmul(Weight::of(L.w_up), xb, n, up, true);
        ops.swiglu(gate, up);
        ops.matmul(Weight::of(L.w_down), gate, n, xb);
        ops.add(x, xb);
    }

    // Logits of the rows asked for.
    Buf normed = s.xb.at(0, d);
    for (size_t i = 0; i < out_rows.size(); ++i) {
        ops.rms_norm(s.x.at(static_cast<size_t>(out_rows[i]) * d, d), 1, c.n_embd, Weight::of(plan.output_norm), eps, normed);
        ops.matmul(Weight::of(plan.output), normed, 1, s.logits);
        ops.read(s.logits, logits + i * static_cast<size_t>(c.n_vocab));
    }
}

}  // namespace minfer::engine
