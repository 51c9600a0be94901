//! `softrdma rc-pingpong`, `uc-pingpong` and `ud-pingpong`: the rdma-core example programs,
//! flag for flag and byte for byte on the out-of-band TCP exchange, so that either end can be
//! `ibv_rc_pingpong` (or `ibv_uc_pingpong`, `ibv_ud_pingpong`).
//!
//! The exchange: the client connects to TCP port 18515 and sends 52 bytes,
//! `"%04x:%06x:%06x:%s"` (LID, QPN, PSN, GID as 32 hex digits of its bytes) and a NUL; the
//! server answers the same; the client sends `"done"` and a NUL. Then the client sends `size`
//! bytes and each side answers every message it receives, `iters` times.

use crate::error::CliError;
use clap::Args;
use softrdma::{
    AccessFlags, ConnectAttr, Context, Mtu, Payload, Peer, Psn, QpCaps, QpInitAttr, QpType, Qpn,
    RecvWr, SendFlags, SendOp, SendWr, UdDest, WcStatus,
};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv6Addr, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
const GRH: usize = 40;
const PAGE: usize = 4096;
const QKEY: u32 = 0x1111_1111;

/// Flags of the pingpong commands (those of `ibv_rc_pingpong`).
#[derive(Debug, Args)]
pub struct PingpongArgs {
    /// Listen on / connect to TCP port PORT.
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    port: u16,
    /// Use device DEV (default: the first device).
    #[arg(short = 'd', long = "ib-dev")]
    ib_dev: Option<String>,
    /// Use port PORT of the device.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    ib_port: u8,
    /// Size of the message to exchange (default 4096; UD 1024).
    #[arg(short = 's', long = "size")]
    size: Option<usize>,
    /// Path MTU (RC and UC).
    #[arg(short = 'm', long = "mtu", default_value_t = 1024)]
    mtu: usize,
    /// Number of receives to post at a time.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    rx_depth: usize,
    /// Number of exchanges.
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    iters: usize,
    /// Service level (ignored on RoCE, accepted for compatibility).
    #[arg(short = 'l', long = "sl", default_value_t = 0)]
    sl: u8,
    /// Sleep on CQ events instead of polling.
    #[arg(short = 'e', long = "events")]
    events: bool,
    /// Local port GID index (1: the IPv4-mapped GID).
    #[arg(short = 'g', long = "gid-idx")]
    gid_idx: Option<usize>,
    /// Validate the received buffer.
    #[arg(short = 'c', long = "chk")]
    chk: bool,
    /// Give up when no completion arrives for this many seconds (softrdma's own guard).
    #[arg(long = "timeout", default_value_t = 30)]
    timeout: u64,
    /// Connect to the server at HOST; without it, run as the server.
    host: Option<String>,
}

struct Dest {
    lid: u16,
    qpn: u32,
    psn: u32,
    gid: Ipv6Addr,
}

impl Dest {
    fn wire(&self) -> [u8; 52] {
        let hex: String = self
            .gid
            .octets()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let s = format!("{:04x}:{:06x}:{:06x}:{hex}", self.lid, self.qpn, self.psn);
        let mut m = [0u8; 52];
        m[..s.len()].copy_from_slice(s.as_bytes());
        m
    }

    fn parse(m: &[u8; 52]) -> Result<Self, CliError> {
        let (s, f) = crate::oob::fields(&m[..51], "remote address")?;
        if f.len() != 4 || f[3].len() != 32 {
            return Err(CliError::Peer(format!(
                "remote address {s:?} is not LID:QPN:PSN:GID"
            )));
        }
        let num = crate::oob::hex32;
        let mut g = [0u8; 16];
        for (i, b) in g.iter_mut().enumerate() {
            *b = u8::from_str_radix(&f[3][2 * i..2 * i + 2], 16).map_err(CliError::PeerGid)?;
        }
        Ok(Self {
            lid: num(f[0])? as u16,
            qpn: num(f[1])?,
            psn: num(f[2])?,
            gid: Ipv6Addr::from(g),
        })
    }

    fn line(&self, what: &str, ud_local: bool) -> String {
        let sep = if ud_local { ":" } else { "," };
        format!(
            "  {what} LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}{sep} GID {}",
            self.lid, self.qpn, self.psn, self.gid
        )
    }
}

/// Exchanges addresses. `connect` runs with the peer's address before the server answers,
/// as in rdma-core: the client may send as soon as it has the server's address, so the
/// server's QP must be ready to receive by then (UC and UD would lose the message).
fn exchange(
    a: &PingpongArgs,
    me: &Dest,
    connect: impl FnOnce(&Dest, IpAddr) -> Result<(), CliError>,
) -> Result<(Dest, IpAddr), CliError> {
    let io = CliError::Oob;
    let read_failed = |source| CliError::Io {
        what: "Couldn't read remote address".into(),
        source,
    };
    match &a.host {
        Some(host) => {
            let mut s =
                TcpStream::connect((host.as_str(), a.port)).map_err(|source| CliError::Io {
                    what: format!("Couldn't connect to {host}:{}", a.port),
                    source,
                })?;
            let peer_ip = s.peer_addr().map_err(io)?.ip();
            s.write_all(&me.wire()).map_err(io)?;
            let mut m = [0u8; 52];
            s.read_exact(&mut m).map_err(read_failed)?;
            s.write_all(b"done\0").map_err(io)?;
            let rem = Dest::parse(&m)?;
            connect(&rem, peer_ip)?;
            Ok((rem, peer_ip))
        }
        None => {
            let l = crate::oob::listen(a.port)?;
            let (mut s, peer) = l.accept().map_err(|source| CliError::Io {
                what: "accept() failed".into(),
                source,
            })?;
            let mut m = [0u8; 52];
            s.read_exact(&mut m).map_err(read_failed)?;
            let rem = Dest::parse(&m)?;
            let peer_ip = peer.ip().to_canonical();
            connect(&rem, peer_ip)?;
            s.write_all(&me.wire()).map_err(io)?;
            let mut done = [0u8; 5];
            // The client says "done"; an early close is fine too.
            let _ = s.read(&mut done);
            Ok((rem, peer_ip))
        }
    }
}

/// Runs one of the pingpong commands.
pub fn run(qp_type: QpType, a: &PingpongArgs) -> ExitCode {
    match pingpong(qp_type, a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}

fn pingpong(qp_type: QpType, a: &PingpongArgs) -> Result<(), CliError> {
    let ud = qp_type == QpType::Ud;
    let size = a.size.unwrap_or(if ud { 1024 } else { 4096 });
    let mtu =
        Mtu::from_bytes(a.mtu).ok_or_else(|| CliError::Usage(format!("invalid MTU {}", a.mtu)))?;
    if a.ib_port != 1 {
        return Err(CliError::Usage(format!(
            "port {} does not exist (the device has port 1)",
            a.ib_port
        )));
    }
    // A kernel device's name gets softrdma's plain word that it does not run verbs there
    // yet; an unknown name, that there is no such device.
    let ctx = Context::open(a.ib_dev.as_deref())?;
    if ud && size > ctx.active_mtu().bytes() {
        return Err(CliError::Usage(format!(
            "Requested size larger than port MTU ({})",
            ctx.active_mtu().bytes()
        )));
    }
    let off = if ud { GRH } else { 0 };
    let pd = ctx.alloc_pd();
    let mr = pd
        .register(vec![0x7b; size + off], AccessFlags::LOCAL_WRITE)
        .map_err(CliError::verb("Couldn't register MR"))?;
    let channel = if a.events {
        Some(ctx.create_comp_channel()?)
    } else {
        None
    };
    let cq = ctx
        .create_cq(a.rx_depth + 1, channel.as_ref())
        .map_err(CliError::verb("Couldn't create CQ"))?;
    let qp = pd
        .create_qp(QpInitAttr {
            cap: QpCaps {
                max_send_wr: 1,
                max_recv_wr: a.rx_depth as u32,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            ..QpInitAttr::new(qp_type, &cq)
        })
        .map_err(CliError::verb("Couldn't create QP"))?;
    let attr = ConnectAttr {
        mtu,
        access: AccessFlags::empty(),
        qkey: QKEY,
        max_rd_atomic: 1,
        ..ConnectAttr::default()
    };
    qp.init(&attr)
        .map_err(CliError::verb("Failed to modify QP to INIT"))?;
    let post_recv = |n: usize| -> usize {
        (0..n)
            .take_while(|_| {
                qp.post_recv(RecvWr {
                    wr_id: RECV_WRID,
                    sg_list: softrdma_proto::sg![mr.sge(0, (size + off) as u32)],
                })
                .is_ok()
            })
            .count()
    };
    // The QP must be able to receive before the peer learns its address.
    let mut routs = post_recv(a.rx_depth);
    if routs < a.rx_depth {
        return Err(CliError::Failed(format!("Couldn't post receive ({routs})")));
    }
    if channel.is_some() {
        cq.req_notify(false)?;
    }
    let gid = match a.gid_idx {
        Some(i) => *ctx
            .gids()
            .get(i)
            .ok_or_else(|| CliError::Usage(format!("can't read sgid of index {i}")))?,
        None => Ipv6Addr::UNSPECIFIED,
    };
    let me = Dest {
        lid: 0,
        qpn: qp.qp_num().value(),
        psn: rand::random::<u32>() & 0xFF_FFFF,
        gid,
    };
    println!("{}", me.line("local address: ", ud));
    // The peer's address comes from its GID; without one (no -g), from the TCP connection.
    let peer_of = |rem: &Dest, tcp_peer: IpAddr| {
        if rem.gid.is_unspecified() {
            tcp_peer
        } else {
            IpAddr::V6(rem.gid).to_canonical()
        }
    };
    let (rem, tcp_peer) = exchange(a, &me, |rem, tcp_peer| {
        qp.connect(
            Psn::new(me.psn),
            &Peer {
                addr: peer_of(rem, tcp_peer),
                qpn: Qpn::new(rem.qpn),
                psn: Psn::new(rem.psn),
            },
            &attr,
        )
        .map_err(CliError::verb("Couldn't connect to remote QP"))
    })?;
    println!("{}", rem.line("remote address:", false));
    let peer_ip = peer_of(&rem, tcp_peer);

    let client = a.host.is_some();
    let post_send = || {
        qp.post_send(SendWr {
            wr_id: SEND_WRID,
            op: SendOp::Send,
            payload: Payload::Sges(softrdma_proto::sg![mr.sge(off as u64, size as u32)]),
            flags: SendFlags::SIGNALED,
            ud: ud.then_some(UdDest {
                src: ctx.addr(),
                ip: peer_ip,
                qpn: Qpn::new(rem.qpn),
                qkey: QKEY,
                traffic_class: 0,
            }),
        })
    };
    let mut pending = RECV_WRID;
    if client {
        if a.chk {
            for i in (0..size).step_by(PAGE) {
                mr.write(off + i, &[0])?;
            }
        }
        post_send().map_err(CliError::verb("Couldn't post send"))?;
        pending |= SEND_WRID;
    }
    let start = Instant::now();
    let (mut rcnt, mut scnt) = (0, 0);
    let mut last = Instant::now();
    let guard = Duration::from_secs(a.timeout);
    while rcnt < a.iters || scnt < a.iters {
        let wcs = if let Some(ch) = &channel {
            match ch.get_cq_event(Some(Duration::from_millis(100))) {
                Ok(Some(_)) => cq.req_notify(false)?,
                Ok(None) => {}
                Err(source) => {
                    return Err(CliError::Verb {
                        what: "Failed to get cq_event",
                        source,
                    });
                }
            }
            cq.poll(2)
        } else {
            cq.poll(2)
        };
        if wcs.is_empty() {
            if last.elapsed() > guard {
                // What the device saw tells a peer that sent nothing from packets that
                // arrived and were dropped (and why).
                let seen: Vec<String> = ctx
                    .hw_counters()
                    .into_iter()
                    .filter(|&(_, v)| v != 0)
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect();
                return Err(CliError::Timeout(format!(
                    "no completion for {} s ({rcnt} received, {scnt} sent): is the peer alive? \
                     The device counted: {}; the QP: {:?}",
                    a.timeout,
                    if seen.is_empty() {
                        "nothing".into()
                    } else {
                        seen.join(", ")
                    },
                    qp.counters()
                )));
            }
            std::hint::spin_loop();
            continue;
        }
        last = Instant::now();
        for wc in wcs {
            if wc.status != WcStatus::Success {
                return Err(CliError::Failed(format!(
                    "Failed status {} ({}) for wr_id {}",
                    wc.status.name().to_lowercase().replace('_', " "),
                    wc.status as u32,
                    wc.wr_id
                )));
            }
            match wc.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    routs -= 1;
                    if routs <= 1 {
                        routs += post_recv(a.rx_depth - routs);
                        if routs < a.rx_depth {
                            return Err(CliError::Failed(format!(
                                "Couldn't post receive ({routs})"
                            )));
                        }
                    }
                    rcnt += 1;
                }
                id => {
                    return Err(CliError::Failed(format!(
                        "Completion for unknown wr_id {id}"
                    )));
                }
            }
            pending &= !wc.wr_id;
            if scnt < a.iters && pending == 0 {
                post_send().map_err(CliError::verb("Couldn't post send"))?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    let usec = start.elapsed().as_secs_f64() * 1e6;
    let bytes = (size * a.iters * 2) as f64;
    println!(
        "{} bytes in {:.2} seconds = {:.2} Mbit/sec",
        size * a.iters * 2,
        usec / 1e6,
        bytes * 8.0 / usec
    );
    println!(
        "{} iters in {:.2} seconds = {:.2} usec/iter",
        a.iters,
        usec / 1e6,
        usec / a.iters as f64
    );
    if std::env::var_os("SOFTRDMA_DEBUG").is_some() {
        eprintln!("{:?}\n{:?}", qp.counters(), ctx.counters().snapshot());
    }
    if !client && a.chk {
        // rdma-core checks the first byte of every page (0); softrdma also checks that every
        // other byte is the 0x7b both programs fill their buffers with.
        let buf = mr.to_vec();
        let data = &buf[off..off + size];
        let mut bad = false;
        for (p, page) in data.chunks(PAGE).enumerate() {
            if page[0] != 0 || page[1..].iter().any(|&b| b != 0x7b) {
                println!("invalid data in page {p}");
                bad = true;
            }
        }
        if bad {
            return Err(CliError::Failed("received data did not validate".into()));
        }
    }
    Ok(())
}
