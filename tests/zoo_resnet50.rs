//! The zoo's ResNet-50 through the whole compiler: optimized vs imported
//! graph on the CPU reference, the memory plan's bound, the task table.

use aotune_compiler::ir::{Op, Precision};
use aotune_compiler::reference::{rel_l2, run, run_planned, Accumulate, RunOptions};
use aotune_compiler::zoo::{fill, resnet_onnx, ResNetDepth, DEFAULT_SEED};
use aotune_compiler::{compile_bytes, CompileOptions, Compiled};

fn compile(batch: usize, precision: Precision) -> Compiled {
    let model = resnet_onnx(ResNetDepth::R50, DEFAULT_SEED);
    let options = CompileOptions {
        batch: Some(batch),
        precision,
        channels_last: true,
        ..Default::default()
    };
    compile_bytes(&model, "zoo resnet50", &options).expect("compile zoo resnet50")
}

#[test]
fn optimized_graph_matches_imported_graph() {
    let compiled = compile(1, Precision::Fp32);
    let input = fill(7, 0.0, 1.0, 3 * 224 * 224);
    // The imported graph with f64 accumulation is the most accurate answer.
    let exact = run(
        &compiled.imported,
        &[&input],
        &RunOptions {
            accumulate: Accumulate::F64,
            ..RunOptions::default()
        },
    )
    .unwrap();
    let raw = run(&compiled.imported, &[&input], &RunOptions::default()).unwrap();
    let optimized = run_planned(
        &compiled.graph,
        &compiled.plan,
        &[&input],
        &RunOptions::default(),
    )
    .unwrap();
    let raw_err = rel_l2(&raw[0], &exact[0]);
    let opt_err = rel_l2(&optimized[0], &raw[0]);
    let opt_exact = rel_l2(&optimized[0], &exact[0]);
    println!("zoo resnet50: raw vs f64 {raw_err:.2e}, optimized vs raw {opt_err:.2e}, optimized vs f64 {opt_exact:.2e}");
    assert!(
        opt_err <= 1e-5,
        "optimized vs imported rel. L2 {opt_err:.3e}"
    );
    assert!(opt_exact <= 1e-5);
    let max_abs = optimized[0].iter().fold(0f32, |m, &x| m.max(x.abs()));
    assert!(
        max_abs > 0.0 && max_abs < 1e3,
        "logits out of range: {max_abs}"
    );
}

#[test]
fn fp16_and_bf16_storage_stay_close_to_fp32() {
    let input = fill(11, 0.0, 1.0, 3 * 224 * 224);
    let reference = {
        let c = compile(1, Precision::Fp32);
        run(&c.imported, &[&input], &RunOptions::default()).unwrap()
    };
    for (precision, tolerance) in [
        (Precision::Fp16, 1e-2),
        (Precision::Bf16, 5e-2),
        (Precision::Tf32, 2e-3),
    ] {
        let c = compile(1, precision);
        let got = run_planned(&c.graph, &c.plan, &[&input], &RunOptions::default()).unwrap();
        let err = rel_l2(&got[0], &reference[0]);
        println!("zoo resnet50 {precision}: rel. L2 vs fp32 {err:.3e}");
        assert!(err <= tolerance, "{precision}: {err:.3e} > {tolerance:e}");
        assert!(
            err > 0.0,
            "{precision} changed nothing: the precision pass did not apply"
        );
    }
}

#[test]
fn structure_plan_and_tasks() {
    let compiled = compile(1, Precision::Fp16);
    let g = &compiled.graph;
    let count = |f: &dyn Fn(&Op) -> bool| g.nodes.iter().filter(|n| f(&n.op)).count();
    // 53 convs: the 4 projection shortcuts join their blocks' last conv.
    assert_eq!(count(&|op| matches!(op, Op::FusedConv { .. })), 49);
    assert_eq!(
        count(&|op| matches!(op, Op::FusedConv { epilogue, .. } if epilogue.residual)),
        12
    );
    assert_eq!(
        count(&|op| matches!(op, Op::FusedConv { shortcut, .. } if shortcut.is_some())),
        4
    );
    assert_eq!(count(&|op| matches!(op, Op::Dense { .. })), 1);
    assert_eq!(
        count(&|op| matches!(
            op,
            Op::BatchNorm { .. } | Op::Conv(_) | Op::Binary(_) | Op::Unary(_)
        )),
        0
    );
    let plan = &compiled.plan;
    let ratio = plan.arena_bytes as f64 / plan.lower_bound as f64;
    println!(
        "zoo resnet50 b1 fp16: arena {} B, lower bound {} B, ratio {ratio:.4}; {} tasks for {} kernels",
        plan.arena_bytes,
        plan.lower_bound,
        compiled.tasks.len(),
        compiled.tasks.iter().map(|t| t.weight).sum::<usize>()
    );
    assert!(ratio <= 1.10, "arena {ratio:.3} × lower bound");
    for batch_precision in [(1, Precision::Fp32), (8, Precision::Fp16)] {
        let c = compile(batch_precision.0, batch_precision.1);
        let r = c.plan.arena_bytes as f64 / c.plan.lower_bound as f64;
        println!(
            "zoo resnet50 b{} {}: arena/lower bound {r:.4}",
            batch_precision.0, batch_precision.1
        );
        assert!(r <= 1.10);
    }
    // Distinct conv workloads of ResNet-50: the task weights add up to the launches.
    let launches: usize = compiled.tasks.iter().map(|t| t.weight).sum();
    assert!(compiled.tasks.len() < launches);
    assert!(compiled.tasks.iter().all(|t| t.weight >= 1 && t.flops > 0));
    let hashes: std::collections::BTreeSet<String> =
        compiled.tasks.iter().map(|t| t.key.hash_hex()).collect();
    assert_eq!(hashes.len(), compiled.tasks.len(), "task hashes collide");
}
