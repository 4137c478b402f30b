// Shared test helpers: temporary paths, a raw byte builder for hand-made (and deliberately broken) GGUF
// files, and a builder of small valid Qwen models with hooks to break one thing at a time.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "minfer.h"
#include "quant/types.h"

namespace test {

// A fresh seed for a test's random inputs, or MINFER_TEST_SEED when set (to replay a failure). Callers
// CAPTURE it, so a failing check prints the seed that made it.
inline uint64_t seed() {
    if (const char* s = std::getenv("MINFER_TEST_SEED")) return std::strtoull(s, nullptr, 0);
    return std::random_device{}();
}

inline std::string tmp_path(const std::string& name) { return std::string(MINFER_TEST_TMPDIR) + "/" + name; }

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
    FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    if (!b.empty()) REQUIRE(std::fwrite(b.data(), 1, b.size(), f) == b.size());
    std::fclose(f);
}

// Little-endian byte builder that follows the GGUF specification field by field. It writes whatever it
// is told, valid or not; it shares no code with gguf::Writer.
struct Raw {
    std::vector<uint8_t> b;

    Raw& u8(uint8_t v) { b.push_back(v); return *this; }
    Raw& u16(uint16_t v) { return le(v, 2); }
    Raw& u32(uint32_t v) { return le(v, 4); }
    Raw& u64(uint64_t v) { return le(v, 8); }
    Raw& f32(float v) { uint32_t u; std::memcpy(&u, &v, 4); return le(u, 4); }
    Raw& f64(double v) { uint64_t u; std::memcpy(&u, &v, 8); return le(u, 8); }
    Raw& str(const std::string& s) { u64(s.size()); b.insert(b.end(), s.begin(), s.end()); return *this; }
    Raw& bytes(const void* p, size_t n) { auto* c = static_cast<const uint8_t*>(p); b.insert(b.end(), c, c + n); return *this; }
    Raw& pad_to(size_t alignment) { while (b.size() % alignment) b.push_back(0); return *this; }
    Raw& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
        b.insert(b.end(), {'G', 'G', 'U', 'F'});
        return u32(version).u64(n_tensors).u64(n_kv);
    }
    // A metadata pair: key, type (GGUF value type ids: u32 = 4, string = 8, array = 9, ...).
    Raw& kv_u32(const std::string& k, uint32_t v) { return str(k).u32(4).u32(v); }
    Raw& kv_str(const std::string& k, const std::string& v) { return str(k).u32(8).str(v); }
    Raw& tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
        str(name).u32(static_cast<uint32_t>(dims.size()));
        for (uint64_t d : dims) u64(d);
        return u32(type).u64(offset);
    }

private:
    Raw& le(uint64_t v, int n) {
        for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
        return *this;
    }
};

// Parses bytes and returns the error; fails the test when parsing succeeds.
inline minfer::Error parse_error(const std::vector<uint8_t>& bytes) {
    try {
        minfer::gguf::File::parse(minfer::gguf::copy_bytes(bytes));
    } catch (const minfer::Error& e) {
        return e;
    }
    FAIL("the file was accepted");
    return minfer::Error(MINFER_OK, "");
}

// A small Qwen model, built with gguf::Writer and f32 weights unless told otherwise. Each field can be
// changed before build() to produce one specific defect.
struct TinyModel {
    std::string arch = "qwen2";
    int64_t n_vocab = 64, n_ctx = 256, n_embd = 32, n_layer = 2, n_head = 4, n_head_kv = 2, head_dim = 8, n_ff = 64;
    bool tied = false;
    bool write_key_length = false;
    int32_t matmul_type = 0;  // f32
    std::set<std::string> skip_tensors;
    std::map<std::string, std::vector<int64_t>> shape_override;
    std::map<std::string, int32_t> type_override;
    std::function<void(minfer::gguf::Writer&)> meta_hook;   // runs after the standard keys
    std::set<std::string> skip_keys;
    uint64_t seed = 7;

    std::vector<uint8_t> build() const {
        using minfer::gguf::ValueType;
        minfer::gguf::Writer w;
        const std::string a = arch;
        auto keep = [&](const std::string& k) { return skip_keys.count(k) == 0; };
        if (keep("general.architecture")) w.set_string("general.architecture", a);
        w.set_string("general.name", "tiny test model");
        if (keep(a + ".context_length")) w.set_u32(a + ".context_length", static_cast<uint32_t>(n_ctx));
        if (keep(a + ".embedding_length")) w.set_u32(a + ".embedding_length", static_cast<uint32_t>(n_embd));
        if (keep(a + ".block_count")) w.set_u32(a + ".block_count", static_cast<uint32_t>(n_layer));
        if (keep(a + ".feed_forward_length")) w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(n_ff));
        if (keep(a + ".attention.head_count")) w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(n_head));
        if (keep(a + ".attention.head_count_kv")) w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(n_head_kv));
        if (write_key_length || arch == "qwen3") w.set_u32(a + ".attention.key_length", static_cast<uint32_t>(head_dim));
        w.set_f32(a + ".rope.freq_base", 10000.0f);
        w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
        std::vector<std::string> tokens;
        std::vector<int32_t> types;
        for (int64_t i = 0; i < n_vocab; ++i) {
            tokens.push_back("t" + std::to_string(i));
            types.push_back(1);
        }
        w.set_string("tokenizer.ggml.model", "gpt2");
        if (keep("tokenizer.ggml.tokens")) w.set_array_strings("tokenizer.ggml.tokens", tokens);
        w.set_array("tokenizer.ggml.token_type", ValueType::I32, types.data(), types.size());
        w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(n_vocab - 1));
        if (meta_hook) meta_hook(w);

        const int64_t q = n_head * head_dim, kv = n_head_kv * head_dim;
        std::mt19937_64 rng(seed);
        auto add = [&](const std::string& name, std::vector<int64_t> dims, bool matmul) {
            if (skip_tensors.count(name)) return;
            if (auto it = shape_override.find(name); it != shape_override.end()) dims = it->second;
            int32_t type = matmul ? matmul_type : 0;
            if (auto it = type_override.find(name); it != type_override.end()) type = it->second;
            const auto& info = minfer::quant::type_info(type);
            uint64_t n = 1;
            for (int64_t d : dims) n *= static_cast<uint64_t>(d);
            std::vector<uint8_t> data(n / static_cast<uint64_t>(info.block_elems) * static_cast<uint64_t>(info.block_bytes));
            if (type == 0) {
                std::normal_distribution<float> nd(0.0f, 0.02f);
                for (uint64_t i = 0; i < n; ++i) {
                    float v = nd(rng) + (matmul ? 0.0f : 1.0f);
                    std::memcpy(data.data() + 4 * i, &v, 4);
                }
            } else {
                for (auto& x : data) x = static_cast<uint8_t>(rng() & 0x3f);  // small exponents, no NaN
            }
            w.add_tensor(name, type, dims, data);
        };
        add("token_embd.weight", {n_embd, n_vocab}, true);
        for (int64_t i = 0; i < n_layer; ++i) {
            const std::string b = "blk." + std::to_string(i) + ".";
            add(b + "attn_norm.weight", {n_embd}, false);
            add(b + "attn_q.weight", {n_embd, q}, true);
            add(b + "attn_k.weight", {n_embd, kv}, true);
            add(b + "attn_v.weight", {n_embd, kv}, true);
            if (arch == "qwen2") {
                add(b + "attn_q.bias", {q}, false);
                add(b + "attn_k.bias", {kv}, false);
                add(b + "attn_v.bias", {kv}, false);
            } else {
                add(b + "attn_q_norm.weight", {head_dim}, false);
                add(b + "attn_k_norm.weight", {head_dim}, false);
            }
            add(b + "attn_output.weight", {q, n_embd}, true);
            add(b + "ffn_norm.weight", {n_embd}, false);
            add(b + "ffn_gate.weight", {n_embd, n_ff}, true);
            add(b + "ffn_up.weight", {n_embd, n_ff}, true);
            add(b + "ffn_down.weight", {n_ff, n_embd}, true);
        }
        add("output_norm.weight", {n_embd}, false);
        if (!tied) add("output.weight", {n_embd, n_vocab}, true);
        return w.to_bytes();
    }
};

// Opens `bytes` through the public API (written to a file named `name`), returns the status and sets
// *message to minfer_last_error().
inline minfer_status open_bytes(const std::vector<uint8_t>& bytes, const std::string& name, std::string* message,
                                minfer_model** keep = nullptr) {
    const std::string path = tmp_path(name);
    write_bytes(path, bytes);
    minfer_model* m = nullptr;
    const char* keys[] = {"device"};
    const char* values[] = {"cpu"};
    minfer_status st = minfer_open_with_options(path.c_str(), keys, values, 1, &m);
    if (message) *message = st == MINFER_OK ? "" : minfer_last_error();
    if (keep)
        *keep = m;
    else
        minfer_close(m);
    return st;
}

}  // namespace test
