//! Data-movement kernels (`movement.cu`): Transpose (any rank), Slice (any
//! starts, ends and steps, negative ones included), Gather with constant
//! indices (any axis, indices of any rank, a scalar too), Expand, Tile and
//! Pad (constant, edge, reflect) as one gather copy, and Where as a
//! broadcast select.
//!
//! A copy's workload is its [`IndexMap`] (`movement_map.rs`), built from the
//! op's attributes exactly as the CPU reference (`reference::strided`,
//! `gather`, `pad`) walks its input, then simplified. From the simplified
//! map the kernel takes one of three paths, all over the same rendered
//! offsets: a shared-memory 32 × 32 tile when a transpose changes the
//! innermost axis ([`CopyPath::Tiled`]), 16-byte (or narrower) vectors when
//! the innermost output axis is contiguous and aligned in the input
//! ([`CopyPath::Vector`]), else one element per thread. Values keep their
//! bits where input and output share a dtype, so the copies are exact.
//!
//! These ops read and write row-major bytes: a channels-last operand (which
//! the `to_channels_last` pass never feeds them: it inserts a `Convert`) is
//! refused with an error naming it rather than read in the wrong order.
//!
//! Configs are [`LinearConfig`]s. For the per-element paths an item is one
//! output element (or vector); for the tiled path a tile counts as 256
//! items (its 1024 elements at 4 per thread), `block` is the threads per
//! tile (32 · rows) and `per_thread` the tiles per CTA.

use super::config::{LinearConfig, LinearShape};
use super::index_map::broadcast_src;
use super::movement_map::{Axis, AxisMap, Border, IndexMap, TileSplit};
use super::reduce::finish;
use super::source::{wrapper, Arg, Geometry, Instance, Params, Template, Workspace};
use crate::ir::{is_row_major_bytes, DType, Graph, Layout, NodeId, Op, PadMode, ValueId};
use std::fmt::Write;

/// Items a tile of the tiled path counts as (see the module doc).
pub const ITEMS_PER_TILE: u64 = 256;

/// How a copy kernel walks its output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyPath {
    /// Through shared-memory tiles.
    Tiled(TileSplit),
    /// `V` consecutive elements per access (1: one element).
    Vector(usize),
}

/// A gather copy: what every output element reads, the pad value, dtypes.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyShape {
    /// Simplified ([`IndexMap::simplified`]).
    pub map: IndexMap,
    /// What `Pad` (constant) writes outside the input; 0 otherwise.
    pub fill: f32,
    pub in_dtype: DType,
    pub out_dtype: DType,
}

impl CopyShape {
    pub fn total(&self) -> usize {
        self.map.total()
    }

    pub fn path(&self) -> CopyPath {
        if let Some(split) = self.map.tile_split() {
            return CopyPath::Tiled(split);
        }
        let elem = self.in_dtype.size().max(self.out_dtype.size());
        CopyPath::Vector(self.map.vector(elem))
    }

    pub fn items(&self) -> LinearShape {
        let items = match self.path() {
            CopyPath::Tiled(split) => split.tiles() as u64 * ITEMS_PER_TILE,
            CopyPath::Vector(v) => (self.total() / v) as u64,
        };
        LinearShape { items }
    }
}

/// Row-major element strides of `shape`.
fn strides(shape: &[usize]) -> Vec<i64> {
    let mut s = vec![1i64; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1] * shape[k + 1] as i64;
    }
    s
}

/// Fails unless value `v` is laid out row-major.
fn row_major(graph: &Graph, op: &str, v: ValueId, what: &str) -> Result<(), String> {
    let value = graph.value(v);
    if is_row_major_bytes(&value.shape, value.layout) {
        return Ok(());
    }
    Err(format!(
        "{op} moves row-major values, but its {what} %{} {:?} is {}; a Convert to row-major \
         must come first",
        v.0,
        value.shape,
        value.layout.name()
    ))
}

/// The unsimplified map of a copy op on an input of shape `x` with output
/// shape `out`, and its fill value, following the CPU reference.
fn op_map(op: &Op, x: &[usize], out: &[usize]) -> Result<(IndexMap, f32), String> {
    let s = strides(x);
    let mut base = 0i64;
    let mut fill = 0.0;
    let axes: Vec<Axis> = match op {
        Op::Transpose { perm } => {
            let mut sorted = perm.clone();
            sorted.sort_unstable();
            if sorted.iter().enumerate().any(|(i, &p)| i != p) || perm.len() != x.len() {
                return Err(format!("perm {perm:?} is no permutation of {x:?}'s axes"));
            }
            perm.iter().map(|&p| Axis::linear(x[p], s[p])).collect()
        }
        Op::Slice {
            starts,
            ends,
            steps,
        } => {
            if starts.len() != x.len() || ends.len() != x.len() || steps.len() != x.len() {
                return Err(format!(
                    "Slice needs one start, end and step per axis of {x:?}"
                ));
            }
            (0..x.len())
                .map(|k| {
                    let (first, count) =
                        crate::ops::slice::axis_range(x[k], starts[k], ends[k], steps[k])?;
                    base += first as i64 * s[k];
                    Ok(Axis::linear(count, steps[k] * s[k]))
                })
                .collect::<Result<_, String>>()?
        }
        Op::Gather {
            axis,
            indices,
            indices_shape,
        } => {
            let axis = *axis;
            let Some(&dim) = x.get(axis) else {
                return Err(format!("Gather axis {axis} out of range for {x:?}"));
            };
            let offsets = indices
                .iter()
                .map(|&i| {
                    crate::ops::gather::resolve(i, dim)
                        .map(|r| r as i64 * s[axis])
                        .ok_or_else(|| format!("index {i} out of range for {dim} elements"))
                })
                .collect::<Result<Vec<i64>, String>>()?;
            if offsets.len() != indices_shape.iter().product::<usize>() {
                return Err(format!(
                    "{} indices for an index shape {indices_shape:?}",
                    offsets.len()
                ));
            }
            let mut axes: Vec<Axis> = (0..axis).map(|k| Axis::linear(x[k], s[k])).collect();
            axes.push(Axis {
                size: offsets.len(),
                map: AxisMap::Table(offsets),
            });
            axes.extend((axis + 1..x.len()).map(|k| Axis::linear(x[k], s[k])));
            axes
        }
        Op::Expand { shape } => {
            let lead = shape
                .len()
                .checked_sub(x.len())
                .ok_or_else(|| format!("cannot expand {x:?} to fewer axes {shape:?}"))?;
            (0..shape.len())
                .map(|k| match k.checked_sub(lead) {
                    None => Ok(Axis::linear(shape[k], 0)),
                    Some(i) if x[i] == shape[k] => Ok(Axis::linear(shape[k], s[i])),
                    Some(i) if x[i] == 1 => Ok(Axis::linear(shape[k], 0)),
                    Some(_) => Err(format!("cannot expand {x:?} to {shape:?}")),
                })
                .collect::<Result<_, String>>()?
        }
        Op::Tile { repeats } => {
            if repeats.len() != x.len() {
                return Err(format!("{} repeats for {x:?}", repeats.len()));
            }
            (0..x.len())
                .flat_map(|k| [Axis::linear(repeats[k], 0), Axis::linear(x[k], s[k])])
                .collect()
        }
        Op::Pad { pads, mode } => {
            if pads.len() != x.len() {
                return Err(format!("{} pads for {x:?}", pads.len()));
            }
            let border = match *mode {
                PadMode::Constant { value } => {
                    fill = value;
                    Border::Constant
                }
                PadMode::Edge => Border::Edge,
                PadMode::Reflect => Border::Reflect,
            };
            (0..x.len())
                .map(|k| Axis {
                    size: x[k] + pads[k].0 + pads[k].1,
                    map: AxisMap::Padded {
                        before: pads[k].0,
                        dim: x[k],
                        stride: s[k],
                        border,
                    },
                })
                .collect()
        }
        other => return Err(format!("{} is not a data-movement copy", other.kind())),
    };
    let map = IndexMap { base, axes };
    if map.total() != out.iter().product::<usize>() {
        return Err(format!(
            "the map covers {} elements, the output {out:?} has {}",
            map.total(),
            out.iter().product::<usize>()
        ));
    }
    Ok((map, fill))
}

/// The [`CopyShape`] of a Transpose, Slice, Gather, Expand, Tile or Pad
/// node; an error for a channels-last operand or a read outside the input.
pub fn copy_shape(graph: &Graph, node: NodeId) -> Result<CopyShape, String> {
    let n = graph.node(node);
    let op = n.op.kind();
    let [input] = n.inputs[..] else {
        return Err(format!(
            "{op} takes one input, the node has {}",
            n.inputs.len()
        ));
    };
    row_major(graph, op, input, "input")?;
    row_major(graph, op, n.output, "output")?;
    let (x, y) = (graph.value(input), graph.value(n.output));
    let (map, fill) = op_map(&n.op, &x.shape, &y.shape)?;
    let (lo, hi) = map.span();
    if map.total() > 0 && (lo < 0 || hi >= x.numel() as i64) {
        return Err(format!(
            "reads offsets [{lo}, {hi}] outside the input's {} elements",
            x.numel()
        ));
    }
    Ok(CopyShape {
        map: map.simplified(),
        fill,
        in_dtype: x.dtype,
        out_dtype: y.dtype,
    })
}

/// Symbol family of a copy op.
pub fn family(op: &Op) -> &'static str {
    match op {
        Op::Transpose { .. } => "transpose",
        Op::Slice { .. } => "slice",
        Op::Gather { .. } => "gather",
        Op::Expand { .. } => "expand",
        Op::Tile { .. } => "tile",
        Op::Pad { .. } => "pad",
        Op::Where => "where",
        _ => "move",
    }
}

/// Renders a copy kernel.
pub fn instantiate(shape: &CopyShape, config: &LinearConfig, symbol: &str) -> Instance {
    let mut p = Params::new(format!("{symbol}_p"));
    p.ty("TIn", shape.in_dtype).ty("TOut", shape.out_dtype);
    let args = [
        Arg::input("x", shape.in_dtype),
        Arg::output("y", shape.out_dtype),
    ];
    match shape.path() {
        CopyPath::Tiled(split) => {
            p.ints(&[
                ("A", split.size_a as i64),
                ("SA", split.stride_a),
                ("B", split.size_b as i64),
                ("OB", split.out_stride_b),
                ("REST", split.planes() as i64),
                ("BLOCK", i64::from(config.block)),
            ])
            .func("int rest_in(int r)", &split.rest_body(true))
            .func("int rest_out(int r)", &split.rest_body(false));
            let call = format!("aotune::transpose_tiled<{}>(x, y)", p.name());
            let tiles = split.tiles() as u64;
            let grid = tiles
                .div_ceil(u64::from(config.per_thread.max(1)))
                .clamp(1, u64::from(i32::MAX as u32)) as u32;
            Instance {
                symbol: symbol.to_string(),
                template: Template::Movement,
                config: serde_json::to_string(config).unwrap_or_default(),
                code: format!(
                    "{}{}",
                    p.render(),
                    wrapper(symbol, config.block, &args, &call)
                ),
                geometry: Geometry {
                    grid: [grid, 1, 1],
                    block: [config.block, 1, 1],
                    smem_bytes: 0,
                },
                workspace: Workspace::default(),
            }
        }
        CopyPath::Vector(v) => {
            p.ints(&[("TOTAL", shape.total() as i64), ("V", v as i64)])
                .float("FILL", shape.fill)
                .func("int src(int j)", &shape.map.src_body());
            let call = format!("aotune::move<{}>(x, y)", p.name());
            finish(
                symbol,
                Template::Movement,
                config,
                &shape.items(),
                p,
                &args,
                &call,
            )
        }
    }
}

/// Where's three operands (condition, x, y) and its output.
#[derive(Debug, Clone, PartialEq)]
pub struct SelectShape {
    pub inputs: [(Vec<usize>, DType); 3],
    pub out_shape: Vec<usize>,
    pub out_dtype: DType,
}

impl SelectShape {
    pub fn items(&self) -> LinearShape {
        LinearShape {
            items: self.out_shape.iter().product::<usize>() as u64,
        }
    }
}

/// The [`SelectShape`] of a Where node.
pub fn select_shape(graph: &Graph, node: NodeId) -> Result<SelectShape, String> {
    let n = graph.node(node);
    let [c, x, y] = n.inputs[..] else {
        return Err(format!(
            "Where takes 3 inputs, the node has {}",
            n.inputs.len()
        ));
    };
    for (v, what) in [(c, "condition"), (x, "x"), (y, "y"), (n.output, "output")] {
        row_major(graph, "Where", v, what)?;
    }
    let out = graph.value(n.output);
    for v in [c, x, y] {
        let shape = &graph.value(v).shape;
        if crate::ir::broadcast(shape, &out.shape).ok().as_ref() != Some(&out.shape) {
            return Err(format!(
                "operand %{} {shape:?} does not broadcast to {:?}",
                v.0, out.shape
            ));
        }
    }
    let operand = |v: ValueId| (graph.value(v).shape.clone(), graph.value(v).dtype);
    Ok(SelectShape {
        inputs: [operand(c), operand(x), operand(y)],
        out_shape: out.shape.clone(),
        out_dtype: out.dtype,
    })
}

/// Renders a Where kernel.
pub fn instantiate_select(shape: &SelectShape, config: &LinearConfig, symbol: &str) -> Instance {
    let mut p = Params::new(format!("{symbol}_p"));
    let [(_, tc), (_, tx), (_, ty)] = &shape.inputs;
    p.ty("TC", *tc)
        .ty("TX", *tx)
        .ty("TY", *ty)
        .ty("TOut", shape.out_dtype)
        .int("TOTAL", shape.items().items as i64);
    let mut src = "switch (i) { ".to_string();
    for (i, (s, _)) in shape.inputs.iter().enumerate() {
        let body = broadcast_src(&shape.out_shape, Layout::RowMajor, s, Layout::RowMajor);
        let _ = write!(src, "case {i}: {{ {body} }} ");
    }
    src.push_str("default: return 0; }");
    p.func("int src(int i, int j)", &src);
    let args = [
        Arg::input("cond", *tc),
        Arg::input("x", *tx),
        Arg::input("y", *ty),
        Arg::output("out", shape.out_dtype),
    ];
    let call = format!("aotune::select<{}>(cond, x, y, out)", p.name());
    finish(
        symbol,
        Template::Movement,
        config,
        &shape.items(),
        p,
        &args,
        &call,
    )
}

#[cfg(test)]
#[path = "movement_tests.rs"]
mod tests;
