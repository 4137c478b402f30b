// How the CUDA forward (cuda/forward.cu) cuts a chunk of a batch into runs and its single-token runs into
// decode attention launches. Plain C++, so the unit tests (tests/test_batch.cpp) run it without a GPU.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace minfer::cuda {

// A run: consecutive rows of one slot at consecutive positions; begin is its first row within the chunk.
struct BatchRun {
    int begin, n, pos0, slot;
};

// The runs of rows [c0, c1) of a batch (pos and seq: each row's position and slot), in row order.
inline void batch_runs(std::span<const int32_t> pos, std::span<const int32_t> seq, size_t c0, size_t c1, std::vector<BatchRun>& runs) {
    runs.clear();
    for (size_t i = c0; i < c1;) {
        size_t j = i + 1;
        while (j < c1 && seq[j] == seq[i] && pos[j] == pos[j - 1] + 1) ++j;
        runs.push_back(BatchRun{static_cast<int>(i - c0), static_cast<int>(j - i), pos[i], seq[i]});
        i = j;
    }
}

// Whether a slot has more than one run: its rows are apart in the batch (engine::Runner allows it as long
// as they come in position order), so a later run reads keys an earlier one writes in the same step.
inline bool slot_repeats(std::span<const BatchRun> runs) {
    std::vector<int> slots(runs.size());
    std::transform(runs.begin(), runs.end(), slots.begin(), [](const BatchRun& r) { return r.slot; });
    std::sort(slots.begin(), slots.end());
    return std::adjacent_find(slots.begin(), slots.end()) != slots.end();
}

// The end of the decode attention launch that starts at run r (a single-token run): the single-token runs
// from r on, at most `limit` of them, ending before a slot the launch already has. The decode kernel
// copies a row's keys before its newest before its pdl_wait, as written by earlier steps; a slot's second
// row of the step needs the key of its first, which qkv_finish writes in this step. In a launch of its
// own it starts only after the launch before has passed its wait, so after qkv_finish has finished
// (cuda/pdl.cuh: the attention keeps pdl_wait before its trigger).
inline size_t decode_group_end(std::span<const BatchRun> runs, size_t r, size_t limit) {
    size_t e = r + 1;
    auto in_launch = [&](int slot) {
        for (size_t k = r; k < e; ++k)
            if (runs[k].slot == slot) return true;
        return false;
    };
    while (e < runs.size() && runs[e].n == 1 && e - r < limit && !in_launch(runs[e].slot)) ++e;
    return e;
}

// Whether the decode launch that ends at run e is the step's last: no single-token run from e on. Only
// the last may let its dependent start before its own wait (the attention's early trigger,
// cuda/early_trigger.h): a later decode launch must start after qkv_finish has ended.
inline bool decode_launch_last(std::span<const BatchRun> runs, size_t e) {
    return std::none_of(runs.begin() + static_cast<std::ptrdiff_t>(e), runs.end(), [](const BatchRun& r) { return r.n == 1; });
}

}  // namespace minfer::cuda
