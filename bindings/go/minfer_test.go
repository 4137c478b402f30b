package minfer

// End to end against the freshly built library, on a tiny model written by the freshly built CLI.
// MINFER_BUILD_DIR names the meson build directory (default: the repository's build/). The default
// build loads BUILD/libminfer.so; with the minfer_pkgconfig tag the library comes from the link
// (LD_LIBRARY_PATH must reach it).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
)

var tinyPath string

func buildDir() string {
	if dir := os.Getenv("MINFER_BUILD_DIR"); dir != "" {
		return dir
	}
	return filepath.Join("..", "..", "build")
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "minfer-go-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	tinyPath = filepath.Join(tmp, "qwen2-tiny.gguf")
	out, err := exec.Command(filepath.Join(buildDir(), "minfer"), "synth", "--preset", "qwen2-tiny", "--quiet",
		"-o", tinyPath).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "minfer synth (MINFER_BUILD_DIR=%s): %v\n%s", buildDir(), err, out)
		return 1
	}
	return m.Run()
}

// load is the first thing each test does; TestLoad checks the failures before it.
var loadOnce sync.Once

func load(t *testing.T) {
	t.Helper()
	loadOnce.Do(func() {
		if !linked {
			if err := Load(filepath.Join(buildDir(), "libminfer.so")); err != nil {
				t.Fatalf("Load: %v", err)
			}
		}
	})
}

func open(t *testing.T, options map[string]string) *Model {
	t.Helper()
	load(t)
	all := map[string]string{"device": "cpu"}
	for k, v := range options {
		all[k] = v
	}
	m, err := OpenWithOptions(tinyPath, all)
	if err != nil {
		t.Fatalf("open the tiny model: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// must is v, or a panic with err: the test fails with the error and where it came from.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// wantErr checks that err is an *Error of the code whose message contains each of parts.
func wantErr(t *testing.T, err error, code Code, parts ...string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("want an *Error %v, got %v", code, err)
	}
	if !errors.Is(err, code) || e.Code != code {
		t.Fatalf("want %v, got %v", code, err)
	}
	for _, p := range parts {
		if !strings.Contains(e.Msg, p) {
			t.Fatalf("the message of %v lacks %q", err, p)
		}
	}
}

func greedy(t *testing.T, m *Model, prompt string, n int) []int32 {
	t.Helper()
	ctx := must(m.NewContext())
	defer ctx.Close()
	if err := ctx.Prefill(must(m.Tokenize(prompt, false))); err != nil {
		t.Fatal(err)
	}
	out := make([]int32, n)
	for i := range out {
		out[i] = must(ctx.Decode())
	}
	return out
}

func argmax(l []float32) int32 {
	best := 0
	for i := range l {
		if l[i] > l[best] {
			best = i
		}
	}
	return int32(best)
}

// Runs first (file order): the failures of Load leave nothing behind.
func TestLoad(t *testing.T) {
	if linked {
		wantErr(t, Load("/any/libminfer.so"), ErrUnsupported, "minfer_pkgconfig")
		return
	}
	wantErr(t, Load("/nonexistent/libminfer.so"), ErrIO, "cannot load /nonexistent/libminfer.so: ", "No such file")
	wantErr(t, Load("libm.so.6"), ErrUnsupported, "lacks minfer_version")
	load(t)
	lib := filepath.Join(buildDir(), "libminfer.so")
	if err := Load(lib); err != nil {
		t.Fatalf("loading the same file again: %v", err)
	}
	wantErr(t, Load("libm.so.6"), ErrInvalidArgument, "already loaded from "+lib)
	if DefaultLibrary != "libminfer.so.0" {
		t.Fatalf("DefaultLibrary = %q", DefaultLibrary)
	}
}

func TestVersionAndCodes(t *testing.T) {
	load(t)
	if v := must(Version()); v != HeaderVersion {
		t.Fatalf("Version() = %q, the header says %q", v, HeaderVersion)
	}
	if must(BuildInfo()) == "" {
		t.Fatal("empty BuildInfo")
	}
	known := 0
	for c := Code(1); c < 64; c++ {
		if name := statusString(c); name != "MINFER_ERR_UNKNOWN_STATUS" {
			known++
			if c.String() != name {
				t.Errorf("the library names status %d %s; Code.String says %s", c, name, c)
			}
		} else if _, ok := codeNames[c]; ok {
			t.Errorf("status %d has a constant but the library does not know it", c)
		}
	}
	if known != len(codeNames) || known != 16 {
		t.Fatalf("%d statuses known to the library, %d constants", known, len(codeNames))
	}
	if Code(99).String() != "MINFER_ERR_UNKNOWN_STATUS(99)" {
		t.Fatalf("Code(99) is %q", Code(99))
	}
}

func TestBadFile(t *testing.T) {
	load(t)
	bad := filepath.Join(t.TempDir(), "not-a-model.gguf")
	if err := os.WriteFile(bad, []byte("garbage, not GGUF"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(bad)
	wantErr(t, err, ErrBadModel, "bad magic", "not-a-model.gguf")
	if !strings.HasPrefix(err.Error(), "MINFER_ERR_BAD_MODEL: ") {
		t.Fatalf("Error() = %q", err)
	}
	if errors.Is(err, ErrIO) {
		t.Fatal("a bad model is not an I/O error")
	}
	_, err = Open("/nonexistent/dir/model.gguf")
	wantErr(t, err, ErrIO, "cannot open '/nonexistent/dir/model.gguf'")
}

// Each goroutine sees its own failure's message: the wrapper reads it on the thread that failed.
func TestErrorsOfConcurrentCalls(t *testing.T) {
	load(t)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				path := fmt.Sprintf("/nonexistent/g%d-i%d.gguf", g, i)
				_, err := Open(path)
				var e *Error
				if !errors.As(err, &e) || e.Code != ErrIO || !strings.Contains(e.Msg, path) {
					t.Errorf("open %s: %v", path, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

func TestMetadata(t *testing.T) {
	m := open(t, nil)
	if m.Architecture() != "qwen2" || !strings.Contains(m.Name(), "qwen2-tiny") || m.Device() != "cpu" {
		t.Fatalf("architecture %q, name %q, device %q", m.Architecture(), m.Name(), m.Device())
	}
	if m.NVocab() != 512 || m.NLayer() != 2 || m.NEmbd() != 256 || m.NCtxTrain() != 2048 || m.NParams() == 0 {
		t.Fatalf("vocab %d, layers %d, embd %d, ctx %d", m.NVocab(), m.NLayer(), m.NEmbd(), m.NCtxTrain())
	}
	st, _ := os.Stat(tinyPath)
	if m.FileSize() != uint64(st.Size()) {
		t.Fatalf("FileSize %d, the file has %d bytes", m.FileSize(), st.Size())
	}
	if keys := m.MetaKeys(); keys[0] != "general.architecture" {
		t.Fatalf("keys %v", keys)
	}
	if s := must(m.MetaString("general.architecture")); s != "qwen2" {
		t.Fatalf("general.architecture = %q", s)
	}
	if n := must(m.MetaInt("qwen2.block_count")); n != 2 {
		t.Fatalf("qwen2.block_count = %d", n)
	}
	if f := must(m.MetaFloat("qwen2.rope.freq_base")); f != 1e6 {
		t.Fatalf("qwen2.rope.freq_base = %g", f)
	}
	_, err := m.MetaInt("no.such.key")
	wantErr(t, err, ErrNotFound, "no.such.key")
	_, err = m.MetaInt("general.architecture")
	wantErr(t, err, ErrWrongType)
	_, err = m.ChatTemplate()
	wantErr(t, err, ErrNotFound)
}

func TestOptions(t *testing.T) {
	m := open(t, nil)
	if err := m.SetOption("threads", "2"); err != nil {
		t.Fatal(err)
	}
	if v := must(m.Option("threads")); v != "2" {
		t.Fatalf("threads = %q", v)
	}
	wantErr(t, m.SetOption("no_such_option", "1"), ErrUnknownOption, "no_such_option")
	wantErr(t, m.SetOption("threads", "many"), ErrOptionValue)
	wantErr(t, m.SetOption("device", "cpu"), ErrOptionLocked)
	_, err := OpenWithOptions(tinyPath, map[string]string{"ctx_len": "-3"})
	wantErr(t, err, ErrOptionValue, "ctx_len")

	if v := must(DefaultOption("ctx_len")); v != "4096" {
		t.Fatalf("default ctx_len = %q", v)
	}
	if err := SetDefaultOption("log_level", "warn"); err != nil {
		t.Fatal(err)
	}
	if v := must(DefaultOption("log_level")); v != "warn" {
		t.Fatalf("default log_level = %q", v)
	}
	if err := SetDefaultOption("log_level", "info"); err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, o := range must(Options()) {
		switch o.Name {
		case "threads":
			found++
			if o.Kind != "int" || !o.Runtime || o.MinValue != "0" {
				t.Fatalf("threads: %+v", o)
			}
		case "device":
			found++
			if o.Kind != "enum" || o.Runtime || !reflect.DeepEqual(o.Choices, []string{"auto", "cpu", "cuda"}) {
				t.Fatalf("device: %+v", o)
			}
		}
	}
	if found != 2 {
		t.Fatal("Options() lacks threads or device")
	}
}

func TestTokenizer(t *testing.T) {
	m := open(t, nil)
	text := "Hello, wörld € 😀"
	tokens := must(m.Tokenize(text, false))
	// The synthetic vocabulary is byte-level with no merges: one token per byte, ids equal to bytes.
	want := make([]int32, len(text))
	for i := 0; i < len(text); i++ {
		want[i] = int32(text[i])
	}
	if !reflect.DeepEqual(tokens, want) {
		t.Fatalf("Tokenize = %v", tokens)
	}
	if s := must(m.Detokenize(tokens)); s != text {
		t.Fatalf("Detokenize = %q", s)
	}
	if p := must(m.TokenToPiece(0xC3)); !reflect.DeepEqual(p, []byte{0xC3}) {
		t.Fatalf("TokenToPiece(0xC3) = %v", p)
	}
	if e := must(m.Tokenize("", false)); len(e) != 0 {
		t.Fatalf("Tokenize(\"\") = %v", e)
	}
	// Longer than the first buffers of both directions: the retry with the size asked for.
	long := strings.Repeat("ünïcödé text ", 200)
	lt := must(m.Tokenize(long, false))
	if len(lt) != len(long) || must(m.Detokenize(lt)) != long {
		t.Fatalf("long text: %d tokens for %d bytes", len(lt), len(long))
	}
	imStart, ok := m.SpecialToken(TokenIMStart)
	if !ok {
		t.Fatal("no <|im_start|>")
	}
	if s := must(m.Tokenize("<|im_start|>hi", true)); !reflect.DeepEqual(s, []int32{imStart, 'h', 'i'}) {
		t.Fatalf("with special tokens: %v", s)
	}
	eos, _ := m.SpecialToken(TokenEOS)
	if !m.IsEOG(eos) || m.IsEOG('h') {
		t.Fatal("IsEOG")
	}
	_, err := m.Detokenize([]int32{1 << 20})
	wantErr(t, err, ErrInvalidArgument, "1048576")
}

func TestDetokenizerHoldsSplitCharacters(t *testing.T) {
	m := open(t, nil)
	d := must(m.NewDetokenizer())
	defer d.Close()
	var pieces []string
	for _, tok := range must(m.Tokenize("aé€😀b", false)) {
		pieces = append(pieces, must(d.Push(tok)))
	}
	// 'é' is 2 tokens, '€' 3 and '😀' 4: the tokens before the last of each give nothing.
	if want := []string{"a", "", "é", "", "", "€", "", "", "", "😀", "b"}; !reflect.DeepEqual(pieces, want) {
		t.Fatalf("pieces %q", pieces)
	}
	if must(d.Push(0xE2)) != "" || must(d.Flush()) != "\uFFFD" {
		t.Fatal("a character cut short is U+FFFD at the flush")
	}
	_, err := d.Push(-1)
	wantErr(t, err, ErrInvalidArgument)
}

func TestPrefillDecode(t *testing.T) {
	m := open(t, nil)
	ctx := must(m.NewContext())
	defer ctx.Close()
	if ctx.NCtx() != 4096 {
		t.Fatalf("NCtx = %d", ctx.NCtx())
	}
	_, err := ctx.Decode()
	wantErr(t, err, ErrInvalidArgument, "no logits")
	wantErr(t, ctx.Prefill([]int32{72, 9999}), ErrInvalidArgument, "9999")
	if err := ctx.Prefill(must(m.Tokenize("Hello", false))); err != nil || ctx.NPast() != 5 {
		t.Fatalf("prefill: %v, n_past %d", err, ctx.NPast())
	}
	for i := 0; i < 4; i++ {
		l := must(ctx.Logits())
		if len(l) != 512 {
			t.Fatalf("%d logits", len(l))
		}
		if tok := must(ctx.Decode()); tok != argmax(l) {
			t.Fatalf("greedy decode gave %d, the highest logit is %d", tok, argmax(l))
		}
	}
	if err := ctx.Truncate(3); err != nil || ctx.NPast() != 3 {
		t.Fatalf("truncate: %v, n_past %d", err, ctx.NPast())
	}
	_, err = ctx.Logits()
	wantErr(t, err, ErrInvalidArgument)
	wantErr(t, ctx.Truncate(7), ErrInvalidArgument)
	if err := ctx.Reset(); err != nil || ctx.NPast() != 0 {
		t.Fatalf("reset: %v, n_past %d", err, ctx.NPast())
	}

	small := open(t, map[string]string{"ctx_len": "8"})
	sc := must(small.NewContext())
	defer sc.Close()
	if err := sc.Prefill([]int32{1, 2, 3, 4, 5, 6}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, sc.Prefill([]int32{7, 8, 9}), ErrContextFull)
	if sc.NPast() != 6 {
		t.Fatalf("a refused prefill changed the context: n_past %d", sc.NPast())
	}
}

func TestSampling(t *testing.T) {
	m := open(t, nil)
	prompt := must(m.Tokenize("Once upon", false))
	p := must(DefaultSamplerParams())
	if p.Temperature != 0.8 || p.TopK != 40 || p.Seed != 42 {
		t.Fatalf("defaults %+v", p)
	}
	p.Seed = 7
	sample := func() []int32 {
		ctx := must(m.NewContext())
		defer ctx.Close()
		if err := ctx.SetSampler(p); err != nil {
			t.Fatal(err)
		}
		if err := ctx.Prefill(prompt); err != nil {
			t.Fatal(err)
		}
		out := make([]int32, 24)
		for i := range out {
			out[i] = must(ctx.Decode())
		}
		return out
	}
	a := sample()
	if !reflect.DeepEqual(a, sample()) {
		t.Fatal("the same seed gave other tokens")
	}
	if reflect.DeepEqual(a, greedy(t, m, "Once upon", 24)) {
		t.Fatal("temperature 0.8 gave the greedy tokens")
	}

	ctx := must(m.NewContext())
	defer ctx.Close()
	bad := p
	bad.TopP = -1
	wantErr(t, ctx.SetSampler(bad), ErrInvalidArgument, "top_p")
	p.Temperature = 0
	if err := ctx.SetSampler(p); err != nil {
		t.Fatal(err)
	}
	if err := ctx.Prefill(prompt); err != nil {
		t.Fatal(err)
	}
	if err := ctx.SetLogitBias('Z', 1000); err != nil {
		t.Fatal(err)
	}
	if tok := must(ctx.Decode()); tok != 'Z' {
		t.Fatalf("a bias of 1000 on 'Z' gave %d", tok)
	}
	if err := ctx.ClearLogitBias(); err != nil {
		t.Fatal(err)
	}
	want := argmax(must(ctx.Logits()))
	if tok := must(ctx.Decode()); tok != want {
		t.Fatalf("after clearing the bias: %d, want %d", tok, want)
	}
	if err := ctx.SetLogitBias('Z', 1000); err != nil {
		t.Fatal(err)
	}
	if err := ctx.SetStopStrings([]string{"ZZ"}); err != nil {
		t.Fatal(err)
	}
	if err := ctx.Prefill(prompt); err != nil {
		t.Fatal(err)
	}
	must(ctx.Decode())
	if ctx.StopReason() != StopNone {
		t.Fatal("stopped after one Z")
	}
	must(ctx.Decode())
	if ctx.StopReason() != StopString {
		t.Fatal("no stop after ZZ")
	}
	eos, _ := m.SpecialToken(TokenEOS)
	if err := ctx.SetLogitBias(eos, 2000); err != nil {
		t.Fatal(err)
	}
	if tok := must(ctx.Decode()); tok != eos || ctx.StopReason() != StopEOG {
		t.Fatalf("token %d, stop reason %d", tok, ctx.StopReason())
	}
	wantErr(t, ctx.SetStopStrings([]string{""}), ErrInvalidArgument)
}

func collect(t *testing.T, s *Stream) []string {
	t.Helper()
	var pieces []string
	for s.Next() {
		pieces = append(pieces, s.Text())
	}
	return pieces
}

func TestStream(t *testing.T) {
	m := open(t, nil)
	ctx := must(m.NewContext())
	defer ctx.Close()
	if err := ctx.Prefill(must(m.Tokenize("Hello", false))); err != nil {
		t.Fatal(err)
	}
	s := must(ctx.Generate(12))
	text := strings.Join(collect(t, s), "")
	if s.Err() != nil || len(s.Tokens()) != 12 || s.StopReason() != StopNone {
		t.Fatalf("err %v, %d tokens, reason %d", s.Err(), len(s.Tokens()), s.StopReason())
	}
	if text != must(m.Detokenize(s.Tokens())) || !reflect.DeepEqual(s.Tokens(), greedy(t, m, "Hello", 12)) {
		t.Fatalf("stream text %q, tokens %v", text, s.Tokens())
	}

	// 'é' is the tokens 0xC3 0xA9. Both biased up, 0xC3 more, and a presence penalty on the last
	// token: the model writes C3 A9 C3 A9 ..., a character split over two tokens each time.
	c2 := must(m.NewContext())
	defer c2.Close()
	p := must(DefaultSamplerParams())
	p.Temperature, p.PresencePenalty, p.PenaltyLastN = 0, 5000, 1
	for _, err := range []error{c2.SetSampler(p), c2.SetLogitBias(0xC3, 1000), c2.SetLogitBias(0xA9, 999),
		c2.Prefill(must(m.Tokenize("Hi", false)))} {
		if err != nil {
			t.Fatal(err)
		}
	}
	s = must(c2.Generate(7))
	if pieces := collect(t, s); !reflect.DeepEqual(pieces, []string{"é", "é", "é", "\uFFFD"}) {
		t.Fatalf("pieces %q (the 7th token starts a character the flush cuts short)", pieces)
	}
	if !reflect.DeepEqual(s.Tokens(), []int32{0xC3, 0xA9, 0xC3, 0xA9, 0xC3, 0xA9, 0xC3}) {
		t.Fatalf("tokens %v", s.Tokens())
	}

	// An end-of-generation token ends the stream without its text.
	eos, _ := m.SpecialToken(TokenEOS)
	for _, err := range []error{c2.Reset(), c2.ClearLogitBias(), c2.SetLogitBias(eos, 1000), c2.Prefill([]int32{72})} {
		if err != nil {
			t.Fatal(err)
		}
	}
	s = must(c2.Generate(5))
	if s.Next() || s.StopReason() != StopEOG || len(s.Tokens()) != 0 || s.Err() != nil {
		t.Fatalf("after eos: reason %d, tokens %v, err %v", s.StopReason(), s.Tokens(), s.Err())
	}

	// An error ends the stream and is kept.
	small := open(t, map[string]string{"ctx_len": "4"})
	c3 := must(small.NewContext())
	defer c3.Close()
	if err := c3.Prefill([]int32{72, 105}); err != nil {
		t.Fatal(err)
	}
	s = must(c3.Generate(10))
	collect(t, s)
	wantErr(t, s.Err(), ErrContextFull)
	if s.Next() {
		t.Fatal("Next after an error")
	}
}

func TestConcurrentContexts(t *testing.T) {
	m := open(t, nil)
	prompts := []string{"The first prompt", "A second, different one"}
	want := [][]int32{greedy(t, m, prompts[0], 16), greedy(t, m, prompts[1], 16)}
	if reflect.DeepEqual(want[0], want[1]) {
		t.Fatal("the prompts give the same tokens; the test would prove nothing")
	}
	var wg sync.WaitGroup
	got := make([][][]int32, 4)
	errs := make([]error, 4)
	for g := range got {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 3; i++ {
				ctx, err := m.NewContext()
				if err != nil {
					errs[g] = err
					return
				}
				toks, err := m.Tokenize(prompts[g%2], false)
				if err == nil {
					err = ctx.Prefill(toks)
				}
				var out []int32
				for j := 0; j < 16 && err == nil; j++ {
					var tok int32
					tok, err = ctx.Decode()
					out = append(out, tok)
				}
				ctx.Close()
				if err != nil {
					errs[g] = err
					return
				}
				got[g] = append(got[g], out)
			}
		}(g)
	}
	wg.Wait()
	for g := range got {
		if errs[g] != nil {
			t.Fatalf("goroutine %d: %v", g, errs[g])
		}
		for _, out := range got[g] {
			if !reflect.DeepEqual(out, want[g%2]) {
				t.Fatalf("goroutine %d: %v, want %v", g, out, want[g%2])
			}
		}
	}
}

func TestChatFormatAndSynth(t *testing.T) {
	load(t)
	chat := must(ChatFormat([]Message{{"system", "Be brief."}, {"user", "Hi"}}, true))
	if chat != "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n" {
		t.Fatalf("ChatFormat = %q", chat)
	}
	long := strings.Repeat("x", 1000)
	if s := must(ChatFormat([]Message{{"user", long}}, false)); s != "<|im_start|>user\n"+long+"<|im_end|>\n" {
		t.Fatalf("long ChatFormat: %d bytes", len(s))
	}
	_, err := ChatFormat([]Message{{"", "x"}}, false)
	wantErr(t, err, ErrInvalidArgument)

	presets := must(SynthPresets())
	if !strings.Contains(strings.Join(presets, ","), "qwen3-tiny") {
		t.Fatalf("presets %v", presets)
	}
	path := filepath.Join(t.TempDir(), "qwen3-tiny.gguf")
	if err := Synth(path, "qwen3-tiny", "q8_0", 3); err != nil {
		t.Fatal(err)
	}
	m := must(OpenWithOptions(path, map[string]string{"device": "cpu"}))
	defer m.Close()
	if m.Architecture() != "qwen3" {
		t.Fatalf("architecture %q", m.Architecture())
	}
	err = Synth(path, "no-such-preset", "f16", 1)
	var e *Error
	if !errors.As(err, &e) || !strings.Contains(e.Msg, "no-such-preset") {
		t.Fatalf("Synth with a bad preset: %v", err)
	}
}

// The README's example, built as a program of its own and run on the tiny model with the library found
// by the dynamic loader (DefaultLibrary on LD_LIBRARY_PATH).
func TestReadmeExample(t *testing.T) {
	readme := string(must(os.ReadFile("README.md")))
	start := strings.Index(readme, "```go\n")
	end := strings.Index(readme[start+1:], "\n```\n")
	if start < 0 || end < 0 {
		t.Fatal("README.md has no ```go block")
	}
	dir := t.TempDir()
	here := must(os.Getwd())
	gomod := "module readme\n\ngo 1.19\n\nrequire minfer v0.0.0\n\nreplace minfer => " + here + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(readme[start+6:start+1+end+1]), 0o644); err != nil {
		t.Fatal(err)
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	build := exec.Command(gobin, "build", "-o", "readme", ".")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of the README example: %v\n%s", err, out)
	}
	if err := os.Symlink(tinyPath, filepath.Join(dir, "model.gguf")); err != nil {
		t.Fatal(err)
	}
	libDir := must(filepath.Abs(buildDir()))
	cmd := exec.Command(filepath.Join(dir, "readme"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+libDir)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil || stdout.Len() == 0 {
		t.Fatalf("the README example: %v, %d bytes of text\n%s", err, stdout.Len(), stderr.String())
	}
	os.Remove(filepath.Join(dir, "model.gguf"))
	cmd = exec.Command(filepath.Join(dir, "readme"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+libDir)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "MINFER_ERR_IO: cannot open 'model.gguf'") {
		t.Fatalf("the README example without a model: %v\n%s", err, out)
	}
}

// A Context keeps working after its Model's Close (the header's promise: contexts keep the model's
// memory), and Close waits for the Model's methods running on other goroutines (go test -race).
func TestContextOutlivesModelClose(t *testing.T) {
	m := open(t, nil)
	want := greedy(t, m, "Hello", 6)
	prompt := must(m.Tokenize("Hello", false))
	vocab := m.NVocab()
	ctx := must(m.NewContext())
	defer ctx.Close()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() { // calls racing Close: each sees the model whole, or closed
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if toks, err := m.Tokenize("Hi there", false); err == nil && len(toks) == 0 {
					t.Error("no tokens from an open model")
				}
				_ = m.NVocab()
			}
		}()
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := m.Close(); err != nil { // a second Close does nothing
		t.Fatal(err)
	}
	if m.NVocab() != 0 {
		t.Fatal("a closed model still answers")
	}
	_, err := m.Tokenize("Hi", false)
	wantErr(t, err, ErrInvalidArgument, "model")
	if err := ctx.Prefill(prompt); err != nil {
		t.Fatal(err)
	}
	if l := must(ctx.Logits()); len(l) != vocab || argmax(l) != want[0] {
		t.Fatalf("logits: %d of %d, argmax %d (want %d)", len(l), vocab, argmax(l), want[0])
	}
	s := must(ctx.Generate(6))
	collect(t, s)
	if s.Err() != nil || !reflect.DeepEqual(s.Tokens(), want) {
		t.Fatalf("after the model's Close: tokens %v (want %v), err %v", s.Tokens(), want, s.Err())
	}
	_, err = ctx.Generate(-1)
	wantErr(t, err, ErrInvalidArgument, "negative")
	ctx.Close()
	_, err = ctx.Generate(1)
	wantErr(t, err, ErrInvalidArgument, "closed")
}

// A NUL byte would end the string on the C side: every string argument holding one is refused, never
// cut short (a stop string "ab\x00cd" would otherwise stop at "ab").
func TestNULBytesRefused(t *testing.T) {
	m := open(t, nil)
	ctx := must(m.NewContext())
	defer ctx.Close()
	wantErr(t, m.SetOption("threads\x00junk", "2"), ErrInvalidArgument, "NUL")
	wantErr(t, m.SetOption("threads", "2\x00"), ErrInvalidArgument, "NUL")
	_, err := m.Option("ctx_len\x00")
	wantErr(t, err, ErrInvalidArgument, "NUL")
	_, err = m.MetaString("general.architecture\x00x")
	wantErr(t, err, ErrInvalidArgument, "NUL")
	wantErr(t, ctx.SetStopStrings([]string{"ok", "ab\x00cd"}), ErrInvalidArgument, "NUL")
	_, err = ChatFormat([]Message{{Role: "user", Content: "hi\x00 there"}}, true)
	wantErr(t, err, ErrInvalidArgument, "NUL")
	_, err = OpenWithOptions(tinyPath+"\x00.txt", nil)
	wantErr(t, err, ErrInvalidArgument, "NUL")
	wantErr(t, Synth(t.TempDir()+"/x.gguf", "qwen2-tiny\x00", "f16", 1), ErrInvalidArgument, "NUL")
	b := must(m.NewBatch(BatchParams{MaxSequences: 2, MaxQueue: 4, MaxStepTokens: 16}))
	defer b.Close()
	_, err = b.Submit(context.Background(), SequenceParams{Prompt: []int32{72}, MaxTokens: 2, Stops: []string{"F\x00zz"}})
	wantErr(t, err, ErrInvalidArgument, "NUL")
	// Without a NUL the same calls pass.
	if err := ctx.SetStopStrings([]string{"ok", "abcd"}); err != nil {
		t.Fatal(err)
	}
	if v := must(m.MetaString("general.architecture")); v != "qwen2" {
		t.Fatalf("architecture %q", v)
	}
}
