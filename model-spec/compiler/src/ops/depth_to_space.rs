//! ONNX `DepthToSpace` (modes DCR and CRD) of 4-D NCHW images, imported as
//! the reshape → transpose → reshape the ONNX spec defines it by
//! ([`Op::Reshape`], [`Op::Transpose`], [`Op::Reshape`]), so it needs no
//! kernel of its own. With block `b`, the input is split into
//! `[N, b, b, C/b², H, W]` with perm `[0, 3, 4, 1, 5, 2]` (DCR) or
//! `[N, C/b², b, b, H, W]` with perm `[0, 1, 4, 2, 5, 3]` (CRD), then
//! joined into `[N, C/b², H·b, W·b]`. (`SpaceToDepth` is not imported:
//! onnx-ir 0.22 drops the `mode` attribute newer opsets give it.)

use super::OpDef;
use crate::ir::{Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use onnx_ir::node::depth_to_space::DepthToSpaceMode;
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["DepthToSpace"],
    summary: "DepthToSpace (4-D; DCR, CRD)",
    node_types: &[NodeType::DepthToSpace],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let x = cx.input(0)?;
    let &[n, c, h, w] = cx.shape(x) else {
        return Err(cx.input_error("input", format!("must be 4-D NCHW, got {:?}", cx.shape(x))));
    };
    let (split, perm, out) = match cx.node {
        Node::DepthToSpace(d) => {
            let b = d.config.block_size;
            if b == 0 || c % (b * b) != 0 {
                return Err(cx.attr_error(
                    "blocksize",
                    b,
                    "must divide the channels into b² groups",
                ));
            }
            let (split, perm) = match d.config.mode {
                DepthToSpaceMode::Dcr => ([n, b, b, c / (b * b), h, w], [0, 3, 4, 1, 5, 2]),
                DepthToSpaceMode::Crd => ([n, c / (b * b), b, b, h, w], [0, 1, 4, 2, 5, 3]),
            };
            (split, perm, [n, c / (b * b), h * b, w * b])
        }
        _ => return Err(cx.unsupported()),
    };
    let reshape = |dims: &[usize]| Op::Reshape {
        shape: dims.iter().map(|&d| d as i64).collect(),
        allowzero: false,
    };
    let (name, output) = (cx.name().to_string(), cx.output_name().to_string());
    let split = cx.push_named(
        &format!("{name}/split"),
        reshape(&split),
        vec![x],
        &format!("{output}_split"),
    )?;
    let moved = cx.push_named(
        &format!("{name}/transpose"),
        Op::Transpose {
            perm: perm.to_vec(),
        },
        vec![split],
        &format!("{output}_moved"),
    )?;
    cx.push(reshape(&out), vec![moved])
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Attr::*, Example, Input::*};

    pub(crate) const EXAMPLES: &[Example] = &[
        Example {
            op_type: "DepthToSpace",
            opset: 13,
            inputs: &[Data(&[1, 8, 2, 3])],
            attrs: &[Int("blocksize", 2), Str("mode", "CRD")],
            output: &[1, 2, 4, 6],
            ir: &["Reshape", "Transpose", "Reshape"],
        },
        Example {
            op_type: "DepthToSpace",
            opset: 11,
            inputs: &[Data(&[1, 8, 2, 3])],
            attrs: &[Int("blocksize", 2)],
            output: &[1, 2, 4, 6],
            ir: &["Reshape", "Transpose", "Reshape"],
        },
    ];
}
