//! Connection establishment, both sides (IBTA 12.9.6, figures 141-142): the verbs that
//! send a REQ, REP, RTU, MRA or REJ, and what a received REQ, REP, RTU, REJ, MRA or LAP
//! does to a connection.
//!
//! Owns the states from REQ_SENT and REQ_RCVD to ESTABLISHED (and back to nothing on a
//! reject); calls the agent's helpers and timers.

use super::*;

impl<A: Copy + Eq + Hash + core::fmt::Debug> CmAgent<A> {
    /// Sends `req` (its `local_comm_id` and `local_ca_guid` are filled in here) to `peer`
    /// and waits for the REP; returns the new connection's ID.
    pub fn connect(&mut self, now: Instant, peer: A, mut req: ReqRepr) -> CommId {
        let id = self.new_id();
        req.local_comm_id = id;
        req.local_ca_guid = self.config.ca_guid;
        // IBTA 13.4.6.4: the requester picks a transaction ID unique among its own.
        let tid = u64::from(self.rng.random::<u32>()) << 32 | u64::from(id);
        let mad = mad(tid, CmMessage::Req(req));
        let timeout = self.wait_for(req.remote_cm_response_timeout);
        self.conns.insert(
            id,
            Conn {
                peer,
                state: CmState::ReqSent,
                active: true,
                tid,
                remote_comm_id: 0,
                remote_ca_guid: 0,
                local_qpn: req.local_qpn,
                remote_qpn: 0,
                last: Some(mad),
                deadline: None,
                retries_left: req.max_cm_retries,
                max_retries: req.max_cm_retries,
                timeout,
            },
        );
        self.send(peer, mad);
        self.arm(id, Some(now.add(timeout)));
        id
    }

    /// Passive side: answers the REQ of connection `id` with `rep` (its communication IDs
    /// and CA GUID are filled in here) and waits for the RTU.
    pub fn accept(&mut self, now: Instant, id: CommId, mut rep: RepRepr) -> Result<(), CmError> {
        let guid = self.config.ca_guid;
        let c = self.conn(id)?;
        if !matches!(c.state, CmState::ReqRcvd | CmState::MraReqSent) {
            return Err(Self::wrong(id, c.state, "accept"));
        }
        rep.local_comm_id = id;
        rep.remote_comm_id = c.remote_comm_id;
        rep.local_ca_guid = guid;
        c.local_qpn = rep.local_qpn;
        c.state = CmState::RepSent;
        self.send_awaiting(now, id, CmMessage::Rep(rep));
        Ok(())
    }

    /// Rejects connection `id` (a REQ received, or a REP received) with `reason` and
    /// private data; the connection ends (TIMEWAIT if the peer may have connected a QP).
    pub fn reject(
        &mut self,
        now: Instant,
        id: CommId,
        reason: u16,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let pd = private(private_data, "REJ")?;
        let c = self.conn(id)?;
        let message = match c.state {
            CmState::ReqRcvd | CmState::MraReqSent => MessageRef::Req,
            CmState::RepRcvd | CmState::MraRepSent => MessageRef::Rep,
            s => return Err(Self::wrong(id, s, "reject")),
        };
        let rej = RejRepr {
            // A REQ's sender never learns our ID: Linux sends 0 here too.
            local_comm_id: if message == MessageRef::Req { 0 } else { id },
            remote_comm_id: c.remote_comm_id,
            message,
            reason,
            ari: Default::default(),
            private_data: pd,
        };
        let (peer, tid) = (c.peer, c.tid);
        self.send(peer, mad(tid, CmMessage::Rej(rej)));
        if message == MessageRef::Rep {
            self.enter_timewait(now, id);
        } else {
            self.forget(id);
        }
        Ok(())
    }

    /// Active side: the QP is ready; sends the RTU and the connection is established.
    pub fn ready_to_use(&mut self, id: CommId, private_data: &[u8]) -> Result<(), CmError> {
        let pd = private(private_data, "RTU")?;
        let c = self.conn(id)?;
        if !matches!(c.state, CmState::RepRcvd | CmState::MraRepSent) {
            return Err(Self::wrong(id, c.state, "ready_to_use"));
        }
        let rtu = CmMessage::Rtu(IdsRepr {
            local_comm_id: id,
            remote_comm_id: c.remote_comm_id,
            private_data: pd,
        });
        c.state = CmState::Established;
        // Kept to answer a duplicate REP (our RTU was lost).
        self.send_kept(id, rtu);
        self.arm(id, None);
        Ok(())
    }

    /// Passive side: traffic arrived on the QP before the RTU did (IBTA 12.9.6.2: the
    /// communication-established event stands in for it).
    pub fn establish(&mut self, id: CommId) -> Result<(), CmError> {
        let c = self.conn(id)?;
        match c.state {
            CmState::RepSent | CmState::MraRepRcvd => {
                let event = CmEvent::Established {
                    id,
                    private_data: Box::new([]),
                };
                self.advance(id, CmState::Established, event);
                Ok(())
            }
            CmState::Established => Ok(()),
            s => Err(Self::wrong(id, s, "establish")),
        }
    }

    /// Asks the peer for more time: an MRA for the REQ we hold (passive) or the REP
    /// (active), with `service_timeout` (4.096 µs × 2^n) on top of the packet lifetime.
    pub fn mra(&mut self, id: CommId, service_timeout: u8) -> Result<(), CmError> {
        let c = self.conn(id)?;
        let (message, next) = match c.state {
            CmState::ReqRcvd | CmState::MraReqSent => (MessageRef::Req, CmState::MraReqSent),
            CmState::RepRcvd | CmState::MraRepSent => (MessageRef::Rep, CmState::MraRepSent),
            s => return Err(Self::wrong(id, s, "mra")),
        };
        let mra = CmMessage::Mra(MraRepr {
            local_comm_id: id,
            remote_comm_id: c.remote_comm_id,
            message,
            service_timeout,
            private_data: PrivateData::default(),
        });
        c.state = next;
        self.send_kept(id, mra);
        Ok(())
    }

    pub(super) fn on_req(&mut self, now: Instant, from: A, tid: u64, req: ReqRepr) {
        if let Some(&id) = self.by_remote.get(&(req.local_ca_guid, req.local_comm_id)) {
            // IBTA 12.9.6.1: a REQ we have seen. Answer with what we last sent for it.
            self.counters.duplicates += 1;
            let Some(c) = self.conns.get(&id) else {
                return;
            };
            match (c.state, c.last) {
                (CmState::MraReqSent | CmState::RepSent | CmState::MraRepRcvd, Some(last)) => {
                    let peer = c.peer;
                    self.send(peer, last);
                }
                (CmState::TimeWait, _) => {
                    // The old connection is over; the peer's REQ is stale.
                    // Message rejected "other" (the state's), as Linux sends it: the REQ is
                    // not one this connection is answering.
                    let mad = self.rej_mad(c, id, rej_reason::STALE_CONNECTION);
                    let peer = c.peer;
                    self.send(peer, mad);
                }
                // The consumer has not answered yet, or the connection is up.
                _ => {}
            }
            return;
        }
        if !self.listening.contains(&req.service_id) {
            self.counters.unexpected += 1;
            self.unlistened
                .retain(|_, at| now.since(*at) < RELISTEN_GRACE);
            if self.unlistened.contains_key(&req.service_id) {
                // Its listener has just gone, and programs listen again on the same port
                // for their next connection (perftest's -R: one for the parameters, one
                // per QP): the REQ's resend will find the new one.
                return;
            }
            if self.bound.contains(&req.service_id) {
                // Bound and about to listen: a program may tell its peer the port between
                // the two (qperf's server does); the REQ's resend finds the listener.
                return;
            }
            // IBTA 12.6.7.2: nobody serves the service ID.
            let rej = RejRepr {
                local_comm_id: 0,
                remote_comm_id: req.local_comm_id,
                message: MessageRef::Req,
                reason: rej_reason::INVALID_SERVICE_ID,
                ari: Default::default(),
                private_data: PrivateData::default(),
            };
            self.send(from, mad(tid, CmMessage::Rej(rej)));
            return;
        }
        let id = self.new_id();
        self.conns.insert(
            id,
            Conn {
                peer: from,
                state: CmState::ReqRcvd,
                active: false,
                tid,
                remote_comm_id: req.local_comm_id,
                remote_ca_guid: req.local_ca_guid,
                local_qpn: 0,
                remote_qpn: req.local_qpn,
                last: None,
                deadline: None,
                retries_left: 0,
                max_retries: req.max_cm_retries,
                timeout: self.wait_for(req.local_cm_response_timeout),
            },
        );
        self.by_remote
            .insert((req.local_ca_guid, req.local_comm_id), id);
        self.events.push_back(CmEvent::ReqReceived {
            id,
            from,
            req: Box::new(req),
        });
    }

    pub(super) fn on_rep(&mut self, from: A, rep: RepRepr) {
        let Some(id) = self.mine(from, rep.remote_comm_id, rep.local_comm_id) else {
            return;
        };
        let c = self.conns.get_mut(&id).expect("mine checked it");
        match c.state {
            CmState::ReqSent | CmState::MraReqRcvd => {
                c.remote_comm_id = rep.local_comm_id;
                c.remote_ca_guid = rep.local_ca_guid;
                c.remote_qpn = rep.local_qpn;
                self.by_remote
                    .insert((rep.local_ca_guid, rep.local_comm_id), id);
                let event = CmEvent::RepReceived {
                    id,
                    rep: Box::new(rep),
                };
                self.advance(id, CmState::RepRcvd, event);
            }
            // Our RTU (or MRA) was lost: send it again.
            CmState::Established | CmState::MraRepSent if c.remote_comm_id == rep.local_comm_id => {
                self.counters.duplicates += 1;
                if let Some(last) = c.last {
                    let peer = c.peer;
                    self.send(peer, last);
                }
            }
            CmState::RepRcvd => self.counters.duplicates += 1,
            _ => self.counters.unexpected += 1,
        }
    }

    pub(super) fn on_rtu(&mut self, from: A, rtu: cm::RtuRepr) {
        let Some(id) = self.mine(from, rtu.remote_comm_id, rtu.local_comm_id) else {
            return;
        };
        let c = self.conns.get_mut(&id).expect("mine checked it");
        match c.state {
            CmState::RepSent | CmState::MraRepRcvd => {
                let event = CmEvent::Established {
                    id,
                    private_data: Box::new(rtu.private_data.0),
                };
                self.advance(id, CmState::Established, event);
            }
            CmState::Established => self.counters.duplicates += 1,
            _ => self.counters.unexpected += 1,
        }
    }

    pub(super) fn on_rej(&mut self, now: Instant, from: A, rej: RejRepr) {
        // A REJ for a REQ may come before the peer had an ID for us to match.
        let Some(id) = self.mine(from, rej.remote_comm_id, rej.local_comm_id) else {
            return;
        };
        let c = self.conns.get_mut(&id).expect("mine checked it");
        let connected_qp = match c.state {
            CmState::ReqSent | CmState::MraReqRcvd | CmState::ReqRcvd | CmState::MraReqSent => {
                false
            }
            CmState::RepRcvd | CmState::MraRepSent | CmState::RepSent | CmState::MraRepRcvd => true,
            // A REJ after the connection was up is not in 12.9.6's tables.
            _ => {
                self.counters.unexpected += 1;
                return;
            }
        };
        let peer = c.peer;
        let cold_resends_left = c.max_retries.saturating_sub(c.retries_left) < COLD_REJ_RESENDS;
        let relistening = c.active
            && !connected_qp
            && rej.reason == rej_reason::INVALID_SERVICE_ID
            && c.retries_left > 0
            && (cold_resends_left
                || self
                    .ended
                    .get(&peer)
                    .is_some_and(|t| now.since(*t) < RELISTEN_GRACE)
                || self.conns.values().any(|o| {
                    o.active
                        && o.peer == peer
                        && matches!(o.state, CmState::Established | CmState::TimeWait)
                }));
        let c = self.conns.get_mut(&id).expect("mine checked it");
        if relistening {
            // The timer resends the REQ (see REJ_RETRY_WAIT).
            c.state = CmState::ReqSent;
            self.arm(id, Some(now.add(REJ_RETRY_WAIT)));
            return;
        }
        self.events.push_back(CmEvent::Rejected {
            id,
            rej: Box::new(rej),
        });
        if connected_qp {
            self.enter_timewait(now, id);
        } else {
            self.forget(id);
        }
    }

    pub(super) fn on_mra(&mut self, now: Instant, from: A, mra: MraRepr) {
        let Some(id) = self.mine(from, mra.remote_comm_id, mra.local_comm_id) else {
            return;
        };
        let lifetime = self.config.packet_lifetime;
        let c = self.conns.get_mut(&id).expect("mine checked it");
        let next = match (c.state, mra.message) {
            (CmState::ReqSent, MessageRef::Req) => CmState::MraReqRcvd,
            (CmState::RepSent, MessageRef::Rep) => CmState::MraRepRcvd,
            (CmState::MraReqRcvd | CmState::MraRepRcvd, _) => {
                self.counters.duplicates += 1;
                return;
            }
            _ => {
                self.counters.unexpected += 1;
                return;
            }
        };
        if c.remote_comm_id == 0 {
            c.remote_comm_id = mra.local_comm_id;
        }
        c.state = next;
        // IBTA 12.6.6: the answer comes within the service timeout and the packet lifetime;
        // no resend meanwhile.
        let wait = cm_timeout(mra.service_timeout) + 2 * lifetime;
        self.arm(id, Some(now.add(wait)));
        self.events.push_back(CmEvent::MraReceived { id });
    }

    /// IBTA 12.8.2: a CA that cannot load an alternate path answers a LAP with an APR
    /// whose status says so; softrdma does not migrate paths.
    pub(super) fn on_lap(&mut self, from: A, tid: u64, lap: cm::LapRepr) {
        let Some(id) = self.mine(from, lap.remote_comm_id, lap.local_comm_id) else {
            return;
        };
        let c = &self.conns[&id];
        let status = if c.state == CmState::Established {
            ap_status::UNSUPPORTED
        } else {
            ap_status::REJECTED
        };
        let apr = cm::AprRepr {
            local_comm_id: id,
            remote_comm_id: c.remote_comm_id,
            status,
            info: Default::default(),
            private_data: PrivateData::default(),
        };
        let peer = c.peer;
        self.send(peer, mad(tid, CmMessage::Apr(apr)));
    }
}
