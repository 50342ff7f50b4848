//! Tests of the whole generator: zoo ResNets end to end (and through nvcc).

use super::nvcc;
use super::*;
use crate::ir::Precision;
use crate::zoo::{resnet_onnx, ResNetDepth};
use crate::{compile_bytes, CompileOptions, Compiled};

pub(crate) fn compiled(depth: ResNetDepth, batch: usize, precision: Precision) -> Compiled {
    let bytes = resnet_onnx(depth, 0);
    compile_bytes(
        &bytes,
        "resnet.onnx",
        &CompileOptions {
            batch: Some(batch),
            precision,
            channels_last: true,
        },
    )
    .unwrap()
}

#[test]
#[ignore]
fn dump_resnet50_fp16() {
    let c = compiled(ResNetDepth::R50, 1, Precision::Fp16);
    let m = generate_cuda(&c.graph, &c.plan, &ConfigOverrides::new()).unwrap();
    std::fs::write("/tmp/r50_fp16.cu", &m.source).unwrap();
    let Some(n) = nvcc::find_or_skip() else {
        return;
    };
    let r = nvcc::compile(&n, &m.source, "r50").unwrap();
    for k in r {
        println!("{k:?}");
    }
}

/// The default geometry of every FusedConv of a ResNet at batch 1, as the
/// text in conv.rs's doc comment.
pub(crate) fn geometry_table(depth: ResNetDepth, precision: Precision) -> String {
    use std::fmt::Write;
    let c = compiled(depth, 1, precision);
    let m = generate_cuda(&c.graph, &c.plan, &ConfigOverrides::new()).unwrap();
    let mut s = String::new();
    let mut total = 0.0;
    let mut ctas_total = 0;
    for l in &m.launches {
        let node = c.graph.node(l.node);
        if !matches!(node.op, crate::ir::Op::FusedConv { .. }) {
            continue;
        }
        let shape = conv::conv_shape(&c.graph, l.node).unwrap();
        let config: ConvConfig = KernelConfig::default_for(&shape);
        let model = match config {
            ConvConfig::Mma(c) => c.model(&shape),
            ConvConfig::Simt(c) => c.model(&shape),
            ConvConfig::Direct(_) => continue,
        };
        let t = cost_model::estimate_ns(shape.gemm_m(), shape.gemm_n(), shape.gemm_k(), &model);
        total += t;
        let ctas = l.grid.iter().product::<u32>();
        ctas_total += ctas;
        let _ = writeln!(
            s,
            "{:<9} {:>5} x {:>4} x {:>4}  {:<26} {:>4} CTAs x {:>3} thr  {:>6.1} us",
            node.name,
            shape.gemm_m(),
            shape.gemm_n(),
            shape.gemm_k(),
            config.tag(),
            ctas,
            l.block[0],
            t / 1000.0
        );
    }
    let _ = writeln!(
        s,
        "{} convs, {ctas_total} CTAs, modelled {:.0} us",
        m.launches.len(),
        total / 1000.0
    );
    s
}

#[test]
#[ignore]
fn print_resnet50_geometry() {
    for p in [Precision::Fp16, Precision::Fp32] {
        println!("{p}\n{}", geometry_table(ResNetDepth::R50, p));
    }
}
