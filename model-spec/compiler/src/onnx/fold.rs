//! Build-time evaluation of a node whose inputs are all constants: the node
//! runs alone on the CPU reference (f32, row-major, as imported values are)
//! and its output replaces it as a constant.

use crate::ir::{Graph, Node, Value, ValueId, ValueKind};
use crate::reference::{run, RunOptions};

/// The logical row-major output of `node`, every input of which is a
/// constant of `graph`. Errors are the reference executor's, as text.
pub(super) fn evaluate(graph: &Graph, node: &Node) -> Result<Vec<f32>, String> {
    let mut single = Graph {
        values: Vec::with_capacity(node.inputs.len() + 1),
        nodes: Vec::new(),
        inputs: Vec::new(),
        outputs: Vec::new(),
        precision: graph.precision,
    };
    let mut inputs = Vec::with_capacity(node.inputs.len());
    for &id in &node.inputs {
        let value = graph.value(id);
        debug_assert!(matches!(value.kind, ValueKind::Constant(_)));
        inputs.push(single.add_value(value.clone()));
    }
    let out = graph.value(node.output);
    let output: ValueId = single.add_value(Value::activation(out.name.clone(), out.shape.clone()));
    single.nodes.push(Node {
        name: node.name.clone(),
        op: node.op.clone(),
        inputs,
        output,
    });
    single.outputs.push(output);
    let mut outputs = run(&single, &[], &RunOptions::default()).map_err(|e| e.to_string())?;
    outputs
        .pop()
        .ok_or_else(|| "the reference returned no output".to_string())
}
