// A load generator for the server (examples/go/server), standard library only: N concurrent clients
// stream completions on loopback until a request count or a time limit is reached, then it prints the
// aggregate generation rate (over the whole run, and over the interval in which every request was
// streaming: the steady decode rate, as llama-batched-bench reports it), time to first token and
// inter-token latency (p50, p99), and the errors.
//
//	go run ./examples/go/loadgen -url http://127.0.0.1:8080 -c 32 -n 128 -max-tokens 128 -prompt-words 100
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

type result struct {
	tokens int
	ttft   time.Duration
	times  []time.Time // when each token arrived
	err    error
}

func main() {
	url := flag.String("url", "http://127.0.0.1:8080", "the server")
	clients := flag.Int("c", 16, "concurrent clients (1 to 4096)")
	requests := flag.Int("n", 64, "requests in all (1 to 1000000)")
	duration := flag.Duration("duration", 5*time.Minute, "stop starting requests after this long")
	maxTokens := flag.Int("max-tokens", 128, "max_tokens of each request")
	words := flag.Int("prompt-words", 100, "words in each prompt (each request's prompt differs)")
	temperature := flag.Float64("temperature", 0, "sampling temperature of the requests")
	flag.Parse()
	if *clients < 1 || *clients > 4096 || *requests < 1 || *requests > 1000000 || *maxTokens < 1 || *words < 1 {
		fmt.Fprintln(os.Stderr, "loadgen: -c, -n, -max-tokens and -prompt-words must be positive (-c <= 4096)")
		os.Exit(2)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *clients}}
	jobs := make(chan int)
	results := make(chan result)
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < *clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				results <- one(client, *url, i, *words, *maxTokens, *temperature)
			}
		}()
	}
	go func() {
		deadline := time.After(*duration)
	loop:
		for i := 0; i < *requests; i++ {
			select {
			case jobs <- i:
			case <-deadline:
				break loop
			}
		}
		close(jobs)
		wg.Wait()
		close(results)
	}()
	var all []result
	for r := range results {
		all = append(all, r)
	}
	report(all, time.Since(start), *clients)
	for _, r := range all {
		if r.err != nil {
			os.Exit(1)
		}
	}
}

// one streams request i and times its chunks.
func one(client *http.Client, url string, i, words, maxTokens int, temperature float64) result {
	var prompt strings.Builder
	for w := 0; w < words; w++ {
		fmt.Fprintf(&prompt, "word%d ", (i*7919+w*104729)%100000)
	}
	body, _ := json.Marshal(map[string]any{"prompt": prompt.String(), "max_tokens": maxTokens, "stream": true, "temperature": temperature})
	t0 := time.Now()
	resp, err := client.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return result{err: fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))}
	}
	var r result
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		data := strings.TrimPrefix(line, "data: ")
		if data == "[DONE]" {
			return r
		}
		var chunk struct {
			Choices []struct {
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			r.err = fmt.Errorf("bad chunk %q: %v", data, err)
			return r
		}
		if chunk.Error != nil {
			r.err = errors.New(chunk.Error.Message)
			return r
		}
		if len(chunk.Choices) == 1 && chunk.Choices[0].FinishReason != nil {
			continue // the closing chunk carries no token
		}
		now := time.Now()
		if r.tokens == 0 {
			r.ttft = now.Sub(t0)
		}
		r.times = append(r.times, now)
		r.tokens++
	}
	if err := sc.Err(); err != nil {
		r.err = err
	} else {
		r.err = errors.New("the stream ended without [DONE]")
	}
	return r
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[int(p*float64(len(d)-1)+0.5)]
}

// steady is the token rate over the interval in which every successful request was streaming: from the
// latest first token to the earliest last token (tokens arriving inside it, over its length).
func steady(all []result) (float64, time.Duration, bool) {
	var from, to time.Time
	n := 0
	for _, r := range all {
		if r.err != nil || len(r.times) < 2 {
			continue
		}
		if n == 0 || r.times[0].After(from) {
			from = r.times[0]
		}
		if last := r.times[len(r.times)-1]; n == 0 || last.Before(to) {
			to = last
		}
		n++
	}
	if n == 0 || !to.After(from) {
		return 0, 0, false
	}
	count := 0
	for _, r := range all {
		if r.err != nil {
			continue
		}
		for _, t := range r.times {
			if t.After(from) && !t.After(to) {
				count++
			}
		}
	}
	span := to.Sub(from)
	return float64(count) / span.Seconds(), span, true
}

func report(all []result, wall time.Duration, clients int) {
	tokens, errs := 0, 0
	var ttft, gaps []time.Duration
	for _, r := range all {
		if r.err != nil {
			errs++
			if errs <= 5 {
				fmt.Fprintln(os.Stderr, "loadgen: error:", r.err)
			}
			continue
		}
		tokens += r.tokens
		ttft = append(ttft, r.ttft)
		for i := 1; i < len(r.times); i++ {
			gaps = append(gaps, r.times[i].Sub(r.times[i-1]))
		}
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
	fmt.Printf("clients %d, requests %d, errors %d, wall %.2f s\n", clients, len(all), errs, wall.Seconds())
	fmt.Printf("tokens %d, aggregate %.1f tok/s\n", tokens, float64(tokens)/wall.Seconds())
	if rate, span, ok := steady(all); ok {
		fmt.Printf("while every request streamed: %.1f tok/s over %.2f s\n", rate, span.Seconds())
	} else {
		fmt.Println("while every request streamed: no such interval (a request ended before another began)")
	}
	fmt.Printf("time to first token: p50 %s, p99 %s\n", ms(percentile(ttft, 0.5)), ms(percentile(ttft, 0.99)))
	fmt.Printf("inter-token latency: p50 %s, p99 %s\n", ms(percentile(gaps, 0.5)), ms(percentile(gaps, 0.99)))
}
