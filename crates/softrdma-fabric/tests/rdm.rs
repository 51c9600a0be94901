//! Reliable-datagram endpoints end to end over real UDP sockets on loopback: two
//! endpoints, each on its own softrdma device (127.0.66.x), that connect on first use.

use softrdma_fabric::*;
use std::sync::Arc;
use std::time::Duration;

struct Side {
    ep: Endpoint,
    cq: Arc<CompletionQueue>,
    av: Arc<AddressVector>,
}

fn side(last: u8, port: u16) -> Side {
    let (av, cq) = (Arc::new(AddressVector::new()), CompletionQueue::new());
    let addr = format!("127.0.66.{last}:{port}").parse().unwrap();
    let ep = Endpoint::open(addr, av.clone(), cq.clone()).unwrap();
    Side { ep, cq, av }
}

/// Two sides that know each other: `(a, b, b's address in a's AV, a's in b's)`.
fn pair(last: u8, port: u16) -> (Side, Side, FiAddr, FiAddr) {
    let (a, b) = (side(last, port), side(last + 1, port));
    let to_b = a.av.insert(b.ep.addr());
    let to_a = b.av.insert(a.ep.addr());
    (a, b, to_b, to_a)
}

/// Reads `n` entries from both sides' queues (so that both progress), within 10 s.
fn both(a: &Side, b: &Side, n: usize) -> (Vec<Completion>, Vec<Completion>) {
    let end = std::time::Instant::now() + Duration::from_secs(10);
    let (mut x, mut y) = (Vec::new(), Vec::new());
    while x.len() + y.len() < n {
        x.extend(a.cq.read(16));
        y.extend(b.cq.read(16));
        assert!(
            std::time::Instant::now() < end,
            "{} of {n} completions: {x:?} {y:?}",
            x.len() + y.len()
        );
        std::thread::yield_now();
    }
    (x, y)
}

fn with_data(data: u64) -> RmaOpts {
    RmaOpts {
        data: Some(data),
        ..Default::default()
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
fn messages_go_eagerly_and_by_rendezvous_with_their_data_and_sources() {
    let (a, b, to_b, to_a) = pair(1, 7600);
    let big = pattern(7, 1 << 20);
    b.ep.recv(vec![0; 64], FI_ADDR_UNSPEC, 10).unwrap();
    b.ep.recv(vec![0; 1 << 20], FI_ADDR_UNSPEC, 11).unwrap();
    let data = SendOpts {
        data: Some(0xfeed),
        ..Default::default()
    };
    a.ep.send(to_b, b"hello".to_vec(), 1, data).unwrap();
    a.ep.send(to_b, big.clone(), 2, SendOpts::default())
        .unwrap();
    let (sent, got) = both(&a, &b, 4);
    assert_eq!(sent.len(), 2, "{sent:?}");
    for s in &sent {
        assert_eq!(s.error, 0, "{s:?}");
        assert_ne!(s.flags & flags::SEND, 0);
    }
    let big_back = sent.iter().find(|s| s.context == 2).unwrap();
    assert_eq!(
        big_back.buf.len(),
        1 << 20,
        "the sender's buffer comes back"
    );
    assert_eq!((got[0].context, got[0].len, got[0].error), (10, 5, 0));
    assert_eq!(&got[0].buf[..5], b"hello");
    assert_eq!(got[0].data, Some(0xfeed));
    assert_ne!(got[0].flags & flags::REMOTE_CQ_DATA, 0);
    assert_eq!(
        got[0].src, to_a,
        "the source is the sender's index in b's AV"
    );
    assert_eq!((got[1].context, got[1].len, got[1].error), (11, 1 << 20, 0));
    assert!(got[1].buf == big, "1 MiB arrived whole, by READ");
    // And back the other way, over the connection b accepted.
    a.ep.recv(vec![0; 16], to_b, 20).unwrap();
    b.ep.send(to_a, b"pong".to_vec(), 21, SendOpts::default())
        .unwrap();
    let (got, sent) = both(&a, &b, 2);
    assert_eq!((got[0].context, &got[0].buf[..4]), (20, &b"pong"[..]));
    assert_eq!(sent[0].context, 21);
}

#[test]
fn tags_match_with_ignore_masks_and_unexpected_messages_wait() {
    let (a, b, to_b, _) = pair(3, 7601);
    let tag = |t| SendOpts {
        tag: Some(t),
        ..Default::default()
    };
    // Both come before any receive: they wait, unexpected, and are taken by tag.
    a.ep.send(to_b, b"first".to_vec(), 1, tag(0x100)).unwrap();
    a.ep.send(to_b, pattern(3, 20_000), 2, tag(0x201)).unwrap();
    a.ep.send(to_b, b"untagged".to_vec(), 3, SendOpts::default())
        .unwrap();
    let (sent, _) = both(&a, &b, 2);
    assert!(sent.iter().all(|s| s.error == 0), "{sent:?}");
    // The eager sends completed; the rendezvous one waits for its receive.
    b.ep.trecv(vec![0; 32_000], FI_ADDR_UNSPEC, 0x200, 0xff, 11)
        .unwrap();
    b.ep.trecv(vec![0; 32], FI_ADDR_UNSPEC, 0x100, 0, 12)
        .unwrap();
    b.ep.recv(vec![0; 32], FI_ADDR_UNSPEC, 13).unwrap();
    let (sent, got) = both(&a, &b, 4);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].context, 2);
    let by = |c| got.iter().find(|g| g.context == c).unwrap();
    assert_eq!((by(11).tag, by(11).len), (0x201, 20_000));
    assert!(by(11).buf[..20_000] == pattern(3, 20_000)[..]);
    assert_ne!(by(11).flags & flags::TAGGED, 0);
    assert_eq!(&by(12).buf[..5], b"first");
    assert_eq!(&by(13).buf[..8], b"untagged");
    assert_ne!(by(13).flags & flags::MSG, 0);
}

#[test]
fn too_long_messages_truncate_cancel_gives_the_buffer_back_and_bad_addresses_are_refused() {
    let (a, b, to_b, _) = pair(5, 7602);
    b.ep.recv(vec![0; 4], FI_ADDR_UNSPEC, 1).unwrap();
    b.ep.recv(vec![0; 100], FI_ADDR_UNSPEC, 2).unwrap();
    a.ep.send(to_b, b"too long".to_vec(), 3, SendOpts::default())
        .unwrap();
    a.ep.send(to_b, pattern(1, 50_000), 4, SendOpts::default())
        .unwrap();
    let (_, got) = both(&a, &b, 4);
    assert_eq!(
        (got[0].error, got[0].len, got[0].olen),
        (errno::ETRUNC, 4, 4)
    );
    assert_eq!(&got[0].buf[..], b"too ");
    assert_eq!(
        (got[1].error, got[1].len, got[1].olen),
        (errno::ETRUNC, 100, 49_900)
    );
    assert!(got[1].buf[..] == pattern(1, 50_000)[..100]);

    b.ep.recv(vec![7; 8], FI_ADDR_UNSPEC, 5).unwrap();
    assert!(b.ep.cancel(5));
    assert!(!b.ep.cancel(5));
    let c = b.cq.read(1);
    assert_eq!(
        (c[0].context, c[0].error, &c[0].buf[..]),
        (5, errno::ECANCELED, &[7u8; 8][..])
    );

    let e = a.ep.send(99, vec![1], 6, SendOpts::default()).unwrap_err();
    assert_eq!(e.errno(), 22, "{e}");
    let inject = SendOpts {
        inject: true,
        ..Default::default()
    };
    let e =
        a.ep.send(to_b, vec![0; EAGER_MAX + 1], 7, inject)
            .unwrap_err();
    assert!(e.to_string().contains("inject size"), "{e}");
}

#[test]
fn a_peer_that_is_not_there_fails_the_send_with_eio() {
    let a = side(7, 7603);
    let nobody = a.av.insert("127.0.66.8:7603".parse().unwrap());
    a.ep.send(nobody, b"anyone?".to_vec(), 1, SendOpts::default())
        .unwrap();
    let c = a.cq.wait(1, Duration::from_secs(30));
    assert_eq!(c.len(), 1, "no completion");
    assert_eq!((c[0].context, c[0].error), (1, errno::EIO));
    assert_eq!(&c[0].buf[..], b"anyone?");
}

/// Progress is automatic: a sender that waits on its own CQ alone sees its 1 MiB send
/// complete, for the receiver's endpoint accepts the connection, READs the message and
/// says FIN without its program reading its CQ.
#[test]
fn progress_is_automatic_a_sender_waiting_on_its_own_cq_alone_completes() {
    let (a, b, to_b, _) = pair(9, 7604);
    b.ep.recv(vec![0; 1 << 20], FI_ADDR_UNSPEC, 1).unwrap();
    a.ep.send(to_b, pattern(9, 1 << 20), 2, SendOpts::default())
        .unwrap();
    let sent = a.cq.wait(1, Duration::from_secs(10));
    assert_eq!(
        sent.len(),
        1,
        "the send did not complete while b's program slept"
    );
    assert_eq!((sent[0].context, sent[0].error), (2, 0));
    let got = b.cq.read(1);
    assert_eq!((got[0].context, got[0].len), (1, 1 << 20));
    assert!(got[0].buf == pattern(9, 1 << 20));
}

/// RMA: a WRITE (with 64 bits of remote CQ data, which the target's CQ reports) into a peer's
/// region, a READ of it back, and a WRITE with the wrong key, refused with EACCES.
#[test]
fn writes_and_reads_reach_a_peers_region_by_its_key() {
    let (a, b, to_b, _) = pair(11, 7605);
    let region = b.ep.register(vec![0; 8192], Access::READ_WRITE).unwrap();
    let (addr, key) = (region.addr(), region.key());
    let data = pattern(11, 3000);
    a.ep.write(
        to_b,
        data.clone(),
        (addr + 100, key),
        with_data(0xabcd_0000_1234_5678),
        1,
    )
    .unwrap();
    let (w, remote) = both(&a, &b, 2);
    assert_eq!((w[0].context, w[0].error, w[0].len), (1, 0, 3000), "{w:?}");
    assert_ne!(w[0].flags & flags::WRITE, 0);
    assert_eq!(w[0].buf, data, "the written buffer comes back");
    assert_eq!(
        (remote[0].data, remote[0].len),
        (Some(0xabcd_0000_1234_5678), 3000)
    );
    assert_ne!(remote[0].flags & flags::REMOTE_CQ_DATA, 0);
    assert!(region.to_vec()[100..3100] == data[..]);

    a.ep.read(
        to_b,
        vec![0; 3000],
        (addr + 100, key),
        RmaOpts::default(),
        2,
    )
    .unwrap();
    let r = a.cq.wait(1, Duration::from_secs(10));
    assert_eq!((r[0].context, r[0].error), (2, 0));
    assert_ne!(r[0].flags & flags::READ, 0);
    assert!(r[0].buf == data, "read back what was written");

    a.ep.write(to_b, vec![1; 8], (addr, key ^ 0x100), RmaOpts::default(), 3)
        .unwrap();
    let e = a.cq.wait(1, Duration::from_secs(10));
    assert_eq!((e[0].context, e[0].error), (3, errno::EACCES));
    assert!(
        a.ep.write(to_b, vec![1], (addr, 1 << 40), RmaOpts::default(), 4)
            .is_err(),
        "a key over 32 bits"
    );
    // The refused WRITE broke its connection (its QP is in the error state); the next
    // operation makes a new one and goes through.
    a.ep.read(to_b, vec![0; 16], (addr + 100, key), RmaOpts::default(), 5)
        .unwrap();
    let r = a.cq.wait(1, Duration::from_secs(10));
    assert_eq!((r[0].context, r[0].error), (5, 0), "{r:?}");
    assert!(r[0].buf[..] == data[..16]);
}

/// A peer that goes while holding an unexpected rendezvous request: the send it would
/// have read fails with EIO (its buffer back) instead of waiting for a FIN for ever.
#[test]
fn a_rendezvous_send_to_a_peer_that_goes_fails_with_its_buffer_back() {
    let (a, b, to_b, _) = pair(13, 7606);
    a.ep.send(to_b, pattern(13, 100_000), 1, SendOpts::default())
        .unwrap();
    // b takes the request (unexpected: no receive is posted), then goes.
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while b.ep.pending() != (0, 1) {
        assert!(a.cq.read(1).is_empty() && b.cq.read(1).is_empty());
        assert!(std::time::Instant::now() < end, "the request never came");
        std::thread::yield_now();
    }
    drop(b);
    let c = a.cq.wait(1, Duration::from_secs(30));
    assert_eq!(c.len(), 1, "the send never completed");
    assert_eq!((c[0].context, c[0].error), (1, errno::EIO));
    assert!(
        c[0].buf == pattern(13, 100_000),
        "the buffer comes back whole"
    );
}

/// A connection whose peer went lets its QP and CM ID go once it has drained, so that an
/// endpoint whose peers come and go (a server, an MPI job's respawned ranks) does not
/// keep a QP for each; a peer that comes back at the same address gets a new one.
#[test]
fn a_connection_to_a_peer_that_went_lets_its_qp_go_and_a_returning_peer_gets_a_new_one() {
    let (a, b, to_b, _) = pair(31, 7616);
    b.ep.recv(vec![0; 64], FI_ADDR_UNSPEC, 1).unwrap();
    a.ep.send(to_b, b"one".to_vec(), 2, SendOpts::default())
        .unwrap();
    both(&a, &b, 2);
    assert_eq!(a.ep.connections(), (1, 0));
    let b_addr = b.ep.addr();
    drop(b);
    // a hears b's DREQ; its slots flush, and the connection is let go.
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while a.ep.connections() != (0, 1) {
        assert!(a.cq.read(1).is_empty());
        assert!(
            std::time::Instant::now() < end,
            "still {:?} after its peer went",
            a.ep.connections()
        );
        std::thread::yield_now();
    }
    // The peer comes back at the same address: a new connection.
    let (av, cq) = (Arc::new(AddressVector::new()), CompletionQueue::new());
    let b = Side {
        ep: Endpoint::open(b_addr, av.clone(), cq.clone()).unwrap(),
        cq,
        av,
    };
    b.ep.recv(vec![0; 64], FI_ADDR_UNSPEC, 3).unwrap();
    a.ep.send(to_b, b"two".to_vec(), 4, SendOpts::default())
        .unwrap();
    let (_, got) = both(&a, &b, 2);
    assert_eq!(got[0].buf[..3], *b"two");
    assert_eq!(a.ep.connections(), (1, 1));
}

/// A message from a peer that is not yet in the receiver's address vector waits; once
/// the peer is inserted, a receive directed at it takes that message first (not a later
/// one of the same tag), and the completion names it. Open MPI's ranks insert each
/// other at different times, and match by source and tag.
#[test]
fn a_message_from_a_peer_inserted_later_matches_a_receive_directed_at_it() {
    let (a, b) = (side(17, 7607), side(18, 7607));
    let to_b = a.av.insert(b.ep.addr());
    let tag = SendOpts {
        tag: Some(5),
        ..Default::default()
    };
    a.ep.send(to_b, b"first".to_vec(), 1, tag).unwrap();
    a.ep.send(to_b, b"second".to_vec(), 2, tag).unwrap();
    let (sent, _) = both(&a, &b, 2);
    assert!(sent.iter().all(|c| c.error == 0), "{sent:?}");
    assert_eq!(b.ep.pending(), (0, 2), "both wait, unexpected");
    let to_a = b.av.insert(a.ep.addr());
    b.ep.trecv(vec![0; 16], to_a, 5, 0, 3).unwrap();
    let (_, got) = both(&a, &b, 1);
    assert_eq!((got[0].context, &got[0].buf[..5]), (3, &b"first"[..]));
    assert_eq!(got[0].src, to_a, "the source, as the AV names it now");
}

/// Atomics on a peer's word: fetch-and-add, add, read and compare-and-swap, each giving
/// the value before; a misaligned address and a short result buffer are refused at the
/// call, a region without atomic access refuses the atomic with EACCES.
#[test]
fn atomics_apply_to_a_peers_word_and_give_back_its_value_before() {
    let (a, b, to_b, _) = pair(21, 7610);
    let region = b.ep.register(vec![0; 64], Access::ATOMIC).unwrap();
    let (addr, key) = (region.addr() + 8, region.key());
    let none = RmaOpts::default();
    let ops = [
        (AtomicOp::FetchAdd(5), 0u64, flags::READ),
        (AtomicOp::Add(10), 5, flags::WRITE),
        (AtomicOp::Read, 15, flags::READ),
        (
            AtomicOp::CompareSwap {
                compare: 15,
                swap: 99,
            },
            15,
            flags::READ,
        ),
        (
            AtomicOp::CompareSwap {
                compare: 1,
                swap: 7,
            },
            99,
            flags::READ,
        ),
    ];
    for (i, (op, before, kind)) in ops.into_iter().enumerate() {
        a.ep.atomic(to_b, op, (addr, key), vec![0; 8], none, i as u64)
            .unwrap();
        let c = a.cq.wait(1, Duration::from_secs(10));
        assert_eq!((c[0].context, c[0].error), (i as u64, 0), "{op:?}: {c:?}");
        assert_eq!(c[0].flags & (flags::ATOMIC | kind), flags::ATOMIC | kind);
        let got = u64::from_ne_bytes(c[0].buf[..8].try_into().unwrap());
        assert_eq!(got, before, "{op:?} gives the value before");
    }
    assert_eq!(region.to_vec()[8..16], 99u64.to_ne_bytes());
    let misaligned =
        a.ep.atomic(to_b, AtomicOp::Read, (addr + 4, key), vec![0; 8], none, 9);
    assert!(misaligned.unwrap_err().to_string().contains("aligned"));
    let short =
        a.ep.atomic(to_b, AtomicOp::Read, (addr, key), vec![0; 4], none, 9);
    assert!(short.unwrap_err().to_string().contains("8"));
    let plain = b.ep.register(vec![0; 64], Access::READ_WRITE).unwrap();
    a.ep.atomic(
        to_b,
        AtomicOp::Add(1),
        (plain.addr(), plain.key()),
        vec![0; 8],
        none,
        10,
    )
    .unwrap();
    let e = a.cq.wait(1, Duration::from_secs(10));
    assert_eq!((e[0].context, e[0].error), (10, errno::EACCES), "{e:?}");
}

/// Counters count every completion of their kinds, silent ones too (an inject, an RMA
/// without a CQ entry), and errors apart; add and set work on both numbers.
#[test]
fn counters_count_each_kind_silent_completions_too_and_errors_apart() {
    let (a, b, to_b, _) = pair(23, 7611);
    let (sent, writes, got) = (Counter::new(), Counter::new(), Counter::new());
    a.ep.bind_counter(
        &sent,
        CountOf {
            send: true,
            ..Default::default()
        },
    );
    a.ep.bind_counter(
        &writes,
        CountOf {
            write: true,
            read: true,
            ..Default::default()
        },
    );
    b.ep.bind_counter(
        &got,
        CountOf {
            recv: true,
            ..Default::default()
        },
    );
    for i in 0..3 {
        b.ep.recv(vec![0; 16], FI_ADDR_UNSPEC, i).unwrap();
    }
    let inject = SendOpts {
        inject: true,
        ..Default::default()
    };
    a.ep.send(to_b, b"one".to_vec(), 1, inject).unwrap();
    a.ep.send(to_b, b"two".to_vec(), 2, SendOpts::default())
        .unwrap();
    a.ep.send(to_b, b"three".to_vec(), 3, inject).unwrap();
    assert_eq!(sent.wait(3, Duration::from_secs(10)), Waited::Reached);
    assert_eq!(got.wait(3, Duration::from_secs(10)), Waited::Reached);
    assert_eq!(
        a.cq.wait(1, Duration::from_secs(10)).len(),
        1,
        "one send asked for an entry"
    );
    let region = b.ep.register(vec![0; 64], Access::READ_WRITE).unwrap();
    let silent = RmaOpts {
        silent: true,
        ..Default::default()
    };
    a.ep.write(to_b, vec![7; 8], (region.addr(), region.key()), silent, 4)
        .unwrap();
    a.ep.read(to_b, vec![0; 8], (region.addr(), region.key()), silent, 5)
        .unwrap();
    assert_eq!(writes.wait(2, Duration::from_secs(10)), Waited::Reached);
    assert!(a.cq.read(4).is_empty(), "silent RMA writes no entry");
    a.ep.write(
        to_b,
        vec![7; 8],
        (region.addr(), region.key() ^ 1),
        silent,
        6,
    )
    .unwrap();
    assert_eq!(writes.wait(3, Duration::from_secs(10)), Waited::Failed);
    assert_eq!((writes.read(), writes.read_errors()), (2, 1));
    let e = a.cq.wait(1, Duration::from_secs(10));
    assert_eq!(
        (e[0].context, e[0].error),
        (6, errno::EACCES),
        "a failure still gives an entry"
    );
    writes.add(10);
    writes.set_errors(0);
    assert_eq!((writes.read(), writes.read_errors()), (12, 0));
    writes.set(1);
    assert_eq!(writes.wait(5, Duration::from_millis(50)), Waited::TimedOut);
}

/// Two endpoints on one domain share its device and its regions: a region registered on
/// the domain is reached through either.
#[test]
fn endpoints_of_one_domain_share_its_regions() {
    let fabric = Fabric;
    let dom = Domain::open("127.0.66.25".parse().unwrap()).unwrap();
    assert_eq!(dom.ip().to_string(), "127.0.66.25");
    assert!(fabric.domain("no-such-device").is_err());
    let (av, cq) = (Arc::new(AddressVector::new()), CompletionQueue::new());
    let e1 = Endpoint::open_on(&dom, 7612, av.clone(), cq.clone(), cq.clone()).unwrap();
    let e2 = Endpoint::open_on(&dom, 7613, av.clone(), cq.clone(), cq.clone()).unwrap();
    let region = dom.register(pattern(25, 256), Access::READ).unwrap();
    let peer = side(26, 7612);
    let (to1, to2) = (peer.av.insert(e1.addr()), peer.av.insert(e2.addr()));
    for (i, to) in [to1, to2].into_iter().enumerate() {
        peer.ep
            .read(
                to,
                vec![0; 256],
                (region.addr(), region.key()),
                RmaOpts::default(),
                i as u64,
            )
            .unwrap();
        let r = peer.cq.wait(1, Duration::from_secs(10));
        assert_eq!((r[0].context, r[0].error), (i as u64, 0), "{r:?}");
        assert!(r[0].buf == pattern(25, 256));
    }
}

/// A CQ with a descriptor (`FI_WAIT_FD`): not readable while empty (`try_wait` says the
/// program may sleep), readable once a completion came while the program slept in
/// `poll(2)` (the progress thread brought it), and not readable once read.
#[test]
fn a_cq_descriptor_wakes_a_program_sleeping_in_poll() {
    let (av, cq) = (
        Arc::new(AddressVector::new()),
        CompletionQueue::with_fd().unwrap(),
    );
    let b = Endpoint::open("127.0.66.28:7614".parse().unwrap(), av.clone(), cq.clone()).unwrap();
    let a = side(27, 7614);
    let to_b = a.av.insert(b.addr());
    let fd = cq.fd().expect("a descriptor");
    let readable = |ms: i32| {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, of a descriptor the CQ keeps open.
        unsafe { libc::poll(&mut p, 1, ms) == 1 }
    };
    b.recv(vec![0; 16], FI_ADDR_UNSPEC, 1).unwrap();
    assert!(cq.try_wait(), "nothing yet");
    assert!(!readable(0));
    a.ep.send(to_b, b"wake".to_vec(), 2, SendOpts::default())
        .unwrap();
    // a's own progress thread sends; b's brings the message to b's CQ.
    assert!(readable(10_000), "the descriptor woke the sleeper");
    assert!(!cq.try_wait());
    let got = cq.read(4);
    assert_eq!((got[0].context, got[0].len), (1, 4));
    assert!(!readable(0), "read empty, the descriptor is quiet again");
}

/// A multi-receive buffer takes message after message, eager and rendezvous, unexpected
/// ones first, each at its offset, until less than its minimum free space is left; the
/// last completion gives it back (`MULTI_RECV`) and the next message goes to the next
/// receive.
#[test]
fn a_multi_receive_buffer_takes_messages_until_it_is_full() {
    let (a, b, to_b, _) = pair(29, 7615);
    let sizes = [3000usize, 5000, 12000, 4000, 6000, 100];
    let send = |i: usize| {
        a.ep.send(
            to_b,
            pattern(i as u8, sizes[i]),
            i as u64,
            SendOpts::default(),
        )
        .unwrap()
    };
    // Two come before the buffer is posted: they wait unexpected, and it takes them first.
    send(0);
    send(1);
    let sent = a.cq.wait(2, Duration::from_secs(10));
    assert_eq!(sent.len(), 2);
    b.ep.recv_multi(vec![0; 32768], 8192, FI_ADDR_UNSPEC, 77)
        .unwrap();
    for i in 2..5 {
        send(i);
    }
    let got = b.cq.wait(5, Duration::from_secs(10));
    assert_eq!(got.len(), 5, "{got:?}");
    let mut offsets: Vec<(usize, usize)> = got.iter().map(|c| (c.offset, c.len)).collect();
    offsets.sort();
    assert_eq!(
        offsets,
        [
            (0, 3000),
            (3000, 5000),
            (8000, 12000),
            (20000, 4000),
            (24000, 6000)
        ]
    );
    assert!(
        got.iter().all(|c| c.context == 77 && c.error == 0),
        "{got:?}"
    );
    let last = got.last().unwrap();
    assert_ne!(last.flags & flags::MULTI_RECV, 0, "the last gives it back");
    assert_eq!(
        got.iter()
            .filter(|c| c.flags & flags::MULTI_RECV != 0)
            .count(),
        1
    );
    for (i, &(off, len)) in offsets.iter().enumerate() {
        assert!(
            last.buf[off..off + len] == pattern(i as u8, len)[..],
            "message {i}"
        );
    }
    // The buffer is out of matching: the next message waits for a receive.
    b.ep.recv(vec![0; 200], FI_ADDR_UNSPEC, 78).unwrap();
    send(5);
    let r = b.cq.wait(1, Duration::from_secs(10));
    assert_eq!(
        (r[0].context, r[0].len, r[0].flags & flags::MULTI_RECV),
        (78, 100, 0)
    );
    // A multi-receive buffer cancelled comes back, flagged, with nothing in it.
    b.ep.recv_multi(vec![0; 1000], 10, FI_ADDR_UNSPEC, 79)
        .unwrap();
    assert!(b.ep.cancel(79));
    let c = b.cq.wait(1, Duration::from_secs(10));
    assert_eq!((c[0].context, c[0].error), (79, errno::ECANCELED));
    assert_ne!(c[0].flags & flags::MULTI_RECV, 0);
}

/// Many more messages than a connection has receive slots, none expected: each slot goes
/// back after its message (at the next progress, or at once when few are left), so the
/// sender never stalls, and every message waits unexpected, in order, with its bytes.
#[test]
fn a_stream_of_many_more_messages_than_slots_arrives_whole_and_in_order() {
    let (a, b, to_b, _) = pair(41, 7640);
    const N: usize = 1000;
    for i in 0..N {
        let m = pattern(i as u8, 16 + i % 200);
        a.ep.send(to_b, m, i as u64, SendOpts::default()).unwrap();
    }
    // b reads nothing until every send completed: its progress thread serves the stream.
    let sent = a.cq.wait(N, Duration::from_secs(20));
    assert_eq!(sent.len(), N, "every send completes");
    assert!(sent.iter().all(|s| s.error == 0), "{sent:?}");
    for i in 0..N {
        b.ep.recv(vec![0; 256], FI_ADDR_UNSPEC, i as u64).unwrap();
    }
    let got = b.cq.wait(N, Duration::from_secs(20));
    assert_eq!(got.len(), N);
    for (i, g) in got.iter().enumerate() {
        let want = pattern(i as u8, 16 + i % 200);
        assert_eq!((g.context, g.error, g.len), (i as u64, 0, want.len()));
        assert_eq!(&g.buf[..g.len], &want[..], "message {i}");
    }
}
