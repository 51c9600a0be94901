//! Deterministic tests of the device's own behaviour: two devices on the in-process
//! loopback driver, on a clock the test moves, with no progress thread. Nothing happens
//! unless the test calls it (a post, a poll, a clock step), so each test says exactly what
//! the device must do, with no socket and no sleep.

use crate::datapath::loopback::{Fabric, Loopback};
use crate::*;
use softrdma_wire::Opcode;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

struct End {
    ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
}

struct Rig {
    fabric: Arc<Fabric>,
    clock: Arc<AtomicU64>,
    a: End,
    b: End,
}

const IP_A: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 99, 1));
const IP_B: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 99, 2));

impl Rig {
    /// Two RC ends, connected; `cqe`: B's CQ; `ids`: A's packets carry numbered IPv4 IDs.
    fn new(cqe: usize, ids: Option<u16>) -> Rig {
        Self::with_faults(cqe, ids, None)
    }

    /// [`Rig::new`], with A's packets through the fault injector.
    fn with_faults(cqe: usize, ids: Option<u16>, faults: Option<LinkFaults>) -> Rig {
        let fabric = Fabric::new();
        let clock = Arc::new(AtomicU64::new(1_000_000));
        let end = |addr: IpAddr, port: u16, cqe: usize, ids: Option<u16>, f: Option<LinkFaults>| {
            let mut lo = Loopback::new(fabric.clone(), addr, port);
            if let Some(first) = ids {
                lo = lo.numbering_ipv4_ids(first);
            }
            let datapath: Box<dyn crate::datapath::Datapath> = match f {
                Some(f) => Box::new(crate::datapath::faults::Faulty::new(lo, f)),
                None => Box::new(lo),
            };
            let ctx = Context::rig(&format!("rig{port}"), addr, datapath, clock.clone());
            let pd = ctx.alloc_pd();
            let cq = ctx.create_cq(cqe, None).unwrap();
            let qp = pd.create_qp(QpInitAttr::new(QpType::Rc, &cq)).unwrap();
            let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
            let mr = pd.register_zeroed(64 << 10, access).unwrap();
            End {
                ctx,
                pd,
                cq,
                qp,
                mr,
            }
        };
        let a = end(IP_A, 49152, 64, ids, faults);
        let b = end(IP_B, 49153, cqe, None, None);
        let peer = |e: &End, psn: u32| Peer {
            addr: e.ctx.addr(),
            qpn: e.qp.qp_num(),
            psn: Psn::new(psn),
        };
        a.qp.connect(Psn::new(100), &peer(&b, 200), &ConnectAttr::default())
            .unwrap();
        b.qp.connect(Psn::new(200), &peer(&a, 100), &ConnectAttr::default())
            .unwrap();
        Rig {
            fabric,
            clock,
            a,
            b,
        }
    }

    fn advance(&self, d: Duration) {
        self.clock.fetch_add(d.as_nanos() as u64, Ordering::SeqCst);
    }

    /// A posts a signaled WRITE of `len` bytes into B's region, which the fabric loses.
    fn lose_a_write(&self, len: u32) {
        let op = SendOp::Write {
            remote_addr: self.b.mr.addr(),
            rkey: self.b.mr.rkey(),
        };
        self.a.qp.post_send(wr(1, op, &self.a, len)).unwrap();
        assert_eq!(self.fabric.take(IP_B).len(), 1, "the WRITE, lost");
    }

    /// Moves the clock past the local ACK timeout of ibv_rc_pingpong's 14 (67 ms), which
    /// bounds every timer of a QP with no round-trip sample, and checks that A's next poll
    /// sends the WRITE again.
    fn expect_the_write_again_after_its_timeout(&self) {
        self.advance(Duration::from_millis(70));
        assert!(self.a.cq.poll(1).is_empty());
        assert_eq!(
            self.fabric.opcodes(IP_B),
            [Opcode::RC_RDMA_WRITE_ONLY.0],
            "sent again"
        );
    }
}

fn wr(id: u64, op: SendOp, e: &End, len: u32) -> SendWr {
    SendWr::signaled(id, op, Payload::Sges(softrdma_proto::sg![e.mr.sge(0, len)]))
}

fn recv(e: &End, id: u64) {
    e.qp.post_recv(RecvWr {
        wr_id: id,
        sg_list: softrdma_proto::sg![e.mr.sge(4096, 1024)],
    })
    .unwrap();
}

const SEND_ONLY: u8 = Opcode::RC_SEND_ONLY.0;
const ACK: u8 = Opcode::RC_ACKNOWLEDGE.0;

/// A poller's ACK is deferred, and leaves with its answer: B receives A's SEND through a
/// CQ poll, which holds the ACK back; B's own SEND then carries it, behind the request, in
/// the same send. A poll with nothing to answer sends a deferred ACK at once.
#[test]
fn a_pollers_ack_waits_for_its_answer_and_leaves_behind_it() {
    let r = Rig::new(64, None);
    recv(&r.b, 1);
    recv(&r.a, 2);
    r.a.qp.post_send(wr(10, SendOp::Send, &r.a, 32)).unwrap();
    assert_eq!(r.fabric.opcodes(IP_B), [SEND_ONLY]);
    let wc = r.b.cq.poll(4);
    assert_eq!((wc.len(), wc[0].status), (1, WcStatus::Success));
    assert!(
        r.fabric.opcodes(IP_A).is_empty(),
        "the ACK waits for B's answer"
    );
    r.b.qp.post_send(wr(11, SendOp::Send, &r.b, 32)).unwrap();
    assert_eq!(
        r.fabric.opcodes(IP_A),
        [SEND_ONLY, ACK],
        "the ACK rides behind it"
    );
    // A poller that has seen datagrams come one at a time asks for one per receive (a
    // ping-pong's): the SEND first, B's message.
    let wc = r.a.cq.poll(4);
    assert_eq!((wc.len(), wc[0].wr_id), (1, 2));
    // A's next poll receives B's ACK, which completes A's SEND. A's own deferred ACK is
    // held meanwhile (A's SEND was outstanding: its application may answer next); the
    // poll after, with nothing outstanding, sends it.
    let wc = r.a.cq.poll(4);
    assert_eq!(
        (wc.len(), wc[0].wr_id, wc[0].status),
        (1, 10, WcStatus::Success)
    );
    assert!(r.fabric.opcodes(IP_B).is_empty(), "held for A's answer");
    assert!(r.a.cq.poll(4).is_empty());
    assert_eq!(r.fabric.opcodes(IP_B), [ACK]);
    assert_eq!(r.b.cq.poll(4)[0].wr_id, 11);
}

/// Two ends that send at once each hold the ACK of the other's request for their next
/// one, while their own is outstanding: for at most `POLL_HOLD`, after which a poll sends
/// it alone, and both requests complete.
#[test]
fn held_acks_leave_once_their_hold_is_up() {
    let r = Rig::new(64, None);
    recv(&r.a, 1);
    recv(&r.b, 2);
    r.a.qp.post_send(wr(10, SendOp::Send, &r.a, 8)).unwrap();
    r.b.qp.post_send(wr(11, SendOp::Send, &r.b, 8)).unwrap();
    assert_eq!(r.a.cq.poll(4)[0].wr_id, 1);
    assert_eq!(r.b.cq.poll(4)[0].wr_id, 2);
    for _ in 0..4 {
        assert!(r.a.cq.poll(4).is_empty());
        assert!(r.b.cq.poll(4).is_empty());
    }
    assert!(r.fabric.opcodes(IP_A).is_empty() && r.fabric.opcodes(IP_B).is_empty());
    r.advance(crate::device::POLL_HOLD);
    assert!(r.a.cq.poll(4).is_empty());
    assert_eq!(r.fabric.opcodes(IP_B), [ACK], "A's hold is up");
    assert_eq!(r.b.cq.poll(4)[0].wr_id, 11);
    assert!(r.b.cq.poll(4).is_empty());
    assert_eq!(r.a.cq.poll(4)[0].wr_id, 10);
}

/// A lost WRITE is sent again when, and only when, its timer falls due on the device's
/// clock: polls before that send nothing, a poll after it sends the WRITE again, and the
/// WRITE then completes.
#[test]
fn a_lost_write_goes_again_exactly_when_its_timer_fires() {
    let r = Rig::new(64, None);
    r.a.mr.write(0, b"deterministic").unwrap();
    r.lose_a_write(13);
    for _ in 0..100 {
        assert!(r.a.cq.poll(1).is_empty());
    }
    assert!(r.fabric.opcodes(IP_B).is_empty(), "no timer is due yet");
    r.expect_the_write_again_after_its_timeout();
    assert!(r.b.cq.poll(1).is_empty(), "a WRITE completes nothing at B");
    assert!(
        r.b.cq.poll(1).is_empty(),
        "B's next poll sends its deferred ACK"
    );
    assert_eq!(r.a.cq.poll(1)[0].status, WcStatus::Success);
    assert_eq!(r.b.mr.to_vec()[..13], *b"deterministic");
    let c = r.a.qp.counters();
    assert!(c.retransmits + c.probes >= 1, "{c:?}");
}

/// A CQ with no room loses the completion and raises a CQ error event, as on a NIC: B's
/// first poll receives one datagram (a poller asks for one until a receive fills what it
/// asked for), its second the other two, into a CQ of one entry.
#[test]
fn a_full_cq_loses_the_completion_and_raises_cq_err() {
    let r = Rig::new(1, None);
    for i in 0..3 {
        recv(&r.b, i);
        r.a.qp.post_send(wr(10 + i, SendOp::Send, &r.a, 8)).unwrap();
    }
    assert_eq!(r.b.cq.poll(4).len(), 1);
    assert!(!r.b.cq.overflowed());
    assert_eq!(r.b.cq.poll(4).len(), 1);
    assert!(r.b.cq.overflowed());
    assert_eq!(r.b.cq.lost(), 1);
    let events: Vec<_> = std::iter::from_fn(|| r.b.ctx.poll_async_event()).collect();
    assert!(events.contains(&AsyncEvent::CqError), "{events:?}");
}

/// Packets a "kernel" numbers as a connected socket's are checked by recovering each
/// one's IPv4 ID from its ICRC (across the 16-bit wrap), and a corrupt one is counted and
/// dropped.
#[test]
fn numbered_ipv4_ids_are_recovered_and_corruption_is_caught() {
    let r = Rig::new(64, Some(0xFFF0));
    for i in 0..20 {
        recv(&r.b, i);
        r.a.qp
            .post_send(wr(100 + i, SendOp::Send, &r.a, 16))
            .unwrap();
    }
    let mut got = 0;
    while got < 20 {
        let wc = r.b.cq.poll(32);
        assert!(!wc.is_empty(), "{got} of 20 received");
        got += wc.len();
    }
    let c = r.b.ctx.counters();
    // IDs 0xFFF0 to 0x0003: the one with ID 0 verifies as it is, the 19 others by their
    // recovered ID.
    assert_eq!(c.get(Counter::RcvdIcrcIpId), 19);
    assert_eq!(c.get(Counter::RcvdIcrcErr), 0);
    // One more, with a bit flipped on the way.
    recv(&r.b, 99);
    r.a.qp.post_send(wr(200, SendOp::Send, &r.a, 16)).unwrap();
    let mut d = r.fabric.take(IP_B);
    d[0].0[20] ^= 1;
    r.fabric.put_back(IP_B, d);
    assert!(r.b.cq.poll(4).is_empty());
    assert_eq!(c.get(Counter::RcvdIcrcErr), 1);
    let _ = (&r.a.pd, &r.b.pd);
}

/// The fault injector wraps any driver, the loopback one too, and holds packets back on
/// the device's own clock: a SEND delayed 500 µs waits in the injector until the clock
/// passes that, and the timer pass of A's next poll then lets it go.
#[test]
fn the_fault_injector_holds_a_packet_until_the_device_clock_passes_its_delay() {
    let faults = LinkFaults::parse("delay_us=500").unwrap();
    let r = Rig::with_faults(64, None, Some(faults));
    recv(&r.b, 1);
    r.a.qp.post_send(wr(10, SendOp::Send, &r.a, 8)).unwrap();
    assert!(r.fabric.opcodes(IP_B).is_empty(), "held back");
    r.advance(Duration::from_micros(499));
    assert!(r.a.cq.poll(1).is_empty());
    assert!(r.fabric.opcodes(IP_B).is_empty(), "still held at 499 us");
    r.advance(Duration::from_micros(1));
    assert!(r.a.cq.poll(1).is_empty());
    assert_eq!(r.fabric.opcodes(IP_B), [SEND_ONLY], "released at 500 us");
    assert_eq!(r.b.cq.poll(1)[0].wr_id, 1);
}

/// Idle QPs cost the device's timers nothing: with 10,000 QPs that have no deadline beside
/// one whose WRITE was lost, the timer pass that resends it locks that one QP, not 10,001
/// (the sweep this replaced locked every QP on every pass).
#[test]
fn ten_thousand_idle_qps_cost_the_device_timers_nothing() {
    let r = Rig::new(64, None);
    let idle: Vec<QueuePair> = (0..10_000)
        .map(|_| {
            r.a.pd
                .create_qp(QpInitAttr::new(QpType::Rc, &r.a.cq))
                .unwrap()
        })
        .collect();
    r.lose_a_write(8);
    let visits = || r.a.ctx.dev().timer_visits.load(Ordering::Relaxed);
    assert_eq!(visits(), 0);
    r.expect_the_write_again_after_its_timeout();
    assert!(visits() <= 2, "the timer pass locked {} QPs", visits());
    drop(idle);
}

/// When a poller stops, the progress thread's next pass sends the ACKs it deferred: B
/// receives A's SEND through a poll (the ACK waits for an answer that never comes), and
/// the pass, which a device runs at the latest a poller's grace later, sends it.
#[test]
fn the_progress_pass_sends_what_a_poller_that_stopped_deferred() {
    let r = Rig::new(64, None);
    recv(&r.b, 1);
    r.a.qp.post_send(wr(10, SendOp::Send, &r.a, 8)).unwrap();
    assert_eq!(r.b.cq.poll(1)[0].wr_id, 1);
    assert!(r.fabric.opcodes(IP_A).is_empty(), "deferred");
    assert!(
        !r.b.ctx.dev().progress_pass(false, false),
        "nothing to receive"
    );
    assert_eq!(r.fabric.opcodes(IP_A), [ACK]);
    assert_eq!(r.a.cq.poll(1)[0].wr_id, 10);
}

/// A thread that blocks for a CQ event sends the ACKs its polls deferred before it
/// sleeps: no send of its will carry them, and the peer may wait for them (an
/// event-driven ping-pong waits for its send completion). Before, they waited for the
/// progress thread's pass, a poller's grace later (200 us a turn).
#[test]
fn a_thread_that_blocks_for_a_cq_event_sends_its_deferred_acks_first() {
    let r = Rig::new(64, None);
    let chan = r.b.ctx.create_comp_channel().unwrap();
    let _cq = r.b.ctx.create_cq(4, Some(&chan)).unwrap();
    recv(&r.b, 1);
    r.a.qp.post_send(wr(10, SendOp::Send, &r.a, 8)).unwrap();
    assert_eq!(r.b.cq.poll(1)[0].wr_id, 1);
    assert!(r.fabric.opcodes(IP_A).is_empty(), "deferred");
    assert!(
        chan.get_cq_event(Some(Duration::from_millis(1)))
            .unwrap()
            .is_none()
    );
    assert_eq!(r.fabric.opcodes(IP_A), [ACK], "sent before the wait");
    assert_eq!(r.a.cq.poll(1)[0].wr_id, 10);
}

/// A poll that returns a QP's last awaited completion gives the socket back to the
/// progress thread at once, if the peer writes that QP's memory and has not answered its
/// last send yet (the application then waits on memory, not on the CQ: perftest's latency
/// tests); a QP whose memory nobody writes keeps the socket with its poller, who is likely
/// to poll again at once, and so does one whose answer came with the completion (its
/// application finds its memory written and posts again).
#[test]
fn a_poller_gives_the_socket_back_when_it_will_wait_on_memory() {
    let r = Rig::new(64, None);
    let write = |from: &End, to: &End, id: u64| {
        let op = SendOp::Write {
            remote_addr: to.mr.addr(),
            rkey: to.mr.rkey(),
        };
        from.qp.post_send(wr(id, op, from, 8)).unwrap();
    };
    // Polls both ends until `n` completions came (B's deferred ACKs leave with its polls).
    let complete = |n: usize| {
        let mut got = Vec::new();
        for _ in 0..8 {
            got.extend(r.b.cq.poll(4));
            got.extend(r.a.cq.poll(4));
            if got.len() >= n {
                break;
            }
        }
        assert_eq!(got.len(), n, "{got:?}");
    };
    // A sends to B: A's QP was never written, so A's poller keeps the socket.
    recv(&r.b, 9);
    r.a.qp.post_send(wr(1, SendOp::Send, &r.a, 8)).unwrap();
    complete(2);
    assert!(
        !r.a.ctx.dev().pollers_released(),
        "a sender keeps the socket"
    );

    // Polls both ends until A's next completion; whether A then gave the socket back.
    let released_at_completion = || {
        for _ in 0..8 {
            r.b.cq.poll(4);
            if !r.a.cq.poll(4).is_empty() {
                return r.a.ctx.dev().pollers_released();
            }
        }
        panic!("A's WRITE did not complete");
    };
    // B writes A's memory, and that is done before A's next WRITE: when it completes,
    // nothing more is awaited and no answer came, and the poll that returns it gives the
    // socket back.
    write(&r.b, &r.a, 2);
    complete(1);
    write(&r.a, &r.b, 3);
    assert!(
        released_at_completion(),
        "A, written and awaiting nothing, gave the socket back"
    );
    // Another WRITE in flight: A awaits its completion, and its polls keep the socket.
    write(&r.a, &r.b, 4);
    assert!(r.a.cq.poll(1).is_empty());
    assert!(!r.a.ctx.dev().pollers_released());
    assert!(released_at_completion());

    // A ping-pong: B receives A's WRITE by polling and answers it with its own, which
    // carries the ACK. A's poll drains the answer with the ACK, and keeps the socket: its
    // application finds its memory written and posts again.
    write(&r.a, &r.b, 5);
    assert!(r.b.cq.poll(4).is_empty());
    assert!(
        r.fabric.opcodes(IP_A).is_empty(),
        "B's ACK waits for its answer"
    );
    write(&r.b, &r.a, 6);
    assert_eq!(
        r.fabric.opcodes(IP_A),
        [Opcode::RC_RDMA_WRITE_ONLY.0, ACK],
        "the ACK rides behind the answer"
    );
    assert!(!released_at_completion(), "answered, A keeps the socket");

    // B's WRITE completes (A's next poll sends the ACK it held). A's next WRITE is
    // unanswered again: its completion gives the socket back.
    complete(1);
    write(&r.a, &r.b, 7);
    assert!(released_at_completion(), "a new send awaits a new answer");

    // A polls with nothing awaited: it watches for WRITEs by polling, and from now on
    // keeps the socket after its completions too.
    assert!(r.a.cq.poll(1).is_empty());
    write(&r.a, &r.b, 8);
    assert!(
        !released_at_completion(),
        "a polling waiter keeps the socket"
    );
}
