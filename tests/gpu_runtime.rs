//! The runtime's promises on a real model (the zoo's ResNet-50, batch 1,
//! fp16): `infer` and `infer_device` allocate nothing on the heap, also
//! with two models run interleaved; two different models (ResNet-50 fp16
//! b1 and ResNet-18 fp32 b2) live and run interleaved in one process with
//! the same results as each alone; `infer` leaves the device's free memory
//! as it was; a wrong buffer length is a typed error naming the expected
//! length; programmatic dependent launches give the same bits as plain
//! ones; `infer_device` gives what `infer` gives.
//!
//! This test binary installs the counting global allocator of
//! `common/counting_allocator.rs`: it counts heap allocations only on
//! threads that switched counting on, so the tests can run in parallel, and
//! an unexpected allocation fails with its backtrace.

mod common;

use aotune::runtime::{LaunchMode, LoadOptions, Model, RuntimeError};
use aotune_compiler::ir::Precision;
use aotune_compiler::reference::{rel_l2, run, RunOptions};
use aotune_compiler::zoo::{fill, write_resnet, ResNetDepth, DEFAULT_SEED};
use aotune_compiler::{Build, Built};
use common::gpu::{self, Mode, TempDir};
use counting_allocator::allocations_in;
use std::sync::OnceLock;

#[path = "common/counting_allocator.rs"]
mod counting_allocator;

// ---- the models ------------------------------------------------------------------

/// A zoo ResNet built once per process for (depth, batch, precision).
struct Zoo {
    built: Built,
    /// Two inputs and the CPU emulation's outputs for them.
    inputs: [Vec<f32>; 2],
    emulated: [Vec<f32>; 2],
}

fn tmp() -> &'static TempDir {
    static TMP: OnceLock<TempDir> = OnceLock::new();
    TMP.get_or_init(|| TempDir::reused("gpu-runtime"))
}

fn build_zoo(depth: ResNetDepth, batch: usize, precision: Precision) -> Result<Zoo, String> {
    let name = format!("{}_{precision}_b{batch}", depth.name());
    let onnx = tmp().path().join(format!("{}.onnx", depth.name()));
    if !onnx.is_file() {
        write_resnet(depth, DEFAULT_SEED, &onnx).map_err(|e| format!("zoo: {e}"))?;
    }
    let built = {
        let _slot = gpu::slot();
        Build::new(&onnx)
            .batch(batch)
            .precision(precision)
            .name(&name)
            .out_dir(tmp().path())
            .compile()
            .map_err(|e| format!("build {name}: {e}"))?
            .into_iter()
            .next()
            .ok_or("the build returned nothing")?
    };
    let n = built.spec.inputs[0].elements();
    let inputs = [fill(21, 0.0, 1.0, n), fill(22, 0.0, 1.0, n)];
    let emulate = |x: &[f32]| -> Result<Vec<f32>, String> {
        Ok(run(&built.compiled.graph, &[x], &RunOptions::default())
            .map_err(|e| format!("CPU emulation of {name}: {e}"))?
            .swap_remove(0))
    };
    let emulated = [emulate(&inputs[0])?, emulate(&inputs[1])?];
    Ok(Zoo {
        built,
        inputs,
        emulated,
    })
}

fn resnet50_fp16_b1() -> &'static Result<Zoo, String> {
    static ZOO: OnceLock<Result<Zoo, String>> = OnceLock::new();
    ZOO.get_or_init(|| build_zoo(ResNetDepth::R50, 1, Precision::Fp16))
}

fn resnet18_fp32_b2() -> &'static Result<Zoo, String> {
    static ZOO: OnceLock<Result<Zoo, String>> = OnceLock::new();
    ZOO.get_or_init(|| build_zoo(ResNetDepth::R18, 2, Precision::Fp32))
}

/// The built model (or the skip/failure), and the loaded model on a GPU.
fn setup(test: &str, zoo: fn() -> &'static Result<Zoo, String>) -> Option<(&'static Zoo, Model)> {
    let mode = gpu::mode_or_skip(test)?;
    let zoo = zoo().as_ref().unwrap_or_else(|e| panic!("{test}: {e}"));
    match gpu::load(&zoo.built.dir, mode).unwrap_or_else(|e| panic!("{test}: {e}")) {
        Some(model) => Some((zoo, model)),
        None => {
            assert_eq!(mode, Mode::DryRun);
            println!(
                "DRY RUN {test}: built {} and checked that loading fails with NoDriver",
                zoo.built.dir.display()
            );
            None
        }
    }
}

fn infer(model: &mut Model, input: &[f32]) -> Vec<f32> {
    let mut out = vec![f32::NAN; model.spec().outputs[0].elements()];
    model
        .infer(input, &mut out)
        .unwrap_or_else(|e| panic!("infer: {e}"));
    out
}

fn assert_close(what: &str, got: &[f32], want: &[f32], precision: Precision) {
    let err = rel_l2(got, want);
    let tol = gpu::tolerance(precision);
    println!("{what}: rel. L2 vs the CPU emulation {err:.3e} (tolerance {tol:e})");
    assert!(err <= tol, "{what}: rel. L2 {err:.3e} > {tol:e}");
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

// ---- tests ---------------------------------------------------------------------------

/// (a) Ten `infer` calls right after load make no heap allocation.
#[test]
fn infer_allocates_nothing() {
    let Some((zoo, mut model)) = setup("infer_allocates_nothing", resnet50_fp16_b1) else {
        return;
    };
    let mut out = vec![0.0f32; model.spec().outputs[0].elements()];
    let (allocations, results) = allocations_in(|| {
        let mut ok = true;
        for i in 0..10 {
            ok &= model.infer(&zoo.inputs[i % 2], &mut out).is_ok();
        }
        ok
    });
    assert!(results, "an infer call failed");
    allocations.assert_none("10 infer calls");
    // The last call ran input 1.
    assert_close("resnet50 fp16 b1", &out, &zoo.emulated[1], Precision::Fp16);
}

/// (a') ResNet-50 fp16 b1 and ResNet-18 fp32 b2 loaded together and run
/// interleaved (A, B, A, B, … from the first call of each on) make no
/// heap allocation.
#[test]
fn interleaved_models_allocate_nothing() {
    let test = "interleaved_models_allocate_nothing";
    let Some((a, mut model_a)) = setup(test, resnet50_fp16_b1) else {
        return;
    };
    let Some((b, mut model_b)) = setup(test, resnet18_fp32_b2) else {
        return;
    };
    let mut out_a = vec![0.0f32; model_a.spec().outputs[0].elements()];
    let mut out_b = vec![0.0f32; model_b.spec().outputs[0].elements()];
    let (allocations, ok) = allocations_in(|| {
        let mut ok = true;
        for i in 0..20 {
            ok &= model_a.infer(&a.inputs[i % 2], &mut out_a).is_ok();
            ok &= model_b.infer(&b.inputs[i % 2], &mut out_b).is_ok();
        }
        ok
    });
    assert!(ok, "an infer call failed");
    allocations.assert_none("20 rounds of infer on ResNet-50 fp16 b1 then ResNet-18 fp32 b2");
    // The last round ran input 1 on each.
    assert_close("resnet50 fp16 b1", &out_a, &a.emulated[1], Precision::Fp16);
    assert_close("resnet18 fp32 b2", &out_b, &b.emulated[1], Precision::Fp32);
}

/// (e) `infer` allocates no device memory either: `cuMemGetInfo`'s free
/// bytes are the same before and after 200 calls (100 rounds of ResNet-50
/// fp16 b1 then ResNet-18 fp32 b2), once each model has run one call (a
/// graph's first launch may upload it). The count is the device's, so other
/// tests of this binary loading models at the same time move it: the check
/// passes on the first window of 200 calls with no change, and fails when
/// every one of `WINDOWS` windows changed it (a leak changes them all; run
/// with `--test-threads=1`, as the GPU scripts do, the first one counts).
#[test]
fn device_memory_is_unchanged_by_infer() {
    const WINDOWS: usize = 10;
    let test = "device_memory_is_unchanged_by_infer";
    let Some((a, mut model_a)) = setup(test, resnet50_fp16_b1) else {
        return;
    };
    let Some((b, mut model_b)) = setup(test, resnet18_fp32_b2) else {
        return;
    };
    let mut out_a = vec![0.0f32; model_a.spec().outputs[0].elements()];
    let mut out_b = vec![0.0f32; model_b.spec().outputs[0].elements()];
    let context = model_a.context().clone();
    let free = || -> usize {
        context
            .bind_to_thread()
            .unwrap_or_else(|e| panic!("binding the context: {e:?}"));
        cudarc::driver::result::mem_get_info()
            .unwrap_or_else(|e| panic!("cuMemGetInfo: {e:?}"))
            .0
    };
    let mut run = |i: usize| {
        model_a
            .infer(&a.inputs[i % 2], &mut out_a)
            .unwrap_or_else(|e| panic!("infer on resnet50 fp16 b1: {e}"));
        model_b
            .infer(&b.inputs[i % 2], &mut out_b)
            .unwrap_or_else(|e| panic!("infer on resnet18 fp32 b2: {e}"));
    };
    run(0);
    let mut changes = Vec::with_capacity(WINDOWS);
    for window in 0..WINDOWS {
        let before = free();
        for i in 0..100 {
            run(i);
        }
        let after = free();
        if after == before {
            println!(
                "{test}: {} MiB free before and after 200 infer calls (window {})",
                after >> 20,
                window + 1
            );
            return;
        }
        changes.push(after as i64 - before as i64);
    }
    panic!(
        "free device memory changed across every window of 200 infer calls, by {changes:?} bytes"
    );
}

/// (b) ResNet-50 fp16 b1 and ResNet-18 fp32 b2 loaded together, run
/// interleaved, give bit for bit what each gives alone.
#[test]
fn two_models_in_one_process() {
    let test = "two_models_in_one_process";
    let Some((a, mut model_a)) = setup(test, resnet50_fp16_b1) else {
        return;
    };
    let alone_a = [
        infer(&mut model_a, &a.inputs[0]),
        infer(&mut model_a, &a.inputs[1]),
    ];
    drop(model_a);
    let Some((b, mut model_b)) = setup(test, resnet18_fp32_b2) else {
        return;
    };
    let alone_b = [
        infer(&mut model_b, &b.inputs[0]),
        infer(&mut model_b, &b.inputs[1]),
    ];
    for i in 0..2 {
        assert_close(
            &format!("resnet50 fp16 b1 input {i}"),
            &alone_a[i],
            &a.emulated[i],
            Precision::Fp16,
        );
        assert_close(
            &format!("resnet18 fp32 b2 input {i}"),
            &alone_b[i],
            &b.emulated[i],
            Precision::Fp32,
        );
    }
    let mut model_a = gpu::load(&a.built.dir, Mode::Gpu)
        .unwrap_or_else(|e| panic!("{e}"))
        .expect("a model");
    for (step, &(which, i)) in [
        (0, 0),
        (1, 0),
        (0, 1),
        (1, 1),
        (1, 0),
        (0, 0),
        (0, 1),
        (1, 1),
    ]
    .iter()
    .enumerate()
    {
        let (got, want) = if which == 0 {
            (infer(&mut model_a, &a.inputs[i]), &alone_a[i])
        } else {
            (infer(&mut model_b, &b.inputs[i]), &alone_b[i])
        };
        assert!(
            same_bits(&got, want),
            "step {step}: {} on input {i} differs from the same model run alone (rel. L2 {:.3e})",
            if which == 0 {
                "resnet50 fp16 b1"
            } else {
                "resnet18 fp32 b2"
            },
            rel_l2(&got, want)
        );
    }
    assert_ne!(
        model_a.spec().build_key,
        model_b.spec().build_key,
        "the two models should be different builds"
    );
}

/// (b') Programmatic dependent launches (the convs read their weights
/// before the grid dependency wait) give bit for bit what plain launches
/// give, over replays of the graph that alternate the inputs.
#[test]
fn programmatic_launches_give_the_same_bits() {
    let test = "programmatic_launches_give_the_same_bits";
    let Some((zoo, default)) = setup(test, resnet50_fp16_b1) else {
        return;
    };
    drop(default);
    let load_as = |launch: LaunchMode| {
        let options = LoadOptions {
            launch,
            ..Default::default()
        };
        gpu::load_with(&zoo.built.dir, Mode::Gpu, &options)
            .unwrap_or_else(|e| panic!("{test}: {e}"))
            .expect("a model")
    };
    let mut plain = load_as(LaunchMode::Plain);
    let want = [
        infer(&mut plain, &zoo.inputs[0]),
        infer(&mut plain, &zoo.inputs[1]),
    ];
    drop(plain);
    let mut pdl = load_as(LaunchMode::Programmatic);
    for step in 0..8 {
        let i = step % 2;
        let got = infer(&mut pdl, &zoo.inputs[i]);
        assert!(
            same_bits(&got, &want[i]),
            "step {step}: programmatic launches on input {i} differ from plain launches \
             (rel. L2 {:.3e})",
            rel_l2(&got, &want[i])
        );
    }
    assert_close(
        "resnet50 fp16 b1 (plain launches)",
        &want[1],
        &zoo.emulated[1],
        Precision::Fp16,
    );
}

/// (c) Wrong buffer lengths are typed errors naming the expected length,
/// and the model still works afterwards.
#[test]
fn wrong_length_is_a_typed_error() {
    let Some((zoo, mut model)) = setup("wrong_length_is_a_typed_error", resnet50_fp16_b1) else {
        return;
    };
    let n_in = model.spec().inputs[0].elements();
    let n_out = model.spec().outputs[0].elements();
    assert_eq!(n_in, 3 * 224 * 224);
    let mut out = vec![0.0f32; n_out];
    for len in [n_in - 1, n_in + 1, 0, 2 * n_in] {
        let short = vec![0.5f32; len];
        let err = model
            .infer(&short, &mut out)
            .expect_err("a wrong input length must fail");
        match &err {
            RuntimeError::WrongLength {
                role,
                expected,
                got,
                shape,
                ..
            } => {
                assert_eq!((*role, *expected, *got), ("input", n_in, len), "{err}");
                assert_eq!(shape.as_slice(), &[1, 3, 224, 224], "{err}");
            }
            other => panic!("input of {len}: expected WrongLength, got {other:?}"),
        }
        let text = err.to_string();
        assert!(
            text.contains(&n_in.to_string()) && text.contains(&len.to_string()),
            "{text}"
        );
    }
    let mut wrong_out = vec![0.0f32; n_out + 3];
    let err = model
        .infer(&zoo.inputs[0], &mut wrong_out)
        .expect_err("a wrong output length must fail");
    assert!(
        matches!(&err, RuntimeError::WrongLength { role: "output", expected, got, .. } if *expected == n_out && *got == n_out + 3),
        "{err:?}"
    );
    assert!(err.to_string().contains(&n_out.to_string()), "{err}");
    // Still usable.
    let got = infer(&mut model, &zoo.inputs[0]);
    assert_close(
        "resnet50 fp16 b1 after errors",
        &got,
        &zoo.emulated[0],
        Precision::Fp16,
    );
}

/// (d) `infer_device` on device buffers gives bit for bit what `infer`
/// gives and, like `infer`, makes no heap allocation, from its very first
/// call on (the first call of the process is the one that would resolve a
/// driver symbol lazily).
#[test]
fn infer_device_equals_infer_and_allocates_nothing() {
    use cudarc::driver::{DevicePtr, DevicePtrMut};
    let test = "infer_device_equals_infer_and_allocates_nothing";
    let Some((zoo, mut model)) = setup(test, resnet50_fp16_b1) else {
        return;
    };
    let stream = model
        .context()
        .new_stream()
        .unwrap_or_else(|e| panic!("cuStreamCreate: {e:?}"));
    for (i, input) in zoo.inputs.iter().enumerate() {
        let want = infer(&mut model, input);
        let d_in = stream.clone_htod(input).expect("upload the input");
        let mut d_out = stream
            .alloc_zeros::<f32>(want.len())
            .expect("allocate the output");
        stream.synchronize().expect("synchronize the upload");
        let (allocations, result) = {
            let (in_ptr, _in_sync) = d_in.device_ptr(&stream);
            let (out_ptr, _out_sync) = d_out.device_ptr_mut(&stream);
            // SAFETY: both are live device buffers of this context holding
            // the input's and output's f32 element counts, outside the
            // model's memory; the upload has completed.
            allocations_in(|| unsafe { model.infer_device(in_ptr, out_ptr) })
        };
        result.unwrap_or_else(|e| panic!("infer_device: {e}"));
        allocations.assert_none(&format!("infer_device call {}", i + 1));
        let got = stream.clone_dtoh(&d_out).expect("download the output");
        assert!(
            same_bits(&got, &want),
            "infer_device differs from infer (rel. L2 {:.3e})",
            rel_l2(&got, &want)
        );
    }
}
