//! The errors a request can end in. Each has a message for the client and
//! maps to one HTTP status ([`InferError::http_status`]), one gRPC code (in
//! `grpc.rs`) and one `outcome` label of the request counter.

/// Why a request failed; the string is the message the client reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InferError {
    /// The request is malformed or does not fit the model (shape, datatype,
    /// byte length, names, JSON, parameters).
    #[error("{0}")]
    InvalidArgument(String),
    /// No such model, version or endpoint.
    #[error("{0}")]
    NotFound(String),
    /// The model is not ready (loading, failed) or the server is stopping.
    #[error("{0}")]
    Unavailable(String),
    /// The model's queue is full: try again later.
    #[error("{0}")]
    QueueFull(String),
    /// The request's deadline passed before its result was ready.
    #[error("{0}")]
    Timeout(String),
    /// The body is larger than the server accepts.
    #[error("{0}")]
    TooLarge(String),
    /// The backend failed on a well-formed request.
    #[error("{0}")]
    Internal(String),
}

impl InferError {
    pub fn invalid(message: impl Into<String>) -> Self {
        InferError::InvalidArgument(message.into())
    }

    /// The HTTP status of the error response.
    pub fn http_status(&self) -> u16 {
        match self {
            InferError::InvalidArgument(_) => 400,
            InferError::NotFound(_) => 404,
            InferError::TooLarge(_) => 413,
            InferError::QueueFull(_) => 429,
            InferError::Internal(_) => 500,
            InferError::Unavailable(_) => 503,
            InferError::Timeout(_) => 504,
        }
    }

    /// The `outcome` label of `aotune_requests_total`.
    pub fn outcome(&self) -> &'static str {
        match self {
            InferError::InvalidArgument(_) => "invalid_argument",
            InferError::NotFound(_) => "not_found",
            InferError::Unavailable(_) => "unavailable",
            InferError::QueueFull(_) => "queue_full",
            InferError::Timeout(_) => "timeout",
            InferError::TooLarge(_) => "too_large",
            InferError::Internal(_) => "internal",
        }
    }
}
