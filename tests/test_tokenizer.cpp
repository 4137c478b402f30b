// Tokenizer: Unicode tables, the Qwen2 pre-tokenizer (cases worked out by hand from the regex), BPE on
// hand-made vocabularies, special tokens, GGUF validation, UTF-8 sanitizing and streaming, and round
// trips on random text with a hand-made and the built-in synth vocabulary.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include "helpers.h"
#include "synth/synth.h"
#include "tokenizer/normalize.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/unicode_tables.h"

namespace tok = minfer::tokenizer;
using minfer::gguf::ValueType;
using tok::CharClass;

namespace {

std::vector<std::string> split(std::string_view text) {
    std::vector<std::string_view> v;
    tok::pretokenize_qwen2(text, v);
    return {v.begin(), v.end()};
}

// The GPT-2 byte alphabet, written out independently of the library: printable bytes stand for
// themselves, the other 68 take U+0100.. in byte order.
std::string alphabet_char(int b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    int cp = b;
    if (!printable) {
        cp = 0x100;
        for (int x = 0; x < b; ++x)
            if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) ++cp;
    }
    std::string s;
    if (cp < 0x80) {
        s += static_cast<char>(cp);
    } else {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
}

// A tokenizer section of a GGUF file.
struct Vocab {
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    std::vector<std::string> merges;
    std::string model = "gpt2", pre = "qwen2";
    bool write_pre = true, write_types = true, write_merges = true;
    std::map<std::string, uint32_t> ids;  // e.g. tokenizer.ggml.bos_token_id

    int32_t add(const std::string& text, int32_t type = 1) {
        tokens.push_back(text);
        types.push_back(type);
        return static_cast<int32_t>(tokens.size() - 1);
    }
    std::vector<uint8_t> bytes() const {
        minfer::gguf::Writer w;
        w.set_string("general.architecture", "qwen2");
        w.set_string("tokenizer.ggml.model", model);
        if (write_pre) w.set_string("tokenizer.ggml.pre", pre);
        w.set_array_strings("tokenizer.ggml.tokens", tokens);
        if (write_types) w.set_array("tokenizer.ggml.token_type", ValueType::I32, types.data(), types.size());
        if (write_merges) w.set_array_strings("tokenizer.ggml.merges", merges);
        for (const auto& [k, v] : ids) w.set_u32(k, v);
        return w.to_bytes();
    }
    std::unique_ptr<tok::Tokenizer> build() const {
        auto file = minfer::gguf::File::parse(minfer::gguf::copy_bytes(bytes()));
        return tok::Tokenizer::from_gguf(*file);  // must not need the file afterwards
    }
};

minfer::Error build_error(const Vocab& v) {
    try {
        v.build();
    } catch (const minfer::Error& e) {
        return e;
    }
    FAIL("the vocabulary was accepted");
    return minfer::Error(MINFER_OK, "");
}

// The hand-made vocabulary: the 256 alphabet characters as ids 0..255 (so byte b is token b), merges
// whose results are worked out by hand below, special tokens and a padding token.
struct Hand {
    Vocab v;
    int32_t he, ll, orr, hell, gw, ld, gwor, hello, gworld, el, endoftext, im_start, im_end, think, lt_bar, pad, unk_text;
    Hand() {
        for (int b = 0; b < 256; ++b) v.add(alphabet_char(b));
        const auto merge = [&](const std::string& a, const std::string& b) {
            v.merges.push_back(a + " " + b);
            return v.add(a + b);
        };
        he = merge("h", "e");       // rank 0
        ll = merge("l", "l");       // rank 1
        orr = merge("o", "r");      // rank 2
        hell = merge("he", "ll");   // rank 3
        gw = merge("Ġ", "w");       // rank 4
        ld = merge("l", "d");       // rank 5
        gwor = merge("Ġw", "or");   // rank 6
        hello = merge("hell", "o");   // rank 7
        gworld = merge("Ġwor", "ld");  // rank 8
        el = merge("e", "l");       // rank 9
        endoftext = v.add("<|endoftext|>", 3);
        im_start = v.add("<|im_start|>", 3);
        im_end = v.add("<|im_end|>", 3);
        think = v.add("<think>", 4);
        lt_bar = v.add("<|", 4);
        pad = v.add("[PAD999]", 5);
        unk_text = v.add("<unk>", 2);
        v.ids["tokenizer.ggml.bos_token_id"] = static_cast<uint32_t>(endoftext);
        v.ids["tokenizer.ggml.eos_token_id"] = static_cast<uint32_t>(endoftext);
        v.ids["tokenizer.ggml.padding_token_id"] = static_cast<uint32_t>(endoftext);
    }
};

std::vector<int32_t> byte_ids(std::string_view s) {  // in the hand-made vocabulary
    std::vector<int32_t> v;
    for (char c : s) v.push_back(static_cast<uint8_t>(c));
    return v;
}

std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
    std::vector<int32_t> v;
    for (const auto& p : parts) v.insert(v.end(), p.begin(), p.end());
    return v;
}

std::string decode(const tok::Tokenizer& t, const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s += t.piece(id);
    return s;
}

std::string hex(std::string_view s) {
    std::string o;
    char buf[4];
    for (unsigned char c : s) {
        std::snprintf(buf, sizeof buf, "%02x ", c);
        o += buf;
    }
    return o;
}

// ---- an independent UTF-8 reference for the sanitizer -------------------------------------------

std::string encode_cp(uint32_t cp) {  // no validation: encodes whatever it is given
    std::string s;
    if (cp < 0x80) {
        s += static_cast<char>(cp);
    } else if (cp < 0x800) {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        s += static_cast<char>(0xE0 | (cp >> 12));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        s += static_cast<char>(0xF0 | (cp >> 18));
        s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
}

bool is_scalar(uint32_t cp) { return cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF); }

// Every proper prefix of the encoding of every Unicode scalar value. The last byte of a sequence only
// carries the low 6 bits, so stepping the code point by 64 reaches every proper prefix.
const std::unordered_set<std::string>& valid_prefixes() {
    static const std::unordered_set<std::string> set = [] {
        std::unordered_set<std::string> s;
        for (uint32_t cp = 0x80; cp <= 0x10FFFF; cp += 64) {
            if (!is_scalar(cp)) continue;
            const std::string e = encode_cp(cp);
            for (size_t k = 1; k < e.size(); ++k) s.insert(e.substr(0, k));
        }
        return s;
    }();
    return set;
}

// Decodes s[i..i+k) as one sequence of length k with no validation, then accepts it only when
// re-encoding gives the same bytes (so no overlong form) and the value is a scalar value.
bool is_full_sequence(std::string_view s) {
    const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
    const size_t k = s.size();
    uint32_t cp;
    if (k == 1) return b(0) < 0x80;
    if (k == 2 && (b(0) & 0xE0) == 0xC0) cp = b(0) & 0x1Fu;
    else if (k == 3 && (b(0) & 0xF0) == 0xE0) cp = b(0) & 0x0Fu;
    else if (k == 4 && (b(0) & 0xF8) == 0xF0) cp = b(0) & 0x07u;
    else return false;
    for (size_t j = 1; j < k; ++j) {
        if ((b(j) & 0xC0) != 0x80) return false;
        cp = (cp << 6) | (b(j) & 0x3Fu);
    }
    return is_scalar(cp) && encode_cp(cp) == s;
}

// Maximal subparts: at each position the whole character if there is one, else one U+FFFD for the
// longest run that is a proper prefix of some character (at least one byte).
std::string reference_sanitize(std::string_view s) {
    std::string out;
    size_t i = 0;
    while (i < s.size()) {
        size_t full = 0, prefix = 0;
        for (size_t k = 1; k <= 4 && i + k <= s.size(); ++k) {
            const std::string_view p = s.substr(i, k);
            if (is_full_sequence(p)) full = k;
            if (valid_prefixes().count(std::string(p))) prefix = k;
        }
        if (full) {
            out.append(s.substr(i, full));
            i += full;
        } else {
            out.append("\xEF\xBF\xBD");
            i += std::max<size_t>(prefix, 1);
        }
    }
    return out;
}

// Random bytes leaning on the interesting ones: whole characters of every length, lone lead and
// continuation bytes, the bounds of table 3-7, and truncated characters.
std::string random_utf8ish(std::mt19937_64& rng, size_t max_units) {
    static const uint8_t edge[] = {0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF,
                                   0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xF8, 0xFE, 0xFF};
    std::string s;
    const size_t n = rng() % (max_units + 1);
    for (size_t u = 0; u < n; ++u) {
        switch (rng() % 5) {
        case 0: s += edge[rng() % sizeof edge]; break;
        case 1: s += static_cast<char>(rng() & 0xFF); break;
        case 2: {
            uint32_t cp;
            do cp = static_cast<uint32_t>(rng() % 0x110000); while (!is_scalar(cp));
            s += encode_cp(cp);
            break;
        }
        case 3: {  // a character cut short
            uint32_t cp;
            do cp = 0x80 + static_cast<uint32_t>(rng() % (0x110000 - 0x80)); while (!is_scalar(cp));
            const std::string e = encode_cp(cp);
            s += e.substr(0, 1 + rng() % (e.size() - 1));
            break;
        }
        default: s += static_cast<char>('a' + rng() % 26); break;
        }
    }
    return s;
}

// Random text for round trips: words of several scripts, digits, white space of every kind, emoji
// sequences, combining marks, punctuation, contractions, special token texts and stray bytes.
std::string random_text(std::mt19937_64& rng, size_t n_parts) {
    static const char* const parts[] = {
        "hello", "world", "Hello", " ", "  ", "\t", "\n", "\r\n", "\n\n", " \n ", "don't", "I'M", "we'll", "'s",
        "你好", "世界", "привет", "мир", "Tiếng Việt", "ភាសាខ្មែរ", "👨‍👩‍👧", "👋🏽", "🇯🇵", "e\xCC\x81", "123", "4567",
        "٣", "½", "!", "?!", "...", ",", "(", ")", "\"", "'", "-", "_", "<|im_start|>", "<|im_end|>", "<|endoftext|>",
        "<think>", "<|", "<", "|>", "\xC2\xA0", "\xE3\x80\x80", "\xC2\x85", "\xEF\xBB\xBF", "\x80", "\xFF", "\xE4\xBD",
        "\xF0\x9F", "\xC0\xAF", "\xED\xA0\x80", "\x00", "\x1C", "\x7F", "ſ", "ǅ", "ʰ", "〇", "Ⅻ", "😀", "\xF4\x8F\xBF\xBF",
    };
    std::string s;
    for (size_t i = 0; i < n_parts; ++i) {
        const char* p = parts[rng() % std::size(parts)];
        s += std::string_view(p, *p ? std::strlen(p) : 1);  // "\x00" is one NUL byte
        if (rng() % 4 == 0) s += static_cast<char>(rng() & 0xFF);
    }
    return s;
}

std::filesystem::path source_root() {
    std::filesystem::path f = __FILE__;
    if (f.is_relative()) f = std::filesystem::path(MINFER_TEST_TMPDIR).parent_path() / f;  // meson: relative to the build root
    return f.lexically_normal().parent_path().parent_path();
}

std::string read_file(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

TEST_SUITE("tokenizer") {

// ---- Unicode tables ---------------------------------------------------------------------------------

TEST_CASE("unicode tables are sorted, disjoint and classify known code points") {
    using minfer::tokenizer::unicode::Range;
    const auto check = [](std::span<const Range> t) {
        REQUIRE(!t.empty());
        for (size_t i = 0; i < t.size(); ++i) {
            CHECK(t[i].first <= t[i].last);
            CHECK(t[i].last <= 0x10FFFFu);
            if (i) CHECK(t[i - 1].last + 1 < t[i].first);  // merged: not even adjacent
        }
    };
    check(tok::unicode::kLetter);
    check(tok::unicode::kNumber);
    check(tok::unicode::kWhiteSpace);
    CHECK(std::string(tok::unicode::kUcdVersion).size() >= 5);

    struct Case {
        uint32_t cp;
        CharClass cls;
    };
    const Case cases[] = {
        {'a', CharClass::letter}, {'Z', CharClass::letter}, {'0', CharClass::number}, {'9', CharClass::number},
        {' ', CharClass::space}, {'\t', CharClass::space}, {'\n', CharClass::space}, {'\r', CharClass::space},
        {0x0B, CharClass::space}, {0x0C, CharClass::space}, {0x1C, CharClass::other}, {0x85, CharClass::space},
        {0xA0, CharClass::space}, {0x1680, CharClass::space}, {0x2000, CharClass::space}, {0x200A, CharClass::space},
        {0x200B, CharClass::other}, {0x2028, CharClass::space}, {0x2029, CharClass::space}, {0x202F, CharClass::space},
        {0x205F, CharClass::space}, {0x3000, CharClass::space}, {0xFEFF, CharClass::other}, {0x180E, CharClass::other},
        {'_', CharClass::other}, {'\'', CharClass::other}, {0x00, CharClass::other}, {0x7F, CharClass::other},
        {0xAA, CharClass::letter},   // ª Lo
        {0xB2, CharClass::number},   // ² No
        {0xBD, CharClass::number},   // ½ No
        {0xD7, CharClass::other},    // × Sm
        {0x01C5, CharClass::letter}, // ǅ Lt
        {0x02B0, CharClass::letter}, // ʰ Lm
        {0x0301, CharClass::other},  // combining acute, Mn
        {0x0663, CharClass::number}, // Arabic-Indic three, Nd
        {0x0E01, CharClass::letter}, // Thai
        {0x1780, CharClass::letter}, // Khmer KA
        {0x17B6, CharClass::other},  // Khmer vowel sign AA, Mc
        {0x17D2, CharClass::other},  // Khmer COENG, Mn
        {0x200D, CharClass::other},  // ZWJ
        {0x216B, CharClass::number}, // Roman numeral twelve, Nl
        {0x3007, CharClass::number}, // 〇 Nl
        {0x3400, CharClass::letter}, // CJK extension A, first (a First>/Last> range)
        {0x4DBF, CharClass::letter}, // ... last
        {0x4E00, CharClass::letter}, {0x9FFF, CharClass::letter},
        {0xAC00, CharClass::letter}, {0xD7A3, CharClass::letter},  // Hangul syllables range
        {0xD7A4, CharClass::other},
        {0xD800, CharClass::other}, {0xE000, CharClass::other},  // surrogate, private use
        {0xFE0F, CharClass::other},   // variation selector
        {0xFF10, CharClass::number},  // fullwidth 0
        {0xFF21, CharClass::letter},  // fullwidth A
        {0x1F44B, CharClass::other}, {0x1F3FD, CharClass::other}, {0x1F600, CharClass::other},
        {0x10400, CharClass::letter}, // Deseret
        {0x1D7CE, CharClass::number}, // mathematical bold digit zero
        {0x20000, CharClass::letter}, {0x2A6DF, CharClass::letter},  // CJK extension B
        {0x31350, CharClass::letter}, // CJK extension H (Unicode 15.0)
        {0xE0001, CharClass::other}, {0x10FFFF, CharClass::other}, {0x110000, CharClass::other},
        {0xFFFFFFFF, CharClass::other},
    };
    for (const Case& c : cases) {
        INFO("U+" << std::hex << c.cp);
        CHECK(tok::char_class(c.cp) == c.cls);
    }
}

TEST_CASE("unicode tables are what scripts/gen_unicode_tables.py writes") {
    const std::filesystem::path root = source_root();
    const std::filesystem::path script = root / "scripts/gen_unicode_tables.py";
    const std::filesystem::path table = root / "lib/tokenizer/unicode_tables.h";
    // Everything this needs is installed by scripts/deps: a missing piece fails the test, naming it, so the
    // check cannot pass without having run.
    for (const std::string f : {"/usr/share/unicode/UnicodeData.txt", "/usr/share/unicode/PropList.txt"})
        if (!std::filesystem::exists(f)) FAIL(f << " is missing (Debian: apt-get install unicode-data)");
    for (const std::filesystem::path& f : {script, table})
        if (!std::filesystem::exists(f)) FAIL(f.string() << " is missing: the source tree is not at " << root);
    if (std::system("command -v python3 >/dev/null 2>&1") != 0) FAIL("python3 is not installed");
    const std::string out = test::tmp_path("unicode_tables_regenerated.h");
    std::filesystem::remove(out);
    const std::string cmd = "python3 '" + script.string() + "' --out '" + out + "'";
    REQUIRE(std::system(cmd.c_str()) == 0);
    const std::string fresh = read_file(out), committed = read_file(table);
    CHECK(!fresh.empty());
    CHECK_MESSAGE(fresh == committed, "lib/tokenizer/unicode_tables.h differs from the script's output; rerun it");
    std::filesystem::remove(out);
}

// ---- the pre-tokenizer ------------------------------------------------------------------------------

TEST_CASE("qwen2 pre-tokenizer: hand-worked cases") {
    using V = std::vector<std::string>;
    // Letters take one preceding non-letter, non-number, non-newline character: a space, a tab, '!'...
    CHECK(split("Hello world") == V{"Hello", " world"});
    CHECK(split("привет мир") == V{"привет", " мир"});
    CHECK(split("你好世界") == V{"你好世界"});
    CHECK(split("Tiếng Việt có dấu") == V{"Tiếng", " Việt", " có", " dấu"});
    CHECK(split("a\tb") == V{"a", "\tb"});
    CHECK(split("!abc") == V{"!abc"});
    CHECK(split("'x") == V{"'x"});
    CHECK(split("_start") == V{"_start"});
    CHECK(split("\xC2\xA0x") == V{"\xC2\xA0x"});  // no-break space + letter
    // ... but two such characters do not: the punctuation run is a piece of its own.
    CHECK(split("!!abc") == V{"!!", "abc"});
    // Numbers: one digit per piece, any script, never joined with letters.
    CHECK(split("123456") == V{"1", "2", "3", "4", "5", "6"});
    CHECK(split("a1b2") == V{"a", "1", "b", "2"});
    CHECK(split("x٣½Ⅻ") == V{"x", "٣", "½", "Ⅻ"});
    CHECK(split(" 1") == V{" ", "1"});
    // Contractions, ASCII case-insensitive, wherever an apostrophe starts a piece.
    CHECK(split("don't") == V{"don", "'t"});
    CHECK(split("I'M") == V{"I", "'M"});
    CHECK(split("it's\n") == V{"it", "'s", "\n"});
    CHECK(split("'sabc") == V{"'s", "abc"});
    CHECK(split("we'll've 'RE'Ve") == V{"we", "'ll", "'ve", " '", "RE", "'Ve"});
    CHECK(split("'D'LL'rE") == V{"'D", "'LL", "'rE"});
    CHECK(split("'") == V{"'"});
    CHECK(split("'l") == V{"'l"});  // 'l is not a contraction: apostrophe + letters
    CHECK(split("x'ſ") == V{"x", "'ſ"});  // ſ (long s) does not count as s
    // White space.
    CHECK(split("  leading") == V{" ", " leading"});
    CHECK(split("a  b") == V{"a", " ", " b"});
    CHECK(split("hi   ") == V{"hi", "   "});
    CHECK(split("hi   !") == V{"hi", "  ", " !"});
    CHECK(split(" ") == V{" "});
    CHECK(split("\t\tx") == V{"\t", "\tx"});
    CHECK(split("a\t\t") == V{"a", "\t\t"});
    CHECK(split("x\xE3\x80\x80\xE3\x80\x80y") == V{"x", "\xE3\x80\x80", "\xE3\x80\x80y"});  // ideographic space
    CHECK(split("x\xC2\x85\xC2\x85y") == V{"x", "\xC2\x85", "\xC2\x85y"});  // NEL is White_Space
    CHECK(split("x\xEF\xBB\xBF\xEF\xBB\xBFy") == V{"x", "\xEF\xBB\xBF\xEF\xBB\xBF", "y"});  // BOM is not
    // Newlines: white space up to and including the last \r or \n of a white-space run.
    CHECK(split("\r\n") == V{"\r\n"});
    CHECK(split("a\r\nb") == V{"a", "\r\n", "b"});
    CHECK(split("x\n\n y") == V{"x", "\n\n", " y"});
    CHECK(split("  \n  ") == V{"  \n", "  "});
    CHECK(split(" \t\n x") == V{" \t\n", " x"});
    CHECK(split("x  \n\n  \n") == V{"x", "  \n\n  \n"});
    CHECK(split("a\n\n\n") == V{"a", "\n\n\n"});
    CHECK(split("a \n\tb") == V{"a", " \n", "\tb"});
    // Punctuation runs take one leading space and trailing newlines.
    CHECK(split("!!\n\nabc") == V{"!!\n\n", "abc"});
    CHECK(split("ok!\r\n\r\n") == V{"ok", "!\r\n\r\n"});
    CHECK(split("x ...") == V{"x", " ..."});
    CHECK(split("x  ...") == V{"x", " ", " ..."});
    CHECK(split("Hello, 世界! 123abc") == V{"Hello", ",", " 世界", "!", " ", "1", "2", "3", "abc"});
    // Emoji, ZWJ sequences, skin tones, flags, variation selectors: not letters, not numbers, not space.
    CHECK(split("hi 👋🏽!") == V{"hi", " 👋🏽!"});
    CHECK(split("👨‍👩‍👧 family") == V{"👨‍👩‍👧", " family"});
    CHECK(split("🇯🇵🇫🇷") == V{"🇯🇵🇫🇷"});
    CHECK(split("❤️x") == V{"❤️", "x"});
    // Combining marks are not letters: a Khmer word breaks at every sign.
    CHECK(split("ភាសាខ្មែរ") == V{"ភ", "ាស", "ាខ", "្ម", "ែរ"});
    CHECK(split("e\xCC\x81t\xCC\x81") == V{"e", "\xCC\x81t", "\xCC\x81"});
    // Invalid bytes: one non-letter, non-number, non-space unit each.
    CHECK(split("a\x80" "b") == V{"a", "\x80" "b"});
    CHECK(split("\xE4\xBD" "a") == V{"\xE4\xBD", "a"});
    CHECK(split(" \xFF\xFE\n") == V{" \xFF\xFE\n"});
    CHECK(split("\xF0\x9F") == V{"\xF0\x9F"});
    CHECK(split(std::string_view("a\0b", 3)) == V{"a", std::string("\0b", 2)});
    CHECK(split("").empty());
}

TEST_CASE("qwen2 pre-tokenizer: pieces cover random input in order") {
    std::mt19937_64 rng(1234);
    for (int iter = 0; iter < 2000; ++iter) {
        const std::string s = iter % 2 ? random_text(rng, rng() % 40) : random_utf8ish(rng, rng() % 40);
        std::vector<std::string_view> v;
        tok::pretokenize_qwen2(s, v);
        size_t pos = 0;
        for (std::string_view p : v) {
            REQUIRE(!p.empty());
            REQUIRE(p.data() == s.data() + pos);
            pos += p.size();
        }
        CHECK(pos == s.size());
    }
}

// ---- BPE and special tokens ---------------------------------------------------------------------------

TEST_CASE("bpe: merges by rank on a hand-made vocabulary") {
    const Hand h;
    const auto t = h.v.build();
    CHECK(t->n_vocab() == static_cast<int32_t>(h.v.tokens.size()));
    // hello: h e l l o -> (h e)=0 -> (l l)=1 -> (he ll)=3 -> (hell o)=7.
    // " world": Ġ w o r l d -> (o r)=2 -> (Ġ w)=4 -> (l d)=5 -> (Ġw or)=6 -> (Ġwor ld)=8.
    CHECK(t->encode("hello world", false) == std::vector<int32_t>{h.hello, h.gworld});
    CHECK(t->encode("hello  world!", false) == std::vector<int32_t>{h.hello, ' ', h.gworld, '!'});
    // Rank, not position: in "ell" (l l)=1 beats (e l)=9.
    CHECK(t->encode("ell", false) == std::vector<int32_t>{'e', h.ll});
    // "hel": (h e)=0 first, then nothing joins he and l.
    CHECK(t->encode("hel", false) == std::vector<int32_t>{h.he, 'l'});
    // "el": the only pair.
    CHECK(t->encode("el", false) == std::vector<int32_t>{h.el});
    // Leftmost among equal ranks: l l l -> (ll) l.
    CHECK(t->encode("lll", false) == std::vector<int32_t>{h.ll, 'l'});
    CHECK(t->encode("llll", false) == std::vector<int32_t>{h.ll, h.ll});
    // "held": (h e)=0 then (l d)=5.
    CHECK(t->encode("held", false) == std::vector<int32_t>{h.he, h.ld});
    // "Hello": H is not h.
    CHECK(t->encode("Hello", false) == std::vector<int32_t>{'H', 'e', h.ll, 'o'});
    // Merges never cross pre-token boundaries: "hel" + "lo" in "hel lo" stays apart.
    CHECK(t->encode("hel lo", false) == std::vector<int32_t>{h.he, 'l', ' ', 'l', 'o'});
    // " w" at the start of a pre-token: "Ġw"; a tab is not Ġ.
    CHECK(t->encode(" w\tw", false) == std::vector<int32_t>{h.gw, 9, 'w'});
    // Non-printable bytes go through the alphabet: \n is token 10, 0xFF token 255.
    CHECK(t->encode("\n", false) == std::vector<int32_t>{10});
    CHECK(t->encode("\xFF", false) == std::vector<int32_t>{255});
    CHECK(t->encode("", false).empty());
    // Pieces map back to bytes.
    CHECK(t->piece(h.gworld) == " world");
    CHECK(t->piece(10) == "\n");
    CHECK(t->piece(255) == "\xFF");
    CHECK(t->piece(0xAD) == "\xAD");  // soft hyphen: a non-printable byte, U+0143 in the alphabet
    CHECK(t->text(h.gworld) == "Ġworld");
    CHECK(t->text(' ') == "Ġ");
    CHECK(t->find("Ġworld") == h.gworld);
    CHECK(t->find("nope") == -1);
    CHECK(t->type(h.hello) == tok::TokenType::normal);
    CHECK(t->type(h.im_end) == tok::TokenType::control);
}

TEST_CASE("bpe: special and user-defined tokens") {
    const Hand h;
    const auto t = h.v.build();
    using V = std::vector<int32_t>;
    // Control tokens only with parse_special; the text between them is encoded as usual.
    CHECK(t->encode("<|im_start|>user\nhi<|im_end|>", true) ==
          cat({{h.im_start}, byte_ids("user"), {10}, byte_ids("hi"), {h.im_end}}));
    // Without parse_special the control texts are plain text; "<|" is a user-defined token, matched
    // always, so it still splits them.
    CHECK(t->encode("<|im_end|>", false) == cat({{h.lt_bar}, byte_ids("im"), byte_ids("_end"), byte_ids("|>")}));
    CHECK(t->encode("<|im_start|>", true) == V{h.im_start});  // the longest match at a position wins
    CHECK(t->encode("<|endoftext|><|endoftext|>", true) == V{h.endoftext, h.endoftext});
    CHECK(t->encode("<|im_start", true) == cat({{h.lt_bar}, byte_ids("im"), byte_ids("_start")}));
    CHECK(t->encode("a<think>b", false) == V{'a', h.think, 'b'});
    CHECK(t->encode("a<think>b", true) == V{'a', h.think, 'b'});
    CHECK(t->encode("<think", false) == byte_ids("<think"));
    // Pre-tokens do not reach over a special token: " hello" before it, "hello" after.
    CHECK(t->encode(" hello<think>hello world", false) == V{' ', h.hello, h.think, h.hello, h.gworld});
    // Unknown and unused tokens are never matched in text.
    CHECK(t->encode("[PAD999]<unk>", true) == cat({byte_ids("["), byte_ids("PAD"), {'9', '9', '9'}, byte_ids("]<"),
                                                   byte_ids("unk"), byte_ids(">")}));
    // Pieces: special texts as they are, unused tokens empty, unknown tokens their text.
    CHECK(t->piece(h.im_start) == "<|im_start|>");
    CHECK(t->piece(h.think) == "<think>");
    CHECK(t->piece(h.pad) == "");
    CHECK(t->piece(h.unk_text) == "<unk>");
    for (int32_t bad : {-1, t->n_vocab(), INT32_MIN, INT32_MAX}) {
        try {
            t->piece(bad);
            FAIL("accepted a bad id");
        } catch (const minfer::Error& e) {
            CHECK(e.status() == MINFER_ERR_INVALID_ARGUMENT);
        }
        CHECK_THROWS_AS(t->type(bad), minfer::Error);
        CHECK(!t->is_eog(bad));
    }
}

TEST_CASE("specials and end-of-generation tokens") {
    {
        const Hand h;
        const auto t = h.v.build();
        const tok::Specials& s = t->specials();
        CHECK(s.bos == h.endoftext);
        CHECK(s.eos == h.endoftext);
        CHECK(s.pad == h.endoftext);
        CHECK(s.im_start == h.im_start);
        CHECK(s.im_end == h.im_end);
        CHECK(s.eot == h.im_end);  // no eot key: <|im_end|>
        CHECK(t->is_eog(h.endoftext));
        CHECK(t->is_eog(h.im_end));
        CHECK(!t->is_eog(h.im_start));
        CHECK(!t->is_eog(h.hello));
        CHECK(!t->is_eog(h.think));
    }
    {
        Hand h;
        h.v.ids.clear();
        const int32_t end = h.v.add("<|end|>", 3);
        const int32_t eot_id = h.v.add("<|eot_id|>", 3);
        const int32_t my_eos = h.v.add("</s>", 3);
        h.v.ids["tokenizer.ggml.eos_token_id"] = static_cast<uint32_t>(my_eos);
        h.v.ids["tokenizer.ggml.eot_token_id"] = static_cast<uint32_t>(h.think);
        const auto t = h.v.build();
        const tok::Specials& s = t->specials();
        CHECK(s.bos == -1);
        CHECK(s.pad == -1);
        CHECK(s.eos == my_eos);
        CHECK(s.eot == h.think);
        for (int32_t id : {end, eot_id, my_eos, h.think, h.im_end, h.endoftext}) CHECK(t->is_eog(id));
        CHECK(!t->is_eog(h.im_start));
    }
    {
        // A vocabulary without Qwen specials: only eos ends generation; "<|endoftext|>" as a normal token
        // does not.
        Vocab v;
        for (int b = 0; b < 256; ++b) v.add(alphabet_char(b));
        const int32_t e = v.add("<|endoftext|>", 1);
        v.write_types = false;
        v.ids["tokenizer.ggml.eos_token_id"] = 7;
        const auto t = v.build();
        CHECK(t->specials().im_start == -1);
        CHECK(t->specials().im_end == -1);
        CHECK(t->specials().eot == -1);
        CHECK(t->is_eog(7));
        CHECK(!t->is_eog(e));
        CHECK(t->type(e) == tok::TokenType::normal);
        CHECK(t->encode("<|endoftext|>", true).size() == 13);  // not special: plain bytes
    }
}

TEST_CASE("from_gguf: unsupported tokenizers and bad vocabularies") {
    {
        Hand h;
        h.v.model = "llama";
        const minfer::Error e = build_error(h.v);
        CHECK(e.status() == MINFER_ERR_UNSUPPORTED);
        CHECK(std::string(e.what()) == "tokenizer model 'llama' is not supported (supported: gpt2)");
    }
    {
        Hand h;
        h.v.pre = "llama3";
        const minfer::Error e = build_error(h.v);
        CHECK(e.status() == MINFER_ERR_UNSUPPORTED);
        CHECK(std::string(e.what()) == "tokenizer pre-tokenizer 'llama3' is not supported (supported: qwen2)");
    }
    {
        Hand h;
        h.v.write_pre = false;
        const minfer::Error e = build_error(h.v);
        CHECK(e.status() == MINFER_ERR_UNSUPPORTED);
        CHECK(std::string(e.what()).find("tokenizer.ggml.pre") != std::string::npos);
    }
    {
        minfer::gguf::Writer w;
        w.set_string("general.architecture", "qwen2");
        auto f = minfer::gguf::File::parse(minfer::gguf::copy_bytes(w.to_bytes()));
        try {
            tok::Tokenizer::from_gguf(*f);
            FAIL("accepted a file without a tokenizer");
        } catch (const minfer::Error& e) {
            CHECK(e.status() == MINFER_ERR_UNSUPPORTED);
            CHECK(std::string(e.what()).find("tokenizer.ggml.model") != std::string::npos);
        }
    }
    struct Bad {
        const char* what;
        std::function<void(Vocab&)> edit;
        const char* message_part;
    };
    const Bad bad[] = {
        {"merge of an unknown token", [](Vocab& v) { v.merges.push_back("h zz"); }, "not in the vocabulary"},
        {"merge without a space", [](Vocab& v) { v.merges.push_back("hello"); }, "separated by a space"},
        {"merge result not a token", [](Vocab& v) { v.merges.push_back("w o"); }, "makes a token"},
        {"type count", [](Vocab& v) { v.types.pop_back(); }, "token_type"},
        {"unknown type", [](Vocab& v) { v.types[5] = 9; }, "token type 9"},
        {"bad byte token", [](Vocab& v) { v.types[5] = 6; }, "<0xHH>"},
        {"eos out of range", [](Vocab& v) { v.ids["tokenizer.ggml.eos_token_id"] = 100000; }, "eos_token_id"},
        {"no tokens", [](Vocab& v) { v.tokens.clear(); v.types.clear(); v.merges.clear(); v.ids.clear(); }, "empty"},
    };
    for (const Bad& b : bad) {
        INFO(b.what);
        Hand h;
        b.edit(h.v);
        const minfer::Error e = build_error(h.v);
        CHECK(e.status() == MINFER_ERR_BAD_MODEL);
        CHECK(std::string(e.what()).find(b.message_part) != std::string::npos);
    }
    {
        // Keys of the wrong type.
        Hand h;
        minfer::gguf::Writer w;
        w.set_string("tokenizer.ggml.model", "gpt2");
        w.set_string("tokenizer.ggml.pre", "qwen2");
        w.set_array_strings("tokenizer.ggml.tokens", h.v.tokens);
        const uint8_t small[3] = {1, 1, 1};
        w.set_array("tokenizer.ggml.token_type", ValueType::U8, small, 3);
        auto f = minfer::gguf::File::parse(minfer::gguf::copy_bytes(w.to_bytes()));
        CHECK_THROWS_WITH_AS(tok::Tokenizer::from_gguf(*f), doctest::Contains("tokenizer.ggml.token_type must be"),
                             minfer::Error);
    }
}

TEST_CASE("byte tokens and missing alphabet characters") {
    // A vocabulary without the alphabet character of 'z' but with a <0x7A> byte token, and no token for
    // 'q' at all except an unknown token.
    Vocab v;
    for (int b = 0; b < 256; ++b)
        if (b != 'z' && b != 'q') v.add(alphabet_char(b));
    const int32_t bz = v.add("<0x7A>", 6);
    const int32_t unk = v.add("<unk>", 2);
    const auto t = v.build();
    CHECK(t->encode("z", false) == std::vector<int32_t>{bz});
    CHECK(t->encode("q", false) == std::vector<int32_t>{unk});
    CHECK(t->piece(bz) == "z");
    CHECK(t->encode("aza", false) == std::vector<int32_t>{'a', bz, 'a'});
    Vocab w;
    for (int b = 0; b < 255; ++b) w.add(alphabet_char(b));
    const auto u = w.build();
    try {
        u->encode("a\xFF", false);
        FAIL("encoded a byte without a token");
    } catch (const minfer::Error& e) {
        CHECK(e.status() == MINFER_ERR_INVALID_ARGUMENT);
    }
}

TEST_CASE("round trip: decode(encode(x)) == x on random text") {
    const Hand h;
    const auto t = h.v.build();
    std::mt19937_64 rng(99);
    for (int iter = 0; iter < 3000; ++iter) {
        const std::string s = iter % 3 == 0 ? random_utf8ish(rng, 60) : random_text(rng, rng() % 30);
        for (bool special : {false, true}) {
            const std::vector<int32_t> ids = t->encode(s, special);
            // Text comes back in NFC, the normalization the Qwen2 tokenizer applies before splitting.
            const std::string back = decode(*t, ids);
            if (back != minfer::tokenizer::nfc(s)) {
                INFO("seed 99, iteration " << iter << ", parse_special " << special << ": " << hex(s));
                CHECK(back == minfer::tokenizer::nfc(s));
            }
            for (int32_t id : ids) REQUIRE((id >= 0 && id < t->n_vocab()));
        }
    }
}

// ---- the built-in synth vocabulary ------------------------------------------------------------------

TEST_CASE("synth vocabulary: bytes round-trip, specials, speed") {
    const std::string path = test::tmp_path("tok_synth.gguf");
    minfer::synth::write_model(path, "qwen2-tiny", "f32", 1);
    auto file = minfer::gguf::File::open(path);
    const auto t0 = std::chrono::steady_clock::now();
    const auto t = tok::Tokenizer::from_gguf(*file);
    const double build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    file.reset();
    std::filesystem::remove(path);

    REQUIRE(t->n_vocab() >= 259);
    for (int b = 0; b < 256; ++b) {
        const std::string s(1, static_cast<char>(b));
        CHECK(t->encode(s, true) == std::vector<int32_t>{b});
        CHECK(t->piece(b) == s);
    }
    const tok::Specials& sp = t->specials();
    CHECK(sp.bos == 256);
    CHECK(sp.eos == 258);
    CHECK(sp.pad == 256);
    CHECK(sp.im_start == 257);
    CHECK(sp.im_end == 258);
    CHECK(sp.eot == 258);
    CHECK(t->is_eog(256));
    CHECK(!t->is_eog(257));
    CHECK(t->is_eog(258));
    CHECK(t->encode("<|im_start|>", true) == std::vector<int32_t>{257});
    CHECK(t->encode("<|im_start|>", false).size() == 12);
    if (t->n_vocab() > 259) {
        CHECK(t->type(259) == tok::TokenType::unused);
        CHECK(t->piece(259) == "");
    }

    std::mt19937_64 rng(5);
    for (int iter = 0; iter < 1000; ++iter) {
        std::string s(rng() % 64, '\0');
        for (char& c : s) c = static_cast<char>(rng() & 0xFF);
        if (iter % 2) s = random_text(rng, 20);
        for (bool special : {false, true}) {
            const std::vector<int32_t> ids = t->encode(s, special);
            CHECK(decode(*t, ids) == minfer::tokenizer::nfc(s));
            if (!special) CHECK(ids.size() == minfer::tokenizer::nfc(s).size());  // no merges: one token per byte
        }
    }

    // Speed (reported, not asserted): 100 KB of mixed text.
    std::string big;
    while (big.size() < 100000) big += random_text(rng, 50);
    const auto e0 = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = t->encode(big, true);
    const double enc_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - e0).count();
    CHECK(decode(*t, ids) == minfer::tokenizer::nfc(big));
    MESSAGE("synth vocabulary: build " << build_ms << " ms; encode " << big.size() << " bytes in " << enc_ms << " ms ("
                                       << (enc_ms > 0 ? big.size() / enc_ms / 1000.0 : 0.0) << " MB/s)");
}

TEST_CASE("bpe speed on a large vocabulary and long words") {
    // 150k random tokens built by merges over the alphabet (so every merge is valid), then 100 KB of
    // text, including one long word, to check nothing is quadratic. Timings are reported, not asserted.
    Vocab v;
    for (int b = 0; b < 256; ++b) v.add(alphabet_char(b));
    std::mt19937_64 rng(11);
    std::unordered_set<std::string> have(v.tokens.begin(), v.tokens.end());
    std::vector<std::string> pool;
    for (char c : std::string("abcdefghijklmnopqrstuvwxyz")) pool.emplace_back(1, c);
    pool.push_back("Ġ");
    while (v.tokens.size() < 150000) {
        const std::string& a = pool[rng() % std::min<size_t>(pool.size(), 2000 + v.tokens.size() / 4)];
        const std::string& b = pool[rng() % std::min<size_t>(pool.size(), 2000)];
        if (b == "Ġ" || a.size() + b.size() > 16) continue;
        const std::string ab = a + b;
        if (!have.insert(ab).second) continue;
        v.merges.push_back(a + " " + b);
        v.add(ab);
        pool.push_back(ab);
    }
    const auto file = minfer::gguf::File::parse(minfer::gguf::copy_bytes(v.bytes()));
    const auto t0 = std::chrono::steady_clock::now();
    const auto t = tok::Tokenizer::from_gguf(*file);
    const double build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

    std::string text;
    while (text.size() < 100000) {
        text += ' ';
        const size_t n = 1 + rng() % 12;
        for (size_t i = 0; i < n; ++i) text += static_cast<char>('a' + rng() % 26);
    }
    std::string word(20000, 'a');
    for (char& c : word) c = static_cast<char>('a' + rng() % 26);
    for (const std::string* s : {&text, &word}) {
        const auto e0 = std::chrono::steady_clock::now();
        const std::vector<int32_t> ids = t->encode(*s, false);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - e0).count();
        CHECK(decode(*t, ids) == *s);
        CHECK(ids.size() < s->size());
        MESSAGE("150k-token vocabulary with " << v.merges.size() << " merges: build " << build_ms << " ms; encode "
                                              << s->size() << " bytes into " << ids.size() << " tokens in " << ms
                                              << " ms");
    }
}

// ---- UTF-8 sanitizing and streaming -----------------------------------------------------------------

TEST_CASE("sanitize_utf8: one U+FFFD per maximal subpart") {
    // Expected outputs from Python's bytes.decode('utf-8', 'replace').
    const std::pair<std::string_view, std::string_view> cases[] = {
        {"\x61\x62\x63", "\x61\x62\x63"},
        {"\x80", "\xef\xbf\xbd"},
        {"\xbf\x80", "\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xc1\xbf", "\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xc2", "\xef\xbf\xbd"},
        {"\xc2\x41", "\xef\xbf\xbd\x41"},
        {"\xe0\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xe0\xa0", "\xef\xbf\xbd"},
        {"\xe0\xa0\x80", "\xe0\xa0\x80"},
        {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xed\x9f\xbf", "\xed\x9f\xbf"},
        {"\xef\xbf\xbd", "\xef\xbf\xbd"},
        {"\xf0\x80\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xf0\x90\x80", "\xef\xbf\xbd"},
        {"\xf0\x90\x80\x41", "\xef\xbf\xbd\x41"},
        {"\xf4\x8f\xbf\xbf", "\xf4\x8f\xbf\xbf"},
        {"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xf5\x80", "\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xff\xfe", "\xef\xbf\xbd\xef\xbf\xbd"},
        {"\x61\xe4\xbd\xa0\xe5\xa5\x62", "\x61\xe4\xbd\xa0\xef\xbf\xbd\x62"},
        {"\xe1\x80\xe2\xf0\x91\x92\xf1\xbf\x41", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\x41"},
        {"\xf8\x88\x80\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xc0\x80", "\xef\xbf\xbd\xef\xbf\xbd"},
        {"", ""},
    };
    for (const auto& [in, want] : cases) {
        INFO(hex(in));
        CHECK(tok::sanitize_utf8(in) == want);
        CHECK(reference_sanitize(in) == want);
    }
    CHECK(tok::sanitize_utf8(std::string_view("a\0b", 3)) == std::string("a\0b", 3));
    // Every scalar value passes unchanged; every surrogate is three replacements.
    std::string all;
    for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp)
        if (is_scalar(cp)) all += encode_cp(cp);
    CHECK(tok::sanitize_utf8(all) == all);
    for (uint32_t cp = 0xD800; cp <= 0xDFFF; cp += 0x7F)
        CHECK(tok::sanitize_utf8(encode_cp(cp)) == "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
}

TEST_CASE("sanitize_utf8 and StreamDecoder on random bytes") {
    std::mt19937_64 rng(2024);
    for (int iter = 0; iter < 5000; ++iter) {
        const std::string s = random_utf8ish(rng, 24);
        const std::string want = tok::sanitize_utf8(s);
        if (want != reference_sanitize(s)) {
            INFO("sanitize, iteration " << iter << ": " << hex(s));
            CHECK(want == reference_sanitize(s));
        }
        // Split at random points (empty pushes included) and stream.
        tok::StreamDecoder d;
        std::string got;
        size_t pos = 0;
        while (pos < s.size()) {
            const size_t n = rng() % 3 == 0 ? 0 : 1 + rng() % std::min<size_t>(s.size() - pos, 6);
            const std::string out = d.push(std::string_view(s).substr(pos, n));
            // Whatever comes out is whole characters.
            CHECK(tok::sanitize_utf8(out) == out);
            got += out;
            pos += n;
        }
        got += d.flush();
        if (got != want) {
            INFO("stream, iteration " << iter << ": " << hex(s));
            CHECK(got == want);
        }
        CHECK(d.flush().empty());  // flush starts over
    }
}

TEST_CASE("StreamDecoder holds back only an incomplete character") {
    tok::StreamDecoder d;
    CHECK(d.push("a\xE4") == "a");
    CHECK(d.push("\xBD") == "");
    CHECK(d.push("\xA0" "b") == "\xE4\xBD\xA0" "b");
    CHECK(d.push("\xF0\x9F\x98") == "");
    CHECK(d.push("\x80") == "\xF0\x9F\x98\x80");
    // An invalid continuation ends the hold: the held part becomes one U+FFFD at once.
    CHECK(d.push("\xE4\xBD") == "");
    CHECK(d.push("x") == "\xEF\xBF\xBD" "x");
    // Bytes that can never start a character are not held.
    CHECK(d.push("\x80") == "\xEF\xBF\xBD");
    CHECK(d.push("\xED\xA0") == "\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate is known bad at its 2nd byte
    CHECK(d.push("\xE0") == "");
    CHECK(d.push("\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD");      // overlong, known at the 2nd byte
    CHECK(d.push("\xF4") == "");
    CHECK(d.flush() == "\xEF\xBF\xBD");
    CHECK(d.flush() == "");
}

}  // TEST_SUITE
