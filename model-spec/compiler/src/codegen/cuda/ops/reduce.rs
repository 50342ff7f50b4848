//! Reduction kernels (`reduce.cu`): `GlobalAveragePool` / `GlobalMaxPool`
//! (any layout, rank ≥ 3) and `ReduceMean` (row-major, any axes) as one
//! "reduce the axes of each output" template, and `Softmax` along one axis.
//! Global pools over 4-D channels-last values (ResNet's head) have their own
//! kernel, which splits the pixels over threads ([`super::global_pool`]).
//!
//! For each output the instantiation renders `base(j)` (the input offset of
//! its first reduced element, from the kept axes' coordinates) and
//! `reduced(r)` (the offset of its r-th reduced element, the reduced axes in
//! row-major order): the CPU reference's summation order. When the innermost
//! kept axis is contiguous in the input (an NHWC global pool's channels) a
//! thread reduces V neighbouring outputs with vector loads.

use super::config::{LinearConfig, LinearShape};
use super::source::{wrapper, Arg, Geometry, Instance, Params, Template, Workspace};
use crate::ir::{is_row_major_bytes, DType, Graph, Layout, NodeId, Op};
use std::fmt::Write;

/// A reduction of some axes of one value.
#[derive(Debug, Clone, PartialEq)]
pub struct ReduceShape {
    pub in_shape: Vec<usize>,
    pub in_layout: Layout,
    /// Sorted, distinct.
    pub axes: Vec<usize>,
    pub max: bool,
    pub in_dtype: DType,
    pub out_dtype: DType,
}

impl ReduceShape {
    fn strides(&self) -> Vec<usize> {
        if self.in_shape.len() == 4 {
            self.in_layout.strides(&self.in_shape)
        } else {
            Layout::RowMajor.strides(&self.in_shape)
        }
    }

    fn kept(&self) -> Vec<usize> {
        (0..self.in_shape.len())
            .filter(|a| !self.axes.contains(a))
            .collect()
    }

    pub fn outputs(&self) -> usize {
        self.kept().iter().map(|&a| self.in_shape[a]).product()
    }

    pub fn count(&self) -> usize {
        self.axes.iter().map(|&a| self.in_shape[a]).product()
    }

    /// Outputs per thread.
    pub fn vector(&self) -> usize {
        let strides = self.strides();
        let Some(&last) = self.kept().last() else {
            return 1;
        };
        if strides[last] != 1 {
            return 1;
        }
        let elem = self.in_dtype.size().max(self.out_dtype.size());
        [8usize, 4, 2, 1]
            .into_iter()
            .find(|&v| v * elem <= 16 && self.in_shape[last] % v == 0)
            .unwrap_or(1)
    }

    pub fn items(&self) -> LinearShape {
        LinearShape {
            items: (self.outputs() / self.vector()) as u64,
        }
    }
}

/// `Σ coord(axis) · stride(axis)` for `index` decomposed row-major over `axes`.
fn offset_body(shape: &[usize], strides: &[usize], axes: &[usize], index: &str) -> String {
    let mut s = format!("int t = {index}; int o = 0; ");
    for &a in axes.iter().rev() {
        let d = shape[a];
        if d > 1 {
            let _ = write!(s, "o += (t % {d}) * {}; t /= {d}; ", strides[a]);
        }
    }
    s.push_str("(void)t; return o;");
    s
}

/// The [`ReduceShape`] of a global pool or `ReduceMean` node.
pub fn reduce_shape(graph: &Graph, node: NodeId) -> Result<ReduceShape, String> {
    let n = graph.node(node);
    let x = graph.value(n.inputs[0]);
    let y = graph.value(n.output);
    if !is_row_major_bytes(&y.shape, y.layout) {
        return Err(format!(
            "output {:?} is {}: reductions write row-major bytes",
            y.shape,
            y.layout.name()
        ));
    }
    let (axes, max) = match &n.op {
        Op::GlobalAveragePool => ((2..x.shape.len()).collect(), false),
        Op::GlobalMaxPool => ((2..x.shape.len()).collect(), true),
        Op::ReduceMean { axes, .. } => {
            let mut axes = axes.clone();
            axes.sort_unstable();
            axes.dedup();
            (axes, false)
        }
        other => return Err(format!("{} is not a reduction", other.kind())),
    };
    Ok(ReduceShape {
        in_shape: x.shape.clone(),
        in_layout: x.layout,
        axes,
        max,
        in_dtype: x.dtype,
        out_dtype: y.dtype,
    })
}

pub fn instantiate_reduce(shape: &ReduceShape, config: &LinearConfig, symbol: &str) -> Instance {
    let strides = shape.strides();
    let mut p = Params::new(format!("{symbol}_p"));
    p.ty("TIn", shape.in_dtype)
        .ty("TOut", shape.out_dtype)
        .ints(&[
            ("OUT_TOTAL", shape.outputs() as i64),
            ("COUNT", shape.count() as i64),
            ("V", shape.vector() as i64),
        ])
        .boolean("MAX", shape.max)
        .func(
            "int base(int j)",
            &offset_body(&shape.in_shape, &strides, &shape.kept(), "j"),
        )
        .func(
            "int reduced(int r)",
            &offset_body(&shape.in_shape, &strides, &shape.axes, "r"),
        );
    let args = [
        Arg::input("x", shape.in_dtype),
        Arg::output("y", shape.out_dtype),
    ];
    let call = format!("aotune::reduce<{}>(x, y)", p.name());
    finish(
        symbol,
        Template::Reduce,
        config,
        &shape.items(),
        p,
        &args,
        &call,
    )
}

/// Softmax over `axis` of a row-major value.
#[derive(Debug, Clone, PartialEq)]
pub struct SoftmaxShape {
    pub outer: usize,
    pub dim: usize,
    pub inner: usize,
    pub in_dtype: DType,
    pub out_dtype: DType,
}

impl SoftmaxShape {
    pub fn items(&self) -> LinearShape {
        LinearShape {
            items: (self.outer * self.inner) as u64,
        }
    }
}

pub fn softmax_shape(graph: &Graph, node: NodeId) -> Result<SoftmaxShape, String> {
    let n = graph.node(node);
    let Op::Softmax { axis } = n.op else {
        return Err(format!("{} is not Softmax", n.op.kind()));
    };
    let x = graph.value(n.inputs[0]);
    let y = graph.value(n.output);
    for v in [x, y] {
        if !is_row_major_bytes(&v.shape, v.layout) {
            return Err("Softmax needs row-major values".into());
        }
    }
    if axis >= x.shape.len() {
        return Err(format!("axis {axis} out of range for {:?}", x.shape));
    }
    Ok(SoftmaxShape {
        outer: x.shape[..axis].iter().product(),
        dim: x.shape[axis],
        inner: x.shape[axis + 1..].iter().product(),
        in_dtype: x.dtype,
        out_dtype: y.dtype,
    })
}

pub fn instantiate_softmax(shape: &SoftmaxShape, config: &LinearConfig, symbol: &str) -> Instance {
    let mut p = Params::new(format!("{symbol}_p"));
    p.ty("TIn", shape.in_dtype)
        .ty("TOut", shape.out_dtype)
        .ints(&[
            ("OUTER", shape.outer as i64),
            ("AXIS_DIM", shape.dim as i64),
            ("INNER", shape.inner as i64),
        ]);
    let args = [
        Arg::input("x", shape.in_dtype),
        Arg::output("y", shape.out_dtype),
    ];
    let call = format!("aotune::softmax<{}>(x, y)", p.name());
    finish(
        symbol,
        Template::Reduce,
        config,
        &shape.items(),
        p,
        &args,
        &call,
    )
}

/// An instance of a grid-stride template.
pub(crate) fn finish(
    symbol: &str,
    template: Template,
    config: &LinearConfig,
    items: &LinearShape,
    params: Params,
    args: &[Arg],
    call: &str,
) -> Instance {
    Instance {
        symbol: symbol.to_string(),
        template,
        config: serde_json::to_string(config).unwrap_or_default(),
        code: format!(
            "{}{}",
            params.render(),
            wrapper(symbol, config.block, args, call)
        ),
        geometry: Geometry {
            grid: [config.grid(items), 1, 1],
            block: [config.block, 1, 1],
            smem_bytes: 0,
        },
        workspace: Workspace::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nhwc_global_pool_reads_pixels_in_order_with_vectors() {
        let shape = ReduceShape {
            in_shape: vec![2, 64, 7, 7],
            in_layout: Layout::ChannelsLast,
            axes: vec![2, 3],
            max: false,
            in_dtype: DType::F16,
            out_dtype: DType::F16,
        };
        assert_eq!(shape.vector(), 8);
        assert_eq!(shape.count(), 49);
        let strides = shape.strides();
        let base = offset_body(&shape.in_shape, &strides, &shape.kept(), "j");
        assert_eq!(
            base,
            "int t = j; int o = 0; o += (t % 64) * 1; t /= 64; o += (t % 2) * 3136; t /= 2; (void)t; return o;"
        );
        let red = offset_body(&shape.in_shape, &strides, &shape.axes, "r");
        assert!(
            red.contains("(t % 7) * 64") && red.contains("(t % 7) * 448"),
            "{red}"
        );
    }
}
