// Synthetic Qwen2/Qwen3 GGUF models: the shapes of real presets (or tiny ones for tests) with random
// weights (normal, std 0.02; norm weights near 1) and a built-in byte-level vocabulary, or a real one
// imported from a Hugging Face tokenizer.json.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/json.h"

namespace minfer::synth {

struct Preset {
    const char* name;
    const char* arch;  // "qwen2" | "qwen3"
    int32_t n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
    bool tied;
    double rope_freq_base, rms_norm_eps;
};

std::span<const Preset> presets();
const Preset* find_preset(const std::string& name);

// The tokenizer section of a GGUF file (tokenizer.ggml.* and tokenizer.chat_template).
struct Vocab {
    std::vector<std::string> tokens;  // by id
    std::vector<int32_t> types;       // GGUF token types, by id
    std::vector<std::string> merges;  // "a b", by rank
    int32_t bos = -1, eos = -1, pad = -1;  // -1: not written
    std::string chat_template;             // empty: not written
};

// A byte-level BPE vocabulary with the Qwen2 pre-tokenizer from a Hugging Face tokenizer.json (and
// optionally its tokenizer_config.json; nullptr when absent): model.vocab by id plus added_tokens at
// their ids (special: control, others: user_defined), gaps filled with unused "[PADn]" tokens, the merges,
// bos/eos/pad from the config (else eos = "<|endoftext|>") and the config's chat_template. Throws
// Error(UNSUPPORTED) for another model type, pre-tokenizer, normalizer or decoder (naming it) and
// Error(BAD_MODEL) for an inconsistent file (duplicate ids, a merge of unknown tokens, ...).
Vocab import_hf_vocab(const json::Value& tokenizer, const json::Value* config);

// Writes the model; throws Error (INVALID_ARGUMENT for an unknown preset or mix, IO, CANCELLED).
void write_model(const std::string& path, const std::string& preset, const std::string& mix, uint64_t seed);
// The same with the vocabulary from a tokenizer.json (and tokenizer_config.json when not empty); the
// vocabulary size is the larger of the preset's and the token count, padded with unused tokens.
// Throws as write_model and import_hf_vocab, and Error(IO) for a file that cannot be read.
void write_model_vocab(const std::string& path, const std::string& preset, const std::string& mix, uint64_t seed,
                       const std::string& tokenizer_json, const std::string& tokenizer_config_json);

}  // namespace minfer::synth
