//! GPU differential tests: generated kernels against the CPU reference
//! (`reference::run`), on the machine's first GPU, through the runtime
//! (`common::kernels`: the module loads with `Model::load`, launches run
//! with `Model::run_layers`). Every template over the sweep shapes
//! (`common::template_cases`) × a sample of its configs × precisions, each
//! config one launch of a one-node module whose output is poisoned first;
//! then zoo ResNet-50 layer by layer; then (ignored) timings.
//!
//! Without an NVIDIA driver or nvcc the tests skip (`common::gpu::mode_or_skip`;
//! a failure under `AOTUNE_REQUIRE_GPU=1`). `AOTUNE_GPU_TESTS_DRY_RUN=1`
//! without a driver compiles every module with nvcc, runs the CPU
//! references, and checks that the loads fail with `NoDriver`. On the GPU
//! machine: `bash bench/device_check.sh tests`, or
//! `cargo test --profile ci --test gpu_templates -- --nocapture --test-threads=1`.
//!
//! Tolerances: relative L2 against the CPU emulation of the same precision
//! (`Precision::tolerance_vs_emulation`), twice that per layer.

mod common;

use aotune::runtime::decode_slot;
use aotune_compiler::artifact::TensorSlot;
use aotune_compiler::build::pack_weights;
use aotune_compiler::codegen::cuda::assemble::assemble;
use aotune_compiler::codegen::cuda::source::Instance;
use aotune_compiler::codegen::cuda::test_support::{node_instance, nvcc, sample};
use aotune_compiler::codegen::cuda::{
    candidate, conv, dense, generate_cuda, matmul, space_to_depth, ConfigOverrides, ConvConfig,
    CudaModule, DenseConfig, KernelConfig, KernelLaunch, LinearConfig, MatmulConfig,
    SpaceToDepthConfig,
};
use aotune_compiler::ir::{DType, Graph, Layout, NodeId, Op, Precision, Value, ValueId, ValueKind};
use aotune_compiler::plan::{plan_memory, MemoryPlan};
use aotune_compiler::reference::{rel_l2, run, run_traced, RunOptions};
use aotune_compiler::test_graphs::values;
use aotune_compiler::zoo::{resnet_onnx, ResNetDepth};
use aotune_compiler::{compile_bytes, CompileOptions, Compiled};
use common::gpu::{self, Mode};
use common::kernels;
use common::template_cases::{
    conv_cases, dense_cases, misc_cases, mma_coverage, pooled_cases, spread_variants,
    stem_head_cases, warp_specialized_variants,
};

/// Against the CPU emulation of the same precision.
fn tolerance(p: Precision) -> f64 {
    p.tolerance_vs_emulation()
}

/// Deterministic inputs for every graph input, logical row-major.
fn inputs(graph: &Graph) -> Vec<Vec<f32>> {
    graph
        .inputs
        .iter()
        .enumerate()
        .map(|(i, &v)| values(graph.value(v).numel(), 100 + i as u64))
        .collect()
}

/// Zoo ResNet-50 (seed 0) compiled at `batch` and `precision`.
fn compiled(batch: usize, precision: Precision) -> Compiled {
    let bytes = resnet_onnx(ResNetDepth::R50, 0);
    compile_bytes(
        &bytes,
        "resnet.onnx",
        &CompileOptions {
            batch: Some(batch),
            precision,
            channels_last: true,
            ..Default::default()
        },
    )
    .unwrap()
}

/// The configs each single-op case is run with.
fn configs(graph: &Graph, label: &str, per_template: usize) -> Vec<Instance> {
    let node = graph.node(NodeId(0));
    let mut out = vec![node_instance::<LinearConfig>(
        graph,
        None,
        &format!("{label}_d"),
    )];
    let mut add = |values: Vec<serde_json::Value>| {
        for (i, v) in values.iter().enumerate() {
            out.push(node_instance(graph, Some(v), &format!("{label}_{i}")));
        }
    };
    let json = |v: &dyn erased::Json| v.json();
    match &node.op {
        Op::FusedConv { .. } => {
            let shape = conv::conv_shape(graph, NodeId(0)).unwrap();
            let space = ConvConfig::search_space(&shape);
            // The reduce-scatter at each split-K factor the shape allows.
            let spreads = spread_variants(&space);
            let (mma, other): (Vec<_>, Vec<_>) = space
                .into_iter()
                .partition(|c| matches!(c, ConvConfig::Mma(_)));
            let mut picked = sample(&mma, per_template);
            picked.extend(sample(&other, per_template));
            // Always some split-K, and every path of the tensor-core
            // template: both epilogues (with split-K), multi-pass staging,
            // the largest tile, both k steps.
            picked.extend(
                mma.iter()
                    .chain(&other)
                    .filter(|c| c.tag().ends_with("s3") || c.tag().ends_with("s4"))
                    .take(2),
            );
            picked.extend(mma_coverage(&shape));
            picked.extend(spreads);
            add(picked.iter().map(|c| json(c)).collect());
        }
        Op::Dense { .. } => {
            let shape = dense::dense_shape(graph, NodeId(0)).unwrap();
            let space = DenseConfig::search_space(&shape);
            let mut picked: Vec<serde_json::Value> = sample(&space, 2 * per_template)
                .iter()
                .map(|c| json(c))
                .collect();
            picked.extend(
                warp_specialized_variants(&shape)
                    .into_iter()
                    .map(|c| json(&DenseConfig::Wgmma(c))),
            );
            add(picked);
        }
        Op::Gemm { .. } | Op::MatMul => {
            let shape = matmul::matmul_shape(graph, NodeId(0)).unwrap();
            add(MatmulConfig::search_space(&shape)
                .iter()
                .map(|c| json(c))
                .collect());
        }
        _ => {
            let space = candidate::task_candidates(graph, NodeId(0)).unwrap();
            add(sample(&space.configs, per_template));
        }
    }
    out
}

/// Serialization of any config, for `configs`.
mod erased {
    pub trait Json {
        fn json(&self) -> serde_json::Value;
    }
    impl<T: serde::Serialize> Json for T {
        fn json(&self) -> serde_json::Value {
            serde_json::to_value(self).unwrap_or_default()
        }
    }
}

/// One precision's cases, each with its plan and configs, and the module
/// holding every config's kernel (compiled with nvcc), or why not.
struct Built {
    precision: Precision,
    cases: Vec<(String, Graph, MemoryPlan, Vec<Instance>)>,
    kernels: usize,
    cubin: Result<Vec<u8>, String>,
}

fn build(precision: Precision, cases: Vec<(String, Graph)>) -> Built {
    let mut prepared = Vec::new();
    for (label, graph) in cases {
        let plan = plan_memory(&graph).unwrap();
        let label = format!("{label}_{precision}");
        let instances = configs(&graph, &label, 4);
        prepared.push((label, graph, plan, instances));
    }
    let all: Vec<(Instance, String)> = prepared
        .iter()
        .flat_map(|(_, _, _, xs)| xs.iter().map(|x| (x.clone(), x.symbol.clone())))
        .collect();
    let cubin = gpu::catch(|| kernels::compile(&assemble(&all), &format!("gpu_{precision}")));
    Built {
        precision,
        cases: prepared,
        kernels: all.len(),
        cubin,
    }
}

/// Runs every case × config of one precision from its module and returns
/// the failures.
fn check(mode: Mode, built: Built) -> Vec<String> {
    let precision = built.precision;
    let cubin = match built.cubin {
        Ok(c) => c,
        Err(e) => return vec![format!("{precision}: compile failed: {e}")],
    };
    let mut failures = Vec::new();
    let mut checked = 0;
    for (label, graph, plan, instances) in &built.cases {
        let node = graph.node(NodeId(0));
        let mut args = node.inputs.clone();
        args.push(node.output);
        let m = one_node_module(instances, &args);
        let feeds = inputs(graph);
        let feed_refs: Vec<&[f32]> = feeds.iter().map(Vec::as_slice).collect();
        let want = run(graph, &feed_refs, &RunOptions::default())
            .unwrap()
            .remove(0);
        let result = (|| -> Result<(), String> {
            let Some(mut loaded) = kernels::load(label, graph, plan, &m, &cubin, &feed_refs, mode)?
            else {
                return Ok(());
            };
            // Each launch's output is poisoned first (a view the plan
            // aliased included: its input lives in the weights here).
            loaded.run_traced(|i, _, got| {
                let x = &instances[i];
                let err = rel_l2(&got, &want);
                checked += 1;
                if gpu::exceeds(err, tolerance(precision)) {
                    failures.push(format!(
                        "{label}: {} ({}): rel L2 {err:e}",
                        x.symbol, x.config
                    ));
                }
            })
        })();
        if let Err(e) = result {
            failures.push(format!("{label}: {e}"));
        }
    }
    match mode {
        Mode::Gpu => println!(
            "{precision}: {checked} kernels checked, {} failures",
            failures.len()
        ),
        Mode::DryRun => println!(
            "{precision}: {} kernels built, {} failures; dry run stops at Model::load",
            built.kernels,
            failures.len()
        ),
    }
    failures
}

/// Every precision's cases: the modules compile in parallel
/// (`AOTUNE_TEST_JOBS`), each is checked on the GPU as it is ready.
fn check_all(mode: Mode, cases: fn(Precision) -> Vec<(String, Graph)>) -> Vec<String> {
    let mut failures = Vec::new();
    gpu::pipeline(
        Precision::ALL.to_vec(),
        |precision| build(precision, cases(precision)),
        |built| failures.extend(check(mode, built)),
    );
    failures
}

/// A module launching each of `instances` once, in order, all for node 0
/// with `args`: the kernels of one task's configs, to check or time apart.
fn one_node_module(instances: &[Instance], args: &[ValueId]) -> CudaModule {
    CudaModule {
        source: String::new(),
        kernels: instances.iter().map(|x| x.symbol.clone()).collect(),
        launches: instances
            .iter()
            .enumerate()
            .map(|(i, x)| KernelLaunch {
                node: NodeId(0),
                kernel: i as u32,
                grid: x.geometry.grid,
                block: x.geometry.block,
                smem_bytes: x.geometry.smem_bytes,
                args: args.to_vec(),
                matmul: None,
            })
            .collect(),
        warnings: Vec::new(),
    }
}

#[test]
fn gpu_templates_match_the_reference() {
    let Some(mode) = gpu::mode_or_skip("gpu_templates_match_the_reference") else {
        return;
    };
    let failures = check_all(mode, |precision| {
        let mut cases = conv_cases(precision);
        cases.extend(misc_cases(precision));
        cases
    });
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The Dense cases (`template_cases::dense_cases`), each over a sample of
/// its space plus the warp-specialized tiles, against the reference.
#[test]
fn gpu_dense_templates_match_the_reference() {
    let Some(mode) = gpu::mode_or_skip("gpu_dense_templates_match_the_reference") else {
        return;
    };
    let failures = check_all(mode, dense_cases);
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Convolutions with the global average pool in their epilogue
/// (`template_cases::pooled_cases`), each over a sample of its space,
/// against the reference.
#[test]
fn gpu_pooled_convs_match_the_reference() {
    let Some(mode) = gpu::mode_or_skip("gpu_pooled_convs_match_the_reference") else {
        return;
    };
    let cases: usize = Precision::ALL.iter().map(|&p| pooled_cases(p).len()).sum();
    assert!(cases >= 6, "pooled cases under fp16, bf16 and tf32");
    let failures = check_all(mode, pooled_cases);
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The input conversion (plain and channel-padded), the NHWC global pools
/// and the small-M dense layers (ResNet-50's classifier at M = 1, and
/// M = 4 with a K that ends in a partial step), each over a sample of its
/// space, against the reference.
#[test]
fn gpu_stem_and_head_templates_match_the_reference() {
    let Some(mode) = gpu::mode_or_skip("gpu_stem_and_head_templates_match_the_reference") else {
        return;
    };
    let failures = check_all(mode, |precision| {
        let mut cases = stem_head_cases(precision);
        cases.extend(
            dense_cases(precision)
                .into_iter()
                .filter(|(label, _)| label.starts_with("dense1x") || label.starts_with("dense4x")),
        );
        cases
    });
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Runs zoo ResNet-50 at `batch` layer by layer against the reference;
/// returns a report and whether it passed.
fn check_resnet50(mode: Mode, batch: usize, precision: Precision) -> Result<String, String> {
    use std::fmt::Write;
    let c = compiled(batch, precision);
    let m = generate_cuda(&c.graph, &c.plan, &ConfigOverrides::new()).map_err(|e| e.to_string())?;
    let label = format!("resnet50_b{batch}_{precision}");
    let cubin = kernels::compile(&m.source, &label)?;
    let feeds = inputs(&c.graph);
    let feed_refs: Vec<&[f32]> = feeds.iter().map(Vec::as_slice).collect();
    let want =
        run_traced(&c.graph, &feed_refs, &RunOptions::default()).map_err(|e| e.to_string())?;
    let Some(mut loaded) = kernels::load(&label, &c.graph, &c.plan, &m, &cubin, &feed_refs, mode)?
    else {
        return Ok(format!(
            "ResNet-50 batch {batch} {precision}: built; dry run stops at Model::load"
        ));
    };
    let mut got = Vec::new();
    loaded.run_traced(|_, node, values| got.push((node, values)))?;
    let tol = tolerance(precision);
    let mut report = String::new();
    let mut worst: f64 = 0.0;
    let mut first_bad = None;
    for (node, values) in &got {
        let err = rel_l2(values, &want[node.index()]);
        worst = worst.max(err);
        let name = &c.graph.node(*node).name;
        let _ = writeln!(report, "  {name:<22} rel L2 {err:.3e}");
        if gpu::exceeds(err, 2.0 * tol) && first_bad.is_none() {
            first_bad = Some(format!("{name}: {err:e}"));
        }
    }
    let out_node = c.graph.node_ids().last().ok_or("empty graph")?;
    let final_err = rel_l2(&got.last().ok_or("no launches")?.1, &want[out_node.index()]);
    let summary = format!(
        "ResNet-50 batch {batch} {precision}: output rel L2 {final_err:.3e}, worst layer {worst:.3e}"
    );
    match first_bad {
        None if final_err <= tol => Ok(summary),
        _ => Err(format!(
            "{summary}; first bad layer {first_bad:?}\n{report}"
        )),
    }
}

#[test]
fn gpu_resnet50_matches_the_reference_layer_by_layer() {
    let Some(mode) = gpu::mode_or_skip("gpu_resnet50_matches_the_reference_layer_by_layer") else {
        return;
    };
    let mut failures = Vec::new();
    for (batch, precision) in [
        (1, Precision::Fp32),
        (1, Precision::Tf32),
        (1, Precision::Fp16),
        (1, Precision::Bf16),
        (2, Precision::Fp16),
    ] {
        match check_resnet50(mode, batch, precision) {
            Ok(s) => println!("{s}"),
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Times the ResNet-50 launch sequence (plain launches captured as the
/// runtime's CUDA graph; each kernel also timed alone) and prints the
/// slowest kernels. A benchmark, not a check: `--ignored gpu_resnet50_timing`
/// runs it.
#[test]
#[ignore]
fn gpu_resnet50_timing() {
    let Some(mode) = gpu::mode_or_skip("gpu_resnet50_timing") else {
        return;
    };
    for (batch, precision) in [
        (1, Precision::Fp16),
        (1, Precision::Bf16),
        (1, Precision::Fp32),
        (1, Precision::Tf32),
        (8, Precision::Fp16),
        (256, Precision::Fp16),
    ] {
        let c = compiled(batch, precision);
        let m = generate_cuda(&c.graph, &c.plan, &ConfigOverrides::new()).unwrap();
        let cubin = kernels::compile(&m.source, "timing").unwrap();
        let feeds = inputs(&c.graph);
        let feed_refs: Vec<&[f32]> = feeds.iter().map(Vec::as_slice).collect();
        let label = format!("resnet50_b{batch}_{precision}");
        let Some(mut loaded) =
            kernels::load(&label, &c.graph, &c.plan, &m, &cubin, &feed_refs, mode).unwrap()
        else {
            println!("{label}: built; dry run stops at Model::load");
            continue;
        };
        let (total, each) = loaded.time(50).unwrap();
        let sum: f64 = each.iter().sum();
        println!(
            "ResNet-50 batch {batch} {precision}: {:.1} us per forward ({} launches), \
             {sum:.1} us summed over kernels timed alone",
            total,
            m.launches.len()
        );
        let mut order: Vec<usize> = (0..each.len()).collect();
        order.sort_by(|&a, &b| each[b].total_cmp(&each[a]));
        for &i in order.iter().take(12) {
            let l = &m.launches[i];
            println!(
                "  {:>7.2} us  {:<12} {:<44} grid {:?} block {}",
                each[i],
                c.graph.node(l.node).name,
                m.kernels[l.kernel as usize],
                l.grid,
                l.block[0]
            );
        }
    }
}

/// The modules the GPU tests load, through nvcc on any machine (ignored:
/// the sweeps cover the same templates; run it after changing `configs`).
#[test]
#[ignore]
fn test_modules_compile_with_nvcc() {
    let Some(nvcc) = nvcc::find_or_skip() else {
        return;
    };
    for precision in Precision::ALL {
        let mut cases = conv_cases(precision);
        cases.extend(dense_cases(precision));
        cases.extend(misc_cases(precision));
        let all: Vec<(Instance, String)> = cases
            .iter()
            .flat_map(|(label, graph)| configs(graph, &format!("{label}_{precision}"), 4))
            .map(|x| (x.clone(), x.symbol.clone()))
            .collect();
        let n = all.len();
        nvcc::compile(&nvcc, &assemble(&all), &format!("gpu_{precision}")).unwrap();
        println!("{precision}: {n} kernels compile");
    }
}

/// ResNet-50's optimized graph without the space-to-depth rewrite: the
/// passes of `optimize` in order, `pad_input_channels` taking the stem.
fn padded_stem_graph(imported: &Graph, precision: Precision) -> Graph {
    use aotune_compiler::passes::*;
    let mut g = imported.clone();
    dce(&mut g).unwrap();
    fold_batch_norm(&mut g).unwrap();
    canonicalize_global_pool(&mut g).unwrap();
    fuse_epilogue(&mut g).unwrap();
    lower_dense(&mut g).unwrap();
    to_channels_last(&mut g).unwrap();
    apply_precision(&mut g, precision).unwrap();
    pad_input_channels(&mut g).unwrap();
    dce(&mut g).unwrap();
    g
}

/// The stem at f16 with and without the space-to-depth rewrite, in one
/// build: the input conversion's and the stem convolution's time alone,
/// the forward pass's, and the two outputs against each other.
#[test]
#[ignore]
fn gpu_stem_space_to_depth_timing() {
    let Some(mode) = gpu::mode_or_skip("gpu_stem_space_to_depth_timing") else {
        return;
    };
    for batch in [1, 256] {
        let c = compiled(batch, Precision::Fp16);
        let padded = padded_stem_graph(&c.imported, Precision::Fp16);
        let mut outputs = Vec::new();
        for (label, graph) in [("padded", padded), ("space-to-depth", c.graph.clone())] {
            let plan = plan_memory(&graph).unwrap();
            let m = generate_cuda(&graph, &plan, &ConfigOverrides::new()).unwrap();
            let name = format!("stem_{label}_b{batch}");
            let cubin = kernels::compile(&m.source, &name).unwrap();
            let feeds = inputs(&graph);
            let feed_refs: Vec<&[f32]> = feeds.iter().map(Vec::as_slice).collect();
            let Some(mut loaded) =
                kernels::load(&name, &graph, &plan, &m, &cubin, &feed_refs, mode).unwrap()
            else {
                println!("{name}: built; dry run stops at Model::load");
                continue;
            };
            outputs.push(loaded.output().unwrap());
            let (total, each) = loaded.time(50).unwrap();
            println!("ResNet-50 batch {batch} fp16, {label} stem: {total:.1} us per forward");
            for (i, l) in m.launches.iter().take(2).enumerate() {
                println!(
                    "  {:>8.2} us  {:<14} {}",
                    each[i],
                    graph.node(l.node).name,
                    m.kernels[l.kernel as usize]
                );
            }
        }
        if mode == Mode::DryRun {
            continue;
        }
        let err = rel_l2(&outputs[1], &outputs[0]);
        println!("  outputs: rel L2 {err:.3e} between the two");
        assert!(err <= tolerance(Precision::Fp16), "batch {batch}: {err:e}");
    }
}

/// Every config of the space-to-depth conversion of ResNet-50's image at
/// batch 1, 8 and 256 (f16), timed alone; the default marked.
#[test]
#[ignore]
fn gpu_space_to_depth_configs_timing() {
    use aotune_compiler::test_graphs::{one_op, In};
    let Some(mode) = gpu::mode_or_skip("gpu_space_to_depth_configs_timing") else {
        return;
    };
    for batch in [1, 8, 256] {
        let op = Op::SpaceToDepth {
            block: 2,
            pad_top: 3,
            pad_left: 3,
            channels: 16,
            height: 115,
            width: 115,
        };
        let x = In::act(&[batch, 3, 224, 224], DType::F32, Layout::RowMajor);
        let (graph, plan) = one_op(op, &[x], DType::F16, Layout::ChannelsLast, Precision::Fp16);
        let shape = space_to_depth::space_to_depth_shape(&graph, NodeId(0)).unwrap();
        let default = SpaceToDepthConfig::default_for(&shape);
        let space = SpaceToDepthConfig::search_space(&shape);
        let instances: Vec<Instance> = space
            .iter()
            .map(|c| node_instance(&graph, Some(c), &format!("s2d_b{batch}_{}", c.tag())))
            .collect();
        let all: Vec<(Instance, String)> = instances
            .iter()
            .map(|x| (x.clone(), x.symbol.clone()))
            .collect();
        let label = format!("s2d_b{batch}");
        let cubin = kernels::compile(&assemble(&all), &label).unwrap();
        let node = graph.node(NodeId(0));
        let m = one_node_module(&instances, &[node.inputs[0], node.output]);
        let feeds = inputs(&graph);
        let feed_refs: Vec<&[f32]> = feeds.iter().map(Vec::as_slice).collect();
        let Some(mut loaded) =
            kernels::load(&label, &graph, &plan, &m, &cubin, &feed_refs, mode).unwrap()
        else {
            println!("{label}: built; dry run stops at Model::load");
            continue;
        };
        let (_, each) = loaded.time(50).unwrap();
        println!(
            "space-to-depth b{batch}: {:.1} MB moved",
            shape.bytes() as f64 / 1e6
        );
        for (c, t) in space.iter().zip(&each) {
            let gbs = shape.bytes() as f64 / (t * 1e3);
            let mark = if *c == default { "  default" } else { "" };
            println!("  {:<8} {t:>8.2} us  {gbs:>6.0} GB/s{mark}", c.tag());
        }
    }
}

/// The harness's encoding (graph inputs uploaded with the weights by the
/// build's `pack_weights`, in storage type and physical order) read back by
/// the runtime's `decode_slot` gives the logical values again, for every
/// storage type and both layouts. No GPU needed.
#[test]
fn layouts_and_dtypes_round_trip() {
    let shape = [2usize, 3, 2, 2];
    let logical: Vec<f32> = (0..24).map(|i| i as f32 * 0.5).collect();
    let nhwc = kernels::to_physical(&logical, &shape, Layout::ChannelsLast);
    // (n=0, c=1, h=0, w=0) is physical index 1 in NHWC.
    assert_eq!(nhwc[1], logical[4]);
    for layout in [Layout::RowMajor, Layout::ChannelsLast] {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let bytes = packed(&kernels::to_physical(&logical, &shape, layout), dtype);
            let slot = TensorSlot {
                name: "x".into(),
                shape: shape.to_vec().into(),
                dtype,
                layout,
                offset: 0,
                bytes: bytes.len() as u64,
            };
            assert_eq!(decode_slot(&slot, &bytes), logical, "{dtype} {layout:?}");
        }
    }
    assert_eq!(packed(&[1.0], DType::F16), vec![0x00, 0x3c]);
    assert_eq!(packed(&[1.0], DType::BF16), vec![0x80, 0x3f]);
}

/// The bytes `pack_weights` stores for `data` as a constant of `dtype`.
fn packed(data: &[f32], dtype: DType) -> Vec<u8> {
    let mut g = Graph {
        values: Vec::new(),
        nodes: Vec::new(),
        inputs: Vec::new(),
        outputs: Vec::new(),
        precision: Precision::Fp32,
    };
    let id = g.add_value(Value {
        dtype,
        kind: ValueKind::Constant(std::sync::Arc::new(data.to_vec())),
        ..Value::activation("c", vec![data.len()])
    });
    pack_weights(&g, [id]).bytes
}
