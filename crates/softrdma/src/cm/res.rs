//! An ID's line in `softrdma res show cm_id`, published each time the ID moves (its
//! state moves only here, by the rules of `softrdma_proto::cma`).
//!
//! Calls the device's resource list. Locks: `CmId` (read the state), then, with it
//! released, `ResFields` (the published line).

use super::dev;
use super::objects::{CmId, QpRef};
use super::types::PortSpace;
use softrdma_proto::QpType;
use softrdma_proto::cma::IdStep;

impl CmId {
    /// Moves the ID by `step` (see `softrdma_proto::cma::IdState::after`) and publishes its line for
    /// `res show cm_id`.
    pub(super) fn moved(&self, step: IdStep) {
        self.publish(Some(step));
    }

    /// Publishes the ID's line for `res show cm_id`, after moving it by `step` if any.
    pub(super) fn publish(&self, step: Option<IdStep>) {
        let line = {
            let mut st = self.st();
            if let Some(step) = step {
                st.state = st.state.after(step);
            }
            let state = st.state;
            let mut line = String::new();
            if let Some(qp) = st.qp.as_ref().and_then(QpRef::get) {
                line.push_str(&format!(
                    "lqpn {} qp-type {} ",
                    qp.qp_num().value(),
                    match qp.qp_type() {
                        QpType::Ud => "UD",
                        QpType::Uc => "UC",
                        QpType::Rc => "RC",
                    }
                ));
            }
            line.push_str(&format!(
                "state {state} ps {}",
                match self.inner.ps {
                    PortSpace::Tcp => "TCP",
                    PortSpace::Udp => "UDP",
                    PortSpace::Ib => "IB",
                }
            ));
            if let Some(a) = st.local {
                line.push_str(&format!(" src-addr {a}"));
            }
            if let Some(a) = st.peer {
                line.push_str(&format!(" dst-addr {a}"));
            }
            line
        };
        dev::publish(&self.inner.ctx, &self.inner.res, line);
    }
}
