//! What this crate's end-to-end tests build alike.

use softrdma::*;

/// A signaled WR of `op` that gathers from the one `sge`.
pub fn signaled(wr_id: u64, op: SendOp, sge: Sge) -> SendWr {
    SendWr {
        wr_id,
        op,
        payload: Payload::Sges(softrdma_proto::sg![sge]),
        flags: SendFlags::SIGNALED,
        ud: None,
    }
}
