//! The endpoint's connections: one is made on the first send to a peer (resolve its
//! address, then its route, then a QP with receive slots, then the request, whose private
//! data names this endpoint so that the peer can say who its messages come from), and
//! one is accepted from each peer that makes one. Sends wait in their connection until it
//! is established; a connection that fails fails them, and the next send to that peer
//! makes a new one.
//!
//! Runs under the endpoint's lock, from its calls and its progress.

use super::{Conn, Queued, SLOT_LEN, SLOTS, State, Wr};
use crate::addr::{from_wire, to_wire};
use crate::error::Result;
use softrdma::cm::{CmEvent, CmEventKind, CmId, PortSpace};
use softrdma::{QpCaps, QpInitAttr, QpType};
use std::net::SocketAddr;

/// How long a connection its peer ended waits for the ACKs of its sends in flight.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(5);
/// Send WRs each connection's QP takes at once.
const MAX_SEND_WR: u32 = 1024;

impl State {
    /// The connection to `peer`'s endpoint: the one in use, else a new one, asked for now.
    pub(super) fn conn_to(&mut self, peer: SocketAddr) -> Result<usize> {
        if let Some(&c) = self.by_peer.get(&peer) {
            return Ok(c);
        }
        let id = CmId::new(&self.chan, self.dom.ctx(), PortSpace::Tcp)?;
        id.resolve_addr(None, peer)?;
        let c = self.add(id, peer, false);
        self.by_peer.insert(peer, c);
        Ok(c)
    }

    fn add(&mut self, id: CmId, peer: SocketAddr, ready: bool) -> usize {
        let c = self.conns.len();
        id.set_user(c + 1);
        self.conns.push(Conn {
            id: Some(id),
            qp: None,
            slots: Vec::new(),
            posted_slots: 0,
            in_flight: 0,
            peer,
            ready,
            failed: false,
            queued: Default::default(),
        });
        c
    }

    /// Makes connection `c`'s QP on `id` and posts its receive slots.
    fn make_qp(&mut self, c: usize, id: &CmId) -> Result<()> {
        // The shared CQ grows with the connections: room for every slot and every send
        // WR each may have posted, so that it cannot overflow.
        let want = self.conns.len() * (SLOTS + MAX_SEND_WR as usize);
        if self.vcq.cq.capacity() < want {
            self.vcq.cq.resize(want)?;
        }
        let init = QpInitAttr {
            cap: QpCaps {
                max_send_wr: MAX_SEND_WR,
                max_recv_wr: SLOTS as u32,
                max_inline_data: super::INLINE_MAX as u32,
                ..QpCaps::default()
            },
            ..QpInitAttr::new(QpType::Rc, &self.vcq.cq)
        };
        let qp = id.create_qp(self.dom.pd(), init)?;
        self.by_qpn.insert(qp.qp_num().value(), c);
        self.conns[c].qp = Some(qp);
        for slot in 0..SLOTS {
            let mr = self
                .dom
                .pd()
                .register_zeroed(SLOT_LEN, softrdma::AccessFlags::LOCAL_WRITE)?;
            self.conns[c].slots.push(mr);
            self.post_slot(c, slot)?;
        }
        Ok(())
    }

    /// Posts receive slot `slot` of connection `c`, unless the connection is done.
    pub(super) fn post_slot(&mut self, c: usize, slot: usize) -> Result<()> {
        let w = self.wr_id();
        let conn = &self.conns[c];
        let (Some(qp), Some(mr), false) = (&conn.qp, conn.slots.get(slot), conn.failed) else {
            return Ok(());
        };
        qp.post_recv(softrdma::RecvWr {
            wr_id: w,
            sg_list: softrdma_proto::sg![mr.sge(0, SLOT_LEN as u32)],
        })?;
        self.conns[c].posted_slots += 1;
        self.wrs.insert(w, Wr::Slot { conn: c, slot });
        Ok(())
    }

    /// Posts slot `slot` of connection `c` again at the endpoint's next progress, not now:
    /// the message that emptied it reaches its receive first, and a ping-pong's answer
    /// is on its way while the slot goes back. Now, though, when fewer than half of the
    /// connection's slots are posted, so that a peer streaming messages never finds
    /// none.
    pub(super) fn repost_later(&mut self, c: usize, slot: usize) {
        self.repost.push((c, slot));
        if self.conns[c].posted_slots < SLOTS / 2 {
            self.flush_reposts();
        }
    }

    /// Posts the slots `repost_later` kept.
    pub(super) fn flush_reposts(&mut self) {
        let mut kept = std::mem::take(&mut self.repost);
        for (c, slot) in kept.drain(..) {
            // A slot that cannot go back (its QP failed) leaves its connection with fewer:
            // the connection is being ended.
            let _ = self.post_slot(c, slot);
        }
        self.repost = kept;
    }

    /// A slot of connection `c` completed (with a message or flushed): once a connection
    /// that is done has none posted, its slots' memory goes.
    pub(super) fn slot_done(&mut self, c: usize) {
        let conn = &mut self.conns[c];
        conn.posted_slots = conn.posted_slots.saturating_sub(1);
        self.retire(c);
    }

    /// Once connection `c` has failed and nothing of it is outstanding (no slot posted,
    /// no signaled send in flight: its QP flushed everything), its slots, QP and CM ID go,
    /// and with them the device's memory for it (about 144 KiB a QP). What stays in the
    /// table is the entry's few words, so that the indices other records hold (a
    /// rendezvous waiting unexpected, a slot to post again) never name another
    /// connection; a peer that comes back gets a new entry.
    pub(super) fn retire(&mut self, c: usize) {
        let conn = &mut self.conns[c];
        if !conn.failed || conn.posted_slots > 0 || conn.in_flight > 0 {
            return;
        }
        if let Some(qp) = conn.qp.take() {
            self.by_qpn.remove(&qp.qp_num().value());
        }
        conn.id = None;
        conn.slots = Vec::new();
    }

    /// Handles every connection event that waits; whether there was one.
    pub(super) fn cm_events(&mut self) -> bool {
        let mut any = false;
        while let Some(ev) = self.chan.try_event() {
            self.cm_event(ev);
            any = true;
        }
        any
    }

    /// Handles what waits: the device's completions first, so that what a connection
    /// received (and the ACKs of what it sent) before its peer ended it is taken before
    /// the end is; then the connection events, then the completions these made (a
    /// flush, a send posted on a new connection).
    pub(super) fn progress_all(&mut self) {
        self.flush_reposts();
        self.device_completions();
        if self.cm_events() {
            self.device_completions();
        }
    }

    fn cm_event(&mut self, ev: CmEvent) {
        if ev.kind == CmEventKind::ConnectRequest {
            self.accept(&ev);
            return;
        }
        let Some(c) = ev
            .id
            .user()
            .checked_sub(1)
            .filter(|&c| c < self.conns.len())
        else {
            return;
        };
        // A connection that failed while it was being made gets no QP from a late step.
        if self.conns[c].failed
            && matches!(
                ev.kind,
                CmEventKind::AddrResolved | CmEventKind::RouteResolved
            )
        {
            return;
        }
        let r = match ev.kind {
            CmEventKind::AddrResolved => ev.id.resolve_route().map_err(Into::into),
            CmEventKind::RouteResolved => {
                let pd = crate::domain::conn_param(to_wire(self.me).to_vec());
                self.make_qp(c, &ev.id)
                    .and_then(|()| ev.id.connect(&pd).map_err(Into::into))
            }
            CmEventKind::Established => {
                self.conns[c].ready = true;
                let queued = std::mem::take(&mut self.conns[c].queued);
                for q in queued {
                    self.post(c, q);
                }
                Ok(())
            }
            CmEventKind::Disconnected => {
                self.settle(c);
                self.lost(c);
                Ok(())
            }
            CmEventKind::Rejected { .. }
            | CmEventKind::Unreachable
            | CmEventKind::Unresolved { .. } => {
                self.lost(c);
                Ok(())
            }
            _ => Ok(()),
        };
        if r.is_err() {
            self.lost(c);
        }
    }

    /// Before connection `c` ends on its peer's DREQ: its sends in flight complete, for
    /// their ACKs, which the peer sent before the DREQ, may come by another path (a
    /// shared device's steered socket, where the DREQ came through its owner) and later.
    /// Waits at most [`SETTLE`].
    fn settle(&mut self, c: usize) {
        let end = std::time::Instant::now() + SETTLE;
        while self.conns[c].in_flight > 0 && std::time::Instant::now() < end {
            self.device_completions();
            std::thread::yield_now();
        }
    }

    /// A peer's connection request: a QP, its slots, and the accept. A request whose
    /// private data names no endpoint is rejected.
    fn accept(&mut self, ev: &CmEvent) {
        let Some(peer) = from_wire(&ev.private_data) else {
            let _ = ev.id.reject(b"no endpoint address");
            return;
        };
        let c = self.add(ev.id.clone(), peer, false);
        let pd = crate::domain::conn_param(Vec::new());
        if self.make_qp(c, &ev.id).is_err() || ev.id.accept(&pd).is_err() {
            self.lost(c);
            return;
        }
        // A send to this peer uses its connection from now on unless it made one itself.
        self.by_peer.entry(peer).or_insert(c);
    }

    /// Connection `c` failed or ended: what waited for it fails, and the next send to its
    /// peer makes another.
    pub(super) fn lost(&mut self, c: usize) {
        let conn = &mut self.conns[c];
        if conn.failed {
            return;
        }
        conn.failed = true;
        conn.ready = false;
        // Tells the peer, which drops its side; an ID that never connected says nothing.
        if let Some(id) = &conn.id {
            let _ = id.disconnect();
        }
        // Its QP is in the error state and places nothing more; what it placed before (a
        // message whose completion waits behind the end) is still taken, and the slots'
        // memory goes when the last of them has completed or flushed (`slot_done`).
        let peer = conn.peer;
        let queued: Vec<Queued> = conn.queued.drain(..).collect();
        if self.by_peer.get(&peer) == Some(&c) {
            self.by_peer.remove(&peer);
        }
        for q in queued {
            self.fail(q.wr, crate::cq::errno::EIO);
        }
        // Rendezvous sends whose RTS went on it get no FIN now.
        let orphans: Vec<u64> = self
            .rndv_out
            .iter()
            .filter(|(_, o)| o.conn == c)
            .map(|(&m, _)| m)
            .collect();
        for msg_id in orphans {
            self.fail(Wr::Rts { msg_id }, crate::cq::errno::EIO);
        }
        self.retire(c);
    }
}
