// The CUDA backend's prefill path policy (host code: runs everywhere, no GPU needed).
#include <doctest/doctest.h>

#include <string>

#include "device/cuda_backend.h"
#include "options/options.h"

using minfer::device::choose_prefill_path;
using minfer::device::CudaSettings;
using minfer::device::PrefillPath;
namespace options = minfer::options;

TEST_SUITE("policy") {
    TEST_CASE("the f16 cache where it is allowed and fits; two-pass otherwise; fused only on request") {
        constexpr uint64_t GiB = uint64_t{1} << 30;
        CudaSettings s;  // auto, 2 GiB gate
        // A 7B q4_K_M model: 4 GiB of quantized matmul weights, 13 GiB as f16, an H200's free memory.
        CHECK(choose_prefill_path(s, 4 * GiB, 13 * GiB, 130 * GiB).path == PrefillPath::w16_cache);
        // A 0.5B model: below the gate, whatever the memory.
        const auto small = choose_prefill_path(s, GiB / 2, 2 * GiB, 130 * GiB);
        CHECK(small.path == PrefillPath::two_pass);
        CHECK(small.reason.find("w16_enable_bytes") != std::string::npos);
        // Passing the gate but not fitting (with the reserve for contexts): two-pass, and why.
        const auto tight = choose_prefill_path(s, 4 * GiB, 13 * GiB, 14 * GiB);
        CHECK(tight.path == PrefillPath::two_pass);
        CHECK(tight.reason.find("free") != std::string::npos);
        // on skips the gate but not the memory check.
        s.w16_cache = options::kOn;
        CHECK(choose_prefill_path(s, GiB / 2, 2 * GiB, 130 * GiB).path == PrefillPath::w16_cache);
        CHECK(choose_prefill_path(s, GiB / 2, 2 * GiB, 3 * GiB).path == PrefillPath::two_pass);
        // Nothing to convert: no cache.
        CHECK(choose_prefill_path(s, 0, 0, 130 * GiB).path == PrefillPath::two_pass);
        // off, mmq=on and fused_b override.
        s.w16_cache = options::kOff;
        CHECK(choose_prefill_path(s, 4 * GiB, 13 * GiB, 130 * GiB).path == PrefillPath::two_pass);
        s.w16_cache = options::kAuto;
        s.mmq = options::kOn;
        CHECK(choose_prefill_path(s, 4 * GiB, 13 * GiB, 130 * GiB).path == PrefillPath::two_pass);
        s.fused_b = true;
        CHECK(choose_prefill_path(s, 4 * GiB, 13 * GiB, 130 * GiB).path == PrefillPath::fused);
        // The gate is a byte count: at exactly the gate the cache is allowed.
        CudaSettings g;
        g.w16_enable_bytes = 100;
        CHECK(choose_prefill_path(g, 100, 200, 130 * GiB).path == PrefillPath::w16_cache);
        CHECK(choose_prefill_path(g, 99, 198, 130 * GiB).path == PrefillPath::two_pass);
    }
}
