//! softrdma's fabric layer: libfabric's model (address vectors, completion queues,
//! endpoints that need no connection managed by hand) in Rust, over softrdma's verbs.
//!
//! The [`Fabric`] lists softrdma's devices; a [`Domain`] is one of them, open, with memory
//! [`Region`]s good on all its endpoints. The reliable-datagram endpoint ([`Endpoint`],
//! `FI_EP_RDM`) offers messages and tagged messages (eager and by rendezvous, and into
//! multi-receive buffers), RMA (with 64 bits of remote CQ data), atomics, completion
//! queues (with a pollable descriptor if asked) and [`Counter`]s, and automatic progress.
//! The connected endpoint ([`MsgEndpoint`], `FI_EP_MSG`) is one RC connection, made
//! through a [`PassiveEndpoint`] with its events on an [`EventQueue`]; the datagram
//! endpoint ([`DgramEndpoint`], `FI_EP_DGRAM`) is one UD QP. Every endpoint names its peers
//! by IP address and port. libsoftrdma-fi.so (crate `softrdma-fi`) is the same layer as a
//! libfabric provider; `docs/fabric-provider.md` says what libfabric asks of one.
//!
//! ```no_run
//! use softrdma_fabric::{AddressVector, CompletionQueue, Endpoint, SendOpts, FI_ADDR_UNSPEC};
//! use std::sync::Arc;
//! let (av, cq) = (Arc::new(AddressVector::new()), CompletionQueue::new());
//! let ep = Endpoint::open("127.0.0.1:7000".parse().unwrap(), av.clone(), cq.clone())?;
//! let peer = av.insert("127.0.0.2:7000".parse().unwrap());
//! ep.recv(vec![0; 64], FI_ADDR_UNSPEC, 1)?;
//! ep.send(peer, b"hello".to_vec(), 2, SendOpts::default())?;
//! for c in cq.wait(2, std::time::Duration::from_secs(5)) {
//!     println!("{} done: {} bytes", c.context, c.len);
//! }
//! # Ok::<(), softrdma_fabric::FabricError>(())
//! ```
//!
//! Layers, lowest first: `wire` (the protocol's header, sans-I/O) and `matching` (which
//! receive a message goes to, sans-I/O); `ready` (a queue's descriptor); `addr`, `cq`,
//! `counter`, `eq` and `error`;
//! `domain` (the fabric, domains and regions); `auto` (the progress threads); `rdm`, `msg`
//! and `dgram`, the endpoints.

mod addr;
mod auto;
mod buf;
mod counter;
mod cq;
mod dgram;
mod domain;
mod eq;
mod error;
/// Entry points for the fuzzers (`fuzz/`), not part of the API.
#[doc(hidden)]
pub mod fuzzing;
pub mod matching;
mod msg;
mod rdm;
mod ready;
pub mod wire;

pub use addr::AddressVector;
pub use buf::Buf;
pub use counter::{CountOf, Counter, Waited};
pub use cq::{Completion, CompletionQueue, errno, flags};
pub use dgram::DgramEndpoint;
pub use domain::{Access, Domain, DomainInfo, Fabric, Region};
pub use eq::{ACCEPT_DATA_MAX, CONNECT_DATA_MAX, ConnRequest, Event, EventQueue};
pub use error::{FabricError, Result};
pub use matching::{FI_ADDR_UNSPEC, FiAddr};
pub use msg::{MsgEndpoint, PassiveEndpoint};
pub use rdm::{AtomicOp, EAGER_MAX, Endpoint, RmaOpts, SendOpts};

/// The endpoints' maps, looked up several times per message (by QPN, WR id, peer
/// address): foldhash, seeded per process, where std's SipHash cost about 1,200
/// instructions of a ping-pong turn's 16,000 (callgrind). Keys may be a peer's choice,
/// so the seed stays random.
pub(crate) type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
