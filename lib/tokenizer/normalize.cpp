#include "tokenizer/normalize.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tokenizer/nfc_tables.h"
#include "tokenizer/unicode.h"

namespace minfer::tokenizer {
namespace {

// Hangul syllables are composed and decomposed arithmetically (Unicode 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// An invalid byte b is carried as 0x80000000 | b: not a code point, a starter, never composed.
constexpr uint32_t kRawByte = 0x80000000u;

uint8_t ccc(uint32_t cp) {
    if (cp & kRawByte) return 0;
    auto it = std::lower_bound(std::begin(nfc_data::kCcc), std::end(nfc_data::kCcc), cp, [](const nfc_data::Ccc& e, uint32_t v) { return e.cp < v; });
    return it != std::end(nfc_data::kCcc) && it->cp == cp ? it->ccc : 0;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
    if (cp >= kSBase && cp < kSBase + kSCount) {
        const uint32_t s = cp - kSBase;
        out.push_back(kLBase + s / kNCount);
        out.push_back(kVBase + (s % kNCount) / kTCount);
        if (s % kTCount) out.push_back(kTBase + s % kTCount);
        return;
    }
    auto it = std::lower_bound(std::begin(nfc_data::kDecomp), std::end(nfc_data::kDecomp), cp,
                               [](const nfc_data::Decomp& e, uint32_t v) { return e.cp < v; });
    if (it == std::end(nfc_data::kDecomp) || it->cp != cp) {
        out.push_back(cp);
        return;
    }
    decompose(it->first, out);
    if (it->second) decompose(it->second, out);
}

// The primary composite of a + b, or 0.
uint32_t compose(uint32_t a, uint32_t b) {
    if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
        return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
    if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
        return a + (b - kTBase);
    auto it = std::lower_bound(std::begin(nfc_data::kCompose), std::end(nfc_data::kCompose), std::pair{a, b},
                               [](const nfc_data::Compose& e, const std::pair<uint32_t, uint32_t>& v) {
                                   return e.first != v.first ? e.first < v.first : e.second < v.second;
                               });
    return it != std::end(nfc_data::kCompose) && it->first == a && it->second == b ? it->composite : 0;
}

// Decodes one code point at s[i]; an invalid sequence yields one raw byte.
uint32_t next(std::string_view s, size_t& i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1fu) : n == 3 ? (c & 0x0fu) : (c & 0x07u);
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) {
        const unsigned char d = static_cast<unsigned char>(s[i + k]);
        ok = (d & 0xc0) == 0x80;
        cp = (cp << 6) | (d & 0x3fu);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid.
    if (ok) ok = !(n == 2 && cp < 0x80) && !(n == 3 && cp < 0x800) && !(n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) &&
                 !(cp >= 0xD800 && cp <= 0xDFFF);
    if (!ok) {
        ++i;
        return kRawByte | c;
    }
    i += n;
    return cp;
}

void put(uint32_t cp, std::string& out) {
    if (cp & kRawByte)
        out += static_cast<char>(cp & 0xff);
    else
        append_utf8(out, cp);
}

}  // namespace

std::string nfc(std::string_view text) {
    // Pure ASCII is already NFC.
    if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) return std::string(text);

    // 1. Full canonical decomposition.
    std::vector<uint32_t> cps;
    cps.reserve(text.size());
    for (size_t i = 0; i < text.size();) decompose(next(text, i), cps);

    // 2. Canonical ordering: stable sort of each run of non-starters by combining class.
    for (size_t i = 0; i < cps.size();) {
        if (ccc(cps[i]) == 0) {
            ++i;
            continue;
        }
        size_t j = i;
        while (j < cps.size() && ccc(cps[j]) != 0) ++j;
        std::stable_sort(cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(j),
                         [](uint32_t a, uint32_t b) { return ccc(a) < ccc(b); });
        i = j;
    }

    // 3. Canonical composition: each character combines with the last starter unless blocked, that is
    //    unless a character between them has class 0 or a class >= its own.
    std::vector<uint32_t> out;
    out.reserve(cps.size());
    size_t starter = SIZE_MAX;
    for (uint32_t cp : cps) {
        const int c = ccc(cp);
        if (starter != SIZE_MAX) {
            const bool adjacent = out.size() == starter + 1;
            const int prev = adjacent ? -1 : ccc(out.back());
            const bool blocked = !adjacent && (prev == 0 || prev >= c);
            if (!blocked) {
                if (const uint32_t composite = compose(out[starter], cp)) {
                    out[starter] = composite;
                    continue;
                }
            }
        }
        if (c == 0) starter = out.size();
        out.push_back(cp);
    }

    std::string result;
    result.reserve(text.size());
    for (uint32_t cp : out) put(cp, result);
    return result;
}

}  // namespace minfer::tokenizer
