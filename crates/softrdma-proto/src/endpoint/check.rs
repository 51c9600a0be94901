//! The receive checks: a packet's ICRC, with the IPv4 identification recovered when the
//! sender numbers its packets.
//!
//! The ICRC covers the IPv4 identification (IBTA vol. 1, 7.8.1 and Annex A17: only TOS, TTL
//! and the header checksum are masked), and a UDP socket does not tell a receiver what ID a
//! datagram carried. IPv6, and IPv4 from senders that send ID 0 (an unconnected socket with
//! DF set), verify directly. For IPv4 from senders that number their packets (rxe, NICs,
//! softrdma's connected sockets) the ID is recovered from the ICRC itself: CRC-32 is affine,
//! so a change of ID changes the CRC by an XOR that depends only on the ID bits and the
//! packet's length ([`softrdma_wire::icrc::ipv4_ident_basis`]). Only a corrupt packet fails.
//!
//! Senders use the same patches the other way round: to give a packet the ICRC that is right
//! for the ID its socket will give it.

use std::net::IpAddr;

/// Lengths whose ICRC patches (2 KiB each) a sender or receiver keeps.
const PATCH_CACHE: usize = 256;

/// Hashes a key that is already random (an L_Key/R_Key or a QPN, which the device draws at
/// random) by itself. Every packet looks its keys up; SipHash, std's default, was a tenth of
/// the per-packet work here, and it defends against chosen keys, which only the device makes.
/// (A one-method hasher: not worth a dependency.)
#[derive(Debug, Default, Clone, Copy)]
pub struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u32(&mut self, k: u32) {
        // Spread the bits over the word: hashbrown takes its control bits from the top.
        self.0 = u64::from(k).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A map keyed by a random u32 (a QPN, an L_Key or R_Key).
pub type KeyMap<V> = std::collections::HashMap<u32, V, std::hash::BuildHasherDefault<KeyHasher>>;

/// ICRC patches for a change of IPv4 ID, by InfiniBand length (without ICRC): what a sender
/// applies for the ID its packet will carry, and what a receiver tries or solves for to
/// recover the ID a packet carried.
pub struct IdentPatches {
    /// The lengths in use, whose patches are found by a compare of four keys: a ping-pong
    /// sends and receives two lengths over and over, a stream a few, and every packet needs
    /// one or two patches.
    keys: [usize; FRONT],
    front: [Box<Patches>; FRONT],
    /// The slot the next new length takes.
    victim: usize,
    /// Lengths seen before and pushed out of `front`, kept for their return (bounded:
    /// lengths may be a peer's choice).
    kept: KeyMap<Box<Patches>>,
}

/// Slots of [`IdentPatches::front`].
const FRONT: usize = 4;

impl Default for IdentPatches {
    fn default() -> Self {
        Self {
            keys: [usize::MAX; FRONT],
            front: std::array::from_fn(|_| Box::new(Patches::empty())),
            victim: 0,
            kept: Default::default(),
        }
    }
}

/// One length's ID basis, and the patch for every value of each ID byte: two table reads per
/// patch instead of sixteen masked XORs.
pub struct Patches {
    /// What each ID bit changes ([`softrdma_wire::icrc::ipv4_ident_basis`]).
    pub basis: [u32; 16],
    lo: [u32; 256],
    hi: [u32; 256],
}

impl Patches {
    fn empty() -> Self {
        Self {
            basis: [0; 16],
            lo: [0; 256],
            hi: [0; 256],
        }
    }

    /// The patches for packets of `ib_len` bytes before the ICRC.
    fn new(ib_len: usize) -> Self {
        let basis = softrdma_wire::icrc::ipv4_ident_basis(ib_len);
        let mut p = Self {
            basis,
            ..Self::empty()
        };
        // Each entry is the one without its lowest set bit, plus that bit's vector.
        for b in 1..256usize {
            let low = b.trailing_zeros() as usize;
            p.lo[b] = p.lo[b & (b - 1)] ^ basis[low];
            p.hi[b] = p.hi[b & (b - 1)] ^ basis[8 + low];
        }
        p
    }

    /// The ICRC change for the ID bits in `diff`.
    pub fn apply(&self, diff: u16) -> u32 {
        self.lo[usize::from(diff & 0xFF)] ^ self.hi[usize::from(diff >> 8)]
    }
}

impl IdentPatches {
    /// The patches for a packet with `ib_len` bytes before its ICRC.
    pub fn patches(&mut self, ib_len: usize) -> &Patches {
        let slot = match self.keys.iter().position(|&k| k == ib_len) {
            Some(slot) => slot,
            None => {
                let slot = self.victim;
                self.victim = (slot + 1) % FRONT;
                let p = self
                    .kept
                    .remove(&(ib_len as u32))
                    .unwrap_or_else(|| Box::new(Patches::new(ib_len)));
                let old = std::mem::replace(&mut self.front[slot], p);
                let old_key = std::mem::replace(&mut self.keys[slot], ib_len);
                if old_key != usize::MAX {
                    if self.kept.len() >= PATCH_CACHE {
                        self.kept.clear();
                    }
                    self.kept.insert(old_key as u32, old);
                }
                slot
            }
        };
        &self.front[slot]
    }

    /// The XOR that takes the ICRC of a packet with `ib_len` bytes before its ICRC from one
    /// computed for ID `from` to one for ID `to`.
    pub fn xor(&mut self, ib_len: usize, from: u16, to: u16) -> u32 {
        if from == to {
            return 0;
        }
        self.patches(ib_len).apply(from ^ to)
    }
}

/// What a receiver keeps from one packet to the next to check ICRCs quickly.
#[derive(Default)]
pub struct IcrcCheck {
    patches: IdentPatches,
    /// The CRCs of the part before the BTH, per sender and length.
    prefixes: softrdma_wire::icrc::IcrcPrefixes,
    /// The last ID recovered: a sender that numbers its packets (a softrdma connected
    /// socket, rxe) most often sent the next one or the same again, which a check of those
    /// guesses finds for a few XORs instead of a solve.
    last: u16,
}

impl core::fmt::Debug for IcrcCheck {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("IcrcCheck")
            .field("last", &self.last)
            .finish_non_exhaustive()
    }
}

/// How a packet's ICRC verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IcrcOk {
    /// As sent: IPv6, or IPv4 with ID 0.
    Direct,
    /// IPv4 with this identification, recovered from the ICRC.
    Ident(u16),
}

impl IcrcOk {
    /// The IPv4 identification the packet carried (0 for IPv6).
    pub fn ident(self) -> u16 {
        match self {
            IcrcOk::Direct => 0,
            IcrcOk::Ident(i) => i,
        }
    }
}

impl IcrcCheck {
    /// Checks the ICRC of `ib` (the InfiniBand part, ICRC last, at least 4 bytes) sent from
    /// `src`:`sport` to `dst`; `None` if no IPv4 identification makes it right.
    pub fn check(&mut self, src: IpAddr, dst: IpAddr, sport: u16, ib: &[u8]) -> Option<IcrcOk> {
        let n = ib.len();
        if n < 4 {
            return None;
        }
        let wire = u32::from_le_bytes([ib[n - 4], ib[n - 3], ib[n - 2], ib[n - 1]]);
        let body = &ib[..n - 4];
        let (s, d) = crate::qp::icrc_pair(src, dst);
        let c0 = self.prefixes.compute_for(s, d, sport, body).unwrap_or(0);
        if c0 == wire {
            return Some(IcrcOk::Direct);
        }
        if !(src.to_canonical().is_ipv4() && dst.to_canonical().is_ipv4()) {
            return None;
        }
        // The kernel numbers a GSO send's segments from the send's ID on, and on Linux up
        // to at least 6.18 counts the send as one: a [WRITE, ACK] pair then takes IDs n and
        // n+1, and the next send starts at n+1 again.
        let (next, same) = (self.last.wrapping_add(1), self.last);
        let p = self.patches.patches(body.len());
        let ident = if c0 ^ p.apply(next) == wire {
            next
        } else if c0 ^ p.apply(same) == wire {
            same
        } else {
            softrdma_wire::icrc::solve_ipv4_ident(&p.basis, c0, wire)?
        };
        self.last = ident;
        Some(IcrcOk::Ident(ident))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn a_patch_moves_the_icrc_to_the_new_id() {
        let src = Ipv4Addr::new(10, 0, 0, 1);
        let dst = Ipv4Addr::new(10, 0, 0, 2);
        let mut ib = vec![0u8; 12 + 16 + 64];
        ib[0] = 0x0a; // RDMA WRITE First (any opcode will do)
        ib.iter_mut()
            .skip(12)
            .enumerate()
            .for_each(|(i, b)| *b = i as u8);
        let mut id = IdentPatches::default();
        let at = |ident| {
            softrdma_wire::icrc::compute_for_ipv4_ident(src, dst, ident, 50000, &ib).unwrap()
        };
        for (from, to) in [(0u16, 1u16), (0, 0xBEEF), (7, 0xFFFF), (0x1234, 0x1234)] {
            assert_eq!(
                at(from) ^ id.xor(ib.len(), from, to),
                at(to),
                "{from} -> {to}"
            );
        }
    }

    /// The byte tables give, for every ID change, the XOR of the basis vectors of its bits,
    /// also after a slot was taken by another length and taken back.
    #[test]
    fn table_patches_equal_the_basis_sum_for_every_id() {
        let mut id = IdentPatches::default();
        // Six lengths through four slots: some are pushed out and come back.
        for len in [36usize, 52, 36, 4124, 16, 20, 24, 36, 52] {
            let basis = softrdma_wire::icrc::ipv4_ident_basis(len);
            let p = id.patches(len);
            assert_eq!(p.basis, basis);
            for d in 0..=u16::MAX {
                let sum = (0..16)
                    .filter(|i| d >> i & 1 == 1)
                    .fold(0, |acc, i| acc ^ basis[i]);
                assert_eq!(p.apply(d), sum, "length {len}, ID change {d:#06x}");
            }
        }
    }

    /// A packet sent with any IPv4 ID verifies, and reports that ID; a flipped bit fails.
    #[test]
    fn the_check_recovers_the_sender_ipv4_ident() {
        let (src, dst) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let mut ib = vec![0u8; 12 + 40];
        ib[0] = 0x0a;
        let mut check = IcrcCheck::default();
        for ident in [0u16, 7, 8, 8, 0xBEEF, 3] {
            let mut p = ib.clone();
            let c =
                softrdma_wire::icrc::compute_for_ipv4_ident(src, dst, ident, 49152, &p).unwrap();
            p.extend_from_slice(&c.to_le_bytes());
            let got = check.check(src.into(), dst.into(), 49152, &p);
            assert_eq!(got.map(IcrcOk::ident), Some(ident), "ID {ident}");
            p[20] ^= 4;
            assert_eq!(check.check(src.into(), dst.into(), 49152, &p), None);
        }
        ib.clear();
        assert_eq!(check.check(src.into(), dst.into(), 49152, &ib), None);
    }
}
