//! Disconnection and destruction (IBTA 12.9.6, figure 143): the verbs that send a DREQ
//! or DREP or drop a connection, what a received DREQ or DREP does, and entering TIMEWAIT.
//!
//! Owns the states from ESTABLISHED to TIMEWAIT; calls the agent's helpers and timers.

use super::*;

impl<A: Copy + Eq + Hash + core::fmt::Debug> CmAgent<A> {
    /// Starts or answers a disconnection: from ESTABLISHED sends DREQ and waits for DREP;
    /// from DREQ_RCVD sends DREP and enters TIMEWAIT; in DREQ_SENT and TIMEWAIT does
    /// nothing. Before the connection is established it is rejected instead (as
    /// rdma_disconnect does).
    pub fn disconnect(
        &mut self,
        now: Instant,
        id: CommId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let c = self.conn(id)?;
        match c.state {
            // The RTU was lost: the peer may use the QP already.
            CmState::Established | CmState::RepSent | CmState::MraRepRcvd => {
                let dreq = CmMessage::Dreq(DreqRepr {
                    local_comm_id: id,
                    remote_comm_id: c.remote_comm_id,
                    remote_qpn: c.remote_qpn,
                    private_data: private(private_data, "DREQ")?,
                });
                c.state = CmState::DreqSent;
                self.send_awaiting(now, id, dreq);
                Ok(())
            }
            CmState::DreqRcvd => {
                let drep = CmMessage::Drep(IdsRepr {
                    local_comm_id: id,
                    remote_comm_id: c.remote_comm_id,
                    private_data: private(private_data, "DREP")?,
                });
                self.send_kept(id, drep);
                self.enter_timewait(now, id);
                Ok(())
            }
            CmState::ReqRcvd | CmState::MraReqSent | CmState::RepRcvd | CmState::MraRepSent => {
                self.reject(now, id, rej_reason::CONSUMER_DEFINED, private_data)
            }
            // Already ending (both ends disconnected, or the peer's DREQ was answered):
            // nothing more to send, as Linux's rdma_disconnect then returns 0 too.
            CmState::DreqSent | CmState::TimeWait => Ok(()),
            s => Err(Self::wrong(id, s, "disconnect")),
        }
    }

    /// Whether [`Self::destroy_all`] would find anything: a connection in any state, or a
    /// SIDR request.
    pub fn has_any(&self) -> bool {
        !self.conns.is_empty() || !self.sidrs.is_empty()
    }

    /// Destroys every connection and SIDR request, each as [`Self::destroy`] does (the
    /// process that runs the agent is going: its peers hear it now, not after their
    /// timeouts).
    pub fn destroy_all(&mut self, now: Instant) {
        let ids: Vec<CommId> = self
            .conns
            .keys()
            .chain(self.sidrs.keys())
            .copied()
            .collect();
        for id in ids {
            self.destroy(now, id);
        }
    }

    /// Drops a connection at once, whatever its state (the consumer destroyed its ID): a
    /// connection still being set up is rejected (TIMEOUT, as the kernel's CM does for a
    /// destroyed ID), an established one gets a DREQ that is not waited for.
    pub fn destroy(&mut self, now: Instant, id: CommId) {
        if let Some(s) = self.sidrs.remove(&id) {
            if let Some(t) = s.deadline {
                self.timers.remove(&(t, id));
            }
            if !s.active {
                self.sidr_by_remote.remove(&(s.peer, s.request_id));
            }
            return;
        }
        let Some(c) = self.conns.get(&id) else {
            return;
        };
        match c.state {
            CmState::ReqSent
            | CmState::MraReqRcvd
            | CmState::ReqRcvd
            | CmState::MraReqSent
            | CmState::RepRcvd
            | CmState::MraRepSent
            | CmState::RepSent
            | CmState::MraRepRcvd => {
                // As Linux's CM does for a destroyed ID: TIMEOUT while our REQ waits,
                // consumer-defined otherwise.
                let reason = if matches!(c.state, CmState::ReqSent | CmState::MraReqRcvd) {
                    rej_reason::TIMEOUT
                } else {
                    rej_reason::CONSUMER_DEFINED
                };
                let mad = self.rej_mad(c, id, reason);
                let peer = c.peer;
                self.send(peer, mad);
            }
            CmState::Established => {
                let _ = self.disconnect(now, id, &[]);
            }
            CmState::DreqRcvd => {
                let _ = self.disconnect(now, id, &[]);
            }
            CmState::DreqSent | CmState::TimeWait => {}
        }
        self.forget(id);
    }

    pub(super) fn enter_timewait(&mut self, now: Instant, id: CommId) {
        let at = now.add(self.timewait());
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.state = CmState::TimeWait;
        if c.active {
            let peer = c.peer;
            self.ended.retain(|_, t| now.since(*t) < RELISTEN_GRACE);
            self.ended.insert(peer, now);
        }
        self.arm(id, Some(at));
    }

    pub(super) fn on_dreq(&mut self, now: Instant, from: A, tid: u64, dreq: DreqRepr) {
        let Some(id) = self.mine(from, dreq.remote_comm_id, dreq.local_comm_id) else {
            // IBTA 12.9.6.4: a DREQ for a connection we no longer have is answered, so
            // that the peer leaves DREQ_SENT at once.
            if !self.conns.contains_key(&dreq.remote_comm_id) {
                let drep = IdsRepr {
                    local_comm_id: dreq.remote_comm_id,
                    remote_comm_id: dreq.local_comm_id,
                    private_data: PrivateData::default(),
                };
                self.send(from, mad(tid, CmMessage::Drep(drep)));
            }
            return;
        };
        let c = self.conns.get_mut(&id).expect("mine checked it");
        if dreq.remote_qpn != c.local_qpn {
            // IBTA 12.6.10: the DREQ names our QP; one that names another is not ours.
            self.counters.unexpected += 1;
            return;
        }
        match c.state {
            CmState::Established | CmState::RepSent | CmState::MraRepRcvd => {
                let event = CmEvent::DreqReceived {
                    id,
                    private_data: Box::new(dreq.private_data.0),
                };
                self.advance(id, CmState::DreqRcvd, event);
            }
            // Both ends disconnected at once: answer, and the DREP we wait for is moot.
            CmState::DreqSent => {
                let mad = bare_drep(c, id);
                let peer = c.peer;
                self.send(peer, mad);
                self.events.push_back(CmEvent::Disconnected {
                    id,
                    timed_out: false,
                });
                self.enter_timewait(now, id);
            }
            CmState::TimeWait => {
                // Our DREP was lost.
                self.counters.duplicates += 1;
                if let Some(
                    last @ CmMad {
                        msg: CmMessage::Drep(_),
                        ..
                    },
                ) = c.last
                {
                    let peer = c.peer;
                    self.send(peer, last);
                } else {
                    let mad = bare_drep(c, id);
                    let peer = c.peer;
                    self.send(peer, mad);
                }
            }
            CmState::DreqRcvd => self.counters.duplicates += 1,
            _ => self.counters.unexpected += 1,
        }
    }

    pub(super) fn on_drep(&mut self, now: Instant, from: A, drep: cm::DrepRepr) {
        let Some(id) = self.mine(from, drep.remote_comm_id, drep.local_comm_id) else {
            return;
        };
        match self.conns.get(&id).map(|c| c.state) {
            Some(CmState::DreqSent) => {
                self.events.push_back(CmEvent::Disconnected {
                    id,
                    timed_out: false,
                });
                self.enter_timewait(now, id);
            }
            Some(CmState::TimeWait) => self.counters.duplicates += 1,
            _ => self.counters.unexpected += 1,
        }
    }
}
