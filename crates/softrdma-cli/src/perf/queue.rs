//! The work queues as the runners use them: building and posting work requests, keeping
//! receives posted, and waiting for completions or for a WRITE's last byte, each wait
//! bounded by [`PEER_TIMEOUT`] or by the end of a timed run.
//!
//! Owns no state of its own: it works on a [`Setup`]; calls `args` for the test's
//! operation. Every wait spins on the caller's thread.

use super::args::{AtomicType, PerfArgs, Test};
use super::setup::{QpEnd, RX_DEPTH, Setup};
use crate::error::CliError;
use softrdma::{Completion, Payload, RecvWr, SendFlags, SendOp, SendWr, WcOpcode, WcStatus};
use std::time::{Duration, Instant};

/// How long any single wait may take before the peer is declared gone.
pub(super) const PEER_TIMEOUT: Duration = Duration::from_secs(30);

/// Polls for the next completion; a peer silent for `timeout` is an error.
pub(super) fn wait_one(s: &Setup, timeout: Duration) -> Result<Completion, CliError> {
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
pub(super) fn wait_recv(s: &Setup, timeout: Duration) -> Result<Completion, CliError> {
    loop {
        let wc = wait_one(s, timeout)?;
        if wc.opcode == WcOpcode::Recv {
            return Ok(wc);
        }
    }
}

/// Tops the receive queue up to `RX_DEPTH`; each WQE takes the whole second half, so that
/// any message size (and a UD GRH) fits.
pub(super) fn fill_recvs(s: &Setup) -> Result<(), CliError> {
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

/// The operation the test posts on `q` as its `seq`-th WR.
pub(super) fn op_for(a: &PerfArgs, q: &QpEnd, seq: u64) -> SendOp {
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

/// A send WR of `size` bytes from `q`'s slot of the buffer.
pub(super) fn wr(
    s: &Setup,
    q: &QpEnd,
    op: SendOp,
    size: u64,
    wr_id: u64,
    signaled: bool,
) -> SendWr {
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
pub(super) fn post(
    s: &Setup,
    op: SendOp,
    size: u64,
    wr_id: u64,
    signaled: bool,
) -> Result<(), CliError> {
    let q = &s.qps[0];
    q.qp.post_send(wr(s, q, op, size, wr_id, signaled))
        .map_err(CliError::verb("Couldn't post send"))
}

/// Spins until the byte at `off` of the region equals `v`, letting the device make progress.
/// False if the timed run ended (`end`) first; a peer silent for longer is an error.
pub(super) fn poll_byte(
    s: &Setup,
    off: u64,
    v: u8,
    end: Option<Instant>,
) -> Result<bool, CliError> {
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
pub(super) fn recv_by(s: &Setup, end: Option<Instant>) -> Result<bool, CliError> {
    Ok(by_end(end, |budget| wait_recv(s, budget))?.is_some())
}

/// Waits for the completion of the SEND just posted, counting receives that complete
/// meanwhile in `early`; false if the timed run ended (`end`) first.
pub(super) fn send_done_by(
    s: &Setup,
    end: Option<Instant>,
    early: &mut u64,
) -> Result<bool, CliError> {
    loop {
        match by_end(end, |budget| wait_one(s, budget))? {
            None => return Ok(false),
            Some(wc) if wc.opcode == WcOpcode::Recv => *early += 1,
            Some(_) => return Ok(true),
        }
    }
}
