//! `softrdma rping`: librdmacm's `rping` example, flag for flag and message for message, over
//! softrdma's connection manager, so that either end can be rping on a Linux rxe host.
//!
//! The exchange after the connection (rping.c's comment, and its `struct rping_rdma_info`:
//! a big-endian 64-bit address, 32-bit R_Key and 32-bit length, 16 bytes):
//! the client SENDs where its source buffer is; the server RDMA READs it, then SENDs a
//! 16-byte "go ahead"; the client SENDs where its sink buffer is; the server RDMA WRITEs the
//! ping data there (up to its NUL) and SENDs "go ahead" again. `-C` rounds, then the client
//! disconnects.

use crate::error::CliError;
use clap::Args;
use softrdma::cm::{CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
use softrdma::{
    AccessFlags, Completion, CompletionQueue, Context, MemoryRegion, Payload, QpCaps, QpInitAttr,
    QpType, QueuePair, RecvWr, SendFlags, SendOp, SendWr, WcOpcode, WcStatus,
};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `sizeof(struct rping_rdma_info)`.
const INFO: usize = 16;
/// rping's smallest and largest `-S`.
const MIN_SIZE: usize = 24;
const MAX_SIZE: usize = 64 * 1024 - 1;
/// How long any one step may wait for the peer.
const STEP: Duration = Duration::from_secs(30);

/// Flags of `rping`.
#[derive(Debug, Args)]
pub struct RpingArgs {
    /// Server side.
    #[arg(short = 's')]
    server: bool,
    /// Client side.
    #[arg(short = 'c')]
    client: bool,
    /// Address (the server's to connect to; to bind to, for a server).
    #[arg(short = 'a')]
    addr: Option<String>,
    /// Source address to bind to (client).
    #[arg(short = 'I')]
    source: Option<String>,
    /// Port.
    #[arg(short = 'p', default_value_t = 7174)]
    port: u16,
    /// Ping count (0: for ever).
    #[arg(short = 'C', default_value_t = 0)]
    count: u32,
    /// Ping data size.
    #[arg(short = 'S', default_value_t = 64)]
    size: usize,
    /// Display ping data.
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    verbose: u8,
    /// Validate ping data.
    #[arg(short = 'V')]
    validate: bool,
    /// Debug output.
    #[arg(short = 'd')]
    debug: bool,
}

/// Runs `rping`.
pub fn run(a: &RpingArgs) -> ExitCode {
    match go(a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rping: {e}");
            ExitCode::FAILURE
        }
    }
}

fn resolve(s: &str, port: u16) -> Result<SocketAddr, CliError> {
    (s, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut i| i.next())
        .ok_or_else(|| {
            CliError::Usage(format!(
                "getaddrinfo failed - invalid hostname or IP address: {s}"
            ))
        })
}

fn go(a: &RpingArgs) -> Result<(), CliError> {
    if a.server == a.client {
        return Err(CliError::Usage(
            "give one of -s (server) and -c (client)".into(),
        ));
    }
    if !(MIN_SIZE..=MAX_SIZE).contains(&a.size) {
        return Err(CliError::Usage(format!(
            "Invalid size {} (valid range is {MIN_SIZE} to {MAX_SIZE})",
            a.size
        )));
    }
    let ctx = Context::open(None)?;
    let chan = EventChannel::new()?;
    if a.server {
        server(a, &ctx, &chan)
    } else {
        client(a, &ctx, &chan)
    }
}

/// The next CM event, which must be `want`.
fn expect(chan: &EventChannel, want: CmEventKind) -> Result<softrdma::cm::CmEvent, CliError> {
    expect_within(chan, want, STEP)
}

/// The next CM event, which must be `want` and come within `step`.
pub(crate) fn expect_within(
    chan: &EventChannel,
    want: CmEventKind,
    step: Duration,
) -> Result<softrdma::cm::CmEvent, CliError> {
    let ev = chan
        .get_event(Some(step))
        .ok_or_else(|| CliError::Timeout(format!("no {want:?} event in {step:?}")))?;
    if ev.kind != want {
        return Err(CliError::Failed(format!(
            "cma event {:?}, waiting for {want:?}",
            ev.kind
        )));
    }
    Ok(ev)
}

/// What a side holds for the exchange.
struct Side {
    qp: Arc<QueuePair>,
    cq: CompletionQueue,
    recv: MemoryRegion,
    rdma: MemoryRegion,
}

/// What waiting for a completion found.
enum Got {
    Wc(Completion),
    Disconnected,
}

impl Side {
    fn new(
        id: &CmId,
        ctx: &Context,
        size: usize,
        extra: bool,
    ) -> Result<(Self, Option<MemoryRegion>), CliError> {
        let pd = ctx.alloc_pd();
        let cq = ctx.create_cq(32, None)?;
        let qp = id.create_qp(
            &pd,
            QpInitAttr {
                cap: QpCaps {
                    max_send_wr: 16,
                    max_recv_wr: 2,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: INFO as u32,
                },
                ..QpInitAttr::new(QpType::Rc, &cq)
            },
        )?;
        let remote =
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
        let recv = pd.register(vec![0; INFO], AccessFlags::LOCAL_WRITE)?;
        let rdma = pd.register(vec![0; size], remote)?;
        let start = if extra {
            Some(pd.register(vec![0; size], remote)?)
        } else {
            None
        };
        let s = Self { qp, cq, recv, rdma };
        s.post_recv()?;
        Ok((s, start))
    }

    fn post_recv(&self) -> Result<(), CliError> {
        self.qp.post_recv(RecvWr {
            wr_id: 1,
            sg_list: softrdma_proto::sg![self.recv.sge(0, INFO as u32)],
        })?;
        Ok(())
    }

    fn send_info(&self, mr: Option<&MemoryRegion>, size: usize) -> Result<(), CliError> {
        let mut info = [0u8; INFO];
        if let Some(mr) = mr {
            info[..8].copy_from_slice(&mr.addr().to_be_bytes());
            info[8..12].copy_from_slice(&mr.rkey().to_be_bytes());
            info[12..].copy_from_slice(&(size as u32).to_be_bytes());
        }
        self.qp.post_send(SendWr {
            wr_id: 2,
            op: SendOp::Send,
            payload: Payload::Inline(info.to_vec()),
            flags: SendFlags::SIGNALED | SendFlags::INLINE,
            ud: None,
        })?;
        Ok(())
    }

    /// Waits for a completion of `want`, skipping the others; a failed one is an error, and
    /// a disconnection ends the wait.
    fn wait(&self, chan: &EventChannel, want: WcOpcode) -> Result<Got, CliError> {
        let end = Instant::now() + STEP;
        loop {
            while let Some(wc) = self.cq.poll_one() {
                if wc.status != WcStatus::Success {
                    return Err(CliError::Failed(format!(
                        "cq completion failed status {:?}",
                        wc.status
                    )));
                }
                if wc.opcode == want {
                    return Ok(Got::Wc(wc));
                }
            }
            if let Some(ev) = chan.get_event(Some(Duration::from_millis(1))) {
                if ev.kind == CmEventKind::Disconnected {
                    return Ok(Got::Disconnected);
                }
            }
            if Instant::now() > end {
                return Err(CliError::Timeout(format!(
                    "no {want:?} completion in {STEP:?}"
                )));
            }
        }
    }

    /// The peer's buffer from a received `rping_rdma_info`.
    fn remote(&self, wc: &Completion) -> Result<(u64, u32, u32), CliError> {
        if wc.byte_len as usize != INFO {
            return Err(CliError::Peer(format!(
                "Received bogus data, size {}",
                wc.byte_len
            )));
        }
        let mut b = [0u8; INFO];
        self.recv.read(0, &mut b)?;
        self.post_recv()?;
        Ok((
            u64::from_be_bytes(b[..8].try_into().expect("8 bytes")),
            u32::from_be_bytes(b[8..12].try_into().expect("4 bytes")),
            u32::from_be_bytes(b[12..].try_into().expect("4 bytes")),
        ))
    }

    fn rdma(&self, op: SendOp, len: u32) -> Result<(), CliError> {
        self.qp.post_send(SendWr {
            wr_id: 3,
            op,
            payload: Payload::Sges(softrdma_proto::sg![self.rdma.sge(0, len)]),
            flags: SendFlags::SIGNALED,
            ud: None,
        })?;
        Ok(())
    }
}

/// The text before the first NUL, as `printf("%s")` shows it.
fn cstr(b: &[u8]) -> String {
    let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..n]).into_owned()
}

fn server(a: &RpingArgs, ctx: &Context, chan: &EventChannel) -> Result<(), CliError> {
    let listener = CmId::new(chan, ctx, PortSpace::Tcp)?;
    let bind = match &a.addr {
        Some(s) => resolve(s, a.port)?,
        None => SocketAddr::new(IpAddr::from([0, 0, 0, 0]), a.port),
    };
    listener.bind_addr(bind)?;
    listener.listen(3)?;
    let req = chan
        .get_event(None)
        .ok_or_else(|| CliError::Usage("the event channel closed".into()))?;
    if req.kind != CmEventKind::ConnectRequest {
        return Err(CliError::Failed(format!(
            "wait for CONNECT_REQUEST: {:?}",
            req.kind
        )));
    }
    let conn = req.id.clone();
    let (side, _) = Side::new(&conn, ctx, a.size, false)?;
    conn.accept(&ConnParam::default())?;
    expect(chan, CmEventKind::Established)?;
    // The client's source buffer, until it disconnects.
    while let Got::Wc(wc) = side.wait(chan, WcOpcode::Recv)? {
        let (addr, rkey, len) = side.remote(&wc)?;
        let len = len.min(a.size as u32);
        side.qp.post_send(SendWr {
            wr_id: 3,
            op: SendOp::Read {
                remote_addr: addr,
                rkey,
            },
            payload: Payload::Sges(softrdma_proto::sg![side.rdma.sge(0, len)]),
            flags: SendFlags::SIGNALED,
            ud: None,
        })?;
        if let Got::Disconnected = side.wait(chan, WcOpcode::RdmaRead)? {
            break;
        }
        let mut data = vec![0u8; a.size];
        side.rdma.read(0, &mut data)?;
        if a.verbose > 0 {
            println!("server ping data: {}", cstr(&data));
        }
        side.send_info(None, 0)?;
        // The client's sink buffer.
        let Got::Wc(wc) = side.wait(chan, WcOpcode::Recv)? else {
            break;
        };
        let (addr, rkey, _) = side.remote(&wc)?;
        let n = (cstr(&data).len() + 1).min(a.size) as u32;
        side.rdma(
            SendOp::Write {
                remote_addr: addr,
                rkey,
            },
            n,
        )?;
        if let Got::Disconnected = side.wait(chan, WcOpcode::RdmaWrite)? {
            break;
        }
        side.send_info(None, 0)?;
    }
    eprintln!("server DISCONNECT EVENT...");
    conn.disconnect()?;
    Ok(())
}

fn client(a: &RpingArgs, ctx: &Context, chan: &EventChannel) -> Result<(), CliError> {
    let dst = resolve(
        a.addr
            .as_deref()
            .ok_or_else(|| CliError::Usage("a client needs -a ADDR".into()))?,
        a.port,
    )?;
    let src = a.source.as_deref().map(|s| resolve(s, 0)).transpose()?;
    let id = CmId::new(chan, ctx, PortSpace::Tcp)?;
    id.resolve_addr(src, dst)?;
    expect(chan, CmEventKind::AddrResolved)?;
    id.resolve_route()?;
    expect(chan, CmEventKind::RouteResolved)?;
    let (side, start) = Side::new(&id, ctx, a.size, true)?;
    let start = start.expect("the client's source buffer");
    id.connect(&ConnParam::default())?;
    expect(chan, CmEventKind::Established)?;
    let mut first = b'A';
    let mut ping = 0u32;
    while a.count == 0 || ping < a.count {
        // rping's pattern: the header, then letters from `first` on, wrapping A..z.
        let mut buf = format!("rdma-ping-{ping}: ").into_bytes();
        buf.truncate(a.size);
        let mut c = first;
        while buf.len() < a.size {
            buf.push(c);
            c = if c >= b'z' { b'A' } else { c + 1 };
        }
        first = if first >= b'z' { b'A' } else { first + 1 };
        buf[a.size - 1] = 0;
        start.write(0, &buf)?;
        side.send_info(Some(&start), a.size)?;
        if let Got::Disconnected = side.wait(chan, WcOpcode::Recv)? {
            return Err(CliError::Failed("the server disconnected".into()));
        }
        side.post_recv()?;
        side.send_info(Some(&side.rdma), a.size)?;
        if let Got::Disconnected = side.wait(chan, WcOpcode::Recv)? {
            return Err(CliError::Failed("the server disconnected".into()));
        }
        side.post_recv()?;
        let mut got = vec![0u8; a.size];
        side.rdma.read(0, &mut got)?;
        if a.validate && got != buf {
            return Err(CliError::Failed("data mismatch!".into()));
        }
        if a.verbose > 0 {
            println!("ping data: {}", cstr(&got));
        }
        ping += 1;
    }
    id.disconnect()?;
    // The server's DREP, or its own DREQ: either way the connection is over.
    let _ = chan.get_event(Some(Duration::from_secs(2)));
    let _ = a.debug;
    Ok(())
}
