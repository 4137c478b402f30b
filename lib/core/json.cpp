#include "core/json.h"
#include "core/utf8.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace minfer::json {

const char* type_name(Type t) {
    switch (t) {
    case Type::null: return "null";
    case Type::boolean: return "boolean";
    case Type::number: return "number";
    case Type::string: return "string";
    case Type::array: return "array";
    case Type::object: return "object";
    }
    return "?";
}

bool Value::as_int(int64_t* out) const {
    if (type_ != Type::number) return false;
    // 2^63 is exactly representable; every integral double below it in magnitude converts exactly.
    if (!(num_ >= -9223372036854775808.0 && num_ < 9223372036854775808.0)) return false;
    const auto i = static_cast<int64_t>(num_);
    if (static_cast<double>(i) != num_) return false;
    *out = i;
    return true;
}

const Value* Value::find(std::string_view key) const {
    if (type_ != Type::object) return nullptr;
    for (size_t i = 0; i < keys_.size(); ++i)
        if (keys_[i] == key) return &items_[i];
    return nullptr;
}

class Parser {
public:
    Parser(std::string_view text, const ParseOptions& opts)
        : p_(reinterpret_cast<const unsigned char*>(text.data())),
          begin_(p_),
          end_(p_ + text.size()),
          opts_(opts),
          max_depth_(std::clamp(opts.max_depth, 1, 4096)) {}

    Value run() {
        if (end_ - p_ >= 3 && p_[0] == 0xef && p_[1] == 0xbb && p_[2] == 0xbf) p_ += 3;
        skip_ws();
        if (p_ == end_) error(p_, "empty input, expected a value");
        Value v;
        parse_value(v, 0);
        skip_ws();
        if (p_ != end_) error(p_, "unexpected %s after the value", describe(p_).c_str());
        return v;
    }

private:
    const unsigned char* p_;
    const unsigned char* const begin_;
    const unsigned char* const end_;
    const ParseOptions& opts_;
    const int max_depth_;

    [[noreturn]] void error(const unsigned char* at, const char* fmt, ...) __attribute__((format(printf, 3, 4))) {
        va_list ap;
        va_start(ap, fmt);
        const std::string what = vstrprintf(fmt, ap);
        va_end(ap);
        const size_t off = static_cast<size_t>(at - begin_);
        size_t line = 1, col = 1;
        for (const unsigned char* q = begin_; q < at; ++q) {
            if (*q == '\n') {
                ++line;
                col = 1;
            } else {
                ++col;
            }
        }
        throw Error(opts_.status, strprintf("%s: %s at byte %zu (line %zu, column %zu)", opts_.name ? opts_.name : "json",
                                            what.c_str(), off, line, col));
    }

    // "end of input", "character 'x'" or "byte 0xNN", for messages.
    std::string describe(const unsigned char* at) const {
        if (at >= end_) return "end of input";
        if (*at >= 0x20 && *at < 0x7f) return strprintf("character '%c'", *at);
        return strprintf("byte 0x%02x", *at);
    }

    void skip_ws() {
        while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
    }

    void expect_literal(const char* word, size_t n) {
        if (static_cast<size_t>(end_ - p_) < n || std::memcmp(p_, word, n) != 0) {
            // Point at the first byte that differs.
            const unsigned char* q = p_;
            for (size_t i = 0; i < n && q < end_ && *q == static_cast<unsigned char>(word[i]); ++i) ++q;
            error(q, "unexpected %s in literal '%s'", describe(q).c_str(), word);
        }
        p_ += n;
    }

    void parse_value(Value& v, int depth) {
        if (p_ >= end_) error(p_, "unexpected end of input, expected a value");
        switch (*p_) {
        case '{': parse_object(v, depth + 1); return;
        case '[': parse_array(v, depth + 1); return;
        case '"':
            v.type_ = Type::string;
            parse_string(v.str_);
            return;
        case 't':
            expect_literal("true", 4);
            v.type_ = Type::boolean;
            v.bool_ = true;
            return;
        case 'f':
            expect_literal("false", 5);
            v.type_ = Type::boolean;
            v.bool_ = false;
            return;
        case 'n':
            expect_literal("null", 4);
            v.type_ = Type::null;
            return;
        default:
            if (*p_ == '-' || (*p_ >= '0' && *p_ <= '9')) {
                v.type_ = Type::number;
                v.num_ = parse_number();
                return;
            }
            error(p_, "unexpected %s, expected a value", describe(p_).c_str());
        }
    }

    void parse_array(Value& v, int depth) {
        if (depth > max_depth_) error(p_, "arrays and objects nested deeper than %d", max_depth_);
        v.type_ = Type::array;
        ++p_;  // '['
        skip_ws();
        if (p_ < end_ && *p_ == ']') {
            ++p_;
            return;
        }
        for (;;) {
            skip_ws();
            v.items_.emplace_back();
            parse_value(v.items_.back(), depth);
            skip_ws();
            if (p_ < end_ && *p_ == ',') {
                ++p_;
                continue;
            }
            if (p_ < end_ && *p_ == ']') {
                ++p_;
                return;
            }
            error(p_, "unexpected %s in an array, expected ',' or ']'", describe(p_).c_str());
        }
    }

    void parse_object(Value& v, int depth) {
        if (depth > max_depth_) error(p_, "arrays and objects nested deeper than %d", max_depth_);
        const unsigned char* const start = p_;
        v.type_ = Type::object;
        ++p_;  // '{'
        skip_ws();
        if (p_ < end_ && *p_ == '}') {
            ++p_;
            return;
        }
        for (;;) {
            skip_ws();
            if (p_ >= end_ || *p_ != '"') error(p_, "unexpected %s in an object, expected a string key", describe(p_).c_str());
            v.keys_.emplace_back();
            parse_string(v.keys_.back());
            skip_ws();
            if (p_ >= end_ || *p_ != ':') error(p_, "unexpected %s after an object key, expected ':'", describe(p_).c_str());
            ++p_;
            skip_ws();
            v.items_.emplace_back();
            parse_value(v.items_.back(), depth);
            skip_ws();
            if (p_ < end_ && *p_ == ',') {
                ++p_;
                continue;
            }
            if (p_ < end_ && *p_ == '}') {
                ++p_;
                break;
            }
            error(p_, "unexpected %s in an object, expected ',' or '}'", describe(p_).c_str());
        }
        check_unique_keys(v, start);
    }

    void check_unique_keys(const Value& v, const unsigned char* start) {
        const std::vector<std::string>& k = v.keys_;
        const std::string* dup = nullptr;
        if (k.size() <= 16) {
            for (size_t i = 0; i < k.size() && !dup; ++i)
                for (size_t j = i + 1; j < k.size() && !dup; ++j)
                    if (k[i] == k[j]) dup = &k[i];
        } else {
            std::vector<std::string_view> sorted(k.begin(), k.end());
            std::sort(sorted.begin(), sorted.end());
            for (size_t i = 1; i < sorted.size(); ++i) {
                if (sorted[i] == sorted[i - 1]) {
                    std::string_view d = sorted[i];
                    dup = &*std::find_if(k.begin(), k.end(), [d](const std::string& s) { return s == d; });
                    break;
                }
            }
        }
        if (dup) {
            std::string shown = dup->substr(0, 64);
            for (char& c : shown)
                if (static_cast<unsigned char>(c) < 0x20) c = '?';
            error(start, "duplicate key \"%s%s\" in the object", shown.c_str(), dup->size() > 64 ? "..." : "");
        }
    }

    static int hex_digit(unsigned char c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    }

    // Reads the 4 hex digits of a \u escape at p_ (just after the 'u').
    unsigned read_hex4() {
        unsigned v = 0;
        for (int i = 0; i < 4; ++i) {
            const int d = p_ < end_ ? hex_digit(*p_) : -1;
            if (d < 0) error(p_, "unexpected %s in a \\u escape, expected a hex digit", describe(p_).c_str());
            v = v * 16 + static_cast<unsigned>(d);
            ++p_;
        }
        return v;
    }

    // The length of the valid UTF-8 sequence of 2..4 bytes at q (a lead byte >= 0x80), or 0.
    size_t utf8_len(const unsigned char* q) const {
        const size_t avail = static_cast<size_t>(end_ - q);
        const unsigned char c = q[0];
        auto cont = [&](size_t i, unsigned char lo, unsigned char hi) { return i < avail && q[i] >= lo && q[i] <= hi; };
        if (c >= 0xc2 && c <= 0xdf) return cont(1, 0x80, 0xbf) ? 2 : 0;
        if (c == 0xe0) return cont(1, 0xa0, 0xbf) && cont(2, 0x80, 0xbf) ? 3 : 0;
        if ((c >= 0xe1 && c <= 0xec) || c == 0xee || c == 0xef) return cont(1, 0x80, 0xbf) && cont(2, 0x80, 0xbf) ? 3 : 0;
        if (c == 0xed) return cont(1, 0x80, 0x9f) && cont(2, 0x80, 0xbf) ? 3 : 0;  // no UTF-16 surrogates
        if (c == 0xf0) return cont(1, 0x90, 0xbf) && cont(2, 0x80, 0xbf) && cont(3, 0x80, 0xbf) ? 4 : 0;
        if (c >= 0xf1 && c <= 0xf3) return cont(1, 0x80, 0xbf) && cont(2, 0x80, 0xbf) && cont(3, 0x80, 0xbf) ? 4 : 0;
        if (c == 0xf4) return cont(1, 0x80, 0x8f) && cont(2, 0x80, 0xbf) && cont(3, 0x80, 0xbf) ? 4 : 0;
        return 0;
    }

    void parse_string(std::string& out) {
        const unsigned char* const open = p_;
        ++p_;  // '"'
        for (;;) {
            // A run of bytes that need no decoding is appended at once.
            const unsigned char* run = p_;
            while (p_ < end_) {
                const unsigned char c = *p_;
                if (c == '"' || c == '\\' || c < 0x20) break;
                if (c < 0x80) {
                    ++p_;
                } else {
                    const size_t n = utf8_len(p_);
                    if (n == 0) error(p_, "invalid UTF-8 (byte 0x%02x) in a string", c);
                    p_ += n;
                }
            }
            out.append(reinterpret_cast<const char*>(run), static_cast<size_t>(p_ - run));
            if (p_ >= end_) error(open, "unterminated string");
            const unsigned char c = *p_;
            if (c == '"') {
                ++p_;
                return;
            }
            if (c < 0x20) error(p_, "control character U+%04X in a string (must be escaped)", c);
            // An escape.
            const unsigned char* const esc = p_;
            ++p_;
            if (p_ >= end_) error(open, "unterminated string");
            switch (*p_++) {
            case '"': out += '"'; break;
            case '\\': out += '\\'; break;
            case '/': out += '/'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'n': out += '\n'; break;
            case 'r': out += '\r'; break;
            case 't': out += '\t'; break;
            case 'u': {
                unsigned cp = read_hex4();
                if (cp >= 0xdc00 && cp <= 0xdfff) error(esc, "unpaired low surrogate \\u%04X", cp);
                if (cp >= 0xd800 && cp <= 0xdbff) {
                    if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u')
                        error(esc, "high surrogate \\u%04X not followed by a \\u low surrogate", cp);
                    p_ += 2;
                    const unsigned lo = read_hex4();
                    if (lo < 0xdc00 || lo > 0xdfff)
                        error(esc, "high surrogate \\u%04X followed by \\u%04X, not a low surrogate", cp, lo);
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                }
                append_utf8(out, cp);
                break;
            }
            default:
                error(esc, "invalid escape '\\%s'", p_[-1] >= 0x20 && p_[-1] < 0x7f
                                                         ? std::string(1, static_cast<char>(p_[-1])).c_str()
                                                         : strprintf("x%02x", p_[-1]).c_str());
            }
        }
    }

    // number = [ '-' ] int [ frac ] [ exp ]; int = '0' | [1-9] digit*; frac = '.' digit+;
    // exp = ('e'|'E') ['+'|'-'] digit+
    double parse_number() {
        const unsigned char* const start = p_;
        auto digit = [&] { return p_ < end_ && *p_ >= '0' && *p_ <= '9'; };
        if (*p_ == '-') ++p_;
        if (!digit()) error(p_, "unexpected %s in a number, expected a digit", describe(p_).c_str());
        const unsigned char* const int_start = p_;
        if (*p_ == '0') {
            ++p_;
            if (digit()) error(int_start, "leading zero in a number");
        } else {
            while (digit()) ++p_;
        }
        const long int_len = p_ - int_start;
        long frac_zeros = -1;  // leading zeros of the fraction, when the integer part is 0
        if (p_ < end_ && *p_ == '.') {
            ++p_;
            if (!digit()) error(p_, "unexpected %s after a decimal point, expected a digit", describe(p_).c_str());
            const unsigned char* const f = p_;
            while (digit()) ++p_;
            const unsigned char* z = f;
            while (z < p_ && *z == '0') ++z;
            frac_zeros = z - f;
        }
        long exp = 0;
        if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
            ++p_;
            bool neg = false;
            if (p_ < end_ && (*p_ == '+' || *p_ == '-')) neg = *p_++ == '-';
            if (!digit()) error(p_, "unexpected %s in an exponent, expected a digit", describe(p_).c_str());
            while (digit()) {
                if (exp < 100000) exp = exp * 10 + (*p_ - '0');
                ++p_;
            }
            if (neg) exp = -exp;
        }
        double v = 0.0;
        const auto r = std::from_chars(reinterpret_cast<const char*>(start), reinterpret_cast<const char*>(p_), v);
        if (r.ec == std::errc::result_out_of_range) {
            // Too large is an error; too small (the decimal magnitude is negative) reads as zero.
            const bool int_zero = int_len == 1 && *int_start == '0';
            const long magnitude = (int_zero ? -(frac_zeros < 0 ? 0 : frac_zeros) : int_len) + exp;
            if (magnitude > 0) error(start, "number out of range");
            return *start == '-' ? -0.0 : 0.0;
        }
        if (r.ec != std::errc() || r.ptr != reinterpret_cast<const char*>(p_)) error(start, "malformed number");
        return v;
    }
};

Value parse(std::string_view text, const ParseOptions& opts) {
    Parser parser(text, opts);
    return parser.run();
}

Value parse_file(const std::string& path, const ParseOptions& opts) {
    constexpr size_t kMaxBytes = size_t{1} << 30;
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
    if (!f) fail(MINFER_ERR_IO, "%s: cannot open '%s': %s", opts.name ? opts.name : "json", path.c_str(), std::strerror(errno));
    std::string text;
    char buf[1 << 16];
    for (;;) {
        const size_t n = std::fread(buf, 1, sizeof buf, f.get());
        text.append(buf, n);
        if (text.size() > kMaxBytes) fail(MINFER_ERR_IO, "%s: '%s' is larger than 1 GiB", opts.name ? opts.name : "json", path.c_str());
        if (n < sizeof buf) break;
    }
    if (std::ferror(f.get())) fail(MINFER_ERR_IO, "%s: cannot read '%s'", opts.name ? opts.name : "json", path.c_str());
    return parse(text, opts);
}

}  // namespace minfer::json
