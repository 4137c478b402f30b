package minfer

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"
)

// collectSeq reads a sequence to its end: its tokens and its text.
func collectSeq(t *testing.T, s *Sequence) ([]int32, string) {
	t.Helper()
	var toks []int32
	text := ""
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for s.Next(ctx) {
		if p := s.Piece(); p.Token >= 0 {
			toks = append(toks, p.Token)
		}
		text += s.Piece().Text
	}
	return toks, text
}

func TestBatchGreedyEqualsAlone(t *testing.T) {
	m := open(t, map[string]string{"threads": "2"})
	p := must(DefaultBatchParams())
	p.MaxSequences = 3
	p.MaxStepTokens = 16
	b := must(m.NewBatch(p))
	defer b.Close()
	const n = 8
	var wg sync.WaitGroup
	got := make([][]int32, n)
	prompts := make([]string, n)
	for i := range prompts {
		prompts[i] = fmt.Sprintf("request %d: %s", i, "the quick brown fox jumps over the lazy dog"[:10+3*i])
	}
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s, err := b.Submit(context.Background(), SequenceParams{Prompt: must(m.Tokenize(prompts[i], false)), MaxTokens: 12})
			if err != nil {
				t.Error(err)
				return
			}
			got[i], _ = collectSeq(t, s)
			if s.Err() != nil {
				t.Error(s.Err())
			}
		}(i)
	}
	wg.Wait()
	for i := 0; i < n; i++ {
		want := greedy(t, m, prompts[i], 12)
		// The run alone stops only at the count; the batch also at an end-of-generation token.
		if len(got[i]) < len(want) && len(got[i]) > 0 && m.IsEOG(got[i][len(got[i])-1]) {
			want = want[:len(got[i])]
		}
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("sequence %d: batch %v, alone %v", i, got[i], want)
		}
	}
	if st := b.Stats(); st.Active != 0 || st.Queued != 0 || st.KVPagesFree != st.KVPages {
		t.Errorf("after the sequences: %+v", st)
	}
}

func TestBatchCancelAndClose(t *testing.T) {
	m := open(t, nil)
	b := must(m.NewBatch(must(DefaultBatchParams())))
	prompt := must(m.Tokenize("cancel me", false))
	// A cancelled context ends the sequence with the context's error; the batch frees it.
	ctx, cancel := context.WithCancel(context.Background())
	s := must(b.Submit(ctx, SequenceParams{Prompt: prompt, MaxTokens: 0}))
	if !s.Next(context.Background()) {
		t.Fatalf("no first piece: %v", s.Err())
	}
	cancel()
	for s.Next(context.Background()) {
	}
	wantErr(t, s.Err(), ErrCancelled)
	deadline := time.Now().Add(10 * time.Second)
	for b.Stats().Active != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if st := b.Stats(); st.Active != 0 || st.KVPagesFree != st.KVPages {
		t.Errorf("after the cancel: %+v", st)
	}
	// Bad input is refused at Submit.
	_, err := b.Submit(context.Background(), SequenceParams{})
	wantErr(t, err, ErrInvalidArgument, "prompt")
	_, err = b.Submit(context.Background(), SequenceParams{Prompt: []int32{int32(m.NVocab())}})
	wantErr(t, err, ErrInvalidArgument, "vocabulary")
	// Close ends what still runs.
	long := must(b.Submit(context.Background(), SequenceParams{Prompt: prompt}))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for long.Next(context.Background()) {
	}
	wantErr(t, long.Err(), ErrCancelled)
	_, err = b.Submit(context.Background(), SequenceParams{Prompt: prompt})
	wantErr(t, err, ErrInvalidArgument, "closed")
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestBatchQueueFull(t *testing.T) {
	m := open(t, nil)
	p := must(DefaultBatchParams())
	p.MaxSequences = 1
	p.MaxQueue = 1
	p.MaxStepTokens = 8
	b := must(m.NewBatch(p))
	defer b.Close()
	prompt := must(m.Tokenize("a long generation", false))
	var busy bool
	var seqs []*Sequence
	for i := 0; i < 20 && !busy; i++ {
		s, err := b.Submit(context.Background(), SequenceParams{Prompt: prompt, MaxTokens: 200})
		if err != nil {
			wantErr(t, err, ErrBusy, "queue")
			busy = true
			break
		}
		seqs = append(seqs, s)
	}
	if !busy {
		t.Fatal("the queue of 1 never filled")
	}
	for _, s := range seqs {
		s.Cancel()
	}
}
