// Model-level validation: hyperparameters, tensor plan, vocabulary. One defect per case, each asserting
// the status and that the message names the key or tensor. Files go through the public minfer_open.
#include <doctest/doctest.h>

#include "helpers.h"
#include "model/config.h"

using test::TinyModel;

namespace {

void expect(const TinyModel& tm, const char* name, minfer_status want, const std::string& needle) {
    std::string msg;
    minfer_status st = test::open_bytes(tm.build(), std::string("model-") + name + ".gguf", &msg);
    CHECK_MESSAGE(st == want, name, ": got ", minfer_status_string(st), " '", msg, "'");
    CHECK_MESSAGE(msg.find(needle) != std::string::npos, name, ": message '", msg, "' lacks '", needle, "'");
}

}  // namespace

TEST_SUITE("model") {
    TEST_CASE("valid tiny models open and report their hyperparameters") {
        for (const char* arch : {"qwen2", "qwen3"}) {
            const std::string label = arch;
            CAPTURE(label);
            TinyModel tm;
            tm.arch = arch;
            if (tm.arch == "qwen3") tm.head_dim = 16;  // qwen3: head_dim * n_head (64) != n_embd (32)
            minfer_model* m = nullptr;
            std::string msg;
            REQUIRE_MESSAGE(test::open_bytes(tm.build(), std::string("model-ok-") + arch + ".gguf", &msg, &m) == MINFER_OK, msg);
            CHECK(std::string(minfer_model_architecture(m)) == arch);
            CHECK(minfer_model_n_vocab(m) == 64);
            CHECK(minfer_model_n_ctx_train(m) == 256);
            CHECK(minfer_model_n_embd(m) == 32);
            CHECK(minfer_model_n_layer(m) == 2);
            CHECK(minfer_model_n_head(m) == 4);
            CHECK(minfer_model_n_head_kv(m) == 2);
            CHECK(minfer_model_head_dim(m) == tm.head_dim);
            CHECK(minfer_model_n_ff(m) == 64);
            CHECK(minfer_model_tied_output(m) == 0);
            CHECK(minfer_model_rope_freq_base(m) == doctest::Approx(10000.0));
            CHECK(minfer_model_rms_norm_eps(m) == doctest::Approx(1e-6).epsilon(1e-6));
            minfer_close(m);
        }
    }

    TEST_CASE("a tied model uses the token embedding as output") {
        TinyModel tm;
        tm.tied = true;
        minfer_model* m = nullptr;
        REQUIRE(test::open_bytes(tm.build(), "model-tied.gguf", nullptr, &m) == MINFER_OK);
        CHECK(minfer_model_tied_output(m) == 1);
        minfer_close(m);
    }

    TEST_CASE("unknown architecture") {
        TinyModel tm;
        tm.arch = "llama";
        expect(tm, "arch-llama", MINFER_ERR_UNSUPPORTED, "unsupported architecture 'llama'");
        TinyModel missing;
        missing.skip_keys = {"general.architecture"};
        expect(missing, "arch-missing", MINFER_ERR_BAD_MODEL, "'general.architecture' is missing");
        TinyModel wrong;
        wrong.meta_hook = [](minfer::gguf::Writer& w) { w.set_u32("general.architecture", 2); };
        expect(wrong, "arch-wrong-type", MINFER_ERR_BAD_MODEL, "'general.architecture' has type u32");
    }

    TEST_CASE("zero or absurd layer and head counts") {
        TinyModel a;
        a.meta_hook = [](minfer::gguf::Writer& w) { w.set_u32("qwen2.block_count", 0); };
        expect(a, "layers-0", MINFER_ERR_BAD_MODEL, "qwen2.block_count' = 0 is outside");
        TinyModel b;
        b.meta_hook = [](minfer::gguf::Writer& w) { w.set_u32("qwen2.block_count", 1000000); };
        expect(b, "layers-absurd", MINFER_ERR_BAD_MODEL, "qwen2.block_count' = 1000000 is outside");
        TinyModel c;
        c.meta_hook = [](minfer::gguf::Writer& w) { w.set_u32("qwen2.attention.head_count", 0); };
        expect(c, "heads-0", MINFER_ERR_BAD_MODEL, "attention.head_count' = 0");
        TinyModel d;
        d.meta_hook = [](minfer::gguf::Writer& w) { w.set_u32("qwen2.attention.head_count_kv", 0); };
        expect(d, "kv-heads-0", MINFER_ERR_BAD_MODEL, "attention.head_count_kv' = 0");
        TinyModel e;
        e.meta_hook = [](minfer::gguf::Writer& w) { w.set_i32("qwen2.embedding_length", -32); };
        expect(e, "embd-negative", MINFER_ERR_BAD_MODEL, "embedding_length' = -32 is outside");
        TinyModel f;
        f.meta_hook = [](minfer::gguf::Writer& w) { w.set_u64("qwen2.context_length", ~uint64_t{0}); };
        expect(f, "ctx-u64-max", MINFER_ERR_BAD_MODEL, "context_length' = 18446744073709551615 is outside");
        TinyModel g;
        g.skip_keys = {"qwen2.block_count"};
        expect(g, "layers-missing", MINFER_ERR_BAD_MODEL, "required key 'qwen2.block_count' is missing");
    }

    TEST_CASE("known keys with the wrong type") {
        TinyModel a;
        a.meta_hook = [](minfer::gguf::Writer& w) { w.set_string("qwen2.block_count", "2"); };
        expect(a, "layers-string", MINFER_ERR_BAD_MODEL, "'qwen2.block_count' has type string, expected an integer");
        TinyModel b;
        b.meta_hook = [](minfer::gguf::Writer& w) { w.set_u32("qwen2.rope.freq_base", 10000); };
        expect(b, "rope-u32", MINFER_ERR_BAD_MODEL, "'qwen2.rope.freq_base' has type u32, expected f32 or f64");
        TinyModel c;
        c.meta_hook = [](minfer::gguf::Writer& w) { w.set_f32("qwen2.attention.layer_norm_rms_epsilon", -1.0f); };
        expect(c, "eps-negative", MINFER_ERR_BAD_MODEL, "layer_norm_rms_epsilon' = -1 is outside");
        TinyModel d;
        d.meta_hook = [](minfer::gguf::Writer& w) { w.set_f32("qwen2.rope.freq_base", NAN); };
        expect(d, "rope-nan", MINFER_ERR_BAD_MODEL, "rope.freq_base' = nan");
        TinyModel e;
        e.meta_hook = [](minfer::gguf::Writer& w) { w.set_u32("tokenizer.ggml.model", 1); };
        expect(e, "tokenizer-model-u32", MINFER_ERR_BAD_MODEL, "'tokenizer.ggml.model' has type u32, expected string");
        TinyModel f;
        f.meta_hook = [](minfer::gguf::Writer& w) {
            int32_t x[3] = {1, 2, 3};
            w.set_array("tokenizer.ggml.tokens", minfer::gguf::ValueType::I32, x, 3);
        };
        expect(f, "tokens-i32", MINFER_ERR_BAD_MODEL, "'tokenizer.ggml.tokens' has type array of i32, expected array of string");
        TinyModel g;
        g.meta_hook = [](minfer::gguf::Writer& w) { w.set_u8("general.alignment", 32); };
        expect(g, "alignment-u8", MINFER_ERR_BAD_MODEL, "general.alignment' has type u8, expected u32");
    }

    TEST_CASE("head_count not a multiple of head_count_kv") {
        TinyModel tm;
        tm.n_head_kv = 3;
        expect(tm, "gqa-3", MINFER_ERR_BAD_MODEL, "head_count = 4 is not a multiple of attention.head_count_kv = 3");
    }

    TEST_CASE("inconsistent embedding and head sizes") {
        TinyModel a;
        a.n_head = 5;  // 32 % 5 != 0, no key_length
        a.n_head_kv = 5;
        a.head_dim = 6;
        expect(a, "embd-heads", MINFER_ERR_BAD_MODEL, "embedding_length = 32 is not divisible by attention.head_count = 5");
        TinyModel b;
        b.write_key_length = true;
        b.head_dim = 16;  // qwen2 with n_head * head_dim = 64 != n_embd = 32
        expect(b, "qwen2-hd", MINFER_ERR_BAD_MODEL, "head_count * key_length = 4 * 16 differs from embedding_length = 32");
        TinyModel c;
        c.write_key_length = true;
        c.arch = "qwen3";
        c.head_dim = 7;
        expect(c, "odd-head-dim", MINFER_ERR_BAD_MODEL, "key_length = 7 is odd");
    }

    TEST_CASE("missing required tensors") {
        for (const char* t : {"token_embd.weight", "output_norm.weight", "blk.1.attn_q.weight", "blk.0.ffn_down.weight",
                              "blk.1.attn_v.bias", "blk.0.attn_norm.weight"}) {
            const std::string label = t;
            CAPTURE(label);
            TinyModel tm;
            tm.skip_tensors = {t};
            expect(tm, (std::string("missing-") + t).c_str(), MINFER_ERR_BAD_MODEL, std::string("required tensor '") + t + "' is missing");
        }
        TinyModel q3;
        q3.arch = "qwen3";
        q3.skip_tensors = {"blk.0.attn_k_norm.weight"};
        expect(q3, "missing-k-norm", MINFER_ERR_BAD_MODEL, "required tensor 'blk.0.attn_k_norm.weight' is missing");
    }

    TEST_CASE("wrong shapes and types for the hyperparameters") {
        TinyModel a;
        a.shape_override["blk.0.attn_k.weight"] = {32, 32};  // should be [32, 16]
        expect(a, "shape-k", MINFER_ERR_BAD_MODEL, "tensor 'blk.0.attn_k.weight' has shape [32, 32, 1, 1], expected [32, 16]");
        TinyModel b;
        b.shape_override["output.weight"] = {32, 63};
        expect(b, "shape-output", MINFER_ERR_BAD_MODEL, "tensor 'output.weight' has shape [32, 63, 1, 1], expected [32, 64]");
        TinyModel c;
        c.shape_override["blk.1.ffn_norm.weight"] = {32, 2};
        expect(c, "shape-norm", MINFER_ERR_BAD_MODEL, "tensor 'blk.1.ffn_norm.weight' has shape [32, 2, 1, 1], expected [32]");
        TinyModel d;
        d.type_override["blk.0.attn_norm.weight"] = 1;  // f16 norm
        expect(d, "type-norm", MINFER_ERR_BAD_MODEL, "tensor 'blk.0.attn_norm.weight' has type f16, expected f32");
        TinyModel e;
        e.type_override["blk.0.ffn_up.weight"] = 26;  // i32 matmul weight
        expect(e, "type-matmul-i32", MINFER_ERR_UNSUPPORTED, "tensor 'blk.0.ffn_up.weight' has type i32");
        TinyModel f;
        f.n_embd = 256;  // row length 256 for a K-quant-sized IQ type
        f.n_head = 4;
        f.head_dim = 64;
        f.type_override["blk.0.ffn_gate.weight"] = 16;  // iq2_xxs: valid GGUF, not computed by this build
        expect(f, "type-iq2", MINFER_ERR_UNSUPPORTED, "'blk.0.ffn_gate.weight' has type iq2_xxs, which this build cannot compute with");
    }

    TEST_CASE("vocabulary arrays of mismatched lengths") {
        TinyModel a;
        a.meta_hook = [](minfer::gguf::Writer& w) {
            std::vector<int32_t> t(63, 1);
            w.set_array("tokenizer.ggml.token_type", minfer::gguf::ValueType::I32, t.data(), t.size());
        };
        expect(a, "token-type-len", MINFER_ERR_BAD_MODEL, "tokenizer.ggml.token_type has 63 entries but tokenizer.ggml.tokens has 64");
        TinyModel b;
        b.meta_hook = [](minfer::gguf::Writer& w) {
            std::vector<float> s(65, 0.0f);
            w.set_array("tokenizer.ggml.scores", minfer::gguf::ValueType::F32, s.data(), s.size());
        };
        expect(b, "scores-len", MINFER_ERR_BAD_MODEL, "tokenizer.ggml.scores has 65 entries");
        TinyModel c;
        c.n_vocab = 64;
        c.shape_override["token_embd.weight"] = {32, 70};
        expect(c, "embd-vocab", MINFER_ERR_BAD_MODEL, "tensor 'token_embd.weight' has shape [32, 70, 1, 1], expected [32, 64]");
        TinyModel d;
        d.skip_keys = {"tokenizer.ggml.tokens"};
        expect(d, "no-tokens", MINFER_ERR_BAD_MODEL, "required key 'tokenizer.ggml.tokens' is missing");
    }

    TEST_CASE("special token ids outside the vocabulary") {
        TinyModel a;
        a.meta_hook = [](minfer::gguf::Writer& w) { w.set_u32("tokenizer.ggml.eos_token_id", 64); };
        expect(a, "eos-64", MINFER_ERR_BAD_MODEL, "tokenizer.ggml.eos_token_id = 64 is outside the vocabulary [0, 64)");
        TinyModel b;
        b.meta_hook = [](minfer::gguf::Writer& w) { w.set_i32("tokenizer.ggml.bos_token_id", -1); };
        expect(b, "bos-neg", MINFER_ERR_BAD_MODEL, "tokenizer.ggml.bos_token_id = -1 is outside");
        TinyModel c;
        c.meta_hook = [](minfer::gguf::Writer& w) { w.set_string("tokenizer.ggml.padding_token_id", "0"); };
        expect(c, "pad-string", MINFER_ERR_BAD_MODEL, "tokenizer.ggml.padding_token_id' has type string");
    }

    TEST_CASE("every synth preset shape passes validation (tiny ones written and opened)") {
        for (const char* preset : {"qwen2-tiny", "qwen2-tiny-tied", "qwen3-tiny"}) {
            for (const char* mix : {"f32", "f16", "bf16"}) {
                const std::string label = std::string(preset) + "/" + mix;
                CAPTURE(label);
                const std::string path = test::tmp_path(std::string("synth-") + preset + "-" + mix + ".gguf");
                REQUIRE(minfer_synth(path.c_str(), preset, mix, 5) == MINFER_OK);
                minfer_model* m = nullptr;
                REQUIRE_MESSAGE(minfer_open(path.c_str(), &m) == MINFER_OK, minfer_last_error());
                CHECK(minfer_model_n_vocab(m) == 512);
                CHECK(minfer_model_tied_output(m) == (std::string(preset) != "qwen2-tiny"));
                minfer_close(m);
            }
        }
    }
}
