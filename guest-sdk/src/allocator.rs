//! The guest's allocator: freed small blocks kept for reuse in front of the platform's.
//!
//! A Rust operator for `wasm32-wasip2` allocates through wasi-libc's `dlmalloc`, which costs
//! about 100 instructions per `malloc` and as many per `free` once compiled by wasmtime.
//! Operators allocate per record as users write them (a `String` built for an output value,
//! the `Vec` a [`ListState::get`](crate::ListState::get) returns): in the account scorer of
//! `cargo xtask bench-operators`, two blocks per record, 4% of all its instructions. So the
//! SDK puts a free list per size class in front: blocks of up to [`LARGEST`] bytes (and an
//! alignment of at most [`ALIGN`]) freed by the operator are kept, at most [`KEPT`] per class,
//! and the next allocation of their class takes one in a few instructions. Larger blocks, and
//! what does not fit the lists, go to `dlmalloc` as before.
//!
//! It is the guest's global allocator when the SDK's `allocator` feature is on (the
//! default) and the target is WebAssembly without threads; an operator that brings its own
//! `#[global_allocator]` turns the feature off (`default-features = false`).

// An allocator is unsafe code by nature; this module is the SDK's only such code besides the
// bindings wit-bindgen generates.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::ptr;

/// Size classes are multiples of this many bytes.
pub const GRAIN: usize = 16;
/// The largest alignment the lists serve, and their blocks': `malloc`'s own on `wasm32`
/// (a larger one would send every block of a class through `aligned_alloc`).
pub const ALIGN: usize = 8;
/// The largest block the lists keep.
pub const LARGEST: usize = 256;
/// Blocks kept per class at most: 64 × (16 + 32 + … + 256) bytes, 136 KiB, in all.
pub const KEPT: u32 = 64;

const CLASSES: usize = LARGEST / GRAIN;

/// A [`GlobalAlloc`] that keeps freed small blocks of `A` per size class for reuse.
///
/// Not thread-safe: the lists are plain memory. It is `Sync` (as a global allocator must be)
/// only where there are no threads, WebAssembly without the `atomics` feature; elsewhere it is
/// for single-threaded use, as in its tests.
pub struct Cached<A = System> {
    inner: A,
    /// Per class, the first free block (its first word points to the next) and how many.
    lists: UnsafeCell<[(*mut u8, u32); CLASSES]>,
}

#[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
// SAFETY: without the atomics feature a WebAssembly instance runs one thread, so the lists
// are never reached by two at once.
unsafe impl<A: Sync> Sync for Cached<A> {}

impl<A> Cached<A> {
    /// `inner` with empty lists.
    pub const fn new(inner: A) -> Self {
        Cached {
            inner,
            lists: UnsafeCell::new([(ptr::null_mut(), 0); CLASSES]),
        }
    }
}

/// The class of `layout` and the layout its blocks are allocated with, if the lists serve it.
#[inline(always)]
fn class(layout: Layout) -> Option<(usize, Layout)> {
    let size = layout.size();
    if size == 0 || size > LARGEST || layout.align() > ALIGN {
        return None;
    }
    let c = (size - 1) / GRAIN;
    // SAFETY: a multiple of ALIGN of at most LARGEST, and ALIGN a power of two.
    let block = unsafe { Layout::from_size_align_unchecked((c + 1) * GRAIN, ALIGN) };
    Some((c, block))
}

// SAFETY: every block handed out is one of `inner`'s of at least the requested size and
// alignment (a class's blocks are allocated with the class's layout, which covers every layout
// of the class); a block is on a list only after it was freed, and leaves it when handed out.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Cached<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some((c, block)) = class(layout) else {
            return unsafe { self.inner.alloc(layout) };
        };
        let list = unsafe { &mut (*self.lists.get())[c] };
        let head = list.0;
        if head.is_null() {
            return unsafe { self.inner.alloc(block) };
        }
        list.0 = unsafe { head.cast::<*mut u8>().read() };
        list.1 -= 1;
        head
    }

    #[inline]
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        let Some((c, block)) = class(layout) else {
            return unsafe { self.inner.dealloc(p, layout) };
        };
        let list = unsafe { &mut (*self.lists.get())[c] };
        if list.1 >= KEPT {
            return unsafe { self.inner.dealloc(p, block) };
        }
        // A block is at least GRAIN bytes and ALIGN-aligned: room for the link.
        unsafe { p.cast::<*mut u8>().write(list.0) };
        *list = (p, list.1 + 1);
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if class(layout).is_none() {
            return unsafe { self.inner.alloc_zeroed(layout) };
        }
        let p = unsafe { self.alloc(layout) };
        if !p.is_null() {
            unsafe { p.write_bytes(0, layout.size()) };
        }
        p
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size`, rounded up to the alignment, fits an isize.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (class(layout), class(new)) {
            // Neither block is a class's: `inner` may grow it in place.
            (None, None) => unsafe { self.inner.realloc(p, layout, new_size) },
            (Some((a, _)), Some((b, _))) if a == b => p,
            _ => {
                let q = unsafe { self.alloc(new) };
                if !q.is_null() {
                    unsafe {
                        ptr::copy_nonoverlapping(p, q, layout.size().min(new_size));
                        self.dealloc(p, layout);
                    }
                }
                q
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// `System`, counting what reaches it.
    #[derive(Default)]
    struct Counting {
        allocs: Cell<usize>,
        frees: Cell<usize>,
    }

    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            self.allocs.set(self.allocs.get() + 1);
            unsafe { System.alloc(layout) }
        }

        unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
            self.frees.set(self.frees.get() + 1);
            unsafe { System.dealloc(p, layout) }
        }
    }

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn a_freed_small_block_serves_the_next_allocation_of_its_class() {
        let a = Cached::new(Counting::default());
        unsafe {
            let p = a.alloc(layout(20, 8));
            p.write_bytes(7, 20);
            a.dealloc(p, layout(20, 8));
            // 17..=32 bytes is one class: the same block comes back, without `inner`.
            let q = a.alloc(layout(32, 4));
            assert_eq!(q, p);
            assert_eq!(a.inner.allocs.get(), 1);
            // Another class, a large block and an over-aligned one go to `inner`.
            let r = a.alloc(layout(40, 8));
            let big = a.alloc(layout(LARGEST + 1, 8));
            let aligned = a.alloc(layout(16, 2 * ALIGN));
            assert_eq!(a.inner.allocs.get(), 4);
            assert_eq!(aligned as usize % (2 * ALIGN), 0);
            for (p, l) in [(q, layout(32, 4)), (r, layout(40, 8))] {
                a.dealloc(p, l);
            }
            a.dealloc(big, layout(LARGEST + 1, 8));
            a.dealloc(aligned, layout(16, 2 * ALIGN));
            assert_eq!(
                a.inner.frees.get(),
                2,
                "the large and the over-aligned block"
            );
        }
    }

    #[test]
    fn at_most_kept_blocks_wait_per_class() {
        let a = Cached::new(Counting::default());
        let n = KEPT as usize + 10;
        unsafe {
            let blocks: Vec<*mut u8> = (0..n).map(|_| a.alloc(layout(8, 8))).collect();
            for &p in &blocks {
                a.dealloc(p, layout(8, 8));
            }
            assert_eq!(a.inner.frees.get(), 10);
            // The kept blocks are handed out again, each once.
            let again: std::collections::HashSet<usize> =
                (0..KEPT).map(|_| a.alloc(layout(16, 1)) as usize).collect();
            assert_eq!(again.len(), KEPT as usize);
            assert_eq!(a.inner.allocs.get(), n);
            for p in again {
                a.dealloc(p as *mut u8, layout(16, 1));
            }
        }
    }

    #[test]
    fn realloc_keeps_the_contents_across_classes_and_sizes() {
        let a = Cached::new(Counting::default());
        unsafe {
            let mut p = a.alloc(layout(3, 1));
            p.copy_from_nonoverlapping(b"abc".as_ptr(), 3);
            let mut size = 3;
            for new in [10, 16, 17, 200, 300, 5_000, 250, 5] {
                p = a.realloc(p, layout(size, 1), new);
                assert_eq!(std::slice::from_raw_parts(p, 3), b"abc", "{size} -> {new}");
                size = new;
            }
            a.dealloc(p, layout(size, 1));
            // A kept block is zeroed for `alloc_zeroed`.
            let dirty = a.alloc(layout(48, 8));
            dirty.write_bytes(0xff, 48);
            a.dealloc(dirty, layout(48, 8));
            let z = a.alloc_zeroed(layout(40, 8));
            assert_eq!(z, dirty);
            assert!(std::slice::from_raw_parts(z, 40).iter().all(|&b| b == 0));
            a.dealloc(z, layout(40, 8));
        }
    }
}
