//! `softrdma cm-setup`: how long rdma_cm takes to make a connection, one connection at a
//! time, as `cmtime` measures it but per connection (median and p99 instead of a total).
//!
//! Each connection is timed on the client from `rdma_resolve_addr` until both ends are
//! ESTABLISHED: the server SENDs a word the moment its ESTABLISHED event comes, and the
//! client stops the clock when that SEND arrives (so the figure holds one more one-way
//! trip than the setup itself). Both sides then disconnect and the next one starts;
//! TIMEWAIT is not waited for (each connection has its own IDs and event channel).
//!
//! One thread per side, no locks of its own; the Rust CM API's threads do the rest.

use crate::error::CliError;
use clap::Args;
use softrdma::cm::{CmEvent, CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
use softrdma::{Context, QpInitAttr, QpType, SendFlags, SendOp, WcStatus};
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Flags of `softrdma cm-setup`.
#[derive(Debug, Args)]
pub struct CmSetupArgs {
    /// The server's address (client); without it, serve.
    server: Option<IpAddr>,
    /// The rdma_cm port.
    #[arg(short = 'p', long, default_value_t = 7471)]
    port: u16,
    /// Connections, one after another.
    #[arg(short = 'c', long, default_value_t = 1000,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    conns: usize,
    /// Print the result as one line of JSON.
    #[arg(long)]
    json: bool,
}

/// How long any one step may take before the run fails (a lost MAD is resent after
/// about half a second; seven tries at most).
const STEP: Duration = Duration::from_secs(10);

/// Runs `softrdma cm-setup`; a failure is printed and exits 1.
pub fn run(a: &CmSetupArgs) -> ExitCode {
    let r = Context::open(None)
        .map_err(CliError::from)
        .and_then(|ctx| match a.server {
            None => serve(&ctx, a),
            Some(ip) => connect(&ctx, a, SocketAddr::new(ip, a.port)),
        });
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softrdma cm-setup: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The next CM event, which must be `want` and come within [`STEP`].
fn next(chan: &EventChannel, want: CmEventKind) -> Result<CmEvent, CliError> {
    crate::rping::expect_within(chan, want, STEP)
}

/// Accepts `conns` connections, each with a QP that SENDs a word once ESTABLISHED.
fn serve(ctx: &Context, a: &CmSetupArgs) -> Result<(), CliError> {
    let listen_chan = EventChannel::new()?;
    let listener = CmId::new(&listen_chan, ctx, PortSpace::Tcp)?;
    listener.bind_addr(SocketAddr::new(ctx.addr(), a.port))?;
    listener.listen(16)?;
    println!("ready");
    let pd = ctx.alloc_pd();
    // A thousand handshakes take seconds; the timed steps never wait for the bar.
    let pb = crate::progress::bar(a.conns as u64, "connections");
    for _ in 0..a.conns {
        pb.inc(1);
        let req = listen_chan
            .get_event(None)
            .ok_or_else(|| CliError::Failed("the listener's channel ended".into()))?;
        if req.kind != CmEventKind::ConnectRequest {
            continue;
        }
        let chan = EventChannel::new()?;
        req.id.migrate(&chan);
        let cq = ctx.create_cq(4, None)?;
        let qp = req.id.create_qp(&pd, QpInitAttr::new(QpType::Rc, &cq))?;
        req.id.accept(&ConnParam::default())?;
        next(&chan, CmEventKind::Established)?;
        qp.post_send_owned(1, SendOp::Send, SendFlags::SIGNALED, None, vec![1; 4])?;
        wait_wc(&cq)?;
        next(&chan, CmEventKind::Disconnected)?;
        req.id.disconnect()?;
    }
    pb.finish_and_clear();
    Ok(())
}

/// Waits for one completion, which must be a success.
fn wait_wc(cq: &softrdma::CompletionQueue) -> Result<(), CliError> {
    let end = Instant::now() + STEP;
    loop {
        if let Some(wc) = cq.poll_one() {
            if wc.status != WcStatus::Success {
                return Err(CliError::Failed(format!("completion {:?}", wc.status)));
            }
            return Ok(());
        }
        if Instant::now() > end {
            return Err(CliError::Timeout(format!("no completion within {STEP:?}")));
        }
        std::hint::spin_loop();
    }
}

/// Makes `conns` connections to `dst` one after another and reports their times.
fn connect(ctx: &Context, a: &CmSetupArgs, dst: SocketAddr) -> Result<(), CliError> {
    let pd = ctx.alloc_pd();
    let mut us = Vec::with_capacity(a.conns);
    // Where the time goes: the ID, its resolves and its QP; the REQ to ESTABLISHED here;
    // ESTABLISHED here to the server's word.
    let mut phases: [Vec<f64>; 3] = Default::default();
    // A thousand handshakes take seconds; the timed steps never wait for the bar.
    let pb = crate::progress::bar(a.conns as u64, "connections");
    for _ in 0..a.conns {
        let chan = EventChannel::new()?;
        let cq = ctx.create_cq(4, None)?;
        let t0 = Instant::now();
        let id = CmId::new(&chan, ctx, PortSpace::Tcp)?;
        id.resolve_addr(None, dst)?;
        next(&chan, CmEventKind::AddrResolved)?;
        id.resolve_route()?;
        next(&chan, CmEventKind::RouteResolved)?;
        let qp = id.create_qp(&pd, QpInitAttr::new(QpType::Rc, &cq))?;
        qp.post_recv_owned(1, vec![0; 4])?;
        let t1 = Instant::now();
        id.connect(&ConnParam::default())?;
        next(&chan, CmEventKind::Established)?;
        let t2 = Instant::now();
        // The server's word: it is ESTABLISHED too.
        wait_wc(&cq)?;
        let t3 = Instant::now();
        let us_of = |d: Duration| d.as_secs_f64() * 1e6;
        us.push(us_of(t3 - t0));
        phases[0].push(us_of(t1 - t0));
        phases[1].push(us_of(t2 - t1));
        phases[2].push(us_of(t3 - t2));
        id.disconnect()?;
        next(&chan, CmEventKind::Disconnected)?;
        pb.inc(1);
    }
    pb.finish_and_clear();
    let median_of = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let [setup, handshake, peer] = phases.each_mut().map(median_of);
    us.sort_by(f64::total_cmp);
    let at = |q: f64| us[((us.len() as f64 * q) as usize).min(us.len() - 1)];
    let (median, p99) = (at(0.5), at(0.99));
    if a.json {
        println!(
            "{{\"conns\":{},\"median_us\":{median:.1},\"p99_us\":{p99:.1},\"min_us\":{:.1},\"max_us\":{:.1},\"id_resolve_qp_us\":{setup:.1},\"connect_us\":{handshake:.1},\"peer_us\":{peer:.1}}}",
            us.len(),
            us[0],
            us[us.len() - 1]
        );
    } else {
        println!(
            "{} connections, resolve_addr to ESTABLISHED at both ends: median {median:.1} us, \
             p99 {p99:.1} us (min {:.1}, max {:.1}); medians: ID, resolves and QP \
             {setup:.1} us, REQ to ESTABLISHED {handshake:.1} us, to the server's \
             ESTABLISHED {peer:.1} us",
            us.len(),
            us[0],
            us[us.len() - 1]
        );
    }
    Ok(())
}
