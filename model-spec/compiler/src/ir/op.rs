//! The typed operator set of aotune's IR.
//!
//! Imported ONNX operators keep every attribute the importer accepted. The
//! fused operators ([`Op::FusedConv`], [`Op::Dense`], [`Op::Convert`],
//! [`Op::PadChannels`], [`Op::SpaceToDepth`]) exist only after passes have
//! run; the CPU reference
//! executes both kinds, so an optimized graph can be checked against the
//! graph it came from.

use super::movement::{PadMode, Resize};
use super::view::AttentionViews;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Geometry of a 2-D convolution (logical NCHW input, OIHW weight).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Conv2d {
    /// Kernel height and width (R, S).
    pub kernel: [usize; 2],
    pub strides: [usize; 2],
    /// Padding (top, left, bottom, right), already resolved from `auto_pad`.
    pub pads: [usize; 4],
    pub dilations: [usize; 2],
    pub groups: usize,
}

impl Conv2d {
    /// Output spatial size for an input of `h` × `w`, or `None` when the
    /// (dilated) kernel does not fit.
    pub fn output_hw(&self, h: usize, w: usize) -> Option<[usize; 2]> {
        let out = |size: usize, axis: usize| {
            let padded = size + self.pads[axis] + self.pads[axis + 2];
            let span = self.dilations[axis] * (self.kernel[axis] - 1) + 1;
            (padded >= span && self.strides[axis] > 0)
                .then(|| (padded - span) / self.strides[axis] + 1)
        };
        Some([out(h, 0)?, out(w, 1)?])
    }
}

/// Geometry of a 2-D max or average pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Pool2d {
    pub kernel: [usize; 2],
    pub strides: [usize; 2],
    /// Padding (top, left, bottom, right), already resolved from `auto_pad`.
    pub pads: [usize; 4],
    pub dilations: [usize; 2],
    pub ceil_mode: bool,
}

impl Pool2d {
    /// Output spatial size, following ONNX: with `ceil_mode` a last window is
    /// dropped when it would start entirely inside the end padding.
    pub fn output_hw(&self, h: usize, w: usize) -> Option<[usize; 2]> {
        let out = |size: usize, axis: usize| {
            let padded = size + self.pads[axis] + self.pads[axis + 2];
            let span = self.dilations[axis] * (self.kernel[axis] - 1) + 1;
            let stride = self.strides[axis];
            if padded < span || stride == 0 {
                return None;
            }
            let mut n = if self.ceil_mode {
                (padded - span).div_ceil(stride) + 1
            } else {
                (padded - span) / stride + 1
            };
            if self.ceil_mode && (n - 1) * stride >= size + self.pads[axis] {
                n -= 1;
            }
            Some(n)
        };
        Some([out(h, 0)?, out(w, 1)?])
    }
}

/// Pointwise activation applied at the end of an epilogue, to the f32 sum
/// `acc + bias + residual` before its one rounding to the output type.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Activation {
    None,
    Relu,
    /// Clamp to `[min, max]` (ReLU6 is `Clip { min: 0, max: 6 }`).
    Clip {
        min: f32,
        max: f32,
    },
    /// GELU as the `Gelu` op computes it ([`UnaryOp::Gelu`]): the exact
    /// `x/2 · (1 + erf(x/√2))`, or with `tanh` ONNX's approximation
    /// `x/2 · (1 + tanh(√(2/π)·(x + 0.044715·x³)))`. The CPU evaluates it
    /// in f64 and rounds once to f32; the GPU epilogues in f32 (`erff`,
    /// `tanhf`).
    Gelu {
        tanh: bool,
    },
}

impl Activation {
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Activation::None => x,
            Activation::Relu => x.max(0.0),
            Activation::Clip { min, max } => x.max(min).min(max),
            Activation::Gelu { tanh } => UnaryOp::Gelu { tanh }.apply(x),
        }
    }

    /// The activation a standalone unary op computes, when an epilogue can
    /// take it over: `Relu`, `Clip` and `Gelu`.
    pub fn of_unary(op: UnaryOp) -> Option<Activation> {
        match op {
            UnaryOp::Relu => Some(Activation::Relu),
            UnaryOp::Clip { min, max } => Some(Activation::Clip { min, max }),
            UnaryOp::Gelu { tanh } => Some(Activation::Gelu { tanh }),
            _ => None,
        }
    }
}

impl Eq for Activation {}
impl std::hash::Hash for Activation {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::mem::discriminant(self).hash(state);
        match self {
            Activation::Clip { min, max } => {
                min.to_bits().hash(state);
                max.to_bits().hash(state);
            }
            Activation::Gelu { tanh } => tanh.hash(state),
            Activation::None | Activation::Relu => {}
        }
    }
}

impl fmt::Display for Activation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Activation::None => f.write_str("none"),
            Activation::Relu => f.write_str("relu"),
            Activation::Clip { min, max } => write!(f, "clip({min},{max})"),
            Activation::Gelu { tanh: false } => f.write_str("gelu"),
            Activation::Gelu { tanh: true } => f.write_str("gelu_tanh"),
        }
    }
}

/// What a fused convolution or dense layer does after the matrix product:
/// `act(acc + bias + residual)`, in f32, then one rounding to the output type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Epilogue {
    /// A per-output-channel bias is the op's third input.
    pub bias: bool,
    /// A residual of the output's shape is the op's last input.
    pub residual: bool,
    pub activation: Activation,
}

impl Epilogue {
    pub const NONE: Epilogue = Epilogue {
        bias: false,
        residual: false,
        activation: Activation::None,
    };
}

impl fmt::Display for Epilogue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if self.bias {
            parts.push("bias".to_string());
        }
        if self.residual {
            parts.push("residual".to_string());
        }
        if self.activation != Activation::None {
            parts.push(self.activation.to_string());
        }
        if parts.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&parts.join("+"))
        }
    }
}

/// A second convolution summed into a [`Op::FusedConv`]'s accumulator: a
/// 1×1, unpadded, stride-`strides` convolution of the op's last input `xs
/// [N, Cs, Hs, Ws]` whose weights are the last `Cs` input channels of the
/// op's weight. The main convolution is then 1×1, stride 1 and unpadded
/// over `x [N, C, H, W]` with the first `C` input channels, so the weight
/// is `[K, C + Cs, 1, 1]` and, as a GEMM, the two share one K range:
///
/// `y[n,k,p,q] = act(Σ_c x[n,c,p,q]·w[k,c] + Σ_c' xs[n,c',p·sh,q·sw]·w[k,C+c'] + bias[k] + residual)`
///
/// [`crate::passes::fuse_shortcut`] builds it from ResNet's downsample
/// block (the projection shortcut added to the block's last conv), so the
/// projection's output is never written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Shortcut {
    pub strides: [usize; 2],
}

impl fmt::Display for Shortcut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conv1x1/s{}x{}", self.strides[0], self.strides[1])
    }
}

/// A global pool over a [`Op::FusedConv`]'s output pixels, run in its
/// epilogue: the op's output is then `[N, K, 1, 1]`, the pool of the
/// `[N, K, P, Q]` convolution output rounded to the output dtype, as a
/// `GlobalAveragePool` node reading that value would compute it (the f32
/// sum over pixels in order, one division, one rounding).
/// [`crate::passes::fuse_global_pool`] builds it where one output tile of
/// the convolution holds every pixel of the batch (batch 1 of ResNet-50's
/// last conv), so the 7×7×2048 activation is never written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum GlobalPool {
    Avg,
}

impl fmt::Display for GlobalPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GlobalPool::Avg => f.write_str("avg"),
        }
    }
}

/// A LayerNormalization over each output pixel's channels, run in a
/// depthwise [`Op::FusedConv`]'s epilogue: with `v[k]` the pixel's K
/// values `acc + bias` in f32 (the epilogue's activation is none),
///
/// `y[k] = (v[k] − μ) · rstd · γ[k] + β[k]`, `μ = Σ v / K`,
/// `rstd = 1 / sqrt(Σ (v − μ)² / K + epsilon)`,
///
/// the mean and variance in two passes over the unrounded f32 values, and
/// `y` rounded once to the output type. γ and β (`[K]` each) are the op's
/// last two inputs. [`crate::passes::fuse_conv_layer_norm`] builds it from
/// ConvNeXt's depthwise conv → LayerNorm over channels, so the conv's
/// output is never written unnormalized. Only a depthwise convolution that
/// [`ChannelNorm::supports`] may carry one (the kernel's limits).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ChannelNorm {
    pub epsilon: f32,
}

impl ChannelNorm {
    /// Most channels: the kernel gives each pixel K/4 threads of one CTA.
    pub const MAX_CHANNELS: usize = 1024;
    /// Most filter taps R·S: the kernel stages every channel's taps as f32
    /// in shared memory (K·R·S·4 bytes, 196 KiB at the limits).
    pub const MAX_TAPS: usize = 49;

    /// True when a FusedConv of geometry `conv` over `channels` input
    /// channels into `k` output channels may carry the norm: depthwise
    /// (`groups == channels == k`), channels in vectors of 4, at most
    /// [`Self::MAX_CHANNELS`] of them, at most [`Self::MAX_TAPS`] taps and
    /// dilation 1 (a thread's input window stays in registers).
    pub fn supports(conv: &Conv2d, channels: usize, k: usize) -> bool {
        conv.groups == channels
            && k == channels
            && channels % 4 == 0
            && channels <= Self::MAX_CHANNELS
            && conv.kernel[0] * conv.kernel[1] <= Self::MAX_TAPS
            && conv.dilations == [1, 1]
    }
}

impl Eq for ChannelNorm {}
impl std::hash::Hash for ChannelNorm {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.epsilon.to_bits().hash(state);
    }
}

impl fmt::Display for ChannelNorm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "layernorm(eps={:e})", self.epsilon)
    }
}

/// A LayerNormalization over the last axis of a [`Op::Dense`]'s input,
/// folded into the product: with `x [M, K]` the Dense's unnormalized input,
/// `w' [N, K]` its weight, `bias' [N]` its bias (the epilogue always has
/// one), `s [N]` an f32 constant (the op's *last* input, after any
/// residual) and
///
/// `acc[m,n] = Σ_k x[m,k]·w'[n,k]`, `μ_m = Σ_k x[m,k] / K`,
/// `r_m = 1 / sqrt(Σ_k (x[m,k] − μ_m)² / K + epsilon)`,
///
/// the output is `y[m,n] = act(r_m·(acc[m,n] − μ_m·s[n]) + bias'[n] +
/// residual[m,n])`, rounded once to the output type: the population
/// variance of the row's stored values, the statistics exact to f32 (two
/// passes or a wider type). It equals `Dense(LayerNorm(x, γ, β))` of a
/// Dense with weight `w` and bias `b` for `w' = w·diag(γ)`,
/// `bias' = b + w·β` and `s_n = Σ_k w'[n,k]`, summed over `w'` as stored
/// (so `acc − μ·s = Σ_k (x − μ)·w'` in real arithmetic).
/// [`crate::passes::fuse_dense_layer_norm`] builds it, so the normalized
/// activation is never written.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RowNorm {
    pub epsilon: f32,
}

impl RowNorm {
    /// Fewest rows M a Dense carrying the norm has: the tensor-core GEMM
    /// templates compute the row statistics, and a Dense of M ≤ 16 rows
    /// may run on the GEMV template instead, which does not.
    pub const MIN_ROWS: usize = 17;
    /// K a Dense carrying the norm is a multiple of: the wgmma template
    /// reads 16-byte operand rows.
    pub const K_MULTIPLE: usize = 8;
}

impl fmt::Display for RowNorm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "eps{:e}", self.epsilon)
    }
}

/// Elementwise binary operators with numpy broadcasting. Comparisons and
/// logical ops give 1.0 for true and 0.0 for false; logical ops read any
/// non-zero operand as true.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    /// `a^b` (computed in f64, rounded once).
    Pow,
    /// NaN-propagating maximum (numpy's `maximum`).
    Max,
    /// NaN-propagating minimum (numpy's `minimum`).
    Min,
    /// Remainder: with `fmod` C's `fmod` (the sign of `a`), without it the
    /// sign of `b` (Python's `%`, ONNX's integer `Mod`).
    Mod {
        fmod: bool,
    },
    Equal,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
    And,
    Or,
    Xor,
    /// `a < 0 ? a·b : a`, `b` the slope.
    PRelu,
}

impl BinaryOp {
    pub fn apply(self, a: f32, b: f32) -> f32 {
        crate::reference::math::binary(self, a, b)
    }

    /// The op's name, as [`Op::kind`] gives it.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "Add",
            BinaryOp::Sub => "Sub",
            BinaryOp::Mul => "Mul",
            BinaryOp::Div => "Div",
            BinaryOp::Pow => "Pow",
            BinaryOp::Max => "Max",
            BinaryOp::Min => "Min",
            BinaryOp::Mod { .. } => "Mod",
            BinaryOp::Equal => "Equal",
            BinaryOp::Less => "Less",
            BinaryOp::LessOrEqual => "LessOrEqual",
            BinaryOp::Greater => "Greater",
            BinaryOp::GreaterOrEqual => "GreaterOrEqual",
            BinaryOp::And => "And",
            BinaryOp::Or => "Or",
            BinaryOp::Xor => "Xor",
            BinaryOp::PRelu => "PRelu",
        }
    }

    fn attrs(self) -> String {
        match self {
            BinaryOp::Mod { fmod } => format!("fmod={}", fmod as u8),
            _ => String::new(),
        }
    }
}

/// What a [`UnaryOp::Cast`] rounds its input to. Casts to float32/float64
/// import as [`Op::Identity`] (values are f32 already).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CastTarget {
    /// The nearest float16 (ties to even), as f32.
    F16,
    /// The nearest bfloat16 (ties to even), as f32.
    BF16,
    /// Truncation toward zero (any integer type; no wrapping or saturation).
    Int,
    /// `x != 0` as 1.0 / 0.0 (NaN is true).
    Bool,
}

/// Elementwise unary operators. Parameters are the ONNX attributes of the
/// same name.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum UnaryOp {
    Relu,
    Sigmoid,
    Clip {
        min: f32,
        max: f32,
    },
    Erf,
    Tanh,
    Exp,
    Log,
    Sqrt,
    Reciprocal,
    Neg,
    Abs,
    Floor,
    Ceil,
    Sin,
    Cos,
    /// -1, 0 or 1 (NaN stays NaN).
    Sign,
    /// Logical not: 1.0 where `x == 0`, else 0.0.
    Not,
    /// `x · max(0, min(1, x/6 + 1/2))`.
    HardSwish,
    /// `max(0, min(1, alpha·x + beta))`.
    HardSigmoid {
        alpha: f32,
        beta: f32,
    },
    /// `ln(1 + e^x)`.
    Softplus,
    /// `x / (1 + |x|)`.
    Softsign,
    /// `x · tanh(softplus(x))`.
    Mish,
    /// `x < 0 ? alpha·(e^x − 1) : x`.
    Elu {
        alpha: f32,
    },
    /// `gamma · (x ≤ 0 ? alpha·(e^x − 1) : x)`.
    Selu {
        alpha: f32,
        gamma: f32,
    },
    /// `x < 0 ? alpha·x : x`.
    LeakyRelu {
        alpha: f32,
    },
    /// `x/2 · (1 + erf(x/√2))`, or with `tanh` the approximation
    /// `x/2 · (1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
    Gelu {
        tanh: bool,
    },
    Cast(CastTarget),
}

impl UnaryOp {
    pub fn apply(self, x: f32) -> f32 {
        crate::reference::math::unary(self, x)
    }

    /// The op's name, as [`Op::kind`] gives it.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Relu => "Relu",
            UnaryOp::Sigmoid => "Sigmoid",
            UnaryOp::Clip { .. } => "Clip",
            UnaryOp::Erf => "Erf",
            UnaryOp::Tanh => "Tanh",
            UnaryOp::Exp => "Exp",
            UnaryOp::Log => "Log",
            UnaryOp::Sqrt => "Sqrt",
            UnaryOp::Reciprocal => "Reciprocal",
            UnaryOp::Neg => "Neg",
            UnaryOp::Abs => "Abs",
            UnaryOp::Floor => "Floor",
            UnaryOp::Ceil => "Ceil",
            UnaryOp::Sin => "Sin",
            UnaryOp::Cos => "Cos",
            UnaryOp::Sign => "Sign",
            UnaryOp::Not => "Not",
            UnaryOp::HardSwish => "HardSwish",
            UnaryOp::HardSigmoid { .. } => "HardSigmoid",
            UnaryOp::Softplus => "Softplus",
            UnaryOp::Softsign => "Softsign",
            UnaryOp::Mish => "Mish",
            UnaryOp::Elu { .. } => "Elu",
            UnaryOp::Selu { .. } => "Selu",
            UnaryOp::LeakyRelu { .. } => "LeakyRelu",
            UnaryOp::Gelu { .. } => "Gelu",
            UnaryOp::Cast(_) => "Cast",
        }
    }

    fn attrs(self) -> String {
        match self {
            UnaryOp::Clip { min, max } => format!("min={min} max={max}"),
            UnaryOp::HardSigmoid { alpha, beta } => format!("alpha={alpha} beta={beta}"),
            UnaryOp::Elu { alpha } | UnaryOp::LeakyRelu { alpha } => format!("alpha={alpha}"),
            UnaryOp::Selu { alpha, gamma } => format!("alpha={alpha} gamma={gamma}"),
            UnaryOp::Gelu { tanh } => format!("approximate={}", if tanh { "tanh" } else { "none" }),
            UnaryOp::Cast(to) => format!("to={to:?}"),
            _ => String::new(),
        }
    }
}

/// How [`Op::ScatterNd`] combines an update with the element it lands on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ScatterReduction {
    /// The update replaces the element.
    None,
    Add,
    Mul,
    Max,
    Min,
}

impl ScatterReduction {
    /// The element after `update` lands on `old`.
    pub fn apply(self, old: f32, update: f32) -> f32 {
        match self {
            ScatterReduction::None => update,
            ScatterReduction::Add => old + update,
            ScatterReduction::Mul => old * update,
            ScatterReduction::Max => old.max(update),
            ScatterReduction::Min => old.min(update),
        }
    }
}

/// What an [`Op::Reduce`] computes over its axes (the mean is
/// [`Op::ReduceMean`], which passes and codegen know).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReduceKind {
    Sum,
    Max,
    Min,
    Prod,
    /// `Σ |x|`.
    L1,
    /// `sqrt(Σ x²)`.
    L2,
    /// `Σ x²`.
    SumSquare,
    /// `log(Σ x)`.
    LogSum,
    /// `log(Σ exp(x))`, computed as `max + log(Σ exp(x − max))`.
    LogSumExp,
}

impl ReduceKind {
    /// The ONNX op name (`ReduceSum`, …).
    pub fn onnx_name(self) -> &'static str {
        match self {
            ReduceKind::Sum => "ReduceSum",
            ReduceKind::Max => "ReduceMax",
            ReduceKind::Min => "ReduceMin",
            ReduceKind::Prod => "ReduceProd",
            ReduceKind::L1 => "ReduceL1",
            ReduceKind::L2 => "ReduceL2",
            ReduceKind::SumSquare => "ReduceSumSquare",
            ReduceKind::LogSum => "ReduceLogSum",
            ReduceKind::LogSumExp => "ReduceLogSumExp",
        }
    }
}

/// One operator of the IR. Inputs are listed in ONNX order; the comment on
/// each variant gives them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Op {
    /// Inputs: x [N,C,H,W], w [K,C/g,R,S], optional bias [K].
    Conv(Conv2d),
    /// Inputs: x, scale, bias, mean, var (each [C]).
    BatchNorm {
        epsilon: f32,
    },
    Unary(UnaryOp),
    /// Inputs: a, b (broadcast).
    Binary(BinaryOp),
    /// Inputs: condition, x, y (broadcast): `condition != 0 ? x : y`.
    Where,
    /// Inputs: one or more tensors, broadcast and summed.
    Sum,
    MaxPool(Pool2d),
    AveragePool {
        pool: Pool2d,
        count_include_pad: bool,
    },
    GlobalAveragePool,
    GlobalMaxPool,
    /// Mean over `axes` (sorted, non-negative).
    ReduceMean {
        axes: Vec<usize>,
        keepdims: bool,
    },
    Flatten {
        axis: usize,
    },
    /// Target shape as given in ONNX (0 copies the input dim unless `allowzero`, -1 infers).
    Reshape {
        shape: Vec<i64>,
        allowzero: bool,
    },
    /// Inputs: a, b, optional c. `y = alpha * op(a) * op(b) + beta * c`.
    Gemm {
        alpha: f32,
        beta: f32,
        trans_a: bool,
        trans_b: bool,
    },
    /// Inputs: a, b with numpy matmul semantics (1-D promotion, batch broadcast).
    MatMul,
    Identity,
    Concat {
        axis: usize,
    },
    Softmax {
        axis: usize,
    },
    // Data movement (`ops/transpose.rs` … `ops/resize.rs`): one input each.
    /// Output axis `i` is input axis `perm[i]` (a permutation of the axes).
    Transpose {
        perm: Vec<usize>,
    },
    /// ONNX Slice with one `(start, end, step)` per input axis, read as ONNX
    /// reads them: negative starts and ends count from the end, out-of-range
    /// ones clamp, a negative step walks backwards
    /// ([`crate::ops::slice::axis_range`]). Split imports as one per output.
    Slice {
        starts: Vec<i64>,
        ends: Vec<i64>,
        steps: Vec<i64>,
    },
    /// The input indexed along `axis` by constant `indices` (shape
    /// `indices_shape`, row-major; negative ones count from the end): the
    /// output shape is `x[..axis] ++ indices_shape ++ x[axis + 1..]`.
    Gather {
        axis: usize,
        indices: Vec<i64>,
        indices_shape: Vec<usize>,
    },
    /// ONNX GatherND (`batch_dims` 0): the slices of the input addressed
    /// by the constant index tuples (`indices`, shape `indices_shape`, the
    /// last axis one tuple); output `indices_shape[..-1] ++ x[k..]`.
    GatherNd {
        indices: Vec<i64>,
        indices_shape: Vec<usize>,
    },
    /// ONNX ScatterND: a copy of input 0 whose slices addressed by the
    /// constant `indices` (shape `indices_shape`, the last axis one index
    /// tuple) are replaced by, or reduced with, the rows of input 1.
    ScatterNd {
        indices: Vec<i64>,
        indices_shape: Vec<usize>,
        reduction: ScatterReduction,
    },
    /// The input broadcast (numpy rules) to `shape`, the output shape.
    Expand {
        shape: Vec<usize>,
    },
    /// The input repeated `repeats[i]` times along axis `i`.
    Tile {
        repeats: Vec<usize>,
    },
    /// `pads[i] = (before, after)` elements added on axis `i`, filled as
    /// `mode` says.
    Pad {
        pads: Vec<(usize, usize)>,
        mode: PadMode,
    },
    /// The input resampled to `sizes` ([`Resize`]).
    Resize(Resize),
    // Normalizations, reductions and Einsum (`ops::{reduce, softmax,
    // layer_norm, group_norm, lp_norm, einsum}`).
    /// A reduction over `axes` (sorted, non-negative), keeping them as 1s
    /// with `keepdims`.
    Reduce {
        kind: ReduceKind,
        axes: Vec<usize>,
        keepdims: bool,
    },
    /// `log(softmax(x))` along `axis`, each slice on its own.
    LogSoftmax {
        axis: usize,
    },
    /// 1 at the first maximum of each slice along `axis`, 0 elsewhere.
    Hardmax {
        axis: usize,
    },
    /// Inputs: x, scale, [bias]; scale and bias broadcast to
    /// `x.shape[axis..]`. Each `x[i, ..]` over the axes `axis..` is
    /// normalized by its mean and variance (+ `epsilon`), then scaled and
    /// shifted.
    LayerNorm {
        axis: usize,
        epsilon: f32,
    },
    /// Inputs: x [N, C, ...], scale, bias, each `[C]` (per channel) or
    /// `[groups]` (per group). The channels split into `groups` groups;
    /// each group of each image is normalized over its channels and
    /// spatial positions. InstanceNormalization is `groups = C`.
    GroupNorm {
        groups: usize,
        epsilon: f32,
    },
    /// Each slice along `axis` divided by its L`p` norm (`p` is 1 or 2).
    LpNorm {
        axis: usize,
        p: u8,
    },
    /// `(x − mean) / sqrt(var + 1e-9)` with mean and variance over `axes`.
    MeanVarianceNorm {
        axes: Vec<usize>,
    },
    /// Inputs: one per operand. `equation` is explicit (`->` and the output
    /// labels), without spaces or ellipses (the importer expands them into
    /// labels).
    Einsum {
        equation: String,
    },
    /// Convolution with a fused epilogue. Inputs: x, w, [bias], [residual],
    /// [shortcut input] ([`Shortcut`]), [γ, β] (with `norm`). Layouts and
    /// dtypes are those of the input and output values. With `pool` the
    /// output is the global pool of the convolution's ([`GlobalPool`]);
    /// with `norm` each output pixel is normalized over its channels
    /// ([`ChannelNorm`]; then there is no residual, shortcut or pool, and
    /// the activation is none).
    FusedConv {
        conv: Conv2d,
        epilogue: Epilogue,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shortcut: Option<Shortcut>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pool: Option<GlobalPool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        norm: Option<ChannelNorm>,
    },
    /// `y[M,N] = act(x[M,K] · w[N,K]ᵀ + bias + residual)`. Inputs: x, w,
    /// [bias], [residual], [s] (with `norm`). With `norm` the rows of x are
    /// layer-normalized first ([`RowNorm`]; then the bias is present and
    /// the `[N]` f32 constant s is the last input).
    Dense {
        epilogue: Epilogue,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        norm: Option<RowNorm>,
    },
    /// Copies its input to its output, converting layout and dtype between the
    /// two values' declared ones (shapes are equal).
    Convert,
    /// A [`Op::Convert`] of a 4-D value that also pads the channel axis (1)
    /// with zeros up to `channels`: `[N, C, H, W]` becomes `[N, channels, H, W]`.
    /// A convolution over few input channels (an RGB stem) then reads
    /// 16-byte channel vectors; its weight carries matching zero channels.
    PadChannels {
        channels: usize,
    },
    /// A [`Op::Convert`] of a 4-D image `x [N, C, H, W]` that also
    /// rearranges it, with `b = block`, into `y [N, channels, height,
    /// width]`:
    ///
    /// `y[n, (bh·b + bw)·C + c, i, j] = x[n, c, b·i + bh − pad_top, b·j + bw − pad_left]`
    ///
    /// for `bh, bw < b`, zero where the source position lies outside the
    /// image (above/left of it by the pads, or beyond its bottom/right
    /// edge), and zero in channels `b²·C..channels`. A stride-`b`
    /// convolution over `x` is a stride-1 convolution with a
    /// `ceil(R/b) × ceil(S/b)` kernel over `y`
    /// ([`crate::passes::space_to_depth_input`]).
    SpaceToDepth {
        /// The spatial block folded into channels (the convolution's stride).
        block: usize,
        /// Zero rows above the image.
        pad_top: usize,
        /// Zero columns left of the image.
        pad_left: usize,
        /// Output channels, at least `block² · C`; the rest are zero.
        channels: usize,
        /// Output height.
        height: usize,
        /// Output width.
        width: usize,
    },
    /// Scaled dot-product attention, heads already split: inputs q `[B, H,
    /// Sq, D]`, k `[B, Hkv, Skv, D]`, v `[B, Hkv, Skv, Dv]` and an optional
    /// additive mask `[G, Hm, Sqm, Skvm]` (rank ≤ 4, aligned at the right):
    /// broadcast to `[B, H, Sq, Skv]` along heads, queries and keys (each
    /// 1 or full), while along the batch `G` divides `B` and batch `b`
    /// reads mask batch `b mod G` (`G` = 1 or `B` is numpy broadcasting;
    /// Swin's shifted windows are `B` = images · windows with a mask per
    /// window, `G` = windows; `ops::attention::mask_4d`). `H` a multiple of
    /// `Hkv` (query head `h` reads key/value head `h / (H / Hkv)`). Output
    /// `[B, H, Sq, Dv]` = softmax(q·kᵀ·scale + mask, last axis)·v, with
    /// positions after the query's own masked out when `causal`. 3-D inputs
    /// `[N, S, D]` (heads merged into the leading axis) read as `[1, N, S,
    /// D]`. With `views`, an operand with a view is read from (the output
    /// written into) its value through that strided view instead: q, k, v
    /// straight out of a fused projection, the output with its heads
    /// interleaved for the next projection (`passes::attention_views`).
    Attention {
        scale: f32,
        causal: bool,
        views: Option<Box<AttentionViews>>,
    },
}

impl Op {
    /// Short kind name used in printing, task keys and errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Op::Conv(_) => "Conv",
            Op::BatchNorm { .. } => "BatchNormalization",
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Where => "Where",
            Op::Sum => "Sum",
            Op::MaxPool(_) => "MaxPool",
            Op::AveragePool { .. } => "AveragePool",
            Op::GlobalAveragePool => "GlobalAveragePool",
            Op::GlobalMaxPool => "GlobalMaxPool",
            Op::ReduceMean { .. } => "ReduceMean",
            Op::Flatten { .. } => "Flatten",
            Op::Reshape { .. } => "Reshape",
            Op::Gemm { .. } => "Gemm",
            Op::MatMul => "MatMul",
            Op::Identity => "Identity",
            Op::Concat { .. } => "Concat",
            Op::Softmax { .. } => "Softmax",
            Op::Transpose { .. } => "Transpose",
            Op::Slice { .. } => "Slice",
            Op::Gather { .. } => "Gather",
            Op::ScatterNd { .. } => "ScatterND",
            Op::GatherNd { .. } => "GatherND",
            Op::Expand { .. } => "Expand",
            Op::Tile { .. } => "Tile",
            Op::Pad { .. } => "Pad",
            Op::Resize(_) => "Resize",
            Op::Reduce { kind, .. } => kind.onnx_name(),
            Op::LogSoftmax { .. } => "LogSoftmax",
            Op::Hardmax { .. } => "Hardmax",
            Op::LayerNorm { .. } => "LayerNormalization",
            Op::GroupNorm { .. } => "GroupNormalization",
            Op::LpNorm { .. } => "LpNormalization",
            Op::MeanVarianceNorm { .. } => "MeanVarianceNormalization",
            Op::Einsum { .. } => "Einsum",
            Op::FusedConv { .. } => "FusedConv",
            Op::Dense { .. } => "Dense",
            Op::Convert => "Convert",
            Op::PadChannels { .. } => "PadChannels",
            Op::SpaceToDepth { .. } => "SpaceToDepth",
            Op::Attention { .. } => "Attention",
        }
    }

    /// True for ops that only reinterpret their input's bytes (no kernel needed
    /// when the input is row-major): the memory plan may alias them.
    pub fn is_view(&self) -> bool {
        matches!(self, Op::Flatten { .. } | Op::Reshape { .. } | Op::Identity)
    }

    /// Attributes in a stable, human-readable form (used by the printer and task keys).
    pub fn attrs(&self) -> String {
        fn conv(c: &Conv2d) -> String {
            format!(
                "k={}x{} s={}x{} p={},{},{},{} d={}x{} g={}",
                c.kernel[0],
                c.kernel[1],
                c.strides[0],
                c.strides[1],
                c.pads[0],
                c.pads[1],
                c.pads[2],
                c.pads[3],
                c.dilations[0],
                c.dilations[1],
                c.groups
            )
        }
        fn pool(p: &Pool2d) -> String {
            format!(
                "k={}x{} s={}x{} p={},{},{},{} d={}x{}{}",
                p.kernel[0],
                p.kernel[1],
                p.strides[0],
                p.strides[1],
                p.pads[0],
                p.pads[1],
                p.pads[2],
                p.pads[3],
                p.dilations[0],
                p.dilations[1],
                if p.ceil_mode { " ceil" } else { "" }
            )
        }
        match self {
            Op::Conv(c) => conv(c),
            Op::FusedConv {
                conv: c,
                epilogue,
                shortcut,
                pool,
                norm,
            } => {
                // Tuning logs key tasks by this text: a norm only appends
                // to it, so a conv without one keeps its key.
                let epilogue = match norm {
                    None => epilogue.to_string(),
                    Some(n) if *epilogue == Epilogue::NONE => n.to_string(),
                    Some(n) => format!("{epilogue}+{n}"),
                };
                let mut s = format!("{} epilogue={epilogue}", conv(c));
                if let Some(sc) = shortcut {
                    s += &format!(" shortcut={sc}");
                }
                if let Some(p) = pool {
                    s += &format!(" pool={p}");
                }
                s
            }
            Op::BatchNorm { epsilon } => format!("eps={epsilon:e}"),
            Op::Unary(u) => u.attrs(),
            Op::Binary(b) => b.attrs(),
            Op::Sum | Op::MatMul | Op::Identity | Op::Convert | Op::Where => String::new(),
            Op::GlobalAveragePool | Op::GlobalMaxPool => String::new(),
            Op::MaxPool(p) => pool(p),
            Op::AveragePool {
                pool: p,
                count_include_pad,
            } => format!(
                "{}{}",
                pool(p),
                if *count_include_pad {
                    " count_include_pad"
                } else {
                    ""
                }
            ),
            Op::ReduceMean { axes, keepdims } => format!("axes={axes:?} keepdims={keepdims}"),
            Op::Flatten { axis } => format!("axis={axis}"),
            Op::Reshape { shape, allowzero } => {
                format!(
                    "shape={shape:?}{}",
                    if *allowzero { " allowzero" } else { "" }
                )
            }
            Op::Gemm {
                alpha,
                beta,
                trans_a,
                trans_b,
            } => format!("alpha={alpha} beta={beta} transA={trans_a} transB={trans_b}"),
            Op::Concat { axis } => format!("axis={axis}"),
            Op::Softmax { axis } => format!("axis={axis}"),
            Op::Attention {
                scale,
                causal,
                views,
            } => {
                let mut s = format!("scale={scale}{}", if *causal { " causal" } else { "" });
                if let Some(v) = views {
                    s.push(' ');
                    s.push_str(&v.describe());
                }
                s
            }
            Op::Transpose { perm } => format!("perm={perm:?}"),
            Op::Slice {
                starts,
                ends,
                steps,
            } => format!("starts={starts:?} ends={ends:?} steps={steps:?}"),
            Op::Gather {
                axis,
                indices,
                indices_shape,
            } => format!("axis={axis} indices={indices:?} shape={indices_shape:?}"),
            Op::GatherNd {
                indices,
                indices_shape,
            } => format!("indices={indices:?} shape={indices_shape:?}"),
            Op::ScatterNd {
                indices,
                indices_shape,
                reduction,
            } => format!("indices={indices:?} shape={indices_shape:?} reduction={reduction:?}"),
            Op::Expand { shape } => format!("shape={shape:?}"),
            Op::Tile { repeats } => format!("repeats={repeats:?}"),
            Op::Pad { pads, mode } => format!("pads={pads:?} mode={mode}"),
            Op::Resize(resize) => resize.to_string(),
            Op::Reduce { axes, keepdims, .. } => format!("axes={axes:?} keepdims={keepdims}"),
            Op::LogSoftmax { axis } | Op::Hardmax { axis } => format!("axis={axis}"),
            Op::LayerNorm { axis, epsilon } => format!("axis={axis} eps={epsilon:e}"),
            Op::GroupNorm { groups, epsilon } => format!("groups={groups} eps={epsilon:e}"),
            Op::LpNorm { axis, p } => format!("axis={axis} p={p}"),
            Op::MeanVarianceNorm { axes } => format!("axes={axes:?}"),
            Op::Einsum { equation } => format!("equation={equation}"),
            Op::Dense {
                epilogue,
                norm: None,
            } => format!("epilogue={epilogue}"),
            Op::Dense {
                epilogue,
                norm: Some(norm),
            } => format!("epilogue={epilogue} norm={norm}"),
            Op::PadChannels { channels } => format!("channels={channels}"),
            Op::SpaceToDepth {
                block,
                pad_top,
                pad_left,
                channels,
                height,
                width,
            } => format!(
                "block={block} pad={pad_top},{pad_left} channels={channels} out={height}x{width}"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resnet_stem_output_size() {
        let stem = Conv2d {
            kernel: [7, 7],
            strides: [2, 2],
            pads: [3, 3, 3, 3],
            dilations: [1, 1],
            groups: 1,
        };
        assert_eq!(stem.output_hw(224, 224), Some([112, 112]));
    }

    #[test]
    fn pool_ceil_mode_drops_window_starting_in_padding() {
        // ONNX test_maxpool_2d_ceil_output_size_reduce_by_one: 2x2 input,
        // kernel 1, stride 2, ceil → 1x1.
        let p = Pool2d {
            kernel: [1, 1],
            strides: [2, 2],
            pads: [0; 4],
            dilations: [1, 1],
            ceil_mode: true,
        };
        assert_eq!(p.output_hw(2, 2), Some([1, 1]));
        let q = Pool2d {
            kernel: [3, 3],
            strides: [2, 2],
            pads: [0; 4],
            dilations: [1, 1],
            ceil_mode: true,
        };
        assert_eq!(q.output_hw(4, 4), Some([2, 2]));
    }

    /// GELU epilogues compute what the Gelu op does, print as task keys
    /// show them, and keep the variant through serde.
    #[test]
    fn gelu_activation_is_the_gelu_op() {
        for tanh in [false, true] {
            let act = Activation::Gelu { tanh };
            assert_eq!(Activation::of_unary(UnaryOp::Gelu { tanh }), Some(act));
            for x in [-3.0f32, -0.5, 0.0, 0.25, 1.0, 7.5] {
                assert_eq!(act.apply(x), UnaryOp::Gelu { tanh }.apply(x));
            }
            let json = serde_json::to_string(&act).unwrap();
            assert_eq!(serde_json::from_str::<Activation>(&json).unwrap(), act);
        }
        // GELU(1) = 0.8413447460685429; the tanh form 0.8411919906082768.
        assert_eq!(Activation::Gelu { tanh: false }.apply(1.0), 0.841_344_8);
        assert_eq!(Activation::Gelu { tanh: true }.apply(1.0), 0.841_192);
        let e = Epilogue {
            bias: true,
            residual: true,
            activation: Activation::Gelu { tanh: true },
        };
        assert_eq!(e.to_string(), "bias+residual+gelu_tanh");
        let plain = Activation::Gelu { tanh: false };
        assert_eq!(plain.to_string(), "gelu");
        assert_ne!(plain, Activation::Gelu { tanh: true });
        assert_eq!(Activation::of_unary(UnaryOp::Sigmoid), None);
    }

    #[test]
    fn kernel_larger_than_input_has_no_output() {
        let c = Conv2d {
            kernel: [5, 5],
            strides: [1, 1],
            pads: [0; 4],
            dilations: [1, 1],
            groups: 1,
        };
        assert_eq!(c.output_hw(3, 3), None);
    }
}
