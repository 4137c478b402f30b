package minfer

/*
#include "minfer_shim.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Context is the KV cache and sampler state of one sequence. One goroutine at a time: a second
// concurrent call returns ErrBusy. Close it when done.
type Context struct {
	ptr    *C.minfer_context
	model  *Model
	nVocab int // the model's, read at creation: Logits works after the Model's Close too
}

// StopReason tells why the last Decode says generation should stop.
type StopReason int

const (
	StopNone   StopReason = C.MINFER_STOP_NONE   // no reason (yet), or the token limit of a Stream
	StopEOG    StopReason = C.MINFER_STOP_EOG    // the last token ends generation (end of sequence or turn)
	StopString StopReason = C.MINFER_STOP_STRING // the text since the last prefill contains a stop string
)

// SamplerParams are the sampling settings; DefaultSamplerParams gives the library's defaults.
type SamplerParams struct {
	Temperature      float32 // <= 0: greedy
	TopK             int32   // <= 0: off
	TopP             float32 // >= 1: off
	MinP             float32 // <= 0: off
	RepeatPenalty    float32 // 1: off
	PresencePenalty  float32
	FrequencyPenalty float32
	PenaltyLastN     int32 // 0: penalties off; -1: the whole context
	Seed             uint64
}

// DefaultSamplerParams is the library's defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05,
// seed 42, ...).
func DefaultSamplerParams() (SamplerParams, error) {
	if err := ensureLoaded(); err != nil {
		return SamplerParams{}, err
	}
	var p C.minfer_sampler_params
	C.go_minfer_sampler_params_init(&p)
	return SamplerParams{
		Temperature: float32(p.temperature), TopK: int32(p.top_k), TopP: float32(p.top_p), MinP: float32(p.min_p),
		RepeatPenalty: float32(p.repeat_penalty), PresencePenalty: float32(p.presence_penalty),
		FrequencyPenalty: float32(p.frequency_penalty), PenaltyLastN: int32(p.penalty_last_n), Seed: uint64(p.seed),
	}, nil
}

// NewContext makes a context of ctx_len tokens (the option, read now).
func (m *Model) NewContext() (*Context, error) {
	p := m.handle()
	defer m.done()
	var raw *C.minfer_context
	var msg *C.char
	if err := check(C.go_minfer_context_create(p, &raw, &msg), msg); err != nil {
		return nil, err
	}
	m.refs.Add(1) // (Close is held off: the Model's own reference is still there)
	return &Context{ptr: raw, model: m, nVocab: int(C.go_minfer_model_n_vocab(p))}, nil
}

// Close frees the context; a second Close does nothing.
func (c *Context) Close() error {
	if c.ptr == nil {
		return nil
	}
	C.go_minfer_context_free(c.ptr)
	c.ptr = nil
	c.model.unref()
	return nil
}

// Model is the model the context was made from.
func (c *Context) Model() *Model { return c.model }

// NCtx is the context's size in tokens.
func (c *Context) NCtx() int { return int(C.go_minfer_context_n_ctx(c.ptr)) }

// NPast is the number of tokens in the KV cache.
func (c *Context) NPast() int { return int(C.go_minfer_context_n_past(c.ptr)) }

// Prefill appends tokens and computes the logits of the last one; on any error the context is
// unchanged (ErrContextFull when they do not fit).
func (c *Context) Prefill(tokens []int32) error {
	var msg *C.char
	return check(C.go_minfer_prefill(c.ptr, tokenPtr(tokens), C.size_t(len(tokens)), &msg), msg)
}

// Decode samples the next token, appends it and computes the logits that follow it.
func (c *Context) Decode() (int32, error) {
	var tok C.int32_t
	var msg *C.char
	err := check(C.go_minfer_decode(c.ptr, &tok, &msg), msg)
	return int32(tok), err
}

// Logits are those of the last processed position (NVocab floats).
func (c *Context) Logits() ([]float32, error) {
	out := make([]float32, c.nVocab)
	var p *C.float
	if len(out) > 0 {
		p = (*C.float)(unsafe.Pointer(&out[0]))
	}
	var msg *C.char
	if err := check(C.go_minfer_context_logits(c.ptr, p, C.size_t(len(out)), &msg), msg); err != nil {
		return nil, err
	}
	return out, nil
}

// Reset empties the KV cache.
func (c *Context) Reset() error {
	var msg *C.char
	return check(C.go_minfer_context_reset(c.ptr, &msg), msg)
}

// Truncate keeps the first nKeep tokens of the KV cache.
func (c *Context) Truncate(nKeep int) error {
	var msg *C.char
	return check(C.go_minfer_context_truncate(c.ptr, C.int32_t(nKeep), &msg), msg)
}

// SetSampler validates and applies sampling settings (and reseeds); an invalid field changes nothing.
func (c *Context) SetSampler(p SamplerParams) error {
	raw := C.minfer_sampler_params{
		size: C.uint32_t(unsafe.Sizeof(C.minfer_sampler_params{})), temperature: C.float(p.Temperature),
		top_k: C.int32_t(p.TopK), top_p: C.float(p.TopP), min_p: C.float(p.MinP),
		repeat_penalty: C.float(p.RepeatPenalty), presence_penalty: C.float(p.PresencePenalty),
		frequency_penalty: C.float(p.FrequencyPenalty), penalty_last_n: C.int32_t(p.PenaltyLastN),
		seed: C.uint64_t(p.Seed),
	}
	var msg *C.char
	return check(C.go_minfer_context_set_sampler(c.ptr, &raw, &msg), msg)
}

// SetLogitBias adds bias to the logit of token before sampling (math.Inf(-1) bans it).
func (c *Context) SetLogitBias(token int32, bias float32) error {
	var msg *C.char
	return check(C.go_minfer_context_set_logit_bias(c.ptr, C.int32_t(token), C.float(bias), &msg), msg)
}

// ClearLogitBias removes every bias.
func (c *Context) ClearLogitBias() error {
	var msg *C.char
	return check(C.go_minfer_context_clear_logit_bias(c.ptr, &msg), msg)
}

// SetStopStrings replaces the stop strings; none clears them.
func (c *Context) SetStopStrings(stops []string) error {
	arr, err := newCStrings("stop strings: one", stops)
	if err != nil {
		return err
	}
	defer arr.free()
	var msg *C.char
	return check(C.go_minfer_context_set_stop_strings(c.ptr, arr.ptr, C.size_t(len(stops)), &msg), msg)
}

// StopReason tells why the last Decode says generation should stop.
func (c *Context) StopReason() StopReason {
	return StopReason(C.go_minfer_context_stop_reason(c.ptr))
}

// Generate decodes up to maxTokens tokens after a Prefill as a Stream of text pieces, each whole UTF-8
// characters. It ends early at an end-of-generation token (whose text is not given) or after the piece
// that completes a stop string.
func (c *Context) Generate(maxTokens int) (*Stream, error) {
	if c.ptr == nil {
		return nil, &Error{Code: ErrInvalidArgument, Msg: "generate: the context is closed"}
	}
	if maxTokens < 0 {
		return nil, &Error{Code: ErrInvalidArgument, Msg: fmt.Sprintf("generate: maxTokens = %d is negative", maxTokens)}
	}
	d, err := newDetokenizer(c.model.ptr) // the model's handle lives while this context is open, Closed or not
	if err != nil {
		return nil, err
	}
	return &Stream{ctx: c, det: d, left: maxTokens}, nil
}

// Detokenizer turns tokens into text one at a time, holding back the bytes of a UTF-8 character split
// over several tokens until it is complete. One goroutine at a time; Close it when done.
type Detokenizer struct {
	ptr *C.minfer_detokenizer
}

// NewDetokenizer makes a streaming detokenizer for the model's vocabulary.
func (m *Model) NewDetokenizer() (*Detokenizer, error) {
	p := m.handle()
	defer m.done()
	return newDetokenizer(p)
}

func newDetokenizer(p *C.minfer_model) (*Detokenizer, error) {
	var raw *C.minfer_detokenizer
	var msg *C.char
	if err := check(C.go_minfer_detokenizer_create(p, &raw, &msg), msg); err != nil {
		return nil, err
	}
	return &Detokenizer{ptr: raw}, nil
}

// Push appends a token and returns the text that became complete (possibly "").
func (d *Detokenizer) Push(token int32) (string, error) {
	return readString(func(buf *C.char, cap C.size_t, n *C.size_t, msg **C.char) C.minfer_status {
		return C.go_minfer_detokenizer_push(d.ptr, C.int32_t(token), buf, cap, n, msg)
	})
}

// Flush returns what is still held (an incomplete character becomes U+FFFD) and starts over.
func (d *Detokenizer) Flush() (string, error) {
	return readString(func(buf *C.char, cap C.size_t, n *C.size_t, msg **C.char) C.minfer_status {
		return C.go_minfer_detokenizer_flush(d.ptr, buf, cap, n, msg)
	})
}

// Close frees the detokenizer; a second Close does nothing.
func (d *Detokenizer) Close() error {
	C.go_minfer_detokenizer_free(d.ptr)
	d.ptr = nil
	return nil
}

// Stream is the text of Context.Generate, read like a bufio.Scanner:
//
//	for s.Next() { fmt.Print(s.Text()) }
//	if err := s.Err(); err != nil { ... }
type Stream struct {
	ctx    *Context
	det    *Detokenizer
	left   int
	tokens []int32
	reason StopReason
	text   string
	err    error
	done   bool
}

// Next decodes until a piece of text is complete; false at the end or on an error (see Err).
func (s *Stream) Next() bool {
	s.text = ""
	for !s.done {
		if s.left == 0 {
			return s.finish()
		}
		s.left--
		tok, err := s.ctx.Decode()
		if err != nil {
			return s.fail(err)
		}
		if s.reason = s.ctx.StopReason(); s.reason == StopEOG {
			return s.finish()
		}
		s.tokens = append(s.tokens, tok)
		if s.reason == StopString {
			s.left = 0
		}
		text, err := s.det.Push(tok)
		if err != nil {
			return s.fail(err)
		}
		if text != "" {
			s.text = text
			return true
		}
	}
	return false
}

// finish takes the held-back bytes, and the stream is over.
func (s *Stream) finish() bool {
	text, err := s.det.Flush()
	if err != nil {
		return s.fail(err)
	}
	s.Close()
	s.text = text
	return text != ""
}

func (s *Stream) fail(err error) bool {
	s.err = err
	s.Close()
	return false
}

// Text is the piece the last Next made complete.
func (s *Stream) Text() string { return s.text }

// Err is the error that ended the stream, if any.
func (s *Stream) Err() error { return s.err }

// Tokens are those whose text was given so far (an end-of-generation token is not among them).
func (s *Stream) Tokens() []int32 { return s.tokens }

// StopReason tells why the stream ended: StopEOG, StopString, or StopNone (the token limit or an
// error).
func (s *Stream) StopReason() StopReason { return s.reason }

// Close releases the stream's detokenizer; Next does it at the end. The context stays open.
func (s *Stream) Close() error {
	s.done = true
	return s.det.Close()
}
