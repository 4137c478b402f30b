#include "tokenizer/pretokenize.h"

#include <cstdint>

#include "tokenizer/unicode.h"

namespace minfer::tokenizer {
namespace {

constexpr uint32_t kInvalid = 0xFFFFFFFFu;

// One character of the text: a well-formed UTF-8 sequence, or a single byte that is not part of one.
// Past the end of the text: class `end`.
struct Unit {
    uint32_t cp;   // code point; kInvalid for a stray byte or the end
    uint32_t len;  // bytes; 0 at the end
    CharClass cls;
    bool end;
    bool crlf;     // \r or \n
    bool letter() const { return !end && cls == CharClass::letter; }
    bool number() const { return !end && cls == CharClass::number; }
    bool space() const { return !end && cls == CharClass::space; }
    bool other() const { return !end && cls == CharClass::other; }
};

Unit unit_at(std::string_view s, size_t i) {
    if (i >= s.size()) return {kInvalid, 0, CharClass::other, true, false};
    const auto b = static_cast<uint8_t>(s[i]);
    if (b < 0x80) return {b, 1, char_class(b), false, b == '\r' || b == '\n'};
    const Utf8Seq q = scan_utf8(s, i);
    if (!q.valid) return {kInvalid, 1, CharClass::other, false, false};
    return {q.cp, q.len, char_class(q.cp), false, false};
}

uint32_t ascii_lower(uint32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp + ('a' - 'A') : cp; }

// The regex, one alternative after another, at byte i (< s.size()); returns the end (exclusive) of the
// match. Every position matches some alternative, so the result is always > i.
size_t match_at(std::string_view s, size_t i) {
    const Unit c = unit_at(s, i);
    const size_t i1 = i + c.len;  // the next character
    const Unit c1 = unit_at(s, i1);

    // (?i:'s|'t|'re|'ve|'m|'ll|'d), for ASCII letters
    if (c.cp == '\'' && !c1.end) {
        const uint32_t a = ascii_lower(c1.cp);
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i1 + 1;
        const uint32_t b = ascii_lower(unit_at(s, i1 + c1.len).cp);
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i1 + 2;
    }

    // [^\r\n\p{L}\p{N}]?\p{L}+
    {
        size_t j = s.size() + 1;  // start of the letter run; stays past the end when the alternative fails
        if (c.letter())
            j = i;
        else if (!c.number() && !c.crlf && c1.letter())
            j = i1;
        if (j <= s.size()) {
            for (Unit u = unit_at(s, j); u.letter(); u = unit_at(s, j)) j += u.len;
            return j;
        }
    }

    // \p{N}
    if (c.number()) return i1;

    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    {
        size_t j = i;
        Unit u = c;
        if (c.cp == ' ' && c1.other()) {
            j = i1;
            u = c1;
        }
        if (u.other()) {
            for (; u.other(); u = unit_at(s, j)) j += u.len;
            for (; u.crlf; u = unit_at(s, j)) j += u.len;
            return j;
        }
    }

    // What is left starts with white space: letters, numbers and other characters all matched above.
    size_t end = i, last = i;  // the white-space run starting at i, and the start of its last character
    size_t after_crlf = 0;     // the end of the last \r or \n in the run; 0 when it has none
    for (Unit u = c; u.space(); u = unit_at(s, end)) {
        last = end;
        end += u.len;
        if (u.crlf) after_crlf = end;
    }
    // \s*[\r\n]+ : \s* backs off to the last \r or \n of the run, [\r\n]+ takes it.
    if (after_crlf) return after_crlf;
    // \s+(?!\S) : the whole run at the end of the text, else the run minus its last character.
    if (end == s.size()) return end;
    if (last > i) return last;
    // \s+ : a single white-space character before a non-space.
    return end;
}

}  // namespace

bool Qwen2Splitter::next(std::string_view* piece) {
    if (pos_ >= text_.size()) return false;
    const size_t end = match_at(text_, pos_);
    *piece = text_.substr(pos_, end - pos_);
    pos_ = end;
    return true;
}

void pretokenize_qwen2(std::string_view text, std::vector<std::string_view>& out) {
    Qwen2Splitter split(text);
    for (std::string_view piece; split.next(&piece);) out.push_back(piece);
}

}  // namespace minfer::tokenizer
