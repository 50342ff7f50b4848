//! Offsets for blocks with known sizes and lifetimes: greedy placement.
//!
//! Finding the smallest arena is NP-hard (dynamic storage allocation), so the
//! planner runs a few greedy heuristics and keeps the smallest result. Each
//! heuristic is an *order* in which blocks are placed and a *fit* rule. To
//! place a block, the blocks already placed whose lifetimes overlap its own
//! are swept in offset order; the holes between them (and the space after the
//! last) are the candidate positions. *First fit* takes the lowest hole that
//! is large enough, *best fit* the smallest such hole (ties: lowest), falling
//! back to the end of the highest conflicting block. The orders are
//! TFLite's: *greedy by size* (largest block first, ties by earlier start)
//! and *greedy by breadth* (steps by decreasing live bytes, and at each step
//! the blocks live there, largest first), plus start order (a linear scan,
//! optimal for equal sizes). Candidates are tried in a fixed order and the
//! first smallest arena wins, so the result is deterministic.
//!
//! Block sizes are already multiples of the alignment, and every offset is
//! the end of another block (or zero), so offsets stay aligned.
//!
//! The lower bound is the largest sum of sizes live at one step: every one
//! of those blocks conflicts with all the others, so any placement puts them
//! side by side.

/// A group of values placed together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Block {
    pub size: usize,
    pub first: usize,
    pub last: usize,
}

impl Block {
    fn conflicts(&self, other: &Block) -> bool {
        self.size > 0 && other.size > 0 && self.first <= other.last && other.first <= self.last
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    Size,
    Breadth,
    Start,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fit {
    First,
    Best,
}

/// The heuristics tried, in tie-breaking order.
pub(crate) const STRATEGIES: [(Order, Fit); 6] = [
    (Order::Size, Fit::Best),
    (Order::Size, Fit::First),
    (Order::Breadth, Fit::Best),
    (Order::Breadth, Fit::First),
    (Order::Start, Fit::Best),
    (Order::Start, Fit::First),
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placement {
    /// Offset of each block, in the input order.
    pub offsets: Vec<usize>,
    /// Largest block end (0 without blocks).
    pub arena: usize,
    pub order: Order,
    pub fit: Fit,
}

/// Sum of block sizes live at each step `0..=max last`.
fn live_bytes(blocks: &[Block]) -> Vec<usize> {
    let steps = blocks.iter().map(|b| b.last + 1).max().unwrap_or(0);
    let mut live = vec![0usize; steps];
    for b in blocks {
        for slot in &mut live[b.first..=b.last] {
            *slot = slot.saturating_add(b.size);
        }
    }
    live
}

/// Max over steps of the bytes live at that step.
pub(crate) fn lower_bound(blocks: &[Block]) -> usize {
    live_bytes(blocks).into_iter().max().unwrap_or(0)
}

fn order(blocks: &[Block], order: Order) -> Vec<usize> {
    let by_size = |a: &usize, b: &usize| {
        let (x, y) = (&blocks[*a], &blocks[*b]);
        y.size
            .cmp(&x.size)
            .then(x.first.cmp(&y.first))
            .then(a.cmp(b))
    };
    let mut ids: Vec<usize> = (0..blocks.len()).collect();
    match order {
        Order::Size => ids.sort_by(by_size),
        Order::Start => {
            ids.sort_by_key(|&i| (blocks[i].first, std::cmp::Reverse(blocks[i].size), i))
        }
        Order::Breadth => {
            ids.sort_by(by_size);
            let live = live_bytes(blocks);
            let mut steps: Vec<usize> = (0..live.len()).collect();
            steps.sort_by_key(|&s| (std::cmp::Reverse(live[s]), s));
            let mut taken = vec![false; blocks.len()];
            let mut out = Vec::with_capacity(blocks.len());
            for step in steps {
                if out.len() == blocks.len() {
                    break;
                }
                for &i in &ids {
                    let b = &blocks[i];
                    if !taken[i] && b.first <= step && step <= b.last {
                        taken[i] = true;
                        out.push(i);
                    }
                }
            }
            return out;
        }
    }
    ids
}

/// Places blocks in the given order. `Err(i)`: block `i` would end past
/// `usize::MAX`.
fn place_with(blocks: &[Block], order_: Order, fit: Fit) -> Result<Placement, usize> {
    let mut offsets = vec![0usize; blocks.len()];
    let mut placed: Vec<usize> = Vec::with_capacity(blocks.len());
    let mut arena = 0usize;
    let mut conflicts: Vec<(usize, usize)> = Vec::new();
    for i in order(blocks, order_) {
        let block = &blocks[i];
        if block.size == 0 {
            continue; // offset 0, occupies nothing
        }
        conflicts.clear();
        conflicts.extend(
            placed
                .iter()
                .filter(|&&j| blocks[j].conflicts(block))
                .map(|&j| (offsets[j], offsets[j] + blocks[j].size)),
        );
        conflicts.sort_unstable();
        let mut end = 0usize; // highest end of the conflicts swept so far
        let mut chosen: Option<(usize, usize)> = None; // (hole size, offset)
        for &(start, stop) in &conflicts {
            if start > end {
                let hole = start - end;
                if hole >= block.size {
                    match fit {
                        Fit::First => {
                            chosen = Some((hole, end));
                            break;
                        }
                        Fit::Best => {
                            if chosen.is_none_or(|(best, _)| hole < best) {
                                chosen = Some((hole, end));
                            }
                        }
                    }
                }
            }
            end = end.max(stop);
        }
        let offset = chosen.map_or(end, |(_, offset)| offset);
        let stop = offset.checked_add(block.size).ok_or(i)?;
        offsets[i] = offset;
        arena = arena.max(stop);
        placed.push(i);
    }
    Ok(Placement {
        offsets,
        arena,
        order: order_,
        fit,
    })
}

/// Runs every strategy and keeps the smallest arena (the first on ties).
/// `Err(i)`: block `i` cannot be placed below `usize::MAX`.
pub(crate) fn place(blocks: &[Block]) -> Result<Placement, usize> {
    let mut best: Option<Placement> = None;
    for (order_, fit) in STRATEGIES {
        let candidate = place_with(blocks, order_, fit)?;
        if best.as_ref().is_none_or(|b| candidate.arena < b.arena) {
            best = Some(candidate);
        }
    }
    // STRATEGIES is not empty.
    best.ok_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(size: usize, first: usize, last: usize) -> Block {
        Block { size, first, last }
    }

    fn assert_disjoint(blocks: &[Block], p: &Placement) {
        for i in 0..blocks.len() {
            for j in i + 1..blocks.len() {
                if blocks[i].conflicts(&blocks[j]) {
                    let (a, c) = (p.offsets[i], p.offsets[j]);
                    assert!(
                        a + blocks[i].size <= c || c + blocks[j].size <= a,
                        "blocks {i} and {j} overlap in {p:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn chain_needs_two_slots() {
        let blocks: Vec<Block> = (0..10).map(|i| b(100, i, i + 1)).collect();
        let p = place(&blocks).unwrap();
        assert_eq!(p.arena, 200);
        assert_eq!(lower_bound(&blocks), 200);
        assert_disjoint(&blocks, &p);
    }

    #[test]
    fn best_fit_takes_the_tightest_hole() {
        // Start order places [1] at 0..300, [0] at 300..400, [2] at 400..500,
        // [3] at 500..600, [4] at 600..700. At steps 5-6 only the walls
        // [0], [2], [4] are live: holes 0..300 and 500..600.
        let blocks = vec![
            b(100, 0, 9),
            b(300, 0, 1),
            b(100, 0, 9),
            b(100, 0, 1),
            b(100, 0, 9),
            b(100, 5, 6),
        ];
        let first = place_with(&blocks, Order::Start, Fit::First).unwrap();
        let best = place_with(&blocks, Order::Start, Fit::Best).unwrap();
        assert_disjoint(&blocks, &first);
        assert_disjoint(&blocks, &best);
        assert_eq!(first.offsets[5], 0);
        assert_eq!(best.offsets[5], 500);
    }

    #[test]
    fn every_strategy_is_valid_and_the_best_is_kept() {
        let blocks = vec![
            b(512, 0, 2),
            b(256, 1, 3),
            b(768, 2, 5),
            b(256, 3, 4),
            b(1024, 4, 7),
            b(0, 5, 5),
            b(256, 6, 8),
        ];
        let best = place(&blocks).unwrap();
        for (o, f) in STRATEGIES {
            let p = place_with(&blocks, o, f).unwrap();
            assert_disjoint(&blocks, &p);
            assert!(best.arena <= p.arena);
            assert!(lower_bound(&blocks) <= p.arena);
        }
    }

    #[test]
    fn overflow_is_reported() {
        let blocks = vec![b(usize::MAX / 2 + 1, 0, 1), b(usize::MAX / 2 + 1, 1, 2)];
        assert!(place(&blocks).is_err());
    }

    #[test]
    fn no_blocks_no_arena() {
        let p = place(&[]).unwrap();
        assert_eq!(p.arena, 0);
        assert_eq!(lower_bound(&[]), 0);
    }
}
