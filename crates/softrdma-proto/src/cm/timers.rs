//! The agent's timers: arming them, the waits the messages allow, and what a timer that
//! fires does to a connection (a resend, a give-up with its REJ, the end of TIMEWAIT).
//!
//! Owns the timer set and the retransmission rules of the module's "Timing" section;
//! calls the agent's helpers, and [`super::CmAgent`]'s SIDR timeout for SIDR records.

use super::*;

impl<A: Copy + Eq + Hash + core::fmt::Debug> CmAgent<A> {
    pub(super) fn arm(&mut self, id: CommId, at: Option<Instant>) {
        let old = match self.conns.get_mut(&id) {
            Some(c) => core::mem::replace(&mut c.deadline, at),
            None => match self.sidrs.get_mut(&id) {
                Some(s) => core::mem::replace(&mut s.deadline, at),
                None => return,
            },
        };
        if let Some(t) = old {
            self.timers.remove(&(t, id));
        }
        if let Some(t) = at {
            self.timers.insert((t, id));
        }
    }

    /// The wait for an answer to a message that allows `code`.
    pub(super) fn wait_for(&self, code: u8) -> Duration {
        cm_timeout(code) + 2 * self.config.packet_lifetime
    }

    /// How long a connection stays in TIMEWAIT (IBTA 12.9.6.3: long enough for every
    /// packet of the connection to leave the fabric): a round trip's packet lifetime and
    /// the CA's ACK delay.
    pub(super) fn timewait(&self) -> Duration {
        2 * self.config.packet_lifetime + cm_timeout(self.config.ack_delay)
    }

    /// The next instant [`Self::handle_timeout`] is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.first().map(|&(t, _)| t)
    }

    /// Fires the timers due at `now`: resends, gives up, leaves TIMEWAIT.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(t, id)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.remove(&(t, id));
            if let Some(c) = self.conns.get_mut(&id) {
                c.deadline = None;
                self.conn_timeout(now, id);
            } else if let Some(s) = self.sidrs.get_mut(&id) {
                s.deadline = None;
                self.sidr_timeout(now, id);
            }
        }
    }

    fn conn_timeout(&mut self, now: Instant, id: CommId) {
        let c = self.conns.get_mut(&id).expect("caller checked");
        if c.state == CmState::TimeWait {
            self.forget(id);
            self.events.push_back(CmEvent::TimewaitExit { id });
            return;
        }
        let waiting = matches!(
            c.state,
            CmState::ReqSent
                | CmState::MraReqRcvd
                | CmState::RepSent
                | CmState::MraRepRcvd
                | CmState::DreqSent
        );
        if !waiting {
            return;
        }
        // An MRA'd message was not resent meanwhile; its wait is over: resend it now.
        if c.retries_left > 0 {
            c.retries_left -= 1;
            c.state = match c.state {
                CmState::MraReqRcvd => CmState::ReqSent,
                CmState::MraRepRcvd => CmState::RepSent,
                s => s,
            };
            let (peer, last, timeout) = (c.peer, c.last, c.timeout);
            if let Some(last) = last {
                self.counters.retransmitted += 1;
                self.send(peer, last);
            }
            self.arm(id, Some(now.add(timeout)));
            return;
        }
        self.counters.timeouts += 1;
        match c.state {
            CmState::DreqSent => {
                self.events.push_back(CmEvent::Disconnected {
                    id,
                    timed_out: true,
                });
                self.enter_timewait(now, id);
            }
            state => {
                let message = if matches!(state, CmState::ReqSent | CmState::MraReqRcvd) {
                    "REQ"
                } else {
                    "REP"
                };
                // IBTA 12.9.6: the side that gives up says so with a TIMEOUT reject.
                let c = &self.conns[&id];
                let rej = self.rej_mad(c, id, rej_reason::TIMEOUT);
                let peer = c.peer;
                self.send(peer, rej);
                self.events.push_back(CmEvent::Timeout { id, message });
                if message == "REP" {
                    self.enter_timewait(now, id);
                } else {
                    self.forget(id);
                }
            }
        }
    }
}
