//! Refilling the payloads of a graph-only model (such as the torchvision
//! fixtures, shipped without weights) with the zoo's deterministic fill rule.
//! Works on the protobuf, so it lives in the importer.

use super::error::ImportError;
use super::prepare::decode;
use onnx_ir::Message;

/// One initializer's fill parameters (see `zoo::fill`).
#[derive(Debug, Clone, PartialEq)]
pub struct WeightFill {
    pub name: String,
    pub seed: u64,
    pub center: f32,
    pub half_width: f32,
}

/// Sets the f32 payload of each named initializer from its fill rule and
/// returns the re-encoded model.
pub fn fill_initializers(
    bytes: &[u8],
    source_name: &str,
    fills: &[WeightFill],
) -> Result<Vec<u8>, ImportError> {
    let mut model = decode(bytes, source_name)?;
    let graph = model.graph.mut_or_insert_default();
    for f in fills {
        let init = graph
            .initializer
            .iter_mut()
            .find(|i| i.name == f.name)
            .ok_or_else(|| ImportError::BadInitializer {
                name: f.name.clone(),
                message: format!("no initializer of that name in '{source_name}' to fill"),
            })?;
        let numel = init
            .dims
            .iter()
            .try_fold(1usize, |acc, &d| {
                usize::try_from(d).ok().and_then(|d| acc.checked_mul(d))
            })
            .filter(|&n| n <= crate::ir::MAX_ELEMENTS)
            .ok_or_else(|| ImportError::BadInitializer {
                name: f.name.clone(),
                message: format!("dims {:?} are invalid", init.dims),
            })?;
        let values = crate::zoo::fill(f.seed, f.center, f.half_width, numel);
        let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        init.float_data.clear();
        init.raw_data = raw.into();
    }
    model.write_to_bytes().map_err(|e| ImportError::Malformed {
        source_name: source_name.to_string(),
        message: format!("cannot re-encode after filling: {e}"),
    })
}
