//! `MaxPool` and `AveragePool` kernels (`pool.cu`) over 4-D values, NHWC
//! (V channels per thread, 16-byte accesses where C allows) or NCHW (one
//! output per thread). Window semantics are the CPU reference's
//! (`reference/pool.rs`): pads, strides, dilations, ceil_mode and
//! count_include_pad are compile-time constants of the instantiation.

use super::config::{LinearConfig, LinearShape};
use super::index_map::same_order;
use super::source::{wrapper, Arg, Geometry, Instance, Params, Template, Workspace};
use crate::ir::{DType, Graph, Layout, NodeId, Op, Pool2d};

/// A pooling workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoolShape {
    /// Logical input N, C, H, W.
    pub input: [usize; 4],
    /// Output P, Q.
    pub output: [usize; 2],
    pub pool: Pool2d,
    /// `None` for MaxPool, `Some(count_include_pad)` for AveragePool.
    pub average: Option<bool>,
    pub channels_last: bool,
    pub in_dtype: DType,
    pub out_dtype: DType,
}

impl PoolShape {
    /// Channels per thread: 16 bytes of the wider type where C allows (NHWC).
    pub fn vector(&self) -> usize {
        if !self.channels_last {
            return 1;
        }
        let elem = self.in_dtype.size().max(self.out_dtype.size());
        [8usize, 4, 2, 1]
            .into_iter()
            .find(|&v| v * elem <= 16 && self.input[1] % v == 0)
            .unwrap_or(1)
    }

    /// Threads of work: one per output element (NCHW) or channel vector (NHWC).
    pub fn items(&self) -> LinearShape {
        let [n, c, _, _] = self.input;
        let [p, q] = self.output;
        LinearShape {
            items: (n * p * q * c / self.vector()) as u64,
        }
    }
}

/// The [`PoolShape`] of a `MaxPool` or `AveragePool` node.
pub fn pool_shape(graph: &Graph, node: NodeId) -> Result<PoolShape, String> {
    let n = graph.node(node);
    let (pool, average) = match &n.op {
        Op::MaxPool(p) => (*p, None),
        Op::AveragePool {
            pool,
            count_include_pad,
        } => (*pool, Some(*count_include_pad)),
        other => return Err(format!("{} is not a pool", other.kind())),
    };
    let x = graph.value(n.inputs[0]);
    let y = graph.value(n.output);
    if x.shape.len() != 4 || y.shape.len() != 4 {
        return Err(format!("pools need 4-D values, got {:?}", x.shape));
    }
    let cl = |v: &crate::ir::Value| same_order(&v.shape, v.layout, Layout::ChannelsLast);
    let rm = |v: &crate::ir::Value| same_order(&v.shape, v.layout, Layout::RowMajor);
    let channels_last = if cl(x) && cl(y) {
        true
    } else if rm(x) && rm(y) {
        false
    } else {
        return Err(format!(
            "input is {} but output is {}: a pool keeps its layout",
            x.layout.name(),
            y.layout.name()
        ));
    };
    Ok(PoolShape {
        input: [x.shape[0], x.shape[1], x.shape[2], x.shape[3]],
        output: [y.shape[2], y.shape[3]],
        pool,
        average,
        channels_last,
        in_dtype: x.dtype,
        out_dtype: y.dtype,
    })
}

pub fn instantiate(shape: &PoolShape, config: &LinearConfig, symbol: &str) -> Instance {
    let [n, c, h, w] = shape.input;
    let [p, q] = shape.output;
    let pool = &shape.pool;
    let mut params = Params::new(format!("{symbol}_p"));
    params
        .ty("TIn", shape.in_dtype)
        .ty("TOut", shape.out_dtype)
        .ints(&[
            ("N", n as i64),
            ("C", c as i64),
            ("H", h as i64),
            ("W", w as i64),
            ("P", p as i64),
            ("Q", q as i64),
        ])
        .ints(&[
            ("KH", pool.kernel[0] as i64),
            ("KW", pool.kernel[1] as i64),
            ("SH", pool.strides[0] as i64),
            ("SW", pool.strides[1] as i64),
            ("DH", pool.dilations[0] as i64),
            ("DW", pool.dilations[1] as i64),
        ])
        .ints(&[
            ("PT", pool.pads[0] as i64),
            ("PL", pool.pads[1] as i64),
            ("PB", pool.pads[2] as i64),
            ("PR", pool.pads[3] as i64),
        ])
        .boolean("MAX", shape.average.is_none())
        .boolean("COUNT_INCLUDE_PAD", shape.average == Some(true))
        .boolean("CHANNELS_LAST", shape.channels_last)
        .int("V", shape.vector() as i64);
    let args = [
        Arg::input("x", shape.in_dtype),
        Arg::output("y", shape.out_dtype),
    ];
    let call = format!("aotune::pool2d<{}>(x, y)", params.name());
    let geometry = Geometry {
        grid: [config.grid(&shape.items()), 1, 1],
        block: [config.block, 1, 1],
        smem_bytes: 0,
    };
    Instance {
        symbol: symbol.to_string(),
        template: Template::Pool,
        config: serde_json::to_string(config).unwrap_or_default(),
        code: format!(
            "{}{}",
            params.render(),
            wrapper(symbol, config.block, &args, &call)
        ),
        geometry,
        workspace: Workspace::default(),
    }
}
