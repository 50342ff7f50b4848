//! indicatif progress for `aotune tune`: one bar for the whole run (trials,
//! elapsed time against the budget, end-to-end estimate) and one for the task
//! being tuned (its trials, default and best time so far).

use aotune_compiler::tune::{BatchUpdate, Progress, TaskResult, TaskSpace};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::Duration;

pub struct BarProgress {
    _multi: MultiProgress,
    overall: ProgressBar,
    task: ProgressBar,
    tasks: usize,
}

impl BarProgress {
    /// Bars for a run over `tasks` tasks within `budget`; hidden when stderr
    /// is not a terminal (the per-task lines still print).
    pub fn new(tasks: usize, budget: Duration) -> Self {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
        let overall = multi.add(ProgressBar::new(budget.as_secs().max(1)));
        overall.set_style(
            ProgressStyle::with_template("{prefix:>8} [{bar:30}] {elapsed_precise}/{msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        overall.set_prefix("budget");
        let task = multi.add(ProgressBar::new(1));
        task.set_style(
            ProgressStyle::with_template("{prefix:>8} [{bar:30}] {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        BarProgress {
            _multi: multi,
            overall,
            task,
            tasks,
        }
    }

    pub fn finish(&self) {
        self.task.finish_and_clear();
        self.overall.finish_and_clear();
    }
}

fn us(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.2} µs"))
        .unwrap_or_else(|| "-".into())
}

impl Progress for BarProgress {
    fn task_started(&mut self, task: usize, space: &TaskSpace) {
        self.task.set_prefix(format!("{}/{}", task + 1, self.tasks));
        self.task.set_position(0);
        self.task.set_message(format!(
            "{} {} ×{}",
            space.op,
            &space.task[..8.min(space.task.len())],
            space.weight
        ));
    }

    fn trial_batch_done(&mut self, u: &BatchUpdate) {
        self.task.set_length(u.task_limit.max(1) as u64);
        self.task.set_position(u.task_trials as u64);
        self.task.set_message(format!(
            "{} {}: default {}, best {}{}",
            u.space.op,
            &u.space.task[..8.min(u.space.task.len())],
            us(u.default_us),
            us(u.best_us),
            if u.batch_failures > 0 {
                format!(", {} failed", u.batch_failures)
            } else {
                String::new()
            }
        ));
        self.overall
            .set_position(u.elapsed.as_secs().min(u.budget.as_secs()));
        self.overall.set_message(format!(
            "{:.0}s, {} trials, {}/{} tasks done, end-to-end estimate {:.1} µs",
            u.budget.as_secs_f64(),
            u.total_trials,
            u.tasks_finished,
            self.tasks,
            u.estimate_us
        ));
    }

    fn task_finished(&mut self, _task: usize, space: &TaskSpace, r: &TaskResult) {
        let speedup = match (r.default_us, r.best_us) {
            (Some(d), Some(b)) if b > 0.0 => format!("{:.2}×", d / b),
            _ => "-".into(),
        };
        self.overall.println(format!(
            "  {} {} ×{}: default {}, tuned {} ({speedup}), {} trials, {} failed ({})",
            space.op,
            &space.task[..8.min(space.task.len())],
            space.weight,
            us(r.default_us),
            us(r.best_us),
            r.trials,
            r.failures,
            r.finish
        ));
    }
}
