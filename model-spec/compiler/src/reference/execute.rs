//! The interpreter loop: check the inputs, store them, run every node in
//! order, read the outputs back as logical row-major f32.
//!
//! Each node loads its inputs from storage (constants from the graph) as
//! [`Tensor`]s in their physical order, the op computes an [`Output`] in a
//! layout of its choosing, the loop moves it to the output value's layout and
//! stores it (the storage rounds to the dtype). In [`Mode::Outputs`] a value
//! is released after its last reader; [`Mode::Trace`] instead reads every
//! node's output back as it is written.

use super::layout::{relayout_vec, to_row_major};
use super::op_io::{Ctx, OpResult, OutSpec, Tensor};
use super::storage::Storage;
use super::{conv, pool, shape_ops};
use super::{RunError, RunOptions};
use crate::ir::{
    infer_shape, verify, DType, Epilogue, GlobalPool, Graph, Layout, Op, Precision, ValueId,
};
use crate::ops;
use std::borrow::Cow;

/// What [`execute`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The graph outputs.
    Outputs,
    /// Every node's output, in node order.
    Trace,
}

fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// Runs `graph` over `storage`, inside a pool of `opts.threads` when given.
pub(crate) fn execute<S: Storage>(
    graph: &Graph,
    storage: &mut S,
    inputs: &[&[f32]],
    opts: &RunOptions,
    mode: Mode,
) -> Result<Vec<Vec<f32>>, RunError> {
    verify(graph)?;
    check_inputs(graph, inputs)?;
    match opts.threads {
        None => execute_verified(graph, storage, inputs, opts, mode),
        Some(threads) => rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .build()
            .map_err(|e| RunError::ThreadPool {
                threads,
                message: e.to_string(),
            })?
            .install(|| execute_verified(graph, storage, inputs, opts, mode)),
    }
}

fn check_inputs(graph: &Graph, inputs: &[&[f32]]) -> Result<(), RunError> {
    if inputs.len() != graph.inputs.len() {
        return Err(RunError::InputCount {
            expected: graph.inputs.len(),
            got: inputs.len(),
        });
    }
    for (index, (&id, data)) in graph.inputs.iter().zip(inputs).enumerate() {
        let value = graph.value(id);
        let expected = checked_numel(&value.shape).unwrap_or(usize::MAX);
        if data.len() != expected {
            return Err(RunError::InputLength {
                index,
                name: value.name.clone(),
                shape: value.shape.clone(),
                expected,
                got: data.len(),
            });
        }
    }
    Ok(())
}

fn load<'a, S: Storage>(
    graph: &'a Graph,
    storage: &'a S,
    id: ValueId,
) -> Result<Tensor<'a>, String> {
    let value = graph.value(id);
    let data = match value.constant_data() {
        Some(data) => Cow::Borrowed(data.as_slice()),
        None => storage.load(id)?,
    };
    Ok(Tensor {
        data,
        shape: &value.shape,
        layout: value.layout,
    })
}

/// Reads `id` back as logical row-major f32.
fn read_logical<S: Storage>(graph: &Graph, storage: &S, id: ValueId) -> Result<Vec<f32>, String> {
    let tensor = load(graph, storage, id)?;
    Ok(to_row_major(tensor.data, tensor.shape, tensor.layout).into_owned())
}

fn execute_verified<S: Storage>(
    graph: &Graph,
    storage: &mut S,
    inputs: &[&[f32]],
    opts: &RunOptions,
    mode: Mode,
) -> Result<Vec<Vec<f32>>, RunError> {
    let ctx = Ctx {
        accumulate: opts.accumulate,
        tf32: graph.precision == Precision::Tf32,
        operands: DType::F32,
    };
    let internal = RunError::Internal;
    for (&id, data) in graph.inputs.iter().zip(inputs) {
        let value = graph.value(id);
        let physical = relayout_vec(data.to_vec(), &value.shape, Layout::RowMajor, value.layout);
        storage.store(id, physical).map_err(internal)?;
    }
    // Last node reading each value; graph outputs are never released.
    let mut last_use: Vec<Option<usize>> = vec![None; graph.values.len()];
    for (i, node) in graph.nodes.iter().enumerate() {
        for &v in &node.inputs {
            last_use[v.index()] = Some(i);
        }
    }
    for &v in &graph.outputs {
        last_use[v.index()] = None;
    }
    let mut trace = Vec::new();
    for (index, node) in graph.nodes.iter().enumerate() {
        let fail = |message: String| RunError::Node {
            index,
            name: node.name.clone(),
            kind: node.op.kind(),
            message,
        };
        let out_value = graph.value(node.output);
        if !storage.is_alias(node.output) {
            let tensors = node
                .inputs
                .iter()
                .map(|&id| load(graph, storage, id))
                .collect::<Result<Vec<_>, _>>()
                .map_err(fail)?;
            let out = OutSpec {
                shape: &out_value.shape,
                dtype: out_value.dtype,
            };
            let ctx = Ctx {
                operands: node
                    .inputs
                    .first()
                    .map_or(DType::F32, |&v| graph.value(v).dtype),
                ..ctx
            };
            let result = run_op(&ctx, &node.op, &tensors, &out).map_err(|e| fail(e.0))?;
            drop(tensors);
            if result.data.len() != out_value.numel() {
                return Err(fail(format!(
                    "internal: op produced {} elements for shape {:?}",
                    result.data.len(),
                    out_value.shape
                )));
            }
            let data = relayout_vec(
                result.data,
                &out_value.shape,
                result.layout,
                out_value.layout,
            );
            storage.store(node.output, data).map_err(fail)?;
        }
        match mode {
            Mode::Trace => trace.push(read_logical(graph, storage, node.output).map_err(fail)?),
            Mode::Outputs => {
                for &v in &node.inputs {
                    if last_use[v.index()] == Some(index) {
                        storage.release(v);
                    }
                }
            }
        }
    }
    match mode {
        Mode::Trace => Ok(trace),
        Mode::Outputs => graph
            .outputs
            .iter()
            .map(|&id| read_logical(graph, storage, id).map_err(internal))
            .collect(),
    }
}

/// A [`GlobalPool::Avg`] `FusedConv`: the convolution, its output rounded
/// to the output dtype as a stored value would be, then the global average
/// pool of that value (the steps of the unfused pair).
fn pooled_conv(
    ctx: &Ctx,
    geometry: &crate::ir::Conv2d,
    epilogue: &Epilogue,
    shortcut: &Option<crate::ir::Shortcut>,
    inputs: &[Tensor],
    out: &OutSpec,
) -> OpResult {
    let unpooled = Op::FusedConv {
        conv: *geometry,
        epilogue: *epilogue,
        shortcut: *shortcut,
        pool: None,
        norm: None,
    };
    let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.shape).collect();
    let shape = infer_shape(&unpooled, &shapes)?;
    let conv_out = OutSpec {
        shape: &shape,
        dtype: out.dtype,
    };
    let fused = conv::Fused {
        epilogue,
        shortcut: shortcut.as_ref(),
        norm: None,
    };
    let mut full = conv::conv(ctx, geometry, fused, inputs, &conv_out)?;
    super::storage::round_to(out.dtype, &mut full.data);
    let tensor = Tensor {
        data: Cow::Owned(full.data),
        shape: &shape,
        layout: full.layout,
    };
    pool::global_pool(ctx, pool::Global::Average, &[tensor])
}

/// Dispatches one op: an op imported from ONNX to its module of
/// [`crate::ops`], an op only passes create to its kernel here.
fn run_op(ctx: &Ctx, op: &Op, inputs: &[Tensor], out: &OutSpec) -> OpResult {
    match op {
        Op::Conv(geometry) => ops::conv::reference(ctx, geometry, inputs, out),
        Op::BatchNorm { epsilon } => ops::batch_norm::reference(ctx, *epsilon, inputs),
        Op::Unary(unary) => ops::activation::reference(*unary, inputs),
        Op::Binary(binary) => ops::arithmetic::binary_reference(*binary, inputs, out),
        Op::Sum => ops::arithmetic::sum_reference(ctx, inputs, out),
        Op::Where => ops::where_op::reference(inputs, out),
        Op::MaxPool(geometry) => ops::pool::max_reference(geometry, inputs, out),
        Op::AveragePool {
            pool: geometry,
            count_include_pad,
        } => ops::pool::average_reference(ctx, geometry, *count_include_pad, inputs, out),
        Op::GlobalAveragePool => ops::global_pool::average_reference(ctx, inputs),
        Op::GlobalMaxPool => ops::global_pool::max_reference(ctx, inputs),
        Op::ReduceMean { axes, keepdims: _ } => ops::reduce::mean_reference(ctx, axes, inputs, out),
        Op::Flatten { .. } => ops::flatten::reference(inputs),
        Op::Reshape { .. } => ops::reshape::reference(inputs),
        Op::Identity => ops::identity::reference(inputs),
        Op::Concat { axis } => ops::concat::reference(*axis, inputs, out),
        Op::Softmax { axis } => ops::softmax::reference(ctx, *axis, inputs),
        Op::Attention {
            scale,
            causal,
            views,
        } => ops::attention::reference(ctx, *scale, *causal, views.as_deref(), inputs),
        Op::Transpose { perm } => ops::transpose::reference(perm, inputs),
        Op::Slice {
            starts,
            ends,
            steps,
        } => ops::slice::reference(starts, ends, steps, inputs),
        Op::Gather { axis, indices, .. } => ops::gather::reference(*axis, indices, inputs),
        Op::GatherNd {
            indices,
            indices_shape,
        } => ops::gather_nd::reference(indices, indices_shape, inputs),
        Op::ScatterNd {
            indices,
            indices_shape,
            reduction,
        } => ops::scatter_nd::reference(indices, indices_shape, *reduction, inputs),
        Op::Expand { shape } => ops::expand::reference(shape, inputs),
        Op::Tile { repeats } => ops::tile::reference(repeats, inputs),
        Op::Pad { pads, mode } => ops::pad::reference(pads, *mode, inputs),
        Op::Resize(resize) => ops::resize::reference(resize, inputs),
        Op::Reduce { kind, axes, .. } => ops::reduce::reference(ctx, *kind, axes, inputs, out),
        Op::LogSoftmax { axis } => ops::softmax::log_reference(ctx, *axis, inputs),
        Op::Hardmax { axis } => ops::softmax::hardmax_reference(*axis, inputs),
        Op::LayerNorm { axis, epsilon } => ops::layer_norm::reference(ctx, *axis, *epsilon, inputs),
        Op::GroupNorm { groups, epsilon } => {
            ops::group_norm::reference(ctx, *groups, *epsilon, inputs)
        }
        Op::LpNorm { axis, p } => ops::lp_norm::lp_reference(ctx, *axis, *p, inputs),
        Op::MeanVarianceNorm { axes } => ops::lp_norm::mvn_reference(ctx, axes, inputs),
        Op::Einsum { equation } => ops::einsum::reference(ctx, equation, inputs, out),
        Op::Gemm {
            alpha,
            beta,
            trans_a,
            trans_b,
        } => ops::gemm::gemm_reference(ctx, [*alpha, *beta], [*trans_a, *trans_b], inputs, out),
        Op::MatMul => ops::gemm::matmul_reference(ctx, inputs, out),
        Op::FusedConv {
            conv: geometry,
            epilogue,
            shortcut,
            pool: None,
            norm,
        } => {
            let fused = conv::Fused {
                epilogue,
                shortcut: shortcut.as_ref(),
                norm: norm.as_ref(),
            };
            conv::conv(ctx, geometry, fused, inputs, out)
        }
        // The verifier admits no norm beside a pool.
        Op::FusedConv {
            conv: geometry,
            epilogue,
            shortcut,
            pool: Some(GlobalPool::Avg),
            norm: _,
        } => pooled_conv(ctx, geometry, epilogue, shortcut, inputs, out),
        Op::Dense { epilogue, norm } => {
            super::gemm::dense(ctx, epilogue, norm.as_ref(), inputs, out)
        }
        Op::Convert => shape_ops::convert(inputs),
        Op::PadChannels { .. } => shape_ops::pad_channels(inputs, out),
        Op::SpaceToDepth {
            block,
            pad_top,
            pad_left,
            ..
        } => shape_ops::space_to_depth(*block, [*pad_top, *pad_left], inputs, out),
    }
}
