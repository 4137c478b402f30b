// An OpenAI-compatible HTTP server over minfer's batches, standard library only:
//
//	go run ./examples/go/server -m MODEL.gguf -addr 127.0.0.1:8080
//
// POST /v1/completions and /v1/chat/completions (ChatML), with and without "stream" (server-sent
// events); max_tokens, temperature, top_p, seed and stop. GET /v1/models, /health and /metrics
// (Prometheus). Every request is a sequence of one minfer.Batch: all running requests share each
// forward pass. A client that disconnects cancels its sequence; a full queue answers 429.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"minfer"
)

func main() {
	if err := serve(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

func serve(args []string) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	modelPath := fs.String("m", "", "the GGUF model to serve (required)")
	addr := fs.String("addr", "127.0.0.1:8080", "the address to listen on")
	lib := fs.String("lib", "", "libminfer.so to load (default: build/libminfer.so when present, else the loader's search path)")
	seqs := fs.Int("seqs", 64, "sequences in one forward pass at once")
	queue := fs.Int("queue", 256, "requests waiting for a place; beyond it the server answers 429")
	nCtx := fs.Int("ctx", 4096, "positions of one sequence (prompt and answer)")
	kv := fs.Int64("kv", 0, "positions of the KV pool shared by the sequences (0: max(ctx, 256 * seqs))")
	stepTokens := fs.Int("step-tokens", 512, "tokens per forward pass")
	var options optionList
	fs.Var(&options, "option", "a minfer option KEY=VALUE (repeatable), e.g. -option device=cpu -option threads=8")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *modelPath == "" {
		return errors.New("-m MODEL.gguf is required")
	}
	if *nCtx < 1 || *seqs < 1 || *queue < 1 {
		return errors.New("-ctx, -seqs and -queue must be at least 1")
	}
	logger := log.New(os.Stderr, "server: ", log.LstdFlags)
	path := *lib
	if path == "" {
		if _, err := os.Stat(filepath.Join("build", "libminfer.so")); err == nil {
			path = filepath.Join("build", "libminfer.so")
		}
	}
	if path != "" {
		if err := minfer.Load(path); err != nil {
			return err
		}
	}
	opts := map[string]string{}
	for _, o := range options {
		k, v, _ := strings.Cut(o, "=")
		opts[k] = v
	}
	model, err := minfer.OpenWithOptions(*modelPath, opts)
	if err != nil {
		return err
	}
	defer model.Close()
	bp, err := minfer.DefaultBatchParams()
	if err != nil {
		return err
	}
	bp.MaxSequences, bp.MaxQueue, bp.NCtx, bp.KVTokens, bp.MaxStepTokens = *seqs, *queue, *nCtx, *kv, *stepTokens
	if bp.MaxStepTokens < bp.MaxSequences {
		bp.MaxStepTokens = bp.MaxSequences
	}
	batch, err := model.NewBatch(bp)
	if err != nil {
		return err
	}
	defer batch.Close()
	name := strings.TrimSuffix(filepath.Base(*modelPath), filepath.Ext(*modelPath))
	s := NewServer(model, batch, name, *nCtx, logger)

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	logger.Printf("serving %s (%s, %s) on http://%s: %d sequences per step, %d positions each", name, model.Architecture(),
		model.Device(), ln.Addr(), *seqs, *nCtx)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case sig := <-stop:
		logger.Printf("%v: shutting down", sig)
		shutdown(srv, 10*time.Second)
		return nil
	case err := <-errc:
		return err
	}
}

type optionList []string

func (o *optionList) String() string { return strings.Join(*o, ",") }
func (o *optionList) Set(v string) error {
	if !strings.Contains(v, "=") {
		return fmt.Errorf("expected KEY=VALUE, got %q", v)
	}
	*o = append(*o, v)
	return nil
}
