#include "engine/engine.h"

#include <algorithm>
#include <cinttypes>
#include <string_view>

#include "core/error.h"
#include "core/log.h"
#include "device/device.h"
#include "quant/types.h"

namespace minfer::engine {

std::shared_ptr<Model> Model::open(const std::string& path, const options::Values& opts) {
    std::shared_ptr<Model> m(new Model());
    m->options_ = opts;
    const int level = m->log_level();
    report_progress("load", 0, 3);
    try {
        m->file_ = gguf::File::open(path);
        report_progress("load", 1, 3);
        m->config_ = model::read_config(*m->file_);
        m->plan_ = model::plan_tensors(*m->file_, m->config_);
    } catch (const Error& e) {
        // Say which file; the reader's messages name the key, tensor or offset.
        if (std::string_view(e.what()).find(path) != std::string_view::npos) throw;  // already named
        throw Error(e.status(), path + ": " + e.what());
    }
    report_progress("load", 2, 3);

    for (const gguf::TensorInfo& t : m->file_->tensors()) {
        m->n_params_ += t.n_elems;
        if (std::find(m->tensor_types_.begin(), m->tensor_types_.end(), t.type) == m->tensor_types_.end())
            m->tensor_types_.push_back(t.type);
    }
    std::sort(m->tensor_types_.begin(), m->tensor_types_.end());
    for (const gguf::KV& kv : m->file_->kvs()) m->meta_keys_.emplace_back(kv.key);

    // Backend choice. The CUDA forward pass arrives with its own issue; until then device=cuda says so
    // plainly instead of silently running on the CPU.
    const int64_t device = m->options_.get(options::Id::device);
    if (device != options::kDeviceCpu) {
        device::Probe probe = device::probe_cuda();
        if (device == options::kDeviceCuda) {
            if (!probe.built) fail(MINFER_ERR_UNSUPPORTED, "device=cuda: this build of minfer has no CUDA backend (-Dcuda=disabled)");
            if (probe.n_devices == 0) fail(MINFER_ERR_DEVICE, "device=cuda: no usable GPU: %s", probe.message.c_str());
            fail(MINFER_ERR_UNSUPPORTED, "device=cuda: %s found, but the CUDA forward pass is not implemented in this build",
                 probe.message.c_str());
        }
        log_line(level, MINFER_LOG_INFO, "device=auto: using the CPU (%s)", probe.message.c_str());
    }
    m->backend_ = Backend::cpu;
    report_progress("load", 3, 3);
    log_line(level, MINFER_LOG_INFO, "loaded %s: %s, %d layers, %" PRIu64 " parameters, %zu tensors, %" PRIu64 " bytes",
             path.c_str(), m->config_.arch_name.c_str(), m->config_.n_layer, m->n_params_, m->file_->tensors().size(),
             m->file_->size());
    return m;
}

Context::Context(std::shared_ptr<Model> model) : model_(std::move(model)) {
    const int64_t len = model_->options().get(options::Id::ctx_len);
    n_ctx_ = len == 0 ? model_->config().n_ctx_train : static_cast<int32_t>(len);
}

void Context::prefill(const int32_t* tokens, size_t n) {
    if (n == 0) fail(MINFER_ERR_INVALID_ARGUMENT, "prefill: no tokens");
    if (!tokens) fail(MINFER_ERR_INVALID_ARGUMENT, "prefill: tokens is NULL");
    const int32_t n_vocab = model_->config().n_vocab;
    for (size_t i = 0; i < n; ++i)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            fail(MINFER_ERR_INVALID_ARGUMENT, "prefill: token %d at index %zu is outside the vocabulary [0, %d)", tokens[i], i, n_vocab);
    if (n > static_cast<size_t>(n_ctx_ - n_past_))
        fail(MINFER_ERR_CONTEXT_FULL, "prefill: %zu tokens do not fit: the context holds %d of %d", n, n_past_, n_ctx_);
    fail(MINFER_ERR_UNSUPPORTED, "prefill: the forward pass is not implemented in this build");
}

int32_t Context::decode() {
    if (n_past_ == 0) fail(MINFER_ERR_INVALID_ARGUMENT, "decode: no logits yet; call minfer_prefill first");
    fail(MINFER_ERR_UNSUPPORTED, "decode: the forward pass is not implemented in this build");
}

}  // namespace minfer::engine
