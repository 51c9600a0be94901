//! The verbs that post work: send WRs (to the wire or placed by the host) and receive
//! WRs, with the checks that refuse a bad WR before it touches the QP, and what a refusal
//! says.
//!
//! Owns [`PostError`] and [`Placing`]; calls the requester's send queue and the
//! responder's receive queue, which take the WRs from here on.

use super::*;

/// What the host does with a WRITE it may place itself (see
/// [`QueuePair::post_send_placed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placing {
    /// Placed in the target's memory: it completes at once.
    Done,
    /// To be placed once every earlier WR has completed.
    Hold,
    /// Sent as packets.
    Wire,
}

/// What the application did wrong when posting. The QP is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// The QP is not in a state that accepts this post.
    #[error("{verb}: QP {qpn} is in state {state}")]
    InvalidState {
        /// `post_send` or `post_recv`.
        verb: &'static str,
        /// The QP.
        qpn: u32,
        /// Its state.
        state: QpState,
    },
    /// The queue already holds its maximum number of WRs.
    #[error("{verb}: the queue is full ({depth} WRs)")]
    QueueFull {
        /// `post_send` or `post_recv`.
        verb: &'static str,
        /// The depth it was created with.
        depth: u32,
    },
    /// A WR attribute that counts past the QP's limit (SGEs, inline bytes, message length).
    #[error("{verb}: {attr} = {requested} is over the limit of {max} ({limit})")]
    OverLimit {
        /// `post_send`, `post_recv` or `post_srq_recv`.
        verb: &'static str,
        /// The `ibv_send_wr`/`ibv_recv_wr` field.
        attr: &'static str,
        /// What the WR asks for.
        requested: u64,
        /// The most the QP takes.
        max: u64,
        /// Which limit that is (`cap.max_send_sge`, the path MTU, ...).
        limit: &'static str,
    },
    /// A WR attribute that is invalid whatever its size: an opcode this QP type has not,
    /// inline data for a READ or atomic, an atomic's SGE, a UD send without an address.
    #[error("{verb}: invalid {attr}: {why}")]
    InvalidAttr {
        /// `post_send` or `post_recv`.
        verb: &'static str,
        /// The `ibv_send_wr`/`ibv_recv_wr` field.
        attr: &'static str,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The QP receives through an SRQ; post to the SRQ.
    #[error("post_recv: QP {0} uses a shared receive queue")]
    HasSrq(u32),
}

impl QueuePair {
    /// Posts a send WR.
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), PostError> {
        const VERB: &str = "post_send";
        self.resp.answered = false;
        let bad = |attr, why| {
            Err(PostError::InvalidAttr {
                verb: VERB,
                attr,
                why,
            })
        };
        let over = |attr, requested: u64, max: u64, limit| {
            Err(PostError::OverLimit {
                verb: VERB,
                attr,
                requested,
                max,
                limit,
            })
        };
        match self.state {
            QpState::Rts | QpState::Sqd | QpState::Error | QpState::Sqe => {}
            state => {
                return Err(PostError::InvalidState {
                    verb: VERB,
                    qpn: self.cfg.qpn.value(),
                    state,
                });
            }
        }
        if self.req.sq.len() as u32 >= self.cfg.caps.max_send_wr {
            return Err(PostError::QueueFull {
                verb: VERB,
                depth: self.cfg.caps.max_send_wr,
            });
        }
        let t = self.cfg.qp_type;
        let op_ok = match wr.op {
            SendOp::Send | SendOp::SendWithImm(_) => true,
            SendOp::Write { .. } | SendOp::WriteWithImm { .. } => t != QpType::Ud,
            SendOp::SendWithInv(_)
            | SendOp::Read { .. }
            | SendOp::CompareSwap { .. }
            | SendOp::FetchAdd { .. } => t == QpType::Rc,
        };
        if !op_ok {
            return bad("opcode", "not supported by this QP type");
        }
        match &wr.payload {
            Payload::Sges(s) if s.len() as u32 > self.cfg.caps.max_send_sge => {
                let max = u64::from(self.cfg.caps.max_send_sge);
                return over("num_sge", s.len() as u64, max, "cap.max_send_sge");
            }
            Payload::Inline(v) if v.len() as u32 > self.cfg.caps.max_inline_data => {
                let max = u64::from(self.cfg.caps.max_inline_data);
                return over("sg_list", v.len() as u64, max, "cap.max_inline_data");
            }
            Payload::Inline(_) if wr.op.is_read_or_atomic() => {
                return bad("send_flags", "READ and atomics cannot be inline");
            }
            _ => {}
        }
        let len = wr.payload.len();
        if len > MAX_MSG_SIZE {
            return over("sg_list", len, MAX_MSG_SIZE, "max_msg_sz");
        }
        if wr.op.is_atomic()
            && !matches!(&wr.payload, Payload::Sges(s) if s.len() == 1 && s[0].length == 8)
        {
            return bad("sg_list", "an atomic needs one 8-byte SGE");
        }
        if t == QpType::Ud {
            if wr.ud.is_none() {
                return bad("wr.ud", "a UD send needs an address handle");
            }
            if len > self.attrs.mtu.bytes() as u64 {
                return over(
                    "sg_list",
                    len,
                    self.attrs.mtu.bytes() as u64,
                    "the path MTU",
                );
            }
        }
        let signaled = self.cfg.sq_sig_all || wr.flags.contains(SendFlags::SIGNALED);
        if self.state == QpState::Error {
            self.completions
                .push_back(self.send_wc(&wr, WcStatus::WrFlushErr, 0));
            return Ok(());
        }
        self.req.push(wr, len, signaled, self.attrs.mtu);
        Ok(())
    }

    /// [`QueuePair::post_send`], for a host that can place an RDMA WRITE in the target's
    /// memory itself (two processes of one host). Once the WR has passed every check of
    /// `post_send`, and if it is a WRITE without immediate data (whose receive completion
    /// only the wire can make) on an RC QP in RTS, `place` is asked what to do with
    /// it, given its destination QPN and address and whether the send queue is empty
    /// (every earlier WR completed):
    /// - [`Placing::Done`] (only when empty): the host placed it; it completes at once, as
    ///   its ACK would have completed it;
    /// - [`Placing::Hold`]: it waits in the queue, unsent, until every WR before it has
    ///   completed; then [`QueuePair::held_front`] hands it to the host, which places it
    ///   or sends it ([`QueuePair::complete_held`]);
    /// - [`Placing::Wire`]: it is posted as `post_send` posts it.
    ///
    /// The order of a QP's operations holds: a WRITE is placed only when every earlier WR
    /// is complete, so none can land after it, and every later one waits behind it. Only
    /// on RC, where a completion means the responder has executed the WR: a UC WR
    /// completes as it leaves, so an earlier UC WRITE could still land after a placed one.
    /// Returns what was done.
    pub fn post_send_placed(
        &mut self,
        wr: SendWr,
        place: impl FnOnce(&SendWr, Qpn, IpAddr, bool) -> Placing,
    ) -> Result<Placing, PostError> {
        self.resp.answered = false;
        let placeable = self.state == QpState::Rts
            && self.cfg.qp_type == QpType::Rc
            && matches!(wr.op, SendOp::Write { .. })
            && (self.req.sq.len() as u32) < self.cfg.caps.max_send_wr;
        // The checks of `post_send` that a WRITE on a QP in RTS can fail.
        let fits = match &wr.payload {
            Payload::Sges(s) => s.len() as u32 <= self.cfg.caps.max_send_sge,
            Payload::Inline(v) => v.len() as u32 <= self.cfg.caps.max_inline_data,
        };
        let len = wr.payload.len();
        if !placeable || !fits || len == 0 || len > MAX_MSG_SIZE {
            return self.post_send(wr).map(|()| Placing::Wire);
        }
        let idle = self.req.sq.is_empty();
        match place(&wr, self.attrs.dest_qpn, self.attrs.av.dst, idle) {
            Placing::Done if idle => {
                if self.cfg.sq_sig_all || wr.flags.contains(SendFlags::SIGNALED) {
                    self.completions
                        .push_back(self.send_wc(&wr, WcStatus::Success, len as u32));
                }
                self.counters.placed_writes += 1;
                Ok(Placing::Done)
            }
            Placing::Hold => {
                self.post_send(wr)?;
                if let Some(w) = self.req.sq.back_mut() {
                    w.held = true;
                }
                Ok(Placing::Hold)
            }
            _ => self.post_send(wr).map(|()| Placing::Wire),
        }
    }

    /// The held WRITE (see [`QueuePair::post_send_placed`]) that every WR before it
    /// completed, if there is one now, with its destination QPN and address: the host
    /// places or sends it, and says which with [`QueuePair::complete_held`].
    pub fn held_front(&self) -> Option<(&SendWr, Qpn, IpAddr)> {
        let w = self.req.sq.front()?;
        (w.held && w.first_psn.is_none() && self.state == QpState::Rts).then_some((
            &w.wr,
            self.attrs.dest_qpn,
            self.attrs.av.dst,
        ))
    }

    /// The host placed the WR [`QueuePair::held_front`] gave (`placed`): it completes;
    /// or it did not: it is sent as any other.
    pub fn complete_held(&mut self, placed: bool) {
        let Some(w) = self.req.sq.front_mut() else {
            return;
        };
        if !w.held || w.first_psn.is_some() {
            return;
        }
        if placed {
            self.complete_front(WcStatus::Success);
            self.counters.placed_writes += 1;
        } else {
            w.held = false;
        }
    }

    /// Posts a receive WR.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), PostError> {
        const VERB: &str = "post_recv";
        if self.cfg.srq.is_some() {
            return Err(PostError::HasSrq(self.cfg.qpn.value()));
        }
        if self.state == QpState::Reset {
            return Err(PostError::InvalidState {
                verb: VERB,
                qpn: self.cfg.qpn.value(),
                state: self.state,
            });
        }
        if self.resp.rq.len() as u32 >= self.cfg.caps.max_recv_wr {
            return Err(PostError::QueueFull {
                verb: VERB,
                depth: self.cfg.caps.max_recv_wr,
            });
        }
        if wr.sg_list.len() as u32 > self.cfg.caps.max_recv_sge {
            return Err(PostError::OverLimit {
                verb: VERB,
                attr: "num_sge",
                requested: wr.sg_list.len() as u64,
                max: u64::from(self.cfg.caps.max_recv_sge),
                limit: "cap.max_recv_sge",
            });
        }
        if self.state == QpState::Error {
            self.completions
                .push_back(self.recv_wc(wr.wr_id, WcStatus::WrFlushErr));
            return Ok(());
        }
        self.resp.rq.push_back(wr);
        Ok(())
    }
}
