// The C ABI for text and sampling: tokenizer, detokenizer, special tokens, chat formatting, sampler
// settings and stop strings. Same conventions as api.cpp.
#include <cmath>
#include <string>
#include <vector>

#include "api/api_internal.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

struct minfer_detokenizer {
    std::shared_ptr<minfer::engine::Model> m;
    minfer::tokenizer::StreamDecoder stream;
};

using namespace minfer::api;

namespace {

void check_token(const minfer::engine::Model& m, int32_t token) {
    if (token < 0 || token >= m.config().n_vocab)
        fail(MINFER_ERR_INVALID_ARGUMENT, "token %d is outside the vocabulary [0, %d)", token, m.config().n_vocab);
}

}  // namespace

extern "C" {

minfer_status minfer_tokenize(const minfer_model* model, const char* text, size_t len, int32_t parse_special, int32_t* tokens,
                              size_t cap, size_t* n_out) {
    return guard([&] {
        need(model, "model");
        if (len > 0) need(text, "text");
        const std::vector<int32_t> ids = model->m->tokenizer().encode(std::string_view(text ? text : "", len), parse_special != 0);
        if (n_out) *n_out = ids.size();
        if (ids.size() > cap || (!tokens && !ids.empty()))
            fail(MINFER_ERR_BUFFER_TOO_SMALL, "the text has %zu tokens, the buffer holds %zu", ids.size(), tokens ? cap : size_t{0});
        std::copy(ids.begin(), ids.end(), tokens);
    });
}

minfer_status minfer_token_to_piece(const minfer_model* model, int32_t token, char* buf, size_t cap, size_t* len_out) {
    return guard([&] {
        need(model, "model");
        check_token(*model->m, token);
        copy_out(model->m->tokenizer().piece(token), buf, cap, len_out);
    });
}

minfer_status minfer_detokenize(const minfer_model* model, const int32_t* tokens, size_t n, char* buf, size_t cap,
                                size_t* len_out) {
    return guard([&] {
        need(model, "model");
        if (n > 0) need(tokens, "tokens");
        const auto& tok = model->m->tokenizer();
        std::string bytes;
        for (size_t i = 0; i < n; ++i) {
            check_token(*model->m, tokens[i]);
            bytes += tok.piece(tokens[i]);
        }
        copy_out(minfer::tokenizer::sanitize_utf8(bytes), buf, cap, len_out);
    });
}

int32_t minfer_model_special_token(const minfer_model* model, minfer_special_token which) {
    if (!model) return -1;
    const minfer::model::Config& c = model->m->config();
    minfer::tokenizer::Specials s;
    s.bos = c.bos;
    s.eos = c.eos;
    s.pad = c.pad;
    try {
        s = model->m->tokenizer().specials();
    } catch (...) {
        // No tokenizer: the ids the model layer read from the file are all there is.
    }
    switch (which) {
    case MINFER_TOKEN_BOS: return s.bos;
    case MINFER_TOKEN_EOS: return s.eos;
    case MINFER_TOKEN_EOT: return s.eot;
    case MINFER_TOKEN_IM_START: return s.im_start;
    case MINFER_TOKEN_IM_END: return s.im_end;
    case MINFER_TOKEN_PAD: return s.pad;
    }
    return -1;
}

int32_t minfer_token_is_eog(const minfer_model* model, int32_t token) {
    if (!model || token < 0 || token >= model->m->config().n_vocab) return 0;
    try {
        return model->m->is_eog(token) ? 1 : 0;
    } catch (...) {
        return 0;
    }
}

minfer_status minfer_model_chat_template(const minfer_model* model, char* buf, size_t cap, size_t* len_out) {
    return guard([&] {
        const auto& v = meta(model, "tokenizer.chat_template");
        if (v.type != minfer::gguf::ValueType::STRING)
            fail(MINFER_ERR_WRONG_TYPE, "tokenizer.chat_template has type %s, not string", minfer::gguf::value_type_name(v.type));
        copy_out(std::string(v.str), buf, cap, len_out);
    });
}

minfer_status minfer_chat_format(const char* const* roles, const char* const* contents, size_t n_messages, int32_t add_assistant,
                                 char* buf, size_t cap, size_t* len_out) {
    return guard([&] {
        if (n_messages > 0) {
            need(roles, "roles");
            need(contents, "contents");
        }
        std::string out;
        for (size_t i = 0; i < n_messages; ++i) {
            if (!roles[i] || !contents[i]) fail(MINFER_ERR_INVALID_ARGUMENT, "message %zu has a NULL role or content", i);
            if (!roles[i][0]) fail(MINFER_ERR_INVALID_ARGUMENT, "message %zu has an empty role", i);
            out += "<|im_start|>";
            out += roles[i];
            out += '\n';
            out += contents[i];
            out += "<|im_end|>\n";
        }
        if (add_assistant) out += "<|im_start|>assistant\n";
        copy_out(out, buf, cap, len_out);
    });
}

minfer_status minfer_detokenizer_create(const minfer_model* model, minfer_detokenizer** out) {
    if (out) *out = nullptr;
    return guard([&] {
        need(out, "out");
        need(model, "model");
        model->m->tokenizer();  // fails now, not at the first push, when there is no tokenizer
        auto d = std::make_unique<minfer_detokenizer>();
        d->m = model->m;
        *out = d.release();
    });
}

minfer_status minfer_detokenizer_push(minfer_detokenizer* d, int32_t token, char* buf, size_t cap, size_t* len_out) {
    return guard([&] {
        need(d, "detokenizer");
        check_token(*d->m, token);
        minfer::tokenizer::StreamDecoder next = d->stream;  // commit only if the text fits
        const std::string text = next.push(d->m->tokenizer().piece(token));
        copy_out(text, buf, cap, len_out);
        d->stream = std::move(next);
    });
}

minfer_status minfer_detokenizer_flush(minfer_detokenizer* d, char* buf, size_t cap, size_t* len_out) {
    return guard([&] {
        need(d, "detokenizer");
        minfer::tokenizer::StreamDecoder next = d->stream;
        const std::string text = next.flush();
        copy_out(text, buf, cap, len_out);
        d->stream = std::move(next);
    });
}

void minfer_detokenizer_free(minfer_detokenizer* d) { delete d; }

void minfer_sampler_params_init(minfer_sampler_params* params) {
    if (params) *params = minfer::sampling::default_params();
}

minfer_status minfer_context_set_sampler(minfer_context* ctx, const minfer_sampler_params* params) {
    return with_context(ctx, [&] {
        need(params, "params");
        ctx->c->sampler().configure(*params);
    });
}

minfer_status minfer_context_set_logit_bias(minfer_context* ctx, int32_t token, float bias) {
    return with_context(ctx, [&] {
        check_token(ctx->c->model(), token);
        if (std::isnan(bias) || bias == INFINITY) fail(MINFER_ERR_INVALID_ARGUMENT, "logit bias of token %d is %g", token, bias);
        ctx->c->sampler().set_bias(token, bias);
    });
}

minfer_status minfer_context_clear_logit_bias(minfer_context* ctx) {
    return with_context(ctx, [&] { ctx->c->sampler().clear_bias(); });
}

minfer_status minfer_context_set_stop_strings(minfer_context* ctx, const char* const* stops, size_t n) {
    return with_context(ctx, [&] {
        if (n > 0) need(stops, "stops");
        std::vector<std::string> list;
        for (size_t i = 0; i < n; ++i) {
            if (!stops[i]) fail(MINFER_ERR_INVALID_ARGUMENT, "stop string %zu is NULL", i);
            list.emplace_back(stops[i]);
        }
        ctx->c->set_stop_strings(std::move(list));
    });
}

minfer_stop_reason minfer_context_stop_reason(const minfer_context* ctx) { return ctx ? ctx->c->stop_reason() : MINFER_STOP_NONE; }

}  // extern "C"
