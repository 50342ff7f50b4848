//! ONNX models whose weights live in a separate file (external data):
//! `torch.onnx.export(..., dynamo=True)` writes `model.onnx` plus
//! `model.onnx.data` by default, and `onnx.save(..., save_as_external_data=
//! True)` does the same. [`read_model_file`] reads such a model and returns
//! it with every initializer's data inlined, so the rest of the importer (and
//! every cache key hashed from the bytes) sees one self-contained model.
//!
//! Each external initializer names its file (`location`, relative to the
//! model's folder; absolute paths and `..` are refused, as ONNX's checker
//! does), an optional byte `offset` and `length` (default: the rest of the
//! file). Files are read once each, however many tensors they hold.

use super::error::ImportError;
use onnx_ir::{Message, ModelProto};
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

/// Reads the ONNX model at `path`; when its initializers keep their data
/// in external files next to it, returns the model re-encoded with that
/// data inside. Otherwise returns the file's bytes unchanged.
pub fn read_model_file(path: &Path) -> Result<Vec<u8>, ImportError> {
    let io = |p: &Path, source| ImportError::Io {
        path: p.display().to_string(),
        source,
    };
    let bytes = std::fs::read(path).map_err(|e| io(path, e))?;
    let Ok(mut model) = ModelProto::parse_from_bytes(&bytes) else {
        // Not decodable: the importer reports it with its own message.
        return Ok(bytes);
    };
    let Some(graph) = model.graph.as_mut() else {
        return Ok(bytes);
    };
    if graph.initializer.iter().all(|t| t.external_data.is_empty()) {
        return Ok(bytes);
    }
    let folder = path.parent().unwrap_or(Path::new("."));
    let mut files: HashMap<PathBuf, Vec<u8>> = HashMap::new();
    for init in graph
        .initializer
        .iter_mut()
        .filter(|t| !t.external_data.is_empty())
    {
        let bad = |message: String| ImportError::BadInitializer {
            name: init.name.clone(),
            message,
        };
        let entry = |key: &str| {
            init.external_data
                .iter()
                .find(|e| e.key == key)
                .map(|e| e.value.clone())
        };
        let location = entry("location")
            .ok_or_else(|| bad("has external data without a `location`".into()))?;
        let relative = Path::new(&location);
        if relative.is_absolute()
            || relative
                .components()
                .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(bad(format!(
                "external data location '{location}' must be a path inside the model's folder"
            )));
        }
        let number = |key: &str| -> Result<Option<usize>, ImportError> {
            entry(key)
                .map(|v| {
                    v.trim().parse::<usize>().map_err(|_| {
                        bad(format!("external data `{key}` '{v}' is not a byte count"))
                    })
                })
                .transpose()
        };
        let (offset, length) = (number("offset")?.unwrap_or(0), number("length")?);
        let file = folder.join(relative);
        if !files.contains_key(&file) {
            let data = std::fs::read(&file).map_err(|e| io(&file, e))?;
            files.insert(file.clone(), data);
        }
        let data = &files[&file];
        let end = match length {
            Some(n) => offset.checked_add(n),
            None => Some(data.len()),
        };
        let range = end
            .filter(|&end| offset <= end && end <= data.len())
            .map(|end| offset..end)
            .ok_or_else(|| {
                bad(format!(
                    "external data range offset {offset} length {length:?} lies outside '{}' ({} bytes)",
                    file.display(),
                    data.len()
                ))
            })?;
        init.raw_data = data[range].to_vec().into();
        init.external_data.clear();
        init.data_location = Default::default();
    }
    model.write_to_bytes().map_err(|e| ImportError::Malformed {
        source_name: path.display().to_string(),
        message: format!(
            "cannot inline its external data (a model over 2 GB cannot be one protobuf): {e}"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use onnx_ir::TensorProto;

    /// A one-node model (`y = x + w`) whose initializer `w` holds `values`,
    /// stored externally in `file` at `offset` when `file` is given.
    fn model_with(values: &[f32], file: Option<(&str, usize)>) -> ModelProto {
        let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut w = TensorProto::new();
        w.name = "w".into();
        w.dims = vec![values.len() as i64];
        w.data_type = 1;
        match file {
            Some((location, offset)) => {
                for (k, v) in [
                    ("location", location.to_string()),
                    ("offset", offset.to_string()),
                    ("length", raw.len().to_string()),
                ] {
                    w.external_data.push(Default::default());
                    let e = w.external_data.last_mut().unwrap();
                    e.key = k.into();
                    e.value = v;
                }
            }
            None => w.raw_data = raw.into(),
        }
        let mut model = ModelProto::new();
        let mut graph = onnx_ir::GraphProto::new();
        graph.initializer.push(w);
        let mut node = onnx_ir::NodeProto::new();
        node.op_type = "Add".into();
        node.input = vec!["x".into(), "w".into()];
        node.output = vec!["y".into()];
        graph.node.push(node);
        model.graph = Some(graph).into();
        model
    }

    /// A fresh folder for one test.
    fn scratch(test: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("aotune-extdata-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn external_initializers_are_inlined_from_their_file() {
        let dir = scratch("inline");
        let values = [1.5f32, -2.0, 3.25];
        let mut data = vec![0u8; 8];
        data.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        std::fs::write(dir.join("m.onnx.data"), &data).unwrap();
        let path = dir.join("m.onnx");
        let external = model_with(&values, Some(("m.onnx.data", 8)));
        std::fs::write(&path, external.write_to_bytes().unwrap()).unwrap();

        let inlined = ModelProto::parse_from_bytes(&read_model_file(&path).unwrap()).unwrap();
        let w = &inlined.graph.initializer[0];
        assert!(w.external_data.is_empty());
        assert_eq!(
            w.raw_data,
            model_with(&values, None).graph.initializer[0].raw_data
        );
    }

    #[test]
    fn a_model_without_external_data_is_returned_as_is() {
        let dir = scratch("plain");
        let path = dir.join("m.onnx");
        let bytes = model_with(&[1.0], None).write_to_bytes().unwrap();
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(read_model_file(&path).unwrap(), bytes);
    }

    #[test]
    fn bad_locations_and_ranges_name_the_tensor() {
        let dir = scratch("bad");
        std::fs::write(dir.join("short.data"), [0u8; 4]).unwrap();
        for (location, offset, want) in [
            ("../escape.data", 0, "inside the model's folder"),
            ("/etc/passwd", 0, "inside the model's folder"),
            ("short.data", 0, "lies outside"),
            ("missing.data", 0, "cannot read"),
        ] {
            let path = dir.join("m.onnx");
            let model = model_with(&[1.0, 2.0], Some((location, offset)));
            std::fs::write(&path, model.write_to_bytes().unwrap()).unwrap();
            let err = read_model_file(&path).unwrap_err().to_string();
            assert!(err.contains(want), "{location}: {err}");
        }
    }
}
