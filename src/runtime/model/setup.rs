//! Opening the device and preparing what a model loads into: the driver and
//! device checks, the kernel image and its functions (with their shared
//! memory limits checked against every launch), and device and pinned
//! allocations that name what they are for.

use std::sync::Arc;

use aotune_spec::artifact::ModelSpec;
use cudarc::driver::sys::CUresult;
use cudarc::driver::CudaContext;

use super::super::device_info::DeviceInfo;
use super::super::driver::{self, DeviceAttribute, DeviceBuffer, Function, Module, PinnedBuffer};
use super::super::error::{error_name, CudaVersion, RuntimeError, REQUIRED_CUDA};
use super::super::launch_plan;
use super::DEFAULT_SHARED_LIMIT;

/// `Err(NoDriver)` unless the driver library is `present`.
pub(super) fn require_driver(present: bool) -> Result<(), RuntimeError> {
    if present {
        Ok(())
    } else {
        Err(RuntimeError::NoDriver)
    }
}

/// Driver present → new enough → initialized → device exists → its primary
/// context retained and bound.
pub(crate) fn open_device(ordinal: usize) -> Result<Arc<CudaContext>, RuntimeError> {
    require_driver(driver::driver_library_present())?;
    let version = driver::driver_version().map_err(RuntimeError::cuda(
        "cuDriverGetVersion",
        "reading the driver version",
    ))?;
    if version < REQUIRED_CUDA.0 {
        return Err(RuntimeError::DriverTooOld {
            found: CudaVersion(version),
            required: REQUIRED_CUDA,
            detail: String::new(),
        });
    }
    driver::init().map_err(|source| match source.0 {
        CUresult::CUDA_ERROR_NO_DEVICE => RuntimeError::NoDevice {
            detail: format!("cuInit: {}", error_name(&source)),
        },
        _ => RuntimeError::Cuda {
            call: "cuInit",
            during: "initializing the CUDA driver".into(),
            source,
        },
    })?;
    let count = driver::device_count().map_err(RuntimeError::cuda(
        "cuDeviceGetCount",
        "counting CUDA devices",
    ))?;
    if count == 0 {
        return Err(RuntimeError::NoDevice {
            detail: "cuDeviceGetCount found 0 devices".into(),
        });
    }
    if ordinal >= count {
        return Err(RuntimeError::DeviceOutOfRange { ordinal, count });
    }
    driver::retain_primary_context(ordinal).map_err(|source| RuntimeError::Cuda {
        call: "cuDevicePrimaryCtxRetain",
        during: format!("opening CUDA device {ordinal}"),
        source,
    })
}

pub(crate) fn query_device(ctx: &CudaContext, ordinal: usize) -> Result<DeviceInfo, RuntimeError> {
    let during = "querying the device";
    let attribute = |a| {
        driver::device_attribute(ctx, a)
            .map(|v| v.max(0) as u32)
            .map_err(RuntimeError::cuda("cuDeviceGetAttribute", during))
    };
    let (name, total) = driver::device_name_and_memory(ctx)
        .map_err(RuntimeError::cuda("cuDeviceGetName", during))?;
    let driver_version =
        driver::driver_version().map_err(RuntimeError::cuda("cuDriverGetVersion", during))?;
    Ok(DeviceInfo {
        ordinal,
        name,
        compute_capability: (
            attribute(DeviceAttribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attribute(DeviceAttribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ),
        driver: CudaVersion(driver_version),
        total_memory: total as u64,
        multiprocessors: attribute(DeviceAttribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
    })
}

/// Kernels on Hopper's wgmma exist as sm_90a machine code only (their
/// compute_90 PTX traps): refuse other GPUs before anything launches.
pub(super) fn check_arch_specific(
    spec: &ModelSpec,
    device: &DeviceInfo,
) -> Result<(), RuntimeError> {
    let wgmma: Vec<&str> = spec
        .kernels
        .iter()
        .map(|k| &**k)
        .filter(|k| k.contains("_wgmma_"))
        .collect();
    match wgmma.first() {
        Some(first) if device.sm() != 90 => Err(RuntimeError::NeedsHopper {
            device: device.name.clone(),
            sm: device.sm(),
            kernels: wgmma.len(),
            first: first.to_string(),
        }),
        _ => Ok(()),
    }
}

pub(super) fn load_module(
    ctx: &Arc<CudaContext>,
    image: &[u8],
    device: &DeviceInfo,
) -> Result<Module, RuntimeError> {
    Module::load(ctx, image).map_err(|source| match source.0 {
        CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU => RuntimeError::NoBinaryForGpu {
            device: device.name.clone(),
            sm: device.sm(),
            driver: device.driver,
            code: error_name(&source),
        },
        CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION => RuntimeError::PtxTooNew {
            driver: device.driver,
            code: error_name(&source),
        },
        CUresult::CUDA_ERROR_INVALID_IMAGE
        | CUresult::CUDA_ERROR_INVALID_PTX
        | CUresult::CUDA_ERROR_INVALID_SOURCE
        | CUresult::CUDA_ERROR_INVALID_VALUE => RuntimeError::InvalidKernelImage {
            bytes: image.len(),
            code: error_name(&source),
        },
        _ => RuntimeError::Cuda {
            call: "cuModuleLoadData",
            during: format!("loading the kernel image ({} bytes)", image.len()),
            source,
        },
    })
}

pub(super) fn find_kernels(
    module: &Module,
    spec: &ModelSpec,
) -> Result<Vec<Function>, RuntimeError> {
    spec.kernels
        .iter()
        .enumerate()
        .map(|(index, symbol)| {
            module.function(symbol).map_err(|source| match source.0 {
                CUresult::CUDA_ERROR_NOT_FOUND => RuntimeError::MissingKernel {
                    symbol: symbol.to_string(),
                    index,
                },
                _ => RuntimeError::Cuda {
                    call: "cuModuleGetFunction",
                    during: format!("looking up kernel `{symbol}`"),
                    source,
                },
            })
        })
        .collect()
}

/// Shared memory per block (static and dynamic) the device lets a kernel
/// opt into.
pub(super) fn shared_optin(ctx: &CudaContext, during: String) -> Result<u64, RuntimeError> {
    driver::device_attribute(
        ctx,
        DeviceAttribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
    )
    .map(|v| v.max(0) as u64)
    .map_err(|source| RuntimeError::Cuda {
        call: "cuDeviceGetAttribute",
        during,
        source,
    })
}

/// The most threads per block `function` allows (its register use limits
/// it) and its static shared memory, in bytes.
pub(super) fn function_limits(
    function: &Function,
    during: String,
) -> Result<(u64, u64), RuntimeError> {
    let cuda = |source| RuntimeError::Cuda {
        call: "cuFuncGetAttribute",
        during: during.clone(),
        source,
    };
    let threads = function.max_threads_per_block().map_err(cuda)?.max(0) as u64;
    let static_bytes = function.static_shared_bytes().map_err(cuda)?.max(0) as u64;
    Ok((threads, static_bytes))
}

/// Checks each launch's block size and shared memory against the kernel and
/// device limits, and opts kernels into more than 48 KiB of dynamic shared
/// memory where a launch needs it.
pub(super) fn configure_kernels(
    spec: &ModelSpec,
    functions: &[Function],
    ctx: &CudaContext,
    device: &DeviceInfo,
) -> Result<(), RuntimeError> {
    let optin = shared_optin(ctx, "reading the shared memory limit".into())?;
    let max_dynamic = launch_plan::max_shared_bytes_per_kernel(spec);
    let mut limits = Vec::with_capacity(functions.len());
    for (kernel, function) in functions.iter().enumerate() {
        let symbol = &spec.kernels[kernel];
        let (threads, static_bytes) = function_limits(
            function,
            format!("reading the attributes of kernel `{symbol}`"),
        )?;
        let dynamic = u64::from(max_dynamic[kernel]);
        if static_bytes + dynamic <= optin
            && static_bytes + dynamic > u64::from(DEFAULT_SHARED_LIMIT)
        {
            function
                .set_max_dynamic_shared_bytes(max_dynamic[kernel] as i32)
                .map_err(|source| RuntimeError::Cuda {
                    call: "cuFuncSetAttribute",
                    during: format!(
                        "allowing kernel `{symbol}` {dynamic} B of dynamic shared memory"
                    ),
                    source,
                })?;
        }
        limits.push((threads, static_bytes));
    }
    for (index, launch) in spec.launches.iter().enumerate() {
        if launch.matmul.is_some() {
            continue;
        }
        let (max_threads, static_bytes) = limits[launch.kernel as usize];
        let threads: u64 = launch.block.iter().map(|&b| u64::from(b)).product();
        let shared = static_bytes + u64::from(launch.smem_bytes);
        let reason = if threads > max_threads {
            Some(format!(
                "block {:?} has {threads} threads but the kernel allows at most {max_threads} \
                 (its register use limits it)",
                launch.block
            ))
        } else if shared > optin {
            Some(format!(
                "it needs {shared} B of shared memory ({static_bytes} static + {} dynamic) but \
                 the device allows {optin} B per block",
                launch.smem_bytes
            ))
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(RuntimeError::LaunchConfig {
                index,
                node: launch.node.to_string(),
                kernel: spec.kernels[launch.kernel as usize].to_string(),
                device: device.name.clone(),
                reason,
            });
        }
    }
    Ok(())
}

pub(super) fn alloc_device(
    ctx: &Arc<CudaContext>,
    device: &DeviceInfo,
    bytes: u64,
    what: &'static str,
) -> Result<DeviceBuffer, RuntimeError> {
    let out_of_memory = || {
        let (free, total) = driver::memory_info().unwrap_or((0, device.total_memory as usize));
        RuntimeError::OutOfMemory {
            what,
            device: device.name.clone(),
            requested: bytes,
            free: free as u64,
            total: total as u64,
        }
    };
    let size = usize::try_from(bytes).map_err(|_| out_of_memory())?;
    DeviceBuffer::alloc(ctx, size).map_err(|source| match source.0 {
        CUresult::CUDA_ERROR_OUT_OF_MEMORY => out_of_memory(),
        _ => RuntimeError::Cuda {
            call: "cuMemAlloc",
            during: format!("allocating {bytes} bytes for the {what}"),
            source,
        },
    })
}

pub(super) fn alloc_pinned(
    ctx: &Arc<CudaContext>,
    bytes: u64,
    what: &'static str,
) -> Result<PinnedBuffer, RuntimeError> {
    let host_out_of_memory = |code: String| RuntimeError::HostOutOfMemory {
        what,
        requested: bytes,
        code,
    };
    let size = usize::try_from(bytes).map_err(|_| host_out_of_memory("too large".into()))?;
    PinnedBuffer::alloc(ctx, size).map_err(|source| match source.0 {
        CUresult::CUDA_ERROR_OUT_OF_MEMORY => host_out_of_memory(error_name(&source)),
        _ => RuntimeError::Cuda {
            call: "cuMemHostAlloc",
            during: format!("allocating {bytes} bytes of pinned memory for the {what}"),
            source,
        },
    })
}
