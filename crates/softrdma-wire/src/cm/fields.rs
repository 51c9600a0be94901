//! The fields several CM messages share: private data, additional information, the
//! transport service, a path, and the shape of the messages that are only two
//! communication IDs (RTU, DREP).
//!
//! Owns the encodings the message files build on; calls only the byte helpers of
//! [`crate::macros`] and the crate's error type.

use super::DATA_LEN;
use crate::error::{Error, Layer, Result};
use crate::macros::be;

/// The longest additional reject or response information (REJ ARI, APR and SIDR_REP
/// additional information: 72 bytes).
pub const INFO_LEN: usize = 72;

/// A message's private data: always the field's full size on the wire, zero-padded (the
/// wire carries no length; rdma_cm users agree on one).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PrivateData<const N: usize>(pub [u8; N]);

impl<const N: usize> PrivateData<N> {
    /// `data` followed by zeros; `None` if it is longer than the field.
    pub fn from_slice(data: &[u8]) -> Option<Self> {
        let mut a = [0u8; N];
        a.get_mut(..data.len())?.copy_from_slice(data);
        Some(Self(a))
    }

    /// The field's bytes.
    pub fn as_bytes(&self) -> &[u8; N] {
        &self.0
    }

    pub(super) fn read(d: &[u8], at: usize) -> Self {
        let mut a = [0u8; N];
        a.copy_from_slice(&d[at..at + N]);
        Self(a)
    }
}

impl<const N: usize> Default for PrivateData<N> {
    fn default() -> Self {
        Self([0; N])
    }
}

impl<const N: usize> core::fmt::Debug for PrivateData<N> {
    /// The bytes up to the last non-zero one, in hex: the padding says nothing.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let used = self.0.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        write!(f, "PrivateData<{N}>[")?;
        for b in &self.0[..used] {
            write!(f, "{b:02x}")?;
        }
        f.write_str("]")
    }
}

/// Additional information (REJ ARI, APR, SIDR_REP): its length field and the 72 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Info {
    /// How many of the bytes count (at most [`INFO_LEN`]).
    pub len: u8,
    /// The field.
    pub data: PrivateData<INFO_LEN>,
}

impl Info {
    /// The bytes that count.
    pub fn bytes(&self) -> &[u8] {
        &self.data.0[..usize::from(self.len).min(INFO_LEN)]
    }
}

/// What a REQ asks for (IBTA 12.6.5, transport service type, with the extended transport
/// type of the XRC annex).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TransportService {
    /// Reliable connection.
    #[default]
    Rc,
    /// Unreliable connection.
    Uc,
    /// XRC (transport type 3 with extended transport type 1).
    Xrc,
}

impl TransportService {
    pub(super) fn code(self) -> (u8, u8) {
        match self {
            TransportService::Rc => (0, 0),
            TransportService::Uc => (1, 0),
            TransportService::Xrc => (3, 1),
        }
    }
}

/// A path as a REQ or LAP describes it (IBTA 12.6.5: the primary and alternate path
/// fields). On RoCE the LIDs are 0xFFFF (the permissive LID; rxe sends that) and the GIDs
/// are the IP addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PathRepr {
    /// Local port LID.
    pub local_lid: u16,
    /// Remote port LID.
    pub remote_lid: u16,
    /// Local port GID.
    pub local_gid: [u8; 16],
    /// Remote port GID.
    pub remote_gid: [u8; 16],
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Packet rate (6 bits, IBTA's static rate code).
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Whether the remote port is on the local subnet.
    pub subnet_local: bool,
    /// Local ACK timeout (5 bits, 4.096 µs × 2^n).
    pub local_ack_timeout: u8,
}

impl PathRepr {
    /// Parses the 44 bytes of a REQ's path at `at` (the LAP orders its fields otherwise).
    pub(super) fn read_req(d: &[u8], at: usize) -> Self {
        Self {
            local_lid: be::u16(d, at),
            remote_lid: be::u16(d, at + 2),
            local_gid: gid(d, at + 4),
            remote_gid: gid(d, at + 20),
            flow_label: be::u32(d, at + 36) >> 12,
            packet_rate: d[at + 39] & 0x3F,
            traffic_class: d[at + 40],
            hop_limit: d[at + 41],
            sl: d[at + 42] >> 4,
            subnet_local: d[at + 42] & 0x08 != 0,
            local_ack_timeout: d[at + 43] >> 3,
        }
    }

    pub(super) fn write_req(&self, d: &mut [u8], at: usize) {
        be::set_u16(d, at, self.local_lid);
        be::set_u16(d, at + 2, self.remote_lid);
        d[at + 4..at + 20].copy_from_slice(&self.local_gid);
        d[at + 20..at + 36].copy_from_slice(&self.remote_gid);
        be::set_u32(
            d,
            at + 36,
            (self.flow_label & 0xF_FFFF) << 12 | u32::from(self.packet_rate & 0x3F),
        );
        d[at + 40] = self.traffic_class;
        d[at + 41] = self.hop_limit;
        d[at + 42] = (self.sl & 0xF) << 4 | u8::from(self.subnet_local) << 3;
        d[at + 43] = (d[at + 43] & 0x07) | (self.local_ack_timeout & 0x1F) << 3;
    }
}

pub(super) fn gid(d: &[u8], at: usize) -> [u8; 16] {
    let mut g = [0u8; 16];
    g.copy_from_slice(&d[at..at + 16]);
    g
}

/// A field whose value the spec reserves.
pub(super) fn bad(field: &'static str, value: u64) -> Error {
    Error::ReservedValue {
        layer: Layer::Cm,
        field,
        value,
    }
}

/// The messages that are two communication IDs and private data: RTU (IBTA 12.6.9, table
/// 111) and DREP (12.6.11, table 113).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IdsRepr<const N: usize> {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: PrivateData<N>,
}

/// The communication IDs that open a message of `d`, after its length is checked: the
/// sender's, then the receiver's (every message but the REQ and the SIDR pair starts so,
/// IBTA 12.6).
pub(super) fn ids(d: &[u8]) -> Result<(u32, u32)> {
    Error::check_len(Layer::Cm, DATA_LEN, d.len())?;
    Ok((be::u32(d, 0), be::u32(d, 4)))
}

/// The first 232 bytes of `d`, zeroed, for a message to be written into.
pub(super) fn blank(d: &mut [u8]) -> &mut [u8] {
    let d = &mut d[..DATA_LEN];
    d.fill(0);
    d
}

/// [`blank`], opened with the communication IDs `local` and `remote` (see [`ids`]).
pub(super) fn blank_with_ids(d: &mut [u8], local: u32, remote: u32) -> &mut [u8] {
    let d = blank(d);
    be::set_u32(d, 0, local);
    be::set_u32(d, 4, remote);
    d
}

impl<const N: usize> IdsRepr<N> {
    /// Parses the message's 232 bytes.
    pub fn parse(d: &[u8]) -> Result<Self> {
        let (local_comm_id, remote_comm_id) = ids(d)?;
        Ok(Self {
            local_comm_id,
            remote_comm_id,
            private_data: PrivateData::read(d, 8),
        })
    }

    /// Writes the message into the first 232 bytes of `d`.
    pub fn emit(&self, d: &mut [u8]) {
        let d = blank_with_ids(d, self.local_comm_id, self.remote_comm_id);
        d[8..8 + N].copy_from_slice(&self.private_data.0);
    }
}
