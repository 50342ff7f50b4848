//! Launches that run through cuBLASLt instead of a kernel: a Dense node as
//! one `cublasLtMatmul` ([`LibraryMatmul`]; docs/design/cublaslt-dense.md).
//!
//! libcublasLt is loaded on first use (cudarc's dynamic loading), so only a
//! model that has such a launch needs it; [`MatmulLibrary::open`] checks it
//! can be loaded before any call (cudarc's loader would panic). Everything
//! that allocates or asks the heuristic happens at load: one handle and one
//! workspace per model (its launches run in order on its stream, so they
//! share it), per launch a descriptor, three layouts, the algorithm and the
//! bias converted to the output's type (cuBLASLt refuses an f32 bias with a
//! 16-bit output). Running one is then a single `cublasLtMatmul` on the
//! model's stream, which stream capture records like a kernel launch.
//!
//! Layouts: cuBLASLt is column-major, so the row-major `w [N,K]` is a K×N
//! matrix taken transposed, `x [M,K]` a K×M one, and `y` and the residual
//! `[M,N]` N×M ones: `D = op(A)·B` is then `y`, the residual comes in as
//! `C` with `beta = 1`.

use std::ffi::c_void;
use std::sync::Arc;

use aotune_spec::artifact::{Arg, LibraryMatmul, MatmulActivation};
use aotune_spec::types::DType;
use cudarc::cublaslt::result::{self as lt, CublasError};
use cudarc::cublaslt::sys;
use cudarc::driver::CudaContext;

use super::driver::{DeviceBuffer, DevicePtr, Stream};
use super::error::RuntimeError;

/// Workspace each model gives cuBLASLt (NVIDIA's recommendation for Hopper).
pub(crate) const WORKSPACE_BYTES: usize = 32 << 20;
/// Heuristic candidates asked for; a launch's `algo` ranks among them.
const CANDIDATES: usize = 8;
/// `cublasOperation_t` (cublas_api.h), which cudarc's cuBLASLt bindings
/// leave out: the TRANSA/TRANSB attributes take it as an `int32_t`.
const OP_N: i32 = 0;
const OP_T: i32 = 1;

/// One model's cuBLASLt handle and workspace.
pub(crate) struct MatmulLibrary {
    handle: sys::cublasLtHandle_t,
    workspace: DeviceBuffer,
}

/// One launch's descriptors, algorithm and operand addresses.
pub(crate) struct PreparedMatmul {
    library: Arc<MatmulLibrary>,
    desc: sys::cublasLtMatmulDesc_t,
    /// `w`, `x` and `y` (also the residual's).
    layouts: [sys::cublasLtMatrixLayout_t; 3],
    algo: sys::cublasLtMatmulAlgo_t,
    w: DevicePtr,
    x: DevicePtr,
    /// The residual, or `y` when there is none (`beta = 0` then).
    c: DevicePtr,
    y: DevicePtr,
    beta: f32,
    /// The bias in the output's type; `desc` points into it.
    bias_buffer: Option<DeviceBuffer>,
    /// Why the algorithm is not the one the build asked for, if it is not.
    pub(crate) warning: Option<String>,
}

// SAFETY: the handle and descriptors are heap objects of cuBLASLt's, which
// is thread safe (a handle may be used from several host threads); the
// descriptors are only read after `prepare`.
unsafe impl Send for MatmulLibrary {}
unsafe impl Sync for MatmulLibrary {}
unsafe impl Send for PreparedMatmul {}

fn cublas_error<'a>(
    node: &'a str,
    call: &'static str,
) -> impl FnOnce(CublasError) -> RuntimeError + 'a {
    move |e| RuntimeError::Matmul {
        node: node.to_string(),
        call,
        status: format!("{:?}", e.0),
    }
}

impl MatmulLibrary {
    /// Loads libcublasLt, creates a handle and the workspace. `node` names
    /// the first launch that needs it (for the error).
    pub(crate) fn open(ctx: &Arc<CudaContext>, node: &str) -> Result<Self, RuntimeError> {
        // SAFETY: `is_culib_present` only tries to `dlopen` the library.
        if !unsafe { sys::is_culib_present() } {
            return Err(RuntimeError::MatmulLibraryMissing {
                node: node.to_string(),
            });
        }
        let handle = lt::create_handle().map_err(cublas_error(node, "cublasLtCreate"))?;
        let workspace = DeviceBuffer::alloc(ctx, WORKSPACE_BYTES).map_err(|source| {
            // SAFETY: the handle was just created and is not used again.
            unsafe { lt::destroy_handle(handle) }.ok();
            RuntimeError::Cuda {
                call: "cuMemAlloc",
                during: format!("allocating cuBLASLt's {WORKSPACE_BYTES}-byte workspace"),
                source,
            }
        })?;
        Ok(MatmulLibrary { handle, workspace })
    }

    /// Prepares launch `node` of a spec: `args` are its resolved addresses
    /// (as `spec_args` orders them), `weights` the host copy of the weight
    /// blob, which holds the f32 bias.
    pub(crate) fn prepare(
        self: &Arc<Self>,
        ctx: &Arc<CudaContext>,
        node: &str,
        m: &LibraryMatmul,
        spec_args: &[Arg],
        args: &[u64],
        weights: &[u8],
    ) -> Result<PreparedMatmul, RuntimeError> {
        let bias = if m.bias {
            Some(bias_from_weights(node, m, spec_args.get(2), weights)?)
        } else {
            None
        };
        self.prepare_with_bias(ctx, node, m, args, bias.as_deref())
    }

    /// [`MatmulLibrary::prepare`] with the bias's f32 values given (`None`
    /// without one); `args` are the operands' device addresses.
    pub(crate) fn prepare_with_bias(
        self: &Arc<Self>,
        ctx: &Arc<CudaContext>,
        node: &str,
        m: &LibraryMatmul,
        args: &[u64],
        bias_values: Option<&[f32]>,
    ) -> Result<PreparedMatmul, RuntimeError> {
        if args.len() != m.arg_count() || bias_values.is_some() != m.bias {
            return Err(RuntimeError::Matmul {
                node: node.to_string(),
                call: "(spec)",
                status: format!(
                    "{} operands and {} bias for a matmul that needs {} and {}",
                    args.len(),
                    if bias_values.is_some() { "a" } else { "no" },
                    m.arg_count(),
                    if m.bias { "one" } else { "none" }
                ),
            });
        }
        let ty = match m.dtype {
            DType::F16 => sys::cudaDataType_t::CUDA_R_16F,
            DType::BF16 => sys::cudaDataType_t::CUDA_R_16BF,
            DType::F32 => {
                return Err(RuntimeError::Matmul {
                    node: node.to_string(),
                    call: "(spec)",
                    status: "f32 operands are not run through cuBLASLt".into(),
                })
            }
        };
        let mut p = PreparedMatmul {
            library: self.clone(),
            desc: lt::create_matmul_desc(
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                sys::cudaDataType_t::CUDA_R_32F,
            )
            .map_err(cublas_error(node, "cublasLtMatmulDescCreate"))?,
            layouts: [std::ptr::null_mut(); 3],
            algo: sys::cublasLtMatmulAlgo_t { data: [0; 8] },
            w: args[1],
            x: args[0],
            c: args[args.len() - 1],
            y: args[args.len() - 1],
            beta: 0.0,
            bias_buffer: None,
            warning: None,
        };
        let (rows_k, m_rows, n) = (m.k, m.m, m.n);
        for (slot, (rows, cols)) in [(rows_k, n), (rows_k, m_rows), (n, m_rows)]
            .into_iter()
            .enumerate()
        {
            p.layouts[slot] = lt::create_matrix_layout(ty, rows, cols, rows as i64)
                .map_err(cublas_error(node, "cublasLtMatrixLayoutCreate"))?;
        }
        let set = |attr, value: *const c_void, size: usize| {
            // SAFETY: `desc` is live; `value` points at `size` readable bytes.
            unsafe { lt::set_matmul_desc_attribute(p.desc, attr, value, size) }
                .map_err(cublas_error(node, "cublasLtMatmulDescSetAttribute"))
        };
        use sys::cublasLtMatmulDescAttributes_t as A;
        let (ta, tb) = (OP_T, OP_N);
        set(A::CUBLASLT_MATMUL_DESC_TRANSA, ptr(&ta), size_of_val(&ta))?;
        set(A::CUBLASLT_MATMUL_DESC_TRANSB, ptr(&tb), size_of_val(&tb))?;
        let epilogue = epilogue(m);
        set(
            A::CUBLASLT_MATMUL_DESC_EPILOGUE,
            ptr(&epilogue),
            size_of_val(&epilogue),
        )?;
        let mut bias = None;
        if let Some(values) = bias_values {
            let buffer = upload_bias(ctx, node, m, values)?;
            let address: DevicePtr = buffer.ptr();
            set(
                A::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                ptr(&address),
                size_of_val(&address),
            )?;
            set(
                A::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                ptr(&ty),
                size_of_val(&ty),
            )?;
            bias = Some(buffer);
        }
        if m.residual {
            p.c = args[2 + usize::from(m.bias)];
            p.beta = 1.0;
        }
        let (algo, warning) = self.choose_algo(node, &p, m.algo)?;
        p.algo = algo;
        p.warning = warning;
        p.bias_buffer = bias;
        Ok(p)
    }

    fn choose_algo(
        &self,
        node: &str,
        p: &PreparedMatmul,
        rank: u32,
    ) -> Result<(sys::cublasLtMatmulAlgo_t, Option<String>), RuntimeError> {
        let pref = lt::create_matmul_pref()
            .map_err(cublas_error(node, "cublasLtMatmulPreferenceCreate"))?;
        let bytes = WORKSPACE_BYTES as u64;
        // SAFETY: `pref` is live; the attribute is a u64 read from `bytes`.
        let set = unsafe {
            lt::set_matmul_pref_attribute(
                pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                ptr(&bytes),
                size_of_val(&bytes),
            )
        };
        // SAFETY: zero-initialized results are valid plain data.
        let mut found: [sys::cublasLtMatmulHeuristicResult_t; CANDIDATES] =
            unsafe { std::mem::zeroed() };
        let mut count = 0;
        let asked = set.and_then(|()| {
            // SAFETY: every descriptor is live and `found` holds CANDIDATES results.
            unsafe {
                sys::cublasLtMatmulAlgoGetHeuristic(
                    self.handle,
                    p.desc,
                    p.layouts[0],
                    p.layouts[1],
                    p.layouts[2],
                    p.layouts[2],
                    pref,
                    CANDIDATES as i32,
                    found.as_mut_ptr(),
                    &mut count,
                )
            }
            .result()
        });
        // SAFETY: `pref` is not used again.
        unsafe { lt::destroy_matmul_pref(pref) }.ok();
        asked.map_err(cublas_error(node, "cublasLtMatmulAlgoGetHeuristic"))?;
        let returned = usize::try_from(count).unwrap_or(0).min(CANDIDATES);
        // Ranks count the candidates the heuristic marks usable.
        let algos: Vec<sys::cublasLtMatmulAlgo_t> = found[..returned]
            .iter()
            .filter(|r| r.state == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS)
            .map(|r| r.algo)
            .collect();
        let usable = algos.len();
        if usable == 0 {
            return Err(RuntimeError::Matmul {
                node: node.to_string(),
                call: "cublasLtMatmulAlgoGetHeuristic",
                status: "no algorithm for this shape and epilogue on this GPU".into(),
            });
        }
        let rank = rank as usize;
        if let Some(&algo) = algos.get(rank) {
            return Ok((algo, None));
        }
        let warning = format!(
            "node `{node}`: cuBLASLt's heuristic offers {usable} algorithm(s) here, the build \
             asked for rank {rank}; rank 0 runs (another GPU or cuBLAS version than the tuning's)"
        );
        Ok((algos[0], Some(warning)))
    }
}

impl PreparedMatmul {
    /// Device bytes of its converted bias (0 without one).
    pub(crate) fn bias_bytes(&self) -> usize {
        self.bias_buffer.as_ref().map_or(0, DeviceBuffer::bytes)
    }

    /// Enqueues the matmul on `stream`.
    ///
    /// # Safety
    ///
    /// The buffers the operands point into are allocated.
    pub(crate) unsafe fn run(&self, stream: &Stream) -> Result<(), CublasError> {
        let (p, library) = (self, &self.library);
        let alpha = 1.0f32;
        // SAFETY: the caller vouches for the memory; the descriptors are
        // live; alpha and beta are host f32s (the default pointer mode) read
        // during the call.
        unsafe {
            sys::cublasLtMatmul(
                library.handle,
                p.desc,
                ptr(&alpha),
                p.w as *const c_void,
                p.layouts[0],
                p.x as *const c_void,
                p.layouts[1],
                ptr(&p.beta),
                p.c as *const c_void,
                p.layouts[2],
                p.y as *mut c_void,
                p.layouts[2],
                &p.algo,
                library.workspace.ptr() as *mut c_void,
                WORKSPACE_BYTES,
                stream.raw() as sys::cudaStream_t,
            )
        }
        .result()
    }
}

impl Drop for MatmulLibrary {
    fn drop(&mut self) {
        // SAFETY: the handle is not used after this.
        unsafe { lt::destroy_handle(self.handle) }.ok();
    }
}

impl Drop for PreparedMatmul {
    fn drop(&mut self) {
        // SAFETY: the descriptors are not used after this; null ones were
        // never created.
        unsafe {
            for layout in self.layouts {
                if !layout.is_null() {
                    lt::destroy_matrix_layout(layout).ok();
                }
            }
            lt::destroy_matmul_desc(self.desc).ok();
        }
    }
}

fn ptr<T>(value: &T) -> *const c_void {
    (value as *const T).cast()
}

fn epilogue(m: &LibraryMatmul) -> sys::cublasLtEpilogue_t {
    use sys::cublasLtEpilogue_t as E;
    match (m.bias, m.activation) {
        (false, MatmulActivation::None) => E::CUBLASLT_EPILOGUE_DEFAULT,
        (false, MatmulActivation::Relu) => E::CUBLASLT_EPILOGUE_RELU,
        (false, MatmulActivation::Gelu) => E::CUBLASLT_EPILOGUE_GELU,
        (true, MatmulActivation::None) => E::CUBLASLT_EPILOGUE_BIAS,
        (true, MatmulActivation::Relu) => E::CUBLASLT_EPILOGUE_RELU_BIAS,
        (true, MatmulActivation::Gelu) => E::CUBLASLT_EPILOGUE_GELU_BIAS,
    }
}

/// The f32 bias of a spec's launch: its `Arg::Weights` into `weights`.
fn bias_from_weights(
    node: &str,
    m: &LibraryMatmul,
    arg: Option<&Arg>,
    weights: &[u8],
) -> Result<Vec<f32>, RuntimeError> {
    let invalid = |status: String| RuntimeError::Matmul {
        node: node.to_string(),
        call: "(spec)",
        status,
    };
    let Some(&Arg::Weights(offset)) = arg else {
        return Err(invalid("the bias is not in the weights".into()));
    };
    let n = m.n as usize;
    let start = usize::try_from(offset).unwrap_or(usize::MAX);
    let bytes = start
        .checked_add(4 * n)
        .and_then(|end| weights.get(start..end))
        .ok_or_else(|| {
            invalid(format!(
                "the bias at weights offset {offset} runs past the blob"
            ))
        })?;
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// `values` (the bias, `m.n` of them) converted to the output's type and
/// uploaded.
fn upload_bias(
    ctx: &Arc<CudaContext>,
    node: &str,
    m: &LibraryMatmul,
    values: &[f32],
) -> Result<DeviceBuffer, RuntimeError> {
    if values.len() != m.n as usize {
        return Err(RuntimeError::Matmul {
            node: node.to_string(),
            call: "(spec)",
            status: format!("{} bias values for N = {}", values.len(), m.n),
        });
    }
    let values = values.iter().copied();
    let converted: Vec<u8> = match m.dtype {
        DType::BF16 => values
            .flat_map(|v| half::bf16::from_f32(v).to_le_bytes())
            .collect(),
        _ => values
            .flat_map(|v| half::f16::from_f32(v).to_le_bytes())
            .collect(),
    };
    let mut buffer =
        DeviceBuffer::alloc(ctx, converted.len()).map_err(|source| RuntimeError::Cuda {
            call: "cuMemAlloc",
            during: format!("allocating node `{node}`'s cuBLASLt bias"),
            source,
        })?;
    buffer
        .upload_blocking(&converted)
        .map_err(|source| RuntimeError::Cuda {
            call: "cuMemcpyHtoD",
            during: format!("uploading node `{node}`'s cuBLASLt bias"),
            source,
        })?;
    Ok(buffer)
}
