//! What every endpoint shares, and the protocol-neutral inference path:
//! look the model up, check the request, queue it, wait for its result under
//! the request's deadline, count the outcome (in the metrics and, once the
//! request was queued, in the model's statistics).

use super::error::InferError;
use super::metrics::Metrics;
use super::repository::{LoadedModel, ModelState, Repository, VERSION};
use super::row_pool::RowPool;
use super::rows::Rows;
use super::statistics::{Report, RequestTiming};
use super::tensor::{prepare, select_outputs, ImageDecoder, ImageInput, Prepared, RequestInput};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The server's name in metadata responses.
pub const SERVER_NAME: &str = "aotune";
/// The KServe / Triton extensions this server implements.
pub const EXTENSIONS: [&str; 4] = [
    "binary_tensor_data",
    "model_configuration",
    "parameters",
    "statistics",
];

/// Shared by the HTTP and gRPC services.
pub struct ServerState {
    pub repository: Arc<Repository>,
    pub metrics: Arc<Metrics>,
    pub image_decoder: Option<ImageDecoder>,
    /// Largest request body (HTTP) or message (gRPC) accepted, in bytes.
    pub max_body_bytes: usize,
    /// Ready only when every model is (Triton's `--strict-readiness`).
    pub strict_readiness: bool,
    stopping: AtomicBool,
}

/// One inference request, decoded from either protocol.
pub struct InferCall {
    pub model: String,
    pub version: String,
    pub inputs: Vec<RequestInput>,
    /// Requested outputs by name; empty: all.
    pub outputs: Vec<String>,
    /// The client's own deadline (HTTP/gRPC `timeout` parameter, µs).
    pub timeout: Option<Duration>,
}

/// A successful inference.
pub struct InferDone {
    pub model: Arc<LoadedModel>,
    pub rows: usize,
    /// (output index in the signature, its `rows × item_len` values), in the
    /// order requested.
    pub outputs: Vec<(usize, Vec<f32>)>,
    /// What it spent in the model's batcher.
    pub timing: RequestTiming,
}

impl ServerState {
    pub fn new(
        repository: Arc<Repository>,
        metrics: Arc<Metrics>,
        image_decoder: Option<ImageDecoder>,
        max_body_bytes: usize,
        strict_readiness: bool,
    ) -> ServerState {
        ServerState {
            repository,
            metrics,
            image_decoder,
            max_body_bytes,
            strict_readiness,
            stopping: AtomicBool::new(false),
        }
    }

    /// From now on the server reports not ready (shutdown has begun).
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// KServe's server readiness: not stopping, no model still loading, and
    /// (strict) every model ready, or (not strict) at least one or none
    /// configured.
    pub fn ready(&self) -> bool {
        if self.stopping.load(Ordering::SeqCst) || !self.repository.settled() {
            return false;
        }
        if self.strict_readiness {
            return self.repository.all_ready();
        }
        let index = self.repository.index();
        index.is_empty() || index.iter().any(|(_, s)| matches!(s, ModelState::Ready(_)))
    }

    /// Runs one inference and counts its outcome under `protocol`.
    pub async fn infer(&self, call: InferCall, protocol: &str) -> Result<InferDone, InferError> {
        let start = Instant::now();
        let label = self.model_label(&call.model);
        let mut queued = None;
        let result = self.infer_inner(call, &mut queued).await;
        let elapsed = start.elapsed();
        if let Some(model) = queued {
            let statistics = model.batcher.statistics();
            match &result {
                Ok(done) => statistics.record_success(done.rows, elapsed, &done.timing),
                Err(_) => statistics.record_failure(elapsed),
            }
        }
        match &result {
            Ok(_) => self
                .metrics
                .request(&label, protocol, "success", Some(elapsed)),
            Err(e) => {
                tracing::debug!(model = %label, protocol, "request failed: {e}");
                self.metrics.request(&label, protocol, e.outcome(), None);
            }
        }
        result
    }

    /// The statistics a request asks for. With a `model`: that model at
    /// `version` ("" or [`VERSION`]); an unknown model or version is
    /// NotFound, one not ready Unavailable, as the other model endpoints
    /// answer (Triton too reports only ready models). Without: every ready
    /// model, by name (the version is then ignored, as Triton does).
    pub fn statistics(&self, model: &str, version: &str) -> Result<Vec<Report>, InferError> {
        if !model.is_empty() {
            let m = self.repository.ready(model, version)?;
            return Ok(vec![m.batcher.statistics().report(&m.name, VERSION)]);
        }
        Ok(self
            .repository
            .index()
            .into_iter()
            .filter_map(|(name, state)| match state {
                ModelState::Ready(m) => Some(m.batcher.statistics().report(&name, VERSION)),
                _ => None,
            })
            .collect())
    }

    /// Counts a request that failed before it named a model it could reach
    /// (malformed body, unknown endpoint).
    pub fn count_failure(&self, model: &str, protocol: &str, error: &InferError) {
        let label = self.model_label(model);
        self.metrics
            .request(&label, protocol, error.outcome(), None);
    }

    /// The metrics label of a model name: the name for a model of the
    /// repository, else one fixed label (clients cannot grow the label set).
    fn model_label(&self, model: &str) -> String {
        if self.repository.get(model).is_some() {
            model.to_string()
        } else {
            "_unknown".to_string()
        }
    }

    /// Checks `call` against its model and runs it; sets `queued` to the
    /// model once the request is handed to its queue (whether the queue
    /// takes it or not).
    async fn infer_inner(
        &self,
        call: InferCall,
        queued: &mut Option<Arc<LoadedModel>>,
    ) -> Result<InferDone, InferError> {
        let model = self.repository.ready(&call.model, &call.version)?;
        let signature = model.backend.signature();
        let picked = select_outputs(signature, &call.outputs)?;
        let image = match (&model.config.image, self.image_decoder) {
            (Some(i), Some(decode)) => Some(ImageInput {
                input: &i.input,
                decode,
            }),
            _ => None,
        };
        let mut prepared = prepare(signature, image, call.inputs)?;
        if let Some(pool) = model.backend.row_pool() {
            adopt_into_pool(pool, &mut prepared);
        }
        let timeout = call
            .timeout
            .map_or(model.config.timeout, |t| t.min(model.config.timeout));
        let deadline = Instant::now() + timeout;
        let rows = prepared.rows;
        *queued = Some(Arc::clone(&model));
        let rx = model.batcher.submit(prepared.inputs, rows, deadline)?;
        let answer = tokio::time::timeout_at(deadline.into(), rx)
            .await
            .map_err(|_| {
                InferError::Timeout(format!(
                    "no result within the request's timeout of {} ms",
                    timeout.as_millis()
                ))
            })?
            .map_err(|_| InferError::Internal("the executor dropped the request".into()))?;
        self.metrics.handoff(&model.name, answer.sent.elapsed());
        let timing = answer.timing;
        let reply = answer.reply?;
        let mut outputs: Vec<Option<Vec<f32>>> = reply.into_iter().map(Some).collect();
        let outputs = picked
            .into_iter()
            .map(|i| {
                (
                    i,
                    outputs
                        .get_mut(i)
                        .and_then(Option::take)
                        .unwrap_or_default(),
                )
            })
            .collect();
        Ok(InferDone {
            model,
            rows,
            outputs,
            timing,
        })
    }
}

/// Copies a one-row request whose only input came as raw bytes of the pool's
/// datatype into a pinned buffer of `pool`, so its batch is copied to the
/// device from there (docs/design/serving-arrival-copy.md). Anything else,
/// or an empty pool, stays as it is.
fn adopt_into_pool(pool: &Arc<RowPool>, prepared: &mut Prepared) {
    if prepared.rows != 1 {
        return;
    }
    let [Rows::Le { bytes, datatype }] = prepared.inputs.as_slice() else {
        return;
    };
    if *datatype != pool.datatype() {
        return;
    }
    let datatype = *datatype;
    if let Some(row) = pool.take(bytes) {
        prepared.inputs[0] = Rows::Pinned { row, datatype };
    }
}
