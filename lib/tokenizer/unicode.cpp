#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>
#include <memory>
#include <span>
#include <string>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_tables.h"

namespace minfer::tokenizer {
namespace {

bool in_table(std::span<const unicode::Range> table, uint32_t cp) {
    // The first range whose last code point is >= cp.
    auto it = std::lower_bound(table.begin(), table.end(), cp,
                               [](const unicode::Range& r, uint32_t c) { return r.last < c; });
    return it != table.end() && it->first <= cp;
}

CharClass lookup_class(uint32_t cp) {
    if (in_table(unicode::kLetter, cp)) return CharClass::letter;
    if (in_table(unicode::kNumber, cp)) return CharClass::number;
    if (in_table(unicode::kWhiteSpace, cp)) return CharClass::space;
    return CharClass::other;
}

// The Basic Multilingual Plane by direct lookup (64 KiB, built on first use); the rest by binary search.
const std::array<CharClass, 0x10000>& bmp_classes() {
    static const auto table = [] {
        auto t = std::make_unique<std::array<CharClass, 0x10000>>();
        t->fill(CharClass::other);
        auto mark = [&](std::span<const unicode::Range> ranges, CharClass c) {
            for (const unicode::Range& r : ranges)
                for (uint32_t cp = r.first; cp <= r.last && cp < 0x10000; ++cp) (*t)[cp] = c;
        };
        mark(unicode::kLetter, CharClass::letter);
        mark(unicode::kNumber, CharClass::number);
        mark(unicode::kWhiteSpace, CharClass::space);
        return t;
    }();
    return *table;
}

}  // namespace

CharClass char_class(uint32_t cp) {
    if (cp < 0x10000) return bmp_classes()[cp];
    if (cp > 0x10FFFF) return CharClass::other;
    return lookup_class(cp);
}

Utf8Seq scan_utf8(std::string_view s, size_t i) {
    const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
    const uint8_t b0 = byte(i);
    if (b0 < 0x80) return {b0, 1, true, false};
    int need;        // continuation bytes
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    uint32_t cp;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 1;
        cp = b0 & 0x1Fu;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 2;
        cp = b0 & 0x0Fu;
        if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
        if (b0 == 0xED) hi = 0x9F;  // no surrogates
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 3;
        cp = b0 & 0x07u;
        if (b0 == 0xF0) lo = 0x90;  // no overlong forms
        if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else {
        return {0, 1, false, false};  // a continuation byte, C0, C1 or F5..FF
    }
    for (int k = 1; k <= need; ++k) {
        if (i + static_cast<size_t>(k) >= s.size()) return {0, static_cast<uint8_t>(k), false, true};
        const uint8_t b = byte(i + static_cast<size_t>(k));
        if (b < lo || b > hi) return {0, static_cast<uint8_t>(k), false, false};
        cp = (cp << 6) | (b & 0x3Fu);
        lo = 0x80;
        hi = 0xBF;
    }
    return {cp, static_cast<uint8_t>(need + 1), true, false};
}

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Appends the sanitized text of s to out and returns the bytes consumed: all of them when `final`,
// otherwise all but a trailing sequence that is incomplete yet valid so far.
size_t sanitize_into(std::string_view s, std::string& out, bool final) {
    size_t i = 0;
    while (i < s.size()) {
        // Runs of ASCII and other valid text are copied in one go.
        size_t j = i;
        Utf8Seq q{};
        while (j < s.size()) {
            if (static_cast<uint8_t>(s[j]) < 0x80) {
                ++j;
                continue;
            }
            q = scan_utf8(s, j);
            if (!q.valid) break;
            j += q.len;
        }
        out.append(s.data() + i, j - i);
        if (j == s.size()) return j;
        if (q.truncated && !final) return j;
        out.append(kReplacement);
        i = j + q.len;
    }
    return i;
}

}  // namespace

std::string sanitize_utf8(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size());
    sanitize_into(bytes, out, true);
    return out;
}

std::string StreamDecoder::push(std::string_view bytes) {
    std::string out;
    if (pending_.empty()) {
        const size_t used = sanitize_into(bytes, out, false);
        pending_.assign(bytes.substr(used));
        return out;
    }
    pending_.append(bytes);
    const size_t used = sanitize_into(pending_, out, false);
    pending_.erase(0, used);
    return out;
}

std::string StreamDecoder::flush() {
    std::string out = sanitize_utf8(pending_);
    pending_.clear();
    return out;
}

}  // namespace minfer::tokenizer
