//! Messages between the tuner and its measuring worker process: one JSON
//! object per line, requests on the worker's stdin, replies on its stdout.
//!
//! A session is `Setup` (buffers for one task's kernel arguments) then any
//! number of `Measure` (a kernel) and `MeasureMatmul` (the task through
//! cuBLASLt) requests. The first `Measure` of a session has
//! `role: Reference`: its output becomes what later candidates are checked
//! against before they are timed.

use serde::{Deserialize, Serialize};

/// Storage type of a kernel argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArgType {
    F32,
    F16,
    Bf16,
}

impl ArgType {
    pub fn size(self) -> usize {
        match self {
            ArgType::F32 => 4,
            ArgType::F16 | ArgType::Bf16 => 2,
        }
    }
}

impl From<aotune_compiler::ir::DType> for ArgType {
    fn from(d: aotune_compiler::ir::DType) -> Self {
        match d {
            aotune_compiler::ir::DType::F32 => ArgType::F32,
            aotune_compiler::ir::DType::F16 => ArgType::F16,
            aotune_compiler::ir::DType::BF16 => ArgType::Bf16,
        }
    }
}

/// One pointer argument: inputs are filled with deterministic values in
/// [-1, 1); the output is poisoned (all bits set: NaN) before each checked
/// launch so a kernel that skips writes is caught.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArgSpec {
    pub bytes: usize,
    pub dtype: ArgType,
    pub output: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Its output is kept as the reference for the session.
    Reference,
    /// Checked against the reference, then timed.
    Candidate,
}

/// How long to time a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Repeats {
    /// Untimed launches first.
    pub warmup: u32,
    pub min: u32,
    pub max: u32,
    /// Keep repeating (up to `max`) until the timed launches add up to this.
    pub min_total_ms: f64,
}

impl Default for Repeats {
    fn default() -> Self {
        Repeats {
            warmup: 3,
            min: 10,
            max: 200,
            min_total_ms: 2.0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Request {
    Setup {
        args: Vec<ArgSpec>,
        seed: u64,
        /// Bytes written before each repeat to evict the L2 cache (0: none).
        flush_bytes: usize,
        /// Launches per timed repeat: 1 is a plain launch between two
        /// events; more are captured back to back in one CUDA graph, timed
        /// as a whole and divided by the count.
        chain: u32,
        /// A chain's launches after the first are programmatic dependent
        /// launches.
        programmatic: bool,
    },
    Measure {
        cubin: std::path::PathBuf,
        symbol: String,
        grid: [u32; 3],
        block: [u32; 3],
        smem_bytes: u32,
        role: Role,
        /// Largest relative L2 distance from the reference accepted.
        tolerance: f64,
        repeats: Repeats,
    },
    /// The session's task (a Dense node) run by cuBLASLt with `matmul`'s
    /// heuristic rank instead of a kernel, on the same buffers: checked
    /// against the reference, then timed like a kernel.
    MeasureMatmul {
        matmul: aotune_compiler::artifact::LibraryMatmul,
        role: Role,
        tolerance: f64,
        repeats: Repeats,
    },
}

/// What went wrong measuring one candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// Module load or launch refused (e.g. too many resources).
    Launch,
    /// Faulted while running (illegal address, misaligned access, …).
    Fault,
    /// Ran, but its output differs from the reference.
    WrongResult,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    Ready {
        gpu: String,
        sm: String,
        driver: String,
    },
    Measured {
        repeats_us: Vec<f64>,
        /// Relative L2 distance from the reference (0 for the reference).
        rel_l2: f64,
    },
    Failed {
        kind: Failure,
        reason: String,
        /// The worker's CUDA context is unusable: it exits after replying.
        fatal: bool,
    },
    /// A request the worker could not act on (bad JSON, no setup, …).
    Error { message: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_as_single_lines() {
        let req = Request::Measure {
            cubin: "/tmp/x.cubin".into(),
            symbol: "conv_1".into(),
            grid: [1, 2, 3],
            block: [128, 1, 1],
            smem_bytes: 4096,
            role: Role::Candidate,
            tolerance: 1e-2,
            repeats: Repeats::default(),
        };
        let line = serde_json::to_string(&req).expect("serializes");
        assert!(!line.contains('\n'));
        assert_eq!(serde_json::from_str::<Request>(&line).expect("parses"), req);
        let reply = Reply::Failed {
            kind: Failure::Fault,
            reason: "CUDA_ERROR_ILLEGAL_ADDRESS".into(),
            fatal: true,
        };
        let line = serde_json::to_string(&reply).expect("serializes");
        assert_eq!(serde_json::from_str::<Reply>(&line).expect("parses"), reply);
        let req = Request::MeasureMatmul {
            matmul: aotune_compiler::artifact::LibraryMatmul {
                m: 197,
                n: 2304,
                k: 768,
                dtype: aotune_compiler::ir::DType::F16,
                bias: true,
                residual: false,
                activation: aotune_compiler::artifact::MatmulActivation::Gelu,
                algo: 2,
            },
            role: Role::Candidate,
            tolerance: 1e-2,
            repeats: Repeats::default(),
        };
        let line = serde_json::to_string(&req).expect("serializes");
        assert!(!line.contains('\n'));
        assert_eq!(serde_json::from_str::<Request>(&line).expect("parses"), req);
    }
}
