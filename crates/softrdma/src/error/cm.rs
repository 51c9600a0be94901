//! Why an rdma_cm verb was refused: one variant per refusal, each naming what was wrong,
//! with the IB CM agent's own error (`softrdma_proto::cm::CmError`) as its source where the
//! agent refused, and [`CmError::errno`] the errno librdmacm gives for it. It is carried
//! by [`Error::Cm`](super::Error::Cm), which names the verb. Like the rest of `error`, it
//! imports nothing of the crate's layers above (the port space is named by its name).

use softrdma_proto::cma::IdState;
use std::net::{IpAddr, SocketAddr};

/// Why an rdma_cm verb was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CmError {
    /// `rdma_bind_addr` (or a resolve's implicit bind) to an address that is not the
    /// device's (EADDRNOTAVAIL).
    #[error("{addr} is not the address of device {device} ({device_addr})")]
    NotDeviceAddress {
        /// The address asked for.
        addr: IpAddr,
        /// The device.
        device: String,
        /// The device's address.
        device_addr: IpAddr,
    },
    /// `rdma_listen` on a port an ID of this process or another process of the device
    /// listens on (EADDRINUSE).
    #[error("{holder} listens on port {port} already")]
    PortInUse {
        /// The port.
        port: u16,
        /// Who listens on it.
        holder: PortHolder,
    },
    /// `rdma_listen` on a service the IB CM agent has a listener for already (EADDRINUSE).
    #[error("{source}")]
    ServiceInUse {
        /// The agent's refusal.
        source: softrdma_proto::cm::CmError,
    },
    /// `rdma_resolve_addr` to something that is not an address and port (EINVAL).
    #[error("{dst} is not an address and port to connect to")]
    NotConnectable {
        /// The destination given.
        dst: SocketAddr,
    },
    /// `rdma_resolve_addr` to an address of the other family than the device's: no route
    /// (ENETUNREACH).
    #[error(
        "device {device} is on {device_addr}, which cannot reach {dst}: give a source \
         address of the destination's family"
    )]
    NoRoute {
        /// The device.
        device: String,
        /// The device's address.
        device_addr: IpAddr,
        /// The destination.
        dst: IpAddr,
    },
    /// `rdma_resolve_route` before the address is resolved (EINVAL).
    #[error("the address is not resolved yet (rdma_resolve_addr first)")]
    AddrNotResolved,
    /// A connect before the route is resolved (EINVAL).
    #[error("the route is not resolved yet")]
    RouteNotResolved,
    /// A connect on an ID that is connecting or connected already, or (`ud`) resolving
    /// its UD peer already (EISCONN).
    #[error(
        "{}",
        if *ud { "the ID is resolving its peer already" } else { "the ID is connecting or connected" }
    )]
    AlreadyConnecting {
        /// Whether the ID finds a UD peer (SIDR) rather than connecting.
        ud: bool,
    },
    /// More private data than the message carries (EINVAL).
    #[error("{len} bytes of private data; {message} carries {max}")]
    PrivateDataTooLong {
        /// The message, as the verb sends it ("a connect", "an accept", ...).
        message: &'static str,
        /// Bytes given.
        len: usize,
        /// Bytes the message carries.
        max: usize,
    },
    /// A connect or accept with no QP to announce: none attached, and the parameters name
    /// none (EINVAL).
    #[error("the ID has no QP (rdma_create_qp first) and the parameters name none (qp_num)")]
    NoQpToAnnounce,
    /// A UD accept on an ID with no QP (EINVAL).
    #[error("the ID has no QP (rdma_create_qp first)")]
    NoQp,
    /// An accept on an ID that holds no connection request (EINVAL).
    #[error("the ID holds no connection request")]
    NoConnectRequest,
    /// A UD answer on an ID that holds no SIDR request (EINVAL).
    #[error("the ID holds no request")]
    NoSidrRequest,
    /// A verb on the connection of an ID that has none (EINVAL).
    #[error("the ID has no connection")]
    NoConnection,
    /// The IB CM agent refused the verb in the connection's state (EINVAL).
    #[error("{source}")]
    Refused {
        /// The agent's refusal.
        source: softrdma_proto::cm::CmError,
    },
    /// `rdma_create_qp` with a QP type the ID's port space does not take (EINVAL).
    #[error(
        "a {qp_type:?} QP does not fit an ID of port space {port_space} (TCP takes RC, UDP \
         takes UD)"
    )]
    QpTypeMismatch {
        /// The QP's type.
        qp_type: softrdma_proto::QpType,
        /// The ID's port space, as `cm::PortSpace`'s `Debug` names it (`Tcp`, `Udp`, `Ib`).
        port_space: String,
    },
    /// `rdma_init_qp_attr` for RTR or RTS before the connection's parameters are known
    /// (EINVAL).
    #[error("{state:?} needs the connection's parameters: a connect request, or the peer's reply")]
    NoConnParams {
        /// The state asked for.
        state: softrdma_proto::QpState,
    },
    /// `rdma_init_qp_attr` for a state that has no attributes to give (EINVAL).
    #[error("{state:?}: only INIT, RTR and RTS have attributes to give")]
    NoQpAttrs {
        /// The state asked for.
        state: softrdma_proto::QpState,
    },
    /// An ACK timeout wider than its field (EINVAL).
    #[error("ACK timeout {timeout}: the field holds 0 to 31")]
    AckTimeoutRange {
        /// The timeout asked for.
        timeout: u8,
    },
    /// A multicast join on an ID that is not UD (EINVAL).
    #[error("only a UD ID (port space UDP, or IB with a UD QP) joins a multicast group")]
    JoinNotUd,
    /// A multicast join of an address that is not a multicast group's (EINVAL).
    #[error("{group} is not a multicast address")]
    NotMulticast {
        /// The address.
        group: IpAddr,
    },
    /// A multicast join of a group of the other family than the device's (EINVAL).
    #[error("device {device} is on {device_addr}, which cannot join the group {group}")]
    JoinWrongFamily {
        /// The device.
        device: String,
        /// The device's address.
        device_addr: IpAddr,
        /// The group.
        group: IpAddr,
    },
    /// A multicast join by an ID in a state that cannot join: not bound or resolved, or
    /// routed already (EINVAL).
    #[error(
        "the ID is {state}: bind or resolve its address first (and join before resolving \
         the route)"
    )]
    JoinWrongState {
        /// The ID's state.
        state: IdState,
    },
    /// A verb the ID's state does not allow, as the kernel's rdma_cm refuses it: bind
    /// from IDLE only, resolve a route from ADDR_RESOLVED only, connect from
    /// ROUTE_RESOLVED only, and so on (see `softrdma_proto::cma::IdState::allows`)
    /// (EINVAL).
    #[error("not allowed while the ID is {state}")]
    WrongState {
        /// The ID's state.
        state: IdState,
    },
    /// A multicast join of a group the ID has joined already (EADDRINUSE).
    #[error("the ID has joined {group} already")]
    AlreadyJoined {
        /// The group.
        group: IpAddr,
    },
    /// A multicast leave of a group the ID has not joined (EADDRNOTAVAIL).
    #[error("the ID has not joined {group}")]
    NotJoined {
        /// The group.
        group: IpAddr,
    },
    /// A multicast join of an IPv6 group on a device whose interface carries no IPv6
    /// multicast (Linux's `lo`) (EOPNOTSUPP).
    #[error(
        "device {device} is on {device_addr}, whose interface carries no IPv6 multicast \
         ({source}); use an IPv4 device, or one on an interface with multicast"
    )]
    NoIpv6Multicast {
        /// The device.
        device: String,
        /// The device's address.
        device_addr: IpAddr,
        /// The attach's refusal.
        source: Box<super::Error>,
    },
    /// `rdma_create_id` while another connection manager holds the device's QP1 (EBUSY).
    #[error("QP1 of this device is taken by another connection manager")]
    Qp1Taken,
}

/// Who listens on a port already (see [`CmError::PortInUse`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PortHolder {
    /// An ID of this process.
    #[error("an ID of this process")]
    ThisProcess,
    /// Another process that shares the device.
    #[error("another process of the device")]
    OtherProcess,
}

impl CmError {
    /// The errno librdmacm gives for the refusal (see each variant).
    pub fn errno(&self) -> i32 {
        match self {
            CmError::NotDeviceAddress { .. } | CmError::NotJoined { .. } => libc::EADDRNOTAVAIL,
            CmError::PortInUse { .. }
            | CmError::ServiceInUse { .. }
            | CmError::AlreadyJoined { .. } => libc::EADDRINUSE,
            CmError::NoRoute { .. } => libc::ENETUNREACH,
            CmError::AlreadyConnecting { .. } => libc::EISCONN,
            CmError::NoIpv6Multicast { .. } => libc::EOPNOTSUPP,
            CmError::Qp1Taken => libc::EBUSY,
            CmError::NotConnectable { .. }
            | CmError::AddrNotResolved
            | CmError::RouteNotResolved
            | CmError::PrivateDataTooLong { .. }
            | CmError::NoQpToAnnounce
            | CmError::NoQp
            | CmError::NoConnectRequest
            | CmError::NoSidrRequest
            | CmError::NoConnection
            | CmError::Refused { .. }
            | CmError::QpTypeMismatch { .. }
            | CmError::NoConnParams { .. }
            | CmError::NoQpAttrs { .. }
            | CmError::AckTimeoutRange { .. }
            | CmError::JoinNotUd
            | CmError::NotMulticast { .. }
            | CmError::JoinWrongFamily { .. }
            | CmError::JoinWrongState { .. }
            | CmError::WrongState { .. } => libc::EINVAL,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts programs and tests look for, and the errnos librdmacm gives.
    #[test]
    fn texts_and_errnos_stay_librdmacms() {
        let e = crate::Error::cm(
            "rdma_listen",
            CmError::PortInUse {
                port: 7450,
                holder: PortHolder::OtherProcess,
            },
        );
        assert_eq!(
            e.to_string(),
            "rdma_listen: another process of the device listens on port 7450 already"
        );
        assert_eq!(e.errno(), libc::EADDRINUSE);
        let cases = [
            (CmError::AlreadyConnecting { ud: true }, libc::EISCONN),
            (
                CmError::NotJoined {
                    group: [224, 0, 0, 1].into(),
                },
                libc::EADDRNOTAVAIL,
            ),
            (CmError::Qp1Taken, libc::EBUSY),
            (CmError::NoConnection, libc::EINVAL),
        ];
        for (why, errno) in cases {
            assert_eq!(why.errno(), errno, "{why}");
        }
        assert_eq!(
            CmError::AlreadyConnecting { ud: false }.to_string(),
            "the ID is connecting or connected"
        );
    }
}
