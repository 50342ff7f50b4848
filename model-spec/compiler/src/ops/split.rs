//! ONNX `Split` with constant sizes (the `split` attribute before opset
//! 13, a constant input from 13, `num_outputs` from 18, equal parts
//! otherwise): one [`Op::Slice`] per used output, each bound to its output
//! with [`NodeImport::bind_output`] (the IR has no multi-output nodes).
//! A zero-sized part is rejected (aotune values have no zero-sized
//! dimensions).

use super::{const_input, OpDef};
use crate::ir::{Op, ValueId};
use crate::onnx::{ImportError, NodeImport};
use onnx_ir::node::split::SplitSizesInput;
use onnx_ir::{Node, NodeType};

pub(crate) const DEF: OpDef = OpDef {
    onnx: &["Split"],
    summary: "Split (constant sizes: `split` attribute or input, `num_outputs`, equal parts; \
              several outputs)",
    node_types: &[NodeType::Split],
    import,
    fix_proto: None,
    #[cfg(test)]
    examples: tests::EXAMPLES,
};

fn import(cx: &mut NodeImport) -> Result<ValueId, ImportError> {
    let Node::Split(n) = cx.node else {
        return Err(cx.unsupported());
    };
    let x = cx.input(0)?;
    let shape = cx.shape(x).to_vec();
    let axis = n.config.axis;
    let dim = *shape
        .get(axis)
        .ok_or_else(|| cx.attr_error("axis", axis, "out of range for the input"))?;
    let names = cx.output_names();
    let sizes: Vec<usize> = match (&n.config.split_sizes, n.config.split_size) {
        (Some(SplitSizesInput::Static(sizes)), _) => sizes.clone(),
        (Some(SplitSizesInput::Runtime(r)), _) => {
            let sizes = const_input::required_ints(cx, r.input_index, "split")?;
            sizes
                .iter()
                .map(|&s| usize::try_from(s))
                .collect::<Result<_, _>>()
                .map_err(|_| cx.attr_error("split", &sizes, "sizes must not be negative"))?
        }
        (None, Some(size)) if size > 0 => {
            let mut sizes = vec![size; dim / size];
            if dim % size != 0 {
                sizes.push(dim % size);
            }
            sizes
        }
        (None, _) if dim % names.len() == 0 => vec![dim / names.len(); names.len()],
        (None, _) => {
            return Err(cx.attr_error(
                "split",
                "(absent)",
                &format!(
                    "axis {axis} of {dim} elements does not split into {} equal parts",
                    names.len()
                ),
            ))
        }
    };
    if sizes.len() != names.len() || sizes.iter().sum::<usize>() != dim {
        return Err(cx.attr_error(
            "split",
            &sizes,
            &format!(
                "must give {} sizes summing to axis {axis}'s {dim} elements",
                names.len()
            ),
        ));
    }
    if sizes.contains(&0) {
        return Err(cx.attr_error(
            "split",
            &sizes,
            "a zero-sized part: aotune values have no zero-sized dimensions",
        ));
    }
    let mut first = None;
    let mut start = 0;
    for (k, (&size, name)) in sizes.iter().zip(&names).enumerate() {
        let (begin, end) = (start as i64, (start + size) as i64);
        start += size;
        if name.is_empty() {
            continue;
        }
        let mut starts = vec![0; shape.len()];
        let mut ends = vec![i64::MAX; shape.len()];
        (starts[axis], ends[axis]) = (begin, end);
        let op = Op::Slice {
            starts,
            ends,
            steps: vec![1; shape.len()],
        };
        let node = format!("{}/{k}", cx.name());
        let id = cx.push_named(&node, op, vec![x], name)?;
        cx.bind_output(k, id);
        first.get_or_insert(id);
    }
    first.ok_or_else(|| cx.input_error("(outputs)", "no output of the Split is used"))
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ops::example::{Attr::*, Example, Input::*};

    /// The examples' models make only the first output a graph output;
    /// the test below reads every output.
    pub(crate) const EXAMPLES: &[Example] = &[
        Example {
            op_type: "Split",
            opset: 13,
            inputs: &[Data(&[2, 6]), Int64s(&[2, 4])],
            attrs: &[Int("axis", 1), Outputs(2)],
            output: &[2, 2],
            ir: &["Slice", "Slice"],
        },
        Example {
            op_type: "Split",
            opset: 11,
            inputs: &[Data(&[4, 3])],
            attrs: &[Ints("split", &[1, 3]), Outputs(2)],
            output: &[1, 3],
            ir: &["Slice", "Slice"],
        },
        Example {
            op_type: "Split",
            opset: 18,
            inputs: &[Data(&[5, 2])],
            attrs: &[Int("num_outputs", 3), Outputs(3)],
            output: &[2, 2],
            ir: &["Slice", "Slice", "Slice"],
        },
        // No sizes before opset 18: equal parts.
        Example {
            op_type: "Split",
            opset: 13,
            inputs: &[Data(&[6, 2])],
            attrs: &[Outputs(3)],
            output: &[2, 2],
            ir: &["Slice", "Slice", "Slice"],
        },
    ];
}

#[cfg(test)]
mod multi_output_tests {
    use super::tests::EXAMPLES;
    use crate::onnx::{import_bytes, ImportError, ImportOptions};
    use crate::reference::{run, RunOptions};
    use onnx_ir::{Message, ModelProto};

    /// `EXAMPLES[i]`'s model with every output of its node a graph output
    /// (or, with `drop`, the output `drop` unused: an empty name).
    fn model(i: usize, drop: Option<usize>) -> Vec<u8> {
        let mut model = ModelProto::parse_from_bytes(&EXAMPLES[i].model()).unwrap();
        let graph = model.graph.mut_or_insert_default();
        let template = graph.output[0].clone();
        let outputs = graph.node[0].output.clone();
        graph.output.clear();
        for (k, name) in outputs.iter().enumerate() {
            if Some(k) == drop {
                graph.node[0].output[k] = String::new();
                continue;
            }
            let mut output = template.clone();
            output.name = name.clone();
            // Shapes are re-inferred; drop the example's declared one.
            output
                .type_
                .mut_or_insert_default()
                .mut_tensor_type()
                .shape
                .clear();
            graph.output.push(output);
        }
        model.write_to_bytes().unwrap()
    }

    #[test]
    fn every_used_output_is_its_own_slice() {
        // Split [2, 6] on axis 1 into 2 + 4 columns.
        let imported = import_bytes(&model(0, None), "split", &ImportOptions::default()).unwrap();
        let graph = &imported.graph;
        let shapes: Vec<_> = graph
            .outputs
            .iter()
            .map(|&o| graph.value(o).shape.clone())
            .collect();
        assert_eq!(shapes, [vec![2, 2], vec![2, 4]]);
        let x: Vec<f32> = (0..12).map(|i| i as f32).collect();
        let outs = run(graph, &[&x], &RunOptions::default()).unwrap();
        assert_eq!(outs[0], [0.0, 1.0, 6.0, 7.0]);
        assert_eq!(outs[1], [2.0, 3.0, 4.0, 5.0, 8.0, 9.0, 10.0, 11.0]);
    }

    /// onnx-ir names an omitted output, so it gets a Slice nothing reads
    /// (dead-code elimination drops it); the others are unaffected.
    #[test]
    fn an_omitted_output_leaves_the_others_intact() {
        // num_outputs 3 of [5, 2]: rows 2 + 2 + 1; the middle one omitted.
        let imported =
            import_bytes(&model(2, Some(1)), "split", &ImportOptions::default()).unwrap();
        let graph = &imported.graph;
        let x: Vec<f32> = (0..10).map(|i| i as f32).collect();
        let outs = run(graph, &[&x], &RunOptions::default()).unwrap();
        assert_eq!(outs, [vec![0.0, 1.0, 2.0, 3.0], vec![8.0, 9.0]]);
    }

    /// An op that binds only its first output still refuses a model that
    /// uses its second (MaxPool's Indices).
    #[test]
    fn an_unbound_second_output_is_refused() {
        let example = crate::ops::example::Example {
            op_type: "MaxPool",
            opset: 12,
            inputs: &[crate::ops::example::Input::Data(&[1, 1, 4, 4])],
            attrs: &[
                crate::ops::example::Attr::Ints("kernel_shape", &[2, 2]),
                crate::ops::example::Attr::Outputs(2),
            ],
            output: &[1, 1, 3, 3],
            ir: &[],
        };
        let mut model = ModelProto::parse_from_bytes(&example.model()).unwrap();
        let graph = model.graph.mut_or_insert_default();
        let mut indices = graph.output[0].clone();
        indices.name = "y1".into();
        indices
            .type_
            .mut_or_insert_default()
            .mut_tensor_type()
            .elem_type = 7;
        graph.output.push(indices);
        let bytes = model.write_to_bytes().unwrap();
        let err = import_bytes(&bytes, "maxpool", &ImportOptions::default()).unwrap_err();
        assert!(
            matches!(&err, ImportError::UnsupportedAttribute { attribute, .. } if attribute == "outputs"),
            "{err}"
        );
    }
}
