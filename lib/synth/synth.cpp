#include "synth/synth.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "quant/types.h"

namespace minfer::synth {
namespace {

// Shapes of the published models (hidden size, feed-forward size, layers, heads, kv heads, head dim,
// vocabulary, tied output), plus tiny ones whose rows are whole K-quant super-blocks.
constexpr Preset kPresets[] = {
    {"qwen2-tiny", "qwen2", 512, 2048, 256, 2, 4, 2, 64, 512, false, 1000000.0, 1e-6},
    {"qwen2-tiny-tied", "qwen2", 512, 2048, 256, 2, 4, 2, 64, 512, true, 1000000.0, 1e-6},
    {"qwen3-tiny", "qwen3", 512, 2048, 256, 2, 4, 2, 128, 512, true, 1000000.0, 1e-6},
    {"qwen2-0.5b", "qwen2", 151936, 32768, 896, 24, 14, 2, 64, 4864, true, 1000000.0, 1e-6},
    {"qwen2-1.5b", "qwen2", 151936, 32768, 1536, 28, 12, 2, 128, 8960, true, 1000000.0, 1e-6},
    {"qwen2-7b", "qwen2", 152064, 32768, 3584, 28, 28, 4, 128, 18944, false, 1000000.0, 1e-6},
    {"qwen3-0.6b", "qwen3", 151936, 40960, 1024, 28, 16, 8, 128, 3072, true, 1000000.0, 1e-6},
    {"qwen3-8b", "qwen3", 151936, 40960, 4096, 36, 32, 8, 128, 12288, false, 1000000.0, 1e-6},
};

// Token types as GGUF defines them.
constexpr int32_t kTokNormal = 1, kTokControl = 3, kTokUnused = 5;

// The GPT-2 byte-level alphabet: printable bytes stand for themselves, the rest map to U+0100 onwards.
std::string byte_token(int b) {
    int cp;
    if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)) {
        cp = b;
    } else {
        int n = 0;
        for (int x = 0; x < b; ++x)
            if (!((x >= 0x21 && x <= 0x7e) || (x >= 0xa1 && x <= 0xac) || (x >= 0xae && x <= 0xff))) ++n;
        cp = 256 + n;
    }
    std::string s;
    if (cp < 0x80) {
        s += static_cast<char>(cp);
    } else {
        s += static_cast<char>(0xc0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3f));
    }
    return s;
}

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
    const unsigned n_threads = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
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

}  // namespace

std::span<const Preset> presets() { return kPresets; }

const Preset* find_preset(const std::string& name) {
    for (const Preset& p : kPresets)
        if (name == p.name) return &p;
    return nullptr;
}

void write_model(const std::string& path, const std::string& preset_name, const std::string& mix, uint64_t seed) {
    const Preset* p = find_preset(preset_name);
    if (!p) {
        std::string known;
        for (const Preset& q : kPresets) known += (known.empty() ? "" : ", ") + std::string(q.name);
        fail(MINFER_ERR_INVALID_ARGUMENT, "unknown preset '%s' (known: %s)", preset_name.c_str(), known.c_str());
    }
    mix_type(mix, Class::matmul, "", 0, 1, 256);  // validates the mix before any work

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

    // Built-in byte-level vocabulary: 256 byte tokens, the Qwen special tokens, then padding up to the
    // preset's vocabulary size (as converters pad real Qwen vocabularies to the embedding rows).
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    for (int b = 0; b < 256; ++b) {
        tokens.push_back(byte_token(b));
        types.push_back(kTokNormal);
    }
    const int32_t endoftext = static_cast<int32_t>(tokens.size());
    for (const char* s : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
        tokens.emplace_back(s);
        types.push_back(kTokControl);
    }
    while (tokens.size() < static_cast<size_t>(p->n_vocab)) {
        tokens.push_back("[PAD" + std::to_string(tokens.size()) + "]");
        types.push_back(kTokUnused);
    }
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "qwen2");
    w.set_array_strings("tokenizer.ggml.tokens", tokens);
    w.set_array("tokenizer.ggml.token_type", gguf::ValueType::I32, types.data(), types.size());
    w.set_array_strings("tokenizer.ggml.merges", {});
    w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(endoftext));
    w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(endoftext + 2));
    w.set_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(endoftext));
    w.set_bool("tokenizer.ggml.add_bos_token", false);

    const int64_t d = p->n_embd, q = int64_t{p->n_head} * p->head_dim, kv = int64_t{p->n_head_kv} * p->head_dim;
    std::vector<Spec> specs;
    int layer = 0;
    auto add = [&](std::string name, Class cls, std::vector<int64_t> dims) {
        const int32_t type = mix_type(mix, cls, name, layer, p->n_layer, dims[0]);
        specs.push_back({std::move(name), cls, std::move(dims), type});
    };
    add("token_embd.weight", p->tied ? Class::output : Class::embedding, {d, p->n_vocab});
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
    if (!p->tied) add("output.weight", Class::output, {d, p->n_vocab});

    FillState st{&specs, seed};
    for (const Spec& s : specs) {
        size_t i = w.add_tensor(s.name, s.type, s.dims);
        st.total += w.tensor_bytes(i);
    }
    report_progress("synth", 0, st.total);
    w.write_file(path, fill_tensor, &st);
}

}  // namespace minfer::synth
