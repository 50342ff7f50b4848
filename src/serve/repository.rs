//! The model repository: `DIR/<name>/model.onnx`, with an optional
//! `tuning.json` (GPU tuning log) and `config.json` ([`super::config`]) beside
//! it. Every subdirectory not starting with `.` is a model. Each is loaded on
//! its own: one that fails (no `model.onnx`, a bad config, an import error, no
//! GPU when the config demands one) is kept as *failed* with its error, which
//! the ready, metadata and index endpoints report, and the others serve.

use super::backend::{Backend, BackendError};
use super::batcher::{BatchPolicy, Batcher};
use super::config::{BackendChoice, ModelConfig};
use super::cpu_backend::CpuBackend;
use super::error::InferError;
use super::gpu_backend::GpuBackend;
use super::metrics::Metrics;
use super::tensor::ImageDecoder;
use aotune_spec::Precision;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

pub const MODEL_FILE: &str = "model.onnx";
pub const TUNING_FILE: &str = "tuning.json";
/// The only version of every model.
pub const VERSION: &str = "1";

/// A model that serves.
pub struct LoadedModel {
    pub name: String,
    pub config: ModelConfig,
    pub backend: Arc<dyn Backend>,
    pub batcher: Batcher,
}

/// Where a model is in its life.
#[derive(Clone)]
pub enum ModelState {
    Loading,
    Ready(Arc<LoadedModel>),
    Failed(String),
}

impl ModelState {
    /// KServe's repository-index state name.
    pub fn name(&self) -> &'static str {
        match self {
            ModelState::Loading => "LOADING",
            ModelState::Ready(_) => "READY",
            ModelState::Failed(_) => "UNAVAILABLE",
        }
    }

    pub fn reason(&self) -> String {
        match self {
            ModelState::Failed(e) => e.clone(),
            _ => String::new(),
        }
    }
}

/// How models are loaded.
#[derive(Debug, Clone)]
pub struct LoadSettings {
    /// For a model whose config says `"auto"`.
    pub default_backend: BackendChoice,
    /// Where GPU builds are cached.
    pub cache_dir: PathBuf,
    /// Decodes BYTES images for models with an `"image"` config.
    pub image_decoder: Option<ImageDecoder>,
}

/// Every model of the repository and its state.
pub struct Repository {
    models: RwLock<BTreeMap<String, ModelState>>,
}

/// Why the repository could not be read at all.
#[derive(Debug, thiserror::Error)]
#[error("model repository '{path}': {source}")]
pub struct RepositoryError {
    path: String,
    #[source]
    source: std::io::Error,
}

impl Repository {
    /// Lists the models of `root`, each [`ModelState::Loading`].
    pub fn scan(root: &Path) -> Result<(Repository, Vec<(String, PathBuf)>), RepositoryError> {
        let error = |source| RepositoryError {
            path: root.display().to_string(),
            source,
        };
        let mut found = Vec::new();
        for entry in std::fs::read_dir(root).map_err(error)? {
            let entry = entry.map_err(error)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || !entry.path().is_dir() {
                continue;
            }
            found.push((name, entry.path()));
        }
        found.sort();
        let models = found
            .iter()
            .map(|(name, _)| (name.clone(), ModelState::Loading))
            .collect();
        Ok((
            Repository {
                models: RwLock::new(models),
            },
            found,
        ))
    }

    pub fn get(&self, name: &str) -> Option<ModelState> {
        self.read().get(name).cloned()
    }

    /// The ready model `name` at `version` ("" or [`VERSION`]), or the error
    /// a request for it gets.
    pub fn ready(&self, name: &str, version: &str) -> Result<Arc<LoadedModel>, InferError> {
        check_version(name, version)?;
        match self.get(name) {
            None => Err(InferError::NotFound(format!("unknown model '{name}'"))),
            Some(ModelState::Loading) => Err(InferError::Unavailable(format!(
                "model '{name}' is still loading"
            ))),
            Some(ModelState::Failed(e)) => Err(InferError::Unavailable(format!(
                "model '{name}' is not ready: {e}"
            ))),
            Some(ModelState::Ready(m)) => Ok(m),
        }
    }

    /// Every model and its state, by name.
    pub fn index(&self) -> Vec<(String, ModelState)> {
        self.read()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// True when no model is loading.
    pub fn settled(&self) -> bool {
        !self
            .read()
            .values()
            .any(|s| matches!(s, ModelState::Loading))
    }

    /// True when every model serves.
    pub fn all_ready(&self) -> bool {
        self.read()
            .values()
            .all(|s| matches!(s, ModelState::Ready(_)))
    }

    fn set(&self, name: &str, state: ModelState) {
        let mut models = self.models.write().unwrap_or_else(|e| e.into_inner());
        models.insert(name.to_string(), state);
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, ModelState>> {
        self.models.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Loads each of `models` in turn (blocking: compiles, maybe builds for
    /// the GPU), recording it as ready or failed.
    pub fn load_all(
        &self,
        models: &[(String, PathBuf)],
        settings: &LoadSettings,
        metrics: &Metrics,
    ) {
        for (name, dir) in models {
            let state = match load_model(name, dir, settings, metrics) {
                Ok(model) => {
                    tracing::info!(
                        model = %name,
                        backend = %model.backend.describe(),
                        batch_sizes = ?model.backend.signature().batch_sizes,
                        "model ready"
                    );
                    ModelState::Ready(Arc::new(model))
                }
                Err(e) => {
                    tracing::error!(model = %name, "model not ready: {e}");
                    ModelState::Failed(e)
                }
            };
            metrics.set_ready(name, matches!(state, ModelState::Ready(_)));
            self.set(name, state);
        }
    }

    /// Lets every queue run what it holds without waiting for its delay.
    pub fn drain(&self) {
        for (_, state) in self.index() {
            if let ModelState::Ready(model) = state {
                model.batcher.drain();
            }
        }
    }

    /// Closes every queue and waits for the executors to finish.
    pub fn shutdown(&self) {
        for (_, state) in self.index() {
            if let ModelState::Ready(model) = state {
                model.batcher.shutdown();
            }
        }
    }
}

/// Only [`VERSION`] exists ("" means the latest).
pub fn check_version(name: &str, version: &str) -> Result<(), InferError> {
    if version.is_empty() || version == VERSION {
        Ok(())
    } else {
        Err(InferError::NotFound(format!(
            "model '{name}' has no version '{version}' (only '{VERSION}')"
        )))
    }
}

fn load_model(
    name: &str,
    dir: &Path,
    settings: &LoadSettings,
    metrics: &Metrics,
) -> Result<LoadedModel, String> {
    let model = dir.join(MODEL_FILE);
    if !model.is_file() {
        return Err(format!("no {MODEL_FILE} in '{}'", dir.display()));
    }
    let config = ModelConfig::load(dir).map_err(|e| e.to_string())?;
    let tuning = Some(dir.join(TUNING_FILE)).filter(|p| p.is_file());
    let backend =
        backend(name, &model, tuning.as_deref(), &config, settings).map_err(|e| e.to_string())?;
    if let Some(image) = &config.image {
        check_image_input(backend.as_ref(), &image.input, settings)?;
    }
    let policy = BatchPolicy {
        max_queue_delay: config.max_queue_delay,
        queue_capacity: config.queue_capacity,
        instances: config.instances,
        concurrent_batches: config.concurrent_batches,
        fill_while_gpu_busy: config.fill_while_gpu_busy,
    };
    let batcher = Batcher::start(name, Arc::clone(&backend), policy, metrics.model(name))
        .map_err(|e| e.to_string())?;
    Ok(LoadedModel {
        name: name.to_string(),
        config,
        backend,
        batcher,
    })
}

fn backend(
    name: &str,
    model: &Path,
    tuning: Option<&Path>,
    config: &ModelConfig,
    settings: &LoadSettings,
) -> Result<Arc<dyn Backend>, BackendError> {
    let choice = match config.backend {
        BackendChoice::Auto => settings.default_backend,
        other => other,
    };
    let gpu = match choice {
        BackendChoice::Cpu => false,
        BackendChoice::Gpu => {
            if !aotune::runtime::driver_present() {
                return Err(BackendError::Unsupported(
                    "the config asks for the GPU (\"backend\": \"gpu\") and this machine has no \
                     NVIDIA driver"
                        .into(),
                ));
            }
            true
        }
        BackendChoice::Auto => {
            let present = aotune::runtime::driver_present();
            if !present {
                tracing::warn!(
                    model = name,
                    "no NVIDIA GPU driver on this machine: serving on the CPU reference executor"
                );
            }
            present
        }
    };
    let precision = config.precision.unwrap_or(if gpu {
        Precision::Fp16
    } else {
        Precision::Fp32
    });
    config
        .check_input_datatype(gpu, precision)
        .map_err(BackendError::Unsupported)?;
    if gpu {
        let symbolic = probe_symbolic_batch(model)?;
        Ok(Arc::new(GpuBackend::load(
            name,
            model,
            tuning,
            precision,
            config.input_datatype,
            &config.batch_sizes,
            symbolic,
            &settings.cache_dir,
            config.gpu_wait,
            config.dense_cublaslt,
            (config.concurrent_kernels < config.instances).then_some(config.concurrent_kernels),
            |row_bytes| config.pinned_pool_rows(row_bytes),
        )?))
    } else {
        Ok(Arc::new(CpuBackend::load(
            model,
            precision,
            &config.batch_sizes,
        )?))
    }
}

/// Whether `model`'s batch is symbolic (compiled once at the default batch).
fn probe_symbolic_batch(model: &Path) -> Result<bool, BackendError> {
    let options = aotune_compiler::CompileOptions::default();
    aotune_compiler::compile_file(model, &options)
        .map(|c| c.batch.is_some())
        .map_err(|e| BackendError::Compile(format!("compiling '{}': {e}", model.display())))
}

/// The `"image"` input must exist, be batched, and take `[3, 224, 224]`.
fn check_image_input(
    backend: &dyn Backend,
    input: &str,
    settings: &LoadSettings,
) -> Result<(), String> {
    if settings.image_decoder.is_none() {
        return Err("this server has no image decoder".into());
    }
    let signature = backend.signature();
    let spec = signature
        .inputs
        .iter()
        .find(|t| t.name == input)
        .ok_or_else(|| format!("config \"image\": the model has no input '{input}'"))?;
    if !signature.batched || spec.item_shape != [3, 224, 224] {
        return Err(format!(
            "config \"image\": input '{input}' is {:?}; images are fed as [batch, 3, 224, 224]",
            signature.client_shape(spec)
        ));
    }
    Ok(())
}
