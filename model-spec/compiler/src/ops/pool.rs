//! ONNX `MaxPool` and `AveragePool`, 2-D only: [`Op::MaxPool`] and
//! [`Op::AveragePool`] with kernel, strides, explicit pads or `auto_pad`,
//! dilations, `ceil_mode` and (average) `count_include_pad`. onnx-ir names
//! them `MaxPool2d`/`AveragePool2d` (1-D and 3-D forms are rejected);
//! MaxPool's `Indices` output and a column-major `storage_order` are
//! rejected.
//!
//! Input x `[N, C, H, W]`; output `[N, C, P, Q]` ([`Pool2d::output_hw`]).

use super::window::{positive, resolve_pads, spatial};
use super::OpDef;
use crate::ir::{arity, rank4, Op, Pool2d, ValueId};
use crate::onnx::{ImportError, NodeImport};
use crate::reference::{self, Ctx, OpResult, OutSpec, Tensor};
use onnx_ir::node::padding::{AutoPad, PaddingConfig2d};
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["MaxPool", "AveragePool"],
    summary: "MaxPool and AveragePool (2-D; pads, strides, dilations, `ceil_mode`, \
              `count_include_pad`)",
    node_types: &[
        NodeType::MaxPool2d,
        NodeType::AveragePool2d,
        NodeType::MaxPool1d,
        NodeType::MaxPool3d,
        NodeType::AveragePool1d,
        NodeType::AveragePool3d,
    ],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

/// The attributes both pools share, as onnx-ir gives them.
struct Window<'c> {
    kernel: [usize; 2],
    strides: [usize; 2],
    dilations: [usize; 2],
    auto_pad: &'c AutoPad,
    padding: &'c PaddingConfig2d,
    ceil_mode: bool,
}

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let node = cx.node;
    match node {
        Node::MaxPool2d(n) => {
            let c = &n.config;
            let window = Window {
                kernel: c.kernel_size,
                strides: c.strides,
                dilations: c.dilation,
                auto_pad: &c.auto_pad,
                padding: &c.padding,
                ceil_mode: c.ceil_mode,
            };
            let storage_order = c.storage_order;
            let check = move |cx: &NodeImport| {
                if storage_order != 0 {
                    return Err(cx.attr_error(
                        "storage_order",
                        storage_order,
                        "only row-major (0) is supported",
                    ));
                }
                Ok(())
            };
            let (pool, ins) = geometry(cx, &window, check)?;
            cx.push(Op::MaxPool(pool), ins)
        }
        Node::AveragePool2d(n) => {
            let c = &n.config;
            let window = Window {
                kernel: c.kernel_size,
                strides: c.strides,
                dilations: c.dilation,
                auto_pad: &c.auto_pad,
                padding: &c.padding,
                ceil_mode: c.ceil_mode,
            };
            let (pool, ins) = geometry(cx, &window, |_| Ok(()))?;
            let op = Op::AveragePool {
                pool,
                count_include_pad: c.count_include_pad,
            };
            cx.push(op, ins)
        }
        Node::MaxPool1d(_)
        | Node::MaxPool3d(_)
        | Node::AveragePool1d(_)
        | Node::AveragePool3d(_) => Err(cx.attr_error(
            "kernel_shape",
            "1-D or 3-D",
            "only 2-D pooling is supported",
        )),
        _ => Err(cx.unsupported()),
    }
}

/// The input and the pool geometry; `check` rejects op-specific attributes
/// after the shared ones are checked.
fn geometry(
    cx: &mut NodeImport,
    w: &Window,
    check: impl FnOnce(&NodeImport) -> Result<(), ImportError>,
) -> Result<(Pool2d, Vec<ValueId>), ImportError> {
    let ins = cx.inputs(1..=1)?;
    let hw = spatial(cx, ins[0])?;
    positive(cx, "strides", w.strides)?;
    positive(cx, "dilations", w.dilations)?;
    positive(cx, "kernel_shape", w.kernel)?;
    check(cx)?;
    let pads = resolve_pads(w.auto_pad, w.padding, hw, w.kernel, w.strides, w.dilations);
    let pool = Pool2d {
        kernel: w.kernel,
        strides: w.strides,
        pads,
        dilations: w.dilations,
        ceil_mode: w.ceil_mode,
    };
    Ok((pool, ins))
}

/// Output shape of [`Op::MaxPool`] and [`Op::AveragePool`].
pub(crate) fn infer_shape(pool: &Pool2d, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
    arity(inputs, 1, 1)?;
    let x = rank4(inputs[0], "pool input")?;
    let [p, q] = pool
        .output_hw(x[2], x[3])
        .ok_or_else(|| format!("pool window {:?} does not fit input {x:?}", pool.kernel))?;
    Ok(vec![x[0], x[1], p, q])
}

/// CPU reference of [`Op::MaxPool`].
pub(crate) fn max_reference(geometry: &Pool2d, inputs: &[Tensor], out: &OutSpec) -> OpResult {
    reference::pool::max_pool(geometry, inputs, out)
}

/// CPU reference of [`Op::AveragePool`] (sums in the accumulation type).
pub(crate) fn average_reference(
    ctx: &Ctx,
    geometry: &Pool2d,
    count_include_pad: bool,
    inputs: &[Tensor],
    out: &OutSpec,
) -> OpResult {
    reference::pool::average_pool(ctx, geometry, count_include_pad, inputs, out)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Attr::*, Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        Example {
            op_type: "MaxPool",
            opset: 12,
            inputs: &[Data(&[1, 2, 9, 9])],
            attrs: &[
                Ints("kernel_shape", &[3, 3]),
                Ints("strides", &[2, 2]),
                Ints("pads", &[1, 1, 1, 1]),
            ],
            output: &[1, 2, 5, 5],
            ir: &["MaxPool"],
        },
        Example {
            op_type: "MaxPool",
            opset: 12,
            inputs: &[Data(&[1, 1, 6, 6])],
            attrs: &[
                Ints("kernel_shape", &[2, 2]),
                Ints("strides", &[2, 2]),
                Ints("dilations", &[2, 2]),
                Int("ceil_mode", 1),
            ],
            output: &[1, 1, 3, 3],
            ir: &["MaxPool"],
        },
        Example {
            op_type: "AveragePool",
            opset: 11,
            inputs: &[Data(&[2, 3, 8, 8])],
            attrs: &[
                Ints("kernel_shape", &[3, 3]),
                Str("auto_pad", "SAME_LOWER"),
                Int("count_include_pad", 1),
            ],
            output: &[2, 3, 8, 8],
            ir: &["AveragePool"],
        },
        Example {
            op_type: "AveragePool",
            opset: 7,
            inputs: &[Data(&[1, 1, 5, 5])],
            attrs: &[Ints("kernel_shape", &[2, 2])],
            output: &[1, 1, 4, 4],
            ir: &["AveragePool"],
        },
    ];
}
