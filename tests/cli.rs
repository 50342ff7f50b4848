//! The `aotune` binary: its subcommands on a zoo model, and its errors.

mod common;

use std::path::{Path, PathBuf};
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

/// `aotune zoo resnet18` into `dir`; the model's path.
fn zoo_resnet18(dir: &Path) -> String {
    let model = dir.join("r18.onnx");
    let model_s = model.to_str().unwrap().to_string();
    let (ok, _, err) = aotune(&["zoo", "resnet18", "-o", &model_s]);
    assert!(ok, "{err}");
    model_s
}

#[test]
fn zoo_dump_and_run_on_resnet18() {
    let dir = scratch("zoo");
    let model_s = &zoo_resnet18(&dir);

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
    let input: Vec<u8> = aotune_compiler::zoo::fill(3, 0.0, 1.0, 3 * 224 * 224)
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

/// Fixture `name` (tests/fixtures) refilled into `dir` as an ONNX file.
fn refilled_fixture(dir: &Path, name: &str) -> PathBuf {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let model = dir.join(format!("{name}.onnx"));
    std::fs::write(&model, common::fixture::refilled_model(&fixture)).unwrap();
    model
}

/// `aotune dump MODEL --precision fp16 --section passes EXTRA…`, which must succeed.
fn fp16_passes(model: &str, extra: &[&str]) -> String {
    let mut args = vec!["dump", model, "--precision", "fp16", "--section", "passes"];
    args.extend_from_slice(extra);
    let (ok, out, err) = aotune(&args);
    assert!(ok, "{err}");
    out
}

/// `--fuse-depthwise-norm` (off by default) joins the tiny ConvNeXt's
/// LayerNorms over channels to their depthwise convs.
#[test]
fn depthwise_norm_fusion_is_opt_in() {
    let dir = scratch("dwnorm");
    let model = refilled_fixture(&dir, "tiny_convnext_legacy");
    let model_s = model.to_str().unwrap();
    let dump = |extra: &[&str]| fp16_passes(model_s, extra);
    let plain = dump(&[]);
    assert!(!plain.contains("fuse_conv_layer_norm"), "{plain}");
    let fused = dump(&["--fuse-depthwise-norm"]);
    assert!(
        fused.contains("fuse_conv_layer_norm:")
            && fused.contains("LayerNormalization fused into a depthwise conv"),
        "{fused}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--fuse-dense-norm` (off by default) folds the tiny ViT's block
/// LayerNorms (17 tokens, just the fewest rows a norm-carrying Dense takes)
/// into the Dense layers that read them.
#[test]
fn dense_norm_fusion_is_opt_in() {
    let dir = scratch("dnorm");
    let model = refilled_fixture(&dir, "tiny_vit_dynamo");
    let model_s = model.to_str().unwrap();
    let dump = |extra: &[&str]| fp16_passes(model_s, extra);
    let plain = dump(&[]);
    assert!(!plain.contains("fuse_dense_layer_norm"), "{plain}");
    let fused = dump(&["--fuse-dense-norm"]);
    assert!(
        fused.contains("fuse_dense_layer_norm: 4 LayerNormalization folded into its Dense readers"),
        "{fused}"
    );
    // `build` takes the flag too: four launches fewer.
    let launches = |extra: &[&str]| {
        let out_dir = dir.join(format!("build{}", extra.len()));
        let mut args = vec![
            "build",
            model_s,
            "--precision",
            "fp16",
            "--no-nvcc",
            "--out",
            out_dir.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let (ok, out, err) = aotune(&args);
        assert!(ok, "{err}");
        let count = out
            .split(" launches")
            .next()
            .and_then(|s| s.rsplit(' ').next());
        count.and_then(|n| n.parse::<usize>().ok()).expect(&out)
    };
    assert_eq!(launches(&[]), launches(&["--fuse-dense-norm"]) + 4);
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

/// `prune` keeps the records of the model's tasks at the builds named by
/// `--for`, drops the rest (after a `--dry-run` that changes nothing), and
/// says what is wrong with a bad `--for` or a missing log. No GPU needed.
#[test]
fn prune_drops_only_records_no_build_uses() {
    use aotune_compiler::schedule::BestLog;
    let dir = scratch("prune");
    let model_s = &zoo_resnet18(&dir);
    // A real task of the fp16 batch-1 build, from dump's task table.
    let (ok, out, err) = aotune(&["dump", model_s, "--precision", "fp16"]);
    assert!(ok, "{err}");
    let row = out
        .lines()
        .skip_while(|l| !l.starts_with("hash "))
        .find(|l| l.contains("MaxPool"))
        .expect("a MaxPool task in the table");
    let real = row.split_whitespace().next().unwrap().to_string();
    let record = |task: &str| {
        format!(
            r#"{{"task": "{task}", "op": "MaxPool", "key": "k", "template": "pool/1",
                "config": {{"block": 256, "per_thread": 1}}, "median_us": 7.0,
                "target": {{"gpu": "NVIDIA H200", "sm": "sm_90", "driver": "13.0", "cuda": "13.0"}}}}"#
        )
    };
    let best = dir.join("r18.best.json");
    let best_s = best.to_str().unwrap();
    let text = format!(
        r#"{{"format": "aotune-best/1", "records": [{}, {}]}}"#,
        record(&real),
        record("00000000deadbeef")
    );
    std::fs::write(&best, &text).unwrap();

    let prune = |extra: &[&str]| {
        let mut args = vec!["prune", model_s, "--best", best_s, "--for", "1:fp16"];
        args.extend_from_slice(extra);
        aotune(&args)
    };
    let (ok, out, err) = prune(&["--dry-run"]);
    assert!(ok, "{err}");
    assert!(out.contains("drop 00000000deadbeef (MaxPool"), "{out}");
    assert!(
        out.contains("1 of 2 records") && out.contains("dry run"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(&best).unwrap(),
        text,
        "dry run wrote"
    );

    let (ok, out, err) = prune(&[]);
    assert!(ok, "{err}");
    assert!(out.contains("wrote"), "{out}");
    let pruned = BestLog::read(&best).unwrap();
    assert_eq!(pruned.records.len(), 1);
    assert_eq!(pruned.records[0].task, real);
    let (ok, out, _) = prune(&[]);
    assert!(
        ok && out.contains("1 of 1 records") && out.contains("unchanged"),
        "{out}"
    );

    // The stem conversion of the f16-input build (a server's FP16 input) is
    // a task of its own; an fp16 build serves it too, so its record stays.
    let (ok, out, err) = aotune(&[
        "dump",
        model_s,
        "--precision",
        "fp16",
        "--input-dtype",
        "f16",
    ]);
    assert!(ok, "{err}");
    let stem = out
        .lines()
        .skip_while(|l| !l.starts_with("hash "))
        .find(|l| l.contains("in0=f16[1x3x224x224]"))
        .and_then(|l| l.split_whitespace().next())
        .expect("the f16 input's conversion task")
        .to_string();
    let with_stem = format!(
        r#"{{"format": "aotune-best/1", "records": [{}, {}]}}"#,
        record(&real),
        record(&stem)
    );
    std::fs::write(&best, &with_stem).unwrap();
    let (ok, out, _) = prune(&[]);
    assert!(
        ok && out.contains("2 of 2 records") && out.contains("unchanged"),
        "{out}"
    );

    // At batch 8 the task is another one: its record goes too.
    let (ok, out, _) = aotune(&[
        "prune",
        model_s,
        "--best",
        best_s,
        "--for",
        "8:fp16",
        "--dry-run",
    ]);
    assert!(ok && out.contains(&format!("drop {real}")), "{out}");

    for (args, says) in [
        (
            vec!["prune", model_s, "--best", best_s, "--for", "1"],
            "BATCH:PRECISION",
        ),
        (
            vec!["prune", model_s, "--best", best_s, "--for", "1:fp8"],
            "fp8",
        ),
        (
            vec![
                "prune",
                model_s,
                "--best",
                "/no/such.best.json",
                "--for",
                "1:fp16",
            ],
            "/no/such.best.json",
        ),
        (
            vec![
                "prune",
                "/no/such.onnx",
                "--best",
                best_s,
                "--for",
                "1:fp16",
            ],
            "/no/such.onnx",
        ),
    ] {
        let (ok, _, err) = aotune(&args);
        assert!(!ok, "{args:?} should fail");
        assert!(
            err.contains(says) && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
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
    // Forcing cuBLASLt leaves the Dense tasks nothing to tune: said, not run.
    let (ok, _, err) = aotune(&[
        "tune",
        "/no/such/model.onnx",
        "--dense-cublaslt",
        "--log",
        log.to_str().unwrap(),
        "--best",
        best.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(err.contains("--cublaslt-candidates"), "{err}");
    let (ok, out, _) = aotune(&["tune", "--help"]);
    assert!(ok);
    for flag in [
        "--budget-minutes",
        "--trials-per-task",
        "--fixed-cap",
        "--resume",
        "--log",
        "--best",
        "--compile-in",
        "--timing",
        "--cublaslt-candidates",
    ] {
        assert!(out.contains(flag), "help mentions {flag}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `refine` without a GPU says where to run it; on a GPU machine, a missing
/// `--best` log is named. Either way a message, no panic.
#[test]
fn refine_explains_what_it_needs() {
    let dir = scratch("refine");
    let best = dir.join("missing.best.json");
    let (ok, _, err) = aotune(&[
        "refine",
        "/no/such/model.onnx",
        "--log",
        dir.join("r.records.jsonl").to_str().unwrap(),
        "--best",
        best.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("GPU") || err.contains("missing.best.json"),
        "the message says what is missing: {err}"
    );
    let (ok, out, _) = aotune(&["refine", "--help"]);
    assert!(ok);
    for flag in ["--log", "--best", "--out", "--top", "--within", "--rounds"] {
        assert!(out.contains(flag), "help mentions {flag}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tune --compile-in processes`: a candidate compiled in an `aotune
/// nvrtc-compile` child gives the cubin and report the in-process compiler
/// gives, and its errors read the same; a child past its deadline is
/// killed, and one that cannot start or answers nothing is a compile
/// failure saying so. Skipped, saying why, without libnvrtc.
#[test]
fn candidates_compile_in_child_processes_as_on_threads() {
    use aotune::tune::compile_pool::{compile_all, CompileIn, Job};
    use aotune::tune::compile_process::compile_in_process;
    use aotune::tune::nvrtc::{setup, CompileFailure};
    use std::time::{Duration, Instant};
    let include = match setup() {
        Ok(i) => i,
        Err(e) => {
            eprintln!("skipping: {e}");
            return;
        }
    };
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_aotune"));
    let good = "#include <cuda_fp16.h>\n\
                extern \"C\" __global__ void k(__half* y) { y[threadIdx.x] = __float2half(2.0f); }\n";
    let bad = "extern \"C\" __global__ void k(float* y) { y[0] = undefined_name; }\n";
    let jobs = || {
        [good, bad]
            .iter()
            .enumerate()
            .map(|(tag, s)| Job {
                tag,
                name: format!("job{tag}.cu"),
                source: s.to_string(),
            })
            .collect::<Vec<_>>()
    };
    let run = |how: CompileIn| {
        let mut out = vec![None, None];
        compile_all(
            jobs(),
            2,
            Duration::from_secs(120),
            &include,
            &how,
            |t, r| out[t] = Some(r),
        );
        out.into_iter().map(Option::unwrap).collect::<Vec<_>>()
    };
    let threads = run(CompileIn::Threads);
    let processes = run(CompileIn::Processes(exe.clone()));
    let (a, b) = (
        threads[0].as_ref().expect("compiles on a thread"),
        processes[0].as_ref().expect("compiles in a process"),
    );
    assert_eq!(&b.image[..4], b"\x7fELF");
    assert_eq!(a.image, b.image, "the same cubin");
    assert_eq!(a.report, b.report);
    assert!(b.report.registers > 0);
    for r in [&threads[1], &processes[1]] {
        match r {
            Err(CompileFailure::Error(log)) => {
                assert!(log.contains("undefined_name"), "{log}");
                assert!(!log.contains("NVRTC: NVRTC"), "{log}");
            }
            other => panic!("expected a compile error, got {other:?}"),
        }
    }

    let start = Instant::now();
    let late = compile_in_process(&exe, good, "late.cu", &include, Duration::from_millis(1));
    assert_eq!(
        late.unwrap_err(),
        CompileFailure::Timeout(Duration::from_millis(1))
    );
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "killed, not waited for"
    );

    let missing = Path::new("/no/such/aotune");
    match compile_in_process(missing, good, "x.cu", &include, Duration::from_secs(60)) {
        Err(CompileFailure::Error(e)) => assert!(e.contains("cannot start"), "{e}"),
        other => panic!("{other:?}"),
    }
    // A binary that answers nothing (here `true`, which ignores its input).
    let mute = Path::new("/bin/true");
    if mute.exists() {
        match compile_in_process(mute, good, "x.cu", &include, Duration::from_secs(60)) {
            Err(CompileFailure::Error(e)) => assert!(e.contains("compiler process died"), "{e}"),
            other => panic!("{other:?}"),
        }
    }
}

/// The child's side of that protocol answers a request it cannot parse
/// with an error reply, not a panic.
#[test]
fn the_compiler_process_answers_a_bad_request_with_an_error() {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_aotune"))
        .arg("nvrtc-compile")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"not json\n__global__ void k() {}\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let reply: serde_json::Value =
        serde_json::from_str(text.lines().next().expect("a reply line")).unwrap();
    assert!(
        reply["error"]
            .as_str()
            .is_some_and(|e| e.contains("does not parse")),
        "{text}"
    );
    assert_eq!(reply["cubin_bytes"], 0);
}
