//! The control messages between the processes that share a device: their encoding and
//! parsing, with no I/O. Each message is one `SOCK_SEQPACKET` record, little-endian, its
//! first byte the kind; descriptors travel beside them as `SCM_RIGHTS` (see the parent
//! module). A record that does not parse is an error that says what was wrong; the
//! connection that sent it is closed.

/// The protocol version both ends state in [`Msg::Hello`] and [`Msg::Welcome`]. A process
/// of another version gets a clear refusal, never a guess at the other's layout.
pub(crate) const VERSION: u32 = 6;

/// The most QPNs one [`Msg::Register`] or [`Msg::Registered`] carries (a record stays under
/// a page table's worth of socket buffer; more are sent as several).
pub(crate) const MAX_QPNS: usize = 4096;

/// Tells softrdma's records from anything else that might connect.
const MAGIC: [u8; 4] = *b"SRDM";

/// A control message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Msg {
    /// Member → owner, first: the member's version, pid and same-host endpoint (the name
    /// its ring listener has, see `device::local`; 0: none); its end of the data socket
    /// pair rides along.
    Hello { version: u32, pid: u32, ep: u64 },
    /// Owner → member, the answer to a hello of the same version: the owner's pid and
    /// endpoint; the device's `IP:4791` socket rides along (the member keeps it, to carry
    /// on as owner).
    Welcome { version: u32, pid: u32, ep: u64 },
    /// Owner → member, the answer to a hello of another version; the owner then closes.
    Refused { version: u32, pid: u32, ep: u64 },
    /// Member → owner: a new QPN, please.
    Alloc,
    /// Owner → member: the QPN allocated (0: none left).
    Qpn(u32),
    /// Member → owner: this QPN is destroyed (no answer).
    Free(u32),
    /// Member → a new owner, after the old one went: these QPNs are mine.
    Register(Vec<u32>),
    /// New owner → member: which of them another process holds already.
    Registered(Vec<u32>),
    /// Member → owner: which process holds this QPN?
    Locate(u32),
    /// Owner → member: the endpoint of the process that holds it (0: no process does;
    /// `u64::MAX`: one with no same-host endpoint does).
    Located(u64),
    /// Producer → consumer, first on a same-host connection: the producer's version,
    /// endpoint and UDP source port, and its ring's geometry; the ring's memfd and
    /// eventfd ride along.
    Ring {
        version: u32,
        ep: u64,
        sport: u16,
        slots: u32,
        slot_size: u32,
    },
    /// Either way on a same-host connection: this process closes the device on purpose
    /// (the hang-up that follows is not a crash).
    Bye,
    /// Producer → consumer: may this process place its RDMA WRITEs to QP `qpn` through
    /// R_Key `rkey` in the consumer's memory itself (see `device::place`)?
    Place { qpn: u32, rkey: u32 },
    /// Consumer → producer, the answer: the grant, with the consumer's placement table's
    /// memfd alongside; a refusal is [`Grant::REFUSED`].
    Placed { qpn: u32, rkey: u32, grant: Grant },
    /// Member → owner, after the welcome: which slot (see `steer`) will this process's
    /// QPNs carry? The one it wants (its QPNs carry it, after a change of owner), or 0 for
    /// any.
    Steer(u8),
    /// Owner → member, the answer: the slot (0: none), the owner's own slot (which its
    /// QPNs carry: a member that carries on as owner keeps them out of the draw), and
    /// whether the member's socket may join the steering group.
    Slot { slot: u8, owner: u8, join: bool },
    /// Member → owner: its socket for this slot is in the group now (no answer).
    Steering(u8),
    /// Member → owner: its socket received the probe for this index in round `nonce`
    /// (no answer).
    Probed { index: u32, nonce: u64 },
    /// Member → owner: this process closes the device, and its socket is about to leave
    /// the steering group (the last socket then takes its index).
    Leave,
    /// Owner → member, the answer: the group's program steers to no member's socket now.
    Left,
    /// Member → owner: send this process the REQs and SIDR_REQs for this CM service ID
    /// (see `crate::cm`).
    CmListen(u64),
    /// Owner → member, the answer: whether the service is the member's now (`false`:
    /// another process of the device listens on it).
    CmListened(bool),
    /// Member → owner: this process no longer listens on this service ID (no answer).
    CmUnlisten(u64),
}

/// A grant of a region to a same-host peer, as [`Msg::Placed`] carries it (see
/// `device::place`): slot `slot` of the granter's placement table under `stamp`, for the
/// region at `iova..iova + len`, which lies at `vaddr` in the granter's address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    pub slot: u32,
    pub stamp: u64,
    pub iova: u64,
    pub len: u64,
    pub vaddr: u64,
}

impl Grant {
    /// What a refusal carries.
    pub(crate) const REFUSED: Grant = Grant {
        slot: u32::MAX,
        stamp: 0,
        iova: 0,
        len: 0,
        vaddr: 0,
    };
}

/// What was wrong with a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum MsgError {
    /// Shorter than its kind needs.
    #[error("a {kind} record of {len} bytes is too short")]
    Short { kind: &'static str, len: usize },
    /// Longer or shorter than its kind is.
    #[error("a {kind} record of {len} bytes has the wrong length")]
    Length { kind: &'static str, len: usize },
    /// Not softrdma's (no magic, or an unknown kind).
    #[error("not a softrdma control record (kind byte {0:#04x})")]
    Unknown(u8),
    /// A QPN list longer than allowed or than the record.
    #[error("a QPN list of {0} entries does not fit its record (at most {MAX_QPNS})")]
    BadList(usize),
}

impl Msg {
    /// The record's bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16);
        let word = |out: &mut Vec<u8>, v: u32| out.extend_from_slice(&v.to_le_bytes());
        let list = |out: &mut Vec<u8>, l: &[u32]| {
            word(out, l.len() as u32);
            for q in l {
                word(out, *q);
            }
        };
        match self {
            Msg::Hello { version, pid, ep }
            | Msg::Welcome { version, pid, ep }
            | Msg::Refused { version, pid, ep } => {
                out.push(match self {
                    Msg::Hello { .. } => 1,
                    Msg::Welcome { .. } => 2,
                    _ => 3,
                });
                out.extend_from_slice(&MAGIC);
                word(&mut out, *version);
                word(&mut out, *pid);
                out.extend_from_slice(&ep.to_le_bytes());
            }
            Msg::Alloc => out.push(4),
            Msg::Qpn(q) => {
                out.push(5);
                word(&mut out, *q);
            }
            Msg::Free(q) => {
                out.push(6);
                word(&mut out, *q);
            }
            Msg::Register(l) => {
                out.push(7);
                list(&mut out, l);
            }
            Msg::Registered(l) => {
                out.push(8);
                list(&mut out, l);
            }
            Msg::Locate(q) => {
                out.push(9);
                word(&mut out, *q);
            }
            Msg::Located(ep) => {
                out.push(10);
                out.extend_from_slice(&ep.to_le_bytes());
            }
            Msg::Ring {
                version,
                ep,
                sport,
                slots,
                slot_size,
            } => {
                out.push(11);
                out.extend_from_slice(&MAGIC);
                word(&mut out, *version);
                out.extend_from_slice(&ep.to_le_bytes());
                word(&mut out, u32::from(*sport));
                word(&mut out, *slots);
                word(&mut out, *slot_size);
            }
            Msg::Bye => out.push(12),
            Msg::Place { qpn, rkey } => {
                out.push(13);
                word(&mut out, *qpn);
                word(&mut out, *rkey);
            }
            Msg::Placed {
                qpn,
                rkey,
                grant: g,
            } => {
                out.push(14);
                for w in [qpn, rkey, &g.slot] {
                    word(&mut out, *w);
                }
                for d in [g.stamp, g.iova, g.len, g.vaddr] {
                    out.extend_from_slice(&d.to_le_bytes());
                }
            }
            Msg::Steer(s) | Msg::Steering(s) => {
                out.push(if matches!(self, Msg::Steer(_)) {
                    15
                } else {
                    17
                });
                out.push(*s);
            }
            Msg::Slot { slot, owner, join } => {
                out.extend_from_slice(&[16, *slot, *owner, u8::from(*join)]);
            }
            Msg::Leave => out.push(19),
            Msg::Left => out.push(20),
            Msg::CmListen(sid) | Msg::CmUnlisten(sid) => {
                out.push(if matches!(self, Msg::CmListen(_)) {
                    21
                } else {
                    23
                });
                out.extend_from_slice(&sid.to_le_bytes());
            }
            Msg::CmListened(ok) => out.extend_from_slice(&[22, u8::from(*ok)]),
            Msg::Probed { index, nonce } => {
                out.push(18);
                word(&mut out, *index);
                out.extend_from_slice(&nonce.to_le_bytes());
            }
        }
        out
    }

    /// Parses one record.
    pub(crate) fn decode(b: &[u8]) -> Result<Msg, MsgError> {
        let kind = *b.first().ok_or(MsgError::Short {
            kind: "empty",
            len: 0,
        })?;
        let name = match kind {
            1 => "hello",
            2 => "welcome",
            3 => "refusal",
            4 => "alloc",
            5 => "qpn",
            6 => "free",
            7 => "register",
            8 => "registered",
            9 => "locate",
            10 => "located",
            11 => "ring",
            12 => "bye",
            13 => "place",
            14 => "placed",
            15 => "steer",
            16 => "slot",
            17 => "steering",
            18 => "probed",
            19 => "leave",
            20 => "left",
            21 => "cm listen",
            22 => "cm listened",
            23 => "cm unlisten",
            k => return Err(MsgError::Unknown(k)),
        };
        let word = |at: usize| -> Result<u32, MsgError> {
            b.get(at..at + 4)
                .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                .ok_or(MsgError::Short {
                    kind: name,
                    len: b.len(),
                })
        };
        let dword = |at: usize| -> Result<u64, MsgError> {
            Ok(u64::from(word(at)?) | u64::from(word(at + 4)?) << 32)
        };
        let list = || -> Result<Vec<u32>, MsgError> {
            let n = word(1)? as usize;
            if n > MAX_QPNS || b.len() != 5 + 4 * n {
                return Err(MsgError::BadList(n));
            }
            (0..n).map(|i| word(5 + 4 * i)).collect()
        };
        let exact = |want: usize| {
            if b.len() == want {
                Ok(())
            } else {
                Err(MsgError::Length {
                    kind: name,
                    len: b.len(),
                })
            }
        };
        match kind {
            1..=3 => exact(21)?,
            4 | 12 | 19 | 20 => exact(1)?,
            5 | 6 | 9 => exact(5)?,
            10 => exact(9)?,
            11 => exact(29)?,
            13 => exact(9)?,
            14 => exact(45)?,
            15 | 17 | 22 => exact(2)?,
            21 | 23 => exact(9)?,
            16 => exact(4)?,
            18 => exact(13)?,
            _ => {}
        }
        if matches!(kind, 1..=3 | 11) && b.get(1..5) != Some(&MAGIC[..]) {
            return Err(MsgError::Unknown(kind));
        }
        Ok(match kind {
            1..=3 => {
                let (version, pid, ep) = (word(5)?, word(9)?, dword(13)?);
                match kind {
                    1 => Msg::Hello { version, pid, ep },
                    2 => Msg::Welcome { version, pid, ep },
                    _ => Msg::Refused { version, pid, ep },
                }
            }
            4 => Msg::Alloc,
            5 => Msg::Qpn(word(1)?),
            6 => Msg::Free(word(1)?),
            7 => Msg::Register(list()?),
            8 => Msg::Registered(list()?),
            9 => Msg::Locate(word(1)?),
            10 => Msg::Located(dword(1)?),
            11 => {
                let sport = word(17)?;
                Msg::Ring {
                    version: word(5)?,
                    ep: dword(9)?,
                    sport: u16::try_from(sport).map_err(|_| MsgError::Length {
                        kind: name,
                        len: b.len(),
                    })?,
                    slots: word(21)?,
                    slot_size: word(25)?,
                }
            }
            13 => Msg::Place {
                qpn: word(1)?,
                rkey: word(5)?,
            },
            14 => Msg::Placed {
                qpn: word(1)?,
                rkey: word(5)?,
                grant: Grant {
                    slot: word(9)?,
                    stamp: dword(13)?,
                    iova: dword(21)?,
                    len: dword(29)?,
                    vaddr: dword(37)?,
                },
            },
            15 => Msg::Steer(b[1]),
            16 => Msg::Slot {
                slot: b[1],
                owner: b[2],
                join: match b[3] {
                    0 => false,
                    1 => true,
                    _ => {
                        return Err(MsgError::Length {
                            kind: name,
                            len: b.len(),
                        });
                    }
                },
            },
            17 => Msg::Steering(b[1]),
            18 => Msg::Probed {
                index: word(1)?,
                nonce: dword(5)?,
            },
            19 => Msg::Leave,
            20 => Msg::Left,
            21 => Msg::CmListen(dword(1)?),
            23 => Msg::CmUnlisten(dword(1)?),
            22 => match b[1] {
                0 => Msg::CmListened(false),
                1 => Msg::CmListened(true),
                _ => {
                    return Err(MsgError::Length {
                        kind: name,
                        len: b.len(),
                    });
                }
            },
            _ => Msg::Bye,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_msg() -> impl Strategy<Value = Msg> {
        let qpns = proptest::collection::vec(any::<u32>(), 0..MAX_QPNS.min(64));
        prop_oneof![
            (any::<u32>(), any::<u32>(), any::<u64>()).prop_map(|(version, pid, ep)| Msg::Hello {
                version,
                pid,
                ep
            }),
            (any::<u32>(), any::<u32>(), any::<u64>())
                .prop_map(|(version, pid, ep)| Msg::Welcome { version, pid, ep }),
            (any::<u32>(), any::<u32>(), any::<u64>())
                .prop_map(|(version, pid, ep)| Msg::Refused { version, pid, ep }),
            any::<u32>().prop_map(Msg::Locate),
            any::<u64>().prop_map(Msg::Located),
            (
                any::<u32>(),
                any::<u64>(),
                any::<u16>(),
                any::<u32>(),
                any::<u32>()
            )
                .prop_map(|(version, ep, sport, slots, slot_size)| Msg::Ring {
                    version,
                    ep,
                    sport,
                    slots,
                    slot_size
                }),
            Just(Msg::Bye),
            (any::<u32>(), any::<u32>()).prop_map(|(qpn, rkey)| Msg::Place { qpn, rkey }),
            (
                (any::<u32>(), any::<u32>(), any::<u32>()),
                (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>())
            )
                .prop_map(|((qpn, rkey, slot), (stamp, iova, len, vaddr))| {
                    let grant = Grant {
                        slot,
                        stamp,
                        iova,
                        len,
                        vaddr,
                    };
                    Msg::Placed { qpn, rkey, grant }
                }),
            Just(Msg::Alloc),
            Just(Msg::Leave),
            Just(Msg::Left),
            any::<u8>().prop_map(Msg::Steer),
            (any::<u8>(), any::<u8>(), any::<bool>()).prop_map(|(slot, owner, join)| Msg::Slot {
                slot,
                owner,
                join
            }),
            any::<u8>().prop_map(Msg::Steering),
            (any::<u32>(), any::<u64>()).prop_map(|(index, nonce)| Msg::Probed { index, nonce }),
            any::<u32>().prop_map(Msg::Qpn),
            any::<u64>().prop_map(Msg::CmListen),
            any::<u64>().prop_map(Msg::CmUnlisten),
            any::<bool>().prop_map(Msg::CmListened),
            any::<u32>().prop_map(Msg::Free),
            qpns.clone().prop_map(Msg::Register),
            qpns.prop_map(Msg::Registered),
        ]
    }

    proptest! {
        #[test]
        fn every_message_parses_back(m in any_msg()) {
            prop_assert_eq!(Msg::decode(&m.encode()), Ok(m));
        }

        #[test]
        fn garbage_is_an_error_or_a_message_never_a_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(m) = Msg::decode(&b) {
                // Whatever parses is what it encodes back to.
                prop_assert_eq!(m.encode(), b);
            }
        }

        #[test]
        fn a_cut_record_is_refused(m in any_msg(), cut in 1usize..8) {
            let b = m.encode();
            if b.len() > cut {
                prop_assert!(Msg::decode(&b[..b.len() - cut]).is_err());
            }
        }
    }

    #[test]
    fn a_list_longer_than_its_record_is_named() {
        let mut b = Msg::Register(vec![7]).encode();
        b[1] = 2;
        assert_eq!(Msg::decode(&b), Err(MsgError::BadList(2)));
        assert_eq!(Msg::decode(&[0x42]), Err(MsgError::Unknown(0x42)));
    }
}
