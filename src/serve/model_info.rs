//! What a client may ask about a ready model, in the JSON forms of KServe's
//! model metadata and Triton's model configuration. The gRPC service builds
//! its messages from the same [`Signature`] (in `grpc.rs`).

use super::backend::{Signature, TensorSpec};
use super::repository::{LoadedModel, VERSION};
use serde_json::{json, Value};

/// The `platform` reported for every model.
pub const PLATFORM: &str = "aotune";

/// Triton's `max_batch_size`: the largest compiled batch, or 0 when the
/// model is unbatched (its shapes are the whole tensors).
pub fn max_batch_size(signature: &Signature) -> usize {
    if signature.batched {
        signature.max_batch()
    } else {
        0
    }
}

fn tensor_metadata(signature: &Signature, tensor: &TensorSpec) -> Value {
    json!({
        "name": tensor.name,
        "datatype": tensor.datatype.name(),
        "shape": signature.client_shape(tensor),
    })
}

/// KServe's model metadata response.
pub fn model_metadata_json(model: &LoadedModel) -> Value {
    let s = model.backend.signature();
    json!({
        "name": model.name,
        "versions": [VERSION],
        "platform": PLATFORM,
        "inputs": s.inputs.iter().map(|t| tensor_metadata(s, t)).collect::<Vec<_>>(),
        "outputs": s.outputs.iter().map(|t| tensor_metadata(s, t)).collect::<Vec<_>>(),
    })
}

/// Triton's model configuration (`GET …/config`): dims without the batch
/// dimension when `max_batch_size > 0`, as Triton writes them.
pub fn model_config_json(model: &LoadedModel) -> Value {
    let s = model.backend.signature();
    let dims = |t: &TensorSpec| t.item_shape.iter().map(|&d| d as i64).collect::<Vec<_>>();
    let tensors = |ts: &[TensorSpec]| {
        ts.iter()
            .map(|t| {
                json!({ "name": t.name, "data_type": t.datatype.config_name(), "dims": dims(t) })
            })
            .collect::<Vec<_>>()
    };
    json!({
        "name": model.name,
        "platform": PLATFORM,
        "backend": model.backend.describe(),
        "max_batch_size": max_batch_size(s),
        "input": tensors(&s.inputs),
        "output": tensors(&s.outputs),
        "dynamic_batching": {
            "preferred_batch_size": s.batch_sizes,
            "max_queue_delay_microseconds": model.config.max_queue_delay.as_micros() as u64,
        },
        "instance_group": [{ "name": model.name, "count": model.config.instances }],
    })
}
