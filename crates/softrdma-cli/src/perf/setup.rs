//! The resources a test runs on: the device, one CQ, the registered buffer and the QPs,
//! connected to the peer's through the out-of-band exchange in perftest's order.
//!
//! Owns [`Setup`] and [`QpEnd`]; calls `args` for the flags, `oob` for the exchange and the
//! `softrdma` verbs. It sets up only: the runners (`bw`, `lat`) use what it returns.

use super::args::{Conn, PerfArgs, Test, tx_depth};
use super::oob::{CACHE_LINE, Keys, Oob, PAGE, VERSION};
use crate::error::CliError;
use softrdma::{
    AccessFlags, CompletionQueue, ConnectAttr, Context, MemoryRegion, Mtu, Peer, Psn, QpCaps,
    QpInitAttr, QpType, Qpn, QueuePair, UdDest,
};
use std::net::{IpAddr, Ipv6Addr};

/// The Q_Key of perftest's UD tests.
const QKEY: u32 = 0x1111_1111;
/// Room for the GRH that a UD receive buffer starts with (IBTA 11.4.1.2).
const GRH: u64 = 40;
/// Receive WQEs kept posted by the SEND tests (perftest's default RX depth).
pub(super) const RX_DEPTH: u32 = 512;

/// Everything a test runs on, connected.
pub(super) struct Setup {
    /// The device.
    pub(super) ctx: Context,
    /// The one CQ of every QP.
    pub(super) cq: CompletionQueue,
    /// The buffer: a send slot and a receive slot per QP.
    pub(super) mr: MemoryRegion,
    /// Bytes in each slot of the buffer. As in perftest, QP `i` sends from slot `i` and the
    /// peer writes into slot `qps + i`.
    pub(super) half: u64,
    /// The out-of-band connection to the peer.
    pub(super) oob: Oob,
    /// The path MTU both sides agreed on.
    pub(super) mtu: Mtu,
    /// The QPs (`-q`), all on one CQ.
    pub(super) qps: Vec<QpEnd>,
}

/// One QP of a test and what both sides know about it.
pub(super) struct QpEnd {
    /// The QP.
    pub(super) qp: QueuePair,
    /// What this side sent the peer about it.
    pub(super) me: Keys,
    /// What the peer sent about its own.
    pub(super) rem: Keys,
    /// Where UD sends go.
    pub(super) ud: Option<UdDest>,
    /// Receive WQEs posted and not yet completed.
    pub(super) recvs: std::cell::Cell<u32>,
    /// Offset in the region of the data this QP sends.
    pub(super) send_off: u64,
    /// Offset in the region that the peer writes into and receives land in.
    pub(super) recv_off: u64,
}

impl Setup {
    /// QP 0's keys: the barriers carry them, as perftest's carry `my_dest[0]`.
    pub(super) fn me(&self) -> Keys {
        self.qps[0].me
    }

    /// One of perftest's sync points (a key exchange).
    pub(super) fn barrier(&mut self) -> Result<(), CliError> {
        let me = self.me();
        self.oob.hand_shake(&me).map(|_| ())
    }

    /// The last sync point and `"done"`.
    pub(super) fn close(&mut self) -> Result<(), CliError> {
        let me = self.me();
        self.oob.close(&me)
    }
}

/// Opens the device, registers a buffer for `max_size` messages, creates the QPs and
/// connects them to the peer's in perftest's order of exchanges.
pub(super) fn setup(a: &PerfArgs, max_size: u64) -> Result<Setup, CliError> {
    let ctx = Context::open(a.ib_dev.as_deref())?;
    // perftest's buffer: two halves, sends from the first, the peer writes into the second.
    let half = (max_size + GRH)
        .max(u64::from(PAGE))
        .next_multiple_of(u64::from(PAGE));
    let pd = ctx.alloc_pd();
    let n = u64::from(a.qps);
    let (len, access) = (
        (2 * n * half) as usize,
        AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC,
    );
    let mr = if a.app_memory {
        pd.register(vec![0; len], access)
    } else {
        pd.register_zeroed(len, access)
    }
    .map_err(CliError::verb("Couldn't register MR"))?;
    // As perftest does: zeros for write-lat (which spins on the last byte), random bytes
    // otherwise. Either way every page is written once: untouched heap pages all read as the
    // kernel's one zero page, which would make a copy out of them cheaper than out of a
    // real buffer's.
    let mut fill = vec![0u8; len];
    if a.test != Test::WriteLat {
        rand::Rng::fill(&mut rand::rng(), &mut fill[..]);
    }
    mr.write(0, &fill)
        .map_err(CliError::verb("Couldn't initialize the buffer"))?;
    drop(fill);
    let depth = tx_depth(a);
    let cq = ctx
        .create_cq(((depth + RX_DEPTH) * a.qps + 1) as usize, None)
        .map_err(CliError::verb("Couldn't create CQ"))?;
    let qp_type = match a.conn {
        Conn::RC => QpType::Rc,
        Conn::UC => QpType::Uc,
        Conn::UD => QpType::Ud,
    };
    let mut qps = Vec::new();
    for _ in 0..a.qps {
        qps.push(
            pd.create_qp(QpInitAttr {
                cap: QpCaps {
                    max_send_wr: depth,
                    max_recv_wr: RX_DEPTH,
                    ..QpCaps::default()
                },
                ..QpInitAttr::new(qp_type, &cq)
            })
            .map_err(CliError::verb("Couldn't create QP"))?,
        );
    }
    let mut oob = Oob::open(a)?;
    // Versions, then page and cache-line sizes, then the MTU (perftest's exchange_versions,
    // check_sys_data and check_mtu).
    let mut v = [0u8; 16];
    v[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
    let rv = oob.xchg(&v)?;
    let rem_text = String::from_utf8_lossy(&rv)
        .trim_end_matches('\0')
        .to_string();
    let rem_version: f64 = rem_text.parse().unwrap_or(0.0);
    if rem_version < 5.70 {
        return Err(CliError::Peer(format!(
            "remote perftest version {rem_text:?} is older than 5.70"
        )));
    }
    oob.xchg(&PAGE.to_be_bytes())?;
    oob.xchg(&CACHE_LINE.to_be_bytes())?;
    let want = match a.mtu {
        Some(m) => Mtu::from_bytes(m).ok_or_else(|| {
            CliError::Usage(format!("invalid MTU {m} (256, 512, 1024, 2048 or 4096)"))
        })?,
        None => ctx.active_mtu(),
    };
    let mine = (want as u8).min(ctx.active_mtu() as u8);
    let r = oob.xchg(&[b'0' + mine, 0])?;
    let theirs = (r[0] as char).to_digit(10).map_or(mine, |d| d as u8);
    let mtu = match mine.min(theirs) {
        1 => Mtu::M256,
        2 => Mtu::M512,
        3 => Mtu::M1024,
        4 => Mtu::M2048,
        _ => Mtu::M4096,
    };
    if a.conn == Conn::UD && a.size.is_some_and(|x| x > mtu.bytes() as u64) {
        return Err(CliError::Usage(format!(
            "Max message size in UD cannot be greater than MTU ({})",
            mtu.bytes()
        )));
    }
    let attr = ConnectAttr {
        mtu,
        qkey: QKEY,
        max_rd_atomic: 16,
        ..ConnectAttr::default()
    };
    for qp in &qps {
        qp.init(&attr)
            .map_err(CliError::verb("Failed to modify QP to INIT"))?;
    }
    let gid = *ctx
        .gids()
        .get(a.gid_index)
        .ok_or_else(|| CliError::Usage(format!("GID index {} does not exist", a.gid_index)))?;
    let keys: Vec<Keys> = (0..n)
        .zip(&qps)
        .map(|(i, qp)| Keys {
            lid: 0,
            out_reads: if a.test.reads() { 16 } else { 1 },
            qpn: qp.qp_num().value(),
            psn: rand::random::<u32>() & 0xFF_FFFF,
            rkey: mr.rkey(),
            vaddr: mr.addr() + (n + i) * half,
            gid: gid.octets(),
            srqn: 0,
        })
        .collect();
    // perftest's sequence: latency tests of WRITE, READ and atomics shake hands once before the
    // QP information; after connecting, SEND tests shake hands once ("connected") then once
    // per QP ("printed"), the others once per QP ("printed") then once ("after RTR").
    if matches!(a.test, Test::ReadLat | Test::AtomicLat | Test::WriteLat) {
        oob.hand_shake(&keys[0])?;
    }
    let mut rems = Vec::new();
    for k in &keys {
        rems.push(oob.hand_shake(k)?);
    }
    let mut ends = Vec::new();
    for (i, ((qp, me), rem)) in (0..n).zip(qps.into_iter().zip(keys).zip(rems)) {
        let peer_ip = if rem.gid == [0; 16] {
            oob.s
                .peer_addr()
                .map_err(CliError::Oob)?
                .ip()
                .to_canonical()
        } else {
            IpAddr::V6(Ipv6Addr::from(rem.gid)).to_canonical()
        };
        let attr = ConnectAttr {
            max_rd_atomic: rem.out_reads.clamp(1, 16) as u8,
            ..attr
        };
        qp.connect(
            Psn::new(me.psn),
            &Peer {
                addr: peer_ip,
                qpn: Qpn::new(rem.qpn),
                psn: Psn::new(rem.psn),
            },
            &attr,
        )
        .map_err(CliError::verb("Couldn't connect to remote QP"))?;
        ends.push(QpEnd {
            qp,
            me,
            rem,
            ud: (a.conn == Conn::UD).then(|| UdDest {
                src: IpAddr::V6(gid).to_canonical(),
                ip: peer_ip,
                qpn: Qpn::new(rem.qpn),
                qkey: QKEY,
                traffic_class: 0,
            }),
            recvs: std::cell::Cell::new(0),
            send_off: i * half,
            recv_off: (n + i) * half,
        });
    }
    let send = matches!(a.test, Test::SendBw | Test::SendLat);
    if send {
        oob.hand_shake(&ends[0].me)?;
    }
    for e in &ends {
        oob.hand_shake(&e.me)?;
    }
    if !send {
        oob.hand_shake(&ends[0].me)?;
    }
    Ok(Setup {
        ctx,
        cq,
        mr,
        half,
        oob,
        mtu,
        qps: ends,
    })
}
