//! What every entry point shares: the panic guard and error return, the registry of live
//! objects that tells this provider's fids from freed or foreign ones, and the stubs that
//! fill the ops slots this provider does not implement.
//!
//! Threads and locks: the registry is behind `FiObjects` (softrdma's ranked lock), taken
//! alone for an insert, a lookup or a removal.

use crate::abi::{FI_EINVAL, FI_ENOSYS, FI_EOTHER, fid, iovec};
use softrdma::sync::{Lock, Rank};
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::LazyLock;

/// A call's refusal: the libfabric error number (positive) it returns negated.
pub type Errno = c_int;

/// Runs an entry point's body: its value, or its error negated; a panic (a bug) becomes
/// `-FI_EOTHER` instead of unwinding into C.
pub fn guard(f: impl FnOnce() -> Result<isize, Errno>) -> isize {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => -(e as isize),
        Err(_) => -(FI_EOTHER as isize),
    }
}

/// As [`guard`], for the entry points that return `int`.
pub fn guard_int(f: impl FnOnce() -> Result<c_int, Errno>) -> c_int {
    guard(|| f().map(|v| v as isize)) as c_int
}

/// The live objects, by address: each with its class. Looked up by every call (a
/// ping-pong makes four a turn): foldhash, where std's SipHash cost about 150 instructions
/// a lookup.
static LIVE: LazyLock<Lock<HashMap<usize, usize, foldhash::fast::RandomState>>> =
    LazyLock::new(|| Lock::new(Rank::FiObjects, HashMap::default()));

/// An object of this provider: a `#[repr(C)]` struct whose first field is its public
/// struct, which begins with its `fid`.
///
/// # Safety
/// The type must be `#[repr(C)]` with a `fid` at offset 0.
pub unsafe trait Object: Sized + Send + Sync {
    /// Its `FI_CLASS_*`.
    const CLASS: usize;
}

/// `fi_close` on any object of this provider: takes it back from C and drops it.
pub unsafe extern "C" fn close_object<T: Object>(f: *mut fid) -> c_int {
    guard_int(|| close::<T>(f).map(|_| 0))
}

/// Declares `$t` an object of class `$class` ([`Object`], `Send`, `Sync`) and makes its
/// `fi_ops` table `$ops`: `fi_close` drops it, `bind` and `control` are the given
/// functions (or `-FI_ENOSYS`), the rest `-FI_ENOSYS`.
macro_rules! object {
    ($t:ty, $class:expr, $ops:ident $(, bind: $bind:expr)? $(, control: $control:expr)?) => {
        // SAFETY: every object is `#[repr(C)]` with its public struct (which begins with
        // its fid) as its first field.
        unsafe impl $crate::entry::Object for $t {
            const CLASS: usize = $class;
        }
        // SAFETY: an object's C half is written once, when it is opened, and only read
        // after; its Rust half is behind locks, atomics or thread-safe types.
        unsafe impl Send for $t {}
        // SAFETY: as for `Send`.
        unsafe impl Sync for $t {}
        pub(crate) static $ops: $crate::abi::Ops<$crate::abi::fi_ops> = $crate::abi::Ops($crate::abi::fi_ops {
            size: size_of::<$crate::abi::fi_ops>(),
            close: $crate::entry::close_object::<$t> as $crate::abi::Slot,
            bind: $crate::entry::object!(@or $($bind)?),
            control: $crate::entry::object!(@or $($control)?),
            ops_open: $crate::entry::enosys as $crate::abi::Slot,
            tostr: $crate::entry::enosys as $crate::abi::Slot,
            ops_set: $crate::entry::enosys as $crate::abi::Slot,
        });
    };
    (@or $f:expr) => { $f as $crate::abi::Slot };
    (@or) => { $crate::entry::enosys as $crate::abi::Slot };
}
pub(crate) use object;

/// Gives `obj` to C: its fid, live until [`close`].
pub fn open<T: Object>(obj: T) -> *mut T {
    let p = Box::into_raw(Box::new(obj));
    LIVE.lock().insert(p as usize, T::CLASS);
    p
}

/// The object behind `f`, if `f` is a live object of this provider of `T`'s class.
pub fn get<'a, T: Object>(f: *const fid) -> Result<&'a T, Errno> {
    if LIVE.lock().get(&(f as usize)) != Some(&T::CLASS) {
        return Err(FI_EINVAL);
    }
    // SAFETY: the registry holds only pointers `open` made from a `Box<T>` of this class,
    // removed before the box is freed; `T: Object` has its fid at offset 0. An object
    // closed while another thread uses it is the caller's error, as in libfabric.
    Ok(unsafe { &*(f as *const T) })
}

/// Takes the object behind `f` back from C (`fi_close`).
pub fn close<T: Object>(f: *mut fid) -> Result<Box<T>, Errno> {
    let mut live = LIVE.lock();
    if live.get(&(f as usize)) != Some(&T::CLASS) {
        return Err(FI_EINVAL);
    }
    live.remove(&(f as usize));
    // SAFETY: as in `get`; removed from the registry first, so no later call finds it.
    Ok(unsafe { Box::from_raw(f as *mut T) })
}

/// As [`close`], only if `is_it` says the live object at `f` is the one meant (an
/// address held for later may have been closed and reused meanwhile); checked and
/// closed under one hold of the registry.
pub fn close_if<T: Object>(f: *mut fid, is_it: impl FnOnce(&T) -> bool) -> Option<Box<T>> {
    let mut live = LIVE.lock();
    if live.get(&(f as usize)) != Some(&T::CLASS) {
        return None;
    }
    // SAFETY: as in `get`: a live object of `T`'s class, which the held registry keeps so.
    if !is_it(unsafe { &*(f as *const T) }) {
        return None;
    }
    live.remove(&(f as usize));
    // SAFETY: as in `close`.
    Some(unsafe { Box::from_raw(f as *mut T) })
}

/// The class of a live object of this provider, if `f` is one.
pub fn class_of(f: *const fid) -> Option<usize> {
    LIVE.lock().get(&(f as usize)).copied()
}

/// Fills an ops slot this provider does not implement: `-FI_ENOSYS`, whatever the slot's
/// arguments.
///
/// Every slot it fills returns `int` or `ssize_t`; under the x86_64 System V ABI the
/// caller passes arguments in registers and cleans up, so a function that takes none
/// may stand for any such signature (libfabric's own `fi_no_*` stubs are one per
/// signature only because C has no other way to type them).
pub extern "C" fn enosys() -> isize {
    -(FI_ENOSYS as isize)
}

/// Writes `s` and a NUL into `buf` (of `len` bytes), cut to fit; `buf` back.
///
/// # Safety
/// `buf` must be valid for `len` bytes of writes, or null.
pub unsafe fn c_string_into(
    s: &str,
    buf: *mut std::ffi::c_char,
    len: usize,
) -> *const std::ffi::c_char {
    if buf.is_null() || len == 0 {
        return std::ptr::null();
    }
    let n = s.len().min(len - 1);
    // SAFETY: `n + 1 <= len` bytes of `buf`, by this function's contract.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast(), n);
        *buf.add(n) = 0;
    }
    buf
}

/// The one element of an iovec list of `count` (this provider's `iov_limit` is 1).
pub fn one_iov(iov: *const iovec, count: usize) -> Result<(*const std::ffi::c_void, usize), Errno> {
    match count {
        0 => Ok((std::ptr::null(), 0)),
        1 if !iov.is_null() => {
            // SAFETY: the caller's one element.
            let v = unsafe { &*iov };
            Ok((v.iov_base, v.iov_len))
        }
        1 => Err(FI_EINVAL),
        _ => Err(FI_EINVAL),
    }
}

/// The caller's `len` bytes at `p` (none for a null `p` with `len` 0).
pub fn bytes<'a>(p: *const std::ffi::c_void, len: usize) -> Result<&'a [u8], Errno> {
    match (p.is_null(), len) {
        (_, 0) => Ok(&[]),
        (true, _) => Err(FI_EINVAL),
        // SAFETY: the caller's `len` bytes at `p`, read during the call.
        (false, _) => Ok(unsafe { std::slice::from_raw_parts(p.cast(), len) }),
    }
}

/// `fi_getopt` of a passive or connected endpoint: `FI_OPT_CM_DATA_SIZE`, the private
/// data a connection request carries; any other option `-FI_ENOPROTOOPT`.
pub fn cm_getopt(
    level: c_int,
    optname: c_int,
    optval: *mut std::ffi::c_void,
    optlen: *mut usize,
) -> Result<c_int, Errno> {
    use crate::abi::{FI_ENOPROTOOPT, FI_OPT_CM_DATA_SIZE, FI_OPT_ENDPOINT};
    if level != FI_OPT_ENDPOINT || optname != FI_OPT_CM_DATA_SIZE {
        return Err(FI_ENOPROTOOPT);
    }
    put_size(optval, optlen, softrdma_fabric::CONNECT_DATA_MAX)
}

/// Gives `v` to a `fi_getopt` caller as its `size_t` option value.
pub fn put_size(
    optval: *mut std::ffi::c_void,
    optlen: *mut usize,
    v: usize,
) -> Result<c_int, Errno> {
    if optval.is_null() || optlen.is_null() {
        return Err(FI_EINVAL);
    }
    // SAFETY: the caller's option buffer and its length, checked non-null.
    unsafe {
        if *optlen < size_of::<usize>() {
            *optlen = size_of::<usize>();
            return Err(crate::abi::FI_ETOOSMALL);
        }
        optval.cast::<usize>().write_unaligned(v);
        *optlen = size_of::<usize>();
    }
    Ok(0)
}
