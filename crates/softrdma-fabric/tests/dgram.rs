//! Datagram (DGRAM) endpoints end to end over real UDP sockets on loopback: two endpoints
//! on two softrdma devices (127.0.68.x) that find each other's QP by IP address and port
//! (SIDR through softrdma's CM), datagrams both ways up to the MTU, a receive too short,
//! and a peer that is not there.

use softrdma_fabric::*;
use std::sync::Arc;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

struct Side {
    ep: DgramEndpoint,
    cq: Arc<CompletionQueue>,
    av: Arc<AddressVector>,
}

fn side(ip: &str, port: u16) -> Side {
    let dom = Domain::open(ip.parse().unwrap()).unwrap();
    let (av, cq) = (Arc::new(AddressVector::new()), CompletionQueue::new());
    let ep = DgramEndpoint::open(&dom, port, av.clone(), cq.clone(), cq.clone()).unwrap();
    Side { ep, cq, av }
}

#[test]
fn datagrams_go_both_ways_up_to_the_mtu() {
    let (a, b) = (side("127.0.68.1", 7800), side("127.0.68.2", 7800));
    let (to_b, to_a) = (a.av.insert(b.ep.addr()), b.av.insert(a.ep.addr()));
    let max = a.ep.max_msg();
    assert!(max >= 1024, "one MTU: {max}");
    for i in 0..3 {
        b.ep.recv(vec![0; max], i).unwrap();
    }
    // The first send waits for b's QP (SIDR); the others follow it.
    a.ep.send(to_b, b"one".to_vec(), Some(7), false, 10)
        .unwrap();
    let full: Vec<u8> = (0..max).map(|i| i as u8).collect();
    a.ep.send(to_b, full.clone(), None, false, 11).unwrap();
    a.ep.send(to_b, vec![], None, true, 12).unwrap();
    let got = b.cq.wait(3, T);
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!((got[0].context, got[0].len, got[0].data), (0, 3, Some(7)));
    assert_eq!(&got[0].buf[..3], b"one");
    assert_eq!((got[1].context, got[1].len), (1, max));
    assert!(got[1].buf == full);
    assert_eq!((got[2].context, got[2].len), (2, 0));
    let sent = a.cq.wait(2, T);
    assert_eq!(
        sent.iter()
            .map(|c| (c.context, c.error))
            .collect::<Vec<_>>(),
        [(10, 0), (11, 0)],
        "the silent one writes no entry"
    );
    // Back, into a receive too short, then one that waited for its datagram.
    a.ep.recv(vec![0; 2], 20).unwrap();
    b.ep.send(to_a, b"back".to_vec(), None, false, 30).unwrap();
    let t = a.cq.wait(2, T);
    let r = t.iter().find(|c| c.context == 20).expect("the receive");
    assert_eq!((r.error, r.len, r.olen), (errno::ETRUNC, 2, 2));
    // Sent before its receive is posted: it waits in a slot, or meets the receive, in
    // whichever order the two come.
    b.ep.send(to_a, b"later".to_vec(), None, true, 31).unwrap();
    a.ep.recv(vec![0; 16], 21).unwrap();
    let r = a.cq.wait(1, T);
    assert_eq!((r[0].context, r[0].len), (21, 5), "{r:?}");
    assert!(
        a.ep.send(to_b, vec![0; max + 1], None, false, 13).is_err(),
        "over the MTU"
    );
}

#[test]
fn a_peer_that_is_not_there_fails_the_send() {
    let a = side("127.0.68.3", 7801);
    let nobody = a.av.insert("127.0.68.4:7801".parse().unwrap());
    a.ep.send(nobody, b"x".to_vec(), None, false, 1).unwrap();
    // SIDR's retries run out first (about 10 s).
    let e = a.cq.wait(1, Duration::from_secs(30));
    assert_eq!((e[0].context, e[0].error), (1, errno::EIO), "{e:?}");
}
