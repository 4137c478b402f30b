#include "engine/kv_pool.h"

#include "core/error.h"

namespace minfer::engine {

KvPool::KvPool(int n_seq, int n_ctx, int n_pages) : n_ctx_(n_ctx), n_pages_(n_pages) {
    if (n_seq <= 0 || n_ctx <= 0 || n_pages <= 0)
        fail(MINFER_ERR_INTERNAL, "KV pool: %d slots of %d positions over %d pages", n_seq, n_ctx, n_pages);
    tables_.resize(static_cast<size_t>(n_seq));
    for (auto& t : tables_) t.reserve(static_cast<size_t>(max_table()));
    free_.reserve(static_cast<size_t>(n_pages));
    for (int p = n_pages - 1; p >= 0; --p) free_.push_back(p);
    changed_.assign(static_cast<size_t>(n_seq), 1);
}

void KvPool::check_slot(int slot) const {
    if (slot < 0 || slot >= n_seq()) fail(MINFER_ERR_INTERNAL, "KV pool: slot %d of %d", slot, n_seq());
}

bool KvPool::reserve(int slot, int n_pos) {
    check_slot(slot);
    if (n_pos < 0 || n_pos > n_ctx_) fail(MINFER_ERR_INTERNAL, "KV pool: %d positions, a slot holds %d", n_pos, n_ctx_);
    std::vector<int32_t>& t = tables_[static_cast<size_t>(slot)];
    const size_t need = static_cast<size_t>(pages_for(n_pos));
    if (need <= t.size()) return true;
    if (need - t.size() > free_.size()) return false;
    while (t.size() < need) {  // no allocation: both vectors reserved their largest size
        t.push_back(free_.back());
        free_.pop_back();
    }
    changed_[static_cast<size_t>(slot)] = 1;
    return true;
}

void KvPool::release(int slot, int keep) {
    check_slot(slot);
    std::vector<int32_t>& t = tables_[static_cast<size_t>(slot)];
    const size_t want = static_cast<size_t>(pages_for(keep < 0 ? 0 : keep));
    if (want >= t.size()) return;
    while (t.size() > want) {
        free_.push_back(t.back());
        t.pop_back();
    }
    changed_[static_cast<size_t>(slot)] = 1;
}

}  // namespace minfer::engine
