// UTF-8 scanning and the code point classes of the pre-tokenizer (internal to lib/tokenizer and its
// tests).
#pragma once

#include "core/utf8.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace minfer::tokenizer {

// The classes the Qwen2 pre-tokenizer regex distinguishes: \p{L}, \p{N}, \s (White_Space), and the
// rest (also every byte that is not part of a well-formed UTF-8 sequence).
enum class CharClass : uint8_t { other = 0, letter = 1, number = 2, space = 3 };

CharClass char_class(uint32_t cp);

// The UTF-8 sequence starting at s[i] (i < s.size()), by the well-formed byte sequences of the Unicode
// standard (table 3-7: no overlong forms, no surrogates, nothing above U+10FFFF).
struct Utf8Seq {
    uint32_t cp;     // the code point when valid
    uint8_t len;     // valid: its length (1-4); otherwise the length of the maximal subpart (>= 1)
    bool valid;
    bool truncated;  // not valid only because the input ends: every byte so far fits a well-formed sequence
};
Utf8Seq scan_utf8(std::string_view s, size_t i);

using minfer::append_utf8;  // core/utf8.h

}  // namespace minfer::tokenizer
