package main

// The HTTP side of the server: OpenAI-style completions and chat completions over one minfer.Batch,
// with streaming (server-sent events), validation that answers 400 with a message, 429 when the batch's
// queue is full, and Prometheus metrics.

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"minfer"
)

// maxBody bounds a request body; larger ones answer 413.
const maxBody = 1 << 20

// Server answers the HTTP API from one model and one batch.
type Server struct {
	model *minfer.Model
	batch *minfer.Batch
	name  string // the model's id in requests and answers
	nCtx  int    // positions of one sequence
	log   *log.Logger

	nextID          atomic.Uint64
	promptTokens    atomic.Uint64
	generatedTokens atomic.Uint64
	mu              sync.Mutex
	requests        map[[2]string]uint64 // (endpoint, code) -> count
}

// NewServer serves `batch` of `model` under the model id `name`; nCtx is the batch's positions per sequence.
func NewServer(model *minfer.Model, batch *minfer.Batch, name string, nCtx int, logger *log.Logger) *Server {
	return &Server{model: model, batch: batch, name: name, nCtx: nCtx, log: logger, requests: map[[2]string]uint64{}}
}

// Handler routes the API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/completions", s.counted("/v1/completions", http.MethodPost, s.completions))
	mux.HandleFunc("/v1/chat/completions", s.counted("/v1/chat/completions", http.MethodPost, s.chat))
	mux.HandleFunc("/v1/models", s.counted("/v1/models", http.MethodGet, s.models))
	mux.HandleFunc("/health", s.counted("/health", http.MethodGet, s.health))
	mux.HandleFunc("/metrics", s.counted("/metrics", http.MethodGet, s.metrics))
	mux.HandleFunc("/", s.counted("other", "", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no route "+r.URL.Path)
	}))
	return mux
}

// statusWriter remembers the status code for the metrics.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *Server) counted(endpoint, method string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		if method != "" && r.Method != method {
			sw.Header().Set("Allow", method)
			writeError(sw, http.StatusMethodNotAllowed, "invalid_request_error", r.Method+" is not allowed here; use "+method)
		} else {
			h(sw, r)
		}
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		s.mu.Lock()
		s.requests[[2]string{endpoint, fmt.Sprint(code)}]++
		s.mu.Unlock()
	}
}

// ---- errors -------------------------------------------------------------------------------------------

type apiError struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, code int, kind, message string) {
	var e apiError
	e.Error.Message = message
	e.Error.Type = kind
	writeJSON(w, code, e)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		code, body = http.StatusInternalServerError, []byte(`{"error":{"message":"encoding the answer failed","type":"server_error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(body, '\n'))
}

// badRequest is a validation failure: 400 with its message.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func bad(format string, args ...any) error { return &badRequest{fmt.Sprintf(format, args...)} }

// ---- requests -----------------------------------------------------------------------------------------

// The fields both endpoints share. Pointers tell "absent" from zero; unknown fields are ignored.
type common struct {
	Model       string          `json:"model"`
	MaxTokens   *int64          `json:"max_tokens"`
	Temperature *float64        `json:"temperature"`
	TopP        *float64        `json:"top_p"`
	Seed        *int64          `json:"seed"`
	Stop        json.RawMessage `json:"stop"`
	Stream      bool            `json:"stream"`
}

type completionRequest struct {
	common
	Prompt json.RawMessage `json:"prompt"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type chatRequest struct {
	common
	Messages []chatMessage `json:"messages"`
}

// decode reads the JSON body into v: 413 for a body over maxBody, 400 for anything else that fails.
func decode(w http.ResponseWriter, r *http.Request, v any) (int, error) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	if err := dec.Decode(v); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return http.StatusRequestEntityTooLarge, fmt.Errorf("the body exceeds %d bytes", maxBody)
		}
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return http.StatusBadRequest, fmt.Errorf("field %q: expected %s, got JSON %s", typeErr.Field, typeErr.Type, typeErr.Value)
		}
		return http.StatusBadRequest, fmt.Errorf("malformed JSON: %v", err)
	}
	if dec.More() {
		return http.StatusBadRequest, errors.New("malformed JSON: data after the object")
	}
	return 0, nil
}

// stringOrList reads a field that is a string or a list of strings ("prompt", "stop").
func stringOrList(raw json.RawMessage, field string) ([]string, error) {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, bad("field %q: expected a string or a list of strings", field)
	}
	return list, nil
}

// generation is what both endpoints submit after validation.
type generation struct {
	prompt []int32
	params minfer.SequenceParams
	stream bool
}

// settings validates the shared fields into sequence parameters.
func (s *Server) settings(c *common, defaultMax int64) (minfer.SequenceParams, error) {
	var p minfer.SequenceParams
	if c.Model != "" && c.Model != s.name {
		return p, bad("model %q is not served here (this server has %q)", c.Model, s.name)
	}
	maxTokens := defaultMax
	if c.MaxTokens != nil {
		maxTokens = *c.MaxTokens
		if maxTokens < 1 || maxTokens > int64(s.nCtx) {
			return p, bad("max_tokens must be in [1, %d], got %d", s.nCtx, maxTokens)
		}
	}
	p.MaxTokens = int(maxTokens)
	temperature, topP := 1.0, 1.0
	if c.Temperature != nil {
		temperature = *c.Temperature
		if math.IsNaN(temperature) || temperature < 0 || temperature > 2 {
			return p, bad("temperature must be in [0, 2], got %v", temperature)
		}
	}
	if c.TopP != nil {
		topP = *c.TopP
		if math.IsNaN(topP) || topP <= 0 || topP > 1 {
			return p, bad("top_p must be in (0, 1], got %v", topP)
		}
	}
	sp, err := minfer.DefaultSamplerParams()
	if err != nil {
		return p, err
	}
	sp.Temperature, sp.TopP, sp.TopK, sp.MinP = float32(temperature), float32(topP), 0, 0
	if c.Seed != nil {
		sp.Seed = uint64(*c.Seed)
	} else {
		var b [8]byte
		crand.Read(b[:])
		sp.Seed = binary.LittleEndian.Uint64(b[:])
	}
	if temperature > 0 {
		p.Sampler = &sp
	}
	stops, err := stringOrList(c.Stop, "stop")
	if err != nil {
		return p, err
	}
	if len(stops) > 4 {
		return p, bad("stop: at most 4 strings, got %d", len(stops))
	}
	for _, st := range stops {
		if st == "" {
			return p, bad("stop: an empty string")
		}
	}
	p.Stops = stops
	return p, nil
}

func (s *Server) checkPrompt(tokens []int32) error {
	if len(tokens) == 0 {
		return bad("the prompt is empty")
	}
	if len(tokens) > s.nCtx {
		return bad("the prompt has %d tokens; a sequence holds %d", len(tokens), s.nCtx)
	}
	return nil
}

// ---- endpoints ----------------------------------------------------------------------------------------

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if code, err := decode(w, r, &req); err != nil {
		writeError(w, code, "invalid_request_error", err.Error())
		return
	}
	g, err := s.completionGeneration(&req)
	if err != nil {
		s.fail(w, err)
		return
	}
	s.run(w, r, g, false)
}

func (s *Server) completionGeneration(req *completionRequest) (generation, error) {
	var g generation
	prompts, err := stringOrList(req.Prompt, "prompt")
	if err != nil {
		return g, err
	}
	if len(prompts) != 1 {
		return g, bad("prompt: one string is served per request, got %d", len(prompts))
	}
	if g.params, err = s.settings(&req.common, 16); err != nil {
		return g, err
	}
	if g.prompt, err = s.model.Tokenize(prompts[0], false); err != nil {
		return g, err
	}
	if err := s.checkPrompt(g.prompt); err != nil {
		return g, err
	}
	g.stream = req.Stream
	return g, nil
}

var chatRoles = map[string]bool{"system": true, "user": true, "assistant": true, "tool": true}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if code, err := decode(w, r, &req); err != nil {
		writeError(w, code, "invalid_request_error", err.Error())
		return
	}
	g, err := s.chatGeneration(&req)
	if err != nil {
		s.fail(w, err)
		return
	}
	s.run(w, r, g, true)
}

// chatGeneration formats the messages as ChatML: the markers are tokenized as control tokens and the
// contents as plain text, so a "<|im_start|>" inside a message stays text.
func (s *Server) chatGeneration(req *chatRequest) (generation, error) {
	var g generation
	if len(req.Messages) == 0 {
		return g, bad("messages: at least one message is needed")
	}
	var err error
	if g.params, err = s.settings(&req.common, 0); err != nil {
		return g, err
	}
	add := func(text string, special bool) error {
		t, err := s.model.Tokenize(text, special)
		g.prompt = append(g.prompt, t...)
		return err
	}
	for i, m := range req.Messages {
		if !chatRoles[m.Role] {
			return g, bad("messages[%d].role: %q is not one of system, user, assistant, tool", i, m.Role)
		}
		var content string
		if err := json.Unmarshal(m.Content, &content); err != nil {
			return g, bad("messages[%d].content: expected a string", i)
		}
		if err := add("<|im_start|>"+m.Role+"\n", true); err != nil {
			return g, err
		}
		if err := add(content, false); err != nil {
			return g, err
		}
		if err := add("<|im_end|>\n", true); err != nil {
			return g, err
		}
	}
	if err := add("<|im_start|>assistant\n", true); err != nil {
		return g, err
	}
	if err := s.checkPrompt(g.prompt); err != nil {
		return g, err
	}
	g.stream = req.Stream
	return g, nil
}

// fail answers an error of validation or submission.
func (s *Server) fail(w http.ResponseWriter, err error) {
	var br *badRequest
	switch {
	case errors.As(err, &br):
		writeError(w, http.StatusBadRequest, "invalid_request_error", br.msg)
	case errors.Is(err, minfer.ErrBusy):
		writeError(w, http.StatusTooManyRequests, "rate_limit_error", "the server is at capacity (its queue is full); retry later")
	case errors.Is(err, minfer.ErrInvalidArgument):
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
	default:
		s.log.Printf("request failed: %v", err)
		writeError(w, http.StatusInternalServerError, "server_error", err.Error())
	}
}

type choice struct {
	Index        int          `json:"index"`
	Text         *string      `json:"text,omitempty"`
	Message      *chatContent `json:"message,omitempty"`
	Delta        *chatContent `json:"delta,omitempty"`
	FinishReason *string      `json:"finish_reason"`
}

type chatContent struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type answer struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   *usage   `json:"usage,omitempty"`
}

func finishReason(seq *minfer.Sequence) string {
	if seq.StopReason() == minfer.StopLength {
		return "length"
	}
	return "stop"
}

// run submits the generation and answers it, whole or streamed. The request's context cancels the
// sequence when the client goes away.
func (s *Server) run(w http.ResponseWriter, r *http.Request, g generation, chat bool) {
	g.params.Prompt = g.prompt
	seq, err := s.batch.Submit(r.Context(), g.params)
	if err != nil {
		s.fail(w, err)
		return
	}
	s.promptTokens.Add(uint64(len(g.prompt)))
	id := fmt.Sprintf("cmpl-%d", s.nextID.Add(1))
	if chat {
		id = "chat" + id
	}
	object := "text_completion"
	if chat {
		object = "chat.completion"
	}
	created := time.Now().Unix()
	generated := 0
	ctx := r.Context()

	if !g.stream {
		var text strings.Builder
		for seq.Next(ctx) {
			if seq.Piece().Token >= 0 {
				generated++
			}
			text.WriteString(seq.Piece().Text)
		}
		s.generatedTokens.Add(uint64(generated))
		if err := seq.Err(); err != nil {
			if ctx.Err() == nil {
				s.fail(w, err)
			}
			return
		}
		out := text.String()
		reason := finishReason(seq)
		c := choice{FinishReason: &reason}
		if chat {
			c.Message = &chatContent{Role: "assistant", Content: &out}
		} else {
			c.Text = &out
		}
		writeJSON(w, http.StatusOK, answer{ID: id, Object: object, Created: created, Model: s.name, Choices: []choice{c},
			Usage: &usage{PromptTokens: len(g.prompt), CompletionTokens: generated, TotalTokens: len(g.prompt) + generated}})
		return
	}

	// Server-sent events: one chunk per token, then one with the finish reason, then [DONE].
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if chat {
		object = "chat.completion.chunk"
	}
	send := func(v any) bool {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	chunk := func(text *string, role string, reason *string) answer {
		c := choice{FinishReason: reason}
		if chat {
			c.Delta = &chatContent{Role: role, Content: text}
		} else {
			if text == nil {
				empty := ""
				text = &empty
			}
			c.Text = text
		}
		return answer{ID: id, Object: object, Created: created, Model: s.name, Choices: []choice{c}}
	}
	if chat && !send(chunk(nil, "assistant", nil)) {
		seq.Cancel()
		return
	}
	for seq.Next(ctx) {
		p := seq.Piece()
		if p.Token >= 0 {
			generated++
		}
		text := p.Text
		if !send(chunk(&text, "", nil)) {
			seq.Cancel() // the client went away
			break
		}
	}
	s.generatedTokens.Add(uint64(generated))
	if err := seq.Err(); err != nil {
		if ctx.Err() == nil {
			var e apiError
			e.Error.Message, e.Error.Type = err.Error(), "server_error"
			send(e)
			fmt.Fprint(w, "data: [DONE]\n\n")
		}
		return
	}
	reason := finishReason(seq)
	send(chunk(nil, "", &reason))
	fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []model{{ID: s.name, Object: "model", OwnedBy: "minfer"}}})
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// metrics writes the Prometheus text format.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	st := s.batch.Stats()
	var b strings.Builder
	metric := func(name, kind, help string, value any) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n%s %v\n", name, help, name, kind, name, value)
	}
	b.WriteString("# HELP minfer_requests_total HTTP requests by endpoint and status code.\n# TYPE minfer_requests_total counter\n")
	s.mu.Lock()
	keys := make([][2]string, 0, len(s.requests))
	for k := range s.requests {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i][0] < keys[j][0] || keys[i][0] == keys[j][0] && keys[i][1] < keys[j][1]
	})
	for _, k := range keys {
		fmt.Fprintf(&b, "minfer_requests_total{endpoint=%q,code=%q} %d\n", k[0], k[1], s.requests[k])
	}
	s.mu.Unlock()
	metric("minfer_prompt_tokens_total", "counter", "Prompt tokens submitted.", s.promptTokens.Load())
	metric("minfer_generated_tokens_total", "counter", "Tokens generated and sent.", s.generatedTokens.Load())
	metric("minfer_active_sequences", "gauge", "Sequences in the forward passes.", st.Active)
	metric("minfer_queue_depth", "gauge", "Sequences waiting for a place.", st.Queued)
	metric("minfer_batch_size", "gauge", "Sequences in the last forward pass.", st.LastStepSequences)
	metric("minfer_batch_tokens", "gauge", "Tokens in the last forward pass.", st.LastStepTokens)
	metric("minfer_kv_pages", "gauge", "Pages of 16 positions in the shared KV pool.", st.KVPages)
	metric("minfer_kv_pages_free", "gauge", "Free pages of the KV pool.", st.KVPagesFree)
	metric("minfer_steps_total", "counter", "Forward passes run.", st.Steps)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	io.WriteString(w, b.String())
}

// shutdown helpers for main.
func shutdown(srv *http.Server, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	srv.Shutdown(ctx)
}
