//! `Dense` kernels: `y[M,N] = act(x[M,K]·w[N,K]ᵀ + bias + residual)` with
//! row-major x, w and y.
//!
//! At small M (≤ 8 by default, ≤ 16 allowed) the layer is a weight-streaming
//! GEMV (`dense_gemv.cu`: one warp per output column, every weight row read
//! once with 16-byte loads); at larger M it is the 1×1 case of the tiled
//! convolution templates ([`ConvShape::dense`]: x is an `[M,1,1,K]` NHWC
//! image, w an `[N,1,1,K]` OHWI filter), with their configs and search spaces.

use super::config::KernelConfig;
use super::conv::{self, ConvConfig};
use super::implicit_gemm::{ConvShape, MmaConfig, SimtConfig};
use super::source::{tiled_wrapper, Arg, Geometry, Instance, Params, Template, Workspace};
use crate::ir::{is_row_major_bytes, Graph, NodeId, Op};
use serde::{Deserialize, Serialize};

/// Largest M the GEMV template accepts.
pub const GEMV_MAX_M: usize = 16;
/// Largest M the default sends to the GEMV template.
pub const GEMV_DEFAULT_MAX_M: usize = 8;

/// The GEMV template's parameters: warps per CTA, output columns per warp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GemvConfig {
    pub warps: u32,
    pub rows: u32,
}

impl GemvConfig {
    /// Elements per load: 16 bytes of the wider of x and w where K allows.
    pub fn vector(shape: &ConvShape) -> usize {
        let elem = shape.x_dtype.size().max(shape.w_dtype.size());
        [8usize, 4, 2, 1]
            .into_iter()
            .find(|&v| v * elem <= 16 && shape.gemm_k() % v == 0)
            .unwrap_or(1)
    }

    pub fn validate(&self, shape: &ConvShape) -> Result<(), String> {
        let m = shape.gemm_m();
        if m > GEMV_MAX_M {
            return Err(format!("GEMV handles M ≤ {GEMV_MAX_M}, got {m}"));
        }
        if !(1..=32).contains(&self.warps) {
            return Err("warps must be in 1..=32".into());
        }
        if !matches!(self.rows, 1 | 2 | 4 | 8) {
            return Err("rows must be 1, 2, 4 or 8".into());
        }
        let regs = self.rows as usize * m + m * Self::vector(shape) + 40;
        if regs > 200 {
            return Err(format!("about {regs} registers per thread"));
        }
        Ok(())
    }

    pub fn geometry(&self, shape: &ConvShape) -> Geometry {
        let per_cta = (self.warps * self.rows) as usize;
        Geometry {
            grid: [shape.gemm_n().div_ceil(per_cta).max(1) as u32, 1, 1],
            block: [32 * self.warps, 1, 1],
            smem_bytes: 0,
        }
    }
}

/// Which dense template runs a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kernel", rename_all = "snake_case")]
pub enum DenseConfig {
    Gemv(GemvConfig),
    Simt(SimtConfig),
    Mma(MmaConfig),
}

impl DenseConfig {
    fn tiled(&self) -> Option<ConvConfig> {
        match *self {
            DenseConfig::Gemv(_) => None,
            DenseConfig::Simt(c) => Some(ConvConfig::Simt(c)),
            DenseConfig::Mma(c) => Some(ConvConfig::Mma(c)),
        }
    }
}

impl KernelConfig for DenseConfig {
    type Shape = ConvShape;

    /// M ≤ 8: GEMV, one output column per warp, 4 warps per CTA (fewer when
    /// that leaves less than one CTA per SM). Larger M: the tiled
    /// convolution default for the 1×1 view.
    fn default_for(shape: &ConvShape) -> Self {
        if shape.gemm_m() <= GEMV_DEFAULT_MAX_M {
            let warps = [4u32, 2, 1]
                .into_iter()
                .find(|&w| shape.gemm_n().div_ceil(w as usize) >= 132)
                .unwrap_or(1);
            let c = GemvConfig { warps, rows: 1 };
            if c.validate(shape).is_ok() {
                return DenseConfig::Gemv(c);
            }
        }
        match ConvConfig::default_for(shape) {
            ConvConfig::Mma(c) => DenseConfig::Mma(c),
            ConvConfig::Simt(c) => DenseConfig::Simt(c),
            // Not reachable for groups = 1; a one-column-per-warp GEMV is the
            // safe fallback.
            ConvConfig::Direct(_) => DenseConfig::Gemv(GemvConfig { warps: 4, rows: 1 }),
        }
    }

    fn validate(&self, shape: &ConvShape) -> Result<(), String> {
        match self {
            DenseConfig::Gemv(c) => c.validate(shape),
            DenseConfig::Simt(c) => c.validate(shape),
            DenseConfig::Mma(c) => c.validate(shape),
        }
    }

    fn search_space(shape: &ConvShape) -> Vec<Self> {
        let mut out = Vec::new();
        for warps in [1, 2, 4, 8] {
            for rows in [1, 2, 4] {
                let c = GemvConfig { warps, rows };
                if c.validate(shape).is_ok() {
                    out.push(DenseConfig::Gemv(c));
                }
            }
        }
        out.extend(
            ConvConfig::search_space(shape)
                .into_iter()
                .filter_map(|c| match c {
                    ConvConfig::Mma(c) => Some(DenseConfig::Mma(c)),
                    ConvConfig::Simt(c) => Some(DenseConfig::Simt(c)),
                    ConvConfig::Direct(_) => None,
                }),
        );
        out
    }

    fn tag(&self) -> String {
        match self {
            DenseConfig::Gemv(c) => format!("gemv_w{}r{}", c.warps, c.rows),
            DenseConfig::Simt(c) => c.tag(),
            DenseConfig::Mma(c) => c.tag(),
        }
    }
}

/// The 1×1-convolution view of a `Dense` node.
pub fn dense_shape(graph: &Graph, node: NodeId) -> Result<ConvShape, String> {
    let n = graph.node(node);
    let Op::Dense { epilogue } = &n.op else {
        return Err(format!("{} is not Dense", n.op.kind()));
    };
    let value = |i: usize| {
        n.inputs
            .get(i)
            .map(|&v| graph.value(v))
            .ok_or_else(|| format!("missing input {i}"))
    };
    let (x, w, y) = (value(0)?, value(1)?, graph.value(n.output));
    let bias = if epilogue.bias {
        Some(value(2)?.dtype)
    } else {
        None
    };
    let residual = if epilogue.residual {
        Some(value(2 + usize::from(epilogue.bias))?)
    } else {
        None
    };
    for v in [x, w, y].into_iter().chain(residual) {
        if v.shape.len() != 2 || !is_row_major_bytes(&v.shape, v.layout) {
            return Err(format!(
                "Dense needs 2-D row-major operands, got {:?} {}",
                v.shape,
                v.layout.name()
            ));
        }
    }
    Ok(ConvShape::dense(
        x.shape[0],
        w.shape[0],
        x.shape[1],
        x.dtype,
        w.dtype,
        residual.map(|v| v.dtype),
        y.dtype,
        bias,
        epilogue.activation,
        graph.precision,
    ))
}

/// Renders the instantiation of `config` for `shape` under `symbol`.
pub fn instantiate(shape: &ConvShape, config: &DenseConfig, symbol: &str) -> Instance {
    let DenseConfig::Gemv(gemv) = config else {
        let tiled = config.tiled().unwrap_or(ConvConfig::default_for(shape));
        let mut instance = conv::instantiate(shape, &tiled, symbol);
        instance.config = serde_json::to_string(config).unwrap_or_default();
        return instance;
    };
    let mut p = Params::new(format!("{symbol}_p"));
    shape.render(&mut p);
    p.ints(&[
        ("WARPS", gemv.warps.into()),
        ("ROWS", gemv.rows.into()),
        ("V", GemvConfig::vector(shape) as i64),
    ]);
    let mut args = vec![
        Arg::input("x", shape.x_dtype),
        Arg::input("w", shape.w_dtype),
    ];
    if let Some(dtype) = shape.bias {
        args.push(Arg::input("bias", dtype));
    }
    if let Some(dtype) = shape.residual {
        args.push(Arg::input("res", dtype));
    }
    args.push(Arg::output("y", shape.out_dtype));
    let call = format!(
        "aotune::dense_gemv<{}>(x, w, {}, {}, y)",
        p.name(),
        if shape.bias.is_some() {
            "bias"
        } else {
            "nullptr"
        },
        if shape.residual.is_some() {
            "res"
        } else {
            "nullptr"
        },
    );
    let geometry = gemv.geometry(shape);
    Instance {
        symbol: symbol.to_string(),
        template: Template::DenseGemv,
        config: serde_json::to_string(config).unwrap_or_default(),
        code: format!(
            "{}{}",
            p.render(),
            tiled_wrapper(symbol, geometry.block[0], &args, &call)
        ),
        geometry,
        workspace: Workspace::default(),
    }
}
