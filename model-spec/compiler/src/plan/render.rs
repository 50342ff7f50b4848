//! The `plan.txt` text of a memory plan.
//!
//! A header gives the arena size, the lower bound, their ratio and the number
//! of buffers; then one row per buffer in address order (ties by value id):
//! offset in hex and decimal, bytes, value id and name, dtype, logical shape,
//! layout, lifetime `[first, last]` in executor steps, the producing op (or
//! `input`), and notes (`alias of %N` for views sharing their input's bytes,
//! `output` for graph outputs). Columns are padded to their widest cell. The
//! text depends only on the graph and the plan, never on hash order, so it
//! can be committed and diffed.

use super::MemoryPlan;
use crate::ir::Graph;
use std::fmt::Write;

const MIB: f64 = 1024.0 * 1024.0;

fn row(graph: &Graph, plan: &MemoryPlan, k: usize, producer: &[Option<&str>]) -> Vec<String> {
    let buf = &plan.buffers[k];
    let id = buf.value;
    let value = graph.values.get(id.index());
    let (name, dtype, shape, layout) = match value {
        Some(v) => {
            let dims: Vec<String> = v.shape.iter().map(|d| d.to_string()).collect();
            (
                v.name.clone(),
                v.dtype.to_string(),
                format!("[{}]", dims.join(",")),
                v.layout.name().to_string(),
            )
        }
        None => ("?".into(), "?".into(), "?".into(), "?".into()),
    };
    let op = if graph.inputs.contains(&id) {
        "input"
    } else {
        producer.get(id.index()).copied().flatten().unwrap_or("?")
    };
    let mut notes = Vec::new();
    if let Some(root) = buf.alias_of {
        notes.push(format!("alias of %{}", root.0));
    }
    if graph.outputs.contains(&id) {
        notes.push("output".to_string());
    }
    vec![
        format!("0x{:08x}", buf.offset),
        buf.offset.to_string(),
        buf.bytes.to_string(),
        format!("%{}", id.0),
        name,
        dtype,
        shape,
        layout,
        format!("[{}, {}]", buf.first, buf.last),
        op.to_string(),
        notes.join(", "),
    ]
}

/// Renders `plan` (made for `graph`) as the human-readable `plan.txt`.
pub fn render_plan(graph: &Graph, plan: &MemoryPlan) -> String {
    let mut producer: Vec<Option<&str>> = vec![None; graph.values.len()];
    for node in &graph.nodes {
        if let Some(slot) = producer.get_mut(node.output.index()) {
            *slot = Some(node.op.kind());
        }
    }
    let aliases = plan.buffers.iter().filter(|b| b.alias_of.is_some()).count();
    let ratio = if plan.lower_bound == 0 {
        1.0
    } else {
        plan.arena_bytes as f64 / plan.lower_bound as f64
    };

    let mut out = String::new();
    let _ = writeln!(out, "# aotune memory plan");
    let _ = writeln!(
        out,
        "arena        {:>12} bytes  {:>9.3} MiB",
        plan.arena_bytes,
        plan.arena_bytes as f64 / MIB
    );
    let _ = writeln!(
        out,
        "lower bound  {:>12} bytes  {:>9.3} MiB",
        plan.lower_bound,
        plan.lower_bound as f64 / MIB
    );
    let _ = writeln!(out, "ratio        {ratio:>12.4}");
    let _ = writeln!(
        out,
        "buffers      {:>12}  ({} placed, view aliases: {aliases})",
        plan.buffers.len(),
        plan.buffers.len() - aliases
    );
    let _ = writeln!(out, "alignment    {:>12}", plan.alignment);
    let _ = writeln!(
        out,
        "# steps: 0 copies inputs in, i+1 runs node i, {} copies outputs out",
        graph.nodes.len() + 1
    );
    let _ = writeln!(out);

    let header: Vec<String> = [
        "offset", "(dec)", "bytes", "value", "name", "dtype", "shape", "layout", "life", "op",
        "notes",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut order: Vec<usize> = (0..plan.buffers.len()).collect();
    order.sort_by_key(|&k| (plan.buffers[k].offset, plan.buffers[k].value));
    let mut rows = vec![header];
    rows.extend(order.iter().map(|&k| row(graph, plan, k, &producer)));

    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    // Numbers read best right-aligned.
    let right = |c: usize| c == 1 || c == 2;
    for r in &rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c > 0 {
                line.push_str("  ");
            }
            let pad = widths[c] - cell.chars().count();
            if right(c) {
                line.extend(std::iter::repeat_n(' ', pad));
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::plan_memory;
    use super::*;
    use crate::ir::{BinaryOp, Op, UnaryOp};
    use crate::test_graphs::Builder;

    /// x → relu → flatten (view) → gemm, with a side output kept to the end.
    fn small_graph() -> Graph {
        let mut b = Builder::new().outputs_named_as_nodes();
        let x = b.input("image", &[1, 4, 8, 8]);
        let a = b.node("relu", Op::Unary(UnaryOp::Relu), &[x]);
        let s = b.node("skip", Op::Binary(BinaryOp::Add), &[a, x]);
        let f = b.node("flatten", Op::Flatten { axis: 1 }, &[s]);
        let w = b.zeros("fc.weight", &[10, 256]);
        let gemm = Op::Gemm {
            alpha: 1.0,
            beta: 0.0,
            trans_a: false,
            trans_b: true,
        };
        let y = b.node("fc", gemm, &[f, w]);
        b.output(y);
        b.output(a);
        b.finish()
    }

    #[test]
    fn plan_txt_snapshot() {
        let graph = small_graph();
        let plan = plan_memory(&graph).unwrap();
        let text = render_plan(&graph, &plan);
        assert_eq!(text, render_plan(&graph, &plan.clone()));
        insta::assert_snapshot!(text);
    }

    #[test]
    fn rows_are_in_offset_order() {
        let graph = small_graph();
        let plan = plan_memory(&graph).unwrap();
        let text = render_plan(&graph, &plan);
        let offsets: Vec<usize> = text
            .lines()
            .filter(|l| l.starts_with("0x"))
            .map(|l| usize::from_str_radix(&l[2..10], 16).unwrap())
            .collect();
        assert_eq!(offsets.len(), plan.buffers.len());
        assert!(offsets.windows(2).all(|w| w[0] <= w[1]));
    }
}
