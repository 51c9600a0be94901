//! What this crate's end-to-end tests build alike.

use softrdma::*;

/// A signaled WR of `op` that gathers from the one `sge`.
pub fn signaled(wr_id: u64, op: SendOp, sge: Sge) -> SendWr {
    SendWr::signaled(wr_id, op, Payload::Sges(softrdma_proto::sg![sge]))
}
