//! Template sweeps through nvcc (no GPU needed): for every template, a few
//! shapes × a sample of its search space (plus the default) × precisions
//! (`common::template_cases`) are rendered through the same path
//! `generate_cuda` uses, batched into a few `.cu` files, and compiled with
//! `nvcc -cubin` for sm_90a with `-Xptxas -v`; every kernel must compile
//! without register spills. Without nvcc the tests skip
//! (`aotune_compiler::skip`; a failure under `AOTUNE_REQUIRE_GPU=1`). CI
//! runs them with the pinned wheels' nvcc (`make cuda-tools`).

mod common;

use aotune_compiler::codegen::cuda::source::Instance;
use aotune_compiler::codegen::cuda::test_support::{
    compile_all, compile_reports, node_instance, nvcc, sample,
};
use aotune_compiler::codegen::cuda::{
    candidate, conv, dense, depthwise_norm, matmul, ConvConfig, DenseConfig, DepthwiseNormConfig,
    KernelConfig, LinearConfig, MatmulConfig,
};
use aotune_compiler::ir::{NodeId, Op, Precision};
use common::template_cases::{
    conv_cases, dense_cases, early_trigger_variants, misc_cases, mma_coverage, norm_cases,
    pooled_cases, spread_variants, stem_head_cases, warp_specialized_variants,
};

fn conv_instances(precision: Precision, per_case: usize) -> Vec<Instance> {
    let mut out = Vec::new();
    for (label, graph) in conv_cases(precision)
        .into_iter()
        .chain(pooled_cases(precision))
    {
        let shape = conv::conv_shape(&graph, NodeId(0)).unwrap();
        let space = ConvConfig::search_space(&shape);
        assert!(!space.is_empty(), "{label}: empty search space");
        // Sample each template's part of the space.
        let mma: Vec<ConvConfig> = space
            .iter()
            .filter(|c| matches!(c, ConvConfig::Mma(_)))
            .copied()
            .collect();
        let wgmma: Vec<ConvConfig> = space
            .iter()
            .filter(|c| matches!(c, ConvConfig::Wgmma(w) if !w.swap_ab))
            .copied()
            .collect();
        let swapped: Vec<ConvConfig> = space
            .iter()
            .filter(|c| matches!(c, ConvConfig::Wgmma(w) if w.swap_ab))
            .copied()
            .collect();
        let other: Vec<ConvConfig> = space
            .iter()
            .filter(|c| !matches!(c, ConvConfig::Mma(_) | ConvConfig::Wgmma(_)))
            .copied()
            .collect();
        let mut configs = sample(&mma, per_case);
        configs.extend(sample(&wgmma, per_case));
        configs.extend(sample(&swapped, per_case));
        configs.extend(sample(&other, per_case));
        configs.extend(mma_coverage(&shape));
        configs.extend(early_trigger_variants(&space));
        configs.extend(spread_variants(&space));
        configs.push(ConvConfig::default_for(&shape));
        for (i, c) in configs.iter().enumerate() {
            if let Err(e) = c.validate(&shape) {
                panic!("{label}: sweep config {i} {c:?} is not in its space: {e}");
            }
            out.push(node_instance(
                &graph,
                Some(c),
                &format!("{label}{i}_{}", precision),
            ));
        }
    }
    out
}

/// The sweep's configs are all in their spaces: checked without nvcc, so
/// a sampler that strays (a variant a shape's space forbids) fails on every
/// machine, not only where the compile sweep runs.
#[test]
fn conv_sweep_configs_are_in_their_spaces() {
    for precision in Precision::ALL {
        assert!(!conv_instances(precision, 8).is_empty());
    }
}

#[test]
fn conv_templates_compile_without_spills() {
    let Some(nvcc) = nvcc::find_or_skip() else {
        return;
    };
    let mut instances = Vec::new();
    for precision in Precision::ALL {
        instances.extend(conv_instances(precision, 8));
    }
    let reports = compile_all(&nvcc, "conv_sweep", instances);
    let max = reports.iter().map(|r| r.registers).max().unwrap_or(0);
    println!(
        "{} conv kernels compiled, max {max} registers, no spills",
        reports.len()
    );
}

/// The normalizing depthwise kernel (`conv_depthwise_norm`): a sample of
/// each case's search space and its default, at every precision.
#[test]
fn depthwise_norm_template_compiles_without_spills() {
    let Some(nvcc) = nvcc::find_or_skip() else {
        return;
    };
    let mut instances = Vec::new();
    for precision in Precision::ALL {
        for (label, graph) in norm_cases(precision) {
            let shape = depthwise_norm::depthwise_norm_shape(&graph, NodeId(0)).unwrap();
            let mut configs = sample(&DepthwiseNormConfig::search_space(&shape), 6);
            configs.push(DepthwiseNormConfig::default_for(&shape));
            for (i, c) in configs.iter().enumerate() {
                instances.push(node_instance(
                    &graph,
                    Some(c),
                    &format!("{label}_{i}_{precision}"),
                ));
            }
        }
    }
    let reports = compile_all(&nvcc, "dwln_sweep", instances);
    let max = reports.iter().map(|r| r.registers).max().unwrap_or(0);
    println!(
        "{} normalizing depthwise kernels compiled, max {max} registers, no spills",
        reports.len()
    );
}

#[test]
fn dense_templates_compile_without_spills() {
    let Some(nvcc) = nvcc::find_or_skip() else {
        return;
    };
    let mut instances = Vec::new();
    for precision in Precision::ALL {
        for (label, graph) in dense_cases(precision) {
            let shape = dense::dense_shape(&graph, NodeId(0)).unwrap();
            let space = DenseConfig::search_space(&shape);
            let gemv: Vec<DenseConfig> = space
                .iter()
                .filter(|c| matches!(c, DenseConfig::Gemv(_)))
                .copied()
                .collect();
            let tiled: Vec<DenseConfig> = space
                .iter()
                .filter(|c| !matches!(c, DenseConfig::Gemv(_)))
                .copied()
                .collect();
            let mut configs = sample(&gemv, 4);
            configs.extend(sample(&tiled, 4));
            configs.push(DenseConfig::default_for(&shape));
            configs.extend(
                warp_specialized_variants(&shape)
                    .into_iter()
                    .map(DenseConfig::Wgmma),
            );
            for (i, c) in configs.iter().enumerate() {
                instances.push(node_instance(
                    &graph,
                    Some(c),
                    &format!("{label}_{i}_{precision}"),
                ));
            }
        }
    }
    compile_all(&nvcc, "dense_sweep", instances);
}

#[test]
fn memory_bound_templates_compile_without_spills() {
    let Some(nvcc) = nvcc::find_or_skip() else {
        return;
    };
    let mut instances = Vec::new();
    for precision in [Precision::Fp32, Precision::Fp16, Precision::Bf16] {
        for (label, graph) in misc_cases(precision) {
            let label = format!("{label}_{precision}");
            instances.push(node_instance::<LinearConfig>(&graph, None, &label));
            if matches!(graph.nodes[0].op, Op::Gemm { .. } | Op::MatMul) {
                let shape = matmul::matmul_shape(&graph, NodeId(0)).unwrap();
                for (i, c) in MatmulConfig::search_space(&shape).iter().enumerate() {
                    instances.push(node_instance(&graph, Some(c), &format!("{label}_{i}")));
                }
            } else {
                // The first and last config of the template's space.
                let space = candidate::task_candidates(&graph, NodeId(0)).unwrap();
                for (i, c) in sample(&space.configs, 2).iter().enumerate() {
                    instances.push(node_instance(&graph, Some(c), &format!("{label}_{i}")));
                }
            }
        }
    }
    compile_all(&nvcc, "misc_sweep", instances);
}

/// Calibration aid for the register estimates: ptxas's registers and spills
/// against `regs_estimate` over the SIMT (fp32) and MMA (fp16, tf32) spaces
/// of the first three conv cases with split-K ≤ 2 (every split-K factor for
/// MMA configs estimated at 200 registers or more), then per precision the
/// largest under-estimate. Slow (a few thousand kernels); set
/// `AOTUNE_CALIB_PRECISIONS=fp16,tf32` to run only some precisions.
#[test]
#[ignore]
fn register_estimates_vs_ptxas() {
    let Some(nvcc) = nvcc::find_or_skip() else {
        return;
    };
    // `AOTUNE_CALIB_KERNELS=wgmma` (or `mma`, `simt`) calibrates one template.
    let only = std::env::var("AOTUNE_CALIB_KERNELS").ok();
    let wanted = |kernel: &str| only.as_deref().is_none_or(|k| k == kernel);
    let precisions = match std::env::var("AOTUNE_CALIB_PRECISIONS") {
        Ok(list) => list.split(',').filter_map(|p| p.parse().ok()).collect(),
        Err(_) => Precision::ALL.to_vec(),
    };
    for precision in precisions {
        let cases = conv_cases(precision);
        let mut instances = Vec::new();
        let mut estimates = std::collections::HashMap::new();
        for (label, graph) in cases.iter().take(3) {
            let shape = conv::conv_shape(graph, NodeId(0)).unwrap();
            for (i, c) in ConvConfig::search_space(&shape).iter().enumerate() {
                let est = match c {
                    ConvConfig::Simt(s)
                        if wanted("simt") && s.split_k <= 2 && precision == Precision::Fp32 =>
                    {
                        s.regs_estimate(&shape)
                    }
                    // Deeper split-K only near the register limit.
                    ConvConfig::Mma(m)
                        if wanted("mma") && (m.split_k <= 2 || m.regs_estimate(&shape) >= 200) =>
                    {
                        m.regs_estimate(&shape)
                    }
                    ConvConfig::Wgmma(w) if wanted("wgmma") && w.split_k <= 2 => {
                        w.regs_estimate(&shape)
                    }
                    _ => continue,
                };
                let inst = node_instance(graph, Some(c), &format!("{label}{i}_{precision}"));
                estimates.insert(inst.symbol.clone(), est);
                instances.push(inst);
            }
        }
        let all = compile_reports(&nvcc, &format!("calib_{precision}"), instances);
        let mut worst: Option<(i64, String)> = None;
        for r in all {
            if let Some(&est) = estimates.get(&r.name) {
                println!(
                    "{:<60} est {:>3} ptxas {:>3} spill {}",
                    r.name, est, r.registers, r.spill_stores
                );
                let under = i64::from(r.registers) - est as i64;
                if worst.as_ref().is_none_or(|(w, _)| under > *w) {
                    worst = Some((under, r.name.clone()));
                }
            }
        }
        println!(
            "{precision}: {} kernels, largest under-estimate {worst:?}",
            estimates.len()
        );
    }
}

/// The conversion and global-pool templates over a sample of their search
/// spaces plus the default, at f32, f16 and bf16.
#[test]
fn stem_and_head_templates_compile_without_spills() {
    let Some(nvcc) = nvcc::find_or_skip() else {
        return;
    };
    let mut instances = Vec::new();
    for precision in [Precision::Fp32, Precision::Fp16, Precision::Bf16] {
        for (label, graph) in stem_head_cases(precision) {
            let label = format!("{label}_{precision}");
            let space = candidate::task_candidates(&graph, NodeId(0)).unwrap();
            assert!(
                ["pad", "convert", "s2d", "gpool"].contains(&space.family.as_str()),
                "{label}: {} kernel",
                space.family
            );
            let mut configs = sample(&space.configs, 6);
            configs.push(space.configs[space.default].clone());
            for (i, c) in configs.iter().enumerate() {
                instances.push(node_instance(&graph, Some(c), &format!("{label}_{i}")));
            }
        }
    }
    compile_all(&nvcc, "stem_head_sweep", instances);
}
