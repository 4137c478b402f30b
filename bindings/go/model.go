package minfer

/*
#include "minfer_shim.h"
*/
import "C"

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// Model is an open GGUF model: immutable, safe for concurrent use by any number of goroutines and
// contexts. Close it when done; contexts still open keep its memory until they are closed, and keep
// working (Logits, Generate) after it.
type Model struct {
	mu     sync.RWMutex // held to read by each method's call into C, to write by Close
	ptr    *C.minfer_model
	closed bool         // Close ran: the methods then see no model (the library's "model is NULL")
	refs   atomic.Int32 // the caller's until Close, and each open Context's; the handle is freed at 0
}

// handle is the C model for one method's calls, nil once Close ran; Close waits until done. (A method
// holding it must not call another method of the Model: a Close waiting in between would deadlock.)
func (m *Model) handle() *C.minfer_model {
	m.mu.RLock()
	if m.closed {
		return nil
	}
	return m.ptr
}

func (m *Model) done() { m.mu.RUnlock() }

// unref drops a reference (the caller's at Close, or a Context's); the last one frees the C model.
func (m *Model) unref() {
	if m.refs.Add(-1) == 0 {
		C.go_minfer_close(m.ptr)
	}
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
	ckeys, err := newCStrings("option name", keys)
	if err != nil {
		return nil, err
	}
	defer ckeys.free()
	cvalues, err := newCStrings("option value", values)
	if err != nil {
		return nil, err
	}
	defer cvalues.free()
	cpath, err := cString("model path", path)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cpath))
	var raw *C.minfer_model
	var msg *C.char
	st := C.go_minfer_open_with_options(cpath, ckeys.ptr, cvalues.ptr, C.size_t(len(keys)), &raw, &msg)
	if err := check(st, msg); err != nil {
		return nil, err
	}
	m := &Model{ptr: raw}
	m.refs.Store(1)
	return m, nil
}

// Close releases the caller's hold on the model; a second Close does nothing. It waits for the Model's
// methods running on other goroutines; the C model is freed once no Context holds it either.
func (m *Model) Close() error {
	m.mu.Lock()
	was := m.closed
	m.closed = true
	m.mu.Unlock()
	if !was {
		m.unref()
	}
	return nil
}

// SetOption sets a runtime option for this model (load-time ones give ErrOptionLocked).
func (m *Model) SetOption(key, value string) error {
	p := m.handle()
	defer m.done()
	return setOption(p, key, value)
}

// Option is the value of an option in force for this model, in canonical form ("true", "4096").
func (m *Model) Option(key string) (string, error) {
	p := m.handle()
	defer m.done()
	return getOption(p, key)
}

// Architecture is "qwen2" or "qwen3".
func (m *Model) Architecture() string {
	p := m.handle()
	defer m.done()
	return C.GoString(C.go_minfer_model_architecture(p))
}

// Name is general.name, or "".
func (m *Model) Name() string {
	p := m.handle()
	defer m.done()
	return C.GoString(C.go_minfer_model_name(p))
}

// Device is the backend the model runs on: "cpu" or "cuda".
func (m *Model) Device() string {
	p := m.handle()
	defer m.done()
	return C.GoString(C.go_minfer_model_device(p))
}

// hyper is one of the model's numbers (0 once closed).
func (m *Model) hyper(get func(*C.minfer_model) int64) int64 {
	p := m.handle()
	defer m.done()
	return get(p)
}

func (m *Model) NParams() uint64 {
	return uint64(m.hyper(func(p *C.minfer_model) int64 { return int64(C.go_minfer_model_n_params(p)) }))
}
func (m *Model) FileSize() uint64 {
	return uint64(m.hyper(func(p *C.minfer_model) int64 { return int64(C.go_minfer_model_file_size(p)) }))
}
func (m *Model) NVocab() int {
	return int(m.hyper(func(p *C.minfer_model) int64 { return int64(C.go_minfer_model_n_vocab(p)) }))
}
func (m *Model) NCtxTrain() int {
	return int(m.hyper(func(p *C.minfer_model) int64 { return int64(C.go_minfer_model_n_ctx_train(p)) }))
}
func (m *Model) NEmbd() int {
	return int(m.hyper(func(p *C.minfer_model) int64 { return int64(C.go_minfer_model_n_embd(p)) }))
}
func (m *Model) NLayer() int {
	return int(m.hyper(func(p *C.minfer_model) int64 { return int64(C.go_minfer_model_n_layer(p)) }))
}

// MetaKeys lists the GGUF metadata keys in file order.
func (m *Model) MetaKeys() []string {
	p := m.handle()
	defer m.done()
	n := int(C.go_minfer_model_meta_count(p))
	keys := make([]string, n)
	for i := range keys {
		keys[i] = C.GoString(C.go_minfer_model_meta_key(p, C.size_t(i)))
	}
	return keys
}

// MetaInt is an integer (or bool) value; ErrNotFound or ErrWrongType otherwise.
func (m *Model) MetaInt(key string) (int64, error) {
	ckey, err := cString("metadata key", key)
	if err != nil {
		return 0, err
	}
	defer C.free(unsafe.Pointer(ckey))
	p := m.handle()
	defer m.done()
	var v C.int64_t
	var msg *C.char
	err = check(C.go_minfer_model_meta_int(p, ckey, &v, &msg), msg)
	return int64(v), err
}

// MetaFloat is a float32 or float64 value.
func (m *Model) MetaFloat(key string) (float64, error) {
	ckey, err := cString("metadata key", key)
	if err != nil {
		return 0, err
	}
	defer C.free(unsafe.Pointer(ckey))
	p := m.handle()
	defer m.done()
	var v C.double
	var msg *C.char
	err = check(C.go_minfer_model_meta_float(p, ckey, &v, &msg), msg)
	return float64(v), err
}

// MetaString is a string value, or any scalar rendered as text.
func (m *Model) MetaString(key string) (string, error) {
	ckey, err := cString("metadata key", key)
	if err != nil {
		return "", err
	}
	defer C.free(unsafe.Pointer(ckey))
	p := m.handle()
	defer m.done()
	return readString(func(buf *C.char, cap C.size_t, n *C.size_t, msg **C.char) C.minfer_status {
		return C.go_minfer_model_meta_string(p, ckey, buf, cap, n, msg)
	})
}

// ChatTemplate is tokenizer.chat_template (Jinja source, not evaluated); ErrNotFound when absent.
func (m *Model) ChatTemplate() (string, error) {
	p := m.handle()
	defer m.done()
	return readString(func(buf *C.char, cap C.size_t, n *C.size_t, msg **C.char) C.minfer_status {
		return C.go_minfer_model_chat_template(p, buf, cap, n, msg)
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
	p := m.handle()
	defer m.done()
	for {
		var n C.size_t
		var msg *C.char
		st := C.go_minfer_tokenize(p, ctext, C.size_t(len(text)), special,
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
	p := m.handle()
	defer m.done()
	return readBytes(func(buf *C.char, cap C.size_t, n *C.size_t, msg **C.char) C.minfer_status {
		return C.go_minfer_token_to_piece(p, C.int32_t(token), buf, cap, n, msg)
	})
}

// Detokenize is the text of a token sequence; invalid UTF-8 becomes U+FFFD.
func (m *Model) Detokenize(tokens []int32) (string, error) {
	p := m.handle()
	defer m.done()
	return readString(func(buf *C.char, cap C.size_t, n *C.size_t, msg **C.char) C.minfer_status {
		return C.go_minfer_detokenize(p, tokenPtr(tokens), C.size_t(len(tokens)), buf, cap, n, msg)
	})
}

// SpecialToken is the id of a special token; false when the vocabulary has none.
func (m *Model) SpecialToken(which SpecialToken) (int32, bool) {
	p := m.handle()
	defer m.done()
	id := int32(C.go_minfer_model_special_token(p, C.minfer_special_token(which)))
	return id, id >= 0
}

// IsEOG reports whether generation should stop at this token.
func (m *Model) IsEOG(token int32) bool {
	p := m.handle()
	defer m.done()
	return C.go_minfer_token_is_eog(p, C.int32_t(token)) != 0
}

// tokenPtr is the C view of a token slice (nil when empty).
func tokenPtr(tokens []int32) *C.int32_t {
	if len(tokens) == 0 {
		return nil
	}
	return (*C.int32_t)(unsafe.Pointer(&tokens[0]))
}
