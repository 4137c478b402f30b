// Model (immutable after load, shared by contexts and threads) and Context (KV cache and sampling
// state; one thread at a time, guarded by a busy flag, except for the atomic n_past and stop_reason,
// which any thread may read at any time).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "device/cuda_backend.h"
#include "engine/runner.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "options/options.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace minfer::engine {

enum class Backend { cpu, cuda };

class Model {
public:
    // Maps, validates and prepares the model. `opts` are the options in force for it. Throws Error.
    static std::shared_ptr<Model> open(const std::string& path, const options::Values& opts);

    const gguf::File& file() const { return *file_; }
    const model::Config& config() const { return config_; }
    const model::Plan& plan() const { return plan_; }
    options::Values& options() { return options_; }
    const options::Values& options() const { return options_; }
    Backend backend() const { return backend_; }
    // The device state of a model on the CUDA backend (null on the CPU).
    const std::shared_ptr<device::CudaModel>& cuda() const { return cuda_; }
    // Device memory by category (zero on the CPU backend).
    device::Vram vram() const { return cuda_ ? device::cuda_vram(*cuda_) : device::Vram{}; }
    uint64_t n_params() const { return n_params_; }
    const std::vector<int32_t>& tensor_types() const { return tensor_types_; }
    // Metadata keys in file order, NUL-terminated (the file's own bytes are not).
    const std::vector<std::string>& meta_keys() const { return meta_keys_; }
    int log_level() const { return static_cast<int>(options_.get(options::Id::log_level)); }
    // The vocabulary's tokenizer; throws Error(MINFER_ERR_UNSUPPORTED) when the file's tokenizer is one
    // minfer does not implement (the model still runs on token ids).
    const tokenizer::Tokenizer& tokenizer() const;
    bool is_eog(int32_t token) const;

private:
    Model() = default;
    std::shared_ptr<const gguf::File> file_;
    model::Config config_;
    model::Plan plan_;
    options::Values options_;
    Backend backend_ = Backend::cpu;
    std::shared_ptr<device::CudaModel> cuda_;
    uint64_t n_params_ = 0;
    std::vector<int32_t> tensor_types_;
    std::vector<std::string> meta_keys_;
    std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
    std::string tokenizer_error_;  // why there is no tokenizer
};

class Context {
public:
    // Allocates the KV cache for `ctx_len` tokens (the model's option when created). Throws Error.
    explicit Context(std::shared_ptr<Model> model);
    ~Context();

    Model& model() { return *model_; }
    int32_t n_ctx() const { return n_ctx_; }
    // Any thread, at any time, also while the thread holding the context prefills or decodes.
    int32_t n_past() const { return n_past_.load(std::memory_order_acquire); }

    // Each validates first and throws Error; on any error the context is unchanged.
    // prefill checks room before it reads a token: an n beyond the room reads nothing.
    void prefill(const int32_t* tokens, size_t n);
    // Picks the next token from the last logits with the context's sampler chain (sampler(): penalties
    // over the token history, logit bias, top-k/top-p/min-p, temperature, a seeded draw; greedy, the
    // highest logit and the lowest id on ties, when temperature <= 0, as a new context's sampler is),
    // runs it through the model and returns it. Sets stop_reason() (end of generation, a stop string).
    // The sampler's generator advances only when the forward succeeds.
    int32_t decode();
    void copy_logits(float* out, size_t cap);
    void reset();
    void truncate(int32_t n_keep);

    sampling::Sampler& sampler() { return sampler_; }
    void set_stop_strings(std::vector<std::string> stops);
    // Any thread, at any time, like n_past().
    minfer_stop_reason stop_reason() const { return stop_reason_.load(std::memory_order_acquire); }

    // Busy guard: a second concurrent call on the same context fails with MINFER_ERR_BUSY.
    bool try_acquire() { return !busy_.exchange(true, std::memory_order_acquire); }
    void release() { busy_.store(false, std::memory_order_release); }

private:
    // Runs tokens through the model (the runner cuts them in chunks); on success the new logits replace
    // the old ones.
    void run(const int32_t* tokens, size_t n);
    // The next token from the last forward's logits (decode), drawing from `gen`.
    int32_t pick(sampling::Sampler::Generator& gen);
    void set_stop_reason(minfer_stop_reason r) { stop_reason_.store(r, std::memory_order_release); }

    std::shared_ptr<Model> model_;
    int32_t n_ctx_ = 0;
    // Written only by the thread holding the busy flag; atomic because n_past() and stop_reason() are
    // read without it.
    std::atomic<int32_t> n_past_{0};
    std::unique_ptr<Runner> runner_;  // one sequence slot: this context's KV cache
    std::vector<int32_t> pos_, seq_;  // the batch of the current call
    bool has_logits_ = false;         // the runner's output row 0 is the last position's
    std::vector<int32_t> history_;  // the tokens in the KV cache, oldest first (for penalties)
    sampling::Sampler sampler_;
    std::vector<int32_t> affected_;  // scratch: the tokens the penalties and the bias change (pick)
    std::vector<std::string> stops_;
    size_t longest_stop_ = 0;       // the longest of stops_
    std::string generated_;         // bytes decoded since the last prefill, for stop strings
    std::atomic<minfer_stop_reason> stop_reason_{MINFER_STOP_NONE};
    std::atomic<bool> busy_{false};
};

}  // namespace minfer::engine
