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
//! device's locks in the order `softrdma`'s crate docs give. `post_send`, `post_recv` and
//! `poll_cq` take no lock of this crate: they go straight to the Rust objects. The
//! extended CQ's poll (`ibv_start_poll` and the `ibv_wc_read_*` calls) takes the CQ's
//! cursor, and `ibv_post_srq_recv` the SRQ's attributes, uncontended unless the
//! application shares the CQ or SRQ between threads.
//!
//! Every lock here is a `softrdma::sync::Lock` or `RwLock` (softrdma's one ranked lock
//! type, public for this crate), so poisoning is handled there and debug builds check the
//! order on every acquisition. This crate holds its locks around calls into softrdma (an
//! open, a poll, a call on a softrdma ID, the drop of one) and softrdma never calls back
//! into it, so its ranks come before all of softrdma's. A thread takes them in this order
//! only, outermost first:
//!
//! | rank | the lock | held across |
//! |---|---|---|
//! | `CapiIdsLive` | `rdmacm::id::LIVE`: read while an event finds its ID, written while `rdma_destroy_id` unhooks it | the event's conversion: device opens, the library PD, the ID's locks, softrdma's CM |
//! | `CapiIdRust` | an ID's softrdma ID (`IdC::rust`) | calls on it, and its drop |
//! | `CapiIdAlso` | a wildcard listener's IDs on other devices (`IdC::also`) | calls on them, and their drop |
//! | `CapiIdPeer` | what the peer's REQ offered (`IdC::peer`) | nothing |
//! | `CapiIdGroups` | an ID's multicast joins (`IdC::groups`) | nothing |
//! | `CapiIdAcks` | an ID's events handed out and acked (`IdC::acks`, with the condition variable `acked`) | nothing |
//! | `CapiChannels` | the live event channels, by address (`rdmacm::id::CHANNELS`) | nothing but the drop of a channel's handle |
//! | `CapiCmContexts` | the contexts the CM keeps open (`cm_context`'s `OPEN`) | the device list, `ibv_open_device` |
//! | `CapiDeviceOpen` | a device's open soft device (`SoftDevice::open`) | softrdma's open and close of the device |
//! | `CapiLibraryPds` | the CM's PD per context (`LIBRARY_PDS`) | `ibv_alloc_pd` |
//! | `CapiDeviceLists` | the device lists per fork generation (`LISTS`) | reading the configuration |
//! | `CapiContextQps` | a context's QPN → QP map (`SoftContext::qps`) | nothing |
//! | `CapiContextCqs` | a context's live CQs (`SoftContext::cqs`) | each CQ's overflow check |
//! | `CapiCqCursor` | an extended CQ's current completion (`SoftCq::cur`) | the CQ's poll |
//! | `CapiContextSrqs` | a context's live SRQs (`SoftContext::srqs`) | each SRQ's attributes |
//! | `CapiSrqAttr` | an SRQ's attributes (`SoftSrq::attr`) | arming or checking its limit |
//! | `CapiQpBatch` | a QP's `ibv_wr_*` batch (`SoftQp::batch`) | nothing |
//! | `CapiPorts` | the ports the process's IDs are bound to (`rdmacm::ports`'s `BOUND`) | nothing |
//!
//! One-sided operations need no call from the target: each open device has the soft
//! device's progress thread, which applies incoming WRITE, READ and atomics to the
//! registered memory, the application's own, in place.

pub use softrdma_abi as abi;
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
mod lock_tests {
    use softrdma::sync::Rank;

    /// The crate docs' lock table lists every rank of this crate (softrdma names them
    /// `Capi…`), in rank order.
    #[test]
    fn the_crate_docs_list_every_rank_of_the_drop_in_in_order() {
        let docs = include_str!("lib.rs");
        let docs = &docs[..docs.find("\n#[cfg(test)]").unwrap_or(docs.len())];
        let mut at = 0;
        for r in Rank::ALL {
            let name = format!("`{r:?}`");
            if !name.starts_with("`Capi") {
                continue;
            }
            let found = docs[at..]
                .find(&name)
                .unwrap_or_else(|| panic!("lib.rs lists no {name} after the previous rank"));
            at += found + name.len();
        }
    }
}

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
