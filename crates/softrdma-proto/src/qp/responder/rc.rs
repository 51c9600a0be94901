//! The RC responder: executing SEND, WRITE, READ and atomic requests in PSN order, answering
//! duplicates (IBTA 9.7.5.1.3), and running the packets kept while a gap was open.
//!
//! Owns no state of its own: it works on the [`super::Responder`] and calls the checks and
//! helpers of `responder/mod.rs`, `qp/sge.rs` to place data, and memory through
//! [`crate::Memory`].

use super::*;

impl QueuePair {
    /// Executes, in PSN order, the packets kept while a gap was open, as far as the gap is
    /// now filled.
    pub(super) fn run_kept_requests(&mut self) {
        while self.state != QpState::Error {
            let before = self.resp.epsn;
            let Some(bytes) = self.resp.take_ahead() else {
                return;
            };
            // The packet was checked (ICRC, header, P_Key, addresses) when it arrived.
            let Ok(pkt) = IbPacket::new_checked(&bytes[..]) else {
                return;
            };
            self.resp.last_solicited = pkt.bth().solicited();
            self.rc_request(&pkt);
            if self.resp.epsn == before {
                // Not executed (an RNR NAK): the requester sends it again.
                return;
            }
        }
    }

    pub(super) fn rc_request(&mut self, pkt: &IbPacket<&[u8]>) {
        let p = pkt.bth().psn();
        let d = p.diff(self.resp.epsn);
        if d > 0 {
            // IBTA 9.7.5.2.1: ahead of the expected PSN, one sequence NAK, then nothing
            // more for the gap until the expected PSN comes. IBTA has the packet ignored;
            // softrdma keeps it instead (the peer sees no difference but in the ACKs), not
            // executed: once the gap is filled (by the late packet, or by the requester's
            // repair) it runs in order, and the ACK that follows says how far that got. A
            // reordered packet then costs no round trip, and a requester that repairs
            // selectively sends only the missing packets again.
            self.counters.out_of_sequence += 1;
            if !self.resp.drop_ahead {
                self.resp.keep_ahead(p, pkt.as_bytes());
            }
            if !self.resp.nak_sent {
                self.resp.nak_sent = true;
                self.counters.seq_naks_sent += 1;
                let e = self.resp.epsn;
                self.resp
                    .push_ack(e, Syndrome::Nak(NakCode::PsnSequenceError));
            }
            return;
        }
        if d < 0 {
            self.counters.duplicate_requests += 1;
            self.rc_duplicate(p, pkt);
            return;
        }
        self.resp.nak_sent = false;
        if !self.sequence_and_length_ok(pkt) {
            self.nak_fatal(p, NakCode::InvalidRequest);
            return;
        }
        match pkt.info().operation {
            Operation::Send => self.rc_send(p, pkt),
            Operation::Write => self.rc_write(p, pkt),
            Operation::ReadRequest => self.rc_read(p, pkt),
            Operation::CompareSwap | Operation::FetchAdd => self.rc_atomic(p, pkt),
            // FLUSH and ATOMIC WRITE are not implemented yet: refuse them cleanly.
            _ => self.nak_fatal(p, NakCode::InvalidRequest),
        }
    }

    fn rc_send(&mut self, p: Psn, pkt: &IbPacket<&[u8]>) {
        let info = pkt.info();
        if info.starts_message() {
            let Some((wr, from_srq)) = self.take_recv() else {
                self.counters.rnr_naks_sent += 1;
                let timer = self.attrs.min_rnr_timer;
                self.resp.push_ack(p, Syndrome::RnrNak { timer });
                return;
            };
            self.resp.cur = Some(InMsg::Send {
                wr,
                from_srq,
                offset: 0,
            });
        }
        if !self.receive_send_data(pkt, true) {
            return;
        }
        self.resp.epsn = p.next();
        if pkt.bth().ack_req() {
            self.resp.push_ack(p, Syndrome::ACK_UNLIMITED);
        }
    }
    fn rc_write(&mut self, p: Psn, pkt: &IbPacket<&[u8]>) {
        let info = pkt.info();
        let data = pkt.payload();
        if info.starts_message() {
            match self.open_write(pkt, false) {
                None => return,
                Some(Err(code)) => {
                    self.nak_fatal(p, code);
                    return;
                }
                Some(Ok(())) => {}
            }
        }
        // WRITE with immediate consumes a receive WR (IBTA vol. 1, 9.4.3): find it before
        // touching memory, so that an RNR NAK leaves nothing half-done.
        let recv = if info.has_immediate {
            match self.take_recv() {
                Some(r) => Some(r),
                None => {
                    if info.position == Position::Only {
                        self.resp.cur = None;
                    }
                    self.counters.rnr_naks_sent += 1;
                    let timer = self.attrs.min_rnr_timer;
                    self.resp.push_ack(p, Syndrome::RnrNak { timer });
                    return;
                }
            }
        } else {
            None
        };
        let Some(InMsg::Write {
            va,
            rkey,
            len,
            done,
            ..
        }) = &mut self.resp.cur
        else {
            return;
        };
        let (va, rkey, len, at) = (*va, *rkey, *len, *done);
        let end = at + data.len() as u64;
        if end > len || (info.ends_message() && end != len) {
            if let Some((wr, from_srq)) = recv {
                self.untake_recv(wr, from_srq);
            }
            self.nak_fatal(p, NakCode::InvalidRequest);
            return;
        }
        if !data.is_empty()
            && self
                .mem
                .write(self.cfg.pd, rkey, va + at, data, Access::RemoteWrite)
                .is_err()
        {
            if let Some((wr, from_srq)) = recv {
                self.untake_recv(wr, from_srq);
            }
            self.nak_fatal(p, NakCode::RemoteAccessError);
            return;
        }
        if let Some(InMsg::Write { done, .. }) = &mut self.resp.cur {
            *done = end;
        }
        self.resp.epsn = p.next();
        if info.ends_message() {
            self.resp.cur = None;
            self.resp.answered = true;
            self.resp.msn = self.resp.msn.next();
            if let Some((wr, _)) = recv {
                self.complete_write_with_imm(wr.wr_id, len, pkt);
            }
        }
        if pkt.bth().ack_req() {
            self.resp.push_ack(p, Syndrome::ACK_UNLIMITED);
        }
    }

    fn rc_read(&mut self, p: Psn, pkt: &IbPacket<&[u8]>) {
        let Some(reth) = pkt.reth() else { return };
        let (va, rkey, len) = (reth.va(), reth.rkey(), u64::from(reth.len()));
        if self.attrs.max_dest_rd_atomic == 0 || len > MAX_MSG_SIZE {
            self.nak_fatal(p, NakCode::InvalidRequest);
            return;
        }
        if !self.remote_ok(rkey, va, len, Access::RemoteRead) {
            self.nak_fatal(p, NakCode::RemoteAccessError);
            return;
        }
        let mtu = self.attrs.mtu.bytes() as u64;
        let npkts = len.div_ceil(mtu).max(1) as u32;
        let msn = self.accept_rd(p, npkts, None);
        self.respond_read(p, va, rkey, len, msn);
    }

    /// Takes the READ or atomic at PSN `first`, of `npkts` PSNs: kept (with the atomic's
    /// original value) to answer its duplicates, and counted as a message. Returns its MSN.
    #[inline]
    fn accept_rd(&mut self, first: Psn, npkts: u32, atomic_orig: Option<u64>) -> Msn {
        self.resp.remember(
            RdResource {
                first,
                last: first.add(npkts - 1),
                atomic_orig,
            },
            self.attrs.max_dest_rd_atomic,
        );
        self.resp.epsn = first.add(npkts);
        self.resp.msn = self.resp.msn.next();
        self.resp.msn
    }

    /// Queues the responses to the READ at PSN `psn` of `len` bytes at `va`.
    #[inline]
    fn respond_read(&mut self, psn: Psn, va: u64, rkey: u32, len: u64, msn: Msn) {
        self.resp.responses.push_back(Resp::Read {
            psn,
            va,
            rkey,
            len,
            sent: 0,
            msn,
        });
    }

    fn rc_atomic(&mut self, p: Psn, pkt: &IbPacket<&[u8]>) {
        let Some(a) = pkt.atomic_eth() else { return };
        // A misaligned atomic is an invalid request (IBTA vol. 1, 9.4.5).
        if self.attrs.max_dest_rd_atomic == 0 || a.va() % 8 != 0 {
            self.nak_fatal(p, NakCode::InvalidRequest);
            return;
        }
        if !self.qp_allows(Access::RemoteAtomic) {
            self.nak_fatal(p, NakCode::RemoteAccessError);
            return;
        }
        let op = if pkt.info().operation == Operation::CompareSwap {
            AtomicOp::CompareSwap {
                compare: a.compare(),
                swap: a.swap_add(),
            }
        } else {
            AtomicOp::FetchAdd { add: a.swap_add() }
        };
        let orig = match self.mem.atomic(self.cfg.pd, a.rkey(), a.va(), op) {
            Ok(v) => v,
            Err(MemError::Misaligned(_)) => {
                self.nak_fatal(p, NakCode::InvalidRequest);
                return;
            }
            Err(_) => {
                self.nak_fatal(p, NakCode::RemoteAccessError);
                return;
            }
        };
        let msn = self.accept_rd(p, 1, Some(orig));
        self.resp
            .responses
            .push_back(Resp::Atomic { psn: p, orig, msn });
    }

    /// A request behind the expected PSN (IBTA vol. 1, 9.7.5.1.3): SEND and WRITE are
    /// acknowledged again; a READ is executed again from its PSN; an atomic is answered from
    /// the saved result and never executed twice.
    fn rc_duplicate(&mut self, p: Psn, pkt: &IbPacket<&[u8]>) {
        let op = pkt.info().operation;
        if !is_rd(op) {
            self.resp.ack_received();
            return;
        }
        let found = self
            .resp
            .resources
            .iter()
            .rev()
            .find(|r| p.diff(r.first) >= 0 && r.last.diff(p) >= 0);
        let Some(r) = found else {
            // Too old to answer; the requester will time out or has moved on.
            return;
        };
        let msn = self.resp.msn;
        match (op, r.atomic_orig) {
            (Operation::ReadRequest, None) => {
                let Some(reth) = pkt.reth() else { return };
                let (va, rkey, len) = (reth.va(), reth.rkey(), u64::from(reth.len()));
                if self.remote_ok(rkey, va, len, Access::RemoteRead) {
                    self.respond_read(p, va, rkey, len, msn);
                }
            }
            (Operation::CompareSwap | Operation::FetchAdd, Some(orig)) if r.first == p => {
                self.resp
                    .responses
                    .push_back(Resp::Atomic { psn: p, orig, msn });
            }
            _ => {}
        }
    }
}
