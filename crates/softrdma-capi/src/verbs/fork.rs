//! Fork support. Contexts and everything made from them belong to the process that opened
//! them: their progress thread, sockets and events live there. A `pthread_atfork` handler
//! counts forks, so a forked child knows a parent's objects by their generation. In the
//! child they are left as they are (the parent's are untouched): destroying or closing
//! them returns 0 and changes nothing, and every other verb on them fails with EPERM
//! (rdma-core's providers fault or misbehave there instead; the checks are
//! `super::context`'s `live`, `own` and `to_destroy`). The child reads the configuration
//! again (so it may set `SOFTRDMA_ADDR` after the fork) and opens devices of its own, even
//! through the parent's `ibv_device` pointers.
//!
//! softrdma pins no memory, so the fork verbs have nothing to do.

use std::ffi::c_int;
use std::sync::atomic::{AtomicU32, Ordering};

/// Forks this process has seen as a child (0 in a process that was never forked with the
/// library loaded).
static GENERATION: AtomicU32 = AtomicU32::new(0);

extern "C" fn forked() {
    // Async-signal-safe, as a child handler must be: one atomic add.
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// This process's generation (see [`GENERATION`]).
pub(crate) fn generation() -> u32 {
    GENERATION.load(Ordering::Relaxed)
}

/// Has each fork counted, once per process: the device list calls it before it reads its
/// generation.
pub(crate) fn watch() {
    static ATFORK: std::sync::Once = std::sync::Once::new();
    ATFORK.call_once(|| {
        // SAFETY: registers a handler that only adds to an atomic; no pointers.
        unsafe { libc::pthread_atfork(None, None, Some(forked)) };
    });
}

/// `ibv_fork_init`: nothing to do. softrdma pins no memory for a device to write (the
/// device is this process), so a forked child's copy-on-write cannot take pages from
/// under it. What a child may do with a parent's objects is in the module docs: nothing
/// but destroy them, which leaves the parent's untouched.
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

/// `ibv_is_fork_initialized`: `IBV_FORK_UNNEEDED` (see [`ibv_fork_init`]).
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    2
}

/// `ibv_dontfork_range`: nothing to do (see [`ibv_fork_init`]).
pub extern "C" fn ibv_dontfork_range(_base: *mut std::ffi::c_void, _size: usize) -> c_int {
    0
}

/// `ibv_dofork_range`: nothing to do.
pub extern "C" fn ibv_dofork_range(_base: *mut std::ffi::c_void, _size: usize) -> c_int {
    0
}
