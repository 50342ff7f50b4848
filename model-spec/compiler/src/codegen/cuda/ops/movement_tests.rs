//! Tests of the data-movement kernels' index plumbing, without a GPU: for
//! each op and shape, the input element every output element reads is
//! known from the CPU reference (run on an input whose values are their
//! offsets), and must equal the map's offsets in Rust, the offsets of the
//! rendered C (compiled on the host with `c++`, where there is one), the
//! tile arithmetic of the tiled path, and the vector path's contiguity.
//! The instances also compile with nvcc without spills.

use super::*;
use crate::codegen::cuda::test_support::{compile_all, node_instance, nvcc};
use crate::codegen::cuda::KernelConfig;
use crate::ir::{Graph, NodeId, PadMode, Precision};
use crate::reference::{run, RunOptions};
use crate::test_graphs::{one_op, In};

/// One test case: a label, the op and its input shape.
fn cases() -> Vec<(&'static str, Op, Vec<usize>)> {
    let t = |perm: &[usize]| Op::Transpose {
        perm: perm.to_vec(),
    };
    let slice = |starts: &[i64], ends: &[i64], steps: &[i64]| Op::Slice {
        starts: starts.to_vec(),
        ends: ends.to_vec(),
        steps: steps.to_vec(),
    };
    let gather = |axis, indices: &[i64], shape: &[usize]| Op::Gather {
        axis,
        indices: indices.to_vec(),
        indices_shape: shape.to_vec(),
    };
    let pad = |pads: &[(usize, usize)], mode| Op::Pad {
        pads: pads.to_vec(),
        mode,
    };
    let max = i64::MAX;
    vec![
        ("vit_qkv", t(&[3, 1, 2, 0, 4]), vec![1, 19, 1, 3, 16]),
        ("vit_unit", t(&[1, 0, 2]), vec![1, 19, 24]),
        ("tiled", t(&[0, 2, 1]), vec![1, 40, 36]),
        ("tiled_odd", t(&[1, 0]), vec![49, 197]),
        ("tiled_rest_before", t(&[0, 2, 3, 1]), vec![3, 20, 2, 17]),
        ("tiled_rest_between", t(&[0, 3, 2, 1]), vec![3, 20, 2, 17]),
        ("rank5", t(&[4, 2, 0, 3, 1]), vec![2, 7, 3, 5, 4]),
        (
            "swin_window",
            t(&[0, 1, 3, 2, 4, 5]),
            vec![1, 2, 7, 2, 7, 8],
        ),
        ("swin_qkv", t(&[2, 0, 3, 1, 4]), vec![4, 7, 3, 3, 8]),
        (
            "rank8",
            t(&[7, 6, 5, 4, 3, 2, 1, 0]),
            vec![2, 1, 3, 2, 1, 2, 3, 2],
        ),
        (
            "roll",
            slice(&[0, 3, 0, 0], &[max, 8, max, max], &[1, 1, 1, 1]),
            vec![1, 8, 8, 16],
        ),
        (
            "steps",
            slice(&[0, -1, 1], &[5, i64::MIN, 6], &[2, -1, 2]),
            vec![5, 9, 6],
        ),
        (
            "backward_inner",
            slice(&[0, 10], &[2, -100], &[1, -3]),
            vec![2, 11],
        ),
        ("gather_scalar", gather(0, &[1], &[]), vec![3, 19, 1, 8]),
        ("gather_vector", gather(1, &[4, -5, 2], &[3]), vec![2, 5, 4]),
        ("gather_2d", gather(0, &[0, 2, 5, 1], &[2, 2]), vec![6, 4]),
        ("gather_range", gather(1, &[1, 2, 3], &[3]), vec![2, 5, 8]),
        (
            "expand",
            Op::Expand {
                shape: vec![2, 3, 4],
            },
            vec![3, 1],
        ),
        (
            "tile",
            Op::Tile {
                repeats: vec![2, 3],
            },
            vec![2, 3],
        ),
        (
            "pad_constant",
            pad(
                &[(0, 0), (0, 1), (1, 2), (2, 0)],
                PadMode::Constant { value: -1.0 },
            ),
            vec![1, 2, 3, 3],
        ),
        (
            "pad_inner_only",
            pad(
                &[(0, 0), (0, 0), (0, 0), (0, 8)],
                PadMode::Constant { value: -1.0 },
            ),
            vec![1, 2, 3, 8],
        ),
        (
            "pad_edge",
            pad(&[(2, 1), (3, 2)], PadMode::Edge),
            vec![3, 4],
        ),
        (
            "pad_reflect",
            pad(&[(2, 1), (3, 4)], PadMode::Reflect),
            vec![3, 4],
        ),
        (
            "pad_reflect_unit",
            pad(&[(1, 1), (0, 0)], PadMode::Reflect),
            vec![1, 4],
        ),
    ]
}

fn graph(op: &Op, shape: &[usize], dtype: DType) -> Graph {
    let input = In::act(shape, dtype, Layout::RowMajor);
    one_op(
        op.clone(),
        &[input],
        dtype,
        Layout::RowMajor,
        Precision::Fp32,
    )
    .0
}

/// What each output element of node 0 reads: the reference's output on an
/// input holding each element's offset (−1 is the pad value).
fn expected(graph: &Graph) -> Vec<i64> {
    let n = graph.value(graph.inputs[0]).numel();
    let iota: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let out = run(graph, &[&iota], &RunOptions::default()).unwrap();
    out[0].iter().map(|&v| v as i64).collect()
}

/// The offsets the tiled path reads and writes, per element: `(output
/// offset, input offset)` for every in-range element of every tile, from
/// the plane offsets `rest` (`rest_in`, `rest_out` of each plane).
fn tiled_pairs(split: &TileSplit, rest: &[(i64, i64)]) -> Vec<(i64, i64)> {
    let mut pairs = Vec::new();
    for &(rin, rout) in rest {
        for b in 0..split.size_b as i64 {
            for a in 0..split.size_a as i64 {
                pairs.push((
                    rout + b * split.out_stride_b + a,
                    rin + a * split.stride_a + b,
                ));
            }
        }
    }
    pairs
}

/// Checks the Rust side of every case and returns, per case, the static
/// functions of its instance (for the host C++ check) and what they must
/// print.
#[test]
fn every_case_reads_what_the_reference_reads() {
    let mut programs = Vec::new();
    for (label, op, shape) in cases() {
        let g = graph(&op, &shape, DType::F32);
        let want = expected(&g);
        let copy = copy_shape(&g, NodeId(0)).unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_eq!(copy.total(), want.len(), "{label}");
        let got: Vec<i64> = (0..want.len())
            .map(|j| copy.map.offset(j).unwrap_or(-1))
            .collect();
        assert_eq!(got, want, "{label}: {:?}", copy.map);
        let expect: Vec<i64> = match copy.path() {
            CopyPath::Tiled(split) => {
                let rest: Vec<(i64, i64)> = (0..split.planes())
                    .map(|r| (rest_offset(&split, r, true), rest_offset(&split, r, false)))
                    .collect();
                let mut pairs = tiled_pairs(&split, &rest);
                pairs.sort_unstable();
                let from_tiles: Vec<i64> = pairs.iter().map(|p| p.1).collect();
                assert_eq!(pairs.len(), want.len(), "{label}: tiles cover the output");
                assert!(
                    pairs.iter().enumerate().all(|(i, p)| p.0 == i as i64),
                    "{label}"
                );
                assert_eq!(from_tiles, want, "{label}: tiled");
                rest.iter().flat_map(|&(i, o)| [i, o]).collect()
            }
            CopyPath::Vector(v) => {
                for start in (0..want.len()).step_by(v) {
                    if want[start] >= 0 {
                        assert_eq!(want[start] % v as i64, 0, "{label}: aligned");
                    }
                    for i in 0..v {
                        let next = if want[start] < 0 {
                            -1
                        } else {
                            want[start] + i as i64
                        };
                        assert_eq!(want[start + i], next, "{label}: vector at {start}");
                    }
                }
                want.clone()
            }
        };
        let config = LinearConfig::default_for(&copy.items());
        let instance = instantiate(&copy, &config, &format!("k_{label}"));
        programs.push((label, copy.path(), instance.code, expect));
    }
    host_check(&programs);
}

/// Offset of plane `r` on the input (`input`) or output side, evaluated
/// from the split like `rest_in` / `rest_out` are rendered.
fn rest_offset(split: &TileSplit, r: usize, input: bool) -> i64 {
    let mut t = r;
    let mut o = if input { split.base } else { 0 };
    for &(size, sin, sout) in split.rest.iter().rev() {
        o += (t % size) as i64 * if input { sin } else { sout };
        t /= size;
    }
    o
}

/// Compiles every case's static functions on the host and compares what
/// they compute with `expect` (per element, or per plane for tiles).
fn host_check(programs: &[(&str, CopyPath, String, Vec<i64>)]) {
    let mut source =
        String::from("#include <cstdio>\n#define __device__\n#define __forceinline__ inline\n");
    let mut main = String::from("int main() {\n");
    for (i, (label, path, code, expect)) in programs.iter().enumerate() {
        let funcs: Vec<&str> = code
            .lines()
            .filter(|l| l.trim_start().starts_with("static __device__"))
            .collect();
        source.push_str(&format!(
            "// {label}\nstruct c{i} {{\n{}\n}};\n",
            funcs.join("\n")
        ));
        match path {
            CopyPath::Tiled(split) => main.push_str(&format!(
                "  for (int r = 0; r < {}; ++r) printf(\"%d\\n%d\\n\", c{i}::rest_in(r), c{i}::rest_out(r));\n",
                split.planes()
            )),
            CopyPath::Vector(_) => main.push_str(&format!(
                "  for (int j = 0; j < {}; ++j) printf(\"%d\\n\", c{i}::src(j));\n",
                expect.len()
            )),
        }
    }
    main.push_str("  return 0;\n}\n");
    source.push_str(&main);
    let Some(out) = run_host(&source) else {
        return;
    };
    let mut values = out.lines().map(|l| l.parse::<i64>().expect("an integer"));
    for (label, _, _, expect) in programs {
        let got: Vec<i64> = values.by_ref().take(expect.len()).collect();
        assert_eq!(&got, expect, "{label}: the rendered C");
    }
    assert!(values.next().is_none());
}

/// Builds and runs `source` with the host's `c++`; `None` (printed) when
/// there is none.
fn run_host(source: &str) -> Option<String> {
    let dir = std::env::temp_dir().join(format!("aotune-movement-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cpp, exe) = (dir.join("maps.cpp"), dir.join("maps"));
    std::fs::write(&cpp, source).unwrap();
    let built = std::process::Command::new("c++")
        .args(["-std=c++17", "-O1", "-o"])
        .arg(&exe)
        .arg(&cpp)
        .output();
    let built = match built {
        Ok(b) => b,
        Err(e) => {
            println!("no host c++ ({e}): the rendered offsets are not compiled");
            return None;
        }
    };
    assert!(
        built.status.success(),
        "c++ failed:\n{}\n{source}",
        String::from_utf8_lossy(&built.stderr)
    );
    let ran = std::process::Command::new(&exe).output().unwrap();
    assert!(ran.status.success());
    let _ = std::fs::remove_dir_all(&dir);
    Some(String::from_utf8(ran.stdout).unwrap())
}

#[test]
fn paths_follow_the_innermost_axis() {
    let path = |label: &str| {
        let (_, op, shape) = cases().into_iter().find(|c| c.0 == label).unwrap();
        let g = graph(&op, &shape, DType::F16);
        copy_shape(&g, NodeId(0)).unwrap().path()
    };
    assert_eq!(path("vit_qkv"), CopyPath::Vector(8));
    assert_eq!(path("vit_unit"), CopyPath::Vector(8));
    assert_eq!(path("swin_qkv"), CopyPath::Vector(8));
    assert_eq!(path("roll"), CopyPath::Vector(8));
    assert_eq!(path("gather_scalar"), CopyPath::Vector(8));
    assert_eq!(path("steps"), CopyPath::Vector(1));
    assert_eq!(path("pad_inner_only"), CopyPath::Vector(1));
    assert!(matches!(path("tiled"), CopyPath::Tiled(_)));
    assert!(matches!(path("tiled_odd"), CopyPath::Tiled(_)));
    // Too narrow to tile: 7 × 4.
    assert_eq!(path("rank5"), CopyPath::Vector(1));
    // ConvNeXt's NCHW → NHWC: [96, 3136] → [3136, 96], 98 × 3 tiles.
    let g = graph(
        &Op::Transpose {
            perm: vec![0, 2, 3, 1],
        },
        &[1, 96, 56, 56],
        DType::F16,
    );
    let copy = copy_shape(&g, NodeId(0)).unwrap();
    let CopyPath::Tiled(split) = copy.path() else {
        panic!("{:?}", copy.path());
    };
    assert_eq!(
        (split.size_a, split.size_b, split.tiles()),
        (96, 3136, 3 * 98)
    );
    assert_eq!(copy.items().items, 3 * 98 * ITEMS_PER_TILE);
}

#[test]
fn channels_last_operands_and_bad_reads_are_refused() {
    let op = Op::Transpose {
        perm: vec![0, 2, 3, 1],
    };
    let mut g = graph(&op, &[1, 8, 4, 4], DType::F16);
    g.values[0].layout = Layout::ChannelsLast;
    let err = copy_shape(&g, NodeId(0)).unwrap_err();
    assert!(
        err.contains("channels-last") && err.contains("Convert"),
        "{err}"
    );
    // A Gather index beyond the axis (the importer rejects it; codegen too).
    let mut g = graph(
        &Op::Gather {
            axis: 0,
            indices: vec![1],
            indices_shape: vec![],
        },
        &[3, 4],
        DType::F32,
    );
    g.nodes[0].op = Op::Gather {
        axis: 0,
        indices: vec![7],
        indices_shape: vec![],
    };
    assert!(copy_shape(&g, NodeId(0))
        .unwrap_err()
        .contains("out of range"));
}

#[test]
fn where_broadcasts_each_operand() {
    let inputs = [
        In::act(&[2, 1], DType::F16, Layout::RowMajor),
        In::act(&[3], DType::F16, Layout::RowMajor),
        In::act(&[2, 3], DType::F32, Layout::RowMajor),
    ];
    let (g, _) = one_op(
        Op::Where,
        &inputs,
        DType::F16,
        Layout::RowMajor,
        Precision::Fp16,
    );
    let shape = select_shape(&g, NodeId(0)).unwrap();
    assert_eq!(shape.items().items, 6);
    let instance = instantiate_select(&shape, &LinearConfig::default_for(&shape.items()), "w");
    assert!(
        instance.code.contains("case 0: { return (j / 3); }"),
        "{}",
        instance.code
    );
    assert!(
        instance.code.contains("case 1: { return (j % 3); }"),
        "{}",
        instance.code
    );
    assert!(
        instance.code.contains("case 2: { return j; }"),
        "{}",
        instance.code
    );
    assert!(
        instance.code.contains("typedef __half TC;"),
        "{}",
        instance.code
    );
}

#[test]
fn movement_kernels_compile_without_spills() {
    let Some(nvcc) = nvcc::find_or_skip() else {
        return;
    };
    let mut instances = Vec::new();
    for (dtype, out) in [
        (DType::F32, DType::F32),
        (DType::F16, DType::F16),
        (DType::BF16, DType::BF16),
        (DType::F16, DType::F32),
    ] {
        for (label, op, shape) in cases() {
            let input = In::act(&shape, dtype, Layout::RowMajor);
            let (g, _) = one_op(op, &[input], out, Layout::RowMajor, Precision::Fp16);
            let label = format!("{label}_{dtype}_{out}");
            instances.push(node_instance::<LinearConfig>(&g, None, &label));
            let small = LinearConfig {
                block: 64,
                per_thread: 4,
            };
            instances.push(node_instance(&g, Some(&small), &format!("{label}_small")));
        }
        let inputs = [
            In::act(&[2, 1], dtype, Layout::RowMajor),
            In::act(&[3], out, Layout::RowMajor),
            In::act(&[2, 3], dtype, Layout::RowMajor),
        ];
        let (g, _) = one_op(Op::Where, &inputs, out, Layout::RowMajor, Precision::Fp16);
        instances.push(node_instance::<LinearConfig>(
            &g,
            None,
            &format!("where_{dtype}_{out}"),
        ));
    }
    let count = instances.len();
    let reports = compile_all(&nvcc, "movement", instances);
    assert_eq!(reports.len(), count);
    let most = reports.iter().map(|r| r.registers).max().unwrap_or(0);
    println!("movement: {count} kernels compile, at most {most} registers");
}
