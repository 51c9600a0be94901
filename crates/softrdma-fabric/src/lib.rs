//! softrdma's fabric layer: libfabric's model (address vectors, completion queues,
//! endpoints that need no connection managed by hand) in Rust, over softrdma's verbs.
//!
//! This first part is the reliable-datagram endpoint ([`Endpoint`], `FI_EP_RDM`): messages
//! and tagged messages, eager and by rendezvous, RMA, and automatic progress. The rest of
//! issue 40 (domains and fabrics as objects, MSG and DGRAM endpoints, atomics, counters,
//! multi-receive, a pollable CQ, and the C provider `libsoftrdma-fi.so`) builds on it.
//! See `docs/fabric-provider.md` for what libfabric asks of a provider.
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
//! receive a message goes to, sans-I/O); `addr`, `cq` and `error`; `rdm`, the endpoint,
//! which alone calls softrdma.

mod addr;
mod buf;
mod cq;
mod error;
/// Entry points for the fuzzers (`fuzz/`), not part of the API.
#[doc(hidden)]
pub mod fuzzing;
pub mod matching;
mod rdm;
pub mod wire;

pub use addr::AddressVector;
pub use buf::Buf;
pub use cq::{Completion, CompletionQueue, errno, flags};
pub use error::{FabricError, Result};
pub use matching::{FI_ADDR_UNSPEC, FiAddr};
pub use rdm::{Access, EAGER_MAX, Endpoint, Region, SendOpts};
