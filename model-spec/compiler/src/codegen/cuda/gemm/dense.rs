//! `Dense` kernels: `y[M,N] = act(x[M,K]·w[N,K]ᵀ + bias + residual)` with
//! row-major x, w and y.
//!
//! At small M (< 8 by default, ≤ 16 allowed) the layer is a weight-streaming
//! GEMV (`dense_gemv.cu`: `rows` output columns per warp, every weight row
//! read once with 16-byte loads, `unroll` of them in flight per lane); from
//! M = 8 (batch 8) it is the 1×1 case of the tiled convolution templates
//! ([`ConvShape::dense`]: x is an `[M,1,1,K]` NHWC image, w an `[N,1,1,K]`
//! OHWI filter), with their configs and search spaces: the tensor-core
//! kernel for f16/bf16.
//!
//! Why the GEMV at batch 1: ResNet-50's classifier is 4 MB of f16 weights
//! and 2 MFLOP, about 1 µs at the H200's 4.3 TB/s if every SM streams its
//! share of the weights with enough 16-byte loads in flight (1000 columns
//! over 4-warp CTAs: 250 CTAs; 8 loads per lane issued before the first
//! FMA: the whole 4 MB in flight at once).

use super::config::KernelConfig;
use super::conv::{self, ConvConfig};
use super::conv_shape::ConvShape;
use super::implicit_gemm::SimtConfig;
use super::mma_config::MmaConfig;
use super::source::{
    tiled_wrapper, Arg, DependencyWait, Geometry, Instance, Params, Template, Workspace,
};
use super::wgmma_config::WgmmaConfig;
use crate::ir::{is_row_major_bytes, Graph, NodeId, Op};
use serde::{Deserialize, Serialize};

/// Largest M the GEMV template accepts.
pub const GEMV_MAX_M: usize = 16;
/// Largest M the default sends to the GEMV template (batch 8 and up take
/// the tiled, tensor-core path).
pub const GEMV_DEFAULT_MAX_M: usize = 7;
/// Register budget per thread the GEMV's validity rule allows.
const GEMV_MAX_REGS: usize = 200;

/// The GEMV template's parameters: warps per CTA, output columns per warp,
/// and k steps (of `32 · V` elements) whose weight loads a lane issues
/// before it uses any.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GemvConfig {
    pub warps: u32,
    pub rows: u32,
    pub unroll: u32,
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

    /// Full k steps of a warp: `K / (32 · V)` (a shorter tail follows).
    pub fn steps(shape: &ConvShape) -> usize {
        shape.gemm_k() / (32 * Self::vector(shape))
    }

    /// Registers per thread: the accumulators, the raw weight vectors in
    /// flight, one step of x as f32, and about 40 for addresses and loop
    /// state.
    pub fn regs_estimate(&self, shape: &ConvShape) -> usize {
        let (m, v) = (shape.gemm_m(), Self::vector(shape));
        let raw = (v * shape.w_dtype.size()).div_ceil(4);
        let (rows, unroll) = (self.rows as usize, self.unroll as usize);
        rows * m + unroll * rows * raw + m * v + 40
    }

    pub fn validate(&self, shape: &ConvShape) -> Result<(), String> {
        if shape.row_norm.is_some() {
            return Err("the GEMV does not normalize its input rows".into());
        }
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
        if !matches!(self.unroll, 1 | 2 | 4 | 8) {
            return Err("unroll must be 1, 2, 4 or 8".into());
        }
        let steps = Self::steps(shape).max(1);
        if self.unroll as usize > steps {
            return Err(format!(
                "unroll {} exceeds the {steps} k steps",
                self.unroll
            ));
        }
        let regs = self.regs_estimate(shape);
        if regs > GEMV_MAX_REGS {
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
    Wgmma(WgmmaConfig),
}

impl DenseConfig {
    fn tiled(&self) -> Option<ConvConfig> {
        match *self {
            DenseConfig::Gemv(_) => None,
            DenseConfig::Simt(c) => Some(ConvConfig::Simt(c)),
            DenseConfig::Mma(c) => Some(ConvConfig::Mma(c)),
            DenseConfig::Wgmma(c) => Some(ConvConfig::Wgmma(c)),
        }
    }
}

impl KernelConfig for DenseConfig {
    type Shape = ConvShape;

    /// M < 8: GEMV, one output column per warp, 4 warps per CTA (fewer when
    /// that leaves less than one CTA per SM), and as many k steps in flight
    /// as there are, up to 8, within the register budget. Larger M: the
    /// tiled convolution default for the 1×1 view.
    fn default_for(shape: &ConvShape) -> Self {
        if shape.gemm_m() <= GEMV_DEFAULT_MAX_M {
            let warps = [4u32, 2, 1]
                .into_iter()
                .find(|&w| shape.gemm_n().div_ceil(w as usize) >= 132)
                .unwrap_or(1);
            let valid = [8u32, 4, 2, 1]
                .into_iter()
                .map(|unroll| GemvConfig {
                    warps,
                    rows: 1,
                    unroll,
                })
                .find(|c| c.validate(shape).is_ok());
            if let Some(c) = valid {
                return DenseConfig::Gemv(c);
            }
        }
        match ConvConfig::default_for(shape) {
            ConvConfig::Mma(c) => DenseConfig::Mma(c),
            ConvConfig::Wgmma(c) => DenseConfig::Wgmma(c),
            ConvConfig::Simt(c) => DenseConfig::Simt(c),
            // Not reachable for groups = 1; a one-column-per-warp GEMV is the
            // safe fallback.
            ConvConfig::Direct(_) | ConvConfig::DepthwiseWindow(_) => {
                DenseConfig::Gemv(GemvConfig {
                    warps: 4,
                    rows: 1,
                    unroll: 1,
                })
            }
        }
    }

    fn validate(&self, shape: &ConvShape) -> Result<(), String> {
        match self {
            DenseConfig::Gemv(c) => c.validate(shape),
            DenseConfig::Simt(c) => c.validate(shape),
            DenseConfig::Mma(c) => c.validate(shape),
            DenseConfig::Wgmma(c) => c.validate(shape),
        }
    }

    fn search_space(shape: &ConvShape) -> Vec<Self> {
        let mut out = Vec::new();
        for warps in [1, 2, 4, 8] {
            for rows in [1, 2, 4] {
                for unroll in [1, 2, 4, 8] {
                    let c = GemvConfig {
                        warps,
                        rows,
                        unroll,
                    };
                    if c.validate(shape).is_ok() {
                        out.push(DenseConfig::Gemv(c));
                    }
                }
            }
        }
        out.extend(
            ConvConfig::search_space(shape)
                .into_iter()
                .filter_map(|c| match c {
                    ConvConfig::Mma(c) => Some(DenseConfig::Mma(c)),
                    ConvConfig::Wgmma(c) => Some(DenseConfig::Wgmma(c)),
                    ConvConfig::Simt(c) => Some(DenseConfig::Simt(c)),
                    ConvConfig::Direct(_) | ConvConfig::DepthwiseWindow(_) => None,
                }),
        );
        out
    }

    fn tag(&self) -> String {
        match self {
            DenseConfig::Gemv(c) => format!("gemv_w{}r{}u{}", c.warps, c.rows, c.unroll),
            DenseConfig::Simt(c) => c.tag(),
            DenseConfig::Mma(c) => c.tag(),
            DenseConfig::Wgmma(c) => c.tag(),
        }
    }

    fn estimate_ns(&self, shape: &ConvShape) -> Option<f64> {
        match self {
            DenseConfig::Gemv(_) => None,
            DenseConfig::Simt(c) => ConvConfig::Simt(*c).estimate_ns(shape),
            DenseConfig::Mma(c) => ConvConfig::Mma(*c).estimate_ns(shape),
            DenseConfig::Wgmma(c) => ConvConfig::Wgmma(*c).estimate_ns(shape),
        }
    }

    fn shape_features(shape: &ConvShape) -> Vec<f64> {
        super::conv::gemm_features(shape)
    }
}

/// The 1×1-convolution view of a `Dense` node.
pub fn dense_shape(graph: &Graph, node: NodeId) -> Result<ConvShape, String> {
    let n = graph.node(node);
    let Op::Dense { epilogue, norm } = &n.op else {
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
    Ok(ConvShape {
        row_norm: norm.map(|norm| norm.epsilon),
        ..ConvShape::dense(
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
        )
    })
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
        ("UNROLL", gemv.unroll.into()),
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
            tiled_wrapper(
                symbol,
                geometry.block[0],
                1,
                DependencyWait::InTemplate,
                &args,
                &call,
            )
        ),
        geometry,
        workspace: Workspace::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Activation, DType, Precision};

    fn classifier(m: usize, precision: Precision) -> ConvShape {
        let s = precision.storage();
        ConvShape::dense(
            m,
            1000,
            2048,
            s,
            s,
            None,
            DType::F32,
            Some(DType::F32),
            Activation::None,
            precision,
        )
    }

    #[test]
    fn batch_one_streams_the_weights_with_eight_loads_in_flight() {
        let shape = classifier(1, Precision::Fp16);
        assert_eq!(GemvConfig::steps(&shape), 8);
        let d = DenseConfig::default_for(&shape);
        let want = GemvConfig {
            warps: 4,
            rows: 1,
            unroll: 8,
        };
        assert_eq!(d, DenseConfig::Gemv(want));
        assert_eq!(want.geometry(&shape).grid, [250, 1, 1]);
        // f32 weights: 4-element vectors, 16 steps, still 8 in flight.
        let fp32 = classifier(4, Precision::Fp32);
        assert!(matches!(
            DenseConfig::default_for(&fp32),
            DenseConfig::Gemv(GemvConfig { unroll: 8, .. })
        ));
    }

    #[test]
    fn batch_eight_takes_the_tensor_cores() {
        for m in [8, 256] {
            let d = DenseConfig::default_for(&classifier(m, Precision::Fp16));
            assert!(matches!(d, DenseConfig::Mma(_)), "M = {m}: {d:?}");
        }
    }

    /// A GELU epilogue names its `activate` specialization, and only a
    /// module with one includes `epilogue_gelu.cuh`: a module without GELU
    /// keeps its text.
    #[test]
    fn gelu_epilogues_bring_their_helper_file() {
        use super::super::assemble::assemble;
        let module = |m: usize, activation: Activation| {
            let shape = ConvShape::dense(
                m,
                64,
                128,
                DType::F16,
                DType::F16,
                None,
                DType::F16,
                Some(DType::F32),
                activation,
                Precision::Fp16,
            );
            let config = DenseConfig::default_for(&shape);
            let instance = instantiate(&shape, &config, "k");
            assemble(&[(instance, "k".into())])
        };
        for m in [1, 64] {
            let relu = module(m, Activation::Relu);
            assert!(relu.contains("static constexpr int ACT = 1;"), "{relu}");
            assert!(!relu.contains("epilogue_gelu.cuh") && !relu.contains("ACT_GELU"));
            for (tanh, name) in [(false, "ACT_GELU;"), (true, "ACT_GELU_TANH;")] {
                let gelu = module(m, Activation::Gelu { tanh });
                assert!(gelu.contains(&format!("ACT = aotune::{name}")), "M = {m}");
                let helper = gelu.find("// ---- epilogue_gelu.cuh ----");
                let use_ = gelu.find("// ---- instantiations ----");
                assert!(helper.is_some() && helper < use_, "M = {m}");
            }
        }
    }

    /// A Dense whose rows are normalized on the way in (`RowNorm`) runs
    /// only on the plain wgmma template with whole rows per CTA; its default
    /// is one of those and the rendered kernel takes the column sums last.
    #[test]
    fn a_row_norm_keeps_to_plain_wgmma_tiles_of_split_one() {
        let shape = ConvShape {
            row_norm: Some(1e-6),
            ..ConvShape::dense(
                197,
                2304,
                768,
                DType::F16,
                DType::F16,
                None,
                DType::F16,
                Some(DType::F32),
                Activation::None,
                Precision::Fp16,
            )
        };
        let space = DenseConfig::search_space(&shape);
        assert!(!space.is_empty());
        for c in space.iter().chain([&DenseConfig::default_for(&shape)]) {
            let DenseConfig::Wgmma(w) = c else {
                panic!("{c:?} is not wgmma");
            };
            assert!(w.split_k == 1 && !w.swap_ab && !w.warp_specialized, "{w:?}");
            assert_eq!(c.validate(&shape), Ok(()));
        }
        let code = instantiate(&shape, &space[0], "k").code;
        assert!(
            code.contains("ROW_NORM = true") && code.contains("NORM_EPS"),
            "{code}"
        );
        assert!(code.contains("y, colsum)"), "{code}");
        let plain = ConvShape {
            row_norm: None,
            ..shape
        };
        let code = instantiate(&plain, &DenseConfig::default_for(&plain), "k").code;
        assert!(
            !code.contains("ROW_NORM") && !code.contains("colsum"),
            "{code}"
        );
    }

    #[test]
    fn unroll_is_bounded_by_steps_and_registers() {
        let shape = classifier(16, Precision::Fp32);
        let big = GemvConfig {
            warps: 4,
            rows: 4,
            unroll: 8,
        };
        assert!(big.validate(&shape).is_err());
        let short = ConvShape::dense(
            1,
            10,
            100,
            DType::F16,
            DType::F16,
            None,
            DType::F16,
            None,
            Activation::Relu,
            Precision::Fp16,
        );
        // K = 100: 4-element vectors, no full step of 128: one (tail) step.
        assert_eq!(GemvConfig::steps(&short), 0);
        let two = GemvConfig { unroll: 2, ..big };
        assert!(two.validate(&short).is_err());
        for shape in [
            classifier(1, Precision::Bf16),
            classifier(16, Precision::Fp32),
            short,
        ] {
            let space = DenseConfig::search_space(&shape);
            assert!(space.iter().all(|c| c.validate(&shape).is_ok()));
            assert!(space.contains(&DenseConfig::default_for(&shape)));
        }
    }
}
