// The CPU backend: engine::Ops on host memory, multi-threaded, matmuls as dot products on the quantized
// weight blocks (activations prepared once per matmul in the format each weight type consumes).
#pragma once

#include <memory>

#include "engine/ops.h"
#include "model/config.h"

namespace minfer::cpu {

// Ops for one context of n_ctx tokens: allocates its KV cache (f32) now. Throws std::bad_alloc when the
// cache does not fit.
std::unique_ptr<engine::Ops> make_ops(const model::Config& config, int n_ctx);

}  // namespace minfer::cpu
