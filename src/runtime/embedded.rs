//! Loading a model compiled into the binary (`include_model!`, the CLI's
//! default model): kernels embedded, weights embedded or read from the file
//! the spec names, beside the running executable.

use super::{LoadOptions, Model, RuntimeError};
use crate::artifact::ModelSpec;
use std::path::PathBuf;

impl Model {
    /// Loads an embedded model. With `weights = None`, reads
    /// `spec.weights.file_name` from the executable's directory (or
    /// `$AOTUNE_WEIGHTS_DIR`) and checks its size and hash.
    pub fn load_embedded(
        spec: &ModelSpec,
        kernels: &[u8],
        weights: Option<&[u8]>,
    ) -> Result<Model, RuntimeError> {
        match weights {
            Some(w) => Model::load(spec, kernels, w, &LoadOptions::default()),
            None => {
                let path = weights_path(spec);
                let bytes = std::fs::read(&path).map_err(|e| RuntimeError::WeightsFile {
                    model: spec.name.to_string(),
                    path: path.display().to_string(),
                    message: e.to_string(),
                })?;
                Model::load(spec, kernels, &bytes, &LoadOptions::default())
            }
        }
    }
}

/// Where an embedded model's weights file is looked for.
pub fn weights_path(spec: &ModelSpec) -> PathBuf {
    let dir = std::env::var_os("AOTUNE_WEIGHTS_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|p| p.parent().map(PathBuf::from))
        })
        .unwrap_or_else(|| PathBuf::from("."));
    dir.join(&*spec.weights.file_name)
}

impl RuntimeError {
    /// The error `include_model!`'s `infer` returns when no batch size fits.
    pub fn input_length_for_batches(
        got: usize,
        lengths: &[usize],
        batches: &[usize],
    ) -> RuntimeError {
        RuntimeError::NoBatchForLength {
            got,
            lengths: lengths.to_vec(),
            batches: batches.to_vec(),
        }
    }
}
