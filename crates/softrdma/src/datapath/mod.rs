//! The datapaths beneath the device: how its packets leave and arrive.
//!
//! - `socket` and `batch`: the UDP driver's system calls, `recvmmsg`/`sendmmsg` with
//!   GRO and GSO, and the send batch every packet goes through.
//! - `tx`: the sockets that send, connected to each peer, with the IPv4 identification
//!   learnt off the caller's path.
//! - [`pcap`]: the capture writer.
//!
//! The fault model that `SOFTRDMA_FAULTS` drives is [`softrdma_proto::faults`], the one the
//! simulator uses; the device applies it as it sends (see `crate::device`).
//!
//! Nothing here knows QPs, CQs or the verbs: the layers above hand it bytes and addresses.

pub(crate) mod batch;
pub mod pcap;
pub(crate) mod socket;
pub(crate) mod tx;
