//! The RoCE v2 transport as a pure state machine: RC, UC and UD queue pairs that do what Linux
//! rxe's `rxe_req.c`, `rxe_resp.c` and `rxe_comp.c` do, with no sockets, clock, threads or
//! unsafe code; and a deterministic network simulator to test them.
//!
//! # Calling contract
//!
//! A [`QueuePair`] is driven entirely by its owner:
//!
//! * **Inputs.** [`QueuePair::post_send`], [`QueuePair::post_recv`], [`QueuePair::modify`],
//!   [`QueuePair::handle_packet`] (a checked packet, already demultiplexed by destination QPN,
//!   with the IP addresses it came with) and [`QueuePair::handle_timeout`].
//! * **Outputs.** [`QueuePair::poll_transmit`] (call until `None` after every input),
//!   [`QueuePair::poll_completion`], [`QueuePair::poll_event`] and
//!   [`QueuePair::poll_timeout`] (the next instant `handle_timeout` must be called at).
//! * **Time** is an [`Instant`] passed in by the caller; it must not go backwards.
//! * **Memory** is reached only through the [`Memory`] trait given at creation, which checks
//!   key, protection domain, bounds and access flags on every access.
//! * Nothing blocks, sleeps, allocates per packet beyond the caller's buffer, or panics on
//!   any packet: bad input is dropped and counted, or answered with the NAK the IBTA rules
//!   call for. The one allocation on the packet path is on the loss path: an RC responder
//!   copies a request that arrives ahead of a gap (at most [`qp::REORDER_PSNS`] of them per
//!   QP) to execute it once the gap is filled.
//! * **Loss recovery** costs round trips, not the ACK timeout: see [`qp`] for the rules
//!   (AckReq on every window, sequence NAKs acted on at once, tail-loss probes timed from a
//!   per-QP round-trip estimate, packets kept ahead of a gap, congestion control that looks
//!   for queueing delay). The only state shared between QPs is a path's smallest round trip
//!   ([`qp::rtt::PathRtt`]), behind an atomic.
//!
//! # Not yet implemented
//! FLUSH and ATOMIC WRITE requests are refused with an invalid-request NAK; memory windows and
//! SEND with invalidate's actual invalidation are left to the device layer.

// The contract above says no unsafe code: the compiler holds this crate to it.
#![forbid(unsafe_code)]

pub mod cm;
pub mod cma;
pub mod endpoint;
pub mod faults;
#[doc(hidden)]
pub mod fuzzing;
pub mod memory;
pub mod qp;
pub mod sim;
pub mod state;
pub mod types;
pub mod workload;

pub use memory::{Access, AtomicOp, MemError, Memory, Pd, RegionBounds, SimMemory};
pub use qp::{
    LEND_MIN_BYTES, Lent, Placing, PostError, QpCaps, QpConfig, QpCounters, QueuePair, Srq,
    Transmit,
};
pub use state::{AttrMask, ModifyError, QpAttr};
pub use types::*;
