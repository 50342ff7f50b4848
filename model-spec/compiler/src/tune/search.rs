//! One task's search strategy (generate / notify).
//!
//! - **Exhaustive** when the space has at most `exhaustive_threshold`
//!   configs: the default first, then by prior, then in space order.
//! - **Guided** otherwise. The first round is the default, the configs the
//!   model ranks best (the analytic prior until measurements exist; the
//!   shared model once other tasks of the template were measured) and an
//!   eighth at random for diversity. Every later round pools
//!   - local moves: one and two [`ConfigTable::neighbours`] steps from the
//!     eight best measured configs,
//!   - crossovers of pairs of them (fields taken from either parent),
//!   - the configs the model ranks best over the whole unmeasured space,
//!
//!   ranks the pool by the lower confidence bound `mean − κ·spread` of the
//!   predicted `ln(µs)`, takes the top, and fills an `ε` share of the round
//!   with random local moves (epsilon-greedy). Measured configs are never
//!   proposed again.
//! - **Early stopping**: a guided task stops when its last `n` trials
//!   improved its best by less than `min_improvement`.
//!
//! Every random choice comes from the task's own stream of the run's seed.

use super::cost_model::CostModel;
use super::options::TuneOptions;
use super::outcome::FinishReason;
use super::rng::Rng;
use super::space::{ConfigTable, TaskSpace};
use std::collections::HashSet;

/// Measured configs the local search starts from.
const PARENTS: usize = 8;
/// Random crossovers tried per pair of parents.
const CROSSES_PER_PAIR: usize = 2;
/// Globally ranked configs added to the pool, per slot of the round.
const GLOBAL_PER_SLOT: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Unmeasured,
    Ok(f64),
    Failed,
    /// Asked for but not returned by the measurer: not proposed again.
    Lost,
}

/// What the search knows about one task.
#[derive(Debug, Clone)]
pub(crate) struct TaskSearch {
    pub table: ConfigTable,
    state: Vec<State>,
    /// `(config, median µs or None for a failure)` in measurement order,
    /// resumed records first.
    pub history: Vec<(usize, Option<f64>)>,
    pub resumed: usize,
    pub failures: usize,
    best: Option<(usize, f64)>,
    /// Best median after each trial of `history` (∞ before a success).
    best_trace: Vec<f64>,
    unmeasured: usize,
    pub exhaustive: bool,
    pub finished: Option<FinishReason>,
    /// The trial cap is `trials_per_task` times this (see
    /// [`TaskSearch::grow_cap`]).
    cap_scale: usize,
    rng: Rng,
}

impl TaskSearch {
    pub fn new(space: &TaskSpace, options: &TuneOptions, stream: u64) -> TaskSearch {
        let table = ConfigTable::new(&space.configs);
        TaskSearch {
            state: vec![State::Unmeasured; space.configs.len()],
            history: Vec::new(),
            resumed: 0,
            failures: 0,
            best: None,
            best_trace: Vec::new(),
            unmeasured: space.configs.len(),
            exhaustive: space.configs.len() <= options.exhaustive_limit(),
            finished: None,
            cap_scale: 1,
            rng: Rng::fork(options.seed, stream),
            table,
        }
    }

    pub fn trials(&self) -> usize {
        self.history.len()
    }

    pub fn best(&self) -> Option<(usize, f64)> {
        self.best
    }

    /// Best median after the first `t` trials.
    pub fn best_after(&self, t: usize) -> Option<f64> {
        t.checked_sub(1)
            .and_then(|i| self.best_trace.get(i))
            .copied()
            .filter(|v| v.is_finite())
    }

    /// Every successful measurement `(config, µs)`, in measurement order.
    pub fn successes(&self) -> Vec<(usize, f64)> {
        self.history
            .iter()
            .filter_map(|&(i, us)| us.map(|us| (i, us)))
            .collect()
    }

    pub fn measured_us(&self, i: usize) -> Option<f64> {
        match self.state.get(i) {
            Some(State::Ok(us)) => Some(*us),
            _ => None,
        }
    }

    pub fn is_measured(&self, i: usize) -> bool {
        self.state.get(i).is_some_and(|s| *s != State::Unmeasured)
    }

    /// Most trials this task can get.
    pub fn limit(&self, space: &TaskSpace, options: &TuneOptions) -> usize {
        if self.exhaustive {
            space.configs.len()
        } else {
            (options.trials_per_task * self.cap_scale).min(space.configs.len())
        }
    }

    /// A task stopped by its trial cap searches on with the cap doubled;
    /// `false` (and no change) for a task running or stopped otherwise.
    pub fn grow_cap(&mut self) -> bool {
        if self.finished != Some(FinishReason::TrialCap) {
            return false;
        }
        self.cap_scale *= 2;
        self.finished = None;
        true
    }

    /// Records the outcome of config `i` (`None`: it failed). A config
    /// already measured is ignored.
    pub fn notify(&mut self, i: usize, us: Option<f64>) {
        if self.is_measured(i) || i >= self.state.len() {
            return;
        }
        self.unmeasured -= 1;
        self.state[i] = match us {
            Some(us) => State::Ok(us),
            None => {
                self.failures += 1;
                State::Failed
            }
        };
        if let Some(us) = us {
            if self.best.is_none_or(|(_, b)| us < b) {
                self.best = Some((i, us));
            }
        }
        self.history.push((i, us));
        self.best_trace
            .push(self.best.map_or(f64::INFINITY, |b| b.1));
    }

    /// A measurement from an earlier run.
    pub fn resume(&mut self, i: usize, us: Option<f64>) {
        let before = self.trials();
        self.notify(i, us);
        self.resumed += self.trials() - before;
    }

    /// Config `i` was requested but the measurer returned nothing for it.
    pub fn lose(&mut self, i: usize) {
        if !self.is_measured(i) && i < self.state.len() {
            self.unmeasured -= 1;
            self.state[i] = State::Lost;
        }
    }

    /// Decides whether the task is done; returns the reason once.
    pub fn check_finished(
        &mut self,
        space: &TaskSpace,
        options: &TuneOptions,
    ) -> Option<FinishReason> {
        if self.finished.is_some() {
            return None;
        }
        let reason = if self.unmeasured == 0 {
            Some(FinishReason::Exhausted)
        } else if self.trials() >= self.limit(space, options) {
            Some(FinishReason::TrialCap)
        } else if self.stalled(options) {
            Some(FinishReason::EarlyStopped)
        } else {
            None
        };
        self.finished = reason;
        reason
    }

    /// True when the last `early_stopping` trials (after the first round)
    /// improved the best by less than `min_improvement`. A resumed task
    /// first gets one window of trials of this run: the records may come
    /// from a smaller space (a template that gained configs) or a stopped
    /// run, and `--resume` with a larger trial cap asks for more search.
    fn stalled(&self, options: &TuneOptions) -> bool {
        let Some(window) = options.early_stopping.filter(|&w| w > 0) else {
            return false;
        };
        let t = self.trials();
        if self.exhaustive || t < window + options.batch() || t - self.resumed < window {
            return false;
        }
        let (before, now) = (self.best_trace[t - 1 - window], self.best_trace[t - 1]);
        now.is_finite() && before.is_finite() && before / now - 1.0 < options.min_improvement
    }

    /// The next round: up to `n` unmeasured configs.
    pub fn propose(
        &mut self,
        space: &TaskSpace,
        slot: usize,
        model: &mut CostModel,
        n: usize,
        options: &TuneOptions,
    ) -> Vec<usize> {
        let n = n.min(self.unmeasured);
        let mut round = Round::new(n);
        // The default first: the report compares every task against it.
        round.take(self, space.default);
        if self.exhaustive {
            for i in self.by_prediction(space, slot, model) {
                round.take(self, i);
            }
        } else if self.trials() == 0 {
            let random = if n >= 4 { (n / 8).max(1) } else { 0 };
            for i in self.by_prediction(space, slot, model) {
                if round.len() >= n - random {
                    break;
                }
                round.take(self, i);
            }
        } else {
            self.guided(space, slot, model, options, &mut round);
        }
        self.fill_random(&mut round, None);
        round.picked
    }

    /// Unmeasured configs by predicted time (the prior when the model is
    /// untrained), unpredictable ones last, ties by index.
    fn by_prediction(&self, space: &TaskSpace, slot: usize, model: &mut CostModel) -> Vec<usize> {
        let mut scored: Vec<(f64, usize)> = (0..space.configs.len())
            .filter(|&i| !self.is_measured(i))
            .map(|i| {
                let mean = model
                    .predict(slot, space, &self.table, i, false)
                    .map_or(f64::INFINITY, |p| p.mean);
                (mean, i)
            })
            .collect();
        scored.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        scored.into_iter().map(|(_, i)| i).collect()
    }

    fn guided(
        &mut self,
        space: &TaskSpace,
        slot: usize,
        model: &mut CostModel,
        options: &TuneOptions,
        round: &mut Round,
    ) {
        let n = round.want;
        let mut parents: Vec<(f64, usize)> = self
            .state
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                State::Ok(us) => Some((*us, i)),
                _ => None,
            })
            .collect();
        parents.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        parents.truncate(PARENTS);

        // Local moves (one and two steps) and crossovers of the parents.
        let mut local: Vec<usize> = Vec::new();
        let mut seen: HashSet<usize> = HashSet::new();
        for &(_, p) in &parents {
            for a in self.table.neighbours(p) {
                if seen.insert(a) {
                    local.push(a);
                }
                for b in self.table.neighbours(a) {
                    if seen.insert(b) {
                        local.push(b);
                    }
                }
            }
        }
        for (x, &(_, a)) in parents.iter().enumerate() {
            for &(_, b) in &parents[x + 1..] {
                for _ in 0..CROSSES_PER_PAIR {
                    let mask = self.rng.next_u64();
                    if let Some(c) = self.table.cross(a, b, |f| (mask >> (f % 64)) & 1 == 1) {
                        if seen.insert(c) {
                            local.push(c);
                        }
                    }
                }
            }
        }
        local.retain(|&i| !self.is_measured(i));

        // The pool: local moves plus the model's global favourites.
        let mut pool = local.clone();
        for i in self
            .by_prediction(space, slot, model)
            .into_iter()
            .take(GLOBAL_PER_SLOT * n)
        {
            if seen.insert(i) {
                pool.push(i);
            }
        }
        let mut scored: Vec<(f64, usize)> = pool
            .iter()
            .map(|&i| {
                let score = model
                    .predict(slot, space, &self.table, i, true)
                    .map_or(f64::INFINITY, |p| p.mean - options.kappa * p.spread);
                (score, i)
            })
            .collect();
        scored.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));

        let explore = ((options.epsilon.clamp(0.0, 1.0) * n as f64).round() as usize).min(n);
        let mut ranked = scored.iter().map(|&(_, i)| i);
        while round.len() < n - explore {
            match ranked.next() {
                Some(i) => round.take(self, i),
                None => break,
            }
        }
        self.fill_random(round, Some(&local));
        // A small pool: the rest of the ranking, then anything unmeasured.
        for i in ranked {
            round.take(self, i);
        }
    }

    /// Fills the round with random unmeasured configs, from `among` first
    /// when given.
    fn fill_random(&mut self, round: &mut Round, among: Option<&[usize]>) {
        if let Some(among) = among {
            let mut rest: Vec<usize> = among
                .iter()
                .copied()
                .filter(|&i| !self.is_measured(i) && !round.has(i))
                .collect();
            while round.len() < round.want && !rest.is_empty() {
                let i = rest.swap_remove(self.rng.below(rest.len()));
                round.take(self, i);
            }
        }
        if round.len() < round.want {
            let mut rest: Vec<usize> = (0..self.state.len())
                .filter(|&i| !self.is_measured(i) && !round.has(i))
                .collect();
            while round.len() < round.want && !rest.is_empty() {
                let i = rest.swap_remove(self.rng.below(rest.len()));
                round.take(self, i);
            }
        }
    }
}

/// The configs chosen for one round, without repeats.
struct Round {
    want: usize,
    picked: Vec<usize>,
    set: HashSet<usize>,
}

impl Round {
    fn new(want: usize) -> Round {
        Round {
            want,
            picked: Vec::with_capacity(want),
            set: HashSet::new(),
        }
    }

    fn len(&self) -> usize {
        self.picked.len()
    }

    fn has(&self, i: usize) -> bool {
        self.set.contains(&i)
    }

    fn take(&mut self, search: &TaskSearch, i: usize) {
        if self.picked.len() < self.want && !search.is_measured(i) && self.set.insert(i) {
            self.picked.push(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::features::FeatureSchema;
    use serde_json::json;

    fn space(n: usize) -> TaskSpace {
        TaskSpace {
            task: "t".into(),
            op: "Op".into(),
            key: "k".into(),
            template: "x/1".into(),
            weight: 1,
            flops: 0,
            bytes: 0,
            configs: (0..n)
                .map(|i| json!({ "a": i % 10, "b": i / 10 }))
                .collect(),
            // The prior prefers large a and small b.
            prior_ns: (0..n)
                .map(|i| Some(1000.0 * (1.0 + (i / 10) as f64 - 0.05 * (i % 10) as f64)))
                .collect(),
            shape_features: vec![],
            default: 5,
        }
    }

    fn model(space: &TaskSpace, search: &TaskSearch) -> CostModel {
        CostModel::new(FeatureSchema::new(&[(space, &search.table)]))
    }

    #[test]
    fn first_round_is_default_then_prior_then_random() {
        let s = space(100);
        let options = TuneOptions {
            batch_size: 16,
            ..TuneOptions::default()
        };
        let mut search = TaskSearch::new(&s, &options, 0);
        assert!(!search.exhaustive);
        let mut m = model(&s, &search);
        let round = search.propose(&s, 0, &mut m, 16, &options);
        assert_eq!(round.len(), 16);
        assert_eq!(round[0], 5);
        // The best-by-prior configs are 9, 8, 7, … (b = 0, a large).
        assert_eq!(&round[1..6], &[9, 8, 7, 6, 4]);
        let unique: HashSet<usize> = round.iter().copied().collect();
        assert_eq!(unique.len(), 16);
    }

    #[test]
    fn measured_configs_are_never_proposed_again_and_the_space_runs_out() {
        let s = space(40);
        let options = TuneOptions {
            trials_per_task: 1000,
            exhaustive_threshold: Some(0),
            early_stopping: None,
            ..TuneOptions::default()
        };
        let mut search = TaskSearch::new(&s, &options, 0);
        let mut m = model(&s, &search);
        let mut all = HashSet::new();
        for _ in 0..10 {
            let round = search.propose(&s, 0, &mut m, 16, &options);
            for &i in &round {
                assert!(all.insert(i), "config {i} proposed twice");
                let us = s.prior_us(i).unwrap();
                search.notify(i, Some(us));
                m.update(0, &s, &search.table, i, us);
            }
            m.refit();
            if search.check_finished(&s, &options).is_some() {
                break;
            }
        }
        assert_eq!(all.len(), 40);
        assert_eq!(search.finished, Some(FinishReason::Exhausted));
        assert_eq!(search.best().map(|b| b.0), Some(9));
    }

    /// Rounds of 4, early stopping after 8 trials without a gain, guided.
    fn windowed() -> TuneOptions {
        TuneOptions {
            batch_size: 4,
            early_stopping: Some(8),
            exhaustive_threshold: Some(0),
            ..TuneOptions::default()
        }
    }

    #[test]
    fn early_stopping_waits_for_the_window_after_the_first_round() {
        let (s, options) = (space(100), windowed());
        let mut search = TaskSearch::new(&s, &options, 0);
        for i in 0..11 {
            search.notify(i, Some(10.0));
            assert_eq!(search.check_finished(&s, &options), None, "trial {i}");
        }
        search.notify(11, Some(10.0));
        assert_eq!(
            search.check_finished(&s, &options),
            Some(FinishReason::EarlyStopped)
        );
    }

    #[test]
    fn a_resumed_task_gets_a_window_of_fresh_trials_before_it_stops_early() {
        let (s, options) = (space(100), windowed());
        let mut search = TaskSearch::new(&s, &options, 0);
        // Twenty flat records: stalled had they been measured in this run.
        for i in 0..20 {
            search.resume(i, Some(10.0));
        }
        for i in 20..27 {
            assert_eq!(search.check_finished(&s, &options), None, "trial {i}");
            search.notify(i, Some(10.0));
        }
        assert_eq!(search.check_finished(&s, &options), None);
        search.notify(27, Some(10.0));
        assert_eq!(
            search.check_finished(&s, &options),
            Some(FinishReason::EarlyStopped)
        );
    }

    #[test]
    fn lost_and_failed_configs_are_not_proposed() {
        let s = space(20);
        let options = TuneOptions {
            exhaustive_threshold: Some(100),
            ..TuneOptions::default()
        };
        let mut search = TaskSearch::new(&s, &options, 0);
        assert!(search.exhaustive);
        search.lose(5);
        search.notify(9, None);
        let mut m = model(&s, &search);
        let round = search.propose(&s, 0, &mut m, 100, &options);
        assert_eq!(round.len(), 18);
        assert!(!round.contains(&5) && !round.contains(&9));
        assert_eq!(search.failures, 1);
        assert_eq!(search.trials(), 1);
    }
}
