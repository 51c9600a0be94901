//! The InfiniBand part of a RoCE v2 packet: BTH, extension headers, payload, pad and ICRC.
//!
//! [`IbPacket`] is a checked view: once [`IbPacket::new_checked`] has accepted a buffer, the
//! opcode is known, every header the opcode calls for is present, the pad fits in the payload
//! and the ICRC is there, so no getter can panic. [`IbRepr`] is the plain form, with the payload
//! borrowed.

use crate::bth::{Bth, BthRepr};
use crate::error::{Error, Layer, Result};
use crate::ext::*;
use crate::opcode::{Header, OpcodeInfo, PayloadKind};

/// Length of the invariant CRC trailer.
pub const ICRC_LEN: usize = 4;

/// A checked view of the InfiniBand part of a packet (BTH through ICRC).
#[derive(Debug, Clone, Copy)]
pub struct IbPacket<T: AsRef<[u8]>> {
    buffer: T,
    info: &'static OpcodeInfo,
}

impl<T: AsRef<[u8]>> IbPacket<T> {
    /// Checks `buffer` and wraps it. Fails with the first problem found, in wire order:
    /// truncation, header version, opcode, headers, pad, payload length.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        let bth = Bth::new_checked(b)?;
        if bth.tver() != 0 {
            return Err(Error::BadVersion(bth.tver()));
        }
        let info = bth.opcode().checked_info()?;
        let mut need = Bth::<&[u8]>::LEN;
        for h in info.headers {
            need += h.len();
            Error::check_len(h.layer(), need, b.len())?;
        }
        Error::check_len(Layer::Icrc, need + ICRC_LEN, b.len())?;
        let body = b.len() - need - ICRC_LEN;
        let pad = bth.pad_count();
        if usize::from(pad) > body {
            return Err(Error::PadTooLarge { pad, payload: body });
        }
        let payload = body - usize::from(pad);
        let (expected, ok) = match info.payload {
            PayloadKind::None => (0, body == 0),
            PayloadKind::Fixed(n) => (n, body == n && pad == 0),
            // Headers, payload and pad fill whole 4-byte words (IBTA vol. 1, 9.2, PadCnt).
            PayloadKind::Variable => (payload + pad_for(payload) as usize, body % 4 == 0),
        };
        if !ok {
            return Err(Error::LengthMismatch {
                layer: Layer::Payload,
                expected,
                actual: body,
            });
        }
        Ok(Self { buffer, info })
    }

    /// The opcode's table entry.
    pub fn info(&self) -> &'static OpcodeInfo {
        self.info
    }

    /// The whole buffer.
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The BTH.
    pub fn bth(&self) -> Bth<&[u8]> {
        Bth::new_unchecked(self.buffer.as_ref())
    }

    /// The bytes of extension header `h`, if the opcode carries it.
    pub fn header(&self, h: Header) -> Option<&[u8]> {
        let mut at = Bth::<&[u8]>::LEN;
        for &x in self.info.headers {
            if x == h {
                return Some(&self.buffer.as_ref()[at..at + x.len()]);
            }
            at += x.len();
        }
        None
    }

    /// Offset of the payload (end of the headers).
    pub fn payload_offset(&self) -> usize {
        Bth::<&[u8]>::LEN + self.info.headers_len()
    }

    /// The payload without pad.
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = b.len() - ICRC_LEN - usize::from(self.bth().pad_count());
        &b[self.payload_offset()..end]
    }

    /// The ICRC as the CRC-32 value (the wire bytes read little-endian), comparable with
    /// [`crate::icrc`]'s results.
    pub fn icrc(&self) -> u32 {
        let b = self.buffer.as_ref();
        let t = &b[b.len() - ICRC_LEN..];
        u32::from_le_bytes([t[0], t[1], t[2], t[3]])
    }

    /// Everything the ICRC covers after the UDP header: BTH through pad.
    pub fn without_icrc(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[..b.len() - ICRC_LEN]
    }
}

/// One table of the extension headers for all that goes header by header: the packet's
/// getters, and [`ExtHeaders`]' parsing (in the table's order, which is wire order),
/// presence test and emitting.
macro_rules! ext_headers {
    ($($name:ident: $view:ident / $repr:ident = $h:ident, $doc:literal;)*) => {
        impl<T: AsRef<[u8]>> IbPacket<T> {
            $(
                #[doc = concat!("The ", $doc, ", if the opcode carries one.")]
                pub fn $name(&self) -> Option<$view<&[u8]>> {
                    self.header(Header::$h).map($view::new_unchecked)
                }
            )*
        }

        /// The extension headers of a packet; exactly those its opcode calls for are `Some`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct ExtHeaders {
            $(
                #[doc = concat!("The ", $doc, ".")]
                pub $name: Option<$repr>,
            )*
        }

        impl ExtHeaders {
            /// Parses the headers `packet` carries.
            fn parse<T: AsRef<[u8]>>(packet: &IbPacket<T>) -> Result<Self> {
                Ok(Self {
                    $($name: packet.$name().map(|v| $repr::parse(&v)).transpose()?,)*
                })
            }

            fn has(&self, h: Header) -> bool {
                match h {
                    $(Header::$h => self.$name.is_some(),)*
                }
            }

            fn count(&self) -> usize {
                [$(self.$name.is_some()),*].into_iter().filter(|&b| b).count()
            }

            fn emit_one(&self, h: Header, b: &mut [u8]) {
                match h {
                    $(Header::$h => emit_opt(&self.$name, b, $repr::emit, $view::new_unchecked),)*
                }
            }
        }
    };
}

ext_headers! {
    reth: Reth / RethRepr = Reth, "RETH (RDMA extended transport header)";
    aeth: Aeth / AethRepr = Aeth, "AETH (ACK extended transport header)";
    atomic_eth: AtomicEth / AtomicEthRepr = AtomicEth, "AtomicETH (atomic extended transport header)";
    atomic_ack_eth: AtomicAckEth / AtomicAckEthRepr = AtomicAckEth, "AtomicAckETH (atomic ACK extended transport header)";
    deth: Deth / DethRepr = Deth, "DETH (datagram extended transport header)";
    imm_dt: ImmDt / ImmDtRepr = ImmDt, "ImmDt (immediate data)";
    ieth: Ieth / IethRepr = Ieth, "IETH (invalidate extended transport header)";
    feth: Feth / FethRepr = Feth, "FETH (flush extended transport header)";
}

fn emit_opt<'b, R, V>(
    repr: &Option<R>,
    b: &'b mut [u8],
    emit: fn(&R, &mut V),
    wrap: fn(&'b mut [u8]) -> V,
) {
    match repr {
        Some(r) => emit(r, &mut wrap(b)),
        // A header the opcode calls for but the repr lacks is written as zeros, so that
        // every byte of the header area is written either way.
        None => b.fill(0),
    }
}

/// The plain form of the InfiniBand part of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IbRepr<'a> {
    /// The BTH. On emit, `pad_count` is derived from the payload length and this field is
    /// ignored.
    pub bth: BthRepr,
    /// Extension headers.
    pub ext: ExtHeaders,
    /// Payload, without pad.
    pub payload: &'a [u8],
}

/// Pad bytes needed after `len` payload bytes.
pub const fn pad_for(len: usize) -> u8 {
    ((4 - len % 4) % 4) as u8
}

impl<'a> IbRepr<'a> {
    /// Reads a checked packet.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &'a IbPacket<&'a T>) -> Result<Self> {
        let bth = BthRepr::parse(&packet.bth())?;
        let ext = ExtHeaders::parse(packet)?;
        let b = packet.buffer.as_ref();
        let end = b.len() - ICRC_LEN - usize::from(packet.bth().pad_count());
        Ok(Self {
            bth,
            ext,
            payload: &b[packet.payload_offset()..end],
        })
    }

    /// Checks that the repr describes a valid packet: known opcode, exactly the extension
    /// headers it calls for, and a payload of the size it allows. Returns the table entry.
    pub fn check(&self) -> Result<&'static OpcodeInfo> {
        let info = self.bth.opcode.checked_info()?;
        for &h in info.headers {
            if !self.ext.has(h) {
                return Err(Error::Truncated {
                    layer: h.layer(),
                    need: h.len(),
                    have: 0,
                });
            }
        }
        if self.ext.count() != info.headers.len() {
            return Err(Error::LengthMismatch {
                layer: Layer::Bth,
                expected: info.headers.len(),
                actual: self.ext.count(),
            });
        }
        let expected = match info.payload {
            PayloadKind::None => Some(0),
            PayloadKind::Fixed(n) => Some(n),
            PayloadKind::Variable => None,
        };
        if let Some(expected) = expected {
            if self.payload.len() != expected {
                return Err(Error::LengthMismatch {
                    layer: Layer::Payload,
                    expected,
                    actual: self.payload.len(),
                });
            }
        }
        Ok(info)
    }

    /// Bytes the packet occupies, ICRC included.
    pub fn buffer_len(&self) -> usize {
        let headers = self.bth.opcode.info().map_or(0, |i| i.headers_len());
        Bth::<&[u8]>::LEN
            + headers
            + self.payload.len()
            + usize::from(pad_for(self.payload.len()))
            + ICRC_LEN
    }

    /// Writes the BTH (its pad count set for `payload_len` bytes of payload) and the extension
    /// headers the opcode calls for into the start of `buf`, and returns their length: the
    /// payload, pad and ICRC go after. Every byte of that length is written. Unlike
    /// [`IbRepr::emit`], this does not check that the repr holds exactly the headers the
    /// opcode calls for (a missing one is written as zeros, an extra one is left out), nor
    /// look at `payload`: it is for a sender that builds its reprs from the opcode table and
    /// writes the payload in place. Fails on an unknown opcode or a short buffer.
    pub fn emit_headers(&self, payload_len: usize, buf: &mut [u8]) -> Result<usize> {
        let info = self.bth.opcode.checked_info()?;
        let len = Bth::<&[u8]>::LEN + info.headers_len();
        Error::check_len(Layer::Bth, len, buf.len())?;
        let mut bth = self.bth;
        bth.pad_count = pad_for(payload_len);
        bth.emit(&mut Bth::new_unchecked(&mut buf[..]));
        let mut at = Bth::<&[u8]>::LEN;
        for &h in info.headers {
            self.ext.emit_one(h, &mut buf[at..at + h.len()]);
            at += h.len();
        }
        Ok(len)
    }

    /// Writes the packet into the start of `buf` and returns its length. The ICRC is written
    /// as zero: it covers the IP and UDP headers, so [`crate::roce::RoceRepr::emit`] fills it
    /// in. Fails, without panicking, on an invalid repr or a short buffer.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let info = self.check()?;
        let len = self.buffer_len();
        Error::check_len(Layer::Payload, len, buf.len())?;
        let buf = &mut buf[..len];
        let mut bth = self.bth;
        bth.pad_count = pad_for(self.payload.len());
        bth.emit(&mut Bth::new_unchecked(&mut buf[..]));
        let mut at = Bth::<&[u8]>::LEN;
        for &h in info.headers {
            self.ext.emit_one(h, &mut buf[at..at + h.len()]);
            at += h.len();
        }
        buf[at..at + self.payload.len()].copy_from_slice(self.payload);
        buf[at + self.payload.len()..].fill(0);
        Ok(len)
    }
}
