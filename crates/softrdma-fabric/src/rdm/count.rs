//! Where the endpoint's completions go: the CQ of their direction (unless the operation
//! asked for none) and the counters bound for their kind, which count every completion.
//!
//! Runs under the endpoint's lock, from its calls and its progress; a counter is bound
//! after that lock is let go (the list of a counter's endpoints ranks below it).

use super::{Endpoint, State};
use crate::buf::Buf;
use crate::counter::{CountOf, Counter};
use crate::cq::{Completion, Progress};
use std::sync::{Arc, Weak};

impl Endpoint {
    /// Counts the completions of the kinds `of` names on `cntr` (`fi_ep_bind` of a
    /// `fid_cntr`); reading `cntr` drives this endpoint's progress. A kind bound again
    /// counts on the new counter.
    pub fn bind_counter(&self, cntr: &Arc<Counter>, of: CountOf) {
        self.st().cntrs.set(cntr, of);
        let weak: Weak<dyn Progress> = Arc::downgrade(&self.st) as Weak<_>;
        cntr.bind(weak);
    }
}

impl State {
    /// A send-side completion (a send's, an RMA's, an atomic's): its CQ entry and its
    /// count.
    pub(super) fn complete(&self, context: u64, flags: u64, buf: Buf, len: usize, error: i32) {
        self.cntrs
            .report(&self.tx_cq, Completion::of(context, flags, buf, len, error));
    }

    /// A receive-side completion: its CQ entry and its count.
    pub(super) fn complete_rx(&self, c: Completion) {
        self.cntrs.report(&self.rx_cq, c);
    }

    /// An operation that completed with no CQ entry (an inject, a send or RMA without
    /// `FI_COMPLETION`): its count only.
    pub(super) fn counted(&self, flags: u64, error: bool) {
        self.cntrs.count(flags, error);
    }
}
