//! The latency runners: perftest's ping-pongs (WRITE and SEND, on both sides) and the
//! client's READ and atomic round trips, timed on the TSC.
//!
//! Each returns one [`Row`] per message size; calls `queue` to post and wait. Runs on the
//! caller's thread.

use super::args::{Run, Test};
use super::queue::{
    PEER_TIMEOUT, fill_recvs, op_for, poll_byte, post, recv_by, send_done_by, wait_one, wait_recv,
};
use super::setup::Setup;
use super::stats::Row;
use crate::error::CliError;
use softrdma::SendOp;
use std::time::{Duration, Instant};

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
pub(super) fn run_lat(r: &Run, s: &Setup, size: u64) -> Result<Row, CliError> {
    let (a, iters, pb) = (r.a, r.iters, &r.pb);
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
