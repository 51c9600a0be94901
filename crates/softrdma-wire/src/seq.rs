//! 24-bit sequence numbers and queue pair numbers.
//!
//! PSNs and MSNs live modulo 2^24 (IBTA vol. 1, chapter 9.7, reliable service). Two values are ordered by
//! which half of the circle one lies in as seen from the other: `b` is after `a` when
//! `b - a mod 2^24` is in `1..2^23`. That relation is not transitive over the whole circle, so
//! these types deliberately do not implement `Ord`; use [`Psn::diff`], [`Psn::is_after`] and
//! [`Psn::is_before`].

use core::fmt;

/// Mask of a 24-bit field.
pub const MASK_24: u32 = 0x00FF_FFFF;

macro_rules! seq24 {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
        pub struct $name(u32);

        impl $name {
            /// The largest value, 2^24 - 1.
            pub const MAX: Self = Self(MASK_24);

            /// Makes a value from the low 24 bits of `v` (higher bits are discarded).
            pub const fn new(v: u32) -> Self {
                Self(v & MASK_24)
            }

            /// The value, always below 2^24.
            pub const fn value(self) -> u32 {
                self.0
            }

            /// `self + n` modulo 2^24.
            #[allow(clippy::should_implement_trait)]
            pub const fn add(self, n: u32) -> Self {
                Self(self.0.wrapping_add(n) & MASK_24)
            }

            /// `self - n` modulo 2^24.
            #[allow(clippy::should_implement_trait)]
            pub const fn sub(self, n: u32) -> Self {
                Self(self.0.wrapping_sub(n) & MASK_24)
            }

            /// The next value, wrapping from 2^24 - 1 to 0.
            pub const fn next(self) -> Self {
                self.add(1)
            }

            /// Signed distance from `other` to `self` in `-2^23..2^23`: positive when `self` is
            /// after `other`. This is the wire doc's `((a - b) << 8) as i32`, scaled back down.
            pub const fn diff(self, other: Self) -> i32 {
                ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
            }

            /// True when `self` lies in the half of the circle after `other`.
            pub const fn is_after(self, other: Self) -> bool {
                self.diff(other) > 0
            }

            /// True when `self` lies in the half of the circle before `other`.
            pub const fn is_before(self, other: Self) -> bool {
                self.diff(other) < 0
            }
        }

        impl From<$name> for u32 {
            fn from(v: $name) -> u32 {
                v.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl fmt::LowerHex for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::LowerHex::fmt(&self.0, f)
            }
        }
    };
}

seq24!(
    /// Packet sequence number (BTH bits 9..12).
    Psn
);
seq24!(
    /// Message sequence number (AETH bytes 1..4): counts completed inbound messages.
    Msn
);
seq24!(
    /// Queue pair number (BTH destination QP, DETH source QP). QP0 and QP1 are the special
    /// management QPs; the arithmetic exists for allocators that hand out QPNs in sequence.
    Qpn
);

impl Qpn {
    /// The general services interface QP, which carries connection-management MADs.
    pub const GSI: Qpn = Qpn(1);
}

/// The 20-bit flow label Linux derives for a connection between QPs `lqpn` and `rqpn` when
/// the address vector has none (`rdma_calc_flow_label`): a hash of the product of the QPNs,
/// so both ends get the same one.
pub const fn rdma_flow_label(lqpn: Qpn, rqpn: Qpn) -> u32 {
    let mut v = (lqpn.0 as u64) * (rqpn.0 as u64);
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0xF_FFFF) as u32
}

/// The UDP source port for a GRH flow label (`rdma_flow_label_to_udp_sport`): the RoCE v2
/// annex (IBTA Annex A17, UDP header) leaves the source port to the sender for ECMP entropy,
/// and Linux folds the 20-bit label into 14 bits above 0xC000.
pub const fn flow_label_udp_sport(flow_label: u32) -> u16 {
    let fl = flow_label & 0xF_FFFF;
    (((fl & 0x3FFF) ^ ((fl & 0xF_C000) >> 14)) | 0xC000) as u16
}

/// The UDP source port Linux rxe uses for a connection between QPs `lqpn` and `rqpn` whose
/// address vector carries no flow label. Symmetric, so both ends of an RC connection send
/// from the same port. (Connections set up by rdma_cm carry a flow label: use
/// [`flow_label_udp_sport`] with it.)
pub const fn rxe_udp_sport(lqpn: Qpn, rqpn: Qpn) -> u16 {
    flow_label_udp_sport(rdma_flow_label(lqpn, rqpn))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rxe_sport_matches_linux() {
        assert_eq!(rxe_udp_sport(Qpn::new(0x11), Qpn::new(0x15)), 49509);
        assert_eq!(rxe_udp_sport(Qpn::new(0x15), Qpn::new(0x11)), 49509);
        assert_eq!(rxe_udp_sport(Qpn::new(0x1f), Qpn::new(0xf8_9cac)), 63774);
    }

    #[test]
    fn wrap_edges() {
        assert_eq!(Psn::MAX.next(), Psn::new(0));
        assert_eq!(Psn::new(0).sub(1), Psn::MAX);
        assert!(Psn::new(0).is_after(Psn::MAX));
        assert_eq!(Psn::new(0).diff(Psn::MAX), 1);
        assert_eq!(Psn::new(1 << 23).diff(Psn::new(0)), -(1 << 23));
        assert_eq!(Psn::new((1 << 23) - 1).diff(Psn::new(0)), (1 << 23) - 1);
        assert_eq!(Psn::new(0x1_000_005).value(), 5);
    }
}
