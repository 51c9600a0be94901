//! The CM state machine: two agents over a simulated network (with loss, duplication and
//! reordering), a silent peer, the REJ and MRA paths, SIDR, a LAP, noise, and rxe's own
//! messages from `rping.pcap` answered as rxe answered them.

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use softrdma_proto::Instant;
use softrdma_proto::cm::{
    COLD_REJ_RESENDS, CmAgent, CmConfig, CmEvent, CmState, REJ_RETRY_WAIT, RELISTEN_GRACE,
    cm_timeout,
};
use softrdma_wire::cm::{
    Addressee, CmMad, CmMessage, IpCmHeader, PathRepr, PrivateData, RepRepr, ReqRepr, SidrRepRepr,
    SidrReqRepr, ap_status, ip_service_id, port_space, rej_reason, sidr_status,
};
use std::time::Duration;

const SERVICE: u64 = 0x0000_0000_0106_1c06;
const LATENCY: Duration = Duration::from_micros(10);

fn req(qpn: u32) -> ReqRepr {
    ReqRepr {
        service_id: SERVICE,
        local_qpn: qpn,
        responder_resources: 1,
        initiator_depth: 1,
        // 4.096 µs × 2^10 = 4 ms: tests run on simulated time anyway.
        remote_cm_response_timeout: 10,
        starting_psn: 0x123456,
        local_cm_response_timeout: 10,
        retry_count: 7,
        pkey: 0xFFFF,
        path_mtu: 3,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        private_data: PrivateData::from_slice(b"hello").unwrap(),
        ..ReqRepr::default()
    }
}

fn rep(qpn: u32) -> RepRepr {
    RepRepr {
        local_qpn: qpn,
        starting_psn: 0x654321,
        responder_resources: 1,
        initiator_depth: 1,
        target_ack_delay: 15,
        rnr_retry_count: 7,
        ..RepRepr::default()
    }
}

fn agent(guid: u64, seed: u64) -> CmAgent<u8> {
    CmAgent::new(
        CmConfig {
            ca_guid: guid,
            packet_lifetime: Duration::from_micros(50),
            ..CmConfig::default()
        },
        seed,
    )
}

/// Two agents, 0 and 1, each the other's peer, over a network that may lose, duplicate
/// and reorder MADs; a consumer on each side that answers every event as rdma_cm would.
struct Pair {
    a: [CmAgent<u8>; 2],
    now: Instant,
    wire: Vec<(Instant, usize, [u8; 256])>,
    rng: ChaCha8Rng,
    loss: f64,
    dup: f64,
    reorder: f64,
    events: [Vec<CmEvent<u8>>; 2],
    /// The consumers answer: 1 accepts REQs, 0 sends RTU on REP, both answer DREQs.
    auto: bool,
}

impl Pair {
    fn new(seed: u64) -> Self {
        let mut b = agent(0xB, seed ^ 1);
        b.listen(SERVICE).unwrap();
        Self {
            a: [agent(0xA, seed), b],
            now: Instant::from_nanos(1_000_000),
            wire: vec![],
            rng: ChaCha8Rng::seed_from_u64(seed),
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            events: [vec![], vec![]],
            auto: true,
        }
    }

    /// Moves what the agents sent onto the wire and hands them their events.
    fn collect(&mut self) {
        for side in 0..2 {
            // Events first: the consumer's answers are sent with the rest.
            while let Some(ev) = self.a[side].poll_event() {
                if self.auto {
                    self.consume(side, &ev);
                }
                self.events[side].push(ev);
            }
            while let Some((to, mad)) = self.a[side].poll_transmit() {
                assert_eq!(usize::from(to), 1 - side, "sent to its peer");
                let copies = if self.rng.random_bool(self.loss) {
                    0
                } else if self.rng.random_bool(self.dup) {
                    2
                } else {
                    1
                };
                for _ in 0..copies {
                    let extra = if self.rng.random_bool(self.reorder) {
                        Duration::from_micros(self.rng.random_range(0..200))
                    } else {
                        Duration::ZERO
                    };
                    self.wire
                        .push((self.now.add(LATENCY + extra), 1 - side, mad.to_bytes()));
                }
            }
        }
    }

    fn consume(&mut self, side: usize, ev: &CmEvent<u8>) {
        let now = self.now;
        let ag = &mut self.a[side];
        match ev {
            CmEvent::ReqReceived { id, .. } => ag.accept(now, *id, rep(0x200)).unwrap(),
            CmEvent::RepReceived { id, .. } => ag.ready_to_use(*id, b"rtu").unwrap(),
            CmEvent::DreqReceived { id, .. } => ag.disconnect(now, *id, &[]).unwrap(),
            _ => {}
        }
    }

    /// Runs until nothing is in flight and no timer is due before `until`.
    fn run(&mut self, until: Instant) {
        for _ in 0..1_000_000 {
            self.collect();
            let next_wire = self.wire.iter().map(|w| w.0).min();
            let next_timer = self.a.iter().filter_map(|a| a.poll_timeout()).min();
            let Some(next) = [next_wire, next_timer].into_iter().flatten().min() else {
                return;
            };
            if next > until {
                return;
            }
            self.now = self.now.max(next);
            let (due, later): (Vec<_>, Vec<_>) = self.wire.drain(..).partition(|w| w.0 <= self.now);
            self.wire = later;
            for (_, to, bytes) in due {
                self.a[to].handle_mad(self.now, (1 - to) as u8, &bytes);
            }
            for a in &mut self.a {
                a.handle_timeout(self.now);
            }
        }
        panic!("the simulation did not settle");
    }

    fn after(&self, d: Duration) -> Instant {
        self.now.add(d)
    }
}

fn has(evs: &[CmEvent<u8>], f: impl Fn(&CmEvent<u8>) -> bool) -> bool {
    evs.iter().any(f)
}

#[test]
fn a_connection_forms_carries_private_data_and_ends_through_timewait() {
    let mut p = Pair::new(1);
    p.auto = false;
    let id = p.a[0].connect(p.now, 1, req(0x100));
    p.run(p.after(Duration::from_millis(1)));
    let Some(CmEvent::ReqReceived { id: pid, req, from }) = p.events[1].first().cloned() else {
        panic!("no REQ at the passive side: {:?}", p.events[1]);
    };
    assert_eq!((from, req.local_qpn, req.local_comm_id), (0, 0x100, id));
    assert_eq!(&req.private_data.as_bytes()[..5], b"hello");
    assert_eq!(p.a[1].state(pid), Some(CmState::ReqRcvd));
    p.a[1].accept(p.now, pid, rep(0x200)).unwrap();
    p.run(p.after(Duration::from_millis(1)));
    let Some(CmEvent::RepReceived { rep: r, .. }) = p.events[0].first().cloned() else {
        panic!("no REP: {:?}", p.events[0]);
    };
    assert_eq!(
        (r.local_qpn, r.remote_comm_id, r.local_comm_id),
        (0x200, id, pid)
    );
    assert_eq!(p.a[0].state(id), Some(CmState::RepRcvd));
    p.a[0].ready_to_use(id, b"go").unwrap();
    p.run(p.after(Duration::from_millis(1)));
    assert_eq!(p.a[0].state(id), Some(CmState::Established));
    assert_eq!(p.a[1].state(pid), Some(CmState::Established));
    assert!(has(
        &p.events[1],
        |e| matches!(e, CmEvent::Established { private_data, .. } if private_data.starts_with(b"go"))
    ));

    // The passive side disconnects; the active side answers.
    p.a[1].disconnect(p.now, pid, b"bye").unwrap();
    p.run(p.after(Duration::from_millis(1)));
    assert!(has(
        &p.events[0],
        |e| matches!(e, CmEvent::DreqReceived { private_data, .. } if private_data.starts_with(b"bye"))
    ));
    p.a[0].disconnect(p.now, id, &[]).unwrap();
    p.run(p.after(Duration::from_millis(1)));
    assert!(has(&p.events[1], |e| matches!(
        e,
        CmEvent::Disconnected {
            timed_out: false,
            ..
        }
    )));
    assert_eq!(p.a[0].state(id), Some(CmState::TimeWait));
    assert_eq!(p.a[1].state(pid), Some(CmState::TimeWait));
    // A second disconnect sends nothing; a verb that cannot apply is refused by name.
    assert_eq!(p.a[0].disconnect(p.now, id, &[]), Ok(()));
    assert!(p.a[0].poll_transmit().is_none());
    let e = p.a[0].accept(p.now, id, rep(1)).unwrap_err();
    assert!(e.to_string().contains("TimeWait"), "{e}");
    p.run(p.after(Duration::from_secs(1)));
    assert!(p.a[0].is_empty() && p.a[1].is_empty(), "TIMEWAIT ends");
    assert!(has(&p.events[0], |e| matches!(
        e,
        CmEvent::TimewaitExit { .. }
    )));
    for a in &p.a {
        let c = a.counters();
        assert_eq!(
            (c.malformed, c.unexpected, c.retransmitted, c.timeouts),
            (0, 0, 0, 0)
        );
    }
}

#[test]
fn a_req_nobody_listens_for_is_rejected_with_invalid_service_id() {
    let mut p = Pair::new(2);
    let mut r = req(0x100);
    r.service_id = ip_service_id(port_space::TCP, 9);
    let id = p.a[0].connect(p.now, 1, r);
    // The REJ comes through after the requester's cold resends (COLD_REJ_RESENDS).
    p.run(p.after(Duration::from_secs(1)));
    let rejected = p.events[0].iter().find_map(|e| match e {
        CmEvent::Rejected { id: i, rej } if *i == id => Some(rej.reason),
        _ => None,
    });
    assert_eq!(rejected, Some(rej_reason::INVALID_SERVICE_ID));
    assert!(p.a[0].is_empty() && p.a[1].is_empty());
}

#[test]
fn a_silent_peer_gets_every_retry_then_a_timeout_within_the_budget() {
    let mut p = Pair::new(3);
    p.loss = 1.0;
    let start = p.now;
    let r = req(0x100);
    let id = p.a[0].connect(p.now, 1, r);
    p.run(p.after(Duration::from_secs(60)));
    assert!(
        has(
            &p.events[0],
            |e| matches!(e, CmEvent::Timeout { id: i, message: "REQ" } if *i == id)
        ),
        "{:?}",
        p.events[0]
    );
    let c = p.a[0].counters();
    assert_eq!(c.retransmitted, u64::from(r.max_cm_retries));
    assert_eq!(c.timeouts, 1);
    // (retries + 1) waits of the response timeout and two packet lifetimes.
    let wait = cm_timeout(r.remote_cm_response_timeout) + Duration::from_micros(100);
    let budget = wait * (u32::from(r.max_cm_retries) + 1);
    assert_eq!(p.now.since(start), budget);
    assert!(p.a[0].is_empty());
}

#[test]
fn lost_replies_are_sent_again_for_duplicates() {
    // Lose every MAD from the passive side once: its REP is lost, the REQ comes again and
    // the REP is resent at once; then the RTU is lost, the REP is resent by its timer,
    // and the active side resends the RTU.
    let mut p = Pair::new(4);
    let id = p.a[0].connect(p.now, 1, req(0x100));
    p.collect();
    p.run(p.after(LATENCY));
    // The REQ arrived; the consumer accepted: drop the REP.
    p.collect();
    assert_eq!(p.wire.len(), 1, "the REP is on the wire");
    p.wire.clear();
    p.run(p.after(Duration::from_secs(1)));
    assert_eq!(p.a[0].state(id), Some(CmState::Established));
    assert!(
        p.a[1].counters().duplicates >= 1,
        "the resent REQ was seen as one"
    );
}

#[test]
fn an_mra_holds_the_requester_back_for_its_service_timeout() {
    let mut p = Pair::new(5);
    p.auto = false;
    let id = p.a[0].connect(p.now, 1, req(0x100));
    p.run(p.after(Duration::from_millis(1)));
    let Some(CmEvent::ReqReceived { id: pid, .. }) = p.events[1].first().cloned() else {
        panic!()
    };
    // 4.096 µs × 2^14 = 67 ms: far past the REQ's 4 ms timeout.
    p.a[1].mra(pid, 14).unwrap();
    p.run(p.after(Duration::from_millis(50)));
    assert_eq!(p.a[0].state(id), Some(CmState::MraReqRcvd));
    assert_eq!(
        p.a[0].counters().retransmitted,
        0,
        "no resend while the MRA holds"
    );
    p.a[1].accept(p.now, pid, rep(0x200)).unwrap();
    p.run(p.after(Duration::from_millis(1)));
    assert_eq!(p.a[0].state(id), Some(CmState::RepRcvd));
}

#[test]
fn a_lap_is_answered_with_an_unsupported_apr() {
    let mut p = Pair::new(6);
    let id = p.a[0].connect(p.now, 1, req(0x100));
    p.run(p.after(Duration::from_millis(1)));
    let pid = p.events[1]
        .iter()
        .find_map(|e| match e {
            CmEvent::ReqReceived { id, .. } => Some(*id),
            _ => None,
        })
        .unwrap();
    let lap = CmMad {
        tid: 9,
        attr_mod: 0,
        msg: CmMessage::Lap(softrdma_wire::cm::LapRepr {
            local_comm_id: id,
            remote_comm_id: pid,
            remote_qpn: 0x200,
            remote_cm_response_timeout: 10,
            alternate: PathRepr::default(),
            private_data: PrivateData::default(),
        }),
    };
    p.a[1].handle_mad(p.now, 0, &lap.to_bytes());
    let (to, apr) = p.a[1].poll_transmit().expect("an APR");
    assert_eq!(to, 0);
    let CmMessage::Apr(apr) = apr.msg else {
        panic!("{apr:?}")
    };
    assert_eq!(
        (apr.status, apr.remote_comm_id),
        (ap_status::UNSUPPORTED, id)
    );
}

#[test]
fn sidr_resolves_a_service_and_says_when_nobody_serves_it() {
    let mut p = Pair::new(7);
    p.auto = false;
    let sid = ip_service_id(port_space::UDP, 7174);
    p.a[1].listen(sid).unwrap();
    let mk = |service_id| SidrReqRepr {
        request_id: 0,
        pkey: 0xFFFF,
        service_id,
        private_data: PrivateData::default(),
    };
    let rid = p.a[0].sidr_request(p.now, 1, mk(sid));
    p.run(p.after(Duration::from_millis(1)));
    let Some(CmEvent::SidrReqReceived { id, .. }) = p.events[1].first().cloned() else {
        panic!()
    };
    let answer = SidrRepRepr {
        request_id: 0,
        status: sidr_status::VALID,
        info: Default::default(),
        qpn: 0x77,
        service_id: 0,
        qkey: 0x0123_4567,
        private_data: PrivateData::default(),
    };
    p.a[1].sidr_reply(p.now, id, answer).unwrap();
    p.run(p.after(Duration::from_millis(1)));
    let got = p.events[0].iter().find_map(|e| match e {
        CmEvent::SidrRepReceived { id, rep } if *id == rid => {
            Some((rep.qpn, rep.qkey, rep.service_id))
        }
        _ => None,
    });
    assert_eq!(got, Some((0x77, 0x0123_4567, sid)));

    let other = p.a[0].sidr_request(p.now, 1, mk(ip_service_id(port_space::UDP, 1)));
    p.run(p.after(Duration::from_millis(1)));
    let status = p.events[0].iter().find_map(|e| match e {
        CmEvent::SidrRepReceived { id, rep } if *id == other => Some(rep.status),
        _ => None,
    });
    assert_eq!(status, Some(sidr_status::SERVICE_ID_NOT_SUPPORTED));
    p.run(p.after(Duration::from_secs(60)));
    assert!(p.a[0].is_empty() && p.a[1].is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Under loss, duplication and reordering, every connection forms, ends, and leaves
    /// nothing behind, and both sides agree on what happened.
    #[test]
    fn connections_form_and_end_under_loss_duplication_and_reordering(
        seed in any::<u64>(),
        loss in 0.0f64..0.3,
        dup in 0.0f64..0.3,
        reorder in 0.0f64..0.5,
        n in 1usize..6,
    ) {
        let mut p = Pair::new(seed);
        (p.loss, p.dup, p.reorder) = (loss, dup, reorder);
        let ids: Vec<_> = (0..n).map(|i| p.a[0].connect(p.now, 1, req(0x100 + i as u32))).collect();
        p.run(p.after(Duration::from_secs(2)));
        for &id in &ids {
            let st = p.a[0].state(id);
            // Every retry lost is possible at 30 % loss only with vanishing odds; a
            // timeout is then reported, never a hang.
            prop_assert!(
                st == Some(CmState::Established)
                    || has(&p.events[0], |e| matches!(e, CmEvent::Timeout { id: i, .. } if *i == id)),
                "connection {id:#x}: {st:?}"
            );
            if st == Some(CmState::Established) {
                p.a[0].disconnect(p.now, id, &[]).unwrap();
            }
        }
        p.run(p.after(Duration::from_secs(30)));
        prop_assert!(p.a[0].is_empty(), "active side left {}", p.a[0].len());
        prop_assert!(p.a[1].is_empty(), "passive side left {}", p.a[1].len());
    }

    /// Noise and well-formed MADs with random IDs, at an agent holding connections in
    /// every state: never a panic, and whatever does not parse is counted.
    #[test]
    fn noise_never_breaks_the_agent(
        seed in any::<u64>(),
        noise in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 1..20),
        attr in 0x0010u16..=0x001A,
    ) {
        let mut p = Pair::new(seed);
        let id = p.a[0].connect(p.now, 1, req(0x100));
        p.run(p.after(Duration::from_millis(1)));
        let _ = id;
        let mut malformed = 0;
        for n in &noise {
            if CmMad::parse(n).is_err() {
                malformed += 1;
            }
            p.a[1].handle_mad(p.now, 0, n);
            // The same bytes as a CM message of a real attribute.
            let mut mad = [0u8; 256];
            mad[..4].copy_from_slice(&[1, 7, 2, 3]);
            mad[16..18].copy_from_slice(&attr.to_be_bytes());
            let k = n.len().min(232);
            mad[24..24 + k].copy_from_slice(&n[..k]);
            p.a[1].handle_mad(p.now, 0, &mad);
            p.a[0].handle_mad(p.now, 1, &mad);
        }
        prop_assert!(p.a[1].counters().malformed >= malformed);
        p.run(p.after(Duration::from_secs(120)));
    }
}

/// rxe's REQ from `rping.pcap`, given to our agent, is answered with a REP that carries
/// what rxe's did, field for field; where a field is ours to choose it differs, and the
/// assertion says why. rxe's RTU and DREQ (addressed to our IDs instead of rxe's own,
/// which the capture holds) then establish and end the connection, and our DREP matches
/// rxe's.
#[test]
fn rxe_s_req_is_answered_as_rxe_answered_it() {
    let path =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/rping.pcap");
    let bytes = std::fs::read(path).unwrap();
    let mut mads = vec![];
    for rec in softrdma_wire::pcap::PcapReader::new(&bytes).unwrap() {
        let rec = rec.unwrap();
        let Ok(f) = softrdma_wire::RoceFrame::parse_ethernet(rec.data) else {
            continue;
        };
        if f.ib().bth().dest_qp().value() == 1 {
            mads.push(CmMad::parse(f.ib().payload()).unwrap());
        }
    }
    let [rxe_req, rxe_rep, rxe_rtu, rxe_dreq, rxe_drep] = mads[..] else {
        panic!("five CM MADs")
    };
    let CmMessage::Req(req) = rxe_req.msg else {
        panic!()
    };
    let CmMessage::Rep(want) = rxe_rep.msg else {
        panic!()
    };

    let mut us: CmAgent<u8> = CmAgent::new(
        CmConfig {
            ca_guid: 0x5054_00ff_fe77_0002,
            ..CmConfig::default()
        },
        11,
    );
    us.listen(req.service_id).unwrap();
    let now = Instant::from_nanos(1);
    us.handle_mad(now, 3, &rxe_req.to_bytes());
    let Some(CmEvent::ReqReceived { id, req: got, .. }) = us.poll_event() else {
        panic!("the REQ reaches the consumer")
    };
    assert_eq!(*got, req);
    let ip = IpCmHeader::parse(got.private_data.as_bytes()).unwrap();
    assert_eq!(ip.dst.to_string(), "10.77.0.2");
    // What rdma_accept puts in the REP (rdma_cm's choices, as rxe's were: the peer's
    // initiator depth as our responder resources, and back; rxe's ACK delay 15; RNR
    // retry 7); the QPN and PSN are ours to choose, so they are rxe's here to compare.
    let mut r = rep(want.local_qpn);
    r.starting_psn = want.starting_psn;
    r.responder_resources = got.initiator_depth;
    r.initiator_depth = got.responder_resources;
    us.accept(now, id, r).unwrap();
    let (to, mad) = us.poll_transmit().expect("a REP");
    assert_eq!(to, 3);
    let CmMessage::Rep(ours) = mad.msg else {
        panic!()
    };
    assert_eq!(
        mad.tid, rxe_rep.tid,
        "the REQ's transaction ID, as rxe echoed it"
    );
    // The local communication ID is ours to draw (random, as rxe's is).
    assert_ne!(ours.local_comm_id, 0);
    assert_eq!(
        RepRepr {
            local_comm_id: want.local_comm_id,
            ..ours
        },
        want
    );

    // rxe's RTU, to our ID.
    let mut rtu = rxe_rtu;
    if let CmMessage::Rtu(r) = &mut rtu.msg {
        r.remote_comm_id = id;
    }
    us.handle_mad(now, 3, &rtu.to_bytes());
    assert!(matches!(us.poll_event(), Some(CmEvent::Established { .. })));
    let mut dreq = rxe_dreq;
    if let CmMessage::Dreq(d) = &mut dreq.msg {
        d.remote_comm_id = id;
    }
    us.handle_mad(now, 3, &dreq.to_bytes());
    assert!(matches!(
        us.poll_event(),
        Some(CmEvent::DreqReceived { .. })
    ));
    us.disconnect(now, id, &[]).unwrap();
    let (_, drep) = us.poll_transmit().expect("a DREP");
    let CmMessage::Drep(mut ours) = drep.msg else {
        panic!()
    };
    ours.local_comm_id = 0x17ed_98c4;
    assert_eq!(CmMessage::Drep(ours), rxe_drep.msg);
    assert_eq!(us.state(id), Some(CmState::TimeWait));
    assert_eq!(us.counters().unexpected, 0);
}

/// Agent 0 connects to agent 1, which does not listen: 1 ms later nothing has answered;
/// once agent 1 listens, the REQ's resend connects.
fn connects_once_listened(p: &mut Pair) {
    let id = p.a[0].connect(p.now, 1, req(0x100));
    p.run(p.after(Duration::from_millis(1)));
    assert!(p.events[0].is_empty(), "{:?}", p.events[0]);
    p.a[1].listen(SERVICE).unwrap();
    p.run(p.after(Duration::from_secs(1)));
    assert_eq!(p.a[0].state(id), Some(CmState::Established));
}

/// A REQ for a service whose listener has just gone is dropped (its resend finds the
/// next listener, as perftest's `-R` needs); once the grace is over, it is rejected.
#[test]
fn a_req_just_after_the_listener_went_waits_for_the_next_one() {
    let mut p = Pair::new(8);
    p.a[1].unlisten(p.now, SERVICE);
    // Within the grace: no REJ; the listener is back before the REQ's resend.
    connects_once_listened(&mut p);

    // Long after a listener went: rejected (after the requester's cold resends).
    let mut p = Pair::new(9);
    p.a[1].unlisten(p.now, SERVICE);
    p.now = p.now.add(softrdma_proto::cm::RELISTEN_GRACE);
    p.a[0].connect(p.now, 1, req(0x100));
    p.run(p.after(Duration::from_secs(1)));
    assert!(
        has(
            &p.events[0],
            |e| matches!(e, CmEvent::Rejected { rej, .. } if rej.reason == rej_reason::INVALID_SERVICE_ID)
        ),
        "{:?}",
        p.events[0]
    );
}

/// Agents behind one port (one per process of a shared device) tell their MADs apart by
/// the low byte of the IDs they name: every ID an agent draws ends in its tag, and every
/// answer to one of its messages names that ID, so the port's reader can route it.
#[test]
fn an_agents_ids_end_in_its_tag_and_answers_name_them() {
    let t0 = Instant::from_nanos(0);
    let mut active = CmAgent::<u8>::new(CmConfig::default(), 3);
    let mut passive = CmAgent::<u8>::new(CmConfig::default(), 4);
    active.set_id_tag(0xA7);
    passive.set_id_tag(0x5C);
    passive.listen(req(0).service_id).unwrap();
    for i in 0..50 {
        let id = active.connect(t0, 2, req(0x100 + i));
        assert_eq!(id & 0xFF, 0xA7, "{id:#x}");
    }
    let mut answered = 0;
    while let Some((to, mad)) = active.poll_transmit() {
        assert_eq!(to, 2);
        assert_eq!(
            mad.msg.addressee(),
            Some(Addressee::Service(req(0).service_id))
        );
        passive.handle_mad(t0, 1, &mad.to_bytes());
    }
    while let Some(ev) = passive.poll_event() {
        if let CmEvent::ReqReceived { id, .. } = ev {
            assert_eq!(id & 0xFF, 0x5C, "{id:#x}");
            passive.reject(t0, id, 28, &[]).unwrap();
            answered += 1;
        }
    }
    assert_eq!(answered, 50);
    while let Some((_, mad)) = passive.poll_transmit() {
        match mad.msg.addressee() {
            Some(Addressee::Comm(id)) => assert_eq!(id & 0xFF, 0xA7, "{mad:?}"),
            other => panic!("{other:?}"),
        }
    }
}

/// The requester's side of the relisten grace: right after a connection to a peer
/// ended, a REJ "invalid service ID" for a new REQ to it (the same service: perftest's
/// `-R`; or another: qperf's next test) is taken as "not listening yet" and the REQ goes
/// again [`REJ_RETRY_WAIT`] later, so it finds the listener; with no such connection
/// before, it goes again only [`COLD_REJ_RESENDS`] times, and then the REJ comes through.
#[test]
fn a_reconnect_rejected_while_the_peer_relistens_is_sent_again() {
    let mut p = Pair::new(11);
    // One connection, made and ended by both sides.
    let id = p.a[0].connect(p.now, 1, req(0x100));
    p.run(p.after(Duration::from_millis(5)));
    assert_eq!(p.a[0].state(id), Some(CmState::Established));
    p.a[0].disconnect(p.now, id, &[]).unwrap();
    p.run(p.after(Duration::from_millis(5)));
    // The server is a new program that will listen 250 ms from now (and, like Linux's
    // CM, rejects what comes before).
    p.a[1] = agent(0xB, 99);
    let second = p.a[0].connect(p.now, 1, req(0x101));
    p.run(p.after(Duration::from_millis(250)));
    assert!(
        !has(&p.events[0], |e| matches!(e, CmEvent::Rejected { .. })),
        "{:?}",
        p.events[0]
    );
    p.a[1].listen(SERVICE).unwrap();
    p.run(p.after(Duration::from_millis(300)));
    assert_eq!(p.a[0].state(second), Some(CmState::Established));
    // Another service of the same peer, listened on late too.
    let mut other = req(0x103);
    other.service_id = SERVICE + 1;
    let third = p.a[0].connect(p.now, 1, other);
    p.run(p.after(Duration::from_millis(250)));
    assert!(
        !has(&p.events[0], |e| matches!(e, CmEvent::Rejected { .. })),
        "{:?}",
        p.events[0]
    );
    p.a[1].listen(SERVICE + 1).unwrap();
    p.run(p.after(Duration::from_millis(300)));
    assert_eq!(p.a[0].state(third), Some(CmState::Established));

    // A peer never connected to: the REQ goes COLD_REJ_RESENDS more times, then the
    // REJ comes through.
    let mut q = Pair::new(12);
    q.a[1].unlisten(q.now, SERVICE);
    q.now = q.now.add(RELISTEN_GRACE);
    q.a[0].connect(q.now, 1, req(0x102));
    let rejected = |q: &Pair| {
        has(
            &q.events[0],
            |e| matches!(e, CmEvent::Rejected { rej, .. } if rej.reason == rej_reason::INVALID_SERVICE_ID),
        )
    };
    q.run(q.after(REJ_RETRY_WAIT * u32::from(COLD_REJ_RESENDS) - REJ_RETRY_WAIT / 2));
    assert!(!rejected(&q), "{:?}", q.events[0]);
    q.run(q.after(Duration::from_secs(1)));
    assert!(rejected(&q), "{:?}", q.events[0]);
    let c = q.a[0].counters();
    assert_eq!(
        (c.sent, c.retransmitted),
        (1 + u64::from(COLD_REJ_RESENDS), u64::from(COLD_REJ_RESENDS)),
        "{c:?}"
    );
}

/// A service bound and not yet listened on (a program that tells its peer the port
/// before `rdma_listen`, as qperf's server does) drops a REQ instead of rejecting it; the
/// resend finds the listener. Unbound again, it rejects.
#[test]
fn a_req_for_a_bound_port_waits_for_its_listen() {
    let mut p = Pair::new(13);
    p.a[1] = agent(0xB, 98);
    p.a[1].bind(SERVICE);
    connects_once_listened(&mut p);

    let mut q = Pair::new(14);
    q.a[1] = agent(0xB, 97);
    q.a[1].bind(SERVICE);
    q.a[1].unbind(SERVICE);
    q.a[0].connect(q.now, 1, req(0x101));
    q.run(q.after(Duration::from_secs(1)));
    assert!(has(&q.events[0], |e| matches!(e, CmEvent::Rejected { .. })));
}
