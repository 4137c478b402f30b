#include "synth/synth.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "quant/types.h"

namespace minfer::synth {
namespace {

// Shapes of the published models (hidden size, feed-forward size, layers, heads, kv heads, head dim,
// vocabulary, tied output), plus tiny ones whose rows are whole K-quant super-blocks but for
// qwen2-tiny-narrow's.
constexpr Preset kPresets[] = {
    {"qwen2-tiny", "qwen2", 512, 2048, 256, 2, 4, 2, 64, 512, false, 1000000.0, 1e-6},
    {"qwen2-tiny-tied", "qwen2", 512, 2048, 256, 2, 4, 2, 64, 512, true, 1000000.0, 1e-6},
    {"qwen3-tiny", "qwen3", 512, 2048, 256, 2, 4, 2, 128, 512, true, 1000000.0, 1e-6},
    // eight layers: the q4_K_M mix then has q6_K attn_v and ffn_down in four of them (more_bits below)
    {"qwen2-tiny-deep", "qwen2", 512, 2048, 256, 8, 4, 2, 64, 512, false, 1000000.0, 1e-6},
    // qwen2-0.5b's kind of rows in small: 384 columns are one and a half super-blocks, so the K-quant mixes
    // fall back (fit_row below: q4_K_M's q/k/o/gate/up and most v in q5_0, the more-bits v and the tied
    // table in q8_0), and grouped copies of such rows end in a padded group
    {"qwen2-tiny-narrow", "qwen2", 512, 2048, 384, 8, 6, 2, 64, 512, true, 1000000.0, 1e-6},
    {"qwen2-0.5b", "qwen2", 151936, 32768, 896, 24, 14, 2, 64, 4864, true, 1000000.0, 1e-6},
    {"qwen2-1.5b", "qwen2", 151936, 32768, 1536, 28, 12, 2, 128, 8960, true, 1000000.0, 1e-6},
    {"qwen2-7b", "qwen2", 152064, 32768, 3584, 28, 28, 4, 128, 18944, false, 1000000.0, 1e-6},
    {"qwen3-0.6b", "qwen3", 151936, 40960, 1024, 28, 16, 8, 128, 3072, true, 1000000.0, 1e-6},
    {"qwen3-8b", "qwen3", 151936, 40960, 4096, 36, 32, 8, 128, 12288, false, 1000000.0, 1e-6},
};

// Token types as GGUF defines them.
constexpr int32_t kTokNormal = 1, kTokControl = 3, kTokUserDefined = 4, kTokUnused = 5;

// xoshiro256+ seeded through splitmix64: fast, and the same seed gives the same file everywhere.
struct Rng {
    uint64_t s[4];
    explicit Rng(uint64_t seed) {
        for (uint64_t& x : s) {
            seed += 0x9e3779b97f4a7c15ull;
            uint64_t z = seed;
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            x = z ^ (z >> 31);
        }
    }
    uint64_t next() {
        const uint64_t r = s[0] + s[3];
        const uint64_t t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = (s[3] << 45) | (s[3] >> 19);
        return r;
    }
    double uniform() { return static_cast<double>((next() >> 11) + 1) * 0x1.0p-53; }  // (0, 1]
    // Box-Muller, two values per call.
    void normal2(float std, float* a, float* b) {
        const double r = std::sqrt(-2.0 * std::log(uniform()));
        const double t = 6.283185307179586 * uniform();
        *a = static_cast<float>(std * r * std::cos(t));
        *b = static_cast<float>(std * r * std::sin(t));
    }
};

enum class Class { matmul, embedding, output, norm, bias };

struct Spec {
    std::string name;
    Class cls;
    std::vector<int64_t> dims;
    int32_t type;
};

// K-quant rows must be whole super-blocks of 256; where a row is not (qwen2-0.5b's 896), converters
// fall back to a legacy type of similar size, and so does synth.
quant::Type fit_row(quant::Type t, int64_t cols) {
    if (quant::type_info(t).block_elems != 256 || cols % 256 == 0) return t;
    switch (t) {
    case quant::Type::Q2_K: case quant::Type::Q3_K: return quant::Type::Q4_0;
    case quant::Type::Q4_K: return quant::Type::Q5_0;
    case quant::Type::Q5_K: return quant::Type::Q5_1;
    default: return quant::Type::Q8_0;
    }
}

// True for the layers where a q4_K_M-like mix spends more bits on attn_v and ffn_down: the first and
// last eighth of the layers and every third layer in between.
bool more_bits(int layer, int n_layer) {
    const int e = n_layer / 8;
    return layer < e || layer >= n_layer - e || (layer - e) % 3 == 2;
}

const char* const kMixes = "f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K, q4_K_M";

// The type of a tensor under a mix. Norms and biases stay f32 in every mix. A plain type name puts
// every matmul weight (embedding and output included) in that type; q4_K_M is q4_K with q6_K for the
// output and for attn_v/ffn_down in the layers more_bits() picks.
int32_t mix_type(const std::string& mix, Class cls, const std::string& name, int layer, int n_layer, int64_t cols) {
    if (cls == Class::norm || cls == Class::bias) return static_cast<int32_t>(quant::Type::F32);
    quant::Type t;
    if (mix == "q4_K_M") {
        const bool wide = name.find("attn_v.") != std::string::npos || name.find("ffn_down.") != std::string::npos;
        t = cls == Class::output || (wide && more_bits(layer, n_layer)) ? quant::Type::Q6_K : quant::Type::Q4_K;
    } else {
        t = quant::Type::F32;
        bool found = false;
        for (int32_t id = 0; id < 40 && !found; ++id) {
            const quant::TypeInfo& info = quant::type_info(id);
            if (info.status == quant::TypeStatus::supported && mix == info.name) {
                t = static_cast<quant::Type>(id);
                found = true;
            }
        }
        if (!found) fail(MINFER_ERR_INVALID_ARGUMENT, "unknown mix '%s' (known: %s)", mix.c_str(), kMixes);
    }
    return static_cast<int32_t>(fit_row(t, cols));
}

struct FillState {
    const std::vector<Spec>* specs;
    uint64_t seed;
    uint64_t done = 0, total = 0;
};

void fill_tensor(void* user, size_t index, uint8_t* dst, uint64_t n_bytes) {
    FillState& st = *static_cast<FillState*>(user);
    const Spec& spec = (*st.specs)[index];
    const int64_t cols = spec.dims[0];
    int64_t rows = 1;
    for (size_t d = 1; d < spec.dims.size(); ++d) rows *= spec.dims[d];
    const quant::Type type = static_cast<quant::Type>(spec.type);
    const size_t row_bytes = quant::row_bytes(type, cols);
    // Rows in parallel; each row's values come from its own generator, so the file is the same for a
    // seed whatever the thread count.
    const unsigned n_threads = std::max(1u, std::min(64u, std::thread::hardware_concurrency()));
    std::vector<std::thread> threads;
    std::exception_ptr error;
    std::mutex error_mutex;
    for (unsigned w = 0; w < n_threads; ++w) {
        threads.emplace_back([&, w] {
            try {
                std::vector<float> v(static_cast<size_t>(cols) + 1);
                for (int64_t r = w; r < rows; r += n_threads) {
                    Rng rng(st.seed ^ (0x5851f42d4c957f2dull * (index + 1)) ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(r + 1)));
                    for (int64_t i = 0; i < cols; i += 2) rng.normal2(0.02f, &v[static_cast<size_t>(i)], &v[static_cast<size_t>(i) + 1]);
                    if (spec.cls == Class::norm)
                        for (int64_t i = 0; i < cols; ++i) v[static_cast<size_t>(i)] += 1.0f;
                    quant::quantize_row(type, v.data(), dst + static_cast<size_t>(r) * row_bytes, cols);
                }
            } catch (...) {
                std::lock_guard<std::mutex> lock(error_mutex);
                if (!error) error = std::current_exception();
            }
        });
    }
    for (auto& t : threads) t.join();
    if (error) std::rethrow_exception(error);
    st.done += n_bytes;
    report_progress("synth", st.done, st.total);
}

// Appends unused "[PADn]" tokens (n: the id) up to n tokens; a name already taken gets a "'" more.
void pad_vocab(Vocab& v, size_t n) {
    if (v.tokens.size() >= n) return;
    std::unordered_set<std::string_view> taken;
    taken.reserve(v.tokens.size());
    for (const std::string& t : v.tokens)
        if (t.rfind("[PAD", 0) == 0) taken.insert(t);
    std::vector<std::string> extra;
    extra.reserve(n - v.tokens.size());
    for (size_t id = v.tokens.size(); id < n; ++id) {
        std::string t = "[PAD" + std::to_string(id) + "]";
        while (taken.count(t)) t += '\'';
        extra.push_back(std::move(t));
    }
    for (std::string& t : extra) {
        v.tokens.push_back(std::move(t));
        v.types.push_back(kTokUnused);
    }
}

// ---- Hugging Face tokenizer.json -----------------------------------------------------------------

// The pre-tokenizer split of Qwen2/Qwen2.5/Qwen3 (llama.cpp's "qwen2"), as tokenizer.json writes it.
constexpr std::string_view kQwen2Regex =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// Ids beyond this are refused (a hostile file would otherwise make us allocate without bound).
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

// Short text for messages: strings quoted and cut, objects by their "type", others by kind.
std::string describe(const json::Value* v) {
    if (!v || v->is_null()) return "null";
    if (v->is_string()) {
        std::string s = v->str().substr(0, 80);
        for (char& c : s)
            if (static_cast<unsigned char>(c) < 0x20) c = ' ';
        return "'" + s + (v->str().size() > 80 ? "...'" : "'");
    }
    if (v->is_object()) {
        const json::Value* t = v->find("type");
        if (t && t->is_string()) return "'" + t->str() + "'";
        return "an object without a type";
    }
    return std::string("a ") + json::type_name(v->type());
}

// The member `key` of `obj`, nullptr when absent or null.
const json::Value* member(const json::Value& obj, const char* key) {
    const json::Value* v = obj.find(key);
    return v && !v->is_null() ? v : nullptr;
}

const json::Value& required(const json::Value& obj, const char* key, json::Type type, const char* where) {
    const json::Value* v = member(obj, key);
    if (!v) fail(MINFER_ERR_BAD_MODEL, "tokenizer.json: %s has no '%s'", where, key);
    if (v->type() != type)
        fail(MINFER_ERR_BAD_MODEL, "tokenizer.json: %s.%s is %s, expected a %s", where, key, describe(v).c_str(),
             json::type_name(type));
    return *v;
}

bool flag(const json::Value& obj, const char* key) {
    const json::Value* v = member(obj, key);
    return v && v->boolean();
}

std::string_view type_of(const json::Value* v) {
    const json::Value* t = v && v->is_object() ? v->find("type") : nullptr;
    return t && t->is_string() ? std::string_view(t->str()) : std::string_view();
}

// Split with the Qwen2 regex (isolated), then ByteLevel without its own regex or prefix space.
void check_pre_tokenizer(const json::Value* pre) {
    const char* want = "Sequence[Split(Qwen2 regex, Isolated), ByteLevel(add_prefix_space=false, use_regex=false)]";
    if (type_of(pre) != "Sequence")
        fail(MINFER_ERR_UNSUPPORTED, "tokenizer.json: pre_tokenizer %s is not supported (minfer implements %s)",
             describe(pre).c_str(), want);
    const json::Value* list = member(*pre, "pretokenizers");
    if (!list || !list->is_array() || list->size() != 2 || type_of(&(*list)[0]) != "Split" ||
        type_of(&(*list)[1]) != "ByteLevel") {
        std::string got;
        if (list && list->is_array())
            for (const json::Value& e : list->items()) got += (got.empty() ? "" : ", ") + describe(&e);
        fail(MINFER_ERR_UNSUPPORTED, "tokenizer.json: pre_tokenizer Sequence[%s] is not supported (minfer implements %s)",
             got.c_str(), want);
    }
    const json::Value& split = (*list)[0];
    const json::Value* pattern = member(split, "pattern");
    const json::Value* regex = pattern && pattern->is_object() ? member(*pattern, "Regex") : nullptr;
    if (!regex || !regex->is_string() || regex->str() != kQwen2Regex)
        fail(MINFER_ERR_UNSUPPORTED, "tokenizer.json: pre_tokenizer Split pattern %s is not the Qwen2 regex",
             regex ? describe(regex).c_str() : pattern && pattern->is_object() && member(*pattern, "String")
                                                 ? ("string " + describe(member(*pattern, "String"))).c_str()
                                                 : "(none)");
    const json::Value* behavior = member(split, "behavior");
    if (!behavior || !behavior->is_string() || behavior->str() != "Isolated" || flag(split, "invert"))
        fail(MINFER_ERR_UNSUPPORTED, "tokenizer.json: pre_tokenizer Split with behavior %s%s is not supported (only Isolated)",
             describe(behavior).c_str(), flag(split, "invert") ? " and invert" : "");
    // ByteLevel's use_regex defaults to true (files written before it existed always split with the GPT-2
    // regex), so it must be there and false.
    const json::Value& bl = (*list)[1];
    const json::Value* use_regex = member(bl, "use_regex");
    if (flag(bl, "add_prefix_space") || !use_regex || use_regex->boolean() || !use_regex->is_bool())
        fail(MINFER_ERR_UNSUPPORTED, "tokenizer.json: pre_tokenizer ByteLevel with %s is not supported",
             flag(bl, "add_prefix_space") ? "add_prefix_space" : "use_regex (the GPT-2 split after the Qwen2 one)");
}

// The id of an added token named by tokenizer_config.json: a string, or an object with "content".
int32_t config_token(const json::Value& cfg, const char* key, const std::unordered_map<std::string_view, int32_t>& ids) {
    const json::Value* v = member(cfg, key);
    if (!v) return -1;
    if (v->is_object()) v = member(*v, "content");
    if (!v || !v->is_string())
        fail(MINFER_ERR_BAD_MODEL, "tokenizer_config.json: %s is %s, expected a string or an object with content", key,
             describe(v).c_str());
    const auto it = ids.find(v->str());
    if (it == ids.end())
        fail(MINFER_ERR_BAD_MODEL, "tokenizer_config.json: %s %s is not in the vocabulary", key, describe(v).c_str());
    return it->second;
}

}  // namespace

std::span<const Preset> presets() { return kPresets; }

const Preset* find_preset(const std::string& name) {
    for (const Preset& p : kPresets)
        if (name == p.name) return &p;
    return nullptr;
}

Vocab import_hf_vocab(const json::Value& tok, const json::Value* cfg) {
    if (!tok.is_object()) fail(MINFER_ERR_BAD_MODEL, "tokenizer.json: the top level is %s, expected an object", describe(&tok).c_str());
    const json::Value& model = required(tok, "model", json::Type::object, "the top level");
    const json::Value* mtype = member(model, "type");
    if (!mtype || !mtype->is_string() || mtype->str() != "BPE")
        fail(MINFER_ERR_UNSUPPORTED, "tokenizer.json: model.type %s is not supported (minfer reads byte-level BPE)",
             describe(mtype).c_str());
    if (flag(model, "byte_fallback"))
        fail(MINFER_ERR_UNSUPPORTED, "tokenizer.json: BPE with byte_fallback is not supported (byte-level BPE only)");
    if (flag(model, "ignore_merges")) fail(MINFER_ERR_UNSUPPORTED, "tokenizer.json: BPE with ignore_merges is not supported");
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
        if (const json::Value* v = member(model, k); v && !(v->is_string() && v->str().empty()))
            fail(MINFER_ERR_UNSUPPORTED, "tokenizer.json: BPE with %s %s is not supported", k, describe(v).c_str());
    if (const json::Value* v = member(model, "dropout"); v && v->number() != 0.0)
        fail(MINFER_ERR_UNSUPPORTED, "tokenizer.json: BPE with dropout is not supported");

    // NFC is accepted: GGUF has no key for it and Qwen's tokenizer.json carries it.
    if (const json::Value* n = member(tok, "normalizer"); n && type_of(n) != "NFC")
        fail(MINFER_ERR_UNSUPPORTED, "tokenizer.json: normalizer %s is not supported (none or NFC)", describe(n).c_str());
    check_pre_tokenizer(member(tok, "pre_tokenizer"));
    if (const json::Value* d = member(tok, "decoder"); d && type_of(d) != "ByteLevel")
        fail(MINFER_ERR_UNSUPPORTED, "tokenizer.json: decoder %s is not supported (ByteLevel)", describe(d).c_str());

    // The tokens: model.vocab, then the added tokens at their ids.
    const json::Value& vocab = required(model, "vocab", json::Type::object, "model");
    const json::Value* added = member(tok, "added_tokens");
    if (added && !added->is_array())
        fail(MINFER_ERR_BAD_MODEL, "tokenizer.json: added_tokens is %s, expected an array", describe(added).c_str());
    auto token_id = [](const json::Value& v, const char* where, const std::string& text) {
        int64_t id = -1;
        if (!v.as_int(&id) || id < 0 || id > kMaxTokenId)
            fail(MINFER_ERR_BAD_MODEL, "tokenizer.json: %s id of '%s' is not an integer in [0, %lld]", where,
                 text.substr(0, 80).c_str(), static_cast<long long>(kMaxTokenId));
        return static_cast<int32_t>(id);
    };
    int64_t n = 0;
    for (size_t i = 0; i < vocab.size(); ++i) n = std::max<int64_t>(n, token_id(vocab[i], "model.vocab", vocab.keys()[i]) + 1);
    if (added) {
        for (const json::Value& a : added->items()) {
            if (!a.is_object()) fail(MINFER_ERR_BAD_MODEL, "tokenizer.json: an added token is %s, expected an object", describe(&a).c_str());
            const json::Value& content = required(a, "content", json::Type::string, "an added token");
            n = std::max<int64_t>(n, token_id(required(a, "id", json::Type::number, "an added token"), "added_tokens", content.str()) + 1);
        }
    }
    Vocab out;
    out.tokens.resize(static_cast<size_t>(n));
    out.types.assign(static_cast<size_t>(n), 0);  // 0: no token yet
    for (size_t i = 0; i < vocab.size(); ++i) {
        const auto id = static_cast<size_t>(token_id(vocab[i], "model.vocab", vocab.keys()[i]));
        if (out.types[id] != 0)
            fail(MINFER_ERR_BAD_MODEL, "tokenizer.json: model.vocab gives id %zu to both '%s' and '%s'", id,
                 out.tokens[id].substr(0, 80).c_str(), vocab.keys()[i].substr(0, 80).c_str());
        if (vocab.keys()[i].empty()) fail(MINFER_ERR_BAD_MODEL, "tokenizer.json: model.vocab has an empty token (id %zu)", id);
        out.tokens[id] = vocab.keys()[i];
        out.types[id] = kTokNormal;
    }
    if (added) {
        for (const json::Value& a : added->items()) {
            const std::string& content = a.find("content")->str();
            const auto id = static_cast<size_t>(token_id(*a.find("id"), "added_tokens", content));
            if (content.empty()) fail(MINFER_ERR_BAD_MODEL, "tokenizer.json: added token %zu is empty", id);
            // An added token may repeat its vocab entry (same text, same id); anything else is a clash.
            if (out.types[id] != 0 && out.tokens[id] != content)
                fail(MINFER_ERR_BAD_MODEL, "tokenizer.json: added token '%s' has id %zu, which is '%s' already",
                     content.substr(0, 80).c_str(), id, out.tokens[id].substr(0, 80).c_str());
            out.tokens[id] = content;
            out.types[id] = flag(a, "special") ? kTokControl : kTokUserDefined;
        }
    }
    // Gaps become unused padding tokens.
    for (size_t id = 0; id < out.tokens.size(); ++id) {
        if (out.types[id] == 0) {
            out.tokens[id] = "[PAD" + std::to_string(id) + "]";
            out.types[id] = kTokUnused;
        }
    }

    // Text -> id; added tokens win over vocab entries of the same text.
    std::unordered_map<std::string_view, int32_t> ids;
    ids.reserve(out.tokens.size() * 2);
    for (int pass = 0; pass < 2; ++pass)
        for (size_t id = 0; id < out.tokens.size(); ++id)
            if ((out.types[id] == kTokControl || out.types[id] == kTokUserDefined) == (pass == 0))
                ids.emplace(out.tokens[id], static_cast<int32_t>(id));

    // Merges, by rank, as "a b": both halves and their concatenation must be tokens.
    if (const json::Value* merges = member(model, "merges")) {
        if (!merges->is_array())
            fail(MINFER_ERR_BAD_MODEL, "tokenizer.json: model.merges is %s, expected an array", describe(merges).c_str());
        out.merges.reserve(merges->size());
        std::string joined;
        for (size_t r = 0; r < merges->size(); ++r) {
            const json::Value& m = (*merges)[r];
            std::string_view a, b;
            if (m.is_string()) {
                const std::string& s = m.str();
                const size_t sp = s.find(' ');
                if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos)
                    fail(MINFER_ERR_BAD_MODEL, "tokenizer.json: merge %zu '%s' is not two tokens separated by one space", r,
                         s.substr(0, 80).c_str());
                a = std::string_view(s).substr(0, sp);
                b = std::string_view(s).substr(sp + 1);
            } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
                a = m[0].str();
                b = m[1].str();
                if (a.empty() || b.empty() || a.find(' ') != a.npos || b.find(' ') != b.npos)
                    fail(MINFER_ERR_BAD_MODEL, "tokenizer.json: merge %zu ['%.80s', '%.80s'] cannot be written as \"a b\"", r,
                         std::string(a).c_str(), std::string(b).c_str());
            } else {
                fail(MINFER_ERR_BAD_MODEL, "tokenizer.json: merge %zu is %s, expected \"a b\" or [a, b]", r, describe(&m).c_str());
            }
            joined.assign(a);
            joined += b;
            for (std::string_view part : {a, b, std::string_view(joined)})
                if (!ids.count(part))
                    fail(MINFER_ERR_BAD_MODEL, "tokenizer.json: merge %zu ('%.80s' + '%.80s') names '%.80s', which is not in the vocabulary",
                         r, std::string(a).c_str(), std::string(b).c_str(), std::string(part).c_str());
            std::string line;
            line.reserve(a.size() + 1 + b.size());
            line.append(a);
            line += ' ';
            line.append(b);
            out.merges.push_back(std::move(line));
        }
    }

    // Special ids and the chat template.
    if (cfg) {
        if (!cfg->is_object())
            fail(MINFER_ERR_BAD_MODEL, "tokenizer_config.json: the top level is %s, expected an object", describe(cfg).c_str());
        out.bos = config_token(*cfg, "bos_token", ids);
        out.eos = config_token(*cfg, "eos_token", ids);
        out.pad = config_token(*cfg, "pad_token", ids);
        if (const json::Value* t = member(*cfg, "chat_template")) {
            if (t->is_string()) {
                out.chat_template = t->str();
            } else if (t->is_array()) {
                // The list form: [{"name": ..., "template": ...}]; the one named "default" is the chat template.
                for (const json::Value& e : t->items()) {
                    const json::Value* name = e.is_object() ? member(e, "name") : nullptr;
                    const json::Value* text = e.is_object() ? member(e, "template") : nullptr;
                    if (name && name->is_string() && name->str() == "default" && text && text->is_string())
                        out.chat_template = text->str();
                }
            } else {
                fail(MINFER_ERR_BAD_MODEL, "tokenizer_config.json: chat_template is %s, expected a string", describe(t).c_str());
            }
        }
    }
    if (out.eos < 0)
        if (const auto it = ids.find("<|endoftext|>"); it != ids.end()) out.eos = it->second;
    return out;
}

namespace {

// The preset of that name after checking it and the mix; throws Error(INVALID_ARGUMENT).
const Preset& checked_preset(const std::string& preset_name, const std::string& mix) {
    const Preset* p = find_preset(preset_name);
    if (!p) {
        std::string known;
        for (const Preset& q : kPresets) known += (known.empty() ? "" : ", ") + std::string(q.name);
        fail(MINFER_ERR_INVALID_ARGUMENT, "unknown preset '%s' (known: %s)", preset_name.c_str(), known.c_str());
    }
    mix_type(mix, Class::matmul, "", 0, 1, 256);  // validates the mix before any work
    return *p;
}

// Built-in byte-level vocabulary: 256 byte tokens and the Qwen special tokens.
Vocab builtin_vocab() {
    Vocab v;
    for (int b = 0; b < 256; ++b) {
        v.tokens.push_back(tokenizer::byte_symbol(static_cast<uint8_t>(b)));
        v.types.push_back(kTokNormal);
    }
    const int32_t endoftext = static_cast<int32_t>(v.tokens.size());
    for (const char* s : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
        v.tokens.emplace_back(s);
        v.types.push_back(kTokControl);
    }
    v.bos = endoftext;
    v.eos = endoftext + 2;
    v.pad = endoftext;
    return v;
}

void write_impl(const std::string& path, const Preset* p, const std::string& mix, uint64_t seed, Vocab vocab) {

    gguf::Writer w;
    const std::string a = p->arch;
    w.set_string("general.architecture", a);
    w.set_string("general.name", std::string("minfer synthetic ") + p->name + " " + mix + " (random weights)");
    w.set_string("minfer.synth.preset", p->name);
    w.set_string("minfer.synth.mix", mix);
    w.set_u64("minfer.synth.seed", seed);
    w.set_u32(a + ".context_length", static_cast<uint32_t>(p->n_ctx_train));
    w.set_u32(a + ".embedding_length", static_cast<uint32_t>(p->n_embd));
    w.set_u32(a + ".block_count", static_cast<uint32_t>(p->n_layer));
    w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(p->n_ff));
    w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(p->n_head));
    w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(p->n_head_kv));
    if (p->head_dim * p->n_head != p->n_embd || std::string(p->arch) == "qwen3") {
        w.set_u32(a + ".attention.key_length", static_cast<uint32_t>(p->head_dim));
        w.set_u32(a + ".attention.value_length", static_cast<uint32_t>(p->head_dim));
    }
    w.set_f32(a + ".rope.freq_base", static_cast<float>(p->rope_freq_base));
    w.set_f32(a + ".attention.layer_norm_rms_epsilon", static_cast<float>(p->rms_norm_eps));

    // The vocabulary, padded with unused tokens up to the embedding rows (as converters pad real Qwen
    // vocabularies): the preset's vocabulary size, or more when the vocabulary is larger.
    const int32_t n_vocab = std::max(p->n_vocab, static_cast<int32_t>(vocab.tokens.size()));
    pad_vocab(vocab, static_cast<size_t>(n_vocab));
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "qwen2");
    w.set_array_strings("tokenizer.ggml.tokens", vocab.tokens);
    w.set_array("tokenizer.ggml.token_type", gguf::ValueType::I32, vocab.types.data(), vocab.types.size());
    w.set_array_strings("tokenizer.ggml.merges", vocab.merges);
    if (vocab.bos >= 0) w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(vocab.bos));
    if (vocab.eos >= 0) w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(vocab.eos));
    if (vocab.pad >= 0) w.set_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(vocab.pad));
    w.set_bool("tokenizer.ggml.add_bos_token", false);
    if (!vocab.chat_template.empty()) w.set_string("tokenizer.chat_template", vocab.chat_template);
    vocab = Vocab();  // the tensors' data is written next; the writer holds its own copy

    const int64_t d = p->n_embd, q = int64_t{p->n_head} * p->head_dim, kv = int64_t{p->n_head_kv} * p->head_dim;
    std::vector<Spec> specs;
    int layer = 0;
    auto add = [&](std::string name, Class cls, std::vector<int64_t> dims) {
        const int32_t type = mix_type(mix, cls, name, layer, p->n_layer, dims[0]);
        specs.push_back({std::move(name), cls, std::move(dims), type});
    };
    add("token_embd.weight", p->tied ? Class::output : Class::embedding, {d, n_vocab});
    for (int i = 0; i < p->n_layer; ++i) {
        layer = i;
        const std::string b = "blk." + std::to_string(i) + ".";
        add(b + "attn_norm.weight", Class::norm, {d});
        add(b + "attn_q.weight", Class::matmul, {d, q});
        add(b + "attn_k.weight", Class::matmul, {d, kv});
        add(b + "attn_v.weight", Class::matmul, {d, kv});
        if (a == "qwen2") {
            add(b + "attn_q.bias", Class::bias, {q});
            add(b + "attn_k.bias", Class::bias, {kv});
            add(b + "attn_v.bias", Class::bias, {kv});
        } else {
            add(b + "attn_q_norm.weight", Class::norm, {p->head_dim});
            add(b + "attn_k_norm.weight", Class::norm, {p->head_dim});
        }
        add(b + "attn_output.weight", Class::matmul, {q, d});
        add(b + "ffn_norm.weight", Class::norm, {d});
        add(b + "ffn_gate.weight", Class::matmul, {d, p->n_ff});
        add(b + "ffn_up.weight", Class::matmul, {d, p->n_ff});
        add(b + "ffn_down.weight", Class::matmul, {p->n_ff, d});
    }
    add("output_norm.weight", Class::norm, {d});
    if (!p->tied) add("output.weight", Class::output, {d, n_vocab});

    FillState st{&specs, seed};
    for (const Spec& s : specs) {
        size_t i = w.add_tensor(s.name, s.type, s.dims);
        st.total += w.tensor_bytes(i);
    }
    report_progress("synth", 0, st.total);
    w.write_file(path, fill_tensor, &st);
}

}  // namespace

void write_model(const std::string& path, const std::string& preset_name, const std::string& mix, uint64_t seed) {
    const Preset& p = checked_preset(preset_name, mix);
    write_impl(path, &p, mix, seed, builtin_vocab());
}

void write_model_vocab(const std::string& path, const std::string& preset_name, const std::string& mix, uint64_t seed,
                       const std::string& tokenizer_json, const std::string& tokenizer_config_json) {
    const Preset& p = checked_preset(preset_name, mix);
    json::ParseOptions opts;
    opts.name = tokenizer_json.c_str();
    Vocab vocab;
    {
        const json::Value tok = json::parse_file(tokenizer_json, opts);
        if (tokenizer_config_json.empty()) {
            vocab = import_hf_vocab(tok, nullptr);
        } else {
            opts.name = tokenizer_config_json.c_str();
            const json::Value cfg = json::parse_file(tokenizer_config_json, opts);
            vocab = import_hf_vocab(tok, &cfg);
        }
    }
    write_impl(path, &p, mix, seed, std::move(vocab));
}

}  // namespace minfer::synth
