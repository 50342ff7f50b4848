//! Stable text form of a graph, used by golden tests and `aotune dump`.
//!
//! One line per input, constant and node; values are numbered `%N` in graph
//! order, so the text depends only on the graph, never on hash order.

use super::graph::{Graph, ValueKind};
use std::fmt::Write;

fn type_str(graph: &Graph, id: super::graph::ValueId) -> String {
    let v = graph.value(id);
    let dims: Vec<String> = v.shape.iter().map(|d| d.to_string()).collect();
    let layout = match v.layout {
        super::types::Layout::RowMajor => "",
        super::types::Layout::ChannelsLast => " cl",
    };
    format!("{}[{}]{layout}", v.dtype, dims.join(","))
}

pub fn print_graph(graph: &Graph) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "graph precision={}", graph.precision);
    for &input in &graph.inputs {
        let _ = writeln!(
            out,
            "  input %{}: {}  # {}",
            input.0,
            type_str(graph, input),
            graph.value(input).name
        );
    }
    for (i, v) in graph.values.iter().enumerate() {
        if let ValueKind::Constant(data) = &v.kind {
            let sum: f64 = data.iter().map(|&x| x as f64).sum();
            let _ = writeln!(
                out,
                "  const %{i}: {}  # sum={sum:.6e}",
                type_str(graph, super::graph::ValueId(i as u32)),
            );
        }
    }
    for node in &graph.nodes {
        let args: Vec<String> = node.inputs.iter().map(|v| format!("%{}", v.0)).collect();
        let attrs = node.op.attrs();
        let _ = writeln!(
            out,
            "  %{}: {} = {}({}){}{}  # {}",
            node.output.0,
            type_str(graph, node.output),
            node.op.kind(),
            args.join(", "),
            if attrs.is_empty() { "" } else { " " },
            attrs,
            node.name
        );
    }
    let outs: Vec<String> = graph.outputs.iter().map(|v| format!("%{}", v.0)).collect();
    let _ = writeln!(out, "  return {}", outs.join(", "));
    out
}
