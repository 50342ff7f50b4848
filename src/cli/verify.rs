//! `aotune verify`: the GPU against the CPU reference on the same random
//! inputs — end to end, or per layer naming the first layer that disagrees.

use super::gpu_model;
use super::model_args::ModelArgs;
use anyhow::bail;
use aotune::runtime::{decode_slot, driver_present};
use aotune_spec::ir::Precision;
use aotune_spec::reference::{rel_l2, run, run_traced, RunOptions};
use clap::Args;
use std::collections::HashMap;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Compare every layer's output and name the first that disagrees.
    #[arg(long)]
    pub per_layer: bool,
    /// Seed of the random input.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Tuning log to build with.
    #[arg(long)]
    pub tuning: Option<PathBuf>,
}

/// DESIGN.md's tolerances (rel. L2 against the fp32 CPU reference).
pub fn tolerance(p: Precision) -> f64 {
    match p {
        Precision::Fp32 => 1e-5,
        Precision::Tf32 => 2e-3,
        Precision::Fp16 | Precision::Bf16 => 1e-2,
    }
}

pub fn verify(args: VerifyArgs) -> anyhow::Result<()> {
    if !driver_present() {
        bail!("no NVIDIA GPU driver on this machine: `verify` compares the GPU with the CPU reference and needs a GPU");
    }
    let mut gpu = gpu_model::load(&args.model, args.tuning.as_ref())?;
    let spec = gpu.model.spec().clone();
    let compiled = &gpu.built.compiled;
    let input = aotune_spec::zoo::fill(args.seed, 0.0, 1.0, spec.inputs[0].elements());
    let precision = spec.precision;
    let reference = run(&compiled.imported, &[&input], &RunOptions::default())?;
    let emulated = run(&compiled.graph, &[&input], &RunOptions::default())?;
    let mut output = vec![0.0f32; spec.outputs[0].elements()];
    gpu.model.infer(&input, &mut output)?;
    if output.iter().any(|x| !x.is_finite()) {
        bail!("the GPU output holds NaN or infinity");
    }
    let err_ref = rel_l2(&output, &reference[0]);
    let err_emu = rel_l2(&output, &emulated[0]);
    let tol = tolerance(precision);
    let classes = *spec.outputs[0].shape.last().unwrap_or(&1);
    let top1_same = output
        .chunks(classes)
        .zip(reference[0].chunks(classes))
        .all(|(a, b)| argmax(a) == argmax(b));
    println!(
        "{} batch {} {precision} on {}: rel. L2 vs fp32 reference {err_ref:.3e} (tolerance {tol:e}), vs CPU emulation of {precision} {err_emu:.3e}; top-1 {}",
        args.model.model.display(),
        spec.batch,
        gpu.model.device_name(),
        if top1_same { "same" } else { "DIFFERENT" }
    );
    if args.per_layer {
        let traced = run_traced(&compiled.graph, &[&input], &RunOptions::default())?;
        let node_of_output: HashMap<&str, usize> = compiled
            .graph
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (compiled.graph.value(n.output).name.as_str(), i))
            .collect();
        let mut first_bad = None;
        let layer_tol = tol.max(1e-5);
        gpu.model.run_layers(&input, |i, slot, bytes| {
            let got = decode_slot(slot, bytes);
            let Some(&node) = node_of_output.get(&*slot.name) else {
                return true;
            };
            let err = rel_l2(&got, &traced[node]);
            println!("  {i:>3} {:<32} {:>10.3e}", spec.launches[i].node, err);
            if (err > layer_tol || !err.is_finite()) && first_bad.is_none() {
                first_bad = Some((i, spec.launches[i].node.to_string(), err));
            }
            true
        })?;
        if let Some((i, node, err)) = first_bad {
            bail!("first layer that disagrees with the CPU emulation: launch {i}, node '{node}' (rel. L2 {err:.3e} > {layer_tol:e})");
        }
        println!("  every layer within {layer_tol:e} of the CPU emulation");
    }
    if err_ref > tol || !top1_same {
        bail!("GPU output differs from the reference beyond {tol:e} (or top-1 differs)");
    }
    Ok(())
}

fn argmax(row: &[f32]) -> usize {
    row.iter()
        .enumerate()
        .fold(
            (0, f32::NEG_INFINITY),
            |b, (i, &x)| if x > b.1 { (i, x) } else { b },
        )
        .0
}
