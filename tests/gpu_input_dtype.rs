//! A model built with an f16 input (`Build::input_dtype(DType::F16)`, what
//! `aotune serve` builds for `"input_datatype": "FP16"`), on the GPU: the
//! zoo's ResNet-18 at fp16, batch 4.
//!
//! - `infer` with f32 data (rounded to f16 in staging) agrees with the
//!   f32-input build on the same data, and with the CPU emulation of the
//!   f16-input graph, within fp16's tolerance; it allocates nothing.
//! - `infer_staged_rows` on the first rows gives exactly those rows of
//!   `infer`, whatever the other rows of the device buffer hold, allocates
//!   nothing, and refuses row counts outside the batch with a typed error.
//!
//! - Two models that take kernel turns (`KernelTurns`, one batch's kernels
//!   at a time), run from two threads at once, each give their own rows,
//!   and the batches that waited for the other's kernels record the wait.
//!
//! Without a driver or nvcc each test prints `SKIPPED …` and passes
//! (`AOTUNE_REQUIRE_GPU=1` makes that a failure).

mod common;

use aotune::runtime::{
    InputStaging, KernelTurns, LoadOptions, Model, PinnedRows, RuntimeError, WaitMode,
};
use aotune_compiler::ir::{DType, Precision};
use aotune_compiler::reference::{rel_l2, run, RunOptions};
use aotune_compiler::zoo::{fill, write_resnet, ResNetDepth, DEFAULT_SEED};
use aotune_compiler::{Build, Built};
use common::gpu::{self, Mode, TempDir};
use counting_allocator::allocations_in;
use std::sync::OnceLock;

#[path = "common/counting_allocator.rs"]
mod counting_allocator;

const BATCH: usize = 4;

fn tmp() -> &'static TempDir {
    static TMP: OnceLock<TempDir> = OnceLock::new();
    TMP.get_or_init(|| TempDir::reused("gpu-input-dtype"))
}

/// ResNet-18 fp16 at batch 4 with an `input` dtype input.
fn build(input: DType) -> Result<Built, String> {
    let onnx = tmp().path().join("resnet18.onnx");
    if !onnx.is_file() {
        write_resnet(ResNetDepth::R18, DEFAULT_SEED, &onnx).map_err(|e| format!("zoo: {e}"))?;
    }
    let _slot = gpu::slot();
    Build::new(&onnx)
        .batch(BATCH)
        .precision(Precision::Fp16)
        .input_dtype(input)
        .name(format!("resnet18_fp16_b{BATCH}_{input}in"))
        .out_dir(tmp().path())
        .compile()
        .map_err(|e| format!("build with {input} input: {e}"))?
        .into_iter()
        .next()
        .ok_or_else(|| "the build returned nothing".to_string())
}

fn f16_input() -> &'static Result<Built, String> {
    static BUILT: OnceLock<Result<Built, String>> = OnceLock::new();
    BUILT.get_or_init(|| build(DType::F16))
}

fn f32_input() -> &'static Result<Built, String> {
    static BUILT: OnceLock<Result<Built, String>> = OnceLock::new();
    BUILT.get_or_init(|| build(DType::F32))
}

/// The loaded model, or `None` (skipped, or a dry run that checked the load
/// fails with NoDriver).
fn load(test: &str, mode: Mode, built: &Built) -> Option<Model> {
    let model = gpu::load(&built.dir, mode).unwrap_or_else(|e| panic!("{test}: {e}"));
    if model.is_none() {
        assert_eq!(mode, Mode::DryRun);
        println!("DRY RUN {test}: built {}", built.dir.display());
    }
    model
}

fn input(model: &Model, seed: u64) -> Vec<f32> {
    fill(seed, 0.0, 1.0, model.spec().inputs[0].elements())
}

#[test]
fn f16_input_infer_matches_the_f32_input_build_and_allocates_nothing() {
    let test = "f16_input_infer_matches_the_f32_input_build_and_allocates_nothing";
    let Some(mode) = gpu::mode_or_skip(test) else {
        return;
    };
    let half = f16_input().as_ref().unwrap_or_else(|e| panic!("{e}"));
    let full = f32_input().as_ref().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(half.spec.inputs[0].dtype, DType::F16);
    let (Some(mut half_model), Some(mut full_model)) =
        (load(test, mode, half), load(test, mode, full))
    else {
        return;
    };
    assert_eq!(half_model.input_dtype(), DType::F16);
    assert!(matches!(half_model.input_staging(), InputStaging::F16(_)));
    let x = input(&half_model, 31);
    let mut got = vec![f32::NAN; half_model.spec().outputs[0].elements()];
    let (allocations, result) =
        allocations_in(|| (0..5).try_for_each(|_| half_model.infer(&x, &mut got)));
    result.unwrap_or_else(|e| panic!("infer: {e}"));
    allocations.assert_none("5 infer calls with an f16 input");
    let mut want = vec![f32::NAN; got.len()];
    full_model
        .infer(&x, &mut want)
        .unwrap_or_else(|e| panic!("infer: {e}"));
    let tol = gpu::tolerance(Precision::Fp16);
    let vs_f32_input = rel_l2(&got, &want);
    let emulated = run(&half.compiled.graph, &[&x], &RunOptions::default())
        .unwrap_or_else(|e| panic!("emulation: {e}"))
        .swap_remove(0);
    let vs_emulation = rel_l2(&got, &emulated);
    println!(
        "f16 input: rel. L2 {vs_f32_input:.3e} vs the f32-input build, {vs_emulation:.3e} vs its \
         emulation (tolerance {tol:e})"
    );
    assert!(vs_f32_input <= tol, "{vs_f32_input:e} > {tol:e}");
    assert!(vs_emulation <= tol, "{vs_emulation:e} > {tol:e}");
}

#[test]
fn staged_rows_give_those_rows_of_infer_and_allocate_nothing() {
    let test = "staged_rows_give_those_rows_of_infer_and_allocate_nothing";
    let Some(mode) = gpu::mode_or_skip(test) else {
        return;
    };
    let half = f16_input().as_ref().unwrap_or_else(|e| panic!("{e}"));
    let Some(mut model) = load(test, mode, half) else {
        return;
    };
    let x = input(&model, 41);
    let y = input(&model, 42);
    let outputs = model.spec().outputs[0].elements();
    let (in_row, out_row) = (x.len() / BATCH, outputs / BATCH);
    let mut want = vec![f32::NAN; outputs];
    model.infer(&x, &mut want).unwrap();
    for rows in [1, 2, 3] {
        // The device buffer's other rows now hold y's.
        let mut other = vec![f32::NAN; outputs];
        model.infer(&y, &mut other).unwrap();
        let (mut front, _) = model.input_staging().split_at_mut(rows * in_row);
        front.write_f32(&x[..rows * in_row]);
        let mut got = vec![f32::NAN; rows * out_row];
        let (allocations, result) = allocations_in(|| model.infer_staged_rows(rows, &mut got));
        result.unwrap_or_else(|e| panic!("infer_staged_rows({rows}): {e}"));
        allocations.assert_none(&format!("infer_staged_rows({rows})"));
        let same = got
            .iter()
            .zip(&want[..rows * out_row])
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{rows} rows differ from infer's");
    }
    // The whole batch through the same call is infer_staged.
    model.input_staging().write_f32(&x);
    let mut got = vec![f32::NAN; outputs];
    model.infer_staged_rows(BATCH, &mut got).unwrap();
    assert_eq!(got, want);
    for rows in [0, BATCH + 1] {
        let e = model.infer_staged_rows(rows, &mut got).unwrap_err();
        assert!(matches!(e, RuntimeError::RowsOutOfRange { .. }), "{e}");
    }
    let e = model.infer_staged_rows(2, &mut got).unwrap_err();
    assert!(
        matches!(e, RuntimeError::WrongLength { expected, .. } if expected == 2 * out_row),
        "{e}"
    );
}

#[test]
fn timed_staged_rows_give_the_same_rows_and_positive_stage_times() {
    let test = "timed_staged_rows_give_the_same_rows_and_positive_stage_times";
    let Some(mode) = gpu::mode_or_skip(test) else {
        return;
    };
    let half = f16_input().as_ref().unwrap_or_else(|e| panic!("{e}"));
    let Some(mut model) = load(test, mode, half) else {
        return;
    };
    let x = input(&model, 43);
    let outputs = model.spec().outputs[0].elements();
    let (in_row, out_row) = (x.len() / BATCH, outputs / BATCH);
    let mut want = vec![f32::NAN; outputs];
    model.infer(&x, &mut want).unwrap();
    // The first call makes the events; the later ones allocate nothing.
    for (call, rows) in [2, 1, BATCH].into_iter().enumerate() {
        let (mut front, _) = model.input_staging().split_at_mut(rows * in_row);
        front.write_f32(&x[..rows * in_row]);
        let mut got = vec![f32::NAN; rows * out_row];
        let (allocations, result) =
            allocations_in(|| model.infer_staged_rows_timed(rows, &mut got));
        let times = result.unwrap_or_else(|e| panic!("infer_staged_rows_timed({rows}): {e}"));
        if call > 0 {
            allocations.assert_none(&format!("infer_staged_rows_timed({rows})"));
        }
        println!("{rows} rows: {times:?}");
        assert_eq!(
            got,
            want[..rows * out_row],
            "{rows} rows differ from infer's"
        );
        assert!(times.kernels_ms > 0.0, "{times:?}");
        assert!(times.input_ms >= 0.0 && times.output_ms >= 0.0, "{times:?}");
    }
    let mut got = vec![f32::NAN; out_row];
    let e = model.infer_staged_rows_timed(0, &mut got).unwrap_err();
    assert!(matches!(e, RuntimeError::RowsOutOfRange { .. }), "{e}");
    // Waiting on the blocking-sync event gives the same bits.
    let options = LoadOptions {
        wait: WaitMode::Block,
        ..LoadOptions::default()
    };
    let mut blocking = gpu::load_with(&half.dir, mode, &options)
        .unwrap_or_else(|e| panic!("{test}: {e}"))
        .expect("a GPU run loads");
    let mut got = vec![f32::NAN; outputs];
    let (allocations, result) = allocations_in(|| blocking.infer(&x, &mut got));
    result.unwrap_or_else(|e| panic!("infer with WaitMode::Block: {e}"));
    allocations.assert_none("infer with WaitMode::Block");
    assert_eq!(got, want, "WaitMode::Block changed the output");
    let mut got = vec![f32::NAN; 2 * out_row];
    let (mut front, _) = blocking.input_staging().split_at_mut(2 * in_row);
    front.write_f32(&x[..2 * in_row]);
    blocking.infer_staged_rows_timed(2, &mut got).unwrap();
    assert_eq!(got, want[..2 * out_row]);
}

#[test]
fn pinned_rows_give_infers_rows_and_wrong_lengths_are_refused() {
    let test = "pinned_rows_give_infers_rows_and_wrong_lengths_are_refused";
    let Some(mode) = gpu::mode_or_skip(test) else {
        return;
    };
    let half = f16_input().as_ref().unwrap_or_else(|e| panic!("{e}"));
    let Some(mut model) = load(test, mode, half) else {
        return;
    };
    let x = input(&model, 44);
    let outputs = model.spec().outputs[0].elements();
    let (in_row, out_row) = (x.len() / BATCH, outputs / BATCH);
    let mut want = vec![f32::NAN; outputs];
    model.infer(&x, &mut want).unwrap();
    // Each row in a pinned buffer of its own, as the f16 bytes a client sends.
    let parts: Vec<PinnedRows> = x
        .chunks(in_row)
        .map(|row| {
            let mut part = PinnedRows::alloc(&model, in_row * 2).unwrap();
            for (dst, v) in part.as_bytes_mut().chunks_mut(2).zip(row) {
                dst.copy_from_slice(&half::f16::from_f32(*v).to_le_bytes());
            }
            part
        })
        .collect();
    for rows in [1, 3, BATCH] {
        let refs: Vec<&PinnedRows> = parts[..rows].iter().collect();
        let mut got = vec![f32::NAN; rows * out_row];
        let times = model
            .infer_pinned_rows_timed(rows, &refs, &mut got)
            .unwrap_or_else(|e| panic!("infer_pinned_rows_timed({rows}): {e}"));
        println!("{rows} pinned rows: {times:?}");
        assert_eq!(
            got,
            want[..rows * out_row],
            "{rows} pinned rows differ from infer's"
        );
    }
    // Parts that do not add up to the rows named are refused.
    let refs: Vec<&PinnedRows> = parts[..2].iter().collect();
    let mut got = vec![f32::NAN; 3 * out_row];
    let e = model
        .infer_pinned_rows_timed(3, &refs, &mut got)
        .unwrap_err();
    assert!(
        matches!(e, RuntimeError::WrongLength { role: "input", .. }),
        "{e}"
    );
}

#[test]
fn kernel_turns_keep_each_models_rows_and_record_the_waits() {
    let test = "kernel_turns_keep_each_models_rows_and_record_the_waits";
    let Some(mode) = gpu::mode_or_skip(test) else {
        return;
    };
    let half = f16_input().as_ref().unwrap_or_else(|e| panic!("{e}"));
    let (Some(mut a), Some(mut b)) = (load(test, mode, half), load(test, mode, half)) else {
        return;
    };
    let e = KernelTurns::new(&a, 0).err().expect("width 0 is refused");
    assert!(matches!(e, RuntimeError::KernelTurns { .. }), "{e}");
    let turns = KernelTurns::new(&a, 1).unwrap_or_else(|e| panic!("{test}: {e}"));
    assert_eq!(turns.width(), 1);
    let outputs = a.spec().outputs[0].elements();
    // Each model's own input and the output it gives alone, before turns.
    let mut runs = Vec::new();
    for (model, seed) in [(&mut a, 51), (&mut b, 52)] {
        let x = input(model, seed);
        let mut want = vec![f32::NAN; outputs];
        model.infer(&x, &mut want).unwrap();
        model.take_kernel_turns(turns.clone()).unwrap();
        runs.push((x, want));
    }
    const CALLS: usize = 30;
    let waited: Vec<f32> = std::thread::scope(|scope| {
        let threads: Vec<_> = [a, b]
            .into_iter()
            .zip(&runs)
            .map(|(mut model, (x, want))| {
                scope.spawn(move || {
                    let mut waited = 0.0f32;
                    for call in 0..CALLS {
                        model.input_staging().write_f32(x);
                        let mut got = vec![f32::NAN; outputs];
                        let times = model
                            .infer_staged_rows_timed(BATCH, &mut got)
                            .unwrap_or_else(|e| panic!("call {call}: {e}"));
                        assert_eq!(&got, want, "call {call}: another model's rows?");
                        assert!(
                            times.turn_wait_ms >= 0.0 && times.kernels_ms > 0.0,
                            "{times:?}"
                        );
                        waited += times.turn_wait_ms;
                    }
                    waited
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    println!("turn waits over {CALLS} calls per model: {waited:?} ms");
    assert!(
        waited.iter().sum::<f32>() > 0.0,
        "two threads running one model each never waited for the other's kernels"
    );
}
