//! Refilling the payloads of a graph-only model (such as the torchvision
//! fixtures, shipped without weights) with the zoo's deterministic fill rule.
//! Works on the protobuf, so it lives in the importer.

use super::error::ImportError;
use super::prepare::decode;
use onnx_ir::Message;

/// One initializer's fill parameters (see `zoo::fill`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct WeightFill {
    pub name: String,
    pub seed: u64,
    pub center: f32,
    pub half_width: f32,
}

/// The `fill.json` that ships beside a graph-only model: one record per
/// initializer under `tensors` (other keys, such as the rule's prose, are
/// ignored).
#[derive(serde::Deserialize)]
struct FillRule {
    tensors: Vec<WeightFill>,
}

impl WeightFill {
    /// Parses a `fill.json` (`source_name` names it in errors). An empty
    /// `tensors` list is an error: a graph-only model always has weights.
    pub fn parse_rule(json: &[u8], source_name: &str) -> Result<Vec<WeightFill>, ImportError> {
        let malformed = |message: String| ImportError::Malformed {
            source_name: source_name.to_string(),
            message,
        };
        let rule: FillRule = serde_json::from_slice(json).map_err(|e| {
            malformed(format!(
                "not a fill rule (`tensors`: [{{name, seed, center, half_width}}]): {e}"
            ))
        })?;
        if rule.tensors.is_empty() {
            return Err(malformed("the fill rule's `tensors` list is empty".into()));
        }
        Ok(rule.tensors)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_rule_reads_the_tensor_records_and_ignores_other_keys() {
        let json = br#"{"rule": "prose", "tensors": [
            {"name": "w", "seed": 7, "center": 0.5, "half_width": 0.25, "shape": [2]}]}"#;
        let fills = WeightFill::parse_rule(json, "fill.json").unwrap();
        assert_eq!(
            fills,
            vec![WeightFill {
                name: "w".into(),
                seed: 7,
                center: 0.5,
                half_width: 0.25
            }]
        );
    }

    #[test]
    fn parse_rule_names_the_file_when_a_record_is_incomplete_or_the_list_empty() {
        for json in [
            &br#"{"tensors": [{"name": "w", "seed": 7, "center": 0.5}]}"#[..],
            br#"{"tensors": []}"#,
            br#"[1, 2]"#,
        ] {
            let e = WeightFill::parse_rule(json, "dir/fill.json")
                .unwrap_err()
                .to_string();
            assert!(e.contains("dir/fill.json"), "{e}");
        }
    }
}
