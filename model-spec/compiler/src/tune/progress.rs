//! Progress callbacks: the CLI draws its indicatif bars from these; tests
//! and scripts pass [`NoProgress`].

pub use super::outcome::{FinishReason, TaskResult};
use super::space::TaskSpace;
use std::time::Duration;

/// State after one round of one task.
#[derive(Debug, Clone)]
pub struct BatchUpdate<'a> {
    /// Index of the task in the `spaces` given to [`super::tune`].
    pub task: usize,
    pub space: &'a TaskSpace,
    /// Trials of this task so far (resumed ones included).
    pub task_trials: usize,
    /// Most trials this task can get (its cap or its space, if smaller).
    pub task_limit: usize,
    /// Its best median so far and the default's, µs.
    pub best_us: Option<f64>,
    pub default_us: Option<f64>,
    /// Failures in this round.
    pub batch_failures: usize,
    /// New trials in this run, all tasks.
    pub total_trials: usize,
    pub elapsed: Duration,
    pub budget: Duration,
    /// Tasks that will get no more trials.
    pub tasks_finished: usize,
    /// Σ weight × current best over the tasks measured so far, µs.
    pub estimate_us: f64,
}

/// Receives the tuner's progress. Every method has a do-nothing default.
pub trait Progress {
    /// Before the first round of task `task`.
    fn task_started(&mut self, _task: usize, _space: &TaskSpace) {}
    /// After each round.
    fn trial_batch_done(&mut self, _update: &BatchUpdate) {}
    /// When task `task` gets no more trials (also at the end of the run for
    /// tasks the budget cut short).
    fn task_finished(&mut self, _task: usize, _space: &TaskSpace, _result: &TaskResult) {}
    /// Polled before each round; `true` ends the run (what is measured is
    /// kept and reported).
    fn should_stop(&mut self) -> bool {
        false
    }
}

/// Reports nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {}
