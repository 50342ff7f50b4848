//! The KServe v2 REST inference body, with Triton's binary tensor data
//! extension, as pure functions from bytes to requests and results to bytes.
//!
//! Request: a JSON object `{"id"?, "parameters"?, "inputs": [{"name",
//! "shape", "datatype", "parameters"?, "data"?}], "outputs"?: [{"name",
//! "parameters"?}]}`. With the header `Inference-Header-Content-Length: N`
//! the JSON is the first N bytes of the body and the rest holds, in input
//! order, the raw data of every input whose parameters give
//! `binary_data_size`. `data` may be nested or flat.
//!
//! Response: `{"model_name", "model_version", "id"?, "outputs": [{"name",
//! "datatype", "shape", "data" | "parameters": {"binary_data_size"}}]}`; an
//! output is binary when its request parameters say `"binary_data": true`,
//! or when the request's `"binary_data_output": true` and the output does not
//! say `false`. Binary outputs follow the JSON, in output order, and the
//! response carries `Inference-Header-Content-Length`.

use super::backend::FP32;
use super::error::InferError;
use super::state::{InferCall, InferDone};
use super::tensor::{output_shape, InputData, RequestInput, BYTES};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::time::Duration;

pub const HEADER_LENGTH: &str = "inference-header-content-length";

#[derive(Deserialize)]
struct RequestJson {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    parameters: Map<String, Value>,
    inputs: Vec<InputJson>,
    #[serde(default)]
    outputs: Vec<OutputJson>,
}

#[derive(Deserialize)]
struct InputJson {
    name: String,
    shape: Vec<i64>,
    datatype: String,
    #[serde(default)]
    parameters: Map<String, Value>,
    #[serde(default)]
    data: Option<Value>,
}

#[derive(Deserialize)]
struct OutputJson {
    name: String,
    #[serde(default)]
    parameters: Map<String, Value>,
}

/// How to encode the answer to a request.
pub struct Encoding {
    pub id: Option<String>,
    /// Per requested output (same order as `call.outputs`; all outputs when
    /// that is empty): whether it goes binary. `binary_default` applies to
    /// outputs not named.
    pub binary: Vec<bool>,
    pub binary_default: bool,
}

fn bool_param(
    params: &Map<String, Value>,
    key: &str,
    what: &str,
) -> Result<Option<bool>, InferError> {
    match params.get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(InferError::invalid(format!(
            "{what}: parameter \"{key}\" must be true or false, got {other}"
        ))),
    }
}

fn u64_param(
    params: &Map<String, Value>,
    key: &str,
    what: &str,
) -> Result<Option<u64>, InferError> {
    match params.get(key) {
        None => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            InferError::invalid(format!(
                "{what}: parameter \"{key}\" must be a non-negative integer, got {v}"
            ))
        }),
    }
}

/// Parses an inference request body for `model`/`version`;
/// `header_length` is the `Inference-Header-Content-Length` value.
pub fn parse_request(
    model: &str,
    version: &str,
    body: &[u8],
    header_length: Option<usize>,
) -> Result<(InferCall, Encoding), InferError> {
    let json_len = header_length.unwrap_or(body.len());
    if json_len > body.len() {
        return Err(InferError::invalid(format!(
            "Inference-Header-Content-Length is {json_len} but the body holds {} bytes",
            body.len()
        )));
    }
    let (json, mut binary) = body.split_at(json_len);
    let request: RequestJson = serde_json::from_slice(json)
        .map_err(|e| InferError::invalid(format!("malformed inference request JSON: {e}")))?;
    let timeout = u64_param(&request.parameters, "timeout", "request")?.map(Duration::from_micros);
    let binary_default =
        bool_param(&request.parameters, "binary_data_output", "request")?.unwrap_or(false);
    let mut inputs = Vec::with_capacity(request.inputs.len());
    for input in request.inputs {
        let what = format!("input '{}'", input.name);
        let size = u64_param(&input.parameters, "binary_data_size", &what)?;
        let data = match (size, input.data) {
            (Some(_), Some(_)) => {
                return Err(InferError::invalid(format!(
                    "{what}: give either \"data\" or the \"binary_data_size\" parameter, not both"
                )))
            }
            (Some(size), None) => {
                let size = usize::try_from(size).unwrap_or(usize::MAX);
                if size > binary.len() {
                    return Err(InferError::invalid(format!(
                        "{what}: binary_data_size {size} is more than the {} bytes left after \
                         the JSON header",
                        binary.len()
                    )));
                }
                let (head, rest) = binary.split_at(size);
                binary = rest;
                InputData::Raw(Bytes::copy_from_slice(head))
            }
            (None, Some(data)) => json_data(&what, &input.datatype, data)?,
            (None, None) => {
                return Err(InferError::invalid(format!(
                    "{what}: no \"data\" and no \"binary_data_size\" parameter"
                )))
            }
        };
        inputs.push(RequestInput {
            name: input.name,
            datatype: input.datatype,
            shape: input.shape,
            data,
        });
    }
    if !binary.is_empty() {
        return Err(InferError::invalid(format!(
            "{} bytes of binary data after the JSON header belong to no input",
            binary.len()
        )));
    }
    let mut names = Vec::with_capacity(request.outputs.len());
    let mut binary_flags = Vec::with_capacity(request.outputs.len());
    for output in request.outputs {
        let what = format!("output '{}'", output.name);
        if output.parameters.contains_key("classification") {
            return Err(InferError::invalid(format!(
                "{what}: the classification extension is not supported"
            )));
        }
        binary_flags
            .push(bool_param(&output.parameters, "binary_data", &what)?.unwrap_or(binary_default));
        names.push(output.name);
    }
    let call = InferCall {
        model: model.to_string(),
        version: version.to_string(),
        inputs,
        outputs: names,
        timeout,
    };
    let encoding = Encoding {
        id: request.id,
        binary: binary_flags,
        binary_default,
    };
    Ok((call, encoding))
}

/// A JSON `data` array, nested or flat: numbers for FP32, strings for BYTES.
fn json_data(what: &str, datatype: &str, data: Value) -> Result<InputData, InferError> {
    let mut leaves = Vec::new();
    flatten(data, &mut leaves);
    if datatype == BYTES {
        let strings = leaves
            .into_iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.into_bytes()),
                other => Err(InferError::invalid(format!(
                    "{what}: BYTES data must be strings, got {other}"
                ))),
            })
            .collect::<Result<_, _>>()?;
        return Ok(InputData::Strings(strings));
    }
    let values = leaves
        .into_iter()
        .map(|v| match v.as_f64() {
            Some(x) => Ok(x as f32),
            None => Err(InferError::invalid(format!(
                "{what}: data must be numbers, got {v}"
            ))),
        })
        .collect::<Result<_, _>>()?;
    Ok(InputData::F32(values))
}

/// Appends the non-array leaves of `v`, depth first.
fn flatten(v: Value, out: &mut Vec<Value>) {
    match v {
        Value::Array(items) => {
            for item in items {
                flatten(item, out);
            }
        }
        leaf => out.push(leaf),
    }
}

#[derive(Serialize)]
struct ResponseJson<'a> {
    model_name: &'a str,
    model_version: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    outputs: Vec<OutputTensorJson<'a>>,
}

#[derive(Serialize)]
struct OutputTensorJson<'a> {
    name: &'a str,
    datatype: &'a str,
    shape: Vec<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<BinaryParameters>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a [f32]>,
}

#[derive(Serialize)]
struct BinaryParameters {
    binary_data_size: usize,
}

/// The response body, and the JSON header's length when binary data follows.
pub fn encode_response(request: &Encoding, done: &InferDone) -> (Vec<u8>, Option<usize>) {
    let signature = done.model.backend.signature();
    let mut tail: Vec<u8> = Vec::new();
    let mut outputs = Vec::with_capacity(done.outputs.len());
    for (k, (index, values)) in done.outputs.iter().enumerate() {
        let binary = request
            .binary
            .get(k)
            .copied()
            .unwrap_or(request.binary_default);
        let (parameters, data) = if binary {
            let start = tail.len();
            tail.extend(values.iter().flat_map(|v| v.to_le_bytes()));
            (
                Some(BinaryParameters {
                    binary_data_size: tail.len() - start,
                }),
                None,
            )
        } else {
            (None, Some(values.as_slice()))
        };
        outputs.push(OutputTensorJson {
            name: &signature.outputs[*index].name,
            datatype: FP32,
            shape: output_shape(signature, *index, done.rows),
            parameters,
            data,
        });
    }
    let json = ResponseJson {
        model_name: &done.model.name,
        model_version: super::repository::VERSION,
        id: request.id.as_deref(),
        outputs,
    };
    // Serializing plain structs of strings and numbers cannot fail.
    let mut body = serde_json::to_vec(&json).unwrap_or_default();
    if tail.is_empty() && !request.binary.iter().any(|&b| b) && !request.binary_default {
        return (body, None);
    }
    let header = body.len();
    body.extend_from_slice(&tail);
    (body, Some(header))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &[u8], header: Option<usize>) -> Result<(InferCall, Encoding), InferError> {
        parse_request("m", "", body, header)
    }

    #[test]
    fn json_and_binary_inputs_are_read_in_order() {
        let json = br#"{"id": "7", "parameters": {"binary_data_output": true, "timeout": 5000},
            "inputs": [
              {"name": "a", "shape": [1, 2], "datatype": "FP32", "parameters": {"binary_data_size": 8}},
              {"name": "b", "shape": [2, 2], "datatype": "FP32", "data": [[1, 2], [3.5, 4]]},
              {"name": "c", "shape": [1], "datatype": "FP32", "parameters": {"binary_data_size": 4}}],
            "outputs": [{"name": "y", "parameters": {"binary_data": false}}, {"name": "z"}]}"#;
        let mut body = json.to_vec();
        for v in [1.0f32, 2.0, 3.0] {
            body.extend_from_slice(&v.to_le_bytes());
        }
        let (call, encoding) = parse(&body, Some(json.len())).unwrap();
        assert_eq!(encoding.id.as_deref(), Some("7"));
        assert_eq!(call.timeout, Some(Duration::from_millis(5)));
        assert_eq!(
            call.inputs[0].data,
            InputData::Raw(Bytes::copy_from_slice(&body[json.len()..][..8]))
        );
        assert_eq!(
            call.inputs[1].data,
            InputData::F32(vec![1.0, 2.0, 3.5, 4.0])
        );
        assert_eq!(
            call.inputs[2].data,
            InputData::Raw(Bytes::copy_from_slice(&3.0f32.to_le_bytes()))
        );
        assert_eq!(call.outputs, vec!["y", "z"]);
        assert_eq!(encoding.binary, vec![false, true]);
    }

    #[test]
    fn malformed_bodies_are_named() {
        let one = |data: &str| {
            format!(r#"{{"inputs": [{{"name": "a", "shape": [1], "datatype": "FP32"{data}}}]}}"#)
        };
        for (body, header, needle) in [
            ("{".to_string(), None, "malformed inference request JSON"),
            (r#"{"inputs": 3}"#.into(), None, "invalid type"),
            (r#"{"outputs": []}"#.into(), None, "missing field `inputs`"),
            (one(""), None, "no \"data\""),
            (one(r#", "data": ["x"]"#), None, "must be numbers"),
            (one(r#", "data": [1], "parameters": {"binary_data_size": 4}"#), None, "not both"),
            (one(r#", "parameters": {"binary_data_size": 4}"#), None, "more than the 0 bytes"),
            (one(r#", "parameters": {"binary_data_size": -1}"#), None, "non-negative integer"),
            (one(r#", "data": [1]"#), Some(10_000), "Inference-Header-Content-Length"),
            (
                r#"{"parameters": {"binary_data_output": 1}, "inputs": []}"#.into(),
                None,
                "true or false",
            ),
            (
                r#"{"inputs": [], "outputs": [{"name": "y", "parameters": {"classification": 3}}]}"#
                    .into(),
                None,
                "classification",
            ),
        ] {
            let e = parse(body.as_bytes(), header).err().unwrap_or_else(|| panic!("{body}"));
            assert!(e.to_string().contains(needle), "{body}: {e}");
        }
        let body = one(r#", "data": [1]"#);
        let mut extra = body.clone().into_bytes();
        extra.extend_from_slice(&[0; 3]);
        let e = parse(&extra, Some(body.len())).err().unwrap();
        assert!(e.to_string().contains("belong to no input"), "{e}");
    }
}
