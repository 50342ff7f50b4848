//! `aotune`: the command-line front end of the compiler.

mod cli;
#[cfg(feature = "serve")]
mod serve;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("AOTUNE_LOG")
                // onnx-ir warns about its own internal lookups ("Input … not
                // found, should only happen when peeking") on valid exports;
                // the importer reports every real problem as an error.
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,onnx_ir=error")),
        )
        .with_writer(std::io::stderr)
        .init();
    match cli::run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", message(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// The error and its causes joined by ": ", leaving out a cause the text
/// already quotes (library errors often print their source themselves).
fn message(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

#[cfg(test)]
mod message_tests {
    use super::message;

    #[test]
    fn a_cause_the_text_quotes_is_not_repeated() {
        let io = || std::io::Error::other("disk on fire");
        let quoted = anyhow::Error::new(io()).context("reading m.onnx: disk on fire");
        assert_eq!(message(&quoted), "reading m.onnx: disk on fire");
        let plain = anyhow::Error::new(io()).context("reading m.onnx");
        assert_eq!(message(&plain), "reading m.onnx: disk on fire");
    }
}
