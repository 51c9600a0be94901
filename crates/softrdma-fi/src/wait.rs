//! Waiting and error text, shared by the CQ and the EQ: the blocking reads (`sread`) poll
//! with a spin and then short sleeps, `fi_control(FI_GETWAIT)` gives a queue's
//! descriptor, and the `strerror` calls write into the caller's buffer or a thread's own.
//! Runs on the calling thread; no locks.

use crate::abi::{FI_EAGAIN, FI_EINVAL, FI_ENODATA, FI_ENOSYS, FI_GETWAIT};
use crate::entry;
use std::ffi::{c_char, c_int, c_void};
use std::time::{Duration, Instant};

/// Runs `read` until it returns something other than `-FI_EAGAIN`, or `timeout`
/// milliseconds pass (a negative one never does): then `-FI_EAGAIN`. Spins, then
/// sleeps briefly between tries, so a long wait costs little CPU.
pub fn wait_for(timeout: c_int, mut read: impl FnMut() -> isize) -> isize {
    let end = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    let start = Instant::now();
    loop {
        let r = read();
        if r != -(FI_EAGAIN as isize) {
            return r;
        }
        if end.is_some_and(|e| Instant::now() >= e) {
            return r;
        }
        if start.elapsed() < Duration::from_millis(1) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// `fi_control` of a queue whose descriptor (opened with `FI_WAIT_FD`) is `fd`:
/// `FI_GETWAIT` writes it into the caller's `int` at `arg`; `-FI_ENODATA` for a queue
/// without one; no other command.
pub fn control(command: c_int, fd: Option<c_int>, arg: *mut c_void) -> Result<c_int, entry::Errno> {
    if command != FI_GETWAIT {
        return Err(FI_ENOSYS);
    }
    let fd = fd.ok_or(FI_ENODATA)?;
    if arg.is_null() {
        return Err(FI_EINVAL);
    }
    // SAFETY: the caller's `int`, checked non-null.
    unsafe { arg.cast::<c_int>().write(fd) };
    Ok(0)
}

/// `buf` holding `s`, or, when the caller gave none, this thread's copy (valid until its
/// next call here, as libfabric's own strerror buffers are).
///
/// # Safety
/// `buf` must be valid for `len` bytes of writes, or null.
pub unsafe fn error_string(s: &str, buf: *mut c_char, len: usize) -> *const c_char {
    // SAFETY: forwarded from this function's contract.
    let p = unsafe { entry::c_string_into(s, buf, len) };
    if !p.is_null() {
        return p;
    }
    thread_local! {
        static LAST: std::cell::RefCell<std::ffi::CString> =
            std::cell::RefCell::new(std::ffi::CString::default());
    }
    let c = std::ffi::CString::new(s.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| {
        *l.borrow_mut() = c;
        l.borrow().as_ptr()
    })
}
