//! The control plane under arbitrary input, for the fuzzer (`fuzz/fuzz_targets/share_control.rs`)
//! and the tests: bytes become a run of events (members that connect, send records
//! raw or well formed, hang up; this process's own draws, frees and listens; time
//! passing), and after each one the invariants are checked, panicking on the first that
//! fails. Pure, as the rest of [`super::Control`].

use super::{Action, Control, MemberId, Msg};
use crate::device::share::msg::VERSION;
use rand::SeedableRng;
use rand::rngs::StdRng;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Reads the input a byte at a time; zeros once it is used up.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        let (b, rest) = self.0.split_first().map_or((0, &[][..]), |(b, r)| (*b, r));
        self.0 = rest;
        b
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    fn take(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
}

/// A well-formed record the input picks: every kind a member may send, and some it may
/// not, with QPNs near the ones in use.
fn record(b: &mut Bytes<'_>, near: &[u32]) -> Msg {
    let q = |b: &mut Bytes<'_>| match b.u8() % 4 {
        0 => u32::from(b.u8() % 4),
        1 => near.get(usize::from(b.u8())).copied().unwrap_or(0x42),
        2 => 0xFF_FFFF,
        _ => b.u32(),
    };
    match b.u8() % 14 {
        0 => Msg::Hello {
            version: if b.u8() % 8 == 0 {
                VERSION + 1
            } else {
                VERSION
            },
            pid: 1,
            ep: u64::from(b.u32()),
        },
        1 | 2 => Msg::Alloc,
        3 => Msg::Free(q(b)),
        4 => Msg::Locate(q(b)),
        5 => {
            let n = usize::from(b.u8() % 8);
            Msg::Register((0..n).map(|_| q(b)).collect())
        }
        6 => Msg::Steer(b.u8()),
        7 => Msg::Steering(b.u8()),
        8 => Msg::Probed {
            index: u32::from(b.u8() % 4),
            nonce: u64::from(b.u32()),
        },
        9 => Msg::Leave,
        10 => Msg::CmListen(u64::from(b.u8() % 4)),
        11 => Msg::CmUnlisten(u64::from(b.u8() % 4)),
        12 => Msg::Left,
        _ => Msg::Located(u64::from(b.u32())),
    }
}

/// Runs the events `data` makes through an owner's control plane and checks, after each:
/// nothing panics; the routes its actions set are exactly who holds which QPN; no QPN is
/// held twice, drawn from quarantine or outside 2..2^24; every slot is granted to one
/// live member; nothing is sent to a member after it is closed, and no route or CM route
/// goes to a member that is gone.
pub(crate) fn drive(data: &[u8]) {
    let mut b = Bytes(data);
    let mut c = Control::new(0xE0, true, 0, 0);
    let mut now = Instant::now();
    let mut rng = StdRng::seed_from_u64(u64::from(b.u32()));
    let mut accepted: MemberId = 0;
    let mut routes: HashMap<u32, MemberId> = HashMap::new();
    let mut closed: HashSet<MemberId> = HashSet::new();
    let mut mine: Vec<u32> = Vec::new();
    while !b.0.is_empty() {
        let quarantined = c.quarantined.clone();
        let pick = |b: &mut Bytes<'_>| MemberId::from(b.u8() % 8);
        let acts = match b.u8() % 9 {
            0 => {
                c.accepted(accepted, 100 + accepted as i32);
                accepted += 1;
                Vec::new()
            }
            1 => {
                let t = pick(&mut b);
                let len = usize::from(b.u8() % 48);
                let rec = b.take(len).to_vec();
                let fds = usize::from(b.u8() % 3);
                c.record(now, &mut rng, t, &rec, fds)
            }
            2..=4 => {
                let t = pick(&mut b);
                let near: Vec<u32> = routes.keys().chain(&mine).copied().collect();
                let m = record(&mut b, &near);
                let fds = usize::from(matches!(m, Msg::Hello { .. }));
                c.record(now, &mut rng, t, &m.encode(), fds)
            }
            5 => {
                let t = pick(&mut b);
                if c.members.contains_key(&t) {
                    closed.insert(t);
                }
                c.hang_up(now, &mut rng, t)
            }
            6 => {
                let q = c.draw_mine(now, &mut rng);
                assert!(
                    !quarantined.contains(&q) && q > 1 && q < 0xFF_FFFF,
                    "{q:#x}"
                );
                assert!(!routes.contains_key(&q), "{q:#x} is a member's");
                mine.push(q);
                Vec::new()
            }
            7 => {
                if let Some(q) = mine.get(usize::from(b.u8())).copied() {
                    mine.retain(|x| *x != q);
                    assert!(c.free_mine(now, q, true));
                }
                c.listen_here(u64::from(b.u8() % 4));
                Vec::new()
            }
            _ => {
                now += Duration::from_secs(u64::from(b.u8()));
                c.tick(now, &mut rng)
            }
        };
        for a in &acts {
            match a {
                Action::Close { to, .. } => {
                    closed.insert(*to);
                }
                Action::Send { to, msg } | Action::Welcome { to, msg } => {
                    assert!(
                        !closed.contains(to) || matches!(msg, Msg::Refused { .. }),
                        "{msg:?} sent to closed member {to}"
                    );
                    if let Msg::Qpn(q) = msg {
                        assert!(!quarantined.contains(q), "{q:#x} drawn from quarantine");
                        assert!(*q > 1 && *q < 0xFF_FFFF, "{q:#x}");
                    }
                }
                Action::Route { qpn, to: Some(t) } => {
                    assert!(c.members.contains_key(t), "route to gone member {t}");
                    assert!(routes.insert(*qpn, *t).is_none(), "{qpn:#x} routed twice");
                }
                Action::Route { qpn, to: None } => {
                    routes.remove(qpn);
                }
                Action::CmService { to: Some(t), .. } | Action::CmSlot { to: Some(t), .. } => {
                    assert!(c.members.contains_key(t), "CM route to gone member {t}");
                }
                _ => {}
            }
        }
        assert_eq!(routes, c.theirs);
        for (q, t) in &c.theirs {
            assert!(c.members[t].qpns.contains(q));
            assert!(!c.mine.contains(q), "{q:#x} is the owner's and a member's");
        }
        let held: usize = c.members.values().map(|m| m.qpns.len()).sum();
        assert_eq!(held, c.theirs.len());
        for (s, t) in &c.slots {
            assert!(!matches!(*s, 0 | 1 | 0xFF) && *s != c.my_slot, "slot {s}");
            assert!(c.members.contains_key(t));
        }
        for m in c.members.values().filter(|m| m.slot != 0) {
            assert!(c.slots.contains_key(&m.slot));
        }
    }
}
