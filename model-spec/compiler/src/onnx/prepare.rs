//! Protobuf-level preparation, before onnx-ir sees the model.
//!
//! onnx-ir wants static shapes and drops initializer names, so everything
//! that needs the raw `ModelProto` happens here: decoding (with the empty and
//! garbage cases named), the opset, resolving the symbolic batch dimension of
//! the graph inputs to the requested batch, rejecting zero, negative and
//! absurd declared dimensions, and binding caller-supplied constant inputs
//! (e.g. the shape tensors of ONNX's conformance tests) as initializers,
//! and integer shape arithmetic on constants folded (`proto_fold`).

use super::error::{ImportError, UnsupportedUse};
use crate::ir::MAX_ELEMENTS;
use onnx_ir::{Message, ModelProto, TensorProto};

/// ONNX `TensorProto.DataType` for float32.
const ONNX_FLOAT: i32 = 1;

/// The decoded model with its graph inputs resolved to static shapes.
pub struct PreparedModel {
    pub model: ModelProto,
    /// Default-domain opset version.
    pub opset: i64,
    /// The batch size symbolic batch dims were set to (`None`: there were none).
    pub batch: Option<usize>,
    /// The graph outputs' names as the model gives them (onnx-ir renames them).
    pub output_names: Vec<String>,
}

pub fn decode(bytes: &[u8], source_name: &str) -> Result<ModelProto, ImportError> {
    if bytes.is_empty() {
        return Err(ImportError::Empty {
            source_name: source_name.to_string(),
        });
    }
    let model = ModelProto::parse_from_bytes(bytes).map_err(|e| ImportError::Malformed {
        source_name: source_name.to_string(),
        message: format!("protobuf decoding failed: {e}"),
    })?;
    if model.graph.is_none() || model.graph.node.is_empty() {
        return Err(ImportError::Malformed {
            source_name: source_name.to_string(),
            message: "the model has no graph or its graph has no nodes".into(),
        });
    }
    Ok(model)
}

/// Resolves symbolic input dims, checks declared dims and initializers.
pub fn prepare(
    mut model: ModelProto,
    source_name: &str,
    batch: Option<usize>,
    constants: &[TensorProto],
) -> Result<PreparedModel, ImportError> {
    let opset = model
        .opset_import
        .iter()
        .filter(|o| o.domain.is_empty() || o.domain == "ai.onnx")
        .map(|o| o.version)
        .max()
        .ok_or_else(|| ImportError::Malformed {
            source_name: source_name.to_string(),
            message: "opset_import declares no version for the default ONNX domain".into(),
        })?;
    if batch == Some(0) {
        return Err(ImportError::BadInput {
            input: "(all)".into(),
            message: "batch size 0 requested: the batch must be at least 1".into(),
        });
    }
    let graph = model.graph.mut_or_insert_default();
    for init in &graph.initializer {
        check_initializer(init)?;
    }
    check_nodes(graph, constants)?;
    apply_missing_defaults(graph);
    // Bind constants: they become initializers and stop being graph inputs.
    for c in constants {
        check_initializer(c)?;
        graph.initializer.retain(|i| i.name != c.name);
        graph.initializer.push(c.clone());
        graph.input.retain(|i| i.name != c.name);
    }
    let initializer_names: std::collections::HashSet<String> =
        graph.initializer.iter().map(|i| i.name.clone()).collect();

    let mut symbolic_seen = false;
    let resolved = batch.unwrap_or(1);
    for input in graph.input.iter_mut() {
        if initializer_names.contains(&input.name) {
            continue;
        }
        let name = input.name.clone();
        let bad = |message: String| ImportError::BadInput {
            input: name.clone(),
            message,
        };
        let ty = input.type_.mut_or_insert_default();
        if !ty.has_tensor_type() {
            return Err(bad(
                "is not a tensor; aotune compiles tensor inputs only".into()
            ));
        }
        let tensor = ty.mut_tensor_type();
        if tensor.elem_type != ONNX_FLOAT {
            return Err(bad(format!(
                "has element type {} (ONNX TensorProto.DataType); aotune accepts float32 inputs",
                tensor.elem_type
            )));
        }
        if tensor.shape.is_none() {
            return Err(bad(
                "declares no shape; export the model with input shapes".into()
            ));
        }
        let shape = tensor.shape.mut_or_insert_default();
        let mut elements: usize = 1;
        for (axis, dim) in shape.dim.iter_mut().enumerate() {
            let value = if dim.has_dim_value() {
                let v = dim.dim_value();
                if v <= 0 {
                    return Err(bad(format!(
                        "dimension {axis} is {v}; every dimension must be at least 1"
                    )));
                }
                v as u64
            } else if axis == 0 {
                symbolic_seen = true;
                dim.set_dim_value(resolved as i64);
                resolved as u64
            } else {
                let label = if dim.has_dim_param() {
                    format!("'{}'", dim.dim_param())
                } else {
                    "unknown".into()
                };
                return Err(bad(format!(
                    "dimension {axis} is symbolic ({label}); aotune compiles static shapes and \
                     resolves only a symbolic batch (axis 0): export with a fixed size"
                )));
            };
            elements = usize::try_from(value)
                .ok()
                .and_then(|v| elements.checked_mul(v))
                .filter(|&n| n <= MAX_ELEMENTS)
                .ok_or_else(|| {
                    bad(format!(
                        "declared shape is absurdly large (more than {MAX_ELEMENTS} elements)"
                    ))
                })?;
        }
    }
    if let (Some(requested), false) = (batch, symbolic_seen) {
        // A fixed batch equal to the request is fine; anything else is a mistake.
        let fixed: Vec<i64> = graph
            .input
            .iter()
            .filter(|i| !initializer_names.contains(&i.name))
            .filter_map(|i| {
                i.type_
                    .tensor_type()
                    .shape
                    .dim
                    .first()
                    .map(|d| d.dim_value())
            })
            .collect();
        if fixed.iter().any(|&b| b != requested as i64) {
            let inputs = graph
                .input
                .iter()
                .filter(|i| !initializer_names.contains(&i.name))
                .map(|i| {
                    let dims: Vec<String> = i
                        .type_
                        .tensor_type()
                        .shape
                        .dim
                        .iter()
                        .map(|d| d.dim_value().to_string())
                        .collect();
                    format!("{} [{}]", i.name, dims.join(", "))
                })
                .collect::<Vec<_>>()
                .join("; ");
            return Err(ImportError::BatchNotSymbolic { requested, inputs });
        }
    }
    // After the batch is resolved, so that the shapes of the graph inputs
    // (and the arithmetic on them) fold too.
    super::proto_fold::fold_integer_constants(model.graph.mut_or_insert_default());
    let output_names = model.graph.output.iter().map(|o| o.name.clone()).collect();
    Ok(PreparedModel {
        output_names,
        model,
        opset,
        batch: symbolic_seen.then_some(resolved),
    })
}

fn check_initializer(init: &TensorProto) -> Result<(), ImportError> {
    let bad = |message: String| ImportError::BadInitializer {
        name: init.name.clone(),
        message,
    };
    let mut elements: usize = 1;
    for &d in &init.dims {
        if d < 0 {
            return Err(bad(format!(
                "has negative dimension {d} in {:?}",
                init.dims
            )));
        }
        elements = usize::try_from(d)
            .ok()
            .and_then(|d| elements.checked_mul(d))
            .filter(|&n| n <= MAX_ELEMENTS)
            .ok_or_else(|| bad(format!("dims {:?} are absurdly large", init.dims)))?;
    }
    if !init.external_data.is_empty() {
        return Err(bad(
            "stores its data outside the .onnx file (external data), which is read only when \
             the model is loaded from its file path (its data file beside it); or save the \
             model with all tensors inside it (onnx.save(model, path, \
             save_as_external_data=False))"
                .into(),
        ));
    }
    Ok(())
}

/// Checks, with the model's own node names, that every op is one aotune
/// accepts (all unsupported ops are reported at once, each with its count
/// and first node) and every node input is defined somewhere.
fn check_nodes(graph: &onnx_ir::GraphProto, constants: &[TensorProto]) -> Result<(), ImportError> {
    let mut defined: std::collections::HashSet<&str> = graph
        .input
        .iter()
        .map(|i| i.name.as_str())
        .chain(graph.initializer.iter().map(|i| i.name.as_str()))
        .chain(constants.iter().map(|c| c.name.as_str()))
        .collect();
    for node in &graph.node {
        defined.extend(node.output.iter().map(|o| o.as_str()));
    }
    let mut unsupported: Vec<UnsupportedUse> = Vec::new();
    for (index, node) in graph.node.iter().enumerate() {
        let name = if node.name.is_empty() {
            format!("#{index}")
        } else {
            node.name.clone()
        };
        let default_domain = node.domain.is_empty() || node.domain == "ai.onnx";
        if !default_domain || !crate::ops::accepts_onnx_op(&node.op_type) {
            let op = if default_domain {
                node.op_type.clone()
            } else {
                format!("{}::{}", node.domain, node.op_type)
            };
            match unsupported.iter_mut().find(|u| u.op == op) {
                Some(seen) => seen.count += 1,
                None => unsupported.push(UnsupportedUse {
                    op,
                    count: 1,
                    first_node: name,
                }),
            }
            continue;
        }
        for input in node.input.iter().filter(|i| !i.is_empty()) {
            if !defined.contains(input.as_str()) {
                return Err(ImportError::BadNodeInput {
                    node: name,
                    op: node.op_type.clone(),
                    input: format!("'{input}'"),
                    message: "is not a graph input, an initializer, or the output of any node \
                              (a missing initializer?)"
                        .into(),
                });
            }
        }
    }
    if !unsupported.is_empty() {
        return Err(ImportError::UnsupportedOps {
            ops: unsupported,
            supported: crate::ops::supported_list(),
        });
    }
    Ok(())
}

/// Runs each op's protobuf-level fix-up ([`crate::ops::OpDef::fix_proto`]),
/// e.g. ONNX's default for attributes onnx-ir 0.22 defaults differently.
fn apply_missing_defaults(graph: &mut onnx_ir::GraphProto) {
    crate::ops::arithmetic::split_variadic_extrema(graph);
    for node in graph.node.iter_mut() {
        let fix = crate::ops::for_onnx_op(&node.op_type).and_then(|def| def.fix_proto);
        if let Some(fix) = fix {
            fix(node);
        }
    }
}
