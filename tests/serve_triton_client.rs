//! The official Triton Python client against `aotune serve` on the CPU
//! backend: `tests/serve_triton_client.py` (ready, metadata, config, infer
//! over HTTP JSON, HTTP binary and gRPC, each equal to `aotune run` on the
//! same input; a PNG sent as BYTES; errors answered; the statistics of what
//! it sent), then SIGTERM → exit 0.
//!
//! The client comes from `$AOTUNE_SERVE_PYTHON`, else from `python3` with
//! `.tools/serve-client` on its path (`make serve-client` installs the pinned
//! tritonclient there; `make test` does it first). Without one the test
//! skips, visibly.

mod serve_common;

use serve_common::{add_model, f32_bytes, Server};
use std::path::Path;
use std::process::Command;

fn aotune(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_aotune"))
        .args(args)
        .output()
        .expect("run aotune");
    assert!(
        out.status.success(),
        "aotune {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A Python command that imports tritonclient, or why there is none:
/// `$AOTUNE_SERVE_PYTHON`, else `python3` with `.tools/serve-client` (what
/// `make serve-client` installs) on its path.
fn python() -> Result<Command, String> {
    let command = || match std::env::var_os("AOTUNE_SERVE_PYTHON") {
        Some(python) => Command::new(python),
        None => {
            let mut c = Command::new("python3");
            let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/serve-client");
            c.env("PYTHONPATH", tools);
            c
        }
    };
    let ok = command()
        .args(["-c", "import tritonclient.http, tritonclient.grpc, numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        Ok(command())
    } else {
        Err("no Python with tritonclient (`make serve-client` installs it)".into())
    }
}

#[test]
fn triton_client_gets_what_aotune_run_gives() {
    let mut python = match python() {
        Ok(p) => p,
        Err(why) => return aotune_compiler::skip::here(&why),
    };
    let dir = serve_common::scratch("triton");
    let model = dir.join("r18.onnx");
    let model_s = model.to_str().unwrap();
    aotune(&["zoo", "resnet18", "-o", model_s]);

    // Inputs and `aotune run`'s outputs for them, at batch 1 and 3.
    let x1 = aotune_compiler::zoo::fill(11, 0.0, 1.0, 3 * 224 * 224);
    let x3 = aotune_compiler::zoo::fill(12, 0.0, 1.0, 3 * 3 * 224 * 224);
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    std::fs::write(path("x1.f32"), f32_bytes(&x1)).unwrap();
    std::fs::write(path("x3.f32"), f32_bytes(&x3)).unwrap();
    let run = |input: &str, output: &str, batch: &str| {
        aotune(&[
            "run", model_s, "--batch", batch, "--input", input, "--output", output, "--runs", "1",
        ])
    };
    run(&path("x1.f32"), &path("y1.f32"), "1");
    run(&path("x3.f32"), &path("y3.f32"), "3");

    // A uniform PNG for the BYTES image path.
    let png = image::RgbImage::from_pixel(300, 200, image::Rgb([200, 100, 30]));
    png.save(path("uniform.png")).unwrap();

    let repo = dir.join("repo");
    let bytes = std::fs::read(&model).unwrap();
    add_model(
        &repo,
        "resnet18",
        &bytes,
        Some(r#"{"batch_sizes": [1, 8], "max_queue_delay_us": 1000, "image": {"input": "input"}}"#),
    );
    add_model(&repo, "broken", b"not an onnx model", None);
    let server = Server::start(&repo, &["--strict-readiness", "false"]);
    let out = python
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/serve_triton_client.py"))
        .args(["--http", server.http.trim_start_matches("http://")])
        .args(["--grpc", server.grpc.trim_start_matches("http://")])
        .args(["--model", "resnet18", "--broken", "broken"])
        .args(["--x1", &path("x1.f32"), "--y1", &path("y1.f32")])
        .args(["--x3", &path("x3.f32"), "--y3", &path("y3.f32")])
        .args(["--png", &path("uniform.png")])
        .output()
        .expect("run the Python client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("ok: "),
        "the Triton client failed:\n{stdout}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.log_text()
    );
    let (code, log) = server.stop();
    assert_eq!(code, Some(0), "exit status after SIGTERM; log:\n{log}");
    assert!(
        !log.contains("panicked"),
        "a panic in the server log:\n{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
