#include "model/config.h"

#include <cinttypes>
#include <cmath>

#include "core/error.h"
#include "quant/types.h"

namespace minfer::model {
namespace {

using gguf::File;
using gguf::TensorInfo;
using gguf::Value;
using gguf::ValueType;

// Integer key in [lo, hi]. Any integer type is accepted (writers differ: u32, i32, u64).
int64_t int_key(const File& f, const std::string& key, int64_t lo, int64_t hi, const int64_t* fallback = nullptr) {
    const Value* v = f.find(key);
    if (!v) {
        if (fallback) return *fallback;
        fail(MINFER_ERR_BAD_MODEL, "required key '%s' is missing", key.c_str());
    }
    int64_t x = 0;
    if (!gguf::is_integer(v->type))
        fail(MINFER_ERR_BAD_MODEL, "key '%s' has type %s, expected an integer", key.c_str(), gguf::value_type_name(v->type));
    if (!v->as_int(&x))  // an unsigned value above INT64_MAX
        fail(MINFER_ERR_BAD_MODEL, "key '%s' = %" PRIu64 " is outside [%" PRId64 ", %" PRId64 "]", key.c_str(), v->u, lo, hi);
    if (x < lo || x > hi)
        fail(MINFER_ERR_BAD_MODEL, "key '%s' = %" PRId64 " is outside [%" PRId64 ", %" PRId64 "]", key.c_str(), x, lo, hi);
    return x;
}

double float_key(const File& f, const std::string& key, double lo, double hi, double fallback) {
    const Value* v = f.find(key);
    if (!v) return fallback;
    double x = 0;
    if (!v->as_float(&x))
        fail(MINFER_ERR_BAD_MODEL, "key '%s' has type %s, expected f32 or f64", key.c_str(), gguf::value_type_name(v->type));
    if (!std::isfinite(x) || x <= lo || x > hi)
        fail(MINFER_ERR_BAD_MODEL, "key '%s' = %g is outside (%g, %g]", key.c_str(), x, lo, hi);
    return x;
}

const Value* array_key(const File& f, const char* key, ValueType elem, bool required) {
    const Value* v = f.find(key);
    if (!v) {
        if (required) fail(MINFER_ERR_BAD_MODEL, "required key '%s' is missing", key);
        return nullptr;
    }
    if (v->type != ValueType::ARRAY || v->elem_type != elem)
        fail(MINFER_ERR_BAD_MODEL, "key '%s' has type %s%s%s, expected array of %s", key, gguf::value_type_name(v->type),
             v->type == ValueType::ARRAY ? " of " : "", v->type == ValueType::ARRAY ? gguf::value_type_name(v->elem_type) : "",
             gguf::value_type_name(elem));
    return v;
}

std::string string_key(const File& f, const char* key) {
    const Value* v = f.find(key);
    if (!v) return "";
    if (v->type != ValueType::STRING)
        fail(MINFER_ERR_BAD_MODEL, "key '%s' has type %s, expected string", key, gguf::value_type_name(v->type));
    return std::string(v->str);
}

enum class Kind { matmul, vector };

const TensorInfo* tensor(const File& f, const std::string& name, Kind kind, int64_t ne0, int64_t ne1, bool required = true) {
    const TensorInfo* t = f.find_tensor(name);
    if (!t) {
        if (required) fail(MINFER_ERR_BAD_MODEL, "required tensor '%s' is missing", name.c_str());
        return nullptr;
    }
    const int64_t want[4] = {ne0, kind == Kind::vector ? 1 : ne1, 1, 1};
    for (int d = 0; d < 4; ++d) {
        if (t->ne[d] != want[d]) {
            if (kind == Kind::vector)
                fail(MINFER_ERR_BAD_MODEL, "tensor '%s' has shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "], expected [%" PRId64 "]",
                     name.c_str(), t->ne[0], t->ne[1], t->ne[2], t->ne[3], ne0);
            fail(MINFER_ERR_BAD_MODEL, "tensor '%s' has shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "], expected [%" PRId64 ", %" PRId64 "]",
                 name.c_str(), t->ne[0], t->ne[1], t->ne[2], t->ne[3], ne0, ne1);
        }
    }
    const quant::TypeInfo& ti = quant::type_info(t->type);
    if (kind == Kind::vector && t->type != static_cast<int32_t>(quant::Type::F32))
        fail(MINFER_ERR_BAD_MODEL, "tensor '%s' has type %s, expected f32", name.c_str(), ti.name);
    if (kind == Kind::matmul && ti.status != quant::TypeStatus::supported)
        fail(MINFER_ERR_UNSUPPORTED, "tensor '%s' has type %s, which this build cannot compute with", name.c_str(), ti.name);
    return t;
}

}  // namespace

Config read_config(const File& f) {
    Config c;
    const Value* a = f.find("general.architecture");
    if (!a) fail(MINFER_ERR_BAD_MODEL, "required key 'general.architecture' is missing");
    if (a->type != ValueType::STRING)
        fail(MINFER_ERR_BAD_MODEL, "key 'general.architecture' has type %s, expected string", gguf::value_type_name(a->type));
    c.arch_name = std::string(a->str);
    if (c.arch_name == "qwen2") {
        c.arch = Arch::qwen2;
        c.qkv_bias = true;
    } else if (c.arch_name == "qwen3") {
        c.arch = Arch::qwen3;
        c.qk_norm = true;
    } else {
        std::string shown = c.arch_name.substr(0, 64);
        for (char& ch : shown)
            if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) >= 0x7f) ch = '?';
        fail(MINFER_ERR_UNSUPPORTED, "unsupported architecture '%s' (supported: qwen2, qwen3)", shown.c_str());
    }
    c.name = string_key(f, "general.name");
    const std::string p = c.arch_name + ".";

    c.n_ctx_train = static_cast<int32_t>(int_key(f, p + "context_length", 1, kMaxCtx));
    c.n_embd = static_cast<int32_t>(int_key(f, p + "embedding_length", 1, kMaxEmbd));
    c.n_layer = static_cast<int32_t>(int_key(f, p + "block_count", 1, kMaxLayers));
    c.n_ff = static_cast<int32_t>(int_key(f, p + "feed_forward_length", 1, kMaxFF));
    c.n_head = static_cast<int32_t>(int_key(f, p + "attention.head_count", 1, kMaxHeads));
    const int64_t heads = c.n_head;
    c.n_head_kv = static_cast<int32_t>(int_key(f, p + "attention.head_count_kv", 1, kMaxHeads, &heads));
    if (c.n_head % c.n_head_kv != 0)
        fail(MINFER_ERR_BAD_MODEL, "attention.head_count = %d is not a multiple of attention.head_count_kv = %d", c.n_head,
             c.n_head_kv);
    const bool has_key_length = f.find(p + "attention.key_length") != nullptr;
    if (!has_key_length && c.n_embd % c.n_head != 0)
        fail(MINFER_ERR_BAD_MODEL, "embedding_length = %d is not divisible by attention.head_count = %d and no key_length is given",
             c.n_embd, c.n_head);
    const int64_t default_hd = c.n_embd / c.n_head;
    c.head_dim = static_cast<int32_t>(int_key(f, p + "attention.key_length", 1, kMaxHeadDim, &default_hd));
    if (c.head_dim % 2 != 0) fail(MINFER_ERR_BAD_MODEL, "attention.key_length = %d is odd; rotary embedding needs pairs", c.head_dim);
    const int64_t hd = c.head_dim;
    const int64_t vd = int_key(f, p + "attention.value_length", 1, kMaxHeadDim, &hd);
    if (vd != c.head_dim)
        fail(MINFER_ERR_UNSUPPORTED, "attention.value_length = %" PRId64 " differs from key_length = %d", vd, c.head_dim);
    if (c.arch == Arch::qwen2 && c.n_head * c.head_dim != c.n_embd)
        fail(MINFER_ERR_BAD_MODEL, "qwen2: head_count * key_length = %d * %d differs from embedding_length = %d", c.n_head, c.head_dim,
             c.n_embd);
    c.rope_freq_base = float_key(f, p + "rope.freq_base", 0.0, 1e12, 10000.0);
    c.rms_norm_eps = float_key(f, p + "attention.layer_norm_rms_epsilon", 0.0, 1.0, 1e-6);

    // Tokenizer vocabulary: its length is the vocabulary size and must match the embedding.
    const Value* tokens = array_key(f, "tokenizer.ggml.tokens", ValueType::STRING, true);
    if (tokens->count == 0 || tokens->count > static_cast<uint64_t>(kMaxVocab))
        fail(MINFER_ERR_BAD_MODEL, "tokenizer.ggml.tokens has %" PRIu64 " entries", tokens->count);
    c.n_vocab = static_cast<int32_t>(tokens->count);
    string_key(f, "tokenizer.ggml.model");  // type check only
    string_key(f, "tokenizer.ggml.pre");
    if (const Value* tt = array_key(f, "tokenizer.ggml.token_type", ValueType::I32, false); tt && tt->count != tokens->count)
        fail(MINFER_ERR_BAD_MODEL, "tokenizer.ggml.token_type has %" PRIu64 " entries but tokenizer.ggml.tokens has %" PRIu64, tt->count,
             tokens->count);
    if (const Value* sc = array_key(f, "tokenizer.ggml.scores", ValueType::F32, false); sc && sc->count != tokens->count)
        fail(MINFER_ERR_BAD_MODEL, "tokenizer.ggml.scores has %" PRIu64 " entries but tokenizer.ggml.tokens has %" PRIu64, sc->count,
             tokens->count);
    array_key(f, "tokenizer.ggml.merges", ValueType::STRING, false);
    const int64_t none = -1;
    const struct { const char* key; int32_t* out; } specials[] = {
        {"tokenizer.ggml.bos_token_id", &c.bos}, {"tokenizer.ggml.eos_token_id", &c.eos},
        {"tokenizer.ggml.padding_token_id", &c.pad}, {"tokenizer.ggml.unknown_token_id", &c.unk},
    };
    for (const auto& s : specials) {
        const Value* v = f.find(s.key);
        int64_t id = int_key(f, s.key, INT32_MIN, INT32_MAX, &none);
        if (v && (id < 0 || id >= c.n_vocab))
            fail(MINFER_ERR_BAD_MODEL, "%s = %" PRId64 " is outside the vocabulary [0, %d)", s.key, id, c.n_vocab);
        *s.out = static_cast<int32_t>(id);
    }
    return c;
}

Plan plan_tensors(const File& f, const Config& c) {
    Plan plan;
    plan.tok_embd = tensor(f, "token_embd.weight", Kind::matmul, c.n_embd, c.n_vocab);
    plan.output_norm = tensor(f, "output_norm.weight", Kind::vector, c.n_embd, 1);
    plan.output = tensor(f, "output.weight", Kind::matmul, c.n_embd, c.n_vocab, false);
    plan.tied_output = plan.output == nullptr;
    if (plan.tied_output) plan.output = plan.tok_embd;
    const int64_t q = int64_t{c.n_head} * c.head_dim;
    const int64_t kv = int64_t{c.n_head_kv} * c.head_dim;
    plan.layers.resize(static_cast<size_t>(c.n_layer));
    for (int i = 0; i < c.n_layer; ++i) {
        const std::string b = "blk." + std::to_string(i) + ".";
        Layer& L = plan.layers[static_cast<size_t>(i)];
        L.attn_norm = tensor(f, b + "attn_norm.weight", Kind::vector, c.n_embd, 1);
        L.wq = tensor(f, b + "attn_q.weight", Kind::matmul, c.n_embd, q);
        L.wk = tensor(f, b + "attn_k.weight", Kind::matmul, c.n_embd, kv);
        L.wv = tensor(f, b + "attn_v.weight", Kind::matmul, c.n_embd, kv);
        L.wo = tensor(f, b + "attn_output.weight", Kind::matmul, q, c.n_embd);
        L.bq = c.qkv_bias ? tensor(f, b + "attn_q.bias", Kind::vector, q, 1) : nullptr;
        L.bk = c.qkv_bias ? tensor(f, b + "attn_k.bias", Kind::vector, kv, 1) : nullptr;
        L.bv = c.qkv_bias ? tensor(f, b + "attn_v.bias", Kind::vector, kv, 1) : nullptr;
        L.q_norm = c.qk_norm ? tensor(f, b + "attn_q_norm.weight", Kind::vector, c.head_dim, 1) : nullptr;
        L.k_norm = c.qk_norm ? tensor(f, b + "attn_k_norm.weight", Kind::vector, c.head_dim, 1) : nullptr;
        L.ffn_norm = tensor(f, b + "ffn_norm.weight", Kind::vector, c.n_embd, 1);
        L.w_gate = tensor(f, b + "ffn_gate.weight", Kind::matmul, c.n_embd, c.n_ff);
        L.w_up = tensor(f, b + "ffn_up.weight", Kind::matmul, c.n_embd, c.n_ff);
        L.w_down = tensor(f, b + "ffn_down.weight", Kind::matmul, c.n_ff, c.n_embd);
    }
    return plan;
}

std::vector<const TensorInfo*> layer_matmuls(const Plan& plan) {
    std::vector<const TensorInfo*> v;
    v.reserve(plan.layers.size() * 7);
    for (const Layer& L : plan.layers)
        for (const TensorInfo* t : {L.wq, L.wk, L.wv, L.wo, L.w_gate, L.w_up, L.w_down}) v.push_back(t);
    return v;
}

}  // namespace minfer::model
