//! ONNX import: the only module that touches protobuf.
//!
//! [`import_bytes`] decodes the `ModelProto`, resolves the symbolic batch and
//! checks declared shapes ([`prepare`]), lets onnx-ir =0.22.0 parse and infer
//! types, then maps its typed nodes to aotune's [`Op`](crate::ir::Op) enum
//! ([`convert`], through each op's converter in the [`crate::ops`] registry)
//! and verifies the result. Anything unsupported is an
//! [`ImportError`] naming the node, op and attribute or input.

mod convert;
mod error;
mod external_data;
mod fill_weights;
mod fold;
mod graph_builder;
mod node_import;
mod prepare;
mod proto_fold;
mod tensor_file;

pub use error::{ImportError, UnsupportedUse};
pub use external_data::read_model_file;
pub use fill_weights::{fill_initializers, WeightFill};
pub(crate) use node_import::NodeImport;
pub use onnx_ir::TensorProto;
pub use tensor_file::{read_tensor_file, TensorFile};

use crate::ir::Graph;
use std::path::Path;

/// How to import a model.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// Value for a symbolic batch dimension (axis 0 of the graph inputs).
    /// `None`: 1 for symbolic batches, the exported size otherwise.
    pub batch: Option<usize>,
    /// Graph inputs to bind to constant values before import (by name), e.g.
    /// a Reshape's shape tensor fed as an input. They stop being inputs.
    pub constant_inputs: Vec<TensorProto>,
}

/// An imported model.
#[derive(Debug, Clone)]
pub struct Imported {
    pub graph: Graph,
    /// Default-domain opset of the model.
    pub opset: i64,
    /// The batch size a symbolic batch was resolved to (`None`: the model had none).
    pub batch: Option<usize>,
}

/// Imports the ONNX model at `path` (external data files beside it are read).
pub fn import_file(path: &Path, options: &ImportOptions) -> Result<Imported, ImportError> {
    let bytes = read_model_file(path)?;
    import_bytes(&bytes, &path.display().to_string(), options)
}

/// Imports a serialized ONNX model. `source_name` appears in errors.
pub fn import_bytes(
    bytes: &[u8],
    source_name: &str,
    options: &ImportOptions,
) -> Result<Imported, ImportError> {
    let model = prepare::decode(bytes, source_name)?;
    let prepared = prepare::prepare(model, source_name, options.batch, &options.constant_inputs)?;
    let bytes =
        onnx_ir::Message::write_to_bytes(&prepared.model).map_err(|e| ImportError::Malformed {
            source_name: source_name.to_string(),
            message: format!("cannot re-encode the prepared model: {e}"),
        })?;
    drop(prepared.model);
    // onnx-ir is third-party code on untrusted input: a panic inside it is
    // reported as an error on this file, never as a crash of the compiler.
    let parsed = std::panic::catch_unwind(|| {
        onnx_ir::OnnxGraphBuilder::new()
            .simplify(true)
            .parse_bytes(&bytes)
    })
    .map_err(|panic| ImportError::ParserPanic {
        source_name: source_name.to_string(),
        message: panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into()),
    })?
    .map_err(|e| classify_onnx_ir_error(e, source_name))?;
    let graph = convert::convert_graph(&parsed, prepared.opset, &prepared.output_names)?;
    crate::ir::verify(&graph).map_err(|e| ImportError::Malformed {
        source_name: source_name.to_string(),
        message: e.to_string(),
    })?;
    Ok(Imported {
        graph,
        opset: prepared.opset,
        batch: prepared.batch,
    })
}

fn classify_onnx_ir_error(e: onnx_ir::Error, source_name: &str) -> ImportError {
    let message = e.to_string();
    // onnx-ir's refusals: unsupported ops and attribute values it does not
    // implement ("Invalid attribute 'axes': … is not supported", "Invalid
    // pad mode: wrap").
    let unsupported = message.contains("Unsupported")
        || message.contains("unsupported")
        || message.contains("not supported")
        || message.contains("Invalid attribute");
    if unsupported {
        ImportError::Unsupported {
            source_name: source_name.to_string(),
            message,
        }
    } else {
        ImportError::Malformed {
            source_name: source_name.to_string(),
            message,
        }
    }
}

#[cfg(test)]
mod bad_input_tests;
#[cfg(test)]
mod fold_tests;
