//! Real torchvision exports (`../shared/fixtures/`): refilled with the fill
//! rule, imported, optimized, planned and run on the CPU reference through
//! the planned arena, against the stored ONNX Runtime outputs.

mod common;

use aotune_compiler::ir::Precision;
use aotune_compiler::reference::{rel_l2, run, run_planned, RunOptions};
use aotune_compiler::{compile_bytes, CompileOptions};
use serde_json::Value as Json;

/// Runs every case of one fixture; returns (batch, rel. L2) per case.
fn check_fixture(
    name: &str,
    precision: Precision,
    tolerance: f64,
    raw_too: bool,
) -> Vec<(usize, f64)> {
    let Some(shared) = common::shared_dir() else {
        common::skip(name, "../shared/fixtures is not present");
        return Vec::new();
    };
    let dir = shared.join("fixtures").join(name);
    let meta: Json =
        serde_json::from_slice(&std::fs::read(dir.join("meta.json")).unwrap()).unwrap();
    let model = common::fixture::refilled_model(&dir);
    let symbolic = meta["input_shape"][0].is_string();
    let mut results = Vec::new();
    for case in meta["cases"].as_array().unwrap() {
        let batch = case["batch"].as_u64().unwrap() as usize;
        let options = CompileOptions {
            batch: symbolic.then_some(batch),
            precision,
            channels_last: true,
        };
        let compiled = compile_bytes(&model, name, &options)
            .unwrap_or_else(|e| panic!("{name} b{batch}: {e}"));
        let input = common::read_f32(&dir.join(case["input"].as_str().unwrap()));
        let want = common::read_f32(&dir.join(case["output"].as_str().unwrap()));
        let got = run_planned(
            &compiled.graph,
            &compiled.plan,
            &[&input],
            &RunOptions::default(),
        )
        .unwrap();
        let err = rel_l2(&got[0], &want);
        println!(
            "{name} batch {batch} {precision}: rel. L2 {err:.3e} (arena {} B, lower bound {} B)",
            compiled.plan.arena_bytes, compiled.plan.lower_bound
        );
        assert!(
            err <= tolerance,
            "{name} batch {batch} {precision}: rel. L2 {err:.3e} > {tolerance:e}"
        );
        let classes = want.len() / batch;
        for b in 0..batch {
            let row = b * classes..(b + 1) * classes;
            assert_eq!(
                common::argmax(&got[0][row.clone()]),
                common::argmax(&want[row]),
                "{name} batch {batch} image {b}: top-1 differs"
            );
        }
        if raw_too {
            let raw = run(&compiled.imported, &[&input], &RunOptions::default()).unwrap();
            let raw_err = rel_l2(&raw[0], &want);
            println!("{name} batch {batch}: imported graph (unoptimized) rel. L2 {raw_err:.3e}");
            assert!(raw_err <= tolerance);
        }
        results.push((batch, err));
    }
    results
}

#[test]
fn resnet50_seedstyle_matches_onnx_runtime() {
    check_fixture("resnet50_seedstyle", Precision::Fp32, 1e-4, true);
}

#[test]
fn resnet50_dynamo_matches_onnx_runtime() {
    check_fixture("resnet50_dynamo", Precision::Fp32, 1e-4, false);
}

#[test]
fn resnet18_legacy_matches_onnx_runtime() {
    check_fixture("resnet18_legacy", Precision::Fp32, 1e-4, true);
}

#[test]
fn resnet50_seedstyle_fp16_storage_stays_close() {
    // f16 storage of activations and weights (f32 accumulation), emulated on
    // the CPU: the bar the GPU's fp16 path must meet.
    check_fixture("resnet50_seedstyle", Precision::Fp16, 1e-2, false);
}
