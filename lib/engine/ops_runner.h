// A Runner over engine::Ops: the plain forward of engine/forward.cpp. The CPU backend's runner; tests
// also run it over the CUDA backend's Ops, op by op, as a second path to compare the CUDA backend's own
// loop against.
#pragma once

#include <functional>
#include <memory>

#include "engine/forward.h"
#include "engine/ops.h"
#include "engine/runner.h"

namespace minfer::engine {

// make_ops(n_ctx, kv_rows) makes the runner's Ops: KV rows for the shape's pages (kv_rows = pages *
// kKvPage), sequences of up to n_ctx positions. `threads` is read before each call (the `threads`
// option, passed to Ops::begin); max_tokens bounds the tokens per forward of the plain loop (a longer
// batch is cut into several). The plan (and the file it points into) must outlive the runner: the Model
// that owns them does.
std::unique_ptr<Runner> make_ops_runner(const model::Config& config, const model::Plan& plan, const RunnerShape& shape,
                                        int max_tokens,
                                        const std::function<std::unique_ptr<Ops>(int n_ctx, int64_t kv_rows)>& make_ops,
                                        std::function<int64_t()> threads);

}  // namespace minfer::engine
