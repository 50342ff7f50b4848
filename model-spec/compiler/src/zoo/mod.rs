//! The ResNet zoo: torchvision ResNet-18/34/50/101/152 written as ONNX files
//! with deterministic synthetic weights, for tests, benchmarks and the build
//! script when the default model is missing.
//!
//! [`resnet_onnx`] returns a model's bytes (the same on every machine for a
//! given depth and seed); [`write_resnet`] writes them atomically. The
//! weights come from the splitmix64 fill rule of [`fill`], which the code
//! refilling the torchvision fixtures shares. The topology and fill ranges are
//! documented in `resnet.rs`; the protobuf plumbing is in `onnx_writer.rs`.

mod fill;
mod onnx_writer;
mod resnet;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

pub use fill::{fill, fnv1a64, splitmix64, tensor_seed};
pub use resnet::{
    resnet_onnx, BlockKind, ResNetDepth, DEFAULT_SEED, IR_VERSION, OPSET, PRODUCER_NAME,
    ZOO_FORMAT_VERSION,
};

/// What can go wrong in the zoo.
#[derive(Debug, thiserror::Error)]
pub enum ZooError {
    /// A model name that is not one of the zoo's.
    #[error("unknown model `{name}`; known models: {known}")]
    UnknownModel { name: String, known: String },
    /// The output path has no file name (e.g. `/` or `..`).
    #[error("output path `{path}` does not name a file")]
    NotAFile { path: PathBuf },
    /// Creating the output's directory, writing the temporary file or
    /// renaming it onto the output failed.
    #[error("cannot {action} `{path}`: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Writes [`resnet_onnx`]`(depth, seed)` to `path`, creating its directory if
/// needed. The bytes go to a temporary file in the same directory that is then
/// renamed onto `path`, so a reader never sees a partial model.
pub fn write_resnet(depth: ResNetDepth, seed: u64, path: &Path) -> Result<(), ZooError> {
    let bytes = resnet_onnx(depth, seed);
    write_atomically(path, &bytes)
}

/// Writes `bytes` to `path` through a temporary sibling file and a rename.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), ZooError> {
    let io_error = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| ZooError::Io {
            action,
            path,
            source,
        }
    };
    let file_name = path.file_name().ok_or_else(|| ZooError::NotAFile {
        path: path.to_path_buf(),
    })?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&dir).map_err(io_error("create directory", &dir))?;

    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(file_name);
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = dir.join(tmp_name);

    let result = (|| {
        let mut file = fs::File::create(&tmp).map_err(io_error("create", &tmp))?;
        file.write_all(bytes).map_err(io_error("write", &tmp))?;
        file.sync_all().map_err(io_error("sync", &tmp))?;
        drop(file);
        fs::rename(&tmp, path).map_err(io_error("rename onto", path))
    })();
    if result.is_err() {
        // Best effort: the original error is what the caller needs.
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch_dir(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("aotune-zoo-{test}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn write_atomically_creates_directory_and_leaves_no_temp_file() {
        let dir = scratch_dir("atomic");
        let path = dir.join("sub").join("model.onnx");
        write_atomically(&path, b"abc").expect("write");
        write_atomically(&path, b"defg").expect("overwrite");
        assert_eq!(fs::read(&path).expect("read"), b"defg");
        let entries = fs::read_dir(dir.join("sub")).expect("list").count();
        assert_eq!(entries, 1);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn write_errors_name_the_path() {
        let dir = scratch_dir("error");
        fs::create_dir_all(&dir).expect("mkdir");
        // A directory where the file should go: the rename fails.
        let path = dir.join("taken");
        fs::create_dir_all(path.join("inner")).expect("mkdir");
        let err = write_atomically(&path, b"x").expect_err("must fail");
        assert!(err.to_string().contains("taken"), "{err}");
        assert_eq!(fs::read_dir(&dir).expect("list").count(), 1);
        let err = write_atomically(Path::new("/"), b"x").expect_err("must fail");
        assert!(matches!(err, ZooError::NotAFile { .. }), "{err}");
        let _ = fs::remove_dir_all(&dir);
    }
}
