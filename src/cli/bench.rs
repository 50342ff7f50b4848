//! `aotune bench`: latency and throughput on the GPU (CUDA events, median and
//! p90 after warm-up), device memory; the CPU reference where there is no GPU.

use super::gpu_model;
use super::model_args::{LaunchArg, ModelArgs};
use aotune::runtime::driver_present;
use aotune_compiler::reference::{run_planned, RunOptions};
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Timed runs (after warm-up).
    #[arg(long, default_value_t = 200)]
    pub runs: usize,
    #[arg(long, default_value_t = 20)]
    pub warmup: usize,
    /// Also time every kernel on its own.
    #[arg(long)]
    pub per_layer: bool,
    /// Tuning log to build with (default: none, heuristic configs).
    #[arg(long)]
    pub tuning: Option<PathBuf>,
    /// Time the model compiled into this binary (ResNet-50, batch 1, fp16):
    /// no ONNX file and no nvcc needed.
    #[arg(long)]
    pub embedded: bool,
    /// Print one JSON line with the results as well.
    #[arg(long)]
    pub json: bool,
    /// How to launch the kernels: `pdl` and `plain` measure what
    /// programmatic dependent launches buy.
    #[arg(long, value_enum, default_value_t = LaunchArg::Auto)]
    pub launch: LaunchArg,
}

fn percentile(sorted: &[f32], p: f64) -> f32 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

pub fn bench(args: BenchArgs) -> anyhow::Result<()> {
    if !driver_present() {
        eprintln!("no NVIDIA GPU driver on this machine: timing the CPU reference instead");
        let compiled = args.model.compile()?;
        let n = compiled.graph.value(compiled.graph.inputs[0]).numel();
        let input = aotune_compiler::zoo::fill(1, 0.0, 1.0, n);
        let mut times = Vec::new();
        for _ in 0..args.runs.clamp(1, 5) {
            let t = std::time::Instant::now();
            run_planned(
                &compiled.graph,
                &compiled.plan,
                &[&input],
                &RunOptions::default(),
            )?;
            times.push(t.elapsed().as_secs_f32() * 1e3);
        }
        times.sort_by(f32::total_cmp);
        println!(
            "CPU reference: median {:.1} ms over {} runs",
            percentile(&times, 0.5),
            times.len()
        );
        return Ok(());
    }
    if args.embedded {
        let mut model = super::embedded::load()?;
        let mut ms = model.time_graph(args.warmup, args.runs)?;
        ms.sort_by(f32::total_cmp);
        let spec = model.spec();
        println!(
            "embedded {} batch {} {} on {}: GPU time median {:.4} ms, p90 {:.4} ms; {}",
            spec.name,
            spec.batch,
            spec.precision,
            model.device_name(),
            percentile(&ms, 0.5),
            percentile(&ms, 0.9),
            model.memory()?
        );
        return Ok(());
    }
    let options = aotune::runtime::LoadOptions {
        launch: args.launch.mode(),
        ..Default::default()
    };
    let mut gpu = gpu_model::load_with(&args.model, args.tuning.as_ref(), &options)?;
    let spec = gpu.model.spec().clone();
    let batch = spec.batch;
    let programmatic = args.launch.mode().programmatic(batch, spec.precision);
    let mut graph_ms = gpu.model.time_graph(args.warmup, args.runs)?;
    graph_ms.sort_by(f32::total_cmp);
    let input = aotune_compiler::zoo::fill(2, 0.0, 1.0, spec.inputs[0].elements());
    let mut host_ms = gpu
        .model
        .time_infer(&input, args.warmup.min(10), args.runs.min(100))?;
    host_ms.sort_by(f32::total_cmp);
    let memory = gpu.model.memory()?;
    let (median, p90) = (percentile(&graph_ms, 0.5), percentile(&graph_ms, 0.9));
    let host_median = percentile(&host_ms, 0.5);
    println!(
        "{}  batch {batch}  {}  on {} ({} kernels, {})",
        args.model.model.display(),
        spec.precision,
        gpu.model.device_name(),
        spec.launches.len(),
        if programmatic {
            "programmatic dependent launches"
        } else {
            "plain launches"
        }
    );
    println!(
        "  GPU time (CUDA graph, events): median {median:.4} ms  p90 {p90:.4} ms  ({} runs)",
        graph_ms.len()
    );
    println!("  host latency incl. copies:     median {host_median:.4} ms");
    println!(
        "  throughput: {:.0} images/s",
        batch as f64 / median as f64 * 1e3
    );
    println!("  {memory}");
    if args.per_layer {
        let times = gpu
            .model
            .time_layers(args.warmup.min(5), args.runs.min(50))?;
        super::profile::print_profile(&gpu.built, &spec, &times);
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "impl": "aotune", "model": args.model.model.display().to_string(), "precision": spec.precision.name(),
                "batch": batch, "median_ms": median, "p90_ms": p90, "host_median_ms": host_median,
                "images_per_s": batch as f64 / median as f64 * 1e3, "gpu": gpu.model.device_name(),
                "kernels": spec.launches.len(), "model_device_bytes": memory.device_bytes(),
                "pdl": programmatic,
                "tuning": args.tuning.as_ref().map(|p| p.display().to_string()),
            })
        );
    }
    Ok(())
}
