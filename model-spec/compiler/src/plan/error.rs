//! Errors of the memory planner and of the plan checker.
//!
//! Planning fails only on graphs it cannot give an arena to (a value too large
//! to address, a malformed graph the verifier would also reject); checking
//! fails on a plan that could corrupt data. Every variant names the value
//! (`%id 'name'`) at fault so the message can be acted on without a debugger.

use crate::ir::ValueId;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("alignment {alignment} is not a power of two")]
    BadAlignment { alignment: usize },

    #[error("value %{} '{name}' ({detail}) is too large to address", value.0)]
    TooLarge {
        value: ValueId,
        name: String,
        detail: String,
    },

    #[error("cannot plan memory: {location}: {message}")]
    InvalidGraph { location: String, message: String },

    #[error("plan has no buffer for %{} '{name}'", value.0)]
    MissingBuffer { value: ValueId, name: String },

    #[error("plan has a buffer for %{}, which is not a planned value ({reason})", value.0)]
    UnexpectedBuffer { value: ValueId, reason: String },

    #[error("plan buffers are not sorted by value id: %{} follows %{}", value.0, previous.0)]
    Unsorted { value: ValueId, previous: ValueId },

    #[error("buffer of %{} '{name}' holds {planned} bytes, the value needs {needed}", value.0)]
    WrongSize {
        value: ValueId,
        name: String,
        planned: usize,
        needed: usize,
    },

    #[error(
        "buffer of %{} '{name}' lives [{first}, {last}] but the value is live [{need_first}, {need_last}]",
        value.0
    )]
    LifetimeTooShort {
        value: ValueId,
        name: String,
        first: usize,
        last: usize,
        need_first: usize,
        need_last: usize,
    },

    #[error("buffer of %{} '{name}' at offset {offset} is not a multiple of the alignment {alignment}", value.0)]
    Misaligned {
        value: ValueId,
        name: String,
        offset: usize,
        alignment: usize,
    },

    #[error("buffer of %{} '{name}' ends past the arena's {arena_bytes} bytes (offset {offset}, {bytes} bytes)", value.0)]
    OutsideArena {
        value: ValueId,
        name: String,
        offset: usize,
        bytes: usize,
        arena_bytes: usize,
    },

    #[error("buffer of %{} '{name}' claims to alias %{}, which is not legal: {reason}", value.0, root.0)]
    IllegalAlias {
        value: ValueId,
        name: String,
        root: ValueId,
        reason: String,
    },

    #[error(
        "buffers of %{} '{a_name}' and %{} '{b_name}' overlap in memory and in lifetime",
        a.0,
        b.0
    )]
    Overlap {
        a: ValueId,
        a_name: String,
        b: ValueId,
        b_name: String,
    },

    #[error("lower bound {lower_bound} exceeds the arena's {arena_bytes} bytes")]
    LowerBoundAboveArena {
        lower_bound: usize,
        arena_bytes: usize,
    },
}
