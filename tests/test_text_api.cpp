// Text and sampling through the C API on a synthetic model with the built-in byte-level vocabulary
// (256 byte tokens, then <|endoftext|> 256, <|im_start|> 257, <|im_end|> 258, then unused padding).
#include <doctest/doctest.h>

#include <cmath>

#include "helpers.h"

namespace {

minfer_model* open_tiny(const char* name = "text-tiny.gguf") {
    const std::string path = test::tmp_path(name);
    REQUIRE(minfer_synth(path.c_str(), "qwen2-tiny", "q8_0", 21) == MINFER_OK);
    const char* k[] = {"device", "ctx_len"};
    const char* v[] = {"cpu", "128"};
    minfer_model* m = nullptr;
    REQUIRE_MESSAGE(minfer_open_with_options(path.c_str(), k, v, 2, &m) == MINFER_OK, minfer_last_error());
    return m;
}

std::vector<int32_t> tokenize(const minfer_model* m, const std::string& text, bool special) {
    size_t n = 0;
    minfer_status st = minfer_tokenize(m, text.data(), text.size(), special, nullptr, 0, &n);
    REQUIRE((st == MINFER_OK || st == MINFER_ERR_BUFFER_TOO_SMALL));
    std::vector<int32_t> out(n);
    REQUIRE(minfer_tokenize(m, text.data(), text.size(), special, out.data(), out.size(), &n) == MINFER_OK);
    return out;
}

std::string detokenize(const minfer_model* m, const std::vector<int32_t>& t) {
    size_t len = 0;
    minfer_detokenize(m, t.data(), t.size(), nullptr, 0, &len);
    std::string s(len + 1, '\0');
    REQUIRE(minfer_detokenize(m, t.data(), t.size(), s.data(), s.size(), &len) == MINFER_OK);
    s.resize(len);
    return s;
}

bool valid_utf8(const std::string& s) {
    size_t i = 0;
    while (i < s.size()) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        for (size_t k = 1; k < n; ++k)
            if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
        i += n;
    }
    return true;
}

}  // namespace

TEST_SUITE("text") {
    TEST_CASE("ChatML formatting") {
        const char* roles[] = {"system", "user"};
        const char* contents[] = {"Be brief.", "Hi there"};
        char buf[256];
        size_t len = 0;
        REQUIRE(minfer_chat_format(roles, contents, 2, 1, buf, sizeof buf, &len) == MINFER_OK);
        const std::string want =
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n";
        CHECK(std::string(buf) == want);
        CHECK(len == want.size());
        REQUIRE(minfer_chat_format(roles, contents, 1, 0, buf, sizeof buf, &len) == MINFER_OK);
        CHECK(std::string(buf) == "<|im_start|>system\nBe brief.<|im_end|>\n");
        CHECK(minfer_chat_format(roles, contents, 2, 1, buf, 10, &len) == MINFER_ERR_BUFFER_TOO_SMALL);
        CHECK(len == want.size());
        const char* bad_roles[] = {"user", nullptr};
        CHECK(minfer_chat_format(bad_roles, contents, 2, 1, buf, sizeof buf, &len) == MINFER_ERR_INVALID_ARGUMENT);
    }

    TEST_CASE("tokenize, specials, detokenize on the built-in vocabulary") {
        minfer_model* m = open_tiny();
        CHECK(tokenize(m, "Hi!", false) == std::vector<int32_t>{72, 105, 33});
        CHECK(tokenize(m, "<|im_start|>user", true).front() == 257);
        CHECK(tokenize(m, "<|im_start|>user", false).front() == '<');
        CHECK(tokenize(m, "", false).empty());
        CHECK(minfer_model_special_token(m, MINFER_TOKEN_IM_START) == 257);
        CHECK(minfer_model_special_token(m, MINFER_TOKEN_IM_END) == 258);
        CHECK(minfer_model_special_token(m, MINFER_TOKEN_EOS) == 258);
        CHECK(minfer_model_special_token(m, MINFER_TOKEN_BOS) == 256);
        CHECK(minfer_token_is_eog(m, 258) == 1);
        CHECK(minfer_token_is_eog(m, 256) == 1);
        CHECK(minfer_token_is_eog(m, 72) == 0);
        CHECK(minfer_token_is_eog(m, 100000) == 0);
        char piece[32];
        size_t len = 0;
        REQUIRE(minfer_token_to_piece(m, 257, piece, sizeof piece, &len) == MINFER_OK);
        CHECK(std::string(piece) == "<|im_start|>");
        REQUIRE(minfer_token_to_piece(m, 0xe4, piece, sizeof piece, &len) == MINFER_OK);
        CHECK(len == 1);
        CHECK(static_cast<unsigned char>(piece[0]) == 0xe4);
        CHECK(minfer_token_to_piece(m, 512, piece, sizeof piece, &len) == MINFER_ERR_INVALID_ARGUMENT);
        const std::string text = "héllo 你好 👋\n\tend";
        CHECK(detokenize(m, tokenize(m, text, false)) == text);
        // Invalid UTF-8 round-trips through tokenize as bytes and comes back from detokenize sanitized.
        CHECK(detokenize(m, tokenize(m, std::string("a\xff") + "b", false)) == "a\xef\xbf\xbd" "b");
        CHECK(minfer_model_chat_template(m, piece, sizeof piece, &len) == MINFER_ERR_NOT_FOUND);
        minfer_close(m);
    }

    TEST_CASE("streamed text never splits a character and equals the whole detokenization") {
        minfer_model* m = open_tiny();
        const uint64_t seed = test::seed();
        CAPTURE(seed);
        std::mt19937_64 rng(seed);
        const std::vector<std::string> alphabet = {"a", " ", "é", "你", "好", "👋", "👨‍👩‍👧", "\n", "\xff", "\xe4\xbd", "Ж"};
        for (int round = 0; round < 200; ++round) {
            std::string text;
            for (int i = 0; i < 20; ++i) text += alphabet[rng() % alphabet.size()];
            const std::vector<int32_t> toks = tokenize(m, text, false);
            minfer_detokenizer* d = nullptr;
            REQUIRE(minfer_detokenizer_create(m, &d) == MINFER_OK);
            std::string streamed;
            for (int32_t t : toks) {
                char buf[64];
                size_t len = 0;
                REQUIRE(minfer_detokenizer_push(d, t, buf, sizeof buf, &len) == MINFER_OK);
                const std::string part(buf, len);
                CHECK(valid_utf8(part));
                streamed += part;
            }
            char buf[64];
            size_t len = 0;
            REQUIRE(minfer_detokenizer_flush(d, buf, sizeof buf, &len) == MINFER_OK);
            streamed += std::string(buf, len);
            CHECK(streamed == detokenize(m, toks));
            CHECK(valid_utf8(streamed));
            minfer_detokenizer_free(d);
        }
        minfer_close(m);
    }

    TEST_CASE("a push whose text does not fit consumes nothing") {
        minfer_model* m = open_tiny();
        minfer_detokenizer* d = nullptr;
        REQUIRE(minfer_detokenizer_create(m, &d) == MINFER_OK);
        char buf[16];
        size_t len = 0;
        REQUIRE(minfer_detokenizer_push(d, 0xe4, buf, sizeof buf, &len) == MINFER_OK);  // first byte of 你
        CHECK(len == 0);
        REQUIRE(minfer_detokenizer_push(d, 0xbd, buf, sizeof buf, &len) == MINFER_OK);
        CHECK(minfer_detokenizer_push(d, 0xa0, buf, 2, &len) == MINFER_ERR_BUFFER_TOO_SMALL);
        CHECK(len == 3);
        REQUIRE(minfer_detokenizer_push(d, 0xa0, buf, sizeof buf, &len) == MINFER_OK);
        CHECK(std::string(buf, len) == "你");
        minfer_detokenizer_free(d);
        minfer_close(m);
    }

    TEST_CASE("sampler settings: validation, greedy default, seeded determinism, bias") {
        minfer_model* m = open_tiny();
        const std::vector<int32_t> prompt = tokenize(m, "Once upon a time", false);
        auto run = [&](const minfer_sampler_params* p, float bias_token_bias, int32_t bias_token) {
            minfer_context* ctx = nullptr;
            REQUIRE(minfer_context_create(m, &ctx) == MINFER_OK);
            if (p) REQUIRE_MESSAGE(minfer_context_set_sampler(ctx, p) == MINFER_OK, minfer_last_error());
            if (bias_token >= 0) REQUIRE(minfer_context_set_logit_bias(ctx, bias_token, bias_token_bias) == MINFER_OK);
            REQUIRE(minfer_prefill(ctx, prompt.data(), prompt.size()) == MINFER_OK);
            std::vector<int32_t> out;
            for (int i = 0; i < 12; ++i) {
                int32_t t = -1;
                REQUIRE(minfer_decode(ctx, &t) == MINFER_OK);
                out.push_back(t);
            }
            minfer_context_free(ctx);
            return out;
        };
        // Default: greedy.
        minfer_context* ctx = nullptr;
        REQUIRE(minfer_context_create(m, &ctx) == MINFER_OK);
        REQUIRE(minfer_prefill(ctx, prompt.data(), prompt.size()) == MINFER_OK);
        std::vector<float> logits(static_cast<size_t>(minfer_model_n_vocab(m)));
        REQUIRE(minfer_context_logits(ctx, logits.data(), logits.size()) == MINFER_OK);
        int32_t t = -1;
        REQUIRE(minfer_decode(ctx, &t) == MINFER_OK);
        CHECK(t == std::max_element(logits.begin(), logits.end()) - logits.begin());
        // Invalid settings are refused and name the field.
        minfer_sampler_params p;
        minfer_sampler_params_init(&p);
        p.size = 3;
        CHECK(minfer_context_set_sampler(ctx, &p) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(std::string(minfer_last_error()).find("size") != std::string::npos);
        minfer_sampler_params_init(&p);
        p.top_p = NAN;
        CHECK(minfer_context_set_sampler(ctx, &p) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(minfer_context_set_logit_bias(ctx, 99999, 1.0f) == MINFER_ERR_INVALID_ARGUMENT);
        minfer_context_free(ctx);

        minfer_sampler_params_init(&p);
        p.temperature = 1.5f;
        p.top_k = 0;
        p.top_p = 1.0f;
        p.min_p = 0.0f;
        p.seed = 1234;
        const auto a = run(&p, 0, -1), b = run(&p, 0, -1);
        CHECK(a == b);
        p.seed = 4321;
        CHECK(run(&p, 0, -1) != a);
        // A huge bias forces a token; -inf bans the greedy choice.
        const auto forced = run(nullptr, 1e9f, 'Q');
        CHECK(std::count(forced.begin(), forced.end(), 'Q') == 12);
        const auto greedy = run(nullptr, 0, -1);
        const auto banned = run(nullptr, -INFINITY, greedy[0]);
        CHECK(std::find(banned.begin(), banned.end(), greedy[0]) == banned.end());
        minfer_close(m);
    }

    TEST_CASE("stop reasons: end-of-generation tokens and stop strings") {
        minfer_model* m = open_tiny();
        minfer_context* ctx = nullptr;
        REQUIRE(minfer_context_create(m, &ctx) == MINFER_OK);
        const std::vector<int32_t> prompt = tokenize(m, "Hello", false);
        REQUIRE(minfer_prefill(ctx, prompt.data(), prompt.size()) == MINFER_OK);
        CHECK(minfer_context_stop_reason(ctx) == MINFER_STOP_NONE);
        // Force "ab" then "c": the stop string "bc" completes on the third token, across two pieces.
        const char* stops[] = {"bc", "zzz"};
        REQUIRE(minfer_context_set_stop_strings(ctx, stops, 2) == MINFER_OK);
        int32_t t = -1;
        for (int32_t want : {'a', 'b', 'c'}) {
            REQUIRE(minfer_context_clear_logit_bias(ctx) == MINFER_OK);
            REQUIRE(minfer_context_set_logit_bias(ctx, want, 1e9f) == MINFER_OK);
            REQUIRE(minfer_decode(ctx, &t) == MINFER_OK);
            CHECK(t == want);
            CHECK(minfer_context_stop_reason(ctx) == (want == 'c' ? MINFER_STOP_STRING : MINFER_STOP_NONE));
        }
        // An end-of-generation token.
        REQUIRE(minfer_context_clear_logit_bias(ctx) == MINFER_OK);
        REQUIRE(minfer_context_set_logit_bias(ctx, 258, 1e9f) == MINFER_OK);
        REQUIRE(minfer_decode(ctx, &t) == MINFER_OK);
        CHECK(t == 258);
        CHECK(minfer_context_stop_reason(ctx) == MINFER_STOP_EOG);
        const char* empty[] = {""};
        CHECK(minfer_context_set_stop_strings(ctx, empty, 1) == MINFER_ERR_INVALID_ARGUMENT);
        minfer_context_free(ctx);
        minfer_close(m);
    }

    TEST_CASE("a model whose tokenizer is unknown is refused at open, naming it") {
        test::TinyModel tm;
        tm.meta_hook = [](minfer::gguf::Writer& w) { w.set_string("tokenizer.ggml.pre", "llama-bpe"); };
        std::string msg;
        CHECK(test::open_bytes(tm.build(), "text-pre-llama.gguf", &msg) == MINFER_ERR_UNSUPPORTED);
        CHECK(msg.find("llama-bpe") != std::string::npos);
        test::TinyModel sp;
        sp.meta_hook = [](minfer::gguf::Writer& w) {
            w.set_string("tokenizer.ggml.model", "llama");
            w.set_string("tokenizer.ggml.pre", "qwen2");
        };
        CHECK(test::open_bytes(sp.build(), "text-model-llama.gguf", &msg) == MINFER_ERR_UNSUPPORTED);
        CHECK(msg.find("llama") != std::string::npos);
        // No pre-tokenizer named at all: the model opens for token ids; text calls say why they fail.
        test::TinyModel none;
        minfer_model* m = nullptr;
        REQUIRE(test::open_bytes(none.build(), "text-no-pre.gguf", &msg, &m) == MINFER_OK);
        int32_t ids[4];
        size_t n = 0;
        CHECK(minfer_tokenize(m, "hi", 2, 0, ids, 4, &n) == MINFER_ERR_UNSUPPORTED);
        CHECK(std::string(minfer_last_error()).find("tokenizer") != std::string::npos);
        minfer_close(m);
    }
}
