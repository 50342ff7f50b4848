//! Row kernels (`rows.cu`): an op that reduces or normalizes the trailing
//! axes of a row-major value sees it as `rows × len` ([`RowShape`]):
//! reductions (one output per row), Softmax/LogSoftmax/Hardmax over the last
//! axis, LayerNorm, GroupNorm (a row per image and group), LpNorm and
//! MeanVarianceNorm. The shapes come from `reduce.rs` and `norm.rs`, which
//! send rows shorter than [`MIN_LEN`] and slices that are not rows to the
//! per-slice kernels of `reduce.cu` instead.
//!
//! Rows of up to [`WARP_MAX_LEN`] elements get a group of lanes of a warp
//! each (32, or as few as 4 for rows of fewer vectors: ConvNeXt's and
//! Swin's stage-1 rows of 96 f16 are 12 vectors, so 16 lanes take each),
//! longer ones a CTA; each thread keeps its share of the row in registers
//! unless that exceeds [`register_elements`] for the config's block, in
//! which case the kernel reads the row again for each pass. [`LinearConfig`]
//! sets the geometry: `block` threads per CTA, and `per_thread` row groups
//! per warp (warp kernels, whose work items are 32 lanes per warp's worth
//! of rows) or rows per CTA (CTA kernels, whose items for the default's
//! sake are the `rows · len / V` vectors). Codes of [`Reduction`] and [`NormMode`] are the C++ enums of
//! `reduce.cu`.

use super::config::{LinearConfig, LinearShape};
use super::source::{
    tiled_wrapper, Arg, DependencyWait, Geometry, Instance, Params, Template, Workspace,
};
use crate::ir::{DType, ReduceKind};

/// Rows shorter than this go to the per-slice kernels (a warp per row
/// would idle most of its lanes).
pub const MIN_LEN: usize = 32;
/// The longest row a warp takes; longer rows get a CTA.
pub const WARP_MAX_LEN: usize = 2048;

/// What a reduction computes (`reduce.cu`'s `ReduceKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reduction {
    Sum,
    Mean,
    /// NaN-propagating, as ReduceMax's reference.
    Max,
    Min,
    Prod,
    L1,
    L2,
    SumSquare,
    LogSum,
    LogSumExp,
    /// GlobalMaxPool's max, which drops NaN (`fmaxf`, as `f32::max`).
    PoolMax,
}

impl Reduction {
    pub fn of(kind: ReduceKind) -> Reduction {
        match kind {
            ReduceKind::Sum => Reduction::Sum,
            ReduceKind::Max => Reduction::Max,
            ReduceKind::Min => Reduction::Min,
            ReduceKind::Prod => Reduction::Prod,
            ReduceKind::L1 => Reduction::L1,
            ReduceKind::L2 => Reduction::L2,
            ReduceKind::SumSquare => Reduction::SumSquare,
            ReduceKind::LogSum => Reduction::LogSum,
            ReduceKind::LogSumExp => Reduction::LogSumExp,
        }
    }

    /// The C++ enumerator.
    pub fn code(self) -> &'static str {
        match self {
            Reduction::Sum => "aotune::RED_SUM",
            Reduction::Mean => "aotune::RED_MEAN",
            Reduction::Max => "aotune::RED_MAX",
            Reduction::Min => "aotune::RED_MIN",
            Reduction::Prod => "aotune::RED_PROD",
            Reduction::L1 => "aotune::RED_L1",
            Reduction::L2 => "aotune::RED_L2",
            Reduction::SumSquare => "aotune::RED_SUM_SQUARE",
            Reduction::LogSum => "aotune::RED_LOG_SUM",
            Reduction::LogSumExp => "aotune::RED_LOG_SUM_EXP",
            Reduction::PoolMax => "aotune::RED_POOL_MAX",
        }
    }
}

/// What a normalization computes (`reduce.cu`'s `NormMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NormMode {
    Softmax,
    LogSoftmax,
    Hardmax,
    /// `(x − mean) / sqrt(var + ε) · scale + bias`: LayerNorm, GroupNorm.
    Affine,
    /// `(x − mean) / (sqrt(var) + 1e-9)`.
    MeanVariance,
    /// `x / Σ|x|`.
    L1,
    /// `x / sqrt(Σx²)`.
    L2,
}

impl NormMode {
    /// The C++ enumerator.
    pub fn code(self) -> &'static str {
        match self {
            NormMode::Softmax => "aotune::NORM_SOFTMAX",
            NormMode::LogSoftmax => "aotune::NORM_LOG_SOFTMAX",
            NormMode::Hardmax => "aotune::NORM_HARDMAX",
            NormMode::Affine => "aotune::NORM_AFFINE",
            NormMode::MeanVariance => "aotune::NORM_MVN",
            NormMode::L1 => "aotune::NORM_LP1",
            NormMode::L2 => "aotune::NORM_LP2",
        }
    }
}

/// What a row kernel does with each row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RowOp {
    Reduce(Reduction),
    Norm(NormMode),
}

/// An affine operand (scale or bias) of a normalization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Affine {
    pub dtype: DType,
    /// Body of `int f(int row, int j)`: the operand's element for column
    /// `j` of slice (or row) `row`.
    pub index: String,
    /// The element of column `j` is `j` (loaded as vectors in rows).
    pub contiguous: bool,
}

/// `rows × len` elements of a row-major value, and what to do with each row.
#[derive(Debug, Clone, PartialEq)]
pub struct RowShape {
    pub rows: usize,
    pub len: usize,
    pub op: RowOp,
    pub epsilon: f32,
    pub scale: Option<Affine>,
    pub bias: Option<Affine>,
    pub in_dtype: DType,
    pub out_dtype: DType,
}

/// Elements a thread may keep in registers under `__launch_bounds__(block,
/// 1)` (65536 registers per SM; a 1024-thread block leaves 64 per thread).
/// The minimum of one block keeps ptxas from capping registers for
/// occupancy below what the slots need (at 63 it spilled a 24-element
/// share).
pub fn register_elements(block: u32) -> usize {
    if block <= 512 {
        64
    } else {
        16
    }
}

impl RowShape {
    /// Elements per vector access: up to 16 bytes of input (and of output
    /// for normalizations) dividing the row.
    pub fn vector(&self) -> usize {
        let out = match self.op {
            RowOp::Reduce(_) => 0,
            RowOp::Norm(_) => self.out_dtype.size(),
        };
        let elem = self.in_dtype.size().max(out);
        [8usize, 4, 2, 1]
            .into_iter()
            .find(|&v| v * elem <= 16 && self.len % v == 0)
            .unwrap_or(1)
    }

    /// A warp per row (else a CTA).
    pub fn warp(&self) -> bool {
        self.len <= WARP_MAX_LEN
    }

    /// Lanes per row of a warp kernel: the fewest (a power of two, at
    /// least 4) that give each lane at most one vector, capped at 32.
    pub fn lanes(&self) -> usize {
        (self.len / self.vector()).next_power_of_two().clamp(4, 32)
    }

    pub fn items(&self) -> LinearShape {
        let items = if self.warp() {
            self.rows.div_ceil(32 / self.lanes()) * 32
        } else {
            self.rows * (self.len / self.vector())
        };
        LinearShape {
            items: items as u64,
        }
    }

    /// Threads per row under `config`.
    fn threads(&self, config: &LinearConfig) -> usize {
        if self.warp() {
            self.lanes()
        } else {
            config.block as usize
        }
    }

    /// Vectors each thread owns.
    fn slots(&self, config: &LinearConfig) -> usize {
        (self.len / self.vector()).div_ceil(self.threads(config))
    }

    /// Whether each thread keeps its share of a row in registers.
    pub fn in_registers(&self, config: &LinearConfig) -> bool {
        self.slots(config) * self.vector() <= register_elements(config.block)
    }

    fn geometry(&self, config: &LinearConfig) -> Geometry {
        let grid = if self.warp() {
            config.grid(&self.items())
        } else {
            self.rows
                .div_ceil(config.per_thread.max(1) as usize)
                .clamp(1, i32::MAX as usize) as u32
        };
        Geometry {
            grid: [grid, 1, 1],
            block: [config.block, 1, 1],
            smem_bytes: 0,
        }
    }
}

/// The row kernel of `shape` under `config`.
pub fn instantiate(shape: &RowShape, config: &LinearConfig, symbol: &str) -> Instance {
    let (mode, kind) = match shape.op {
        RowOp::Reduce(r) => ("aotune::NORM_REDUCE", r.code()),
        RowOp::Norm(m) => (m.code(), "aotune::RED_SUM"),
    };
    let affine_dtype = |a: &Option<Affine>| a.as_ref().map_or(DType::F32, |a| a.dtype);
    let index = |a: &Option<Affine>| {
        a.as_ref()
            .map_or_else(|| "return 0;".to_string(), |a| a.index.clone())
    };
    let contiguous = |a: &Option<Affine>| a.as_ref().is_some_and(|a| a.contiguous);
    let mut p = Params::new(format!("{symbol}_p"));
    p.ty("TIn", shape.in_dtype)
        .ty("TOut", shape.out_dtype)
        .ty("TScale", affine_dtype(&shape.scale))
        .ty("TBias", affine_dtype(&shape.bias))
        .ints(&[
            ("ROWS", shape.rows as i64),
            ("L", shape.len as i64),
            ("V", shape.vector() as i64),
        ])
        .ints(&[
            ("BLOCK", i64::from(config.block)),
            ("THREADS", shape.threads(config) as i64),
            ("SLOTS", shape.slots(config) as i64),
        ])
        .int_expr("MODE", mode)
        .int_expr("KIND", kind)
        .boolean("WARP", shape.warp())
        .boolean("STREAM", !shape.in_registers(config))
        .boolean("HAS_SCALE", shape.scale.is_some())
        .boolean("HAS_BIAS", shape.bias.is_some())
        .boolean("SCALE_CONTIG", contiguous(&shape.scale))
        .boolean("BIAS_CONTIG", contiguous(&shape.bias))
        .float("EPS", shape.epsilon)
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
    let call = format!("aotune::rows<{}>(x, {scale}, {bias}, y)", p.name());
    Instance {
        symbol: symbol.to_string(),
        template: Template::Rows,
        config: serde_json::to_string(config).unwrap_or_default(),
        code: format!(
            "{}{}",
            p.render(),
            tiled_wrapper(
                symbol,
                config.block,
                1,
                DependencyWait::AtEntry,
                &args,
                &call
            )
        ),
        geometry: shape.geometry(config),
        workspace: Workspace::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::cuda::config::KernelConfig;
    use crate::codegen::cuda::source::Template;

    fn layer_norm(rows: usize, len: usize, dtype: DType) -> RowShape {
        RowShape {
            rows,
            len,
            op: RowOp::Norm(NormMode::Affine),
            epsilon: 1e-6,
            scale: Some(Affine {
                dtype: DType::F32,
                index: "return j;".into(),
                contiguous: true,
            }),
            bias: None,
            in_dtype: dtype,
            out_dtype: dtype,
        }
    }

    #[test]
    fn codes_are_the_templates_enumerators() {
        let source = Template::Reduce.source();
        let reductions = [
            Reduction::Sum,
            Reduction::Mean,
            Reduction::Max,
            Reduction::Min,
            Reduction::Prod,
            Reduction::L1,
            Reduction::L2,
            Reduction::SumSquare,
            Reduction::LogSum,
            Reduction::LogSumExp,
            Reduction::PoolMax,
        ];
        let modes = [
            NormMode::Softmax,
            NormMode::LogSoftmax,
            NormMode::Hardmax,
            NormMode::Affine,
            NormMode::MeanVariance,
            NormMode::L1,
            NormMode::L2,
        ];
        let codes: Vec<&str> = reductions
            .iter()
            .map(|r| r.code())
            .chain(modes.iter().map(|m| m.code()))
            .collect();
        for code in codes {
            let name = code.trim_start_matches("aotune::");
            assert!(source.contains(&format!(" {name} = ")), "{name}");
        }
    }

    #[test]
    fn vit_layer_norm_is_a_warp_per_row_in_registers() {
        // ViT-B/16: 197 rows of 768 f16 = 96 16-byte vectors, 3 per lane.
        let shape = layer_norm(197, 768, DType::F16);
        assert_eq!(shape.vector(), 8);
        assert!(shape.warp());
        let config = LinearConfig::default_for(&shape.items());
        assert_eq!(shape.slots(&config), 3);
        assert!(shape.in_registers(&config));
        let g = shape.geometry(&config);
        let rows_per_grid = g.grid[0] as usize * config.block as usize / 32;
        assert!(rows_per_grid >= 197, "{g:?} {config:?}");
        let text = instantiate(&shape, &config, "ln").code;
        assert!(text.contains("WARP = true"), "{text}");
        assert!(text.contains("STREAM = false"), "{text}");
        assert!(
            text.contains("aotune::rows<ln_p>(x, scale, nullptr, y)"),
            "{text}"
        );
    }

    #[test]
    fn long_rows_take_a_cta_and_stream_past_the_register_budget() {
        let shape = layer_norm(2, 4096, DType::F32);
        assert!(!shape.warp());
        let c = |block, per_thread| LinearConfig { block, per_thread };
        // 1024 vectors of 4 over 256 threads: 16 elements each.
        assert!(shape.in_registers(&c(256, 1)));
        assert_eq!(shape.geometry(&c(256, 1)).grid, [2, 1, 1]);
        assert_eq!(shape.geometry(&c(256, 2)).grid, [1, 1, 1]);
        // 64 threads: 64 elements each, the budget; 1024 threads: 4 of 16.
        assert!(shape.in_registers(&c(64, 1)));
        assert!(shape.in_registers(&c(1024, 1)));
        let huge = layer_norm(1, 1 << 20, DType::F16);
        assert!(!huge.in_registers(&c(256, 1)));
        let text = instantiate(&huge, &c(256, 1), "big").code;
        assert!(text.contains("STREAM = true"), "{text}");
    }

    #[test]
    fn short_rows_share_a_warp() {
        // ConvNeXt/Swin stage 1: 96 f16 = 12 vectors, 16 lanes a row.
        let swin = layer_norm(3136, 96, DType::F16);
        assert_eq!(swin.lanes(), 16);
        assert_eq!(swin.items().items, 3136 / 2 * 32);
        let config = LinearConfig {
            block: 256,
            per_thread: 1,
        };
        assert_eq!(swin.slots(&config), 1);
        // 8 warps of 2 rows per CTA.
        assert_eq!(swin.geometry(&config).grid, [3136 / 16, 1, 1]);
        let text = instantiate(&swin, &config, "swin").code;
        assert!(text.contains("THREADS = 16, SLOTS = 1"), "{text}");
        // 33 odd elements: 32 lanes, two slots; 40 f32 = 10 vectors: 16.
        assert_eq!(layer_norm(5, 33, DType::F32).lanes(), 32);
        assert_eq!(layer_norm(5, 40, DType::F32).lanes(), 16);
        assert_eq!(layer_norm(5, 32, DType::F16).lanes(), 4);
        assert_eq!(layer_norm(5, 4096, DType::F16).lanes(), 32);
    }

    #[test]
    fn odd_rows_use_scalar_accesses() {
        let shape = layer_norm(15, 165, DType::F16);
        assert_eq!(shape.vector(), 1);
        let mut reduce = layer_norm(4, 96, DType::F32);
        reduce.op = RowOp::Reduce(Reduction::Sum);
        reduce.out_dtype = DType::F32;
        assert_eq!(reduce.vector(), 4);
        reduce.in_dtype = DType::BF16;
        assert_eq!(reduce.vector(), 8);
    }
}
