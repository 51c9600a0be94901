//! The C ABI of rdma-core 44 over softrdma: this crate is built as the drop-in
//! `libibverbs.so.1` (which serves `librdmacm.so.1` too, through a second name for the same
//! file), so that unmodified RDMA programs (`ibv_devinfo`, `ibv_rc_pingpong`, perftest,
//! qperf, pyverbs, libfabric, UCX) run on the soft device. `softrdma exec -- PROGRAM` puts it
//! on the program's `LD_LIBRARY_PATH`.
//!
//! It is the only crate of the project with `extern "C"` and `#[repr(C)]` (besides the stub
//! `libmlx5.so.1` and `libefa.so.1` beside it, which carry symbols only). The facts it meets
//! are those of `../shared/docs/c-abi.md`: every symbol and version node the callers import
//! (they are BIND_NOW), `ibv_context` at the end of a `struct verbs_context` with
//! `abi_compat = -1`, and the objects' public structs as the prefix of each object.
//!
//! # Layout
//! Each module depends only on those listed before it:
//! - [`abi`]: the structs and constants of `verbs.h` and `rdma_cma.h`, with their layout
//!   checks;
//! - `ffi`: what every entry point is written with (the panic guard, errno and failure
//!   conventions, the C objects' boxes, C strings and socket addresses);
//! - `verbs`: libibverbs, one module per kind of object and verb;
//! - `rdmacm`: librdmacm over the verbs, split as rdma-core's `librdmacm` is;
//! - `symbols`: every exported symbol, bound to its version node.
//!
//! # The contract with C callers
//! - Every exported function runs its body in `ffi::entry`, which catches panics: none
//!   crosses into C. A caught panic is a bug; the verb then fails with EIO.
//! - errno and return values follow each verb's man page: pointer-returning verbs return
//!   NULL and set errno; int-returning verbs return 0 or an errno value (and set errno too,
//!   which rdma-core does for some). A verb softrdma does not implement returns EOPNOTSUPP,
//!   which pyverbs, UCX and libfabric probe for. With `SOFTRDMA_DEBUG=1` each failure is
//!   also printed, with the softrdma error that names what was wrong.
//! - Pointers are the caller's: NULL is checked where the API allows it or where a check
//!   is free; an object pointer that did not come from this library is undefined behaviour,
//!   as it is with rdma-core.
//!
//! # Threads and locks
//! Any thread may call any verb, as with rdma-core. The objects wrap the Rust verbs
//! objects (`softrdma::QueuePair` and the others), which are `Send + Sync` and take the
//! device's locks in the order `softrdma`'s crate docs give. This crate adds one lock on a
//! hot path, none: `post_send`, `post_recv` and `poll_cq` go straight to the Rust objects.
//! Its own locks are leaves, taken for object creation and lookup only: the device table's
//! per-device open state, a context's QPN → QP map (for async events), and a QP's
//! `ibv_wr_*` builder (which the application must not share between threads anyway).
//!
//! One-sided operations need no call from the target: each open device has the soft
//! device's progress thread, which applies incoming WRITE, READ and atomics to the
//! registered memory, the application's own, in place.

pub mod abi;
mod ffi;
mod rdmacm;
mod symbols;
mod verbs;

/// The C ABI this library speaks: rdma-core 44's `libibverbs.so.1` (up to its newest
/// version node, and the provider ABI that rdma-core's own providers check) and
/// `librdmacm.so.1`. A unit test holds it to `libibverbs.map`.
pub const ABI: &str =
    "rdma-core 44 (libibverbs.so.1 IBVERBS_1.14, IBVERBS_PRIVATE_34; librdmacm.so.1 RDMACM_1.3)";

#[cfg(test)]
mod abi_tests {
    /// [`super::ABI`] names the newest version node of each family in `libibverbs.map`.
    #[test]
    fn abi_names_the_newest_version_nodes_of_the_map() {
        let map = include_str!("../libibverbs.map");
        let newest = |family: &str| {
            map.lines()
                .filter_map(|l| l.split_whitespace().next())
                .rfind(|n| n.starts_with(family))
                .unwrap_or_else(|| panic!("no {family} node in libibverbs.map"))
                .to_owned()
        };
        for family in ["IBVERBS_1.", "IBVERBS_PRIVATE_", "RDMACM_1."] {
            let node = newest(family);
            assert!(super::ABI.contains(&node), "ABI does not name {node}");
        }
    }
}
