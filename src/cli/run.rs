//! `aotune run`: the CPU reference executor on a compiled model.

use super::model_args::ModelArgs;
use anyhow::{bail, Context};
use aotune_compiler::reference::{run_planned, run_traced, Accumulate, RunOptions};
use clap::Args;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Input tensor: raw little-endian f32 in the ONNX input's layout (NCHW).
    /// Without it, a deterministic pseudo-random input is used.
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Where to write the output tensor (raw little-endian f32).
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Accumulate every reduction in f64 instead of f32.
    #[arg(long)]
    pub f64: bool,
    /// How many runs to time (the first is reported separately as warm-up).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
}

/// When the output holds NaN or infinity: runs the graph once more keeping
/// every node's output and names the first node whose output is not finite,
/// with the largest magnitude of each of its inputs.
pub(super) fn report_first_non_finite(
    graph: &aotune_compiler::ir::Graph,
    input: &[f32],
    options: &RunOptions,
) -> anyhow::Result<()> {
    let trace = run_traced(graph, &[input], options)?;
    let max_abs = |v: &[f32]| v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let Some(i) = trace.iter().position(|v| v.iter().any(|x| !x.is_finite())) else {
        return Ok(());
    };
    let node = &graph.nodes[i];
    let produced: std::collections::HashMap<_, _> = graph
        .nodes
        .iter()
        .enumerate()
        .map(|(k, n)| (n.output, k))
        .collect();
    println!(
        "first non-finite value: node {i} '{}' ({} {}), output {:?}",
        node.name,
        node.op.kind(),
        node.op.attrs(),
        graph.value(node.output).shape
    );
    for &v in &node.inputs {
        let value = graph.value(v);
        let data = match produced.get(&v) {
            Some(&k) => Some(trace[k].as_slice()),
            None => value.constant_data().map(|d| d.as_slice()),
        };
        let magnitude = data.map_or("graph input".to_string(), |d| {
            format!("max |x| {:.4e}", max_abs(d))
        });
        println!(
            "  input '{}' {:?} {:?}: {magnitude}",
            value.name, value.shape, value.dtype
        );
    }
    Ok(())
}

fn read_input(
    path: &PathBuf,
    want: usize,
    shape: &[usize],
    name: &str,
) -> anyhow::Result<Vec<f32>> {
    let bytes =
        std::fs::read(path).with_context(|| format!("reading input '{}'", path.display()))?;
    if bytes.len() != want * 4 {
        bail!(
            "input '{}' holds {} bytes; model input '{name}' {shape:?} needs {} f32 values ({} bytes)",
            path.display(),
            bytes.len(),
            want,
            want * 4
        );
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let compiled = args.model.compile()?;
    let graph = &compiled.graph;
    if graph.inputs.len() != 1 {
        bail!(
            "`aotune run` feeds one input; this model has {} ({})",
            graph.inputs.len(),
            graph
                .inputs
                .iter()
                .map(|&i| graph.value(i).name.clone())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let input_value = graph.value(graph.inputs[0]);
    let n = input_value.numel();
    let input = match &args.input {
        Some(path) => read_input(path, n, &input_value.shape, &input_value.name)?,
        None => {
            eprintln!(
                "no --input given: using a deterministic pseudo-random input {:?}",
                input_value.shape
            );
            aotune_compiler::zoo::fill(0x1234_5678, 0.0, 1.0, n)
        }
    };
    let options = RunOptions {
        accumulate: if args.f64 {
            Accumulate::F64
        } else {
            Accumulate::F32
        },
        ..RunOptions::default()
    };
    let mut times = Vec::new();
    let mut outputs = Vec::new();
    for _ in 0..args.runs.max(1) {
        let start = Instant::now();
        outputs = run_planned(graph, &compiled.plan, &[&input], &options)?;
        times.push(start.elapsed().as_secs_f64());
    }
    let output = &outputs[0];
    let out_value = graph.value(graph.outputs[0]);
    println!(
        "model {}  batch {}  precision {}  (CPU reference, {} nodes, arena {:.1} MiB)",
        args.model.model.display(),
        input_value.shape.first().copied().unwrap_or(1),
        graph.precision,
        graph.nodes.len(),
        compiled.plan.arena_bytes as f64 / (1 << 20) as f64
    );
    println!("output '{}' {:?}", out_value.name, out_value.shape);
    if out_value.shape.len() == 2 && out_value.shape[1] >= 5 {
        let cols = out_value.shape[1];
        for (row, chunk) in output.chunks(cols).enumerate().take(4) {
            let mut idx: Vec<usize> = (0..cols).collect();
            idx.sort_by(|&a, &b| chunk[b].total_cmp(&chunk[a]));
            let top: Vec<String> = idx[..5]
                .iter()
                .map(|&i| format!("{i}:{:.4}", chunk[i]))
                .collect();
            println!("  image {row}: top-5 {}", top.join("  "));
        }
    }
    let mut sorted = times[times.len().min(1)..].to_vec();
    if sorted.is_empty() {
        sorted = times.clone();
    }
    sorted.sort_by(f64::total_cmp);
    println!(
        "CPU reference time: first run {:.3} s, median of {} more {:.3} s",
        times[0],
        sorted.len(),
        sorted[sorted.len() / 2]
    );
    if output.iter().any(|x| !x.is_finite()) {
        report_first_non_finite(graph, &input, &options)?;
    }
    if let Some(path) = &args.output {
        let bytes: Vec<u8> = output.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(path, bytes)
            .with_context(|| format!("writing output '{}'", path.display()))?;
        eprintln!("wrote {} f32 values to {}", output.len(), path.display());
    }
    Ok(())
}
