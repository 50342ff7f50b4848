//! Reading serialized `onnx.TensorProto` files (ONNX's test-data `.pb`
//! format) without exposing protobuf to callers.

use super::error::ImportError;
use onnx_ir::{Message, TensorProto};

/// `TensorProto.DataType` codes aotune reads.
const FLOAT: i32 = 1;
const INT32: i32 = 6;
const INT64: i32 = 7;
const DOUBLE: i32 = 11;

/// A tensor read from a `.pb` file.
#[derive(Debug, Clone)]
pub struct TensorFile {
    pub name: String,
    pub dims: Vec<usize>,
    /// True for floating-point payloads (data in `values`), false for integers.
    pub is_float: bool,
    /// Elements as f32 (integers converted, exact up to 2^24).
    pub values: Vec<f32>,
    /// The message itself, for binding as a constant input.
    pub proto: TensorProto,
}

pub fn read_tensor_file(bytes: &[u8], source_name: &str) -> Result<TensorFile, ImportError> {
    let bad = |message: String| ImportError::Malformed {
        source_name: source_name.to_string(),
        message,
    };
    let proto =
        TensorProto::parse_from_bytes(bytes).map_err(|e| bad(format!("not a TensorProto: {e}")))?;
    let dims = proto
        .dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| bad(format!("negative dim {d}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let numel: usize = dims.iter().product();
    let raw = &proto.raw_data;
    let (is_float, values): (bool, Vec<f32>) = match proto.data_type {
        FLOAT if !raw.is_empty() => (
            true,
            raw.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        FLOAT => (true, proto.float_data.clone()),
        DOUBLE if !raw.is_empty() => (
            true,
            raw.chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32)
                .collect(),
        ),
        DOUBLE => (true, proto.double_data.iter().map(|&x| x as f32).collect()),
        INT64 if !raw.is_empty() => (
            false,
            raw.chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32)
                .collect(),
        ),
        INT64 => (false, proto.int64_data.iter().map(|&x| x as f32).collect()),
        INT32 if !raw.is_empty() => (
            false,
            raw.chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32)
                .collect(),
        ),
        INT32 => (false, proto.int32_data.iter().map(|&x| x as f32).collect()),
        other => return Err(bad(format!("unsupported tensor data type {other}"))),
    };
    if values.len() != numel {
        return Err(bad(format!(
            "holds {} elements, dims {dims:?} need {numel}",
            values.len()
        )));
    }
    Ok(TensorFile {
        name: proto.name.clone(),
        dims,
        is_float,
        values,
        proto,
    })
}
