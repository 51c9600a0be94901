//! Entry points for the fuzzers (`fuzz/`) and the property tests: the receive side of the
//! RDM protocol as a hostile peer meets it, without sockets.

use crate::matching::{Accepts, FI_ADDR_UNSPEC, Matcher, Offers};
use crate::wire::{HEADER_LEN, Header, Op};

/// Feeds `data` to the receive side: each step's first byte says whether the next bytes
/// are a receive to post (its tag, ignore mask and source) or a peer's header (up to 48
/// bytes and a payload length), which is parsed, and matched when it is a message.
/// Nothing may panic; every message is matched once or kept, every receive likewise.
pub fn rdm_receive(data: &[u8]) {
    let mut m: Matcher<u32, Header> = Matcher::default();
    let (mut posted, mut arrived, mut matched) = (0usize, 0usize, 0usize);
    let mut rest = data;
    while let Some((&step, tail)) = rest.split_first() {
        let take = tail.len().min(if step & 1 == 0 {
            17
        } else {
            HEADER_LEN + (step >> 4) as usize
        });
        let (chunk, tail) = tail.split_at(take);
        rest = tail;
        if step & 1 == 0 {
            let word = |i: usize| {
                let mut b = [0u8; 8];
                let s = chunk.get(i..).unwrap_or(&[]);
                let n = s.len().min(8);
                b[..n].copy_from_slice(&s[..n]);
                u64::from_le_bytes(b)
            };
            let a = Accepts {
                tagged: step & 2 != 0,
                tag: word(0),
                ignore: word(8),
                src: if step & 4 != 0 {
                    FI_ADDR_UNSPEC
                } else {
                    u64::from(step >> 3)
                },
            };
            posted += 1;
            if m.post(a, posted as u32).is_some() {
                matched += 1;
            }
        } else if let Ok((h, _)) = Header::parse(chunk) {
            if matches!(h.op, Op::Fin | Op::WriteData) {
                continue;
            }
            let o = Offers {
                tagged: h.tagged,
                tag: h.tag,
                src: u64::from(step >> 5),
            };
            arrived += 1;
            if m.arrive(o, h).is_some() {
                matched += 1;
            }
        }
        let (p, u) = m.lens();
        assert_eq!(p + matched, posted, "a receive was lost or matched twice");
        assert_eq!(u + matched, arrived, "a message was lost or matched twice");
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_receive_side_takes_any_bytes(data in proptest::collection::vec(any::<u8>(), 0..600)) {
            super::rdm_receive(&data);
        }
    }
}
