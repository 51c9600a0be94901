//! The header of the reliable-datagram protocol that an RDM endpoint speaks over each RC
//! connection: one SEND carries a header and, for a small message, its payload (eager);
//! a large message is announced by a request to send (RTS) that names the sender's
//! registered buffer, which the receiver reads with an RDMA READ once a receive matches,
//! then answers with FIN so that the sender can complete and release it. An RMA write
//! with remote CQ data (`fi_writedata`) is a WRITE followed, on the same connection, by a
//! header alone (WRITEDATA) that tells the target its length and data: the target's
//! completion needs both, and an immediate would carry only 32 bits of the 64 that the
//! domain's `cq_data_size` offers.
//!
//! Sans-I/O: bytes in, [`Header`] out, and back; no state. Every field is big-endian, as
//! the InfiniBand headers around it are.
//!
//! ```text
//!  0: version (1)   1: op (1 eager, 2 RTS, 3 FIN, 4 WRITEDATA)   2: flags (bit 0 tagged,
//!  bit 1 remote CQ data)   3: reserved (0)   4..8: RTS rkey   8..16: message length
//!  16..24: tag   24..32: remote CQ data   32..40: message ID   40..48: RTS address
//! ```

use thiserror::Error;

/// The protocol's version, in every header.
pub const VERSION: u8 = 1;
/// Bytes of header before an eager message's payload.
pub const HEADER_LEN: usize = 48;

const TAGGED: u8 = 1;
const HAS_DATA: u8 = 2;

/// What a header asks of its receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// The payload follows the header.
    Eager,
    /// The sender's message waits at `addr` under `rkey`, for an RDMA READ.
    Rts {
        /// Where the message starts in the sender's region.
        addr: u64,
        /// The region's remote key.
        rkey: u32,
    },
    /// The receiver has read message `msg_id` (or gave up on it): the sender may complete.
    Fin,
    /// The sender's RMA WRITE of `len` bytes, just before this on the connection, landed
    /// with remote CQ data `data` (`fi_writedata`).
    WriteData,
}

/// One message's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header {
    /// What to do with it.
    pub op: Op,
    /// Whether it is a tagged message (`fi_tsend`), matched by tag.
    pub tagged: bool,
    /// The tag (0 for untagged messages).
    pub tag: u64,
    /// Remote CQ data the receiver's completion carries (`fi_senddata`).
    pub data: Option<u64>,
    /// The message's length: the payload's for eager, the region's for RTS.
    pub len: u64,
    /// The sender's name for the message, which its FIN echoes.
    pub msg_id: u64,
}

/// Why bytes are not a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum WireError {
    /// Fewer than [`HEADER_LEN`] bytes.
    #[error("an RDM header needs {HEADER_LEN} bytes, got {0}")]
    Short(usize),
    /// A version this endpoint does not speak.
    #[error("RDM protocol version {0} (this endpoint speaks {VERSION})")]
    Version(u8),
    /// An unknown operation.
    #[error("unknown RDM operation {0}")]
    Op(u8),
    /// Flags or a reserved byte set that this version does not define.
    #[error("RDM header flags {flags:#04x} and reserved byte {reserved:#04x} not defined")]
    Flags {
        /// The flags byte.
        flags: u8,
        /// The reserved byte.
        reserved: u8,
    },
    /// An eager message whose length disagrees with the payload that came.
    #[error("an eager message of {said} bytes came with {came}")]
    Length {
        /// What the header says.
        said: u64,
        /// What followed it.
        came: usize,
    },
    /// An RTS, FIN or WRITEDATA with bytes after its header.
    #[error("an RTS, FIN or WRITEDATA carries no payload, got {0} bytes")]
    Payload(usize),
    /// A WRITEDATA without the data it exists to carry.
    #[error("a WRITEDATA header without remote CQ data")]
    NoData,
}

fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl Header {
    /// Parses `b`: the header and the payload after it.
    pub fn parse(b: &[u8]) -> Result<(Header, &[u8]), WireError> {
        if b.len() < HEADER_LEN {
            return Err(WireError::Short(b.len()));
        }
        if b[0] != VERSION {
            return Err(WireError::Version(b[0]));
        }
        let (flags, reserved) = (b[2], b[3]);
        if flags & !(TAGGED | HAS_DATA) != 0 || reserved != 0 {
            return Err(WireError::Flags { flags, reserved });
        }
        let len = be64(b, 8);
        let payload = &b[HEADER_LEN..];
        let op = match b[1] {
            1 => Op::Eager,
            2 => Op::Rts {
                addr: be64(b, 40),
                rkey: u32::from_be_bytes(b[4..8].try_into().expect("4 bytes")),
            },
            3 => Op::Fin,
            4 if flags & HAS_DATA != 0 => Op::WriteData,
            4 => return Err(WireError::NoData),
            n => return Err(WireError::Op(n)),
        };
        match op {
            Op::Eager if len != payload.len() as u64 => {
                return Err(WireError::Length {
                    said: len,
                    came: payload.len(),
                });
            }
            Op::Rts { .. } | Op::Fin | Op::WriteData if !payload.is_empty() => {
                return Err(WireError::Payload(payload.len()));
            }
            _ => {}
        }
        let h = Header {
            op,
            tagged: flags & TAGGED != 0,
            tag: be64(b, 16),
            data: (flags & HAS_DATA != 0).then(|| be64(b, 24)),
            len,
            msg_id: be64(b, 32),
        };
        Ok((h, payload))
    }

    /// The header's bytes.
    pub fn emit(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0] = VERSION;
        let (op, rkey, addr) = match self.op {
            Op::Eager => (1, 0, 0),
            Op::Rts { addr, rkey } => (2, rkey, addr),
            Op::Fin => (3, 0, 0),
            Op::WriteData => (4, 0, 0),
        };
        b[1] = op;
        b[2] =
            if self.tagged { TAGGED } else { 0 } | if self.data.is_some() { HAS_DATA } else { 0 };
        b[4..8].copy_from_slice(&rkey.to_be_bytes());
        b[8..16].copy_from_slice(&self.len.to_be_bytes());
        b[16..24].copy_from_slice(&self.tag.to_be_bytes());
        b[24..32].copy_from_slice(&self.data.unwrap_or(0).to_be_bytes());
        b[32..40].copy_from_slice(&self.msg_id.to_be_bytes());
        b[40..48].copy_from_slice(&addr.to_be_bytes());
        b
    }

    /// The header followed by `payload`, as one eager SEND carries it.
    pub fn with_payload(&self, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER_LEN + payload.len());
        v.extend_from_slice(&self.emit());
        v.extend_from_slice(payload);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_header() -> impl Strategy<Value = Header> {
        let op = prop_oneof![
            Just(Op::Eager),
            (any::<u64>(), any::<u32>()).prop_map(|(addr, rkey)| Op::Rts { addr, rkey }),
            Just(Op::Fin),
            Just(Op::WriteData),
        ];
        (
            op,
            any::<bool>(),
            any::<u64>(),
            any::<Option<u64>>(),
            any::<u64>(),
            any::<u64>(),
        )
            .prop_map(|(op, tagged, tag, data, len, msg_id)| Header {
                op,
                tagged,
                tag,
                data,
                len,
                msg_id,
            })
    }

    proptest! {
        /// Whatever a header says comes back from its bytes (an eager one with a payload
        /// of its length).
        #[test]
        fn headers_round_trip(mut h in any_header(), payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            if h.op == Op::WriteData {
                h.data = Some(h.data.unwrap_or(0));
            }
            let bytes = if h.op == Op::Eager {
                h.len = payload.len() as u64;
                h.with_payload(&payload)
            } else {
                h.emit().to_vec()
            };
            let (back, rest) = Header::parse(&bytes).unwrap();
            prop_assert_eq!(back, h);
            if h.op == Op::Eager {
                prop_assert_eq!(rest, &payload[..]);
            }
        }

        /// Any bytes parse or are refused with a reason; never a panic.
        #[test]
        fn any_bytes_parse_or_are_refused(b in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = Header::parse(&b);
        }
    }

    #[test]
    fn bad_headers_say_what_is_wrong() {
        let h = Header {
            op: Op::Fin,
            tagged: false,
            tag: 0,
            data: None,
            len: 0,
            msg_id: 9,
        };
        let good = h.emit();
        assert_eq!(Header::parse(&good[..47]), Err(WireError::Short(47)));
        let mut b = good;
        b[0] = 2;
        assert_eq!(Header::parse(&b), Err(WireError::Version(2)));
        let mut b = good;
        b[1] = 9;
        assert_eq!(Header::parse(&b), Err(WireError::Op(9)));
        let mut b = good;
        b[3] = 1;
        assert!(matches!(Header::parse(&b), Err(WireError::Flags { .. })));
        let mut v = good.to_vec();
        v.push(0);
        assert_eq!(Header::parse(&v), Err(WireError::Payload(1)));
        let eager = Header {
            op: Op::Eager,
            len: 5,
            ..h
        };
        assert_eq!(
            Header::parse(&eager.with_payload(b"abc")),
            Err(WireError::Length { said: 5, came: 3 })
        );
        let wd = Header {
            op: Op::WriteData,
            ..h
        };
        assert_eq!(Header::parse(&wd.emit()), Err(WireError::NoData));
    }
}
