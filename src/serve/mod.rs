//! `aotune serve`: a KServe v2 / Triton-compatible inference server over a
//! model repository (docs/serving.md).
//!
//! The pieces, one concern each: [`repository`] finds and loads models
//! ([`config`] is their `config.json`); [`backend`] is what runs them, the
//! CPU reference ([`cpu_backend`]) or the GPU runtime ([`gpu_backend`]);
//! [`batcher`] queues requests per model and merges them into the compiled
//! batch sizes; [`tensor`] checks requests against a model; [`state`] is the
//! protocol-neutral inference path; [`http`] (with [`http_wire`]) and
//! [`grpc`] (with the generated [`proto`]) are the two protocols;
//! [`metrics`] is Prometheus; [`shutdown`] is SIGTERM / ctrl-c.
//!
//! [`serve`] binds the three listeners, reports their addresses, loads the
//! models in the background (the server is live at once and ready once they
//! are loaded), and serves until a signal; then it stops accepting, finishes
//! the requests in flight and the queued batches, and returns `Ok`.

pub mod backend;
pub mod batcher;
pub mod config;
pub mod cpu_backend;
pub mod error;
pub mod gpu_backend;
pub mod grpc;
pub mod http;
pub mod http_wire;
pub mod metrics;
pub mod model_info;
pub mod proto;
pub mod repository;
pub mod shutdown;
pub mod state;
pub mod tensor;

use metrics::Metrics;
use repository::{LoadSettings, Repository};
use state::ServerState;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::net::TcpListener;

/// What `aotune serve` was asked for.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub model_repository: PathBuf,
    /// The address every listener binds (`0.0.0.0`: all interfaces).
    pub address: std::net::IpAddr,
    /// Port 0 picks a free port (reported through `on_listening`).
    pub http_port: u16,
    pub grpc_port: u16,
    pub metrics_port: u16,
    pub max_body_bytes: usize,
    pub strict_readiness: bool,
    pub load: LoadSettings,
}

/// The addresses the listeners bound.
#[derive(Debug, Clone, Copy)]
pub struct Listening {
    pub http: SocketAddr,
    pub grpc: SocketAddr,
    pub metrics: SocketAddr,
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Repository(#[from] repository::RepositoryError),
    #[error(transparent)]
    Metrics(#[from] metrics::MetricsError),
    #[error("binding the {what} listener to {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the {what} server failed: {message}")]
    Server { what: &'static str, message: String },
    #[error("starting the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

/// Runs the server until SIGTERM or ctrl-c (see the module doc). Calls
/// `on_listening` once every listener is bound.
pub fn serve(
    options: ServeOptions,
    on_listening: impl FnOnce(&Listening),
) -> Result<(), ServeError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("aotune-serve")
        .build()
        .map_err(ServeError::Runtime)?;
    runtime.block_on(serve_async(options, on_listening))
}

async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { what, addr, source })
}

async fn serve_async(
    options: ServeOptions,
    on_listening: impl FnOnce(&Listening),
) -> Result<(), ServeError> {
    let (repository, found) = Repository::scan(&options.model_repository)?;
    if found.is_empty() {
        tracing::warn!(
            "the model repository '{}' holds no model directory",
            options.model_repository.display()
        );
    }
    let repository = Arc::new(repository);
    let metrics = Arc::new(Metrics::new()?);
    let state = Arc::new(ServerState::new(
        Arc::clone(&repository),
        Arc::clone(&metrics),
        options.load.image_decoder,
        options.max_body_bytes,
        options.strict_readiness,
    ));

    let at = |port| SocketAddr::new(options.address, port);
    let http_listener = bind("HTTP", at(options.http_port)).await?;
    let grpc_listener = bind("gRPC", at(options.grpc_port)).await?;
    let metrics_listener = bind("metrics", at(options.metrics_port)).await?;
    let local = |l: &TcpListener, what| {
        l.local_addr().map_err(|source| ServeError::Bind {
            what,
            addr: at(0),
            source,
        })
    };
    let listening = Listening {
        http: local(&http_listener, "HTTP")?,
        grpc: local(&grpc_listener, "gRPC")?,
        metrics: local(&metrics_listener, "metrics")?,
    };
    on_listening(&listening);

    let (trigger, stop) = shutdown::channel();
    tokio::spawn(shutdown::watch_signals(trigger));

    let loader = {
        let (repository, metrics, settings) = (
            Arc::clone(&repository),
            Arc::clone(&metrics),
            options.load.clone(),
        );
        tokio::task::spawn_blocking(move || repository.load_all(&found, &settings, &metrics))
    };

    let stopping = {
        let (state, stop) = (Arc::clone(&state), stop.clone());
        async move {
            stop.wait().await;
            state.stop();
            state.repository.drain();
        }
    };
    let http = axum::serve(http_listener, http::router(Arc::clone(&state)))
        .with_graceful_shutdown(stop.clone().wait());
    let grpc = tonic::transport::Server::builder()
        .add_service(grpc::server(Arc::clone(&state)))
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(grpc_listener),
            stop.clone().wait(),
        );
    let metrics_app = axum::Router::new().route(
        "/metrics",
        axum::routing::get({
            let metrics = Arc::clone(&metrics);
            move || {
                let metrics = Arc::clone(&metrics);
                async move { metrics.render() }
            }
        }),
    );
    let metrics_server =
        axum::serve(metrics_listener, metrics_app).with_graceful_shutdown(stop.clone().wait());

    let (_, http, grpc, metrics_result) = tokio::join!(stopping, http, grpc, metrics_server);
    tracing::info!("listeners closed; finishing queued batches");
    let repo = Arc::clone(&repository);
    if let Err(e) = tokio::task::spawn_blocking(move || repo.shutdown()).await {
        tracing::error!("stopping the executors: {e}");
    }
    if !loader.is_finished() {
        tracing::warn!("exiting while models are still loading");
    }
    http.map_err(|e| ServeError::Server {
        what: "HTTP",
        message: e.to_string(),
    })?;
    grpc.map_err(|e| ServeError::Server {
        what: "gRPC",
        message: e.to_string(),
    })?;
    metrics_result.map_err(|e| ServeError::Server {
        what: "metrics",
        message: e.to_string(),
    })?;
    Ok(())
}
