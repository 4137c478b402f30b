// A strict JSON parser (RFC 8259) into a small value tree, for the files that come with models
// (tokenizer.json, tokenizer_config.json).
//
// Strict: the whole input must be one value with only whitespace around it (a leading UTF-8 byte order
// mark is skipped); the text must be valid UTF-8; no comments, trailing commas, single quotes, NaN,
// leading zeros or raw control characters in strings; \u escapes must pair surrogates correctly; an
// object may not repeat a key. Safe: nesting is limited, every read is bounds-checked, and errors are
// thrown as minfer::Error naming the problem and its byte offset (and line and column).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "minfer.h"

namespace minfer::json {

enum class Type : uint8_t { null, boolean, number, string, array, object };
const char* type_name(Type t);  // "null", "boolean", ...

class Value {
public:
    Value() = default;

    Type type() const { return type_; }
    bool is_null() const { return type_ == Type::null; }
    bool is_bool() const { return type_ == Type::boolean; }
    bool is_number() const { return type_ == Type::number; }
    bool is_string() const { return type_ == Type::string; }
    bool is_array() const { return type_ == Type::array; }
    bool is_object() const { return type_ == Type::object; }

    // Unchecked accessors: the value of the matching type, a neutral value (false, 0, "") otherwise.
    bool boolean() const { return type_ == Type::boolean && bool_; }
    double number() const { return type_ == Type::number ? num_ : 0.0; }
    const std::string& str() const { return str_; }  // strings: the decoded UTF-8 text

    // A number with an integral value that fits in int64 (1, -3, 2.0, 1e3); false otherwise.
    bool as_int(int64_t* out) const;

    // Arrays: the elements. Objects: the member values, in document order, with keys() alongside.
    size_t size() const { return items_.size(); }
    const std::vector<Value>& items() const { return items_; }
    const std::vector<std::string>& keys() const { return keys_; }
    const Value& operator[](size_t i) const { return items_[i]; }

    // Objects: the member named key, or nullptr (also for non-objects). Linear in the member count.
    const Value* find(std::string_view key) const;

private:
    friend class Parser;
    Type type_ = Type::null;
    bool bool_ = false;
    double num_ = 0.0;
    std::string str_;
    std::vector<Value> items_;
    std::vector<std::string> keys_;  // objects only; keys_[i] names items_[i]
};

struct ParseOptions {
    const char* name = "json";                   // prefixes error messages ("tokenizer.json: ...")
    minfer_status status = MINFER_ERR_BAD_MODEL;  // the status of errors
    int max_depth = 128;                          // arrays and objects nested deeper are an error
};

// Parses `text`; throws Error(opts.status, "NAME: WHAT at byte N (line L, column C)").
Value parse(std::string_view text, const ParseOptions& opts = {});
// Reads and parses a file; a file that cannot be read throws Error(MINFER_ERR_IO). Files over
// 1 GiB are refused.
Value parse_file(const std::string& path, const ParseOptions& opts = {});

}  // namespace minfer::json
