// The option table: every switch of the library, typed and validated. Options replace environment
// variables (nothing in lib/ or cuda/ reads one). docs/options.md is generated from this table
// (`minfer options --markdown`) and a test fails when it drifts.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "minfer.h"

namespace minfer::options {

enum class Id : int { device, mmap, threads, ctx_len, w16_cache, w16_enable_bytes, fused_b, mmq, gemm, log_level, cuda_graph, matvec_int8, gemm_tune, prefill_chunk, count_ };
constexpr size_t kCount = static_cast<size_t>(Id::count_);

// Enum option values, as indices into the choices string.
enum Device : int64_t { kDeviceAuto = 0, kDeviceCpu = 1, kDeviceCuda = 2 };
enum Tristate : int64_t { kAuto = 0, kOn = 1, kOff = 2 };
enum Gemm : int64_t { kGemmAuto = 0, kGemmOwn = 1, kGemmCublas = 2 };
// log_level: 0 off, then the minfer_log_level values 1..4.

struct Def {
    Id id;
    const char* name;
    minfer_option_type type;
    minfer_option_scope scope;
    const char* default_text;  // canonical text of the default
    int64_t min, max;          // INT and BYTES bounds (inclusive)
    const char* choices;       // ENUM: "a|b|c"
    const char* doc;           // one line
};

std::span<const Def> table();
const Def& def(Id id);
const Def* find(std::string_view name);  // nullptr when unknown

// Parses `text` as a value of `d`: bool -> 0/1, enum -> index, int/bytes -> the number.
// Throws Error(MINFER_ERR_OPTION_VALUE) with a message naming the option, the expected form and the text.
int64_t parse(const Def& d, std::string_view text);
// Canonical text of a parsed value.
std::string format(const Def& d, int64_t value);
std::string bound_text(const Def& d, bool upper);  // "" for BOOL and ENUM

// A full set of values. Atomics so a runtime option can change while other threads read it.
class Values {
public:
    Values();  // the table's defaults
    Values(const Values& other) { copy_from(other); }
    Values& operator=(const Values& other) {
        copy_from(other);
        return *this;
    }
    int64_t get(Id id) const { return v_[static_cast<size_t>(id)].load(std::memory_order_relaxed); }
    void set(Id id, int64_t value) { v_[static_cast<size_t>(id)].store(value, std::memory_order_relaxed); }

private:
    void copy_from(const Values& other) {
        for (size_t i = 0; i < kCount; ++i) v_[i].store(other.v_[i].load(std::memory_order_relaxed), std::memory_order_relaxed);
    }
    std::array<std::atomic<int64_t>, kCount> v_;
};

// Process-wide defaults for models opened later.
Values snapshot_defaults();
// Validates and sets one option. `loaded` is true for an open model: load-scope options are refused.
// Throws Error; on error nothing changes.
void set(Values& values, std::string_view key, std::string_view text, bool loaded);
void set_default(std::string_view key, std::string_view text);
// The option's current value in canonical text; throws Error(MINFER_ERR_UNKNOWN_OPTION).
std::string get_text(const Values& values, std::string_view key);
std::string get_default_text(std::string_view key);

}  // namespace minfer::options
