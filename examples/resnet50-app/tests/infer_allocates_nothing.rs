//! The embedded model, as an application sees it, on a real GPU: the
//! `Model` that `include_model!` generates (the batch size picked by the
//! input's length, then the runtime model's `infer`) makes no heap
//! allocation, from the first call after `load` on, with the batch sizes
//! interleaved, and gives bit for bit what the runtime model under it
//! gives. The model is `main.rs`'s: ResNet-50 fp16 at batches 1 and 8, or
//! with the `small` feature ResNet-18 fp16 at batch 1 (a test binary small
//! enough to carry to a GPU machine), or with the `vit` feature the tiny ViT
//! fixture fp16 at batch 1.
//!
//! Skips (`aotune_compiler::skip`) without an NVIDIA driver library; a
//! driver that is present but fails fails. This binary installs aotune's
//! counting global allocator (`tests/common/counting_allocator.rs`).

use aotune::runtime::{driver_present, RuntimeError};
use aotune_compiler::skip::skip;
use counting_allocator::allocations_in;

#[path = "../../../tests/common/counting_allocator.rs"]
mod counting_allocator;

#[cfg(not(any(feature = "small", feature = "vit")))]
aotune::include_model!(
    "../../models/resnet50.onnx",
    tuning = "../../models/resnet50.best.json",
    batch = [1, 8],
    precision = "fp16"
);
#[cfg(not(any(feature = "small", feature = "vit")))]
use resnet50 as net;

#[cfg(feature = "small")]
aotune::include_model!(
    "../../models/resnet18.onnx",
    batch = [1],
    precision = "fp16"
);
#[cfg(feature = "small")]
use resnet18 as net;

// The tiny ViT that build.rs refilled into $OUT_DIR (the macro finds a
// build by the model's file name).
#[cfg(feature = "vit")]
aotune::include_model!("tiny_vit.onnx", batch = [1], precision = "fp16");
#[cfg(feature = "vit")]
use tiny_vit as net;

/// A deterministic input of `batch` images.
fn input(batch: usize, seed: usize) -> Vec<f32> {
    (0..batch * net::INPUT_LEN)
        .map(|i| (((i * 7 + seed * 13) % 255) as f32 / 255.0 - 0.5) * 2.0)
        .collect()
}

#[test]
fn embedded_infer_allocates_nothing() {
    let test = "embedded_infer_allocates_nothing";
    if !driver_present() {
        skip(test, "no NVIDIA driver (libcuda.so.1 not loadable)");
        return;
    }
    let mut model =
        net::Model::load().unwrap_or_else(|e| panic!("{test}: loading the embedded model: {e}"));
    // Two inputs per batch size, and an output buffer for each batch size.
    let inputs: Vec<[Vec<f32>; 2]> = net::BATCHES
        .iter()
        .map(|&b| [input(b, 1), input(b, 2)])
        .collect();
    let mut outputs: Vec<Vec<f32>> = net::BATCHES
        .iter()
        .map(|&b| vec![f32::NAN; b * net::OUTPUT_LEN])
        .collect();
    let (allocations, ok) = allocations_in(|| {
        let mut ok = true;
        for round in 0..10 {
            for (x, y) in inputs.iter().zip(outputs.iter_mut()) {
                ok &= model.infer(&x[round % 2], y).is_ok();
            }
        }
        ok
    });
    assert!(ok, "{test}: an infer call failed");
    allocations.assert_none(&format!(
        "10 rounds of include_model!'s Model::infer over batch sizes {:?}",
        net::BATCHES
    ));

    // The last round ran input 1 of each batch size: the runtime model of
    // that batch size gives the same bits.
    for ((&batch, x), got) in net::BATCHES.iter().zip(&inputs).zip(&outputs) {
        assert!(
            got.iter().all(|v| v.is_finite()) && got.iter().any(|&v| v != 0.0),
            "{test}: batch {batch}: the output is not a set of logits"
        );
        let mut direct = vec![f32::NAN; got.len()];
        model
            .variant(batch)
            .expect("a compiled batch size")
            .infer(&x[1], &mut direct)
            .unwrap_or_else(|e| panic!("{test}: infer on the batch-{batch} model: {e}"));
        assert!(
            got.iter()
                .zip(&direct)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{test}: batch {batch}: the wrapper's output differs from the runtime model's"
        );
    }

    // A length that is no compiled batch size is a typed error.
    let short = &inputs[0][0][1..];
    let err = model
        .infer(short, &mut outputs[0])
        .expect_err("a length of no batch size must fail");
    assert!(
        matches!(&err, RuntimeError::NoBatchForLength { got, .. } if *got == short.len()),
        "{test}: {err:?}"
    );
}
