// End to end against the freshly built library, on a tiny model written by the freshly built CLI.
// MINFER_BUILD_DIR names the meson build directory (default: the repository's build/); with the `link`
// feature the library comes from the link (LD_LIBRARY_PATH must reach it), else it is loaded from there.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use minfer::{Code, Model, SamplerParams, SpecialToken, StopReason};

fn build_dir() -> PathBuf {
    match std::env::var_os("MINFER_BUILD_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../build"),
    }
}

/// Loads the library (dlopen builds) and writes the tiny model, once per test process.
fn tiny() -> &'static Path {
    static MODEL: OnceLock<PathBuf> = OnceLock::new();
    MODEL.get_or_init(|| {
        let dir = build_dir();
        #[cfg(not(feature = "link"))]
        minfer::load(dir.join("libminfer.so")).expect("load libminfer.so from MINFER_BUILD_DIR");
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-qwen2-tiny.gguf");
        let status = Command::new(dir.join("minfer"))
            .args(["synth", "--preset", "qwen2-tiny", "--quiet", "-o"])
            .arg(&path)
            .status()
            .expect("run the minfer CLI of MINFER_BUILD_DIR");
        assert!(status.success(), "minfer synth failed: {status}");
        path
    })
}

fn open() -> Model {
    Model::open_with_options(tiny(), &[("device", "cpu")]).expect("open the tiny model")
}

/// `n` greedy tokens after `prompt`.
fn greedy(model: &Model, prompt: &str, n: usize) -> Vec<i32> {
    let mut ctx = model.context().unwrap();
    ctx.prefill(&model.tokenize(prompt, false).unwrap()).unwrap();
    (0..n).map(|_| ctx.decode().unwrap()).collect()
}

#[test]
fn version_and_status_names_match_the_library() {
    tiny();
    assert_eq!(minfer::version().unwrap(), minfer::sys::MINFER_VERSION_STRING);
    assert!(!minfer::build_info().unwrap().is_empty());
    let api = minfer::raw_api().unwrap();
    let mut known = 0;
    for raw in 1..64 {
        let name = unsafe { std::ffi::CStr::from_ptr((api.minfer_status_string)(raw)) }.to_str().unwrap();
        let code = Code::from_raw(raw);
        assert_eq!(code.raw(), raw);
        if name == "MINFER_ERR_UNKNOWN_STATUS" {
            assert_eq!(code, Code::Unknown(raw));
        } else {
            assert_eq!(code.name(), name, "status {raw}");
            known += 1;
        }
    }
    assert_eq!(known, 16);
}

#[test]
fn bad_file_gives_bad_model_with_the_message() {
    tiny();
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-not-a-model.gguf");
    std::fs::write(&path, b"garbage, not GGUF").unwrap();
    let err = Model::open(&path).unwrap_err();
    assert_eq!(err.code(), Code::BadModel);
    assert!(err.message().contains("bad magic"), "{err}");
    assert!(err.message().contains("e2e-not-a-model.gguf"), "{err}");
    assert!(err.to_string().starts_with("MINFER_ERR_BAD_MODEL: "), "{err}");

    let err = Model::open("/nonexistent/dir/model.gguf").unwrap_err();
    assert_eq!(err.code(), Code::Io);
    assert!(err.message().contains("cannot open '/nonexistent/dir/model.gguf'"), "{err}");

    let err = Model::open("nul\0inside").unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
}

#[test]
fn hyperparameters_and_metadata() {
    let m = open();
    assert_eq!(m.architecture(), "qwen2");
    assert!(m.name().contains("qwen2-tiny"), "{}", m.name());
    assert_eq!(m.device(), "cpu");
    assert_eq!((m.n_vocab(), m.n_layer(), m.n_embd(), m.n_ctx_train()), (512, 2, 256, 2048));
    assert_eq!(m.file_size(), std::fs::metadata(tiny()).unwrap().len());
    let keys = m.meta_keys();
    assert_eq!(keys[0], "general.architecture");
    assert!(keys.iter().any(|k| k == "qwen2.block_count"));
    assert_eq!(m.meta_string("general.architecture").unwrap(), "qwen2");
    assert_eq!(m.meta_int("qwen2.block_count").unwrap(), 2);
    assert_eq!(m.meta_string("qwen2.block_count").unwrap(), "2");
    assert_eq!(m.meta_float("qwen2.rope.freq_base").unwrap(), 1e6);
    let err = m.meta_int("no.such.key").unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().contains("no.such.key"), "{err}");
    assert_eq!(m.meta_int("general.architecture").unwrap_err().code(), Code::WrongType);
    assert_eq!(m.chat_template().unwrap_err().code(), Code::NotFound);
}

#[test]
fn options() {
    let m = open();
    m.set_option("threads", "2").unwrap();
    assert_eq!(m.option("threads").unwrap(), "2");
    assert_eq!(m.option("device").unwrap(), "cpu");
    let err = m.set_option("no_such_option", "1").unwrap_err();
    assert_eq!(err.code(), Code::UnknownOption);
    assert!(err.message().contains("no_such_option"), "{err}");
    assert_eq!(m.set_option("threads", "many").unwrap_err().code(), Code::OptionValue);
    assert_eq!(m.set_option("device", "cpu").unwrap_err().code(), Code::OptionLocked);
    let err = Model::open_with_options(tiny(), &[("ctx_len", "-3")]).unwrap_err();
    assert_eq!(err.code(), Code::OptionValue);
    assert!(err.message().contains("ctx_len"), "{err}");

    assert_eq!(minfer::default_option("ctx_len").unwrap(), "4096");
    minfer::set_default_option("log_level", "warn").unwrap();
    assert_eq!(minfer::default_option("log_level").unwrap(), "warn");
    minfer::set_default_option("log_level", "info").unwrap();
    let all = minfer::options().unwrap();
    let threads = all.iter().find(|o| o.name == "threads").expect("a threads option");
    assert_eq!((threads.kind, threads.runtime, threads.min_value.as_str()), ("int", true, "0"));
    let device = all.iter().find(|o| o.name == "device").expect("a device option");
    assert_eq!((device.kind, device.runtime), ("enum", false));
    assert_eq!(device.choices, ["auto", "cpu", "cuda"]);
}

#[test]
fn tokenize_and_detokenize() {
    let m = open();
    let text = "Hello, wörld € 😀";
    let tokens = m.tokenize(text, false).unwrap();
    // The synthetic vocabulary is byte-level with no merges: one token per byte, ids equal to bytes.
    assert_eq!(tokens, text.bytes().map(i32::from).collect::<Vec<_>>());
    assert_eq!(m.detokenize(&tokens).unwrap(), text);
    assert_eq!(m.token_to_piece(0xC3).unwrap(), [0xC3]);
    assert_eq!(m.tokenize("", false).unwrap(), Vec::<i32>::new());

    // Longer than the first buffers of both directions: the retry with the size asked for.
    let long = "ünïcödé text ".repeat(200);
    let tokens = m.tokenize(&long, false).unwrap();
    assert_eq!(tokens.len(), long.len());
    assert_eq!(m.detokenize(&tokens).unwrap(), long);

    let im_start = m.special_token(SpecialToken::ImStart).expect("an <|im_start|> token");
    let special = m.tokenize("<|im_start|>hi", true).unwrap();
    assert_eq!(special, [im_start, 'h' as i32, 'i' as i32]);
    assert_eq!(m.tokenize("<|im_start|>hi", false).unwrap().len(), "<|im_start|>hi".len());
    let eos = m.special_token(SpecialToken::Eos).expect("an eos token");
    assert!(m.is_eog(eos));
    assert!(!m.is_eog('h' as i32));

    let err = m.detokenize(&[1 << 20]).unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("1048576"), "{err}");
}

#[test]
fn detokenizer_yields_whole_characters_only() {
    let m = open();
    let text = "aé€😀b";
    let tokens = m.tokenize(text, false).unwrap();
    let mut d = m.detokenizer().unwrap();
    let pieces: Vec<String> = tokens.iter().map(|&t| d.push(t).unwrap()).collect();
    // 'é' is 2 tokens, '€' 3 and '😀' 4: the tokens before the last of each give nothing.
    assert_eq!(pieces, ["a", "", "é", "", "", "€", "", "", "", "😀", "b"]);
    assert_eq!(d.flush().unwrap(), "");
    // A character cut short becomes U+FFFD at the flush.
    assert_eq!(d.push(0xE2).unwrap(), "");
    assert_eq!(d.flush().unwrap(), "\u{FFFD}");
    assert_eq!(d.push(-1).unwrap_err().code(), Code::InvalidArgument);
}

#[test]
fn prefill_decode_logits_reset_truncate() {
    let m = open();
    let mut ctx = m.context().unwrap();
    assert_eq!(ctx.n_ctx(), 4096);
    let err = ctx.decode().unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("no logits"), "{err}");
    let err = ctx.prefill(&[72, 9999]).unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("9999"), "{err}");
    assert_eq!(ctx.n_past(), 0);

    ctx.prefill(&m.tokenize("Hello", false).unwrap()).unwrap();
    assert_eq!(ctx.n_past(), 5);
    for _ in 0..4 {
        let logits = ctx.logits().unwrap();
        assert_eq!(logits.len(), 512);
        // Greedy: the highest logit, the lowest id on ties.
        let best = (0..logits.len()).fold(0, |b, i| if logits[i] > logits[b] { i } else { b });
        assert_eq!(ctx.decode().unwrap(), best as i32);
    }
    assert_eq!(ctx.n_past(), 9);
    ctx.truncate(3).unwrap();
    assert_eq!(ctx.n_past(), 3);
    assert_eq!(ctx.logits().unwrap_err().code(), Code::InvalidArgument);
    assert_eq!(ctx.truncate(7).unwrap_err().code(), Code::InvalidArgument);
    ctx.reset().unwrap();
    assert_eq!(ctx.n_past(), 0);
}

#[test]
fn full_context_is_refused_and_unchanged() {
    let m = Model::open_with_options(tiny(), &[("device", "cpu"), ("ctx_len", "8")]).unwrap();
    let mut ctx = m.context().unwrap();
    assert_eq!(ctx.n_ctx(), 8);
    ctx.prefill(&[1, 2, 3, 4, 5, 6]).unwrap();
    let err = ctx.prefill(&[7, 8, 9]).unwrap_err();
    assert_eq!(err.code(), Code::ContextFull);
    assert_eq!(ctx.n_past(), 6);
    ctx.decode().unwrap();
    ctx.decode().unwrap();
    assert_eq!(ctx.decode().unwrap_err().code(), Code::ContextFull);
}

#[test]
fn sampling_settings() {
    let m = open();
    let prompt = m.tokenize("Once upon", false).unwrap();
    let mut p = SamplerParams::new().unwrap();
    assert_eq!((p.temperature, p.top_k, p.seed), (0.8, 40, 42));
    p.seed = 7;
    let run = |p: &SamplerParams| {
        let mut ctx = m.context().unwrap();
        ctx.set_sampler(p).unwrap();
        ctx.prefill(&prompt).unwrap();
        (0..24).map(|_| ctx.decode().unwrap()).collect::<Vec<_>>()
    };
    let a = run(&p);
    assert_eq!(a, run(&p), "the same seed gives the same tokens");
    assert_ne!(a, greedy(&m, "Once upon", 24), "temperature 0.8 samples, it is not greedy");

    let mut ctx = m.context().unwrap();
    p.top_p = -1.0;
    let err = ctx.set_sampler(&p).unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("top_p"), "{err}");

    // Bias: force a token, then clear it.
    ctx.set_sampler(&SamplerParams::greedy().unwrap()).unwrap();
    ctx.prefill(&prompt).unwrap();
    ctx.set_logit_bias('Z' as i32, 1000.0).unwrap();
    assert_eq!(ctx.decode().unwrap(), 'Z' as i32);
    ctx.clear_logit_bias().unwrap();
    let best = {
        let l = ctx.logits().unwrap();
        (0..l.len()).fold(0, |b, i| if l[i] > l[b] { i } else { b }) as i32
    };
    assert_eq!(ctx.decode().unwrap(), best);

    // Stop strings and end of generation.
    ctx.set_logit_bias('Z' as i32, 1000.0).unwrap();
    ctx.set_stop_strings(&["ZZ"]).unwrap();
    ctx.prefill(&prompt).unwrap();
    assert_eq!(ctx.stop_reason(), StopReason::None);
    ctx.decode().unwrap();
    assert_eq!(ctx.stop_reason(), StopReason::None);
    ctx.decode().unwrap();
    assert_eq!(ctx.stop_reason(), StopReason::StopString);
    let eos = m.special_token(SpecialToken::Eos).unwrap();
    ctx.set_logit_bias(eos, 2000.0).unwrap();
    assert_eq!(ctx.decode().unwrap(), eos);
    assert_eq!(ctx.stop_reason(), StopReason::Eog);
    assert_eq!(ctx.set_stop_strings(&[""]).unwrap_err().code(), Code::InvalidArgument);
}

#[test]
fn stream_yields_whole_utf8_pieces() {
    let m = open();
    let mut ctx = m.context().unwrap();
    ctx.prefill(&m.tokenize("Hello", false).unwrap()).unwrap();
    let mut stream = ctx.generate(12).unwrap();
    let text: String = stream.by_ref().map(|piece| piece.unwrap()).collect();
    assert_eq!(stream.tokens().len(), 12);
    assert_eq!(stream.stop_reason(), StopReason::None);
    assert_eq!(text, m.detokenize(stream.tokens()).unwrap());
    assert_eq!(stream.tokens(), &greedy(&m, "Hello", 12)[..]);

    // 'é' is the tokens 0xC3 0xA9. Both biased up, 0xC3 more, and a presence penalty on the last
    // token: the model writes C3 A9 C3 A9 ..., a character split over two tokens each time.
    let mut ctx = m.context().unwrap();
    let mut p = SamplerParams::greedy().unwrap();
    p.presence_penalty = 5000.0;
    p.penalty_last_n = 1;
    ctx.set_sampler(&p).unwrap();
    ctx.set_logit_bias(0xC3, 1000.0).unwrap();
    ctx.set_logit_bias(0xA9, 999.0).unwrap();
    ctx.prefill(&m.tokenize("Hi", false).unwrap()).unwrap();
    let mut stream = ctx.generate(7).unwrap();
    let pieces: Vec<String> = stream.by_ref().map(|piece| piece.unwrap()).collect();
    assert_eq!(pieces, ["é", "é", "é", "\u{FFFD}"], "the 7th token starts a character the flush cuts short");
    assert_eq!(stream.tokens(), [0xC3, 0xA9, 0xC3, 0xA9, 0xC3, 0xA9, 0xC3]);

    // An end-of-generation token ends the stream without its text.
    ctx.reset().unwrap();
    ctx.clear_logit_bias().unwrap();
    ctx.set_logit_bias(m.special_token(SpecialToken::Eos).unwrap(), 1000.0).unwrap();
    ctx.prefill(&[72]).unwrap();
    let mut stream = ctx.generate(5).unwrap();
    assert!(stream.next().is_none());
    assert_eq!(stream.stop_reason(), StopReason::Eog);
    assert!(stream.tokens().is_empty());

    // An error is yielded once and ends the stream.
    let small = Model::open_with_options(tiny(), &[("device", "cpu"), ("ctx_len", "4")]).unwrap();
    let mut ctx = small.context().unwrap();
    ctx.prefill(&[72, 105]).unwrap();
    let results: Vec<_> = ctx.generate(10).unwrap().collect();
    assert_eq!(results.last().unwrap().as_ref().unwrap_err().code(), Code::ContextFull);
    assert_eq!(results.iter().filter(|r| r.is_err()).count(), 1);
}

#[test]
fn two_contexts_on_one_model_from_two_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Model>();
    send::<minfer::Context<'static>>();

    let m = Arc::new(open());
    let want_a = greedy(&m, "The first prompt", 16);
    let want_b = greedy(&m, "A second, different one", 16);
    assert_ne!(want_a, want_b);

    // Scoped threads borrow the model; a context made here moves into one of them.
    let mut moved = m.context().unwrap();
    moved.prefill(&m.tokenize("A second, different one", false).unwrap()).unwrap();
    std::thread::scope(|s| {
        let a = s.spawn(|| (0..3).map(|_| greedy(&m, "The first prompt", 16)).collect::<Vec<_>>());
        let b = s.spawn(move || (0..16).map(|_| moved.decode().unwrap()).collect::<Vec<_>>());
        for got in a.join().unwrap() {
            assert_eq!(got, want_a);
        }
        assert_eq!(b.join().unwrap(), want_b);
    });

    // 'static threads share the model through an Arc.
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let m = Arc::clone(&m);
            std::thread::spawn(move || greedy(&m, "The first prompt", 16))
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), want_a);
    }
}

#[test]
fn chat_format_and_synth() {
    tiny();
    let chat = minfer::chat_format(&[("system", "Be brief."), ("user", "Hi")], true).unwrap();
    assert_eq!(
        chat,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    let long = "x".repeat(1000);
    assert_eq!(
        minfer::chat_format(&[("user", &long)], false).unwrap(),
        format!("<|im_start|>user\n{long}<|im_end|>\n")
    );
    assert_eq!(minfer::chat_format(&[("", "x")], false).unwrap_err().code(), Code::InvalidArgument);

    let presets = minfer::synth_presets().unwrap();
    assert!(presets.iter().any(|p| p == "qwen3-tiny"), "{presets:?}");
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-qwen3-tiny.gguf");
    minfer::synth(&path, "qwen3-tiny", "q8_0", 3).unwrap();
    let m = Model::open_with_options(&path, &[("device", "cpu")]).unwrap();
    assert_eq!(m.architecture(), "qwen3");
    let err = minfer::synth(&path, "no-such-preset", "f16", 1).unwrap_err();
    assert!(err.message().contains("no-such-preset"), "{err}");
}

/// A batch's sequences give each its tokens alone (greedy), through the iterator of each sequence.
#[test]
fn batch_sequences_equal_alone() {
    let model = open();
    let mut params = minfer::BatchParams::new().unwrap();
    params.max_sequences = 3;
    params.max_step_tokens = 16;
    let mut batch = minfer::Batch::new(&model, &params).unwrap();
    let prompts = ["one two three", "a longer prompt than the others here", "x"];
    let mut ids = Vec::new();
    for p in prompts {
        let tokens = model.tokenize(p, false).unwrap();
        ids.push(batch.add(&minfer::SequenceParams { prompt: &tokens, max_tokens: 10, ..Default::default() }).unwrap());
    }
    for (id, p) in ids.iter().zip(prompts) {
        let got: Vec<i32> = batch.pieces(*id).map(|p| p.unwrap().token).collect();
        let mut want = greedy(&model, p, 10);
        if got.len() < want.len() && got.last().map_or(false, |t| model.is_eog(*t)) {
            want.truncate(got.len());
        }
        assert_eq!(got, want, "{p}");
        assert!(matches!(batch.finish(*id), Some(minfer::Finish::Stopped(_))));
    }
    let st = batch.stats().unwrap();
    assert_eq!((st.active, st.queued, st.kv_pages_free), (0, 0, st.kv_pages));
    // Cancelled and bad input.
    let tokens = model.tokenize("go on", false).unwrap();
    let id = batch.add(&minfer::SequenceParams { prompt: &tokens, ..Default::default() }).unwrap();
    batch.cancel(id).unwrap();
    let err = batch.pieces(id).find_map(|p| p.err()).expect("the cancelled sequence ends with an error");
    assert_eq!(err.code(), Code::Cancelled);
    let err = batch.add(&minfer::SequenceParams { prompt: &[], ..Default::default() }).unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
}
