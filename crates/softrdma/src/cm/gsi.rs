//! QP1 plumbing (the General Services Interface): its receive buffers, taking what it
//! received to the agent (`Core::service`), and sending the agent's MADs
//! (`Core::send`), each a UD datagram to the peer's QP1.
//!
//! Calls the verbs (post, poll, region read). Locks: called under `CmAgent`; takes
//! `CmDropped` (a reap) and, through the verbs, QP1's `Qp` and its CQs' `Cq`.

use super::objects::{Core, CoreSt};
use crate::error::Result;
use crate::verbs::qp::QueuePair;
use softrdma_proto::{Payload, RecvWr, SendFlags, SendOp, SendWr, UdDest, WcOpcode, WcStatus};
use softrdma_wire::Qpn;
use softrdma_wire::cm::{self as wire, CmMad, GSI_QKEY, GSI_QPN};
use std::net::IpAddr;
use std::sync::atomic::Ordering;

/// Receive buffers kept posted on QP1 (a UD receive starts with its 40-byte GRH area),
/// so that a burst of MADs (cmtime's 1,000 connections, or their DREQs, at once) waits
/// in the queue instead of being dropped and resent half a second later. Four times
/// Linux's `IB_MAD_QP_RECV_SIZE`: a receive pass places a whole burst before the agent
/// reposts, where Linux's MAD layer reposts in softirq as it goes. With 512, a
/// 1,000-connection cmtime on one host lost a burst in every run (its connect or
/// disconnect step 545-562 ms instead of 14-43 ms). 600 KB per device a process runs
/// the CM on.
pub(super) const GSI_RECVS: u64 = 2048;
pub(super) const GSI_BUF: usize = 40 + wire::MAD_LEN;
/// WR IDs of QP1's sends start here; below are its receives.
pub(super) const SEND_WR_BASE: u64 = 1 << 32;

impl Core {
    /// Hands the agent what QP1 received and runs its timers; [`Core::flush`] or
    /// [`Core::settle`] then sends and dispatches what came of it.
    pub(super) fn service(&self, cs: &mut CoreSt) {
        self.reap(cs);
        let mut armed = false;
        loop {
            let wcs = self.cq.poll_placed(64);
            if wcs.is_empty() {
                if armed {
                    break;
                }
                // Completions that came between the last poll and the arm are read again.
                let _ = self.cq.req_notify(false);
                armed = true;
                continue;
            }
            for wc in wcs {
                if wc.opcode != WcOpcode::Recv || wc.wr_id >= GSI_RECVS {
                    continue;
                }
                let mut buf = [0u8; GSI_BUF];
                if wc.status == WcStatus::Success
                    && wc.byte_len as usize >= GSI_BUF
                    && self
                        .bufs
                        .read(wc.wr_id as usize * GSI_BUF, &mut buf)
                        .is_ok()
                    && let Some(src) = grh_source(&buf)
                {
                    let now = self.now();
                    cs.agent.handle_mad(now, src, &buf[40..]);
                }
                // A flushed receive (the QP is going) is not posted again.
                if wc.status == WcStatus::Success {
                    let _ = post_gsi_recv(&self.qp, &self.bufs, wc.wr_id);
                }
            }
        }
        cs.agent.handle_timeout(self.now());
    }

    pub(super) fn send(&self, to: IpAddr, mad: &CmMad) {
        if !self.send_cq.is_empty() {
            // Each MAD's completion (QP1's sends are all signalled), which nobody awaits.
            let _ = self.send_cq.poll_placed(usize::MAX);
        }
        let wr = self.next_send.fetch_add(1, Ordering::Relaxed);
        let dest = UdDest {
            src: self.ctx.addr(),
            ip: to,
            qpn: Qpn::new(GSI_QPN),
            qkey: GSI_QKEY,
            traffic_class: 0,
        };
        // A full send queue loses the MAD, as a lost packet would: the agent resends.
        let _ = self.qp.post_send(SendWr {
            wr_id: wr,
            op: SendOp::Send,
            payload: Payload::Inline(mad.to_bytes().to_vec()),
            flags: SendFlags::SIGNALED | SendFlags::INLINE,
            ud: Some(dest),
        });
    }
}

/// Posts QP1's receive `slot` of `bufs`.
pub(super) fn post_gsi_recv(
    qp: &QueuePair,
    bufs: &crate::verbs::mr::MemoryRegion,
    slot: u64,
) -> Result<()> {
    qp.post_recv(RecvWr {
        wr_id: slot,
        sg_list: softrdma_proto::sg![bufs.sge(slot * GSI_BUF as u64, GSI_BUF as u32)],
    })
}

/// The source address of a UD receive, from its GRH area (an IPv6 header, or an IPv4
/// header in its last 20 bytes, as rxe writes it).
pub(super) fn grh_source(buf: &[u8]) -> Option<IpAddr> {
    let grh = buf.get(..40)?;
    if grh[0] >> 4 == 6 {
        let mut a = [0u8; 16];
        a.copy_from_slice(&grh[8..24]);
        Some(IpAddr::from(a).to_canonical())
    } else {
        Some(IpAddr::from([grh[32], grh[33], grh[34], grh[35]]))
    }
}
