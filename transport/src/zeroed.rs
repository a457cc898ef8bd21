//! Zeroed buffers the operating system backs only where they are touched.

/// A large zeroed buffer (registered memory, a location cache) whose pages stay unbacked until
/// touched: taken from the system allocator itself, which maps fresh zero pages for it. A
/// general-purpose allocator in front of it (the binary's) may hand back recycled memory and
/// clear all of it at once, which made a 16-node simulation's stores and caches resident
/// whole (issue 22).
pub struct ZeroedBytes {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

impl ZeroedBytes {
    fn layout(len: usize) -> std::alloc::Layout {
        // Aligned no more than the system allocator's minimum, so it is `calloc`: an
        // over-aligned zeroed allocation is cleared byte by byte, touching every page.
        std::alloc::Layout::from_size_align(len.max(1), 16).expect("a buffer's size fits the address space")
    }

    pub fn new(len: usize) -> ZeroedBytes {
        use std::alloc::GlobalAlloc;
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::System.alloc_zeroed(layout) };
        let ptr = std::ptr::NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        ZeroedBytes { ptr, len }
    }
}

impl std::ops::Deref for ZeroedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` holds `len` initialised (zeroed) bytes this value owns.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for ZeroedBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for ZeroedBytes {
    fn drop(&mut self) {
        use std::alloc::GlobalAlloc;
        // SAFETY: allocated in `new` by the same allocator with the same layout.
        unsafe { std::alloc::System.dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}
