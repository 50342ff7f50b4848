//! A synthetic ResNet-50 (v1.5: stride on the 3×3 conv) built directly in the
//! fused form `fuse_epilogue` produces: 53 FusedConvs with bias / residual /
//! ReLU epilogues (the projection shortcuts kept as convs of their own),
//! max pool, global average pool, flatten, dense. Built in
//! NHWC (channels-last activations, OHWI weights) or NCHW. A small variant
//! checks that the two layouts and the arena agree; the full-size one times
//! the executor (`cargo test --release -p aotune-compiler reference::perf --
//! --ignored --nocapture`).

use super::testing::{conv2d, disjoint_plan, physical, Rng};
use super::{rel_l2, run, run_planned, Accumulate, RunOptions};
use crate::ir::{Activation, DType, Epilogue, Graph, Layout, Op, Pool2d, ValueId};
use crate::test_graphs::Builder;
use std::time::Instant;

struct Net {
    b: Builder,
    rng: Rng,
    layout: Layout,
    /// Multiply-accumulates of the convs and the dense layer.
    macs: usize,
}

impl Net {
    fn conv(
        &mut self,
        x: ValueId,
        k: usize,
        kernel: usize,
        stride: usize,
        residual: Option<ValueId>,
        relu: bool,
    ) -> ValueId {
        let shape = self.b.graph.value(x).shape.clone();
        let c = shape[1];
        let fan_in = c * kernel * kernel;
        let bound = (6.0 / fan_in as f32).sqrt();
        let wdata: Vec<f32> = self
            .rng
            .vec(k * fan_in)
            .into_iter()
            .map(|v| v * bound)
            .collect();
        let shape = [k, c, kernel, kernel];
        let wdata = physical(wdata, &shape, self.layout);
        let w = self
            .b
            .constant_as("w", &shape, wdata, DType::F32, self.layout);
        let bdata: Vec<f32> = self.rng.vec(k).into_iter().map(|v| v * 0.01).collect();
        let bias = self.b.constant("b", &[k], bdata);
        let mut inputs = vec![x, w, bias];
        inputs.extend(residual);
        let pad = kernel / 2;
        let op = Op::FusedConv {
            conv: conv2d([kernel, kernel], [stride, stride], [pad; 4], [1, 1], 1),
            epilogue: Epilogue {
                bias: true,
                residual: residual.is_some(),
                activation: if relu {
                    Activation::Relu
                } else {
                    Activation::None
                },
            },
            shortcut: None,
            pool: None,
            norm: None,
        };
        let y = self.b.op(op, &inputs);
        self.b.set(y, self.layout, DType::F32);
        let out = &self.b.graph.value(y).shape;
        self.macs += out.iter().product::<usize>() * fan_in;
        y
    }
}

/// ResNet-50 on `[batch, 3, image, image]` with every width divided by
/// `width_div`.
pub(crate) fn resnet50(
    batch: usize,
    image: usize,
    width_div: usize,
    layout: Layout,
) -> (Graph, usize) {
    let mut net = Net {
        b: Builder::new(),
        rng: Rng::new(50),
        layout,
        macs: 0,
    };
    let x = net.b.input("image", &[batch, 3, image, image]);
    let mut y = x;
    if layout == Layout::ChannelsLast {
        y = net.b.op(Op::Convert, &[x]);
        net.b.set(y, layout, DType::F32);
    }
    y = net.conv(y, 64 / width_div, 7, 2, None, true);
    let pool = Pool2d {
        kernel: [3, 3],
        strides: [2, 2],
        pads: [1; 4],
        dilations: [1, 1],
        ceil_mode: false,
    };
    y = net.b.op(Op::MaxPool(pool), &[y]);
    net.b.set(y, layout, DType::F32);
    for (blocks, width, stride) in [(3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2)] {
        let width = width / width_div;
        for block in 0..blocks {
            let s = if block == 0 { stride } else { 1 };
            let shortcut = if block == 0 {
                net.conv(y, width * 4, 1, s, None, false)
            } else {
                y
            };
            let a = net.conv(y, width, 1, 1, None, true);
            let a = net.conv(a, width, 3, s, None, true);
            y = net.conv(a, width * 4, 1, 1, Some(shortcut), true);
        }
    }
    y = net.b.op(Op::GlobalAveragePool, &[y]);
    y = net.b.op(Op::Flatten { axis: 1 }, &[y]);
    let features = 2048 / width_div;
    let w = net
        .rng
        .vec(1000 * features)
        .into_iter()
        .map(|v| v * (3.0 / features as f32).sqrt())
        .collect();
    let w = net.b.constant("fc_w", &[1000, features], w);
    let bias = net.b.constant("fc_b", &[1000], net.rng.vec(1000));
    y = net.b.op(
        Op::Dense {
            epilogue: Epilogue {
                bias: true,
                ..Epilogue::NONE
            },
            norm: None,
        },
        &[y, w, bias],
    );
    net.macs += batch * 1000 * features;
    net.b.output(y);
    (net.b.finish(), net.macs)
}

#[test]
fn small_resnet_agrees_across_layouts_and_arena() {
    let (nchw, _) = resnet50(1, 32, 16, Layout::RowMajor);
    let (nhwc, _) = resnet50(1, 32, 16, Layout::ChannelsLast);
    let convs = nhwc
        .nodes
        .iter()
        .filter(|n| matches!(n.op, Op::FusedConv { .. }))
        .count();
    assert_eq!(convs, 53);
    let x = Rng::new(1).vec(3 * 32 * 32);
    let opts = RunOptions::default();
    let a = run(&nchw, &[&x], &opts).unwrap();
    let b = run(&nhwc, &[&x], &opts).unwrap();
    assert!(rel_l2(&b[0], &a[0]) < 1e-5, "{}", rel_l2(&b[0], &a[0]));
    let planned = run_planned(&nhwc, &disjoint_plan(&nhwc), &[&x], &opts).unwrap();
    assert_eq!(planned, b);
}

#[test]
#[ignore = "timing: run in release with --ignored --nocapture"]
fn resnet50_timing() {
    let x = Rng::new(1).vec(3 * 224 * 224);
    for layout in [Layout::ChannelsLast, Layout::RowMajor] {
        let (graph, macs) = resnet50(1, 224, 1, layout);
        let plan = disjoint_plan(&graph);
        let time = |f: &dyn Fn() -> Vec<Vec<f32>>| {
            f();
            (0..3)
                .map(|_| {
                    let start = Instant::now();
                    f();
                    start.elapsed().as_secs_f64()
                })
                .fold(f64::INFINITY, f64::min)
        };
        let opts = RunOptions::default();
        let f64_opts = RunOptions {
            accumulate: Accumulate::F64,
            ..opts
        };
        let t_run = time(&|| run(&graph, &[&x], &opts).unwrap());
        let t_planned = time(&|| run_planned(&graph, &plan, &[&x], &opts).unwrap());
        let start = Instant::now();
        run(&graph, &[&x], &f64_opts).unwrap();
        let t_f64 = start.elapsed().as_secs_f64();
        println!(
            "resnet50 batch 1 {layout:?}: {:.2} GFLOP  run {:.3} s ({:.1} GFLOP/s)  run_planned {:.3} s  f64 {:.3} s",
            2.0 * macs as f64 / 1e9,
            t_run,
            2.0 * macs as f64 / 1e9 / t_run,
            t_planned,
            t_f64
        );
    }
}
