//! Integer shape arithmetic on constants, folded in the protobuf before
//! onnx-ir reads the model.
//!
//! The TorchScript exporter writes shape computations such as
//! `Slice(Shape(x), 0, Reshape(Mod(c1, c2), c3))` (PyTorch's
//! MultiheadAttention). onnx-ir infers ranks before aotune folds anything and
//! cannot tell the length of a shape vector sliced at a computed end, so the
//! Reshape it feeds fails type inference. Here every node of the integer ops
//! below whose inputs are all integer constants (initializers or `Constant`
//! nodes) becomes a `Constant` node holding its int64 result, in graph
//! order, so chains fold. Anything else is left to the importer.
//!
//! Folded: Add, Sub, Mul, Div (truncating), Mod (`fmod` 0: the divisor's
//! sign; 1: the dividend's), Neg, Abs, Min, Max, Identity, Cast to an
//! integer type, Reshape, Unsqueeze, Squeeze, Concat, Gather (axis 0),
//! on int32/int64 data; binary ops broadcast numpy-style. `Shape` (with its
//! `start`/`end`) of a graph input whose dims are all static: it runs after
//! the symbolic batch is resolved, so the dynamo exporter's size arithmetic
//! on a dynamic batch (`sym_size`: Shape → Squeeze → Mul → Reshape →
//! Concat) folds to the constant it is for that batch.

use crate::ops::gather::resolve;
use crate::ops::reshape::reshape_shape;
use crate::ops::squeeze::{squeezed, unsqueezed};
use onnx_ir::{AttributeProto, AttributeType, GraphProto, NodeProto, TensorProto};
use std::collections::HashMap;

const INT32: i32 = 6;
const INT64: i32 = 7;

/// An integer constant: its shape and row-major values.
#[derive(Debug, Clone, PartialEq)]
struct Ints {
    dims: Vec<usize>,
    values: Vec<i64>,
}

/// Folds, in place, every foldable integer node of `graph`.
pub(crate) fn fold_integer_constants(graph: &mut GraphProto) {
    let mut known: HashMap<String, Ints> = graph
        .initializer
        .iter()
        .filter_map(|t| Some((t.name.clone(), ints_of(t)?)))
        .collect();
    let input_dims: HashMap<String, Vec<i64>> = graph
        .input
        .iter()
        .filter(|i| !known.contains_key(&i.name))
        .filter_map(|i| {
            let dims = &i.type_.as_ref()?.tensor_type().shape.as_ref()?.dim;
            let dims: Option<Vec<i64>> = dims
                .iter()
                .map(|d| (d.has_dim_value() && d.dim_value() > 0).then(|| d.dim_value()))
                .collect();
            Some((i.name.clone(), dims?))
        })
        .collect();
    for node in graph.node.iter_mut() {
        if node.op_type == "Shape" && node.output.len() == 1 {
            if let Some(dims) = node.input.first().and_then(|x| input_dims.get(x)) {
                if let Some(result) = shape_slice(node, dims) {
                    let output = node.output[0].clone();
                    *node = constant_node(&node.name, &output, &result);
                    known.insert(output, result);
                }
            }
            continue;
        }
        if node.op_type == "Constant" {
            if let (Some(out), Some(value)) = (node.output.first(), constant_value(node)) {
                known.insert(out.clone(), value);
            }
            continue;
        }
        let default_domain = node.domain.is_empty() || node.domain == "ai.onnx";
        if !default_domain || node.output.len() != 1 || node.input.is_empty() {
            continue;
        }
        let inputs: Option<Vec<&Ints>> = node
            .input
            .iter()
            .map(|name| known.get(name).filter(|_| !name.is_empty()))
            .collect();
        let Some(result) = inputs.and_then(|ins| evaluate(node, &ins)) else {
            continue;
        };
        let output = node.output[0].clone();
        *node = constant_node(&node.name, &output, &result);
        known.insert(output, result);
    }
}

/// The integer data of a tensor, if it is int32/int64 and readable.
fn ints_of(t: &TensorProto) -> Option<Ints> {
    let dims: Vec<usize> = t
        .dims
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<_>>()?;
    let numel: usize = dims.iter().product();
    let values: Vec<i64> = match (t.data_type, t.raw_data.is_empty()) {
        (INT64, true) => t.int64_data.clone(),
        (INT32, true) => t.int32_data.iter().map(|&v| v as i64).collect(),
        (INT64, false) => t
            .raw_data
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
            .collect(),
        (INT32, false) => t
            .raw_data
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes(b.try_into().unwrap()) as i64)
            .collect(),
        _ => return None,
    };
    (values.len() == numel).then_some(Ints { dims, values })
}

/// A `Constant` node's integer value (`value`, `value_int`, `value_ints`).
fn constant_value(node: &NodeProto) -> Option<Ints> {
    let attr = node.attribute.first()?;
    match attr.name.as_str() {
        "value" => ints_of(attr.t.as_ref()?),
        "value_int" => Some(Ints {
            dims: Vec::new(),
            values: vec![attr.i],
        }),
        "value_ints" => Some(Ints {
            dims: vec![attr.ints.len()],
            values: attr.ints.clone(),
        }),
        _ => None,
    }
}

fn constant_node(name: &str, output: &str, value: &Ints) -> NodeProto {
    let tensor = TensorProto {
        name: output.to_string(),
        dims: value.dims.iter().map(|&d| d as i64).collect(),
        data_type: INT64,
        int64_data: value.values.clone(),
        ..Default::default()
    };
    NodeProto {
        name: name.to_string(),
        op_type: "Constant".into(),
        output: vec![output.to_string()],
        attribute: vec![AttributeProto {
            name: "value".into(),
            type_: AttributeType::TENSOR.into(),
            t: Some(tensor).into(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn attr<'n>(node: &'n NodeProto, name: &str) -> Option<&'n AttributeProto> {
    node.attribute.iter().find(|a| a.name == name)
}

/// The node's result, when this module folds it.
fn evaluate(node: &NodeProto, ins: &[&Ints]) -> Option<Ints> {
    let binary = |f: fn(i64, i64) -> Option<i64>| broadcast(ins.first()?, ins.get(1)?, f);
    match node.op_type.as_str() {
        "Add" => binary(i64::checked_add),
        "Sub" => binary(i64::checked_sub),
        "Mul" => binary(i64::checked_mul),
        "Div" => binary(i64::checked_div),
        "Mod" if attr(node, "fmod").is_some_and(|a| a.i == 1) => binary(i64::checked_rem),
        "Mod" => binary(|a, b| {
            let r = a.checked_rem(b)?;
            Some(if r != 0 && (r < 0) != (b < 0) {
                r + b
            } else {
                r
            })
        }),
        "Min" if ins.len() == 2 => binary(|a, b| Some(a.min(b))),
        "Max" if ins.len() == 2 => binary(|a, b| Some(a.max(b))),
        "Neg" => map(ins[0], i64::checked_neg),
        "Abs" => map(ins[0], i64::checked_abs),
        "Identity" => Some(ins[0].clone()),
        "Cast" => attr(node, "to")
            .filter(|a| matches!(a.i as i32, INT32 | INT64))
            .map(|_| ins[0].clone()),
        "Reshape" => {
            let target = &ins.get(1)?.values;
            reshaped(ins[0], reshape_shape(&ins[0].dims, target, false).ok()?)
        }
        "Unsqueeze" => reshaped(ins[0], unsqueezed(&ins[0].dims, &axes(node, ins)?).ok()?),
        "Squeeze" => reshaped(
            ins[0],
            squeezed(&ins[0].dims, axes(node, ins).as_deref()).ok()?,
        ),
        "Concat" => {
            let rank1 = ins.iter().all(|t| t.dims.len() == 1);
            let axis = attr(node, "axis")?.i;
            (rank1 && (axis == 0 || axis == -1)).then(|| {
                let values: Vec<i64> = ins.iter().flat_map(|t| t.values.iter().copied()).collect();
                Ints {
                    dims: vec![values.len()],
                    values,
                }
            })
        }
        "Gather" if attr(node, "axis").is_none_or(|a| a.i == 0) && ins[0].dims.len() == 1 => {
            let (data, indices) = (ins[0], ins.get(1)?);
            let n = data.values.len();
            let values = indices
                .values
                .iter()
                .map(|&i| Some(data.values[resolve(i, n)?]))
                .collect::<Option<_>>()?;
            Some(Ints {
                dims: indices.dims.clone(),
                values,
            })
        }
        _ => None,
    }
}

/// `Shape(x)` of an input with static `dims`: dims `start..end` (opset 15;
/// negative from the end, clamped to the rank as the spec says).
fn shape_slice(node: &NodeProto, dims: &[i64]) -> Option<Ints> {
    let rank = dims.len() as i64;
    let at = |name: &str, default: i64| {
        let v = attr(node, name).map_or(default, |a| a.i);
        (if v < 0 { v + rank } else { v }).clamp(0, rank) as usize
    };
    let (start, end) = (at("start", 0), at("end", rank));
    // An empty slice stays a Shape node: the importer's own rules apply.
    let values: Vec<i64> = dims.get(start..end).filter(|d| !d.is_empty())?.to_vec();
    Some(Ints {
        dims: vec![values.len()],
        values,
    })
}

/// Unsqueeze/Squeeze axes: the second input (opset 13+) or the attribute.
fn axes(node: &NodeProto, ins: &[&Ints]) -> Option<Vec<i64>> {
    match ins.get(1) {
        Some(t) => Some(t.values.clone()),
        None => attr(node, "axes").map(|a| a.ints.clone()),
    }
}

fn map(x: &Ints, f: fn(i64) -> Option<i64>) -> Option<Ints> {
    Some(Ints {
        dims: x.dims.clone(),
        values: x.values.iter().map(|&v| f(v)).collect::<Option<_>>()?,
    })
}

/// Elementwise `f` where one side is a single element or both have the same
/// shape (the shapes shape arithmetic uses).
fn broadcast(a: &Ints, b: &Ints, f: fn(i64, i64) -> Option<i64>) -> Option<Ints> {
    let (dims, values) = if a.dims == b.dims {
        let v = a.values.iter().zip(&b.values).map(|(&x, &y)| f(x, y));
        (a.dims.clone(), v.collect::<Option<Vec<_>>>()?)
    } else if b.values.len() == 1 && b.dims.len() <= a.dims.len() {
        let v = a.values.iter().map(|&x| f(x, b.values[0]));
        (a.dims.clone(), v.collect::<Option<Vec<_>>>()?)
    } else if a.values.len() == 1 && a.dims.len() <= b.dims.len() {
        let v = b.values.iter().map(|&y| f(a.values[0], y));
        (b.dims.clone(), v.collect::<Option<Vec<_>>>()?)
    } else {
        return None;
    };
    Some(Ints { dims, values })
}

/// `x`'s values under new dims of the same element count.
fn reshaped(x: &Ints, dims: Vec<usize>) -> Option<Ints> {
    (dims.iter().product::<usize>() == x.values.len()).then(|| Ints {
        dims,
        values: x.values.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int_const(name: &str, dims: &[i64], values: &[i64]) -> NodeProto {
        let value = Ints {
            dims: dims.iter().map(|&d| d as usize).collect(),
            values: values.to_vec(),
        };
        constant_node(name, name, &value)
    }

    fn node(op: &str, inputs: &[&str], output: &str) -> NodeProto {
        NodeProto {
            name: output.into(),
            op_type: op.into(),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![output.into()],
            ..Default::default()
        }
    }

    /// PyTorch MultiheadAttention's `Reshape(Mod(c1, c2), c3)` and the
    /// `Add` after it fold, the runtime Shape is left alone.
    #[test]
    fn shape_arithmetic_on_constants_folds_in_order() {
        let mut graph = GraphProto {
            node: vec![
                int_const("c1", &[], &[-1]),
                int_const("c2", &[], &[3]),
                node("Mod", &["c1", "c2"], "m"),
                int_const("c3", &[1], &[1]),
                node("Reshape", &["m", "c3"], "r"),
                node("Add", &["r", "c2"], "a"),
                node("Shape", &["x"], "s"),
                node("Concat", &["r", "a"], "cat"),
            ],
            ..Default::default()
        };
        graph.node[7].attribute.push(AttributeProto {
            name: "axis".into(),
            type_: AttributeType::INT.into(),
            i: 0,
            ..Default::default()
        });
        fold_integer_constants(&mut graph);
        let ops: Vec<&str> = graph.node.iter().map(|n| n.op_type.as_str()).collect();
        assert_eq!(
            ops,
            [
                "Constant", "Constant", "Constant", "Constant", "Constant", "Constant", "Shape",
                "Constant"
            ]
        );
        let value = |i: usize| constant_value(&graph.node[i]).unwrap();
        assert_eq!(value(2).values, [2]); // Python-style: -1 mod 3 = 2
        assert_eq!(value(4).dims, [1]);
        assert_eq!(value(5).values, [5]);
        assert_eq!(value(7).values, [2, 5]);
    }

    #[test]
    fn truncating_mod_and_bad_reshapes() {
        let a = Ints {
            dims: vec![2],
            values: vec![-7, 7],
        };
        let b = Ints {
            dims: vec![],
            values: vec![3],
        };
        assert_eq!(broadcast(&a, &b, i64::checked_rem).unwrap().values, [-1, 1]);
        assert!(reshape_shape(&a.dims, &[3], false).is_err());
        assert_eq!(reshape_shape(&a.dims, &[-1, 1], false).unwrap(), [2, 1]);
        assert!(broadcast(&a, &b, i64::checked_div).is_some());
        let zero = Ints {
            dims: vec![],
            values: vec![0],
        };
        assert!(broadcast(&a, &zero, i64::checked_div).is_none());
    }
}
