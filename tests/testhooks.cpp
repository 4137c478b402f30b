// libminfer_testhooks.so (tests only, never installed): the whole library plus one entry point for the
// Hugging Face peer (tests/peer/compare_hf.py --plant), which drives minfer through ctypes and so cannot
// reach the internal C++ hook. libminfer.so itself does not export it (lib/minfer.map).
#include <string_view>

#include "engine/testing.h"

// Plants the named bug (engine/testing.h: rms_eps, no_qk_bias, no_qk_norm, rope_base) in the models opened
// afterwards; "" or "none" clears it. Returns 0, or -1 for an unknown name (nothing changes then).
extern "C" __attribute__((visibility("default"))) int minfer_testing_plant(const char* name) {
    namespace testing = minfer::engine::testing;
    if (!name || !*name || std::string_view(name) == "none") {
        testing::set_plant(testing::kPlantNone);
        return 0;
    }
    const uint32_t p = testing::plant_from_name(name);
    if (p == testing::kPlantNone) return -1;
    testing::set_plant(p);
    return 0;
}
