// Model-level view of a GGUF file: the hyperparameters of a supported architecture and the tensor plan
// (every tensor the forward pass needs, with its shape and type checked once, here, at load).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace minfer::model {

enum class Arch { qwen2, qwen3 };

// Sanity limits: anything beyond these is a corrupt header, not a model.
inline constexpr int64_t kMaxLayers = 1024;
inline constexpr int64_t kMaxHeads = 1024;
inline constexpr int64_t kMaxEmbd = 1 << 17;
inline constexpr int64_t kMaxHeadDim = 1024;
inline constexpr int64_t kMaxFF = 1 << 20;
inline constexpr int64_t kMaxVocab = 1 << 24;
inline constexpr int64_t kMaxCtx = 1 << 24;

struct Config {
    Arch arch = Arch::qwen2;
    std::string arch_name;   // "qwen2"
    std::string name;        // general.name, may be empty
    int32_t n_vocab = 0;
    int32_t n_ctx_train = 0;
    int32_t n_embd = 0;
    int32_t n_layer = 0;
    int32_t n_head = 0;
    int32_t n_head_kv = 0;
    int32_t head_dim = 0;     // <arch>.attention.key_length, default n_embd / n_head
    int32_t n_ff = 0;
    double rope_freq_base = 10000.0;
    double rms_norm_eps = 1e-6;
    bool qkv_bias = false;     // qwen2
    bool qk_norm = false;      // qwen3
    // Tests only: the bugs planted in this model (engine/testing.h), 0 in every real use.
    uint32_t planted = 0;
    // Special token ids, -1 when absent.
    int32_t bos = -1, eos = -1, pad = -1, unk = -1;
};

struct Layer {
    const gguf::TensorInfo* attn_norm;  // [n_embd] f32
    const gguf::TensorInfo* wq;         // [n_embd][n_head * head_dim]      (ne0 = n_embd)
    const gguf::TensorInfo* wk;         // [n_embd][n_head_kv * head_dim]
    const gguf::TensorInfo* wv;         // [n_embd][n_head_kv * head_dim]
    const gguf::TensorInfo* wo;         // [n_head * head_dim][n_embd]
    const gguf::TensorInfo* bq;         // [n_head * head_dim] f32, qwen2 only
    const gguf::TensorInfo* bk;         // [n_head_kv * head_dim] f32, qwen2 only
    const gguf::TensorInfo* bv;         // [n_head_kv * head_dim] f32, qwen2 only
    const gguf::TensorInfo* q_norm;     // [head_dim] f32, qwen3 only
    const gguf::TensorInfo* k_norm;     // [head_dim] f32, qwen3 only
    const gguf::TensorInfo* ffn_norm;   // [n_embd] f32
    const gguf::TensorInfo* w_gate;     // [n_embd][n_ff]
    const gguf::TensorInfo* w_up;       // [n_embd][n_ff]
    const gguf::TensorInfo* w_down;     // [n_ff][n_embd]
};

struct Plan {
    const gguf::TensorInfo* tok_embd;     // [n_embd][n_vocab]
    const gguf::TensorInfo* output_norm;  // [n_embd] f32
    const gguf::TensorInfo* output;       // [n_embd][n_vocab]; == tok_embd when tied
    bool tied_output = false;             // no output.weight: the token embedding is reused
    std::vector<Layer> layers;
};

// Both throw Error: MINFER_ERR_BAD_MODEL for inconsistent files, MINFER_ERR_UNSUPPORTED for valid files
// this build cannot run (another architecture, a tensor type the engine lacks).
Config read_config(const gguf::File& file);
Plan plan_tensors(const gguf::File& file, const Config& config);
// The matmul weights of every layer (q, k, v, o, gate, up, down), in layer order: the weights prefill
// multiplies by many tokens (the output projection only ever sees the last one).
std::vector<const gguf::TensorInfo*> layer_matmuls(const Plan& plan);

}  // namespace minfer::model
