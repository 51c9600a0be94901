//! What every exported function is written with (rustls-ffi's `ffi.rs` and `panic.rs` are
//! the model):
//! - [`entry`]: the panic guard around a verb's body, the verb's name said once, and its
//!   failure convention ([`Ret`]); the body fails with `?` on a [`Failed`], which the
//!   [`Verb`] records (errno, and the reason under `SOFTRDMA_DEBUG=1`);
//! - [`Object`] (implemented through [`c_object!`]): a C object as a box whose first field
//!   is the public struct the caller holds (from the caller's pointer, into it, and
//!   freed), and [`Users`], the count of what depends on one;
//! - C strings, NULL-terminated arrays, byte buffers and socket addresses from and to C.

use std::ffi::{c_char, c_int, c_void};
use std::fmt::Display;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e };
}

/// Whether failures are printed (`SOFTRDMA_DEBUG=1`).
fn debug() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("SOFTRDMA_DEBUG").is_some_and(|v| v != "0"))
}

/// A verb's failure, already recorded: errno is set (see [`Verb::fail`]). [`entry`] turns it
/// into the verb's failure value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Failed(c_int);

impl Failed {
    /// The failure that a verb this one called has just recorded (its errno stands).
    pub(crate) fn recorded() -> Failed {
        // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
        Failed(unsafe { *libc::__errno_location() })
    }

    /// The errno it set.
    pub(crate) fn errno(self) -> c_int {
        self.0
    }
}

/// The verb an entry point serves: its name, which the failures it records carry.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Verb(&'static str);

impl Verb {
    /// Records a failure with errno `errno`, caused by `why`: sets errno, and prints both
    /// when debugging.
    pub(crate) fn fail(self, errno: c_int, why: &dyn Display) -> Failed {
        if debug() {
            eprintln!(
                "softrdma: {}: {why} ({})",
                self.0,
                std::io::Error::from_raw_os_error(errno)
            );
        }
        set_errno(errno);
        Failed(errno)
    }

    /// [`Verb::fail`] as an `Err`, for `return v.err(..)`.
    pub(crate) fn err<T>(self, errno: c_int, why: &dyn Display) -> Result<T, Failed> {
        Err(self.fail(errno, why))
    }

    /// A failure callers expect and retry (EAGAIN, a missing file): errno only, never
    /// printed.
    pub(crate) fn quiet(self, errno: c_int) -> Failed {
        set_errno(errno);
        Failed(errno)
    }

    /// [`Verb::fail`] for a softrdma error, with its errno.
    pub(crate) fn error(self, e: &softrdma::Error) -> Failed {
        self.fail(e.errno(), e)
    }

    /// A softrdma result, its error recorded ([`Verb::error`]).
    pub(crate) fn check<T>(self, r: softrdma::Result<T>) -> Result<T, Failed> {
        r.map_err(|e| self.error(&e))
    }

    /// A failure with `errno` (`why`) unless `ok`.
    pub(crate) fn ensure(self, ok: bool, errno: c_int, why: &dyn Display) -> Result<(), Failed> {
        if ok { Ok(()) } else { self.err(errno, why) }
    }

    /// The caller's struct at `p` (its attributes, most often), or EINVAL ("NULL
    /// {what}") when `p` is NULL.
    ///
    /// # Safety
    /// `p` is NULL or points to a `T` that the verb may read and write while it holds the
    /// reference.
    pub(crate) unsafe fn arg<'a, T>(self, p: *mut T, what: &str) -> Result<&'a mut T, Failed> {
        // SAFETY: per the contract.
        match unsafe { p.as_mut() } {
            Some(r) => Ok(r),
            None => self.err(libc::EINVAL, &format_args!("NULL {what}")),
        }
    }

    /// EINVAL ("NULL argument") if any of the caller's pointers `ptrs` is NULL: every
    /// verb checks its object and attribute pointers so before it reads them.
    pub(crate) fn non_null(self, ptrs: &[*const libc::c_void]) -> Result<(), Failed> {
        self.ensure(
            ptrs.iter().all(|p| !p.is_null()),
            libc::EINVAL,
            &"NULL argument",
        )
    }
}

/// What a verb returns to its C caller when it fails (errno set) and when it panicked
/// (errno EIO): each verb's man page says which.
pub(crate) struct Ret<T> {
    /// The return value of a failure with the errno given.
    failed: fn(c_int) -> T,
    /// The return value after a caught panic.
    panicked: T,
}

impl<T> Ret<T> {
    /// A convention of the verb's own.
    pub(crate) const fn new(failed: fn(c_int) -> T, panicked: T) -> Ret<T> {
        Ret { failed, panicked }
    }
}

impl<T> Ret<*mut T> {
    /// A pointer-returning verb: NULL.
    pub(crate) const NULL: Self = Ret {
        failed: |_| null_mut(),
        panicked: null_mut(),
    };
}

impl Ret<c_int> {
    /// libibverbs' int verbs: the errno itself (EIO after a panic).
    pub(crate) const ERRNO: Self = Ret {
        failed: |e| e,
        panicked: libc::EIO,
    };
    /// -1 with errno: librdmacm's convention, and that of libibverbs' older verbs.
    pub(crate) const MINUS_ONE: Self = Ret {
        failed: |_| -1,
        panicked: -1,
    };
}

impl Ret<()> {
    /// A verb that returns nothing.
    pub(crate) const VOID: Self = Ret {
        failed: |_| (),
        panicked: (),
    };
}

/// Runs the body of the verb `verb`, which fails with `?` on a recorded [`Failed`]: its
/// result, or `ret`'s failure value. A panic is caught, as none may unwind into C (which
/// would abort the program, or worse): the verb then fails with EIO and one line on stderr
/// (a caught panic is a bug in softrdma).
pub(crate) fn entry<T>(
    verb: &'static str,
    ret: Ret<T>,
    body: impl FnOnce(Verb) -> Result<T, Failed>,
) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(Verb(verb)))) {
        Ok(Ok(v)) => v,
        Ok(Err(Failed(errno))) => (ret.failed)(errno),
        Err(_) => {
            eprintln!("softrdma: {verb}: internal error (a bug in softrdma); failing with EIO");
            set_errno(libc::EIO);
            ret.panicked
        }
    }
}

/// A C object of this library: a box whose first field is the public struct callers hold
/// (`C`, or a struct that begins with one), so that the caller's pointer is the box's, as
/// every object of rdma-core's providers begins with its public struct.
///
/// # Safety
/// The methods' defaults take the public struct to be at the start of `Self`: an
/// implementor is `#[repr(C)]` with it as its first field, or overrides all four so that
/// [`Object::from_ptr`] and [`Object::free`] find the object [`Object::into_c`] handed out.
pub(crate) unsafe trait Object: Sized {
    /// The public struct.
    type C;
    /// What a message calls it (`"NULL {WHAT}"`).
    const WHAT: &'static str;

    /// Boxes the object: the pointer its caller gets.
    fn into_c(self) -> *mut Self::C {
        Box::into_raw(Box::new(self)).cast()
    }

    /// The object behind the caller's pointer.
    ///
    /// # Safety
    /// `p` is a live object of this type that this library handed out.
    unsafe fn from_ptr<'a>(p: *mut Self::C) -> &'a Self {
        // SAFETY: per the contract and the trait's: the public struct begins the object.
        unsafe { &*p.cast::<Self>() }
    }

    /// The object behind the caller's pointer, if it is not NULL.
    ///
    /// # Safety
    /// `p` is NULL or a live object of this type that this library handed out.
    unsafe fn from_nullable<'a>(p: *mut Self::C) -> Option<&'a Self> {
        // SAFETY: per the contract and the trait's.
        unsafe { p.cast::<Self>().as_ref() }
    }

    /// The object behind the caller's pointer, to change it.
    ///
    /// # Safety
    /// As [`Object::from_ptr`], and the verb's C contract gives the call the object to
    /// itself.
    unsafe fn from_ptr_mut<'a>(p: *mut Self::C) -> &'a mut Self {
        // SAFETY: per the contract and the trait's.
        unsafe { &mut *p.cast::<Self>() }
    }

    /// Takes the object back from its caller, to drop it.
    ///
    /// # Safety
    /// `p` is a live object of this type that this library handed out; it is freed once
    /// and not used after.
    unsafe fn free(p: *mut Self::C) -> Box<Self> {
        // SAFETY: per the contract: the box [`Object::into_c`] made.
        unsafe { Box::from_raw(p.cast::<Self>()) }
    }
}

/// Implements [`Object`] for `$obj`, named `$what` in messages, whose field `$first` (a
/// path, where the public struct begins a larger one) is the public struct `$c`. What the
/// trait's defaults rely on is checked at compile time: that field is a `$c`, at offset 0.
macro_rules! c_object {
    ($obj:ty, $($first:ident).+: $c:ty, $what:literal) => {
        const _: () = assert!(::std::mem::offset_of!($obj, $($first).+) == 0);
        const _: fn(&$obj) -> &$c = |o| &o.$($first).+;
        // SAFETY: the public struct begins the object (both asserted just above), as the
        // trait's defaults take it to.
        unsafe impl $crate::ffi::Object for $obj {
            type C = $c;
            const WHAT: &'static str = $what;
        }
    };
}
pub(crate) use c_object;

/// How many live objects depend on a C object (the QPs and MRs of a PD, the CQs of a
/// channel, ...): its destroy verb refuses with EBUSY while any is alive.
#[derive(Debug, Default)]
pub(crate) struct Users(AtomicUsize);

impl Users {
    /// One more depends on it.
    pub(crate) fn add(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }

    /// One fewer.
    pub(crate) fn remove(&self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }

    /// How many.
    pub(crate) fn count(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }

    /// EBUSY (`why`) while any depends on it: what a destroy verb checks first.
    pub(crate) fn ensure_none(&self, v: Verb, why: &str) -> Result<(), Failed> {
        v.ensure(self.count() == 0, libc::EBUSY, &why)
    }
}

/// Copies `s` into a fixed C string field, truncated and NUL-terminated.
pub(crate) fn copy_cstr(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as c_char;
    }
    if let Some(d) = dst.get_mut(n) {
        *d = 0;
    }
}

/// A `calloc`ed, NULL-terminated copy of `items`, which the caller frees with `free`;
/// NULL when out of memory.
pub(crate) fn null_terminated<T>(items: &[*mut T]) -> *mut *mut T {
    // SAFETY: calloc of n+1 pointers; the result is checked.
    let list = unsafe { libc::calloc(items.len() + 1, size_of::<*mut T>()) }.cast::<*mut T>();
    if !list.is_null() {
        // SAFETY: `items.len()` pointers into an allocation of one more, which stays NULL.
        unsafe { std::ptr::copy_nonoverlapping(items.as_ptr(), list, items.len()) };
    }
    list
}

/// A copy of the caller's `len` bytes at `p` (none when `p` is NULL).
///
/// # Safety
/// `p` is NULL or points to `len` readable bytes.
pub(crate) unsafe fn copy_bytes(p: *const c_void, len: usize) -> Vec<u8> {
    if p.is_null() || len == 0 {
        return Vec::new();
    }
    // SAFETY: per the contract.
    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }.to_vec()
}

/// A socket address from C, if it is IPv4 or IPv6.
///
/// # Safety
/// `sa` must be NULL or point at a sockaddr as long as its family says.
pub(crate) unsafe fn from_sockaddr(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: per the contract, at least sa_family is there.
    match c_int::from(unsafe { (*sa).sa_family }) {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let a = unsafe { &*sa.cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6.
            let a = unsafe { &*sa.cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Writes `a` into a `sockaddr_storage`; its length.
pub(crate) fn to_sockaddr(a: SocketAddr, out: &mut libc::sockaddr_storage) -> libc::socklen_t {
    // SAFETY: all-zero is a valid sockaddr_storage.
    *out = unsafe { std::mem::zeroed() };
    match a {
        SocketAddr::V4(v4) => {
            let p = (out as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>();
            // SAFETY: a sockaddr_storage holds a sockaddr_in.
            let s = unsafe { &mut *p };
            s.sin_family = libc::AF_INET as libc::sa_family_t;
            s.sin_port = v4.port().to_be();
            s.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
            size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(v6) => {
            let p = (out as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>();
            // SAFETY: a sockaddr_storage holds a sockaddr_in6.
            let s = unsafe { &mut *p };
            s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            s.sin6_port = v6.port().to_be();
            s.sin6_addr.s6_addr = v6.ip().octets();
            s.sin6_scope_id = v6.scope_id();
            size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}
