//! The stub generator the stub provider libraries share: `stubs!` defines each function
//! (taking no parameters: on x86_64 System V a callee may ignore its register arguments,
//! so one definition serves any signature) and binds it to its version node with
//! `.symver` (left out of unit tests, whose executables have no version script).
//!
//! A crate of its own, rather than a file the stubs include, so that each stub package is
//! whole when published.

#[doc(hidden)]
pub use libc;

/// Sets errno to EOPNOTSUPP.
pub fn unsupported() {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
}

/// One stub function of a kind (`int`, `ssize`, `ptr`, `bool`, `void`).
#[doc(hidden)]
#[macro_export]
macro_rules! stub_fn {
    (int $name:ident) => {
        #[doc = concat!("`", stringify!($name), "`: EOPNOTSUPP.")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name() -> std::ffi::c_int {
            $crate::unsupported();
            $crate::libc::EOPNOTSUPP
        }
    };
    (ssize $name:ident) => {
        #[doc = concat!("`", stringify!($name), "`: -1, errno EOPNOTSUPP.")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name() -> isize {
            $crate::unsupported();
            -1
        }
    };
    (ptr $name:ident) => {
        #[doc = concat!("`", stringify!($name), "`: NULL, errno EOPNOTSUPP.")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name() -> *mut std::ffi::c_void {
            $crate::unsupported();
            std::ptr::null_mut()
        }
    };
    (bool $name:ident) => {
        #[doc = concat!("`", stringify!($name), "`: false (no device is of this kind).")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name() -> bool {
            false
        }
    };
    (void $name:ident) => {
        #[doc = concat!("`", stringify!($name), "`: nothing to do.")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name() {}
    };
}
/// The stubs of a library: `"NODE" KIND: NAME NAME ...;` lines.
#[macro_export]
macro_rules! stubs {
    ($($node:literal $kind:ident: $($name:ident)*;)*) => {
        $($($crate::stub_fn!($kind $name);)*)*
        #[cfg(not(test))]
        std::arch::global_asm!($($(concat!(".symver ", stringify!($name), ", ", stringify!($name), "@@", $node),)*)*);
    };
}
