//! The verbs API: the objects applications use, each a handle onto the device below.
//!
//! - [`context`]: an open device (`ibv_context`).
//! - [`cq`]: completion queues and channels.
//! - [`qp`]: protection domains, queue pairs, SRQs and address handles.
//! - [`mr`]: memory regions.

pub mod context;
pub mod cq;
pub mod mr;
pub mod qp;
