//! Graph inputs in the storage type: the caller hands the model f16 (or
//! bf16) data instead of f32, so a server copies half the bytes to the
//! device and the input's first conversion only changes the layout.
//!
//! [`set_input_dtype`] runs after [`super::apply_precision`], which leaves
//! every graph input f32 and read only by conversions: layout.rs's NHWC
//! `Convert`, a row-major `Convert` to the storage type where there is no
//! layout change, or (later) their `SpaceToDepth` / `PadChannels` forms. Each
//! of those kernels reads any dtype, so the pass only declares each input
//! `dtype`. A row-major `Convert` then copies the input unchanged, which is
//! correct if not free.
//!
//! The contract: `dtype` is f32 (nothing changes) or the graph's 16-bit
//! storage type ([`crate::ir::Precision::storage`]); every reader of an
//! input is one of those conversions; no input is a graph output (outputs
//! stay f32). Anything else is a [`PassError`] naming the node or input.
//! The CPU reference stores an f16 input rounded to f16, so running it on
//! f32 data equals running the f32-input graph on that data rounded.

use super::{PassError, PassSummary, Uses};
use crate::ir::{debug_verify, DType, Graph, Op, Patch, Value, ValueKind};

const PASS: &str = "input_dtype";

/// Declares every graph input `dtype` (see the module documentation).
pub fn set_input_dtype(graph: &mut Graph, dtype: DType) -> Result<PassSummary, PassError> {
    let mut summary = PassSummary::new(PASS);
    if dtype == DType::F32 {
        summary.add(0, format!("inputs {dtype}"));
        return Ok(summary);
    }
    let storage = graph.precision.storage();
    let error = |node: String, op: &'static str, message: String| PassError {
        pass: PASS,
        node,
        op,
        message,
    };
    if storage != dtype {
        return Err(error(
            "(graph inputs)".into(),
            "Input",
            format!(
                "inputs can be {dtype} only when activations are stored as {dtype}; precision {} \
                 stores {storage}",
                graph.precision
            ),
        ));
    }
    let uses = Uses::of(graph);
    let mut patch = Patch::new(graph);
    let mut changed = 0;
    for &input in &graph.inputs {
        let value = graph.value(input);
        if value.kind != ValueKind::Input || value.dtype == dtype {
            continue;
        }
        if uses.is_output(input) {
            return Err(error(
                value.name.clone(),
                "Input",
                format!(
                    "input `{}` is also a graph output, which stays f32",
                    value.name
                ),
            ));
        }
        for &reader in uses.users(input) {
            let node = graph.node(reader);
            let converts = matches!(
                node.op,
                Op::Convert | Op::PadChannels { .. } | Op::SpaceToDepth { .. }
            );
            if !converts {
                return Err(error(
                    node.name.clone(),
                    node.op.kind(),
                    format!(
                        "reads input `{}` directly; only a conversion may read a {dtype} input",
                        value.name
                    ),
                ));
            }
        }
        patch.set_value(
            input,
            Value {
                dtype,
                ..value.clone()
            },
        );
        changed += 1;
    }
    patch.apply(graph);
    debug_verify(graph, PASS);
    summary.add(changed, format!("inputs {dtype}"));
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{print_graph, Precision};
    use crate::passes::{optimize, PassOptions};
    use crate::reference::{run, RunOptions};
    use crate::test_graphs::Builder;

    fn optimized(graph: &Graph, precision: Precision, input_dtype: DType) -> Graph {
        let mut graph = graph.clone();
        let options = PassOptions {
            precision,
            input_dtype,
            ..PassOptions::default()
        };
        optimize(&mut graph, &options).unwrap();
        graph
    }

    #[test]
    fn an_f16_input_feeds_the_nhwc_convert_and_nothing_else_changes() {
        let (g, _) = Builder::resnet_like(2, 16, 10, false);
        let f32_in = optimized(&g, Precision::Fp16, DType::F32);
        let f16_in = optimized(&g, Precision::Fp16, DType::F16);
        let x = f16_in.inputs[0];
        assert_eq!(f32_in.value(x).dtype, DType::F32);
        assert_eq!(f16_in.value(x).dtype, DType::F16);
        // The same graph otherwise: only the input line of the print differs.
        let (a, b) = (print_graph(&f32_in), print_graph(&f16_in));
        let differing: Vec<(&str, &str)> =
            a.lines().zip(b.lines()).filter(|(l, r)| l != r).collect();
        assert_eq!(differing.len(), 1, "{differing:?}");
        assert!(differing[0].1.contains("input %0: f16[2,3,16,16]"), "{b}");
        // Its only reader converts it (the stem's NHWC Convert, or its
        // SpaceToDepth / PadChannels form).
        let readers: Vec<&str> = f16_in
            .nodes
            .iter()
            .filter(|n| n.inputs.contains(&x))
            .map(|n| n.op.kind())
            .collect();
        assert!(
            !readers.is_empty()
                && readers
                    .iter()
                    .all(|k| ["Convert", "PadChannels", "SpaceToDepth"].contains(k)),
            "{readers:?}"
        );
    }

    #[test]
    fn the_emulation_of_an_f16_input_is_the_f32_input_rounded() {
        let (g, x) = Builder::resnet_like(2, 16, 10, false);
        let rounded: Vec<f32> = x.iter().map(|&v| DType::F16.round(v)).collect();
        assert_ne!(rounded, x, "the test data must lose bits in f16");
        let opts = RunOptions::default();
        let f16_in = optimized(&g, Precision::Fp16, DType::F16);
        let f32_in = optimized(&g, Precision::Fp16, DType::F32);
        let got = run(&f16_in, &[&x], &opts).unwrap();
        let want = run(&f32_in, &[&rounded], &opts).unwrap();
        assert_eq!(got, want);
        // Without layout changes the input goes through a row-major Convert.
        let row_major = |input_dtype| {
            let mut graph = g.clone();
            let options = PassOptions {
                precision: Precision::Fp16,
                channels_last: false,
                input_dtype,
                fuse_depthwise_norm: false,
                fuse_dense_norm: false,
            };
            optimize(&mut graph, &options).unwrap();
            graph
        };
        let got = run(&row_major(DType::F16), &[&x], &opts).unwrap();
        let want = run(&row_major(DType::F32), &[&rounded], &opts).unwrap();
        assert_eq!(got, want);
    }

    #[test]
    fn a_16_bit_input_needs_that_storage_type() {
        let (g, _) = Builder::resnet_like(2, 16, 10, false);
        for (precision, dtype) in [
            (Precision::Fp32, DType::F16),
            (Precision::Tf32, DType::F16),
            (Precision::Bf16, DType::F16),
            (Precision::Fp16, DType::BF16),
        ] {
            let mut graph = g.clone();
            let options = PassOptions {
                precision,
                input_dtype: dtype,
                ..PassOptions::default()
            };
            let e = optimize(&mut graph, &options).unwrap_err();
            assert!(
                e.message.contains(&format!("precision {precision} stores")),
                "{e}"
            );
        }
        let bf16 = optimized(&g, Precision::Bf16, DType::BF16);
        assert_eq!(bf16.value(bf16.inputs[0]).dtype, DType::BF16);
    }

    #[test]
    fn an_input_that_is_also_an_output_is_refused() {
        let mut b = Builder::new();
        let x = b.input("x", &[2, 3]);
        let y = b.relu("relu", x);
        b.output(y);
        b.output(x);
        let mut g = b.finish();
        g.precision = Precision::Fp16;
        let e = set_input_dtype(&mut g, DType::F16).unwrap_err();
        assert!(e.message.contains("also a graph output"), "{e}");
        // And a reader that is not a conversion.
        let mut b = Builder::new();
        let x = b.input("x", &[2, 3]);
        let y = b.relu("relu", x);
        b.output(y);
        let mut g = b.finish();
        g.precision = Precision::Fp16;
        let e = set_input_dtype(&mut g, DType::F16).unwrap_err();
        assert!(e.message.contains("reads input `x` directly"), "{e}");
        assert_eq!(e.node, "relu");
    }
}
