//! The CPU reference executor: runs any verified [`Graph`] on the CPU and is
//! the oracle every GPU test compares against.
//!
//! Callers feed and receive tensors as *logical row-major f32*, whatever the
//! values' layouts and storage types are. Inside, every value is held in its
//! physical order and storage type: each op decodes its inputs to f32, computes
//! (accumulating in f32 or, with [`Accumulate::F64`], in f64), and the store
//! rounds its result to the output's dtype and lays it out in the output's
//! layout. [`run`] keeps each value in a buffer of its own; [`run_planned`]
//! keeps every planned value in one byte arena at its planned offset, so a
//! memory plan that overlaps two live values gives wrong results. Matrix
//! products go through `matrixmultiply` (its threads follow
//! `MATMUL_NUM_THREADS`, at most 4), everything else is parallelized with
//! rayon.

pub(crate) mod attention;
mod broadcast;
pub(crate) mod conv;
pub(crate) mod einsum;
pub(crate) mod elementwise;
mod execute;
pub(crate) mod gather;
pub(crate) mod gemm;
mod layout;
pub(crate) mod math;
pub(crate) mod normalize;
mod op_io;
pub(crate) mod pad;
pub(crate) mod pool;
pub(crate) mod reduce;
pub(crate) mod resize;
mod row_norm;
mod scalar;
pub(crate) mod scatter;
pub(crate) mod select;
pub(crate) mod shape_ops;
pub(crate) mod softmax;
mod storage;
pub(crate) mod strided;

#[cfg(test)]
mod perf;
#[cfg(test)]
pub(crate) mod testing;

/// What an op's `reference` function in [`crate::ops`] receives and
/// returns; the kernels it calls are the `pub(crate)` modules above.
pub(crate) use op_io::{Ctx, OpResult, OutSpec, Tensor};

use crate::ir::{Graph, VerifyError};
use crate::plan::MemoryPlan;
use execute::Mode;

/// Type in which reductions (conv, gemm, matmul, pool sums, softmax, means)
/// accumulate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Accumulate {
    /// What the GPU kernels do: f32 accumulation.
    #[default]
    F32,
    /// Every reduction in f64, rounded to f32 once at the end: a tighter oracle.
    F64,
}

/// How to run a graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunOptions {
    pub accumulate: Accumulate,
    /// Worker threads for the non-GEMM work (rayon); `None` uses rayon's
    /// global pool (all cores). GEMM threads are `matrixmultiply`'s own and
    /// follow the `MATMUL_NUM_THREADS` environment variable.
    pub threads: Option<usize>,
}

/// Why a graph could not be run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RunError {
    #[error("graph does not verify: {0}")]
    InvalidGraph(#[from] VerifyError),
    #[error("graph has {expected} inputs, got {got}")]
    InputCount { expected: usize, got: usize },
    #[error(
        "input {index} '{name}': expected {expected} elements (shape {shape:?}, logical row-major), got {got}"
    )]
    InputLength {
        index: usize,
        name: String,
        shape: Vec<usize>,
        expected: usize,
        got: usize,
    },
    #[error("node {index} '{name}' ({kind}): {message}")]
    Node {
        index: usize,
        name: String,
        kind: &'static str,
        message: String,
    },
    #[error("memory plan, value %{value} '{name}': {message}")]
    Plan {
        value: u32,
        name: String,
        message: String,
    },
    /// A bug in the executor, not in the graph or the inputs.
    #[error("internal error: {0}")]
    Internal(String),
    #[error("cannot start a pool of {threads} threads: {message}")]
    ThreadPool { threads: usize, message: String },
}

/// Runs `graph` with each value in its own buffer. `inputs` and the returned
/// outputs are logical row-major f32, in graph order.
pub fn run(graph: &Graph, inputs: &[&[f32]], opts: &RunOptions) -> Result<Vec<Vec<f32>>, RunError> {
    let mut storage = storage::ValueMap::new(graph);
    execute::execute(graph, &mut storage, inputs, opts, Mode::Outputs)
}

/// Runs `graph` with every planned value in one byte arena of
/// `plan.arena_bytes`, at its planned offset, in its storage type and
/// physical layout; constants are read from the graph. A plan that lets two
/// live values overlap gives wrong results, which is what this is for.
pub fn run_planned(
    graph: &Graph,
    plan: &MemoryPlan,
    inputs: &[&[f32]],
    opts: &RunOptions,
) -> Result<Vec<Vec<f32>>, RunError> {
    let mut storage = storage::Arena::new(graph, plan)?;
    execute::execute(graph, &mut storage, inputs, opts, Mode::Outputs)
}

/// Runs `graph` and returns the output of every node, in node order, each
/// logical row-major f32 (rounded to its storage type): for per-layer
/// comparison.
pub fn run_traced(
    graph: &Graph,
    inputs: &[&[f32]],
    opts: &RunOptions,
) -> Result<Vec<Vec<f32>>, RunError> {
    let mut storage = storage::ValueMap::new(graph);
    execute::execute(graph, &mut storage, inputs, opts, Mode::Trace)
}

pub use aotune_spec::stats::{l2_sums, rel_l2, rel_l2_of_sums};

#[cfg(test)]
mod tests {
    use super::testing::{run1, Rng};
    use super::*;
    use crate::ir::{DType, Layout, Op, UnaryOp, ValueId};
    use crate::plan::Buffer;
    use crate::test_graphs::Builder;

    /// `x → relu → a;  a → sigmoid → b;  c = a + b`: values x=%0, a=%1, b=%2, c=%3.
    fn diamond(dtype: DType) -> Graph {
        let mut g = Builder::new();
        let x = g.input("x", &[1, 4, 4, 4]);
        let a = g.op(Op::Unary(UnaryOp::Relu), &[x]);
        let b = g.op(Op::Unary(UnaryOp::Sigmoid), &[a]);
        let c = g.op(Op::Binary(crate::ir::BinaryOp::Add), &[a, b]);
        for v in [a, b] {
            g.set(v, Layout::RowMajor, dtype);
        }
        g.output(c);
        g.finish()
    }

    fn buffer(value: u32, offset: usize, bytes: usize, first: usize, last: usize) -> Buffer {
        Buffer {
            value: ValueId(value),
            offset,
            bytes,
            first,
            last,
            alias_of: None,
        }
    }

    /// A hand-made plan for [`diamond`]; `b_offset` places b.
    fn diamond_plan(dtype: DType, b_offset: usize) -> MemoryPlan {
        let (f32_bytes, bytes) = (64 * 4, 64 * dtype.size());
        MemoryPlan {
            alignment: 256,
            arena_bytes: 768,
            lower_bound: 768,
            buffers: vec![
                buffer(0, 0, f32_bytes, 0, 1),
                buffer(1, 256, bytes, 1, 3),
                buffer(2, b_offset, bytes, 2, 3),
                buffer(3, 512, f32_bytes, 3, 4),
            ],
        }
    }

    #[test]
    fn correct_plan_matches_run() {
        let x = Rng::new(61).vec(64);
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let graph = diamond(dtype);
            let want = run(&graph, &[&x], &RunOptions::default()).unwrap();
            // b reuses the bytes of x, dead after node 0.
            let plan = diamond_plan(dtype, 0);
            let got = run_planned(&graph, &plan, &[&x], &RunOptions::default()).unwrap();
            assert_eq!(got, want, "{dtype}");
        }
    }

    #[test]
    fn overlapping_live_buffers_change_the_result() {
        let x = Rng::new(62).vec(64);
        let graph = diamond(DType::F32);
        let want = run(&graph, &[&x], &RunOptions::default()).unwrap();
        // b on top of a, which node 2 still reads.
        let plan = diamond_plan(DType::F32, 256);
        let got = run_planned(&graph, &plan, &[&x], &RunOptions::default()).unwrap();
        assert_ne!(got, want);
        assert!(rel_l2(&got[0], &want[0]) > 0.01);
    }

    #[test]
    fn view_aliases_read_the_bytes_of_their_root() {
        let mut g = Builder::new();
        let x = g.input("x", &[1, 2, 2, 2]);
        let a = g.op(Op::Unary(UnaryOp::Relu), &[x]);
        let f = g.op(Op::Flatten { axis: 1 }, &[a]);
        g.output(f);
        let graph = g.finish();
        let x = Rng::new(63).vec(8);
        let want = run(&graph, &[&x], &RunOptions::default()).unwrap();
        let plan = |f_offset| MemoryPlan {
            alignment: 256,
            arena_bytes: 768,
            lower_bound: 512,
            buffers: vec![
                buffer(0, 0, 32, 0, 1),
                buffer(1, 256, 32, 1, 2),
                Buffer {
                    alias_of: Some(ValueId(1)),
                    ..buffer(2, f_offset, 32, 2, 3)
                },
            ],
        };
        let opts = RunOptions::default();
        assert_eq!(run_planned(&graph, &plan(256), &[&x], &opts).unwrap(), want);
        // No kernel runs for an alias: at the wrong offset it reads zeros.
        assert_eq!(
            run_planned(&graph, &plan(512), &[&x], &opts).unwrap(),
            vec![vec![0.0; 8]]
        );
    }

    #[test]
    fn bad_plans_are_typed_errors() {
        let graph = diamond(DType::F32);
        let x = vec![0.5; 64];
        let opts = RunOptions::default();
        let mut missing = diamond_plan(DType::F32, 0);
        missing.buffers.remove(2);
        let err = run_planned(&graph, &missing, &[&x], &opts).unwrap_err();
        assert!(matches!(err, RunError::Plan { value: 2, .. }), "{err}");
        let mut small = diamond_plan(DType::F32, 0);
        small.buffers[1].bytes = 100;
        assert!(matches!(
            run_planned(&graph, &small, &[&x], &opts),
            Err(RunError::Plan { value: 1, .. })
        ));
        let mut outside = diamond_plan(DType::F32, 0);
        outside.buffers[3].offset = usize::MAX - 8;
        let err = run_planned(&graph, &outside, &[&x], &opts).unwrap_err();
        assert!(matches!(err, RunError::Plan { value: 3, .. }), "{err}");
    }

    #[test]
    fn wrong_input_count_and_length_are_typed_errors() {
        let graph = diamond(DType::F32);
        let opts = RunOptions::default();
        let err = run(&graph, &[], &opts).unwrap_err();
        assert_eq!(
            err,
            RunError::InputCount {
                expected: 1,
                got: 0
            }
        );
        let x = vec![0.0; 63];
        let err = run(&graph, &[&x], &opts).unwrap_err();
        assert!(matches!(
            err,
            RunError::InputLength {
                index: 0,
                expected: 64,
                got: 63,
                ..
            }
        ));
        let message = err.to_string();
        assert!(
            message.contains("expected 64")
                && message.contains("got 63")
                && message.contains("[1, 4, 4, 4]"),
            "{message}"
        );
        let err = run_traced(&graph, &[&x, &x], &opts).unwrap_err();
        assert!(matches!(
            err,
            RunError::InputCount {
                expected: 1,
                got: 2
            }
        ));
        let plan = diamond_plan(DType::F32, 0);
        assert!(matches!(
            run_planned(&graph, &plan, &[&x], &opts),
            Err(RunError::InputLength { .. })
        ));
    }

    #[test]
    fn unverified_graph_is_an_error_not_a_panic() {
        let mut graph = diamond(DType::F32);
        graph.nodes[1].inputs[0] = ValueId(99);
        let err = run(&graph, &[&[0.0; 64]], &RunOptions::default()).unwrap_err();
        assert!(matches!(err, RunError::InvalidGraph(_)), "{err}");
    }

    #[test]
    fn trace_returns_every_node_output_in_logical_order() {
        let mut g = Builder::new();
        let x = g.input("x", &[1, 3, 2, 2]);
        let cl = g.op(Op::Convert, &[x]);
        g.set(cl, Layout::ChannelsLast, DType::F16);
        let r = g.op(Op::Unary(UnaryOp::Relu), &[cl]);
        g.set(r, Layout::ChannelsLast, DType::F32);
        g.output(r);
        let graph = g.finish();
        let x = Rng::new(64).vec(12);
        let trace = run_traced(&graph, &[&x], &RunOptions::default()).unwrap();
        let rounded: Vec<f32> = x.iter().map(|&v| DType::F16.round(v)).collect();
        assert_eq!(trace.len(), 2);
        assert_eq!(trace[0], rounded);
        assert_eq!(
            trace[1],
            rounded.iter().map(|v| v.max(0.0)).collect::<Vec<_>>()
        );
        assert_eq!(trace[1], run1(&graph, &[&x]));
    }

    #[test]
    fn thread_count_does_not_change_results() {
        let graph = diamond(DType::F32);
        let x = Rng::new(65).vec(64);
        let want = run(&graph, &[&x], &RunOptions::default()).unwrap();
        for threads in [1, 3] {
            let opts = RunOptions {
                threads: Some(threads),
                ..RunOptions::default()
            };
            assert_eq!(run(&graph, &[&x], &opts).unwrap(), want);
        }
    }

    #[test]
    fn outputs_may_be_inputs_and_constants() {
        let mut g = Builder::new();
        let x = g.input("x", &[2]);
        let c = g.constant("c", &[2], vec![1.0, 2.0]);
        let y = g.op(Op::Binary(crate::ir::BinaryOp::Add), &[x, c]);
        g.output(x);
        g.output(c);
        g.output(y);
        let graph = g.finish();
        let out = run(&graph, &[&[3.0, 4.0]], &RunOptions::default()).unwrap();
        assert_eq!(out, vec![vec![3.0, 4.0], vec![1.0, 2.0], vec![4.0, 6.0]]);
    }
}
