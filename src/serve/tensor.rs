//! Checking a decoded request against a model's signature, protocol-neutral:
//! HTTP and gRPC decode their wire formats into [`RequestInput`]s, and
//! [`prepare`] turns them into the rows the batcher runs, or says exactly
//! what is wrong (unknown, missing or repeated input, datatype, shape, byte
//! length). An input's datatype is the model's (FP32, or FP16 for a model
//! served with `"input_datatype": "FP16"`): raw data is little-endian
//! elements of it, numbers are accepted for either and rounded at the batch. [`select_outputs`] and [`output_shape`] do the same for outputs.

use super::backend::{Signature, TensorSpec};
use super::error::InferError;
use super::rows::Rows;
use bytes::Bytes;

/// KServe's datatype of encoded images (and any byte string).
pub const BYTES: &str = "BYTES";

/// One input tensor as the client sent it.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestInput {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
    pub data: InputData,
}

/// An input's data, in whichever form the protocol carried it.
#[derive(Debug, Clone, PartialEq)]
pub enum InputData {
    /// Numbers (JSON `data`, gRPC `fp32_contents`).
    F32(Vec<f32>),
    /// Raw little-endian bytes (HTTP binary extension, gRPC
    /// `raw_input_contents`); for BYTES, 4-byte little-endian lengths each
    /// followed by that many bytes.
    Raw(Bytes),
    /// Byte strings (JSON strings, gRPC `bytes_contents`), for BYTES.
    Strings(Vec<Vec<u8>>),
}

/// Turns an encoded image into one row of the image input (the ImageNet
/// transform: `[3, 224, 224]` f32); the error is the client's message.
pub type ImageDecoder = fn(&[u8]) -> Result<Vec<f32>, String>;

/// Which input accepts encoded images, and how they are decoded.
#[derive(Clone, Copy)]
pub struct ImageInput<'a> {
    pub input: &'a str,
    pub decode: ImageDecoder,
}

/// A request ready for the batcher.
#[derive(Debug, PartialEq)]
pub struct Prepared {
    /// Batch rows (1 for an unbatched model).
    pub rows: usize,
    /// Per model input, in signature order: `rows × item_len` values.
    pub inputs: Vec<Rows>,
}

/// The number of elements of `shape`, or why it is not a shape.
fn element_count(name: &str, shape: &[i64]) -> Result<usize, InferError> {
    shape.iter().try_fold(1usize, |n, &d| {
        let d = usize::try_from(d).map_err(|_| {
            InferError::invalid(format!(
                "input '{name}': shape {shape:?} has a negative dimension"
            ))
        })?;
        n.checked_mul(d).ok_or_else(|| {
            InferError::invalid(format!("input '{name}': shape {shape:?} is too large"))
        })
    })
}

/// Checks `inputs` against `signature` and gathers their data.
pub fn prepare(
    signature: &Signature,
    image: Option<ImageInput<'_>>,
    inputs: Vec<RequestInput>,
) -> Result<Prepared, InferError> {
    let mut slots: Vec<Option<RequestInput>> = vec![None; signature.inputs.len()];
    for input in inputs {
        let index = signature
            .inputs
            .iter()
            .position(|t| t.name == input.name)
            .ok_or_else(|| {
                InferError::invalid(format!(
                    "unknown input '{}'; the model's inputs are: {}",
                    input.name,
                    input_names(signature)
                ))
            })?;
        if slots[index].is_some() {
            return Err(InferError::invalid(format!(
                "input '{}' is given more than once",
                input.name
            )));
        }
        slots[index] = Some(input);
    }
    let mut rows = None;
    let mut data = Vec::with_capacity(slots.len());
    for (spec, slot) in signature.inputs.iter().zip(slots) {
        let input = slot.ok_or_else(|| {
            InferError::invalid(format!(
                "input '{}' is missing; the model's inputs are: {}",
                spec.name,
                input_names(signature)
            ))
        })?;
        let is_image = image.is_some_and(|i| i.input == spec.name);
        let (input_rows, values) = if input.datatype == BYTES && is_image {
            let decode = image
                .map(|i| i.decode)
                .ok_or_else(|| InferError::Internal("image input without a decoder".into()))?;
            decode_images(signature, spec.item_len(), input, decode)?
        } else {
            check_numeric(signature, spec, input, is_image)?
        };
        match rows {
            None => rows = Some(input_rows),
            Some(r) if r != input_rows => {
                return Err(InferError::invalid(format!(
                    "input '{}' has {input_rows} rows (its first dimension), another input {r}; \
                     every input needs the same batch",
                    spec.name
                )))
            }
            Some(_) => {}
        }
        data.push(values);
    }
    Ok(Prepared {
        rows: rows.unwrap_or(1),
        inputs: data,
    })
}

fn input_names(signature: &Signature) -> String {
    signature
        .inputs
        .iter()
        .map(|t| format!("'{}'", t.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A numeric input of the model's datatype (`spec.datatype`): shape
/// against the model's, values against the shape.
fn check_numeric(
    signature: &Signature,
    spec: &TensorSpec,
    input: RequestInput,
    is_image: bool,
) -> Result<(usize, Rows), InferError> {
    let name = &input.name;
    let datatype = spec.datatype;
    let size = datatype.size();
    if input.datatype != datatype.name() {
        let also = if is_image {
            " (or BYTES: encoded images)"
        } else {
            ""
        };
        return Err(InferError::invalid(format!(
            "input '{name}': datatype {got} does not match the model's: expected \
             {datatype}{also}, got {got}",
            got = input.datatype
        )));
    }
    let count = element_count(name, &input.shape)?;
    let expected = signature.client_shape(spec);
    let fits = input.shape.len() == expected.len()
        && input
            .shape
            .iter()
            .zip(&expected)
            .all(|(&got, &want)| want == -1 || got == want);
    if !fits || (signature.batched && input.shape[0] < 1) {
        return Err(InferError::invalid(format!(
            "input '{name}': shape {:?} does not match the model's {expected:?} (-1: any batch \
             of at least 1)",
            input.shape
        )));
    }
    let rows = if signature.batched {
        input.shape[0] as usize
    } else {
        1
    };
    let values = match input.data {
        InputData::F32(values) if values.len() == count => Rows::F32(values),
        InputData::F32(values) => {
            return Err(InferError::invalid(format!(
                "input '{name}': shape {:?} needs {count} values, got {}",
                input.shape,
                values.len()
            )))
        }
        InputData::Raw(bytes) if Some(bytes.len()) == count.checked_mul(size) => {
            Rows::from_le_bytes(bytes, datatype).ok_or_else(|| {
                InferError::Internal(format!(
                    "input '{name}': {datatype} bytes not in {size}-byte units"
                ))
            })?
        }
        InputData::Raw(bytes) => {
            return Err(InferError::invalid(format!(
                "input '{name}': shape {:?} of {datatype} needs {} bytes, got {}",
                input.shape,
                count.saturating_mul(size),
                bytes.len()
            )))
        }
        InputData::Strings(_) => {
            return Err(InferError::invalid(format!(
                "input '{name}': {datatype} data must be numbers, not strings"
            )))
        }
    };
    Ok((rows, values))
}

/// A BYTES image input: one encoded image per row, shape `[N]` or `[N, 1]`.
fn decode_images(
    signature: &Signature,
    item_len: usize,
    input: RequestInput,
    decode: ImageDecoder,
) -> Result<(usize, Rows), InferError> {
    let name = &input.name;
    let shape_ok = signature.batched && matches!(input.shape.as_slice(), [n] | [n, 1] if *n >= 1);
    if !shape_ok {
        return Err(InferError::invalid(format!(
            "input '{name}': BYTES images need shape [N] or [N, 1] (one encoded image per row), \
             got {:?}",
            input.shape
        )));
    }
    let rows = input.shape[0] as usize;
    let images = match input.data {
        InputData::Strings(s) => s,
        InputData::Raw(bytes) => split_bytes(name, &bytes)?,
        InputData::F32(_) => {
            return Err(InferError::invalid(format!(
                "input '{name}': BYTES data must be strings, not numbers"
            )))
        }
    };
    if images.len() != rows {
        return Err(InferError::invalid(format!(
            "input '{name}': shape {:?} needs {rows} images, got {}",
            input.shape,
            images.len()
        )));
    }
    let mut values = Vec::with_capacity(rows * item_len);
    for (i, image) in images.iter().enumerate() {
        let row = decode(image)
            .map_err(|e| InferError::invalid(format!("input '{name}', image {i}: {e}")))?;
        if row.len() != item_len {
            return Err(InferError::Internal(format!(
                "input '{name}': the image transform gave {} values, the model takes {item_len}",
                row.len()
            )));
        }
        values.extend_from_slice(&row);
    }
    Ok((rows, Rows::F32(values)))
}

/// Splits KServe's binary BYTES encoding (u32 LE length, then the bytes).
fn split_bytes(name: &str, mut bytes: &[u8]) -> Result<Vec<Vec<u8>>, InferError> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let truncated = || {
            InferError::invalid(format!(
                "input '{name}': BYTES data is truncated (each element is a 4-byte little-endian \
                 length and that many bytes)"
            ))
        };
        let (len, rest) = bytes.split_first_chunk::<4>().ok_or_else(truncated)?;
        let len = u32::from_le_bytes(*len) as usize;
        if rest.len() < len {
            return Err(truncated());
        }
        out.push(rest[..len].to_vec());
        bytes = &rest[len..];
    }
    Ok(out)
}

/// Indices of the requested outputs (all of them when none is named).
pub fn select_outputs(signature: &Signature, names: &[String]) -> Result<Vec<usize>, InferError> {
    if names.is_empty() {
        return Ok((0..signature.outputs.len()).collect());
    }
    let mut picked = Vec::with_capacity(names.len());
    for name in names {
        let index = signature
            .outputs
            .iter()
            .position(|t| &t.name == name)
            .ok_or_else(|| {
                let known: Vec<String> = signature
                    .outputs
                    .iter()
                    .map(|t| format!("'{}'", t.name))
                    .collect();
                InferError::invalid(format!(
                    "unknown output '{name}'; the model's outputs are: {}",
                    known.join(", ")
                ))
            })?;
        if picked.contains(&index) {
            return Err(InferError::invalid(format!(
                "output '{name}' is requested more than once"
            )));
        }
        picked.push(index);
    }
    Ok(picked)
}

/// The shape of output `index` for a request of `rows` rows.
pub fn output_shape(signature: &Signature, index: usize, rows: usize) -> Vec<i64> {
    let item = signature.outputs[index]
        .item_shape
        .iter()
        .map(|&d| d as i64);
    if signature.batched {
        std::iter::once(rows as i64).chain(item).collect()
    } else {
        item.collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::backend::FP32;
    use super::super::datatype::Datatype;
    use super::*;

    fn signature() -> Signature {
        Signature {
            inputs: vec![
                TensorSpec::fp32("a", vec![2]),
                TensorSpec::fp32("b", vec![1]),
            ],
            outputs: vec![TensorSpec::fp32("y", vec![3])],
            batched: true,
            batch_sizes: vec![1, 4],
        }
    }

    fn f32_input(name: &str, shape: &[i64], values: &[f32]) -> RequestInput {
        RequestInput {
            name: name.into(),
            datatype: FP32.into(),
            shape: shape.to_vec(),
            data: InputData::F32(values.to_vec()),
        }
    }

    #[test]
    fn inputs_are_put_in_signature_order() {
        let raw: Vec<u8> = [5.0f32, 6.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let p = prepare(
            &signature(),
            None,
            vec![
                RequestInput {
                    name: "b".into(),
                    datatype: FP32.into(),
                    shape: vec![2, 1],
                    data: InputData::Raw(raw.into()),
                },
                f32_input("a", &[2, 2], &[1.0, 2.0, 3.0, 4.0]),
            ],
        )
        .unwrap();
        assert_eq!(p.rows, 2);
        let values: Vec<Vec<f32>> = p.inputs.iter().map(Rows::to_vec).collect();
        assert_eq!(values, vec![vec![1.0, 2.0, 3.0, 4.0], vec![5.0, 6.0]]);
        // Raw bytes stay bytes until the batch is gathered.
        assert!(matches!(p.inputs[1], Rows::Le { .. }));
    }

    /// `a` is FP16 (a model built with an f16 input), `b` FP32.
    fn fp16_signature() -> Signature {
        let mut s = signature();
        s.inputs[0].datatype = Datatype::FP16;
        s
    }

    fn input(name: &str, datatype: &str, shape: &[i64], data: InputData) -> RequestInput {
        RequestInput {
            name: name.into(),
            datatype: datatype.into(),
            shape: shape.to_vec(),
            data,
        }
    }

    #[test]
    fn an_fp16_input_takes_f16_bytes_or_numbers() {
        let b = || f32_input("b", &[2, 1], &[0.0; 2]);
        let halves: Vec<u8> = [1.0f32, 2.0, 3.0, 0.5]
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect();
        let raw = input("a", "FP16", &[2, 2], InputData::Raw(halves.into()));
        let p = prepare(&fp16_signature(), None, vec![raw, b()]).unwrap();
        assert!(matches!(
            p.inputs[0],
            Rows::Le {
                datatype: Datatype::FP16,
                ..
            }
        ));
        assert_eq!(p.inputs[0].to_vec(), [1.0, 2.0, 3.0, 0.5]);
        let numbers = input("a", "FP16", &[1, 2], InputData::F32(vec![0.1, 2.0]));
        let b1 = f32_input("b", &[1, 1], &[0.0]);
        let p = prepare(&fp16_signature(), None, vec![numbers, b1]).unwrap();
        assert_eq!(p.inputs[0], Rows::F32(vec![0.1, 2.0]));
        // 2 bytes an element: 4 elements need 8 bytes.
        let short = input(
            "a",
            "FP16",
            &[2, 2],
            InputData::Raw(Bytes::from_static(&[0; 16])),
        );
        let e = prepare(&fp16_signature(), None, vec![short, b()]).unwrap_err();
        assert!(
            e.to_string().contains("of FP16 needs 8 bytes, got 16"),
            "{e}"
        );
    }

    #[test]
    fn a_datatype_mismatch_names_expected_and_received() {
        let b = || f32_input("b", &[1, 1], &[0.0]);
        let fp32_to_fp16 = prepare(
            &fp16_signature(),
            None,
            vec![f32_input("a", &[1, 2], &[0.0; 2]), b()],
        );
        let e = fp32_to_fp16.unwrap_err().to_string();
        assert!(
            e.contains("input 'a'") && e.contains("expected FP16, got FP32"),
            "{e}"
        );
        let raw = input(
            "a",
            "FP16",
            &[1, 2],
            InputData::Raw(Bytes::from_static(&[0; 4])),
        );
        let e = prepare(&signature(), None, vec![raw, b()]).unwrap_err();
        assert!(
            matches!(&e, InferError::InvalidArgument(m) if m.contains("expected FP32, got FP16")),
            "{e}"
        );
    }

    #[test]
    fn every_mistake_is_named() {
        let ok_b = || f32_input("b", &[1, 1], &[0.0]);
        let cases: Vec<(Vec<RequestInput>, &str)> = vec![
            (
                vec![f32_input("a", &[1, 2], &[0.0, 0.0])],
                "input 'b' is missing",
            ),
            (
                vec![f32_input("zz", &[1, 2], &[0.0, 0.0]), ok_b()],
                "unknown input 'zz'",
            ),
            (
                vec![f32_input("a", &[1, 2], &[0.0; 2]), ok_b(), ok_b()],
                "more than once",
            ),
            (
                vec![f32_input("a", &[1, 3], &[0.0; 3]), ok_b()],
                "does not match",
            ),
            (
                vec![f32_input("a", &[2], &[0.0; 2]), ok_b()],
                "does not match",
            ),
            (vec![f32_input("a", &[0, 2], &[]), ok_b()], "at least 1"),
            (vec![f32_input("a", &[-1, 2], &[]), ok_b()], "negative"),
            (
                vec![f32_input("a", &[1, 2], &[0.0; 3]), ok_b()],
                "needs 2 values, got 3",
            ),
            (
                vec![f32_input("a", &[2, 2], &[0.0; 4]), ok_b()],
                "every input needs the same batch",
            ),
            (
                vec![
                    RequestInput {
                        name: "a".into(),
                        datatype: "INT64".into(),
                        shape: vec![1, 2],
                        data: InputData::F32(vec![0.0; 2]),
                    },
                    ok_b(),
                ],
                "datatype INT64",
            ),
            (
                vec![
                    RequestInput {
                        name: "a".into(),
                        datatype: FP32.into(),
                        shape: vec![1, 2],
                        data: InputData::Raw(Bytes::from_static(&[0; 7])),
                    },
                    ok_b(),
                ],
                "needs 8 bytes, got 7",
            ),
            (
                vec![f32_input("a", &[i64::MAX, 4], &[]), ok_b()],
                "too large",
            ),
        ];
        for (inputs, needle) in cases {
            let e = prepare(&signature(), None, inputs).unwrap_err();
            assert!(
                matches!(&e, InferError::InvalidArgument(m) if m.contains(needle)),
                "{needle}: {e:?}"
            );
        }
    }

    fn fake_decode(bytes: &[u8]) -> Result<Vec<f32>, String> {
        if bytes == b"bad" {
            return Err("not an image".into());
        }
        Ok(vec![bytes.len() as f32, 0.0])
    }

    #[test]
    fn bytes_images_are_decoded_row_by_row() {
        let image = Some(ImageInput {
            input: "a",
            decode: fake_decode,
        });
        let mut raw = Vec::new();
        for s in [&b"xyz"[..], b"q"] {
            raw.extend_from_slice(&(s.len() as u32).to_le_bytes());
            raw.extend_from_slice(s);
        }
        let input = |shape: &[i64], data: InputData| RequestInput {
            name: "a".into(),
            datatype: BYTES.into(),
            shape: shape.to_vec(),
            data,
        };
        let b2 = || f32_input("b", &[2, 1], &[0.0; 2]);
        let p = prepare(
            &signature(),
            image,
            vec![input(&[2], InputData::Raw(raw.into())), b2()],
        )
        .unwrap();
        assert_eq!(p.inputs[0].to_vec(), vec![3.0, 0.0, 1.0, 0.0]);
        let bad = prepare(
            &signature(),
            image,
            vec![
                input(
                    &[2, 1],
                    InputData::Strings(vec![b"ok".to_vec(), b"bad".to_vec()]),
                ),
                b2(),
            ],
        )
        .unwrap_err();
        assert!(bad.to_string().contains("image 1: not an image"), "{bad}");
        let truncated = prepare(
            &signature(),
            image,
            vec![
                input(&[1], InputData::Raw(Bytes::from_static(&[9, 0, 0, 0, 1]))),
                b2(),
            ],
        )
        .unwrap_err();
        assert!(truncated.to_string().contains("truncated"), "{truncated}");
        // Without the image config, BYTES is a datatype error.
        let e = prepare(
            &signature(),
            None,
            vec![input(&[1], InputData::Raw(Bytes::new())), b2()],
        )
        .unwrap_err();
        assert!(e.to_string().contains("datatype BYTES"), "{e}");
    }

    #[test]
    fn outputs_are_selected_by_name() {
        let s = signature();
        assert_eq!(select_outputs(&s, &[]).unwrap(), vec![0]);
        assert_eq!(select_outputs(&s, &["y".into()]).unwrap(), vec![0]);
        assert!(select_outputs(&s, &["x".into()])
            .unwrap_err()
            .to_string()
            .contains("unknown output 'x'"));
        assert_eq!(output_shape(&s, 0, 5), vec![5, 3]);
    }
}
