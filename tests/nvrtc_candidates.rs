//! Every kernel the tuner measures is compiled by NVRTC, which is stricter
//! than nvcc (no host code in JIT mode: a `constexpr` helper without
//! `__host__ __device__` compiles in the build and fails every candidate
//! of its task in `aotune tune`). Here the default config of every task of
//! the transformer-era fixtures and of a depthwise CNN, and the first and
//! last config of each depthwise and attention task, are rendered as the
//! tuner renders them and compiled with NVRTC. No GPU is needed; without
//! libnvrtc (no CUDA toolkit) it skips, saying why.

mod common;

use aotune::tune::compile_pool::{compile_all, CompileIn, Job};
use aotune_compiler::codegen::cuda::candidate::{render_candidate, task_candidates};
use aotune_compiler::ir::{NodeId, Precision};
use aotune_compiler::{compile_bytes, CompileOptions, Compiled};
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

/// The fixtures both tests walk, compiled at fp16 batch 1 as `aotune tune`
/// compiles them.
fn compiled_fixtures() -> Vec<(&'static str, Compiled)> {
    [
        "convnext_tiny_dynamo",
        "swin_t_dynamo",
        "tiny_vit_dynamo",
        "mobilenet_v3_large_dynamo",
    ]
    .into_iter()
    .map(|fixture| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(fixture);
        let model = common::fixture::refilled_model(&dir);
        let options = CompileOptions {
            batch: Some(1),
            precision: Precision::Fp16,
            channels_last: true,
            ..Default::default()
        };
        let compiled = compile_bytes(&model, fixture, &options).expect("compiles");
        (fixture, compiled)
    })
    .collect()
}

#[test]
fn every_task_of_the_transformer_fixtures_compiles_with_nvrtc() {
    let include = match aotune::tune::nvrtc::setup() {
        Ok(i) => i,
        Err(e) => {
            aotune_compiler::skip::here(&e.to_string());
            return;
        }
    };
    let mut seen = HashSet::new();
    let mut jobs = Vec::new();
    let mut names = Vec::new();
    for (fixture, compiled) in compiled_fixtures() {
        for task in &compiled.tasks {
            let node: NodeId = task.nodes[0];
            let space = task_candidates(&compiled.graph, node).expect("space");
            let op = &compiled.graph.node(node).op;
            let n = space.configs.len();
            let picks = [space.default, 0, n / 3, 2 * n / 3, n - 1];
            for i in picks {
                let kernel =
                    render_candidate(&compiled.graph, node, &space.configs[i]).expect("renders");
                if !seen.insert(kernel.source.clone()) {
                    continue;
                }
                names.push(format!(
                    "{fixture}: {} ({}) config {}",
                    kernel.symbol,
                    op.kind(),
                    space.configs[i]
                ));
                jobs.push(Job {
                    tag: jobs.len(),
                    name: format!("{}.cu", kernel.symbol),
                    source: kernel.source,
                });
            }
        }
    }
    let total = jobs.len();
    let mut failed = Vec::new();
    compile_all(
        jobs,
        std::thread::available_parallelism().map_or(2, |n| n.get()),
        Duration::from_secs(600),
        &include,
        &CompileIn::Threads,
        |tag, r| {
            if let Err(e) = r {
                failed.push(format!("{}: {e}", names[tag]));
            }
        },
    );
    assert!(
        failed.is_empty(),
        "{} of {total} kernels failed NVRTC:\n{}",
        failed.len(),
        failed.join("\n")
    );
    eprintln!("{total} kernels compiled with NVRTC");
}

/// The configs of every task's search space render (a config that fails
/// before compiling is a trial the tuner wastes): about 200 per task,
/// spread over the space. Needs no CUDA at all.
#[test]
fn configs_across_the_search_spaces_render() {
    let mut rendered = 0;
    for (fixture, compiled) in compiled_fixtures() {
        for task in &compiled.tasks {
            let node = task.nodes[0];
            let space = task_candidates(&compiled.graph, node).expect("space");
            // At most ~200 per task, spread over the space (the largest
            // spaces hold tens of thousands).
            let step = space.configs.len().div_ceil(200);
            for config in space.configs.iter().step_by(step) {
                if let Err(e) = render_candidate(&compiled.graph, node, config) {
                    panic!("{fixture}: config {config} of its space does not render: {e}");
                }
                rendered += 1;
            }
        }
    }
    eprintln!("{rendered} configs rendered");
}
