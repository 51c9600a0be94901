//! The vocabulary of verbs: work requests, completions, access flags, QP types and states.
//!
//! Numeric values match rdma-core's `<infiniband/verbs.h>` (`ibv_wc_status`, `ibv_wc_opcode`,
//! `ibv_qp_state`, `ibv_access_flags`, ...), so the C API layer can pass them through unchanged.

use bitflags::bitflags;
use core::fmt;
use core::time::Duration;
use softrdma_wire::Qpn;
use std::net::IpAddr;

/// A point in time, in nanoseconds since an epoch the caller chooses. The engine never reads a
/// clock: every input that depends on time carries one of these.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant(0);

    /// `ns` nanoseconds after the epoch.
    pub const fn from_nanos(ns: u64) -> Self {
        Self(ns)
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self + d`, saturating.
    #[allow(clippy::should_implement_trait)]
    pub fn add(self, d: Duration) -> Self {
        Self(
            self.0
                .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

/// The transport service of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connection (`IBV_QPT_RC`).
    Rc,
    /// Unreliable connection (`IBV_QPT_UC`).
    Uc,
    /// Unreliable datagram (`IBV_QPT_UD`).
    Ud,
}

/// QP states (`enum ibv_qp_state`; IBTA vol. 1, 10.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Reset.
    Reset = 0,
    /// Initialized.
    Init = 1,
    /// Ready to receive.
    Rtr = 2,
    /// Ready to send.
    Rts = 3,
    /// Send queue drained.
    Sqd = 4,
    /// Send queue error (UC and UD only).
    Sqe = 5,
    /// Error.
    Error = 6,
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Error => "ERROR",
        })
    }
}

/// Path MTU (`enum ibv_mtu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes.
    M256 = 1,
    /// 512 bytes.
    M512 = 2,
    /// 1024 bytes.
    M1024 = 3,
    /// 2048 bytes.
    M2048 = 4,
    /// 4096 bytes.
    M4096 = 5,
}

impl Mtu {
    /// Payload bytes per packet.
    pub const fn bytes(self) -> usize {
        128 << (self as usize)
    }

    /// The MTU of exactly `bytes`, if it is one of 256, 512, 1024, 2048, 4096.
    pub fn from_bytes(bytes: usize) -> Option<Self> {
        Some(match bytes {
            256 => Mtu::M256,
            512 => Mtu::M512,
            1024 => Mtu::M1024,
            2048 => Mtu::M2048,
            4096 => Mtu::M4096,
            _ => return None,
        })
    }

    /// The largest IB MTU that fits a netdev MTU, as rxe computes the active MTU: RoCE v2
    /// over IPv4 needs 80 bytes of headers and trailer around the payload.
    pub fn for_netdev(netdev_mtu: usize) -> Option<Self> {
        [Mtu::M4096, Mtu::M2048, Mtu::M1024, Mtu::M512, Mtu::M256]
            .into_iter()
            .find(|m| m.bytes() + 80 <= netdev_mtu)
    }
}

bitflags! {
    /// Memory and QP access rights (`enum ibv_access_flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct AccessFlags: u32 {
        /// The local HCA may write (receive buffers, READ destinations).
        const LOCAL_WRITE = 1;
        /// Remote RDMA WRITE.
        const REMOTE_WRITE = 1 << 1;
        /// Remote RDMA READ.
        const REMOTE_READ = 1 << 2;
        /// Remote atomics.
        const REMOTE_ATOMIC = 1 << 3;
        /// Memory window binding.
        const MW_BIND = 1 << 4;
        /// Zero-based addressing.
        const ZERO_BASED = 1 << 5;
    }
}

bitflags! {
    /// Send work request flags (`enum ibv_send_flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SendFlags: u32 {
        /// Wait for all earlier READs and atomics to complete before starting.
        const FENCE = 1;
        /// Generate a completion on success.
        const SIGNALED = 1 << 1;
        /// Set the solicited event bit on the last packet.
        const SOLICITED = 1 << 2;
        /// The payload was copied at post time.
        const INLINE = 1 << 3;
    }
}

bitflags! {
    /// Completion flags (`enum ibv_wc_flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct WcFlags: u32 {
        /// A 40-byte GRH area precedes the data (UD).
        const GRH = 1;
        /// `imm_data` is valid.
        const WITH_IMM = 1 << 1;
        /// The IP checksum was verified.
        const IP_CSUM_OK = 1 << 2;
        /// `invalidated_rkey` is valid.
        const WITH_INV = 1 << 3;
    }
}

/// Completion status (`enum ibv_wc_status`), with the same numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)]
pub enum WcStatus {
    Success = 0,
    LocLenErr = 1,
    LocQpOpErr = 2,
    LocEecOpErr = 3,
    LocProtErr = 4,
    WrFlushErr = 5,
    MwBindErr = 6,
    BadRespErr = 7,
    LocAccessErr = 8,
    RemInvReqErr = 9,
    RemAccessErr = 10,
    RemOpErr = 11,
    RetryExcErr = 12,
    RnrRetryExcErr = 13,
    LocRddViolErr = 14,
    RemInvRdReqErr = 15,
    RemAbortErr = 16,
    InvEecnErr = 17,
    InvEecStateErr = 18,
    FatalErr = 19,
    RespTimeoutErr = 20,
    GeneralErr = 21,
}

impl WcStatus {
    /// The name without `IBV_WC_`, e.g. `RETRY_EXC_ERR`.
    pub const fn name(self) -> &'static str {
        match self {
            WcStatus::Success => "SUCCESS",
            WcStatus::LocLenErr => "LOC_LEN_ERR",
            WcStatus::LocQpOpErr => "LOC_QP_OP_ERR",
            WcStatus::LocEecOpErr => "LOC_EEC_OP_ERR",
            WcStatus::LocProtErr => "LOC_PROT_ERR",
            WcStatus::WrFlushErr => "WR_FLUSH_ERR",
            WcStatus::MwBindErr => "MW_BIND_ERR",
            WcStatus::BadRespErr => "BAD_RESP_ERR",
            WcStatus::LocAccessErr => "LOC_ACCESS_ERR",
            WcStatus::RemInvReqErr => "REM_INV_REQ_ERR",
            WcStatus::RemAccessErr => "REM_ACCESS_ERR",
            WcStatus::RemOpErr => "REM_OP_ERR",
            WcStatus::RetryExcErr => "RETRY_EXC_ERR",
            WcStatus::RnrRetryExcErr => "RNR_RETRY_EXC_ERR",
            WcStatus::LocRddViolErr => "LOC_RDD_VIOL_ERR",
            WcStatus::RemInvRdReqErr => "REM_INV_RD_REQ_ERR",
            WcStatus::RemAbortErr => "REM_ABORT_ERR",
            WcStatus::InvEecnErr => "INV_EECN_ERR",
            WcStatus::InvEecStateErr => "INV_EEC_STATE_ERR",
            WcStatus::FatalErr => "FATAL_ERR",
            WcStatus::RespTimeoutErr => "RESP_TIMEOUT_ERR",
            WcStatus::GeneralErr => "GENERAL_ERR",
        }
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Completion opcode (`enum ibv_wc_opcode`), with the same numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum WcOpcode {
    Send = 0,
    RdmaWrite = 1,
    RdmaRead = 2,
    CompSwap = 3,
    FetchAdd = 4,
    BindMw = 5,
    LocalInv = 6,
    Recv = 128,
    RecvRdmaWithImm = 129,
}

/// A work completion (`struct ibv_wc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Completion {
    /// The work request's ID.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// Operation. For flushed receives, `Recv`.
    pub opcode: WcOpcode,
    /// Bytes transferred: received (GRH included for UD) or read; 0 for sends and writes, as rxe.
    pub byte_len: u32,
    /// Immediate data in host order, valid with [`WcFlags::WITH_IMM`].
    pub imm_data: u32,
    /// The R_Key a SEND with invalidate named, valid with [`WcFlags::WITH_INV`].
    pub invalidated_rkey: u32,
    /// The local QP.
    pub qp_num: Qpn,
    /// The remote QP (UD receives).
    pub src_qp: Qpn,
    /// Flags.
    pub wc_flags: WcFlags,
    /// The message had the solicited-event bit set (receives; for `req_notify` with
    /// solicited-only).
    pub solicited: bool,
}

/// A scatter/gather element: `length` bytes at `addr` of the MR with local key `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sge {
    /// Virtual address.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key.
    pub lkey: u32,
}

/// A WR's scatter/gather list: up to two entries inline, so that posting the common WR
/// (one SGE) allocates nothing. A heap allocation and its free cost about 160
/// instructions, a twentieth of a same-host SEND ping-pong's turn, twice per turn (the
/// SEND and the receive). Build one with [`sg!`](crate::sg) as `vec!` builds a `Vec`.
pub type SgList = smallvec::SmallVec<[Sge; 2]>;

/// Builds an [`SgList`] as `vec!` builds a `Vec`: `sg![a, b]`, `sg![a; n]`, `sg![]`.
#[macro_export]
macro_rules! sg {
    ($($t:tt)*) => { $crate::__smallvec::smallvec![$($t)*] };
}

#[doc(hidden)]
pub use smallvec as __smallvec;

/// Where a send's data comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Payload {
    /// Gathered from registered memory when each packet is built.
    Sges(SgList),
    /// Copied at post time (`IBV_SEND_INLINE`); needs no key.
    Inline(Vec<u8>),
}

impl Payload {
    /// Total length.
    pub fn len(&self) -> u64 {
        match self {
            Payload::Sges(s) => s.iter().map(|s| u64::from(s.length)).sum(),
            Payload::Inline(v) => v.len() as u64,
        }
    }

    /// True when there is no data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The operation of a send work request (`enum ibv_wr_opcode` with its arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SendOp {
    /// SEND.
    Send,
    /// SEND with immediate data.
    SendWithImm(u32),
    /// SEND with invalidate of a remote R_Key (RC only).
    SendWithInv(u32),
    /// RDMA WRITE.
    Write {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// RDMA WRITE with immediate data.
    WriteWithImm {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Immediate data.
        imm: u32,
    },
    /// RDMA READ into the payload's SGEs (RC only).
    Read {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// 8-byte compare and swap; the original value lands in the one 8-byte SGE (RC only).
    CompareSwap {
        /// Remote virtual address, 8-byte aligned.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Value to compare with.
        compare: u64,
        /// Value to store if equal.
        swap: u64,
    },
    /// 8-byte fetch and add; the original value lands in the one 8-byte SGE (RC only).
    FetchAdd {
        /// Remote virtual address, 8-byte aligned.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Value to add.
        add: u64,
    },
}

impl SendOp {
    /// The completion opcode.
    pub const fn wc_opcode(self) -> WcOpcode {
        match self {
            SendOp::Send | SendOp::SendWithImm(_) | SendOp::SendWithInv(_) => WcOpcode::Send,
            SendOp::Write { .. } | SendOp::WriteWithImm { .. } => WcOpcode::RdmaWrite,
            SendOp::Read { .. } => WcOpcode::RdmaRead,
            SendOp::CompareSwap { .. } => WcOpcode::CompSwap,
            SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
        }
    }

    /// True for operations that need a response with data (READ, atomics).
    pub const fn is_read_or_atomic(self) -> bool {
        matches!(
            self,
            SendOp::Read { .. } | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. }
        )
    }

    /// True for atomics.
    pub const fn is_atomic(self) -> bool {
        matches!(self, SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. })
    }
}

/// The destination of a UD send (the address handle's contents plus QPN and Q_Key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdDest {
    /// Local IP address (from the address handle's source GID index).
    pub src: IpAddr,
    /// Remote IP address (from the destination GID).
    pub ip: IpAddr,
    /// Remote QP.
    pub qpn: Qpn,
    /// Q_Key; a value with the high bit set means "use the QP's own Q_Key" (IBTA 10.2.5).
    pub qkey: u32,
    /// The address handle's GRH traffic class, which RoCE v2 carries as the IP header's
    /// TOS (IPv4) or traffic class (IPv6) byte; 0 for none.
    pub traffic_class: u8,
}

/// A send work request (`struct ibv_send_wr`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SendWr {
    /// ID returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub op: SendOp,
    /// Data to send, or where READ and atomic results go.
    pub payload: Payload,
    /// Flags.
    pub flags: SendFlags,
    /// UD destination; required on UD QPs, ignored elsewhere.
    pub ud: Option<UdDest>,
}

impl SendWr {
    /// A WR that asks for a completion, with no UD destination: what most posts are.
    pub fn signaled(wr_id: u64, op: SendOp, payload: Payload) -> Self {
        Self {
            wr_id,
            op,
            payload,
            flags: SendFlags::SIGNALED,
            ud: None,
        }
    }
}

/// A receive work request (`struct ibv_recv_wr`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RecvWr {
    /// ID returned in the completion.
    pub wr_id: u64,
    /// Where received data goes.
    pub sg_list: SgList,
}

/// Asynchronous events (`enum ibv_event_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncEvent {
    /// The QP went to ERROR on its own (`IBV_EVENT_QP_FATAL`).
    QpFatal(Qpn),
    /// A request arrived that violated the transport rules (`IBV_EVENT_QP_REQ_ERR`).
    QpRequestError(Qpn),
    /// A remote access violation (`IBV_EVENT_QP_ACCESS_ERR`).
    QpAccessError(Qpn),
    /// The send queue drained after a move to SQD (`IBV_EVENT_SQ_DRAINED`).
    SqDrained(Qpn),
    /// The SRQ's receive count fell below its limit (`IBV_EVENT_SRQ_LIMIT_REACHED`).
    SrqLimitReached,
    /// The last WQE of an SRQ-attached QP in ERROR was consumed (`IBV_EVENT_QP_LAST_WQE_REACHED`).
    LastWqeReached(Qpn),
    /// A CQ overflowed and lost a completion (`IBV_EVENT_CQ_ERR`).
    CqError,
    /// The port became active (`IBV_EVENT_PORT_ACTIVE`).
    PortActive(u8),
}

/// The remote end of a connected QP, or the local addressing of any QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AddressVector {
    /// Local IP address (from the source GID).
    pub src: IpAddr,
    /// Remote IP address (from the destination GID). Ignored for UD.
    pub dst: IpAddr,
    /// GRH flow label; 0 means "derive one from the QPNs", as rxe does. It picks the UDP
    /// source port ([`softrdma_wire::flow_label_udp_sport`]).
    pub flow_label: u32,
    /// GRH traffic class (`ah_attr.grh.traffic_class`, or the CM path's). RoCE v2 has no
    /// GRH on the wire: the byte goes in the IP header's TOS (IPv4) or traffic class
    /// (IPv6) field of every packet the QP sends, DSCP and ECN bits both, as rxe puts it.
    pub traffic_class: u8,
}

impl AddressVector {
    /// The UDP source port of a connection from `lqpn` to `rqpn` on this path.
    pub fn udp_sport(&self, lqpn: softrdma_wire::Qpn, rqpn: softrdma_wire::Qpn) -> u16 {
        if self.flow_label != 0 {
            softrdma_wire::flow_label_udp_sport(self.flow_label)
        } else {
            softrdma_wire::rxe_udp_sport(lqpn, rqpn)
        }
    }
}
