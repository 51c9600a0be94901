//! Extension transport headers that follow the BTH (IBTA vol. 1, 9.3 and 9.4).
//!
//! | header | bytes | layout (network order) |
//! |---|---|---|
//! | RETH | 16 | VA u64, R_Key u32, DMA length u32 |
//! | AtomicETH | 28 | VA u64, R_Key u32, swap/add u64, compare u64 |
//! | AtomicAckETH | 8 | original remote value u64 |
//! | AETH | 4 | syndrome u8, MSN u24 |
//! | DETH | 8 | Q_Key u32, reserved u8, source QPN u24 |
//! | ImmDt | 4 | opaque |
//! | IETH | 4 | R_Key to invalidate |
//! | FETH | 4 | reserved 26 bits, selectivity level 2 bits, placement type 4 bits |
//!
//! Which headers a packet carries, and in what order, is decided by its opcode
//! ([`crate::opcode::OpcodeInfo::headers`]).

use crate::error::{Layer, Result};
use crate::macros::be;
use crate::seq::{Msn, Qpn};

/// Generates a repr's `parse`, `buffer_len` and `emit` from the view's getters and setters.
macro_rules! repr_impl {
    ($repr:ident, $view:ident, { $($field:ident: $get:ident / $set:ident),* $(,)? }) => {
        impl $repr {
            /// Reads a checked view.
            pub fn parse<T: AsRef<[u8]>>(view: &$view<T>) -> Result<Self> {
                Ok(Self { $($field: view.$get()),* })
            }

            /// Bytes needed to emit.
            pub const fn buffer_len(&self) -> usize {
                $view::<&[u8]>::LEN
            }

            /// Writes the header; reserved bits become zero.
            pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut $view<T>) {
                view.buffer.as_mut()[..$view::<&[u8]>::LEN].fill(0);
                $(view.$set(self.$field);)*
            }
        }
    };
}

/// Byte ranges of the RETH fields.
pub mod reth_field {
    use core::ops::Range;
    /// Virtual address.
    pub const VA: Range<usize> = 0..8;
    /// Remote key.
    pub const RKEY: Range<usize> = 8..12;
    /// DMA length.
    pub const LEN: Range<usize> = 12..16;
}

header_view!(
    /// A view of an RDMA Extended Transport Header (IBTA vol. 1, 9.3.3).
    Reth,
    16,
    Layer::Reth
);

be_accessors!(Reth {
    /// Virtual address.
    va / set_va: u64 = reth_field::VA;
    /// Remote key.
    rkey / set_rkey: u32 = reth_field::RKEY;
    /// DMA length of the whole message.
    len / set_len: u32 = reth_field::LEN;
});

impl<T: AsRef<[u8]>> Reth<T> {
    /// True when the DMA length is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The fields of a RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RethRepr {
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// DMA length.
    pub len: u32,
}

repr_impl!(RethRepr, Reth, { va: va / set_va, rkey: rkey / set_rkey, len: len / set_len });

/// Byte ranges of the AETH fields.
pub mod aeth_field {
    use core::ops::Range;
    /// Syndrome.
    pub const SYNDROME: usize = 0;
    /// Message sequence number.
    pub const MSN: Range<usize> = 1..4;
}

header_view!(
    /// A view of an ACK Extended Transport Header (IBTA vol. 1, 9.3.5).
    Aeth,
    4,
    Layer::Aeth
);

impl<T: AsRef<[u8]>> Aeth<T> {
    /// Syndrome.
    pub fn syndrome(&self) -> Syndrome {
        Syndrome::from_u8(self.buffer.as_ref()[aeth_field::SYNDROME])
    }
    /// Message sequence number.
    pub fn msn(&self) -> Msn {
        Msn::new(be::u24(self.buffer.as_ref(), aeth_field::MSN.start))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Aeth<T> {
    /// Sets the syndrome.
    pub fn set_syndrome(&mut self, v: Syndrome) {
        self.buffer.as_mut()[aeth_field::SYNDROME] = v.to_u8();
    }
    /// Sets the MSN.
    pub fn set_msn(&mut self, v: Msn) {
        be::set_u24(self.buffer.as_mut(), aeth_field::MSN.start, v.value())
    }
}

/// The fields of an AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AethRepr {
    /// Syndrome.
    pub syndrome: Syndrome,
    /// Message sequence number.
    pub msn: Msn,
}

repr_impl!(AethRepr, Aeth, { syndrome: syndrome / set_syndrome, msn: msn / set_msn });

/// The NAK codes of an AETH syndrome 0x60-0x7F (IBTA vol. 1, 9.7.5.2, NAK codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// 0: PSN sequence error; the requester resends from the NAK's PSN.
    PsnSequenceError,
    /// 1: invalid request.
    InvalidRequest,
    /// 2: remote access error.
    RemoteAccessError,
    /// 3: remote operational error.
    RemoteOperationalError,
    /// 4: invalid RD request.
    InvalidRdRequest,
    /// 5-31: reserved; the value is kept.
    Reserved(u8),
}

/// An AETH syndrome (IBTA vol. 1, 9.3.5, table "AETH syndrome field").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// 0x00-0x1F: ACK with a credit count (0x1F: credits not limited).
    Ack {
        /// Credit count, 5 bits.
        credits: u8,
    },
    /// 0x20-0x3F: receiver not ready, retry after the RNR timer code's delay.
    RnrNak {
        /// RNR timer code, 5 bits.
        timer: u8,
    },
    /// 0x60-0x7F: NAK.
    Nak(NakCode),
    /// 0x40-0x5F and 0x80-0xFF: reserved; the byte is kept.
    Reserved(u8),
}

impl Syndrome {
    /// An ACK without flow-control credits (0x1F), as rxe sends.
    pub const ACK_UNLIMITED: Syndrome = Syndrome::Ack { credits: 0x1F };

    /// Decodes a syndrome byte. Every byte decodes, and [`Syndrome::to_u8`] gives it back.
    pub const fn from_u8(b: u8) -> Self {
        let low = b & 0x1F;
        match b >> 5 {
            0 => Syndrome::Ack { credits: low },
            1 => Syndrome::RnrNak { timer: low },
            3 => Syndrome::Nak(match low {
                0 => NakCode::PsnSequenceError,
                1 => NakCode::InvalidRequest,
                2 => NakCode::RemoteAccessError,
                3 => NakCode::RemoteOperationalError,
                4 => NakCode::InvalidRdRequest,
                n => NakCode::Reserved(n),
            }),
            _ => Syndrome::Reserved(b),
        }
    }

    /// Encodes the syndrome byte. Out-of-range credit, timer or NAK values keep their low five
    /// bits.
    pub const fn to_u8(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits & 0x1F,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1F),
            Syndrome::Nak(code) => {
                0x60 | match code {
                    NakCode::PsnSequenceError => 0,
                    NakCode::InvalidRequest => 1,
                    NakCode::RemoteAccessError => 2,
                    NakCode::RemoteOperationalError => 3,
                    NakCode::InvalidRdRequest => 4,
                    NakCode::Reserved(n) => n & 0x1F,
                }
            }
            Syndrome::Reserved(b) => b,
        }
    }

    /// True for an ACK (0x00-0x1F).
    pub const fn is_ack(self) -> bool {
        matches!(self, Syndrome::Ack { .. })
    }
}

/// Byte ranges of the AtomicETH fields.
pub mod atomic_field {
    use core::ops::Range;
    /// Virtual address.
    pub const VA: Range<usize> = 0..8;
    /// Remote key.
    pub const RKEY: Range<usize> = 8..12;
    /// Swap (CMP_SWAP) or add (FETCH_ADD) data.
    pub const SWAP_ADD: Range<usize> = 12..20;
    /// Compare data.
    pub const COMPARE: Range<usize> = 20..28;
}

header_view!(
    /// A view of an Atomic Extended Transport Header (IBTA vol. 1, 9.3.4).
    AtomicEth,
    28,
    Layer::AtomicEth
);

be_accessors!(AtomicEth {
    /// Virtual address (8-byte aligned for a valid request).
    va / set_va: u64 = atomic_field::VA;
    /// Remote key.
    rkey / set_rkey: u32 = atomic_field::RKEY;
    /// Swap or add data.
    swap_add / set_swap_add: u64 = atomic_field::SWAP_ADD;
    /// Compare data.
    compare / set_compare: u64 = atomic_field::COMPARE;
});

/// The fields of an AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicEthRepr {
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap or add data.
    pub swap_add: u64,
    /// Compare data.
    pub compare: u64,
}

repr_impl!(AtomicEthRepr, AtomicEth, {
    va: va / set_va,
    rkey: rkey / set_rkey,
    swap_add: swap_add / set_swap_add,
    compare: compare / set_compare,
});

/// Byte ranges of the AtomicAckETH fields.
pub mod atomic_ack_field {
    use core::ops::Range;
    /// Original remote value.
    pub const ORIG: Range<usize> = 0..8;
}

header_view!(
    /// A view of an Atomic ACK Extended Transport Header (IBTA vol. 1, 9.3.6).
    AtomicAckEth,
    8,
    Layer::AtomicAckEth
);

be_accessors!(AtomicAckEth {
    /// The remote value before the atomic operation.
    orig / set_orig: u64 = atomic_ack_field::ORIG;
});

/// The fields of an AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicAckEthRepr {
    /// Original remote value.
    pub orig: u64,
}

repr_impl!(AtomicAckEthRepr, AtomicAckEth, { orig: orig / set_orig });

/// Byte ranges of the DETH fields.
pub mod deth_field {
    use core::ops::Range;
    /// Queue key.
    pub const QKEY: Range<usize> = 0..4;
    /// Reserved byte.
    pub const RESV: usize = 4;
    /// Source QP.
    pub const SRC_QP: Range<usize> = 5..8;
}

/// The Q_Key of the general services interface (QP1): IBTA vol. 1, chapter 13.5 (GSI).
pub const GSI_QKEY: u32 = 0x8001_0000;

header_view!(
    /// A view of a Datagram Extended Transport Header (IBTA vol. 1, 9.3.2).
    Deth,
    8,
    Layer::Deth
);

impl<T: AsRef<[u8]>> Deth<T> {
    /// Queue key.
    pub fn qkey(&self) -> u32 {
        be::u32(self.buffer.as_ref(), deth_field::QKEY.start)
    }
    /// Source QP.
    pub fn src_qp(&self) -> Qpn {
        Qpn::new(be::u24(self.buffer.as_ref(), deth_field::SRC_QP.start))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Deth<T> {
    /// Sets the queue key.
    pub fn set_qkey(&mut self, v: u32) {
        be::set_u32(self.buffer.as_mut(), deth_field::QKEY.start, v)
    }
    /// Sets the source QP.
    pub fn set_src_qp(&mut self, v: Qpn) {
        be::set_u24(self.buffer.as_mut(), deth_field::SRC_QP.start, v.value())
    }
}

/// The fields of a DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DethRepr {
    /// Queue key.
    pub qkey: u32,
    /// Source QP.
    pub src_qp: Qpn,
}

repr_impl!(DethRepr, Deth, { qkey: qkey / set_qkey, src_qp: src_qp / set_src_qp });

/// Byte range of the one 32-bit word of ImmDt, IETH and FETH.
pub mod word_field {
    use core::ops::Range;
    /// The word.
    pub const WORD: Range<usize> = 0..4;
}

/// Declares a 4-byte header holding one opaque u32.
macro_rules! u32_header {
    ($(#[$meta:meta])* $view:ident, $repr:ident, $layer:expr, $get:ident, $set:ident, $doc:literal) => {
        header_view!($(#[$meta])* $view, 4, $layer);

        impl<T: AsRef<[u8]>> $view<T> {
            #[doc = $doc]
            pub fn $get(&self) -> u32 {
                be::u32(self.buffer.as_ref(), word_field::WORD.start)
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            #[doc = concat!("Sets: ", $doc)]
            pub fn $set(&mut self, v: u32) {
                be::set_u32(self.buffer.as_mut(), word_field::WORD.start, v)
            }
        }

        #[doc = concat!("The field of a ", stringify!($view), " header.")]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $repr {
            #[doc = $doc]
            pub $get: u32,
        }

        repr_impl!($repr, $view, { $get: $get / $set });
    };
}

u32_header!(
    /// A view of immediate data (IBTA vol. 1, 9.3.7): four opaque bytes, read big-endian.
    ImmDt,
    ImmDtRepr,
    Layer::ImmDt,
    imm,
    set_imm,
    "Immediate data as the big-endian value of its four bytes (ibverbs' `imm_data` in host order)."
);

u32_header!(
    /// A view of an Invalidate Extended Transport Header (IBTA vol. 1, 9.3.8).
    Ieth,
    IethRepr,
    Layer::Ieth,
    rkey,
    set_rkey,
    "R_Key to invalidate."
);

/// Bit layout of the FETH (IBTA 1.5 memory placement extensions; Linux `rxe_hdr.h`).
pub mod feth_field {
    /// Placement type, bits 3-0 of the big-endian word.
    pub const PLT_MASK: u32 = 0x0F;
    /// Selectivity level, bits 5-4.
    pub const SEL_MASK: u32 = 0x30;
    /// Shift of the selectivity level.
    pub const SEL_SHIFT: u32 = 4;
}

header_view!(
    /// A view of a FLUSH Extended Transport Header.
    Feth,
    4,
    Layer::Feth
);

impl<T: AsRef<[u8]>> Feth<T> {
    /// The whole header as a big-endian word, reserved bits included.
    pub fn word(&self) -> u32 {
        be::u32(self.buffer.as_ref(), word_field::WORD.start)
    }
    /// Placement type (1: global visibility, 2: persistence).
    pub fn placement_type(&self) -> u8 {
        (self.word() & feth_field::PLT_MASK) as u8
    }
    /// Selectivity level (0: memory region range, 1: whole memory region).
    pub fn selectivity(&self) -> u8 {
        ((self.word() & feth_field::SEL_MASK) >> feth_field::SEL_SHIFT) as u8
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Feth<T> {
    fn set_word(&mut self, mask: u32, v: u32) {
        let w = (self.word() & !mask) | (v & mask);
        be::set_u32(self.buffer.as_mut(), word_field::WORD.start, w)
    }
    /// Sets the placement type (low four bits of `v`).
    pub fn set_placement_type(&mut self, v: u8) {
        self.set_word(feth_field::PLT_MASK, u32::from(v))
    }
    /// Sets the selectivity level (low two bits of `v`).
    pub fn set_selectivity(&mut self, v: u8) {
        self.set_word(feth_field::SEL_MASK, u32::from(v) << feth_field::SEL_SHIFT)
    }
}

/// The fields of a FETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FethRepr {
    /// Placement type, 4 bits.
    pub placement_type: u8,
    /// Selectivity level, 2 bits.
    pub selectivity: u8,
}

repr_impl!(FethRepr, Feth, {
    placement_type: placement_type / set_placement_type,
    selectivity: selectivity / set_selectivity,
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syndrome_round_trips_every_byte() {
        for b in 0..=255u8 {
            assert_eq!(Syndrome::from_u8(b).to_u8(), b);
        }
        assert_eq!(Syndrome::from_u8(0x1F), Syndrome::ACK_UNLIMITED);
        assert_eq!(
            Syndrome::from_u8(0x60),
            Syndrome::Nak(NakCode::PsnSequenceError)
        );
        assert_eq!(Syndrome::from_u8(0x2C), Syndrome::RnrNak { timer: 12 });
    }

    #[test]
    fn short_buffers_are_errors() {
        assert!(Reth::new_checked(&[0u8; 15][..]).is_err());
        assert!(AtomicEth::new_checked(&[0u8; 27][..]).is_err());
        assert!(Deth::new_checked(&[0u8; 8][..]).is_ok());
    }
}
