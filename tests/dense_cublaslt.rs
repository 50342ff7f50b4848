//! `--dense-cublaslt` without a GPU: which Dense layers of the transformer
//! fixtures the build hands to cuBLASLt, what each launch carries, and that
//! the runtime's spec check accepts the result (the GPU run is
//! `tests/gpu_fixtures.rs`, `transformers_with_cublaslt_dense_match_onnx_runtime`).

mod common;

use aotune::runtime::validate_spec;
use aotune_compiler::artifact::{Arg, MatmulActivation, ModelSpec};
use aotune_compiler::ir::Precision;
use aotune_compiler::Build;
use common::gpu::TempDir;
use std::path::Path;

/// Fixture `name` built (no nvcc) at `precision`, with or without cuBLASLt.
fn spec(name: &str, precision: Precision, cublaslt: bool, tmp: &Path) -> ModelSpec {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let onnx = tmp.join(format!("{name}.onnx"));
    std::fs::write(&onnx, common::fixture::refilled_model(&dir)).unwrap();
    let built = Build::new(&onnx)
        .precision(precision)
        .dense_cublaslt(cublaslt)
        .name(format!("{name}_{precision}_{cublaslt}"))
        .out_dir(tmp.join("out"))
        .skip_nvcc(true)
        .compile()
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let built = built.into_iter().next().unwrap();
    // executor.rs (what `include_model!` embeds) carries the same launches.
    let executor = std::fs::read_to_string(built.dir.join("executor.rs")).unwrap();
    assert!(
        !executor.contains("compile_error!"),
        "{name}: executor.rs did not parse"
    );
    let lt = built
        .spec
        .launches
        .iter()
        .filter(|l| l.matmul.is_some())
        .count();
    assert_eq!(executor.matches("LibraryMatmul {").count(), lt, "{name}");
    built.spec
}

fn matmuls(spec: &ModelSpec) -> Vec<&aotune_compiler::artifact::LibraryMatmul> {
    spec.launches
        .iter()
        .filter_map(|l| l.matmul.as_ref())
        .collect()
}

/// ViT-B/16 from either exporter at fp16: the four Dense layers of each of
/// the 12 blocks run through cuBLASLt (qkv with its bias, the attention
/// projection and fc2 adding the residual through beta·C, fc1 with GELU);
/// the classifier, whose output is the graph's f32 logits, stays a kernel.
/// Every such launch has no kernel, the args its epilogue needs (a bias in
/// the weights), and the runtime's spec check accepts the build.
#[test]
fn vit_dense_layers_run_through_cublaslt_at_fp16() {
    let tmp = TempDir::new("dense-cublaslt-vit");
    for name in ["vit_b_16_dynamo", "vit_b_16_legacy"] {
        let spec = spec(name, Precision::Fp16, true, tmp.path());
        let lt = matmuls(&spec);
        assert_eq!(lt.len(), 48, "{name}: 4 Dense layers in each of 12 blocks");
        let gelu = lt
            .iter()
            .filter(|m| m.activation == MatmulActivation::Gelu)
            .count();
        let residual = lt.iter().filter(|m| m.residual).count();
        assert_eq!(
            (gelu, residual),
            (12, 24),
            "{name}: fc1 GELU; out-proj and fc2 residual"
        );
        assert!(lt.iter().all(|m| m.k % 8 == 0 && m.n % 8 == 0));
        assert!(
            lt.iter().all(|m| m.m == 197),
            "{name}: 197 tokens at batch 1"
        );
        for launch in spec.launches.iter().filter(|l| l.matmul.is_some()) {
            let m = launch.matmul.as_ref().unwrap();
            assert_eq!(launch.args.len(), m.arg_count(), "{}", launch.node);
            if m.bias {
                assert!(
                    matches!(launch.args[2], Arg::Weights(_)),
                    "{}: bias",
                    launch.node
                );
            }
            assert_eq!(
                (launch.grid, launch.block),
                ([0; 3], [0; 3]),
                "{}",
                launch.node
            );
        }
        validate_spec(&spec).unwrap_or_else(|e| panic!("{name}: {e}"));
        let plain = spec_without(name, tmp.path());
        assert!(
            matmuls(&plain).is_empty(),
            "{name}: no cuBLASLt unless asked"
        );
        assert!(
            plain.launches.len() == spec.launches.len(),
            "{name}: one launch per node either way"
        );
    }
}

fn spec_without(name: &str, tmp: &Path) -> ModelSpec {
    spec(name, Precision::Fp16, false, tmp)
}

/// cuBLASLt runs 16-bit operands only: at fp32 and tf32 the flag changes
/// nothing, and at bf16 the matmuls are bf16.
#[test]
fn cublaslt_takes_only_16_bit_dense_layers() {
    let tmp = TempDir::new("dense-cublaslt-precisions");
    for precision in [Precision::Fp32, Precision::Tf32] {
        let spec = spec("tiny_vit_dynamo", precision, true, tmp.path());
        assert!(matmuls(&spec).is_empty(), "{precision}");
    }
    let spec = spec("tiny_vit_dynamo", Precision::Bf16, true, tmp.path());
    let lt = matmuls(&spec);
    assert!(!lt.is_empty());
    assert!(lt
        .iter()
        .all(|m| m.dtype == aotune_compiler::ir::DType::BF16));
    validate_spec(&spec).unwrap();
}

/// Swin-T and ConvNeXt-T build with the flag and pass the spec check; each
/// hands some of its Dense layers to cuBLASLt.
#[test]
fn swin_and_convnext_build_with_cublaslt() {
    let tmp = TempDir::new("dense-cublaslt-families");
    for name in ["swin_t_legacy", "convnext_tiny_dynamo"] {
        let spec = spec(name, Precision::Fp16, true, tmp.path());
        let lt = matmuls(&spec);
        println!("{name}: {} launches run through cuBLASLt", lt.len());
        assert!(!lt.is_empty(), "{name}");
        validate_spec(&spec).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

/// `aotune tune --cublaslt-candidates`: each Dense task cuBLASLt can run
/// gets its heuristic's first ranks as extra configs (with a prior, so a
/// guided search's first round includes them); the others, and every task
/// without the flag, keep the templates' spaces; every space stays valid.
#[cfg(feature = "cli")]
#[test]
fn cublaslt_candidates_join_the_dense_search_spaces() {
    use aotune::tune::{tunable_tasks, CUBLASLT_CANDIDATES};
    use aotune_compiler::codegen::cuda::library_matmul;
    use aotune_compiler::{compile_bytes, CompileOptions};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny_vit_dynamo");
    let model = common::fixture::refilled_model(&dir);
    let options = CompileOptions {
        precision: Precision::Fp16,
        channels_last: true,
        ..Default::default()
    };
    let compiled = compile_bytes(&model, "tiny_vit", &options).unwrap();
    let lt = |c: &serde_json::Value| library_matmul::requested(Some(c)).is_some();
    let plain = tunable_tasks(&compiled, false).unwrap();
    assert!(plain.iter().all(|t| !t.space.configs.iter().any(lt)));
    let with = tunable_tasks(&compiled, true).unwrap();
    assert_eq!(plain.len(), with.len());
    let mut extended = 0;
    for (p, w) in plain.iter().zip(&with) {
        w.space.check().unwrap_or_else(|e| panic!("{e}"));
        let added = w.space.configs.len() - p.space.configs.len();
        let eligible = w.space.op == "Dense"
            && library_matmul::library_matmul(&compiled.graph, w.node, 0).is_ok();
        if eligible {
            extended += 1;
            assert_eq!(added, CUBLASLT_CANDIDATES as usize, "{}", w.space.key);
            let first = p.space.configs.len();
            assert!((first..w.space.configs.len()).all(|i| w.space.prior_us(i).is_some()));
        } else {
            assert_eq!(added, 0, "{}", w.space.key);
        }
    }
    assert!(extended >= 3, "the tiny ViT's block Denses: {extended}");
}
