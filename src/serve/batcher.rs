//! Dynamic batching: one bounded queue per model, drained by `instances`
//! executor threads.
//!
//! A request of `rows` rows is cut into pieces of at most the largest
//! compiled batch size and queued, oldest first. An executor takes pieces
//! from the front while they fit in the largest batch, as soon as either the
//! queue holds that many rows or the oldest piece has waited
//! `max_queue_delay` (or the server is stopping). It pads the rows to the
//! smallest compiled batch size that holds them, runs the batch (the
//! executor gets the number of request rows, so the GPU copies only those),
//! and copies each piece's rows of every output back to its own request at its own
//! offset, so requests merged into one batch never see each other's rows. A
//! request is answered when all its pieces are done. Pieces whose client is
//! gone (the request timed out or disconnected) are dropped before running.
//!
//! With `concurrent_batches` below `instances`, an executor takes its next
//! batch only while it holds one of that many slots, and keeps the slot
//! until the batch is answered: requests that arrive while the slots are
//! busy wait in the queue and join the next batch (on a GPU, fewer, larger
//! batches one after another instead of several small ones sharing it).
//!
//! With `fill_while_gpu_busy` (GPU, `concurrent_kernels` 1), an executor
//! that takes a batch while other batches are on the GPU keeps it open for
//! more requests until its input copy would end as the GPU frees up
//! ([`GpuSchedule`]), instead of closing it after `max_queue_delay` and
//! waiting on the GPU for its turn; it waits at most `max_queue_delay` plus
//! the longest kernel time measured, and closes at once when the largest
//! batch is full.
//!
//! Each batch that runs is recorded in the model's [`Statistics`], and each
//! answer carries what its request spent in the batcher ([`RequestTiming`]).
//!
//! The queue is bounded in rows: a request that would overflow it is refused
//! at once with [`InferError::QueueFull`] (HTTP 429, gRPC
//! RESOURCE_EXHAUSTED), never blocked.

use super::backend::{Backend, Executor, GpuMemory, Signature};
use super::error::InferError;
use super::gpu_schedule::{GpuSchedule, Taken};
use super::metrics::ModelMetrics;
use super::rows::Rows;
use super::statistics::{ComputeSplit, RequestTiming, Statistics};
use aotune::runtime::{InputStaging, PinnedRows, StageTimes};
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// The answer to one request: each model output's `rows × item_len` values.
pub type Reply = Result<Vec<Vec<f32>>, InferError>;

/// A [`Reply`], when the executor sent it (the handler measures how long
/// it took to pick it up), and what the request spent in the batcher.
#[derive(Debug)]
pub struct Answer {
    pub reply: Reply,
    pub sent: Instant,
    /// Its pieces' queue waits and batches' compute durations (those of the
    /// pieces that ran, for an error).
    pub timing: RequestTiming,
}

/// How often an executor refreshes the device-memory gauges while it runs
/// batches.
const DEVICE_MEMORY_REFRESH: Duration = Duration::from_secs(1);

/// The queue settings of one model.
#[derive(Debug, Clone, Copy)]
pub struct BatchPolicy {
    pub max_queue_delay: Duration,
    pub queue_capacity: usize,
    pub instances: usize,
    /// 1..=instances: how many executors may hold a batch at once.
    pub concurrent_batches: usize,
    /// Keep a batch open while earlier batches hold the GPU (see the
    /// module doc); only for batches whose kernels run one at a time.
    pub fill_while_gpu_busy: bool,
}

/// One model's queue and its executor threads.
pub struct Batcher {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

struct Shared {
    signature: Signature,
    policy: BatchPolicy,
    metrics: ModelMetrics,
    statistics: Statistics,
    queue: Mutex<Queue>,
    wake: Condvar,
    slots: Slots,
    /// With `fill_while_gpu_busy`.
    schedule: Option<GpuSchedule>,
}

/// A counting semaphore: the batch slots executors take turns holding.
struct Slots {
    free: Mutex<usize>,
    freed: Condvar,
}

impl Slots {
    fn acquire(&self) {
        let mut free = lock(&self.free);
        while *free == 0 {
            free = self.freed.wait(free).unwrap_or_else(|e| e.into_inner());
        }
        *free -= 1;
    }

    fn release(&self) {
        *lock(&self.free) += 1;
        self.freed.notify_one();
    }
}

#[derive(Default)]
struct Queue {
    pieces: VecDeque<Piece>,
    rows: usize,
    closed: bool,
    /// Run what is queued without waiting for the delay (shutdown began).
    draining: bool,
}

/// A run of consecutive rows of one request.
struct Piece {
    job: Arc<Job>,
    offset: usize,
    rows: usize,
    enqueued: Instant,
}

/// One request: its inputs, and its outputs filled piece by piece.
struct Job {
    inputs: Vec<Rows>,
    deadline: Instant,
    state: Mutex<JobState>,
}

struct JobState {
    outputs: Vec<Vec<f32>>,
    remaining: usize,
    timing: RequestTiming,
    /// `None` once answered.
    reply: Option<oneshot::Sender<Answer>>,
}

/// Locks a mutex; a thread that panicked while holding it left data that is
/// still consistent here (every critical section is panic-free), so the
/// poison is ignored.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl JobState {
    fn answer(&mut self, reply: Reply) {
        if let Some(tx) = self.reply.take() {
            // The receiver may be gone (timeout, disconnect): nothing to do.
            let _ = tx.send(Answer {
                reply,
                sent: Instant::now(),
                timing: self.timing,
            });
        }
    }

    fn abandoned(&self) -> bool {
        self.reply.as_ref().is_none_or(|tx| tx.is_closed())
    }
}

impl Batcher {
    /// Starts `policy.instances` executor threads for `backend`; returns once
    /// every one has created its executor, or the first error.
    pub fn start(
        name: &str,
        backend: Arc<dyn Backend>,
        policy: BatchPolicy,
        metrics: ModelMetrics,
    ) -> Result<Batcher, InferError> {
        let signature = backend.signature().clone();
        let shared = Arc::new(Shared {
            statistics: Statistics::new(&signature.batch_sizes),
            signature,
            policy,
            metrics,
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            slots: Slots {
                free: Mutex::new(policy.concurrent_batches.clamp(1, policy.instances.max(1))),
                freed: Condvar::new(),
            },
            schedule: policy.fill_while_gpu_busy.then(GpuSchedule::default),
        });
        let batcher = Batcher {
            shared: Arc::clone(&shared),
            threads: Mutex::new(Vec::new()),
        };
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        for instance in 0..policy.instances {
            let shared = Arc::clone(&shared);
            let backend = Arc::clone(&backend);
            let ready_tx = ready_tx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("aotune-{name}-{instance}"))
                .spawn(move || match backend.executor() {
                    Ok(executor) => {
                        let _ = ready_tx.send(Ok(()));
                        drop(ready_tx);
                        shared.run(executor);
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                });
            match spawned {
                Ok(handle) => lock(&batcher.threads).push(handle),
                Err(e) => {
                    batcher.close();
                    return Err(InferError::Internal(format!(
                        "starting executor thread {instance}: {e}"
                    )));
                }
            }
        }
        drop(ready_tx);
        for _ in 0..policy.instances {
            let failure = match ready_rx.recv() {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => e.to_string(),
                Err(_) => "an executor thread ended while starting".to_string(),
            };
            batcher.close();
            return Err(InferError::Internal(failure));
        }
        Ok(batcher)
    }

    /// Queues a request of `rows` rows (`inputs` in signature order, each
    /// `rows × item_len` values) to be answered by `deadline`.
    pub fn submit(
        &self,
        inputs: Vec<Rows>,
        rows: usize,
        deadline: Instant,
    ) -> Result<oneshot::Receiver<Answer>, InferError> {
        let shared = &self.shared;
        let capacity = shared.policy.queue_capacity;
        if rows > capacity {
            return Err(InferError::invalid(format!(
                "the request has {rows} rows; this model's queue holds at most {capacity}"
            )));
        }
        let (tx, rx) = oneshot::channel();
        let outputs = shared
            .signature
            .outputs
            .iter()
            .map(|t| vec![0.0f32; rows * t.item_len()])
            .collect();
        let job = Arc::new(Job {
            inputs,
            deadline,
            state: Mutex::new(JobState {
                outputs,
                remaining: rows,
                timing: RequestTiming::default(),
                reply: Some(tx),
            }),
        });
        let mut queue = lock(&shared.queue);
        if queue.closed {
            return Err(InferError::Unavailable(
                "the server is shutting down".into(),
            ));
        }
        if queue.rows + rows > capacity {
            return Err(InferError::QueueFull(format!(
                "the model's queue is full ({} of {capacity} rows waiting); retry later",
                queue.rows
            )));
        }
        let now = Instant::now();
        let max = shared.signature.max_batch();
        let mut offset = 0;
        while offset < rows {
            let n = max.min(rows - offset);
            queue.pieces.push_back(Piece {
                job: Arc::clone(&job),
                offset,
                rows: n,
                enqueued: now,
            });
            offset += n;
        }
        queue.rows += rows;
        shared.metrics.queue_rows.set(queue.rows as i64);
        drop(queue);
        shared.wake.notify_all();
        Ok(rx)
    }

    /// The model's statistics, which the executors record batches into.
    pub fn statistics(&self) -> &Statistics {
        &self.shared.statistics
    }

    /// From now on, queued rows run at once instead of waiting for
    /// `max_queue_delay` (shutdown has begun; new requests are still taken).
    pub fn drain(&self) {
        lock(&self.shared.queue).draining = true;
        self.shared.wake.notify_all();
    }

    /// Stops taking requests; the executors finish what is queued, then end.
    pub fn close(&self) {
        lock(&self.shared.queue).closed = true;
        self.shared.wake.notify_all();
    }

    /// [`Self::close`], then waits for the executor threads to end.
    pub fn shutdown(&self) {
        self.close();
        let threads = std::mem::take(&mut *lock(&self.threads));
        for t in threads {
            if t.join().is_err() {
                tracing::error!("an executor thread panicked");
            }
        }
    }
}

impl Shared {
    /// An executor thread: batches, each while holding a slot, until the
    /// queue is closed and empty.
    /// Its GPU memory counts in the model's gauges while it runs; the
    /// device's use is refreshed at most every [`DEVICE_MEMORY_REFRESH`].
    fn run(&self, mut executor: Box<dyn Executor>) {
        let held = executor.gpu_memory();
        if let Some(m) = &held {
            self.count_memory(m, 1);
        }
        let mut refreshed = Instant::now();
        loop {
            self.slots.acquire();
            let Some((pieces, taken)) = self.next_batch() else {
                self.slots.release();
                break;
            };
            let stages = self.execute(executor.as_mut(), pieces);
            if let (Some(schedule), Some(taken)) = (&self.schedule, taken) {
                schedule.finished(taken, stages);
                // An executor filling its batch may now close it earlier.
                self.wake.notify_all();
            }
            self.slots.release();
            if held.is_some() && refreshed.elapsed() >= DEVICE_MEMORY_REFRESH {
                if let Some(m) = executor.gpu_memory() {
                    self.set_device_memory(&m);
                }
                refreshed = Instant::now();
            }
        }
        if let Some(m) = &held {
            self.count_memory(m, -1);
        }
    }

    /// Adds (`sign` 1) or removes (-1) an executor's memory from the model's
    /// gauges, and records the device's use.
    fn count_memory(&self, m: &GpuMemory, sign: i64) {
        let [weights, arena, staging] = &self.metrics.gpu_memory;
        for (gauge, bytes) in [(weights, m.weights), (arena, m.arena), (staging, m.staging)] {
            gauge.add(sign * i64::try_from(bytes).unwrap_or(i64::MAX));
        }
        self.statistics
            .count_memory(m.weights + m.arena, m.staging, sign > 0);
        self.set_device_memory(m);
    }

    fn set_device_memory(&self, m: &GpuMemory) {
        let [used, total] = &self.metrics.device_memory;
        used.set(i64::try_from(m.device_used).unwrap_or(i64::MAX));
        total.set(i64::try_from(m.device_total).unwrap_or(i64::MAX));
    }

    /// Waits for a batch (see the module doc); `None` when closed and empty.
    /// With a [`GpuSchedule`], also what it was told of the batch.
    fn next_batch(&self) -> Option<(Vec<Piece>, Option<Taken>)> {
        let max = self.signature.max_batch();
        let mut queue = lock(&self.queue);
        loop {
            let Some(oldest) = queue.pieces.front().map(|p| p.enqueued) else {
                if queue.closed {
                    return None;
                }
                queue = self.wake.wait(queue).unwrap_or_else(|e| e.into_inner());
                continue;
            };
            let due = self.close_at(oldest, queue.rows.min(max));
            let now = Instant::now();
            if queue.rows >= max || queue.closed || queue.draining || now >= due {
                let mut taken = Vec::new();
                let mut rows = 0;
                while let Some(p) = queue.pieces.front() {
                    if rows + p.rows > max {
                        break;
                    }
                    rows += p.rows;
                    taken.extend(queue.pieces.pop_front());
                }
                queue.rows -= rows;
                self.metrics.queue_rows.set(queue.rows as i64);
                if !queue.pieces.is_empty() {
                    self.wake.notify_one();
                }
                let ticket = self
                    .schedule
                    .as_ref()
                    .map(|s| s.taken(now, self.signature.batch_for(rows), rows));
                return Some((taken, ticket));
            }
            queue = self
                .wake
                .wait_timeout(queue, due - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// When a batch whose oldest piece was queued at `oldest`, now of `rows`
    /// rows, closes: after `max_queue_delay`, or, while a [`GpuSchedule`]
    /// predicts the GPU busy, when its copy would end as the GPU frees up
    /// (at most the longest kernel time later than the delay).
    fn close_at(&self, oldest: Instant, rows: usize) -> Instant {
        let due = oldest + self.policy.max_queue_delay;
        let Some(schedule) = &self.schedule else {
            return due;
        };
        match schedule.close_at(rows) {
            Some(fill) => fill.min(due + schedule.longest_kernels()),
            None => due,
        }
    }

    /// Runs one batch, gathered into the executor's input buffers, and
    /// answers its requests; the batch's GPU stage times when it ran on the
    /// GPU without error.
    fn execute(&self, executor: &mut dyn Executor, pieces: Vec<Piece>) -> Option<StageTimes> {
        let now = Instant::now();
        let pieces: Vec<Piece> = pieces
            .into_iter()
            .filter(|p| {
                let mut state = lock(&p.job.state);
                if state.abandoned() {
                    return false;
                }
                if now >= p.job.deadline {
                    state.answer(Err(InferError::Timeout(
                        "the request's deadline passed while it was queued".into(),
                    )));
                    return false;
                }
                true
            })
            .collect();
        if pieces.is_empty() {
            return None;
        }
        let rows: usize = pieces.iter().map(|p| p.rows).sum();
        let batch = self.signature.batch_for(rows);
        for p in &pieces {
            self.metrics
                .queue_seconds
                .observe((now - p.enqueued).as_secs_f64());
        }
        self.metrics.batch_size.observe(rows as f64);
        self.metrics.padding_rows.inc_by((batch - rows) as u64);
        let signature = &self.signature;
        let mut gathering = Duration::ZERO;
        let mut fill = |i: usize, data: InputStaging<'_>| {
            let start = Instant::now();
            gather(&pieces, i, signature.inputs[i].item_len(), data);
            gathering += start.elapsed();
        };
        let start = Instant::now();
        let result = catch_unwind(AssertUnwindSafe(|| {
            let pinned = pinned_parts(&pieces);
            match pinned.and_then(|parts| executor.run_pinned(batch, &parts)) {
                Some(result) => result,
                None => executor.run(batch, rows, &mut fill),
            }
        }));
        let wall = start.elapsed();
        self.metrics.compute_seconds.observe(wall.as_secs_f64());
        self.metrics.gather_seconds.observe(gathering.as_secs_f64());
        let stages = match &result {
            Ok(Ok(_)) => executor.last_stage_times(),
            _ => None,
        };
        if let Some(t) = stages {
            for (h, ms) in self.metrics.device_seconds.iter().zip([
                t.input_ms,
                t.turn_wait_ms,
                t.kernels_ms,
                t.output_ms,
            ]) {
                h.observe(f64::from(ms) * 1e-3);
            }
        }
        let outputs = match result {
            Ok(Ok(outputs)) => self.check_outputs(rows, outputs),
            Ok(Err(e)) => Err(InferError::Internal(e.to_string())),
            Err(_) => Err(InferError::Internal(
                "the backend panicked on this batch".into(),
            )),
        };
        let split = ComputeSplit::of_batch(wall, gathering, stages);
        if outputs.is_ok() {
            self.statistics.record_batch(batch, split);
        }
        let mut row = 0;
        for p in &pieces {
            let mut state = lock(&p.job.state);
            match &outputs {
                Ok(outputs) => {
                    for ((out, spec), batch_out) in state
                        .outputs
                        .iter_mut()
                        .zip(&self.signature.outputs)
                        .zip(outputs)
                    {
                        let item = spec.item_len();
                        out[p.offset * item..][..p.rows * item]
                            .copy_from_slice(&batch_out[row * item..][..p.rows * item]);
                    }
                    state.timing.add_piece(now - p.enqueued, split);
                    state.remaining -= p.rows;
                    if state.remaining == 0 {
                        let outputs = std::mem::take(&mut state.outputs);
                        state.answer(Ok(outputs));
                    }
                }
                Err(e) => {
                    tracing::error!("batch of {rows} rows failed: {e}");
                    state.answer(Err(e.clone()));
                }
            }
            row += p.rows;
        }
        stages.filter(|_| outputs.is_ok())
    }

    /// The backend's outputs must have the signature's sizes for `rows`
    /// request rows.
    fn check_outputs(
        &self,
        rows: usize,
        outputs: Vec<Vec<f32>>,
    ) -> Result<Vec<Vec<f32>>, InferError> {
        let sizes_ok = outputs.len() == self.signature.outputs.len()
            && outputs
                .iter()
                .zip(&self.signature.outputs)
                .all(|(o, spec)| o.len() == rows * spec.item_len());
        if sizes_ok {
            Ok(outputs)
        } else {
            Err(InferError::Internal(format!(
                "the backend returned outputs of {:?} values for {rows} rows",
                outputs.iter().map(Vec::len).collect::<Vec<_>>()
            )))
        }
    }
}

/// The pinned rows of a batch whose every piece is one whole pinned row of
/// the model's only input, in order; `None` for any other batch.
fn pinned_parts(pieces: &[Piece]) -> Option<Vec<&PinnedRows>> {
    pieces
        .iter()
        .map(|p| match p.job.inputs.as_slice() {
            [Rows::Pinned { row, .. }] if p.offset == 0 && p.rows == 1 => Some(row.pinned()),
            _ => None,
        })
        .collect()
}

/// Writes input `input` of `pieces`, in order, into the front of `data`
/// (rows of `item` values, converted to its element type) and zeros the
/// rest (padding rows, where the executor hands them over). The pieces are
/// copied in parallel: a batch of ResNet-50 images is tens of MB, too much
/// for one thread between two GPU batches.
fn gather(pieces: &[Piece], input: usize, item: usize, data: InputStaging<'_>) {
    use rayon::prelude::*;
    let mut rest = data;
    let mut copies = Vec::with_capacity(pieces.len());
    for p in pieces {
        let (dst, tail) = rest.split_at_mut(p.rows * item);
        copies.push((p, dst));
        rest = tail;
    }
    copies
        .into_par_iter()
        .for_each(|(p, dst)| p.job.inputs[input].copy_to(p.offset * item, dst));
    rest.fill_zero();
}

#[cfg(test)]
mod tests {
    use super::super::backend::{BackendError, Fill, TensorSpec};
    use super::super::metrics::Metrics;
    use super::*;

    /// Output row = input row × 10 + the batch it ran in; records batches.
    struct Scale {
        signature: Signature,
        seen: Arc<Mutex<Vec<usize>>>,
    }

    struct ScaleExecutor {
        seen: Arc<Mutex<Vec<usize>>>,
    }

    impl Executor for ScaleExecutor {
        fn run(
            &mut self,
            batch: usize,
            rows: usize,
            fill: &mut Fill<'_>,
        ) -> Result<Vec<Vec<f32>>, BackendError> {
            lock(&self.seen).push(batch);
            let mut input = vec![f32::NAN; batch * 2];
            fill(0, InputStaging::F32(&mut input));
            Ok(vec![input[..rows * 2]
                .iter()
                .map(|v| v * 10.0 + batch as f32)
                .collect()])
        }
    }

    impl Backend for Scale {
        fn signature(&self) -> &Signature {
            &self.signature
        }
        fn describe(&self) -> String {
            "scale".into()
        }
        fn executor(&self) -> Result<Box<dyn Executor>, BackendError> {
            Ok(Box::new(ScaleExecutor {
                seen: Arc::clone(&self.seen),
            }))
        }
    }

    /// A batched model of one fp32 input `x` and one fp32 output `y`, both
    /// `item_len` values a row.
    fn xy_signature(item_len: usize, batch_sizes: Vec<usize>) -> Signature {
        Signature {
            inputs: vec![TensorSpec::fp32("x", vec![item_len])],
            outputs: vec![TensorSpec::fp32("y", vec![item_len])],
            batched: true,
            batch_sizes,
        }
    }

    fn batcher(delay_ms: u64, capacity: usize) -> (Batcher, Arc<Mutex<Vec<usize>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let backend = Scale {
            signature: xy_signature(2, vec![1, 4, 8]),
            seen: Arc::clone(&seen),
        };
        let metrics = Metrics::new().unwrap().model("t");
        let policy = BatchPolicy {
            max_queue_delay: Duration::from_millis(delay_ms),
            queue_capacity: capacity,
            instances: 1,
            concurrent_batches: 1,
            fill_while_gpu_busy: false,
        };
        (
            Batcher::start("t", Arc::new(backend), policy, metrics).unwrap(),
            seen,
        )
    }

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    #[test]
    fn concurrent_requests_merge_and_get_their_own_rows() {
        let (b, seen) = batcher(200, 100);
        // Rows 3 + 1 + 2 = 6 → one batch padded to 8.
        let requests: Vec<(Vec<f32>, usize)> = vec![
            ((0..6).map(|v| v as f32).collect(), 3),
            (vec![100.0, 101.0], 1),
            (vec![200.0, 201.0, 202.0, 203.0], 2),
        ];
        let rxs: Vec<_> = requests
            .iter()
            .map(|(x, rows)| b.submit(vec![x.clone().into()], *rows, far()).unwrap())
            .collect();
        for ((x, _), rx) in requests.iter().zip(rxs) {
            let out = rx.blocking_recv().unwrap().reply.unwrap();
            let want: Vec<f32> = x.iter().map(|v| v * 10.0 + 8.0).collect();
            assert_eq!(out, vec![want]);
        }
        assert_eq!(*lock(&seen), vec![8]);
        b.shutdown();
    }

    #[test]
    fn batches_are_recorded_and_answers_carry_their_timing() {
        let (b, _) = batcher(50, 100);
        let rxs: Vec<_> = (0..3)
            .map(|_| b.submit(vec![vec![1.0; 2].into()], 1, far()).unwrap())
            .collect();
        for rx in rxs {
            let answer = rx.blocking_recv().unwrap();
            assert!(answer.reply.is_ok());
            let t = answer.timing;
            assert!(t.queue > Duration::ZERO, "{t:?}");
            assert!(t.compute.input > Duration::ZERO, "{t:?}");
            assert!(t.compute.infer > Duration::ZERO, "{t:?}");
        }
        let r = b.statistics().report("t", "1");
        assert_eq!(r.execution_count, 1, "{r:?}");
        assert_eq!(r.batch_stats.len(), 1, "{r:?}");
        assert_eq!(r.batch_stats[0].batch_size, 4);
        assert_eq!(r.batch_stats[0].compute_infer.count, 1);
        // Requests are counted by the handler, not the batcher.
        assert_eq!(r.inference_stats.success.count, 0);
        b.shutdown();
    }

    #[test]
    fn a_large_request_is_split_and_reassembled() {
        let (b, seen) = batcher(0, 100);
        let x: Vec<f32> = (0..2 * 11).map(|v| v as f32).collect();
        let out = b
            .submit(vec![x.clone().into()], 11, far())
            .unwrap()
            .blocking_recv()
            .unwrap()
            .reply
            .unwrap();
        // 8 rows at batch 8, then 3 rows padded to 4.
        assert_eq!(*lock(&seen), vec![8, 4]);
        let want: Vec<f32> = x
            .iter()
            .enumerate()
            .map(|(i, v)| v * 10.0 + if i < 16 { 8.0 } else { 4.0 })
            .collect();
        assert_eq!(out[0], want);
        b.shutdown();
    }

    /// Echoes its input and records every batch's input as it saw it.
    struct Record(Signature, Arc<Mutex<Vec<Vec<f32>>>>);

    impl Backend for Record {
        fn signature(&self) -> &Signature {
            &self.0
        }
        fn describe(&self) -> String {
            "record".into()
        }
        fn executor(&self) -> Result<Box<dyn Executor>, BackendError> {
            /// One buffer for every batch, as the GPU's staging is: what
            /// a batch does not overwrite keeps the previous batch's values.
            struct Run(Arc<Mutex<Vec<Vec<f32>>>>, Vec<f32>);
            impl Executor for Run {
                fn run(
                    &mut self,
                    batch: usize,
                    rows: usize,
                    fill: &mut Fill<'_>,
                ) -> Result<Vec<Vec<f32>>, BackendError> {
                    let input = &mut self.1[..batch * 2];
                    fill(0, InputStaging::F32(input));
                    lock(&self.0).push(input.to_vec());
                    Ok(vec![input[..rows * 2].to_vec()])
                }
            }
            Ok(Box::new(Run(Arc::clone(&self.1), vec![f32::NAN; 16])))
        }
    }

    #[test]
    fn padding_rows_are_zero_after_a_larger_batch() {
        // The executor's input buffer is reused: a smaller batch after a
        // larger one must see zeros in its padding rows, not the old rows.
        let item = TensorSpec::fp32("x", vec![2]);
        let signature = Signature {
            inputs: vec![item.clone()],
            outputs: vec![item],
            batched: true,
            batch_sizes: vec![1, 4, 8],
        };
        let seen = Arc::new(Mutex::new(Vec::new()));
        let policy = BatchPolicy {
            max_queue_delay: Duration::ZERO,
            queue_capacity: 100,
            instances: 1,
            concurrent_batches: 1,
            fill_while_gpu_busy: false,
        };
        let metrics = Metrics::new().unwrap().model("t");
        let backend = Arc::new(Record(signature, Arc::clone(&seen)));
        let b = Batcher::start("t", backend, policy, metrics).unwrap();
        let full: Vec<f32> = (1..=16).map(|v| v as f32).collect();
        let out = b.submit(vec![full.clone().into()], 8, far()).unwrap();
        assert_eq!(out.blocking_recv().unwrap().reply.unwrap()[0], full);
        let small = vec![100.0, 101.0, 102.0, 103.0];
        let out = b.submit(vec![small.clone().into()], 2, far()).unwrap();
        assert_eq!(out.blocking_recv().unwrap().reply.unwrap()[0], small);
        let mut padded = small;
        padded.resize(8, 0.0);
        assert_eq!(*lock(&seen), vec![full, padded]);
        b.shutdown();
    }

    /// Like the GPU executor of an FP16 model: one f16 staging buffer, of
    /// which only the request rows are handed to `fill` (and would be copied
    /// to the device); records what the rows-only view held.
    /// Each batch's size and the rows it was handed.
    type Seen = Arc<Mutex<Vec<(usize, Vec<f32>)>>>;

    struct HalfRows(Signature, Seen);

    impl Backend for HalfRows {
        fn signature(&self) -> &Signature {
            &self.0
        }
        fn describe(&self) -> String {
            "half rows".into()
        }
        fn executor(&self) -> Result<Box<dyn Executor>, BackendError> {
            struct Run(Seen, Vec<half::f16>);
            impl Executor for Run {
                fn run(
                    &mut self,
                    batch: usize,
                    rows: usize,
                    fill: &mut Fill<'_>,
                ) -> Result<Vec<Vec<f32>>, BackendError> {
                    let staging = InputStaging::F16(&mut self.1[..batch * 2]);
                    fill(0, staging.split_at_mut(rows * 2).0);
                    let seen: Vec<f32> = self.1[..rows * 2].iter().map(|h| h.to_f32()).collect();
                    lock(&self.0).push((batch, seen.clone()));
                    Ok(vec![seen])
                }
            }
            Ok(Box::new(Run(Arc::clone(&self.1), vec![half::f16::NAN; 16])))
        }
    }

    #[test]
    fn fp16_rows_from_bytes_and_numbers_gather_into_the_rows_of_f16_staging() {
        use super::super::datatype::Datatype;
        let input = TensorSpec {
            datatype: Datatype::FP16,
            ..TensorSpec::fp32("x", vec![2])
        };
        let signature = Signature {
            inputs: vec![input],
            outputs: vec![TensorSpec::fp32("y", vec![2])],
            batched: true,
            batch_sizes: vec![1, 4, 8],
        };
        let seen = Arc::new(Mutex::new(Vec::new()));
        let policy = BatchPolicy {
            max_queue_delay: Duration::from_millis(200),
            queue_capacity: 100,
            instances: 1,
            concurrent_batches: 1,
            fill_while_gpu_busy: false,
        };
        let metrics = Metrics::new().unwrap().model("t");
        let backend = Arc::new(HalfRows(signature, Arc::clone(&seen)));
        let b = Batcher::start("t", backend, policy, metrics).unwrap();
        // Two rows as raw f16 bytes, one row as numbers (rounded to f16):
        // three rows run at batch 4, and only those three are handed over.
        let raw = [1.5f32, -2.0, 0.25, 4096.0];
        let bytes: Vec<u8> = raw
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect();
        let rows = Rows::from_le_bytes(bytes.into(), Datatype::FP16).unwrap();
        let first = b.submit(vec![rows], 2, far()).unwrap();
        let second = b.submit(vec![vec![0.1, 7.0].into()], 1, far()).unwrap();
        assert_eq!(first.blocking_recv().unwrap().reply.unwrap()[0], raw);
        let tenth = half::f16::from_f32(0.1).to_f32();
        assert_eq!(
            second.blocking_recv().unwrap().reply.unwrap()[0],
            [tenth, 7.0]
        );
        let want: Vec<f32> = raw.iter().copied().chain([tenth, 7.0]).collect();
        assert_eq!(*lock(&seen), vec![(4, want)]);
        b.shutdown();
    }

    #[test]
    fn a_full_queue_refuses_and_a_closed_one_is_unavailable() {
        let (b, _) = batcher(10_000, 4);
        let _first = b.submit(vec![vec![0.0; 6].into()], 3, far()).unwrap();
        let e = b.submit(vec![vec![0.0; 4].into()], 2, far()).unwrap_err();
        assert!(matches!(e, InferError::QueueFull(_)), "{e:?}");
        let e = b.submit(vec![vec![0.0; 10].into()], 5, far()).unwrap_err();
        assert!(matches!(e, InferError::InvalidArgument(_)), "{e:?}");
        b.close();
        let e = b.submit(vec![vec![0.0; 2].into()], 1, far()).unwrap_err();
        assert!(matches!(e, InferError::Unavailable(_)), "{e:?}");
        // Closing flushes the queued request without waiting for the delay.
        b.shutdown();
    }

    #[test]
    fn expired_and_abandoned_requests_do_not_run() {
        let (b, seen) = batcher(50, 100);
        let expired = b
            .submit(vec![vec![0.0; 2].into()], 1, Instant::now())
            .unwrap();
        drop(b.submit(vec![vec![0.0; 2].into()], 1, far()).unwrap());
        let e = expired.blocking_recv().unwrap().reply.unwrap_err();
        assert!(matches!(e, InferError::Timeout(_)), "{e:?}");
        b.shutdown();
        assert!(lock(&seen).is_empty());
    }

    /// An executor that holds fixed GPU memory and answers zeros.
    struct Holding;

    impl Executor for Holding {
        fn run(
            &mut self,
            _batch: usize,
            rows: usize,
            _fill: &mut Fill<'_>,
        ) -> Result<Vec<Vec<f32>>, BackendError> {
            Ok(vec![vec![0.0; rows]])
        }

        fn gpu_memory(&self) -> Option<GpuMemory> {
            Some(GpuMemory {
                weights: 100,
                arena: 20,
                staging: 3,
                device_used: 500,
                device_total: 1000,
            })
        }
    }

    struct HoldingBackend(Signature);

    impl Backend for HoldingBackend {
        fn signature(&self) -> &Signature {
            &self.0
        }
        fn describe(&self) -> String {
            "holding".into()
        }
        fn executor(&self) -> Result<Box<dyn Executor>, BackendError> {
            Ok(Box::new(Holding))
        }
    }

    #[test]
    fn executors_gpu_memory_counts_while_they_run() {
        let metrics = Metrics::new().unwrap();
        let backend = HoldingBackend(xy_signature(1, vec![1]));
        let policy = BatchPolicy {
            max_queue_delay: Duration::ZERO,
            queue_capacity: 8,
            instances: 3,
            concurrent_batches: 3,
            fill_while_gpu_busy: false,
        };
        let b = Batcher::start("m", Arc::new(backend), policy, metrics.model("m")).unwrap();
        let out = b.submit(vec![vec![1.0].into()], 1, far()).unwrap();
        assert_eq!(out.blocking_recv().unwrap().reply.unwrap(), [[0.0]]);
        // Executors count their memory once they are running; wait for all three.
        let running =
            |text: &str| text.contains(r#"aotune_gpu_memory_bytes{kind="weights",model="m"} 300"#);
        let start = Instant::now();
        while !running(&metrics.render()) && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let text = metrics.render();
        for needle in [
            r#"aotune_gpu_memory_bytes{kind="weights",model="m"} 300"#,
            r#"aotune_gpu_memory_bytes{kind="arena",model="m"} 60"#,
            r#"aotune_gpu_memory_bytes{kind="staging",model="m"} 9"#,
            r#"aotune_gpu_device_memory_bytes{kind="used"} 500"#,
            r#"aotune_gpu_device_memory_bytes{kind="total"} 1000"#,
        ] {
            assert!(text.contains(needle), "{needle} not in\n{text}");
        }
        // The statistics report the same: GPU = weights + arena, pinned = staging.
        let memory = b.statistics().report("m", "1").memory_usage;
        let bytes: Vec<(&str, u64)> = memory.iter().map(|m| (m.kind, m.byte_size)).collect();
        assert_eq!(bytes, [("GPU", 360), ("CPU_PINNED", 9)], "{memory:?}");
        b.shutdown();
        assert!(b.statistics().report("m", "1").memory_usage.is_empty());
        let text = metrics.render();
        assert!(
            text.contains(r#"aotune_gpu_memory_bytes{kind="weights",model="m"} 0"#),
            "{text}"
        );
    }

    /// What the [`Slow`] backend's executors saw: each batch's request rows,
    /// the batches running now and the most that ever ran at once.
    #[derive(Default)]
    struct SlowLog {
        rows: Mutex<Vec<usize>>,
        running: std::sync::atomic::AtomicUsize,
        most: std::sync::atomic::AtomicUsize,
        stage_times: std::sync::atomic::AtomicBool,
    }

    const SLOW_BATCH: Duration = Duration::from_millis(50);

    /// Sleeps [`SLOW_BATCH`] per batch, logging it.
    struct Slow {
        signature: Signature,
        log: Arc<SlowLog>,
    }

    struct SlowExecutor(Arc<SlowLog>);

    impl Executor for SlowExecutor {
        fn run(
            &mut self,
            _batch: usize,
            rows: usize,
            _fill: &mut Fill<'_>,
        ) -> Result<Vec<Vec<f32>>, BackendError> {
            use std::sync::atomic::Ordering::SeqCst;
            let log = &self.0;
            let now = log.running.fetch_add(1, SeqCst) + 1;
            log.most.fetch_max(now, SeqCst);
            lock(&log.rows).push(rows);
            std::thread::sleep(SLOW_BATCH);
            log.running.fetch_sub(1, SeqCst);
            Ok(vec![vec![0.0; rows]])
        }

        /// As a GPU's would be, when the log asks for them: the sleep as
        /// kernels, a copy of 0.01 ms a row.
        fn last_stage_times(&self) -> Option<StageTimes> {
            use std::sync::atomic::Ordering::SeqCst;
            self.0.stage_times.load(SeqCst).then(|| StageTimes {
                input_ms: 0.01,
                turn_wait_ms: 0.0,
                kernels_ms: SLOW_BATCH.as_secs_f32() * 1e3,
                output_ms: 0.01,
            })
        }
    }

    impl Backend for Slow {
        fn signature(&self) -> &Signature {
            &self.signature
        }
        fn describe(&self) -> String {
            "slow".into()
        }
        fn executor(&self) -> Result<Box<dyn Executor>, BackendError> {
            Ok(Box::new(SlowExecutor(Arc::clone(&self.log))))
        }
    }

    #[test]
    fn one_batch_slot_makes_requests_that_arrive_during_a_batch_join_the_next() {
        use std::sync::atomic::Ordering::SeqCst;
        let log = Arc::new(SlowLog::default());
        let backend = Slow {
            signature: xy_signature(1, vec![1, 4, 8]),
            log: Arc::clone(&log),
        };
        let policy = BatchPolicy {
            max_queue_delay: Duration::ZERO,
            queue_capacity: 100,
            instances: 3,
            concurrent_batches: 1,
            fill_while_gpu_busy: false,
        };
        let metrics = Metrics::new().unwrap().model("t");
        let b = Batcher::start("t", Arc::new(backend), policy, metrics).unwrap();
        let one = || b.submit(vec![vec![1.0].into()], 1, far()).unwrap();
        let first = one();
        let started = Instant::now();
        while log.running.load(SeqCst) == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the first batch never ran"
            );
            std::thread::yield_now();
        }
        // Two executors are idle, but the one slot is taken: these five wait
        // for it and run as one batch.
        let rest: Vec<_> = (0..5).map(|_| one()).collect();
        for rx in std::iter::once(first).chain(rest) {
            assert!(rx.blocking_recv().unwrap().reply.is_ok());
        }
        assert_eq!(*lock(&log.rows), vec![1, 5]);
        assert_eq!(log.most.load(SeqCst), 1);
        b.shutdown();
    }

    /// Rows of each batch when, on two executors, one batch of one row runs
    /// (after a first that taught the schedule its time) and three requests
    /// arrive meanwhile, with `max_queue_delay` 0.
    fn batches_while_one_runs(fill_while_gpu_busy: bool) -> Vec<usize> {
        use std::sync::atomic::Ordering::SeqCst;
        let log = Arc::new(SlowLog::default());
        log.stage_times.store(true, SeqCst);
        let backend = Slow {
            signature: xy_signature(1, vec![1, 2, 4, 8]),
            log: Arc::clone(&log),
        };
        let policy = BatchPolicy {
            max_queue_delay: Duration::ZERO,
            queue_capacity: 100,
            instances: 2,
            concurrent_batches: 2,
            fill_while_gpu_busy,
        };
        let metrics = Metrics::new().unwrap().model("t");
        let b = Batcher::start("t", Arc::new(backend), policy, metrics).unwrap();
        let one = || b.submit(vec![vec![1.0].into()], 1, far()).unwrap();
        // Nothing on the GPU: the delay rule, so the first runs at once.
        let started = Instant::now();
        assert!(one().blocking_recv().unwrap().reply.is_ok());
        assert!(
            started.elapsed() < 4 * SLOW_BATCH,
            "{:?}",
            started.elapsed()
        );
        let running = one();
        while log.running.load(SeqCst) == 0 {
            assert!(started.elapsed() < Duration::from_secs(10));
            std::thread::yield_now();
        }
        let rest: Vec<_> = (0..3)
            .map(|_| {
                std::thread::sleep(Duration::from_millis(3));
                one()
            })
            .collect();
        for rx in std::iter::once(running).chain(rest) {
            assert!(rx.blocking_recv().unwrap().reply.is_ok());
        }
        b.shutdown();
        let rows = lock(&log.rows).clone();
        rows
    }

    #[test]
    fn filling_while_the_gpu_is_busy_merges_what_arrives_during_a_batch() {
        // The second executor keeps its batch open until the running one is
        // predicted to end, so the three requests run as one batch.
        assert_eq!(batches_while_one_runs(true), vec![1, 1, 3]);
        // Without it the second executor takes the first of them at once.
        let rows = batches_while_one_runs(false);
        assert_eq!(rows[..3], [1, 1, 1], "{rows:?}");
    }
}
