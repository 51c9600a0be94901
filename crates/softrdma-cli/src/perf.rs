//! `softrdma perf`: perftest's bandwidth and latency tests, speaking perftest 4.5's
//! out-of-band protocol on TCP port 18515, so that either end can be `ib_write_bw`,
//! `ib_read_lat`, `ib_send_lat`, `ib_atomic_lat`, ...
//!
//! The exchange (perftest's `perftest_communication.c`; the client writes first, the server
//! reads first, in every step): a 16-byte version string; the page size and cache line size
//! as 4-byte big-endian numbers; the MTU enum as a 2-byte string; then 108-byte key messages
//! `LID:OUT_READS:QPN:PSN:RKEY:VADDR:GID(16 bytes):SRQN:`, which also serve as barriers. BW
//! tests end with the client's report (size, iterations, peak, average, message rate, all
//! big-endian) and a last barrier followed by `"done"`.
//!
//! The contract: every test over the transports perftest allows for it (WRITE RC/UC, SEND
//! RC/UC/UD, READ and atomics RC), `-q` and `-b` in the bandwidth tests (perftest refuses
//! them in latency tests, and so do we), `-a`, `-D`, `-l`; the same sequence of exchanges as
//! perftest for each combination, so either side may be perftest. Flags this implementation
//! cannot honour are refused by name before anything is opened; a peer that stops answering
//! is an error after 30 s (RDMA) or 120 s (out of band), never a hang.

use crate::error::CliError;
use clap::{Args, ValueEnum};
use softrdma::{
    AccessFlags, Completion, CompletionQueue, ConnectAttr, Context, MemoryRegion, Mtu, Payload,
    Peer, Psn, QpCaps, QpInitAttr, QpType, Qpn, QueuePair, RecvWr, SendFlags, SendOp, SendWr,
    UdDest, WcOpcode, WcStatus,
};
use std::io::{IsTerminal, Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Test {
    /// RDMA WRITE bandwidth.
    WriteBw,
    /// RDMA WRITE latency (ping-pong).
    WriteLat,
    /// RDMA READ bandwidth.
    ReadBw,
    /// RDMA READ latency.
    ReadLat,
    /// SEND bandwidth.
    SendBw,
    /// SEND latency (ping-pong).
    SendLat,
    /// Atomic bandwidth.
    AtomicBw,
    /// Atomic latency.
    AtomicLat,
}

impl Test {
    fn is_bw(self) -> bool {
        matches!(
            self,
            Test::WriteBw | Test::ReadBw | Test::SendBw | Test::AtomicBw
        )
    }
    fn title(self) -> &'static str {
        match self {
            Test::WriteBw => "RDMA_Write BW Test",
            Test::WriteLat => "RDMA_Write Latency Test",
            Test::ReadBw => "RDMA_Read BW Test",
            Test::ReadLat => "RDMA_Read Latency Test",
            Test::SendBw => "Send BW Test",
            Test::SendLat => "Send Latency Test",
            Test::AtomicBw => "Atomic FETCH_AND_ADD BW Test",
            Test::AtomicLat => "Atomic FETCH_AND_ADD Latency Test",
        }
    }
    fn name(self) -> &'static str {
        match self {
            Test::WriteBw => "write-bw",
            Test::WriteLat => "write-lat",
            Test::ReadBw => "read-bw",
            Test::ReadLat => "read-lat",
            Test::SendBw => "send-bw",
            Test::SendLat => "send-lat",
            Test::AtomicBw => "atomic-bw",
            Test::AtomicLat => "atomic-lat",
        }
    }
    fn reads(self) -> bool {
        matches!(
            self,
            Test::ReadBw | Test::ReadLat | Test::AtomicBw | Test::AtomicLat
        )
    }
}

/// Connection types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[allow(clippy::upper_case_acronyms)]
pub enum Conn {
    /// Reliable connection.
    #[value(name = "RC", alias = "rc")]
    RC,
    /// Unreliable connection.
    #[value(name = "UC", alias = "uc")]
    UC,
    /// Unreliable datagram.
    #[value(name = "UD", alias = "ud")]
    UD,
}

/// Atomic operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[allow(non_camel_case_types, clippy::upper_case_acronyms)]
pub enum AtomicType {
    /// Compare and swap.
    #[value(name = "CMP_AND_SWAP")]
    CMP_AND_SWAP,
    /// Fetch and add.
    #[value(name = "FETCH_AND_ADD")]
    FETCH_AND_ADD,
}

/// Flags of `softrdma perf` (perftest's).
#[derive(Debug, Args)]
pub struct PerfArgs {
    /// The test.
    #[arg(value_enum)]
    test: Test,
    /// Connect to the server at HOST; without it, run as the server.
    host: Option<String>,
    /// Device (default: the first).
    #[arg(short = 'd', long = "ib-dev")]
    ib_dev: Option<String>,
    /// Port of the device.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    ib_port: u8,
    /// GID index (default 1: IPv4, as perftest picks on rxe).
    #[arg(short = 'x', long = "gid-index", default_value_t = 1)]
    gid_index: usize,
    /// Message size (default 65536 for BW tests, 2 for latency tests).
    #[arg(short = 's', long = "size")]
    size: Option<u64>,
    /// Iterations (default 5000 for BW tests, 1000 for latency tests).
    #[arg(short = 'n', long = "iters")]
    iters: Option<u64>,
    /// Run for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long = "duration")]
    duration: Option<u64>,
    /// All sizes from 2 to 2^23 bytes.
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// Path MTU (256..4096; default the port's).
    #[arg(short = 'm', long = "mtu")]
    mtu: Option<usize>,
    /// QPs (more than one in the bandwidth tests only).
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    qps: u32,
    /// TX depth (outstanding work requests).
    #[arg(short = 't', long = "tx-depth")]
    tx_depth: Option<u32>,
    /// Connection type.
    #[arg(short = 'c', long = "connection", value_enum, default_value = "RC")]
    conn: Conn,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    port: u16,
    /// Don't fail on CPU frequency differences (accepted for compatibility).
    #[arg(short = 'F', long = "CPU-freq")]
    cpu_freq: bool,
    /// Report Gbit/s instead of MB/s.
    #[arg(long = "report_gbits")]
    report_gbits: bool,
    /// Inline size (accepted; the soft device copies anyway).
    #[arg(short = 'I', long = "inline_size")]
    inline: Option<u32>,
    /// Bidirectional (BW tests): both sides send, and each prints the sum of both reports.
    #[arg(short = 'b', long = "bidirectional")]
    bidir: bool,
    /// Post send WRs in chains of this many (one call, one system call for a run of packets).
    #[arg(short = 'l', long = "post_list", default_value_t = 1)]
    post_list: u32,
    /// CQ moderation: signal every Nth send.
    #[arg(short = 'Q', long = "cq-mod", default_value_t = 100)]
    cq_mod: u32,
    /// Atomic operation.
    #[arg(
        short = 'A',
        long = "atomic_type",
        value_enum,
        default_value = "FETCH_AND_ADD"
    )]
    atomic: AtomicType,
    /// Print one JSON line of results after the table.
    #[arg(long)]
    json: bool,
    /// With -a, draw the results against message size as SVG.
    #[arg(long)]
    plot: Option<std::path::PathBuf>,
    /// Register a heap buffer of this process, as a C program's `malloc`ed memory, instead
    /// of shareable memory that softrdma allocates: a peer on the same host then places its
    /// WRITEs by cross-memory copy, as it does for programs run through the drop-in.
    #[arg(long)]
    app_memory: bool,
}

/// The 108-byte key message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Keys {
    lid: u16,
    out_reads: u16,
    qpn: u32,
    psn: u32,
    rkey: u32,
    vaddr: u64,
    gid: [u8; 16],
    srqn: u32,
}

impl Keys {
    fn wire(&self) -> [u8; 108] {
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr
        );
        for b in self.gid {
            s.push_str(&format!("{b:02x}:"));
        }
        s.push_str(&format!("{:08x}:", self.srqn));
        let mut m = [0u8; 108];
        let n = s.len().min(107);
        m[..n].copy_from_slice(&s.as_bytes()[..n]);
        m
    }

    fn parse(m: &[u8; 108]) -> Result<Self, CliError> {
        let text =
            std::str::from_utf8(m).map_err(|_| CliError::Peer("key message is not text".into()))?;
        let f: Vec<&str> = text.trim_end_matches('\0').split(':').collect();
        if f.len() < 23 {
            return Err(CliError::Peer(format!(
                "key message {text:?} has {} fields",
                f.len()
            )));
        }
        let h = |x: &str| {
            u64::from_str_radix(x, 16).map_err(|source| CliError::ParseInt {
                text: x.into(),
                source,
            })
        };
        let mut gid = [0u8; 16];
        for (i, g) in gid.iter_mut().enumerate() {
            *g = h(f[6 + i])? as u8;
        }
        Ok(Self {
            lid: h(f[0])? as u16,
            out_reads: h(f[1])? as u16,
            qpn: h(f[2])? as u32,
            psn: h(f[3])? as u32,
            rkey: h(f[4])? as u32,
            vaddr: h(f[5])?,
            gid,
            srqn: h(f[22])? as u32,
        })
    }
}

/// The out-of-band connection.
struct Oob {
    s: TcpStream,
    client: bool,
}

impl Oob {
    /// Both sides send `mine`; the client first.
    fn xchg(&mut self, mine: &[u8]) -> Result<Vec<u8>, CliError> {
        let mut theirs = vec![0u8; mine.len()];
        let io = |source| CliError::Io {
            what: "out-of-band exchange failed".into(),
            source,
        };
        if self.client {
            self.s.write_all(mine).map_err(io)?;
            self.s.read_exact(&mut theirs).map_err(io)?;
        } else {
            self.s.read_exact(&mut theirs).map_err(io)?;
            self.s.write_all(mine).map_err(io)?;
        }
        Ok(theirs)
    }

    fn hand_shake(&mut self, me: &Keys) -> Result<Keys, CliError> {
        let m = self.xchg(&me.wire())?;
        let mut a = [0u8; 108];
        a.copy_from_slice(&m);
        Keys::parse(&a)
    }

    /// Connects to the server, or listens and accepts the client.
    fn open(a: &PerfArgs) -> Result<Self, CliError> {
        match &a.host {
            Some(h) => {
                let s =
                    TcpStream::connect((h.as_str(), a.port)).map_err(|source| CliError::Io {
                        what: format!("Couldn't connect to {h}:{}", a.port),
                        source,
                    })?;
                Ok(Self::new(s, true))
            }
            None => {
                let l = TcpListener::bind(SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), a.port))
                    .or_else(|_| TcpListener::bind(("0.0.0.0", a.port)))
                    .map_err(|source| CliError::Io {
                        what: format!("Couldn't listen to port {}", a.port),
                        source,
                    })?;
                println!("\n************************************");
                println!("* Waiting for client to connect... *");
                println!("************************************");
                let (s, _) = l.accept().map_err(|source| CliError::Io {
                    what: "accept".into(),
                    source,
                })?;
                Ok(Self::new(s, false))
            }
        }
    }

    fn new(s: TcpStream, client: bool) -> Self {
        // Barriers are tiny messages that the other side waits for: no Nagle delay. A peer
        // that stops answering is an error, not a hang.
        let _ = s.set_nodelay(true);
        let _ = s.set_read_timeout(Some(Duration::from_secs(120)));
        Self { s, client }
    }

    /// BW reports both ways (perftest's `xchg_bw_reports`): size and iterations as big-endian
    /// 64-bit integers, then peak and average MB/s and Mpps as big-endian doubles. A side
    /// without a report of its own (the server of a one-way test) sends zeros.
    fn xchg_report(&mut self, mine: Option<&Row>) -> Result<Row, CliError> {
        let mut out = [0u64; 5];
        if let Some(&Row::Bw {
            bytes,
            iters,
            peak,
            avg,
            rate,
        }) = mine
        {
            out = [
                bytes,
                iters,
                (peak / MB).to_bits(),
                (avg / MB).to_bits(),
                (rate / 1e6).to_bits(),
            ];
        }
        let mut f = [0u64; 5];
        for (v, o) in f.iter_mut().zip(out) {
            let got = self.xchg(&o.to_be_bytes())?;
            *v = u64::from_be_bytes(
                got.try_into()
                    .map_err(|_| CliError::Peer("short report".into()))?,
            );
        }
        let d = |i: usize| f64::from_bits(f[i]);
        Ok(Row::Bw {
            bytes: f[0],
            iters: f[1],
            peak: d(2) * MB,
            avg: d(3) * MB,
            rate: d(4) * 1e6,
        })
    }

    /// The final barrier and `"done"`.
    fn close(&mut self, me: &Keys) -> Result<(), CliError> {
        self.hand_shake(me)?;
        let _ = self.s.write_all(b"done\0");
        Ok(())
    }
}

const VERSION: &str = "6.06";
const PAGE: u32 = 4096;
const CACHE_LINE: u32 = 64;
/// perftest's MB: 2^20 bytes.
const MB: f64 = 1048576.0;

/// Runs `softrdma perf`.
pub fn run(a: &PerfArgs, out: &mut impl Write) -> ExitCode {
    match perf(a, out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softrdma perf: {e}");
            ExitCode::from(1)
        }
    }
}

/// The Q_Key of perftest's UD tests.
const QKEY: u32 = 0x1111_1111;
/// Room for the GRH that a UD receive buffer starts with (IBTA 11.4.1.2).
const GRH: u64 = 40;
/// Receive WQEs kept posted by the SEND tests (perftest's default RX depth).
const RX_DEPTH: u32 = 512;
/// How long any single wait may take before the peer is declared gone.
const PEER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the receiving side of a timed `send-bw` goes on after its own end while
/// messages still arrive (see `run_bw_server`).
const DRAIN_QUIET: Duration = Duration::from_millis(500);

/// Everything a test runs on, connected.
struct Setup {
    ctx: Context,
    cq: CompletionQueue,
    mr: MemoryRegion,
    /// Bytes in each slot of the buffer. As in perftest, QP `i` sends from slot `i` and the
    /// peer writes into slot `qps + i`.
    half: u64,
    oob: Oob,
    mtu: Mtu,
    /// The QPs (`-q`), all on one CQ.
    qps: Vec<QpEnd>,
}

/// One QP of a test and what both sides know about it.
struct QpEnd {
    qp: QueuePair,
    me: Keys,
    rem: Keys,
    /// Where UD sends go.
    ud: Option<UdDest>,
    /// Receive WQEs posted and not yet completed.
    recvs: std::cell::Cell<u32>,
    /// Offset in the region of the data this QP sends.
    send_off: u64,
    /// Offset in the region that the peer writes into and receives land in.
    recv_off: u64,
}

impl Setup {
    /// QP 0's keys: the barriers carry them, as perftest's carry `my_dest[0]`.
    fn me(&self) -> Keys {
        self.qps[0].me
    }

    /// One of perftest's sync points (a key exchange).
    fn barrier(&mut self) -> Result<(), CliError> {
        let me = self.me();
        self.oob.hand_shake(&me).map(|_| ())
    }

    /// The last sync point and `"done"`.
    fn close(&mut self) -> Result<(), CliError> {
        let me = self.me();
        self.oob.close(&me)
    }
}

/// Checks the flags against what the test and this implementation allow, before touching the
/// network, so that misuse is reported by name.
fn check_args(a: &PerfArgs) -> Result<(), CliError> {
    if a.qps == 0 || a.qps > 64 {
        return Err(CliError::Usage(format!(
            "-q {} is out of range (1..64)",
            a.qps
        )));
    }
    if a.qps > 1 && !a.test.is_bw() {
        // As perftest: "Multiple QPs only available on bw tests".
        return Err(CliError::Usage(
            "more than one QP (-q): multiple QPs are available on the bandwidth tests only".into(),
        ));
    }
    if a.bidir && !a.test.is_bw() {
        return Err(CliError::Usage(format!(
            "-b is for the bandwidth tests, not {}",
            a.test.name()
        )));
    }
    let allowed: &[Conn] = match a.test {
        Test::WriteBw | Test::WriteLat => &[Conn::RC, Conn::UC],
        Test::SendBw | Test::SendLat => &[Conn::RC, Conn::UC, Conn::UD],
        _ => &[Conn::RC],
    };
    if !allowed.contains(&a.conn) {
        return Err(CliError::Usage(format!(
            "{} does not run over {:?} (allowed: {allowed:?})",
            a.test.name(),
            a.conn
        )));
    }
    if a.duration == Some(0) {
        return Err(CliError::Usage("-D must be at least 1 second".into()));
    }
    if a.iters == Some(0) {
        return Err(CliError::Usage("-n must be at least 1".into()));
    }
    if a.cq_mod == 0 {
        return Err(CliError::Usage("-Q must be at least 1".into()));
    }
    if a.ib_port != 1 {
        return Err(CliError::Usage(format!(
            "port {} does not exist (the device has port 1)",
            a.ib_port
        )));
    }
    if let Some(s) = a.size {
        if s == 0 || s > 1 << 31 {
            return Err(CliError::Usage(format!(
                "message size {s} is out of range (1..2^31)"
            )));
        }
    }
    Ok(())
}

fn setup(a: &PerfArgs, max_size: u64) -> Result<Setup, CliError> {
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

fn tx_depth(a: &PerfArgs) -> u32 {
    a.tx_depth
        .unwrap_or(if a.test.is_bw() { 128 } else { 1 })
        .clamp(1, 8192)
}

/// C's `%#0Nx`: like Rust's `{:#0N$x}` but zero prints without the prefix.
fn c_hex(v: u64, width: usize) -> String {
    if v == 0 {
        format!("{:0width$}", 0)
    } else {
        format!("{v:#0width$x}")
    }
}

/// perftest's test information block and the two address blocks.
fn header(a: &PerfArgs, s: &Setup, out: &mut impl Write) -> std::io::Result<()> {
    let line = "-".repeat(87);
    let client = a.host.is_some();
    writeln!(out, "{line}")?;
    writeln!(out, "                    {}", s_title(a))?;
    writeln!(
        out,
        " Dual-port       : OFF\t\tDevice         : {}",
        s.ctx.name()
    )?;
    writeln!(out, " Number of qps   : 1\t\tTransport type : IB")?;
    writeln!(
        out,
        " Connection type : {:?}\t\tUsing SRQ      : OFF",
        a.conn
    )?;
    writeln!(out, " PCIe relax order: ON")?;
    writeln!(out, " ibv_wr* API     : OFF")?;
    if client || a.bidir || !a.test.is_bw() {
        writeln!(out, " TX depth        : {}", tx_depth(a))?;
    }
    if a.post_list > 1 && a.test.is_bw() {
        writeln!(out, " Post List       : {}", a.post_list)?;
    }
    if matches!(a.test, Test::SendBw | Test::SendLat) && (!client || !a.test.is_bw()) {
        writeln!(out, " RX depth        : {RX_DEPTH}")?;
    }
    if a.test.is_bw() {
        writeln!(out, " CQ Moderation   : {}", a.cq_mod.min(tx_depth(a)))?;
    }
    writeln!(out, " Mtu             : {}[B]", s.mtu.bytes())?;
    writeln!(out, " Link type       : Ethernet")?;
    writeln!(out, " GID index       : {}", a.gid_index)?;
    if a.test.reads() {
        writeln!(out, " Outstand reads  : {}", s.me().out_reads)?;
    } else {
        writeln!(out, " Max inline data : {}[B]", a.inline.unwrap_or(0))?;
    }
    writeln!(out, " rdma_cm QPs\t : OFF")?;
    writeln!(out, " Data ex. method : Ethernet")?;
    writeln!(out, "{line}")?;
    let sides = s.qps.iter().map(|q| ("local", &q.me));
    for (what, k) in sides.chain(s.qps.iter().map(|q| ("remote", &q.rem))) {
        write!(
            out,
            " {what} address: LID {} QPN {} PSN {}",
            c_hex(k.lid.into(), 4),
            c_hex(k.qpn.into(), 6),
            c_hex(k.psn.into(), 6)
        )?;
        if matches!(a.test, Test::ReadBw | Test::ReadLat) {
            write!(out, " OUT {}", c_hex(k.out_reads.into(), 4))?;
        }
        if matches!(
            a.test,
            Test::ReadBw | Test::ReadLat | Test::WriteBw | Test::WriteLat
        ) {
            write!(
                out,
                " RKey {} VAddr {}",
                c_hex(k.rkey.into(), 8),
                c_hex(k.vaddr, 16)
            )?;
        }
        writeln!(out)?;
        let g: Vec<String> = k.gid.iter().map(|b| format!("{b:02}")).collect();
        writeln!(out, " GID: {}", g.join(":"))?;
    }
    writeln!(out, "{line}")
}

fn s_title(a: &PerfArgs) -> String {
    let t = match (a.test, a.atomic) {
        (Test::AtomicBw, AtomicType::CMP_AND_SWAP) => "Atomic CMP_AND_SWAP BW Test",
        (Test::AtomicLat, AtomicType::CMP_AND_SWAP) => "Atomic CMP_AND_SWAP Latency Test",
        (t, _) => t.title(),
    };
    if a.bidir {
        t.replace(" BW Test", " Bidirectional BW Test")
    } else {
        t.into()
    }
}

/// One row of results.
#[derive(Debug, Clone)]
enum Row {
    Bw {
        bytes: u64,
        iters: u64,
        /// Bytes per second.
        peak: f64,
        /// Bytes per second.
        avg: f64,
        /// Messages per second.
        rate: f64,
    },
    Lat {
        bytes: u64,
        iters: u64,
        /// One sample per iteration, in microseconds.
        us: Vec<f64>,
    },
}

impl Row {
    /// Both directions of a bidirectional test: rates add up (perftest's
    /// `print_full_bw_report`).
    fn plus(&self, other: &Row) -> Row {
        match (self, other) {
            (
                &Row::Bw {
                    bytes,
                    iters,
                    peak,
                    avg,
                    rate,
                },
                &Row::Bw {
                    peak: p2,
                    avg: a2,
                    rate: r2,
                    ..
                },
            ) => Row::Bw {
                bytes,
                iters,
                peak: peak + p2,
                avg: avg + a2,
                rate: rate + r2,
            },
            (r, _) => r.clone(),
        }
    }

    /// Replaces the iteration count of a bandwidth row.
    fn set_iters(&mut self, n: u64) {
        if let Row::Bw { iters, .. } = self {
            *iters = n;
        }
    }
}

/// Polls for the next completion; a peer silent for `timeout` is an error.
fn wait_one(s: &Setup, timeout: Duration) -> Result<Completion, CliError> {
    // The clock is first read at the first check: most waits end before it.
    let mut deadline = None;
    let mut spin = 0u32;
    loop {
        spin = spin.wrapping_add(1);
        if let Some(wc) = s.cq.poll_one() {
            if wc.status != WcStatus::Success {
                return Err(CliError::Failed(format!(
                    "completion with error {} for WR {}",
                    wc.status, wc.wr_id
                )));
            }
            if wc.opcode == WcOpcode::Recv {
                if let Some(q) = s.qps.iter().find(|q| q.qp.qp_num() == wc.qp_num) {
                    q.recvs.set(q.recvs.get().saturating_sub(1));
                }
            }
            return Ok(wc);
        }
        // The clock is read now and then: a read costs as much as a poll of an empty CQ.
        if spin % 64 == 0 {
            let now = Instant::now();
            if now > *deadline.get_or_insert(now + timeout) {
                return Err(CliError::Timeout(format!(
                    "no completion within {timeout:?}: is the peer alive?"
                )));
            }
        }
        std::hint::spin_loop();
    }
}

/// Waits for the next receive completion, skipping send completions.
fn wait_recv(s: &Setup, timeout: Duration) -> Result<Completion, CliError> {
    loop {
        let wc = wait_one(s, timeout)?;
        if wc.opcode == WcOpcode::Recv {
            return Ok(wc);
        }
    }
}

/// Tops the receive queue up to `RX_DEPTH`; each WQE takes the whole second half, so that
/// any message size (and a UD GRH) fits.
fn fill_recvs(s: &Setup) -> Result<(), CliError> {
    for q in &s.qps {
        while q.recvs.get() < RX_DEPTH {
            q.qp.post_recv(RecvWr {
                wr_id: u64::MAX,
                sg_list: softrdma_proto::sg![s.mr.sge(q.recv_off, s.half as u32)],
            })
            .map_err(CliError::verb("Couldn't post receive"))?;
            q.recvs.set(q.recvs.get() + 1);
        }
    }
    Ok(())
}

fn op_for(a: &PerfArgs, q: &QpEnd, seq: u64) -> SendOp {
    let (remote_addr, rkey) = (q.rem.vaddr, q.rem.rkey);
    match a.test {
        Test::WriteBw | Test::WriteLat => SendOp::Write { remote_addr, rkey },
        Test::ReadBw | Test::ReadLat => SendOp::Read { remote_addr, rkey },
        Test::SendBw | Test::SendLat => SendOp::Send,
        Test::AtomicBw | Test::AtomicLat => match a.atomic {
            AtomicType::FETCH_AND_ADD => SendOp::FetchAdd {
                remote_addr,
                rkey,
                add: 1,
            },
            AtomicType::CMP_AND_SWAP => SendOp::CompareSwap {
                remote_addr,
                rkey,
                compare: seq,
                swap: seq + 1,
            },
        },
    }
}

fn wr(s: &Setup, q: &QpEnd, op: SendOp, size: u64, wr_id: u64, signaled: bool) -> SendWr {
    SendWr {
        wr_id,
        op,
        payload: Payload::Sges(softrdma_proto::sg![s.mr.sge(q.send_off, size as u32)]),
        flags: if signaled {
            SendFlags::SIGNALED
        } else {
            SendFlags::empty()
        },
        ud: q.ud,
    }
}

/// Posts on the first QP (the latency tests have one).
fn post(s: &Setup, op: SendOp, size: u64, wr_id: u64, signaled: bool) -> Result<(), CliError> {
    let q = &s.qps[0];
    q.qp.post_send(wr(s, q, op, size, wr_id, signaled))
        .map_err(CliError::verb("Couldn't post send"))
}

/// Bandwidth from completion marks `(time, messages done)`: the average over the run, and the
/// peak as the best of 16 equal slices of the run, so that a burst of completions reported
/// together cannot pass for a rate.
fn bw_row(size: u64, start: Instant, marks: &[(Instant, u64)]) -> Row {
    let done = marks.last().map_or(0, |m| m.1);
    let secs = marks
        .last()
        .map_or(0.0, |m| m.0.duration_since(start).as_secs_f64())
        .max(1e-9);
    let avg = (done * size) as f64 / secs;
    let mut slices = [0u64; 16];
    let mut prev = 0;
    for &(t, n) in marks {
        let i = (t.duration_since(start).as_secs_f64() / secs * 16.0) as usize;
        slices[i.min(15)] += n - prev;
        prev = n;
    }
    let best = slices.iter().copied().max().unwrap_or(0);
    let peak = ((best * size) as f64 / (secs / 16.0)).max(avg);
    Row::Bw {
        bytes: size,
        iters: done,
        peak,
        avg,
        rate: done as f64 / secs,
    }
}

/// The sending side of a bandwidth test: `depth` WRs in flight, every `cq_mod`-th signaled
/// (completions come in order, so one signaled WR retires all before it). In a bidirectional
/// SEND test (`-b`) it also receives the peer's messages, reposting as it goes, and ends when
/// both directions have (perftest's `run_iter_bi`).
fn run_bw(
    a: &PerfArgs,
    s: &Setup,
    size: u64,
    iters: u64,
    pb: &indicatif::ProgressBar,
) -> Result<Row, CliError> {
    let depth = u64::from(tx_depth(a));
    let cq_mod = u64::from(a.cq_mod).clamp(1, depth);
    let limit = a.duration.map(|d| Instant::now() + Duration::from_secs(d));
    let total = if limit.is_some() { u64::MAX } else { iters };
    let start = Instant::now();
    let n = s.qps.len();
    // Per QP, as perftest counts: WRs posted, WRs completed, and whether a timed run ended.
    let (mut posted, mut done, mut stop) = (vec![0u64; n], vec![0u64; n], vec![false; n]);
    let mut marks = Vec::new();
    // perftest's -l: WRs go to the QP in chains of this many.
    let list = u64::from(a.post_list).clamp(1, depth);
    let receiving = a.bidir && a.test == Test::SendBw;
    let expect = if receiving { iters * n as u64 } else { 0 };
    let mut got = 0u64;
    // wr_id: the QP's index above bit 48, the WR's sequence number below.
    const SEQ: u64 = (1 << 48) - 1;
    loop {
        for (i, q) in s.qps.iter().enumerate() {
            while !stop[i]
                && posted[i] < total
                && posted[i] - done[i] + list.min(total - posted[i]) <= depth
            {
                let mut chain = Vec::with_capacity(list as usize);
                while (chain.len() as u64) < list && posted[i] < total {
                    let p = posted[i];
                    let signaled = (p + 1) % cq_mod == 0 || p + 1 == total;
                    let id = (i as u64) << 48 | p;
                    chain.push(wr(s, q, op_for(a, q, p), size, id, signaled));
                    posted[i] += 1;
                    // A timed run ends only after a signaled WR, whose completion retires all.
                    if signaled && limit.is_some_and(|l| Instant::now() >= l) {
                        stop[i] = true;
                        break;
                    }
                }
                q.qp.post_send_list(chain)
                    .map_err(|(posted, source)| CliError::PostList { posted, source })?;
            }
        }
        let sent = (0..n).all(|i| done[i] == posted[i] && (stop[i] || posted[i] == total));
        let timed_out = limit.is_some_and(|l| Instant::now() >= l);
        if sent && (got >= expect || timed_out) {
            break;
        }
        // Once our side is done, UC and UD stop waiting for lost messages after a quiet second.
        let budget = if sent && a.conn != Conn::RC {
            Duration::from_secs(1)
        } else {
            PEER_TIMEOUT
        };
        let wc = match wait_one(s, budget) {
            Ok(wc) => wc,
            Err(_) if sent && a.conn != Conn::RC => {
                eprintln!(
                    " {got} of {expect} messages arrived ({:?} can lose them)",
                    a.conn
                );
                break;
            }
            Err(e) => return Err(e),
        };
        if wc.opcode == WcOpcode::Recv {
            got += 1;
            fill_recvs(s)?;
            continue;
        }
        let i = ((wc.wr_id >> 48) as usize).min(n - 1);
        done[i] = (wc.wr_id & SEQ) + 1;
        let sum: u64 = done.iter().sum();
        marks.push((Instant::now(), sum));
        // A timed run's bar counts seconds (its length is -D).
        pb.set_position(if a.duration.is_some() {
            start.elapsed().as_secs()
        } else {
            (sum / n as u64).min(iters)
        });
    }
    // perftest reports iterations per QP and bandwidth over all QPs.
    let mut row = bw_row(size, start, &marks);
    row.set_iters(marks.last().map_or(0, |m| m.1) / n as u64);
    Ok(row)
}

/// The receiving side of `send-bw`: counts `iters` messages, reposting as it goes. Over UC
/// and UD, messages can be lost: the count ends when the sender has been quiet for a second.
fn run_bw_server(
    a: &PerfArgs,
    s: &Setup,
    size: u64,
    iters: u64,
    pb: &indicatif::ProgressBar,
) -> Result<Row, CliError> {
    let mut marks = Vec::new();
    let mut start = None;
    let mut got = 0u64;
    // Every QP's sender sends `iters`; a timed run counts until its end, and then goes on
    // receiving until the sender has been quiet for DRAIN_QUIET: the two sides' clocks
    // start apart (the sender's later on a loaded machine), and a receiver that stopped
    // reposting at its own end would leave the sender's last SENDs waiting on RNR for ever.
    let iters = iters * s.qps.len() as u64;
    let end = a.duration.map(|d| Instant::now() + Duration::from_secs(d));
    let mut last = Instant::now();
    loop {
        let now = Instant::now();
        let more = match end {
            None => got < iters,
            Some(e) => now < e || now < last + DRAIN_QUIET,
        };
        if !more {
            break;
        }
        let quiet = if a.conn == Conn::RC || got == 0 {
            PEER_TIMEOUT
        } else {
            Duration::from_secs(1)
        };
        let quiet = end.map_or(quiet, |e| {
            e.max(last + DRAIN_QUIET)
                .saturating_duration_since(now)
                .min(quiet)
        });
        match wait_recv(s, quiet) {
            Ok(_) => {}
            // Past its end, a timed run stops once the sender has been quiet long enough.
            Err(_) if end.is_some_and(|e| Instant::now() >= e) => continue,
            Err(_) if a.conn != Conn::RC && got > 0 => {
                eprintln!(
                    " {} of {iters} messages arrived ({:?} drops them when receives run out)",
                    got, a.conn
                );
                break;
            }
            Err(e) => return Err(e),
        }
        last = Instant::now();
        let now = last;
        start.get_or_insert(now);
        got += 1;
        marks.push((now, got));
        fill_recvs(s)?;
        pb.set_position(got);
    }
    // The first arrival starts the clock, so the messages after it make the rate.
    let start = start.unwrap_or_else(Instant::now);
    let after_first: Vec<(Instant, u64)> = marks.iter().skip(1).map(|&(t, n)| (t, n - 1)).collect();
    let mut row = bw_row(size, start, &after_first);
    row.set_iters(got / s.qps.len() as u64);
    Ok(row)
}

/// Spins until the byte at `off` of the region equals `v`, letting the device make progress.
/// False if the timed run ended (`end`) first; a peer silent for longer is an error.
fn poll_byte(s: &Setup, off: u64, v: u8, end: Option<Instant>) -> Result<bool, CliError> {
    // The clock is first read at the first check: most waits end before it.
    let mut deadline = None;
    let mut b = [0u8; 1];
    let mut spin = 0u32;
    loop {
        spin = spin.wrapping_add(1);
        s.mr.read(off as usize, &mut b)?;
        if b[0] == v {
            return Ok(true);
        }
        s.cq.poll_lending(0);
        // The clock is read now and then: a read costs as much as a poll of an empty CQ.
        if spin % 64 != 0 {
            continue;
        }
        let now = Instant::now();
        if end.is_some_and(|e| now >= e) {
            return Ok(false);
        }
        if now > *deadline.get_or_insert(now + PEER_TIMEOUT) {
            return Err(CliError::Timeout(format!(
                "the peer's WRITE did not arrive within {PEER_TIMEOUT:?}"
            )));
        }
        std::hint::spin_loop();
    }
}

/// Runs `wait` with at most [`PEER_TIMEOUT`], cut short at the end of a timed run (`end`):
/// `None` if that end came first, otherwise what `wait` gave.
fn by_end<T>(
    end: Option<Instant>,
    wait: impl FnOnce(Duration) -> Result<T, CliError>,
) -> Result<Option<T>, CliError> {
    let budget = end.map_or(PEER_TIMEOUT, |e| {
        e.saturating_duration_since(Instant::now())
            .min(PEER_TIMEOUT)
    });
    match wait(budget) {
        Ok(v) => Ok(Some(v)),
        Err(_) if end.is_some_and(|e| Instant::now() >= e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Waits for the next receive; false if the timed run ended (`end`) first.
fn recv_by(s: &Setup, end: Option<Instant>) -> Result<bool, CliError> {
    Ok(by_end(end, |budget| wait_recv(s, budget))?.is_some())
}

/// Waits for the completion of the SEND just posted, counting receives that complete
/// meanwhile in `early`; false if the timed run ended (`end`) first.
fn send_done_by(s: &Setup, end: Option<Instant>, early: &mut u64) -> Result<bool, CliError> {
    loop {
        match by_end(end, |budget| wait_one(s, budget))? {
            None => return Ok(false),
            Some(wc) if wc.opcode == WcOpcode::Recv => *early += 1,
            Some(_) => return Ok(true),
        }
    }
}

/// Moves the bar now and then: a ping-pong round is a few microseconds, and the bar's
/// bookkeeping is not free.
fn progress(pb: &indicatif::ProgressBar, i: u64) {
    if i % 1024 == 0 {
        pb.set_position(i);
    }
}

/// How long a latency loop runs: a number of rounds, or `-D` seconds from `start` on the TSC,
/// judged from the round's own sample (`now`) so that the check costs no clock read. (The
/// waits inside a round take the same end as a `std` instant, the clock they read.)
struct RunFor<'a> {
    clock: &'a quanta::Clock,
    start: u64,
    nanos: Option<u64>,
}

impl<'a> RunFor<'a> {
    fn new(clock: &'a quanta::Clock, seconds: Option<u64>) -> Self {
        Self {
            clock,
            start: clock.raw(),
            nanos: seconds.map(|d| d * 1_000_000_000),
        }
    }

    /// Whether to run another round, given the last sample and whether rounds remain.
    fn more(&self, now: u64, rounds_left: bool) -> bool {
        self.nanos.map_or(rounds_left, |l| {
            self.clock.delta_as_nanos(self.start, now) < l
        })
    }
}

/// A latency test on either side (the WRITE and SEND ping-pongs run on both).
fn run_lat(
    a: &PerfArgs,
    s: &Setup,
    size: u64,
    iters: u64,
    pb: &indicatif::ProgressBar,
) -> Result<Row, CliError> {
    let client = a.host.is_some();
    // Samples come from the TSC (through quanta), as perftest's come from the cycle counter:
    // a read costs 9 ns here, against 24 for `clock_gettime`.
    let clock = quanta::Clock::new();
    let mut us = Vec::with_capacity(iters.min(1 << 24) as usize);
    let done;
    match a.test {
        Test::ReadLat | Test::AtomicLat => {
            let run = RunFor::new(&clock, a.duration);
            let mut now = run.start;
            let mut i = 0;
            while run.more(now, i < iters) {
                let t = clock.raw();
                post(s, op_for(a, &s.qps[0], i), size, i, true)?;
                wait_one(s, PEER_TIMEOUT)?;
                now = clock.raw();
                us.push(clock.delta_as_nanos(t, now) as f64 / 1e3);
                i += 1;
                // A timed run's bar counts seconds (its length is -D).
                if a.duration.is_some() {
                    pb.set_position(clock.delta_as_nanos(run.start, now) / 1_000_000_000);
                } else {
                    progress(pb, i);
                }
            }
            done = i;
            if a.duration.is_none() {
                pb.set_position(done);
            }
        }
        Test::WriteLat => {
            // perftest's ping-pong (`run_iter_lat_write`): the iteration count travels in the
            // last byte of the message; each side waits for the peer's count before writing
            // its own, the server going first. Half the time between a side's posts is one
            // latency sample.
            let first = !client;
            let poll_off = s.qps[0].recv_off + size - 1;
            let end = a.duration.map(|d| Instant::now() + Duration::from_secs(d));
            let run = RunFor::new(&clock, a.duration);
            let mut now = run.start;
            let mut last = None;
            let mut i = 1;
            while run.more(now, i <= iters) {
                let seen = if !first {
                    poll_byte(s, poll_off, i as u8, end)?
                } else {
                    i == 1 || poll_byte(s, poll_off, (i - 1) as u8, end)?
                };
                if !seen {
                    break;
                }
                s.mr.write((size - 1) as usize, &[i as u8])?;
                now = clock.raw();
                post(s, op_for(a, &s.qps[0], i), size, i, true)?;
                if let Some(t) = last.replace(now) {
                    us.push(clock.delta_as_nanos(t, now) as f64 / 2e3);
                }
                wait_one(s, PEER_TIMEOUT)?;
                progress(pb, i);
                i += 1;
            }
            done = i - 1;
            pb.set_position(done);
            if first && end.is_none() {
                poll_byte(s, poll_off, iters as u8, None)?;
            }
        }
        Test::SendLat => {
            // The same ping-pong with SENDs: wait for the peer's message, answer it.
            let end = a.duration.map(|d| Instant::now() + Duration::from_secs(d));
            let run = RunFor::new(&clock, a.duration);
            let mut now = run.start;
            let mut last = None;
            let mut i = 0;
            // Receives that completed while this side waited for a SEND's completion.
            let mut early = 0u64;
            while run.more(now, i < iters) {
                if !client || i > 0 {
                    if early > 0 {
                        early -= 1;
                    } else if !recv_by(s, end)? {
                        break;
                    }
                }
                fill_recvs(s)?;
                now = clock.raw();
                post(s, SendOp::Send, size, i, true)?;
                if let Some(t) = last.replace(now) {
                    us.push(clock.delta_as_nanos(t, now) as f64 / 2e3);
                }
                progress(pb, i);
                i += 1;
                // As perftest does, wait for the SEND's completion (its ACK) before posting
                // again: the send queue holds one WR (-t 1), and the peer's answer may be
                // polled before the ACK that frees it.
                if !send_done_by(s, end, &mut early)? {
                    break;
                }
            }
            done = i;
            pb.set_position(done);
            if client && end.is_none() && early == 0 {
                wait_recv(s, PEER_TIMEOUT)?;
            }
            if client && end.is_none() {
                fill_recvs(s)?;
            }
        }
        _ => {
            return Err(CliError::Usage(format!(
                "{} is not a latency test",
                a.test.name()
            )));
        }
    }
    Ok(Row::Lat {
        bytes: size,
        iters: done,
        us,
    })
}

fn stats(us: &[f64]) -> (f64, f64, f64, f64, f64, f64, f64) {
    let mut v = us.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    }
    let n = v.len();
    let avg = v.iter().sum::<f64>() / n as f64;
    let stdev = (v.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64).sqrt();
    let pct = |p: f64| v[((n as f64 * p).ceil() as usize).clamp(1, n) - 1];
    (v[0], v[n - 1], v[n / 2], avg, stdev, pct(0.99), pct(0.999))
}

fn print_table(a: &PerfArgs, rows: &[Row], out: &mut impl Write) -> std::io::Result<()> {
    let line = "-".repeat(87);
    let unit = if a.report_gbits { "Gb/sec" } else { "MB/sec" };
    let conv = |b: f64| {
        if a.report_gbits {
            b * 8.0 / 1e9
        } else {
            b / 1048576.0
        }
    };
    if a.test.is_bw() {
        writeln!(
            out,
            " #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]"
        )?;
    } else {
        writeln!(
            out,
            " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
        )?;
    }
    for r in rows {
        match r {
            Row::Bw {
                bytes,
                iters,
                peak,
                avg,
                rate,
            } => writeln!(
                out,
                " {bytes:<10} {iters:<10}       {:.2}            {:.2}   \t\t   {:.6}",
                conv(*peak),
                conv(*avg),
                rate / 1e6
            )?,
            Row::Lat { bytes, iters, us } => {
                let (min, max, typ, avg, sd, p99, p999) = stats(us);
                writeln!(
                    out,
                    " {bytes:<7} {iters:<10} {min:<14.2} {max:<12.2} {typ:<8.2} \t       {avg:<11.2} \t{sd:.2}  \t\t{p99:.2} \t\t{p999:.2}"
                )?
            }
        }
    }
    writeln!(out, "{line}")
}

fn json(a: &PerfArgs, rows: &[Row]) -> serde_json::Value {
    let results: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| match r {
            Row::Bw {
                bytes,
                iters,
                peak,
                avg,
                rate,
            } => serde_json::json!({
                "bytes": bytes,
                "iterations": iters,
                "bw_peak_bytes_per_sec": peak,
                "bw_avg_bytes_per_sec": avg,
                "msg_rate_per_sec": rate,
            }),
            Row::Lat { bytes, iters, us } => {
                let (min, max, typ, avg, sd, p99, p999) = stats(us);
                serde_json::json!({
                    "bytes": bytes,
                    "iterations": iters,
                    "t_min_us": min,
                    "t_max_us": max,
                    "t_typical_us": typ,
                    "t_avg_us": avg,
                    "t_stdev_us": sd,
                    "p99_us": p99,
                    "p999_us": p999,
                })
            }
        })
        .collect();
    serde_json::json!({ "test": a.test.name(), "results": results })
}

fn plot(a: &PerfArgs, rows: &[Row], path: &std::path::Path) -> Result<(), CliError> {
    let pts: Vec<(f64, f64)> = rows
        .iter()
        .map(|r| match r {
            Row::Bw { bytes, avg, .. } => ((*bytes as f64).log2(), avg / 1e9),
            Row::Lat { bytes, us, .. } => ((*bytes as f64).log2(), stats(us).2),
        })
        .collect();
    let ymax = pts.iter().map(|p| p.1).fold(0.0f64, f64::max).max(1e-9) * 1.1;
    let (w, h, m) = (720.0, 420.0, 60.0);
    let x = |v: f64| m + (v - 1.0) / 22.0 * (w - 2.0 * m);
    let y = |v: f64| h - m - v / ymax * (h - 2.0 * m);
    let poly: Vec<String> = pts
        .iter()
        .map(|(a, b)| format!("{:.1},{:.1}", x(*a), y(*b)))
        .collect();
    let ylabel = if a.test.is_bw() {
        "bandwidth [GB/s]"
    } else {
        "t_typical [us]"
    };
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">softrdma perf {}</text>\n\
         <line x1=\"{m}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n<line x1=\"{m}\" y1=\"{m}\" x2=\"{m}\" y2=\"{}\" stroke=\"black\"/>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">message size [bytes, log2]</text>\n\
         <text x=\"16\" y=\"{}\" transform=\"rotate(-90 16 {})\" text-anchor=\"middle\">{ylabel}</text>\n\
         <polyline fill=\"none\" stroke=\"steelblue\" stroke-width=\"2\" points=\"{}\"/>\n",
        w / 2.0,
        a.test.name(),
        h - m,
        w - m,
        h - m,
        h - m,
        w / 2.0,
        h - 20.0,
        h / 2.0,
        h / 2.0,
        poly.join(" ")
    );
    for i in [1, 4, 8, 12, 16, 20, 23] {
        svg.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">2^{i}</text>\n",
            x(f64::from(i)),
            h - m + 16.0
        ));
    }
    svg.push_str(&format!(
        "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{ymax:.2}</text>\n</svg>\n",
        m - 4.0,
        m + 4.0
    ));
    std::fs::write(path, svg).map_err(|source| CliError::Io {
        what: path.display().to_string(),
        source,
    })
}

fn perf(a: &PerfArgs, out: &mut impl Write) -> Result<(), CliError> {
    check_args(a)?;
    let atomic = matches!(a.test, Test::AtomicBw | Test::AtomicLat);
    let (size, iters) = bw_or_lat_defaults(a);
    let sizes: Vec<u64> = if atomic {
        // Atomics move 8 bytes, whatever -s and -a say.
        vec![8]
    } else if a.all {
        (1..=23).map(|i| 1u64 << i).collect()
    } else {
        vec![size]
    };
    let max = sizes.iter().copied().max().unwrap_or(size);
    let mut s = setup(a, max)?;
    let mut sizes = sizes;
    if a.conn == Conn::UD {
        // perftest: "Max msg size in UD is MTU": the default size and -a stop there.
        let mtu = s.mtu.bytes() as u64;
        sizes = sizes.into_iter().map(|x| x.min(mtu)).collect();
        sizes.dedup();
    }
    let client = a.host.is_some();
    let io = CliError::Output;
    header(a, &s, out).map_err(io)?;
    let long = a.all || a.duration.is_some_and(|d| d >= 5);
    let pb = if long && std::io::stdout().is_terminal() {
        let pb = indicatif::ProgressBar::new(sizes.len() as u64 * iters);
        if let Some(d) = a.duration {
            pb.set_length(d);
        }
        pb
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut rows = Vec::new();
    match (a.test, client) {
        // Bidirectional: both sides run, each size between barriers, and each prints the sum
        // of both sides' reports (perftest's duplex path).
        (Test::WriteBw | Test::ReadBw | Test::AtomicBw, _) if a.bidir => {
            for &sz in &sizes {
                s.barrier()?;
                let mine = run_bw(a, &s, sz, iters, &pb)?;
                if a.all {
                    s.barrier()?;
                }
                let theirs = s.oob.xchg_report(Some(&mine))?;
                rows.push(mine.plus(&theirs));
            }
            s.close()?;
        }
        // One-sided bandwidth: the server only waits, then prints the client's report.
        (Test::WriteBw | Test::ReadBw | Test::AtomicBw, false) => {
            s.barrier()?;
            rows.push(s.oob.xchg_report(None)?);
            s.close()?;
        }
        (Test::WriteBw | Test::ReadBw | Test::AtomicBw, true) => {
            for &sz in &sizes {
                rows.push(run_bw(a, &s, sz, iters, &pb)?);
            }
            s.barrier()?;
            if let Some(r) = rows.last() {
                s.oob.xchg_report(Some(r))?;
            }
            s.close()?;
        }
        (Test::SendBw, _) => {
            for &sz in &sizes {
                if !client || a.bidir {
                    fill_recvs(&s)?;
                }
                s.barrier()?;
                let row = if client || a.bidir {
                    run_bw(a, &s, sz, iters, &pb)?
                } else {
                    run_bw_server(a, &s, sz, iters, &pb)?
                };
                // perftest's send_bw: the duplex reports (not in timed runs), then a barrier
                // between sizes.
                if a.bidir && a.duration.is_none() {
                    let theirs = s.oob.xchg_report(Some(&row))?;
                    rows.push(row.plus(&theirs));
                } else {
                    rows.push(row);
                }
                if a.all {
                    s.barrier()?;
                }
            }
            s.close()?;
        }
        // Only the client reads; the server waits for the end.
        (Test::ReadLat | Test::AtomicLat, false) => s.close()?,
        (Test::ReadLat | Test::AtomicLat, true) => {
            for &sz in &sizes {
                rows.push(run_lat(a, &s, sz, iters, &pb)?);
            }
            s.close()?;
        }
        (Test::SendLat, _) => {
            for &sz in &sizes {
                fill_recvs(&s)?;
                s.barrier()?;
                rows.push(run_lat(a, &s, sz, iters, &pb)?);
            }
            s.close()?;
        }
        (Test::WriteLat, _) => {
            for &sz in &sizes {
                rows.push(run_lat(a, &s, sz, iters, &pb)?);
            }
            // A timed run stops on each side's own clock, so the side that stops last may
            // still have a WRITE in flight to the one that stopped first: both meet here
            // before tearing down (each side's own WRITEs have completed). perftest's
            // write_lat has no such point and just exits: its socket closing ends the wait.
            if a.duration.is_some() {
                let _ = s.barrier();
            }
        }
    }
    pb.finish_and_clear();
    if !rows.is_empty() {
        print_table(a, &rows, out).map_err(io)?;
    } else {
        writeln!(out, "{}", "-".repeat(87)).map_err(io)?;
    }
    if a.json {
        writeln!(out, "{}", json(a, &rows)).map_err(io)?;
    }
    if let Some(p) = &a.plot {
        plot(a, &rows, p)?;
    }
    Ok(())
}

/// perftest's defaults: 65536 bytes for BW tests and 2 for latency tests; 5000 and 1000
/// iterations. UD messages cannot exceed one MTU: its default is cut to the path MTU later.
fn bw_or_lat_defaults(a: &PerfArgs) -> (u64, u64) {
    let size = a.size.unwrap_or(match (a.test.is_bw(), a.conn) {
        (true, Conn::UD) => 4096,
        (true, _) => 65536,
        (false, _) => 2,
    });
    let iters = a.iters.unwrap_or(if a.test.is_bw() { 5000 } else { 1000 });
    (size, iters)
}
