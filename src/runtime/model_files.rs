//! A compiled model read from a build directory: `manifest.json` (the
//! [`ModelSpec`]), `kernels.fatbin`, and the weight blob the manifest names
//! (`weights.bin`). Reading checks the format version and the blob's size and
//! FNV-1a 64 hash, and every error names the file it is about.

use std::fs;
use std::path::{Path, PathBuf};

use aotune_spec::artifact::{ModelSpec, FORMAT_VERSION};

use super::error::RuntimeError;
use super::model::{check_weights, LoadOptions, Model};

/// The spec's file name in a build directory.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The kernel image's file name in a build directory.
pub const CUBIN_FILE: &str = "kernels.fatbin";

/// The three parts of a compiled model, in memory.
#[derive(Debug, Clone)]
pub struct ModelFiles {
    pub spec: ModelSpec,
    pub cubin: Vec<u8>,
    pub weights: Vec<u8>,
}

impl ModelFiles {
    /// Reads `dir/manifest.json`, `dir/kernels.fatbin` and
    /// `dir/<spec.weights.file_name>`, checking the manifest's format version
    /// and the weights' size and hash.
    pub fn read_dir(dir: impl AsRef<Path>) -> Result<ModelFiles, RuntimeError> {
        let dir = dir.as_ref();
        let manifest_path = dir.join(MANIFEST_FILE);
        let manifest = read(&manifest_path)?;
        let spec = parse_manifest(&manifest_path, &manifest)?;
        let cubin = read(&dir.join(CUBIN_FILE))?;
        let weights_path = dir.join(&*spec.weights.file_name);
        let weights = read(&weights_path)?;
        check_weights(&spec, &weights, true).map_err(|problem| RuntimeError::FileMismatch {
            path: weights_path,
            problem: Box::new(problem),
        })?;
        Ok(ModelFiles {
            spec,
            cubin,
            weights,
        })
    }

    /// [`Model::load`] on these files (the weights hash was checked on read).
    pub fn load(&self, options: &LoadOptions) -> Result<Model, RuntimeError> {
        let options = LoadOptions {
            verify_weights_hash: false,
            ..*options
        };
        Model::load(&self.spec, &self.cubin, &self.weights, &options)
    }
}

fn read(path: &Path) -> Result<Vec<u8>, RuntimeError> {
    fs::read(path).map_err(|source| RuntimeError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Checks the format version before the full parse, so a manifest from
/// another version reports that rather than a missing field.
fn parse_manifest(path: &Path, bytes: &[u8]) -> Result<ModelSpec, RuntimeError> {
    let manifest_error = |source| RuntimeError::Manifest {
        path: PathBuf::from(path),
        source,
    };
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(manifest_error)?;
    if let Some(found) = value.get("format_version").and_then(|v| v.as_u64()) {
        if found != u64::from(FORMAT_VERSION) {
            return Err(RuntimeError::FormatVersion {
                origin: format!("`{}`", path.display()),
                found: u32::try_from(found).unwrap_or(u32::MAX),
                expected: FORMAT_VERSION,
            });
        }
    }
    serde_json::from_value(value).map_err(manifest_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::launch_plan::tests::relu_add_spec;

    /// A fresh directory under the target dir's temp area, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let path =
                std::env::temp_dir().join(format!("aotune-runtime-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&path);
            fs::create_dir_all(&path).unwrap();
            TempDir(path)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn write_model(dir: &Path) -> (ModelSpec, Vec<u8>) {
        let weights: Vec<u8> = (0..400u32).map(|i| i as u8).collect();
        let spec = relu_add_spec(100, &weights, 0);
        fs::write(dir.join(MANIFEST_FILE), serde_json::to_vec(&spec).unwrap()).unwrap();
        fs::write(dir.join(CUBIN_FILE), b"\x7fELF fake").unwrap();
        fs::write(dir.join("weights.bin"), &weights).unwrap();
        (spec, weights)
    }

    #[test]
    fn reads_a_complete_directory() {
        let dir = TempDir::new("complete");
        let (spec, weights) = write_model(&dir.0);
        let files = ModelFiles::read_dir(&dir.0).unwrap();
        assert_eq!(files.spec, spec);
        assert_eq!(files.weights, weights);
        assert_eq!(files.cubin, b"\x7fELF fake");
    }

    #[test]
    fn errors_name_the_file() {
        let dir = TempDir::new("missing");
        let err = ModelFiles::read_dir(&dir.0).unwrap_err();
        assert!(matches!(err, RuntimeError::Io { .. }), "{err}");
        assert!(err.to_string().contains("manifest.json"), "{err}");

        write_model(&dir.0);
        fs::remove_file(dir.0.join(CUBIN_FILE)).unwrap();
        let err = ModelFiles::read_dir(&dir.0).unwrap_err();
        assert!(err.to_string().contains(CUBIN_FILE), "{err}");

        write_model(&dir.0);
        fs::write(dir.0.join("weights.bin"), [0u8; 12]).unwrap();
        let err = ModelFiles::read_dir(&dir.0).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("weights.bin") && text.contains("12 bytes"),
            "{text}"
        );

        write_model(&dir.0);
        fs::write(dir.0.join("weights.bin"), [7u8; 400]).unwrap();
        let err = ModelFiles::read_dir(&dir.0).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("weights.bin") && text.contains("FNV-1a"),
            "{text}"
        );

        fs::write(dir.0.join(MANIFEST_FILE), b"{ not json").unwrap();
        let err = ModelFiles::read_dir(&dir.0).unwrap_err();
        assert!(matches!(err, RuntimeError::Manifest { .. }), "{err}");
        assert!(err.to_string().contains("manifest.json"), "{err}");
    }

    #[test]
    fn another_format_version_is_reported_as_such() {
        let dir = TempDir::new("version");
        write_model(&dir.0);
        fs::write(
            dir.0.join(MANIFEST_FILE),
            br#"{"format_version": 2, "something_new": true}"#,
        )
        .unwrap();
        let err = ModelFiles::read_dir(&dir.0).unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, RuntimeError::FormatVersion { found: 2, .. }),
            "{text}"
        );
        assert!(text.contains("manifest.json"), "{text}");
    }
}
