// Shared by the C shims (api.cpp, api_text.cpp): the handle structs and the guard that turns every
// exception into a status plus the thread's last-error message.
#pragma once

#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "core/error.h"
#include "engine/engine.h"
#include "minfer.h"

struct minfer_model {
    std::shared_ptr<minfer::engine::Model> m;
};

struct minfer_context {
    std::unique_ptr<minfer::engine::Context> c;
};

namespace minfer::api {

using minfer::current_error;
using minfer::Error;
using minfer::fail;

inline thread_local std::string t_last_error;

inline minfer_status set_error(minfer_status st, const char* msg) noexcept {
    try {
        t_last_error = msg;
    } catch (...) {
        t_last_error.clear();
    }
    return st;
}

template <class F>
inline minfer_status guard(F&& f) noexcept {
    try {
        f();
        return MINFER_OK;
    } catch (...) {
        const Error e = current_error();
        return set_error(e.status(), e.what());
    }
}

inline void need(const void* p, const char* what) {
    if (!p) fail(MINFER_ERR_INVALID_ARGUMENT, "%s is NULL", what);
}

inline void copy_out(const std::string& s, char* buf, size_t cap, size_t* len_out) {
    if (len_out) *len_out = s.size();
    if (!buf || cap < s.size() + 1)
        fail(MINFER_ERR_BUFFER_TOO_SMALL, "the answer needs %zu bytes including the NUL, the buffer has %zu", s.size() + 1,
             buf ? cap : size_t{0});
    std::memcpy(buf, s.data(), s.size());
    buf[s.size()] = '\0';
}

inline const minfer::gguf::Value& meta(const minfer_model* model, const char* key) {
    need(model, "model");
    need(key, "key");
    const minfer::gguf::Value* v = model->m->file().find(key);
    if (!v) fail(MINFER_ERR_NOT_FOUND, "metadata key '%s' is not in the file", key);
    return *v;
}

// Runs f with the context's busy flag held.
template <class F>
inline minfer_status with_context(minfer_context* ctx, F&& f) noexcept {
    if (!ctx) return set_error(MINFER_ERR_INVALID_ARGUMENT, "ctx is NULL");
    if (!ctx->c->try_acquire())
        return set_error(MINFER_ERR_BUSY, "the context is in use by another thread; a context serves one thread at a time");
    minfer_status st = guard(std::forward<F>(f));
    ctx->c->release();
    return st;
}

}  // namespace minfer::api
