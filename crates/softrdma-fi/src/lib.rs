//! softrdma's native libfabric provider, `libsoftrdma-fi.so`: libfabric 1.17 loads it from
//! `FI_PROVIDER_PATH` (`softrdma exec` sets it) and calls [`fi_prov_ini`]. Its name is
//! `softrdma`; it offers the fabric layer's (`softrdma-fabric`) endpoints on each softrdma
//! device: reliable-datagram (`FI_EP_RDM`: messages, tagged messages, multi-receive, RMA,
//! 64-bit add, read and compare-and-swap atomics, counters), connected (`FI_EP_MSG`:
//! messages, RMA, the same atomics, counters) and datagram (`FI_EP_DGRAM`: messages,
//! counters); its CQs and EQs may have a pollable descriptor (`FI_WAIT_FD`).
//!
//! The provider ABI, and what libfabric, `fi_pingpong` and Open MPI ask of it, are in
//! `docs/fabric-provider.md`. Layers, lowest first: `abi` (the C structs and constants,
//! their layouts checked at compile time) and `sockaddr` (names); `entry` (the panic
//! guard, the registry of live objects, the stubs); `info` (`fi_getinfo`); the objects,
//! `domain`, `av`, `cq`, `cntr`, `eq`, `mr`, `pep` and `ep` (with `wait`, the blocking
//! reads); `xfer` (messages) and `rma` (RMA and atomics), the endpoint's data operations;
//! `endpoint` (opening one); and on top `fabric` (the fabric, and the opening of domains
//! with their operations).
//!
//! Every entry point checks its fid against the registry, so a freed or foreign fid
//! gets `-FI_EINVAL` instead of a crash (where libfabric's inline wrapper reached the
//! provider at all), and catches panics (`-FI_EOTHER`). No libfabric function is
//! called: the infos are built with `malloc`, so the library needs no link to
//! `libfabric.so.1` and loads under any libfabric of the 1.x ABI.
//!
//! Threads and locks: any thread may call any entry point. The provider's own locks
//! (`FiObjects`, `FiEpSetup`, `FiEq`) are each taken alone, `FiDomain` around opening a
//! device; the fabric layer's endpoints run their own progress threads.

mod abi;
mod av;
mod cntr;
mod cq;
mod domain;
mod endpoint;
mod entry;
mod ep;
mod eq;
mod fabric;
mod info;
mod mr;
mod pep;
mod rma;
mod sockaddr;
mod wait;
mod xfer;

use abi::{Slot, fi_context, fi_provider, fi_version};
use std::cell::UnsafeCell;

/// The provider's own version (`fi_info -l` prints it): softrdma's minor and patch.
pub const PROVIDER_VERSION: u32 = fi_version(0, 1);
/// The libfabric API it implements.
const API_VERSION: u32 = fi_version(1, 17);

/// The provider: in writable memory, because libfabric's core writes its `context`.
struct Provider(UnsafeCell<fi_provider>);

// SAFETY: libfabric reads and writes the struct during its single-threaded
// initialisation only (under its own init lock); this crate never touches it after.
unsafe impl Sync for Provider {}

static PROVIDER: Provider = Provider(UnsafeCell::new(fi_provider {
    version: PROVIDER_VERSION,
    fi_version: API_VERSION,
    // libfabric's core keeps its own `struct ofi_prov_context { enum type; bool
    // disable_logging; bool disable_layering; }` here (include/ofi.h, unchanged from 1.17
    // to 2.x); byte 5, `disable_layering`, is preset, as the core itself sets it for shm,
    // efa and sockets: `-p softrdma` then means the native endpoints, and `ofi_rxm` or
    // `ofi_rxd` layer over softrdma's MSG and DGRAM endpoints only when named
    // (`-p "softrdma;ofi_rxm"`). The core writes `type` and never clears the flag
    // (docs/fabric-provider.md §7).
    context: fi_context {
        internal: [
            std::ptr::without_provenance_mut(1 << 40),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        ],
    },
    name: c"softrdma".as_ptr(),
    getinfo: info::getinfo as Slot,
    fabric: fabric::fabric_open as Slot,
    cleanup: cleanup as Slot,
}));

/// libfabric's entry point for an external provider (`man fi_provider`).
#[unsafe(no_mangle)]
pub extern "C" fn fi_prov_ini() -> *mut fi_provider {
    PROVIDER.0.get()
}

/// Called by libfabric at exit (then it `dlclose`s the library, which `-z nodelete`
/// keeps mapped): nothing to release that the process's end does not.
extern "C" fn cleanup() {}
