//! What tuning a task comes to: its result and why it stopped getting
//! trials. Shared by the driver, the searches and the progress callbacks.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Why a task stopped getting trials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// Every config of the space was measured.
    Exhausted,
    /// It reached `trials_per_task`.
    TrialCap,
    /// Its last trials stopped improving it (`early_stopping`).
    EarlyStopped,
    /// The run's time or trial budget ran out first.
    Budget,
    /// [`Progress::should_stop`] asked to stop (e.g. Ctrl-C).
    Stopped,
    /// The measurer returned no result for a whole round: something beyond
    /// one candidate is broken, so the task gets no more rounds.
    NoResults,
}

impl fmt::Display for FinishReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FinishReason::Exhausted => "space exhausted",
            FinishReason::TrialCap => "trial cap",
            FinishReason::EarlyStopped => "early stop",
            FinishReason::Budget => "budget",
            FinishReason::Stopped => "stopped",
            FinishReason::NoResults => "no results",
        })
    }
}

/// What tuning found for one task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskResult {
    /// `TaskKey::hash_hex()`.
    pub task: String,
    pub op: String,
    pub weight: usize,
    /// Index, config and median of the best successful config.
    pub best: Option<usize>,
    pub best_config: Option<serde_json::Value>,
    pub best_us: Option<f64>,
    /// The heuristic default's median (`None`: it failed or was not measured).
    pub default_us: Option<f64>,
    /// The best known before this run (from resumed records).
    pub resumed_best_us: Option<f64>,
    /// Trials in all, those resumed from records, and failures among them.
    pub trials: usize,
    pub resumed: usize,
    pub failures: usize,
    pub space_size: usize,
    pub exhaustive: bool,
    pub finish: FinishReason,
}
