//! Where a CM message's fields sit, stated once for both directions: each message lists
//! its fields with a [`Codec`] (a byte offset and an encoding) in [`cm_layout!`], which
//! makes its `parse` and `emit` from that one table, so that the two cannot disagree on
//! an offset.
//!
//! Owns the encodings of single fields (big-endian integers, bit fields, byte arrays,
//! values the spec reserves, additional information, paths and the transport service);
//! calls the byte helpers of [`crate::macros`] and the shared types of [`super::fields`].

use super::fields::{INFO_LEN, Info, PathRepr, PrivateData, TransportService, array, bad};
use crate::error::Result;
use crate::macros::be;
use core::ops::RangeInclusive;

/// One field's place and encoding in a message's 232 bytes.
pub(super) trait Codec<V> {
    /// Reads the field; an error when it holds a value the spec reserves.
    fn get(&self, d: &[u8]) -> Result<V>;
    /// Writes the field, leaving the bits of every other field as they are (several
    /// fields share a byte).
    fn put(&self, d: &mut [u8], v: &V);
}

/// Makes a message's `parse` and `emit` (inside its `impl` block) from its fields and
/// their codecs. Parsing reads the fields in the order listed, so the first reserved value
/// listed is the one reported; emitting zeroes the message first, so reserved bits go out
/// as zero.
macro_rules! cm_layout {
    ($what:literal { $($field:ident: $codec:expr),* $(,)? }) => {
        #[doc = concat!("Parses ", $what, "'s 232 bytes.")]
        pub fn parse(d: &[u8]) -> $crate::error::Result<Self> {
            $crate::error::Error::check_len(
                $crate::error::Layer::Cm,
                $crate::cm::DATA_LEN,
                d.len(),
            )?;
            Ok(Self {
                $($field: $crate::cm::codec::Codec::get(&$codec, d)?,)*
            })
        }

        #[doc = concat!("Writes ", $what, " into the first 232 bytes of `d`.")]
        pub fn emit(&self, d: &mut [u8]) {
            let d = $crate::cm::fields::blank(d);
            $($crate::cm::codec::Codec::put(&$codec, d, &self.$field);)*
        }
    };
}

/// Declares a message's struct and makes its `parse` and `emit` ([`cm_layout!`]) from
/// the same table: each field's name, type and place are written once, and parsing reads
/// the fields in the order declared.
macro_rules! cm_message {
    (
        $(#[$attr:meta])*
        pub struct $name:ident($what:literal) {
            $($(#[$fattr:meta])* $field:ident: $ty:ty = $codec:expr),* $(,)?
        }
    ) => {
        $(#[$attr])*
        pub struct $name {
            $($(#[$fattr])* pub $field: $ty,)*
        }

        impl $name {
            cm_layout!($what { $($field: $codec),* });
        }
    };
}

/// A big-endian integer of `N` bytes at a byte offset.
pub(super) struct Be<const N: usize>(pub usize);

/// Implements [`Codec`] for the widths [`be`] reads and writes.
macro_rules! be_codec {
    ($($n:literal: $v:ty = $get:ident / $set:ident;)*) => {$(
        impl Codec<$v> for Be<$n> {
            #[inline]
            fn get(&self, d: &[u8]) -> Result<$v> {
                Ok(be::$get(d, self.0))
            }
            #[inline]
            fn put(&self, d: &mut [u8], v: &$v) {
                be::$set(d, self.0, *v)
            }
        }
    )*};
}

be_codec! {
    2: u16 = u16 / set_u16;
    3: u32 = u24 / set_u24;
    4: u32 = u32 / set_u32;
    8: u64 = u64 / set_u64;
}

impl Codec<u8> for Be<1> {
    #[inline]
    fn get(&self, d: &[u8]) -> Result<u8> {
        Ok(d[self.0])
    }
    #[inline]
    fn put(&self, d: &mut [u8], v: &u8) {
        d[self.0] = *v;
    }
}

/// `Bits(at, shift, width)`: the `width` bits of byte `at` that start `shift` bits above
/// its least significant one. A value too wide for the field keeps its low bits.
#[derive(Clone, Copy)]
pub(super) struct Bits(pub usize, pub u8, pub u8);

impl Bits {
    #[inline]
    fn mask(self) -> u8 {
        ((1u16 << self.2) - 1) as u8
    }
}

impl Codec<u8> for Bits {
    #[inline]
    fn get(&self, d: &[u8]) -> Result<u8> {
        Ok((d[self.0] >> self.1) & self.mask())
    }
    #[inline]
    fn put(&self, d: &mut [u8], v: &u8) {
        let mask = self.mask() << self.1;
        d[self.0] = (d[self.0] & !mask) | (*v << self.1 & mask);
    }
}

impl Codec<bool> for Bits {
    #[inline]
    fn get(&self, d: &[u8]) -> Result<bool> {
        Codec::<u8>::get(self, d).map(|b| b != 0)
    }
    #[inline]
    fn put(&self, d: &mut [u8], v: &bool) {
        Codec::<u8>::put(self, d, &u8::from(*v))
    }
}

/// A bit field some of whose values the spec reserves: those outside the range parse as
/// an error that names the field.
pub(super) struct Checked(pub Bits, pub RangeInclusive<u8>, pub &'static str);

impl Codec<u8> for Checked {
    #[inline]
    fn get(&self, d: &[u8]) -> Result<u8> {
        let v = Codec::<u8>::get(&self.0, d)?;
        if self.1.contains(&v) {
            Ok(v)
        } else {
            Err(bad(self.2, u64::from(v)))
        }
    }
    #[inline]
    fn put(&self, d: &mut [u8], v: &u8) {
        Codec::<u8>::put(&self.0, d, v)
    }
}

/// Bytes copied as they are, starting at a byte offset.
pub(super) struct Bytes(pub usize);

impl<const N: usize> Codec<[u8; N]> for Bytes {
    #[inline]
    fn get(&self, d: &[u8]) -> Result<[u8; N]> {
        Ok(array(d, self.0))
    }
    #[inline]
    fn put(&self, d: &mut [u8], v: &[u8; N]) {
        d[self.0..self.0 + N].copy_from_slice(v);
    }
}

impl<const N: usize> Codec<PrivateData<N>> for Bytes {
    #[inline]
    fn get(&self, d: &[u8]) -> Result<PrivateData<N>> {
        Codec::<[u8; N]>::get(self, d).map(PrivateData)
    }
    #[inline]
    fn put(&self, d: &mut [u8], v: &PrivateData<N>) {
        Codec::<[u8; N]>::put(self, d, &v.0)
    }
}

/// Additional information: its length field, the 72 bytes at `data`, and the name a
/// length beyond them is refused under. The length sent is at most 72.
pub(super) struct InfoAt {
    /// The length field.
    pub len: Bits,
    /// Where the 72 bytes start.
    pub data: usize,
    /// The length field's name in errors.
    pub name: &'static str,
}

impl Codec<Info> for InfoAt {
    #[inline]
    fn get(&self, d: &[u8]) -> Result<Info> {
        let len = Codec::<u8>::get(&self.len, d)?;
        if usize::from(len) > INFO_LEN {
            return Err(bad(self.name, u64::from(len)));
        }
        Ok(Info {
            len,
            data: Codec::get(&Bytes(self.data), d)?,
        })
    }
    #[inline]
    fn put(&self, d: &mut [u8], v: &Info) {
        Codec::<u8>::put(&self.len, d, &v.len.min(INFO_LEN as u8));
        Codec::put(&Bytes(self.data), d, &v.data);
    }
}

/// A 20-bit flow label in the top bits of the big-endian word at a byte offset.
struct FlowLabel(usize);

impl Codec<u32> for FlowLabel {
    #[inline]
    fn get(&self, d: &[u8]) -> Result<u32> {
        Ok(be::u32(d, self.0) >> 12)
    }
    #[inline]
    fn put(&self, d: &mut [u8], v: &u32) {
        let low = be::u32(d, self.0) & 0xFFF;
        be::set_u32(d, self.0, (v & 0xF_FFFF) << 12 | low);
    }
}

/// A path's 44 bytes at `at` (IBTA 12.6.5 and 12.6.12). The REQ and the LAP lay a path
/// out alike but for where its traffic class, hop limit and packet rate sit, given
/// relative to `at`.
pub(super) struct Path {
    at: usize,
    traffic_class: usize,
    hop_limit: usize,
    packet_rate: usize,
}

impl Path {
    /// A path of a REQ (table 106).
    pub const fn req(at: usize) -> Self {
        Self {
            at,
            traffic_class: 40,
            hop_limit: 41,
            packet_rate: 39,
        }
    }

    /// The alternate path of a LAP (table 115).
    pub const fn lap(at: usize) -> Self {
        Self {
            at,
            traffic_class: 39,
            hop_limit: 40,
            packet_rate: 41,
        }
    }
}

/// Implements [`Codec`] for a struct from one table of its fields' codecs, whose
/// expressions may use the codec's own value as `$s`.
macro_rules! struct_codec {
    ($codec:ty => $v:ident, $s:ident { $($field:ident: $c:expr),* $(,)? }) => {
        impl Codec<$v> for $codec {
            #[inline]
            fn get(&self, d: &[u8]) -> Result<$v> {
                let $s = self;
                Ok($v {
                    $($field: Codec::get(&$c, d)?,)*
                })
            }
            #[inline]
            fn put(&self, d: &mut [u8], v: &$v) {
                let $s = self;
                $(Codec::put(&$c, d, &v.$field);)*
            }
        }
    };
}

struct_codec!(Path => PathRepr, p {
    local_lid: Be::<2>(p.at),
    remote_lid: Be::<2>(p.at + 2),
    local_gid: Bytes(p.at + 4),
    remote_gid: Bytes(p.at + 20),
    flow_label: FlowLabel(p.at + 36),
    packet_rate: Bits(p.at + p.packet_rate, 0, 6),
    traffic_class: Be::<1>(p.at + p.traffic_class),
    hop_limit: Be::<1>(p.at + p.hop_limit),
    sl: Bits(p.at + 42, 4, 4),
    subnet_local: Bits(p.at + 42, 3, 1),
    local_ack_timeout: Bits(p.at + 43, 3, 5),
});

/// A REQ's transport service type (byte 43) and extended transport type (byte 51).
pub(super) struct Transport;

const SERVICE_TYPE: Bits = Bits(43, 1, 2);
const EXTENDED_TYPE: Bits = Bits(51, 0, 3);

impl Codec<TransportService> for Transport {
    #[inline]
    fn get(&self, d: &[u8]) -> Result<TransportService> {
        let ts = Codec::<u8>::get(&SERVICE_TYPE, d)?;
        let ext = Codec::<u8>::get(&EXTENDED_TYPE, d)?;
        match (ts, ext) {
            (0, _) => Ok(TransportService::Rc),
            (1, _) => Ok(TransportService::Uc),
            (3, 1) => Ok(TransportService::Xrc),
            (2, _) => Err(bad("REQ transport service type (RD)", 2)),
            (_, e) => Err(bad("REQ extended transport type", u64::from(e))),
        }
    }
    #[inline]
    fn put(&self, d: &mut [u8], v: &TransportService) {
        let (ts, ext) = v.code();
        Codec::<u8>::put(&SERVICE_TYPE, d, &ts);
        Codec::<u8>::put(&EXTENDED_TYPE, d, &ext);
    }
}
