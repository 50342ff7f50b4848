//! The data-movement kernels (`movement.cu`) on the GPU against the CPU
//! reference, on the shapes transformer exports leave after the passes.
//!
//! Each case is a small ONNX model written here (one input, one output,
//! fixed shapes, batch 1): ViT's `[1,768,196] → [1,196,768]` patch
//! transpose, its `[1,197,1,3,768]` q/k/v split (perm `[3,1,2,0,4]`) and
//! scalar-index Gather, its head transpose and the kᵀ pair the
//! `canonicalize_transpose` pass removes, Swin's 6-D window partition, its
//! `[64,49,3,3,32]` q/k/v transpose and `torch.roll` (two Slices and a
//! Concat), ConvNeXt's NCHW ⇄ NHWC transposes, Slices with steps 2 and −1,
//! Gather along axis 1 with vector and 2-D indices, Pad (constant, edge,
//! reflect), Expand, Tile and Where. Every case is built through the full
//! [`Build`] (nvcc) at fp32 and fp16, loaded, run, and its output must equal
//! the CPU emulation of the same optimized graph bit for bit (these ops only
//! copy; the fp16 Converts round like the emulation), and at fp32 the
//! reference of the imported graph too; so must every launch's output, and
//! a second run. The symbols must name the kernels the case is about (or,
//! for the cancelled pair, no Transpose at all).
//!
//! Without a driver the GPU tests skip (`AOTUNE_GPU_TESTS_DRY_RUN=1`
//! builds everything, nvcc included, and stops at `Model::load`; under
//! `AOTUNE_REQUIRE_GPU=1` a skip fails). `movement_cases_generate_kernels`
//! needs neither: it imports, optimizes and generates every case.

mod common;

use aotune_compiler::build::Nvcc;
use aotune_compiler::codegen::cuda::candidate::{render_candidate, task_candidates};
use aotune_compiler::codegen::cuda::{generate_cuda, ConfigOverrides};
use aotune_compiler::ir::Precision;
use aotune_compiler::reference::{run, run_traced, RunOptions};
use aotune_compiler::zoo::fill;
use aotune_compiler::{compile_bytes, Build, Built, CompileOptions};
use common::gpu::{self, Mode, TempDir};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

// ---- a minimal ONNX writer ---------------------------------------------------

/// The shared test ONNX writer (`common::onnx`) at these cases' opset, 19.
mod proto {
    use crate::common::onnx;
    pub use onnx::{node, tensor_raw as tensor, value_info_fixed as value_info, Attr};

    /// A `ModelProto` (IR 9, opset 19) around one graph.
    pub fn model(
        name: &str,
        nodes: &[Vec<u8>],
        inits: &[Vec<u8>],
        input: &[u8],
        output: &[u8],
    ) -> Vec<u8> {
        onnx::model(name, 19, nodes, inits, input, output)
    }
}

use proto::Attr;

/// A test model under construction: nodes and initializers.
#[derive(Default)]
struct Net {
    nodes: Vec<Vec<u8>>,
    inits: Vec<Vec<u8>>,
    counter: usize,
}

impl Net {
    fn fresh(&mut self, prefix: &str) -> String {
        self.counter += 1;
        format!("{prefix}{}", self.counter)
    }

    fn op(&mut self, op: &str, inputs: &[&str], attrs: Vec<(&str, Attr)>) -> String {
        let out = self.fresh(&op.to_ascii_lowercase());
        let node = proto::node(op, &format!("{out}_node"), inputs, &out, &attrs);
        self.nodes.push(node);
        out
    }

    /// An INT64 initializer.
    fn int64s(&mut self, dims: &[usize], values: &[i64]) -> String {
        let name = self.fresh("i");
        let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.inits.push(proto::tensor(&name, dims, 7, &raw));
        name
    }

    /// A FLOAT initializer.
    fn floats(&mut self, dims: &[usize], values: &[f32]) -> String {
        let name = self.fresh("f");
        let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.inits.push(proto::tensor(&name, dims, 1, &raw));
        name
    }

    fn transpose(&mut self, x: &str, perm: &[i64]) -> String {
        self.op("Transpose", &[x], vec![("perm", Attr::Ints(perm.to_vec()))])
    }

    fn reshape(&mut self, x: &str, shape: &[i64]) -> String {
        let s = self.int64s(&[shape.len()], shape);
        self.op("Reshape", &[x, &s], vec![])
    }

    fn slice(
        &mut self,
        x: &str,
        starts: &[i64],
        ends: &[i64],
        axes: &[i64],
        steps: &[i64],
    ) -> String {
        let n = starts.len();
        let (s, e) = (self.int64s(&[n], starts), self.int64s(&[n], ends));
        let (a, t) = (self.int64s(&[n], axes), self.int64s(&[n], steps));
        self.op("Slice", &[x, &s, &e, &a, &t], vec![])
    }

    /// Gather with constant `indices` of shape `dims` (`[]`: a scalar).
    fn gather(&mut self, x: &str, axis: i64, dims: &[usize], indices: &[i64]) -> String {
        let i = self.int64s(dims, indices);
        self.op("Gather", &[x, &i], vec![("axis", Attr::Int(axis))])
    }

    /// Pad with ONNX's `pads` (every begin, then every end).
    fn pad(&mut self, x: &str, pads: &[i64], mode: &'static str, value: Option<f32>) -> String {
        let p = self.int64s(&[pads.len()], pads);
        let mut inputs = vec![x.to_string(), p];
        if let Some(v) = value {
            inputs.push(self.floats(&[], &[v]));
        }
        let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        self.op("Pad", &refs, vec![("mode", Attr::Str(mode))])
    }

    fn finish(self, name: &str, input: &[usize], output: &str, out_dims: &[usize]) -> Vec<u8> {
        let mut nodes = self.nodes;
        nodes.push(proto::node(
            "Identity",
            "output_node",
            &[output],
            "output",
            &[],
        ));
        proto::model(
            name,
            &nodes,
            &self.inits,
            &proto::value_info("input", input),
            &proto::value_info("output", out_dims),
        )
    }
}

// ---- the cases ---------------------------------------------------------------------

/// One model: its input and output shapes, the graph from `input`, and
/// the kernel families its build must (and must not) contain.
struct Case {
    name: &'static str,
    input: &'static [usize],
    output: &'static [usize],
    body: fn(&mut Net) -> String,
    expect: &'static [&'static str],
    forbid: &'static [&'static str],
}

const MAX: i64 = i64::MAX;

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "vit_patches",
            input: &[1, 768, 196],
            output: &[1, 196, 768],
            body: |m| m.transpose("input", &[0, 2, 1]),
            expect: &["transpose"],
            forbid: &[],
        },
        Case {
            name: "vit_qkv_select",
            input: &[1, 197, 1, 3, 768],
            output: &[197, 1, 768],
            body: |m| {
                let t = m.transpose("input", &[3, 1, 2, 0, 4]);
                let r = m.reshape(&t, &[3, 197, 1, 768]);
                m.gather(&r, 0, &[], &[1])
            },
            expect: &["transpose", "gather"],
            forbid: &[],
        },
        Case {
            name: "vit_heads",
            input: &[197, 12, 64],
            output: &[12, 197, 64],
            body: |m| m.transpose("input", &[1, 0, 2]),
            expect: &["transpose"],
            forbid: &[],
        },
        Case {
            name: "vit_unit_axis",
            input: &[1, 197, 768],
            output: &[197, 1, 768],
            body: |m| {
                let t = m.transpose("input", &[1, 0, 2]);
                m.op("Neg", &[&t], vec![])
            },
            expect: &[],
            forbid: &["transpose"],
        },
        Case {
            name: "vit_kt_cancels",
            input: &[12, 197, 64],
            output: &[1, 12, 197, 64],
            body: |m| {
                let t = m.transpose("input", &[0, 2, 1]);
                let r = m.reshape(&t, &[1, 12, 64, 197]);
                let back = m.transpose(&r, &[0, 1, 3, 2]);
                m.op("Neg", &[&back], vec![])
            },
            expect: &[],
            forbid: &["transpose"],
        },
        Case {
            name: "swin_window_partition",
            input: &[1, 8, 7, 8, 7, 96],
            output: &[1, 8, 8, 7, 7, 96],
            body: |m| m.transpose("input", &[0, 1, 3, 2, 4, 5]),
            expect: &["transpose"],
            forbid: &[],
        },
        Case {
            name: "swin_qkv",
            input: &[64, 49, 3, 3, 32],
            output: &[3, 64, 3, 49, 32],
            body: |m| m.transpose("input", &[2, 0, 3, 1, 4]),
            expect: &["transpose"],
            forbid: &[],
        },
        Case {
            name: "swin_roll",
            input: &[1, 56, 56, 96],
            output: &[1, 56, 56, 96],
            body: |m| {
                let tail = m.slice("input", &[3], &[MAX], &[1], &[1]);
                let head = m.slice("input", &[0], &[3], &[1], &[1]);
                m.op("Concat", &[&tail, &head], vec![("axis", Attr::Int(1))])
            },
            // torch.roll's two Slices and Concat become one Gather
            // (passes/concat_of_slices).
            expect: &["gather"],
            forbid: &["slice", "concat"],
        },
        Case {
            name: "convnext_nhwc_and_back",
            input: &[1, 96, 56, 56],
            output: &[1, 96, 56, 56],
            body: |m| {
                let t = m.transpose("input", &[0, 2, 3, 1]);
                let n = m.op("Neg", &[&t], vec![]);
                m.transpose(&n, &[0, 3, 1, 2])
            },
            expect: &["transpose"],
            forbid: &[],
        },
        Case {
            name: "odd_transpose_49x197",
            input: &[49, 197],
            output: &[197, 49],
            body: |m| m.transpose("input", &[1, 0]),
            expect: &["transpose"],
            forbid: &[],
        },
        Case {
            name: "slice_steps",
            input: &[5, 9, 6],
            output: &[3, 9, 3],
            body: |m| {
                m.slice(
                    "input",
                    &[0, -1, 1],
                    &[5, i64::MIN, 6],
                    &[0, 1, 2],
                    &[2, -1, 2],
                )
            },
            expect: &["slice"],
            forbid: &[],
        },
        Case {
            name: "gather_axis1",
            input: &[3, 7, 5],
            output: &[3, 4, 5],
            body: |m| m.gather("input", 1, &[4], &[6, -7, 2, 2]),
            expect: &["gather"],
            forbid: &[],
        },
        Case {
            name: "gather_2d_indices",
            input: &[6, 49],
            output: &[2, 2, 49],
            body: |m| m.gather("input", 0, &[2, 2], &[0, 2, 5, 1]),
            expect: &["gather"],
            forbid: &[],
        },
        Case {
            name: "pad_constant",
            input: &[1, 3, 7, 9],
            output: &[1, 3, 10, 12],
            body: |m| m.pad("input", &[0, 0, 1, 2, 0, 0, 2, 1], "constant", Some(0.5)),
            expect: &["pad"],
            forbid: &[],
        },
        Case {
            name: "pad_edge",
            input: &[1, 3, 7, 9],
            output: &[1, 3, 10, 14],
            body: |m| m.pad("input", &[0, 0, 2, 3, 0, 0, 1, 2], "edge", None),
            expect: &["pad"],
            forbid: &[],
        },
        Case {
            name: "pad_reflect",
            input: &[1, 3, 7, 9],
            output: &[1, 3, 10, 14],
            body: |m| m.pad("input", &[0, 0, 2, 3, 0, 0, 1, 2], "reflect", None),
            expect: &["pad"],
            forbid: &[],
        },
        Case {
            name: "expand",
            input: &[3, 1, 5],
            output: &[2, 3, 4, 5],
            body: |m| {
                let s = m.int64s(&[4], &[2, 3, 4, 5]);
                m.op("Expand", &["input", &s], vec![])
            },
            expect: &["expand"],
            forbid: &[],
        },
        Case {
            name: "tile",
            input: &[2, 3, 5],
            output: &[4, 3, 15],
            body: |m| {
                let r = m.int64s(&[3], &[2, 1, 3]);
                m.op("Tile", &["input", &r], vec![])
            },
            expect: &["tile"],
            forbid: &[],
        },
        Case {
            name: "where",
            input: &[4, 49],
            output: &[4, 49],
            body: |m| {
                let zero = m.floats(&[], &[0.0]);
                let cond = m.op("Greater", &["input", &zero], vec![]);
                let values: Vec<f32> = (0..49).map(|i| i as f32 / 8.0 - 3.0).collect();
                let other = m.floats(&[49], &values);
                m.op("Where", &[&cond, "input", &other], vec![])
            },
            expect: &["where"],
            forbid: &[],
        },
    ]
}

fn model_bytes(case: &Case) -> Vec<u8> {
    let mut net = Net::default();
    let out = (case.body)(&mut net);
    net.finish(case.name, case.input, &out, case.output)
}

/// The kernel families of a module's symbols (`transpose_1a2b3c4d_b256i1`
/// → `transpose`).
fn families(symbols: &[String]) -> Vec<String> {
    symbols.iter().map(|s| gpu::template_of(s)).collect()
}

fn check_families(case: &Case, symbols: &[String]) -> Result<(), String> {
    let families = families(symbols);
    for want in case.expect {
        if !families.iter().any(|f| f == want) {
            return Err(format!("no {want} kernel among {symbols:?}"));
        }
    }
    for bad in case.forbid {
        if families.iter().any(|f| f == bad) {
            return Err(format!("a {bad} kernel is left: {symbols:?}"));
        }
    }
    Ok(())
}

// ---- the GPU check -------------------------------------------------------------------

/// A build and the CPU's answers for it.
struct Ready {
    built: Built,
    input: Vec<f32>,
    emulated: Vec<f32>,
    traced: Vec<Vec<f32>>,
    reference: Vec<f32>,
}

fn build(case: &Case, precision: Precision, tmp: &Path) -> Result<Ready, String> {
    let dir = tmp.join(format!("{}_{precision}", case.name));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let onnx = dir.join(format!("{}.onnx", case.name));
    std::fs::write(&onnx, model_bytes(case)).map_err(|e| format!("{}: {e}", onnx.display()))?;
    let built = Build::new(&onnx)
        .precision(precision)
        .name("m")
        .out_dir(&dir)
        .compile()
        .map_err(|e| format!("build: {e}"))?
        .into_iter()
        .next()
        .ok_or("the build returned nothing")?;
    check_families(
        case,
        &built
            .spec
            .kernels
            .iter()
            .map(|k| k.to_string())
            .collect::<Vec<_>>(),
    )?;
    let input = fill(11, 0.0, 1.0, built.spec.inputs[0].elements());
    let opts = RunOptions::default();
    let graph = &built.compiled.graph;
    let emulated = run(graph, &[&input], &opts)
        .map_err(|e| format!("CPU emulation: {e}"))?
        .swap_remove(0);
    let traced = run_traced(graph, &[&input], &opts).map_err(|e| format!("CPU trace: {e}"))?;
    let reference = run(&built.compiled.imported, &[&input], &opts)
        .map_err(|e| format!("CPU reference: {e}"))?
        .swap_remove(0);
    Ok(Ready {
        built,
        input,
        emulated,
        traced,
        reference,
    })
}

/// The first elements where `got` and `want` differ in their bits.
fn bit_diff(got: &[f32], want: &[f32]) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("{} elements, want {}", got.len(), want.len()));
    }
    let bad: Vec<String> = got
        .iter()
        .zip(want)
        .enumerate()
        .filter(|(_, (g, w))| g.to_bits() != w.to_bits())
        .take(4)
        .map(|(i, (g, w))| format!("[{i}] {g} vs {w}"))
        .collect();
    let count = got
        .iter()
        .zip(want)
        .filter(|(g, w)| g.to_bits() != w.to_bits())
        .count();
    (count > 0).then(|| format!("{count} elements differ, e.g. {}", bad.join(", ")))
}

fn check(precision: Precision, ready: Ready, mode: Mode) -> Result<(), String> {
    let Ready {
        built,
        input,
        emulated,
        traced,
        reference,
    } = ready;
    let Some(mut model) = gpu::load(&built.dir, mode)? else {
        gpu::discard_build(&built.dir);
        return Ok(());
    };
    let mut problems = Vec::new();
    let mut out = vec![f32::NAN; model.spec().outputs[0].elements()];
    model
        .infer(&input, &mut out)
        .map_err(|e| format!("infer: {e}"))?;
    if let Some(d) = bit_diff(&out, &emulated) {
        problems.push(format!("output vs the CPU emulation: {d}"));
    }
    if precision == Precision::Fp32 {
        if let Some(d) = bit_diff(&out, &reference) {
            problems.push(format!("output vs the fp32 reference: {d}"));
        }
    }
    let mut again = vec![f32::NAN; out.len()];
    model
        .infer(&input, &mut again)
        .map_err(|e| format!("second infer: {e}"))?;
    if bit_diff(&again, &out).is_some() {
        problems.push("two runs differ".into());
    }
    let graph = &built.compiled.graph;
    let node_of: HashMap<&str, usize> = graph
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (graph.value(n.output).name.as_str(), i))
        .collect();
    let spec = &built.spec;
    let ran = model.run_layers(&input, |i, slot, bytes| {
        let launch = &spec.launches[i];
        let symbol = &spec.kernels[launch.kernel as usize];
        match node_of.get(&*slot.name) {
            Some(&node) => {
                let got = aotune::runtime::decode_slot(slot, bytes);
                if let Some(d) = bit_diff(&got, &traced[node]) {
                    problems.push(format!("launch {i} ({symbol}): {d}"));
                }
            }
            None => problems.push(format!(
                "launch {i} writes '{}', no node's output",
                slot.name
            )),
        }
        true
    });
    if let Err(e) = ran {
        problems.push(format!("run_layers: {e}"));
    }
    drop(model);
    gpu::discard_build(&built.dir);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// Builds and checks every case at `precision`; fails listing every problem.
fn sweep(test: &str, precision: Precision) {
    let Some(mode) = gpu::mode_or_skip(test) else {
        return;
    };
    let tmp = TempDir::new(&format!("gpu-movement-{test}"));
    let all = cases();
    let indices: Vec<usize> = (0..all.len()).collect();
    let mut failures = Vec::new();
    gpu::pipeline(
        indices,
        |i| (i, gpu::catch(|| build(&all[i], precision, tmp.path()))),
        |(i, result)| {
            let label = format!("{} {precision}", all[i].name);
            match result.and_then(|ready| check(precision, ready, mode)) {
                Ok(()) => println!("{label}: ok"),
                Err(e) => {
                    eprintln!("FAIL {label}: {e}");
                    failures.push(format!("{label}: {e}"));
                }
            }
        },
    );
    assert!(
        failures.is_empty(),
        "{test}: {} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn movement_fp32() {
    sweep("movement_fp32", Precision::Fp32);
}

#[test]
fn movement_fp16() {
    sweep("movement_fp16", Precision::Fp16);
}

/// Without nvcc or a GPU: every case imports, optimizes to the intended ops
/// and generates its kernels at fp32 and fp16.
#[test]
fn movement_cases_generate_kernels() {
    for case in cases() {
        let bytes = model_bytes(&case);
        for precision in [Precision::Fp32, Precision::Fp16] {
            let options = CompileOptions {
                batch: None,
                precision,
                channels_last: true,
                ..Default::default()
            };
            let compiled = compile_bytes(&bytes, case.name, &options)
                .unwrap_or_else(|e| panic!("{} {precision}: {e}", case.name));
            let out = compiled.graph.value(compiled.graph.outputs[0]);
            assert_eq!(out.shape, case.output, "{} {precision}", case.name);
            let module = generate_cuda(&compiled.graph, &compiled.plan, &ConfigOverrides::new())
                .unwrap_or_else(|e| panic!("{} {precision}: {e}", case.name));
            check_families(&case, &module.kernels)
                .unwrap_or_else(|e| panic!("{} {precision}: {e}", case.name));
            assert!(
                module.warnings.is_empty(),
                "{}: {:?}",
                case.name,
                module.warnings
            );
        }
    }
}

/// The ops `movement.cu` serves.
const MOVEMENT_OPS: [&str; 7] = [
    "Transpose",
    "Slice",
    "Gather",
    "Expand",
    "Tile",
    "Pad",
    "Where",
];

/// Real exports (`tests/fixtures`), optimized at fp16: every data-movement
/// node left has a kernel, and each distinct one compiles with nvcc (when
/// there is one). Prints what each export keeps. Slow in debug builds
/// (ViT-B/16 and Swin-T imported whole): `cargo test --profile ci --test
/// gpu_movement -- --ignored real_exports`.
#[test]
#[ignore]
fn real_exports_movement_nodes_compile() {
    let nvcc = Nvcc::find().ok();
    if nvcc.is_none() {
        println!("no nvcc: the kernels are rendered, not compiled");
    }
    let tmp = TempDir::new("gpu-movement-real");
    for name in [
        "vit_b_16_dynamo",
        "vit_b_16_legacy",
        "swin_t_dynamo",
        "swin_t_legacy",
        "convnext_tiny_dynamo",
    ] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        let bytes = common::fixture::refilled_model(&dir);
        let options = CompileOptions {
            batch: Some(1),
            precision: Precision::Fp16,
            channels_last: true,
            ..Default::default()
        };
        let compiled =
            compile_bytes(&bytes, name, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
        let graph = &compiled.graph;
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        let mut sources: BTreeMap<String, String> = BTreeMap::new();
        for (i, node) in graph.nodes.iter().enumerate() {
            *counts.entry(node.op.kind()).or_default() += 1;
            if !MOVEMENT_OPS.contains(&node.op.kind()) {
                continue;
            }
            let id = aotune_compiler::ir::NodeId(i as u32);
            let space = task_candidates(graph, id).unwrap_or_else(|e| panic!("{name}: {e}"));
            let kernel = render_candidate(graph, id, &space.configs[space.default])
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            sources.insert(kernel.symbol, kernel.source);
        }
        println!(
            "{name} fp16: {counts:?}; {} distinct movement kernels",
            sources.len()
        );
        let Some(nvcc) = &nvcc else { continue };
        for (symbol, source) in &sources {
            let cu = tmp.path().join(format!("{symbol}.cu"));
            std::fs::write(&cu, source).unwrap();
            let log = nvcc
                .compile_fatbin(&cu, &tmp.path().join(format!("{symbol}.fatbin")))
                .unwrap_or_else(|e| panic!("{name} {symbol}: {e}"));
            assert!(
                !log.lines()
                    .any(|l| l.contains("bytes spill") && !l.contains(" 0 bytes spill stores")),
                "{name} {symbol} spills:\n{log}"
            );
        }
    }
}
