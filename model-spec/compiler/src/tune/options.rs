//! The tuner's knobs, one struct (the CLI fills it from its flags; the report
//! prints the ones that shape the result).

use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub struct TuneOptions {
    /// Wall time for the whole run; no new round starts after it.
    pub budget: Duration,
    /// Most trials per task, counting those resumed from earlier records
    /// (a space small enough for exhaustive search is measured whole).
    pub trials_per_task: usize,
    /// When no task is left to search and the budget has time left, the
    /// tasks stopped by their trial cap search on with it doubled (again
    /// and again), until the budget, `max_trials`, early stopping or their
    /// space ends them: the budget, not the cap, bounds the run.
    pub grow_caps: bool,
    /// Most new trials in this run, over all tasks (`None`: no limit). A
    /// deterministic budget for comparisons, where wall time is not.
    pub max_trials: Option<usize>,
    /// Candidates measured per round (one [`super::Measurer::measure`] call).
    pub batch_size: usize,
    /// Spaces with at most this many configs are measured exhaustively
    /// (`None`: `trials_per_task`).
    pub exhaustive_threshold: Option<usize>,
    /// Stop a task when its last `n` trials improved its best by less than
    /// `min_improvement` (`None`: never).
    pub early_stopping: Option<usize>,
    /// Relative improvement that counts, for early stopping (0.01 = 1 %).
    pub min_improvement: f64,
    /// Share of each guided round drawn at random around the best
    /// (epsilon-greedy exploration).
    pub epsilon: f64,
    /// Weight of the model's spread in the ranking `mean − kappa·spread`
    /// (lower confidence bound: optimism about uncertain configs).
    pub kappa: f64,
    /// Seed of every random choice: equal seeds, equal runs.
    pub seed: u64,
}

impl Default for TuneOptions {
    /// Five minutes, 64 trials per task in rounds of 16, early stop after
    /// 48 trials without a 1 % gain (so with the default cap a task stops
    /// early only when resumed or given a larger cap: a shorter window cut
    /// off tasks whose first rounds had landed in a poor region).
    fn default() -> Self {
        TuneOptions {
            budget: Duration::from_secs(300),
            trials_per_task: 64,
            grow_caps: false,
            max_trials: None,
            batch_size: 16,
            exhaustive_threshold: None,
            early_stopping: Some(48),
            min_improvement: 0.01,
            epsilon: 0.125,
            kappa: 1.0,
            seed: 0,
        }
    }
}

impl TuneOptions {
    pub(crate) fn exhaustive_limit(&self) -> usize {
        self.exhaustive_threshold.unwrap_or(self.trials_per_task)
    }

    pub(crate) fn batch(&self) -> usize {
        self.batch_size.max(1)
    }
}
