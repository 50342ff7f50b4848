//! Elementwise kernels (`elementwise.cu`): `Convert` (layout and dtype),
//! copies for views the memory plan could not alias, `Unary`, `Binary`,
//! `Sum`, `BatchNorm` and `Concat`.
//!
//! Every instantiation iterates over the output's physical elements; the
//! rendered `src(i, j)` maps output element `j` to input `i`'s physical
//! offset ([`super::index_map`]), and where all maps are the identity a
//! thread moves V elements (16 bytes) at once.

use super::config::{LinearConfig, LinearShape};
use super::index_map::{
    broadcast_is_identity, broadcast_src, channel_of, moves_in_vectors, reshape_is_identity,
    reshape_src,
};
use super::reduce::finish;
use super::source::{Arg, Instance, Params, Template};
use crate::ir::{
    is_row_major_bytes, BinaryOp, CastTarget, DType, Graph, Layout, NodeId, Op, UnaryOp,
};
use std::fmt::Write;

/// One operand of an elementwise op.
#[derive(Debug, Clone, PartialEq)]
pub struct Operand {
    pub shape: Vec<usize>,
    pub layout: Layout,
    pub dtype: DType,
}

/// What an elementwise node computes.
#[derive(Debug, Clone, PartialEq)]
pub enum EltKind {
    /// Convert or an unaliased view: same logical order, new layout/dtype/shape.
    Copy {
        view: bool,
    },
    Unary(UnaryOp),
    Binary(BinaryOp),
    Sum,
    BatchNorm {
        epsilon: f32,
    },
    Concat {
        axis: usize,
    },
}

/// An elementwise workload: its kind, inputs and output.
#[derive(Debug, Clone, PartialEq)]
pub struct EltShape {
    pub kind: EltKind,
    pub inputs: Vec<Operand>,
    pub output: Operand,
}

impl EltShape {
    pub fn total(&self) -> usize {
        self.output.shape.iter().product()
    }

    /// Elements per thread: up to 16 bytes where every map is the identity
    /// (copies and unary ops), where each input of a Binary reads its
    /// output's innermost axis unbroadcast ([`moves_in_vectors`]), and
    /// where a Concat's inner block holds whole vectors.
    pub fn vector(&self) -> usize {
        let x = &self.inputs[0];
        let out = &self.output;
        let fits = |v: usize| -> bool {
            match self.kind {
                EltKind::Copy { .. } => {
                    reshape_is_identity(&out.shape, out.layout, &x.shape, x.layout)
                }
                EltKind::Unary(_) => {
                    broadcast_is_identity(&out.shape, out.layout, &x.shape, x.layout)
                }
                EltKind::Binary(_) => self
                    .inputs
                    .iter()
                    .all(|x| moves_in_vectors(&out.shape, out.layout, &x.shape, x.layout, v)),
                EltKind::Concat { axis } => {
                    let inner: usize = out.shape[axis + 1..].iter().product();
                    inner > 1 && inner % v == 0
                }
                EltKind::Sum | EltKind::BatchNorm { .. } => false,
            }
        };
        let sizes: Vec<usize> = self
            .inputs
            .iter()
            .chain([out])
            .map(|o| o.dtype.size())
            .collect();
        let (copy_like, elem) = match self.kind {
            EltKind::Copy { .. } | EltKind::Unary(_) => {
                (true, x.dtype.size().max(out.dtype.size()))
            }
            _ => (false, sizes.iter().copied().max().unwrap_or(1)),
        };
        [8usize, 4, 2]
            .into_iter()
            .find(|&v| {
                // A vector access is 4, 8 or 16 bytes of every operand.
                let accesses = copy_like || sizes.iter().all(|s| [4, 8, 16].contains(&(v * s)));
                v * elem <= 16 && accesses && self.total() % v == 0 && fits(v)
            })
            .unwrap_or(1)
    }

    pub fn items(&self) -> LinearShape {
        LinearShape {
            items: (self.total() / self.vector()) as u64,
        }
    }

    /// Body of `int src(int i, int j)`.
    fn src(&self) -> String {
        let out = &self.output;
        let map = |x: &Operand| match self.kind {
            EltKind::Copy { .. } => reshape_src(&out.shape, out.layout, &x.shape, x.layout),
            _ => broadcast_src(&out.shape, out.layout, &x.shape, x.layout),
        };
        let mapped: Vec<&Operand> = match self.kind {
            EltKind::BatchNorm { .. } => self.inputs.iter().take(1).collect(),
            EltKind::Concat { .. } => Vec::new(),
            _ => self.inputs.iter().collect(),
        };
        match mapped.as_slice() {
            [] => "(void)i; return j;".to_string(),
            [x] => format!("(void)i; {}", map(x)),
            many => {
                let mut s = "switch (i) { ".to_string();
                for (i, x) in many.iter().enumerate() {
                    let _ = write!(s, "case {i}: {{ {} }} ", map(x));
                }
                s.push_str("default: return 0; }");
                s
            }
        }
    }
}

fn operand(graph: &Graph, v: crate::ir::ValueId) -> Operand {
    let value = graph.value(v);
    Operand {
        shape: value.shape.clone(),
        layout: value.layout,
        dtype: value.dtype,
    }
}

/// The [`EltShape`] of an elementwise node.
pub fn elt_shape(graph: &Graph, node: NodeId) -> Result<EltShape, String> {
    let n = graph.node(node);
    let kind = match &n.op {
        Op::Convert => EltKind::Copy { view: false },
        Op::Flatten { .. } | Op::Reshape { .. } | Op::Identity => EltKind::Copy { view: true },
        Op::Unary(u) => EltKind::Unary(*u),
        Op::Binary(b) => EltKind::Binary(*b),
        Op::Sum => EltKind::Sum,
        Op::BatchNorm { epsilon } => EltKind::BatchNorm { epsilon: *epsilon },
        Op::Concat { axis } => EltKind::Concat { axis: *axis },
        other => return Err(format!("{} is not elementwise", other.kind())),
    };
    let shape = EltShape {
        kind,
        inputs: n.inputs.iter().map(|&v| operand(graph, v)).collect(),
        output: operand(graph, n.output),
    };
    if shape.inputs.is_empty() {
        return Err("no inputs".into());
    }
    if let EltKind::Concat { .. } = shape.kind {
        for v in shape.inputs.iter().chain([&shape.output]) {
            if !is_row_major_bytes(&v.shape, v.layout) {
                return Err("Concat needs row-major values".into());
            }
        }
    }
    if let EltKind::BatchNorm { .. } = shape.kind {
        if shape.inputs.len() != 5 {
            return Err("BatchNormalization needs 5 inputs".into());
        }
    }
    Ok(shape)
}

pub fn instantiate(shape: &EltShape, config: &LinearConfig, symbol: &str) -> Instance {
    let mut p = Params::new(format!("{symbol}_p"));
    let out = &shape.output;
    p.ty("TOut", out.dtype)
        .int("TOTAL", shape.total() as i64)
        .int("V", shape.vector() as i64);
    let names: Vec<String> = (0..shape.inputs.len()).map(|i| format!("x{i}")).collect();
    let mut args: Vec<Arg> = shape
        .inputs
        .iter()
        .zip(&names)
        .map(|(x, name)| Arg::input(name.clone(), x.dtype))
        .collect();
    args.push(Arg::output("y", out.dtype));
    let pname = p.name().to_string();
    let all = names.join(", ");
    let call = match &shape.kind {
        EltKind::Copy { .. } => {
            p.ty("TIn", shape.inputs[0].dtype);
            format!("aotune::convert<{pname}>(x0, y)")
        }
        EltKind::Unary(op) => {
            let (code, lo, hi) = unary_code(*op);
            p.ty("TIn", shape.inputs[0].dtype)
                .int("OP", code)
                .float("LO", lo)
                .float("HI", hi);
            format!("aotune::unary<{pname}>(x0, y)")
        }
        EltKind::Binary(op) => {
            let code = binary_code(*op);
            p.ty("TA", shape.inputs[0].dtype)
                .ty("TB", shape.inputs[1].dtype)
                .int("OP", code);
            format!("aotune::binary<{pname}>(x0, x1, y)")
        }
        EltKind::Sum => format!("aotune::sum_n<{pname}>(y, {all})"),
        EltKind::BatchNorm { epsilon } => {
            p.ty("TIn", shape.inputs[0].dtype)
                .ty("TScale", shape.inputs[1].dtype)
                .ty("TShift", shape.inputs[2].dtype)
                .ty("TMean", shape.inputs[3].dtype)
                .ty("TVar", shape.inputs[4].dtype)
                .float("EPSILON", *epsilon)
                .func("int channel(int j)", &channel_of(&out.shape, out.layout));
            format!("aotune::batch_norm<{pname}>(x0, x1, x2, x3, x4, y)")
        }
        EltKind::Concat { axis } => {
            let axis = *axis;
            let inner: usize = out.shape[axis + 1..].iter().product();
            let mut start = String::from("switch (i) { ");
            let mut len = String::from("switch (i) { ");
            let mut at = 0;
            for (i, x) in shape.inputs.iter().enumerate() {
                let _ = write!(start, "case {i}: return {at}; ");
                let _ = write!(len, "case {i}: return {}; ", x.shape[axis]);
                at += x.shape[axis];
            }
            start.push_str("default: return 0; }");
            len.push_str("default: return 0; }");
            p.ints(&[("AXIS", out.shape[axis] as i64), ("INNER", inner as i64)])
                .func("int start(int i)", &start)
                .func("int len(int i)", &len);
            format!("aotune::concat<{pname}>(y, {all})")
        }
    };
    p.func("int src(int i, int j)", &shape.src());
    finish(
        symbol,
        Template::Elementwise,
        config,
        &shape.items(),
        p,
        &args,
        &call,
    )
}

/// `unary_op<OP>`'s code for `op` in `elementwise.cu`, and the two
/// parameters it reads (`LO`, `HI`).
fn unary_code(op: UnaryOp) -> (i64, f32, f32) {
    match op {
        UnaryOp::Relu => (0, 0.0, 0.0),
        UnaryOp::Sigmoid => (1, 0.0, 0.0),
        UnaryOp::Clip { min, max } => (2, min, max),
        UnaryOp::Erf => (3, 0.0, 0.0),
        UnaryOp::Tanh => (4, 0.0, 0.0),
        UnaryOp::Exp => (5, 0.0, 0.0),
        UnaryOp::Log => (6, 0.0, 0.0),
        UnaryOp::Sqrt => (7, 0.0, 0.0),
        UnaryOp::Reciprocal => (8, 0.0, 0.0),
        UnaryOp::Neg => (9, 0.0, 0.0),
        UnaryOp::Abs => (10, 0.0, 0.0),
        UnaryOp::Floor => (11, 0.0, 0.0),
        UnaryOp::Ceil => (12, 0.0, 0.0),
        UnaryOp::Sin => (13, 0.0, 0.0),
        UnaryOp::Cos => (14, 0.0, 0.0),
        UnaryOp::Sign => (15, 0.0, 0.0),
        UnaryOp::Not => (16, 0.0, 0.0),
        UnaryOp::HardSwish => (17, 0.0, 0.0),
        UnaryOp::HardSigmoid { alpha, beta } => (18, alpha, beta),
        UnaryOp::Softplus => (19, 0.0, 0.0),
        UnaryOp::Softsign => (20, 0.0, 0.0),
        UnaryOp::Mish => (21, 0.0, 0.0),
        UnaryOp::Elu { alpha } => (22, alpha, 0.0),
        UnaryOp::Selu { alpha, gamma } => (23, alpha, gamma),
        UnaryOp::LeakyRelu { alpha } => (24, alpha, 0.0),
        UnaryOp::Gelu { tanh: false } => (25, 0.0, 0.0),
        UnaryOp::Gelu { tanh: true } => (26, 0.0, 0.0),
        UnaryOp::Cast(CastTarget::F16) => (27, 0.0, 0.0),
        UnaryOp::Cast(CastTarget::BF16) => (28, 0.0, 0.0),
        UnaryOp::Cast(CastTarget::Int) => (29, 0.0, 0.0),
        UnaryOp::Cast(CastTarget::Bool) => (30, 0.0, 0.0),
    }
}

/// `binary_op<OP>`'s code for `op` in `elementwise.cu`.
fn binary_code(op: BinaryOp) -> i64 {
    match op {
        BinaryOp::Add => 0,
        BinaryOp::Sub => 1,
        BinaryOp::Mul => 2,
        BinaryOp::Div => 3,
        BinaryOp::Pow => 4,
        BinaryOp::Max => 5,
        BinaryOp::Min => 6,
        BinaryOp::Mod { fmod: true } => 7,
        BinaryOp::Mod { fmod: false } => 8,
        BinaryOp::Equal => 9,
        BinaryOp::Less => 10,
        BinaryOp::LessOrEqual => 11,
        BinaryOp::Greater => 12,
        BinaryOp::GreaterOrEqual => 13,
        BinaryOp::And => 14,
        BinaryOp::Or => 15,
        BinaryOp::Xor => 16,
        BinaryOp::PRelu => 17,
    }
}

/// Symbol prefix of an elementwise kind.
pub fn prefix(kind: &EltKind) -> &'static str {
    match kind {
        EltKind::Copy { view: false } => "convert",
        EltKind::Copy { view: true } => "copy",
        EltKind::Unary(_) => "unary",
        EltKind::Binary(_) => "binary",
        EltKind::Sum => "sum",
        EltKind::BatchNorm { .. } => "batchnorm",
        EltKind::Concat { .. } => "concat",
    }
}
