//! The rdma_cm types an application sees and passes: port spaces, connection parameters,
//! the kinds of events and what they carry (the event itself, which names its ID, is in
//! `objects`). Plain data: nothing here calls anything or takes a lock.

use softrdma_wire::Qpn;
use softrdma_wire::cm as wire;
use std::net::IpAddr;

/// rdma_cm's port spaces (`enum rdma_port_space`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortSpace {
    /// RDMA_PS_TCP: reliable connections.
    Tcp,
    /// RDMA_PS_UDP: datagrams (not yet).
    Udp,
    /// RDMA_PS_IB: any QP type.
    Ib,
}

impl PortSpace {
    /// The value librdmacm uses.
    pub fn code(self) -> u16 {
        match self {
            PortSpace::Tcp => wire::port_space::TCP,
            PortSpace::Udp => wire::port_space::UDP,
            PortSpace::Ib => wire::port_space::IB,
        }
    }
}

/// What a connect or accept offers (`struct rdma_conn_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnParam {
    /// Private data for the peer: at most 56 bytes in a connect (the REQ's 92 less the IP
    /// CM header), 196 in an accept.
    pub private_data: Vec<u8>,
    /// RDMA READs and atomics this side answers at once.
    pub responder_resources: u8,
    /// RDMA READs and atomics this side has outstanding.
    pub initiator_depth: u8,
    /// Transport retries (0-7).
    pub retry_count: u8,
    /// RNR retries (0-7; 7 is infinite).
    pub rnr_retry_count: u8,
    /// The QP the connection is for when the ID has none attached (`conn_param.qp_num`:
    /// a QP the program made itself and moves through its states with
    /// [`CmId::init_qp_attr`]); ignored when the ID has a QP.
    pub qp_num: Option<Qpn>,
    /// Whether that QP takes its receives from an SRQ (`conn_param.srq`).
    pub srq: bool,
}

impl ConnParam {
    /// The numbers of the connection's rules (`softrdma_proto::cma::qp_attr`).
    pub(super) fn offer(&self) -> softrdma_proto::cma::qp_attr::Offer {
        softrdma_proto::cma::qp_attr::Offer {
            responder_resources: self.responder_resources,
            initiator_depth: self.initiator_depth,
            retry_count: self.retry_count,
            rnr_retry_count: self.rnr_retry_count,
        }
    }
}

impl Default for ConnParam {
    fn default() -> Self {
        Self {
            private_data: Vec::new(),
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            qp_num: None,
            srq: false,
        }
    }
}

/// The Q_Key of rdma_cm's UD QPs in the UDP port space (`RDMA_UDP_QKEY` of
/// `<rdma/rdma_cma.h>`), which a SIDR_REP announces.
pub const RDMA_UDP_QKEY: u32 = softrdma_proto::cma::qp_attr::RDMA_UDP_QKEY;

/// What happened to an ID (`enum rdma_cm_event_type`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEventKind {
    /// `resolve_addr` found the local device.
    AddrResolved,
    /// `resolve_route` made the path.
    RouteResolved,
    /// A peer asks to connect: the event's `id` is the new connection's.
    ConnectRequest,
    /// The peer accepted, and this ID has no QP: answer with [`CmId::establish`].
    ConnectResponse,
    /// The connection is up.
    Established,
    /// The peer rejected the connection (IBTA reject reason; 28 is the consumer's own).
    Rejected {
        /// The reject reason.
        reason: u16,
    },
    /// The peer never answered.
    Unreachable,
    /// The peer answered our SIDR_REQ with a SIDR_REP whose status is not "valid"
    /// (`softrdma_wire::cm::sidr_status`): rdma_cm reports it as UNREACHABLE with that
    /// status.
    Unresolved {
        /// The SIDR_REP's status.
        status: u8,
    },
    /// The connection is down.
    Disconnected,
    /// The connection's IDs may be reused.
    TimewaitExit,
    /// The ID joined a multicast group ([`CmId::join_multicast`]): the event's
    /// [`CmEvent::ud`] gives the QPN (0xFFFFFF) and Q_Key that a send to the group takes.
    MulticastJoin {
        /// The group's address.
        group: IpAddr,
    },
}

/// The QPN a UD send to a multicast group is addressed to (what rdma_cm's
/// MULTICAST_JOIN event gives as `param.ud.qp_num`).
pub const MULTICAST_QPN: u32 = 0xFF_FFFF;

/// What the peer's REQ or REP said of the connection (`rdma_cm_event.param.conn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PeerParam {
    /// RDMA READs and atomics the peer answers at once.
    pub responder_resources: u8,
    /// RDMA READs and atomics the peer has outstanding.
    pub initiator_depth: u8,
    /// Its transport retry count (a REQ's).
    pub retry_count: u8,
    /// Its RNR retry count.
    pub rnr_retry_count: u8,
    /// Whether its QP takes receives from an SRQ.
    pub srq: bool,
    /// Its QP number.
    pub qp_num: u32,
}

/// Where a UD peer's QP is (`rdma_cm_event.param.ud`): send to the ID's peer address
/// with these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdParam {
    /// The peer's QP number.
    pub qp_num: u32,
    /// The Q_Key to send with.
    pub qkey: u32,
}

/// The QP events a program may pass on to the CM (`rdma_notify`'s `enum ibv_event_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifyEvent {
    /// IBV_EVENT_COMM_EST: the QP received before the connection was established.
    CommEstablished,
}
