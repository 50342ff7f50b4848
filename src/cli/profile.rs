//! The per-layer profile: each kernel's time, achieved TFLOP/s and GB/s
//! against the H200 ceilings measured here, so the gap to the floor shows.

use aotune_compiler::artifact::ModelSpec;
use aotune_compiler::ir::{NodeId, Precision};
use aotune_compiler::schedule::node_flops;
use aotune_compiler::Built;
use std::collections::HashMap;

/// Measured on our H200 (KINDS.md): bf16/fp16 dense GEMM ~790 TFLOP/s,
/// device copy ~4.3 TB/s. tf32 is half the 16-bit rate; strict fp32 is the
/// FFMA rate, ~67 TFLOP/s by the datasheet (not measured here).
pub fn compute_ceiling_tflops(p: Precision) -> f64 {
    match p {
        Precision::Fp16 | Precision::Bf16 => 790.0,
        Precision::Tf32 => 395.0,
        Precision::Fp32 => 67.0,
    }
}
pub const BANDWIDTH_GBS: f64 = 4300.0;

pub fn print_profile(built: &Built, spec: &ModelSpec, times_ms: &[f32]) {
    let graph = &built.compiled.graph;
    let by_name: HashMap<&str, NodeId> = graph
        .node_ids()
        .map(|id| (graph.node(id).name.as_str(), id))
        .collect();
    let ceiling = compute_ceiling_tflops(spec.precision);
    println!(
        "\n  per-layer profile (each kernel 10× back to back in a CUDA graph, per launch, median; ceilings {ceiling} TFLOP/s, {BANDWIDTH_GBS} GB/s)"
    );
    println!(
        "  {:>3}  {:<28} {:<14} {:>9} {:>9} {:>7} {:>9} {:>7} {:>6}",
        "#", "node", "op", "µs", "TFLOP/s", "%peak", "GB/s", "%bw", "floor%"
    );
    let (mut total, mut total_flops) = (0.0f64, 0u64);
    for (i, (launch, &ms)) in spec.launches.iter().zip(times_ms).enumerate() {
        let Some(&id) = by_name.get(&*launch.node) else {
            continue;
        };
        let node = graph.node(id);
        let flops = node_flops(graph, id);
        let bytes: u64 = node
            .inputs
            .iter()
            .chain(std::iter::once(&node.output))
            .map(|&v| graph.value(v).bytes() as u64)
            .sum();
        let secs = ms as f64 * 1e-3;
        let tflops = flops as f64 / secs / 1e12;
        let gbs = bytes as f64 / secs / 1e9;
        // The floor: the slower of compute and memory at the ceilings.
        let floor = (flops as f64 / (ceiling * 1e12)).max(bytes as f64 / (BANDWIDTH_GBS * 1e9));
        total += secs;
        total_flops += flops;
        println!(
            "  {:>3}  {:<28} {:<14} {:>9.2} {:>9.2} {:>6.1}% {:>9.0} {:>6.1}% {:>5.0}%",
            i,
            truncate(&launch.node, 28),
            if launch.matmul.is_some() {
                "Dense/cuBLASLt"
            } else {
                node.op.kind()
            },
            ms as f64 * 1e3,
            tflops,
            100.0 * tflops / ceiling,
            gbs,
            100.0 * gbs / BANDWIDTH_GBS,
            100.0 * floor / secs
        );
    }
    println!(
        "  sum of kernels {:.1} µs, {:.2} GFLOP, {:.1} TFLOP/s overall",
        total * 1e6,
        total_flops as f64 / 1e9,
        total_flops as f64 / total / 1e12
    );
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).collect::<String>() + "…"
    }
}
