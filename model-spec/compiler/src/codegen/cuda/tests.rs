//! Tests of the whole generator on zoo ResNets: the launch table, errors,
//! tuned-config overrides, snapshots of rendered instantiations, and the
//! complete modules through nvcc.

use super::test_support::{node_instance, nvcc};
use super::*;
use crate::ir::{BinaryOp, DType, Layout, Op, Precision};
use crate::schedule::extract_tasks;
use crate::test_graphs::{one_op, In};
use crate::zoo::{resnet_onnx, ResNetDepth};
use crate::{compile_bytes, CompileOptions, Compiled};
use std::collections::HashMap;

pub(crate) fn compiled(depth: ResNetDepth, batch: usize, precision: Precision) -> Compiled {
    compiled_with(depth, batch, precision, true)
}

fn compiled_with(
    depth: ResNetDepth,
    batch: usize,
    precision: Precision,
    channels_last: bool,
) -> Compiled {
    let bytes = resnet_onnx(depth, 0);
    compile_bytes(
        &bytes,
        "resnet.onnx",
        &CompileOptions {
            batch: Some(batch),
            precision,
            channels_last,
            ..Default::default()
        },
    )
    .unwrap()
}

fn module(c: &Compiled) -> CudaModule {
    generate_cuda(&c.graph, &c.plan, &ConfigOverrides::new()).unwrap()
}

/// The block of `source` (comment, parameter struct, wrapper) defining `symbol`.
fn instantiation(source: &str, symbol: &str) -> String {
    let start = source
        .find(&format!("struct {symbol}_p {{"))
        .unwrap_or_else(|| panic!("no {symbol}"));
    let begin = source[..start].rfind("\n\n").map_or(0, |i| i + 2);
    // The struct ends with "};", the wrapper after it with "}".
    let end = source[start..]
        .find("\n}\n")
        .map_or(source.len(), |i| start + i + 3);
    source[begin..end].to_string()
}

fn symbol_of<'m>(m: &'m CudaModule, c: &Compiled, node: &str) -> &'m str {
    let launch = m
        .launches
        .iter()
        .find(|l| c.graph.node(l.node).name == node)
        .unwrap_or_else(|| panic!("no launch for {node}"));
    &m.kernels[launch.kernel as usize]
}

#[test]
fn resnet50_launch_table_covers_every_kernel_node_once() {
    for precision in [Precision::Fp32, Precision::Fp16] {
        let c = compiled(ResNetDepth::R50, 1, precision);
        let m = module(&c);
        // Every node but the aliased Flatten launches, in order.
        let aliased: Vec<_> = c
            .graph
            .node_ids()
            .filter(|&id| {
                c.graph.node(id).op.is_view()
                    && c.plan
                        .buffer(c.graph.node(id).output)
                        .is_some_and(|b| b.alias_of.is_some())
            })
            .collect();
        assert_eq!(aliased.len(), 1);
        assert_eq!(m.launches.len(), c.graph.nodes.len() - 1);
        assert!(m.launches.windows(2).all(|w| w[0].node < w[1].node));
        // One kernel per task, symbols unique, each compiled into the source.
        assert_eq!(m.kernels.len(), extract_tasks(&c.graph).len());
        let mut seen = std::collections::HashSet::new();
        for k in &m.kernels {
            assert!(seen.insert(k), "duplicate symbol {k}");
            assert!(m.source.contains(&format!(" {k}(\n")), "{k} not defined");
        }
        let mut geometry: HashMap<u32, ([u32; 3], [u32; 3], u32)> = HashMap::new();
        for l in &m.launches {
            let node = c.graph.node(l.node);
            let mut want = node.inputs.clone();
            want.push(node.output);
            assert_eq!(l.args, want, "{}", node.name);
            assert!(l.block[0] >= 32 && l.block[0] <= 1024 && l.block[0] % 32 == 0);
            assert!(l.grid.iter().all(|&g| g >= 1));
            assert!(l.smem_bytes as usize <= conv_shape::DEFAULT_SMEM_LIMIT);
            let g = (l.grid, l.block, l.smem_bytes);
            assert_eq!(*geometry.entry(l.kernel).or_insert(g), g, "{}", node.name);
        }
        assert!(m.warnings.is_empty(), "{:?}", m.warnings);
        // Symbols carry the family, the task hash and the config tag.
        let stem = symbol_of(&m, &c, "conv2d1");
        let hash = crate::schedule::task_key(&c.graph, crate::ir::NodeId(1)).hash_hex();
        assert!(stem.starts_with(&format!("conv_{}_", &hash[..8])), "{stem}");
        assert!(
            stem.contains(if precision == Precision::Fp16 {
                "_mma_"
            } else {
                "_simt_"
            }),
            "{stem}"
        );
    }
}

#[test]
fn generation_is_deterministic() {
    let c = compiled(ResNetDepth::R18, 2, Precision::Bf16);
    assert_eq!(module(&c), module(&c));
}

#[test]
fn channels_first_convolutions_are_an_error_naming_the_node() {
    let c = compiled_with(ResNetDepth::R18, 1, Precision::Fp32, false);
    let err = generate_cuda(&c.graph, &c.plan, &ConfigOverrides::new()).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(
            err,
            CodegenError::Unsupported {
                op: "FusedConv",
                ..
            }
        ),
        "{text}"
    );
    assert!(
        text.contains("conv2d1") && text.contains("channels_last: true"),
        "{text}"
    );
}

#[test]
fn a_value_missing_from_the_plan_is_an_error() {
    let c = compiled(ResNetDepth::R18, 1, Precision::Fp32);
    let mut plan = c.plan.clone();
    let victim = c.graph.nodes[3].output;
    plan.buffers.retain(|b| b.value != victim);
    let err = generate_cuda(&c.graph, &plan, &ConfigOverrides::new()).unwrap_err();
    assert!(
        matches!(err, CodegenError::Unplanned { value, .. } if value == victim.0),
        "{err}"
    );
}

#[test]
fn tuned_configs_are_used_and_bad_ones_reported() {
    let c = compiled(ResNetDepth::R50, 1, Precision::Fp16);
    let stem_id = crate::ir::NodeId(1);
    assert_eq!(c.graph.node(stem_id).name, "conv2d1");
    let stem_hash = crate::schedule::task_key(&c.graph, stem_id).hash_hex();
    let pool_hash = crate::schedule::task_key(&c.graph, crate::ir::NodeId(2)).hash_hex();
    let tuned = ConvConfig::Simt(SimtConfig {
        block_m: 64,
        block_n: 64,
        block_k: 8,
        thread_m: 4,
        thread_n: 4,
        split_k: 2,
    });
    let mut overrides = ConfigOverrides::new();
    overrides.insert(stem_hash.clone(), &tuned);
    // A pool config that does not validate, and a conv config that does not parse.
    overrides.insert(
        pool_hash.clone(),
        &LinearConfig {
            block: 100,
            per_thread: 1,
        },
    );
    let dense_hash = extract_tasks(&c.graph)
        .iter()
        .find(|t| t.key.op == "Dense")
        .unwrap()
        .key
        .hash_hex();
    overrides.by_task.insert(
        dense_hash.clone(),
        serde_json::json!({"kernel": "gemv", "warps": "four"}),
    );
    let m = generate_cuda(&c.graph, &c.plan, &overrides).unwrap();
    let stem = symbol_of(&m, &c, "conv2d1");
    assert_eq!(
        stem,
        format!("conv_{}_simt_m64n64k8t4x4s2", &stem_hash[..8])
    );
    let launch = &m.launches[0..3].iter().find(|l| l.node == stem_id).unwrap();
    assert_eq!(launch.grid, [196, 1, 2]);
    assert_eq!(launch.block, [256, 1, 1]);
    assert_eq!(m.warnings.len(), 2, "{:?}", m.warnings);
    assert!(m
        .warnings
        .iter()
        .any(|w| w.contains(&pool_hash) && w.contains("invalid")));
    assert!(m
        .warnings
        .iter()
        .any(|w| w.contains(&dense_hash) && w.contains("does not parse")));
    // The split-K workspace is sized for the stem: 2 slices × 196 tiles × 64×64.
    assert!(
        m.source
            .contains(&format!("splitk_partials[{}]", 2 * 196 * 64 * 64)),
        "workspace"
    );
}

#[test]
fn resnet50_fp16_instantiations_snapshot() {
    let c = compiled(ResNetDepth::R50, 1, Precision::Fp16);
    let m = module(&c);
    for node in [
        "input_to_nhwc",
        "conv2d1",
        "maxpool2d1",
        "conv2d8",
        // The last conv, its global average pool fused into the epilogue.
        "conv2d53",
        "linear1",
    ] {
        let text = instantiation(&m.source, symbol_of(&m, &c, node));
        insta::assert_snapshot!(format!("resnet50_fp16_{node}"), text);
    }
}

#[test]
fn resnet50_fp32_stem_snapshot() {
    let c = compiled(ResNetDepth::R50, 1, Precision::Fp32);
    let m = module(&c);
    let text = instantiation(&m.source, symbol_of(&m, &c, "conv2d1"));
    insta::assert_snapshot!("resnet50_fp32_conv2d1", text);
    // fp32 keeps the pool a kernel of its own (no pooled SIMT epilogue).
    let text = instantiation(&m.source, symbol_of(&m, &c, "globalaveragepool1"));
    insta::assert_snapshot!("resnet50_fp32_globalaveragepool1", text);
}

/// A tf32 convolution on the tensor cores (f32 operands, m16n8k8).
#[test]
fn resnet50_tf32_conv_snapshot() {
    let c = compiled(ResNetDepth::R50, 1, Precision::Tf32);
    let m = module(&c);
    let text = instantiation(&m.source, symbol_of(&m, &c, "conv2d8"));
    assert!(text.contains("_mma_"), "{text}");
    insta::assert_snapshot!("resnet50_tf32_conv2d8", text);
}

#[test]
fn broadcast_binary_snapshot() {
    let (graph, _) = one_op(
        Op::Binary(BinaryOp::Mul),
        &[
            In::act(&[2, 3, 4], DType::F16, Layout::RowMajor),
            In::constant(&[3, 1], DType::F32, Layout::RowMajor, 1),
        ],
        DType::F16,
        Layout::RowMajor,
        Precision::Fp16,
    );
    let instance = node_instance::<LinearConfig>(&graph, None, "0123abcd");
    insta::assert_snapshot!("broadcast_binary", instance.code);
}

/// Compiles each model's whole module with nvcc (two at a time) and returns
/// the ptxas reports; fails on errors and spills.
fn compile_models(cases: &[(ResNetDepth, usize, Precision)]) -> Vec<Vec<nvcc::KernelReport>> {
    let Some(nvcc) = nvcc::find_or_skip() else {
        return Vec::new();
    };
    let sources: Vec<(String, String)> = cases
        .iter()
        .map(|&(depth, batch, precision)| {
            let c = compiled(depth, batch, precision);
            let m = module(&c);
            (format!("{depth:?}_b{batch}_{precision}"), m.source)
        })
        .collect();
    let mut out = Vec::new();
    for pair in sources.chunks(2) {
        let results: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = pair
                .iter()
                .map(|(label, source)| {
                    let nvcc = &nvcc;
                    s.spawn(move || nvcc::compile(nvcc, source, label))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for ((label, _), r) in pair.iter().zip(results) {
            let r = r.unwrap_or_else(|e| panic!("{label}: {e}"));
            for k in &r {
                assert!(!k.spills(), "{label}: {k:?}");
            }
            out.push(r);
        }
    }
    out
}

#[test]
fn resnet50_modules_compile_without_spills() {
    let mut cases = Vec::new();
    for batch in [1, 8] {
        for precision in Precision::ALL {
            cases.push((ResNetDepth::R50, batch, precision));
        }
    }
    // Batch 256 takes the wgmma template everywhere.
    cases.push((ResNetDepth::R50, 256, Precision::Fp16));
    let reports = compile_models(&cases);
    for ((depth, batch, precision), r) in cases.iter().zip(&reports) {
        let max = r.iter().map(|k| k.registers).max().unwrap_or(0);
        println!(
            "{depth:?} batch {batch} {precision}: {} kernels, max {max} registers, no spills",
            r.len()
        );
    }
}

#[test]
fn resnet18_modules_compile_without_spills() {
    compile_models(&[
        (ResNetDepth::R18, 1, Precision::Fp32),
        (ResNetDepth::R18, 1, Precision::Fp16),
    ]);
}

/// Prints ptxas's registers for every kernel of ResNet-50's defaults at
/// batch 1 (fp16, tf32, fp32) and 256 (fp16).
#[test]
#[ignore]
fn print_resnet50_ptxas() {
    let cases = [
        (ResNetDepth::R50, 1, Precision::Fp16),
        (ResNetDepth::R50, 1, Precision::Tf32),
        (ResNetDepth::R50, 1, Precision::Fp32),
        (ResNetDepth::R50, 256, Precision::Fp16),
    ];
    for ((_, batch, precision), r) in cases.iter().zip(compile_models(&cases)) {
        println!("batch {batch} {precision}");
        for k in r {
            println!(
                "  {:<48} {:>3} registers, {} B stack, {} B spills",
                k.name, k.registers, k.stack_bytes, k.spill_stores
            );
        }
    }
}

/// The default geometry of a ResNet's convolutions at `batch`, one line per
/// task (layers in order of first use), as in conv.rs's doc comment.
pub(crate) fn geometry_table(depth: ResNetDepth, batch: usize, precision: Precision) -> String {
    use std::fmt::Write;
    let c = compiled(depth, batch, precision);
    let m = module(&c);
    let mut rows: Vec<(u32, Vec<String>, String)> = Vec::new();
    let (mut launches, mut ctas_total) = (0, 0);
    for l in &m.launches {
        let node = c.graph.node(l.node);
        if !matches!(node.op, Op::FusedConv { .. }) {
            continue;
        }
        launches += 1;
        ctas_total += l.grid.iter().product::<u32>();
        if let Some(row) = rows.iter_mut().find(|r| r.0 == l.kernel) {
            row.1.push(node.name.clone());
            continue;
        }
        let shape = conv::conv_shape(&c.graph, l.node).unwrap();
        let tag = m.kernels[l.kernel as usize]
            .splitn(3, '_')
            .nth(2)
            .unwrap_or("");
        let text = format!(
            "{:>7} x {:>4} x {:>4}  {:<25} {:>5} CTAs x {:>3} threads",
            shape.gemm_m(),
            shape.gemm_n(),
            shape.gemm_k(),
            tag,
            l.grid.iter().product::<u32>(),
            l.block[0],
        );
        rows.push((l.kernel, vec![node.name.clone()], text));
    }
    let mut s = String::new();
    for (_, names, text) in &rows {
        let first = names[0].trim_start_matches("conv2d");
        let layers = if names.len() == 1 {
            format!("conv{first}")
        } else {
            format!("conv{first} x{}", names.len())
        };
        let _ = writeln!(s, "{layers:<10} {text}");
    }
    let _ = writeln!(
        s,
        "{launches} launches, {ctas_total} CTAs, {} distinct kernels",
        rows.len()
    );
    s
}

/// What the conv heuristic picks for zoo ResNet-50, as a snapshot: a change
/// to the rule or the cost model shows as a diff to review
/// (`cargo insta review`, or `INSTA_UPDATE=always` to accept).
#[test]
fn resnet50_default_geometry() {
    let mut text = String::new();
    for (batch, precision) in GEOMETRY_TABLES {
        text.push_str(&geometry_table(ResNetDepth::R50, batch, precision));
        text.push('\n');
    }
    insta::assert_snapshot!(text);
}

/// The (batch, precision) pairs the geometry snapshot shows.
const GEOMETRY_TABLES: [(usize, Precision); 4] = [
    (1, Precision::Fp16),
    (1, Precision::Tf32),
    (1, Precision::Fp32),
    (256, Precision::Fp16),
];

#[test]
#[ignore]
fn print_resnet50_geometry() {
    for (batch, p) in GEOMETRY_TABLES {
        println!(
            "batch {batch} {p}\n{}",
            geometry_table(ResNetDepth::R50, batch, p)
        );
    }
}

/// The data-movement copies each get one `movement.cu` kernel named after
/// the op; GatherND, ScatterND and Resize have none yet: a typed error
/// naming the op, never a panic.
#[test]
fn data_movement_ops_get_movement_kernels() {
    let ops = [
        Op::Transpose { perm: vec![1, 0] },
        Op::Slice {
            starts: vec![0, 1],
            ends: vec![2, 3],
            steps: vec![1, 1],
        },
        Op::Gather {
            axis: 0,
            indices: vec![1],
            indices_shape: vec![],
        },
        Op::Expand {
            shape: vec![3, 2, 3],
        },
        Op::Tile {
            repeats: vec![2, 1],
        },
        Op::Pad {
            pads: vec![(1, 0), (0, 1)],
            mode: crate::ir::PadMode::Edge,
        },
    ];
    for op in ops {
        let kind = op.kind();
        let (graph, plan) = one_op(
            op,
            &[In::act(&[2, 3], DType::F32, Layout::RowMajor)],
            DType::F32,
            Layout::RowMajor,
            Precision::Fp32,
        );
        let module = generate_cuda(&graph, &plan, &ConfigOverrides::new()).unwrap();
        assert_eq!(module.launches.len(), 1, "{kind}");
        let family = crate::codegen::cuda::ops::movement::family(&graph.nodes[0].op);
        assert!(module.kernels[0].starts_with(family), "{kind}");
        assert!(module.source.contains("---- movement.cu ----"), "{kind}");
    }
    let op = Op::GatherNd {
        indices: vec![1],
        indices_shape: vec![1, 1],
    };
    let kind = op.kind();
    let (graph, plan) = one_op(
        op,
        &[In::act(&[2, 3], DType::F32, Layout::RowMajor)],
        DType::F32,
        Layout::RowMajor,
        Precision::Fp32,
    );
    let err = generate_cuda(&graph, &plan, &ConfigOverrides::new()).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, CodegenError::Unsupported { op, .. } if op == kind),
        "{text}"
    );
    assert!(
        text.contains(&format!("no GPU kernel for {kind} yet")),
        "{text}"
    );
}
