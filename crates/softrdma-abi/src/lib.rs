//! The C ABI of rdma-core 44, for the two sides of softrdma that speak it: the drop-in
//! libraries (`softrdma-capi`), which are called through it, and the kernel backend
//! (`softrdma::kernel`), which calls the system's rdma-core through it.
//!
//! The structs and constants of rdma-core 44's headers that cross the boundary, one module
//! per header: `<infiniband/verbs.h>` ([`verbs`]) and `<rdma/rdma_cma.h>` ([`rdmacm`]),
//! with the values of both headers' enums and flags that the verbs use ([`consts`]). All of
//! them are re-exported here.
//!
//! The structs are laid out as the C compiler lays them out on x86_64 (`#[repr(C)]`, the
//! same field types in the same order). Only what callers read or write is named; the rest
//! is padding of the right size. Each size and every offset a caller touches is asserted at
//! compile time, with the figures of `../shared/docs/c-abi.md`, and a unit test
//! (`tests.rs`) compiles a C file that checks the same figures, and every constant, against
//! the installed headers.

#![allow(non_camel_case_types, missing_docs)]

/// Asserts at compile time the size of each struct (`= size`, where c-abi.md gives it)
/// and the offsets of the fields callers touch (`{ field: offset }`, a nested field as
/// `outer.inner`), as a table: one line of figures per struct, read against c-abi.md.
macro_rules! assert_layout {
    ($($t:ident $(= $size:literal)? $({ $($($f:ident).+: $off:literal),* $(,)? })?;)*) => {
        const _: () = {
            $(
                $(assert!(::std::mem::size_of::<$t>() == $size);)?
                $($(assert!(::std::mem::offset_of!($t, $($f).+) == $off);)*)?
            )*
        };
    };
}

pub mod consts;
pub mod rdmacm;
pub mod verbs;

pub use consts::*;
pub use rdmacm::*;
pub use verbs::*;

#[cfg(test)]
mod tests;
