//! The CUDA driver calls the runtime makes, as small owning wrappers over
//! cudarc's `result`/`sys` layer: streams, device and pinned host buffers,
//! modules and functions, events, captured graphs, kernel launches with a
//! `void**` parameter array, and async copies.
//!
//! This file, `matmul.rs` (cuBLASLt) and the launch/copy calls in
//! `model.rs` are the runtime's only `unsafe` code. Every wrapper holds an `Arc` of the (primary) context it was
//! made in and binds that context before freeing itself, so drop order only
//! matters where one object refers to another's memory (a graph to the
//! buffers its nodes use); `Model` orders its fields for that. Methods other
//! than `Drop` expect the caller to have bound the context already (the model
//! does so at the start of every public method), so that hot paths make no
//! redundant driver calls. Drops ignore driver errors: nothing can be done
//! about them there, and panicking in `Drop` would abort.

use std::ffi::{c_void, CString};
use std::sync::{Arc, OnceLock};

use cudarc::driver::result::{self, DriverError};
use cudarc::driver::sys;
use cudarc::driver::CudaContext;

/// A device address (`CUdeviceptr`).
pub(crate) type DevicePtr = sys::CUdeviceptr;

/// Whether `libcuda` can be loaded at all. cudarc panics on its first driver
/// call when it cannot, so every entry point checks this first.
pub(crate) fn driver_library_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: `is_culib_present` only tries to `dlopen` the driver library
    // under its known names (and closes it again); it runs no CUDA code.
    *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() })
}

/// `cuInit(0)`. Requires [`driver_library_present`].
pub(crate) fn init() -> Result<(), DriverError> {
    result::init()
}

/// `cuDriverGetVersion`: the newest CUDA version the driver supports.
pub(crate) fn driver_version() -> Result<i32, DriverError> {
    let mut version = 0;
    // SAFETY: the call writes one `int` through a valid pointer.
    unsafe { sys::cuDriverGetVersion(&mut version) }.result()?;
    Ok(version)
}

/// `cuDeviceGetCount`.
pub(crate) fn device_count() -> Result<usize, DriverError> {
    result::device::get_count().map(|n| n.max(0) as usize)
}

/// Retains the device's primary context (released when the last `Arc` drops)
/// and binds it to this thread.
pub(crate) fn retain_primary_context(ordinal: usize) -> Result<Arc<CudaContext>, DriverError> {
    CudaContext::new(ordinal)
}

/// `(free, total)` device memory of the current context's device.
pub(crate) fn memory_info() -> Result<(usize, usize), DriverError> {
    result::mem_get_info()
}

/// The device's name and total memory.
pub(crate) fn device_name_and_memory(ctx: &CudaContext) -> Result<(String, usize), DriverError> {
    let name = result::device::get_name(ctx.cu_device())?;
    // SAFETY: the device handle comes from a context cudarc created for it.
    let total = unsafe { result::device::total_mem(ctx.cu_device()) }?;
    Ok((name, total))
}

/// A non-blocking stream (it does not synchronize with the legacy stream 0).
pub(crate) struct Stream {
    raw: sys::CUstream,
    ctx: Arc<CudaContext>,
}

impl Stream {
    pub(crate) fn new(ctx: &Arc<CudaContext>) -> Result<Self, DriverError> {
        let raw = result::stream::create(result::stream::StreamKind::NonBlocking)?;
        Ok(Stream {
            raw,
            ctx: ctx.clone(),
        })
    }

    /// The `CUstream`, for libraries that enqueue on it (cuBLASLt).
    pub(crate) fn raw(&self) -> sys::CUstream {
        self.raw
    }

    pub(crate) fn synchronize(&self) -> Result<(), DriverError> {
        // SAFETY: `raw` is a live stream owned by `self`.
        unsafe { result::stream::synchronize(self.raw) }
    }

    /// Makes this stream's later work wait for the work before `event`'s
    /// last record (on any stream of the same context); the host does not
    /// wait.
    pub(crate) fn wait(&self, event: &Event) -> Result<(), DriverError> {
        // SAFETY: both handles are live (owned by `self` and `event`).
        unsafe {
            result::stream::wait_event(
                self.raw,
                event.raw,
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        }
    }

    /// Starts recording this stream's work into a graph instead of running
    /// it. Thread-local mode: other threads' CUDA calls are not affected.
    pub(crate) fn begin_capture(&self) -> Result<(), DriverError> {
        // SAFETY: `raw` is a live, non-legacy stream owned by `self`.
        unsafe {
            result::stream::begin_capture(
                self.raw,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        }
    }

    /// Ends a capture started with [`Stream::begin_capture`]; the stream runs
    /// work normally again whether or not the capture succeeded.
    pub(crate) fn end_capture(&self) -> Result<Graph, DriverError> {
        // SAFETY: `raw` is a live stream owned by `self`.
        let raw = unsafe { result::stream::end_capture(self.raw) }?;
        Ok(Graph {
            raw,
            ctx: self.ctx.clone(),
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: `raw` is owned by `self` and destroyed once; pending work
        // still completes (the driver releases the stream afterwards).
        let _ = unsafe { result::stream::destroy(self.raw) };
    }
}

/// Device memory from `cuMemAlloc`; zero bytes allocate nothing (address 0).
pub(crate) struct DeviceBuffer {
    ptr: DevicePtr,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

impl DeviceBuffer {
    pub(crate) fn alloc(ctx: &Arc<CudaContext>, bytes: usize) -> Result<Self, DriverError> {
        let ptr = if bytes == 0 {
            0
        } else {
            // SAFETY: plain allocation; the memory is only used as bytes.
            unsafe { result::malloc_sync(bytes) }?
        };
        Ok(DeviceBuffer {
            ptr,
            bytes,
            ctx: ctx.clone(),
        })
    }

    pub(crate) fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Copies `data` (at most `bytes()` long) to the start of the buffer,
    /// ordered on `stream`. `data` may be pageable: the driver stages it
    /// before returning; the copy is complete once `stream` is synchronized.
    /// (The synchronous `cuMemcpyHtoD` would run on the legacy stream, which
    /// a non-blocking stream does not wait for.)
    pub(crate) fn upload(&mut self, data: &[u8], stream: &Stream) -> Result<(), DriverError> {
        if data.is_empty() {
            return Ok(());
        }
        if data.len() > self.bytes {
            return Err(DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE));
        }
        // SAFETY: the destination holds `bytes >= data.len()` bytes; the
        // caller keeps `data` alive until it synchronizes `stream`.
        unsafe { result::memcpy_htod_async(self.ptr, data, stream.raw) }
    }

    /// Sets every byte to zero, ordered on `stream`.
    pub(crate) fn zero(&mut self, stream: &Stream) -> Result<(), DriverError> {
        self.fill(0, stream)
    }

    /// Sets every byte to `byte`, ordered on `stream`.
    pub(crate) fn fill(&mut self, byte: u8, stream: &Stream) -> Result<(), DriverError> {
        if self.bytes == 0 {
            return Ok(());
        }
        // SAFETY: the range is exactly this allocation.
        unsafe { result::memset_d8_async(self.ptr, byte, self.bytes, stream.raw) }
    }

    /// Synchronous upload (at load and in tests), complete on return:
    /// copies, then synchronizes the whole context.
    pub(crate) fn upload_blocking(&mut self, data: &[u8]) -> Result<(), DriverError> {
        if data.len() > self.bytes {
            return Err(DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE));
        }
        // SAFETY: the destination holds `bytes >= data.len()` bytes.
        unsafe { result::memcpy_htod_sync(self.ptr, data) }?;
        self.ctx.synchronize()
    }

    /// Synchronous copy of the start of the buffer into `out`.
    #[cfg(any(feature = "cli", test))]
    pub(crate) fn download(&self, out: &mut [u8]) -> Result<(), DriverError> {
        if out.len() > self.bytes {
            return Err(DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE));
        }
        // SAFETY: the source holds `bytes >= out.len()` bytes; synchronous.
        unsafe { result::memcpy_dtoh_sync(out, self.ptr) }
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ptr != 0 {
            let _ = self.ctx.bind_to_thread();
            // SAFETY: allocated by `cuMemAlloc` in `alloc`, freed once; the
            // owner has synchronized the work that used it.
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

/// Page-locked host memory from `cuMemHostAlloc`, zero-initialized, usable
/// as the host side of async copies and of captured memcpy graph nodes.
pub(crate) struct PinnedBuffer {
    ptr: *mut u8,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: the buffer is owned memory like a `Box<[u8]>`; the driver accepts
// it from any thread once the context is bound. Shared references only read
// it (`as_f32`, `as_bytes`), so sharing is as sound as for `Box<[u8]>`.
unsafe impl Send for PinnedBuffer {}
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    pub(crate) fn alloc(ctx: &Arc<CudaContext>, bytes: usize) -> Result<Self, DriverError> {
        let ptr = if bytes == 0 {
            std::ptr::null_mut()
        } else {
            // SAFETY: plain allocation; zeroed below before any read.
            let ptr = unsafe { result::malloc_host(bytes, 0) }? as *mut u8;
            // SAFETY: `ptr` is a fresh allocation of `bytes` bytes.
            unsafe { std::ptr::write_bytes(ptr, 0, bytes) };
            ptr
        };
        Ok(PinnedBuffer {
            ptr,
            bytes,
            ctx: ctx.clone(),
        })
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The buffer as f32s (`bytes / 4` of them). Page-locked memory is page aligned.
    pub(crate) fn as_f32(&self) -> &[f32] {
        if self.ptr.is_null() {
            return &[];
        }
        // SAFETY: page-aligned, initialized, `bytes / 4` whole f32s; any bit
        // pattern is a valid f32.
        unsafe { std::slice::from_raw_parts(self.ptr as *const f32, self.bytes / 4) }
    }

    pub(crate) fn as_f32_mut(&mut self) -> &mut [f32] {
        if self.ptr.is_null() {
            return &mut [];
        }
        // SAFETY: as in `as_f32`, and `&mut self` makes the view unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut f32, self.bytes / 4) }
    }

    /// The buffer as bytes, read-only.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        if self.ptr.is_null() {
            return &[];
        }
        // SAFETY: initialized and `bytes` long.
        unsafe { std::slice::from_raw_parts(self.ptr, self.bytes) }
    }

    /// The buffer as bytes.
    pub(crate) fn as_bytes_mut(&mut self) -> &mut [u8] {
        if self.ptr.is_null() {
            return &mut [];
        }
        // SAFETY: initialized, `bytes` long, and `&mut self` makes the view unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.bytes) }
    }

    /// The buffer as f16s (`bytes / 2` of them).
    pub(crate) fn as_f16_mut(&mut self) -> &mut [half::f16] {
        if self.ptr.is_null() {
            return &mut [];
        }
        // SAFETY: page-aligned, initialized, `bytes / 2` whole f16s (a
        // transparent u16: any bit pattern is valid); the view is unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut half::f16, self.bytes / 2) }
    }

    /// The buffer as bf16s (`bytes / 2` of them).
    pub(crate) fn as_bf16_mut(&mut self) -> &mut [half::bf16] {
        if self.ptr.is_null() {
            return &mut [];
        }
        // SAFETY: as in `as_f16_mut`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut half::bf16, self.bytes / 2) }
    }

    /// The host address, for copies recorded into graphs.
    fn host_ptr(&self) -> *mut c_void {
        self.ptr as *mut c_void
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            let _ = self.ctx.bind_to_thread();
            // SAFETY: allocated by `cuMemHostAlloc`, freed once; graphs that
            // copy from or to it were destroyed first (field order in `Model`).
            let _ = unsafe { result::free_host(self.ptr as *mut c_void) };
        }
    }
}

/// A loaded kernel image (cubin, fatbin or PTX).
pub(crate) struct Module {
    raw: sys::CUmodule,
    ctx: Arc<CudaContext>,
}

impl Module {
    /// `cuModuleLoadData`. The image is first copied into an 8-byte aligned
    /// buffer with a trailing NUL, so embedded `include_bytes!` data (align 1)
    /// and PTX text without a terminator both load.
    pub(crate) fn load(ctx: &Arc<CudaContext>, image: &[u8]) -> Result<Self, DriverError> {
        let mut words = vec![0u64; image.len() / 8 + 1];
        // SAFETY: `words` holds `8 * (len / 8 + 1) > len` bytes and does not
        // overlap `image`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                image.as_ptr(),
                words.as_mut_ptr() as *mut u8,
                image.len(),
            )
        };
        // SAFETY: the driver reads the image (whose format it checks) during
        // the call only; `words` outlives the call.
        let raw = unsafe { result::module::load_data(words.as_ptr() as *const c_void) }?;
        Ok(Module {
            raw,
            ctx: ctx.clone(),
        })
    }

    /// `cuModuleGetFunction`; `CUDA_ERROR_NOT_FOUND` when the symbol is absent.
    pub(crate) fn function(&self, symbol: &str) -> Result<Function, DriverError> {
        let name = CString::new(symbol)
            .map_err(|_| DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE))?;
        // SAFETY: `raw` is a loaded module owned by `self`.
        let raw = unsafe { result::module::get_function(self.raw, name) }?;
        Ok(Function(raw))
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: loaded in `load`, unloaded once, after every graph and
        // launch that used its functions (field order in `Model`).
        let _ = unsafe { result::module::unload(self.raw) };
    }
}

/// A kernel in a [`Module`]; valid while the module is loaded.
#[derive(Clone, Copy)]
pub(crate) struct Function(sys::CUfunction);

impl Function {
    fn attribute(self, attribute: sys::CUfunction_attribute) -> Result<i32, DriverError> {
        // SAFETY: the function's module is loaded (see the type's contract).
        unsafe { result::function::get_function_attribute(self.0, attribute) }
    }

    /// Most threads a block of this kernel may have (register use included).
    pub(crate) fn max_threads_per_block(self) -> Result<i32, DriverError> {
        self.attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
    }

    /// Statically declared shared memory per block.
    pub(crate) fn static_shared_bytes(self) -> Result<i32, DriverError> {
        self.attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
    }

    /// Lets launches of this kernel ask for up to `bytes` of dynamic shared
    /// memory (needed above 48 KiB).
    pub(crate) fn set_max_dynamic_shared_bytes(self, bytes: i32) -> Result<(), DriverError> {
        // SAFETY: the function's module is loaded.
        unsafe {
            result::function::set_function_attribute(
                self.0,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes,
            )
        }
    }
}

/// A device attribute of the context's device.
pub(crate) fn device_attribute(
    ctx: &CudaContext,
    attribute: sys::CUdevice_attribute,
) -> Result<i32, DriverError> {
    ctx.attribute(attribute)
}

pub(crate) use sys::CUdevice_attribute as DeviceAttribute;

/// The `void**` array `cuLaunchKernel` takes: one pointer per kernel
/// parameter, each pointing at that parameter's value (here always an
/// 8-byte device address). Built once at load; launching reads it only.
pub(crate) struct KernelParams {
    /// The parameter values. Never touched after `new`: `pointers` point
    /// into this allocation, which stays put when the struct moves.
    values: Vec<u64>,
    pointers: Vec<*mut c_void>,
}

// SAFETY: the pointers only point into `values`, which the struct owns; the
// struct behaves like the `Vec<u64>` it wraps.
unsafe impl Send for KernelParams {}

impl KernelParams {
    pub(crate) fn new(mut values: Vec<u64>) -> Self {
        let base = values.as_mut_ptr();
        // `wrapping_add` keeps this free of `unsafe`; `i < len` makes every
        // pointer in bounds.
        let pointers = (0..values.len())
            .map(|i| base.wrapping_add(i) as *mut c_void)
            .collect();
        KernelParams { values, pointers }
    }

    /// The parameter values (device addresses), for messages.
    pub(crate) fn values(&self) -> &[u64] {
        &self.values
    }
}

/// `cuLaunchKernel` on `stream` (recorded as a kernel node when the stream is
/// capturing: the driver copies the parameter values at that moment).
///
/// # Safety
///
/// `function` belongs to a loaded module; `params` matches the kernel's
/// parameter list (count and 8-byte pointer types); every pointer in it is
/// device memory of the current context that stays allocated until the
/// launch (or every launch of a graph recording it) has finished, large
/// enough for everything the kernel reads and writes there.
#[cfg(feature = "cli")]
pub(crate) unsafe fn launch(
    function: Function,
    grid: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
    stream: &Stream,
    params: &KernelParams,
) -> Result<(), DriverError> {
    launch_with(function, grid, block, shared_bytes, stream, params, false)
}

/// [`launch`], optionally as a programmatic dependent launch (sm_90): the
/// kernel may start while the previous kernel on the stream finishes, and
/// waits for it inside (`griddepcontrol.wait`, which every generated kernel
/// executes before touching memory). Captured into a graph it becomes a
/// programmatic edge.
///
/// # Safety
///
/// As [`launch`]; with `programmatic`, the kernel must not read or write
/// memory before `griddepcontrol.wait`.
pub(crate) unsafe fn launch_with(
    function: Function,
    grid: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
    stream: &Stream,
    params: &KernelParams,
    programmatic: bool,
) -> Result<(), DriverError> {
    if programmatic {
        // SAFETY: all-zero bytes are a valid value of this plain C union.
        let mut value: sys::CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
        value.programmaticStreamSerializationAllowed = 1;
        let mut attribute = sys::CUlaunchAttribute {
            id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            pad: [0; 4],
            value,
        };
        let config = sys::CUlaunchConfig {
            gridDimX: grid[0],
            gridDimY: grid[1],
            gridDimZ: grid[2],
            blockDimX: block[0],
            blockDimY: block[1],
            blockDimZ: block[2],
            sharedMemBytes: shared_bytes,
            hStream: stream.raw,
            attrs: &mut attribute,
            numAttrs: 1,
        };
        // SAFETY: `config` and `attribute` live across the call; the rest is
        // the caller's contract, as for `cuLaunchKernel`.
        return unsafe {
            sys::cuLaunchKernelEx(
                &config,
                function.0,
                params.pointers.as_ptr().cast_mut(),
                std::ptr::null_mut(),
            )
        }
        .result();
    }
    // The driver only reads the parameter array (the C signature lacks `const`).
    sys::cuLaunchKernel(
        function.0,
        grid[0],
        grid[1],
        grid[2],
        block[0],
        block[1],
        block[2],
        shared_bytes,
        stream.raw,
        params.pointers.as_ptr().cast_mut(),
        std::ptr::null_mut(),
    )
    .result()
}

/// Async copy of all of `src` to device address `dst` on `stream`.
///
/// # Safety
///
/// `dst` is device memory with room for `src.bytes()` bytes; `src` stays
/// allocated and unwritten until the copy (or every launch of a graph that
/// recorded it) has finished.
pub(crate) unsafe fn copy_pinned_to_device(
    dst: DevicePtr,
    src: &PinnedBuffer,
    stream: &Stream,
) -> Result<(), DriverError> {
    if src.bytes == 0 {
        return Ok(());
    }
    sys::cuMemcpyHtoDAsync_v2(dst, src.host_ptr(), src.bytes, stream.raw).result()
}

/// Async copy of the first `bytes` bytes of `src` (all of it when `bytes`
/// is larger) to device address `dst` on `stream`.
///
/// # Safety
///
/// As [`copy_pinned_to_device`], for that many bytes.
pub(crate) unsafe fn copy_pinned_prefix_to_device(
    dst: DevicePtr,
    src: &PinnedBuffer,
    bytes: usize,
    stream: &Stream,
) -> Result<(), DriverError> {
    let bytes = bytes.min(src.bytes);
    if bytes == 0 {
        return Ok(());
    }
    sys::cuMemcpyHtoDAsync_v2(dst, src.host_ptr(), bytes, stream.raw).result()
}

/// Async copy of `bytes` bytes (at most `dst.bytes()`) from device address
/// `src` into the front of `dst`.
///
/// # Safety
///
/// As [`copy_device_to_pinned`], for that many bytes.
pub(crate) unsafe fn copy_device_to_pinned_prefix(
    dst: &mut PinnedBuffer,
    src: DevicePtr,
    bytes: usize,
    stream: &Stream,
) -> Result<(), DriverError> {
    let bytes = bytes.min(dst.bytes);
    if bytes == 0 {
        return Ok(());
    }
    sys::cuMemcpyDtoHAsync_v2(dst.host_ptr(), src, bytes, stream.raw).result()
}

/// Async copy of `dst.bytes()` bytes from device address `src` into `dst`.
///
/// # Safety
///
/// `src` is device memory holding `dst.bytes()` bytes; `dst` stays allocated
/// and unread until the copy (or every launch of a graph that recorded it)
/// has finished.
pub(crate) unsafe fn copy_device_to_pinned(
    dst: &mut PinnedBuffer,
    src: DevicePtr,
    stream: &Stream,
) -> Result<(), DriverError> {
    if dst.bytes == 0 {
        return Ok(());
    }
    sys::cuMemcpyDtoHAsync_v2(dst.host_ptr(), src, dst.bytes, stream.raw).result()
}

/// Async copy of `dst.len()` bytes from device address `src` into pageable
/// host memory; synchronize `stream` before reading `dst`.
///
/// # Safety
///
/// `src` is device memory holding `dst.len()` bytes; `dst` is neither read
/// nor freed until the stream has been synchronized.
pub(crate) unsafe fn copy_device_to_host(
    dst: &mut [u8],
    src: DevicePtr,
    stream: &Stream,
) -> Result<(), DriverError> {
    if dst.is_empty() {
        return Ok(());
    }
    result::memcpy_dtoh_async(dst, src, stream.raw)
}

/// Sets `bytes` bytes at `dst` to `byte`, ordered on `stream`.
///
/// # Safety
///
/// `dst` is device memory valid for `bytes` bytes.
pub(crate) unsafe fn fill_range(
    dst: DevicePtr,
    byte: u8,
    bytes: usize,
    stream: &Stream,
) -> Result<(), DriverError> {
    if bytes == 0 {
        return Ok(());
    }
    result::memset_d8_async(dst, byte, bytes, stream.raw)
}

/// Async device-to-device copy of `bytes` bytes.
///
/// # Safety
///
/// Both ranges are device memory valid for `bytes` bytes until the copy
/// has finished, and they do not overlap.
pub(crate) unsafe fn copy_device_to_device(
    dst: DevicePtr,
    src: DevicePtr,
    bytes: usize,
    stream: &Stream,
) -> Result<(), DriverError> {
    if bytes == 0 {
        return Ok(());
    }
    result::memcpy_dtod_async(dst, src, bytes, stream.raw)
}

/// Makes cudarc look up `cuMemcpyDtoDAsync` now rather than on the first
/// [`copy_device_to_device`]: cudarc resolves each driver entry point on its
/// first call, and that lookup makes one heap allocation (the symbol name
/// is copied to NUL-terminate it), which `Model::infer_device` must not.
/// [`copy_device_to_device`] skips zero-byte copies before reaching the
/// driver, so it cannot serve as the warm-up; this calls the entry point
/// directly with a zero-byte copy, which moves nothing whatever the driver
/// answers, so the answer is ignored.
pub(crate) fn resolve_device_to_device_copy(stream: &Stream) {
    // SAFETY: zero bytes: the driver reads and writes no memory.
    let _ = unsafe { sys::cuMemcpyDtoDAsync_v2(0, 0, 0, stream.raw) };
}

/// A captured (not yet instantiated) graph.
pub(crate) struct Graph {
    raw: sys::CUgraph,
    ctx: Arc<CudaContext>,
}

impl Graph {
    /// `cuGraphInstantiateWithFlags(.., 0)`. The executable graph is
    /// independent of `self`, which may be dropped afterwards.
    pub(crate) fn instantiate(&self) -> Result<GraphExec, DriverError> {
        // SAFETY: `raw` is a live graph owned by `self`.
        let raw =
            unsafe { result::graph::instantiate(self.raw, sys::CUgraphInstantiate_flags(0)) }?;
        Ok(GraphExec {
            raw,
            ctx: self.ctx.clone(),
        })
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: owned by `self`, destroyed once.
        let _ = unsafe { result::graph::destroy(self.raw) };
    }
}

/// An instantiated graph, launched as one unit.
pub(crate) struct GraphExec {
    raw: sys::CUgraphExec,
    ctx: Arc<CudaContext>,
}

impl GraphExec {
    /// `cuGraphLaunch` on `stream`. The memory the graph's nodes use must
    /// still be allocated: `Model` owns both and drops graphs first.
    pub(crate) fn launch(&self, stream: &Stream) -> Result<(), DriverError> {
        // SAFETY: `raw` and the stream are live; the nodes' memory outlives
        // the graph (see above).
        unsafe { result::graph::launch(self.raw, stream.raw) }
    }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: owned by `self`, destroyed once; the owner synchronized
        // its stream first.
        let _ = unsafe { result::graph::exec_destroy(self.raw) };
    }
}

/// A timing event.
pub(crate) struct Event {
    raw: sys::CUevent,
    ctx: Arc<CudaContext>,
}

impl Event {
    pub(crate) fn new(ctx: &Arc<CudaContext>) -> Result<Self, DriverError> {
        let raw = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)?;
        Ok(Event {
            raw,
            ctx: ctx.clone(),
        })
    }

    /// An event without timing whose [`Event::synchronize`] sleeps instead
    /// of spinning.
    pub(crate) fn blocking(ctx: &Arc<CudaContext>) -> Result<Self, DriverError> {
        let flags = sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32
            | sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        let mut raw = std::ptr::null_mut();
        // SAFETY: the call writes one event handle through a valid pointer;
        // the caller has bound the context.
        unsafe { sys::cuEventCreate(&mut raw, flags) }.result()?;
        Ok(Event {
            raw,
            ctx: ctx.clone(),
        })
    }

    /// An event without timing, for ordering streams ([`Stream::wait`]).
    pub(crate) fn untimed(ctx: &Arc<CudaContext>) -> Result<Self, DriverError> {
        let raw = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?;
        Ok(Event {
            raw,
            ctx: ctx.clone(),
        })
    }

    /// Waits until the work before the last [`Event::record`] is done.
    pub(crate) fn synchronize(&self) -> Result<(), DriverError> {
        // SAFETY: `raw` is a live event owned by `self`.
        unsafe { result::event::synchronize(self.raw) }
    }

    pub(crate) fn record(&self, stream: &Stream) -> Result<(), DriverError> {
        // SAFETY: both handles are live and belong to the same context.
        unsafe { result::event::record(self.raw, stream.raw) }
    }

    /// Milliseconds from `self` to `end`; both must have completed.
    pub(crate) fn elapsed_ms(&self, end: &Event) -> Result<f32, DriverError> {
        // SAFETY: both events are live, created with timing enabled.
        unsafe { result::event::elapsed(self.raw, end.raw) }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: owned by `self`, destroyed once.
        let _ = unsafe { result::event::destroy(self.raw) };
    }
}

// SAFETY (for the five impls below): each wrapper exclusively owns its
// driver handle, and the driver API may be called on any thread once the
// owning context is bound, which every user of these types does first. None
// of them is `Sync`.
unsafe impl Send for Stream {}
unsafe impl Send for Module {}
unsafe impl Send for Function {}
unsafe impl Send for GraphExec {}
unsafe impl Send for Event {}
