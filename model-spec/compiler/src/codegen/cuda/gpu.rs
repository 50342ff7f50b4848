//! Test support: running a generated module on a GPU without new
//! dependencies. The CUDA driver (`libcuda.so.1`) and, when nvcc is absent,
//! NVRTC (`libnvrtc.so.13`) are opened with `dlopen`; the runner uploads the
//! graph's constants as a weight blob (each constant 256-byte aligned in its
//! storage type and physical order), feeds inputs into one arena at their
//! planned offsets, launches the module's launch table in order, and reads
//! values back as logical row-major f32, which is what the CPU reference
//! returns. Everything here returns `Err` with a reason instead of failing,
//! so tests can skip on machines without a GPU.

#![allow(clippy::missing_safety_doc)]

use super::nvcc;
use super::CudaModule;
use crate::ir::{DType, Graph, Layout, NodeId, ValueId};
use crate::plan::MemoryPlan;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::{Mutex, MutexGuard, OnceLock};

extern "C" {
    fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}
const RTLD_NOW: c_int = 2;

type CuResult = c_int;
type CuDeviceptr = u64;
type Handle = *mut c_void;

fn open(names: &[&str]) -> Result<Handle, String> {
    for name in names {
        let c = CString::new(*name).map_err(|e| e.to_string())?;
        // SAFETY: dlopen with a valid NUL-terminated name.
        let h = unsafe { dlopen(c.as_ptr(), RTLD_NOW) };
        if !h.is_null() {
            return Ok(h);
        }
    }
    Err(format!("cannot dlopen any of {names:?}"))
}

fn symbol(lib: Handle, name: &str) -> Result<*mut c_void, String> {
    let c = CString::new(name).map_err(|e| e.to_string())?;
    // SAFETY: dlsym on a live handle with a valid name.
    let p = unsafe { dlsym(lib, c.as_ptr()) };
    if p.is_null() {
        Err(format!("missing symbol {name}"))
    } else {
        Ok(p)
    }
}

macro_rules! api {
    ($api:ident { $($name:ident : fn($($arg:ty),*) -> $ret:ty;)* }) => {
        #[allow(non_snake_case)]
        struct $api {
            $($name: unsafe extern "C" fn($($arg),*) -> $ret,)*
        }
        impl $api {
            fn load(lib: Handle) -> Result<Self, String> {
                Ok($api {
                    $($name: {
                        let p = symbol(lib, stringify!($name))?;
                        // SAFETY: the symbol has this C signature in the
                        // CUDA headers.
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> $ret>(p) }
                    },)*
                })
            }
        }
    };
}

api!(Driver {
    cuInit: fn(c_uint) -> CuResult;
    cuDeviceGet: fn(*mut c_int, c_int) -> CuResult;
    cuDevicePrimaryCtxRetain: fn(*mut Handle, c_int) -> CuResult;
    cuCtxSetCurrent: fn(Handle) -> CuResult;
    cuCtxSynchronize: fn() -> CuResult;
    cuModuleLoadData: fn(*mut Handle, *const c_void) -> CuResult;
    cuModuleUnload: fn(Handle) -> CuResult;
    cuModuleGetFunction: fn(*mut Handle, Handle, *const c_char) -> CuResult;
    cuFuncSetAttribute: fn(Handle, c_int, c_int) -> CuResult;
    cuMemAlloc_v2: fn(*mut CuDeviceptr, usize) -> CuResult;
    cuMemFree_v2: fn(CuDeviceptr) -> CuResult;
    cuMemcpyHtoD_v2: fn(CuDeviceptr, *const c_void, usize) -> CuResult;
    cuMemcpyDtoH_v2: fn(*mut c_void, CuDeviceptr, usize) -> CuResult;
    cuMemsetD8_v2: fn(CuDeviceptr, u8, usize) -> CuResult;
    cuLaunchKernel: fn(Handle, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Handle, *mut *mut c_void, *mut *mut c_void) -> CuResult;
    cuEventCreate: fn(*mut Handle, c_uint) -> CuResult;
    cuEventRecord: fn(Handle, Handle) -> CuResult;
    cuEventSynchronize: fn(Handle) -> CuResult;
    cuEventElapsedTime: fn(*mut f32, Handle, Handle) -> CuResult;
    cuEventDestroy_v2: fn(Handle) -> CuResult;
    cuGetErrorString: fn(CuResult, *mut *const c_char) -> CuResult;
});

api!(Nvrtc {
    nvrtcCreateProgram: fn(*mut Handle, *const c_char, *const c_char, c_int, *const *const c_char, *const *const c_char) -> c_int;
    nvrtcCompileProgram: fn(Handle, c_int, *const *const c_char) -> c_int;
    nvrtcGetProgramLogSize: fn(Handle, *mut usize) -> c_int;
    nvrtcGetProgramLog: fn(Handle, *mut c_char) -> c_int;
    nvrtcGetCUBINSize: fn(Handle, *mut usize) -> c_int;
    nvrtcGetCUBIN: fn(Handle, *mut c_char) -> c_int;
    nvrtcDestroyProgram: fn(*mut Handle) -> c_int;
});

/// True when the driver library can be opened (no CUDA call is made).
pub fn driver_library_present() -> bool {
    open(&["libcuda.so.1", "libcuda.so"]).is_ok()
}

/// A CUDA context on device 0.
pub struct Gpu {
    driver: Driver,
    context: Handle,
}

// SAFETY: the driver API is thread-safe; every use sets the context current
// on the calling thread first, and `lock` serializes the tests.
unsafe impl Send for Gpu {}
unsafe impl Sync for Gpu {}

static GPU: OnceLock<Result<Gpu, String>> = OnceLock::new();
static LOCK: Mutex<()> = Mutex::new(());

impl Gpu {
    /// The shared context and a guard serializing GPU tests, or why there is
    /// no GPU.
    pub fn get() -> Result<(&'static Gpu, MutexGuard<'static, ()>), String> {
        let gpu = GPU.get_or_init(Gpu::init).as_ref().map_err(Clone::clone)?;
        let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        gpu.check(
            unsafe { (gpu.driver.cuCtxSetCurrent)(gpu.context) },
            "cuCtxSetCurrent",
        )?;
        Ok((gpu, guard))
    }

    fn init() -> Result<Gpu, String> {
        let lib = open(&["libcuda.so.1", "libcuda.so"])?;
        let driver = Driver::load(lib)?;
        let mut gpu = Gpu {
            driver,
            context: std::ptr::null_mut(),
        };
        // SAFETY: plain driver calls with valid out-pointers.
        unsafe {
            gpu.check((gpu.driver.cuInit)(0), "cuInit")?;
            let mut device = 0;
            gpu.check((gpu.driver.cuDeviceGet)(&mut device, 0), "cuDeviceGet")?;
            let mut ctx = std::ptr::null_mut();
            gpu.check(
                (gpu.driver.cuDevicePrimaryCtxRetain)(&mut ctx, device),
                "cuDevicePrimaryCtxRetain",
            )?;
            gpu.context = ctx;
        }
        Ok(gpu)
    }

    fn check(&self, r: CuResult, what: &str) -> Result<(), String> {
        if r == 0 {
            return Ok(());
        }
        let mut s: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorString writes a static string pointer.
        let text = unsafe {
            (self.driver.cuGetErrorString)(r, &mut s);
            if s.is_null() {
                format!("error {r}")
            } else {
                CStr::from_ptr(s).to_string_lossy().into_owned()
            }
        };
        Err(format!("{what}: {text}"))
    }

    fn alloc(&self, bytes: usize) -> Result<DeviceBuffer<'_>, String> {
        let mut ptr = 0;
        // SAFETY: valid out-pointer.
        unsafe {
            self.check(
                (self.driver.cuMemAlloc_v2)(&mut ptr, bytes.max(256)),
                "cuMemAlloc",
            )?;
            self.check(
                (self.driver.cuMemsetD8_v2)(ptr, 0, bytes.max(256)),
                "cuMemset",
            )?;
        }
        Ok(DeviceBuffer { gpu: self, ptr })
    }

    fn upload(&self, dst: CuDeviceptr, bytes: &[u8]) -> Result<(), String> {
        // SAFETY: `dst` has room for `bytes` (callers place within allocations).
        unsafe {
            self.check(
                (self.driver.cuMemcpyHtoD_v2)(dst, bytes.as_ptr().cast(), bytes.len()),
                "cuMemcpyHtoD",
            )
        }
    }

    fn download(&self, src: CuDeviceptr, len: usize) -> Result<Vec<u8>, String> {
        let mut out = vec![0u8; len];
        // SAFETY: `out` has `len` bytes.
        unsafe {
            self.check(
                (self.driver.cuMemcpyDtoH_v2)(out.as_mut_ptr().cast(), src, len),
                "cuMemcpyDtoH",
            )?;
        }
        Ok(out)
    }

    fn sync(&self, what: &str) -> Result<(), String> {
        // SAFETY: no arguments.
        self.check(unsafe { (self.driver.cuCtxSynchronize)() }, what)
    }
}

struct DeviceBuffer<'g> {
    gpu: &'g Gpu,
    ptr: CuDeviceptr,
}

impl Drop for DeviceBuffer<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAlloc.
        unsafe {
            (self.gpu.driver.cuMemFree_v2)(self.ptr);
        }
    }
}

/// Compiles `source` to an sm_90a cubin with nvcc when found (unless
/// `AOTUNE_GPU_COMPILER=nvrtc`), else with NVRTC.
pub fn compile(source: &str, label: &str) -> Result<Vec<u8>, String> {
    let force_nvrtc = std::env::var("AOTUNE_GPU_COMPILER").is_ok_and(|v| v == "nvrtc");
    if !force_nvrtc {
        if let Ok(n) = nvcc::find() {
            return nvcc::compile_cubin(&n, source, label).map(|(cubin, _)| cubin);
        }
    }
    compile_nvrtc(source, label)
}

fn compile_nvrtc(source: &str, label: &str) -> Result<Vec<u8>, String> {
    let lib = open(&[
        "libnvrtc.so.13",
        "/usr/local/cuda/lib64/libnvrtc.so.13",
        "libnvrtc.so",
    ])?;
    let api = Nvrtc::load(lib)?;
    let mut options = vec![
        "--gpu-architecture=sm_90a".to_string(),
        "--std=c++17".to_string(),
    ];
    let roots = [
        std::env::var("CUDA_HOME").unwrap_or_default(),
        "/usr/local/cuda".to_string(),
    ];
    for root in roots.iter().filter(|r| !r.is_empty()) {
        for dir in [format!("{root}/include"), format!("{root}/include/cccl")] {
            if std::path::Path::new(&dir).is_dir() {
                options.push(format!("-I{dir}"));
            }
        }
    }
    let c_source = CString::new(source).map_err(|e| e.to_string())?;
    let c_name = CString::new(format!("{label}.cu")).map_err(|e| e.to_string())?;
    let c_options: Vec<CString> = options
        .iter()
        .map(|o| CString::new(o.as_str()).unwrap_or_default())
        .collect();
    let option_ptrs: Vec<*const c_char> = c_options.iter().map(|o| o.as_ptr()).collect();
    let mut prog: Handle = std::ptr::null_mut();
    // SAFETY: NVRTC calls with valid strings and out-pointers; the program
    // is destroyed on every path.
    unsafe {
        if (api.nvrtcCreateProgram)(
            &mut prog,
            c_source.as_ptr(),
            c_name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        ) != 0
        {
            return Err("nvrtcCreateProgram failed".into());
        }
        let status =
            (api.nvrtcCompileProgram)(prog, option_ptrs.len() as c_int, option_ptrs.as_ptr());
        let mut log_size = 0usize;
        (api.nvrtcGetProgramLogSize)(prog, &mut log_size);
        let mut log = vec![0u8; log_size.max(1)];
        (api.nvrtcGetProgramLog)(prog, log.as_mut_ptr().cast());
        if status != 0 {
            (api.nvrtcDestroyProgram)(&mut prog);
            return Err(format!(
                "NVRTC failed ({options:?}):\n{}",
                String::from_utf8_lossy(&log)
            ));
        }
        let mut size = 0usize;
        (api.nvrtcGetCUBINSize)(prog, &mut size);
        let mut cubin = vec![0u8; size];
        (api.nvrtcGetCUBIN)(prog, cubin.as_mut_ptr().cast());
        (api.nvrtcDestroyProgram)(&mut prog);
        Ok(cubin)
    }
}

/// Storage bytes of f32 values in `dtype`.
pub fn encode(values: &[f32], dtype: DType) -> Vec<u8> {
    match dtype {
        DType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 => values
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes())
            .collect(),
        DType::BF16 => values
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_bits().to_le_bytes())
            .collect(),
    }
}

pub fn decode(bytes: &[u8], dtype: DType) -> Vec<f32> {
    match dtype {
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        DType::F16 => bytes
            .chunks_exact(2)
            .map(|b| half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
            .collect(),
        DType::BF16 => bytes
            .chunks_exact(2)
            .map(|b| half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
            .collect(),
    }
}

/// Physical offset of each logical row-major index of a value.
fn physical_offsets(shape: &[usize], layout: Layout) -> Vec<usize> {
    let total: usize = shape.iter().product();
    if shape.len() != 4 || layout == Layout::RowMajor {
        return (0..total).collect();
    }
    let strides = layout.strides(shape);
    let mut out = Vec::with_capacity(total);
    for i in 0..total {
        let (mut rest, mut offset) = (i, 0);
        for axis in (0..4).rev() {
            offset += (rest % shape[axis]) * strides[axis];
            rest /= shape[axis];
        }
        out.push(offset);
    }
    out
}

pub fn to_physical(logical: &[f32], shape: &[usize], layout: Layout) -> Vec<f32> {
    let mut out = vec![0.0; logical.len()];
    for (i, p) in physical_offsets(shape, layout).into_iter().enumerate() {
        out[p] = logical[i];
    }
    out
}

pub fn to_logical(physical: &[f32], shape: &[usize], layout: Layout) -> Vec<f32> {
    physical_offsets(shape, layout)
        .into_iter()
        .map(|p| physical[p])
        .collect()
}

/// Launch outputs: the node (when traced) and its logical f32 values.
pub type Outputs = Vec<(Option<NodeId>, Vec<f32>)>;

/// A module loaded and ready to run one graph's launch table.
pub struct Loaded<'g> {
    gpu: &'g Gpu,
    module: Handle,
    functions: Vec<Handle>,
    arena: DeviceBuffer<'g>,
    /// Kept alive for the launches that point into it.
    _weights: DeviceBuffer<'g>,
    /// Device pointer of every launch argument.
    args: Vec<Vec<CuDeviceptr>>,
}

impl Drop for Loaded<'_> {
    fn drop(&mut self) {
        // SAFETY: loaded by cuModuleLoadData.
        unsafe {
            (self.gpu.driver.cuModuleUnload)(self.module);
        }
    }
}

impl<'g> Loaded<'g> {
    /// Loads `cubin`, uploads the constants the launches read, allocates
    /// the arena.
    pub fn new(
        gpu: &'g Gpu,
        graph: &Graph,
        plan: &MemoryPlan,
        m: &CudaModule,
        cubin: &[u8],
    ) -> Result<Self, String> {
        let mut module: Handle = std::ptr::null_mut();
        // SAFETY: `cubin` is a complete image.
        unsafe {
            gpu.check(
                (gpu.driver.cuModuleLoadData)(&mut module, cubin.as_ptr().cast()),
                "cuModuleLoadData",
            )?;
        }
        let mut functions = Vec::new();
        for name in &m.kernels {
            let c = CString::new(name.as_str()).map_err(|e| e.to_string())?;
            let mut f: Handle = std::ptr::null_mut();
            // SAFETY: valid module and name.
            unsafe {
                gpu.check(
                    (gpu.driver.cuModuleGetFunction)(&mut f, module, c.as_ptr()),
                    &format!("cuModuleGetFunction {name}"),
                )?;
            }
            functions.push(f);
        }
        for l in &m.launches {
            // Opt in whenever there is dynamic shared memory: above 48 KiB of
            // static + dynamic a launch fails without it (the runtime does
            // the same in `configure_kernels`).
            if l.smem_bytes > 0 {
                // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
                // SAFETY: valid function handle.
                unsafe {
                    gpu.check(
                        (gpu.driver.cuFuncSetAttribute)(
                            functions[l.kernel as usize],
                            8,
                            l.smem_bytes as c_int,
                        ),
                        "cuFuncSetAttribute",
                    )?;
                }
            }
        }
        // Weight blob: every constant a launch reads, 256-byte aligned.
        let mut blob = Vec::new();
        let mut constant_at: HashMap<ValueId, usize> = HashMap::new();
        for l in &m.launches {
            for &v in &l.args {
                let value = graph.value(v);
                if let Some(data) = value.constant_data() {
                    constant_at.entry(v).or_insert_with(|| {
                        blob.resize(blob.len().next_multiple_of(256), 0);
                        let at = blob.len();
                        blob.extend(encode(data, value.dtype));
                        at
                    });
                }
            }
        }
        let weights = gpu.alloc(blob.len())?;
        gpu.upload(weights.ptr, &blob)?;
        let arena = gpu.alloc(plan.arena_bytes)?;
        let mut args = Vec::new();
        for l in &m.launches {
            let mut ptrs = Vec::new();
            for &v in &l.args {
                let p = match constant_at.get(&v) {
                    Some(&at) => weights.ptr + at as u64,
                    None => {
                        let b = plan
                            .buffer(v)
                            .ok_or_else(|| format!("%{} not planned", v.0))?;
                        arena.ptr + b.offset as u64
                    }
                };
                ptrs.push(p);
            }
            args.push(ptrs);
        }
        Ok(Loaded {
            gpu,
            module,
            functions,
            arena,
            _weights: weights,
            args,
        })
    }

    /// Writes the graph inputs (logical row-major f32) into the arena.
    pub fn feed(&self, graph: &Graph, plan: &MemoryPlan, inputs: &[&[f32]]) -> Result<(), String> {
        for (&id, data) in graph.inputs.iter().zip(inputs) {
            let value = graph.value(id);
            let b = plan.buffer(id).ok_or("input not planned")?;
            let bytes = encode(&to_physical(data, &value.shape, value.layout), value.dtype);
            self.gpu.upload(self.arena.ptr + b.offset as u64, &bytes)?;
        }
        Ok(())
    }

    /// Launches `m.launches[i]`.
    pub fn launch(&self, m: &CudaModule, i: usize) -> Result<(), String> {
        let l = &m.launches[i];
        let mut values: Vec<CuDeviceptr> = self.args[i].clone();
        let mut params: Vec<*mut c_void> = values
            .iter_mut()
            .map(|p| (p as *mut CuDeviceptr).cast())
            .collect();
        // SAFETY: one pointer-sized parameter per kernel argument, as the
        // wrapper declares them.
        unsafe {
            self.gpu.check(
                (self.gpu.driver.cuLaunchKernel)(
                    self.functions[l.kernel as usize],
                    l.grid[0],
                    l.grid[1],
                    l.grid[2],
                    l.block[0],
                    l.block[1],
                    l.block[2],
                    l.smem_bytes,
                    std::ptr::null_mut(),
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                ),
                &format!("launch {i} ({})", m.kernels[l.kernel as usize]),
            )
        }
    }

    /// Fills value `v`'s bytes with 0xFF (NaN in every storage type), so a
    /// kernel that fails to write an element cannot pass a comparison.
    pub fn poison(&self, graph: &Graph, plan: &MemoryPlan, v: ValueId) -> Result<(), String> {
        let b = plan.buffer(v).ok_or("value not planned")?;
        // SAFETY: the value lies inside the arena.
        unsafe {
            self.gpu.check(
                (self.gpu.driver.cuMemsetD8_v2)(
                    self.arena.ptr + b.offset as u64,
                    0xff,
                    graph.value(v).bytes(),
                ),
                "cuMemset",
            )
        }
    }

    /// Synchronizes, naming `what` in the error.
    pub fn sync(&self, what: &str) -> Result<(), String> {
        self.gpu.sync(what)
    }

    /// Reads value `v` back as logical row-major f32.
    pub fn read(&self, graph: &Graph, plan: &MemoryPlan, v: ValueId) -> Result<Vec<f32>, String> {
        let value = graph.value(v);
        let b = plan.buffer(v).ok_or("value not planned")?;
        let bytes = self
            .gpu
            .download(self.arena.ptr + b.offset as u64, value.bytes())?;
        Ok(to_logical(
            &decode(&bytes, value.dtype),
            &value.shape,
            value.layout,
        ))
    }

    /// Runs every launch; with `trace`, poisons each launch's output with
    /// NaN first, synchronizes after each and returns
    /// each launch's output (node, logical f32), else returns the graph
    /// outputs in order.
    pub fn run(
        &self,
        graph: &Graph,
        plan: &MemoryPlan,
        m: &CudaModule,
        trace: bool,
    ) -> Result<Outputs, String> {
        let mut out = Vec::new();
        for (i, l) in m.launches.iter().enumerate() {
            let output = graph.node(l.node).output;
            if trace && !shares_memory_with_an_input(graph, plan, l.node) {
                // NaN in every element, so an unwritten one shows.
                self.poison(graph, plan, output)?;
            }
            self.launch(m, i)?;
            if trace {
                self.gpu.sync(&format!(
                    "after launch {i} ({})",
                    m.kernels[l.kernel as usize]
                ))?;
                let output = graph.node(l.node).output;
                out.push((Some(l.node), self.read(graph, plan, output)?));
            }
        }
        self.gpu.sync("forward pass")?;
        if !trace {
            for &v in &graph.outputs {
                out.push((None, self.read(graph, plan, v)?));
            }
        }
        Ok(out)
    }

    /// Mean µs of the whole launch sequence over `iterations` (after two
    /// warm-up passes), and of each launch measured on its own.
    pub fn time(&self, m: &CudaModule, iterations: usize) -> Result<(f64, Vec<f64>), String> {
        let d = &self.gpu.driver;
        let g = self.gpu;
        let mut start: Handle = std::ptr::null_mut();
        let mut stop: Handle = std::ptr::null_mut();
        // SAFETY: event calls with valid handles on the current context.
        unsafe {
            g.check((d.cuEventCreate)(&mut start, 0), "cuEventCreate")?;
            g.check((d.cuEventCreate)(&mut stop, 0), "cuEventCreate")?;
        }
        let elapsed = |f: &dyn Fn() -> Result<(), String>| -> Result<f64, String> {
            let mut ms = 0f32;
            // SAFETY: as above.
            unsafe {
                g.check(
                    (d.cuEventRecord)(start, std::ptr::null_mut()),
                    "cuEventRecord",
                )?;
                f()?;
                g.check(
                    (d.cuEventRecord)(stop, std::ptr::null_mut()),
                    "cuEventRecord",
                )?;
                g.check((d.cuEventSynchronize)(stop), "cuEventSynchronize")?;
                g.check(
                    (d.cuEventElapsedTime)(&mut ms, start, stop),
                    "cuEventElapsedTime",
                )?;
            }
            Ok(f64::from(ms) * 1000.0)
        };
        let all = || -> Result<(), String> {
            for i in 0..m.launches.len() {
                self.launch(m, i)?;
            }
            Ok(())
        };
        all()?;
        all()?;
        self.gpu.sync("warm-up")?;
        let total = elapsed(&|| {
            for _ in 0..iterations {
                all()?;
            }
            Ok(())
        })? / iterations as f64;
        let mut each = Vec::new();
        for i in 0..m.launches.len() {
            let t = elapsed(&|| {
                for _ in 0..iterations {
                    self.launch(m, i)?;
                }
                Ok(())
            })?;
            each.push(t / iterations as f64);
        }
        // SAFETY: created above.
        unsafe {
            (d.cuEventDestroy_v2)(start);
            (d.cuEventDestroy_v2)(stop);
        }
        Ok((total, each))
    }
}

/// True when `node`'s output lies in memory one of its inputs occupies
/// (an in-place launch), which poisoning would destroy.
fn shares_memory_with_an_input(graph: &Graph, plan: &MemoryPlan, node: NodeId) -> bool {
    let n = graph.node(node);
    let Some(out) = plan.buffer(n.output) else {
        return false;
    };
    let (start, end) = (out.offset, out.offset + graph.value(n.output).bytes());
    n.inputs.iter().any(|&v| {
        plan.buffer(v).is_some_and(|b| {
            let (s, e) = (b.offset, b.offset + graph.value(v).bytes());
            s < end && start < e
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_and_dtypes_round_trip() {
        let shape = [2usize, 3, 2, 2];
        let logical: Vec<f32> = (0..24).map(|i| i as f32 * 0.5).collect();
        let nhwc = to_physical(&logical, &shape, Layout::ChannelsLast);
        // (n=0, c=1, h=0, w=0) is physical index 1 in NHWC.
        assert_eq!(nhwc[1], logical[4]);
        assert_eq!(to_logical(&nhwc, &shape, Layout::ChannelsLast), logical);
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            assert_eq!(decode(&encode(&logical, dtype), dtype), logical, "{dtype}");
        }
        assert_eq!(encode(&[1.0], DType::F16), vec![0x00, 0x3c]);
        assert_eq!(encode(&[1.0], DType::BF16), vec![0x80, 0x3f]);
    }
}
