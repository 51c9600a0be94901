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

pub mod consts;
pub mod rdmacm;
pub mod verbs;

pub use consts::*;
pub use rdmacm::*;
pub use verbs::*;

#[cfg(test)]
mod tests;
