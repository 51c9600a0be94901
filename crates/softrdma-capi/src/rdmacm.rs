//! `librdmacm.so.1`'s symbols (RDMACM_1.0-1.3), served by this same library under its
//! second name. The connection manager's verbs are in [`crate::cm`]; what is left here
//! is not built yet (rsockets, ECE): each such call fails with ENOSYS and says so once
//! per function on stderr, and loading never fails, because BIND_NOW callers
//! (perftest, rping, libfabric) need every symbol to exist even when they never call it.
//!
//! The stubs take no parameters: on x86_64 (System V) a caller's arguments are in
//! registers the callee may ignore, so a parameterless function serves any signature.
//! Each returns the failure value of its own C return type.

use crate::ffi::{Ret, entry, null_terminated, set_errno};
use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicBool, Ordering};

fn enosys(name: &str, said: &AtomicBool) {
    if !said.swap(true, Ordering::Relaxed) {
        eprintln!("softrdma: {name} is not implemented yet in softrdma's librdmacm (ENOSYS)");
    }
    set_errno(libc::ENOSYS);
}

macro_rules! enosys {
    ($ret:ty = $fail:expr; $($name:ident)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: not implemented yet (ENOSYS).")]
        pub extern "C" fn $name() -> $ret {
            static SAID: AtomicBool = AtomicBool::new(false);
            enosys(stringify!($name), &SAID);
            $fail
        }
    )*};
}

// int-returning (and ssize_t/off_t-returning: -1 in the full register).
enosys! { isize = -1;
    raccept rbind rclose rconnect rfcntl rgetpeername rgetsockname rgetsockopt riomap riounmap
    riowrite rlisten rpoll rread rreadv rrecv rrecvfrom rrecvmsg rselect rsend rsendmsg rsendto
    rsetsockopt rshutdown rsocket rwrite rwritev
}

/// `rdma_get_devices`: a NULL-terminated array of the contexts the connection manager
/// keeps open for each device (`id->verbs` of an ID on that device is the same pointer).
/// As with librdmacm, the contexts belong to the library and outlive the array: libfabric's
/// verbs provider frees the array and goes on using the contexts for its domains.
pub unsafe extern "C" fn rdma_get_devices(num: *mut c_int) -> *mut *mut crate::abi::ibv_context {
    entry("rdma_get_devices", Ret::NULL, |v| {
        let count = crate::device::devices().len();
        let open: Vec<_> = (0..count)
            .map(crate::cm::cm_context)
            .filter(|c| !c.is_null())
            .collect();
        let list = null_terminated(&open);
        if list.is_null() {
            return Err(v.quiet(libc::ENOMEM));
        }
        if !num.is_null() {
            // SAFETY: the caller's int.
            unsafe { *num = open.len() as c_int };
        }
        Ok(list)
    })
}

/// `rdma_free_devices`: frees the array of `rdma_get_devices`. The contexts in it stay
/// open (they are the connection manager's, as in librdmacm).
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut crate::abi::ibv_context) {
    entry("rdma_free_devices", Ret::VOID, |_| {
        // SAFETY: calloc'ed by rdma_get_devices (or NULL, which free ignores).
        unsafe { libc::free(list.cast()) };
        Ok(())
    })
}

/// `rdma_event_str`: the names of `enum rdma_cm_event_type`.
pub extern "C" fn rdma_event_str(event: c_int) -> *const c_char {
    const T: &[&std::ffi::CStr] = &[
        c"RDMA_CM_EVENT_ADDR_RESOLVED",
        c"RDMA_CM_EVENT_ADDR_ERROR",
        c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        c"RDMA_CM_EVENT_ROUTE_ERROR",
        c"RDMA_CM_EVENT_CONNECT_REQUEST",
        c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        c"RDMA_CM_EVENT_CONNECT_ERROR",
        c"RDMA_CM_EVENT_UNREACHABLE",
        c"RDMA_CM_EVENT_REJECTED",
        c"RDMA_CM_EVENT_ESTABLISHED",
        c"RDMA_CM_EVENT_DISCONNECTED",
        c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        c"RDMA_CM_EVENT_MULTICAST_JOIN",
        c"RDMA_CM_EVENT_MULTICAST_ERROR",
        c"RDMA_CM_EVENT_ADDR_CHANGE",
        c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
    ];
    usize::try_from(event)
        .ok()
        .and_then(|i| T.get(i))
        .copied()
        .unwrap_or(c"UNKNOWN EVENT")
        .as_ptr()
}
