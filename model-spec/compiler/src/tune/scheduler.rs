//! The task scheduler: after a warm-up round for every task, each round goes
//! to the task where one more trial is expected to save the most end-to-end
//! time. This is Ansor's gradient scheduler (Zheng et al., OSDI 2020, §6)
//! simplified to one objective, `Σ weight × latency`:
//!
//! `gain = weight × best × (α · backward + (1 − α) · forward)`
//!
//! - `backward`: the task's recent relative improvement per trial, over its
//!   last `window` trials (`(best_then − best_now) / best_now / window`);
//! - `forward = 1 / trials`: the optimistic term. It assumes the next trials
//!   improve as much, relatively, as one over what was spent so far, so a
//!   task with few trials is always worth a look and, with no improvement
//!   anywhere, trials go to tasks in proportion to `weight × latency` (what
//!   Ansor's `−g/t` term does);
//! - `α = 0.2`, Ansor's default; a task with no successful config yet uses
//!   `fallback_us` (its prior, or the mean of the others) as its latency.
//!
//! Ansor's third term (similar tasks' best throughput) is left out: the
//! shared cost model already carries knowledge across similar tasks.

/// Weight of the backward (observed) improvement against the optimistic one.
pub(crate) const ALPHA: f64 = 0.2;

/// What the scheduler needs to know about one task.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskView {
    pub weight: usize,
    pub trials: usize,
    /// Best median now and `window` trials ago (µs), if any succeeded.
    pub best_now: Option<f64>,
    pub best_before: Option<f64>,
    /// Trials between the two (≥ 1 when `best_before` is set).
    pub window: usize,
    pub fallback_us: f64,
}

/// Expected end-to-end µs saved by one more trial of the task.
pub(crate) fn gain(t: &TaskView) -> f64 {
    let best = t.best_now.unwrap_or(t.fallback_us);
    let backward = match (t.best_before, t.best_now) {
        (Some(before), Some(now)) if now > 0.0 && t.window > 0 => {
            ((before - now) / now).max(0.0) / t.window as f64
        }
        _ => 0.0,
    };
    let forward = 1.0 / t.trials.max(1) as f64;
    t.weight as f64 * best * (ALPHA * backward + (1.0 - ALPHA) * forward)
}

/// The task with the largest gain among `(index, view)`; ties go to the
/// earlier index.
pub(crate) fn pick(tasks: impl IntoIterator<Item = (usize, TaskView)>) -> Option<usize> {
    let mut best: Option<(f64, usize)> = None;
    for (i, view) in tasks {
        let g = gain(&view);
        if best.is_none_or(|(b, _)| g > b) {
            best = Some((g, i));
        }
    }
    best.map(|(_, i)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(weight: usize, trials: usize, now: f64, before: f64) -> TaskView {
        TaskView {
            weight,
            trials,
            best_now: Some(now),
            best_before: Some(before),
            window: 16,
            fallback_us: 1.0,
        }
    }

    #[test]
    fn heavy_slow_and_improving_tasks_come_first() {
        // Same latency and history: the heavier task.
        assert_eq!(
            pick([(0, view(1, 32, 10.0, 10.0)), (1, view(5, 32, 10.0, 10.0))]),
            Some(1)
        );
        // Same weight: the slower one.
        assert_eq!(
            pick([(0, view(2, 32, 30.0, 30.0)), (1, view(2, 32, 10.0, 10.0))]),
            Some(0)
        );
        // Same now: the one still improving.
        assert_eq!(
            pick([(0, view(2, 32, 10.0, 10.0)), (1, view(2, 32, 10.0, 15.0))]),
            Some(1)
        );
        // Equal: the first.
        assert_eq!(
            pick([(3, view(1, 16, 1.0, 1.0)), (4, view(1, 16, 1.0, 1.0))]),
            Some(3)
        );
        assert_eq!(pick(std::iter::empty()), None);
    }

    #[test]
    fn without_improvement_trials_follow_weight_times_latency() {
        // Give rounds of 16 by the rule; the trial counts end up in
        // proportion to weight × latency (3 : 1 here).
        let tasks = [(3usize, 10.0), (1, 10.0)];
        let mut trials = [16usize, 16];
        for _ in 0..30 {
            let next =
                pick((0..2).map(|i| (i, view(tasks[i].0, trials[i], tasks[i].1, tasks[i].1))))
                    .unwrap();
            trials[next] += 16;
        }
        let ratio = trials[0] as f64 / trials[1] as f64;
        assert!((2.4..=3.6).contains(&ratio), "{trials:?}");
    }

    #[test]
    fn a_task_with_no_success_uses_its_fallback() {
        let failing = TaskView {
            weight: 1,
            trials: 16,
            best_now: None,
            best_before: None,
            window: 0,
            fallback_us: 50.0,
        };
        assert_eq!(pick([(0, view(1, 16, 10.0, 10.0)), (1, failing)]), Some(1));
    }
}
