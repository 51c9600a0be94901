//! Connected (MSG) endpoints end to end over real UDP sockets on loopback: a passive
//! endpoint on one softrdma device (127.0.67.x), an endpoint that connects to it from
//! another, messages both ways, RMA, a refused request and a shutdown.

use softrdma_fabric::*;
use std::sync::Arc;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

struct Side {
    ep: MsgEndpoint,
    cq: Arc<CompletionQueue>,
    eq: Arc<EventQueue>,
}

fn open(ip: &str, tag: u64) -> Side {
    let dom = Domain::open(ip.parse().unwrap()).unwrap();
    let (cq, eq) = (CompletionQueue::new(), EventQueue::new());
    let ep = MsgEndpoint::open(&dom, eq.clone(), tag, cq.clone(), cq.clone()).unwrap();
    Side { ep, cq, eq }
}

fn event(eq: &EventQueue) -> Event {
    eq.wait(T).expect("an event within 10 s")
}

/// A connected pair: `(client, server, the passive endpoint)`.
fn connected(last: u8, port: u16) -> (Side, Side, PassiveEndpoint) {
    let ip = format!("127.0.67.{last}");
    let peq = EventQueue::new();
    let pep = PassiveEndpoint::listen(
        &Domain::open(ip.parse().unwrap()).unwrap(),
        port,
        peq.clone(),
        7,
    )
    .unwrap();
    let client = open(&format!("127.0.67.{}", last + 1), 1);
    // A receive posted before the connection exists waits for it.
    client.ep.recv(vec![0; 64], 100).unwrap();
    client.ep.connect(pep.addr(), b"hello").unwrap();
    let Event::ConnRequest { tag: 7, req } = event(&peq) else {
        panic!("a connection request")
    };
    assert_eq!(req.peer.ip().to_string(), format!("127.0.67.{}", last + 1));
    assert_eq!(req.private_data, b"hello");
    let server = open(&ip, 2);
    server.ep.accept(req, b"welcome").unwrap();
    assert!(matches!(event(&server.eq), Event::Connected { tag: 2, .. }));
    let Event::Connected {
        tag: 1,
        private_data,
    } = event(&client.eq)
    else {
        panic!("connected")
    };
    assert_eq!(private_data, b"welcome");
    (client, server, pep)
}

#[test]
fn messages_go_both_ways_in_order_with_their_data() {
    let (c, s, _pep) = connected(1, 7700);
    s.ep.recv(vec![0; 64], 1).unwrap();
    s.ep.recv(vec![0; 200_000], 2).unwrap();
    c.ep.send(b"small".to_vec(), Some(0xfeed), false, 10)
        .unwrap();
    let big: Vec<u8> = (0..150_000u32).map(|i| (i * 7) as u8).collect();
    c.ep.send(big.clone(), None, false, 11).unwrap();
    let got = s.cq.wait(2, T);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        (got[0].context, got[0].len, got[0].data),
        (1, 5, Some(0xfeed))
    );
    assert_eq!(&got[0].buf[..5], b"small");
    assert_ne!(got[0].flags & flags::REMOTE_CQ_DATA, 0);
    assert_eq!((got[1].context, got[1].len), (2, 150_000));
    assert!(got[1].buf[..150_000] == big[..]);
    let sent = c.cq.wait(2, T);
    assert_eq!(
        sent.iter()
            .map(|c| (c.context, c.error))
            .collect::<Vec<_>>(),
        [(10, 0), (11, 0)]
    );
    // The other way, into the receive posted before the connection.
    s.ep.send(b"back".to_vec(), None, false, 20).unwrap();
    let r = c.cq.wait(1, T);
    assert_eq!((r[0].context, r[0].len), (100, 4), "{r:?}");
}

#[test]
fn rma_reaches_the_peers_region() {
    // The server's domain: the one open on its address in this process.
    let (c, _s, _pep) = connected(3, 7701);
    let dom = Domain::open("127.0.67.3".parse().unwrap()).unwrap();
    let region = dom.register(vec![0; 4096], Access::READ_WRITE).unwrap();
    c.ep.write(
        vec![9; 100],
        (region.addr() + 10, region.key()),
        RmaOpts::default(),
        1,
    )
    .unwrap();
    assert_eq!(c.cq.wait(1, T)[0].error, 0);
    assert!(region.to_vec()[10..110].iter().all(|&b| b == 9));
    c.ep.read(
        vec![0; 20],
        (region.addr() + 100, region.key()),
        RmaOpts::default(),
        2,
    )
    .unwrap();
    let r = c.cq.wait(1, T);
    assert_eq!((r[0].context, r[0].error), (2, 0));
    assert_eq!(
        &r[0].buf[..],
        &[9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    );
}

#[test]
fn a_shutdown_reaches_the_peer_and_flushes_its_receives() {
    let (c, s, _pep) = connected(5, 7702);
    s.ep.recv(vec![0; 8], 1).unwrap();
    c.ep.shutdown().unwrap();
    assert!(matches!(event(&s.eq), Event::Shutdown { tag: 2 }));
    let f = s.cq.wait(1, T);
    assert_eq!((f[0].context, f[0].error), (1, errno::ECANCELED));
    // The client's receive posted before the connection flushed too.
    let f = c.cq.wait(1, T);
    assert_eq!((f[0].context, f[0].error), (100, errno::ECANCELED));
    assert!(
        c.ep.send(vec![1], None, false, 3).is_err(),
        "a send after the end"
    );
}

#[test]
fn a_rejected_request_and_an_absent_listener_fail_the_connect() {
    let peq = EventQueue::new();
    let dom = Domain::open("127.0.67.7".parse().unwrap()).unwrap();
    let pep = PassiveEndpoint::listen(&dom, 7703, peq.clone(), 7).unwrap();
    let c = open("127.0.67.8", 1);
    c.ep.connect(pep.addr(), &[]).unwrap();
    let Event::ConnRequest { req, .. } = event(&peq) else {
        panic!("a request")
    };
    req.reject(b"no").unwrap();
    let Event::Failed {
        tag: 1,
        error,
        private_data,
    } = event(&c.eq)
    else {
        panic!("refused")
    };
    assert_eq!((error, &private_data[..]), (111, &b"no"[..]));
    assert!(
        c.ep.connect(pep.addr(), &[0; 56]).is_err(),
        "too much private data"
    );
    assert!(
        c.ep.connect(pep.addr(), &[]).is_err(),
        "one connect per endpoint"
    );
    let c2 = open("127.0.67.8", 2);
    c2.ep
        .connect("127.0.67.7:7799".parse().unwrap(), &[])
        .unwrap();
    assert!(matches!(event(&c2.eq), Event::Failed { tag: 2, .. }));
}
