//! Why CUDA generation failed: always naming the node and op it failed on.

/// A node the CUDA generator cannot emit a kernel for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodegenError {
    /// The op, or this use of it (a layout, dtype or shape), has no kernel.
    #[error("node {index} '{node}' ({op}): {message}")]
    Unsupported {
        index: usize,
        node: String,
        op: &'static str,
        message: String,
    },
    /// A value a kernel reads or writes has no place in the memory plan.
    #[error("node {index} '{node}' ({op}): value %{value} is not in the memory plan")]
    Unplanned {
        index: usize,
        node: String,
        op: &'static str,
        value: u32,
    },
}
