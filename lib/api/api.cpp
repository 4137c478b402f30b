// The C ABI: models, options, contexts, synth (text and sampling are in api_text.cpp). Each entry point
// checks its arguments, runs the engine inside guard() (which catches every exception and turns it into
// a status plus the thread's last-error message) and never lets anything escape. Handles wrap
// shared_ptrs so a context keeps its model alive after minfer_close.
#include <cinttypes>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "api/api_internal.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/engine.h"
#include "minfer.h"
#include "options/options.h"
#include "quant/types.h"
#include "synth/synth.h"

using namespace minfer::api;

extern "C" {

const char* minfer_version(void) { return MINFER_VERSION_STRING; }
int32_t minfer_version_number(void) { return MINFER_VERSION_NUMBER; }

const char* minfer_build_info(void) {
    return "minfer " MINFER_VERSION_STRING
#ifdef MINFER_HAS_CUDA
           ", CUDA backend for sm_" MINFER_CUDA_ARCHS
#else
           ", CPU only"
#endif
#if defined(__clang__)
           ", clang " __clang_version__
#elif defined(__GNUC__)
           ", g++ " __VERSION__
#endif
        ;
}

const char* minfer_status_string(minfer_status status) {
    switch (status) {
    case MINFER_OK: return "MINFER_OK";
    case MINFER_ERR_INVALID_ARGUMENT: return "MINFER_ERR_INVALID_ARGUMENT";
    case MINFER_ERR_IO: return "MINFER_ERR_IO";
    case MINFER_ERR_BAD_MODEL: return "MINFER_ERR_BAD_MODEL";
    case MINFER_ERR_UNSUPPORTED: return "MINFER_ERR_UNSUPPORTED";
    case MINFER_ERR_OUT_OF_MEMORY: return "MINFER_ERR_OUT_OF_MEMORY";
    case MINFER_ERR_DEVICE: return "MINFER_ERR_DEVICE";
    case MINFER_ERR_UNKNOWN_OPTION: return "MINFER_ERR_UNKNOWN_OPTION";
    case MINFER_ERR_OPTION_VALUE: return "MINFER_ERR_OPTION_VALUE";
    case MINFER_ERR_OPTION_LOCKED: return "MINFER_ERR_OPTION_LOCKED";
    case MINFER_ERR_CONTEXT_FULL: return "MINFER_ERR_CONTEXT_FULL";
    case MINFER_ERR_BUSY: return "MINFER_ERR_BUSY";
    case MINFER_ERR_NOT_FOUND: return "MINFER_ERR_NOT_FOUND";
    case MINFER_ERR_WRONG_TYPE: return "MINFER_ERR_WRONG_TYPE";
    case MINFER_ERR_BUFFER_TOO_SMALL: return "MINFER_ERR_BUFFER_TOO_SMALL";
    case MINFER_ERR_CANCELLED: return "MINFER_ERR_CANCELLED";
    case MINFER_ERR_INTERNAL: return "MINFER_ERR_INTERNAL";
    }
    return "MINFER_ERR_UNKNOWN_STATUS";
}

const char* minfer_last_error(void) { return t_last_error.c_str(); }

void minfer_set_log_callback(minfer_log_fn fn, void* user_data) { minfer::set_log_callback(fn, user_data); }
void minfer_set_progress_callback(minfer_progress_fn fn, void* user_data) { minfer::set_progress_callback(fn, user_data); }

// ---- options --------------------------------------------------------------------------------------

minfer_status minfer_set_option(minfer_model* model, const char* key, const char* value) {
    return guard([&] {
        need(key, "key");
        need(value, "value");
        if (model)
            minfer::options::set(model->m->options(), key, value, true);
        else
            minfer::options::set_default(key, value);
    });
}

minfer_status minfer_get_option(const minfer_model* model, const char* key, char* buf, size_t cap, size_t* len_out) {
    return guard([&] {
        need(key, "key");
        copy_out(model ? minfer::options::get_text(model->m->options(), key) : minfer::options::get_default_text(key), buf, cap,
                 len_out);
    });
}

size_t minfer_option_count(void) { return minfer::options::kCount; }

minfer_status minfer_option_info(size_t index, const char** name, minfer_option_type* type, minfer_option_scope* scope,
                                 const char** default_value, const char** min_value, const char** max_value,
                                 const char** choices, const char** doc) {
    return guard([&] {
        auto table = minfer::options::table();
        if (index >= table.size()) fail(MINFER_ERR_NOT_FOUND, "option index %zu is out of range (%zu options)", index, table.size());
        // Bound texts live as long as the process.
        static const std::vector<std::string> bounds = [] {
            std::vector<std::string> b;
            for (const auto& d : minfer::options::table()) {
                b.push_back(minfer::options::bound_text(d, false));
                b.push_back(minfer::options::bound_text(d, true));
            }
            return b;
        }();
        const auto& d = table[index];
        if (name) *name = d.name;
        if (type) *type = d.type;
        if (scope) *scope = d.scope;
        if (default_value) *default_value = d.default_text;
        if (min_value) *min_value = bounds[2 * index].c_str();
        if (max_value) *max_value = bounds[2 * index + 1].c_str();
        if (choices) *choices = d.type == MINFER_OPTION_ENUM ? d.choices : "";
        if (doc) *doc = d.doc;
    });
}

// ---- models ---------------------------------------------------------------------------------------

minfer_status minfer_open(const char* path, minfer_model** out) { return minfer_open_with_options(path, nullptr, nullptr, 0, out); }

minfer_status minfer_open_with_options(const char* path, const char* const* keys, const char* const* values, size_t n_options,
                                       minfer_model** out) {
    if (out) *out = nullptr;
    return guard([&] {
        need(out, "out");
        need(path, "path");
        if (n_options > 0) {
            need(keys, "keys");
            need(values, "values");
        }
        minfer::options::Values opts = minfer::options::snapshot_defaults();
        for (size_t i = 0; i < n_options; ++i) {
            need(keys[i], "keys[i]");
            need(values[i], "values[i]");
            minfer::options::set(opts, keys[i], values[i], false);
        }
        auto handle = std::make_unique<minfer_model>();
        handle->m = minfer::engine::Model::open(path, opts);
        *out = handle.release();
    });
}

void minfer_close(minfer_model* model) { delete model; }

#define MODEL_GETTER(type, fn, expr) \
    type fn(const minfer_model* model) { return model ? static_cast<type>(expr) : type{}; }

MODEL_GETTER(uint64_t, minfer_model_n_params, model->m->n_params())
MODEL_GETTER(uint64_t, minfer_model_file_size, model->m->file().size())
MODEL_GETTER(int32_t, minfer_model_n_vocab, model->m->config().n_vocab)
MODEL_GETTER(int32_t, minfer_model_n_ctx_train, model->m->config().n_ctx_train)
MODEL_GETTER(int32_t, minfer_model_n_embd, model->m->config().n_embd)
MODEL_GETTER(int32_t, minfer_model_n_layer, model->m->config().n_layer)
MODEL_GETTER(int32_t, minfer_model_n_head, model->m->config().n_head)
MODEL_GETTER(int32_t, minfer_model_n_head_kv, model->m->config().n_head_kv)
MODEL_GETTER(int32_t, minfer_model_head_dim, model->m->config().head_dim)
MODEL_GETTER(int32_t, minfer_model_n_ff, model->m->config().n_ff)
MODEL_GETTER(double, minfer_model_rope_freq_base, model->m->config().rope_freq_base)
MODEL_GETTER(double, minfer_model_rms_norm_eps, model->m->config().rms_norm_eps)
MODEL_GETTER(int32_t, minfer_model_tied_output, model->m->plan().tied_output)
#undef MODEL_GETTER

const char* minfer_model_architecture(const minfer_model* model) { return model ? model->m->config().arch_name.c_str() : ""; }
const char* minfer_model_name(const minfer_model* model) { return model ? model->m->config().name.c_str() : ""; }
const char* minfer_model_device(const minfer_model* model) {
    if (!model) return "";
    return model->m->backend() == minfer::engine::Backend::cuda ? "cuda" : "cpu";
}

minfer_status minfer_model_vram(const minfer_model* model, minfer_vram* out) {
    return guard([&] {
        need(model, "model");
        need(out, "out");
        const minfer::device::Vram v = model->m->vram();
        *out = minfer_vram{v.weights, v.w16_cache, v.kv_cache, v.scratch};
    });
}

const char* minfer_model_prefill_path(const minfer_model* model) {
    if (!model) return "";
    const auto& m = *model->m;
    return m.cuda() ? minfer::device::prefill_path_name(minfer::device::cuda_prefill_path(*m.cuda())) : "cpu";
}

const char* minfer_model_gemm(const minfer_model* model) {
    if (!model || !model->m->cuda()) return "";
    return minfer::device::cuda_gemm_name(*model->m->cuda());
}

double minfer_model_warm_ms(const minfer_model* model) {
    if (!model || !model->m->cuda()) return 0.0;
    return minfer::device::cuda_warm_ms(*model->m->cuda());
}

minfer_status minfer_bench_dequant_sweep(minfer_model* model, int32_t reps, double* ms_out) {
    return guard([&] {
        need(model, "model");
        need(ms_out, "ms_out");
        if (reps < 1 || reps > 1000) minfer::fail(MINFER_ERR_INVALID_ARGUMENT, "dequant sweep: reps = %d is outside [1, 1000]", reps);
        const auto& m = *model->m;
        if (!m.cuda()) minfer::fail(MINFER_ERR_UNSUPPORTED, "dequant sweep: the model runs on the CPU, not on a GPU");
        std::vector<minfer::engine::Weight> ws;
        for (const auto* t : minfer::model::layer_matmuls(m.plan())) ws.push_back(minfer::engine::Weight::of(t));
        *ms_out = minfer::device::cuda_dequant_sweep_ms(*m.cuda(), ws, reps);
    });
}

const char* minfer_type_name(int32_t type) { return minfer::quant::type_info(type).name; }

minfer_status minfer_model_tensor_types(const minfer_model* model, int32_t* types, size_t cap, size_t* n_out) {
    return guard([&] {
        need(model, "model");
        const auto& t = model->m->tensor_types();
        if (n_out) *n_out = t.size();
        if (cap > 0) need(types, "types");
        for (size_t i = 0; i < t.size() && i < cap; ++i) types[i] = t[i];
    });
}

size_t minfer_model_tensor_count(const minfer_model* model) { return model ? model->m->file().tensors().size() : 0; }

minfer_status minfer_model_tensor_info(const minfer_model* model, size_t index, const char** name, int32_t* type,
                                       int32_t* n_dims, int64_t* dims, uint64_t* offset, uint64_t* n_bytes) {
    return guard([&] {
        need(model, "model");
        const auto& tensors = model->m->file().tensors();
        if (index >= tensors.size()) fail(MINFER_ERR_NOT_FOUND, "tensor index %zu is out of range (%zu tensors)", index, tensors.size());
        const auto& t = tensors[index];
        if (name) *name = t.name.c_str();
        if (type) *type = t.type;
        if (n_dims) *n_dims = t.n_dims;
        if (dims)
            for (int d = 0; d < 4; ++d) dims[d] = t.ne[d];
        if (offset) *offset = model->m->file().data_offset() + t.offset;
        if (n_bytes) *n_bytes = t.n_bytes;
    });
}

size_t minfer_model_meta_count(const minfer_model* model) { return model ? model->m->file().kvs().size() : 0; }

const char* minfer_model_meta_key(const minfer_model* model, size_t index) {
    if (!model || index >= model->m->meta_keys().size()) return nullptr;
    return model->m->meta_keys()[index].c_str();
}

minfer_status minfer_model_meta_type(const minfer_model* model, const char* key, minfer_meta_type* type, minfer_meta_type* elem_type,
                                     uint64_t* array_len) {
    return guard([&] {
        const auto& v = meta(model, key);
        if (type) *type = static_cast<minfer_meta_type>(v.type);
        if (elem_type) *elem_type = static_cast<minfer_meta_type>(v.type == minfer::gguf::ValueType::ARRAY ? v.elem_type : v.type);
        if (array_len) *array_len = v.type == minfer::gguf::ValueType::ARRAY ? v.count : 0;
    });
}

minfer_status minfer_model_meta_int(const minfer_model* model, const char* key, int64_t* out) {
    return guard([&] {
        need(out, "out");
        const auto& v = meta(model, key);
        if (!v.as_int(out))
            fail(MINFER_ERR_WRONG_TYPE, "metadata key '%s' has type %s, not an integer that fits in int64", key,
                 minfer::gguf::value_type_name(v.type));
    });
}

minfer_status minfer_model_meta_float(const minfer_model* model, const char* key, double* out) {
    return guard([&] {
        need(out, "out");
        const auto& v = meta(model, key);
        if (!v.as_float(out))
            fail(MINFER_ERR_WRONG_TYPE, "metadata key '%s' has type %s, not a float", key, minfer::gguf::value_type_name(v.type));
    });
}

minfer_status minfer_model_meta_string(const minfer_model* model, const char* key, char* buf, size_t cap, size_t* len_out) {
    return guard([&] {
        const auto& v = meta(model, key);
        using minfer::gguf::ValueType;
        std::string s;
        switch (v.type) {
        case ValueType::STRING: s.assign(v.str); break;
        case ValueType::BOOL: s = v.u ? "true" : "false"; break;
        case ValueType::F32: case ValueType::F64: s = minfer::strprintf("%.9g", v.f); break;
        case ValueType::ARRAY:
            fail(MINFER_ERR_WRONG_TYPE, "metadata key '%s' is an array of %" PRIu64 " %s values", key, v.count,
                 minfer::gguf::value_type_name(v.elem_type));
        case ValueType::I8: case ValueType::I16: case ValueType::I32: case ValueType::I64:
            s = minfer::strprintf("%" PRId64, v.i);
            break;
        default: s = minfer::strprintf("%" PRIu64, v.u); break;
        }
        copy_out(s, buf, cap, len_out);
    });
}

// ---- contexts ---------------------------------------------------------------------------------------

minfer_status minfer_context_create(minfer_model* model, minfer_context** out) {
    if (out) *out = nullptr;
    return guard([&] {
        need(out, "out");
        need(model, "model");
        auto handle = std::make_unique<minfer_context>();
        handle->c = std::make_unique<minfer::engine::Context>(model->m);
        *out = handle.release();
    });
}

void minfer_context_free(minfer_context* ctx) { delete ctx; }

int32_t minfer_context_n_ctx(const minfer_context* ctx) { return ctx ? ctx->c->n_ctx() : 0; }
int32_t minfer_context_n_past(const minfer_context* ctx) { return ctx ? ctx->c->n_past() : 0; }

minfer_status minfer_prefill(minfer_context* ctx, const int32_t* tokens, size_t n) {
    return with_context(ctx, [&] { ctx->c->prefill(tokens, n); });
}

minfer_status minfer_decode(minfer_context* ctx, int32_t* token) {
    return with_context(ctx, [&] {
        need(token, "token");
        *token = ctx->c->decode();
    });
}

minfer_status minfer_context_logits(minfer_context* ctx, float* out, size_t cap) {
    return with_context(ctx, [&] { ctx->c->copy_logits(out, cap); });
}

minfer_status minfer_context_reset(minfer_context* ctx) {
    return with_context(ctx, [&] { ctx->c->reset(); });
}

minfer_status minfer_context_truncate(minfer_context* ctx, int32_t n_keep) {
    return with_context(ctx, [&] { ctx->c->truncate(n_keep); });
}

// ---- synthetic models -------------------------------------------------------------------------------

minfer_status minfer_synth(const char* path, const char* preset, const char* mix, uint64_t seed) {
    return guard([&] {
        need(path, "path");
        need(preset, "preset");
        need(mix, "mix");
        minfer::synth::write_model(path, preset, mix, seed);
    });
}

minfer_status minfer_synth_vocab(const char* path, const char* preset, const char* mix, uint64_t seed,
                                 const char* tokenizer_json, const char* tokenizer_config_json) {
    return guard([&] {
        need(path, "path");
        need(preset, "preset");
        need(mix, "mix");
        need(tokenizer_json, "tokenizer_json");
        minfer::synth::write_model_vocab(path, preset, mix, seed, tokenizer_json,
                                         tokenizer_config_json ? tokenizer_config_json : "");
    });
}

size_t minfer_synth_preset_count(void) { return minfer::synth::presets().size(); }

const char* minfer_synth_preset_name(size_t index) {
    auto p = minfer::synth::presets();
    return index < p.size() ? p[index].name : nullptr;
}

}  // extern "C"
