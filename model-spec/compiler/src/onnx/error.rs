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
    /// Every op of the model that aotune does not import, found before
    /// import starts, so one message lists them all.
    #[error(
        "the model uses {} unsupported operator{}: {}; aotune supports {supported}",
        ops.len(),
        if ops.len() == 1 { "" } else { "s" },
        ops.iter().map(|o| o.to_string()).collect::<Vec<_>>().join("; ")
    )]
    UnsupportedOps {
        ops: Vec<UnsupportedUse>,
        supported: &'static str,
    },
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
    #[error(
        "node '{node}' ({op}): all its inputs are constants, so it is evaluated at build \
         time, and that failed: {message}"
    )]
    Fold {
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

/// One unsupported op of a model: how many nodes use it and the first one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsupportedUse {
    /// The op type, with its domain when that is not the default one.
    pub op: String,
    pub count: usize,
    pub first_node: String,
}

impl std::fmt::Display for UnsupportedUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nodes = if self.count == 1 { "node" } else { "nodes" };
        write!(
            f,
            "{} ({} {nodes}, first '{}')",
            self.op, self.count, self.first_node
        )
    }
}
