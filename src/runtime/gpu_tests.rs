//! End-to-end runtime tests on a real GPU, over a hand-written model:
//! `z = copy_smem(relu(x + w))` on 1000 floats, three kernels compiled at
//! test time (nvcc when found, else NVRTC to PTX), with the last kernel
//! taking 64 KiB of dynamic shared memory so the opt-in path runs.
//!
//! Every test skips (`aotune_compiler::skip`) when there is no driver
//! library or no compiler; a driver or compiler that is present but fails
//! fails the test. This file also installs the test binary's global
//! allocator: it counts allocations on threads that asked for it, which is
//! how `infer` and `infer_device` are shown to allocate nothing.

use std::process::Command;
use std::sync::OnceLock;

use aotune_compiler::skip;
use aotune_spec::artifact::ModelSpec;

use super::driver::{self, DeviceBuffer};
use super::launch_plan::tests::relu_add_spec;
use super::{LoadOptions, Model, RuntimeError};

const N: usize = 1000;
/// Dynamic shared memory of the `copy_smem` launch: above the 48 KiB default.
const SMEM_BYTES: u32 = 64 * 1024;

const KERNELS: &str = r#"
#define N 1000
extern "C" __global__ void add_w(const float* __restrict__ x, const float* __restrict__ w,
                                 float* __restrict__ t) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) t[i] = x[i] + w[i];
}
extern "C" __global__ void relu(const float* __restrict__ t, float* __restrict__ y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) y[i] = fmaxf(t[i], 0.0f);
}
// Each thread parks its value 63 floats apart (up to ~63 KiB) and its
// neighbour writes it out, so the result is right only if the full dynamic
// allocation exists and the block synchronized.
extern "C" __global__ void copy_smem(const float* __restrict__ y, float* __restrict__ z) {
    extern __shared__ float stage[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    stage[threadIdx.x * 63] = i < N ? y[i] : 0.0f;
    __syncthreads();
    int other = threadIdx.x ^ 1;
    int j = blockIdx.x * blockDim.x + other;
    if (j < N) z[j] = stage[other * 63];
}
"#;

// ---- counting allocator --------------------------------------------------

/// Installs the test binary's global allocator (shared with
/// `tests/gpu_runtime.rs`; see the file's documentation).
#[path = "../../tests/common/counting_allocator.rs"]
mod counting_allocator;

use counting_allocator::allocations_in;

// ---- fixtures ------------------------------------------------------------

/// True when a driver and a device are present; false after a skip (no
/// driver library). A driver that is present but fails is a failure.
fn gpu_present() -> bool {
    if !driver::driver_library_present() {
        skip::here("no NVIDIA driver (libcuda.so.1 not loadable)");
        return false;
    }
    if let Err(e) = driver::init() {
        panic!(
            "libcuda is present but cuInit failed: {}",
            super::error::describe(&e)
        );
    }
    match driver::device_count() {
        Ok(0) => panic!("libcuda is present but no CUDA device is visible"),
        Err(e) => panic!(
            "libcuda is present but cuDeviceGetCount failed: {}",
            super::error::describe(&e)
        ),
        Ok(_) => true,
    }
}

/// The test kernels as a cubin: `Ok(None)` without nvcc, `Err` when nvcc
/// is there and fails.
fn compile_with_nvcc() -> Result<Option<Vec<u8>>, String> {
    let Ok(nvcc) = aotune_compiler::toolchain::find_nvcc() else {
        return Ok(None);
    };
    let dir = std::env::temp_dir().join(format!("aotune-gpu-tests-{}", std::process::id()));
    let io = |e: std::io::Error| format!("{}: {e}", dir.display());
    std::fs::create_dir_all(&dir).map_err(io)?;
    let source = dir.join("relu_add.cu");
    let cubin = dir.join("relu_add.cubin");
    std::fs::write(&source, KERNELS).map_err(io)?;
    let mut cmd = Command::new(&nvcc.path);
    cmd.args(["-cubin", "-arch=sm_90", "-o"])
        .arg(&cubin)
        .arg(&source);
    if let Some(include) = &nvcc.include {
        cmd.arg("-I").arg(include);
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {}: {e}", nvcc.path.display()))?;
    let result = if out.status.success() {
        std::fs::read(&cubin).map(Some).map_err(io)
    } else {
        Err(format!(
            "{} failed on the test kernels: {}",
            nvcc.path.display(),
            String::from_utf8_lossy(&out.stderr)
        ))
    };
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The test kernels as PTX: `Ok(None)` without libnvrtc, `Err` when it is
/// there and fails.
fn compile_with_nvrtc() -> Result<Option<Vec<u8>>, String> {
    // SAFETY: only tries to `dlopen` libnvrtc under its known names.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Ok(None);
    }
    let options = cudarc::nvrtc::CompileOptions {
        arch: Some("compute_90"),
        ..Default::default()
    };
    match cudarc::nvrtc::compile_ptx_with_opts(KERNELS, options) {
        Ok(ptx) => Ok(ptx.as_bytes().map(<[u8]>::to_vec)),
        Err(e) => Err(format!("NVRTC failed on the test kernels: {e:?}")),
    }
}

/// The test kernels as a cubin (nvcc) or PTX (NVRTC), compiled once; `None`
/// after a skip when neither compiler exists. A compiler that fails panics.
fn kernel_image() -> Option<&'static [u8]> {
    static IMAGE: OnceLock<Result<Option<Vec<u8>>, String>> = OnceLock::new();
    let image = IMAGE.get_or_init(|| match compile_with_nvcc()? {
        Some(cubin) => Ok(Some(cubin)),
        None => compile_with_nvrtc(),
    });
    match image {
        Err(e) => panic!("{e}"),
        Ok(None) => {
            skip::here("neither nvcc (NVCC, CUDA_HOME, PATH, /usr/local/cuda, .tools) nor libnvrtc is present");
            None
        }
        Ok(Some(image)) => Some(image),
    }
}

fn weights_from(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// `w[i] = (i % 7) - 3`, so `x + w` is negative for about half of `x`.
fn weight_values(shift: f32) -> Vec<f32> {
    (0..N).map(|i| (i % 7) as f32 - 3.0 + shift).collect()
}

fn input_values(scale: f32) -> Vec<f32> {
    (0..N)
        .map(|i| scale * ((i % 13) as f32 - 6.0) * 0.5)
        .collect()
}

fn reference(x: &[f32], w: &[f32]) -> Vec<f32> {
    x.iter().zip(w).map(|(a, b)| (a + b).max(0.0)).collect()
}

struct Fixture {
    spec: ModelSpec,
    image: &'static [u8],
    w: Vec<f32>,
    weights: Vec<u8>,
}

impl Fixture {
    fn load(&self) -> Model {
        Model::load(
            &self.spec,
            self.image,
            &self.weights,
            &LoadOptions::default(),
        )
        .unwrap_or_else(|e| panic!("load failed: {e}"))
    }
}

/// The test model with weights `weight_values(shift)`, or `None` (printed) to skip.
fn fixture(shift: f32) -> Option<Fixture> {
    if !gpu_present() {
        return None;
    }
    let image = kernel_image()?;
    let w = weight_values(shift);
    let weights = weights_from(&w);
    let spec = relu_add_spec(N, &weights, SMEM_BYTES);
    Some(Fixture {
        spec,
        image,
        w,
        weights,
    })
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

// ---- tests ---------------------------------------------------------------

/// Runs without a GPU: the test kernels are valid CUDA for each compiler found.
#[test]
fn test_kernels_compile() {
    match compile_with_nvcc() {
        Ok(Some(cubin)) => assert_eq!(&cubin[..4], b"\x7fELF", "nvcc output is not a cubin"),
        Ok(None) => skip::here("no nvcc for the nvcc half"),
        Err(e) => panic!("{e}"),
    }
    match compile_with_nvrtc() {
        Ok(Some(ptx)) => {
            let text = String::from_utf8_lossy(&ptx);
            for kernel in ["add_w", "relu", "copy_smem"] {
                assert!(
                    text.contains(&format!(".entry {kernel}")),
                    "{kernel} missing"
                );
            }
        }
        Ok(None) => skip::here("libnvrtc not loadable for the NVRTC half"),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn gpu_infer_matches_the_reference() {
    let Some(f) = fixture(0.0) else { return };
    let mut model = f.load();
    eprintln!("running on {}", model.device());
    for scale in [1.0, -2.0, 0.25] {
        let x = input_values(scale);
        let mut z = vec![f32::NAN; N];
        model.infer(&x, &mut z).unwrap();
        assert_eq!(z, reference(&x, &f.w), "scale {scale}");
    }
}

#[test]
fn gpu_infer_does_not_allocate() {
    let Some(f) = fixture(0.0) else { return };
    let mut model = f.load();
    let x = input_values(1.0);
    let mut z = vec![0f32; N];
    model.infer(&x, &mut z).unwrap();
    let mut first_error = None;
    let (allocations, ()) = allocations_in(|| {
        for _ in 0..10 {
            if let Err(e) = model.infer(&x, &mut z) {
                first_error.get_or_insert(e);
            }
        }
    });
    if let Some(e) = first_error {
        panic!("infer failed: {e}");
    }
    allocations.assert_none("10 infer calls");
    assert_eq!(z, reference(&x, &f.w));
}

/// Two models loaded together (different weights), run interleaved — A,
/// B, A, B, … from the first call of each on — make no heap allocation.
#[test]
fn gpu_interleaved_models_do_not_allocate() {
    let Some(a) = fixture(0.0) else { return };
    let Some(b) = fixture(2.5) else { return };
    let mut first = a.load();
    let mut second = b.load();
    let x = input_values(1.0);
    let mut za = vec![0f32; N];
    let mut zb = vec![0f32; N];
    let mut first_error = None;
    let (allocations, ()) = allocations_in(|| {
        for _ in 0..50 {
            if let Err(e) = first.infer(&x, &mut za) {
                first_error.get_or_insert(e);
            }
            if let Err(e) = second.infer(&x, &mut zb) {
                first_error.get_or_insert(e);
            }
        }
    });
    if let Some(e) = first_error {
        panic!("infer failed: {e}");
    }
    allocations.assert_none("50 rounds of infer on model A then model B");
    assert_eq!(za, reference(&x, &a.w));
    assert_eq!(zb, reference(&x, &b.w));
}

#[test]
fn gpu_run_layers_shows_every_value() {
    let Some(f) = fixture(0.0) else { return };
    let mut model = f.load();
    let x = input_values(1.0);
    let t: Vec<f32> = x.iter().zip(&f.w).map(|(a, b)| a + b).collect();
    let y = reference(&x, &f.w);
    let mut seen = Vec::new();
    model
        .run_layers(&x, |index, slot, bytes| {
            seen.push((index, slot.name.to_string(), f32s(bytes)));
            true
        })
        .unwrap();
    assert_eq!(
        seen,
        vec![
            (0, "t".to_string(), t),
            (1, "y".to_string(), y.clone()),
            (2, "z".to_string(), y)
        ]
    );

    let mut calls = 0;
    model
        .run_layers(&x, |_, _, _| {
            calls += 1;
            false
        })
        .unwrap();
    assert_eq!(calls, 1, "returning false stops the run");
}

/// The only `infer_device` caller in this binary, so its first call is the
/// process's first device-to-device copy: no allocation even then.
#[test]
fn gpu_infer_device_uses_caller_buffers_and_does_not_allocate() {
    let Some(f) = fixture(0.0) else { return };
    let mut model = f.load();
    let ctx = model.context().clone();
    let mut input = DeviceBuffer::alloc(&ctx, 4 * N).unwrap();
    let output = DeviceBuffer::alloc(&ctx, 4 * N).unwrap();
    for (call, scale) in [-1.0, 0.5].into_iter().enumerate() {
        let x = input_values(scale);
        input.upload_blocking(&weights_from(&x)).unwrap();
        // SAFETY: both buffers are live device allocations of this context
        // with the tensors' sizes, outside the model's memory.
        let (allocations, result) =
            allocations_in(|| unsafe { model.infer_device(input.ptr(), output.ptr()) });
        result.unwrap();
        allocations.assert_none(&format!("infer_device call {}", call + 1));
        let mut bytes = vec![0u8; 4 * N];
        output.download(&mut bytes).unwrap();
        assert_eq!(f32s(&bytes), reference(&x, &f.w), "call {}", call + 1);
    }
}

#[test]
fn gpu_two_models_coexist() {
    let Some(a) = fixture(0.0) else { return };
    let Some(b) = fixture(2.5) else { return };
    let mut first = a.load();
    let mut second = b.load();
    let mut same_again = a.load();
    let x = input_values(1.0);
    let mut z = vec![0f32; N];
    for _ in 0..3 {
        first.infer(&x, &mut z).unwrap();
        assert_eq!(z, reference(&x, &a.w));
        second.infer(&x, &mut z).unwrap();
        assert_eq!(z, reference(&x, &b.w));
        same_again.infer(&x, &mut z).unwrap();
        assert_eq!(z, reference(&x, &a.w));
    }
    drop(first);
    second.infer(&x, &mut z).unwrap();
    assert_eq!(z, reference(&x, &b.w));
    let mut third = a.load();
    third.infer(&x, &mut z).unwrap();
    assert_eq!(z, reference(&x, &a.w));

    // A model moves to another thread and runs there.
    let handle = std::thread::spawn(move || {
        let mut z = vec![0f32; N];
        second.infer(&input_values(1.0), &mut z).map(|()| z)
    });
    assert_eq!(handle.join().unwrap().unwrap(), reference(&x, &b.w));
}

#[test]
fn gpu_timing_returns_one_number_per_run_and_launch() {
    let Some(f) = fixture(0.0) else { return };
    let mut model = f.load();
    let graph = model.time_graph(3, 5).unwrap();
    assert_eq!(graph.len(), 5);
    assert!(
        graph.iter().all(|ms| ms.is_finite() && *ms > 0.0),
        "{graph:?}"
    );
    let layers = model.time_layers(2, 3).unwrap();
    assert_eq!(layers.len(), 3);
    assert!(
        layers.iter().all(|ms| ms.is_finite() && *ms > 0.0),
        "{layers:?}"
    );
    let host = model.time_infer(&input_values(1.0), 2, 4).unwrap();
    assert_eq!(host.len(), 4);
    eprintln!("graph {graph:?} ms, layers {layers:?} ms, infer {host:?} ms");
}

#[test]
fn gpu_memory_report_counts_the_models_buffers() {
    let Some(f) = fixture(0.0) else { return };
    let model = f.load();
    let report = model.memory().unwrap();
    assert_eq!(report.weights_bytes, 4 * N as u64);
    assert_eq!(report.arena_bytes, f.spec.arena_bytes);
    assert_eq!(report.staging_bytes, 8 * N as u64);
    assert!(report.device_free <= report.device_total && report.device_total > 0);
    assert!(!model.device_name().is_empty());
    assert!(model.device().sm() >= 50);
    eprintln!("{report}");
}

#[test]
fn gpu_errors_are_typed() {
    let Some(f) = fixture(0.0) else { return };
    let mut model = f.load();
    let mut z = vec![0f32; N];
    let err = model.infer(&[0.0; 3], &mut z).unwrap_err();
    assert!(
        matches!(
            err,
            RuntimeError::WrongLength {
                role: "input",
                got: 3,
                ..
            }
        ),
        "{err}"
    );
    let err = model.infer(&input_values(1.0), &mut z[..10]).unwrap_err();
    assert!(
        matches!(
            err,
            RuntimeError::WrongLength {
                role: "output",
                got: 10,
                ..
            }
        ),
        "{err}"
    );

    let options = LoadOptions::default();
    let far = LoadOptions {
        device: 999,
        ..options
    };
    let err = Model::load(&f.spec, f.image, &f.weights, &far)
        .err()
        .unwrap();
    assert!(
        matches!(err, RuntimeError::DeviceOutOfRange { ordinal: 999, .. }),
        "{err}"
    );

    let mut missing = f.spec.clone();
    missing.kernels.to_mut()[1] = "no_such_kernel".into();
    let err = Model::load(&missing, f.image, &f.weights, &options)
        .err()
        .unwrap();
    assert!(
        matches!(&err, RuntimeError::MissingKernel { symbol, index: 1 } if symbol == "no_such_kernel"),
        "{err}"
    );

    let err = Model::load(&f.spec, b"not a kernel image", &f.weights, &options)
        .err()
        .unwrap();
    assert!(
        matches!(err, RuntimeError::InvalidKernelImage { .. }),
        "{err}"
    );

    let mut too_wide = f.spec.clone();
    too_wide.launches.to_mut()[1].block = [2048, 1, 1];
    let err = Model::load(&too_wide, f.image, &f.weights, &options)
        .err()
        .unwrap();
    assert!(
        matches!(err, RuntimeError::LaunchConfig { index: 1, .. }),
        "{err}"
    );

    let mut too_much_smem = f.spec.clone();
    too_much_smem.launches.to_mut()[2].smem_bytes = 1 << 20;
    let err = Model::load(&too_much_smem, f.image, &f.weights, &options)
        .err()
        .unwrap();
    assert!(
        matches!(err, RuntimeError::LaunchConfig { index: 2, .. }),
        "{err}"
    );

    // The model still works after all that.
    model.infer(&input_values(1.0), &mut z).unwrap();
    assert_eq!(z, reference(&input_values(1.0), &f.w));
}
