//! The control plane without processes: each rule on its own, then hostile records in
//! any order (proptest), with the routes its actions set held to who holds what.

use super::*;
use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::StdRng;

fn rng() -> StdRng {
    StdRng::seed_from_u64(7)
}

/// An owner's control plane with members `ts`, each said hello.
fn owner(ts: &[MemberId]) -> (Control, Instant, StdRng) {
    let mut c = Control::new(0xE0, true, 0, 0);
    let now = Instant::now();
    let mut r = rng();
    for &t in ts {
        c.accepted(t, t as i32);
        let hello = Msg::Hello {
            version: VERSION,
            pid: t as u32,
            ep: t as u64,
        };
        let acts = c.record(now, &mut r, t, &hello.encode(), 1);
        assert!(
            matches!(acts[0], Action::Welcome { to, .. } if to == t),
            "{acts:?}"
        );
    }
    (c, now, r)
}

/// The answer `acts` send to `t`.
fn answer(acts: &[Action], t: MemberId) -> Option<&Msg> {
    acts.iter().find_map(|a| match a {
        Action::Send { to, msg } if *to == t => Some(msg),
        _ => None,
    })
}

fn ask(c: &mut Control, now: Instant, r: &mut StdRng, t: MemberId, m: Msg) -> Vec<Action> {
    c.record(now, r, t, &m.encode(), 0)
}

/// Every slot but 0, 1 (QP1's), 0xFF (the multicast QPN's), the owner's own and a
/// retired one is granted once, each to its member; then none is left.
#[test]
fn slots_are_granted_once_and_never_a_retired_one() {
    let mut c = Control::new(0, true, 7, 0);
    let (now, mut r) = (Instant::now(), rng());
    c.retire_slot(now, 42);
    assert_eq!(c.grant_slot(now, &mut r, 500, 1), 0, "QP1's slot");
    assert_eq!(
        c.grant_slot(now, &mut r, 500, 0xFF),
        0,
        "the multicast QPN's slot"
    );
    let granted: Vec<u8> = (0..251).map(|t| c.grant_slot(now, &mut r, t, 0)).collect();
    assert_eq!(c.grant_slot(now, &mut r, 999, 0), 0, "none left");
    assert_eq!(
        c.grant_slot(now, &mut r, 999, 42),
        0,
        "a retired slot is refused by name too"
    );
    // A member asking again for its own slot (after a change of owner) keeps it.
    assert_eq!(c.grant_slot(now, &mut r, 3, granted[3]), granted[3]);
    let mut got = granted;
    got.sort_unstable();
    let want: Vec<u8> = (2..=254).filter(|s| ![7, 42].contains(s)).collect();
    assert_eq!(got, want);
}

/// QPNs carry their process's slot in their low byte, and none is drawn with a
/// retired slot (a gone owner's, whose newest QPNs no file may list).
#[test]
fn qpns_carry_their_slot_and_never_a_retired_one() {
    let mut c = Control::new(0, true, 9, 0);
    let (now, mut r) = (Instant::now(), rng());
    for _ in 0..1000 {
        assert_eq!(c.draw(now, &mut r, 9) & 0xFF, 9);
    }
    c.retire_slot(now, 0);
    c.slots.insert(5, 1);
    for _ in 0..1000 {
        let q = c.draw(now, &mut r, 0);
        assert!(q > 1 && ![0, 5].contains(&(q & 0xFF)), "{q:#x}");
    }
}

/// A hello of another version, or without its forwarding pair, is refused and closed;
/// so is any request before a hello, and a record that does not parse.
#[test]
fn a_bad_hello_or_a_request_before_one_is_refused_and_closed() {
    let mut c = Control::new(0, true, 0, 0);
    let (now, mut r) = (Instant::now(), rng());
    for (t, rec, fds) in [
        (
            1,
            Msg::Hello {
                version: VERSION + 1,
                pid: 1,
                ep: 0,
            }
            .encode(),
            1,
        ),
        (
            2,
            Msg::Hello {
                version: VERSION,
                pid: 2,
                ep: 0,
            }
            .encode(),
            0,
        ),
    ] {
        c.accepted(t, t as i32);
        let acts = c.record(now, &mut r, t, &rec, fds);
        assert!(
            matches!(answer(&acts, t), Some(Msg::Refused { .. })),
            "{acts:?}"
        );
        assert!(
            acts.contains(&Action::Close { to: t, why: None }),
            "{acts:?}"
        );
        assert!(!c.members.contains_key(&t));
    }
    c.accepted(3, 3);
    let acts = ask(&mut c, now, &mut r, 3, Msg::Alloc);
    assert!(
        matches!(&acts[0], Action::Close { to: 3, why: Some(w) } if w.contains("unexpected Alloc")),
        "{acts:?}"
    );
    assert!(
        c.theirs.is_empty(),
        "no QPN for a member that did not say hello"
    );
    c.accepted(4, 4);
    let acts = c.record(now, &mut r, 4, b"SRDM\xEEjunk", 0);
    assert!(
        matches!(&acts[0], Action::Close { to: 4, why: Some(w) } if w.contains("not a softrdma")),
        "{acts:?}"
    );
}

/// A member's QPN carries its slot, is routed to it, is located at its endpoint, and
/// goes into quarantine when freed or when the member hangs up: its routes, slot and
/// listens go with it, and a later registration of its QPNs is refused.
#[test]
fn a_members_qpns_are_routed_to_it_and_quarantined_when_it_goes() {
    let (mut c, now, mut r) = owner(&[10, 11]);
    let acts = ask(&mut c, now, &mut r, 10, Msg::Steer(0));
    let Some(Msg::Slot {
        slot,
        owner: 0,
        join: true,
    }) = answer(&acts, 10).cloned()
    else {
        panic!("{acts:?}");
    };
    assert!(acts.contains(&Action::CmSlot { slot, to: Some(10) }));
    let acts = ask(&mut c, now, &mut r, 10, Msg::Alloc);
    let Some(&Msg::Qpn(q)) = answer(&acts, 10) else {
        panic!("{acts:?}");
    };
    assert_eq!(q & 0xFF, u32::from(slot));
    assert!(acts.contains(&Action::Route {
        qpn: q,
        to: Some(10)
    }));
    let acts = ask(&mut c, now, &mut r, 11, Msg::Locate(q));
    assert_eq!(answer(&acts, 11), Some(&Msg::Located(10)));
    let acts = ask(&mut c, now, &mut r, 10, Msg::Alloc);
    let Some(&Msg::Qpn(q2)) = answer(&acts, 10) else {
        panic!("{acts:?}");
    };
    let acts = ask(&mut c, now, &mut r, 10, Msg::Free(q2));
    assert_eq!(acts, vec![Action::Route { qpn: q2, to: None }]);
    // Another member cannot free it.
    assert!(ask(&mut c, now, &mut r, 11, Msg::Free(q)).is_empty());
    ask(&mut c, now, &mut r, 10, Msg::CmListen(0x106));
    let acts = c.hang_up(now, &mut r, 10);
    for want in [
        Action::Route { qpn: q, to: None },
        Action::CmSlot { slot, to: None },
        Action::CmService {
            sid: 0x106,
            to: None,
            ended: None,
        },
    ] {
        assert!(acts.contains(&want), "{want:?} missing from {acts:?}");
    }
    let acts = ask(
        &mut c,
        now,
        &mut r,
        11,
        Msg::Register(vec![q, q2, 0, 1, 1 << 24, 0x1234]),
    );
    assert_eq!(
        answer(&acts, 11),
        Some(&Msg::Registered(vec![q, q2, 0, 1, 1 << 24])),
        "quarantined, reserved and out-of-range QPNs are refused"
    );
    assert_eq!(c.theirs.get(&0x1234), Some(&11));
    // After the quarantine they may be drawn and registered again.
    let later = now + QUARANTINE + Duration::from_secs(1);
    let acts = ask(&mut c, later, &mut r, 11, Msg::Register(vec![q]));
    assert_eq!(answer(&acts, 11), Some(&Msg::Registered(vec![])));
}

/// One listener per CM service across the device: a second member, or the owner, is
/// refused while the first listens; once it stops, the service is free again (its REQs
/// still go to it for a grace, which the route's `ended` carries).
#[test]
fn a_cm_service_has_one_listener_on_the_device() {
    let (mut c, now, mut r) = owner(&[20, 21]);
    let acts = ask(&mut c, now, &mut r, 20, Msg::CmListen(0x1AB));
    assert_eq!(answer(&acts, 20), Some(&Msg::CmListened(true)));
    assert!(acts.contains(&Action::DeliverWaiting { sid: 0x1AB, to: 20 }));
    let acts = ask(&mut c, now, &mut r, 21, Msg::CmListen(0x1AB));
    assert_eq!(answer(&acts, 21), Some(&Msg::CmListened(false)));
    assert!(
        !c.listen_here(0x1AB),
        "the owner's own listen is refused too"
    );
    assert!(
        c.may_hold_req(0x2CD),
        "a REQ for a service nobody serves may wait"
    );
    let acts = ask(&mut c, now, &mut r, 20, Msg::CmUnlisten(0x1AB));
    assert_eq!(
        acts,
        vec![Action::CmService {
            sid: 0x1AB,
            to: Some(20),
            ended: Some(now)
        }]
    );
    assert!(c.listen_here(0x1AB));
    assert!(!c.may_hold_req(0x1AB), "the owner listens on it now");
    let acts = ask(&mut c, now, &mut r, 21, Msg::CmListen(0x1AB));
    assert_eq!(
        answer(&acts, 21),
        Some(&Msg::CmListened(false)),
        "the owner's now"
    );
}

/// The steering program follows the probe rounds: a member steered as its slot is
/// probed at once and again a little later; the program routes its slot to the index
/// its socket reported, and a member that reports two indexes in one round is left out.
#[test]
fn the_steering_program_follows_the_probes() {
    let (mut c, now, mut r) = owner(&[30, 31]);
    let acts = ask(&mut c, now, &mut r, 30, Msg::Steer(0));
    let Some(&Msg::Slot { slot, .. }) = answer(&acts, 30) else {
        panic!("{acts:?}");
    };
    let acts = ask(&mut c, now, &mut r, 30, Msg::Steering(slot));
    let Some(Action::Probe { count: 2, nonce }) = acts
        .iter()
        .find(|a| matches!(a, Action::Probe { .. }))
        .cloned()
    else {
        panic!("{acts:?}");
    };
    assert!(c.probe_due().is_some());
    assert!(c.probed_at(OWN, 0, nonce).contains(&Action::Install {
        own: 0,
        routes: vec![]
    }));
    c.installed(0, vec![]);
    let acts = ask(&mut c, now, &mut r, 30, Msg::Probed { index: 1, nonce });
    assert_eq!(
        acts,
        vec![Action::Install {
            own: 0,
            routes: vec![(slot, 1)]
        }]
    );
    c.installed(0, vec![(slot, 1)]);
    // A stale round's report changes nothing.
    assert!(
        ask(
            &mut c,
            now,
            &mut r,
            30,
            Msg::Probed {
                index: 0,
                nonce: nonce ^ 1
            }
        )
        .is_empty()
    );
    // Two indexes in one round: hashed, not steered.
    let acts = ask(&mut c, now, &mut r, 30, Msg::Probed { index: 0, nonce });
    assert_eq!(
        acts,
        vec![Action::Install {
            own: 0,
            routes: vec![]
        }]
    );
    // An unsteered member's reports are ignored.
    assert!(ask(&mut c, now, &mut r, 31, Msg::Probed { index: 1, nonce }).is_empty());
    // The round comes again when due.
    assert!(c.tick(now, &mut r).is_empty());
    let later = now + PROBE_AGAIN;
    assert!(matches!(
        c.tick(later, &mut r)[..],
        [Action::Probe { count: 2, .. }]
    ));
    assert_eq!(c.probe_due(), None);
}

/// What a hostile member may send.
fn record() -> impl Strategy<Value = (Vec<u8>, usize)> {
    let q = prop_oneof![
        0u32..4,
        any::<u32>(),
        (0u32..64).prop_map(|x| x << 8 | 0x42)
    ];
    let msg = prop_oneof![
        (0u32..8, any::<u64>()).prop_map(|(v, ep)| Msg::Hello {
            version: VERSION + v % 2 * v,
            pid: 1,
            ep
        }),
        Just(Msg::Alloc),
        q.clone().prop_map(Msg::Free),
        q.clone().prop_map(Msg::Locate),
        proptest::collection::vec(q, 0..8).prop_map(Msg::Register),
        any::<u8>().prop_map(Msg::Steer),
        any::<u8>().prop_map(Msg::Steering),
        (0u32..4, any::<u64>()).prop_map(|(index, nonce)| Msg::Probed { index, nonce }),
        Just(Msg::Leave),
        (0u64..4).prop_map(Msg::CmListen),
        (0u64..4).prop_map(Msg::CmUnlisten),
        Just(Msg::Left),
        any::<u64>().prop_map(Msg::Located),
    ];
    prop_oneof![
        8 => (msg, 0usize..3).prop_map(|(m, fds)| (m.encode(), fds)),
        1 => (proptest::collection::vec(any::<u8>(), 0..40), 0usize..2),
    ]
}

#[derive(Debug, Clone)]
enum Event {
    Accept,
    Record(usize, Vec<u8>, usize),
    HangUp(usize),
    DrawMine,
    FreeMine(usize),
    Listen(u64),
    Wait(u64),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        1 => Just(Event::Accept),
        10 => (0usize..6, record()).prop_map(|(t, (rec, fds))| Event::Record(t, rec, fds)),
        1 => (0usize..6).prop_map(Event::HangUp),
        1 => Just(Event::DrawMine),
        1 => (0usize..8).prop_map(Event::FreeMine),
        1 => (0u64..4).prop_map(Event::Listen),
        1 => (0u64..200).prop_map(Event::Wait),
    ]
}

proptest! {
    /// Whatever members send, in any order: nothing panics; the routes its actions set
    /// are exactly who holds which QPN; no QPN is held twice, drawn from quarantine or
    /// outside 2..2^24; every slot is granted to one member; nothing is sent to a member
    /// after it is closed.
    #[test]
    fn hostile_records_keep_every_qpn_with_one_holder(events in proptest::collection::vec(event(), 1..120)) {
        let mut c = Control::new(0xE0, true, 0, 0);
        let mut now = Instant::now();
        let mut r = rng();
        let mut accepted = 0usize;
        let mut routes: HashMap<u32, MemberId> = HashMap::new();
        let mut closed: HashSet<MemberId> = HashSet::new();
        let mut mine_list: Vec<u32> = Vec::new();
        for e in events {
            let quarantined = c.quarantined.clone();
            let acts = match e {
                Event::Accept => {
                    c.accepted(accepted, 100 + accepted as i32);
                    accepted += 1;
                    Vec::new()
                }
                Event::Record(t, rec, fds) => c.record(now, &mut r, t, &rec, fds),
                Event::HangUp(t) => {
                    if c.members.contains_key(&t) {
                        closed.insert(t);
                    }
                    c.hang_up(now, &mut r, t)
                }
                Event::DrawMine => {
                    let q = c.draw_mine(now, &mut r);
                    prop_assert!(!quarantined.contains(&q) && q > 1 && q <= 0xFF_FFFF);
                    prop_assert!(!routes.contains_key(&q), "{q:#x} is a member's");
                    mine_list.push(q);
                    Vec::new()
                }
                Event::FreeMine(i) => {
                    if let Some(q) = mine_list.get(i).copied() {
                        mine_list.retain(|x| *x != q);
                        prop_assert!(c.free_mine(now, q, true));
                    }
                    Vec::new()
                }
                Event::Listen(sid) => {
                    c.listen_here(sid);
                    Vec::new()
                }
                Event::Wait(ms) => {
                    now += Duration::from_millis(ms * 1000);
                    c.tick(now, &mut r)
                }
            };
            for a in &acts {
                match a {
                    Action::Close { to, .. } => {
                        closed.insert(*to);
                    }
                    Action::Send { to, msg } | Action::Welcome { to, msg } => {
                        prop_assert!(!closed.contains(to) || matches!(msg, Msg::Refused { .. }),
                            "{msg:?} sent to closed member {to}");
                        if let Msg::Qpn(q) = msg {
                            prop_assert!(!quarantined.contains(q), "{q:#x} drawn from quarantine");
                            prop_assert!(*q > 1 && *q <= 0xFF_FFFF, "{q:#x}");
                        }
                    }
                    Action::Route { qpn, to: Some(t) } => {
                        prop_assert!(c.members.contains_key(t), "route to gone member {t}");
                        prop_assert!(routes.insert(*qpn, *t).is_none(), "{qpn:#x} routed twice");
                    }
                    Action::Route { qpn, to: None } => {
                        routes.remove(qpn);
                    }
                    Action::CmService { to: Some(t), .. } | Action::CmSlot { to: Some(t), .. } => {
                        prop_assert!(c.members.contains_key(t), "CM route to gone member {t}");
                    }
                    _ => {}
                }
            }
            prop_assert_eq!(&routes, &c.theirs);
            for (q, t) in &c.theirs {
                prop_assert!(c.members[t].qpns.contains(q));
                prop_assert!(!c.mine.contains(q), "{q:#x} is the owner's and a member's");
            }
            let held: usize = c.members.values().map(|m| m.qpns.len()).sum();
            prop_assert_eq!(held, c.theirs.len());
            for (s, t) in &c.slots {
                prop_assert!(!matches!(*s, 0 | 1 | 0xFF) && *s != c.my_slot, "slot {s}");
                prop_assert!(c.members.contains_key(t));
            }
            for m in c.members.values().filter(|m| m.slot != 0) {
                prop_assert!(c.slots.contains_key(&m.slot));
            }
        }
    }
}
