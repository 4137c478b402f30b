// The prefill path policy of the CUDA backend. Host-only so the CPU-only build and CI test it.
//
// Measured on the H200 for the qwen2-7b preset in the q4_K_M-like mix (docs/perf.md): the f16 cache is
// the fastest prefill (it removes the per-call dequantization sweep), then the two-pass path, then the
// fused path (which trades speed for zero extra memory). So: the cache wherever it is allowed and fits,
// two-pass otherwise; fused only when asked for.
#include <cinttypes>

#include "core/error.h"
#include "device/cuda_backend.h"
#include "options/options.h"

namespace minfer::device {

CudaSettings cuda_settings(const options::Values& opts) {
    CudaSettings s;
    s.w16_cache = opts.get(options::Id::w16_cache);
    s.w16_enable_bytes = static_cast<uint64_t>(opts.get(options::Id::w16_enable_bytes));
    s.fused_b = opts.get(options::Id::fused_b) != 0;
    s.mmq = opts.get(options::Id::mmq);
    s.gemm = opts.get(options::Id::gemm);
    s.gemm_tune = opts.get(options::Id::gemm_tune) != 0;
    return s;
}

const char* prefill_path_name(PrefillPath p) {
    switch (p) {
        case PrefillPath::two_pass: return "two_pass";
        case PrefillPath::w16_cache: return "w16_cache";
        case PrefillPath::fused: return "fused";
    }
    return "?";
}

std::string mib(uint64_t bytes) { return strprintf("%.1f MiB", static_cast<double>(bytes) / 1048576.0); }

PathChoice choose_prefill_path(const CudaSettings& s, uint64_t convert_bytes, uint64_t f16_bytes, uint64_t free_bytes) {
    if (s.fused_b) return {PrefillPath::fused, "fused_b=true: B tiles are dequantized inside the GEMM (no f16 cache, no scratch)"};
    if (s.mmq == options::kOn)
        return {PrefillPath::two_pass, "mmq=on: no f16 cache next to an int8 prefill path (which is not built yet: two-pass until then)"};
    if (s.w16_cache == options::kOff) return {PrefillPath::two_pass, "w16_cache=off: per-call dequantization into a scratch"};
    if (convert_bytes == 0) return {PrefillPath::two_pass, "every matmul weight is f16 already: nothing to cache"};
    if (s.w16_cache == options::kAuto && convert_bytes < s.w16_enable_bytes)
        return {PrefillPath::two_pass, strprintf("w16_cache=auto: %s of matmul weights to dequantize is below w16_enable_bytes (%s); "
                                                 "two-pass keeps the footprint small",
                                                 mib(convert_bytes).c_str(), mib(s.w16_enable_bytes).c_str())};
    if (f16_bytes + kW16Reserve > free_bytes)
        return {PrefillPath::two_pass, strprintf("w16_cache=%s: the cache needs %s and %s is free (keeping %s for contexts); two-pass instead",
                                                 s.w16_cache == options::kOn ? "on" : "auto", mib(f16_bytes).c_str(),
                                                 mib(free_bytes).c_str(), mib(kW16Reserve).c_str())};
    return {PrefillPath::w16_cache,
            strprintf("w16_cache=%s: a %s f16 copy of the matmul weights, made once at load; the fastest measured prefill path that fits "
                      "(docs/perf.md)",
                      s.w16_cache == options::kOn ? "on" : "auto", mib(f16_bytes).c_str())};
}

}  // namespace minfer::device
