// Package minfer is the Go binding of minfer, an inference engine for GGUF language models, over its
// C ABI (include/minfer.h).
//
// Two layers: minfer_shim.h and minfer_shim.c, generated from the header by scripts/gen_bindings.py
// (the declarations, a function table and one cgo wrapper per function), and this package: Model and
// Context (both io.Closer), Detokenizer, Stream, and *Error, which carries the status Code and the
// library's message and matches its Code with errors.Is.
//
// By default the library is opened at run time with dlopen: Load names the file, and the first call
// that needs the library without a Load before it opens libminfer.so.0 through the dynamic loader's
// search path. Built with the minfer_pkgconfig tag, the package links the library found by
// `pkg-config minfer` instead, and Load is refused.
//
// A Model is safe for concurrent use. A Context is used by one goroutine at a time (a second
// concurrent call returns ErrBusy). Close releases the C memory; nothing is released by the garbage
// collector.
package minfer

/*
#include "minfer_shim.h"
*/
import "C"

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Code is the status of a failed call. Codes are errors, so errors.Is(err, minfer.ErrBadModel)
// tells an *Error's status.
type Code int32

// The statuses of include/minfer.h (MINFER_OK is never an error).
const (
	ErrInvalidArgument Code = C.MINFER_ERR_INVALID_ARGUMENT
	ErrIO              Code = C.MINFER_ERR_IO
	ErrBadModel        Code = C.MINFER_ERR_BAD_MODEL
	ErrUnsupported     Code = C.MINFER_ERR_UNSUPPORTED
	ErrOutOfMemory     Code = C.MINFER_ERR_OUT_OF_MEMORY
	ErrDevice          Code = C.MINFER_ERR_DEVICE
	ErrUnknownOption   Code = C.MINFER_ERR_UNKNOWN_OPTION
	ErrOptionValue     Code = C.MINFER_ERR_OPTION_VALUE
	ErrOptionLocked    Code = C.MINFER_ERR_OPTION_LOCKED
	ErrContextFull     Code = C.MINFER_ERR_CONTEXT_FULL
	ErrBusy            Code = C.MINFER_ERR_BUSY
	ErrNotFound        Code = C.MINFER_ERR_NOT_FOUND
	ErrWrongType       Code = C.MINFER_ERR_WRONG_TYPE
	ErrBufferTooSmall  Code = C.MINFER_ERR_BUFFER_TOO_SMALL
	ErrCancelled       Code = C.MINFER_ERR_CANCELLED
	ErrInternal        Code = C.MINFER_ERR_INTERNAL
)

var codeNames = map[Code]string{
	ErrInvalidArgument: "MINFER_ERR_INVALID_ARGUMENT",
	ErrIO:              "MINFER_ERR_IO",
	ErrBadModel:        "MINFER_ERR_BAD_MODEL",
	ErrUnsupported:     "MINFER_ERR_UNSUPPORTED",
	ErrOutOfMemory:     "MINFER_ERR_OUT_OF_MEMORY",
	ErrDevice:          "MINFER_ERR_DEVICE",
	ErrUnknownOption:   "MINFER_ERR_UNKNOWN_OPTION",
	ErrOptionValue:     "MINFER_ERR_OPTION_VALUE",
	ErrOptionLocked:    "MINFER_ERR_OPTION_LOCKED",
	ErrContextFull:     "MINFER_ERR_CONTEXT_FULL",
	ErrBusy:            "MINFER_ERR_BUSY",
	ErrNotFound:        "MINFER_ERR_NOT_FOUND",
	ErrWrongType:       "MINFER_ERR_WRONG_TYPE",
	ErrBufferTooSmall:  "MINFER_ERR_BUFFER_TOO_SMALL",
	ErrCancelled:       "MINFER_ERR_CANCELLED",
	ErrInternal:        "MINFER_ERR_INTERNAL",
}

// String is the header's name, as minfer_status_string gives it: "MINFER_ERR_BAD_MODEL".
func (c Code) String() string {
	if name, ok := codeNames[c]; ok {
		return name
	}
	return fmt.Sprintf("MINFER_ERR_UNKNOWN_STATUS(%d)", int32(c))
}

// statusString is the library's name of a status (the tests compare it with String).
func statusString(c Code) string {
	return C.GoString(C.go_minfer_status_string(C.minfer_status(c)))
}

func (c Code) Error() string { return c.String() }

// Error is a failed call: its status and the library's message (which key, which tensor, which
// offset).
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return e.Code.String() + ": " + e.Msg }

// Is reports whether target is this error's Code.
func (e *Error) Is(target error) bool {
	c, ok := target.(Code)
	return ok && c == e.Code
}

// check turns a wrapper's status and malloc'ed message into an *Error (nil for MINFER_OK).
func check(st C.minfer_status, msg *C.char) error {
	if msg != nil {
		defer C.free(unsafe.Pointer(msg))
	}
	if st == C.MINFER_OK {
		return nil
	}
	return &Error{Code: Code(st), Msg: C.GoString(msg)}
}

// ---- loading ------------------------------------------------------------------------------------

var (
	loadMu     sync.Mutex
	loaded     atomic.Bool
	loadedFrom string
)

// HeaderVersion is the version of the minfer.h these bindings were generated from; Version is the
// loaded library's.
const HeaderVersion = C.MINFER_VERSION_STRING

// DefaultLibrary is opened when nothing called Load: the soname of the major version these bindings
// were generated for, found through the dynamic loader's search (rpath, LD_LIBRARY_PATH, the system's
// library directories).
var DefaultLibrary = fmt.Sprintf("libminfer.so.%d", C.MINFER_VERSION_MAJOR)

// Load opens the library at path (dlopen) and resolves every function of the header. Call it before
// anything else; loading the same path again is a no-op and another path is refused
// (ErrInvalidArgument). ErrIO when dlopen fails, ErrUnsupported when the file lacks a function of the
// header or has another major version, or when the package is built with the minfer_pkgconfig tag.
func Load(path string) error {
	loadMu.Lock()
	defer loadMu.Unlock()
	if loaded.Load() {
		if loadedFrom == path {
			return nil
		}
		return &Error{Code: ErrInvalidArgument, Msg: "libminfer is already loaded from " + loadedFrom + "; a process loads it once"}
	}
	if err := openLibrary(path); err != nil {
		return err
	}
	if major := int(C.go_minfer_version_number()) / 10000; major != C.MINFER_VERSION_MAJOR {
		return &Error{Code: ErrUnsupported, Msg: fmt.Sprintf("%s is minfer %s; these bindings need major version %d",
			path, C.GoString(C.go_minfer_version()), C.MINFER_VERSION_MAJOR)}
	}
	loadedFrom = path
	loaded.Store(true)
	return nil
}

// ensureLoaded loads DefaultLibrary when nothing is loaded yet.
func ensureLoaded() error {
	if linked || loaded.Load() {
		return nil
	}
	err := Load(DefaultLibrary)
	if e, ok := err.(*Error); ok && e.Code == ErrInvalidArgument {
		return nil // another goroutine loaded a library first
	}
	return err
}

// ---- the library ----------------------------------------------------------------------------------

// Version is the loaded library's "MAJOR.MINOR.PATCH".
func Version() (string, error) {
	if err := ensureLoaded(); err != nil {
		return "", err
	}
	return C.GoString(C.go_minfer_version()), nil
}

// BuildInfo is one line describing the library's build: CUDA support and archs, compiler.
func BuildInfo() (string, error) {
	if err := ensureLoaded(); err != nil {
		return "", err
	}
	return C.GoString(C.go_minfer_build_info()), nil
}

// SetDefaultOption sets the process-wide default of an option; models opened afterwards see it.
func SetDefaultOption(key, value string) error {
	if err := ensureLoaded(); err != nil {
		return err
	}
	return setOption(nil, key, value)
}

// DefaultOption is the process-wide default of an option, in canonical form.
func DefaultOption(key string) (string, error) {
	if err := ensureLoaded(); err != nil {
		return "", err
	}
	return getOption(nil, key)
}

func setOption(m *C.minfer_model, key, value string) error {
	ckey, err := cString("option name", key)
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(ckey))
	cvalue, err := cString("option value", value)
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(cvalue))
	var msg *C.char
	return check(C.go_minfer_set_option(m, ckey, cvalue, &msg), msg)
}

func getOption(m *C.minfer_model, key string) (string, error) {
	ckey, err := cString("option name", key)
	if err != nil {
		return "", err
	}
	defer C.free(unsafe.Pointer(ckey))
	return readString(func(buf *C.char, cap C.size_t, n *C.size_t, msg **C.char) C.minfer_status {
		return C.go_minfer_get_option(m, ckey, buf, cap, n, msg)
	})
}

// OptionInfo is one entry of the library's option table (`minfer options`, docs/options.md).
type OptionInfo struct {
	Name string
	Kind string // "bool", "int", "enum" or "bytes"
	// Runtime options may change on an open model; load-time ones are read once by Open.
	Runtime            bool
	Default            string
	MinValue, MaxValue string   // the inclusive bounds of int and bytes options
	Choices            []string // the choices of an enum option
	Doc                string
}

// Options lists every option of the library.
func Options() ([]OptionInfo, error) {
	if err := ensureLoaded(); err != nil {
		return nil, err
	}
	n := int(C.go_minfer_option_count())
	out := make([]OptionInfo, 0, n)
	for i := 0; i < n; i++ {
		var name, def, min, max, choices, doc, msg *C.char
		var kind C.minfer_option_type
		var scope C.minfer_option_scope
		st := C.go_minfer_option_info(C.size_t(i), &name, &kind, &scope, &def, &min, &max, &choices, &doc, &msg)
		if err := check(st, msg); err != nil {
			return nil, err
		}
		info := OptionInfo{Name: C.GoString(name), Runtime: scope == C.MINFER_OPTION_SCOPE_RUNTIME,
			Default: C.GoString(def), MinValue: C.GoString(min), MaxValue: C.GoString(max), Doc: C.GoString(doc)}
		switch kind {
		case C.MINFER_OPTION_BOOL:
			info.Kind = "bool"
		case C.MINFER_OPTION_INT:
			info.Kind = "int"
		case C.MINFER_OPTION_ENUM:
			info.Kind = "enum"
		case C.MINFER_OPTION_BYTES:
			info.Kind = "bytes"
		default:
			info.Kind = "unknown"
		}
		if c := C.GoString(choices); c != "" {
			info.Choices = strings.Split(c, "|")
		}
		out = append(out, info)
	}
	return out, nil
}

// Message is one turn of a conversation.
type Message struct {
	Role, Content string
}

// ChatFormat formats messages as ChatML, the format of Qwen chat models; with addAssistant the text
// ends with the opening of the assistant's turn.
func ChatFormat(messages []Message, addAssistant bool) (string, error) {
	if err := ensureLoaded(); err != nil {
		return "", err
	}
	roleList, contentList := make([]string, len(messages)), make([]string, len(messages))
	for i, m := range messages {
		roleList[i], contentList[i] = m.Role, m.Content
	}
	roles, err := newCStrings("chat format: a role", roleList)
	if err != nil {
		return "", err
	}
	defer roles.free()
	contents, err := newCStrings("chat format: a message", contentList)
	if err != nil {
		return "", err
	}
	defer contents.free()
	flag := C.int32_t(0)
	if addAssistant {
		flag = 1
	}
	return readString(func(buf *C.char, cap C.size_t, n *C.size_t, msg **C.char) C.minfer_status {
		return C.go_minfer_chat_format(roles.ptr, contents.ptr, C.size_t(len(messages)), flag, buf, cap, n, msg)
	})
}

// Synth writes a GGUF model of a named shape with random weights, for tests and benchmarks (see
// SynthPresets; mix is the type of the matmul weights: "f16", "q8_0", "q4_K_M", ...).
func Synth(path, preset, mix string, seed uint64) error {
	if err := ensureLoaded(); err != nil {
		return err
	}
	args, err := newCStrings("synth: the path, preset or mix", []string{path, preset, mix})
	if err != nil {
		return err
	}
	defer args.free()
	var msg *C.char
	return check(C.go_minfer_synth(args.items[0], args.items[1], args.items[2], C.uint64_t(seed), &msg), msg)
}

// SynthPresets lists the shapes Synth knows.
func SynthPresets() ([]string, error) {
	if err := ensureLoaded(); err != nil {
		return nil, err
	}
	n := int(C.go_minfer_synth_preset_count())
	out := make([]string, n)
	for i := range out {
		out[i] = C.GoString(C.go_minfer_synth_preset_name(C.size_t(i)))
	}
	return out, nil
}

// ---- helpers ------------------------------------------------------------------------------------

// readBytes calls a function of the header's buffer convention (buf, cap, len_out), growing the
// buffer to the size the library asks for on MINFER_ERR_BUFFER_TOO_SMALL.
func readBytes(call func(buf *C.char, cap C.size_t, n *C.size_t, msg **C.char) C.minfer_status) ([]byte, error) {
	buf := make([]byte, 256)
	for {
		var n C.size_t
		var msg *C.char
		st := call((*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &n, &msg)
		if st == C.MINFER_ERR_BUFFER_TOO_SMALL && int(n)+1 > len(buf) {
			C.free(unsafe.Pointer(msg))
			buf = make([]byte, int(n)+1)
			continue
		}
		if err := check(st, msg); err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

func readString(call func(buf *C.char, cap C.size_t, n *C.size_t, msg **C.char) C.minfer_status) (string, error) {
	b, err := readBytes(call)
	return string(b), err
}

// cStrings copies strs into a NULL-terminated array of C strings in C memory; free releases it all.
type cStrings struct {
	ptr   **C.char
	items []*C.char
}

// A Go string may hold NUL bytes, where C would end it: such a string is refused, not cut short.
func nulError(what, s string) error {
	return &Error{Code: ErrInvalidArgument, Msg: fmt.Sprintf("%s holds a NUL byte: %q", what, s)}
}

// cString is s in C memory (C.free it), or an ErrInvalidArgument error when s holds a NUL byte.
func cString(what, s string) (*C.char, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, nulError(what, s)
	}
	return C.CString(s), nil
}

// newCStrings is strs as a cStrings, or an ErrInvalidArgument error (nothing allocated) when one of
// them holds a NUL byte; what names them in the message.
func newCStrings(what string, strs []string) (cStrings, error) {
	for _, s := range strs {
		if strings.IndexByte(s, 0) >= 0 {
			return cStrings{}, nulError(what, s)
		}
	}
	size := C.size_t(len(strs)+1) * C.size_t(unsafe.Sizeof((*C.char)(nil)))
	a := cStrings{ptr: (**C.char)(C.malloc(size))}
	a.items = unsafe.Slice(a.ptr, len(strs)+1)
	for i, s := range strs {
		a.items[i] = C.CString(s)
	}
	a.items[len(strs)] = nil
	return a, nil
}

func (a cStrings) free() {
	for _, p := range a.items {
		C.free(unsafe.Pointer(p))
	}
	C.free(unsafe.Pointer(a.ptr))
}

// sortedKeys is the keys of m in order, so that options apply the same way every time.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
