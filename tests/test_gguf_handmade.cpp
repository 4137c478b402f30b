// A complete Qwen3 model written byte by byte from the GGUF specification (no gguf::Writer involved),
// read through the public API. tests/make_handmade_gguf.py does the same in another language for the
// `minfer info` test.
#include <doctest/doctest.h>

#include "helpers.h"

using test::Raw;

namespace {

// n_embd 16, 1 layer, 2 heads of head_dim 16 (so n_head * head_dim = 32 != n_embd), 1 kv head, n_ff 32,
// vocabulary 20, tied output, f16 matmul weights.
std::vector<uint8_t> handmade_qwen3(uint32_t version) {
    struct T {
        const char* name;
        std::vector<uint64_t> dims;
        uint32_t type;
    };
    const std::vector<T> tensors = {
        {"token_embd.weight", {16, 20}, 1},        {"blk.0.attn_norm.weight", {16}, 0},
        {"blk.0.attn_q.weight", {16, 32}, 1},      {"blk.0.attn_k.weight", {16, 16}, 1},
        {"blk.0.attn_v.weight", {16, 16}, 1},      {"blk.0.attn_q_norm.weight", {16}, 0},
        {"blk.0.attn_k_norm.weight", {16}, 0},     {"blk.0.attn_output.weight", {32, 16}, 1},
        {"blk.0.ffn_norm.weight", {16}, 0},        {"blk.0.ffn_gate.weight", {16, 32}, 1},
        {"blk.0.ffn_up.weight", {16, 32}, 1},      {"blk.0.ffn_down.weight", {32, 16}, 1},
        {"output_norm.weight", {16}, 0},
    };
    Raw r;
    const uint64_t n_kv = 14;
    r.header(version, tensors.size(), n_kv);
    r.kv_str("general.architecture", "qwen3");
    r.kv_str("general.name", "byte by byte");
    r.str("qwen3.context_length").u32(10).u64(8192);         // u64 on purpose
    r.str("qwen3.embedding_length").u32(5).u32(16);          // i32 on purpose
    r.kv_u32("qwen3.block_count", 1);
    r.kv_u32("qwen3.feed_forward_length", 32);
    r.str("qwen3.attention.head_count").u32(2).u16(2);       // u16 on purpose
    r.kv_u32("qwen3.attention.head_count_kv", 1);
    r.kv_u32("qwen3.attention.key_length", 16);
    r.str("qwen3.rope.freq_base").u32(12).f64(500000.0);     // f64 on purpose
    r.str("qwen3.attention.layer_norm_rms_epsilon").u32(6).f32(1e-5f);
    r.kv_str("tokenizer.ggml.model", "gpt2");
    r.str("tokenizer.ggml.tokens").u32(9).u32(8).u64(20);
    for (int i = 0; i < 20; ++i) r.str("tok" + std::to_string(i));
    r.str("tokenizer.ggml.eos_token_id").u32(4).u32(19);
    uint64_t offset = 0;
    std::vector<uint64_t> sizes;
    for (const T& t : tensors) {
        uint64_t n = 1;
        for (uint64_t d : t.dims) n *= d;
        sizes.push_back(n * (t.type == 0 ? 4 : 2));
        r.tensor(t.name, t.dims, t.type, offset);
        offset += (sizes.back() + 31) / 32 * 32;
    }
    r.pad_to(32);
    for (size_t i = 0; i < tensors.size(); ++i) {
        std::vector<uint8_t> data(sizes[i]);
        for (size_t k = 0; k < data.size(); ++k) data[k] = static_cast<uint8_t>(tensors[i].type == 0 ? 0 : (k * 13 + i) & 0x3b);
        if (tensors[i].type == 0)
            for (size_t k = 0; k < data.size(); k += 4) {
                float one = 1.0f;
                std::memcpy(&data[k], &one, 4);
            }
        r.bytes(data.data(), data.size());
        if (i + 1 < tensors.size()) r.pad_to(32);
    }
    return r.b;
}

}  // namespace

TEST_SUITE("gguf_handmade") {
    TEST_CASE("a hand-made v2 and v3 Qwen3 file opens with the right hyperparameters and tensors") {
        for (uint32_t version : {2u, 3u}) {
            CAPTURE(version);
            minfer_model* m = nullptr;
            std::string msg;
            REQUIRE_MESSAGE(test::open_bytes(handmade_qwen3(version), "handmade-v" + std::to_string(version) + ".gguf", &msg, &m) ==
                                MINFER_OK,
                            msg);
            CHECK(std::string(minfer_model_architecture(m)) == "qwen3");
            CHECK(std::string(minfer_model_name(m)) == "byte by byte");
            CHECK(minfer_model_n_ctx_train(m) == 8192);
            CHECK(minfer_model_n_embd(m) == 16);
            CHECK(minfer_model_n_head(m) == 2);
            CHECK(minfer_model_n_head_kv(m) == 1);
            CHECK(minfer_model_head_dim(m) == 16);
            CHECK(minfer_model_n_ff(m) == 32);
            CHECK(minfer_model_n_vocab(m) == 20);
            CHECK(minfer_model_tied_output(m) == 1);
            CHECK(minfer_model_rope_freq_base(m) == 500000.0);
            CHECK(minfer_model_rms_norm_eps(m) == doctest::Approx(1e-5));
            // 16*20 + 16 + 16*32 + 16*16*2 + 16*2 + 32*16 + 16 + 16*32*3 + 16
            CHECK(minfer_model_n_params(m) == 320 + 16 + 512 + 512 + 32 + 512 + 16 + 1536 + 16);
            CHECK(minfer_model_tensor_count(m) == 13);
            int32_t types[4];
            size_t n = 0;
            REQUIRE(minfer_model_tensor_types(m, types, 4, &n) == MINFER_OK);
            REQUIRE(n == 2);
            CHECK(types[0] == 0);
            CHECK(types[1] == 1);
            const char* name = nullptr;
            int32_t type = -1, nd = 0;
            int64_t dims[4];
            uint64_t off = 0, nb = 0;
            REQUIRE(minfer_model_tensor_info(m, 2, &name, &type, &nd, dims, &off, &nb) == MINFER_OK);
            CHECK(std::string(name) == "blk.0.attn_q.weight");
            CHECK(type == 1);
            CHECK(nd == 2);
            CHECK(dims[0] == 16);
            CHECK(dims[1] == 32);
            CHECK(dims[2] == 1);
            CHECK(nb == 1024);
            CHECK(off % 32 == 0);
            int64_t ctx = 0;
            CHECK(minfer_model_meta_int(m, "qwen3.context_length", &ctx) == MINFER_OK);
            CHECK(ctx == 8192);
            minfer_close(m);
        }
    }
}
