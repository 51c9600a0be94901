//! Base Transport Header (IBTA vol. 1, 9.2), 12 bytes.
//!
//! | byte | field |
//! |---|---|
//! | 0 | OpCode |
//! | 1 | SE 0x80, MigReq 0x40, PadCnt 0x30, TVer 0x0F |
//! | 2-3 | P_Key |
//! | 4 | FECN 0x80, BECN 0x40, reserved (RoCE v2: masked in the ICRC) |
//! | 5-7 | destination QPN |
//! | 8 | AckReq 0x80, reserved |
//! | 9-11 | PSN |

use crate::error::{Error, Layer, Result};
use crate::macros::be;
use crate::opcode::Opcode;
use crate::seq::{Psn, Qpn};

/// Byte ranges of the BTH fields.
pub mod field {
    use core::ops::Range;
    /// OpCode.
    pub const OPCODE: usize = 0;
    /// SE, MigReq, PadCnt and TVer.
    pub const FLAGS: usize = 1;
    /// Partition key.
    pub const PKEY: Range<usize> = 2..4;
    /// FECN, BECN and reserved bits; the ICRC masks this whole byte.
    pub const RESV8: usize = 4;
    /// Destination QP.
    pub const DQPN: Range<usize> = 5..8;
    /// AckReq and 7 reserved bits.
    pub const ACKREQ: usize = 8;
    /// Packet sequence number.
    pub const PSN: Range<usize> = 9..12;
    /// Header length.
    pub const LEN: usize = 12;
}

const SE: u8 = 0x80;
const MIG_REQ: u8 = 0x40;
const PAD_SHIFT: u8 = 4;
const PAD_MASK: u8 = 0x30;
const TVER_MASK: u8 = 0x0F;
const FECN: u8 = 0x80;
const BECN: u8 = 0x40;
const ACK_REQ: u8 = 0x80;

/// The default partition key.
pub const DEFAULT_PKEY: u16 = 0xFFFF;

header_view!(
    /// A view of a Base Transport Header.
    Bth,
    field::LEN,
    Layer::Bth
);

impl<T: AsRef<[u8]>> Bth<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// OpCode.
    pub fn opcode(&self) -> Opcode {
        Opcode(self.b()[field::OPCODE])
    }
    /// Solicited event.
    pub fn solicited(&self) -> bool {
        self.b()[field::FLAGS] & SE != 0
    }
    /// Migration request; RoCE receivers ignore it.
    pub fn mig_req(&self) -> bool {
        self.b()[field::FLAGS] & MIG_REQ != 0
    }
    /// Number of pad bytes (0-3) at the end of the payload.
    pub fn pad_count(&self) -> u8 {
        (self.b()[field::FLAGS] & PAD_MASK) >> PAD_SHIFT
    }
    /// Transport header version; must be 0.
    pub fn tver(&self) -> u8 {
        self.b()[field::FLAGS] & TVER_MASK
    }
    /// Partition key.
    pub fn pkey(&self) -> u16 {
        be::u16(self.b(), field::PKEY.start)
    }
    /// Forward explicit congestion notification.
    pub fn fecn(&self) -> bool {
        self.b()[field::RESV8] & FECN != 0
    }
    /// Backward explicit congestion notification.
    pub fn becn(&self) -> bool {
        self.b()[field::RESV8] & BECN != 0
    }
    /// Destination QP.
    pub fn dest_qp(&self) -> Qpn {
        Qpn::new(be::u24(self.b(), field::DQPN.start))
    }
    /// Acknowledge request.
    pub fn ack_req(&self) -> bool {
        self.b()[field::ACKREQ] & ACK_REQ != 0
    }
    /// Packet sequence number.
    pub fn psn(&self) -> Psn {
        Psn::new(be::u24(self.b(), field::PSN.start))
    }
}

fn set_bit(byte: &mut u8, mask: u8, on: bool) {
    if on { *byte |= mask } else { *byte &= !mask }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the OpCode.
    pub fn set_opcode(&mut self, v: Opcode) {
        self.m()[field::OPCODE] = v.0;
    }
    /// Sets SE.
    pub fn set_solicited(&mut self, v: bool) {
        set_bit(&mut self.m()[field::FLAGS], SE, v);
    }
    /// Sets MigReq.
    pub fn set_mig_req(&mut self, v: bool) {
        set_bit(&mut self.m()[field::FLAGS], MIG_REQ, v);
    }
    /// Sets PadCnt (low two bits of `v`).
    pub fn set_pad_count(&mut self, v: u8) {
        let b = &mut self.m()[field::FLAGS];
        *b = (*b & !PAD_MASK) | ((v << PAD_SHIFT) & PAD_MASK);
    }
    /// Sets TVer (low four bits of `v`).
    pub fn set_tver(&mut self, v: u8) {
        let b = &mut self.m()[field::FLAGS];
        *b = (*b & !TVER_MASK) | (v & TVER_MASK);
    }
    /// Sets the partition key.
    pub fn set_pkey(&mut self, v: u16) {
        be::set_u16(self.m(), field::PKEY.start, v);
    }
    /// Sets FECN.
    pub fn set_fecn(&mut self, v: bool) {
        set_bit(&mut self.m()[field::RESV8], FECN, v);
    }
    /// Sets BECN.
    pub fn set_becn(&mut self, v: bool) {
        set_bit(&mut self.m()[field::RESV8], BECN, v);
    }
    /// Sets the destination QP.
    pub fn set_dest_qp(&mut self, v: Qpn) {
        be::set_u24(self.m(), field::DQPN.start, v.value());
    }
    /// Sets AckReq.
    pub fn set_ack_req(&mut self, v: bool) {
        set_bit(&mut self.m()[field::ACKREQ], ACK_REQ, v);
    }
    /// Sets the PSN.
    pub fn set_psn(&mut self, v: Psn) {
        be::set_u24(self.m(), field::PSN.start, v.value());
    }
}

/// The fields of a BTH. Reserved bits are not represented: they are sent as zero and ignored on
/// receipt (IBTA vol. 1, 9.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BthRepr {
    /// OpCode.
    pub opcode: Opcode,
    /// Solicited event.
    pub solicited: bool,
    /// Migration request.
    pub mig_req: bool,
    /// Pad count, 0-3.
    pub pad_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// FECN.
    pub fecn: bool,
    /// BECN.
    pub becn: bool,
    /// Destination QP.
    pub dest_qp: Qpn,
    /// AckReq.
    pub ack_req: bool,
    /// PSN.
    pub psn: Psn,
}

impl BthRepr {
    /// A BTH for `opcode` to `dest_qp` at `psn` in the default partition, every flag clear.
    pub const fn new(opcode: Opcode, dest_qp: Qpn, psn: Psn) -> Self {
        Self {
            opcode,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn,
        }
    }

    /// Reads a checked view. Fails only on a transport header version other than 0; whether the
    /// opcode is known is checked by [`crate::packet::IbPacket`].
    pub fn parse<T: AsRef<[u8]>>(bth: &Bth<T>) -> Result<Self> {
        if bth.tver() != 0 {
            return Err(Error::BadVersion(bth.tver()));
        }
        Ok(Self {
            opcode: bth.opcode(),
            solicited: bth.solicited(),
            mig_req: bth.mig_req(),
            pad_count: bth.pad_count(),
            pkey: bth.pkey(),
            fecn: bth.fecn(),
            becn: bth.becn(),
            dest_qp: bth.dest_qp(),
            ack_req: bth.ack_req(),
            psn: bth.psn(),
        })
    }

    /// Bytes needed to emit.
    pub const fn buffer_len(&self) -> usize {
        field::LEN
    }

    /// Writes every bit of the header, reserved bits as zero.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, bth: &mut Bth<T>) {
        bth.m()[..field::LEN].fill(0);
        bth.set_opcode(self.opcode);
        bth.set_solicited(self.solicited);
        bth.set_mig_req(self.mig_req);
        bth.set_pad_count(self.pad_count);
        bth.set_tver(0);
        bth.set_pkey(self.pkey);
        bth.set_fecn(self.fecn);
        bth.set_becn(self.becn);
        bth.set_dest_qp(self.dest_qp);
        bth.set_ack_req(self.ack_req);
        bth.set_psn(self.psn);
    }
}
