//! The device's side of a queue pair: the engine's QP behind its lock, and the CQs its
//! completions go to.

use crate::device::cq::CqInner;
use crate::sync::Lock;
use std::sync::Arc;

/// A QP as the device reaches it, from the verbs and from the receive path alike.
pub(crate) struct QpShared {
    /// The engine's QP.
    pub qp: Lock<softrdma_proto::QueuePair>,
    /// Where send completions go.
    pub send_cq: Arc<CqInner>,
    /// Where receive completions go.
    pub recv_cq: Arc<CqInner>,
    /// Whether the QP keeps a poller's socket, as of its last service (see
    /// `Poller::polled`; counted in the device's `awaiting`).
    pub awaits: std::sync::atomic::AtomicBool,
    /// Whether the QP had send WRs outstanding, as of its last service (counted in the
    /// device's `requesting`).
    pub requests: std::sync::atomic::AtomicBool,
    /// The status of its last completion in error, flushes aside (`softrdma res show -dd`).
    pub last_error: Lock<Option<softrdma_proto::WcStatus>>,
    /// Whether a same-host peer may hold a grant to place WRITEs for it (see
    /// `device::place`): revoked when it can no longer take them.
    pub granted: std::sync::atomic::AtomicBool,
}
