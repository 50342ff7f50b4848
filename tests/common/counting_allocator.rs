//! The counting global allocator of the zero-allocation tests: declaring
//! this module installs it as the binary's `#[global_allocator]`.
//!
//! It forwards everything to `System` and, on threads inside
//! [`allocations_in`], counts allocations and keeps a backtrace of the first
//! one, so that a test which expected none can say where it came from in
//! one run (the GPU runs that find these are rare and expensive). Counting
//! is per thread, so tests running in parallel do not see each other's
//! allocations.
//!
//! Three binaries install it: `tests/gpu_runtime.rs` (as `mod`), the
//! runtime's unit tests (`src/runtime/gpu_tests.rs`, through `#[path]`: a
//! crate's unit tests cannot import from its integration tests, and a
//! test-only allocator has no place in the library's API) and the
//! `include_model!` example's test
//! (`examples/resnet50-app/tests/infer_allocates_nothing.rs`, `#[path]`).
//!
//! Backtrace names come from the symbol table: `strip --strip-debug` keeps
//! them, a plain `strip` leaves `<unknown>` frames.

#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::backtrace::Backtrace;
use std::cell::{Cell, RefCell};

/// Counts on threads inside [`allocations_in`]; otherwise plain `System`.
pub struct CountingAllocator;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<usize> = const { Cell::new(0) };
    /// Set while the allocator captures a backtrace: capturing allocates,
    /// and those allocations must neither count nor capture again.
    static CAPTURING: Cell<bool> = const { Cell::new(false) };
    static FIRST: RefCell<Option<Backtrace>> = const { RefCell::new(None) };
}

/// Called on every allocation. `try_with` everywhere: it never panics, even
/// during thread teardown, and the const-initialized cells do not allocate
/// when touched.
fn note_allocation() {
    if !COUNTING.try_with(Cell::get).unwrap_or(false)
        || CAPTURING.try_with(Cell::get).unwrap_or(true)
    {
        return;
    }
    let Ok(count) = COUNT.try_with(|c| {
        c.set(c.get() + 1);
        c.get()
    }) else {
        return;
    };
    if count == 1 {
        let _ = CAPTURING.try_with(|c| c.set(true));
        // Unresolved frames only: symbols are looked up when printed,
        // outside the counted section.
        let trace = Backtrace::force_capture();
        let _ = FIRST.try_with(|first| {
            if let Ok(mut first) = first.try_borrow_mut() {
                *first = Some(trace);
            }
        });
        let _ = CAPTURING.try_with(|c| c.set(false));
    }
}

// SAFETY: forwards every call to `System` unchanged; it only counts.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// The heap allocations one section of code made on its thread.
pub struct Allocations {
    pub count: usize,
    /// Where the first one was made (`None` when there was none).
    pub first: Option<Backtrace>,
}

impl Allocations {
    /// Panics, with the first allocation's backtrace, unless there was none.
    pub fn assert_none(&self, what: &str) {
        if self.count != 0 {
            let trace = self
                .first
                .as_ref()
                .map(|t| t.to_string())
                .unwrap_or_else(|| "(no backtrace captured)".into());
            panic!(
                "{what} made {} heap allocation(s); the first one at:\n{trace}",
                self.count
            );
        }
    }
}

/// Runs `f`, counting the heap allocations it makes on this thread.
pub fn allocations_in<T>(f: impl FnOnce() -> T) -> (Allocations, T) {
    FIRST.with(|first| *first.borrow_mut() = None);
    COUNT.with(|c| c.set(0));
    COUNTING.with(|on| on.set(true));
    let out = f();
    COUNTING.with(|on| on.set(false));
    let allocations = Allocations {
        count: COUNT.with(Cell::get),
        first: FIRST.with(|first| first.borrow_mut().take()),
    };
    (allocations, out)
}

#[inline(never)]
fn first_allocation_site() -> Vec<u8> {
    Vec::with_capacity(std::hint::black_box(16))
}

#[inline(never)]
fn second_allocation_site() -> Vec<u8> {
    Vec::with_capacity(std::hint::black_box(32))
}

#[test]
fn counting_allocator_counts_this_thread_only() {
    let (a, _) = allocations_in(|| drop(std::hint::black_box(first_allocation_site())));
    assert_eq!(a.count, 1);
    let (a, _) = allocations_in(|| {
        std::thread::scope(|s| {
            // The spawn allocates here; the other thread's vectors are not counted.
            s.spawn(|| {
                let v: Vec<Vec<u32>> = (0..100).map(|i| vec![i; 8]).collect();
                std::hint::black_box(v).len()
            });
        })
    });
    assert!(
        a.count < 20,
        "{} allocations counted: other threads leak into the count",
        a.count
    );
    let (a, _) = allocations_in(|| {});
    assert_eq!(a.count, 0);
    assert!(a.first.is_none());
    a.assert_none("an empty closure");
}

#[test]
fn counting_allocator_keeps_the_first_backtrace() {
    let (a, _) = allocations_in(|| {
        let first = std::hint::black_box(first_allocation_site());
        let second = std::hint::black_box(second_allocation_site());
        (first, second)
    });
    assert_eq!(a.count, 2);
    let trace = a
        .first
        .as_ref()
        .expect("a backtrace of the first allocation");
    assert_eq!(trace.status(), std::backtrace::BacktraceStatus::Captured);
    let text = trace.to_string();
    assert!(
        !text.contains("second_allocation_site"),
        "the backtrace is of a later allocation:\n{text}"
    );
    if !text.contains("first_allocation_site") {
        // A stripped binary: frames without names, nothing more to check.
        println!("NOTE the backtrace has no symbol names (stripped binary?)");
    }
    let message = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        a.assert_none("the two sites")
    }))
    .expect_err("two allocations must fail assert_none");
    let message = message
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.starts_with("the two sites made 2 heap allocation(s); the first one at:"),
        "{message}"
    );
}
