//! Memory plan: every non-constant value (graph inputs, activations,
//! outputs) gets an offset in one arena.
//!
//! [`plan_memory`] runs three steps. [`lifetime`] numbers the executor's
//! steps (0: inputs copied in, `i + 1`: node `i`, `nodes.len() + 1`: outputs
//! copied out), gives each value the interval from its write to its last
//! read, and merges each view op's output into its input's *alias group* when
//! the bytes can be reinterpreted in place. [`place`] assigns each group an
//! offset with greedy best-fit/first-fit heuristics, keeps the smallest
//! arena, improves it by a local search when it is above the lower bound
//! (max over steps of the aligned bytes live), and computes that bound.
//! Every value then gets a [`Buffer`] at its group's offset.
//! [`check_plan`] validates a plan independently of how it was made, and
//! [`render_plan`] writes the `plan.txt` text. Constants (weights) are not
//! planned: they live in their own allocation.
//!
//! The public types below are the contract other modules (the CPU reference,
//! codegen) rely on; keep their names and meaning.

mod check;
mod error;
mod lifetime;
mod place;
mod render;

pub use check::check_plan;
pub use error::PlanError;
pub use render::render_plan;

use crate::ir::{Graph, ValueId};

/// Alignment of every buffer unless [`PlanOptions`] says otherwise: enough for
/// vectorized and TMA accesses on any NVIDIA GPU.
pub const DEFAULT_ALIGNMENT: usize = 256;

/// One arena buffer: a value (or a chain of view values aliasing it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buffer {
    /// The value this buffer holds. View ops (Flatten, Reshape, Identity) whose
    /// input is planned get a `Buffer` of their own with the *same* offset.
    pub value: ValueId,
    /// Byte offset in the arena, a multiple of [`MemoryPlan::alignment`].
    pub offset: usize,
    /// Bytes of the value in its storage type.
    pub bytes: usize,
    /// First step the buffer must hold data: 0 for graph inputs, `i + 1` for
    /// the output of node `i`.
    pub first: usize,
    /// Last step that reads it (`nodes.len() + 1` for graph outputs).
    /// `first`/`last` are this value's own; bytes shared through aliases stay
    /// valid for the union of the lifetimes of the buffers sharing them.
    pub last: usize,
    /// `Some(root)` when this value is the output of a view op that shares
    /// the bytes of `root` (a value that is not itself an alias): no kernel
    /// runs for it. `None` for every other buffer, including views that need
    /// a copy because their input's bytes are not row-major.
    pub alias_of: Option<ValueId>,
}

/// Offsets of every planned value in one arena.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPlan {
    pub alignment: usize,
    pub arena_bytes: usize,
    /// Max over steps of the bytes live at that step: no plan can be smaller.
    pub lower_bound: usize,
    /// Sorted by value id.
    pub buffers: Vec<Buffer>,
}

impl MemoryPlan {
    pub fn buffer(&self, value: ValueId) -> Option<&Buffer> {
        self.buffers
            .binary_search_by_key(&value, |b| b.value)
            .ok()
            .map(|i| &self.buffers[i])
    }

    /// `arena_bytes / lower_bound` (1 for an empty plan).
    pub fn ratio(&self) -> f64 {
        if self.lower_bound == 0 {
            1.0
        } else {
            self.arena_bytes as f64 / self.lower_bound as f64
        }
    }
}

/// Knobs of [`plan_memory_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanOptions {
    /// Every offset is a multiple of this (a power of two), and each buffer's
    /// bytes are rounded up to it in the arena and in the lower bound.
    pub alignment: usize,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            alignment: DEFAULT_ALIGNMENT,
        }
    }
}

/// Plans `graph` with the default options ([`DEFAULT_ALIGNMENT`]).
pub fn plan_memory(graph: &Graph) -> Result<MemoryPlan, PlanError> {
    plan_memory_with(graph, &PlanOptions::default())
}

/// Plans `graph`. In debug builds the result goes through [`check_plan`], so
/// a planner bug is an error here rather than corrupted activations later.
pub fn plan_memory_with(graph: &Graph, options: &PlanOptions) -> Result<MemoryPlan, PlanError> {
    let alignment = options.alignment;
    if alignment == 0 || !alignment.is_power_of_two() {
        return Err(PlanError::BadAlignment { alignment });
    }
    let live = lifetime::analyze(graph, alignment)?;
    let blocks: Vec<place::Block> = live
        .groups
        .iter()
        .map(|g| place::Block {
            size: g.size,
            first: g.first,
            last: g.last,
        })
        .collect();
    let placement = place::place(&blocks).map_err(|i| {
        let root = live.groups[i].root;
        PlanError::TooLarge {
            value: root,
            name: graph.value(root).name.clone(),
            detail: "the arena would exceed the address space".to_string(),
        }
    })?;
    let plan = MemoryPlan {
        alignment,
        arena_bytes: placement.arena,
        lower_bound: place::lower_bound(&blocks),
        buffers: live
            .values
            .iter()
            .map(|v| Buffer {
                value: v.value,
                offset: placement.offsets[v.group],
                bytes: v.bytes,
                first: v.first,
                last: v.last,
                alias_of: v.alias_of,
            })
            .collect(),
    };
    if cfg!(debug_assertions) {
        check_plan(graph, &plan)?;
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{verify, Op, Precision, UnaryOp, ValueKind};
    use crate::test_graphs::{
        chain, convnext_stage, diamond, random_dag, resnet50_grouped, Builder, RandomStep,
    };
    use proptest::prelude::*;

    fn id(i: u32) -> ValueId {
        ValueId(i)
    }

    /// True when the two buffers share at least one byte.
    fn share_bytes(a: &Buffer, b: &Buffer) -> bool {
        a.bytes > 0 && b.bytes > 0 && a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes
    }

    #[test]
    fn chain_reuses_two_buffers() {
        // 1000 f32 = 4000 bytes, 4096 aligned; 10 relus, 11 values.
        let graph = chain(10, &[1, 1000]);
        let plan = plan_memory(&graph).unwrap();
        check_plan(&graph, &plan).unwrap();
        assert_eq!(plan.buffers.len(), 11);
        assert_eq!(plan.arena_bytes, 2 * 4096);
        assert_eq!(plan.lower_bound, 2 * 4096);
        for (i, b) in plan.buffers.iter().enumerate() {
            assert_eq!((b.first, b.last), (i, i + 1));
        }
    }

    #[test]
    fn diamond_keeps_the_branch_alive() {
        let graph = diamond(&[1, 1000]);
        let plan = plan_memory(&graph).unwrap();
        check_plan(&graph, &plan).unwrap();
        // %1 = a, read by the Add at step 4.
        let a = plan.buffer(id(1)).unwrap();
        assert_eq!((a.first, a.last), (1, 4));
        for other in [id(2), id(3), id(4)] {
            assert!(!share_bytes(a, plan.buffer(other).unwrap()));
        }
        // At step 3 (c = relu(b)) a, b and c are live: three buffers.
        assert_eq!(plan.lower_bound, 3 * 4096);
        assert_eq!(plan.arena_bytes, 3 * 4096);
    }

    #[test]
    fn views_alias_and_extend_the_lifetime() {
        // a = relu(x); f = flatten(a); r = relu(f); y = r + f; id = identity(y)
        let mut b = Builder::new().outputs_named_as_nodes();
        let x = b.input("x", &[1, 4, 4, 4]);
        let a = b.node("a", Op::Unary(UnaryOp::Relu), &[x]);
        let f = b.node("f", Op::Flatten { axis: 1 }, &[a]);
        let r = b.node("r", Op::Unary(UnaryOp::Relu), &[f]);
        let y = b.node("y", Op::Binary(crate::ir::BinaryOp::Add), &[r, f]);
        let out = b.node("out", Op::Identity, &[y]);
        b.output(out);
        let graph = b.finish();
        let plan = plan_memory(&graph).unwrap();
        check_plan(&graph, &plan).unwrap();

        let (ba, bf) = (plan.buffer(a).unwrap(), plan.buffer(f).unwrap());
        assert_eq!(bf.alias_of, Some(a));
        assert_eq!(bf.offset, ba.offset);
        assert_eq!((ba.first, ba.last), (1, 2));
        assert_eq!((bf.first, bf.last), (2, 4));
        // r is written while f (a's bytes) is still needed by the Add.
        assert!(!share_bytes(ba, plan.buffer(r).unwrap()));
        // The graph output is an alias of y, and y's bytes survive to the end.
        let (by, bout) = (plan.buffer(y).unwrap(), plan.buffer(out).unwrap());
        assert_eq!(bout.alias_of, Some(y));
        assert_eq!(bout.offset, by.offset);
        assert_eq!(bout.last, graph.nodes.len() + 1);
        // 256 bytes each: x, a (+f), r, y (+out) with x dead after step 1.
        assert_eq!(plan.lower_bound, 3 * 256);
        assert_eq!(plan.arena_bytes, 3 * 256);
    }

    #[test]
    fn view_of_a_graph_input_aliases_it() {
        let mut b = Builder::new().outputs_named_as_nodes();
        let x = b.input("x", &[1, 2, 3, 4]);
        let f = b.node("f", Op::Flatten { axis: 1 }, &[x]);
        let y = b.node("y", Op::Unary(UnaryOp::Relu), &[f]);
        b.output(y);
        let graph = b.finish();
        let plan = plan_memory(&graph).unwrap();
        check_plan(&graph, &plan).unwrap();
        assert_eq!(plan.buffer(f).unwrap().alias_of, Some(x));
        assert_eq!(
            plan.buffer(f).unwrap().offset,
            plan.buffer(x).unwrap().offset
        );
        assert_eq!(plan.arena_bytes, 2 * 256);
    }

    #[test]
    fn graph_outputs_are_never_overwritten() {
        // early = relu(x) is an output at step 1; a chain of 8 relus follows.
        let mut b = Builder::new().outputs_named_as_nodes();
        let x = b.input("x", &[1, 100]);
        let early = b.node("early", Op::Unary(UnaryOp::Relu), &[x]);
        let mut h = early;
        for i in 0..8 {
            h = b.node(&format!("r{i}"), Op::Unary(UnaryOp::Relu), &[h]);
        }
        b.output(early);
        b.output(h);
        let graph = b.finish();
        let plan = plan_memory(&graph).unwrap();
        check_plan(&graph, &plan).unwrap();
        let end = graph.nodes.len() + 1;
        for out in [early, h] {
            let ob = plan.buffer(out).unwrap();
            assert_eq!(ob.last, end);
            for other in plan.buffers.iter().filter(|o| o.value != out) {
                if share_bytes(ob, other) {
                    assert!(
                        other.last < ob.first,
                        "%{} overwrites output",
                        other.value.0
                    );
                }
            }
        }
    }

    #[test]
    fn alignment_is_respected() {
        // 3, 5, 7, … elements of f32: sizes never multiples of the alignment.
        let mut b = Builder::new().outputs_named_as_nodes();
        let x = b.input("x", &[3]);
        let mut h = x;
        let mut keep = vec![];
        for i in 0..6 {
            h = b.node(&format!("r{i}"), Op::Unary(UnaryOp::Relu), &[h]);
            keep.push(h);
        }
        for &v in &keep {
            b.output(v);
        }
        let graph = b.finish();
        for alignment in [1, 4, 64, 512] {
            let plan = plan_memory_with(&graph, &PlanOptions { alignment }).unwrap();
            check_plan(&graph, &plan).unwrap();
            assert!(plan.buffers.iter().all(|b| b.offset & (alignment - 1) == 0));
            assert_eq!(plan.arena_bytes & (alignment - 1), 0);
            // The six relu outputs are graph outputs: at the last step six
            // aligned slots are live.
            assert_eq!(plan.lower_bound, 6 * 12usize.next_multiple_of(alignment));
        }
        for alignment in [0, 3, 100] {
            assert_eq!(
                plan_memory_with(&graph, &PlanOptions { alignment }),
                Err(PlanError::BadAlignment { alignment })
            );
        }
    }

    #[test]
    fn constants_are_not_planned() {
        let graph = resnet50_grouped(Precision::Fp32, true);
        let plan = plan_memory(&graph).unwrap();
        for (i, v) in graph.values.iter().enumerate() {
            let planned = plan.buffer(id(i as u32)).is_some();
            assert_eq!(planned, !matches!(v.kind, ValueKind::Constant(_)), "%{i}");
        }
    }

    #[test]
    fn unaddressable_value_is_an_error_naming_it() {
        let mut b = Builder::new().outputs_named_as_nodes();
        let x = b.input("too_big", &[1 << 31, 1 << 31]);
        b.graph.outputs = vec![x];
        let err = plan_memory(&b.graph).unwrap_err();
        assert!(matches!(err, PlanError::TooLarge { .. }), "{err}");
        assert!(err.to_string().contains("%0 'too_big'"), "{err}");
    }

    #[test]
    fn empty_graph_has_an_empty_arena() {
        let graph = Builder::new().finish();
        let plan = plan_memory(&graph).unwrap();
        assert_eq!(
            (plan.arena_bytes, plan.lower_bound, plan.buffers.len()),
            (0, 0, 0)
        );
        check_plan(&graph, &plan).unwrap();
    }

    /// Arena and lower bound of the synthetic ResNet-50 (see `test_graphs`):
    /// the greedy orders reach the bound.
    #[test]
    fn resnet50_arena_equals_the_lower_bound() {
        for fused in [false, true] {
            for precision in [Precision::Fp32, Precision::Fp16] {
                let graph = resnet50_grouped(precision, fused);
                verify(&graph).unwrap();
                let plan = plan_memory(&graph).unwrap();
                check_plan(&graph, &plan).unwrap();
                println!(
                    "resnet50 {precision} {}: {} buffers, arena {} B, lower bound {} B, ratio {:.4}",
                    if fused { "fused" } else { "unfused" },
                    plan.buffers.len(),
                    plan.arena_bytes,
                    plan.lower_bound,
                    plan.ratio()
                );
                assert_eq!(plan.arena_bytes, plan.lower_bound);
            }
        }
    }

    /// ConvNeXt-T's first stage: the greedy orders stack each block's new
    /// residual above the old one and the two MLP values (1.11× the bound);
    /// promotion alternates them and reaches the bound.
    #[test]
    fn convnext_stage_reaches_the_lower_bound() {
        for precision in [Precision::Fp32, Precision::Fp16] {
            let unit = 96 * 56 * 56 * precision.storage().size();
            for blocks in [2, 3] {
                let graph = convnext_stage(precision, blocks);
                let plan = plan_memory(&graph).unwrap();
                check_plan(&graph, &plan).unwrap();
                println!(
                    "convnext stage 1 {precision}, {blocks} blocks: arena {} B, lower bound {} B, ratio {:.4}",
                    plan.arena_bytes,
                    plan.lower_bound,
                    plan.ratio()
                );
                assert_eq!(plan.lower_bound, 9 * unit);
                assert_eq!(plan.arena_bytes, plan.lower_bound);
            }
        }
    }

    /// Deterministic sweep over many random DAGs, reporting the worst ratio.
    #[test]
    fn random_dag_ratio_sweep() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as usize
        };
        let mut worst: f64 = 1.0;
        for _ in 0..1000 {
            let inputs: Vec<(usize, usize)> = (0..1 + next() % 3)
                .map(|_| (1 + next() % 64, 1 + next() % 8))
                .collect();
            let steps: Vec<RandomStep> = (0..1 + next() % 60)
                .map(|_| ((next() % 5) as u8, next(), next(), next()))
                .collect();
            let outs: Vec<usize> = (0..next() % 4).map(|_| next()).collect();
            let graph = random_dag(&inputs, &steps, &outs);
            let plan = plan_memory(&graph).unwrap();
            check_plan(&graph, &plan).unwrap();
            worst = worst.max(plan.ratio());
        }
        println!("random DAGs: worst arena / lower bound = {worst:.4}");
        assert!(worst <= 2.0, "worst ratio {worst}");
    }

    proptest! {
        #[test]
        fn random_dags_plan_soundly(
            inputs in prop::collection::vec((1usize..=64, 1usize..=8), 1..=3),
            steps in prop::collection::vec((0u8..5, any::<usize>(), any::<usize>(), any::<usize>()), 1..=40),
            outs in prop::collection::vec(any::<usize>(), 0..=3),
            align_log2 in 0u32..=9,
        ) {
            let graph = random_dag(&inputs, &steps, &outs);
            let options = PlanOptions { alignment: 1 << align_log2 };
            let plan = plan_memory_with(&graph, &options).unwrap();
            prop_assert_eq!(check_plan(&graph, &plan), Ok(()));
            prop_assert!(plan.lower_bound <= plan.arena_bytes);
            prop_assert!(plan.arena_bytes <= 2 * plan.lower_bound,
                "arena {} vs lower bound {}", plan.arena_bytes, plan.lower_bound);
        }
    }
}
