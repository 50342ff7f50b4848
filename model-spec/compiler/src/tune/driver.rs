//! [`tune`]: one run over a model's tasks. It checks the spaces, seeds each
//! task's search (and its template's cost model) from earlier records, gives
//! every task a warm-up round (in two passes: a short one for every task,
//! heaviest first, then the rest), then hands rounds out by the scheduler's
//! expected gain until the time or trial budget is spent, every task is done
//! or [`Progress::should_stop`] says so. Each measured candidate is appended
//! to the records before the next round starts.

use super::cost_model::CostModel;
use super::features::FeatureSchema;
use super::measure::{Measurer, Trial};
use super::options::TuneOptions;
use super::outcome::FinishReason;
pub use super::outcome::TaskResult;
use super::progress::{BatchUpdate, Progress};
use super::records::{RecordSink, RecordsError, TuneRecord};
use super::scheduler::{self, TaskView};
use super::search::TaskSearch;
use super::space::{SpaceError, TaskSpace};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

/// Configs in each task's first warm-up pass (at most the round size). On
/// the H200 (session 6) a 1-minute batch-1 run measured 640 candidates in
/// rounds of 32 and, with whole first rounds in graph order, reached 20 of
/// ResNet-50's 26 tasks; in the simulated tuner the same budget left 7 of
/// 27 unreached (4× the budget then 39.5% faster) and reaches all with this
/// pass (5.2%; `a_budget_short_of_a_round_per_task_still_reaches_every_task`).
const WARMUP_ROUND: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    #[error(transparent)]
    Space(#[from] SpaceError),
    #[error(transparent)]
    Records(#[from] RecordsError),
}

/// The state after one round, for convergence figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TracePoint {
    /// New trials in this run so far, all tasks.
    pub trials: usize,
    pub elapsed: Duration,
    /// The task of the round and its best median after it.
    pub task: usize,
    pub best_us: Option<f64>,
}

/// Everything a run produced.
#[derive(Debug, Clone)]
pub struct TuneOutcome {
    /// One per task, in the order of the spaces given.
    pub tasks: Vec<TaskResult>,
    /// The records written in this run (the `best.json` is built from these
    /// plus the resumed ones: [`super::best_log`]).
    pub records: Vec<TuneRecord>,
    pub trace: Vec<TracePoint>,
    /// New trials in this run.
    pub trials: usize,
    pub elapsed: Duration,
    /// What the run skipped or ignored, one line each.
    pub notes: Vec<String>,
}

/// Tunes `spaces`: see the module documentation. `previous` are records of
/// earlier runs (`--resume`): those of the same task, template and target as
/// `records.setup()` count as measured (towards `trials_per_task` too) and
/// seed the search; the others are ignored, with a note.
pub fn tune(
    spaces: &[TaskSpace],
    measurer: &mut dyn Measurer,
    records: &mut RecordSink,
    previous: &[TuneRecord],
    options: &TuneOptions,
    progress: &mut dyn Progress,
) -> Result<TuneOutcome, TuneError> {
    let start = Instant::now();
    let mut seen = HashSet::new();
    for s in spaces {
        s.check()?;
        if !seen.insert(s.task.as_str()) {
            return Err(SpaceError::DuplicateTask {
                task: s.task.clone(),
                op: s.op.clone(),
            }
            .into());
        }
    }
    let mut run = Run::new(spaces, options);
    run.resume(previous, records);
    for (i, space) in spaces.iter().enumerate() {
        if run.searches[i].check_finished(space, options).is_some() {
            run.started[i] = true;
            progress.task_finished(i, space, &run.result(i));
        }
    }

    // Warm-up: every task's first round in two passes — a short one for
    // every task, heaviest first (weight × its default's modelled
    // latency), so a small budget still reaches every task; then the rest
    // of each first round — before rounds go by expected gain.
    let mut stop = None;
    let mut order: Vec<usize> = (0..spaces.len()).collect();
    order.sort_by(|&a, &b| {
        let cost = |i: usize| {
            let v = run.view(i);
            v.weight as f64 * v.fallback_us
        };
        cost(b).total_cmp(&cost(a))
    });
    let short = options.batch().min(WARMUP_ROUND);
    'warmup: for size in [short, options.batch() - short] {
        for &i in &order {
            if size == 0 || run.searches[i].finished.is_some() {
                continue;
            }
            stop = run.stop_reason(start, progress);
            if stop.is_some() {
                break 'warmup;
            }
            run.round(i, size, measurer, records, progress, start)?;
        }
    }
    while stop.is_none() {
        stop = run.stop_reason(start, progress);
        if stop.is_some() {
            break;
        }
        let pick = scheduler::pick(
            (0..spaces.len())
                .filter(|&i| run.searches[i].finished.is_none())
                .map(|i| (i, run.view(i))),
        );
        match pick {
            Some(i) => run.round(i, options.batch(), measurer, records, progress, start)?,
            None if options.grow_caps && run.grow_caps() => {}
            None => break,
        }
    }
    let reason = stop.unwrap_or(FinishReason::Budget);
    for (i, space) in spaces.iter().enumerate() {
        if run.searches[i].finished.is_none() {
            run.searches[i].finished = Some(reason);
            progress.task_finished(i, space, &run.result(i));
        }
    }
    let elapsed = start.elapsed();
    let capped = run
        .searches
        .iter()
        .filter(|s| s.finished == Some(FinishReason::TrialCap))
        .count();
    if let Some(note) = unused_budget_note(options, elapsed, stop.is_some(), capped) {
        run.notes.push(note);
    }
    Ok(TuneOutcome {
        tasks: (0..spaces.len()).map(|i| run.result(i)).collect(),
        records: run.new_records,
        trace: run.trace,
        trials: run.total,
        elapsed,
        notes: run.notes,
    })
}

/// `field=value` of every config field value in `space` that no config
/// `search` has measured holds, in the space's order.
fn unmeasured_values(space: &TaskSpace, search: &TaskSearch) -> Vec<String> {
    let pairs = |c: &serde_json::Value| -> Vec<String> {
        c.as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| match v.as_str() {
                Some(text) => format!("{k}={text}"),
                None => format!("{k}={v}"),
            })
            .collect()
    };
    let measured: HashSet<String> = space
        .configs
        .iter()
        .enumerate()
        .filter(|(i, _)| search.is_measured(*i))
        .flat_map(|(_, c)| pairs(c))
        .collect();
    let mut out: Vec<String> = Vec::new();
    for c in &space.configs {
        for p in pairs(c) {
            if !measured.contains(&p) && !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// Says so when the run ended well before its time budget because tasks
/// reached their trial cap (`stopped`: the budget, a trial limit or the
/// user ended it), since then a longer budget alone buys nothing.
fn unused_budget_note(
    options: &TuneOptions,
    elapsed: Duration,
    stopped: bool,
    capped: usize,
) -> Option<String> {
    let unused = options.budget.saturating_sub(elapsed);
    if stopped || capped == 0 || unused < options.budget / 10 {
        return None;
    }
    Some(format!(
        "finished after {:.0} s of the {:.0} s budget: {capped} task(s) reached the trial cap \
         ({} per task); raise --trials-per-task to spend the rest",
        elapsed.as_secs_f64(),
        options.budget.as_secs_f64(),
        options.trials_per_task
    ))
}

/// The run's state.
struct Run<'a> {
    spaces: &'a [TaskSpace],
    options: &'a TuneOptions,
    searches: Vec<TaskSearch>,
    models: Vec<CostModel>,
    /// Per task: its template group and its slot in the group's model.
    group_of: Vec<(usize, usize)>,
    started: Vec<bool>,
    resumed_best: Vec<Option<f64>>,
    new_records: Vec<TuneRecord>,
    trace: Vec<TracePoint>,
    total: usize,
    notes: Vec<String>,
}

impl<'a> Run<'a> {
    fn new(spaces: &'a [TaskSpace], options: &'a TuneOptions) -> Run<'a> {
        let searches: Vec<TaskSearch> = spaces
            .iter()
            .enumerate()
            .map(|(i, s)| TaskSearch::new(s, options, i as u64))
            .collect();
        let mut groups: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, s) in spaces.iter().enumerate() {
            groups.entry(s.template.as_str()).or_default().push(i);
        }
        let mut group_of = vec![(0, 0); spaces.len()];
        let mut models = Vec::with_capacity(groups.len());
        for (g, members) in groups.values().enumerate() {
            let pairs: Vec<(&TaskSpace, &_)> = members
                .iter()
                .map(|&i| (&spaces[i], &searches[i].table))
                .collect();
            models.push(CostModel::new(FeatureSchema::new(&pairs)));
            for (slot, &i) in members.iter().enumerate() {
                group_of[i] = (g, slot);
            }
        }
        Run {
            spaces,
            options,
            searches,
            models,
            group_of,
            started: vec![false; spaces.len()],
            resumed_best: vec![None; spaces.len()],
            new_records: Vec::new(),
            trace: Vec::new(),
            total: 0,
            notes: Vec::new(),
        }
    }

    /// Loads earlier measurements of the same task, template and target.
    fn resume(&mut self, previous: &[TuneRecord], sink: &RecordSink) {
        let by_task: HashMap<&str, usize> = self
            .spaces
            .iter()
            .enumerate()
            .map(|(i, s)| (s.task.as_str(), i))
            .collect();
        let target = &sink.setup().target;
        let (mut unknown, mut template, mut other_target, mut not_in_space) = (0, 0, 0, 0);
        for r in previous {
            let Some(&i) = by_task.get(r.task.as_str()) else {
                unknown += 1;
                continue;
            };
            let space = &self.spaces[i];
            if r.template != space.template {
                template += 1;
            } else if &r.target != target {
                other_target += 1;
            } else if let Some(c) = self.searches[i].table.find(&r.config) {
                let us = r.success_us();
                if !self.searches[i].is_measured(c) {
                    self.searches[i].resume(c, us);
                    if let Some(us) = us {
                        let (g, slot) = self.group_of[i];
                        self.models[g].update(slot, space, &self.searches[i].table, c, us);
                    }
                }
            } else {
                not_in_space += 1;
            }
        }
        for (count, what) in [
            (unknown, "are for tasks this model does not have"),
            (template, "are for another template version"),
            (
                other_target,
                "were measured on another target than this run's",
            ),
            (
                not_in_space,
                "hold configs outside the current search space",
            ),
        ] {
            if count > 0 {
                self.notes
                    .push(format!("{count} earlier records {what}: not resumed"));
            }
        }
        let resumed: usize = self.searches.iter().map(|s| s.resumed).sum();
        if resumed > 0 {
            self.notes.push(format!(
                "{resumed} earlier trials resumed: not measured again"
            ));
        }
        if let Some(note) = self.capped_with_unmeasured_values() {
            self.notes.push(note);
        }
        for m in &mut self.models {
            m.refit();
        }
        for (i, s) in self.searches.iter().enumerate() {
            self.resumed_best[i] = s.best().map(|b| b.1);
        }
    }

    /// Says so when resumed records already fill tasks' trial caps while
    /// their spaces hold config values no record measured (a template that
    /// gained a field value since, say): the run would never try those.
    fn capped_with_unmeasured_values(&self) -> Option<String> {
        let mut tasks = 0;
        let mut values: Vec<String> = Vec::new();
        for (space, search) in self.spaces.iter().zip(&self.searches) {
            let limit = search.limit(space, self.options);
            if search.resumed == 0 || search.resumed < limit || limit == space.configs.len() {
                continue;
            }
            let unmeasured = unmeasured_values(space, search);
            if !unmeasured.is_empty() {
                tasks += 1;
                for v in unmeasured {
                    if !values.contains(&v) {
                        values.push(v);
                    }
                }
            }
        }
        if tasks == 0 {
            return None;
        }
        let shown = values.len().min(4);
        Some(format!(
            "{tasks} task(s) start at their trial cap ({} per task) from the resumed records, \
             while their spaces hold config values no record measured ({}{}): raise \
             --trials-per-task to try them",
            self.options.trials_per_task,
            values[..shown].join(", "),
            if values.len() > shown { ", …" } else { "" }
        ))
    }

    fn stop_reason(&self, start: Instant, progress: &mut dyn Progress) -> Option<FinishReason> {
        if progress.should_stop() {
            return Some(FinishReason::Stopped);
        }
        let out_of_trials = self.options.max_trials.is_some_and(|m| self.total >= m);
        (start.elapsed() >= self.options.budget || out_of_trials).then_some(FinishReason::Budget)
    }

    /// Doubles the cap of every task it stopped ([`TuneOptions::grow_caps`]);
    /// `true` when one goes on.
    fn grow_caps(&mut self) -> bool {
        let mut grown = 0;
        for s in &mut self.searches {
            grown += usize::from(s.grow_cap());
        }
        grown > 0
    }

    /// The scheduler's view of task `i`.
    fn view(&self, i: usize) -> TaskView {
        let s = &self.searches[i];
        let t = s.trials();
        let window = (2 * self.options.batch()).min(t.saturating_sub(1));
        let fallback_us = self.spaces[i]
            .prior_us(self.spaces[i].default)
            .unwrap_or_else(|| {
                let known: Vec<f64> = self
                    .searches
                    .iter()
                    .filter_map(|s| s.best().map(|b| b.1))
                    .collect();
                if known.is_empty() {
                    1.0
                } else {
                    known.iter().sum::<f64>() / known.len() as f64
                }
            });
        TaskView {
            weight: self.spaces[i].weight,
            trials: t,
            best_now: s.best_after(t),
            best_before: (window > 0).then(|| s.best_after(t - window)).flatten(),
            window,
            fallback_us,
        }
    }

    /// One round of task `i` of at most `size` configs: propose, measure,
    /// record, learn.
    fn round(
        &mut self,
        i: usize,
        size: usize,
        measurer: &mut dyn Measurer,
        sink: &mut RecordSink,
        progress: &mut dyn Progress,
        start: Instant,
    ) -> Result<(), RecordsError> {
        let space = &self.spaces[i];
        if !self.started[i] {
            self.started[i] = true;
            progress.task_started(i, space);
        }
        let (g, slot) = self.group_of[i];
        let search = &mut self.searches[i];
        let mut n = size.min(
            search
                .limit(space, self.options)
                .saturating_sub(search.trials()),
        );
        if let Some(max) = self.options.max_trials {
            n = n.min(max.saturating_sub(self.total));
        }
        let model = &mut self.models[g];
        model.refit();
        model.refit_task(slot, space, &search.table, &search.successes());
        let configs = search.propose(space, slot, model, n, self.options);
        let trials = if configs.is_empty() {
            Vec::new()
        } else {
            measurer.measure(space, &configs)
        };
        let mut by_config: HashMap<usize, Trial> = HashMap::new();
        let mut unasked = 0;
        for t in trials {
            if configs.contains(&t.config) && !by_config.contains_key(&t.config) {
                by_config.insert(t.config, t);
            } else {
                unasked += 1;
            }
        }
        let (mut failures, mut lost) = (0, 0);
        for &c in &configs {
            let Some(mut trial) = by_config.remove(&c) else {
                search.lose(c);
                lost += 1;
                continue;
            };
            trial.outcome = trial.outcome.sanitized();
            let record = TuneRecord::new(space, &trial, sink.setup());
            sink.append(&record)?;
            self.new_records.push(record);
            let us = trial.outcome.median_us();
            search.notify(c, us);
            match us {
                Some(us) => self.models[g].update(slot, space, &search.table, c, us),
                None => failures += 1,
            }
            self.total += 1;
        }
        if unasked > 0 || lost > 0 {
            self.notes.push(format!(
                "task {} ({}): the measurer returned {unasked} results that were not asked for \
                 (ignored) and none for {lost} configs (not recorded, not retried this run)",
                space.task, space.op
            ));
        }
        self.models[g].refit();
        let search = &self.searches[i];
        let elapsed = start.elapsed();
        let best_us = search.best().map(|b| b.1);
        self.trace.push(TracePoint {
            trials: self.total,
            elapsed,
            task: i,
            best_us,
        });
        let estimate_us = self
            .searches
            .iter()
            .zip(self.spaces)
            .filter_map(|(s, sp)| s.best().map(|b| b.1 * sp.weight as f64))
            .sum();
        progress.trial_batch_done(&BatchUpdate {
            task: i,
            space,
            task_trials: search.trials(),
            task_limit: search.limit(space, self.options),
            best_us,
            default_us: search.measured_us(space.default),
            batch_failures: failures,
            total_trials: self.total,
            elapsed,
            budget: self.options.budget,
            tasks_finished: self
                .searches
                .iter()
                .filter(|s| s.finished.is_some())
                .count(),
            estimate_us,
        });
        let finished = if configs.is_empty() {
            // Nothing left to propose within the limits: the space is spent.
            self.searches[i].finished = Some(FinishReason::Exhausted);
            true
        } else if lost == configs.len() {
            self.searches[i].finished = Some(FinishReason::NoResults);
            true
        } else {
            self.searches[i]
                .check_finished(space, self.options)
                .is_some()
        };
        if finished {
            progress.task_finished(i, space, &self.result(i));
        }
        Ok(())
    }

    fn result(&self, i: usize) -> TaskResult {
        let (space, s) = (&self.spaces[i], &self.searches[i]);
        TaskResult {
            task: space.task.clone(),
            op: space.op.clone(),
            weight: space.weight,
            best: s.best().map(|b| b.0),
            best_config: s.best().and_then(|b| space.configs.get(b.0).cloned()),
            best_us: s.best().map(|b| b.1),
            default_us: s.measured_us(space.default),
            resumed_best_us: self.resumed_best[i],
            trials: s.trials(),
            resumed: s.resumed,
            failures: s.failures,
            space_size: space.configs.len(),
            exhaustive: s.exhaustive,
            finish: s.finished.unwrap_or(FinishReason::Budget),
        }
    }
}
