//! The KServe v2 HTTP/REST endpoints (axum), as Triton serves them:
//!
//! | method | path | answer |
//! | --- | --- | --- |
//! | GET | `/v2/health/live` | 200 while the process serves |
//! | GET | `/v2/health/ready` | 200 when ready (see [`ServerState::ready`]), else 503 |
//! | GET | `/v2` | server metadata |
//! | GET | `/v2/models/{m}[/versions/{v}]` | model metadata |
//! | GET | `/v2/models/{m}[/versions/{v}]/ready` | 200 when the model serves, else 503 |
//! | GET | `/v2/models/{m}[/versions/{v}]/config` | the model's configuration (Triton's JSON form) |
//! | POST | `/v2/models/{m}[/versions/{v}]/infer` | inference ([`super::http_wire`]) |
//! | GET | `/v2/models[/{m}[/versions/{v}]]/stats` | Triton's statistics of one ready model, or of all ([`super::statistics`]) |
//! | POST | `/v2/repository/index` | every model, its state and, when failed, why |
//!
//! Every error is `{"error": "<message>"}` with the status of
//! [`InferError::http_status`]; so are unknown paths (404) and methods (405).
//! Bodies over `--max-body-bytes` get 413 before they are read in full;
//! reading a body is bounded by the default request timeout.

use super::error::InferError;
use super::http_wire::{encode_response, parse_request, HEADER_LENGTH};
use super::model_info::{model_config_json, model_metadata_json};
use super::repository::{check_version, ModelState};
use super::state::{ServerState, EXTENSIONS, SERVER_NAME};
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

type Shared = State<Arc<ServerState>>;

/// How long reading a request body may take.
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// The router of every endpoint above.
pub fn router(state: Arc<ServerState>) -> Router {
    Router::new()
        .route("/v2/health/live", get(live))
        .route("/v2/health/ready", get(ready))
        .route("/v2", get(server_metadata))
        .route("/v2/models/{model}", get(model_metadata))
        .route(
            "/v2/models/{model}/versions/{version}",
            get(model_metadata_v),
        )
        .route("/v2/models/{model}/ready", get(model_ready))
        .route(
            "/v2/models/{model}/versions/{version}/ready",
            get(model_ready_v),
        )
        .route("/v2/models/{model}/config", get(model_config))
        .route(
            "/v2/models/{model}/versions/{version}/config",
            get(model_config_v),
        )
        .route("/v2/models/stats", get(all_statistics))
        .route("/v2/models/{model}/stats", get(model_statistics))
        .route(
            "/v2/models/{model}/versions/{version}/stats",
            get(model_statistics_v),
        )
        .route("/v2/models/{model}/infer", post(infer))
        .route("/v2/models/{model}/versions/{version}/infer", post(infer_v))
        .route("/v2/repository/index", post(repository_index))
        .fallback(unknown_endpoint)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

impl IntoResponse for InferError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(json!({ "error": self.to_string() }))).into_response()
    }
}

async fn unknown_endpoint(uri: axum::http::Uri) -> InferError {
    InferError::NotFound(format!("unknown endpoint '{}'", uri.path()))
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    let body = json!({ "error": format!("{method} is not allowed on '{}'", uri.path()) });
    (StatusCode::METHOD_NOT_ALLOWED, Json(body)).into_response()
}

async fn live() -> StatusCode {
    StatusCode::OK
}

async fn ready(State(state): Shared) -> Response {
    if state.ready() {
        StatusCode::OK.into_response()
    } else {
        InferError::Unavailable("the server is not ready".into()).into_response()
    }
}

async fn server_metadata() -> Json<serde_json::Value> {
    Json(json!({
        "name": SERVER_NAME,
        "version": env!("CARGO_PKG_VERSION"),
        "extensions": EXTENSIONS,
    }))
}

async fn model_metadata(state: Shared, Path(model): Path<String>) -> Response {
    model_metadata_v(state, Path((model, String::new()))).await
}

async fn model_metadata_v(
    State(state): Shared,
    Path((model, version)): Path<(String, String)>,
) -> Response {
    match state.repository.ready(&model, &version) {
        Ok(m) => Json(model_metadata_json(&m)).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn model_ready(state: Shared, Path(model): Path<String>) -> Response {
    model_ready_v(state, Path((model, String::new()))).await
}

async fn model_ready_v(
    State(state): Shared,
    Path((model, version)): Path<(String, String)>,
) -> Response {
    if let Err(e) = check_version(&model, &version) {
        return e.into_response();
    }
    match state.repository.get(&model) {
        None => InferError::NotFound(format!("unknown model '{model}'")).into_response(),
        Some(ModelState::Ready(_)) => StatusCode::OK.into_response(),
        Some(other) => InferError::Unavailable(format!(
            "model '{model}' is {}{}",
            other.name(),
            match other.reason() {
                r if r.is_empty() => String::new(),
                r => format!(": {r}"),
            }
        ))
        .into_response(),
    }
}

async fn model_config(state: Shared, Path(model): Path<String>) -> Response {
    model_config_v(state, Path((model, String::new()))).await
}

async fn model_config_v(
    State(state): Shared,
    Path((model, version)): Path<(String, String)>,
) -> Response {
    match state.repository.ready(&model, &version) {
        Ok(m) => Json(model_config_json(&m)).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn all_statistics(state: Shared) -> Response {
    model_statistics_v(state, Path((String::new(), String::new()))).await
}

async fn model_statistics(state: Shared, Path(model): Path<String>) -> Response {
    model_statistics_v(state, Path((model, String::new()))).await
}

/// `{"model_stats": [...]}`; an empty `model` asks for every ready model.
async fn model_statistics_v(
    State(state): Shared,
    Path((model, version)): Path<(String, String)>,
) -> Response {
    match state.statistics(&model, &version) {
        Ok(reports) => Json(json!({ "model_stats": reports })).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn repository_index(State(state): Shared) -> Json<serde_json::Value> {
    let models: Vec<serde_json::Value> = state
        .repository
        .index()
        .into_iter()
        .map(|(name, s)| {
            json!({
                "name": name,
                "version": super::repository::VERSION,
                "state": s.name(),
                "reason": s.reason(),
            })
        })
        .collect();
    Json(serde_json::Value::Array(models))
}

async fn infer(
    state: Shared,
    Path(model): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    infer_v(state, Path((model, String::new())), headers, body).await
}

async fn infer_v(
    State(state): Shared,
    Path((model, version)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let parsed = read_body(&state, &headers, body).await.and_then(|bytes| {
        let header_length = header_length(&headers)?;
        parse_request(&model, &version, &bytes, header_length)
    });
    let (call, encoding) = match parsed {
        Ok(r) => r,
        Err(e) => {
            state.count_failure(&model, "http", &e);
            return e.into_response();
        }
    };
    match state.infer(call, "http").await {
        Ok(done) => {
            let (body, header) = encode_response(&encoding, &done);
            let mut response = body.into_response();
            let h = response.headers_mut();
            let content_type = match header {
                Some(n) => {
                    h.insert(HEADER_LENGTH, n.into());
                    "application/octet-stream"
                }
                None => "application/json",
            };
            h.insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(content_type),
            );
            response
        }
        Err(e) => e.into_response(),
    }
}

/// `Inference-Header-Content-Length`, if given.
fn header_length(headers: &HeaderMap) -> Result<Option<usize>, InferError> {
    let Some(value) = headers.get(HEADER_LENGTH) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .map(Some)
        .ok_or_else(|| {
            InferError::invalid(format!(
                "Inference-Header-Content-Length must be a byte count, got {value:?}"
            ))
        })
}

/// Reads the body: at most `max_body_bytes`, uncompressed, within
/// [`BODY_READ_TIMEOUT`].
async fn read_body(
    state: &ServerState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Bytes, InferError> {
    let limit = state.max_body_bytes;
    if let Some(encoding) = headers.get(header::CONTENT_ENCODING) {
        if encoding.as_bytes() != b"identity" {
            return Err(InferError::invalid(format!(
                "Content-Encoding {encoding:?} is not supported: send the body uncompressed"
            )));
        }
    }
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let too_large = || {
        InferError::TooLarge(format!(
            "the request body is larger than the server's limit of {limit} bytes"
        ))
    };
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    match tokio::time::timeout(BODY_READ_TIMEOUT, axum::body::to_bytes(body, limit)).await {
        Err(_) => Err(InferError::Timeout(format!(
            "the request body did not arrive within {} s",
            BODY_READ_TIMEOUT.as_secs()
        ))),
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => {
            let length_limit = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            if length_limit {
                Err(too_large())
            } else {
                Err(InferError::invalid(format!(
                    "reading the request body: {e}"
                )))
            }
        }
    }
}
