// The CPU backend: engine::Ops on host memory, multi-threaded, matmuls as dot products on the quantized
// weight blocks (activations prepared once per matmul in the format each weight type consumes).
#pragma once

#include <memory>

#include "engine/ops.h"
#include "model/config.h"

namespace minfer::cpu {

// Ops with a paged KV cache (f32) of kv_rows rows per layer, for sequences of up to n_ctx positions:
// allocates the cache now. Throws std::bad_alloc when it does not fit.
std::unique_ptr<engine::Ops> make_ops(const model::Config& config, int n_ctx, int64_t kv_rows);

namespace testing {
// Fault injection for the tests (not part of the library's interface: libminfer.so exports minfer_*
// only). The next `count` forward calls of CPU contexts on the calling thread fail at their last step,
// after the KV cache was written and before the logits are read, with MINFER_ERR_INTERNAL.
void fail_next_forwards(int count);
// The next `count` times a CPU backend on the calling thread sets up its threads and per-thread buffers
// anew (at its creation, or at a forward after the threads option changed), the setup throws
// std::bad_alloc as an allocation that does not fit would, before it changes anything.
void fail_next_thread_setups(int count);
}  // namespace testing

}  // namespace minfer::cpu
