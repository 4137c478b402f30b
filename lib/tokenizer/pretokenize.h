// Pre-tokenizers: split text into the pieces that BPE then encodes one at a time (internal to
// lib/tokenizer and its tests).
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace minfer::tokenizer {

// Splits `text` exactly as the Qwen2 pre-tokenizer regex
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// does when matched repeatedly from the start: at each position the first alternative that matches,
// with greedy quantifiers and backtracking. \s is the White_Space property, \p{L} and \p{N} the general
// categories L* and N*, and the contractions ignore the case of ASCII letters only. Text is UTF-8; a
// byte that is not part of a well-formed sequence counts as one character of none of those classes.
// The pieces are views into `text`, cover it in order, and none is empty. The splitter hands them out
// one at a time (no memory beyond itself); pretokenize_qwen2 appends them all to `out`.
class Qwen2Splitter {
public:
    explicit Qwen2Splitter(std::string_view text) : text_(text) {}
    // The next piece; false at the end of the text.
    bool next(std::string_view* piece);

private:
    std::string_view text_;
    size_t pos_ = 0;
};

void pretokenize_qwen2(std::string_view text, std::vector<std::string_view>& out);

}  // namespace minfer::tokenizer
