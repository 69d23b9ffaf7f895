//! The process's heap in use and its allocations, counted by a global allocator that
//! wraps the system's: what the held-locks measurement reads a client's memory per lock
//! from, and `--count-allocations` the allocations of each uncontended cycle. Counting
//! is switched on for those runs only, so the other measurements pay no shared counter
//! on every allocation.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, Ordering};

/// Bytes requested and not yet freed, while counting.
static IN_USE: AtomicIsize = AtomicIsize::new(0);
/// Allocations (and reallocations) made, while counting.
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
/// Whether to count; set once, before anything is allocated that is measured.
static COUNTING: AtomicBool = AtomicBool::new(false);

/// The system allocator, counting when asked to.
pub struct Counting;

/// `bytes` more in use (fewer, if negative), by `allocations` new allocations.
fn add(bytes: isize, allocations: u64) {
    if COUNTING.load(Ordering::Relaxed) {
        IN_USE.fetch_add(bytes, Ordering::Relaxed);
        ALLOCATIONS.fetch_add(allocations, Ordering::Relaxed);
    }
}

// SAFETY: every call goes to the system allocator unchanged; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is passed on as it is.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            add(layout.size() as isize, 1);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            add(layout.size() as isize, 1);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) };
        add(-(layout.size() as isize), 0);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            add(new_size as isize - layout.size() as isize, 1);
        }
        new
    }
}

/// Starts counting (from zero: only differences are read).
pub fn start_counting() {
    COUNTING.store(true, Ordering::Relaxed);
}

/// Heap bytes requested and not yet freed since counting started.
pub fn in_use() -> isize {
    IN_USE.load(Ordering::Relaxed)
}

/// Allocations and reallocations made since counting started.
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// Whether uncontended cycles report their allocations (`--count-allocations`).
static PER_CYCLE: AtomicBool = AtomicBool::new(false);

/// Starts counting, and has each contender's uncontended cycles report their
/// allocations.
pub fn count_per_cycle() {
    PER_CYCLE.store(true, Ordering::Relaxed);
    start_counting();
}

/// Whether uncontended cycles report their allocations.
pub fn per_cycle() -> bool {
    PER_CYCLE.load(Ordering::Relaxed)
}
