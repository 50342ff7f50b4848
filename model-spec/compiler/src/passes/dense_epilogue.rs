//! The second half of [`super::lower_dense`]: each `Dense` takes over the
//! elementwise work that follows it through views, so that work costs no
//! extra pass over the activation.
//!
//! From each Dense's output the pass follows the chain of single readers
//! (a value read by one node and not a graph output), with one dtype and
//! layout throughout. Along it, `Reshape`/`Flatten` views (which keep the
//! row-major order, as the N-D Dense's own `[M,N] → [.., N]` view) and
//! `Transpose`s are *moves*: they stay as nodes. Elementwise nodes are
//! *absorbed* into the Dense, in graph order, while the epilogue contract
//! `y = act(x·wᵀ + bias + residual)` can express the result:
//!
//! - a `Mul` by a constant that, broadcast and carried back through the
//!   moves, is one value per output feature `n` (ConvNeXt's layer scale
//!   `gamma[C,1,1]` after its `[0,3,1,2]` Transpose) is folded into weight
//!   row `n` and `bias[n]` at build time (f64 products, rounded once to the
//!   weight's dtype, as `fold_batch_norm`); an `Add` of such a constant goes
//!   into the bias. Both need a constant bias and no activation yet (a
//!   scale or shift of `act(·)` is none of the weights); the scale also a
//!   constant weight and no residual yet (nor is a scale of the residual);
//! - an `Add`/`Sum` of another value of the same shape, dtype and layout
//!   becomes the residual when the epilogue has no activation yet. The
//!   residual is read in the Dense's `[M,N]` order: through a Reshape view
//!   where no Transpose lies between the Dense and the Add, and through the
//!   inverse of the moves where each Transpose among them is the NHWC →
//!   NCHW permute `[0, 3, 1, 2]` (ConvNeXt's block output): the inverse
//!   permute `[0, 2, 3, 1]` of a channels-last residual is a free view of
//!   its bytes once the layout pass has run (`ir::is_byte_view`);
//! - a `Relu`, `Clip` or `Gelu` becomes the activation, when there is none.
//!
//! The epilogue adds the residual *before* its activation, so of ViT's
//! `Gelu` then residual `Add` after one Dense only the Gelu is absorbed
//! (the transformer MLP's two Denses take one each: fc1 the GELU, fc2 the
//! residual). An ordering field on [`crate::ir::Epilogue`] would let one
//! Dense take both; no exported model has needed it.
//!
//! The rewrite keeps the moves up to the last absorbed node, rewired past
//! the absorbed ones: the last of them (or the Dense, without moves) writes
//! the last absorbed node's output value, so its readers and graph outputs
//! are untouched. The Dense stays where it is unless its residual is
//! computed after it; then it and its moves take the last absorbed node's
//! place (every input of the chain is computed before that node). Dense
//! nodes are visited last to first, and a node one Dense absorbed ends every
//! other Dense's chain, so where both operands of an Add come from Denses
//! the later Dense takes it and reads the other's output as its residual.

use super::Uses;
use crate::ir::{
    Activation, BinaryOp, Epilogue, Graph, Node, NodeId, Op, Patch, Value, ValueId, ValueKind,
};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// What [`absorb_epilogues`] absorbed, by kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Absorbed {
    pub activations: usize,
    pub residuals: usize,
    pub scales: usize,
    pub biases: usize,
}

/// Absorbs into every Dense the activation, residual Add and per-feature
/// scale or shift that follow it (see the module doc).
pub(super) fn absorb_epilogues(graph: &mut Graph) -> Absorbed {
    let uses = Uses::of(graph);
    let producers = graph.producers();
    let mut claimed = HashSet::new();
    let mut fusions = Vec::new();
    for id in graph.node_ids().rev() {
        if let Some(fusion) = plan(graph, &uses, &claimed, id) {
            claimed.extend(fusion.steps.iter().map(|s| s.node()));
            fusions.push(fusion);
        }
    }
    let mut patch = Patch::new(graph);
    let mut absorbed = Absorbed::default();
    for fusion in fusions {
        fusion.count(&mut absorbed);
        fusion.apply(graph, &producers, &mut patch);
    }
    patch.apply(graph);
    absorbed
}

/// A node after the Dense on its chain.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// A view or Transpose, kept as a node.
    Move(NodeId),
    /// An activation, Add or Mul the epilogue takes over; removed.
    Absorb(NodeId, Absorb),
}

#[derive(Debug, Clone, Copy)]
enum Absorb {
    Activation,
    Residual,
    Scale,
    Shift,
}

impl Step {
    fn node(self) -> NodeId {
        match self {
            Step::Move(id) | Step::Absorb(id, _) => id,
        }
    }
}

/// One Dense's rewrite: its new epilogue and the chain it absorbs.
struct Fusion {
    dense: NodeId,
    /// The Dense's epilogue before the fusion.
    before: Epilogue,
    /// Up to and including the last absorbed node.
    steps: Vec<Step>,
    epilogue: Epilogue,
    /// `y = scale[n]·(x·wᵀ)[n] + shift[n]` replaces the bias, per feature.
    affine: Option<Affine>,
    residual: Option<ValueId>,
    /// The moves between the Dense and the residual's Add, in order.
    residual_moves: Vec<NodeId>,
}

struct Affine {
    scale: Vec<f64>,
    shift: Vec<f64>,
}

impl Affine {
    /// The identity on top of the Dense's bias (zero without one).
    fn of(graph: &Graph, dense: &Node, epilogue: &Epilogue, n: usize) -> Option<Affine> {
        let shift = match epilogue.bias {
            true => {
                let data = graph.value(*dense.inputs.get(2)?).constant_data()?;
                (data.len() == n).then(|| data.iter().map(|&b| b as f64).collect())?
            }
            false => vec![0.0; n],
        };
        Some(Affine {
            scale: vec![1.0; n],
            shift,
        })
    }
}

/// What the walk does with the next node of a chain.
enum Next {
    Move,
    Absorb(Absorb),
    Stop,
}

/// The chain Dense `id` can absorb, if any. A Dense carrying a row norm
/// absorbs nothing (its column sums are its last input; the norm is folded
/// in after this pass runs).
fn plan(graph: &Graph, uses: &Uses, claimed: &HashSet<NodeId>, id: NodeId) -> Option<Fusion> {
    let dense = graph.node(id);
    let Op::Dense {
        epilogue,
        norm: None,
    } = dense.op
    else {
        return None;
    };
    let &[m, n] = graph.value(dense.output).shape.as_slice() else {
        return None;
    };
    let constant_weight = graph.value(*dense.inputs.get(1)?).is_constant();
    let mut fusion = Fusion {
        dense: id,
        before: epilogue,
        steps: Vec::new(),
        epilogue,
        affine: None,
        residual: None,
        residual_moves: Vec::new(),
    };
    // Per element of the chain's current value, the Dense output column it
    // holds (computed once a constant needs it, then kept up to date).
    let mut columns: Option<Vec<u32>> = None;
    // Some move is a Transpose whose inverse is not a free view.
    let mut transposed = false;
    let mut value = dense.output;
    while let Some(user) = uses.sole_user(value).filter(|u| !claimed.contains(u)) {
        let node = graph.node(user);
        let (x, y) = (graph.value(value), graph.value(node.output));
        let other = match node.inputs.as_slice() {
            [a, b] if *a == value && *b != value => Some(*b),
            [a, b] if *b == value && *a != value => Some(*a),
            _ => None,
        };
        let next = match (&node.op, other) {
            _ if x.dtype != y.dtype || x.layout != y.layout => Next::Stop,
            (op, None) if op.is_view() => Next::Move,
            (Op::Transpose { perm }, None) => match &columns {
                None => Next::Move,
                Some(c) => match permute(c, &x.shape, perm) {
                    Some(permuted) => {
                        columns = Some(permuted);
                        Next::Move
                    }
                    None => Next::Stop,
                },
            },
            (Op::Unary(unary), None) => match Activation::of_unary(*unary) {
                Some(a) if fusion.epilogue.activation == Activation::None => {
                    fusion.epilogue.activation = a;
                    Next::Absorb(Absorb::Activation)
                }
                _ => Next::Stop,
            },
            (Op::Binary(BinaryOp::Add) | Op::Sum, Some(other))
                if y.shape == x.shape && fusion.epilogue.activation == Activation::None =>
            {
                let operand = graph.value(other);
                if operand.is_constant() {
                    let c = columns.get_or_insert_with(|| chain_columns(graph, &fusion, m, n));
                    match per_feature(operand, &y.shape, c, n) {
                        Some(shift) => match fusion.affine_mut(graph, n) {
                            Some(affine) => {
                                affine
                                    .shift
                                    .iter_mut()
                                    .zip(shift)
                                    .for_each(|(b, c)| *b += c);
                                Next::Absorb(Absorb::Shift)
                            }
                            None => Next::Stop,
                        },
                        None => Next::Stop,
                    }
                } else if !fusion.epilogue.residual
                    && !transposed
                    && operand.shape == y.shape
                    && operand.dtype == y.dtype
                    && operand.layout == y.layout
                {
                    fusion.epilogue.residual = true;
                    fusion.residual = Some(other);
                    fusion.residual_moves = fusion
                        .steps
                        .iter()
                        .filter_map(|s| match *s {
                            Step::Move(id) => Some(id),
                            Step::Absorb(..) => None,
                        })
                        .collect();
                    Next::Absorb(Absorb::Residual)
                } else {
                    Next::Stop
                }
            }
            (Op::Binary(BinaryOp::Mul), Some(other))
                if y.shape == x.shape
                    && constant_weight
                    && fusion.epilogue.activation == Activation::None
                    && !fusion.epilogue.residual =>
            {
                let c = columns.get_or_insert_with(|| chain_columns(graph, &fusion, m, n));
                match per_feature(graph.value(other), &y.shape, c, n) {
                    Some(scale) => match fusion.affine_mut(graph, n) {
                        Some(affine) => {
                            let rows = affine.scale.iter_mut().zip(&mut affine.shift);
                            for ((a, b), s) in rows.zip(scale) {
                                *a *= s;
                                *b *= s;
                            }
                            Next::Absorb(Absorb::Scale)
                        }
                        None => Next::Stop,
                    },
                    None => Next::Stop,
                }
            }
            _ => Next::Stop,
        };
        match next {
            Next::Move => {
                transposed |= match &node.op {
                    Op::Transpose { perm } => perm != &[0, 3, 1, 2],
                    _ => false,
                };
                fusion.steps.push(Step::Move(user));
            }
            Next::Absorb(kind) => fusion.steps.push(Step::Absorb(user, kind)),
            Next::Stop => break,
        }
        value = node.output;
    }
    let last = fusion
        .steps
        .iter()
        .rposition(|s| matches!(s, Step::Absorb(..)))?;
    fusion.steps.truncate(last + 1);
    Some(fusion)
}

/// A Reshape to `shape`.
pub(super) fn reshape_to(shape: &[usize]) -> Op {
    Op::Reshape {
        shape: shape.iter().map(|&d| d as i64).collect(),
        allowzero: false,
    }
}

/// For each element of the chain's value after `fusion`'s moves so far, in
/// row-major order, the column of the Dense's `[m, n]` output it holds.
fn chain_columns(graph: &Graph, fusion: &Fusion, m: usize, n: usize) -> Vec<u32> {
    let mut columns: Vec<u32> = (0..m * n).map(|i| (i % n) as u32).collect();
    for step in &fusion.steps {
        let Step::Move(id) = *step else {
            continue;
        };
        let node = graph.node(id);
        if let Op::Transpose { perm } = &node.op {
            let shape = &graph.value(node.inputs[0]).shape;
            // A permutation the verifier would reject leaves no columns,
            // which no constant matches.
            columns = permute(&columns, shape, perm).unwrap_or_default();
        }
    }
    columns
}

/// `data` (row-major, of `shape`) transposed by `perm` (output axis `a` is
/// input axis `perm[a]`); `None` when `perm` is no permutation of the axes.
fn permute<T: Copy>(data: &[T], shape: &[usize], perm: &[usize]) -> Option<Vec<T>> {
    let rank = shape.len();
    let mut seen = vec![false; rank];
    for &p in perm {
        if p >= rank || std::mem::replace(&mut seen[p], true) {
            return None;
        }
    }
    if perm.len() != rank || data.len() != shape.iter().product::<usize>() {
        return None;
    }
    let mut strides = vec![1; rank];
    for a in (0..rank.saturating_sub(1)).rev() {
        strides[a] = strides[a + 1] * shape[a + 1];
    }
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    Some(
        (0..data.len())
            .map(|mut i| {
                let mut offset = 0;
                for a in (0..rank).rev() {
                    offset += (i % out_shape[a]) * strides[perm[a]];
                    i /= out_shape[a];
                }
                data[offset]
            })
            .collect(),
    )
}

/// The constant `c`, broadcast to `shape`, as one finite value per Dense
/// output column (`columns[i]` the column of element `i`), when it is one.
fn per_feature(c: &Value, shape: &[usize], columns: &[u32], n: usize) -> Option<Vec<f64>> {
    let data = c.constant_data()?;
    let total: usize = shape.iter().product();
    if c.shape.len() > shape.len() || columns.len() != total {
        return None;
    }
    let lead = shape.len() - c.shape.len();
    let mut strides = vec![0; shape.len()];
    let mut stride = 1;
    for a in (0..c.shape.len()).rev() {
        match (c.shape[a], shape[lead + a]) {
            (1, _) => {}
            (d, o) if d == o => strides[lead + a] = stride,
            _ => return None,
        }
        stride *= c.shape[a];
    }
    let mut per: Vec<Option<f32>> = vec![None; n];
    for (i, &column) in columns.iter().enumerate() {
        let (mut rest, mut offset) = (i, 0);
        for a in (0..shape.len()).rev() {
            offset += (rest % shape[a]) * strides[a];
            rest /= shape[a];
        }
        let v = *data.get(offset)?;
        let slot = per.get_mut(column as usize)?;
        match slot {
            _ if !v.is_finite() => return None,
            None => *slot = Some(v),
            Some(seen) if seen.to_bits() == v.to_bits() => {}
            Some(_) => return None,
        }
    }
    per.into_iter().map(|v| v.map(f64::from)).collect()
}

impl Fusion {
    /// The running per-feature scale and shift, started from the bias; `None`
    /// when the bias is not a constant of N values.
    fn affine_mut(&mut self, graph: &Graph, n: usize) -> Option<&mut Affine> {
        if self.affine.is_none() {
            let dense = graph.node(self.dense);
            self.affine = Some(Affine::of(graph, dense, &self.epilogue, n)?);
        }
        self.affine.as_mut()
    }

    fn count(&self, absorbed: &mut Absorbed) {
        for step in &self.steps {
            match step {
                Step::Move(_) => {}
                Step::Absorb(_, Absorb::Activation) => absorbed.activations += 1,
                Step::Absorb(_, Absorb::Residual) => absorbed.residuals += 1,
                Step::Absorb(_, Absorb::Scale) => absorbed.scales += 1,
                Step::Absorb(_, Absorb::Shift) => absorbed.biases += 1,
            }
        }
    }

    /// Records the rewrite in `patch` (module doc).
    fn apply(self, graph: &Graph, producers: &HashMap<ValueId, NodeId>, patch: &mut Patch) {
        let dense = graph.node(self.dense);
        let Some(last) = self.steps.last().map(|s| s.node()) else {
            return;
        };
        let final_value = graph.node(last).output;
        let out = graph.value(dense.output);
        let (m, n) = (out.shape[0], out.shape[1]);
        let before = self.before;
        let old_bias = before.bias.then(|| dense.inputs[2]);
        let old_residual = before
            .residual
            .then(|| dense.inputs[2 + before.bias as usize]);
        let mut epilogue = self.epilogue;
        let mut inputs = vec![dense.inputs[0], dense.inputs[1]];
        match &self.affine {
            None => inputs.extend(old_bias),
            Some(affine) => {
                let weight = graph.value(dense.inputs[1]);
                let data = weight
                    .constant_data()
                    .expect("a scale is folded only into a constant weight");
                let k = data.len() / n.max(1);
                let scaled = data
                    .chunks(k.max(1))
                    .zip(&affine.scale)
                    .flat_map(|(row, &s)| row.iter().map(move |&w| (w as f64 * s) as f32))
                    .map(|w| weight.dtype.round(w))
                    .collect();
                inputs[1] = patch.add_value(Value {
                    kind: ValueKind::Constant(Arc::new(scaled)),
                    ..weight.clone()
                });
                if epilogue.bias || affine.shift.iter().any(|&b| b != 0.0) {
                    epilogue.bias = true;
                    let bias = affine.shift.iter().map(|&b| b as f32).collect();
                    let name = format!("{}.bias", dense.name);
                    inputs.push(patch.add_value(Value::constant(name, vec![n], bias)));
                }
            }
        }
        inputs.extend(old_residual);
        let mut residual_view = Vec::new();
        if let Some(r) = self.residual {
            let value = graph.value(r);
            // The moves between the Dense and the Add, undone last first:
            // each Transpose by its inverse, each run of views by one
            // Reshape (to the shape before the run).
            let (mut at, mut shape) = (r, value.shape.clone());
            let mut pending: Option<Vec<usize>> = None;
            let mut step = |patch: &mut Patch, at: &mut ValueId, op: Op, to: Vec<usize>, tag| {
                let next = patch.add_value(Value {
                    name: format!("{}.{tag}", dense.name),
                    shape: to,
                    kind: ValueKind::Activation,
                    ..value.clone()
                });
                residual_view.push(Node {
                    name: format!("{}/{tag}", dense.name),
                    op,
                    inputs: vec![*at],
                    output: next,
                });
                *at = next;
            };
            for (i, &id) in self.residual_moves.iter().enumerate().rev() {
                let node = graph.node(id);
                let before = graph.value(node.inputs[0]).shape.clone();
                let Op::Transpose { perm } = &node.op else {
                    pending = Some(before);
                    continue;
                };
                if let Some(to) = pending.take() {
                    let op = reshape_to(&to);
                    step(patch, &mut at, op, to, format!("residual{i}v"));
                }
                let mut inverse = vec![0; perm.len()];
                for (a, &p) in perm.iter().enumerate() {
                    inverse[p] = a;
                }
                let op = Op::Transpose { perm: inverse };
                step(patch, &mut at, op, before.clone(), format!("residual{i}"));
                shape = before;
            }
            if shape != [m, n] {
                let to = vec![m, n];
                step(
                    patch,
                    &mut at,
                    reshape_to(&to),
                    to,
                    "residual2d".to_string(),
                );
            }
            inputs.push(at);
        }
        let moves: Vec<NodeId> = self
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Move(id) => Some(*id),
                Step::Absorb(..) => None,
            })
            .collect();
        let dense_output = if moves.is_empty() {
            final_value
        } else {
            dense.output
        };
        let mut chain = vec![Node {
            name: dense.name.clone(),
            op: Op::Dense {
                epilogue,
                norm: None,
            },
            inputs,
            output: dense_output,
        }];
        for (i, &id) in moves.iter().enumerate() {
            let mut node = graph.node(id).clone();
            node.inputs = vec![chain[i].output];
            if i + 1 == moves.len() {
                node.output = final_value;
            }
            chain.push(node);
        }
        // The residual is computed after the Dense: the chain moves to the
        // last absorbed node's place, after it.
        let later = self
            .residual
            .and_then(|r| producers.get(&r))
            .is_some_and(|&p| p > self.dense);
        let anchor = if later { last } else { self.dense };
        for step in &self.steps {
            patch.remove_node(step.node());
        }
        patch.remove_node(self.dense);
        for view in residual_view {
            patch.insert_before(anchor, view);
        }
        for node in chain {
            patch.insert_before(anchor, node);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::lower_dense;
    use crate::ir::{print_graph, BinaryOp, Graph, Op, UnaryOp, ValueId};
    use crate::passes::direct_eval;
    use crate::test_graphs::{op_counts, rel_l2, Builder};

    fn reshape(shape: &[i64]) -> Op {
        Op::Reshape {
            shape: shape.to_vec(),
            allowzero: false,
        }
    }

    const ADD: Op = Op::Binary(BinaryOp::Add);
    const MUL: Op = Op::Binary(BinaryOp::Mul);
    const GELU: Op = Op::Unary(UnaryOp::Gelu { tanh: false });

    /// `x · w + b` as the exporters write a linear layer over an N-D input.
    fn linear(b: &mut Builder, name: &str, x: ValueId, k: usize, n: usize) -> ValueId {
        let w = b.random(&format!("{name}.w"), &[k, n], -0.5, 0.5);
        let bias = b.random(&format!("{name}.b"), &[n], -0.5, 0.5);
        let y = b.node(name, Op::MatMul, &[x, w]);
        b.node(&format!("{name}.add"), ADD, &[y, bias])
    }

    fn inputs_of(b: &mut Builder) -> Vec<Vec<f32>> {
        let inputs = b.graph.inputs.clone();
        inputs.into_iter().map(|v| b.data_for(v)).collect()
    }

    /// Lowers `g` and checks every output against the direct loops, and that
    /// lowering again changes nothing; returns the summary.
    fn lower_and_check(g: &mut Graph, inputs: &[Vec<f32>]) -> String {
        let inputs: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
        let before = direct_eval::evaluate(g, &inputs);
        let summary = lower_dense(g).unwrap().to_string();
        let after = direct_eval::evaluate(g, &inputs);
        for (a, b) in after.iter().zip(&before) {
            let error = rel_l2(a, b);
            assert!(error <= 1e-6, "rel. L2 {error:e}\n{}", print_graph(g));
        }
        let mut again = g.clone();
        let second = lower_dense(&mut again).unwrap();
        assert!(second.is_noop(), "{second}");
        assert_eq!(&again, g);
        summary
    }

    /// ViT's MLP: fc1 takes the GELU, fc2 the residual Add (through the
    /// views around the N-D Dense), and no elementwise node is left.
    #[test]
    fn transformer_mlp_takes_its_gelu_and_residual() {
        let mut b = Builder::new();
        let x = b.input("x", &[1, 5, 8]);
        let h = linear(&mut b, "fc1", x, 8, 16);
        let h = b.node("gelu", GELU, &[h]);
        let y = linear(&mut b, "fc2", h, 16, 8);
        let out = b.node("residual", ADD, &[x, y]);
        b.output(out);
        let inputs = inputs_of(&mut b);
        let mut g = b.finish();
        let summary = lower_and_check(&mut g, &inputs);
        insta::assert_snapshot!(summary, @"dense: 2 MatMul → Dense, 2 bias Add absorbed, 1 activation absorbed, 1 residual Add absorbed");
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[1,5,8]  # x
          const %3: f32[16,8]  # sum=4.812810e-1
          const %4: f32[16]  # sum=7.682664e-1
          const %7: f32[8,16]  # sum=-1.321987e0
          const %8: f32[8]  # sum=4.553050e-1
          %5: f32[5,8] = Reshape(%0) shape=[5, 8]  # fc1/x2d
          %6: f32[5,16] = Dense(%5, %3, %4) epilogue=bias+gelu  # fc1
          %1: f32[1,5,16] = Reshape(%6) shape=[1, 5, 16]  # fc1/y
          %9: f32[5,16] = Reshape(%1) shape=[5, 16]  # fc2/x2d
          %11: f32[5,8] = Reshape(%0) shape=[5, 8]  # fc2/residual2d
          %10: f32[5,8] = Dense(%9, %7, %8, %11) epilogue=bias+residual  # fc2
          %2: f32[1,5,8] = Reshape(%10) shape=[1, 5, 8]  # fc2/y
          return %2
        ");
    }

    /// The legacy exporter's `Gemm` over flattened rows, then a Reshape to
    /// the N-D shape: the activation after the view is absorbed, and the
    /// Reshape writes the activation's output value (a graph output here).
    #[test]
    fn activation_after_a_view_is_absorbed() {
        let mut b = Builder::new();
        let x = b.input("x", &[10, 8]);
        let w = b.random("w", &[16, 8], -0.5, 0.5);
        let bias = b.random("b", &[16], -0.5, 0.5);
        let gemm = Op::Gemm {
            alpha: 1.0,
            beta: 1.0,
            trans_a: false,
            trans_b: true,
        };
        let y = b.node("fc", gemm, &[x, w, bias]);
        let y = b.node("unflatten", reshape(&[2, 5, 16]), &[y]);
        let y = b.node("gelu", Op::Unary(UnaryOp::Gelu { tanh: true }), &[y]);
        b.output(y);
        let inputs = inputs_of(&mut b);
        let mut g = b.finish();
        let summary = lower_and_check(&mut g, &inputs);
        insta::assert_snapshot!(summary, @"dense: 1 Gemm → Dense, 1 activation absorbed");
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[10,8]  # x
          const %1: f32[16,8]  # sum=4.812810e-1
          const %4: f32[16]  # sum=7.682664e-1
          %2: f32[10,16] = Dense(%0, %1, %4) epilogue=bias+gelu_tanh  # fc
          %3: f32[2,5,16] = Reshape(%2) shape=[2, 5, 16]  # unflatten
          return %3
        ");
    }

    /// The epilogue is `act(acc + bias + residual)`: an Add after the GELU
    /// stays a node, an Add before a Relu goes in with it.
    #[test]
    fn residual_is_absorbed_only_before_the_activation() {
        let mut b = Builder::new();
        let x = b.input("x", &[4, 8]);
        let r = b.input("r", &[4, 6]);
        let gemm = Op::Gemm {
            alpha: 1.0,
            beta: 1.0,
            trans_a: false,
            trans_b: true,
        };
        let w1 = b.random("w1", &[6, 8], -0.5, 0.5);
        let b1 = b.random("b1", &[6], -0.5, 0.5);
        let y1 = b.node("gelu_first", gemm.clone(), &[x, w1, b1]);
        let y1 = b.node("gelu", GELU, &[y1]);
        let y1 = b.node("add_after_gelu", ADD, &[y1, r]);
        b.output(y1);
        let w2 = b.random("w2", &[6, 8], -0.5, 0.5);
        let y2 = b.node("add_first", gemm, &[x, w2]);
        let y2 = b.node("add_before_relu", Op::Sum, &[r, y2]);
        let y2 = b.relu("relu", y2);
        b.output(y2);
        let inputs = inputs_of(&mut b);
        let mut g = b.finish();
        let summary = lower_and_check(&mut g, &inputs);
        insta::assert_snapshot!(summary, @"dense: 2 Gemm → Dense, 2 activation absorbed, 1 residual Add absorbed");
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[4,8]  # x
          input %1: f32[4,6]  # r
          const %2: f32[6,8]  # sum=-5.427500e-1
          const %5: f32[6,8]  # sum=6.746274e-1
          const %7: f32[6]  # sum=-1.739210e-1
          %3: f32[4,6] = Dense(%0, %2, %7) epilogue=bias+gelu  # gelu_first
          %4: f32[4,6] = Add(%3, %1)  # add_after_gelu
          %6: f32[4,6] = Dense(%0, %5, %1) epilogue=residual+relu  # add_first
          return %4, %6
        ");
    }

    /// A residual computed after the Dense: the Dense moves to the Add's
    /// place. Of two Dense outputs added, the later Dense takes the Add.
    #[test]
    fn residual_order_and_two_dense_operands() {
        let mut b = Builder::new();
        let x = b.input("x", &[3, 8]);
        let d = linear(&mut b, "early", x, 8, 8);
        let late = b.node("late", Op::Unary(UnaryOp::Sigmoid), &[x]);
        let y = b.node("add_late", ADD, &[d, late]);
        b.output(y);
        let d1 = linear(&mut b, "first", x, 8, 4);
        let d2 = linear(&mut b, "second", x, 8, 4);
        let z = b.node("add_both", ADD, &[d2, d1]);
        b.output(z);
        let inputs = inputs_of(&mut b);
        let mut g = b.finish();
        let summary = lower_and_check(&mut g, &inputs);
        insta::assert_snapshot!(summary, @"dense: 3 MatMul → Dense, 3 bias Add absorbed, 2 residual Add absorbed");
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[3,8]  # x
          const %5: f32[8,8]  # sum=1.476408e-1
          const %6: f32[8]  # sum=5.037719e-2
          const %7: f32[4,8]  # sum=1.609882e-1
          const %8: f32[4]  # sum=-3.751727e-1
          const %9: f32[4,8]  # sum=9.243904e-1
          const %10: f32[4]  # sum=3.413236e-1
          %1: f32[3,8] = Sigmoid(%0)  # late
          %2: f32[3,8] = Dense(%0, %5, %6, %1) epilogue=bias+residual  # early
          %3: f32[3,4] = Dense(%0, %7, %8) epilogue=bias  # first
          %4: f32[3,4] = Dense(%0, %9, %10, %3) epilogue=bias+residual  # second
          return %2, %4
        ");
    }

    /// ConvNeXt's block tail: `Dense → view → Transpose → Mul(gamma[C,1,1])
    /// → Add(residual)`. gamma is one value per output feature after the
    /// Transpose, so it goes into the weight rows and bias; the Transpose
    /// stays (it writes the Add's output), and the Add becomes the Dense's
    /// residual, read through the inverse permute (free on a channels-last
    /// residual once the layout pass has run).
    #[test]
    fn layer_scale_after_a_transpose_folds_into_the_weights() {
        let mut b = Builder::new();
        let x = b.input("x", &[1, 3, 3, 8]);
        let shortcut = b.input("shortcut", &[1, 6, 3, 3]);
        let y = linear(&mut b, "pwconv2", x, 8, 6);
        let y = b.node(
            "permute",
            Op::Transpose {
                perm: vec![0, 3, 1, 2],
            },
            &[y],
        );
        let gamma = b.random("gamma", &[6, 1, 1], 0.5, 1.5);
        let y = b.node("layer_scale", MUL, &[gamma, y]);
        let y = b.node("residual", ADD, &[shortcut, y]);
        b.output(y);
        let inputs = inputs_of(&mut b);
        let mut g = b.finish();
        let summary = lower_and_check(&mut g, &inputs);
        insta::assert_snapshot!(summary, @"dense: 1 MatMul → Dense, 1 bias Add absorbed, 1 per-feature Mul folded, 1 residual Add absorbed");
        insta::assert_snapshot!(print_graph(&g), @r"
        graph precision=fp32
          input %0: f32[1,3,3,8]  # x
          input %1: f32[1,6,3,3]  # shortcut
          const %6: f32[6,8]  # sum=-3.980491e-1
          const %7: f32[6]  # sum=-3.874235e-1
          %4: f32[9,8] = Reshape(%0) shape=[9, 8]  # pwconv2/x2d
          %8: f32[1,3,3,6] = Transpose(%1) perm=[0, 2, 3, 1]  # pwconv2/residual1
          %9: f32[9,6] = Reshape(%8) shape=[9, 6]  # pwconv2/residual2d
          %5: f32[9,6] = Dense(%4, %6, %7, %9) epilogue=bias+residual  # pwconv2
          %2: f32[1,3,3,6] = Reshape(%5) shape=[1, 3, 3, 6]  # pwconv2/y
          %3: f32[1,6,3,3] = Transpose(%2) perm=[0, 3, 1, 2]  # permute
          return %3
        ");
    }

    /// A scale and a shift in a row, both per feature through a view: the
    /// weight rows take the scale, the bias `b·s + c`.
    #[test]
    fn per_feature_mul_and_add_after_a_view_fold_into_weight_and_bias() {
        let mut b = Builder::new();
        let x = b.input("x", &[2, 3, 8]);
        let y = linear(&mut b, "fc", x, 8, 4);
        let s = b.random("scale", &[1, 1, 4], -2.0, 2.0);
        let y = b.node("scale", MUL, &[y, s]);
        let c = b.random("shift", &[4], -1.0, 1.0);
        let y = b.node("shift", ADD, &[c, y]);
        b.output(y);
        let inputs = inputs_of(&mut b);
        let mut g = b.finish();
        let summary = lower_and_check(&mut g, &inputs);
        insta::assert_snapshot!(summary, @"dense: 1 MatMul → Dense, 2 bias Add absorbed, 1 per-feature Mul folded");
        assert_eq!(op_counts(&g), [("Dense", 1), ("Reshape", 2)]);
    }

    /// The whole pipeline keeps what the fused MLP and layer-scale tails
    /// compute at every precision (layouts, storage dtypes and the
    /// residual's view included), on the direct loops and the reference.
    #[test]
    fn fused_tails_survive_optimize_at_every_precision() {
        use crate::ir::Precision;
        use crate::passes::{optimize, PassOptions};
        use crate::reference::{run, RunOptions};
        let mut b = Builder::new();
        let x = b.input("x", &[2, 6, 16]);
        let h = linear(&mut b, "fc1", x, 16, 32);
        let h = b.node("gelu", GELU, &[h]);
        let y = linear(&mut b, "fc2", h, 32, 16);
        let y = b.node("residual", ADD, &[x, y]);
        let z = linear(&mut b, "pw", y, 16, 16);
        let z = b.node(
            "permute",
            Op::Transpose {
                perm: vec![0, 2, 1],
            },
            &[z],
        );
        let gamma = b.random("gamma", &[16, 1], 0.5, 1.5);
        let z = b.node("layer_scale", MUL, &[z, gamma]);
        b.output(z);
        let inputs = inputs_of(&mut b);
        let graph = b.finish();
        let inputs: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
        let want = direct_eval::evaluate(&graph, &inputs);
        let opts = RunOptions::default();
        let want_reference = run(&graph, &inputs, &opts).unwrap();
        for precision in Precision::ALL {
            let mut opt = graph.clone();
            let options = PassOptions {
                precision,
                ..PassOptions::default()
            };
            let report = optimize(&mut opt, &options).unwrap();
            assert_eq!(report.count("dense", "residual Add absorbed"), 1);
            assert_eq!(report.count("dense", "per-feature Mul folded"), 1);
            let kinds: Vec<&str> = opt.nodes.iter().map(|n| n.op.kind()).collect();
            assert!(
                !kinds.contains(&"Gelu") && !kinds.contains(&"Add"),
                "{kinds:?}"
            );
            let bound = match precision {
                Precision::Fp32 => 1e-5,
                Precision::Tf32 => 2e-3,
                Precision::Fp16 => 1e-2,
                Precision::Bf16 => 5e-2,
            };
            let got = direct_eval::evaluate(&opt, &inputs);
            let got_reference = run(&opt, &inputs, &opts).unwrap();
            for (g, w) in got
                .iter()
                .zip(&want)
                .chain(got_reference.iter().zip(&want_reference))
            {
                let error = rel_l2(g, w);
                assert!(
                    error <= bound,
                    "{precision}: rel. L2 {error:e}\n{}",
                    print_graph(&opt)
                );
            }
        }
    }

    /// What the epilogue cannot express stays: a Mul by a constant that
    /// varies along another axis, a Mul after the activation, a residual
    /// through a Transpose, and a GELU whose input is read elsewhere.
    #[test]
    fn what_the_epilogue_cannot_express_stays() {
        let mut b = Builder::new();
        let x = b.input("x", &[1, 3, 8]);
        // Per row, not per feature.
        let y = linear(&mut b, "per_row", x, 8, 4);
        let rows = b.random("rows", &[3, 1], 0.5, 1.5);
        let y = b.node("row_scale", MUL, &[y, rows]);
        b.output(y);
        // After the activation.
        let y = linear(&mut b, "after_act", x, 8, 4);
        let y = b.node("gelu", GELU, &[y]);
        let s = b.random("s", &[4], 0.5, 1.5);
        let y = b.node("scale_after_gelu", MUL, &[y, s]);
        b.output(y);
        // A residual in the transposed order.
        let r = b.input("r", &[1, 4, 3]);
        let y = linear(&mut b, "transposed", x, 8, 4);
        let y = b.node(
            "swap",
            Op::Transpose {
                perm: vec![0, 2, 1],
            },
            &[y],
        );
        let y = b.node("add_transposed", ADD, &[y, r]);
        b.output(y);
        // The pre-activation value is also returned.
        let y = linear(&mut b, "shared", x, 8, 4);
        let z = b.node("gelu_shared", GELU, &[y]);
        b.output(y);
        b.output(z);
        let inputs = inputs_of(&mut b);
        let mut g = b.finish();
        let summary = lower_and_check(&mut g, &inputs);
        insta::assert_snapshot!(summary, @"dense: 4 MatMul → Dense, 4 bias Add absorbed, 1 activation absorbed");
        let kinds: Vec<&str> = g.nodes.iter().map(|n| n.op.kind()).collect();
        insta::assert_snapshot!(kinds.join(" "), @"Reshape Dense Reshape Mul Reshape Dense Reshape Mul Reshape Dense Reshape Transpose Add Reshape Dense Reshape Gelu");
        let epilogues: Vec<String> = g
            .nodes
            .iter()
            .filter_map(|n| match n.op {
                Op::Dense { epilogue, .. } => Some(epilogue.to_string()),
                _ => None,
            })
            .collect();
        assert_eq!(epilogues, ["bias", "bias+gelu", "bias", "bias"]);
    }
}
