//! The device's counters of what its datapath sends and receives (the QPs count the rest,
//! see [`softrdma_proto::QpCounters`]). Atomic, since every thread that sends or drains the
//! socket adds to them; the receive path adds a batch's counts at once.

use std::sync::atomic::{AtomicU64, Ordering};

/// Device counters, named as rxe's `hw_counters`.
#[derive(Debug, Default)]
pub struct DeviceCounters {
    /// Packets sent.
    pub sent_pkts: AtomicU64,
    /// Packets received and handed to a QP.
    pub rcvd_pkts: AtomicU64,
    /// Packets for a QPN the device does not have.
    pub rcvd_unknown_qpn: AtomicU64,
    /// Packets that did not parse.
    pub rcvd_malformed: AtomicU64,
    /// Packets whose ICRC did not match.
    pub rcvd_icrc_errors: AtomicU64,
    /// IPv4 packets whose ICRC matched only with the sender's (recovered) IP ID.
    pub rcvd_icrc_ip_id: AtomicU64,
    /// Sends the socket refused (buffer full); retransmission recovers them.
    pub send_errors: AtomicU64,
    /// Batches handed to the kernel (`sendmmsg` calls, give or take a retry): with
    /// `sent_pkts`, how well packets share system calls.
    pub send_calls: AtomicU64,
    /// Probes sent to learn where a connected socket's IPv4 identification counter stands
    /// (see `tx`): three per destination, and one after each failed send.
    pub ip_id_probes: AtomicU64,
}

impl DeviceCounters {
    /// Name and value of every counter.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            ("sent_pkts", g(&self.sent_pkts)),
            ("rcvd_pkts", g(&self.rcvd_pkts)),
            ("rcvd_unknown_qpn", g(&self.rcvd_unknown_qpn)),
            ("rcvd_malformed", g(&self.rcvd_malformed)),
            ("rcvd_icrc_errors", g(&self.rcvd_icrc_errors)),
            ("rcvd_icrc_ip_id", g(&self.rcvd_icrc_ip_id)),
            ("send_errors", g(&self.send_errors)),
            ("send_calls", g(&self.send_calls)),
            ("ip_id_probes", g(&self.ip_id_probes)),
        ]
    }
}
