package minfer

/*
#include "minfer_shim.h"
*/
import "C"

import "unsafe"

// Model is an open GGUF model: immutable, safe for concurrent use by any number of goroutines and
// contexts. Close it when done; contexts still open keep its memory until they are closed.
type Model struct {
	ptr *C.minfer_model
}

// SpecialToken names a special token of the vocabulary.
type SpecialToken int

const (
	TokenBOS     SpecialToken = C.MINFER_TOKEN_BOS
	TokenEOS     SpecialToken = C.MINFER_TOKEN_EOS
	TokenEOT     SpecialToken = C.MINFER_TOKEN_EOT // end of turn (<|im_end|> for Qwen chat models)
	TokenIMStart SpecialToken = C.MINFER_TOKEN_IM_START
	TokenIMEnd   SpecialToken = C.MINFER_TOKEN_IM_END
	TokenPad     SpecialToken = C.MINFER_TOKEN_PAD
)

// Open opens and validates a GGUF model with the process-wide option defaults.
func Open(path string) (*Model, error) {
	return OpenWithOptions(path, nil)
}

// OpenWithOptions opens a model with options applied on top of the defaults for this model only
// (load-time and runtime options alike); every pair is validated before anything is loaded.
func OpenWithOptions(path string, options map[string]string) (*Model, error) {
	if err := ensureLoaded(); err != nil {
		return nil, err
	}
	keys := sortedKeys(options)
	values := make([]string, len(keys))
	for i, k := range keys {
		values[i] = options[k]
	}
	ckeys, cvalues := newCStrings(keys), newCStrings(values)
	defer ckeys.free()
	defer cvalues.free()
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var raw *C.minfer_model
	var msg *C.char
	st := C.go_minfer_open_with_options(cpath, ckeys.ptr, cvalues.ptr, C.size_t(len(keys)), &raw, &msg)
	if err := check(st, msg); err != nil {
		return nil, err
	}
	return &Model{ptr: raw}, nil
}

// Close releases the model; a second Close does nothing.
func (m *Model) Close() error {
	C.go_minfer_close(m.ptr)
	m.ptr = nil
	return nil
}

// SetOption sets a runtime option for this model (load-time ones give ErrOptionLocked).
func (m *Model) SetOption(key, value string) error { return setOption(m.ptr, key, value) }

// Option is the value of an option in force for this model, in canonical form ("true", "4096").
func (m *Model) Option(key string) (string, error) { return getOption(m.ptr, key) }

// Architecture is "qwen2" or "qwen3".
func (m *Model) Architecture() string { return C.GoString(C.go_minfer_model_architecture(m.ptr)) }

// Name is general.name, or "".
func (m *Model) Name() string { return C.GoString(C.go_minfer_model_name(m.ptr)) }

// Device is the backend the model runs on: "cpu" or "cuda".
func (m *Model) Device() string { return C.GoString(C.go_minfer_model_device(m.ptr)) }

func (m *Model) NParams() uint64  { return uint64(C.go_minfer_model_n_params(m.ptr)) }
func (m *Model) FileSize() uint64 { return uint64(C.go_minfer_model_file_size(m.ptr)) }
func (m *Model) NVocab() int      { return int(C.go_minfer_model_n_vocab(m.ptr)) }
func (m *Model) NCtxTrain() int   { return int(C.go_minfer_model_n_ctx_train(m.ptr)) }
func (m *Model) NEmbd() int       { return int(C.go_minfer_model_n_embd(m.ptr)) }
func (m *Model) NLayer() int      { return int(C.go_minfer_model_n_layer(m.ptr)) }

// MetaKeys lists the GGUF metadata keys in file order.
func (m *Model) MetaKeys() []string {
	n := int(C.go_minfer_model_meta_count(m.ptr))
	keys := make([]string, n)
	for i := range keys {
		keys[i] = C.GoString(C.go_minfer_model_meta_key(m.ptr, C.size_t(i)))
	}
	return keys
}

// MetaInt is an integer (or bool) value; ErrNotFound or ErrWrongType otherwise.
func (m *Model) MetaInt(key string) (int64, error) {
	ckey := C.CString(key)
	defer C.free(unsafe.Pointer(ckey))
	var v C.int64_t
	var msg *C.char
	err := check(C.go_minfer_model_meta_int(m.ptr, ckey, &v, &msg), msg)
	return int64(v), err
}

// MetaFloat is a float32 or float64 value.
func (m *Model) MetaFloat(key string) (float64, error) {
	ckey := C.CString(key)
	defer C.free(unsafe.Pointer(ckey))
	var v C.double
	var msg *C.char
	err := check(C.go_minfer_model_meta_float(m.ptr, ckey, &v, &msg), msg)
	return float64(v), err
}

// MetaString is a string value, or any scalar rendered as text.
func (m *Model) MetaString(key string) (string, error) {
	ckey := C.CString(key)
	defer C.free(unsafe.Pointer(ckey))
	return readString(func(buf *C.char, cap C.size_t, n *C.size_t, msg **C.char) C.minfer_status {
		return C.go_minfer_model_meta_string(m.ptr, ckey, buf, cap, n, msg)
	})
}

// ChatTemplate is tokenizer.chat_template (Jinja source, not evaluated); ErrNotFound when absent.
func (m *Model) ChatTemplate() (string, error) {
	return readString(func(buf *C.char, cap C.size_t, n *C.size_t, msg **C.char) C.minfer_status {
		return C.go_minfer_model_chat_template(m.ptr, buf, cap, n, msg)
	})
}

// Tokenize turns text into token ids. With parseSpecial, control tokens written in the text
// ("<|im_start|>") become their ids.
func (m *Model) Tokenize(text string, parseSpecial bool) ([]int32, error) {
	ctext := C.CString(text)
	defer C.free(unsafe.Pointer(ctext))
	special := C.int32_t(0)
	if parseSpecial {
		special = 1
	}
	tokens := make([]int32, len(text)+1)
	for {
		var n C.size_t
		var msg *C.char
		st := C.go_minfer_tokenize(m.ptr, ctext, C.size_t(len(text)), special,
			(*C.int32_t)(unsafe.Pointer(&tokens[0])), C.size_t(len(tokens)), &n, &msg)
		if st == C.MINFER_ERR_BUFFER_TOO_SMALL && int(n) > len(tokens) {
			C.free(unsafe.Pointer(msg))
			tokens = make([]int32, n)
			continue
		}
		if err := check(st, msg); err != nil {
			return nil, err
		}
		return tokens[:n], nil
	}
}

// TokenToPiece is the raw bytes of one token: possibly a piece of a UTF-8 character.
func (m *Model) TokenToPiece(token int32) ([]byte, error) {
	return readBytes(func(buf *C.char, cap C.size_t, n *C.size_t, msg **C.char) C.minfer_status {
		return C.go_minfer_token_to_piece(m.ptr, C.int32_t(token), buf, cap, n, msg)
	})
}

// Detokenize is the text of a token sequence; invalid UTF-8 becomes U+FFFD.
func (m *Model) Detokenize(tokens []int32) (string, error) {
	return readString(func(buf *C.char, cap C.size_t, n *C.size_t, msg **C.char) C.minfer_status {
		return C.go_minfer_detokenize(m.ptr, tokenPtr(tokens), C.size_t(len(tokens)), buf, cap, n, msg)
	})
}

// SpecialToken is the id of a special token; false when the vocabulary has none.
func (m *Model) SpecialToken(which SpecialToken) (int32, bool) {
	id := int32(C.go_minfer_model_special_token(m.ptr, C.minfer_special_token(which)))
	return id, id >= 0
}

// IsEOG reports whether generation should stop at this token.
func (m *Model) IsEOG(token int32) bool {
	return C.go_minfer_token_is_eog(m.ptr, C.int32_t(token)) != 0
}

// tokenPtr is the C view of a token slice (nil when empty).
func tokenPtr(tokens []int32) *C.int32_t {
	if len(tokens) == 0 {
		return nil
	}
	return (*C.int32_t)(unsafe.Pointer(&tokens[0]))
}
