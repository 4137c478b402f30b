// The page bookkeeping of a paged KV cache: n_pages pages of kKvPage positions (engine/ops.h), shared by
// the sequence slots of a runner. Each slot has a page table; reserve() gives a slot the pages its
// positions need, release() takes back those beyond a kept prefix. The backend owns the memory of the
// pages; this class only decides which slot uses which page. Not thread-safe: its runner's owner (a
// context or a batch) calls it from the thread that runs the forward passes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/ops.h"

namespace minfer::engine {

class KvPool {
public:
    // n_ctx: the most positions a slot may hold. Throws Error(MINFER_ERR_INTERNAL) on a bad shape.
    KvPool(int n_seq, int n_ctx, int n_pages);

    static int pages_for(int64_t n_pos) { return static_cast<int>((n_pos + kKvPage - 1) / kKvPage); }

    int n_seq() const { return static_cast<int>(tables_.size()); }
    int n_ctx() const { return n_ctx_; }
    int n_pages() const { return n_pages_; }
    int free_pages() const { return static_cast<int>(free_.size()); }
    // The positions of `slot` backed by pages (a multiple of kKvPage, up to n_ctx rounded up).
    int capacity(int slot) const { return static_cast<int>(tables_[static_cast<size_t>(slot)].size()) * kKvPage; }

    // Backs positions 0 .. n_pos-1 of `slot`; false (and nothing changes) when the free pages are too few.
    // Throws Error(MINFER_ERR_INTERNAL) for a bad slot or n_pos > n_ctx.
    bool reserve(int slot, int n_pos);
    // Keeps the pages of positions 0 .. keep-1 of `slot` and frees the rest.
    void release(int slot, int keep);
    KvPages table(int slot) const { return tables_[static_cast<size_t>(slot)]; }
    // The most entries a page table can have: pages_for(n_ctx).
    int max_table() const { return pages_for(n_ctx_); }

    // Set when a slot's table changed; a backend that mirrors the tables (on the GPU) clears it as it
    // copies.
    bool changed(int slot) const { return changed_[static_cast<size_t>(slot)] != 0; }
    void clear_changed(int slot) { changed_[static_cast<size_t>(slot)] = 0; }

private:
    void check_slot(int slot) const;

    int n_ctx_ = 0, n_pages_ = 0;
    std::vector<std::vector<int32_t>> tables_;
    std::vector<int32_t> free_;  // a stack of free page ids; the lowest on top at the start
    std::vector<uint8_t> changed_;
};

}  // namespace minfer::engine
