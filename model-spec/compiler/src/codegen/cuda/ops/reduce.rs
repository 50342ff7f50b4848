//! Reductions and per-slice normalizations (`reduce.cu`): every
//! [`Reduction`] over any axes of one value (`GlobalAveragePool` /
//! `GlobalMaxPool` of any layout, rank ≥ 3; `ReduceMean` and every
//! `ReduceKind` of a row-major value, keepdims or not) and the
//! normalizations of slices of a row-major value ([`NormShape`]: Softmax,
//! LogSoftmax and Hardmax along an axis here, LayerNorm, GroupNorm, LpNorm
//! and MeanVarianceNorm from `norm.rs`). Global pools over 4-D
//! channels-last values (ResNet's head) have their own kernel, which splits
//! the pixels over threads ([`super::global_pool`]).
//!
//! Where the reduced axes are the trailing ones of a row-major value and a
//! row has at least [`rows::MIN_LEN`] elements, the op runs as a row kernel
//! (`rows.rs`: a warp or a CTA per row). Otherwise one thread reduces each
//! output, or normalizes each slice: the instantiation renders `base(j)`
//! (the input offset of slice j's first element, from the kept axes'
//! coordinates) and `reduced(r)` (the offset of its r-th element, the
//! reduced axes in row-major order), the CPU reference's order. When the
//! innermost kept axis of a reduction is contiguous in the input (an NHWC
//! global pool's channels) a thread reduces V neighbouring outputs with
//! vector loads.

use super::config::{LinearConfig, LinearShape};
use super::rows::{self, Affine, NormMode, Reduction, RowOp, RowShape};
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
    pub kind: Reduction,
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
        kept(self.in_shape.len(), &self.axes)
    }

    pub fn outputs(&self) -> usize {
        self.kept().iter().map(|&a| self.in_shape[a]).product()
    }

    pub fn count(&self) -> usize {
        self.axes.iter().map(|&a| self.in_shape[a]).product()
    }

    /// Outputs per thread of the per-output kernel.
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

    /// The row kernel's view, where the reduced axes are the trailing ones
    /// of row-major bytes and rows are long enough.
    pub fn rows(&self) -> Option<RowShape> {
        if !is_row_major_bytes(&self.in_shape, self.in_layout) {
            return None;
        }
        let (rows, len) = row_split(&self.in_shape, &self.axes)?;
        (len >= rows::MIN_LEN).then_some(RowShape {
            rows,
            len,
            op: RowOp::Reduce(self.kind),
            epsilon: 0.0,
            scale: None,
            bias: None,
            in_dtype: self.in_dtype,
            out_dtype: self.out_dtype,
        })
    }

    /// Work items of the kernel [`instantiate_reduce`] renders.
    pub fn items(&self) -> LinearShape {
        match self.rows() {
            Some(rows) => rows.items(),
            None => LinearShape {
                items: (self.outputs() / self.vector()) as u64,
            },
        }
    }
}

/// The axes of a rank-`rank` value not in `axes`.
fn kept(rank: usize, axes: &[usize]) -> Vec<usize> {
    (0..rank).filter(|a| !axes.contains(a)).collect()
}

/// `(rows, len)` when every reduced axis longer than 1 follows every kept
/// axis longer than 1: the slices are consecutive rows of `len` elements.
pub(crate) fn row_split(shape: &[usize], axes: &[usize]) -> Option<(usize, usize)> {
    let last_kept = (0..shape.len())
        .filter(|a| !axes.contains(a) && shape[*a] > 1)
        .max();
    let first_reduced = axes.iter().copied().filter(|&a| shape[a] > 1).min();
    if let (Some(k), Some(r)) = (last_kept, first_reduced) {
        if k > r {
            return None;
        }
    }
    let len: usize = axes.iter().map(|&a| shape[a]).product();
    Some((shape.iter().product::<usize>() / len.max(1), len))
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

/// Sorted, distinct axes, each checked against the rank.
fn sorted_axes(axes: &[usize], rank: usize) -> Result<Vec<usize>, String> {
    if let Some(bad) = axes.iter().find(|&&a| a >= rank) {
        return Err(format!("axis {bad} out of range for rank {rank}"));
    }
    let mut axes = axes.to_vec();
    axes.sort_unstable();
    axes.dedup();
    Ok(axes)
}

/// The [`ReduceShape`] of a global pool, `ReduceMean` or `Reduce` node.
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
    let rank = x.shape.len();
    let (axes, kind) = match &n.op {
        Op::GlobalAveragePool => ((2..rank).collect(), Reduction::Mean),
        Op::GlobalMaxPool => ((2..rank).collect(), Reduction::PoolMax),
        Op::ReduceMean { axes, .. } => (sorted_axes(axes, rank)?, Reduction::Mean),
        Op::Reduce { kind, axes, .. } => (sorted_axes(axes, rank)?, Reduction::of(*kind)),
        other => return Err(format!("{} is not a reduction", other.kind())),
    };
    if x.shape.contains(&0) {
        return Err(format!("input {:?} is empty", x.shape));
    }
    Ok(ReduceShape {
        in_shape: x.shape.clone(),
        in_layout: x.layout,
        axes,
        kind,
        in_dtype: x.dtype,
        out_dtype: y.dtype,
    })
}

/// The kernel of a reduction: a row kernel where [`ReduceShape::rows`]
/// allows, else one thread per output.
pub fn instantiate_reduce(shape: &ReduceShape, config: &LinearConfig, symbol: &str) -> Instance {
    if let Some(rows) = shape.rows() {
        return rows::instantiate(&rows, config, symbol);
    }
    let strides = shape.strides();
    let mut p = Params::new(format!("{symbol}_p"));
    p.ty("TIn", shape.in_dtype)
        .ty("TOut", shape.out_dtype)
        .ints(&[
            ("OUT_TOTAL", shape.outputs() as i64),
            ("COUNT", shape.count() as i64),
            ("V", shape.vector() as i64),
        ])
        .int_expr("KIND", shape.kind.code())
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

/// A normalization of the slices of a row-major value: each slice is the
/// elements that share their coordinates outside `axes`.
#[derive(Debug, Clone, PartialEq)]
pub struct NormShape {
    /// Kernel family (the symbol's prefix), e.g. `layernorm`.
    pub family: &'static str,
    /// The input's row-major shape, or a view of it (GroupNorm's
    /// `[N, groups, C / groups · spatial]`); the output has the same.
    pub shape: Vec<usize>,
    /// Sorted, distinct.
    pub axes: Vec<usize>,
    pub mode: NormMode,
    pub epsilon: f32,
    /// `index` maps (slice, element within the slice) to the operand.
    pub scale: Option<Affine>,
    pub bias: Option<Affine>,
    pub in_dtype: DType,
    pub out_dtype: DType,
}

impl NormShape {
    pub fn slices(&self) -> usize {
        self.shape.iter().product::<usize>() / self.count().max(1)
    }

    pub fn count(&self) -> usize {
        self.axes.iter().map(|&a| self.shape[a]).product()
    }

    /// The row kernel's view, where the slices are rows long enough.
    pub fn rows(&self) -> Option<RowShape> {
        let (rows, len) = row_split(&self.shape, &self.axes)?;
        (len >= rows::MIN_LEN).then(|| RowShape {
            rows,
            len,
            op: RowOp::Norm(self.mode),
            epsilon: self.epsilon,
            scale: self.scale.clone(),
            bias: self.bias.clone(),
            in_dtype: self.in_dtype,
            out_dtype: self.out_dtype,
        })
    }

    /// Work items of the kernel [`instantiate_norm`] renders.
    pub fn items(&self) -> LinearShape {
        match self.rows() {
            Some(rows) => rows.items(),
            None => LinearShape {
                items: self.slices() as u64,
            },
        }
    }
}

/// Checks that the values of node `node` are row-major bytes and not empty.
pub(crate) fn row_major_operands(graph: &Graph, node: NodeId) -> Result<(), String> {
    let n = graph.node(node);
    for &v in n.inputs.iter().chain([&n.output]) {
        let value = graph.value(v);
        if !is_row_major_bytes(&value.shape, value.layout) {
            return Err(format!(
                "%{} {:?} is {}: {} needs row-major bytes",
                v.0,
                value.shape,
                value.layout.name(),
                n.op.kind()
            ));
        }
        if value.shape.contains(&0) {
            return Err(format!("%{} {:?} is empty", v.0, value.shape));
        }
    }
    Ok(())
}

/// The [`NormShape`] of a Softmax, LogSoftmax or Hardmax node.
pub fn softmax_shape(graph: &Graph, node: NodeId) -> Result<NormShape, String> {
    let n = graph.node(node);
    let (axis, mode, family) = match n.op {
        Op::Softmax { axis } => (axis, NormMode::Softmax, "softmax"),
        Op::LogSoftmax { axis } => (axis, NormMode::LogSoftmax, "logsoftmax"),
        Op::Hardmax { axis } => (axis, NormMode::Hardmax, "hardmax"),
        ref other => return Err(format!("{} is not a softmax", other.kind())),
    };
    row_major_operands(graph, node)?;
    let x = graph.value(n.inputs[0]);
    Ok(NormShape {
        family,
        shape: x.shape.clone(),
        axes: sorted_axes(&[axis], x.shape.len())?,
        mode,
        epsilon: 0.0,
        scale: None,
        bias: None,
        in_dtype: x.dtype,
        out_dtype: graph.value(n.output).dtype,
    })
}

/// The kernel of a normalization: a row kernel where [`NormShape::rows`]
/// allows, else one thread per slice.
pub fn instantiate_norm(shape: &NormShape, config: &LinearConfig, symbol: &str) -> Instance {
    if let Some(rows) = shape.rows() {
        return rows::instantiate(&rows, config, symbol);
    }
    let strides = Layout::RowMajor.strides(&shape.shape);
    let kept = kept(shape.shape.len(), &shape.axes);
    let affine_dtype = |a: &Option<Affine>| a.as_ref().map_or(DType::F32, |a| a.dtype);
    let index = |a: &Option<Affine>| {
        a.as_ref()
            .map_or_else(|| "return 0;".to_string(), |a| a.index.clone())
    };
    let mut p = Params::new(format!("{symbol}_p"));
    p.ty("TIn", shape.in_dtype)
        .ty("TOut", shape.out_dtype)
        .ty("TScale", affine_dtype(&shape.scale))
        .ty("TBias", affine_dtype(&shape.bias))
        .ints(&[
            ("GROUPS", shape.slices() as i64),
            ("COUNT", shape.count() as i64),
        ])
        .int_expr("MODE", shape.mode.code())
        .boolean("HAS_SCALE", shape.scale.is_some())
        .boolean("HAS_BIAS", shape.bias.is_some())
        .float("EPS", shape.epsilon)
        .func(
            "int base(int j)",
            &offset_body(&shape.shape, &strides, &kept, "j"),
        )
        .func(
            "int reduced(int r)",
            &offset_body(&shape.shape, &strides, &shape.axes, "r"),
        )
        .func("int scale_at(int row, int j)", &index(&shape.scale))
        .func("int bias_at(int row, int j)", &index(&shape.bias));
    let mut args = vec![Arg::input("x", shape.in_dtype)];
    let mut pointer = |name: &str, a: &Option<Affine>| match a {
        Some(a) => {
            args.push(Arg::input(name, a.dtype));
            name.to_string()
        }
        None => "nullptr".to_string(),
    };
    let (scale, bias) = (pointer("scale", &shape.scale), pointer("bias", &shape.bias));
    args.push(Arg::output("y", shape.out_dtype));
    let call = format!("aotune::normalize<{}>(x, {scale}, {bias}, y)", p.name());
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
    use crate::codegen::cuda::config::KernelConfig;

    #[test]
    fn nhwc_global_pool_reads_pixels_in_order_with_vectors() {
        let shape = ReduceShape {
            in_shape: vec![2, 64, 7, 7],
            in_layout: Layout::ChannelsLast,
            axes: vec![2, 3],
            kind: Reduction::Mean,
            in_dtype: DType::F16,
            out_dtype: DType::F16,
        };
        assert_eq!(shape.vector(), 8);
        assert_eq!(shape.count(), 49);
        assert_eq!(shape.rows(), None, "channels-last bytes are not rows");
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

    #[test]
    fn trailing_axes_are_rows_and_others_are_not() {
        assert_eq!(row_split(&[2, 3, 4], &[2]), Some((6, 4)));
        assert_eq!(row_split(&[2, 3, 4], &[1, 2]), Some((2, 12)));
        assert_eq!(row_split(&[2, 3, 4], &[1]), None);
        assert_eq!(row_split(&[2, 3, 4], &[0, 2]), None);
        // Size-1 axes do not matter on either side.
        assert_eq!(row_split(&[2, 3, 1], &[1]), Some((2, 3)));
        assert_eq!(row_split(&[1, 3, 4], &[0, 2]), Some((3, 4)));
        assert_eq!(row_split(&[2, 3], &[]), Some((6, 1)));
        let reduce = |shape: &[usize], axes: &[usize]| ReduceShape {
            in_shape: shape.to_vec(),
            in_layout: Layout::RowMajor,
            axes: axes.to_vec(),
            kind: Reduction::Sum,
            in_dtype: DType::F32,
            out_dtype: DType::F32,
        };
        // A row of 768: a warp per row, 32 items (lanes) per row.
        let r = reduce(&[2, 197, 768], &[2]);
        assert_eq!(r.rows().map(|x| (x.rows, x.len)), Some((394, 768)));
        assert_eq!(r.items().items, 394 * 32);
        // Rows shorter than a warp, and a middle axis: one thread per output.
        assert_eq!(reduce(&[2, 197, 7], &[2]).rows(), None);
        let middle = reduce(&[2, 197, 768], &[1]);
        assert_eq!(middle.rows(), None);
        assert_eq!(middle.items().items, 2 * 768 / 4);
    }

    #[test]
    fn slices_along_a_middle_axis_use_offsets() {
        let shape = NormShape {
            family: "softmax",
            shape: vec![2, 5, 3],
            axes: vec![1],
            mode: NormMode::Softmax,
            epsilon: 0.0,
            scale: None,
            bias: None,
            in_dtype: DType::F32,
            out_dtype: DType::F32,
        };
        assert_eq!((shape.slices(), shape.count()), (6, 5));
        assert_eq!(shape.rows(), None);
        let config = LinearConfig::default_for(&shape.items());
        let code = instantiate_norm(&shape, &config, "sm").code;
        assert!(code.contains("MODE = aotune::NORM_SOFTMAX"), "{code}");
        assert!(
            code.contains("(t % 3) * 1; t /= 3; o += (t % 2) * 15"),
            "{code}"
        );
        assert!(
            code.contains("aotune::normalize<sm_p>(x, nullptr, nullptr, y)"),
            "{code}"
        );
    }
}
