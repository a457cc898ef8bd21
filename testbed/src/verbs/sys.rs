//! The only unsafe code of the verbs backend: asking the dynamic loader whether libibverbs loads.
//!
//! `sideway` reaches libibverbs through `rdma-mummy-sys`, whose wrappers `dlopen("libibverbs.so.1")`
//! at start-up and, when that fails, make every call fail with `EOPNOTSUPP`. That errno alone cannot
//! tell "library missing" from "operation not supported", so we ask the loader ourselves.
//!
//! Invariants this module keeps:
//! - the name passed to `dlopen` is a NUL-terminated C string literal that lives for the program;
//! - the handle returned by `dlopen` is checked for NULL and, when non-NULL, closed exactly once
//!   with `dlclose` and never used after; no symbol is looked up through it, so no foreign function
//!   is ever called through a pointer from here;
//! - the string returned by `dlerror` is checked for NULL and copied out at once (it is only valid
//!   until the next `dl*` call on this thread).
//!
//! `dlopen` of a library that is already loaded only bumps its reference count, and `dlclose` drops
//! it again, so this does not unload the copy the binding uses.

use std::ffi::CStr;

/// The soname `rdma-mummy-sys` loads.
pub const LIBIBVERBS: &str = "libibverbs.so.1";

/// `Ok(())` if the dynamic loader can load libibverbs in this process, else the loader's message.
pub fn load_libibverbs() -> Result<(), String> {
    const NAME: &CStr = c"libibverbs.so.1";
    // SAFETY: NAME is a valid NUL-terminated string for the duration of the call (see invariants).
    let handle = unsafe { libc::dlopen(NAME.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: dlerror takes no arguments; its result is checked for NULL and copied before any
        // other dl* call can invalidate it.
        let msg = unsafe {
            let p = libc::dlerror();
            if p.is_null() {
                format!("{LIBIBVERBS}: cannot be loaded")
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        return Err(msg);
    }
    // SAFETY: handle is the non-NULL result of the dlopen above and is closed exactly once here.
    unsafe {
        libc::dlclose(handle);
    }
    Ok(())
}

// ---- Memory registration and scatter/gather entries (the verbs transport, `transport.rs`) ----
//
// Invariants the transport keeps for the two functions below:
// - every range handed to `register_words` is a live `[AtomicU64]` slice owned by a structure that
//   also owns the returned `MemoryRegion` and declares it *before* the slice, so the region is
//   deregistered (Rust drops fields in declaration order) before the memory is freed; the memory
//   is never moved (it is a boxed slice) while registered;
// - the NIC writing those words behind Rust's back is sound because every CPU access to them goes
//   through `AtomicU64` (interior mutability), never through `&[u8]`/`&mut [u8]`;
// - `set_sge` is only called with an (lkey, addr, len) that `transport::translate` or the
//   receive/staging ring produced from such a registered range, on a queue pair owned by the same
//   `VerbsWorker` that keeps a clone of the memory, so the range outlives the work request.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use sideway::ibverbs::memory_region::{MemoryRegion, RegisterMemoryRegionError};
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::SetScatterGatherEntry;
use sideway::ibverbs::AccessFlags;

/// Registers `words` (at least one word) with `access`; see the invariants above.
pub(crate) fn register_words(
    pd: &Arc<ProtectionDomain>,
    words: &[AtomicU64],
    access: AccessFlags,
) -> Result<Arc<MemoryRegion>, RegisterMemoryRegionError> {
    // SAFETY: `words` is a live allocation of `words.len() * 8` bytes; the caller keeps it alive
    // and in place for as long as the returned region (see the invariants above).
    unsafe { pd.reg_mr(words.as_ptr() as usize, std::mem::size_of_val(words), access) }
}

/// Attaches one scatter/gather entry to a work request; see the invariants above.
pub(crate) fn set_sge<H: SetScatterGatherEntry>(h: H, lkey: u32, addr: u64, len: u32) {
    // SAFETY: (lkey, addr, len) lies inside a registered range that outlives the request.
    unsafe { h.setup_sge(lkey, addr, len) }
}
