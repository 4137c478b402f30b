#include "engine/engine.h"

#include <algorithm>
#include <cinttypes>
#include <string_view>

#include "core/error.h"
#include "core/log.h"
#include "cpu/cpu_ops.h"
#include "device/device.h"
#include "engine/ops_runner.h"
#include "engine/testing.h"
#include "quant/types.h"

namespace minfer::engine {

std::shared_ptr<Model> Model::open(const std::string& path, const options::Values& opts) {
    std::shared_ptr<Model> m(new Model());
    m->options_ = opts;
    const int level = m->log_level();
    report_progress("load", 0, 3);
    try {
        // mmap=false: a copy in process memory, which a file truncated on disk cannot take away.
        m->file_ = gguf::File::open(path, m->options_.get(options::Id::mmap) == 0);
        report_progress("load", 1, 3);
        m->config_ = model::read_config(*m->file_);
        m->plan_ = model::plan_tensors(*m->file_, m->config_);
        if (const uint32_t planted = testing::plant()) testing::apply_plant(planted, m->config_);
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

    // Tokenizer. A file that names a tokenizer minfer does not implement is refused here, never run
    // with a wrong one; a file that names none (no tokenizer.ggml.pre) still runs on token ids.
    try {
        m->tokenizer_ = tokenizer::Tokenizer::from_gguf(*m->file_);
    } catch (const Error& e) {
        if (e.status() != MINFER_ERR_UNSUPPORTED || m->file_->find("tokenizer.ggml.pre") != nullptr) throw Error(e.status(), path + ": " + e.what());
        m->tokenizer_error_ = e.what();
        log_line(level, MINFER_LOG_WARN, "%s: %s; text calls will fail, token ids work", path.c_str(), e.what());
    }

    // Backend choice: device=auto takes the GPU when there is a usable one and the CUDA kernels cover the
    // model, else the CPU (and says why); device=cuda insists; device=cpu never touches the GPU.
    const int64_t device = m->options_.get(options::Id::device);
    m->backend_ = Backend::cpu;
    if (device != options::kDeviceCpu) {
        device::Probe probe = device::probe_cuda();
        std::string why;
        minfer_status status = MINFER_ERR_UNSUPPORTED;
        if (!probe.built) {
            why = "this build of minfer has no CUDA backend (-Dcuda=disabled)";
        } else if (probe.n_devices == 0) {
            why = "no usable GPU: " + probe.message;
            status = MINFER_ERR_DEVICE;
        } else {
            why = device::cuda_unsupported_reason(m->config_, m->plan_);
        }
        if (!why.empty()) {
            if (device == options::kDeviceCuda) fail(status, "device=cuda: %s", why.c_str());
            log_line(level, MINFER_LOG_INFO, "device=auto: using the CPU (%s)", why.c_str());
        } else {
            try {
                // The f16 cache (when the prefill path takes it) holds the layers' matmul weights and the
                // output projection: batches project many rows at once (a GEMM), contexts one (a mat-vec).
                std::vector<const gguf::TensorInfo*> matmuls = model::layer_matmuls(m->plan_);
                matmuls.push_back(m->plan_.output);
                m->cuda_ = device::cuda_load(*m->file_, matmuls, m->plan_.tok_embd, device::cuda_settings(m->options_), level);
            } catch (const Error& e) {
                throw Error(e.status(), path + ": " + e.what());
            }
            m->backend_ = Backend::cuda;
            log_line(level, MINFER_LOG_INFO, "device=%s: using CUDA on %s", device == options::kDeviceCuda ? "cuda" : "auto",
                     probe.message.c_str());
        }
    }
    report_progress("load", 3, 3);
    log_line(level, MINFER_LOG_INFO, "loaded %s: %s, %d layers, %" PRIu64 " parameters, %zu tensors, %" PRIu64 " bytes",
             path.c_str(), m->config_.arch_name.c_str(), m->config_.n_layer, m->n_params_, m->file_->tensors().size(),
             m->file_->size());
    return m;
}

const tokenizer::Tokenizer& Model::tokenizer() const {
    if (!tokenizer_) fail(MINFER_ERR_UNSUPPORTED, "this model has no usable tokenizer: %s", tokenizer_error_.c_str());
    return *tokenizer_;
}

bool Model::is_eog(int32_t token) const {
    if (tokenizer_) return tokenizer_->is_eog(token);
    return token == config_.eos;
}

namespace {
// Tokens per CPU forward call: bounds the scratch buffers; each matmul's weights are reused across them.
constexpr int kMaxBatchCpu = 256;
}  // namespace

Context::Context(std::shared_ptr<Model> model) : model_(std::move(model)) {
    const model::Config& c = model_->config();
    const int64_t len = model_->options().get(options::Id::ctx_len);
    n_ctx_ = len == 0 ? c.n_ctx_train : static_cast<int32_t>(len);
    RunnerShape shape;
    shape.n_ctx = n_ctx_;
    if (model_->backend() == Backend::cuda) {
        runner_ = device::cuda_make_runner(model_->cuda(), c, model_->plan(), shape, model_->options());
    } else {
        const options::Values* opts = &model_->options();
        runner_ = make_ops_runner(
            c, model_->plan(), shape, kMaxBatchCpu, [&](int n, int64_t rows) { return cpu::make_ops(c, n, rows); },
            [opts] { return opts->get(options::Id::threads); });
    }
    runner_->kv().reserve(0, n_ctx_);  // a context's pool is its own: every position backed from the start
}

Context::~Context() = default;

void Context::run(const int32_t* tokens, size_t n) {
    const int32_t pos0 = n_past_.load(std::memory_order_relaxed);
    pos_.resize(n);
    seq_.assign(n, 0);
    for (size_t i = 0; i < n; ++i) pos_[i] = pos0 + static_cast<int32_t>(i);
    const int32_t last = static_cast<int32_t>(n - 1);
    Batch b;
    b.tokens = std::span<const int32_t>(tokens, n);
    b.pos = pos_;
    b.seq = seq_;
    b.out_rows = std::span<const int32_t>(&last, 1);
    // Room for the tokens before anything changes (may throw std::bad_alloc), grown geometrically: a
    // reserve of the exact size would copy the whole history at every decode step.
    if (history_.capacity() - history_.size() < n) history_.reserve(std::max(history_.size() + n, 2 * history_.capacity()));
    runner_->forward(b);
    history_.insert(history_.end(), tokens, tokens + n);  // within the capacity reserved: cannot throw
    n_past_.store(pos0 + static_cast<int32_t>(n), std::memory_order_release);
    has_logits_ = true;
}

void Context::prefill(const int32_t* tokens, size_t n) {
    if (n == 0) fail(MINFER_ERR_INVALID_ARGUMENT, "prefill: no tokens");
    if (!tokens) fail(MINFER_ERR_INVALID_ARGUMENT, "prefill: tokens is NULL");
    // Room first: n is the caller's claim about its buffer, and when the tokens cannot fit there is no
    // reason to read any of them (a huge n would read far past the buffer).
    const int32_t n_past = n_past_.load(std::memory_order_relaxed);
    if (n > static_cast<size_t>(n_ctx_ - n_past))
        fail(MINFER_ERR_CONTEXT_FULL, "prefill: %zu tokens do not fit: the context holds %d of %d", n, n_past, n_ctx_);
    const int32_t n_vocab = model_->config().n_vocab;
    for (size_t i = 0; i < n; ++i)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            fail(MINFER_ERR_INVALID_ARGUMENT, "prefill: token %d at index %zu is outside the vocabulary [0, %d)", tokens[i], i, n_vocab);
    log_line(model_->log_level(), MINFER_LOG_DEBUG, "prefill: %zu tokens at position %d", n, n_past);
    run(tokens, n);
    generated_.clear();
    set_stop_reason(MINFER_STOP_NONE);
}

// The next token from the last forward's logits. A greedy sampler takes the runner's argmax, and one
// that cuts the row short (top-k) its candidates: on the GPU the logits stay on the device either way
// (8 bytes back, or a few hundred), and the token is the one the whole row gives.
int32_t Context::pick(sampling::Sampler::Generator& gen) {
    if (sampler_.greedy_only()) return runner_->argmax(0);
    const size_t nv = static_cast<size_t>(model_->config().n_vocab);
    if (testing::sample_candidates()) {
        const size_t m = sampler_.candidates_needed(nv, history_, affected_);
        if (m > 0 && m <= Runner::kCandidatesMax) {  // (the affected tokens are at most m)
            const size_t row = 0;
            const std::span<const int32_t> extra(affected_);
            if (runner_->fetch_candidates(std::span<const size_t>(&row, 1), m, std::span<const std::span<const int32_t>>(&extra, 1))) {
                const Runner::Candidates c = runner_->candidates(0);
                return sampler_.sample_candidates(nv, c.ids, c.logits, history_, gen);
            }
        }
    }
    return sampler_.sample(runner_->logits(0), history_, gen);
}

int32_t Context::decode() {
    if (!has_logits_) fail(MINFER_ERR_INVALID_ARGUMENT, "decode: no logits yet; call minfer_prefill first");
    const int32_t n_past = n_past_.load(std::memory_order_relaxed);
    if (n_past >= n_ctx_) fail(MINFER_ERR_CONTEXT_FULL, "decode: the context is full (%d tokens)", n_ctx_);
    // Sample from a copy of the generator and keep the draw only once the forward succeeded, so a
    // failed decode (every token banned, a failed forward) leaves the context as it was.
    sampling::Sampler::Generator gen = sampler_.generator();
    const int32_t token = pick(gen);
    if (token < 0) sampler_.sample(runner_->logits(0), history_, gen);  // every token banned: its error
    log_line(model_->log_level(), MINFER_LOG_DEBUG, "decode: token %d at position %d", token, n_past);
    // What can fail (the token's text, room for it) before the forward commits anything.
    const bool eog = model_->is_eog(token);
    std::string piece;
    if (!eog && !stops_.empty()) {
        piece = model_->tokenizer().piece(token);
        generated_.reserve(generated_.size() + piece.size());
    }
    run(&token, 1);
    sampler_.set_generator(gen);
    minfer_stop_reason reason = MINFER_STOP_NONE;
    if (eog) {
        reason = MINFER_STOP_EOG;
    } else if (!stops_.empty()) {
        // Look for a stop string that ends inside the new piece.
        const size_t longest = longest_stop_;
        const size_t before = generated_.size();
        generated_ += piece;  // within the capacity reserved: cannot throw
        const size_t from = before >= longest ? before - longest + 1 : 0;
        for (const std::string& s : stops_)
            if (generated_.find(s, from) != std::string::npos) reason = MINFER_STOP_STRING;
        if (generated_.size() > 4 * longest + 64) generated_.erase(0, generated_.size() - 2 * longest);
    }
    set_stop_reason(reason);
    return token;
}

void Context::set_stop_strings(std::vector<std::string> stops) {
    for (const std::string& s : stops)
        if (s.empty()) fail(MINFER_ERR_INVALID_ARGUMENT, "stop strings: an empty stop string would stop at once");
    if (!stops.empty()) model_->tokenizer();  // stop strings need the vocabulary's text
    stops_ = std::move(stops);
    longest_stop_ = 0;
    for (const std::string& s : stops_) longest_stop_ = std::max(longest_stop_, s.size());
    generated_.clear();
}

void Context::copy_logits(float* out, size_t cap) {
    if (!has_logits_) fail(MINFER_ERR_INVALID_ARGUMENT, "logits: none yet; call minfer_prefill first");
    if (!out) fail(MINFER_ERR_INVALID_ARGUMENT, "logits: out is NULL");
    const std::span<const float> logits = runner_->logits(0);
    if (cap < logits.size())
        fail(MINFER_ERR_BUFFER_TOO_SMALL, "logits: the buffer holds %zu floats, the vocabulary has %zu", cap, logits.size());
    std::copy(logits.begin(), logits.end(), out);
}

void Context::reset() {
    n_past_.store(0, std::memory_order_release);
    has_logits_ = false;
    history_.clear();
    generated_.clear();
    set_stop_reason(MINFER_STOP_NONE);
}

void Context::truncate(int32_t n_keep) {
    const int32_t n_past = n_past_.load(std::memory_order_relaxed);
    if (n_keep < 0 || n_keep > n_past)
        fail(MINFER_ERR_INVALID_ARGUMENT, "truncate: n_keep = %d is outside [0, %d]", n_keep, n_past);
    n_past_.store(n_keep, std::memory_order_release);
    has_logits_ = false;
    history_.resize(static_cast<size_t>(n_keep));
    generated_.clear();
    set_stop_reason(MINFER_STOP_NONE);
}

}  // namespace minfer::engine
