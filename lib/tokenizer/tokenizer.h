// Byte-level BPE tokenizer from the GGUF vocabulary (tokenizer.ggml.model = gpt2) with the Qwen2
// pre-tokenizer, special/added tokens, and UTF-8-safe decoding.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"

namespace minfer::tokenizer {

// Token types as GGUF defines them (tokenizer.ggml.token_type).
enum class TokenType : int32_t { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

struct Specials {
    int32_t bos = -1, eos = -1, eot = -1, im_start = -1, im_end = -1, pad = -1;
};

class Tokenizer {
public:
    // Builds the tokenizer from the file's tokenizer.ggml.* keys. Throws Error(MINFER_ERR_UNSUPPORTED)
    // for a tokenizer model or pre-tokenizer it does not implement (naming it), and
    // Error(MINFER_ERR_BAD_MODEL) for an inconsistent vocabulary (a merge naming unknown tokens, ...).
    static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& file);
    virtual ~Tokenizer() = default;

    // Text -> ids. Any bytes are accepted (invalid UTF-8 is encoded through the byte tokens). With
    // parse_special, control tokens written in the text are matched as themselves; user-defined added
    // tokens are always matched.
    virtual std::vector<int32_t> encode(std::string_view text, bool parse_special) const = 0;
    // The raw bytes of a token (special tokens: their text). Normal tokens: their byte-level text mapped
    // back to bytes; control, user-defined and unknown tokens: their text as is; byte tokens ("<0xAB>"):
    // that byte; unused tokens (padding such as "[PAD151646]"): the empty string. Throws
    // Error(INVALID_ARGUMENT) for a bad id.
    virtual std::string piece(int32_t token) const = 0;
    virtual int32_t n_vocab() const = 0;
    virtual TokenType type(int32_t token) const = 0;
    virtual const Specials& specials() const = 0;
    // True for tokens that end generation: eos, eot/im_end, and control tokens such as <|endoftext|>.
    virtual bool is_eog(int32_t token) const = 0;
    // The token's text as the vocabulary stores it (normal tokens in the byte-level alphabet: "Ġhello").
    // Throws Error(INVALID_ARGUMENT) for a bad id.
    virtual std::string_view text(int32_t token) const = 0;
    // The id of the token whose vocabulary text is exactly `text` (the lowest id if several), or -1.
    virtual int32_t find(std::string_view text) const = 0;
};

// The GPT-2 byte-level alphabet: the character (as UTF-8) that stands for byte b in vocabularies.
std::string byte_symbol(uint8_t b);

// Replaces every invalid or truncated UTF-8 sequence with U+FFFD (one per maximal invalid subpart, as
// the Unicode standard recommends), leaving valid text unchanged.
std::string sanitize_utf8(std::string_view bytes);

// Streaming decoder: feed pieces, get back only whole UTF-8 characters; the concatenation of every
// push() and the final flush() equals sanitize_utf8 of the concatenated pieces.
class StreamDecoder {
public:
    std::string push(std::string_view bytes);
    std::string flush();

private:
    std::string pending_;
};

}  // namespace minfer::tokenizer
