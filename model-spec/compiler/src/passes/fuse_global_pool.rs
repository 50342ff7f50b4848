//! Moves a `GlobalAveragePool` into the epilogue of the convolution that
//! produces its input ([`GlobalPool::Avg`]), where one output tile of the
//! convolution can hold every pixel of the batch: ResNet-50's last conv at
//! batch 1 (7 × 7 = 49 pixels). The pool kernel and the conv's full output
//! (200 KB at batch 1) then disappear; the fused kernel writes `[N, K]`.
//!
//! A pool qualifies when its input is a `FusedConv`'s output that nothing
//! else reads (and is not a graph output), channels-last, with at most
//! [`MAX_POOLED_PIXELS`] pixels over the whole batch, the same dtype as the
//! pool's output, and the graph runs on tensor cores (fp16, bf16, tf32: the
//! templates that have the pooled epilogue). The `FusedConv` (same inputs,
//! `pool: Some(Avg)`) replaces the pool node and writes its output value.

use super::{PassError, PassSummary, Uses};
use crate::ir::{debug_verify, GlobalPool, Graph, Layout, Node, Op, Patch, Precision};

const PASS: &str = "fuse_global_pool";

/// Pixels (N·P·Q) of the largest convolution output whose pool is fused:
/// the smallest M tile of the tensor-core templates' pooled configs (64
/// rows) must hold them all.
pub const MAX_POOLED_PIXELS: usize = 64;

/// Fuses each qualifying `GlobalAveragePool` into its producing `FusedConv`.
pub fn fuse_global_pool(graph: &mut Graph) -> Result<PassSummary, PassError> {
    let mut summary = PassSummary::new(PASS);
    if !matches!(
        graph.precision,
        Precision::Fp16 | Precision::Bf16 | Precision::Tf32
    ) {
        summary.add(0, "GlobalAveragePool fused into its conv");
        return Ok(summary);
    }
    let uses = Uses::of(graph);
    let producers = graph.producers();
    let mut patch = Patch::new(graph);
    let mut fused = 0;
    for id in graph.node_ids() {
        let node = graph.node(id);
        let (Op::GlobalAveragePool, &[input]) = (&node.op, node.inputs.as_slice()) else {
            continue;
        };
        let Some(&conv_id) = producers.get(&input) else {
            continue;
        };
        let conv = graph.node(conv_id);
        let Op::FusedConv {
            conv: geometry,
            epilogue,
            shortcut,
            pool: None,
            norm: None,
        } = conv.op
        else {
            continue;
        };
        let (v, out) = (graph.value(input), graph.value(node.output));
        let pixels = v.shape.iter().enumerate().filter(|&(axis, _)| axis != 1);
        let qualifies = uses.sole_user(input) == Some(id)
            && v.shape.len() == 4
            && v.layout == Layout::ChannelsLast
            && pixels.map(|(_, &d)| d).product::<usize>() <= MAX_POOLED_PIXELS
            && v.dtype == out.dtype;
        if !qualifies {
            continue;
        }
        patch.remove_node(conv_id);
        patch.replace_node(
            id,
            Node {
                name: conv.name.clone(),
                op: Op::FusedConv {
                    conv: geometry,
                    epilogue,
                    shortcut,
                    pool: Some(GlobalPool::Avg),
                    norm: None,
                },
                inputs: conv.inputs.clone(),
                output: node.output,
            },
        );
        fused += 1;
    }
    patch.apply(graph);
    debug_verify(graph, PASS);
    summary.add(fused, "GlobalAveragePool fused into its conv");
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{DType, Epilogue, Value, ValueKind};
    use crate::passes::{optimize, PassOptions};
    use crate::zoo::{resnet_onnx, ResNetDepth, DEFAULT_SEED};

    fn resnet50(batch: usize, precision: Precision) -> Graph {
        let model = resnet_onnx(ResNetDepth::R50, DEFAULT_SEED);
        let options = crate::onnx::ImportOptions {
            batch: Some(batch),
            ..Default::default()
        };
        let mut g = crate::onnx::import_bytes(&model, "zoo resnet50", &options)
            .expect("zoo import")
            .graph;
        optimize(
            &mut g,
            &PassOptions {
                precision,
                channels_last: true,
                ..Default::default()
            },
        )
        .expect("passes");
        g
    }

    fn pooled_convs(g: &Graph) -> Vec<&Node> {
        g.nodes
            .iter()
            .filter(|n| matches!(n.op, Op::FusedConv { pool: Some(_), .. }))
            .collect()
    }

    #[test]
    fn fuses_the_last_conv_of_resnet50_at_batch_1_only() {
        let g = resnet50(1, Precision::Fp16);
        let pooled = pooled_convs(&g);
        assert_eq!(pooled.len(), 1);
        assert_eq!(pooled[0].name, "conv2d53");
        assert_eq!(g.value(pooled[0].output).shape, vec![1, 2048, 1, 1]);
        assert!(!g.nodes.iter().any(|n| n.op == Op::GlobalAveragePool));
        // Batch 2 has 98 pixels, more than one tile's rows.
        let g2 = resnet50(2, Precision::Fp16);
        assert!(pooled_convs(&g2).is_empty());
        assert_eq!(
            g2.nodes
                .iter()
                .filter(|n| n.op == Op::GlobalAveragePool)
                .count(),
            1
        );
        // Strict fp32 runs SIMT kernels, which have no pooled epilogue.
        assert!(pooled_convs(&resnet50(1, Precision::Fp32)).is_empty());
        assert_eq!(pooled_convs(&resnet50(1, Precision::Tf32)).len(), 1);
    }

    /// A 1×1 conv over `[1, 8, 4, 4]` whose output feeds a global pool,
    /// and, when `second_reader`, also the graph's second output.
    fn conv_then_pool(second_reader: bool) -> Graph {
        let mut g = Graph {
            values: Vec::new(),
            nodes: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            precision: Precision::Fp16,
        };
        let act = |g: &mut Graph, name: &str, shape: Vec<usize>| {
            let mut v = Value::activation(name, shape);
            v.layout = Layout::ChannelsLast;
            v.dtype = DType::F16;
            g.add_value(v)
        };
        let x = act(&mut g, "x", vec![1, 8, 4, 4]);
        g.values[x.index()].kind = ValueKind::Input;
        let mut w = Value::constant("w", vec![16, 8, 1, 1], vec![0.5; 128]);
        w.layout = Layout::ChannelsLast;
        w.dtype = DType::F16;
        let w = g.add_value(w);
        let y = act(&mut g, "y", vec![1, 16, 4, 4]);
        let p = act(&mut g, "p", vec![1, 16, 1, 1]);
        g.inputs = vec![x];
        g.nodes.push(Node {
            name: "conv".into(),
            op: Op::FusedConv {
                conv: crate::ir::Conv2d {
                    kernel: [1, 1],
                    strides: [1, 1],
                    pads: [0; 4],
                    dilations: [1, 1],
                    groups: 1,
                },
                epilogue: Epilogue::NONE,
                shortcut: None,
                pool: None,
                norm: None,
            },
            inputs: vec![x, w],
            output: y,
        });
        g.nodes.push(Node {
            name: "gap".into(),
            op: Op::GlobalAveragePool,
            inputs: vec![y],
            output: p,
        });
        g.outputs = if second_reader { vec![p, y] } else { vec![p] };
        g
    }

    #[test]
    fn leaves_a_conv_output_that_has_another_reader() {
        let mut g = conv_then_pool(true);
        let s = fuse_global_pool(&mut g).unwrap();
        assert!(s.is_noop(), "{s}");
        let mut g = conv_then_pool(false);
        let s = fuse_global_pool(&mut g).unwrap();
        assert_eq!(s.count("GlobalAveragePool fused into its conv"), 1);
        assert_eq!(g.nodes.len(), 1);
    }

    #[test]
    fn the_pooled_conv_gives_the_pairs_result_on_the_reference() {
        let unfused = conv_then_pool(false);
        let mut fused = unfused.clone();
        fuse_global_pool(&mut fused).unwrap();
        let x: Vec<f32> = (0..128)
            .map(|i| ((i * 37) % 23) as f32 * 0.125 - 1.0)
            .collect();
        let opts = crate::reference::RunOptions::default();
        let run = |g: &Graph| crate::reference::run(g, &[&x], &opts).expect("reference run");
        let (a, b) = (run(&unfused), run(&fused));
        assert_eq!(a[0].len(), 16);
        // The same steps in the same order: the same bits.
        assert_eq!(
            a[0].iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            b[0].iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }
}
