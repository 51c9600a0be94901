//! The receive side: validating and executing request packets, and producing ACKs, NAKs,
//! READ responses and atomic ACKs (rxe's `rxe_resp.c`).
//!
//! This file owns the [`Responder`] state (the message being received, the responses
//! queued, the READ and atomic resources, the packets kept ahead of a gap), the checks
//! every request goes through, the dispatch by transport, the helpers RC and UC share
//! (receiving SEND data, checking a WRITE's target), the sending of responses and the ACK
//! carried in memory. The execution of requests is one file per transport: `rc.rs` (RC:
//! SEND, WRITE, READ, atomics, duplicates and the packets kept ahead of a gap) and
//! `unreliable.rs` (UC and UD).

mod rc;
mod unreliable;

use super::sge::{ScatterError, scatter};
use super::*;
use crate::memory::{Access, AtomicOp, MemError};
use softrdma_wire::{
    AethRepr, AtomicAckEthRepr, BthRepr, ExtHeaders, Msn, NakCode, Opcode, Operation, Position,
    Syndrome,
};

/// A message being received.
#[derive(Debug)]
enum InMsg {
    Send {
        wr: RecvWr,
        from_srq: bool,
        offset: u64,
    },
    Write {
        va: u64,
        rkey: u32,
        len: u64,
        done: u64,
        /// UC buffers the message so that a lost packet leaves memory untouched.
        buffered: Option<Vec<u8>>,
    },
}

/// A response waiting to be sent, in PSN order.
#[derive(Debug)]
enum Resp {
    Ack {
        psn: Psn,
        syndrome: Syndrome,
        msn: Msn,
    },
    Read {
        psn: Psn,
        va: u64,
        rkey: u32,
        len: u64,
        sent: u64,
        msn: Msn,
    },
    Atomic {
        psn: Psn,
        orig: u64,
        msn: Msn,
    },
}

/// A READ or atomic remembered for duplicates (`max_dest_rd_atomic` of them).
#[derive(Debug)]
struct RdResource {
    first: Psn,
    last: Psn,
    atomic_orig: Option<u64>,
}

/// The responder state.
#[derive(Debug, Default)]
pub(crate) struct Responder {
    pub epsn: Psn,
    pub msn: Msn,
    pub rq: VecDeque<RecvWr>,
    /// Whether a peer has started an RDMA WRITE here (see `QueuePair::written`).
    pub written: bool,
    /// Whether a WRITE has landed whole since the application last posted a send (see
    /// `QueuePair::answered`).
    pub answered: bool,
    cur: Option<InMsg>,
    nak_sent: bool,
    uc_drop: bool,
    responses: VecDeque<Resp>,
    resources: VecDeque<RdResource>,
    /// SE bit of the packet being handled.
    last_solicited: bool,
    /// Request packets that came ahead of the expected PSN, kept to be executed in order
    /// once the gap is filled: slot `i` holds PSN `ahead_base + i`.
    // Boxed on purpose: 8 bytes in every QP instead of a deque's 32, for what only a
    // reordering path ever fills.
    #[expect(clippy::box_collection, reason = "lazily made, small when absent")]
    ahead: Option<Box<VecDeque<Option<Vec<u8>>>>>,
    ahead_base: Psn,
    /// Drop packets that come ahead of the expected PSN instead of keeping them (rxe does).
    drop_ahead: bool,
}

/// How far ahead of the expected PSN an RC responder keeps request packets: the
/// requester's largest window, so that every packet of a window with a hole is kept.
pub const REORDER_PSNS: i32 = MAX_UNACKED_PSNS;

impl Responder {
    /// Whether a response waits to be sent.
    pub(crate) fn has_responses(&self) -> bool {
        !self.responses.is_empty()
    }

    /// The receive WR of the message in progress, for flushing.
    pub fn take_current_recv(&mut self) -> Option<RecvWr> {
        match self.cur.take() {
            Some(InMsg::Send { wr, .. }) => Some(wr),
            other => {
                self.cur = other;
                None
            }
        }
    }

    /// Queues an ACK, merging it into an ACK already waiting (ACK coalescing).
    fn push_ack(&mut self, psn: Psn, syndrome: Syndrome) {
        if syndrome.is_ack() {
            if let Some(Resp::Ack {
                psn: p,
                syndrome: s,
                msn,
            }) = self.responses.back_mut()
            {
                if s.is_ack() {
                    *p = psn;
                    *msn = self.msn;
                    return;
                }
            }
        }
        self.responses.push_back(Resp::Ack {
            psn,
            syndrome,
            msn: self.msn,
        });
    }

    /// Queues an ACK of every request received so far (IBTA 9.7.5.1: an ACK covers every
    /// PSN up to its own).
    fn ack_received(&mut self) {
        let last = self.epsn.sub(1);
        self.push_ack(last, Syndrome::ACK_UNLIMITED);
    }

    /// Forgets the packets kept ahead of the expected PSN (the QP left RTS or RTR).
    pub fn drop_kept(&mut self) {
        self.ahead = None;
    }

    /// Keeps request packet `bytes` with PSN `p`, ahead of the expected PSN, for later.
    fn keep_ahead(&mut self, p: Psn, bytes: &[u8]) {
        self.drop_passed();
        let ahead = self.ahead.get_or_insert_default();
        if ahead.is_empty() {
            self.ahead_base = self.epsn;
        }
        let i = p.diff(self.ahead_base);
        if !(0..REORDER_PSNS).contains(&i) {
            return;
        }
        let i = i as usize;
        if ahead.len() <= i {
            ahead.resize(i + 1, None);
        }
        if ahead[i].is_none() {
            ahead[i] = Some(bytes.to_vec());
        }
    }

    /// The kept packet with the expected PSN, if there is one.
    fn take_ahead(&mut self) -> Option<Vec<u8>> {
        self.drop_passed();
        let ahead = self.ahead.as_mut()?;
        if ahead.is_empty() || self.ahead_base != self.epsn {
            return None;
        }
        self.ahead_base = self.ahead_base.next();
        ahead.pop_front().flatten()
    }

    /// Drops the kept slots of PSNs before the expected one.
    fn drop_passed(&mut self) {
        let Some(ahead) = self.ahead.as_mut() else {
            return;
        };
        while !ahead.is_empty() && self.epsn.diff(self.ahead_base) > 0 {
            ahead.pop_front();
            self.ahead_base = self.ahead_base.next();
        }
    }

    fn remember(&mut self, r: RdResource, max: u8) {
        self.resources.push_back(r);
        while self.resources.len() > usize::from(max.max(1)) {
            self.resources.pop_front();
        }
    }
}

fn is_rd(op: Operation) -> bool {
    matches!(
        op,
        Operation::ReadRequest | Operation::CompareSwap | Operation::FetchAdd
    )
}

impl QueuePair {
    /// Whether the RC responder keeps the packets that come ahead of the expected PSN, to run
    /// them once the gap is filled (the default), or drops them as rxe does, and as IBTA
    /// 9.7.5.2.1 describes: keeping them is softrdma's own addition, which a requester
    /// cannot tell from the wire except by the ACKs that follow. Dropping them is for tests
    /// of a requester against such a peer.
    pub fn set_keep_ahead(&mut self, keep: bool) {
        self.resp.drop_ahead = !keep;
        if !keep {
            self.resp.drop_kept();
        }
    }

    /// Queues one more ACK of every request received, for an RC QP about to be destroyed,
    /// so that a peer whose last ACK was lost completes its WR instead of retrying against
    /// a QP that is gone (it would end, after `retry_cnt` timeouts, in RETRY_EXC_ERR: the
    /// usual end of a lossy `ibv_rc_pingpong`, whose server exits as soon as it is done). A
    /// duplicate ACK is harmless: it acknowledges nothing new (IBTA 9.7.5.1: an ACK covers
    /// every PSN up to its own, and a requester ignores one below its oldest outstanding
    /// PSN). Nothing is sent for a QP that has no peer yet.
    pub fn farewell_ack(&mut self) {
        if self.cfg.qp_type == QpType::Rc
            && matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd)
        {
            self.resp.ack_received();
        }
    }

    fn take_recv(&mut self) -> Option<(RecvWr, bool)> {
        match &self.cfg.srq {
            Some(srq) => {
                let (wr, fired) = srq.take()?;
                if fired {
                    self.event(AsyncEvent::SrqLimitReached);
                }
                Some((wr, true))
            }
            None => self.resp.rq.pop_front().map(|wr| (wr, false)),
        }
    }

    fn untake_recv(&mut self, wr: RecvWr, from_srq: bool) {
        match (&self.cfg.srq, from_srq) {
            (Some(srq), true) => srq.untake(wr),
            _ => self.resp.rq.push_front(wr),
        }
    }

    /// Drops the message in progress; its receive WR goes back to the queue unconsumed.
    fn abort_message(&mut self) {
        if let Some(InMsg::Send { wr, from_srq, .. }) = self.resp.cur.take() {
            self.untake_recv(wr, from_srq);
        }
    }

    fn complete_recv(&mut self, wr_id: u64, status: WcStatus, f: impl FnOnce(&mut Completion)) {
        let mut wc = self.recv_wc(wr_id, status);
        wc.solicited = self.resp.last_solicited;
        if self.cfg.qp_type != QpType::Ud {
            wc.src_qp = self.attrs.dest_qpn;
        }
        f(&mut wc);
        self.completions.push_back(wc);
    }

    /// Completes the receive WR a WRITE with immediate consumed.
    fn complete_write_with_imm(&mut self, wr_id: u64, len: u64, pkt: &IbPacket<&[u8]>) {
        let imm = pkt.imm_dt().map_or(0, |i| i.imm());
        self.complete_recv(wr_id, WcStatus::Success, |wc| {
            wc.opcode = WcOpcode::RecvRdmaWithImm;
            wc.byte_len = len as u32;
            wc.imm_data = imm;
            wc.wc_flags |= WcFlags::WITH_IMM;
        });
    }

    /// A responder error of class A or C (IBTA vol. 1, 9.9.3: Invalid Request, Remote
    /// Access Error, Remote Operational Error): NAK, then ERROR.
    fn nak_fatal(&mut self, psn: Psn, code: NakCode) {
        self.resp.push_ack(psn, Syndrome::Nak(code));
        let event = match code {
            NakCode::RemoteAccessError => AsyncEvent::QpAccessError(self.cfg.qpn),
            NakCode::InvalidRequest => AsyncEvent::QpRequestError(self.cfg.qpn),
            _ => AsyncEvent::QpFatal(self.cfg.qpn),
        };
        self.enter_error(Some(event));
    }

    fn qp_allows(&self, access: Access) -> bool {
        self.attrs.access.contains(access.required())
    }

    /// Checks a remote access: the QP's and the MR's rights, PD and bounds.
    fn remote_ok(&self, rkey: u32, va: u64, len: u64, access: Access) -> bool {
        self.qp_allows(access)
            && (len == 0 || self.mem.check(self.cfg.pd, rkey, va, len, access).is_ok())
    }

    pub(crate) fn handle_request(&mut self, src: IpAddr, dst: IpAddr, pkt: &IbPacket<&[u8]>) {
        self.resp.last_solicited = pkt.bth().solicited();
        match self.cfg.qp_type {
            QpType::Rc => {
                self.rc_request(pkt);
                let filled = self.resp.epsn;
                self.run_kept_requests();
                if self.resp.epsn.diff(filled) > 0 && self.state != QpState::Error {
                    // A gap was filled and the packets kept behind it ran: say how far, so
                    // that the requester resends only what is still missing (IBTA
                    // 9.7.5.1: a responder may coalesce acknowledgements, and one ACK
                    // covers every PSN before its own).
                    self.resp.ack_received();
                }
            }
            QpType::Uc => self.uc_request(pkt),
            QpType::Ud => self.ud_request(src, dst, pkt),
        }
    }

    /// Opcode sequence and length rules shared by RC and UC (IBTA vol. 1, 9.7.3 and 9.7.4).
    fn sequence_and_length_ok(&self, pkt: &IbPacket<&[u8]>) -> bool {
        let info = pkt.info();
        let seq = matches!(
            (&self.resp.cur, info.operation, info.position),
            (
                Some(InMsg::Send { .. }),
                Operation::Send,
                Position::Middle | Position::Last
            ) | (
                Some(InMsg::Write { .. }),
                Operation::Write,
                Position::Middle | Position::Last
            ) | (None, _, Position::First | Position::Only)
        );
        let n = pkt.payload().len();
        let mtu = self.attrs.mtu.bytes();
        let len = match info.position {
            Position::First | Position::Middle => n == mtu,
            Position::Last => (1..=mtu).contains(&n),
            Position::Only => n <= mtu,
        };
        seq && len
    }

    /// Scatters a SEND packet into the current receive WR and completes it on the last
    /// packet. Returns false when the message failed (the QP is then in ERROR for RC).
    fn receive_send_data(&mut self, pkt: &IbPacket<&[u8]>, rc: bool) -> bool {
        let Some(InMsg::Send { wr, offset, .. }) = &mut self.resp.cur else {
            return false;
        };
        let data = pkt.payload();
        let res = scatter(&*self.mem, self.cfg.pd, &wr.sg_list, *offset, data);
        *offset += data.len() as u64;
        let (wr_id, total) = (wr.wr_id, *offset);
        if let Err(e) = res {
            let Some(wr) = self.resp.take_current_recv() else {
                return false;
            };
            let status = match e {
                ScatterError::TooLong => WcStatus::LocLenErr,
                ScatterError::Mem(_) => WcStatus::LocProtErr,
            };
            self.complete_recv(wr.wr_id, status, |_| {});
            if rc {
                let code = match e {
                    ScatterError::TooLong => NakCode::InvalidRequest,
                    ScatterError::Mem(_) => NakCode::RemoteOperationalError,
                };
                self.nak_fatal(pkt.bth().psn(), code);
            } else {
                self.resp.uc_drop = !pkt.info().ends_message();
            }
            return false;
        }
        if pkt.info().ends_message() {
            self.resp.cur = None;
            self.resp.msn = self.resp.msn.next();
            let imm = pkt.imm_dt().map(|i| i.imm());
            let inv = pkt.ieth().map(|i| i.rkey());
            self.complete_recv(wr_id, WcStatus::Success, |wc| {
                wc.byte_len = total as u32;
                if let Some(imm) = imm {
                    wc.imm_data = imm;
                    wc.wc_flags |= WcFlags::WITH_IMM;
                }
                if let Some(inv) = inv {
                    wc.invalidated_rkey = inv;
                    wc.wc_flags |= WcFlags::WITH_INV;
                }
            });
        }
        true
    }

    /// The target (VA, R_Key, length) of the first packet of a WRITE, checked: a length
    /// within the limit and no shorter than the payload (else invalid request), then the
    /// R_Key, range and access (else remote access error). `None` without a RETH. RC answers
    /// a failure with that NAK, UC drops the message.
    fn write_target(&self, pkt: &IbPacket<&[u8]>) -> Option<Result<(u64, u32, u64), NakCode>> {
        let reth = pkt.reth()?;
        let (va, rkey, len) = (reth.va(), reth.rkey(), u64::from(reth.len()));
        Some(
            if len > MAX_MSG_SIZE || (pkt.payload().len() as u64) > len {
                Err(NakCode::InvalidRequest)
            } else if !self.remote_ok(rkey, va, len, Access::RemoteWrite) {
                Err(NakCode::RemoteAccessError)
            } else {
                Ok((va, rkey, len))
            },
        )
    }

    /// Opens the WRITE whose first packet is `pkt` at its target, checked by
    /// [`Self::write_target`] (whose `None` and NAK code this passes on), with its payload
    /// collected in a buffer when `buffer` (UC: memory changes only for a whole message).
    #[inline]
    fn open_write(&mut self, pkt: &IbPacket<&[u8]>, buffer: bool) -> Option<Result<(), NakCode>> {
        let target = self.write_target(pkt)?;
        Some(target.map(|(va, rkey, len)| {
            self.resp.written = true;
            self.resp.cur = Some(InMsg::Write {
                va,
                rkey,
                len,
                done: 0,
                buffered: buffer.then(|| Vec::with_capacity(len as usize)),
            });
        }))
    }

    pub(crate) fn responder_transmit(&mut self, buf: &mut Vec<u8>, at: usize) -> Option<Transmit> {
        let front = self.resp.responses.front_mut()?;
        let (src, dst, dqpn) = (self.attrs.av.src, self.attrs.av.dst, self.attrs.dest_qpn);
        let sport = self
            .cfg
            .udp_sport
            .unwrap_or_else(|| self.attrs.av.udp_sport(self.cfg.qpn, dqpn));
        let mut bth = BthRepr::new(Opcode::RC_ACKNOWLEDGE, dqpn, Psn::new(0));
        let mut ext = ExtHeaders::default();
        let mtu = self.attrs.mtu.bytes() as u64;
        let mut read = None;
        let mut done = true;
        match front {
            Resp::Ack { psn, syndrome, msn } => {
                bth.psn = *psn;
                ext.aeth = Some(AethRepr {
                    syndrome: *syndrome,
                    msn: *msn,
                });
            }
            Resp::Atomic { psn, orig, msn } => {
                bth.opcode = Opcode::RC_ATOMIC_ACKNOWLEDGE;
                bth.psn = *psn;
                ext.aeth = Some(AethRepr {
                    syndrome: Syndrome::ACK_UNLIMITED,
                    msn: *msn,
                });
                ext.atomic_ack_eth = Some(AtomicAckEthRepr { orig: *orig });
            }
            Resp::Read {
                psn,
                va,
                rkey,
                len,
                sent,
                msn,
            } => {
                let n = (*len - *sent).min(mtu);
                let first = *sent == 0;
                let last = *sent + n == *len;
                bth.opcode = match (first, last) {
                    (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                    (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                    (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
                    (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                };
                bth.psn = *psn;
                if first || last {
                    ext.aeth = Some(AethRepr {
                        syndrome: Syndrome::ACK_UNLIMITED,
                        msn: *msn,
                    });
                }
                read = Some((*va + *sent, *rkey, n as usize));
                *sent += n;
                *psn = psn.next();
                done = last;
            }
        }
        let (mem, pd) = (&*self.mem, self.cfg.pd);
        let (len, source) = match read {
            Some((va, rkey, n)) if n > 0 => (
                n,
                PayloadSource::Range {
                    mem,
                    pd,
                    key: rkey,
                    addr: va,
                    access: Access::RemoteRead,
                },
            ),
            _ => (0, PayloadSource::Fill(|_: &mut [u8]| Ok(()))),
        };
        let result = emit_packet(
            buf,
            at,
            bth,
            ext,
            len,
            source,
            src,
            dst,
            sport,
            (!self.icrc_owed).then(|| &mut **self.icrc.get_or_insert_with(Default::default)),
        );
        if done {
            self.resp.responses.pop_front();
        }
        match result {
            Ok(t) => Some(Transmit {
                traffic_class: self.attrs.av.traffic_class,
                ..t
            }),
            Err(_) => {
                // The MR went away between the request and the response.
                buf.truncate(at);
                self.resp.responses.clear();
                self.nak_fatal(bth.psn, NakCode::RemoteAccessError);
                self.responder_transmit(buf, at)
            }
        }
    }
}

impl QueuePair {
    /// Hands the positive ACK at the head of the responses to `carry` instead of
    /// transmitting it, if there is one and `carry` takes it. `carry(peer QPN, peer address,
    /// PSN)` returns whether the ACK reached the requester another way (a host whose peer
    /// is on the same machine writes it into memory that the peer's host reads, with no
    /// packet built or parsed). An ACK is cumulative (IBTA 9.7.5.1.1: it acknowledges every
    /// request up to its PSN), so it may travel apart from the responses before it as long
    /// as it is not applied before them, which is the host's to ensure. NAKs, READ
    /// responses and atomic ACKs stay packets. RC only.
    pub fn carry_ack(&mut self, carry: impl FnOnce(Qpn, IpAddr, Psn) -> bool) -> bool {
        if self.cfg.qp_type != QpType::Rc {
            return false;
        }
        let Some(Resp::Ack { psn, syndrome, .. }) = self.resp.responses.front() else {
            return false;
        };
        if !syndrome.is_ack() || !carry(self.attrs.dest_qpn, self.attrs.av.dst, *psn) {
            return false;
        }
        self.resp.responses.pop_front();
        true
    }
}
