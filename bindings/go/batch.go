package minfer

/*
#include <stdlib.h>
#include "minfer_shim.h"
*/
import "C"

import (
	"context"
	"sync"
	"unsafe"
)

// StopLength: a batch sequence reached its MaxTokens or used up its positions.
const StopLength StopReason = C.MINFER_STOP_LENGTH

// BatchParams size a Batch; DefaultBatchParams gives the library's defaults.
type BatchParams struct {
	MaxSequences  int   // sequences in one forward pass at once (default 64)
	MaxQueue      int   // sequences waiting for a place; Submit beyond it fails with ErrBusy (default 256)
	MaxStepTokens int   // tokens per forward pass, at least MaxSequences (default 512)
	NCtx          int   // the most positions of one sequence; 0: the model's ctx_len option
	KVTokens      int64 // positions of the KV pool the sequences share; 0: max(NCtx, 256 * MaxSequences)
}

// DefaultBatchParams is the library's defaults.
func DefaultBatchParams() (BatchParams, error) {
	if err := ensureLoaded(); err != nil {
		return BatchParams{}, err
	}
	var p C.minfer_batch_params
	C.go_minfer_batch_params_init(&p)
	return BatchParams{MaxSequences: int(p.max_sequences), MaxQueue: int(p.max_queue), MaxStepTokens: int(p.max_step_tokens),
		NCtx: int(p.n_ctx), KVTokens: int64(p.kv_tokens)}, nil
}

// SequenceParams describe one request of a Batch.
type SequenceParams struct {
	Prompt    []int32
	MaxTokens int            // new tokens at most; 0: until the sequence's positions are used up
	Sampler   *SamplerParams // nil: greedy
	Stops     []string       // the text ends before the first of them
}

// Piece is one new token of a sequence and the text it completes (whole UTF-8 characters; text that may
// start a stop string comes with a later piece).
type Piece struct {
	Token int32
	Text  string
}

// BatchStats is a snapshot of a Batch.
type BatchStats struct {
	Active, Queued                    int // sequences with a place in the forward passes, and waiting
	LastStepTokens, LastStepSequences int
	KVPages, KVPagesFree              int // pages of 16 positions
	Steps, TokensGenerated            uint64
}

// Batch serves many sequences of one model at once (continuous batching): one goroutine steps the
// library's batch, every forward pass covering all active sequences, and hands each Sequence its pieces.
// Submit, Stats and the Sequences may be used from any goroutine. Close it when done.
type Batch struct {
	ptr    *C.minfer_batch
	model  *Model
	events *C.minfer_batch_event
	cap    int

	mu     sync.Mutex
	seqs   map[uint64]*Sequence
	closed bool
	broken error // why the stepping goroutine stopped on its own (Submit then refuses)
	quit   chan struct{}
	done   chan struct{}
}

// NewBatch creates a batch over the model and starts its stepping goroutine.
func (m *Model) NewBatch(p BatchParams) (*Batch, error) {
	raw := C.minfer_batch_params{size: C.uint32_t(unsafe.Sizeof(C.minfer_batch_params{})), max_sequences: C.int32_t(p.MaxSequences),
		max_queue: C.int32_t(p.MaxQueue), max_step_tokens: C.int32_t(p.MaxStepTokens), n_ctx: C.int32_t(p.NCtx),
		kv_tokens: C.int64_t(p.KVTokens)}
	var ptr *C.minfer_batch
	var msg *C.char
	h := m.handle() // (the C batch holds the model itself: no reference of the Model's is taken)
	defer m.done()
	if err := check(C.go_minfer_batch_create(h, &raw, &ptr, &msg), msg); err != nil {
		return nil, err
	}
	capacity := 2*p.MaxSequences + 16
	b := &Batch{ptr: ptr, model: m, cap: capacity, seqs: map[uint64]*Sequence{}, quit: make(chan struct{}), done: make(chan struct{})}
	b.events = (*C.minfer_batch_event)(C.malloc(C.size_t(capacity) * C.size_t(unsafe.Sizeof(C.minfer_batch_event{}))))
	go b.loop()
	return b, nil
}

// loop steps the batch until Close, handing each event to its sequence.
func (b *Batch) loop() {
	defer close(b.done)
	events := unsafe.Slice(b.events, b.cap)
	for {
		select {
		case <-b.quit:
			return
		default:
		}
		var n C.size_t
		var msg *C.char
		err := check(C.go_minfer_batch_step(b.ptr, 20, b.events, C.size_t(b.cap), &n, &msg), msg)
		b.mu.Lock()
		if err != nil { // out of host memory, or a bug of these bindings: end every sequence, take no more
			b.broken = err
			for id, s := range b.seqs {
				s.finish(err, StopNone)
				delete(b.seqs, id)
			}
			b.mu.Unlock()
			return
		}
		for _, e := range events[:int(n)] {
			s := b.seqs[uint64(e.id)]
			if s == nil {
				continue
			}
			text := C.GoStringN(e.text, C.int(e.text_len))
			if e.token >= 0 || text != "" {
				s.push(Piece{Token: int32(e.token), Text: text})
			}
			if e.finished != 0 {
				var ferr error
				if e.status != C.MINFER_OK {
					ferr = &Error{Code: Code(e.status), Msg: C.GoString(e.error)}
				}
				s.finish(ferr, StopReason(e.reason))
				delete(b.seqs, uint64(e.id))
			}
		}
		b.mu.Unlock()
	}
}

// Submit queues a sequence. When ctx is cancelled before the sequence ends, it is cancelled and its
// memory freed at the next step (its Err is then ErrCancelled). ErrBusy: the queue is full.
func (b *Batch) Submit(ctx context.Context, p SequenceParams) (*Sequence, error) {
	var raw C.minfer_sequence_params
	C.go_minfer_sequence_params_init(&raw)
	// The library copies everything; the arrays live in C memory for the call (cgo's pointer rules).
	if n := len(p.Prompt); n > 0 {
		prompt := (*C.int32_t)(C.malloc(C.size_t(n) * 4))
		defer C.free(unsafe.Pointer(prompt))
		copy(unsafe.Slice((*int32)(unsafe.Pointer(prompt)), n), p.Prompt)
		raw.prompt = prompt
		raw.n_prompt = C.size_t(n)
	}
	raw.max_tokens = C.int32_t(p.MaxTokens)
	if p.Sampler != nil {
		sp := (*C.minfer_sampler_params)(C.malloc(C.size_t(unsafe.Sizeof(C.minfer_sampler_params{}))))
		defer C.free(unsafe.Pointer(sp))
		*sp = C.minfer_sampler_params{
			size: C.uint32_t(unsafe.Sizeof(C.minfer_sampler_params{})), temperature: C.float(p.Sampler.Temperature),
			top_k: C.int32_t(p.Sampler.TopK), top_p: C.float(p.Sampler.TopP), min_p: C.float(p.Sampler.MinP),
			repeat_penalty: C.float(p.Sampler.RepeatPenalty), presence_penalty: C.float(p.Sampler.PresencePenalty),
			frequency_penalty: C.float(p.Sampler.FrequencyPenalty), penalty_last_n: C.int32_t(p.Sampler.PenaltyLastN),
			seed: C.uint64_t(p.Sampler.Seed),
		}
		raw.sampler = sp
	}
	if len(p.Stops) > 0 {
		arr, err := newCStrings("stop strings: one", p.Stops)
		if err != nil {
			return nil, err
		}
		defer arr.free()
		raw.stops = arr.ptr
		raw.n_stops = C.size_t(len(p.Stops))
	}
	s := &Sequence{batch: b, notify: make(chan struct{}, 1), done: make(chan struct{})}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, &Error{Code: ErrInvalidArgument, Msg: "batch: closed"}
	}
	if b.broken != nil {
		b.mu.Unlock()
		return nil, b.broken
	}
	var id C.uint64_t
	var msg *C.char
	// Under the lock: the stepping goroutine hands out this sequence's events only once it is known.
	if err := check(C.go_minfer_batch_add(b.ptr, &raw, &id, &msg), msg); err != nil {
		b.mu.Unlock()
		return nil, err
	}
	s.id = uint64(id)
	b.seqs[s.id] = s
	b.mu.Unlock()
	if ctx.Done() != nil {
		go func() {
			select {
			case <-ctx.Done():
				s.Cancel()
			case <-s.done:
			}
		}()
	}
	return s, nil
}

// Stats is a snapshot of the batch (zero after Close).
func (b *Batch) Stats() BatchStats {
	raw := C.minfer_batch_stats{size: C.uint32_t(unsafe.Sizeof(C.minfer_batch_stats{}))}
	var msg *C.char
	b.mu.Lock()
	if b.ptr == nil {
		b.mu.Unlock()
		return BatchStats{}
	}
	err := check(C.go_minfer_batch_stats_get(b.ptr, &raw, &msg), msg)
	b.mu.Unlock()
	if err != nil {
		return BatchStats{}
	}
	return BatchStats{Active: int(raw.active), Queued: int(raw.queued), LastStepTokens: int(raw.last_step_tokens),
		LastStepSequences: int(raw.last_step_sequences), KVPages: int(raw.kv_pages), KVPagesFree: int(raw.kv_pages_free),
		Steps: uint64(raw.steps), TokensGenerated: uint64(raw.tokens_generated)}
}

// Close stops the stepping goroutine, ends the sequences still running (their Err is ErrCancelled) and
// frees the batch. A second Close does nothing.
func (b *Batch) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	close(b.quit)
	<-b.done
	b.mu.Lock()
	for id, s := range b.seqs {
		s.finish(&Error{Code: ErrCancelled, Msg: "batch: closed"}, StopNone)
		delete(b.seqs, id)
	}
	C.go_minfer_batch_free(b.ptr)
	C.free(unsafe.Pointer(b.events))
	b.ptr = nil
	b.mu.Unlock()
	return nil
}

// Sequence is one request of a Batch: an iterator over its pieces.
//
//	for seq.Next(ctx) {
//		fmt.Print(seq.Piece().Text)
//	}
//	if err := seq.Err(); err != nil { ... }
type Sequence struct {
	batch  *Batch
	id     uint64
	notify chan struct{} // a piece arrived or the sequence ended (capacity 1)
	done   chan struct{} // closed when it ended

	mu       sync.Mutex
	pending  []Piece
	finished bool
	err      error
	reason   StopReason
	cur      Piece
}

// ID is the library's id of the sequence.
func (s *Sequence) ID() uint64 { return s.id }

func (s *Sequence) push(p Piece) { // the stepping goroutine, never blocking
	s.mu.Lock()
	s.pending = append(s.pending, p)
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *Sequence) finish(err error, reason StopReason) {
	s.mu.Lock()
	if !s.finished {
		s.finished, s.err, s.reason = true, err, reason
		close(s.done)
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Next waits for the next piece (Piece returns it); false when the sequence ended and every piece was
// taken, or when ctx is done (then Err is ctx's error and the sequence is cancelled).
func (s *Sequence) Next(ctx context.Context) bool {
	for {
		s.mu.Lock()
		if len(s.pending) > 0 {
			s.cur = s.pending[0]
			s.pending = s.pending[1:]
			s.mu.Unlock()
			return true
		}
		if s.finished {
			s.mu.Unlock()
			return false
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-ctx.Done():
			s.Cancel()
			s.mu.Lock()
			if !s.finished {
				s.finished, s.err = true, ctx.Err()
				close(s.done)
			}
			s.mu.Unlock()
			return false
		}
	}
}

// Piece is the piece the last successful Next moved to.
func (s *Sequence) Piece() Piece { return s.cur }

// Done is closed when the sequence has ended (its remaining pieces may still be read).
func (s *Sequence) Done() <-chan struct{} { return s.done }

// Err is why the sequence ended early: nil when it finished (see StopReason), ErrCancelled, ErrOutOfMemory
// (the KV pool was exhausted), or the context's error.
func (s *Sequence) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// StopReason is why a sequence that finished stopped: StopEOG, StopString or StopLength.
func (s *Sequence) StopReason() StopReason {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}

// Cancel asks the batch to drop the sequence at its next step; nothing happens when it already ended.
func (s *Sequence) Cancel() {
	b := s.batch
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.seqs[s.id] == nil {
		return
	}
	var msg *C.char
	_ = check(C.go_minfer_batch_cancel(b.ptr, C.uint64_t(s.id), &msg), msg) // NOT_FOUND: it just ended
}
