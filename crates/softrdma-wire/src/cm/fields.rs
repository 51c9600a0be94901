//! The fields several CM messages share: private data, additional information, the
//! transport service and a path.
//!
//! Owns those types and their checks; their encodings are [`super::codec`]'s. Calls only
//! the crate's error type.

use super::DATA_LEN;
use crate::error::{Error, Layer};

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

/// The `N` bytes of `d` at `at`.
#[inline]
pub(super) fn array<const N: usize>(d: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&d[at..at + N]);
    a
}

/// A field whose value the spec reserves.
pub(super) fn bad(field: &'static str, value: u64) -> Error {
    Error::ReservedValue {
        layer: Layer::Cm,
        field,
        value,
    }
}

/// The first 232 bytes of `d`, zeroed, for a message to be written into.
#[inline]
pub(super) fn blank(d: &mut [u8]) -> &mut [u8] {
    let d = &mut d[..DATA_LEN];
    d.fill(0);
    d
}
