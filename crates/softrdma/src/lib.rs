//! RDMA verbs in user space.
//!
//! This crate is what applications use: the verbs objects ([`Context`], [`ProtectionDomain`],
//! [`MemoryRegion`], [`CompletionQueue`], [`QueuePair`]) over the soft RoCE v2 device, which
//! runs the `softrdma-proto` engine behind UDP sockets (receiving on `IP:4791`, sending from
//! sockets connected to each peer) and a progress thread. One-sided operations complete without the target application calling anything.
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

pub mod config;
mod counters;
pub mod datapath;
mod device;
mod error;
pub mod verbs;

pub use config::{DeviceAttr, DeviceOptions, PortAttr, default_addr, device_attr, port_attr};
pub use counters::DeviceCounters;
pub use device::stats;
pub use error::{Error, Result};
pub use softrdma_proto::endpoint::Counter;
pub use softrdma_proto::faults::{FaultsError, LinkFaults};
pub use softrdma_proto::{
    AccessFlags, AddressVector, AsyncEvent, Completion, Mtu, Payload, QpAttr, QpState, QpType,
    RecvWr, SendFlags, SendOp, SendWr, Sge, UdDest, WcFlags, WcOpcode, WcStatus,
};
pub use softrdma_proto::{QpCaps, QpCounters};
pub use softrdma_wire::{Psn, Qpn};
pub use verbs::context::Context;
pub use verbs::cq::{CompletionChannel, CompletionQueue, Polled};
pub use verbs::mr::MemoryRegion;
pub use verbs::qp::{
    AddressHandle, ConnectAttr, Peer, ProtectionDomain, QpInitAttr, QueuePair, SharedReceiveQueue,
};
