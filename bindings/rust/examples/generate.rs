// Streams a completion: cargo run --example generate -- [--lib PATH/libminfer.so] MODEL.gguf [PROMPT] [N]
use std::io::Write;
use std::process::ExitCode;

fn run(args: &[String]) -> minfer::Result<()> {
    let mut args = args;
    if args.first().map(String::as_str) == Some("--lib") && args.len() > 1 {
        minfer::load(&args[1])?;
        args = &args[2..];
    }
    let (model_path, prompt) = match args {
        [model, rest @ ..] => (model, rest.first().map_or("Once upon a time", String::as_str)),
        [] => {
            return Err(minfer::Error::new(
                minfer::Code::InvalidArgument,
                "usage: generate [--lib LIB] MODEL [PROMPT] [N]",
            ))
        }
    };
    let n: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(32);

    let model = minfer::Model::open(model_path)?;
    let mut ctx = model.context()?;
    ctx.prefill(&model.tokenize(prompt, false)?)?;
    let mut out = std::io::stdout().lock();
    let mut stream = ctx.generate(n)?;
    for piece in stream.by_ref() {
        let _ = out.write_all(piece?.as_bytes());
        let _ = out.flush();
    }
    let _ = writeln!(out);
    eprintln!("{} tokens, stop reason {:?}", stream.tokens().len(), stream.stop_reason());
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("generate: {e}");
            ExitCode::FAILURE
        }
    }
}
