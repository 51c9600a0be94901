//! The bandwidth runners: the sending side (every BW test, and both sides of a
//! bidirectional one) and the receiving side of `send-bw`.
//!
//! Each returns one [`Row`] per message size; calls `queue` to post and wait, `stats` to
//! turn completion marks into a row. Runs on the caller's thread.

use super::args::{Conn, Run, Test, tx_depth};
use super::queue::{PEER_TIMEOUT, fill_recvs, op_for, wait_one, wait_recv, wr};
use super::setup::Setup;
use super::stats::{Row, bw_row};
use crate::error::CliError;
use softrdma::WcOpcode;
use std::time::{Duration, Instant};

/// How long the receiving side of a timed `send-bw` goes on after its own end while
/// messages still arrive (see `run_bw_server`).
const DRAIN_QUIET: Duration = Duration::from_millis(500);

/// The sending side of a bandwidth test: `depth` WRs in flight, every `cq_mod`-th signaled
/// (completions come in order, so one signaled WR retires all before it). In a bidirectional
/// SEND test (`-b`) it also receives the peer's messages, reposting as it goes, and ends when
/// both directions have (perftest's `run_iter_bi`).
pub(super) fn run_bw(r: &Run, s: &Setup, size: u64) -> Result<Row, CliError> {
    let (a, iters, pb) = (r.a, r.iters, &r.pb);
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
pub(super) fn run_bw_server(r: &Run, s: &Setup, size: u64) -> Result<Row, CliError> {
    let (a, iters, pb) = (r.a, r.iters, &r.pb);
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
