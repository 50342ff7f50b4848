//! Reading serialized `onnx.TensorProto` files (ONNX's test-data `.pb`
//! format) without exposing protobuf to callers.

use super::error::ImportError;
use onnx_ir::{Message, TensorProto};

/// `TensorProto.DataType` codes aotune reads.
const FLOAT: i32 = 1;
const INT32: i32 = 6;
const INT64: i32 = 7;
const DOUBLE: i32 = 11;
const UINT8: i32 = 2;
const INT8: i32 = 3;
const UINT16: i32 = 4;
const INT16: i32 = 5;
const BOOL: i32 = 9;
const UINT32: i32 = 12;
const UINT64: i32 = 13;

/// A tensor read from a `.pb` file.
#[derive(Debug, Clone)]
pub struct TensorFile {
    pub name: String,
    pub dims: Vec<usize>,
    /// True for floating-point payloads (data in `values`), false for
    /// integers and bools.
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
        // Narrow integers and bools (bool as 0/1): one or two bytes each
        // raw, widened into `int32_data` otherwise.
        BOOL | UINT8 if !raw.is_empty() => (false, raw.iter().map(|&b| b as f32).collect()),
        INT8 if !raw.is_empty() => (false, raw.iter().map(|&b| b as i8 as f32).collect()),
        INT16 | UINT16 if !raw.is_empty() => (
            false,
            raw.chunks_exact(2)
                .map(|c| match proto.data_type {
                    INT16 => i16::from_le_bytes([c[0], c[1]]) as f32,
                    _ => u16::from_le_bytes([c[0], c[1]]) as f32,
                })
                .collect(),
        ),
        BOOL | UINT8 | INT8 | UINT16 | INT16 => {
            (false, proto.int32_data.iter().map(|&x| x as f32).collect())
        }
        UINT32 if !raw.is_empty() => (
            false,
            raw.chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32)
                .collect(),
        ),
        UINT64 if !raw.is_empty() => (
            false,
            raw.chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32)
                .collect(),
        ),
        UINT32 | UINT64 => (false, proto.uint64_data.iter().map(|&x| x as f32).collect()),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn read(proto: TensorProto) -> TensorFile {
        let bytes = proto.write_to_bytes().expect("serializes");
        read_tensor_file(&bytes, "t.pb").expect("reads")
    }

    #[test]
    fn narrow_integers_and_bools_read_as_integer_values() {
        let raw = |data_type: i32, bytes: &[u8], n: i64| TensorProto {
            data_type,
            dims: vec![n],
            raw_data: bytes.to_vec().into(),
            ..Default::default()
        };
        let t = read(raw(BOOL, &[1, 0, 1], 3));
        assert!(!t.is_float);
        assert_eq!(t.values, [1.0, 0.0, 1.0]);
        assert_eq!(read(raw(INT8, &[0xff, 7], 2)).values, [-1.0, 7.0]);
        assert_eq!(read(raw(UINT8, &[0xff, 7], 2)).values, [255.0, 7.0]);
        assert_eq!(read(raw(INT16, &[0xfe, 0xff], 1)).values, [-2.0]);
        assert_eq!(read(raw(UINT16, &[0xfe, 0xff], 1)).values, [65534.0]);
        let u32s = raw(UINT32, &4_000_000_000u32.to_le_bytes(), 1);
        assert_eq!(read(u32s).values, [4e9]);
        let typed = TensorProto {
            data_type: UINT64,
            dims: vec![2],
            uint64_data: vec![3, 9],
            ..Default::default()
        };
        assert_eq!(read(typed).values, [3.0, 9.0]);
        let bools = TensorProto {
            data_type: BOOL,
            dims: vec![2],
            int32_data: vec![0, 1],
            ..Default::default()
        };
        assert_eq!(read(bools).values, [0.0, 1.0]);
    }
}
