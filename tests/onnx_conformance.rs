//! ONNX's own operator conformance cases (`../shared/onnx-node-tests/`, or
//! the committed copy `tests/onnx-node-tests.tar.xz`) on
//! the CPU reference: every case whose op the importer accepts must match
//! the expected outputs; the rest are listed as skipped with the reason. The
//! cases that pass are pinned in `tests/onnx_conformance_passing.txt`.

mod common;

use aotune_compiler::onnx::{import_bytes, read_tensor_file, ImportError, ImportOptions};
use aotune_compiler::reference::{run, RunOptions};
use std::collections::BTreeSet;
use std::path::Path;

enum Outcome {
    Passed,
    Skipped(String),
    Failed(String),
}

fn run_case(dir: &Path) -> Outcome {
    let model = match std::fs::read(dir.join("model.onnx")) {
        Ok(b) => b,
        Err(e) => return Outcome::Failed(format!("cannot read model.onnx: {e}")),
    };
    let data = dir.join("test_data_set_0");
    let mut inputs = Vec::new();
    let mut constants = Vec::new();
    for i in 0.. {
        let path = data.join(format!("input_{i}.pb"));
        let Ok(bytes) = std::fs::read(&path) else {
            break;
        };
        match read_tensor_file(&bytes, &path.display().to_string()) {
            // Integer inputs (shapes, axes) are compile-time constants for aotune.
            Ok(t) if !t.is_float => constants.push(t.proto),
            Ok(t) => inputs.push(t),
            Err(e) => return Outcome::Skipped(format!("input {i}: {e}")),
        }
    }
    let mut expected = Vec::new();
    for i in 0.. {
        let path = data.join(format!("output_{i}.pb"));
        let Ok(bytes) = std::fs::read(&path) else {
            break;
        };
        match read_tensor_file(&bytes, &path.display().to_string()) {
            Ok(t) => expected.push(t),
            Err(e) => return Outcome::Skipped(format!("output {i}: {e}")),
        }
    }
    let import = |constants: &[_]| {
        let options = ImportOptions {
            batch: None,
            constant_inputs: constants.to_vec(),
        };
        import_bytes(&model, &dir.display().to_string(), &options)
    };
    let imported = match import(&constants) {
        // Float parameters fed as graph inputs (Clip's bounds, Resize's
        // scales, Pad's value) are compile-time constants for aotune, as
        // integer ones are: the case runs with them compiled in.
        Err(ImportError::UnsupportedAttribute { value, .. })
            if value.contains("runtime input") && inputs.len() > 1 =>
        {
            constants.extend(inputs.drain(1..).map(|t| t.proto));
            import(&constants)
        }
        other => other,
    };
    let imported = match imported {
        Ok(g) => g,
        // Ops, attributes and input declarations aotune refuses by design
        // (e.g. zero-sized dimensions) are skipped with the refusal.
        Err(
            e @ (ImportError::UnsupportedOp { .. }
            | ImportError::UnsupportedOps { .. }
            | ImportError::UnsupportedAttribute { .. }
            | ImportError::Unsupported { .. }
            | ImportError::BadInput { .. }),
        ) => return Outcome::Skipped(e.to_string()),
        Err(e) => return Outcome::Failed(format!("import: {e}")),
    };
    let graph = &imported.graph;
    if graph.outputs.len() != expected.len() {
        return Outcome::Skipped(format!(
            "model has {} outputs, test data {} (multi-output op variants are not supported)",
            graph.outputs.len(),
            expected.len()
        ));
    }
    let feeds: Vec<&[f32]> = inputs.iter().map(|t| t.values.as_slice()).collect();
    let got = match run(graph, &feeds, &RunOptions::default()) {
        Ok(o) => o,
        Err(e) => return Outcome::Failed(format!("run: {e}")),
    };
    for (k, (g, want)) in got.iter().zip(&expected).enumerate() {
        let shape = &graph.value(graph.outputs[k]).shape;
        if *shape != want.dims && !(want.dims.is_empty() && g.len() == 1) {
            return Outcome::Failed(format!(
                "output {k}: shape {shape:?}, expected {:?}",
                want.dims
            ));
        }
        for (i, (&a, &b)) in g.iter().zip(&want.values).enumerate() {
            // ONNX's backend test runner tolerances (rtol 1e-3, atol 1e-7):
            // some expected outputs are stored rounded to 4 decimals.
            let ok = (a - b).abs() <= 1e-7 + 1e-3 * b.abs() || (a.is_nan() && b.is_nan()) || a == b;
            if !ok {
                return Outcome::Failed(format!("output {k}[{i}] = {a}, expected {b}"));
            }
        }
    }
    Outcome::Passed
}

#[test]
fn onnx_node_conformance() {
    let root = node_tests_dir();
    let mut cases: Vec<_> = std::fs::read_dir(&root)
        .expect("onnx-node-tests")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("model.onnx").is_file())
        .collect();
    cases.sort();
    let (mut passed, mut skipped, mut failed) = (Vec::new(), Vec::new(), Vec::new());
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().to_string();
        match run_case(case) {
            Outcome::Passed => passed.push(name),
            Outcome::Skipped(why) => skipped.push((name, why)),
            Outcome::Failed(why) => failed.push((name, why)),
        }
    }
    for (name, why) in &skipped {
        println!("skipped {name}: {why}");
    }
    for (name, why) in &failed {
        println!("FAILED {name}: {why}");
    }
    println!(
        "ONNX node conformance: ran {}, passed {}, failed {}, skipped {}",
        passed.len() + failed.len(),
        passed.len(),
        failed.len(),
        skipped.len()
    );
    assert!(
        failed.is_empty(),
        "{} conformance cases failed (listed above)",
        failed.len()
    );
    check_pinned(&passed);
}

/// The ONNX node test cases: `../shared/onnx-node-tests` where it is, else
/// the committed copy `tests/onnx-node-tests.tar.xz` (the same 474 cases,
/// Apache-2.0, ONNX Project Contributors) unpacked into the target folder.
fn node_tests_dir() -> std::path::PathBuf {
    if let Some(shared) = common::shared_dir() {
        let dir = shared.join("onnx-node-tests");
        if dir.is_dir() {
            return dir;
        }
    }
    let archive = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/onnx-node-tests.tar.xz");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = out.join("onnx-node-tests");
    if !dir.join("test_abs/model.onnx").is_file() {
        let status = std::process::Command::new("tar")
            .arg("-xJf")
            .arg(&archive)
            .arg("-C")
            .arg(out)
            .status()
            .unwrap_or_else(|e| panic!("running tar to unpack {}: {e}", archive.display()));
        assert!(
            status.success(),
            "tar -xJf {} failed: {status}",
            archive.display()
        );
    }
    dir
}

/// The cases expected to pass, one name a line (`AOTUNE_BLESS=1` rewrites
/// it from a run). A pinned case that stops passing fails the test, and so
/// does a newly passing case until it is pinned.
const PINNED: &str = "tests/onnx_conformance_passing.txt";

fn check_pinned(passed: &[String]) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(PINNED);
    if std::env::var_os("AOTUNE_BLESS").is_some() {
        let mut text = passed.join("\n");
        text.push('\n');
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        println!("wrote {} cases to {PINNED}", passed.len());
        return;
    }
    let pinned_text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {PINNED}: {e}"));
    let pinned: BTreeSet<&str> = pinned_text.lines().filter(|l| !l.is_empty()).collect();
    let now: BTreeSet<&str> = passed.iter().map(String::as_str).collect();
    let lost: Vec<&&str> = pinned.difference(&now).collect();
    let gained: Vec<&&str> = now.difference(&pinned).collect();
    assert!(
        lost.is_empty(),
        "{} pinned conformance case(s) no longer pass: {lost:?}",
        lost.len()
    );
    assert!(
        gained.is_empty(),
        "{} case(s) pass that {PINNED} does not list: {gained:?} \
         (pin them with `AOTUNE_BLESS=1 cargo test --profile ci --test onnx_conformance`)",
        gained.len()
    );
    println!("all {} pinned cases pass", pinned.len());
}
