//! RDMA verbs in user space.
//!
//! This crate is what applications use: the verbs objects ([`Context`], [`ProtectionDomain`],
//! [`MemoryRegion`], [`CompletionQueue`], [`QueuePair`]) over the soft RoCE v2 device, which
//! runs the `softrdma-proto` engine behind UDP sockets (receiving on `IP:4791`, sending from
//! sockets connected to each peer) and a progress thread. One-sided operations complete
//! without the target application calling anything.
//!
//! # Layout
//! Imports go one way, top to bottom; no module imports one above it.
//!
//! - [`cm`]: the connection manager (rdma_cm's event channels and IDs), which runs the
//!   IB CM protocol of `softrdma_proto::cm` over QP1 of the device, through the verbs,
//!   and for what they do not give through one narrow interface, `cm::dev`.
//! - [`verbs`]: the objects applications hold ([`Context`], [`ProtectionDomain`],
//!   [`QueuePair`], [`CompletionQueue`], [`MemoryRegion`]), each a handle onto the device.
//! - `device`: the device core's glue: the progress thread, the region table, the QP and
//!   CQ state the device reaches, and the lock order (below). Its protocol logic (QPN
//!   demultiplexing, receive checks, ACK coalescing, timers, counter names) is the sans-I/O
//!   [`softrdma_proto::endpoint`], which the simulator drives too. Its `share` module
//!   shares a device among this user's processes: one owns the port and forwards the
//!   others their datagrams, QPNs are drawn by the owner, and the role passes on when the
//!   owner goes (its control plane is one mutex, taken by QP creation and destruction and
//!   by the progress thread; see its docs).
//! - [`datapath`]: the drivers beneath the device behind one trait: the UDP driver
//!   (batched system calls, GSO/GRO, connected send sockets with IPv4-ID learning), and the
//!   fault injector and pcap writer, each of which wraps any driver.
//! - [`kernel`]: the kernel's RDMA devices, through the system's rdma-core loaded at run
//!   time (listed and queried so far; see its docs), and `devices`, the one list of
//!   softrdma's devices and the kernel's ([`devices()`]).
//! - [`config`]: device files, [`DeviceOptions`] (every `SOFTRDMA_*` variable, read once)
//!   and the device limits table ([`config::limits`]); `counters` and `error` at the bottom.
//!
//! # Threads and locks
//! Every object is `Send` and `Sync`; any thread may call any verb. A device has one
//! progress thread of its own, which receives, runs timers and publishes counters; an
//! application thread that polls an empty CQ does the same work itself while it spins (see
//! `device`), and a connected send path has a learner thread that probes IPv4 IDs, which no
//! caller ever waits for.
//!
//! No lock is held across user code (the lending poll holds none between its calls) or
//! across a system call that can block (every socket is non-blocking; the probes that wait
//! run on the learner thread, holding nothing). The one exception is a capture
//! (`SOFTRDMA_PCAP`, a debugging aid): its records go to a buffered file under the
//! capture's lock, and a full buffer is written out there. A route to a QPN of
//! another process on the same host, which needs the device's owner (a request that waits
//! up to 2 s, then a Unix `connect`), is looked up when a QP is given that destination, by
//! the modifying thread with no lock held (or, under the CM's lock, by a resolver thread,
//! `device::resolver`, and the active side's ESTABLISHED waits for it, so that its QP's
//! first packet finds the route); a send never looks one up: one that finds no route
//! takes the UDP path meanwhile.
//!
//! Every lock is a `sync::Lock` or `sync::RwLock` made with a `sync::Rank`, which handles
//! poisoning in one place. A thread takes locks in increasing rank only, and never two
//! locks of one rank (never two QPs' or two CQs'): debug builds check it on every
//! acquisition, so every test run checks the order below. `try_lock` (marked *try*) is not
//! checked, for it cannot wait. The drop-in C ABI (`softrdma-capi`) makes its locks of the
//! same type (the module is public, hidden, for it and the fabric layer, `softrdma-fabric`),
//! and they come first: each holds them around its calls into this crate, and this crate
//! never calls them back. The drop-in's crate docs say which lock has which of its ranks.
//! The ranks, outermost first:
//!
//! | rank | the locks | taken |
//! |---|---|---|
//! | `FiObjects`, `FiEpSetup`, `FiEq` | the native libfabric provider's (`softrdma-fi`) live objects, an endpoint's bindings, an EQ's requests not yet taken | alone, never around another |
//! | `FiDomain` | a native-provider domain's device, opened on first use | around opening it: softrdma's own locks under it |
//! | `CapiIdsLive` | the drop-in's gate between an event and an ID's destruction | read to convert an event, write to unhook an ID |
//! | `CapiIdRust`, `CapiIdAlso` | a drop-in ID's softrdma IDs | around a call on them, or their drop |
//! | `CapiIdPeer`, `CapiIdGroups`, `CapiIdAcks` | a drop-in ID's REQ, groups, event counts | leaves of the drop-in's CM |
//! | `CapiChannels` | the drop-in's live event channels | around listing, finding or unlisting one |
//! | `CapiCmContexts` | the contexts the drop-in's CM keeps open | around opening one |
//! | `CapiDeviceOpen` | a drop-in device's open soft device | around opening or closing it |
//! | `CapiLibraryPds` | the drop-in's PDs for the CM | around allocating one |
//! | `CapiDeviceLists` | the drop-in's device lists | around reading the configuration |
//! | `CapiContextQps`, `CapiContextCqs` | a drop-in context's QPs and CQs | to name an async event's object |
//! | `CapiCqCursor` | a drop-in extended CQ's current completion | around its poll |
//! | `CapiContextSrqs`, `CapiSrqAttr` | a drop-in context's SRQs, an SRQ's attributes | to name an async event's SRQ, to arm a limit |
//! | `CapiQpBatch` | a drop-in QP's `ibv_wr_*` batch | per builder call |
//! | `CapiPorts` | the drop-in's bound rdma_cm ports | leaf |
//! | `FabricDomains` | the fabric layer's open domains, by address | around opening one: softrdma's own locks under it |
//! | `FabricCqBound` | the endpoints a `softrdma-fabric` CQ or counter drives | to list them, alone |
//! | `FabricEp` | a fabric endpoint's state | by its calls, its CQ's reads and its progress thread, around calls into this crate |
//! | `FabricAv`, `FabricCqEntries`, `FabricEq` | a fabric address vector's table, a fabric CQ's entries, a fabric EQ's events | leaves, under `FabricEp` |
//! | `CmCores` | `cm`'s registry of agent hosts (`CORES`) | to find or start a device's CM host |
//! | `CmAgent` | a CM host's state (`Core::st`) | by the CM thread and by ID verbs; *try* by pollers serving inline |
//! | `CmGate` | a CM host's inline-service gate | *try* only |
//! | `CmId` | an rdma_cm ID's state | under the agent's, for its events |
//! | `CmIdChannel` | the channel an ID reports to | to queue an event, or migrate the ID |
//! | `CmDropped` | IDs dropped while the host was busy | leaf of the CM |
//! | `CmEvents` | an event channel's queue | leaf of the CM |
//! | `Sweeping` | the timer pass's own mark | *try* only |
//! | `Rx` | a device's receive state | a drain; pollers *try* it |
//! | `QpTable` | a device's QP table | read for a lookup, write to create or destroy a QP |
//! | `Paths` | round-trip records per peer | when a QP is connected |
//! | `Qp` | one QP's engine | to post, to handle its packets, for its timers |
//! | `QpError` | the status a QP's last flush completed with | under its QP's |
//! | `LocalLookup` | one lookup of a QPN's process at a time | by the resolver thread, around asking the owner and connecting |
//! | `LocalRoutes` | the same-host path's routes | to divert a QP's packets; briefly by a lookup |
//! | `LocalWanted` | QPNs to look up | under the routes', when a send finds none |
//! | `ShareCtl` | the sharing control state (role, slots, QPN draw) | to ask or serve the owner |
//! | `ShareRoutes` | the owner's QPN forwarding table | read per forwarded datagram |
//! | `ShareCm` | the owner's CM routes | read per CM datagram |
//! | `ShareHeldReqs`, `ShareWaitingReqs` | REQs held for a listener to come | owner, on a REQ or a listen |
//! | `ShareProbes` | steering probes in flight | on a probe |
//! | `LocalConns` | ring connections by peer process | to connect or accept |
//! | `LocalRing` | one ring's producer end | to push a packet |
//! | `LocalIncoming` | the rings a process receives on | to poll them |
//! | `LocalPlacements` | grants held from peers | to place a WRITE directly |
//! | `PlaceIssued` | grants this process issued | to grant or revoke |
//! | `PlaceFree` | free grant slots | under the issued list |
//! | `Cq` | one CQ's state | to push or poll a completion |
//! | `CqReady` | a completion channel's list of CQs with events | under a CQ's, to signal |
//! | `CqPollers` | the devices a channel's waiter polls | to register a CQ's device |
//! | `AsyncSubs` | a device's async-event subscribers | to subscribe or deliver |
//! | `AsyncQueue` | one async-event queue | under the subscribers' |
//! | `Timers` | a device's timer queue | when a deadline moves earlier, and per pass |
//! | `Deferred` | the deferred-ACK batch | to hold or flush ACKs |
//! | `Retired` | counters of destroyed QPs | to fold a QP's in |
//! | `Groups` | a device's multicast groups | attach, detach, and per multicast datagram (after the QP table) |
//! | `Faults` | the fault injector's held packets | per packet with faults on |
//! | `Pcap` | the capture file | per packet with a capture |
//! | `TxConns` | connected sockets by destination | read per send call |
//! | `TxConn` | one connected socket | for its send call |
//! | `Learner` | the queue to the IPv4-ID learner | to hand it a job |
//! | `UdpHandbacks`, `UdpKeep`, `UdpGroups` | the UDP driver's extra sockets | setup and teardown |
//! | `Loopback`, `LoopbackIdent` | the loopback fabric (tests) | per packet |
//! | `ResFields` | an object's published `res show` fields | to publish |
//! | `ResLists` | the lists `res show` publishes | to publish, after the fields |
//! | `VerbsOwned` | a QP's buffers posted by value | by the verbs, with no device lock |
//!
//! One lock is outside the type: the region table (`device::handoff::Registry`) is a
//! standard `RwLock` because loom's models check its hand-off with loom's own lock. It is
//! taken alone (a read per SGE or payload, a write to register or deregister), under a QP's
//! at most, and takes nothing under it.
//!
//! The verbs hold a lock of their own only around their own work: a QP's table of buffers
//! posted by value (`owned`), taken with no device lock held.
//!
//! Locks per packet, after this design (before it in brackets):
//!
//! - **A data packet received:** its QP's lock twice (to handle it, then once per batch to
//!   service it, its response coalesced with the batch's others), the region table's read
//!   lock for the payload, and a CQ lock per completion. The receive state is taken once
//!   per batch, and the QP table's read lock only when a packet's QP differs from the
//!   previous packet's. The same as before.
//! - **A WR posted:** its QP's lock, the region table's read lock per SGE, the connected
//!   socket's lock per send call, and a CQ lock when it completes on transmit (UC, UD).
//!   The timer queue's lock only when the QP's deadline moves earlier than the entry it has
//!   (a QP that goes from idle to busy): in a ping-pong about once per round of its
//!   probe timer, not once per message. [Before: an atomic minimum per WR, no lock.]
//! - **Each timer pass:** `sweeping`; the timer queue's lock once per entry due and three
//!   times more (its size, the first empty look and the final peek); per entry due, a QP-table read lock and
//!   that QP's lock; the fault injector's lock when faults are on. Idle QPs cost nothing.
//!   [Before: `sweeping`, the QP-table read lock, and every QP's lock, on every pass of the
//!   progress thread and of each poller whose deadline came.]
//!
//! # Memory safety
//! Work requests name memory by keys and addresses inside registered regions; the device
//! checks every access against the region table, so posting is safe. A region registered from
//! an owned buffer keeps the buffer alive for as long as the device might touch it: dropping
//! the [`MemoryRegion`] deregisters it, and any later access through its keys fails with a
//! protection error instead of touching freed memory. Only [`ProtectionDomain::register_raw`]
//! is `unsafe`: the caller promises the memory outlives the registration.
//!
//! As on a real NIC, the contents of a region that a peer may be writing are unspecified
//! while the operation is in flight; read them after its completion. Concurrent access is
//! treated like DMA: the device reaches region memory only through raw-pointer copies and
//! 64-bit atomics, never through a Rust reference, so a race between a peer's WRITE, a
//! send's gather and the application leaves unspecified bytes, not undefined behaviour in
//! the device (see [`MemoryRegion::read`] and [`MemoryRegion::write`], which copy likewise).
//! The lending poll ([`CompletionQueue::poll_lending`]) holds no lock between calls, so its
//! loop may post, poll, re-arm and create or destroy QPs.

pub mod cm;
pub mod config;
mod counters;
pub mod datapath;
mod device;
mod devices;
mod error;
mod eventfd;
/// The ranked lock type, public for the drop-in C ABI (`softrdma-capi`) and the fabric
/// layer (`softrdma-fabric`) alone, whose locks share softrdma's order; see the module docs.
#[doc(hidden)]
pub mod kernel;
pub mod sync;

/// Entry points for the fuzzers (`fuzz/`), not part of the API.
#[doc(hidden)]
pub mod fuzzing {
    /// Drives a shared device's control plane (the owner's) with the events `data` makes
    /// (members that connect, send records raw or well formed, and hang up; this
    /// process's own draws and listens; time passing), checking its invariants after
    /// each; panics on the first that fails.
    pub fn share_control(data: &[u8]) {
        crate::device::share::fuzz_control(data);
    }
}
pub mod verbs;

#[cfg(test)]
mod rig_tests;

pub use config::{DeviceAttr, DeviceOptions, PortAttr, default_addr, device_attr, port_attr};
pub use counters::DeviceCounters;
pub use device::events::AsyncEventQueue;
pub use device::share::set_verbose as set_share_log;
pub use devices::{Device, devices};
pub use error::ShareError;
/// The version of the protocol between the processes that share a device. Processes of
/// different versions refuse each other with an error that says so.
pub const SHARE_PROTOCOL_VERSION: u32 = device::share::msg::VERSION;
pub use device::stats;
pub use error::{CmError, Error, McastError, PortHolder, Result};
pub use softrdma_proto::endpoint::Counter;
pub use softrdma_proto::faults::{FaultsError, LinkFaults, LinkRate};
pub use softrdma_proto::{
    AccessFlags, AddressVector, AsyncEvent, Completion, Mtu, Payload, QpAttr, QpState, QpType,
    RecvWr, SendFlags, SendOp, SendWr, SgList, Sge, UdDest, WcFlags, WcOpcode, WcStatus, sg,
};
pub use softrdma_proto::{QpCaps, QpCounters};
pub use softrdma_wire::{Psn, Qpn};
pub use verbs::context::Context;
pub use verbs::cq::{CompletionChannel, CompletionQueue, Polled};
pub use verbs::mr::MemoryRegion;
pub use verbs::qp::{
    AddressHandle, ConnectAttr, Peer, ProtectionDomain, QpInitAttr, QueuePair, SharedReceiveQueue,
};
