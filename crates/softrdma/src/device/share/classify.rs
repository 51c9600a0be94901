//! What a received datagram is to the sharing of a device, decided from its bytes and the
//! path it came by alone: pure, so that the receive path (`device::rx`) does the I/O of
//! each kind and nothing else, and so that any bytes at all can be classified without a
//! panic (a property test feeds them).

use super::forward::dest_qpn;
use super::steer::parse_probe;
use softrdma_wire::cm::GSI_QPN;

/// The kinds of datagram the sharing layer tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A steering probe of the device's owner: which socket of the group is this (see
    /// [`super::steer`])? Reported, never delivered.
    Probe {
        /// The index it names.
        index: u32,
        /// Its round.
        nonce: u64,
    },
    /// Came by a same-host ring: its producer found this process as the holder of its
    /// QPN, so it is this process's, whatever the sharing says.
    Ringed,
    /// For QP1: a CM MAD, which the owner routes by its addressee, and which a steered
    /// member may have been given by mistake.
    Mad,
    /// For another QPN, which may be another process's.
    Qp(u32),
    /// Too short to name a QPN: the device's receive path counts it as malformed.
    Runt,
}

/// What `data`, which came by a ring if `ringed` (or else by the UDP port), is.
pub(crate) fn classify(data: &[u8], ringed: bool) -> Kind {
    if let Some((index, nonce)) = parse_probe(data) {
        return Kind::Probe { index, nonce };
    }
    if ringed {
        return Kind::Ringed;
    }
    match dest_qpn(data) {
        Some(GSI_QPN) => Kind::Mad,
        Some(q) => Kind::Qp(q),
        None => Kind::Runt,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A probe is a probe by either path; a ring's packet is this process's; the rest go
    /// by their BTH's destination QP (IBTA 9.2: bytes 5..8).
    #[test]
    fn each_kind() {
        let probe = super::super::steer::probe(3, 0xABCD);
        assert_eq!(
            classify(&probe, false),
            Kind::Probe {
                index: 3,
                nonce: 0xABCD
            }
        );
        assert_eq!(
            classify(&probe, true),
            Kind::Probe {
                index: 3,
                nonce: 0xABCD
            }
        );
        let mut bth = [0u8; 12];
        bth[5..8].copy_from_slice(&[0, 0, 1]);
        assert_eq!(classify(&bth, false), Kind::Mad);
        assert_eq!(classify(&bth, true), Kind::Ringed);
        bth[5..8].copy_from_slice(&[0x12, 0x34, 0x56]);
        assert_eq!(classify(&bth, false), Kind::Qp(0x12_3456));
        assert_eq!(classify(&bth[..7], false), Kind::Runt);
    }

    proptest! {
        /// Any bytes are classified, by either path, without a panic; what names a QPN
        /// names the one its bytes 5..8 hold.
        #[test]
        fn any_bytes_are_classified(data in proptest::collection::vec(any::<u8>(), 0..64), ringed: bool) {
            match classify(&data, ringed) {
                Kind::Qp(q) => prop_assert_eq!(Some(q), dest_qpn(&data)),
                Kind::Mad => prop_assert_eq!(dest_qpn(&data), Some(GSI_QPN)),
                Kind::Runt => prop_assert!(data.len() < 8),
                Kind::Ringed => prop_assert!(ringed),
                Kind::Probe { .. } => prop_assert!(parse_probe(&data).is_some()),
            }
        }
    }
}
