// JSON parser: values, escapes (surrogate pairs to UTF-8), numbers, strictness on bad inputs with byte
// offsets, depth limit; and the Hugging Face tokenizer.json import of minfer synth (hand-made files).
#include <doctest/doctest.h>

#include <time.h>
#include <string>
#include <tuple>
#include <vector>

#include "core/json.h"
#include "gguf/gguf.h"
#include "helpers.h"
#include "synth/synth.h"

namespace {

using minfer::json::Type;
using minfer::json::Value;

Value parse(const std::string& s) { return minfer::json::parse(s); }

// The status and message of the error parsing `s` throws (MINFER_OK and "" if it parses).
std::pair<minfer_status, std::string> parse_error(const std::string& s, minfer::json::ParseOptions opts = {}) {
    try {
        minfer::json::parse(s, opts);
    } catch (const minfer::Error& e) {
        return {e.status(), e.what()};
    }
    return {MINFER_OK, ""};
}

void write_text(const std::string& path, const std::string& text) {
    test::write_bytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

}  // namespace

TEST_SUITE("json") {
    TEST_CASE("scalars, arrays and objects") {
        CHECK(parse("null").is_null());
        CHECK(parse("true").boolean());
        CHECK(parse("false").is_bool());
        CHECK_FALSE(parse("false").boolean());
        CHECK(parse(" \t\r\n 42 \n").number() == 42.0);
        CHECK(parse("\"hi\"").str() == "hi");
        CHECK(parse("\xef\xbb\xbf[]").is_array());  // a byte order mark is skipped

        const Value a = parse("[1, \"two\", [3, [4]], {}, [], null, true]");
        REQUIRE(a.is_array());
        REQUIRE(a.size() == 7);
        CHECK(a[0].number() == 1.0);
        CHECK(a[1].str() == "two");
        CHECK(a[2][1][0].number() == 4.0);
        CHECK(a[3].is_object());
        CHECK(a[3].size() == 0);
        CHECK(a[4].size() == 0);
        CHECK(a[5].is_null());
        CHECK(a[6].boolean());

        const Value o = parse(R"({"b": 1, "a": {"x": [true]}, "": "empty key"})");
        REQUIRE(o.is_object());
        REQUIRE(o.size() == 3);
        CHECK(o.keys() == std::vector<std::string>{"b", "a", ""});  // document order
        CHECK(o.find("b")->number() == 1.0);
        CHECK(o.find("a")->find("x")->items()[0].boolean());
        CHECK(o.find("")->str() == "empty key");
        CHECK(o.find("zz") == nullptr);
        CHECK(a.find("b") == nullptr);  // not an object

        // Accessors of the wrong type give neutral values.
        CHECK(o.str().empty());
        CHECK(o.number() == 0.0);
        CHECK_FALSE(o.boolean());
        CHECK(std::string(minfer::json::type_name(Type::object)) == "object");
    }

    TEST_CASE("string escapes and UTF-8") {
        CHECK(parse(R"("\"\\\/\b\f\n\r\t")").str() == "\"\\/\b\f\n\r\t");
        CHECK(parse(R"("\u0041\u00e9\u20AC")").str() == "A\xc3\xa9\xe2\x82\xac");
        CHECK(parse(R"("\u07ff\u0800\uffff")").str() == "\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf");
        // Surrogate pairs become one 4-byte sequence: U+1F600, U+10000, U+10FFFF.
        CHECK(parse(R"("\ud83d\ude00")").str() == "\xf0\x9f\x98\x80");
        CHECK(parse(R"("\uD800\uDC00")").str() == "\xf0\x90\x80\x80");
        CHECK(parse(R"("\udbff\udfff")").str() == "\xf4\x8f\xbf\xbf");
        // NUL is a character like any other.
        const std::string nul = parse(R"("a\u0000b")").str();
        CHECK(nul == std::string("a\0b", 3));
        // Raw UTF-8 passes through unchanged (2, 3 and 4-byte sequences).
        const std::string raw = "\"\xc4\xa0 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9 \xd0\x96\"";
        CHECK(parse(raw).str() == raw.substr(1, raw.size() - 2));
        CHECK(parse("\"\x7f\"").str() == "\x7f");  // DEL is not a control character for JSON
    }

    TEST_CASE("numbers") {
        CHECK(parse("0").number() == 0.0);
        CHECK(parse("-0").number() == 0.0);
        CHECK(parse("-12").number() == -12.0);
        CHECK(parse("1.5").number() == 1.5);
        CHECK(parse("1e3").number() == 1000.0);
        CHECK(parse("1E+3").number() == 1000.0);
        CHECK(parse("-2.5e-3").number() == doctest::Approx(-0.0025));
        CHECK(parse("151643").number() == 151643.0);
        CHECK(parse("1e-400").number() == 0.0);  // underflow reads as zero
        CHECK(parse("0.0000000000000000000000000000000000000000000001e-300").number() == 0.0);
        CHECK(parse("1.7976931348623157e308").number() > 1e308);

        int64_t i = 0;
        CHECK(parse("151643").as_int(&i));
        CHECK(i == 151643);
        CHECK(parse("-7").as_int(&i));
        CHECK(i == -7);
        CHECK(parse("2.0").as_int(&i));
        CHECK(i == 2);
        CHECK(parse("1e3").as_int(&i));
        CHECK(i == 1000);
        CHECK(parse("9007199254740992").as_int(&i));
        CHECK(i == 9007199254740992);
        CHECK_FALSE(parse("2.5").as_int(&i));
        CHECK_FALSE(parse("1e19").as_int(&i));
        CHECK_FALSE(parse("9223372036854775808").as_int(&i));
        CHECK_FALSE(parse("\"3\"").as_int(&i));
    }

    TEST_CASE("bad inputs are rejected with the byte offset") {
        struct Bad {
            std::string text;
            size_t offset;
            const char* what;
        };
        const std::vector<Bad> bad = {
            {"", 0, "empty input"},
            {"   ", 3, "empty input"},
            {"[1,]", 3, "expected a value"},
            {"{\"a\":1,}", 7, "expected a string key"},
            {"[1 2]", 3, "expected ',' or ']'"},
            {"{\"a\" 1}", 5, "expected ':'"},
            {"{\"a\":1 \"b\":2}", 7, "expected ',' or '}'"},
            {"{1:2}", 1, "expected a string key"},
            {"{'a':1}", 1, "expected a string key"},
            {"[", 1, "end of input"},
            {"{", 1, "end of input"},
            {"[1", 2, "end of input"},
            {"1 2", 2, "after the value"},
            {"[1] x", 4, "after the value"},
            {"01", 0, "leading zero"},
            {"-01", 1, "leading zero"},
            {"-", 1, "expected a digit"},
            {"+1", 0, "expected a value"},
            {".5", 0, "expected a value"},
            {"1.", 2, "after a decimal point"},
            {"1.e3", 2, "after a decimal point"},
            {"1e", 2, "in an exponent"},
            {"1e+", 3, "in an exponent"},
            {"1e400", 0, "out of range"},
            {"-1e400", 0, "out of range"},
            {"NaN", 0, "expected a value"},
            {"Infinity", 0, "expected a value"},
            {"tru", 3, "literal 'true'"},
            {"nul", 3, "literal 'null'"},
            {"fals3", 4, "literal 'false'"},
            {"True", 0, "expected a value"},
            {"// c\n1", 0, "expected a value"},
            {"[1,2,]", 5, "expected a value"},
            {"\"abc", 0, "unterminated string"},
            {"\"abc\\", 0, "unterminated string"},
            {"\"a\\x\"", 2, "invalid escape '\\x'"},
            {"\"a\\'\"", 2, "invalid escape"},
            {"\"\\u12\"", 5, "expected a hex digit"},
            {"\"\\uZZZZ\"", 3, "expected a hex digit"},
            {"\"\\ud800\"", 1, "not followed by a \\u low surrogate"},
            {"\"\\ud800x\"", 1, "not followed by a \\u low surrogate"},
            {"\"\\ud800\\u0041\"", 1, "not a low surrogate"},
            {"\"\\ud800\\ud800\"", 1, "not a low surrogate"},
            {"\"\\udc00\"", 1, "unpaired low surrogate"},
            {"\"a\nb\"", 2, "control character U+000A"},
            {"\"a\tb\"", 2, "control character U+0009"},
            {std::string("\"a\0b\"", 5), 2, "control character U+0000"},
            {"\"\xff\"", 1, "invalid UTF-8"},
            {"\"\x80\"", 1, "invalid UTF-8"},
            {"\"\xc0\xaf\"", 1, "invalid UTF-8"},           // overlong '/'
            {"\"\xe0\x80\xaf\"", 1, "invalid UTF-8"},       // overlong
            {"\"\xed\xa0\x80\"", 1, "invalid UTF-8"},       // a UTF-16 surrogate in UTF-8
            {"\"\xf4\x90\x80\x80\"", 1, "invalid UTF-8"},   // above U+10FFFF
            {"\"ab\xe2\x82\"", 3, "invalid UTF-8"},         // truncated
            {"\"ab\xe2\x82", 3, "invalid UTF-8"},           // truncated at the end of input
            {"[\xc3\xa9]", 1, "byte 0xc3"},                  // non-ASCII outside a string
            {"{\"a\":1,\"a\":2}", 0, "duplicate key \"a\""},
        };
        for (const Bad& b : bad) {
            CAPTURE(b.text);
            const auto [status, msg] = parse_error(b.text);
            CAPTURE(msg);
            CHECK(status == MINFER_ERR_BAD_MODEL);
            CHECK(msg.find(b.what) != std::string::npos);
            CHECK(msg.find("at byte " + std::to_string(b.offset) + " ") != std::string::npos);
        }
    }

    TEST_CASE("errors carry the name, status, line and column") {
        minfer::json::ParseOptions opts;
        opts.name = "tokenizer_config.json";
        opts.status = MINFER_ERR_INVALID_ARGUMENT;
        const auto [status, msg] = parse_error("{\n  \"a\": 1,\n  \"b\": tru\n}", opts);
        CHECK(status == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(msg == "tokenizer_config.json: unexpected byte 0x0a in literal 'true' at byte 22 (line 3, column 11)");
    }

    TEST_CASE("duplicate keys in large objects") {
        std::string s = "{";
        for (int i = 0; i < 1000; ++i) s += "\"k" + std::to_string(i) + "\": " + std::to_string(i) + ",";
        const Value ok = parse(s.substr(0, s.size() - 1) + "}");
        CHECK(ok.size() == 1000);
        CHECK(ok.find("k999")->number() == 999.0);
        const auto [status, msg] = parse_error(s + "\"k500\": 0}");
        CHECK(status == MINFER_ERR_BAD_MODEL);
        CHECK(msg.find("duplicate key \"k500\"") != std::string::npos);
    }

    TEST_CASE("nesting is limited") {
        auto nested = [](int depth, char open, char close) {
            return std::string(static_cast<size_t>(depth), open) + std::string(static_cast<size_t>(depth), close);
        };
        CHECK(parse(nested(128, '[', ']')).is_array());
        auto [status, msg] = parse_error(nested(129, '[', ']'));
        CHECK(status == MINFER_ERR_BAD_MODEL);
        CHECK(msg.find("nested deeper than 128 at byte 128 ") != std::string::npos);
        // Very deep input fails at the limit without exhausting the stack.
        std::tie(status, msg) = parse_error(std::string(1000000, '['));
        CHECK(status == MINFER_ERR_BAD_MODEL);
        std::string objs;
        for (int i = 0; i < 200; ++i) objs += "{\"a\":";
        std::tie(status, msg) = parse_error(objs);
        CHECK(msg.find("nested deeper than 128") != std::string::npos);
        minfer::json::ParseOptions opts;
        opts.max_depth = 3;
        CHECK(minfer::json::parse("[[[1]]]", opts).is_array());
        std::tie(status, msg) = parse_error("[[[[1]]]]", opts);
        CHECK(msg.find("nested deeper than 3") != std::string::npos);
    }

    TEST_CASE("files") {
        const std::string path = test::tmp_path("json_file.json");
        write_text(path, "{\"x\": [1, 2, 3]}\n");
        const Value v = minfer::json::parse_file(path);
        CHECK(v.find("x")->size() == 3);
        try {
            minfer::json::parse_file(test::tmp_path("no_such_file.json"));
            FAIL("no error");
        } catch (const minfer::Error& e) {
            CHECK(e.status() == MINFER_ERR_IO);
            CHECK(std::string(e.what()).find("no_such_file.json") != std::string::npos);
        }
        std::remove(path.c_str());
    }

    TEST_CASE("a large vocabulary-like document parses in a few seconds of CPU time at most") {
        // ~160k members and ~150k pairs, about the shape and size of a Qwen tokenizer.json.
        std::string s = "{\"vocab\": {";
        for (int i = 0; i < 160000; ++i) s += (i ? ",\"tok" : "\"tok") + std::to_string(i) + "\\u0120\\ud83d\\ude00\":" + std::to_string(i);
        s += "}, \"merges\": [";
        for (int i = 0; i < 150000; ++i) s += (i ? ",[\"a" : "[\"a") + std::to_string(i) + "\",\"b\"]";
        s += "]}";
        // This thread's CPU time, which a loaded machine does not stretch as it does the wall clock.
        auto cpu_secs = [] {
            timespec ts{};
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
            return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
        };
        const double t0 = cpu_secs();
        const Value v = parse(s);
        const double secs = cpu_secs() - t0;
        MESSAGE("parsed " << s.size() << " bytes in " << secs << " s of CPU time");
        REQUIRE(v.find("vocab")->size() == 160000);
        CHECK(v.find("vocab")->keys()[7] == "tok7\xc4\xa0\xf0\x9f\x98\x80");
        CHECK(v.find("merges")->size() == 150000);
        // Not a speed figure: a guard against work that grows faster than the document (a member-by-member
        // duplicate check would be ~1e10 string compares, tens of seconds), far above the ASan build's
        // fraction of a second.
        CHECK(secs < 5.0);
    }
}

// ---- the tokenizer.json import of minfer synth ---------------------------------------------------

namespace {

// The GPT-2 byte-level alphabet, written out independently of lib/synth: printable Latin-1 bytes stand
// for themselves, the others map to U+0100.. in byte order.
std::vector<std::string> byte_alphabet() {
    std::vector<std::string> out;
    int next = 256;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        const int cp = printable ? b : next++;
        std::string s;
        if (cp < 0x80) {
            s += static_cast<char>(cp);
        } else {
            s += static_cast<char>(0xc0 | (cp >> 6));
            s += static_cast<char>(0x80 | (cp & 0x3f));
        }
        out.push_back(s);
    }
    return out;
}

std::string json_quote(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
    }
    return out + "\"";
}

const char* const kQwenPre =
    R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]})";

// A small Qwen-style tokenizer.json: the 256 byte tokens (ids 0..255), "Ġt" (256), "he" (257),
// "Ġthe" (258), a gap at 259, <|endoftext|> (260, special), <think> (261, not special).
struct TokJson {
    std::string model_type = "BPE";
    std::string pre = kQwenPre;
    std::string normalizer = R"({"type": "NFC"})";
    std::string merges = R"(["Ġ t", ["h", "e"], "Ġt he"])";
    std::string added = R"([{"id": 260, "content": "<|endoftext|>", "special": true, "lstrip": false},
                            {"id": 261, "content": "<think>", "special": false}])";
    std::string extra_vocab;  // appended to model.vocab

    std::string text() const {
        std::string v;
        const std::vector<std::string> bytes = byte_alphabet();
        for (size_t i = 0; i < bytes.size(); ++i) v += json_quote(bytes[i]) + ": " + std::to_string(i) + ", ";
        v += "\"\xc4\xa0t\": 256, \"he\": 257, \"\xc4\xa0the\": 258" + extra_vocab;
        return "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null, \"added_tokens\": " + added +
               ", \"normalizer\": " + normalizer + ", \"pre_tokenizer\": " + pre +
               ", \"post_processor\": {\"type\": \"ByteLevel\"}, \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"" +
               model_type + "\", \"dropout\": null, \"unk_token\": null, \"continuing_subword_prefix\": \"\", "
               "\"end_of_word_suffix\": \"\", \"fuse_unk\": false, \"byte_fallback\": false, \"ignore_merges\": false, "
               "\"vocab\": {" + v + "}, \"merges\": " + merges + "}}";
    }
};

minfer::synth::Vocab import(const TokJson& t, const char* config = nullptr) {
    const Value tok = minfer::json::parse(t.text());
    if (!config) return minfer::synth::import_hf_vocab(tok, nullptr);
    const Value cfg = minfer::json::parse(config);
    return minfer::synth::import_hf_vocab(tok, &cfg);
}

std::pair<minfer_status, std::string> import_error(const TokJson& t, const char* config = nullptr) {
    try {
        import(t, config);
    } catch (const minfer::Error& e) {
        return {e.status(), e.what()};
    }
    return {MINFER_OK, ""};
}

}  // namespace

TEST_SUITE("json") {
    TEST_CASE("tokenizer.json import: tokens, types, merges, specials") {
        const minfer::synth::Vocab v = import(TokJson{});
        REQUIRE(v.tokens.size() == 262);
        CHECK(v.tokens[0] == "\xc4\x80");  // byte 0
        CHECK(v.tokens[33] == "!");
        CHECK(v.tokens[32] == "\xc4\xa0");  // space
        CHECK(v.tokens[258] == "\xc4\xa0the");
        CHECK(v.tokens[259] == "[PAD259]");
        CHECK(v.tokens[260] == "<|endoftext|>");
        CHECK(v.tokens[261] == "<think>");
        CHECK(v.types[0] == 1);
        CHECK(v.types[258] == 1);
        CHECK(v.types[259] == 5);
        CHECK(v.types[260] == 3);
        CHECK(v.types[261] == 4);
        CHECK(v.merges == std::vector<std::string>{"\xc4\xa0 t", "h e", "\xc4\xa0t he"});
        CHECK(v.bos == -1);
        CHECK(v.eos == 260);  // no config: <|endoftext|>
        CHECK(v.pad == -1);
        CHECK(v.chat_template.empty());
    }

    TEST_CASE("tokenizer.json import: tokenizer_config.json") {
        TokJson t;
        t.added = R"([{"id": 259, "content": "<|im_end|>", "special": true}, {"id": 260, "content": "<|endoftext|>", "special": true}])";
        const minfer::synth::Vocab v = import(t, R"({"bos_token": null, "eos_token": "<|im_end|>",
            "pad_token": {"__type": "AddedToken", "content": "<|endoftext|>"}, "chat_template": "{{ x }}"})");
        CHECK(v.tokens.size() == 261);
        CHECK(v.bos == -1);
        CHECK(v.eos == 259);
        CHECK(v.pad == 260);
        CHECK(v.chat_template == "{{ x }}");
        // The list form of chat_template: the one named "default".
        const minfer::synth::Vocab w = import(t, R"({"chat_template": [{"name": "tool_use", "template": "T"},
            {"name": "default", "template": "D"}], "bos_token": "<|endoftext|>"})");
        CHECK(w.chat_template == "D");
        CHECK(w.bos == 260);
        CHECK(w.eos == 260);  // not in the config: <|endoftext|>
        const auto [status, msg] = import_error(t, R"({"eos_token": "<|nope|>"})");
        CHECK(status == MINFER_ERR_BAD_MODEL);
        CHECK(msg.find("eos_token '<|nope|>' is not in the vocabulary") != std::string::npos);
        CHECK(import_error(t, "[]").first == MINFER_ERR_BAD_MODEL);
        CHECK(import_error(t, R"({"chat_template": 3})").first == MINFER_ERR_BAD_MODEL);
    }

    TEST_CASE("tokenizer.json import: unsupported tokenizers are named") {
        struct Case {
            TokJson t;
            const char* what;
        };
        std::vector<Case> cases;
        cases.push_back({TokJson{}, "model.type 'WordPiece'"});
        cases.back().t.model_type = "WordPiece";
        cases.push_back({TokJson{}, "pre_tokenizer 'ByteLevel'"});
        cases.back().t.pre = R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})";
        cases.push_back({TokJson{}, "pre_tokenizer Split pattern '\\s+' is not the Qwen2 regex"});
        cases.back().t.pre = R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Isolated"}, {"type": "ByteLevel"}]})";
        cases.push_back({TokJson{}, "Sequence['Digits', 'ByteLevel']"});
        cases.back().t.pre = R"({"type": "Sequence", "pretokenizers": [{"type": "Digits"}, {"type": "ByteLevel"}]})";
        cases.push_back({TokJson{}, "ByteLevel with use_regex"});
        cases.back().t.pre = std::string(kQwenPre).replace(std::string(kQwenPre).find("\"use_regex\": false"), 18, "\"use_regex\": true");
        cases.push_back({TokJson{}, "ByteLevel with use_regex"});  // absent: true
        cases.back().t.pre = std::string(kQwenPre).replace(std::string(kQwenPre).find(", \"use_regex\": false"), 20, "");
        cases.push_back({TokJson{}, "ByteLevel with add_prefix_space"});
        cases.back().t.pre = std::string(kQwenPre).replace(std::string(kQwenPre).find("\"add_prefix_space\": false"), 25, "\"add_prefix_space\": true");
        cases.push_back({TokJson{}, "pre_tokenizer null"});
        cases.back().t.pre = "null";
        cases.push_back({TokJson{}, "normalizer 'NFKC'"});
        cases.back().t.normalizer = R"({"type": "NFKC"})";
        for (const Case& c : cases) {
            const std::string what = c.what;
            CAPTURE(what);
            const auto [status, msg] = import_error(c.t);
            CAPTURE(msg);
            CHECK(status == MINFER_ERR_UNSUPPORTED);
            CHECK(msg.find(c.what) != std::string::npos);
        }
        TokJson none;
        none.normalizer = "null";
        CHECK(import_error(none).first == MINFER_OK);
    }

    TEST_CASE("tokenizer.json import: inconsistent files") {
        struct Case {
            TokJson t;
            const char* what;
        };
        std::vector<Case> cases;
        cases.push_back({TokJson{}, "names 'xy', which is not in the vocabulary"});
        cases.back().t.merges = R"(["h e", "x y"])";
        cases.push_back({TokJson{}, "names 'Ġthe!'"});  // the concatenation must be a token too
        cases.back().t.merges = R"(["Ġthe !"])";
        cases.push_back({TokJson{}, "is not two tokens separated by one space"});
        cases.back().t.merges = R"(["h  e"])";
        cases.push_back({TokJson{}, "is not two tokens separated by one space"});
        cases.back().t.merges = R"(["he"])";
        cases.push_back({TokJson{}, "cannot be written as"});
        cases.back().t.merges = R"([["h e", "x"]])";
        cases.push_back({TokJson{}, "expected \"a b\" or [a, b]"});
        cases.back().t.merges = R"([["h", "e", "x"]])";
        cases.push_back({TokJson{}, "gives id 5 to both"});
        cases.back().t.extra_vocab = ", \"dup\": 5";
        cases.push_back({TokJson{}, "not an integer"});
        cases.back().t.extra_vocab = ", \"neg\": -1";
        cases.push_back({TokJson{}, "not an integer"});
        cases.back().t.extra_vocab = ", \"huge\": 100000000";
        cases.push_back({TokJson{}, "not an integer"});
        cases.back().t.extra_vocab = ", \"frac\": 1.5";
        cases.push_back({TokJson{}, "which is '\xc4\x80' already"});
        cases.back().t.added = R"([{"id": 0, "content": "<x>", "special": true}])";  // byte 0
        cases.push_back({TokJson{}, "added token 300 is empty"});
        cases.back().t.added = R"([{"id": 300, "content": "", "special": true}])";
        cases.push_back({TokJson{}, "an added token has no 'id'"});
        cases.back().t.added = R"([{"content": "<x>"}])";
        for (const Case& c : cases) {
            const std::string what = c.what;
            CAPTURE(what);
            const auto [status, msg] = import_error(c.t);
            CAPTURE(msg);
            CHECK(status == MINFER_ERR_BAD_MODEL);
            CHECK(msg.find(c.what) != std::string::npos);
        }
        // An added token may repeat its vocab entry.
        TokJson same;
        same.added = R"([{"id": 257, "content": "he", "special": false}])";
        const minfer::synth::Vocab v = import(same);
        CHECK(v.tokens.size() == 259);
        CHECK(v.types[257] == 4);
    }

    TEST_CASE("minfer_synth_vocab writes the vocabulary, padded to the preset") {
        const std::string tok = test::tmp_path("synth_vocab_tokenizer.json");
        const std::string cfg = test::tmp_path("synth_vocab_tokenizer_config.json");
        const std::string out = test::tmp_path("synth_vocab.gguf");
        TokJson t;
        t.added = R"([{"id": 259, "content": "<|im_end|>", "special": true}, {"id": 260, "content": "<|endoftext|>", "special": true}])";
        write_text(tok, t.text());
        write_text(cfg, R"({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"})");

        REQUIRE(minfer_synth_vocab(out.c_str(), "qwen2-tiny", "q8_0", 7, tok.c_str(), cfg.c_str()) == MINFER_OK);
        {
            const auto f = minfer::gguf::File::open(out);
            const minfer::gguf::Value* tokens = f->find("tokenizer.ggml.tokens");
            REQUIRE(tokens != nullptr);
            CHECK(tokens->count == 512);  // the preset's vocabulary size
            CHECK(tokens->strings[258] == "\xc4\xa0the");
            CHECK(tokens->strings[260] == "<|endoftext|>");
            CHECK(tokens->strings[511] == "[PAD511]");
            CHECK(f->find("tokenizer.ggml.merges")->count == 3);
            CHECK(f->find("tokenizer.ggml.merges")->strings[1] == "h e");
            CHECK(f->find("tokenizer.ggml.eos_token_id")->u == 259);
            CHECK(f->find("tokenizer.ggml.padding_token_id")->u == 260);
            CHECK(f->find("tokenizer.ggml.bos_token_id") == nullptr);
            CHECK(f->find("tokenizer.ggml.pre")->str == "qwen2");
            CHECK(f->find("tokenizer.chat_template")->str == "{% for m in messages %}{{ m.content }}{% endfor %}");
            CHECK(f->find_tensor("token_embd.weight")->ne[1] == 512);
            CHECK(f->find_tensor("output.weight")->ne[1] == 512);
        }
        minfer_model* m = nullptr;
        REQUIRE(minfer_open(out.c_str(), &m) == MINFER_OK);
        CHECK(minfer_model_n_vocab(m) == 512);
        minfer_close(m);

        // Without a config; a bad file; a missing file; NULL arguments.
        CHECK(minfer_synth_vocab(out.c_str(), "qwen2-tiny", "f32", 7, tok.c_str(), nullptr) == MINFER_OK);
        write_text(cfg, "{\"eos_token\": }");
        CHECK(minfer_synth_vocab(out.c_str(), "qwen2-tiny", "f32", 7, tok.c_str(), cfg.c_str()) == MINFER_ERR_BAD_MODEL);
        CHECK(std::string(minfer_last_error()).find("synth_vocab_tokenizer_config.json: unexpected character '}'") != std::string::npos);
        CHECK(minfer_synth_vocab(out.c_str(), "qwen2-tiny", "f32", 7, test::tmp_path("none.json").c_str(), nullptr) == MINFER_ERR_IO);
        CHECK(minfer_synth_vocab(out.c_str(), "nope", "f32", 7, tok.c_str(), nullptr) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(minfer_synth_vocab(out.c_str(), "qwen2-tiny", "f32", 7, nullptr, nullptr) == MINFER_ERR_INVALID_ARGUMENT);
        std::remove(tok.c_str());
        std::remove(cfg.c_str());
        std::remove(out.c_str());
    }
}
