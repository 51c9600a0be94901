//! What a QP is created with: its queue limits and its configuration.
//!
//! Owns only data types; calls nothing.

use super::*;

/// Limits fixed when the QP is created (`struct ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Inline bytes per send WR.
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        Self {
            max_send_wr: 1024,
            max_recv_wr: 1024,
            max_send_sge: 32,
            max_recv_sge: 32,
            max_inline_data: 256,
        }
    }
}

/// Everything needed to create a QP.
#[derive(Debug, Clone)]
pub struct QpConfig {
    /// This QP's number.
    pub qpn: Qpn,
    /// Transport.
    pub qp_type: QpType,
    /// Protection domain of the QP; every MR it uses must be in it.
    pub pd: Pd,
    /// Queue limits.
    pub caps: QpCaps,
    /// Signal every send WR, not only those with [`SendFlags::SIGNALED`].
    pub sq_sig_all: bool,
    /// Take receive WRs from this SRQ instead of the QP's own receive queue.
    pub srq: Option<Srq>,
    /// The port's active MTU: the path MTU of UD QPs, and of RC/UC QPs until RTR sets one.
    pub port_mtu: Mtu,
    /// The UDP source port every packet is sent from, when the sender cannot choose it per
    /// connection (a device with one socket bound to 4791); `None` uses rxe's per-connection
    /// port. The ICRC covers it, so it must be the port the packet really leaves from.
    pub udp_sport: Option<u16>,
}
