//! Structural checks of a [`Graph`], run after import and after every pass in
//! debug and test builds (tinygrad's `spec.py` idea): topological order, one
//! producer per activation, shapes equal to what inference derives, layouts
//! only where ops understand them, constant payloads of the right size.

use super::graph::{Graph, Value, ValueId, ValueKind};
use super::op::{Activation, ChannelNorm, Op};
use super::shape::infer_shape;
use super::types::{DType, Layout};

/// A broken IR invariant, naming the node or value at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("IR verification failed at {location}: {message}")]
pub struct VerifyError {
    pub location: String,
    pub message: String,
}

fn fail(location: impl Into<String>, message: impl Into<String>) -> VerifyError {
    VerifyError {
        location: location.into(),
        message: message.into(),
    }
}

/// Ops that read their input through its layout (everything else needs
/// row-major bytes, or bytes whose physical order equals the logical one).
fn layout_aware(op: &Op) -> bool {
    matches!(
        op,
        Op::FusedConv { .. }
            | Op::Conv(_)
            | Op::MaxPool(_)
            | Op::AveragePool { .. }
            | Op::GlobalAveragePool
            | Op::GlobalMaxPool
            | Op::Convert
            | Op::PadChannels { .. }
            | Op::SpaceToDepth { .. }
            | Op::BatchNorm { .. }
            | Op::Unary(_)
            | Op::Binary(_)
            | Op::Sum
    )
}

/// True when `op`'s output holds exactly the bytes of its input `x`, so the
/// memory plan may alias the two and no kernel runs: a view op (Reshape,
/// Flatten, Identity) between values with row-major bytes, or a Transpose
/// that only renames the layout — a channels-last `[N, C, H, W]` read as
/// the row-major `[N, H, W, C]` (perm `[0, 2, 3, 1]`) or back (perm `[0, 3,
/// 1, 2]`).
pub fn is_byte_view(op: &Op, x: &Value, out: &Value) -> bool {
    if x.dtype != out.dtype || x.numel() != out.numel() {
        return false;
    }
    let row_major = |v: &Value| is_row_major_bytes(&v.shape, v.layout);
    match op {
        op if op.is_view() => row_major(x) && row_major(out),
        Op::Transpose { perm } if x.shape.len() == 4 => match perm.as_slice() {
            [0, 2, 3, 1] => x.layout == Layout::ChannelsLast && row_major(out),
            [0, 3, 1, 2] => row_major(x) && out.layout == Layout::ChannelsLast,
            _ => false,
        },
        _ => false,
    }
}

/// True when the value's bytes are in logical row-major order.
pub fn is_row_major_bytes(shape: &[usize], layout: Layout) -> bool {
    match layout {
        Layout::RowMajor => true,
        Layout::ChannelsLast => shape.len() != 4 || shape[1] == 1 || shape[2] * shape[3] == 1,
    }
}

/// A FusedConv with a [`ChannelNorm`] normalizes the plain depthwise
/// convolution `acc + bias` ([`ChannelNorm::supports`]): no residual,
/// shortcut, pool or activation comes between.
fn check_channel_norm(graph: &Graph, op: &Op, inputs: &[ValueId]) -> Result<(), String> {
    let Op::FusedConv {
        conv,
        epilogue,
        shortcut,
        pool,
        norm: Some(_),
    } = op
    else {
        return Ok(());
    };
    if epilogue.residual || shortcut.is_some() || pool.is_some() {
        return Err("a channel norm takes no residual, shortcut or pool".into());
    }
    if epilogue.activation != Activation::None {
        return Err(format!(
            "a channel norm follows no activation, not {}",
            epilogue.activation
        ));
    }
    let (x, w) = (graph.value(inputs[0]), graph.value(inputs[1]));
    if !ChannelNorm::supports(conv, x.shape[1], w.shape[0]) {
        return Err(format!(
            "a channel norm needs a depthwise convolution over whole 4-channel vectors, at \
             most {} channels, {} taps and dilation 1; got input {:?}, weight {:?}, groups {}",
            ChannelNorm::MAX_CHANNELS,
            ChannelNorm::MAX_TAPS,
            x.shape,
            w.shape,
            conv.groups
        ));
    }
    Ok(())
}

/// A Dense with a [`super::op::RowNorm`] reads its column sums `s` (the
/// last input) as f32, whatever the storage type.
fn check_row_norm(graph: &Graph, op: &Op, inputs: &[ValueId]) -> Result<(), String> {
    let Op::Dense { norm: Some(_), .. } = op else {
        return Ok(());
    };
    match inputs.last().map(|&s| graph.value(s)) {
        Some(s) if s.dtype == DType::F32 => Ok(()),
        Some(s) => Err(format!(
            "a row norm's column sums must be f32, not {}",
            s.dtype
        )),
        None => Err("a row norm needs its column sums".into()),
    }
}

pub fn verify(graph: &Graph) -> Result<(), VerifyError> {
    let n_values = graph.values.len();
    let check_id = |id: ValueId, location: &str| {
        if id.index() >= n_values {
            Err(fail(location, format!("refers to missing value %{}", id.0)))
        } else {
            Ok(())
        }
    };
    let mut defined = vec![false; n_values];
    for (i, value) in graph.values.iter().enumerate() {
        let location = format!("value %{i} '{}'", value.name);
        if value.layout == Layout::ChannelsLast && value.shape.len() != 4 {
            return Err(fail(
                location,
                "channels-last layout on a value that is not 4-D",
            ));
        }
        match &value.kind {
            ValueKind::Constant(data) => {
                if data.len() != value.numel() {
                    return Err(fail(
                        location,
                        format!(
                            "constant holds {} elements, shape {:?} needs {}",
                            data.len(),
                            value.shape,
                            value.numel()
                        ),
                    ));
                }
                defined[i] = true;
            }
            ValueKind::Input => {
                if !graph.inputs.contains(&super::graph::ValueId(i as u32)) {
                    return Err(fail(location, "input value not listed in graph inputs"));
                }
                defined[i] = true;
            }
            ValueKind::Activation => {}
        }
    }
    for &input in &graph.inputs {
        check_id(input, "graph inputs")?;
        if graph.value(input).kind != ValueKind::Input {
            return Err(fail(
                "graph inputs",
                format!("%{} is not an input value", input.0),
            ));
        }
    }
    for (i, node) in graph.nodes.iter().enumerate() {
        let location = format!("node {i} '{}' ({})", node.name, node.op.kind());
        for &input in &node.inputs {
            check_id(input, &location)?;
            if !defined[input.index()] {
                return Err(fail(
                    &location,
                    format!("input %{} is used before it is produced", input.0),
                ));
            }
        }
        check_id(node.output, &location)?;
        let out = graph.value(node.output);
        if out.kind != ValueKind::Activation {
            return Err(fail(
                &location,
                format!("output %{} is not an activation", node.output.0),
            ));
        }
        if defined[node.output.index()] {
            return Err(fail(
                &location,
                format!("output %{} is produced twice", node.output.0),
            ));
        }
        defined[node.output.index()] = true;
        let shapes: Vec<&[usize]> = node
            .inputs
            .iter()
            .map(|&v| graph.value(v).shape.as_slice())
            .collect();
        let inferred = infer_shape(&node.op, &shapes).map_err(|m| fail(&location, m))?;
        if inferred != out.shape {
            return Err(fail(
                &location,
                format!(
                    "output shape {:?} differs from inferred {inferred:?}",
                    out.shape
                ),
            ));
        }
        check_channel_norm(graph, &node.op, &node.inputs).map_err(|m| fail(&location, m))?;
        check_row_norm(graph, &node.op, &node.inputs).map_err(|m| fail(&location, m))?;
        let byte_view =
            node.inputs.len() == 1 && is_byte_view(&node.op, graph.value(node.inputs[0]), out);
        if !layout_aware(&node.op) && !byte_view {
            for &input in &node.inputs {
                let v = graph.value(input);
                if !is_row_major_bytes(&v.shape, v.layout) {
                    return Err(fail(
                        &location,
                        format!(
                            "input %{} is {} but {} needs row-major data",
                            input.0,
                            v.layout.name(),
                            node.op.kind()
                        ),
                    ));
                }
            }
        }
        if node.op.is_view() {
            let x = graph.value(node.inputs[0]);
            if x.dtype != out.dtype {
                return Err(fail(&location, "a view op cannot change the dtype"));
            }
        }
    }
    for &output in &graph.outputs {
        check_id(output, "graph outputs")?;
        if !defined[output.index()] {
            return Err(fail(
                "graph outputs",
                format!("%{} is never produced", output.0),
            ));
        }
    }
    Ok(())
}

/// Runs [`verify`] in debug and test builds; a no-op in release builds.
pub fn debug_verify(graph: &Graph, after: &str) {
    if cfg!(debug_assertions) {
        if let Err(e) = verify(graph) {
            panic!("after {after}: {e}\n{}", super::print::print_graph(graph));
        }
    }
}
