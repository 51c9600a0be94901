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

proptest! {
    /// Whatever members send, in any order (see `fuzz::drive`, which checks who holds
    /// each QPN, the routes, the quarantine and the slots after every event).
    #[test]
    fn hostile_records_keep_every_qpn_with_one_holder(
        data in proptest::collection::vec(any::<u8>(), 0..2048)
    ) {
        super::fuzz::drive(&data);
    }
}
