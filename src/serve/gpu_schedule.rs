//! When the GPU will be free for the next batch, predicted from the batches
//! already run; for `"fill_while_gpu_busy"`.
//!
//! With `concurrent_kernels` 1 the batches run their kernels one at a time,
//! in the order executors took them off the queue. A batch taken at `t`
//! starts its kernels once its input copy is done and the batch before it has
//! finished: `free = max(t + copy, free) + kernels`. The copy time per row
//! and the kernel time per batch size are moving averages of the CUDA-event
//! stage times of the batches that ran. An executor about to take a batch
//! while others are in flight can then keep it open for more requests until
//! `free − copy`, instead of closing it early and waiting on the GPU for its
//! turn.
//!
//! A prediction exists only while every batch in flight ran at a size with a
//! measured kernel time, and a copy time is known; otherwise the batcher
//! falls back to `max_queue_delay`.

use aotune::runtime::StageTimes;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Weight of the newest sample in the moving averages.
const NEWEST_WEIGHT: f64 = 0.2;

/// Launch and wake-up slack: a batch is closed this long before its copy
/// would have to start, so the GPU does not wait on the host.
pub const CLOSE_MARGIN: Duration = Duration::from_micros(60);

#[derive(Debug, Default)]
pub struct GpuSchedule {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Per batch size, the moving average of its kernels (ms).
    kernels_ms: BTreeMap<usize, f64>,
    /// The moving average of the input copy per request row (ms).
    copy_ms_per_row: Option<f64>,
    /// Batches taken and not finished.
    in_flight: usize,
    /// Of those, the ones taken without a prediction.
    unpredicted: usize,
    /// When the last batch taken is predicted to finish its kernels.
    free_at: Option<Instant>,
}

/// One batch handed to the GPU: what [`GpuSchedule::finished`] needs back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    pub batch: usize,
    pub rows: usize,
}

fn ms(d: f64) -> Duration {
    Duration::from_secs_f64(d.max(0.0) * 1e-3)
}

fn average(old: Option<f64>, sample: f64) -> f64 {
    match old {
        Some(old) => old + NEWEST_WEIGHT * (sample - old),
        None => sample,
    }
}

impl State {
    fn copy(&self, rows: usize) -> Option<Duration> {
        self.copy_ms_per_row
            .map(|per_row| ms(per_row * rows as f64))
    }
}

impl GpuSchedule {
    /// A batch of `rows` request rows, run at `batch`, was taken at `now`.
    pub fn taken(&self, now: Instant, batch: usize, rows: usize) -> Taken {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let kernels = s.kernels_ms.get(&batch).copied().map(ms);
        match (kernels, s.copy(rows)) {
            (Some(kernels), Some(copy)) => {
                let start = (now + copy).max(s.free_at.unwrap_or(now));
                s.free_at = Some(start + kernels);
            }
            _ => s.unpredicted += 1,
        }
        s.in_flight += 1;
        Taken { batch, rows }
    }

    /// The batch `taken` finished; `stages` are its GPU times, when it ran
    /// without error on the GPU.
    pub fn finished(&self, taken: Taken, stages: Option<StageTimes>) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = stages {
            let kernels = s.kernels_ms.get(&taken.batch).copied();
            s.kernels_ms
                .insert(taken.batch, average(kernels, f64::from(t.kernels_ms)));
            if taken.rows > 0 {
                let per_row = f64::from(t.input_ms) / taken.rows as f64;
                s.copy_ms_per_row = Some(average(s.copy_ms_per_row, per_row));
            }
        }
        s.in_flight = s.in_flight.saturating_sub(1);
        if s.in_flight == 0 {
            s.unpredicted = 0;
            s.free_at = None;
        }
    }

    /// When a batch of `rows` rows should be closed so that its copy ends as
    /// the batches in flight free the GPU; `None` when none is in flight or
    /// their end cannot be predicted.
    pub fn close_at(&self, rows: usize) -> Option<Instant> {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.in_flight == 0 || s.unpredicted > 0 {
            return None;
        }
        let free = s.free_at?;
        let lead = s.copy(rows)? + CLOSE_MARGIN;
        Some(free.checked_sub(lead).unwrap_or(free))
    }

    /// The longest kernel time measured at any batch size.
    pub fn longest_kernels(&self) -> Duration {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.kernels_ms
            .values()
            .copied()
            .fold(Duration::ZERO, |a, k| a.max(ms(k)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stages(input_ms: f32, kernels_ms: f32) -> Option<StageTimes> {
        Some(StageTimes {
            input_ms,
            turn_wait_ms: 0.0,
            kernels_ms,
            output_ms: 0.01,
        })
    }

    /// Teaches `s` a kernel time of `kernels_ms` at `batch` and a copy of
    /// 0.01 ms per row.
    fn learn(s: &GpuSchedule, batch: usize, kernels_ms: f32) {
        let t = s.taken(Instant::now(), batch, batch);
        s.finished(t, stages(0.01 * batch as f32, kernels_ms));
    }

    /// `a` and `b` within a microsecond (the averages are f32 and f64 ms).
    fn near(a: Option<Instant>, b: Instant) -> bool {
        a.is_some_and(|a| a.max(b) - a.min(b) < Duration::from_micros(1))
    }

    #[test]
    fn nothing_in_flight_or_unmeasured_sizes_predict_nothing() {
        let s = GpuSchedule::default();
        assert_eq!(s.close_at(4), None);
        let t = s.taken(Instant::now(), 8, 8);
        assert_eq!(s.close_at(4), None, "no kernel time measured at 8 yet");
        s.finished(t, stages(0.08, 1.0));
        assert_eq!(s.close_at(4), None, "nothing in flight");
        learn(&s, 16, 2.0);
        let t8 = s.taken(Instant::now(), 8, 8);
        assert!(s.close_at(4).is_some());
        let t32 = s.taken(Instant::now(), 32, 30);
        assert_eq!(
            s.close_at(4),
            None,
            "a batch of an unmeasured size is in flight"
        );
        s.finished(t8, stages(0.08, 1.0));
        s.finished(t32, stages(0.3, 3.0));
        let t32 = s.taken(Instant::now(), 32, 30);
        assert!(s.close_at(4).is_some(), "32 is measured now");
        s.finished(t32, None);
        assert_eq!(s.longest_kernels(), ms(3.0));
    }

    #[test]
    fn batches_in_flight_queue_up_on_the_gpu() {
        let s = GpuSchedule::default();
        learn(&s, 8, 1.0);
        learn(&s, 16, 2.0);
        let now = Instant::now();
        let a = s.taken(now, 8, 8);
        // 8 rows: 0.08 ms of copy, then 1 ms of kernels.
        let free = now + ms(1.08);
        assert!(near(s.close_at(10), free - ms(0.1) - CLOSE_MARGIN));
        // The next batch starts its kernels when the first ends, its copy
        // long done: 2 ms after that.
        let b = s.taken(now + ms(0.2), 16, 12);
        assert!(near(s.close_at(0), free + ms(2.0) - CLOSE_MARGIN));
        s.finished(a, stages(0.08, 1.0));
        assert!(s.close_at(0).is_some(), "b is still in flight");
        s.finished(b, stages(0.12, 2.0));
        assert_eq!(s.close_at(0), None);
    }

    #[test]
    fn averages_follow_the_measurements() {
        let s = GpuSchedule::default();
        learn(&s, 8, 1.0);
        for _ in 0..40 {
            learn(&s, 8, 2.0);
        }
        let now = Instant::now();
        s.taken(now, 8, 8);
        let close = s.close_at(0).unwrap();
        let predicted = close + CLOSE_MARGIN - now;
        // 0.08 ms of copy + ~2 ms of kernels.
        assert!(
            (predicted.as_secs_f64() * 1e3 - 2.08).abs() < 1e-3,
            "{predicted:?}"
        );
    }
}
