//! The symbols of `librdmacm.so.1` that softrdma does not implement yet, rsockets
//! (librdmacm's `rsocket.c`): each call fails with ENOSYS and says so once per function on
//! stderr, and loading never fails, because BIND_NOW callers (perftest, rping, libfabric)
//! need every symbol to exist even when they never call it.
//!
//! The stubs take no parameters: on x86_64 (System V) a caller's arguments are in
//! registers the callee may ignore, so a parameterless function serves any signature.
//! Each returns the failure value of its own C return type.

use crate::ffi::{Ret, Verb, entry};
use std::sync::atomic::{AtomicBool, Ordering};

/// ENOSYS, said on stderr the first time (`said`).
fn enosys(v: Verb, name: &str, said: &AtomicBool) -> crate::ffi::Failed {
    if !said.swap(true, Ordering::Relaxed) {
        eprintln!("softrdma: {name} is not implemented yet in softrdma's librdmacm (ENOSYS)");
    }
    v.quiet(libc::ENOSYS)
}

macro_rules! enosys {
    ($ret:ty = $fail:expr; $($name:ident)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: not implemented yet (ENOSYS).")]
        pub extern "C" fn $name() -> $ret {
            static SAID: AtomicBool = AtomicBool::new(false);
            entry(stringify!($name), Ret::new(|_| $fail, $fail), |v| {
                Err(enosys(v, stringify!($name), &SAID))
            })
        }
    )*};
}

// int-returning (and ssize_t/off_t-returning: -1 in the full register).
enosys! { isize = -1;
    raccept rbind rclose rconnect rfcntl rgetpeername rgetsockname rgetsockopt riomap riounmap
    riowrite rlisten rpoll rread rreadv rrecv rrecvfrom rrecvmsg rselect rsend rsendmsg rsendto
    rsetsockopt rshutdown rsocket rwrite rwritev
}
