#include "quant/types.h"

#include <cstddef>

namespace minfer::quant {
namespace {

constexpr TypeStatus S = TypeStatus::supported;
constexpr TypeStatus K = TypeStatus::known;
constexpr TypeStatus R = TypeStatus::removed;

// Indexed by GGUF type id. Sizes follow the GGUF/ggml block definitions (QK_K = 256).
constexpr TypeInfo kTypes[] = {
    /*  0 */ {"f32", 1, 4, S},
    /*  1 */ {"f16", 1, 2, S},
    /*  2 */ {"q4_0", 32, 18, S},
    /*  3 */ {"q4_1", 32, 20, S},
    /*  4 */ {"q4_2", 0, 0, R},
    /*  5 */ {"q4_3", 0, 0, R},
    /*  6 */ {"q5_0", 32, 22, S},
    /*  7 */ {"q5_1", 32, 24, S},
    /*  8 */ {"q8_0", 32, 34, S},
    /*  9 */ {"q8_1", 32, 36, K},
    /* 10 */ {"q2_K", 256, 84, S},
    /* 11 */ {"q3_K", 256, 110, S},
    /* 12 */ {"q4_K", 256, 144, S},
    /* 13 */ {"q5_K", 256, 176, S},
    /* 14 */ {"q6_K", 256, 210, S},
    /* 15 */ {"q8_K", 256, 292, K},
    /* 16 */ {"iq2_xxs", 256, 66, K},
    /* 17 */ {"iq2_xs", 256, 74, K},
    /* 18 */ {"iq3_xxs", 256, 98, K},
    /* 19 */ {"iq1_s", 256, 50, K},
    /* 20 */ {"iq4_nl", 32, 18, K},
    /* 21 */ {"iq3_s", 256, 110, K},
    /* 22 */ {"iq2_s", 256, 82, K},
    /* 23 */ {"iq4_xs", 256, 136, K},
    /* 24 */ {"i8", 1, 1, K},
    /* 25 */ {"i16", 1, 2, K},
    /* 26 */ {"i32", 1, 4, K},
    /* 27 */ {"i64", 1, 8, K},
    /* 28 */ {"f64", 1, 8, K},
    /* 29 */ {"iq1_m", 256, 56, K},
    /* 30 */ {"bf16", 1, 2, S},
    /* 31 */ {"q4_0_4_4", 0, 0, R},
    /* 32 */ {"q4_0_4_8", 0, 0, R},
    /* 33 */ {"q4_0_8_8", 0, 0, R},
    /* 34 */ {"tq1_0", 256, 54, K},
    /* 35 */ {"tq2_0", 256, 66, K},
    /* 36 */ {"iq4_nl_4_4", 0, 0, R},
    /* 37 */ {"iq4_nl_4_8", 0, 0, R},
    /* 38 */ {"iq4_nl_8_8", 0, 0, R},
    /* 39 */ {"mxfp4", 32, 17, K},
};

constexpr TypeInfo kUnknown = {"", 0, 0, TypeStatus::unknown};

}  // namespace

const TypeInfo& type_info(int32_t id) {
    if (id < 0 || static_cast<std::size_t>(id) >= sizeof kTypes / sizeof kTypes[0]) return kUnknown;
    return kTypes[id];
}

}  // namespace minfer::quant
