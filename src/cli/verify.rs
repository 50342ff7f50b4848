//! `aotune verify`: the GPU against the CPU reference on the same random
//! inputs — end to end, or per layer naming the first layer that disagrees.

use super::gpu_model;
use super::model_args::{LaunchArg, ModelArgs};
use anyhow::bail;
use aotune::runtime::{decode_slot, driver_present};
use aotune_compiler::ir::Precision;
use aotune_compiler::reference::{rel_l2, run, run_traced, RunOptions};
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
    /// How to launch the kernels, as in `aotune bench --launch`.
    #[arg(long, value_enum, default_value_t = LaunchArg::Auto)]
    pub launch: LaunchArg,
}

/// DESIGN.md's tolerances (rel. L2 against the fp32 CPU reference).
pub fn tolerance(p: Precision) -> f64 {
    p.tolerance_vs_fp32()
}

pub fn verify(args: VerifyArgs) -> anyhow::Result<()> {
    if !driver_present() {
        bail!("no NVIDIA GPU driver on this machine: `verify` compares the GPU with the CPU reference and needs a GPU");
    }
    let options = aotune::runtime::LoadOptions {
        launch: args.launch.mode(),
        ..Default::default()
    };
    let mut gpu = gpu_model::load_with(&args.model, args.tuning.as_ref(), &options)?;
    let spec = gpu.model.spec().clone();
    let compiled = &gpu.built.compiled;
    let input = aotune_compiler::zoo::fill(args.seed, 0.0, 1.0, spec.inputs[0].elements());
    let precision = spec.precision;
    let reference = run(&compiled.imported, &[&input], &RunOptions::default())?;
    let emulated = run(&compiled.graph, &[&input], &RunOptions::default())?;
    let mut output = vec![0.0f32; spec.outputs[0].elements()];
    gpu.model.infer(&input, &mut output)?;
    if emulated[0].iter().any(|x| !x.is_finite()) {
        super::run::report_first_non_finite(&compiled.graph, &input, &RunOptions::default())?;
        bail!(
            "the CPU emulation of {precision} already gives NaN or infinity (first node above): \
             the model's values leave {precision}'s range; try --precision fp32 or bf16"
        );
    }
    if output.iter().any(|x| !x.is_finite()) {
        bail!(
            "the GPU output holds NaN or infinity while the CPU emulation of {precision} is \
             finite; --per-layer names the first layer that differs"
        );
    }
    let err_ref = rel_l2(&output, &reference[0]);
    let err_emu = rel_l2(&output, &emulated[0]);
    let tol = tolerance(precision);
    let classes = *spec.outputs[0].shape.last().unwrap_or(&1);
    let top1 = compare_top1(&output, &reference[0], classes, tolerance(precision));
    let top1_same = top1.flips == 0;
    println!(
        "{} batch {} {precision} on {}: rel. L2 vs fp32 reference {err_ref:.3e} (tolerance {tol:e}), vs CPU emulation of {precision} {err_emu:.3e}; top-1 {}",
        args.model.model.display(),
        spec.batch,
        gpu.model.device_name(),
        top1.describe()
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

/// How the GPU's top-1 classes compare with the fp32 reference's, image by
/// image. An image whose logits are within the tolerance (rel. L2) and
/// whose two candidates are closer in the reference than twice its largest
/// logit error is a near tie (reduced precision may pick either); any other
/// disagreement is a flip.
struct Top1 {
    images: usize,
    near_ties: usize,
    flips: usize,
}

impl Top1 {
    fn describe(&self) -> String {
        match (self.near_ties, self.flips) {
            (0, 0) => "same".to_string(),
            (t, 0) => format!(
                "same except {t} of {} images at a near tie (reference gap within the logit error)",
                self.images
            ),
            (t, f) => format!(
                "DIFFERENT on {f} of {} images ({t} more at a near tie)",
                self.images
            ),
        }
    }
}

fn compare_top1(output: &[f32], reference: &[f32], classes: usize, tol: f64) -> Top1 {
    let mut top1 = Top1 {
        images: 0,
        near_ties: 0,
        flips: 0,
    };
    for (got, want) in output.chunks(classes).zip(reference.chunks(classes)) {
        top1.images += 1;
        let (g, w) = (argmax(got), argmax(want));
        if g == w {
            continue;
        }
        let gap = want[w] - want[g];
        let error = got
            .iter()
            .zip(want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        if gap <= 2.0 * error && rel_l2(got, want) <= tol {
            top1.near_ties += 1;
        } else {
            top1.flips += 1;
        }
    }
    top1
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_near_tie_is_not_a_flip() {
        // Image 0 agrees; image 1 picks class 2 where the reference has 0
        // ahead by 0.001 with errors of 0.01 (a near tie); image 2 picks
        // class 1 where the reference has 0 ahead by 1.0 (a flip).
        let reference = [3.0, 1.0, 0.0, 2.000, 0.0, 1.999, 2.0, 1.0, 0.0];
        let output = [3.0, 1.0, 0.0, 1.995, 0.0, 2.005, 1.0, 2.0, 0.0];
        let t = compare_top1(&output, &reference, 3, 1e-2);
        assert_eq!((t.images, t.near_ties, t.flips), (3, 1, 1));
        assert!(t.describe().starts_with("DIFFERENT on 1 of 3 images"));
        let same = compare_top1(&reference, &reference, 3, 1e-2);
        assert_eq!(same.describe(), "same");
    }
}
