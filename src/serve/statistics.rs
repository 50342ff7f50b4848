//! Triton's statistics extension: per loaded model, counts and cumulative
//! durations of its requests and batches since it loaded, served at
//! `GET /v2/models[/{m}[/versions/{v}]]/stats` and by the gRPC
//! `ModelStatistics` (docs/serving.md).
//!
//! Recorded from measurements the server takes anyway, at two points:
//! - a batch that ran (the batcher, [`Statistics::record_batch`]):
//!   `execution_count`, `last_inference`, and the `batch_stats` of the
//!   compiled batch size it ran at;
//! - a request answered after it was queued (the handler,
//!   [`Statistics::record_success`] / [`Statistics::record_failure`]):
//!   `success` or `fail` with its receipt-to-answer time, and for a success
//!   its rows (`inference_count`), its `queue` wait and the `compute_*`
//!   durations of its batches: every request of a batch gets the whole
//!   batch's durations, as Triton counts them. Requests refused before they
//!   reach the model's queue (malformed, not matching the model) are not
//!   counted, as Triton rejects those before they reach the model.
//!
//! Every record is one short critical section without allocation, so a
//! report is a consistent snapshot. `cache_hit` and `cache_miss` stay zero:
//! the server has no response cache.

use aotune::runtime::StageTimes;
use serde::Serialize;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A count and a cumulative duration (Triton's `StatisticDuration`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DurationStat {
    pub count: u64,
    /// Nanoseconds.
    pub ns: u64,
}

impl DurationStat {
    fn add(&mut self, d: Duration) {
        self.count += 1;
        self.ns = self.ns.saturating_add(nanos(d));
    }
}

/// A model's request statistics (Triton's `InferStatistics`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct InferStats {
    pub success: DurationStat,
    pub fail: DurationStat,
    pub queue: DurationStat,
    pub compute_input: DurationStat,
    pub compute_infer: DurationStat,
    pub compute_output: DurationStat,
    pub cache_hit: DurationStat,
    pub cache_miss: DurationStat,
}

/// The batches run at one batch size (Triton's `InferBatchStatistics`);
/// each duration's count is the number of those batches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BatchStats {
    pub batch_size: u64,
    pub compute_input: DurationStat,
    pub compute_infer: DurationStat,
    pub compute_output: DurationStat,
}

/// Memory a model holds of one kind (Triton's `MemoryUsage`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryUsage {
    /// `"GPU"` (weights and activation arenas) or `"CPU_PINNED"` (staging
    /// buffers).
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The device's ordinal (0: the server runs on the first GPU).
    pub id: i64,
    pub byte_size: u64,
}

/// One model's statistics as reported (Triton's `ModelStatistics`, the
/// JSON object of the HTTP answer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    pub name: String,
    pub version: String,
    /// When the model last ran a batch, in milliseconds since the epoch; 0
    /// before its first.
    pub last_inference: u64,
    /// Rows of the successful requests.
    pub inference_count: u64,
    /// Batches run.
    pub execution_count: u64,
    pub inference_stats: InferStats,
    /// The batch sizes that ran, ascending.
    pub batch_stats: Vec<BatchStats>,
    /// What the model's running executors hold, by kind; empty on the CPU
    /// backend.
    pub memory_usage: Vec<MemoryUsage>,
}

/// One batch's time in the backend, split into Triton's three compute
/// steps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ComputeSplit {
    pub input: Duration,
    pub infer: Duration,
    pub output: Duration,
}

impl ComputeSplit {
    /// Splits `wall`, the backend's whole run of a batch: `input` is the
    /// gathering of the requests' rows into the batch's input buffer
    /// (`gathering`) plus the device's input copy, `output` the device's
    /// output copy, and `infer` the rest of `wall` (the kernels and the
    /// host's work around them). `device` is the GPU's stage times; without
    /// them (the CPU backend) `output` is zero.
    pub fn of_batch(
        wall: Duration,
        gathering: Duration,
        device: Option<StageTimes>,
    ) -> ComputeSplit {
        let (copy_in, copy_out) = device.map_or((Duration::ZERO, Duration::ZERO), |t| {
            (millis(t.input_ms), millis(t.output_ms))
        });
        let input = gathering + copy_in;
        ComputeSplit {
            input,
            infer: wall.saturating_sub(input).saturating_sub(copy_out),
            output: copy_out,
        }
    }
}

/// What one request spent in the batcher, over all of its pieces.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestTiming {
    /// The longest wait of a piece in the queue: the pieces are queued
    /// together, so until the last one began to run.
    pub queue: Duration,
    /// The compute durations of every batch it had rows in, summed.
    pub compute: ComputeSplit,
}

impl RequestTiming {
    /// Adds a piece that waited `queued` and ran in a batch that took
    /// `batch`.
    pub fn add_piece(&mut self, queued: Duration, batch: ComputeSplit) {
        self.queue = self.queue.max(queued);
        self.compute.input += batch.input;
        self.compute.infer += batch.infer;
        self.compute.output += batch.output;
    }
}

/// One model's live statistics.
#[derive(Debug)]
pub struct Statistics {
    counters: Mutex<Counters>,
}

#[derive(Debug)]
struct Counters {
    last_inference: u64,
    inference_count: u64,
    execution_count: u64,
    infer: InferStats,
    /// One per compiled batch size, ascending; reported once one ran.
    batches: Vec<BatchStats>,
    /// Device and pinned host bytes the running executors hold.
    device_bytes: u64,
    pinned_bytes: u64,
}

impl Statistics {
    /// Zeroed statistics of a model compiled at `batch_sizes`.
    pub fn new(batch_sizes: &[usize]) -> Statistics {
        let mut batches: Vec<BatchStats> = batch_sizes
            .iter()
            .map(|&b| BatchStats {
                batch_size: b as u64,
                ..BatchStats::default()
            })
            .collect();
        batches.sort_by_key(|b| b.batch_size);
        batches.dedup_by_key(|b| b.batch_size);
        Statistics {
            counters: Mutex::new(Counters {
                last_inference: 0,
                inference_count: 0,
                execution_count: 0,
                infer: InferStats::default(),
                batches,
                device_bytes: 0,
                pinned_bytes: 0,
            }),
        }
    }

    /// A batch ran at compiled size `batch` and took `split`. A size the
    /// model was not compiled at is counted in `execution_count` only.
    pub fn record_batch(&self, batch: usize, split: ComputeSplit) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let mut c = self.lock();
        c.last_inference = c.last_inference.max(now);
        c.execution_count += 1;
        if let Ok(i) = c
            .batches
            .binary_search_by_key(&(batch as u64), |b| b.batch_size)
        {
            let b = &mut c.batches[i];
            b.compute_input.add(split.input);
            b.compute_infer.add(split.infer);
            b.compute_output.add(split.output);
        }
    }

    /// A request of `rows` rows answered after `elapsed`, having spent
    /// `timing` in the batcher.
    pub fn record_success(&self, rows: usize, elapsed: Duration, timing: &RequestTiming) {
        let mut c = self.lock();
        c.inference_count += rows as u64;
        let s = &mut c.infer;
        s.success.add(elapsed);
        s.queue.add(timing.queue);
        s.compute_input.add(timing.compute.input);
        s.compute_infer.add(timing.compute.infer);
        s.compute_output.add(timing.compute.output);
    }

    /// A request handed to the model's queue that failed after `elapsed`
    /// (queue full, timeout, backend error, shutdown).
    pub fn record_failure(&self, elapsed: Duration) {
        self.lock().infer.fail.add(elapsed);
    }

    /// An executor that holds `device` bytes of GPU memory and `pinned`
    /// bytes of pinned host memory started (`held` true) or stopped.
    pub fn count_memory(&self, device: u64, pinned: u64, held: bool) {
        let mut c = self.lock();
        if held {
            c.device_bytes = c.device_bytes.saturating_add(device);
            c.pinned_bytes = c.pinned_bytes.saturating_add(pinned);
        } else {
            c.device_bytes = c.device_bytes.saturating_sub(device);
            c.pinned_bytes = c.pinned_bytes.saturating_sub(pinned);
        }
    }

    /// The statistics so far, as those of model `name` at `version`.
    pub fn report(&self, name: &str, version: &str) -> Report {
        let c = self.lock();
        Report {
            name: name.to_string(),
            version: version.to_string(),
            last_inference: c.last_inference,
            inference_count: c.inference_count,
            execution_count: c.execution_count,
            inference_stats: c.infer,
            batch_stats: c
                .batches
                .iter()
                .filter(|b| b.compute_infer.count > 0)
                .copied()
                .collect(),
            memory_usage: [("GPU", c.device_bytes), ("CPU_PINNED", c.pinned_bytes)]
                .into_iter()
                .filter(|&(_, bytes)| bytes > 0)
                .map(|(kind, byte_size)| MemoryUsage {
                    kind,
                    id: 0,
                    byte_size,
                })
                .collect(),
        }
    }

    /// Every critical section leaves the counters consistent, so a poisoned
    /// lock is used as it is.
    fn lock(&self) -> MutexGuard<'_, Counters> {
        self.counters.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `ms` milliseconds; zero for what is not a duration (negative, NaN).
fn millis(ms: f32) -> Duration {
    Duration::try_from_secs_f64(f64::from(ms) * 1e-3).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_cpu_batch_splits_into_gathering_and_the_rest() {
        let s = ComputeSplit::of_batch(10 * MS, 2 * MS, None);
        assert_eq!(
            s,
            ComputeSplit {
                input: 2 * MS,
                infer: 8 * MS,
                output: Duration::ZERO,
            }
        );
    }

    #[test]
    fn a_gpu_batch_adds_the_device_copies_to_input_and_output() {
        let stages = StageTimes {
            input_ms: 1.0,
            kernels_ms: 5.0,
            output_ms: 2.0,
            ..StageTimes::default()
        };
        let s = ComputeSplit::of_batch(10 * MS, MS, Some(stages));
        assert_eq!(s.input, 2 * MS);
        assert_eq!(s.output, 2 * MS);
        assert_eq!(s.infer, 6 * MS);
        // Device times past the wall time (clock skew) leave infer at zero.
        let s = ComputeSplit::of_batch(MS, MS, Some(stages));
        assert_eq!(s.infer, Duration::ZERO);
        let nan = StageTimes {
            input_ms: f32::NAN,
            kernels_ms: 0.0,
            output_ms: -1.0,
            ..StageTimes::default()
        };
        assert_eq!(
            ComputeSplit::of_batch(MS, Duration::ZERO, Some(nan)).infer,
            MS
        );
    }

    #[test]
    fn a_split_request_waits_as_long_as_its_last_piece_and_sums_its_batches() {
        let batch = ComputeSplit {
            input: MS,
            infer: 3 * MS,
            output: 2 * MS,
        };
        let mut t = RequestTiming::default();
        t.add_piece(4 * MS, batch);
        t.add_piece(9 * MS, batch);
        assert_eq!(t.queue, 9 * MS);
        assert_eq!(t.compute.input, 2 * MS);
        assert_eq!(t.compute.infer, 6 * MS);
        assert_eq!(t.compute.output, 4 * MS);
    }

    #[test]
    fn requests_and_batches_add_up_in_the_report() {
        let stats = Statistics::new(&[8, 1, 4]);
        let fresh = stats.report("m", "1");
        assert_eq!(fresh.last_inference, 0);
        assert!(fresh.batch_stats.is_empty());
        assert_eq!(fresh.inference_stats, InferStats::default());

        let batch = ComputeSplit {
            input: MS,
            infer: 3 * MS,
            output: 2 * MS,
        };
        // Three requests (1 + 2 rows in one batch of 4, 1 row alone) and one
        // that timed out.
        stats.record_batch(4, batch);
        stats.record_batch(1, batch);
        let mut timing = RequestTiming::default();
        timing.add_piece(5 * MS, batch);
        stats.record_success(1, 10 * MS, &timing);
        stats.record_success(2, 10 * MS, &timing);
        stats.record_success(1, 10 * MS, &timing);
        stats.record_failure(7 * MS);

        let r = stats.report("m", "1");
        assert_eq!((r.name.as_str(), r.version.as_str()), ("m", "1"));
        assert!(r.last_inference > 1_600_000_000_000, "{}", r.last_inference);
        assert_eq!(r.inference_count, 4);
        assert_eq!(r.execution_count, 2);
        let s = r.inference_stats;
        let d = |count, ms: u64| DurationStat {
            count,
            ns: ms * 1_000_000,
        };
        assert_eq!(s.success, d(3, 30));
        assert_eq!(s.fail, d(1, 7));
        assert_eq!(s.queue, d(3, 15));
        assert_eq!(s.compute_input, d(3, 3));
        assert_eq!(s.compute_infer, d(3, 9));
        assert_eq!(s.compute_output, d(3, 6));
        assert_eq!((s.cache_hit, s.cache_miss), Default::default());
        let sizes: Vec<u64> = r.batch_stats.iter().map(|b| b.batch_size).collect();
        assert_eq!(sizes, [1, 4]);
        for b in &r.batch_stats {
            assert_eq!(b.compute_input, d(1, 1));
            assert_eq!(b.compute_infer, d(1, 3));
            assert_eq!(b.compute_output, d(1, 2));
        }
    }

    #[test]
    fn a_batch_size_not_compiled_counts_only_as_an_execution() {
        let stats = Statistics::new(&[1, 8]);
        stats.record_batch(3, ComputeSplit::default());
        let r = stats.report("m", "1");
        assert_eq!(r.execution_count, 1);
        assert!(r.batch_stats.is_empty());
    }

    #[test]
    fn the_report_serializes_as_the_extension_json() {
        let stats = Statistics::new(&[2]);
        stats.record_batch(
            2,
            ComputeSplit {
                input: Duration::from_nanos(5),
                infer: Duration::from_nanos(7),
                output: Duration::from_nanos(11),
            },
        );
        let mut json = serde_json::to_value(stats.report("m", "1")).unwrap();
        assert!(json["last_inference"].as_u64().unwrap() > 0);
        json["last_inference"] = 0.into();
        let zero = serde_json::json!({"count": 0, "ns": 0});
        assert_eq!(
            json,
            serde_json::json!({
                "name": "m",
                "version": "1",
                "last_inference": 0,
                "inference_count": 0,
                "execution_count": 1,
                "inference_stats": {
                    "success": zero, "fail": zero, "queue": zero,
                    "compute_input": zero, "compute_infer": zero,
                    "compute_output": zero, "cache_hit": zero, "cache_miss": zero,
                },
                "batch_stats": [{
                    "batch_size": 2,
                    "compute_input": {"count": 1, "ns": 5},
                    "compute_infer": {"count": 1, "ns": 7},
                    "compute_output": {"count": 1, "ns": 11},
                }],
                "memory_usage": [],
            })
        );
    }
}
