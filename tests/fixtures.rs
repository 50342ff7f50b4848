//! Real torchvision exports: refilled with the fill rule, imported,
//! optimized, planned and run on the CPU reference through the planned
//! arena, against the stored ONNX Runtime outputs. The fixtures are
//! committed in `tests/fixtures/` (see its README; most are made by
//! `bench/export_fixtures.py`) and always run.

mod common;

use aotune_compiler::ir::{Activation, Epilogue, Op, Precision};
use aotune_compiler::reference::{rel_l2, run, run_planned, RunOptions};
use aotune_compiler::{compile_bytes, CompileOptions, Compiled};
use serde_json::Value as Json;
use std::path::Path;

/// Runs every case of a committed fixture of `tests/fixtures/`.
fn check_own_fixture(name: &str, tolerance: f64) -> Vec<(usize, f64)> {
    check_fixture(name, Precision::Fp32, tolerance, false)
}

/// [`check_own_fixture`] at `precision`, also checking the unoptimized
/// imported graph when `raw_too`.
fn check_fixture(
    name: &str,
    precision: Precision,
    tolerance: f64,
    raw_too: bool,
) -> Vec<(usize, f64)> {
    let options = CompileOptions {
        precision,
        channels_last: true,
        ..Default::default()
    };
    check_fixture_with(name, &options, tolerance, raw_too)
}

/// [`check_fixture`] compiled with `options` (its batch set per case).
fn check_fixture_with(
    name: &str,
    options: &CompileOptions,
    tolerance: f64,
    raw_too: bool,
) -> Vec<(usize, f64)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    check_dir(&dir, options, tolerance, raw_too)
}

/// Runs every case of the fixture in `dir`; returns (batch, rel. L2) per case.
fn check_dir(
    dir: &Path,
    base: &CompileOptions,
    tolerance: f64,
    raw_too: bool,
) -> Vec<(usize, f64)> {
    let precision = base.precision;
    let name = &*dir.file_name().unwrap().to_string_lossy();
    let meta: Json =
        serde_json::from_slice(&std::fs::read(dir.join("meta.json")).unwrap()).unwrap();
    let model = common::fixture::refilled_model(dir);
    let symbolic = meta["input_shape"][0].is_string();
    let mut results = Vec::new();
    for case in meta["cases"].as_array().unwrap() {
        let batch = case["batch"].as_u64().unwrap() as usize;
        let options = CompileOptions {
            batch: symbolic.then_some(batch),
            ..*base
        };
        let compiled = compile_bytes(&model, name, &options)
            .unwrap_or_else(|e| panic!("{name} b{batch}: {e}"));
        let input = common::fixture::case_input(dir, &meta, case);
        let want = common::read_f32(&dir.join(case["output"].as_str().unwrap()));
        let got = run_planned(
            &compiled.graph,
            &compiled.plan,
            &[&input],
            &RunOptions::default(),
        )
        .unwrap();
        let err = rel_l2(&got[0], &want);
        let plan = &compiled.plan;
        println!(
            "{name} batch {batch} {precision}: rel. L2 {err:.3e} (arena {} B, lower bound {} B, ratio {:.4})",
            plan.arena_bytes,
            plan.lower_bound,
            plan.ratio()
        );
        // The planner's bar (issue 22): every real export within 10% of the
        // most bytes live at one step.
        assert!(
            plan.ratio() <= 1.10,
            "{name} batch {batch} {precision}: arena {:.4} × the lower bound",
            plan.ratio()
        );
        assert!(
            err <= tolerance,
            "{name} batch {batch} {precision}: rel. L2 {err:.3e} > {tolerance:e}"
        );
        // A constant output (the light models' uniform softmax) has no top-1.
        let distinct = case["output_std"].as_f64().is_none_or(|s| s > 1e-6);
        let classes = want.len() / batch;
        for b in (0..batch).filter(|_| distinct) {
            let row = b * classes..(b + 1) * classes;
            assert_eq!(
                common::argmax(&got[0][row.clone()]),
                common::argmax(&want[row]),
                "{name} batch {batch} image {b}: top-1 differs"
            );
        }
        if raw_too {
            let raw = run(&compiled.imported, &[&input], &RunOptions::default()).unwrap();
            let raw_err = rel_l2(&raw[0], &want);
            println!("{name} batch {batch}: imported graph (unoptimized) rel. L2 {raw_err:.3e}");
            assert!(raw_err <= tolerance);
        }
        results.push((batch, err));
    }
    results
}

#[test]
fn resnet50_seedstyle_matches_onnx_runtime() {
    check_fixture("resnet50_seedstyle", Precision::Fp32, 1e-4, true);
}

#[test]
fn resnet50_dynamo_matches_onnx_runtime() {
    check_fixture("resnet50_dynamo", Precision::Fp32, 1e-4, false);
}

#[test]
fn resnet18_legacy_matches_onnx_runtime() {
    check_fixture("resnet18_legacy", Precision::Fp32, 1e-4, true);
}

#[test]
fn resnet50_seedstyle_fp16_storage_stays_close() {
    // f16 storage of activations and weights (f32 accumulation), emulated on
    // the CPU: the bar the GPU's fp16 path must meet.
    check_fixture("resnet50_seedstyle", Precision::Fp16, 1e-2, false);
}

#[test]
fn tiny_vit_dynamo_matches_onnx_runtime() {
    check_fixture("tiny_vit_dynamo", Precision::Fp32, 1e-4, true);
}

#[test]
fn tiny_convnext_legacy_matches_onnx_runtime() {
    check_fixture("tiny_convnext_legacy", Precision::Fp32, 1e-4, true);
}

#[test]
fn vit_b_16_dynamo_matches_onnx_runtime() {
    check_own_fixture("vit_b_16_dynamo", 1e-4);
}

#[test]
fn vit_b_16_legacy_matches_onnx_runtime() {
    check_own_fixture("vit_b_16_legacy", 1e-4);
}

#[test]
fn swin_t_legacy_matches_onnx_runtime() {
    check_own_fixture("swin_t_legacy", 1e-4);
}

#[test]
fn swin_v2_t_dynamo_matches_onnx_runtime() {
    check_own_fixture("swin_v2_t_dynamo", 1e-4);
}

/// The dynamo exporter with a dynamic batch (`dynamic_shapes`): sizes are
/// computed from the input's shape in-graph, and fold for each batch.
#[test]
fn swin_v2_t_dynbatch_matches_onnx_runtime() {
    check_own_fixture("swin_v2_t_dynbatch", 1e-4);
}

#[test]
fn swin_v2_t_legacy_matches_onnx_runtime() {
    check_own_fixture("swin_v2_t_legacy", 1e-4);
}

/// Swin V2's cosine attention normalizes keys with `x / max(‖x‖, 1e-12)`;
/// the keys of padded tokens are exactly zero in this export (its key bias
/// is zeroed in-graph), so an fp16 bound rounded to 0 would make 0 / 0.
#[test]
fn swin_v2_t_legacy_fp16_storage_stays_finite_and_close() {
    check_fixture("swin_v2_t_legacy", Precision::Fp16, 1e-2, false);
}

#[test]
fn shufflenet_v2_dynamo_matches_onnx_runtime() {
    check_own_fixture("shufflenet_v2_dynamo", 1e-4);
}

#[test]
fn mobilenet_v3_large_dynamo_matches_onnx_runtime() {
    check_own_fixture("mobilenet_v3_large_dynamo", 1e-4);
}

#[test]
fn convnext_tiny_dynamo_matches_onnx_runtime() {
    check_own_fixture("convnext_tiny_dynamo", 1e-4);
}

#[test]
fn convnext_tiny_legacy_matches_onnx_runtime() {
    check_own_fixture("convnext_tiny_legacy", 1e-4);
}

/// Each of ConvNeXt-T's 18 blocks has a depthwise conv → LayerNorm over
/// channels, which both exporters write as a Transpose to NHWC and a
/// LayerNorm over the last axis: all 18 join their conv
/// (`fuse_conv_layer_norm`), at every precision, and leave the stem's,
/// the three downsampling layers' and the head's LayerNorms. With f16
/// storage the fused graph stays within the fp16 bar of ONNX Runtime.
#[test]
fn convnext_tiny_layer_norms_join_their_depthwise_convs() {
    for name in ["convnext_tiny_dynamo", "convnext_tiny_legacy"] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        let model = common::fixture::refilled_model(&dir);
        for precision in Precision::ALL {
            let options = CompileOptions {
                precision,
                channels_last: true,
                fuse_depthwise_norm: true,
                ..Default::default()
            };
            let compiled = compile_bytes(&model, name, &options)
                .unwrap_or_else(|e| panic!("{name} {precision}: {e}"));
            let count =
                |f: &dyn Fn(&Op) -> bool| compiled.graph.nodes.iter().filter(|n| f(&n.op)).count();
            let normed = count(&|op| matches!(op, Op::FusedConv { norm: Some(_), .. }));
            let left = count(&|op| matches!(op, Op::LayerNorm { .. }));
            assert_eq!((normed, left), (18, 5), "{name} {precision}");
            assert_eq!(
                compiled.report.count(
                    "fuse_conv_layer_norm",
                    "LayerNormalization fused into a depthwise conv"
                ),
                18,
                "{name} {precision}"
            );
        }
        let fused = CompileOptions {
            precision: Precision::Fp16,
            channels_last: true,
            fuse_depthwise_norm: true,
            ..Default::default()
        };
        check_fixture_with(name, &fused, 1e-2, false);
    }
}

/// Fixture `name` compiled at fp16 with `fuse_dense_norm`, and those options.
fn compiled_with_dense_norm(name: &str) -> (Compiled, CompileOptions) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let model = common::fixture::refilled_model(&dir);
    let fused = CompileOptions {
        precision: Precision::Fp16,
        channels_last: true,
        fuse_dense_norm: true,
        ..Default::default()
    };
    (compile_bytes(&model, name, &fused).unwrap(), fused)
}

/// The LayerNorms `fuse_dense_layer_norm` folded, from the pass report.
fn folded_norms(compiled: &Compiled) -> usize {
    compiled.report.count(
        "fuse_dense_layer_norm",
        "LayerNormalization folded into its Dense readers",
    )
}

/// With `fuse_dense_norm` (opt-in) each of ViT-B/16's 24 block LayerNorms
/// folds into the Dense that reads it at fp16 (`fuse_dense_layer_norm`:
/// the QKV projection or the MLP's first layer, through Reshape views);
/// the final LayerNorm, read by the class token's Gather, stays. The fused
/// graph stays within the fp16 bar of ONNX Runtime, as the unfused one
/// does, from either exporter. So do the tiny ViT's 4 (its 17 tokens are
/// just `RowNorm::MIN_ROWS`).
#[test]
fn vit_layer_norms_fold_into_their_dense_layers_at_fp16() {
    for (name, blocks) in [
        ("vit_b_16_dynamo", 12),
        ("vit_b_16_legacy", 12),
        ("tiny_vit_dynamo", 2),
    ] {
        let (compiled, fused) = compiled_with_dense_norm(name);
        let count =
            |f: &dyn Fn(&Op) -> bool| compiled.graph.nodes.iter().filter(|n| f(&n.op)).count();
        let normed = count(&|op| matches!(op, Op::Dense { norm: Some(_), .. }));
        let left = count(&|op| matches!(op, Op::LayerNorm { .. }));
        assert_eq!((normed, left), (2 * blocks, 1), "{name}");
        assert_eq!(folded_norms(&compiled), 2 * blocks, "{name}");
        let unfused = check_fixture(name, Precision::Fp16, 1e-2, false);
        let folded = check_fixture_with(name, &fused, 1e-2, false);
        println!("{name} fp16 rel. L2 (batch, err): unfused {unfused:?}, folded {folded:?}");
    }
}

/// `fuse_dense_layer_norm` beyond ViT, at fp16: Swin-T's LayerNorms that a
/// Dense reads through views only fold (12 MLPs', 3 patch mergings', and
/// the last stage's 2 attention ones, whose one window needs no
/// partition; the other attention norms feed a window partition or
/// shift), and ConvNeXt-T's 18 block norms (channels-last, before the
/// first pointwise Linear; without `fuse_depthwise_norm`). The folded
/// graph stays within the fp16 bar of ONNX Runtime.
#[test]
fn swin_and_convnext_layer_norms_fold_into_dense_layers_at_fp16() {
    for (name, want) in [
        ("swin_t_dynamo", 17),
        ("swin_t_legacy", 17),
        ("convnext_tiny_dynamo", 18),
        ("convnext_tiny_legacy", 18),
    ] {
        let (compiled, fused) = compiled_with_dense_norm(name);
        let folded = folded_norms(&compiled);
        println!("{name}: {folded} LayerNorms folded");
        assert_eq!(folded, want, "{name}");
        check_fixture_with(name, &fused, 1e-2, false);
    }
}

#[test]
fn swin_t_dynamo_matches_onnx_runtime() {
    check_own_fixture("swin_t_dynamo", 1e-4);
}

#[test]
fn shufflenet_v2_legacy_matches_onnx_runtime() {
    check_own_fixture("shufflenet_v2_legacy", 1e-4);
}

#[test]
fn mobilenet_v3_large_legacy_matches_onnx_runtime() {
    check_own_fixture("mobilenet_v3_large_legacy", 1e-4);
}

/// ONNX's opset-9 "light" model-zoo CNNs (weights built in-graph by
/// ConstantOfShape), from the onnx wheel (`bench/make_light_fixtures.py`).
#[test]
fn onnx_light_models_match_onnx_runtime() {
    for name in [
        "resnet50",
        "densenet121",
        "vgg19",
        "squeezenet",
        "shufflenet",
    ] {
        check_own_fixture(&format!("onnx_light_{name}"), 1e-4);
    }
}

/// After the passes, each of ViT-B/16's 12 encoder blocks is one
/// attention, two LayerNorms (plus the final LayerNorm) and Dense layers
/// whose epilogues hold the MLP's GELU and both residual Adds, from either
/// exporter: the fused targets the GPU side gets. The TorchScript export's
/// dynamic batch is checked at 2 as well, where its sequence-first
/// attention blocks are wrapped in row-swapping Transposes that must go.
/// Also times one batch-1 run of the dynamo export.
#[test]
fn vit_b_16_blocks_fuse_to_attention_layernorm_and_gelu() {
    for (name, batch) in [
        ("vit_b_16_dynamo", 1),
        ("vit_b_16_legacy", 1),
        ("vit_b_16_legacy", 2),
    ] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        let model = common::fixture::refilled_model(&dir);
        let options = CompileOptions {
            batch: Some(batch),
            precision: Precision::Fp32,
            channels_last: true,
            ..Default::default()
        };
        let compiled = compile_bytes(&model, name, &options).unwrap();
        let count = |kind: &str| {
            compiled
                .graph
                .nodes
                .iter()
                .filter(|n| n.op.kind() == kind)
                .count()
        };
        let counts = [
            "Attention",
            "LayerNormalization",
            "Gelu",
            "Add",
            "Softmax",
            "Erf",
        ]
        .map(|k| (k, count(k)));
        let dense: Vec<Epilogue> = compiled
            .graph
            .nodes
            .iter()
            .filter_map(|n| match n.op {
                Op::Dense { epilogue, .. } => Some(epilogue),
                _ => None,
            })
            .collect();
        let gelu = dense
            .iter()
            .filter(|e| e.activation == Activation::Gelu { tanh: false })
            .count();
        let residual = dense.iter().filter(|e| e.residual).count();
        println!(
            "{name} after passes: {counts:?}, Dense with GELU {gelu}, with residual {residual}"
        );
        assert_eq!(
            counts,
            [
                ("Attention", 12),
                ("LayerNormalization", 25),
                ("Gelu", 0),
                // The position embedding's, after the class token's Concat.
                ("Add", 1),
                ("Softmax", 0),
                ("Erf", 0)
            ],
            "{name} batch {batch}"
        );
        assert_eq!(
            (gelu, residual),
            (12, 24),
            "{name} batch {batch}: Dense epilogues"
        );
        // Heads are split and merged by strided views, not copies: what
        // moves data is the patch embedding's Transpose and the class
        // token's Gather.
        let with_views = compiled
            .graph
            .nodes
            .iter()
            .filter(|n| {
                matches!(&n.op, Op::Attention { views: Some(v), .. }
                    if v.q.is_some() && v.k.is_some() && v.v.is_some() && v.out.is_some())
            })
            .count();
        assert_eq!(
            with_views, 12,
            "{name} batch {batch}: attentions reading views"
        );
        assert_eq!(
            (count("Transpose"), count("Gather")),
            (1, 1),
            "{name} batch {batch}: copies left"
        );
        if name.ends_with("dynamo") {
            let meta: Json =
                serde_json::from_slice(&std::fs::read(dir.join("meta.json")).unwrap()).unwrap();
            let input = common::fixture::case_input(&dir, &meta, &meta["cases"][0]);
            let start = std::time::Instant::now();
            run_planned(
                &compiled.graph,
                &compiled.plan,
                &[&input],
                &RunOptions::default(),
            )
            .unwrap();
            let seconds = start.elapsed().as_secs_f64();
            println!("{name} batch 1 on the CPU reference: {seconds:.2} s");
        }
    }
}

/// Swin-T's 12 window attentions each become one Attention, from either
/// exporter: the 5 shifted-window blocks too, whose bias and window mask
/// sit behind Reshapes and fold into one constant mask of one entry per
/// window (`fuse_attention`); at batch 2 the mask does not grow.
#[test]
fn swin_t_fuses_all_12_window_attentions() {
    for name in ["swin_t_dynamo", "swin_t_legacy"] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        let model = common::fixture::refilled_model(&dir);
        let meta: Json =
            serde_json::from_slice(&std::fs::read(dir.join("meta.json")).unwrap()).unwrap();
        let batches: &[usize] = if meta["input_shape"][0].is_string() {
            &[1, 2]
        } else {
            &[1]
        };
        for &batch in batches {
            let options = CompileOptions {
                batch: Some(batch),
                precision: Precision::Fp32,
                channels_last: true,
                ..Default::default()
            };
            let compiled = compile_bytes(&model, name, &options).unwrap();
            let graph = &compiled.graph;
            let count = |kind: &str| graph.nodes.iter().filter(|n| n.op.kind() == kind).count();
            assert_eq!(
                (count("Attention"), count("Softmax")),
                (12, 0),
                "{name} batch {batch}"
            );
            // Masks are per window ([nW, H, 49, 49], nW = 64, 16, 4 in the
            // shifted blocks) or per head, never per image.
            for n in graph.nodes.iter().filter(|n| n.op.kind() == "Attention") {
                // q/k/v are read straight out of the qkv projection.
                let Op::Attention {
                    views: Some(views), ..
                } = &n.op
                else {
                    panic!("{name}: attention {} reads copies of q/k/v", n.name);
                };
                let q = &views.q.expect("q view").dims;
                if let Some(&mask) = n.inputs.get(3) {
                    let m = &graph.value(mask).shape;
                    assert!(
                        m.len() == 4 && [1, 64, 16, 4].contains(&m[0]),
                        "{name}: mask {m:?} for q {q:?}"
                    );
                    assert_eq!(m[1..], [q[1], 49, 49], "{name}: mask {m:?} for q {q:?}");
                }
            }
        }
    }
}

/// Every fixture folder under `$AOTUNE_FIXTURE_DIR` (as
/// `bench/export_fixtures.py OUT NAME…` writes them), for trying the
/// importer on models no test pins: `AOTUNE_FIXTURE_DIR=/tmp/fx cargo test
/// --profile ci --test fixtures -- --ignored --nocapture fixtures_in_dir`.
#[test]
#[ignore = "needs AOTUNE_FIXTURE_DIR"]
fn fixtures_in_dir() {
    let root = std::env::var_os("AOTUNE_FIXTURE_DIR").expect("set AOTUNE_FIXTURE_DIR");
    let mut dirs: Vec<_> = std::fs::read_dir(&root)
        .expect("AOTUNE_FIXTURE_DIR")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("meta.json").is_file())
        .collect();
    dirs.sort();
    let mut failed = Vec::new();
    for dir in &dirs {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let outcome =
            std::panic::catch_unwind(|| check_dir(dir, &CompileOptions::default(), 1e-4, false));
        match outcome {
            Ok(results) => println!("PASS {name}: {results:?}"),
            Err(e) => {
                let why = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                println!("FAIL {name}: {why}");
                failed.push(name);
            }
        }
    }
    assert!(failed.is_empty(), "failed: {failed:?}");
}

/// The dynamo exporter's default layout: `model.onnx` with every weight in
/// `model.onnx.data` beside it (offsets into one file). Compiling it by path
/// gives the same graph and output as the self-contained model.
#[test]
fn tiny_vit_dynamo_with_external_data_compiles_by_path() {
    use onnx_ir::Message;
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny_vit_dynamo");
    let inline = common::fixture::refilled_model(&fixture);
    let mut model = onnx_ir::ModelProto::parse_from_bytes(&inline).unwrap();
    let mut data = Vec::new();
    let graph = model.graph.as_mut().unwrap();
    for init in graph
        .initializer
        .iter_mut()
        .filter(|t| t.raw_data.len() >= 64)
    {
        let offset = data.len();
        data.extend_from_slice(&init.raw_data);
        for (key, value) in [
            ("location", "model.onnx.data".to_string()),
            ("offset", offset.to_string()),
            ("length", init.raw_data.len().to_string()),
        ] {
            init.external_data.push(Default::default());
            let entry = init.external_data.last_mut().unwrap();
            entry.key = key.into();
            entry.value = value;
        }
        init.raw_data = Default::default();
        data.resize(data.len().next_multiple_of(4096), 0);
    }
    assert!(!data.is_empty(), "the fixture has weights to move out");
    let dir = std::env::temp_dir().join(format!("aotune-external-data-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("model.onnx"), model.write_to_bytes().unwrap()).unwrap();
    std::fs::write(dir.join("model.onnx.data"), &data).unwrap();

    let options = CompileOptions {
        batch: Some(1),
        precision: Precision::Fp32,
        channels_last: true,
        ..Default::default()
    };
    let by_path = aotune_compiler::compile_file(&dir.join("model.onnx"), &options).unwrap();
    let by_bytes = compile_bytes(&inline, "tiny_vit_dynamo", &options).unwrap();
    let input = aotune_compiler::zoo::fill(7, 0.0, 1.0, 3 * 32 * 32);
    let a = run(&by_path.graph, &[&input], &RunOptions::default()).unwrap();
    let b = run(&by_bytes.graph, &[&input], &RunOptions::default()).unwrap();
    assert_eq!(a, b);
    // Bytes alone cannot reach the data file: a typed error says how.
    let err = compile_bytes(&model.write_to_bytes().unwrap(), "ext", &options).unwrap_err();
    assert!(err.to_string().contains("external data"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
