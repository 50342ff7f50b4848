//! The `aotune` binary: its subcommands on a zoo model, and its errors.

use std::path::PathBuf;
use std::process::Command;

fn aotune(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_aotune"))
        .args(args)
        .output()
        .expect("run aotune");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("aotune-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn zoo_dump_and_run_on_resnet18() {
    let dir = scratch("zoo");
    let model = dir.join("r18.onnx");
    let model_s = model.to_str().unwrap();
    let (ok, _, err) = aotune(&["zoo", "resnet18", "-o", model_s]);
    assert!(ok, "{err}");

    let (ok, out, err) = aotune(&["dump", model_s, "--batch", "2", "--precision", "fp16"]);
    assert!(ok, "{err}");
    for section in ["# optimized graph", "# passes", "# tasks", "# memory plan"] {
        assert!(out.contains(section), "missing {section}");
    }
    assert!(out.contains("graph precision=fp16"));
    assert!(
        out.contains("f16[2,64,112,112] cl"),
        "NHWC fp16 activations at batch 2"
    );
    assert!(
        out.contains("fold_batch_norm: 20 BatchNormalization folded"),
        "{out}"
    );

    // A real input file and an output file.
    let input: Vec<u8> = aotune_spec::zoo::fill(3, 0.0, 1.0, 3 * 224 * 224)
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let input_path = dir.join("x.f32");
    std::fs::write(&input_path, &input).unwrap();
    let output_path = dir.join("y.f32");
    let (ok, out, err) = aotune(&[
        "run",
        model_s,
        "--input",
        input_path.to_str().unwrap(),
        "--output",
        output_path.to_str().unwrap(),
        "--runs",
        "1",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("output 'output' [1, 1000]"), "{out}");
    assert!(out.contains("top-5"), "{out}");
    assert_eq!(std::fs::metadata(&output_path).unwrap().len(), 4000);

    // The wrong input size is a message naming both sizes.
    std::fs::write(&input_path, &input[..4000]).unwrap();
    let (ok, _, err) = aotune(&["run", model_s, "--input", input_path.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.contains("holds 4000 bytes") && err.contains("602112 bytes"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");

    // A batch override on a static model… the zoo's batch is symbolic, so use 0.
    let (ok, _, err) = aotune(&["dump", model_s, "--batch", "0"]);
    assert!(!ok && err.contains("at least 1"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn errors_are_messages_not_panics() {
    let dir = scratch("errors");
    let bogus = dir.join("bogus.onnx");
    std::fs::write(&bogus, b"definitely not protobuf \xff\xff\xff").unwrap();
    for args in [
        vec!["dump", bogus.to_str().unwrap()],
        vec!["dump", "/no/such/model.onnx"],
        vec!["dump", bogus.to_str().unwrap(), "--precision", "fp8"],
        vec!["zoo", "resnet51", "-o", "x.onnx"],
    ] {
        let (ok, _, err) = aotune(&args);
        assert!(!ok, "{args:?} should fail");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!err.trim().is_empty());
    }
    let (ok, out, _) = aotune(&["--help"]);
    assert!(ok && out.contains("dump") && out.contains("run") && out.contains("zoo"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without a GPU, `tune` says where to run it; with a stale record log and
/// no `--resume`, it refuses to mix runs. Either way a message, no panic.
#[test]
fn tune_explains_what_it_needs() {
    let dir = scratch("tune");
    let log = dir.join("r.records.jsonl");
    std::fs::write(&log, "").unwrap();
    let best = dir.join("r.best.json");
    let (ok, _, err) = aotune(&[
        "tune",
        "/no/such/model.onnx",
        "--log",
        log.to_str().unwrap(),
        "--best",
        best.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("GPU") || err.contains("--resume"),
        "the message says what is missing: {err}"
    );
    let (ok, out, _) = aotune(&["tune", "--help"]);
    assert!(ok);
    for flag in [
        "--budget-minutes",
        "--trials-per-task",
        "--resume",
        "--log",
        "--best",
    ] {
        assert!(out.contains(flag), "help mentions {flag}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
