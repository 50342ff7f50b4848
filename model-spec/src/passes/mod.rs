//! Graph-to-graph passes, run in a fixed order by [`optimize`].
//!
//! Each pass lives in its own file, rewrites the graph through one
//! [`crate::ir::Patch`], verifies the result in debug and test builds
//! ([`crate::ir::debug_verify`]) and returns a [`PassSummary`] of what it
//! changed. The order matters: BatchNorm must be folded before the conv
//! epilogue is fused (the BatchNorm sits between the conv and its bias/ReLU),
//! the global-pool canonicalization must run before layout assignment (only
//! pools become channels-last), and precision comes after layout so the
//! input's NHWC `Convert` doubles as its f16/bf16 conversion.

mod dce;
mod dense;
mod fold_batch_norm;
mod fuse_epilogue;
mod layout;
mod precision;
#[cfg(test)]
mod test_graphs;

pub use dce::dce;
pub use dense::{canonicalize_global_pool, lower_dense};
pub use fold_batch_norm::fold_batch_norm;
pub use fuse_epilogue::fuse_epilogue;
pub use layout::to_channels_last;
pub use precision::apply_precision;

use crate::ir::{Graph, NodeId, Precision, ValueId};
use std::collections::{HashMap, HashSet};
use std::fmt;

/// What [`optimize`] does beyond the fixed pass order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassOptions {
    /// Numeric mode: storage type of activations and weights.
    pub precision: Precision,
    /// Run [`to_channels_last`] (NHWC activations, OHWI weights).
    pub channels_last: bool,
}

impl Default for PassOptions {
    fn default() -> Self {
        PassOptions {
            precision: Precision::Fp32,
            channels_last: true,
        }
    }
}

/// A pass met something it cannot compile, e.g. a BatchNormalization whose
/// `var + epsilon` is not positive.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pass {pass}: node '{node}' ({op}): {message}")]
pub struct PassError {
    pub pass: &'static str,
    /// The node's name (onnx-ir's or pass-made).
    pub node: String,
    /// The node's op kind ([`crate::ir::Op::kind`]).
    pub op: &'static str,
    pub message: String,
}

/// What one pass changed, as counted events, e.g. `(53, "BatchNormalization folded")`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassSummary {
    pub pass: &'static str,
    pub changes: Vec<(usize, String)>,
}

impl PassSummary {
    pub fn new(pass: &'static str) -> Self {
        PassSummary {
            pass,
            changes: Vec::new(),
        }
    }

    /// Records `count` events of kind `what` (kept even when zero, so a
    /// report always lists the same lines for the same pass).
    pub fn add(&mut self, count: usize, what: impl Into<String>) {
        self.changes.push((count, what.into()));
    }

    /// The count recorded under `what` (0 if none).
    pub fn count(&self, what: &str) -> usize {
        self.changes
            .iter()
            .filter(|(_, w)| w == what)
            .map(|(n, _)| n)
            .sum()
    }

    /// True when the pass changed nothing.
    pub fn is_noop(&self) -> bool {
        self.changes.iter().all(|(n, _)| *n == 0)
    }
}

impl fmt::Display for PassSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.pass)?;
        let done: Vec<String> = self
            .changes
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| format!("{n} {what}"))
            .collect();
        if done.is_empty() {
            f.write_str(" no change")
        } else {
            write!(f, " {}", done.join(", "))
        }
    }
}

/// Summaries of every pass [`optimize`] ran, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassReport {
    pub passes: Vec<PassSummary>,
}

impl PassReport {
    /// Sum over all runs of `pass` of the count recorded under `what`.
    pub fn count(&self, pass: &str, what: &str) -> usize {
        self.passes
            .iter()
            .filter(|s| s.pass == pass)
            .map(|s| s.count(what))
            .sum()
    }
}

impl fmt::Display for PassReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for summary in &self.passes {
            writeln!(f, "{summary}")?;
        }
        Ok(())
    }
}

/// Runs every pass in order: dce → fold_batch_norm → canonicalize_global_pool
/// → fuse_epilogue → lower_dense → to_channels_last (if enabled) →
/// apply_precision → dce. Each pass verifies the graph it leaves in debug and
/// test builds.
pub fn optimize(graph: &mut Graph, options: &PassOptions) -> Result<PassReport, PassError> {
    let mut report = PassReport::default();
    report.passes.push(dce(graph)?);
    report.passes.push(fold_batch_norm(graph)?);
    report.passes.push(canonicalize_global_pool(graph)?);
    report.passes.push(fuse_epilogue(graph)?);
    report.passes.push(lower_dense(graph)?);
    if options.channels_last {
        report.passes.push(to_channels_last(graph)?);
    }
    report.passes.push(apply_precision(graph, options.precision)?);
    report.passes.push(dce(graph)?);
    Ok(report)
}

/// Who reads each value: node users (once per use) and graph outputs.
/// Computed once at the start of a pass, on the graph before its patch.
struct Uses {
    users: HashMap<ValueId, Vec<NodeId>>,
    outputs: HashSet<ValueId>,
}

impl Uses {
    fn of(graph: &Graph) -> Self {
        Uses {
            users: graph.users(),
            outputs: graph.outputs.iter().copied().collect(),
        }
    }

    /// Nodes reading `value`, in node order, once per use.
    fn users(&self, value: ValueId) -> &[NodeId] {
        self.users.get(&value).map_or(&[], Vec::as_slice)
    }

    fn is_output(&self, value: ValueId) -> bool {
        self.outputs.contains(&value)
    }

    /// The node that is the only reader of `value`, when `value` has exactly
    /// one use and is not a graph output: only then may that node fuse it away.
    fn sole_user(&self, value: ValueId) -> Option<NodeId> {
        match self.users(value) {
            [user] if !self.is_output(value) => Some(*user),
            _ => None,
        }
    }
}
