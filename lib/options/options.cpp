#include "options/options.h"

#include <cctype>
#include <cinttypes>
#include <limits>
#include <mutex>

#include "core/error.h"

namespace minfer::options {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// The table. Order is the enumeration order of minfer_option_info and must follow enum Id.
constexpr Def kTable[] = {
    {Id::device, "device", MINFER_OPTION_ENUM, MINFER_OPTION_SCOPE_LOAD, "auto", 0, 0, "auto|cpu|cuda",
     "Backend: auto picks CUDA when a usable GPU is present, cuda insists on it, cpu forces the CPU."},
    {Id::mmap, "mmap", MINFER_OPTION_BOOL, MINFER_OPTION_SCOPE_LOAD, "true", 0, 0, "",
     "true maps the model file (if the file is truncated on disk while open, the next read kills the process with "
     "SIGBUS); false copies it into process memory at open (memory and a read of the whole file), immune to later "
     "changes of the file. The copy is the whole file and stays for the model's lifetime, also with device=cuda "
     "(which holds its own copy of the weights on the GPU)."},
    {Id::threads, "threads", MINFER_OPTION_INT, MINFER_OPTION_SCOPE_RUNTIME, "0", 0, 1024, "",
     "CPU worker threads (the CPU backend's forward; a batch's sampling of its rows on either backend); 0 uses one per physical core the process may run on (SMT siblings share a core)."},
    {Id::ctx_len, "ctx_len", MINFER_OPTION_INT, MINFER_OPTION_SCOPE_RUNTIME, "4096", 0, int64_t{1} << 22, "",
     "Tokens per context, read when a context is created; 0 uses the model's training context length."},
    {Id::w16_cache, "w16_cache", MINFER_OPTION_ENUM, MINFER_OPTION_SCOPE_LOAD, "auto", 0, 0, "auto|on|off",
     "Persistent f16 copy of quantized matmul weights for prefill (CUDA); auto applies the size gate."},
    {Id::w16_enable_bytes, "w16_enable_bytes", MINFER_OPTION_BYTES, MINFER_OPTION_SCOPE_LOAD, "2147483648", 0,
     int64_t{1} << 50, "", "Size gate of w16_cache=auto: warm only when quantized matmul weights total at least this."},
    {Id::fused_b, "fused_b", MINFER_OPTION_BOOL, MINFER_OPTION_SCOPE_LOAD, "false", 0, 0, "",
     "Prefill GEMM dequantizes weight tiles in shared memory as it runs (CUDA): no f16 cache and no scratch."},
    {Id::mmq, "mmq", MINFER_OPTION_ENUM, MINFER_OPTION_SCOPE_LOAD, "auto", 0, 0, "auto|on|off",
     "Int8 matmul path for quantized prefill (CUDA; not built yet: on only keeps the f16 cache off)."},
    {Id::gemm, "gemm", MINFER_OPTION_ENUM, MINFER_OPTION_SCOPE_LOAD, "auto", 0, 0, "auto|own|cublas",
     "f16 prefill GEMM (CUDA): own tensor-core kernel, or cuBLAS loaded at run time; auto takes cuBLAS when it loads."},
    {Id::log_level, "log_level", MINFER_OPTION_ENUM, MINFER_OPTION_SCOPE_RUNTIME, "info", 0, 0,
     "off|error|warn|info|debug", "Most verbose level passed to the log callback."},
    {Id::cuda_graph, "cuda_graph", MINFER_OPTION_BOOL, MINFER_OPTION_SCOPE_RUNTIME, "true", 0, 0, "",
     "Decode steps replay a CUDA graph captured once per context (CUDA; read when a context is created); false "
     "launches every kernel each step (the same tokens, more CPU time per token)."},
    {Id::matvec_int8, "matvec_int8", MINFER_OPTION_BOOL, MINFER_OPTION_SCOPE_RUNTIME, "true", 0, 0, "",
     "Mat-vecs of q4_0, q8_0, q4_K and q6_K weights (a decode step, and chunks of 2 to 8 tokens in one read of "
     "each weight; q5_K and q5_0 for one token) take their input as two int8 digits per value (about 15 bits) on integer tensor cores (CUDA; "
     "read when a context is created); false keeps the f32 input for one token and the GEMMs for several."},
    {Id::gemm_tune, "gemm_tune", MINFER_OPTION_BOOL, MINFER_OPTION_SCOPE_LOAD, "false", 0, 0, "",
     "cuBLAS prefill GEMMs with an f32 output (CUDA; the concatenated gate/up GEMM of more than 64 tokens writes "
     "f16 by cuBLAS's own choice): true times cuBLASLt's candidate algorithms and cuBLAS's own choice on each shape's first call "
     "(tokens by powers of two; that call takes up to about 0.1 s longer) and keeps the fastest for the model's "
     "life; false keeps cuBLAS's own choice, the same algorithm in every process."},
    {Id::prefill_chunk, "prefill_chunk", MINFER_OPTION_INT, MINFER_OPTION_SCOPE_RUNTIME, "0", 0, 32768, "",
     "Tokens per CUDA forward pass of a long prompt (CUDA; read when a context is created): each pass's activations "
     "take scratch memory in proportion (about 0.27 MB a token on a 7B). 0 picks the largest of 8192, 4096 and 2048 "
     "whose scratch fits in an eighth of the free GPU memory; values below 64 count as 64; never more than a forward "
     "is given (the context's positions, a batch's max_step_tokens). The info log names the choice."},
};
static_assert(sizeof kTable / sizeof kTable[0] == kCount, "one table row per option id");

std::mutex g_defaults_mutex;
Values& defaults_locked() {
    static Values v;
    return v;
}

bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
    return true;
}

std::string quoted(std::string_view text) {
    std::string s = "'";
    for (char c : text) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
            s += strprintf("\\x%02x", static_cast<unsigned char>(c));
        else
            s += c;
    }
    return s + "'";
}

std::string known_names() {
    std::string s;
    for (const Def& d : kTable) {
        if (!s.empty()) s += ", ";
        s += d.name;
    }
    return s;
}

// Parses an optionally signed decimal integer; false on garbage or overflow.
bool parse_int(std::string_view t, int64_t* out, size_t* consumed) {
    size_t i = 0;
    bool neg = false;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) neg = t[i++] == '-';
    if (i >= t.size() || !std::isdigit(static_cast<unsigned char>(t[i]))) return false;
    uint64_t v = 0;
    const uint64_t limit = neg ? uint64_t{1} << 63 : static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) {
        uint64_t digit = static_cast<uint64_t>(t[i] - '0');
        if (v > (limit - digit) / 10) return false;
        v = v * 10 + digit;
        ++i;
    }
    *consumed = i;
    *out = neg ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
    return true;
}

}  // namespace

std::span<const Def> table() { return kTable; }

const Def& def(Id id) { return kTable[static_cast<size_t>(id)]; }

const Def* find(std::string_view name) {
    for (const Def& d : kTable)
        if (name == d.name) return &d;
    return nullptr;
}

std::string bound_text(const Def& d, bool upper) {
    if (d.type != MINFER_OPTION_INT && d.type != MINFER_OPTION_BYTES) return "";
    return strprintf("%" PRId64, upper ? d.max : d.min);
}

int64_t parse(const Def& d, std::string_view text) {
    switch (d.type) {
    case MINFER_OPTION_BOOL:
        for (const char* t : {"true", "1", "on", "yes"})
            if (iequals(text, t)) return 1;
        for (const char* f : {"false", "0", "off", "no"})
            if (iequals(text, f)) return 0;
        fail(MINFER_ERR_OPTION_VALUE, "option '%s' expects a boolean (true|false), got %s", d.name, quoted(text).c_str());
    case MINFER_OPTION_ENUM: {
        std::string_view choices = d.choices;
        int64_t index = 0;
        while (!choices.empty()) {
            size_t bar = choices.find('|');
            std::string_view c = choices.substr(0, bar);
            if (iequals(text, c)) return index;
            ++index;
            choices = bar == std::string_view::npos ? std::string_view{} : choices.substr(bar + 1);
        }
        fail(MINFER_ERR_OPTION_VALUE, "option '%s' expects one of %s, got %s", d.name, d.choices, quoted(text).c_str());
    }
    case MINFER_OPTION_INT:
    case MINFER_OPTION_BYTES: {
        int64_t v = 0;
        size_t used = 0;
        bool ok = parse_int(text, &v, &used);
        if (ok && d.type == MINFER_OPTION_BYTES && used < text.size()) {
            std::string_view suffix = text.substr(used);
            int shift = -1;
            const struct { const char* s; int shift; } units[] = {
                {"b", 0}, {"k", 10}, {"kib", 10}, {"m", 20}, {"mib", 20}, {"g", 30}, {"gib", 30}, {"t", 40}, {"tib", 40}};
            for (const auto& u : units)
                if (iequals(suffix, u.s)) shift = u.shift;
            if (shift < 0 || v < 0 || (shift > 0 && v > (std::numeric_limits<int64_t>::max() >> shift)))
                ok = false;
            else
                v <<= shift, used = text.size();
        }
        if (!ok || used != text.size()) {
            fail(MINFER_ERR_OPTION_VALUE, "option '%s' expects %s in [%" PRId64 ", %" PRId64 "], got %s", d.name,
                 d.type == MINFER_OPTION_BYTES ? "a byte count (suffixes K, M, G, T)" : "an integer", d.min, d.max,
                 quoted(text).c_str());
        }
        if (v < d.min || v > d.max)
            fail(MINFER_ERR_OPTION_VALUE, "option '%s' = %" PRId64 " is out of range [%" PRId64 ", %" PRId64 "]", d.name, v,
                 d.min, d.max);
        return v;
    }
    }
    fail(MINFER_ERR_INTERNAL, "option '%s' has an unknown type", d.name);
}

std::string format(const Def& d, int64_t value) {
    switch (d.type) {
    case MINFER_OPTION_BOOL:
        return value ? "true" : "false";
    case MINFER_OPTION_ENUM: {
        std::string_view choices = d.choices;
        for (int64_t i = 0; i < value && !choices.empty(); ++i) {
            size_t bar = choices.find('|');
            choices = bar == std::string_view::npos ? std::string_view{} : choices.substr(bar + 1);
        }
        return std::string(choices.substr(0, choices.find('|')));
    }
    default:
        return strprintf("%" PRId64, value);
    }
}

Values::Values() {
    for (const Def& d : kTable) v_[static_cast<size_t>(d.id)].store(parse(d, d.default_text), std::memory_order_relaxed);
}

Values snapshot_defaults() {
    std::lock_guard<std::mutex> lock(g_defaults_mutex);
    return defaults_locked();
}

static const Def& lookup(std::string_view key) {
    const Def* d = find(key);
    if (!d) fail(MINFER_ERR_UNKNOWN_OPTION, "unknown option %s (known: %s)", quoted(key).c_str(), known_names().c_str());
    return *d;
}

void set(Values& values, std::string_view key, std::string_view text, bool loaded) {
    const Def& d = lookup(key);
    int64_t v = parse(d, text);
    if (loaded && d.scope == MINFER_OPTION_SCOPE_LOAD)
        fail(MINFER_ERR_OPTION_LOCKED,
             "option '%s' is read when the model is opened; set it before minfer_open (with a NULL model or "
             "minfer_open_with_options)",
             d.name);
    values.set(d.id, v);
}

void set_default(std::string_view key, std::string_view text) {
    std::lock_guard<std::mutex> lock(g_defaults_mutex);
    set(defaults_locked(), key, text, false);
}

std::string get_text(const Values& values, std::string_view key) {
    const Def& d = lookup(key);
    return format(d, values.get(d.id));
}

std::string get_default_text(std::string_view key) {
    std::lock_guard<std::mutex> lock(g_defaults_mutex);
    return get_text(defaults_locked(), key);
}

}  // namespace minfer::options
