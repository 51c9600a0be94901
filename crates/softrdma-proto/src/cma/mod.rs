//! The rdma_cm layer above the IB CM, as pure rules: where an rdma_cm ID stands
//! ([`IdState`], the kernel's `enum rdma_cm_state` in `drivers/infiniband/core/cma.c`),
//! which verbs each state allows and where each verb and event takes it, and the
//! QP-attribute rules of a connection ([`qp_attr`]).
//!
//! # Calling contract
//! No I/O, clock, threads or locks. The caller (`softrdma::cm`) keeps an ID's state under
//! its own lock, asks [`IdState::allows`] before a verb (a verb the state refuses fails
//! with EINVAL, as the kernel's `cma_comp_exch` makes it), and moves the state with
//! [`IdState::after`] once the verb or the event has happened.

pub mod qp_attr;

use core::fmt;

/// Where an rdma_cm ID stands, in the kernel's words (`rdma res show cm_id` prints them).
/// The kernel's transient `ADDR_QUERY` and `ROUTE_QUERY` do not show here: on RoCE v2 an
/// address is its GID and a path needs no query, so both resolves complete at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum IdState {
    /// Made, nothing more.
    #[default]
    Idle,
    /// Bound to an address and port (`rdma_bind_addr`).
    AddrBound,
    /// Its peer's address is resolved (`rdma_resolve_addr`).
    AddrResolved,
    /// Its path to the peer is resolved (`rdma_resolve_route`).
    RouteResolved,
    /// Takes connection requests (`rdma_listen`).
    Listen,
    /// Connecting or connected: an active ID from `rdma_connect` on, a passive one from
    /// the request that made it.
    Connect,
    /// Its connection is ending or ended (`rdma_disconnect`, or the peer's DREQ).
    Disconnect,
}

impl IdState {
    /// The kernel's name of the state (`RDMA_CM_` left out), as `rdma res` shows it.
    pub fn label(self) -> &'static str {
        match self {
            IdState::Idle => "IDLE",
            IdState::AddrBound => "ADDR_BOUND",
            IdState::AddrResolved => "ADDR_RESOLVED",
            IdState::RouteResolved => "ROUTE_RESOLVED",
            IdState::Listen => "LISTEN",
            IdState::Connect => "CONNECT",
            IdState::Disconnect => "DISCONNECT",
        }
    }

    /// Whether `verb` may be called on an ID in this state. The rules are the kernel's
    /// (`cma.c`), where each verb moves the state with `cma_comp_exch` from the states
    /// it names, and fails with EINVAL from any other.
    pub fn allows(self, verb: IdVerb) -> bool {
        use IdState::*;
        match verb {
            // rdma_bind_addr: from IDLE only.
            IdVerb::Bind => self == Idle,
            // rdma_resolve_addr binds an IDLE ID first; resolving again is allowed (a
            // program that retries after ADDR_ERROR, or that resolves a new peer before
            // it resolves the route).
            IdVerb::ResolveAddr => matches!(self, Idle | AddrBound | AddrResolved),
            // rdma_resolve_route: from ADDR_RESOLVED only.
            IdVerb::ResolveRoute => self == AddrResolved,
            // rdma_listen binds an IDLE ID first; listening again only sets the backlog.
            IdVerb::Listen => matches!(self, Idle | AddrBound | Listen),
            // rdma_connect: from ROUTE_RESOLVED only.
            IdVerb::Connect => self == RouteResolved,
            // rdma_accept and rdma_reject: a passive ID, made by a request.
            IdVerb::Accept => self == Connect,
            // rdma_join_multicast: a bound or resolved ID (IPoIB and RoCE alike).
            IdVerb::JoinMulticast => matches!(self, AddrBound | AddrResolved),
        }
    }

    /// The state after `step` happened to an ID in this state. Total: an event the
    /// state did not expect leaves the state as the event says (the agent below has
    /// already matched events to connections, IBTA 12.9.6).
    pub fn after(self, step: IdStep) -> IdState {
        use IdState::*;
        match step {
            IdStep::Bound => AddrBound,
            IdStep::AddrResolved => AddrResolved,
            IdStep::RouteResolved => RouteResolved,
            IdStep::Listening => Listen,
            IdStep::Connecting | IdStep::Requested | IdStep::Accepted => Connect,
            IdStep::Resolved { valid: true } => Connect,
            IdStep::Resolved { valid: false } | IdStep::Rejected | IdStep::TimewaitExit => Idle,
            IdStep::Disconnected => Disconnect,
        }
    }
}

impl fmt::Display for IdState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// A verb whose state rule [`IdState::allows`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdVerb {
    /// `rdma_bind_addr`.
    Bind,
    /// `rdma_resolve_addr`.
    ResolveAddr,
    /// `rdma_resolve_route`.
    ResolveRoute,
    /// `rdma_listen`.
    Listen,
    /// `rdma_connect` (a REQ, or a SIDR_REQ for a UD ID).
    Connect,
    /// `rdma_accept` (a REP, or a SIDR_REP).
    Accept,
    /// `rdma_join_multicast`.
    JoinMulticast,
}

/// What moves an ID (see [`IdState::after`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdStep {
    /// It was bound to an address (by `rdma_bind_addr`, or by a verb that binds first).
    Bound,
    /// Its peer's address is resolved.
    AddrResolved,
    /// Its route is resolved.
    RouteResolved,
    /// It listens.
    Listening,
    /// It sent its REQ or SIDR_REQ (`rdma_connect`).
    Connecting,
    /// A REQ or SIDR_REQ made it (a passive ID).
    Requested,
    /// It accepted its request (`rdma_accept`: a REP).
    Accepted,
    /// Its SIDR exchange ended: with a valid answer (connected), or not.
    Resolved {
        /// Whether the SIDR_REP said VALID.
        valid: bool,
    },
    /// Its REQ was rejected.
    Rejected,
    /// Its connection ended, by either side (`rdma_disconnect`, a DREQ, a DREP).
    Disconnected,
    /// Its connection left TIMEWAIT.
    TimewaitExit,
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [IdState; 7] = [
        IdState::Idle,
        IdState::AddrBound,
        IdState::AddrResolved,
        IdState::RouteResolved,
        IdState::Listen,
        IdState::Connect,
        IdState::Disconnect,
    ];

    /// The client's and the server's paths through the states, as rping takes them, are
    /// each allowed at every step; the kernel's refusals are refused.
    #[test]
    fn the_usual_paths_are_allowed_and_the_kernels_refusals_refused() {
        // Each verb allowed in the state the steps before it left.
        let walk = |path: &[(IdVerb, IdStep)]| {
            path.iter().fold(IdState::Idle, |s, &(verb, step)| {
                assert!(s.allows(verb), "{s} refuses {verb:?}");
                s.after(step)
            })
        };
        let client = walk(&[
            (IdVerb::ResolveAddr, IdStep::AddrResolved),
            (IdVerb::ResolveRoute, IdStep::RouteResolved),
            (IdVerb::Connect, IdStep::Connecting),
        ]);
        assert_eq!(client.after(IdStep::Disconnected), IdState::Disconnect);
        walk(&[
            (IdVerb::Bind, IdStep::Bound),
            (IdVerb::Listen, IdStep::Listening),
            (IdVerb::Listen, IdStep::Listening),
        ]);
        let passive = IdState::Idle.after(IdStep::Requested);
        assert!(passive.allows(IdVerb::Accept));
        for s in ALL {
            assert_eq!(s.allows(IdVerb::Bind), s == IdState::Idle, "bind from {s}");
            assert_eq!(
                s.allows(IdVerb::Connect),
                s == IdState::RouteResolved,
                "connect from {s}"
            );
            assert_eq!(
                s.allows(IdVerb::ResolveRoute),
                s == IdState::AddrResolved,
                "resolve_route from {s}"
            );
        }
    }

    /// Every state has the kernel's name, and a refused or rejected exchange leaves the
    /// ID idle.
    #[test]
    fn labels_and_endings() {
        let labels: Vec<_> = ALL.iter().map(|s| s.label()).collect();
        assert_eq!(
            labels,
            [
                "IDLE",
                "ADDR_BOUND",
                "ADDR_RESOLVED",
                "ROUTE_RESOLVED",
                "LISTEN",
                "CONNECT",
                "DISCONNECT"
            ]
        );
        for s in ALL {
            assert_eq!(s.after(IdStep::Rejected), IdState::Idle);
            assert_eq!(s.after(IdStep::Resolved { valid: false }), IdState::Idle);
            assert_eq!(s.after(IdStep::Resolved { valid: true }), IdState::Connect);
        }
    }
}
