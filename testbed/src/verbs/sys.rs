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
