//! The auto-tuner's CPU side: search, cost model, task scheduler, records
//! and report. Measuring needs a GPU, so it sits behind [`Measurer`], which
//! the `aotune tune` command implements with NVRTC and CUDA events and the
//! tests implement with a synthetic latency function.
//!
//! The roles are separate types, as in TVM's meta_schedule:
//! - search space: [`TaskSpace`] (one task's valid configs as JSON, built by
//!   the caller from the template's `KernelConfig::search_space`) and the
//!   field table the local search moves in (`space.rs`);
//! - search strategy: `search.rs`, exhaustive for small spaces, otherwise
//!   prior-ranked start then rounds of model-guided local/evolutionary
//!   search with exploration, and early stopping (generate / notify);
//! - cost model: `cost_model.rs`, ridge regression on `features.rs` (update /
//!   predict), one model per template shared by its tasks plus a per-task
//!   correction;
//! - runner and builder: [`Measurer`] (the caller's);
//! - database: [`TuneRecord`]s in `*.records.jsonl` ([`RecordSink`],
//!   append-only; [`read_records`] for `--resume`) and
//!   [`best_log`] (the committed `*.best.json`);
//! - task scheduler: `scheduler.rs`, Ansor's gradient scheduler, simplified;
//! - [`tune`] runs them under a budget and reports through [`Progress`];
//!   [`Report`] is the closing table.

mod best;
mod cost_model;
mod driver;
mod features;
mod linalg;
mod measure;
mod options;
mod outcome;
mod progress;
mod records;
mod report;
mod rng;
mod scheduler;
mod search;
mod space;

#[cfg(test)]
mod sim;
#[cfg(test)]
mod sim_tests;

pub use best::{best_log, best_record, merge_into};
pub use driver::{tune, TaskResult, TracePoint, TuneError, TuneOutcome};
pub use measure::{FailStage, Measurer, Trial, TrialOutcome};
pub use options::TuneOptions;
pub use progress::{BatchUpdate, FinishReason, NoProgress, Progress};
pub use records::{
    parse_records, read_records, RecordFailure, RecordSink, RecordsError, RunSetup, TuneRecord,
    RECORD_FORMAT,
};
pub use report::{Convergence, Report, ReportRow, CONVERGED_WITHIN};
pub use space::{SpaceError, TaskSpace};
