//! The stub generator the stub provider libraries share: `stubs!` defines each function
//! (taking no parameters: on x86_64 System V a callee may ignore its register arguments,
//! so one definition serves any signature) and binds it to its version node with
//! `.symver` (left out of unit tests, whose executables have no version script).

/// Sets errno to EOPNOTSUPP.
pub(crate) fn unsupported() {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
}

macro_rules! stub_fn {
    (int $name:ident) => {
        #[doc = concat!("`", stringify!($name), "`: EOPNOTSUPP.")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name() -> std::ffi::c_int {
            stub::unsupported();
            libc::EOPNOTSUPP
        }
    };
    (ssize $name:ident) => {
        #[doc = concat!("`", stringify!($name), "`: -1, errno EOPNOTSUPP.")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name() -> isize {
            stub::unsupported();
            -1
        }
    };
    (ptr $name:ident) => {
        #[doc = concat!("`", stringify!($name), "`: NULL, errno EOPNOTSUPP.")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name() -> *mut std::ffi::c_void {
            stub::unsupported();
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
pub(crate) use stub_fn;

macro_rules! stubs {
    ($($node:literal $kind:ident: $($name:ident)*;)*) => {
        $($(stub::stub_fn!($kind $name);)*)*
        #[cfg(not(test))]
        std::arch::global_asm!($($(concat!(".symver ", stringify!($name), ", ", stringify!($name), "@@", $node),)*)*);
    };
}
pub(crate) use stubs;
