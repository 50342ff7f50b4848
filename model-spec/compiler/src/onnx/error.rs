//! Import errors: each names the file, node, op, attribute or input at fault
//! and says what the user can do about it.

/// Why an ONNX model could not be imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read ONNX model '{path}': {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("'{source_name}' is empty: expected an ONNX model (a serialized onnx.ModelProto)")]
    Empty { source_name: String },
    #[error("'{source_name}' is not a valid ONNX model: {message}")]
    Malformed {
        source_name: String,
        message: String,
    },
    #[error("'{source_name}': {message}")]
    Unsupported {
        source_name: String,
        message: String,
    },
    #[error("graph input '{input}': {message}")]
    BadInput { input: String, message: String },
    #[error("initializer '{name}': {message}")]
    BadInitializer { name: String, message: String },
    #[error(
        "--batch {requested} was given, but no graph input has a symbolic batch dimension \
         (inputs: {inputs}); this model's batch size is fixed at export time: drop --batch \
         or re-export with dynamic_axes on the batch"
    )]
    BatchNotSymbolic { requested: usize, inputs: String },
    #[error("node '{node}' ({op}): unsupported operator; aotune supports {supported}")]
    UnsupportedOp {
        node: String,
        op: String,
        /// The registry's op list ([`crate::ops::supported_onnx_ops`]), joined.
        supported: &'static str,
    },
    #[error("node '{node}' ({op}): attribute {attribute} = {value} is not supported: {reason}")]
    UnsupportedAttribute {
        node: String,
        op: String,
        attribute: String,
        value: String,
        reason: String,
    },
    #[error("node '{node}' ({op}): input {input}: {message}")]
    BadNodeInput {
        node: String,
        op: String,
        input: String,
        message: String,
    },
    #[error("node '{node}' ({op}): {message}")]
    Shape {
        node: String,
        op: String,
        message: String,
    },
    #[error("'{source_name}': the ONNX parser failed unexpectedly ({message}); the file is probably malformed")]
    ParserPanic {
        source_name: String,
        message: String,
    },
}
