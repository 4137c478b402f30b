// KvMap: where a sequence's KV rows live in a layer's cache, for the kernels. It includes no CUDA header
// (include it after them, or after tests/emu's stand-ins), so device code the emulator runs can use it.
#pragma once

#include <cstdint>

namespace minfer::cuda {

// Where the KV rows of a token's sequence live in one layer's cache ([rows][n_head_kv * head_dim] f16).
// With `pages` null, row = position (one contiguous sequence). Otherwise the cache is paged (engine/ops.h,
// pages of 1 << kKvPageShift positions): `pages` holds a page table of `stride` entries per sequence slot
// on the device, token t's slot is slot[t] (slot0 when `slot` is null), and position p of it lives in
// row pages[slot * stride + p >> kKvPageShift] << kKvPageShift | p % (1 << kKvPageShift).
constexpr int kKvPageShift = 4;
struct KvMap {
    const int32_t* pages = nullptr;
    const int32_t* slot = nullptr;
    int slot0 = 0;
    int stride = 0;
};
__device__ __forceinline__ int64_t kv_row(const KvMap& m, int t, int p) {
    if (!m.pages) return p;
    const int s = m.slot ? m.slot[t] : m.slot0;
    return (static_cast<int64_t>(m.pages[static_cast<int64_t>(s) * m.stride + (p >> kKvPageShift)]) << kKvPageShift) |
           (p & ((1 << kKvPageShift) - 1));
}

}  // namespace minfer::cuda
