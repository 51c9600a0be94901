//! Service ID resolution (IBTA 12.11): the verbs that send a SIDR_REQ or SIDR_REP, what a
//! received one does, and the requester's resends.
//!
//! Owns the agent's SIDR records; calls the agent's helpers and timers.

use super::*;

impl<A: Copy + Eq + Hash + core::fmt::Debug> CmAgent<A> {
    /// Sends a SIDR_REQ for `req.service_id` to `peer` (its request ID is filled in here)
    /// and waits for the SIDR_REP.
    pub fn sidr_request(&mut self, now: Instant, peer: A, mut req: SidrReqRepr) -> CommId {
        let id = self.new_id();
        req.request_id = id;
        let tid = u64::from(self.rng.random::<u32>()) << 32 | u64::from(id);
        let mad = mad(tid, CmMessage::SidrReq(req));
        self.sidrs.insert(
            id,
            Sidr {
                peer,
                active: true,
                request_id: id,
                last: mad,
                deadline: None,
                retries_left: self.config.max_retries,
            },
        );
        self.send(peer, mad);
        let t = now.add(self.wait_for(self.config.response_timeout));
        self.arm(id, Some(t));
        id
    }

    /// Answers the SIDR_REQ `id` with `rep` (its request and service IDs are filled in).
    /// The answer is kept to resend for a duplicate until TIMEWAIT's length has passed.
    pub fn sidr_reply(
        &mut self,
        now: Instant,
        id: CommId,
        mut rep: SidrRepRepr,
    ) -> Result<(), CmError> {
        let wait = self.timewait();
        let s = self.sidrs.get_mut(&id).ok_or(CmError::UnknownId(id))?;
        if s.active {
            return Err(CmError::UnknownId(id));
        }
        let CmMessage::SidrReq(req) = s.last.msg else {
            // Already answered.
            return Err(CmError::UnknownId(id));
        };
        rep.request_id = s.request_id;
        rep.service_id = req.service_id;
        s.last = mad(s.last.tid, CmMessage::SidrRep(rep));
        let (peer, mad) = (s.peer, s.last);
        self.send(peer, mad);
        self.arm(id, Some(now.add(wait)));
        Ok(())
    }

    pub(super) fn on_sidr_req(&mut self, now: Instant, from: A, tid: u64, req: SidrReqRepr) {
        if let Some(&id) = self.sidr_by_remote.get(&(from, req.request_id)) {
            self.counters.duplicates += 1;
            let last = self.sidrs[&id].last;
            if matches!(last.msg, CmMessage::SidrRep(_)) {
                self.send(from, last);
            }
            return;
        }
        if !self.listening.contains(&req.service_id) {
            self.counters.unexpected += 1;
            let rep = SidrRepRepr {
                request_id: req.request_id,
                status: sidr_status::SERVICE_ID_NOT_SUPPORTED,
                info: Default::default(),
                qpn: 0,
                service_id: req.service_id,
                qkey: 0,
                private_data: PrivateData::default(),
            };
            self.send(from, mad(tid, CmMessage::SidrRep(rep)));
            return;
        }
        let id = self.new_id();
        self.sidrs.insert(
            id,
            Sidr {
                peer: from,
                active: false,
                request_id: req.request_id,
                last: mad(tid, CmMessage::SidrReq(req)),
                deadline: None,
                retries_left: 0,
            },
        );
        self.sidr_by_remote.insert((from, req.request_id), id);
        // Forgotten if the consumer never answers.
        let t = now.add(self.wait_for(self.config.response_timeout) * 4);
        self.arm(id, Some(t));
        self.events.push_back(CmEvent::SidrReqReceived {
            id,
            from,
            req: Box::new(req),
        });
    }

    pub(super) fn on_sidr_rep(&mut self, from: A, rep: SidrRepRepr) {
        let id = rep.request_id;
        match self.sidrs.get(&id) {
            Some(s) if s.active && s.peer == from => {
                self.arm(id, None);
                self.sidrs.remove(&id);
                self.events.push_back(CmEvent::SidrRepReceived {
                    id,
                    rep: Box::new(rep),
                });
            }
            _ => self.counters.unexpected += 1,
        }
    }

    pub(super) fn sidr_timeout(&mut self, now: Instant, id: CommId) {
        let wait = self.wait_for(self.config.response_timeout);
        let s = self.sidrs.get_mut(&id).expect("caller checked");
        if s.active && s.retries_left > 0 {
            s.retries_left -= 1;
            let (peer, last) = (s.peer, s.last);
            self.counters.retransmitted += 1;
            self.send(peer, last);
            self.arm(id, Some(now.add(wait)));
            return;
        }
        let s = self.sidrs.remove(&id).expect("present");
        if s.active {
            self.counters.timeouts += 1;
            self.events.push_back(CmEvent::Timeout {
                id,
                message: "SIDR_REQ",
            });
        } else {
            self.sidr_by_remote.remove(&(s.peer, s.request_id));
        }
    }
}
