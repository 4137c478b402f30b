// Byte-level BPE (tokenizer.ggml.model = gpt2) with the Qwen2 pre-tokenizer.
//
// Encoding: the text is first cut at special tokens written in it (user-defined ones always, control
// ones with parse_special; at each position the longest); every piece between them is split by the
// pre-tokenizer; each pre-token's bytes become the tokens of the GPT-2 byte alphabet (byte -> one
// printable character), then the merges are applied, lowest rank first (leftmost among equals), until
// none applies. The result is a sequence of vocabulary ids, since every merge result is a token.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "core/error.h"
#include "tokenizer/normalize.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"

namespace minfer::tokenizer {
namespace {

// The GPT-2 byte alphabet: bytes that are printable characters (! to ~, ¡ to ¬, ® to ÿ) stand for
// themselves; the other 68 map, in byte order, to U+0100 onwards.
bool byte_is_printable(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

struct ByteAlphabet {
    std::array<uint32_t, 256> to_cp{};
    std::array<int16_t, 256 + 68> to_byte{};  // by code point; -1 for code points outside the alphabet
    ByteAlphabet() {
        to_byte.fill(-1);
        uint32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            to_cp[static_cast<size_t>(b)] = byte_is_printable(b) ? static_cast<uint32_t>(b) : next++;
            to_byte[to_cp[static_cast<size_t>(b)]] = static_cast<int16_t>(b);
        }
    }
};

const ByteAlphabet& alphabet() {
    static const ByteAlphabet a;
    return a;
}

// (left id, right id) -> (rank, result id), open addressing with linear probing.
class MergeTable {
public:
    struct Hit {
        int32_t rank, result;
    };

    void reserve(size_t n) {
        size_t cap = 16;
        int bits = 4;
        while (cap < n + n / 2 + 16) {  // load factor at most 2/3
            cap *= 2;
            ++bits;
        }
        slots_.assign(cap, Slot{kEmpty, 0, 0});
        mask_ = cap - 1;
        shift_ = 64 - bits;
    }
    // Keeps the first (lowest-rank) entry of a pair.
    void insert(int32_t left, int32_t right, int32_t rank, int32_t result) {
        const uint64_t key = pack(left, right);
        for (size_t s = slot_of(key);; s = (s + 1) & mask_) {
            if (slots_[s].key == kEmpty) {
                slots_[s] = Slot{key, rank, result};
                return;
            }
            if (slots_[s].key == key) return;
        }
    }
    const Hit* find(int32_t left, int32_t right) const {
        if (left < 0 || right < 0 || slots_.empty()) return nullptr;
        const uint64_t key = pack(left, right);
        for (size_t s = slot_of(key);; s = (s + 1) & mask_) {
            if (slots_[s].key == key) return &slots_[s].hit;
            if (slots_[s].key == kEmpty) return nullptr;
        }
    }

private:
    struct Slot {
        uint64_t key;
        Hit hit;
        Slot(uint64_t k, int32_t rank, int32_t result) : key(k), hit{rank, result} {}
    };
    static constexpr uint64_t kEmpty = ~uint64_t{0};  // not a pair of valid ids
    static uint64_t pack(int32_t l, int32_t r) { return (uint64_t{static_cast<uint32_t>(l)} << 32) | static_cast<uint32_t>(r); }
    // Fibonacci hashing: the top bits of the product depend on every bit of the key.
    size_t slot_of(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_); }

    std::vector<Slot> slots_;
    size_t mask_ = 0;
    int shift_ = 63;
};

// Token text -> id (the lowest id of a text), open addressing over the ids; the texts live in the
// tokenizer, so lookups pass them in.
class TextIndex {
public:
    void build(const std::vector<std::string_view>& texts) {
        size_t cap = 16;
        int bits = 4;
        while (cap < texts.size() + texts.size() / 2 + 16) {  // load factor at most 2/3
            cap *= 2;
            ++bits;
        }
        slots_.assign(cap, Slot{0, -1});
        mask_ = cap - 1;
        shift_ = 64 - bits;
        for (size_t id = 0; id < texts.size(); ++id) {
            const uint64_t h = hash(texts[id]);
            for (size_t s = slot_of(h);; s = (s + 1) & mask_) {
                if (slots_[s].id < 0) {
                    slots_[s] = Slot{static_cast<uint32_t>(h), static_cast<int32_t>(id)};
                    break;
                }
                if (slots_[s].tag == static_cast<uint32_t>(h) && texts[static_cast<size_t>(slots_[s].id)] == texts[id]) break;
            }
        }
    }
    int32_t find(std::string_view text, const std::vector<std::string_view>& texts) const {
        if (slots_.empty()) return -1;
        const uint64_t h = hash(text);
        for (size_t s = slot_of(h);; s = (s + 1) & mask_) {
            const Slot& slot = slots_[s];
            if (slot.id < 0) return -1;
            if (slot.tag == static_cast<uint32_t>(h) && texts[static_cast<size_t>(slot.id)] == text) return slot.id;
        }
    }

private:
    struct Slot {
        uint32_t tag;  // low bits of the hash
        int32_t id;    // -1: empty
    };
    static uint64_t mix(uint64_t h) {  // the 64-bit finalizer of MurmurHash3
        h ^= h >> 33;
        h *= 0xFF51AFD7ED558CCDull;
        h ^= h >> 33;
        h *= 0xC4CEB9FE1A85EC53ull;
        h ^= h >> 33;
        return h;
    }
    static uint64_t hash(std::string_view s) {
        uint64_t h = 0x243F6A8885A308D3ull ^ s.size();
        size_t i = 0;
        for (; i + 8 <= s.size(); i += 8) {
            uint64_t w;
            std::memcpy(&w, s.data() + i, 8);
            h = mix(h ^ w);
        }
        uint64_t tail = 0;
        if (i < s.size()) std::memcpy(&tail, s.data() + i, s.size() - i);
        return mix(h ^ tail ^ (uint64_t{0x9E} << 56));
    }
    size_t slot_of(uint64_t h) const { return static_cast<size_t>((h * 0x9E3779B97F4A7C15ull) >> shift_); }

    std::vector<Slot> slots_;
    size_t mask_ = 0;
    int shift_ = 63;
};

struct SpecialText {
    std::string_view text;
    int32_t id;
    bool control;
};

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

// "<0xAB>" -> 0xAB; -1 when the text has another form.
int parse_byte_token(std::string_view t) {
    if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
    const int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

class BpeTokenizer final : public Tokenizer {
public:
    explicit BpeTokenizer(const gguf::File& file);

    std::vector<int32_t> encode(std::string_view text, bool parse_special) const override;
    std::string piece(int32_t token) const override;
    int32_t n_vocab() const override { return static_cast<int32_t>(types_.size()); }
    TokenType type(int32_t token) const override {
        check_id(token);
        return types_[static_cast<size_t>(token)];
    }
    const Specials& specials() const override { return specials_; }
    bool is_eog(int32_t token) const override { return std::binary_search(eog_.begin(), eog_.end(), token); }
    std::string_view text(int32_t token) const override {
        check_id(token);
        return texts_[static_cast<size_t>(token)];
    }
    int32_t find(std::string_view text) const override {
        return index_.find(text, texts_);
    }

private:
    void check_id(int32_t token) const {
        if (token < 0 || token >= n_vocab())
            fail(MINFER_ERR_INVALID_ARGUMENT, "token id %d is out of range (vocabulary of %d tokens)", token, n_vocab());
    }
    struct Scratch;
    void encode_plain(std::string_view text, std::vector<int32_t>& out, Scratch& scratch) const;
    void encode_word(std::string_view word, std::vector<int32_t>& out, Scratch& scratch) const;
    void push_byte(uint8_t b, std::vector<int32_t>& out) const;

    std::string storage_;                  // every token's text, back to back
    std::vector<std::string_view> texts_;  // by id, into storage_
    std::vector<TokenType> types_;
    TextIndex index_;
    MergeTable merges_;
    std::array<int32_t, 256> byte_token_{};  // the token of each byte's alphabet character, -1 if none
    std::array<int32_t, 256> byte_fallback_{};  // a "<0xAB>" byte token, else -1
    int32_t unk_ = -1;
    // Special texts grouped by first byte, longest first within a group; group b is
    // [special_begin_[b], special_begin_[b + 1]).
    std::vector<SpecialText> special_texts_;
    std::array<uint32_t, 257> special_begin_{};
    Specials specials_;
    std::vector<int32_t> eog_;  // sorted
};

const gguf::Value* find_typed(const gguf::File& f, const char* key, gguf::ValueType type, gguf::ValueType elem) {
    const gguf::Value* v = f.find(key);
    if (!v) return nullptr;
    if (v->type != type || (type == gguf::ValueType::ARRAY && v->elem_type != elem)) {
        if (type == gguf::ValueType::ARRAY)
            fail(MINFER_ERR_BAD_MODEL, "%s must be an array of %s, not %s%s%s", key, gguf::value_type_name(elem),
                 gguf::value_type_name(v->type), v->type == gguf::ValueType::ARRAY ? " of " : "",
                 v->type == gguf::ValueType::ARRAY ? gguf::value_type_name(v->elem_type) : "");
        fail(MINFER_ERR_BAD_MODEL, "%s must be a %s, not %s", key, gguf::value_type_name(type), gguf::value_type_name(v->type));
    }
    return v;
}

BpeTokenizer::BpeTokenizer(const gguf::File& f) {
    using gguf::ValueType;
    const gguf::Value* model = find_typed(f, "tokenizer.ggml.model", ValueType::STRING, ValueType::U8);
    if (!model) fail(MINFER_ERR_UNSUPPORTED, "the file has no tokenizer (tokenizer.ggml.model is missing)");
    if (model->str != "gpt2")
        fail(MINFER_ERR_UNSUPPORTED, "tokenizer model '%.*s' is not supported (supported: gpt2)",
             static_cast<int>(model->str.size()), model->str.data());
    const gguf::Value* pre = find_typed(f, "tokenizer.ggml.pre", ValueType::STRING, ValueType::U8);
    if (!pre)
        fail(MINFER_ERR_UNSUPPORTED, "tokenizer pre-tokenizer is not given (tokenizer.ggml.pre is missing; supported: qwen2)");
    if (pre->str != "qwen2")
        fail(MINFER_ERR_UNSUPPORTED, "tokenizer pre-tokenizer '%.*s' is not supported (supported: qwen2)",
             static_cast<int>(pre->str.size()), pre->str.data());

    // Tokens and their types.
    const gguf::Value* tokens = find_typed(f, "tokenizer.ggml.tokens", ValueType::ARRAY, ValueType::STRING);
    if (!tokens) fail(MINFER_ERR_BAD_MODEL, "tokenizer.ggml.tokens is missing");
    if (tokens->strings.empty()) fail(MINFER_ERR_BAD_MODEL, "tokenizer.ggml.tokens is empty");
    if (tokens->strings.size() > static_cast<size_t>(INT32_MAX))
        fail(MINFER_ERR_BAD_MODEL, "tokenizer.ggml.tokens has too many tokens (%zu)", tokens->strings.size());
    const size_t n = tokens->strings.size();
    size_t total = 0;
    for (std::string_view t : tokens->strings) total += t.size();
    storage_.reserve(total);
    for (std::string_view t : tokens->strings) storage_.append(t);
    texts_.reserve(n);
    size_t off = 0;
    for (size_t i = 0; i < n; ++i) {
        const size_t len = tokens->strings[i].size();
        texts_.emplace_back(storage_.data() + off, len);
        off += len;
    }
    index_.build(texts_);
    types_.assign(n, TokenType::normal);
    if (const gguf::Value* tt = find_typed(f, "tokenizer.ggml.token_type", ValueType::ARRAY, ValueType::I32)) {
        if (tt->count != n)
            fail(MINFER_ERR_BAD_MODEL, "tokenizer.ggml.token_type has %llu entries for %zu tokens",
                 static_cast<unsigned long long>(tt->count), n);
        for (size_t i = 0; i < n; ++i) {
            int32_t t;
            std::memcpy(&t, tt->raw + 4 * i, 4);  // little-endian file, little-endian host
            if (t == 0) t = 1;  // "undefined" in older converters: treat as normal
            if (t < 1 || t > 6) fail(MINFER_ERR_BAD_MODEL, "token %zu has an unknown token type %d", i, t);
            types_[i] = static_cast<TokenType>(t);
        }
    }

    // The byte alphabet, byte tokens and the unknown token.
    byte_token_.fill(-1);
    byte_fallback_.fill(-1);
    for (int b = 0; b < 256; ++b) byte_token_[static_cast<size_t>(b)] = find(byte_symbol(static_cast<uint8_t>(b)));
    for (size_t i = 0; i < n; ++i) {
        if (types_[i] == TokenType::byte) {
            const int b = parse_byte_token(texts_[i]);
            if (b < 0)
                fail(MINFER_ERR_BAD_MODEL, "byte token %zu has the text '%.*s' (expected <0xHH>)", i,
                     static_cast<int>(std::min<size_t>(texts_[i].size(), 64)), texts_[i].data());
            if (byte_fallback_[static_cast<size_t>(b)] < 0) byte_fallback_[static_cast<size_t>(b)] = static_cast<int32_t>(i);
        } else if (types_[i] == TokenType::unknown && unk_ < 0) {
            unk_ = static_cast<int32_t>(i);
        }
    }

    // Merges: "left right", rank = index.
    if (const gguf::Value* m = find_typed(f, "tokenizer.ggml.merges", ValueType::ARRAY, ValueType::STRING)) {
        merges_.reserve(m->strings.size());
        std::string joined;
        for (size_t r = 0; r < m->strings.size(); ++r) {
            const std::string_view s = m->strings[r];
            const size_t sp = s.find(' ');
            const auto bad = [&](const char* why) {
                fail(MINFER_ERR_BAD_MODEL, "tokenizer merge %zu ('%.*s') %s", r,
                     static_cast<int>(std::min<size_t>(s.size(), 200)), s.data(), why);
            };
            if (sp == std::string_view::npos) bad("is not two tokens separated by a space");
            const std::string_view a = s.substr(0, sp), b = s.substr(sp + 1);
            const int32_t ia = find(a), ib = find(b);
            if (ia < 0 || ib < 0) bad("names a token that is not in the vocabulary");
            joined.assign(a);
            joined.append(b);
            const int32_t ij = find(joined);
            if (ij < 0) bad("makes a token that is not in the vocabulary");
            if (r > static_cast<size_t>(INT32_MAX)) bad("is beyond the largest rank");
            merges_.insert(ia, ib, static_cast<int32_t>(r), ij);
        }
    }

    // Special texts matched before pre-tokenization.
    for (size_t i = 0; i < n; ++i) {
        if ((types_[i] == TokenType::control || types_[i] == TokenType::user_defined) && !texts_[i].empty())
            special_texts_.push_back({texts_[i], static_cast<int32_t>(i), types_[i] == TokenType::control});
    }
    std::stable_sort(special_texts_.begin(), special_texts_.end(), [](const SpecialText& x, const SpecialText& y) {
        const auto bx = static_cast<uint8_t>(x.text[0]), by = static_cast<uint8_t>(y.text[0]);
        if (bx != by) return bx < by;
        return x.text.size() > y.text.size();
    });
    special_begin_.fill(0);
    for (const SpecialText& s : special_texts_) ++special_begin_[static_cast<size_t>(static_cast<uint8_t>(s.text[0])) + 1];
    for (size_t b = 0; b < 256; ++b) special_begin_[b + 1] += special_begin_[b];

    // Special ids.
    const auto id_key = [&](const char* key) -> int32_t {
        const gguf::Value* v = f.find(key);
        if (!v) return -1;
        int64_t x;
        if (!v->as_int(&x)) fail(MINFER_ERR_BAD_MODEL, "%s must be an integer, not %s", key, gguf::value_type_name(v->type));
        if (x < 0 || x >= static_cast<int64_t>(n))
            fail(MINFER_ERR_BAD_MODEL, "%s = %lld is outside the vocabulary of %zu tokens", key, static_cast<long long>(x), n);
        return static_cast<int32_t>(x);
    };
    specials_.bos = id_key("tokenizer.ggml.bos_token_id");
    specials_.eos = id_key("tokenizer.ggml.eos_token_id");
    specials_.pad = id_key("tokenizer.ggml.padding_token_id");
    specials_.im_start = find("<|im_start|>");
    specials_.im_end = find("<|im_end|>");
    specials_.eot = id_key("tokenizer.ggml.eot_token_id");
    if (specials_.eot < 0) specials_.eot = specials_.im_end;

    for (int32_t id : {specials_.eos, specials_.eot, specials_.im_end})
        if (id >= 0) eog_.push_back(id);
    for (const char* t : {"<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>"}) {
        const int32_t id = find(t);
        if (id >= 0 && types_[static_cast<size_t>(id)] == TokenType::control) eog_.push_back(id);
    }
    std::sort(eog_.begin(), eog_.end());
    eog_.erase(std::unique(eog_.begin(), eog_.end()), eog_.end());
}

// Reused buffers of one encode() call.
struct BpeTokenizer::Scratch {
    struct Symbol {
        int32_t id;    // -2 once merged into its left neighbour
        int32_t prev, next;
        uint8_t byte;  // the first byte (for the fallback of a byte without a token)
    };
    std::vector<Symbol> symbols;
    struct Candidate {
        int32_t rank, left, right, left_id, right_id;
    };
    std::vector<Candidate> heap;
};

void BpeTokenizer::push_byte(uint8_t b, std::vector<int32_t>& out) const {
    if (byte_fallback_[b] >= 0) {
        out.push_back(byte_fallback_[b]);
    } else if (unk_ >= 0) {
        out.push_back(unk_);
    } else {
        fail(MINFER_ERR_INVALID_ARGUMENT, "the byte 0x%02X has no token in this vocabulary", b);
    }
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out, Scratch& sc) const {
    const size_t n = word.size();
    if (n == 1) {
        const auto b = static_cast<uint8_t>(word[0]);
        if (byte_token_[b] >= 0)
            out.push_back(byte_token_[b]);
        else
            push_byte(b, out);
        return;
    }
    auto& sym = sc.symbols;
    sym.resize(n);
    for (size_t i = 0; i < n; ++i) {
        const auto b = static_cast<uint8_t>(word[i]);
        sym[i] = {byte_token_[b], static_cast<int32_t>(i) - 1, i + 1 < n ? static_cast<int32_t>(i) + 1 : -1, b};
    }
    // Min-heap on (rank, left position): the lowest rank first, the leftmost among equal ranks.
    auto& heap = sc.heap;
    heap.clear();
    const auto later = [](const Scratch::Candidate& x, const Scratch::Candidate& y) {
        return x.rank != y.rank ? x.rank > y.rank : x.left > y.left;
    };
    const auto consider = [&](int32_t l, int32_t r) {
        if (l < 0 || r < 0) return;
        const MergeTable::Hit* h = merges_.find(sym[static_cast<size_t>(l)].id, sym[static_cast<size_t>(r)].id);
        if (!h) return;
        heap.push_back({h->rank, l, r, sym[static_cast<size_t>(l)].id, sym[static_cast<size_t>(r)].id});
        std::push_heap(heap.begin(), heap.end(), later);
    };
    for (size_t i = 0; i + 1 < n; ++i) consider(static_cast<int32_t>(i), static_cast<int32_t>(i + 1));
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), later);
        const Scratch::Candidate c = heap.back();
        heap.pop_back();
        Scratch::Symbol& L = sym[static_cast<size_t>(c.left)];
        Scratch::Symbol& R = sym[static_cast<size_t>(c.right)];
        // Stale when either side has changed since the candidate was made.
        if (L.id != c.left_id || R.id != c.right_id || L.next != c.right) continue;
        L.id = merges_.find(c.left_id, c.right_id)->result;
        L.next = R.next;
        if (R.next >= 0) sym[static_cast<size_t>(R.next)].prev = c.left;
        R.id = -2;
        R.next = R.prev = -1;
        consider(L.prev, c.left);
        consider(c.left, L.next);
    }
    for (int32_t i = 0; i >= 0; i = sym[static_cast<size_t>(i)].next) {
        const Scratch::Symbol& s = sym[static_cast<size_t>(i)];
        if (s.id >= 0)
            out.push_back(s.id);
        else
            push_byte(s.byte, out);  // a lone byte whose alphabet character is not a token
    }
}

void BpeTokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out, Scratch& sc) const {
    // The Qwen2 tokenizer normalizes to NFC before splitting (its tokenizer.json "normalizer"); added
    // tokens matched around this text are not normalized, as in Hugging Face tokenizers.
    const std::string normalized = nfc(text);
    Qwen2Splitter split(normalized);
    for (std::string_view word; split.next(&word);) encode_word(word, out, sc);
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool parse_special) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 4);
    Scratch sc;
    size_t start = 0;  // of the text not yet encoded
    for (size_t i = 0; i < text.size();) {
        const auto b = static_cast<uint8_t>(text[i]);
        const SpecialText* hit = nullptr;
        for (uint32_t k = special_begin_[b]; k < special_begin_[static_cast<size_t>(b) + 1]; ++k) {
            const SpecialText& s = special_texts_[k];
            if ((!s.control || parse_special) && text.size() - i >= s.text.size() &&
                std::memcmp(text.data() + i, s.text.data(), s.text.size()) == 0) {
                hit = &s;
                break;
            }
        }
        if (!hit) {
            ++i;
            continue;
        }
        encode_plain(text.substr(start, i - start), out, sc);
        out.push_back(hit->id);
        i += hit->text.size();
        start = i;
    }
    encode_plain(text.substr(start), out, sc);
    return out;
}

std::string BpeTokenizer::piece(int32_t token) const {
    check_id(token);
    const std::string_view t = texts_[static_cast<size_t>(token)];
    switch (types_[static_cast<size_t>(token)]) {
    case TokenType::control:
    case TokenType::user_defined:
    case TokenType::unknown:
        return std::string(t);
    case TokenType::unused:
        return std::string();
    case TokenType::byte:
        return std::string(1, static_cast<char>(parse_byte_token(t)));
    case TokenType::normal:
        break;
    }
    // Back through the byte alphabet; a character outside it (not in a byte-level vocabulary) stays as is.
    std::string out;
    out.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
        const Utf8Seq q = scan_utf8(t, i);
        if (q.valid && q.cp < alphabet().to_byte.size() && alphabet().to_byte[q.cp] >= 0)
            out += static_cast<char>(alphabet().to_byte[q.cp]);
        else
            out.append(t.substr(i, q.len));
        i += q.len;
    }
    return out;
}

}  // namespace

std::string byte_symbol(uint8_t b) {
    std::string s;
    append_utf8(s, alphabet().to_cp[b]);
    return s;
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& file) { return std::make_unique<BpeTokenizer>(file); }

}  // namespace minfer::tokenizer
