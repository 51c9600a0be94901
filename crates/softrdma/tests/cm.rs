//! The connection manager end to end over real UDP sockets: IB CM MADs on QP1 between two
//! devices on loopback (one process, two contexts), as rdma_cm programs use it.

use softrdma::cm::{CmEvent, CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
use softrdma::*;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

fn ctx(addr: &str) -> Context {
    Context::open_addr(addr, addr.parse().unwrap(), Mtu::M1024).unwrap()
}

/// The next event, which must come within `within`.
fn next(chan: &EventChannel, within: Duration) -> CmEvent {
    chan.get_event(Some(within))
        .unwrap_or_else(|| panic!("no CM event within {within:?}"))
}

fn expect(chan: &EventChannel, kind: CmEventKind) -> CmEvent {
    let ev = next(chan, Duration::from_secs(10));
    assert_eq!(ev.kind, kind, "{ev:?}");
    ev
}

fn active(
    ctx: &Context,
    chan: &EventChannel,
    dst: SocketAddr,
) -> (CmId, ProtectionDomain, CompletionQueue) {
    let id = CmId::new(chan, ctx, PortSpace::Tcp).unwrap();
    id.resolve_addr(None, dst).unwrap();
    expect(chan, CmEventKind::AddrResolved);
    id.resolve_route().unwrap();
    expect(chan, CmEventKind::RouteResolved);
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(64, None).unwrap();
    id.create_qp(&pd, QpInitAttr::new(QpType::Rc, &cq)).unwrap();
    (id, pd, cq)
}

/// An event channel for each side.
fn channels() -> (EventChannel, EventChannel) {
    (EventChannel::new().unwrap(), EventChannel::new().unwrap())
}

/// An ID of `space` on `ctx` that listens on `port` of every address, its events on `chan`.
fn listening(chan: &EventChannel, ctx: &Context, space: PortSpace, port: u16) -> CmId {
    let id = CmId::new(chan, ctx, space).unwrap();
    id.bind_addr(SocketAddr::from(([0, 0, 0, 0], port)))
        .unwrap();
    id.listen(8).unwrap();
    id
}

/// A server's and a client's device on `addrs`, an event channel each, and a listener of
/// `space` on the server's `port`.
fn served(
    addrs: (&str, &str),
    space: PortSpace,
    port: u16,
) -> (Context, Context, EventChannel, EventChannel, CmId) {
    let (sctx, cctx) = (ctx(addrs.0), ctx(addrs.1));
    let (schan, cchan) = channels();
    let listener = listening(&schan, &sctx, space, port);
    (sctx, cctx, schan, cchan, listener)
}

/// Connection parameters that carry `private_data` and the defaults.
fn param(private_data: &[u8]) -> ConnParam {
    ConnParam {
        private_data: private_data.to_vec(),
        ..Default::default()
    }
}

/// The passive side's QP of `qp_type` for `id` on `ctx` (with its PD and CQ), a receive of
/// `recv` bytes posted on it as WR 1 when `recv` is not 0.
fn passive_qp(
    id: &CmId,
    ctx: &Context,
    qp_type: QpType,
    recv: usize,
) -> (ProtectionDomain, CompletionQueue, std::sync::Arc<QueuePair>) {
    let (pd, cq) = (ctx.alloc_pd(), ctx.create_cq(64, None).unwrap());
    let qp = id.create_qp(&pd, QpInitAttr::new(qp_type, &cq)).unwrap();
    if recv != 0 {
        qp.post_recv_owned(1, vec![0; recv]).unwrap();
    }
    (pd, cq, qp)
}

fn wait_wc(cq: &CompletionQueue) -> Completion {
    let end = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(wc) = cq.poll_one() {
            return wc;
        }
        assert!(std::time::Instant::now() < end, "no completion");
        std::thread::yield_now();
    }
}

#[test]
fn two_devices_connect_by_address_exchange_a_send_and_disconnect() {
    let (sctx, cctx, schan, cchan, _listener) =
        served(("127.0.0.71", "127.0.0.72"), PortSpace::Tcp, 7471);

    let (client, cpd, ccq) = active(&cctx, &cchan, "127.0.0.71:7471".parse().unwrap());
    client.connect(&param(b"from the client")).unwrap();

    let req = expect(&schan, CmEventKind::ConnectRequest);
    assert!(req.private_data.starts_with(b"from the client"));
    assert_eq!(
        req.private_data.len(),
        56,
        "the REQ's 92 bytes less the IP CM header"
    );
    let conn = req.id.clone();
    assert_eq!(
        conn.peer_addr().map(|a| a.ip()),
        Some(IpAddr::from([127, 0, 0, 72]))
    );
    assert_eq!(conn.local_addr().map(|a| a.port()), Some(7471));
    let (_spd, scq, sqp) = passive_qp(&conn, &sctx, QpType::Rc, 64);
    conn.accept(&param(b"welcome")).unwrap();

    let est = expect(&cchan, CmEventKind::Established);
    assert!(est.private_data.starts_with(b"welcome"));
    expect(&schan, CmEventKind::Established);

    // The QPs are connected: a SEND goes through.
    let cqp = client.qp().unwrap();
    assert_eq!(cqp.query().state, Some(QpState::Rts));
    cqp.post_send_owned(
        2,
        SendOp::Send,
        SendFlags::SIGNALED,
        None,
        b"hello over rdma_cm".to_vec(),
    )
    .unwrap();
    assert_eq!(wait_wc(&ccq).status, WcStatus::Success);
    let wc = wait_wc(&scq);
    assert_eq!(wc.status, WcStatus::Success);
    assert_eq!(wc.byte_len, 18);
    assert!(sqp.reclaim(1).unwrap().starts_with(b"hello over rdma_cm"));

    client.disconnect().unwrap();
    expect(&schan, CmEventKind::Disconnected);
    conn.disconnect().unwrap();
    expect(&cchan, CmEventKind::Disconnected);
    expect(&cchan, CmEventKind::TimewaitExit);
    expect(&schan, CmEventKind::TimewaitExit);
    drop(cpd);
}

#[test]
fn a_connect_to_a_port_nobody_listens_on_is_rejected() {
    let (sctx, cctx) = (ctx("127.0.0.73"), ctx("127.0.0.74"));
    let chan = EventChannel::new().unwrap();
    // The server's device has a CM (another ID listens elsewhere).
    let schan = EventChannel::new().unwrap();
    let other = CmId::new(&schan, &sctx, PortSpace::Tcp).unwrap();
    other.bind_addr("127.0.0.73:1".parse().unwrap()).unwrap();
    other.listen(1).unwrap();
    let (client, _pd, _cq) = active(&cctx, &chan, "127.0.0.73:7472".parse().unwrap());
    client.connect(&ConnParam::default()).unwrap();
    let ev = next(&chan, Duration::from_secs(10));
    assert_eq!(
        ev.kind,
        CmEventKind::Rejected {
            reason: softrdma_wire::cm::rej_reason::INVALID_SERVICE_ID
        }
    );
}

#[test]
fn a_connect_to_an_address_with_nothing_there_is_unreachable_within_the_retry_budget() {
    let cctx = ctx("127.0.0.75");
    let chan = EventChannel::new().unwrap();
    let (client, _pd, _cq) = active(&cctx, &chan, "127.0.0.76:7473".parse().unwrap());
    let t = std::time::Instant::now();
    client.connect(&ConnParam::default()).unwrap();
    // 7 sends of the REQ, 539 ms apart.
    let ev = next(&chan, Duration::from_secs(8));
    assert_eq!(ev.kind, CmEventKind::Unreachable);
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(3700) && took < Duration::from_secs(6),
        "{took:?}"
    );
}

#[test]
fn misuse_is_refused_with_the_verb_named() {
    let c = ctx("127.0.0.77");
    let chan = EventChannel::new().unwrap();
    let id = CmId::new(&chan, &c, PortSpace::Tcp).unwrap();
    let e = id.connect(&ConnParam::default()).unwrap_err();
    assert!(e.to_string().starts_with("rdma_connect:"), "{e}");
    let e = id.bind_addr("127.0.0.99:1".parse().unwrap()).unwrap_err();
    // EADDRNOTAVAIL.
    assert_eq!(e.errno(), 99);
    let e = id.accept(&ConnParam::default()).unwrap_err();
    assert!(e.to_string().contains("no connection request"), "{e}");
}

/// The verbs keep the kernel's order of an ID's states (`cma_comp_exch`): a second bind,
/// a route resolved twice, and a listen on a resolved ID each fail with EINVAL, naming
/// the state; the ID is left as it was, and the next verb in order works.
#[test]
fn verbs_out_of_their_state_are_refused_with_einval() {
    let c = ctx("127.0.0.79");
    let chan = EventChannel::new().unwrap();
    let id = CmId::new(&chan, &c, PortSpace::Tcp).unwrap();
    id.bind_addr("127.0.0.79:0".parse().unwrap()).unwrap();
    let e = id.bind_addr("127.0.0.79:0".parse().unwrap()).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL, "{e}");
    assert!(e.to_string().contains("ADDR_BOUND"), "{e}");
    id.resolve_addr(None, "127.0.0.79:7479".parse().unwrap())
        .unwrap();
    expect(&chan, CmEventKind::AddrResolved);
    let e = id.listen(1).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL, "{e}");
    assert!(e.to_string().starts_with("rdma_listen:"), "{e}");
    id.resolve_route().unwrap();
    expect(&chan, CmEventKind::RouteResolved);
    let e = id.resolve_route().unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL, "{e}");
    assert!(e.to_string().contains("ROUTE_RESOLVED"), "{e}");
}

/// Multicast through the CM, its rules (rdma_cm's): a UD ID whose address is bound or
/// resolved joins a group of its device's family once, and the MULTICAST_JOIN event gives
/// the QPN and Q_Key a send to it takes; a TCP ID, a unicast address, a group of the other
/// family, an unbound or routed ID, a second join and a leave of a group not joined are
/// refused with the kernel's errno. (The traffic itself: `mckey` in cm_cli's tests.)
#[test]
fn multicast_joins_follow_rdma_cms_rules() {
    use softrdma::cm::{MULTICAST_QPN, RDMA_UDP_QKEY};
    let c = ctx("127.0.0.78");
    let chan = EventChannel::new().unwrap();
    let group: IpAddr = "239.78.0.1".parse().unwrap();
    let errno = |r: Result<()>| r.unwrap_err().errno();

    let tcp = CmId::new(&chan, &c, PortSpace::Tcp).unwrap();
    tcp.bind_addr("127.0.0.78:0".parse().unwrap()).unwrap();
    assert_eq!(errno(tcp.join_multicast(group, false)), libc::EINVAL);

    let ud = CmId::new(&chan, &c, PortSpace::Udp).unwrap();
    // Not bound yet.
    assert_eq!(errno(ud.join_multicast(group, false)), libc::EINVAL);
    ud.resolve_addr(None, SocketAddr::new(group, 0)).unwrap();
    expect(&chan, CmEventKind::AddrResolved);
    let e = ud
        .join_multicast("127.0.0.1".parse().unwrap(), false)
        .unwrap_err();
    assert!(e.to_string().contains("not a multicast address"), "{e}");
    assert_eq!(
        errno(ud.join_multicast("ff0e::1".parse().unwrap(), false)),
        libc::EINVAL
    );

    ud.join_multicast(group, false).unwrap();
    let ev = expect(&chan, CmEventKind::MulticastJoin { group });
    let p = ev.ud.expect("the group's QPN and Q_Key");
    assert_eq!((p.qp_num, p.qkey), (MULTICAST_QPN, RDMA_UDP_QKEY));
    assert_eq!(errno(ud.join_multicast(group, false)), libc::EADDRINUSE);
    ud.leave_multicast(group).unwrap();
    assert_eq!(errno(ud.leave_multicast(group)), libc::EADDRNOTAVAIL);

    // A routed ID may no longer join, as rdma_cm's.
    let routed = CmId::new(&chan, &c, PortSpace::Udp).unwrap();
    routed
        .resolve_addr(None, "127.0.0.78:7478".parse().unwrap())
        .unwrap();
    expect(&chan, CmEventKind::AddrResolved);
    routed.resolve_route().unwrap();
    expect(&chan, CmEventKind::RouteResolved);
    assert_eq!(errno(routed.join_multicast(group, false)), libc::EINVAL);
}

/// A device that cannot carry the group refuses the join cleanly, as the issue asks of
/// rdma_cm: on `::1` (Linux's `lo` has no IPv6 multicast) a UD ID with a QP gets
/// EOPNOTSUPP with a message that says why, and the ID can still join nothing else later.
#[test]
fn an_ipv6_loopback_device_refuses_multicast_joins_with_eopnotsupp() {
    let c = ctx("::1");
    let chan = EventChannel::new().unwrap();
    let ud = CmId::new(&chan, &c, PortSpace::Udp).unwrap();
    ud.bind_addr("[::1]:0".parse().unwrap()).unwrap();
    let (pd, cq) = (c.alloc_pd(), c.create_cq(16, None).unwrap());
    ud.create_qp(&pd, QpInitAttr::new(QpType::Ud, &cq)).unwrap();
    let group: IpAddr = "ff0e::77:1".parse().unwrap();
    let e = ud.join_multicast(group, false).unwrap_err();
    assert_eq!(e.errno(), libc::EOPNOTSUPP, "{e}");
    assert!(e.to_string().contains("no IPv6 multicast"), "{e}");
    // Nothing was joined: no event, and a leave finds no group.
    assert!(chan.get_event(Some(Duration::from_millis(50))).is_none());
    assert_eq!(
        ud.leave_multicast(group).unwrap_err().errno(),
        libc::EADDRNOTAVAIL
    );
}

/// UD through SIDR: the client's `connect` asks the server's service for its UD QP, the
/// server's `accept` answers with it, and the client's Established event carries the QPN
/// and rdma_cm's UD Q_Key, with which a datagram then reaches the server's QP. A service
/// nobody serves is reported as unresolved (SIDR status 1), and a rejecting server's
/// status 2 comes through the same way.
#[test]
fn ud_ids_find_each_others_qps_through_sidr() {
    let (sctx, cctx, schan, cchan, _listener) =
        served(("127.0.0.78", "127.0.0.79"), PortSpace::Udp, 7474);
    let resolve = |port: u16| {
        let id = CmId::new(&cchan, &cctx, PortSpace::Udp).unwrap();
        id.resolve_addr(None, SocketAddr::new([127, 0, 0, 78].into(), port))
            .unwrap();
        expect(&cchan, CmEventKind::AddrResolved);
        id.resolve_route().unwrap();
        expect(&cchan, CmEventKind::RouteResolved);
        id
    };
    let (cpd, ccq) = (cctx.alloc_pd(), cctx.create_cq(64, None).unwrap());
    let client = resolve(7474);
    // A UDP ID takes a UD QP only; the QP is ready at once.
    let e = client
        .create_qp(&cpd, QpInitAttr::new(QpType::Rc, &ccq))
        .unwrap_err();
    assert!(e.to_string().contains("does not fit"), "{e}");
    let cqp = client
        .create_qp(&cpd, QpInitAttr::new(QpType::Ud, &ccq))
        .unwrap();
    assert_eq!(cqp.query().state, Some(QpState::Rts));
    client.connect(&param(b"which QP?")).unwrap();

    let req = expect(&schan, CmEventKind::ConnectRequest);
    assert!(req.private_data.starts_with(b"which QP?"));
    assert_eq!(
        req.private_data.len(),
        216 - 36,
        "a SIDR_REQ's less the header"
    );
    let (_spd, scq, sqp) = passive_qp(&req.id, &sctx, QpType::Ud, 40 + 64);
    req.id.accept(&param(b"this one")).unwrap();

    let est = expect(&cchan, CmEventKind::Established);
    assert!(est.private_data.starts_with(b"this one"));
    let ud = est.ud.expect("a UD answer");
    assert_eq!(ud.qp_num, sqp.qp_num().value());
    assert_eq!(ud.qkey, softrdma::cm::RDMA_UDP_QKEY);
    let ah = cpd
        .create_ah(std::net::Ipv4Addr::new(127, 0, 0, 78).to_ipv6_mapped(), 1)
        .unwrap();
    cqp.post_send(SendWr {
        wr_id: 2,
        op: SendOp::Send,
        payload: Payload::Inline(b"a datagram".to_vec()),
        flags: SendFlags::SIGNALED | SendFlags::INLINE,
        ud: Some(ah.dest(Qpn::new(ud.qp_num), ud.qkey)),
    })
    .unwrap();
    assert_eq!(wait_wc(&ccq).status, WcStatus::Success);
    let wc = wait_wc(&scq);
    assert_eq!(wc.status, WcStatus::Success);
    assert_eq!(wc.byte_len, 40 + 10);
    assert!(sqp.reclaim(1).unwrap()[40..].starts_with(b"a datagram"));

    // Nobody serves 7475.
    let lost = resolve(7475);
    lost.create_qp(&cpd, QpInitAttr::new(QpType::Ud, &ccq))
        .unwrap();
    lost.connect(&ConnParam::default()).unwrap();
    let ev = expect(&cchan, CmEventKind::Unresolved { status: 1 });
    assert_eq!(ev.ud, None);

    // The server says no.
    let refused = resolve(7474);
    refused
        .create_qp(&cpd, QpInitAttr::new(QpType::Ud, &ccq))
        .unwrap();
    refused.connect(&ConnParam::default()).unwrap();
    let req = expect(&schan, CmEventKind::ConnectRequest);
    req.id.reject(b"go away").unwrap();
    let ev = expect(&cchan, CmEventKind::Unresolved { status: 2 });
    assert!(ev.private_data.starts_with(b"go away"));
}

/// `init_qp_attr` gives what a caller that moves its own QP needs: INIT with every remote
/// access; RTR with the peer's QPN and the PSN the REP then announces (passive side,
/// from the connect request on); nothing for RTR before the connection's parameters are
/// known, with the verb named.
#[test]
fn init_qp_attr_gives_the_connections_parameters() {
    let (sctx, cctx, schan, cchan, _listener) =
        served(("127.0.0.80", "127.0.0.81"), PortSpace::Tcp, 7476);
    let (client, _cpd, _ccq) = active(&cctx, &cchan, "127.0.0.80:7476".parse().unwrap());
    let init = client.init_qp_attr(QpState::Init).unwrap();
    assert_eq!(init.state, Some(QpState::Init));
    assert!(
        init.access_flags
            .unwrap()
            .contains(AccessFlags::REMOTE_READ)
    );
    let e = client.init_qp_attr(QpState::Rtr).unwrap_err();
    assert!(e.to_string().starts_with("rdma_init_qp_attr:"), "{e}");
    // RDMA_OPTION_ID_ACK_TIMEOUT: the client's QP waits 4.096 µs × 2^18 for an ACK, and
    // its REQ tells the server, whose QP takes it too.
    assert_eq!(
        client.set_ack_timeout(32).unwrap_err().errno(),
        libc::EINVAL
    );
    client.set_ack_timeout(18).unwrap();
    client.set_tos(0x20);
    client.connect(&ConnParam::default()).unwrap();

    let req = expect(&schan, CmEventKind::ConnectRequest);
    let rtr = req.id.init_qp_attr(QpState::Rtr).unwrap();
    let cqpn = client.qp().unwrap().qp_num();
    assert_eq!(rtr.dest_qpn, Some(cqpn));
    let rts = req.id.init_qp_attr(QpState::Rts).unwrap();
    assert!(rts.sq_psn.is_some());
    assert_eq!(rts.timeout, Some(18));
    let (_spd, _scq, sqp) = passive_qp(&req.id, &sctx, QpType::Rc, 0);
    req.id.accept(&ConnParam::default()).unwrap();
    expect(&cchan, CmEventKind::Established);
    // The QP went to RTR with what init_qp_attr said, and the client's RTS sends from it.
    let q = sqp.query();
    assert_eq!(q.rq_psn, rtr.rq_psn);
    assert_eq!(client.qp().unwrap().query().sq_psn, rtr.rq_psn);
    let crtr = client.init_qp_attr(QpState::Rtr).unwrap();
    assert_eq!(crtr.dest_qpn, Some(sqp.qp_num()));
    assert_eq!(client.qp().unwrap().query().timeout, Some(18));
    assert_eq!(q.timeout, Some(18));
    // RDMA_OPTION_ID_TOS: the REQ's path carries it, and both QPs send with it (their
    // packets' IP TOS byte).
    assert_eq!(rtr.av.map(|av| av.traffic_class), Some(0x20));
    assert_eq!(q.av.map(|av| av.traffic_class), Some(0x20));
    let cq = client.qp().unwrap().query();
    assert_eq!(cq.av.map(|av| av.traffic_class), Some(0x20));
}

/// The next event that is not a TIMEWAIT exit (those of earlier cycles arrive late).
fn next_live(chan: &EventChannel, within: Duration) -> CmEvent {
    loop {
        let ev = next(chan, within);
        if ev.kind != CmEventKind::TimewaitExit {
            return ev;
        }
    }
}

/// A connection made and torn down on `ctx`s with `schan`/`cchan` to `dst`, the SEND in
/// between checking the QPs; each side sees the other's disconnect (TIMEWAIT's end is not
/// waited for). Panics with what did not come within `within`.
fn one_cycle(
    (sctx, schan): (&Context, &EventChannel),
    (cctx, cchan): (&Context, &EventChannel),
    dst: SocketAddr,
    within: Duration,
) {
    let (client, _cpd, ccq) = active(cctx, cchan, dst);
    client.connect(&ConnParam::default()).unwrap();
    let req = next_live(schan, within);
    assert_eq!(req.kind, CmEventKind::ConnectRequest, "{req:?}");
    let (_spd, scq, _sqp) = passive_qp(&req.id, sctx, QpType::Rc, 16);
    req.id.accept(&ConnParam::default()).unwrap();
    assert_eq!(next_live(cchan, within).kind, CmEventKind::Established);
    assert_eq!(next_live(schan, within).kind, CmEventKind::Established);
    let cqp = client.qp().unwrap();
    cqp.post_send_owned(2, SendOp::Send, SendFlags::SIGNALED, None, b"ping".to_vec())
        .unwrap();
    assert_eq!(wait_wc(&ccq).status, WcStatus::Success);
    assert_eq!(wait_wc(&scq).status, WcStatus::Success);
    client.disconnect().unwrap();
    assert_eq!(next_live(schan, within).kind, CmEventKind::Disconnected);
    req.id.disconnect().unwrap();
    assert_eq!(next_live(cchan, within).kind, CmEventKind::Disconnected);
}

/// `SOFTRDMA_FAULTS` on both devices, on every packet (MADs and the QPs' traffic):
/// lost, duplicated and reordered MADs are resent, answered once and put in order by the
/// agents, and every connection still forms, carries its SEND and ends.
#[test]
fn connections_form_through_lost_duplicated_and_reordered_mads() {
    let faulty = |a: &str| {
        let opts = DeviceOptions {
            faults: Some(LinkFaults::parse("loss=0.1,dup=0.2,reorder=0.3").unwrap()),
            ..Default::default()
        };
        Context::open_with(a, a.parse().unwrap(), Mtu::M1024, opts).unwrap()
    };
    let (sctx, cctx) = (faulty("127.0.0.84"), faulty("127.0.0.85"));
    let (schan, cchan) = channels();
    let _listener = listening(&schan, &sctx, PortSpace::Tcp, 7478);
    for _ in 0..5 {
        one_cycle(
            (&sctx, &schan),
            (&cctx, &cchan),
            "127.0.0.84:7478".parse().unwrap(),
            // Each lost MAD costs a response timeout (537 ms); seven tries at most.
            Duration::from_secs(8),
        );
    }
}

/// Connections made and ended over and over leave nothing behind: once TIMEWAIT has
/// ended, the CM IDs that `res show cm_id` lists come back to the listener alone.
#[test]
fn ten_thousand_connect_disconnect_cycles_leave_nothing_behind() {
    let (sctx, cctx, schan, cchan, _listener) =
        served(("127.0.0.86", "127.0.0.87"), PortSpace::Tcp, 7479);
    let ids = |addr: &str| {
        softrdma::stats::resources(&softrdma::stats::key(addr, addr.parse().unwrap()))
            .0
            .iter()
            .filter(|r| r.kind == "cm_id" && r.pid == std::process::id())
            .count()
    };
    // The 10,000 (about 20 s in a debug build); SOFTRDMA_CM_CYCLES sets another.
    let cycles: usize = std::env::var("SOFTRDMA_CM_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    for _ in 0..cycles {
        one_cycle(
            (&sctx, &schan),
            (&cctx, &cchan),
            "127.0.0.86:7479".parse().unwrap(),
            Duration::from_secs(10),
        );
    }
    // Every TIMEWAIT ends (its event holds the last handle of its ID), and the published
    // lists catch up.
    let end = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        while schan.get_event(Some(Duration::ZERO)).is_some() {}
        while cchan.get_event(Some(Duration::ZERO)).is_some() {}
        let (s, c) = (ids("127.0.0.86"), ids("127.0.0.87"));
        if (s, c) == (1, 0) {
            break;
        }
        assert!(
            std::time::Instant::now() < end,
            "cm_ids left: server {s} (the listener is 1), client {c}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// On a shared device, the CM moves an active side's QP to RTS under its agent's lock,
/// where no same-host route lookup may wait, so the device's resolver thread looks the
/// route up; ESTABLISHED waits for it. The QP's first SEND then takes the ring, never the
/// UDP path first and a ring after (a UC message would be lost at the switch). The
/// client's lookups are held back 300 ms, so that without the wait the SEND would come
/// first.
#[test]
fn an_active_sides_established_waits_for_its_same_host_route() {
    let c = slowly_accepted("127.0.0.90", 7480);
    expect(&c.cchan, CmEventKind::Established);

    let udp_sends = || c.cctx.counters().get(Counter::SendCalls);
    let before = udp_sends();
    let cqp = c.client.qp().unwrap();
    cqp.post_send_owned(
        2,
        SendOp::Send,
        SendFlags::SIGNALED,
        None,
        b"first".to_vec(),
    )
    .unwrap();
    assert_eq!(wait_wc(&c.ccq).status, WcStatus::Success);
    assert_eq!(wait_wc(&c.scq).status, WcStatus::Success);
    assert!(c.sqp.reclaim(1).unwrap().starts_with(b"first"));
    assert_eq!(
        udp_sends(),
        before,
        "the QP's first packet took the UDP path"
    );
}

/// A connection on the shared device on `addr`, accepted, whose client's route lookups
/// are each held back 300 ms; with everything that must live as long as it does.
struct SlowlyAccepted {
    _owner: Context,
    _sctx: Context,
    cctx: Context,
    schan: EventChannel,
    cchan: EventChannel,
    _listener: CmId,
    client: CmId,
    _cpd: ProtectionDomain,
    ccq: CompletionQueue,
    req: CmEvent,
    _spd: ProtectionDomain,
    scq: CompletionQueue,
    sqp: std::sync::Arc<QueuePair>,
}

/// Opens the owner, a server and the slow client on `addr`, listens on `port`, connects
/// and accepts (the server's QP has a 64-byte receive posted), and waits for nothing
/// more.
fn slowly_accepted(addr: &str, port: u16) -> SlowlyAccepted {
    let (owner, sctx) = (ctx(addr), ctx(addr));
    let slow = DeviceOptions {
        route_lookup_delay: Duration::from_millis(300),
        ..Default::default()
    };
    let cctx = Context::open_with(addr, addr.parse().unwrap(), Mtu::M1024, slow).unwrap();
    let (schan, cchan) = channels();
    let listener = listening(&schan, &sctx, PortSpace::Tcp, port);
    let dst = SocketAddr::new(addr.parse().unwrap(), port);
    let (client, cpd, ccq) = active(&cctx, &cchan, dst);
    client.connect(&ConnParam::default()).unwrap();
    let req = expect(&schan, CmEventKind::ConnectRequest);
    let (spd, scq, sqp) = passive_qp(&req.id, &sctx, QpType::Rc, 64);
    req.id.accept(&ConnParam::default()).unwrap();
    SlowlyAccepted {
        _owner: owner,
        _sctx: sctx,
        cctx,
        schan,
        cchan,
        _listener: listener,
        client,
        _cpd: cpd,
        ccq,
        req,
        _spd: spd,
        scq,
        sqp,
    }
}

/// While an active side's ESTABLISHED waits for its route (above), the passive side,
/// established by the RTU already, disconnects at once: the client still sees
/// ESTABLISHED first, then DISCONNECTED, as rdma_cm programs expect.
#[test]
fn a_disconnect_while_the_route_is_looked_up_comes_after_established() {
    let c = slowly_accepted("127.0.0.91", 7481);
    expect(&c.schan, CmEventKind::Established);
    c.req.id.disconnect().unwrap();
    expect(&c.cchan, CmEventKind::Established);
    expect(&c.cchan, CmEventKind::Disconnected);
}
