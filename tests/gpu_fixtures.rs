//! Real torchvision exports end to end on the GPU: each fixture refilled
//! with the fill rule, built at every precision and every batch it has a
//! case for, loaded, run, and compared with the ONNX Runtime output stored
//! beside it (rel. L2: fp32 ≤ 1e-5, tf32 ≤ 2e-3, fp16/bf16 ≤ 1e-2; same
//! top-1 for every image) and with the CPU emulation of the same optimized
//! graph (same tolerances).
//!
//! The fixtures come from `$AOTUNE_FIXTURE_PACK/<fixture>/` when that is set
//! (a copy of `../shared/fixtures/<fixture>/`: graph without weights,
//! `fill.json`, `meta.json`, inputs and outputs, about 4 MB in all; the
//! weights are refilled here), else from `../shared/fixtures`
//! (`$AOTUNE_SHARED`). `cargo test --test gpu_fixtures -- --ignored
//! pack_fixtures_for_gpu` writes such a pack to `$AOTUNE_FIXTURE_PACK` or
//! `target/gpu-fixture-pack`.

mod common;

use aotune_compiler::ir::Precision;
use aotune_compiler::reference::{rel_l2, run, RunOptions};
use aotune_compiler::{Build, Built};
use common::gpu::{self, Mode, TempDir};
use serde_json::Value as Json;
use std::path::{Path, PathBuf};
use std::time::Instant;

const FIXTURES: [&str; 11] = [
    "resnet50_seedstyle",
    "resnet50_dynamo",
    "resnet18_legacy",
    "tiny_vit_dynamo",
    "tiny_convnext_legacy",
    "vit_b_16_dynamo",
    "vit_b_16_legacy",
    "convnext_tiny_dynamo",
    "convnext_tiny_legacy",
    "swin_t_dynamo",
    "swin_t_legacy",
];

/// One build to check: a fixture case at one precision.
struct Case {
    fixture: &'static str,
    dir: PathBuf,
    onnx: PathBuf,
    precision: Precision,
    batch: usize,
    symbolic: bool,
    /// Built with `dense_cublaslt` (its Dense layers through cuBLASLt).
    cublaslt: bool,
    /// The case's record in `meta.json` (its input file or shape, its output).
    case: Json,
    meta: Json,
}

/// A build with its input, ONNX Runtime's output and the CPU emulation's.
struct Ready {
    built: Built,
    input: Vec<f32>,
    want: Vec<f32>,
    emulated: Vec<f32>,
}

struct Done {
    label: String,
    result: Result<Ready, String>,
}

/// Every case of `fixture` at every precision, or with `cublaslt` at the
/// 16-bit ones (the only ones cuBLASLt runs).
fn cases(fixture: &'static str, tmp: &Path, cublaslt: bool) -> Result<Vec<Case>, String> {
    let dir = gpu::fixture_dir(fixture)?;
    let meta: Json = serde_json::from_slice(
        &std::fs::read(dir.join("meta.json")).map_err(|e| format!("{fixture}/meta.json: {e}"))?,
    )
    .map_err(|e| format!("{fixture}/meta.json: {e}"))?;
    let onnx = tmp.join(format!("{fixture}.onnx"));
    std::fs::write(&onnx, common::fixture::refilled_model(&dir))
        .map_err(|e| format!("{}: {e}", onnx.display()))?;
    let symbolic = meta["input_shape"][0].is_string();
    let mut out = Vec::new();
    let precisions: &[Precision] = if cublaslt {
        &[Precision::Fp16, Precision::Bf16]
    } else {
        &Precision::ALL
    };
    for &precision in precisions {
        for case in meta["cases"].as_array().into_iter().flatten() {
            out.push(Case {
                fixture,
                dir: dir.clone(),
                onnx: onnx.clone(),
                precision,
                batch: case["batch"].as_u64().unwrap_or(1) as usize,
                symbolic,
                cublaslt,
                case: case.clone(),
                meta: meta.clone(),
            });
        }
    }
    Ok(out)
}

/// Worker side: build, and run the CPU emulation of the optimized graph.
fn build(case: &Case, tmp: &Path) -> Result<Ready, String> {
    let out_dir = tmp.join(format!(
        "{}_{}_b{}{}",
        case.fixture,
        case.precision,
        case.batch,
        if case.cublaslt { "_lt" } else { "" }
    ));
    let mut b = Build::new(&case.onnx)
        .precision(case.precision)
        .dense_cublaslt(case.cublaslt)
        .name(case.fixture)
        .out_dir(&out_dir);
    if case.symbolic {
        b = b.batch(case.batch);
    }
    let built = b
        .compile()
        .map_err(|e| format!("build: {e}"))?
        .into_iter()
        .next()
        .ok_or("the build returned nothing")?;
    let matmuls = built
        .spec
        .launches
        .iter()
        .filter(|l| l.matmul.is_some())
        .count();
    if case.cublaslt && matmuls == 0 {
        return Err("built with dense_cublaslt, yet no launch runs through cuBLASLt".into());
    }
    let input = common::fixture::case_input(&case.dir, &case.meta, &case.case);
    let output = case.case["output"]
        .as_str()
        .ok_or("a case without an `output` file")?;
    let want = common::read_f32(&case.dir.join(output));
    let emulated = run(&built.compiled.graph, &[&input], &RunOptions::default())
        .map_err(|e| format!("CPU emulation: {e}"))?
        .swap_remove(0);
    Ok(Ready {
        built,
        input,
        want,
        emulated,
    })
}

fn check(
    label: &str,
    precision: Precision,
    batch: usize,
    done: Ready,
    mode: Mode,
) -> Result<(), String> {
    let Ready {
        built,
        input,
        want,
        emulated,
    } = done;
    let Some(mut model) = gpu::load(&built.dir, mode)? else {
        println!(
            "{label} (dry run): CPU emulation vs ONNX Runtime rel. L2 {:.3e}",
            rel_l2(&emulated, &want)
        );
        gpu::discard_build(&built.dir);
        return Ok(());
    };
    let mut got = vec![f32::NAN; model.spec().outputs[0].elements()];
    if got.len() != want.len() {
        return Err(format!(
            "output has {} elements, ONNX Runtime's {}",
            got.len(),
            want.len()
        ));
    }
    model
        .infer(&input, &mut got)
        .map_err(|e| format!("infer: {e}"))?;
    let (tol, tol_ort) = (gpu::tolerance(precision), gpu::tolerance_vs_fp32(precision));
    let err_ort = rel_l2(&got, &want);
    let err_emu = rel_l2(&got, &emulated);
    let classes = want.len() / batch;
    let (gpu_top, ort_top) = (gpu::top1(&got, classes), gpu::top1(&want, classes));
    println!(
        "{label} on {}: rel. L2 vs ONNX Runtime {err_ort:.3e} (tolerance {tol_ort:e}), vs CPU emulation {err_emu:.3e} (tolerance {tol:e}); top-1 {}",
        model.device_name(),
        if gpu_top == ort_top { "same" } else { "DIFFERENT" }
    );
    let mut problems = Vec::new();
    if gpu::exceeds(err_ort, tol_ort) {
        problems.push(format!(
            "rel. L2 vs ONNX Runtime {err_ort:.3e} > {tol_ort:e}"
        ));
    }
    if gpu::exceeds(err_emu, tol) {
        problems.push(format!(
            "rel. L2 vs the CPU emulation {err_emu:.3e} > {tol:e}"
        ));
    }
    for (image, (g, w)) in gpu_top.iter().zip(&ort_top).enumerate() {
        if g != w {
            let row = &want[image * classes..(image + 1) * classes];
            problems.push(format!(
                "image {image}: top-1 {g} (ONNX Runtime logit {:.4}) vs ONNX Runtime's {w} (logit {:.4})",
                row[*g], row[*w]
            ));
        }
    }
    drop(model);
    gpu::discard_build(&built.dir);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

fn check_fixtures(test: &str, fixtures: &[&'static str]) {
    check_fixtures_with(test, fixtures, false);
}

/// [`check_fixtures`], the builds with `dense_cublaslt` when `cublaslt`.
fn check_fixtures_with(test: &str, fixtures: &[&'static str], cublaslt: bool) {
    let Some(mode) = gpu::mode_or_skip(test) else {
        return;
    };
    let started = Instant::now();
    let tmp = TempDir::new(&format!("gpu-fixtures-{test}"));
    let mut all = Vec::new();
    for &fixture in fixtures {
        match cases(fixture, tmp.path(), cublaslt) {
            Ok(c) => all.extend(c),
            Err(why) => {
                common::skip(test, &why);
                return;
            }
        }
    }
    assert!(
        !all.is_empty(),
        "{test}: the fixtures {fixtures:?} gave no case to check"
    );
    println!("{test}: {} builds, {} at a time", all.len(), gpu::jobs());
    let meta: Vec<(String, Precision, usize)> = all
        .iter()
        .map(|c| {
            (
                format!(
                    "{} {} batch {}{}",
                    c.fixture,
                    c.precision,
                    c.batch,
                    if c.cublaslt { " +cuBLASLt" } else { "" }
                ),
                c.precision,
                c.batch,
            )
        })
        .collect();
    let indexed: Vec<(usize, Case)> = all.into_iter().enumerate().collect();
    let mut failures = Vec::new();
    gpu::pipeline(
        indexed,
        |(i, case): (usize, Case)| {
            (
                i,
                Done {
                    label: meta[i].0.clone(),
                    result: gpu::catch(|| build(&case, tmp.path())),
                },
            )
        },
        |(i, done): (usize, Done)| {
            let (_, precision, batch) = &meta[i];
            let outcome = done
                .result
                .and_then(|d| check(&done.label, *precision, *batch, d, mode));
            if let Err(e) = outcome {
                eprintln!("FAIL {}: {e}", done.label);
                failures.push(format!("{}: {e}", done.label));
            }
        },
    );
    println!("{test}: {:.0} s", started.elapsed().as_secs_f64());
    assert!(
        failures.is_empty(),
        "{test}: {} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn resnet50_seedstyle_on_gpu_matches_onnx_runtime() {
    check_fixtures("resnet50_seedstyle", &["resnet50_seedstyle"]);
}

#[test]
fn resnet50_dynamo_on_gpu_matches_onnx_runtime() {
    check_fixtures("resnet50_dynamo", &["resnet50_dynamo"]);
}

#[test]
fn resnet18_legacy_on_gpu_matches_onnx_runtime() {
    check_fixtures("resnet18_legacy", &["resnet18_legacy"]);
}

#[test]
fn tiny_transformers_on_gpu_match_onnx_runtime() {
    check_fixtures(
        "tiny_transformers",
        &["tiny_vit_dynamo", "tiny_convnext_legacy"],
    );
}

#[test]
fn vit_b_16_on_gpu_matches_onnx_runtime() {
    check_fixtures("vit_b_16", &["vit_b_16_dynamo", "vit_b_16_legacy"]);
}

#[test]
fn convnext_tiny_on_gpu_matches_onnx_runtime() {
    check_fixtures(
        "convnext_tiny",
        &["convnext_tiny_dynamo", "convnext_tiny_legacy"],
    );
}

#[test]
fn swin_t_on_gpu_matches_onnx_runtime() {
    check_fixtures("swin_t", &["swin_t_dynamo", "swin_t_legacy"]);
}

/// The transformers with every eligible Dense layer run by cuBLASLt
/// (`--dense-cublaslt`; fp16 and bf16), against ONNX Runtime and the CPU
/// emulation like the kernel builds (cuBLASLt's GELU is the tanh
/// approximation: within the 16-bit tolerances).
#[test]
fn transformers_with_cublaslt_dense_match_onnx_runtime() {
    check_fixtures_with(
        "cublaslt_dense",
        &[
            "tiny_vit_dynamo",
            "vit_b_16_dynamo",
            "vit_b_16_legacy",
            "convnext_tiny_dynamo",
            "swin_t_legacy",
        ],
        true,
    );
}

/// Writes the fixtures' small files (graph without weights, fill rule,
/// meta, inputs, outputs) to `$AOTUNE_FIXTURE_PACK` or
/// `target/gpu-fixture-pack`, to carry to a GPU machine that lacks
/// `../shared`; there, point `AOTUNE_FIXTURE_PACK` at it.
#[test]
#[ignore = "writes a fixture pack for the GPU machine; run with --ignored"]
fn pack_fixtures_for_gpu() {
    let pack = std::env::var_os("AOTUNE_FIXTURE_PACK")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/gpu-fixture-pack")
        });
    let shared =
        common::shared_dir().expect("../shared (or AOTUNE_SHARED) is needed to write a pack");
    let mut bytes = 0u64;
    for fixture in FIXTURES {
        let from = shared.join("fixtures").join(fixture);
        if !from.is_dir() {
            continue; // committed in tests/fixtures, which travels with the tree
        }
        let to = pack.join(fixture);
        std::fs::create_dir_all(&to).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
        for file in gpu::fixture_files(&from) {
            let name = file.file_name().expect("a file name");
            let dest = to.join(name);
            let _ = std::fs::remove_file(&dest);
            bytes +=
                std::fs::copy(&file, &dest).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        }
    }
    println!(
        "wrote {} ({:.1} MB); on the GPU machine: AOTUNE_FIXTURE_PACK=<its path> target/ci/deps/gpu_fixtures-*",
        pack.display(),
        bytes as f64 / 1e6
    );
}
