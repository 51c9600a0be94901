//! The connected endpoint's progress: its device completions (each a send, a receive or
//! an RMA of the user's, completed with its buffer back) and its connection events (the
//! steps of `connect`, the establishment that lets queued sends go, the end).
//!
//! Runs under the endpoint's lock, from the progress that a bound CQ's read drives and
//! from the progress thread.

use super::{Phase, State, Wr};
use crate::buf::{Buf, Registered};
use crate::cq::{Completion, errno, flags};
use crate::eq::Event;
use softrdma::cm::{CmEvent, CmEventKind};
use softrdma::{WcOpcode, WcStatus};

/// libfabric's `FI_ECONNREFUSED`.
const ECONNREFUSED: i32 = 111;
/// How long a connection its peer ended waits for the ACKs of its sends in flight.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(5);

impl State {
    /// Handles what waits: the device's completions, then the connection events, then
    /// what these made.
    pub(super) fn progress_all(&mut self) {
        self.device_completions();
        let mut any = false;
        while let Some(ev) = self.chan.try_event() {
            self.cm_event(ev);
            any = true;
        }
        if any {
            self.device_completions();
        }
    }

    /// Handles every device completion that waits ([`crate::auto::drain`]).
    fn device_completions(&mut self) {
        crate::auto::drain(self, |s| &mut s.vcq, Self::device_completion);
    }

    /// One device completion.
    fn device_completion(&mut self, wc: softrdma::Completion) {
        let Some(wr) = self.wrs.remove(&wc.wr_id) else {
            return;
        };
        let error = match wc.status {
            WcStatus::Success => 0,
            WcStatus::WrFlushErr => errno::ECANCELED,
            WcStatus::RemAccessErr => errno::EACCES,
            _ => errno::EIO,
        };
        if error != 0 && wc.status != WcStatus::WrFlushErr {
            // The QP is in the error state: the connection is over.
            self.down(true);
        }
        if error != 0 {
            self.fail(wr, error);
            return;
        }
        match wr {
            Wr::Recv { context, reg } => {
                let buf = reg.map_or_else(|| Buf::from(Vec::new()), Registered::back);
                let data = wc
                    .wc_flags
                    .contains(softrdma::WcFlags::WITH_IMM)
                    .then_some(u64::from(wc.imm_data));
                let kind = if wc.opcode == WcOpcode::RecvRdmaWithImm {
                    flags::RMA | flags::REMOTE_WRITE
                } else {
                    flags::RECV | flags::MSG
                };
                let cq_data = if data.is_some() {
                    flags::REMOTE_CQ_DATA
                } else {
                    0
                };
                self.cntrs.report(
                    &self.rx_cq,
                    Completion {
                        data,
                        ..Completion::of(context, kind | cq_data, buf, wc.byte_len as usize, 0)
                    },
                );
            }
            Wr::Send {
                context,
                buf,
                reg,
                silent,
            } => {
                let buf = reg.map_or(buf, Registered::back);
                let f = flags::SEND | flags::MSG;
                if silent {
                    // No CQ entry, but counted: a counter is how an inject's sender
                    // knows it is done.
                    self.cntrs.count(f, false);
                } else {
                    let len = buf.len();
                    self.cntrs
                        .report(&self.tx_cq, Completion::of(context, f, buf, len, 0));
                }
            }
            Wr::Rma {
                context,
                flags,
                reg,
                silent,
            } => {
                if silent {
                    self.cntrs.count(flags, false);
                } else {
                    let len = reg.mr.len();
                    self.cntrs.report(
                        &self.tx_cq,
                        Completion::of(context, flags, reg.back(), len, 0),
                    );
                }
            }
        }
    }

    fn cm_event(&mut self, ev: CmEvent) {
        let r = match ev.kind {
            CmEventKind::AddrResolved => ev.id.resolve_route().map_err(Into::into),
            CmEventKind::RouteResolved => {
                let pd = crate::domain::conn_param(std::mem::take(&mut self.private_data));
                self.make_qp(&ev.id)
                    .and_then(|()| ev.id.connect(&pd).map_err(Into::into))
            }
            CmEventKind::Established => {
                self.phase = Phase::Connected;
                self.eq.push(Event::Connected {
                    tag: self.tag,
                    private_data: crate::eq::unframe(&ev.private_data),
                });
                while let Some(q) = self.queued.pop_front() {
                    self.post(q);
                }
                Ok(())
            }
            CmEventKind::Disconnected => {
                self.settle();
                self.down(true);
                Ok(())
            }
            CmEventKind::Rejected { .. } => {
                self.refused(ECONNREFUSED, crate::eq::unframe(&ev.private_data));
                Ok(())
            }
            CmEventKind::Unreachable | CmEventKind::Unresolved { .. } => {
                self.refused(errno::EIO, Vec::new());
                Ok(())
            }
            _ => Ok(()),
        };
        if r.is_err() {
            self.refused(errno::EIO, Vec::new());
        }
    }

    /// Before the connection ends on the peer's DREQ: the sends in flight complete, for
    /// their ACKs, which the peer sent before the DREQ, may come by another path (a
    /// shared device's steered socket, where the DREQ came through its owner) and later.
    /// Waits at most [`SETTLE`].
    fn settle(&mut self) {
        let end = std::time::Instant::now() + SETTLE;
        let sending =
            |wrs: &crate::Map<u64, Wr>| wrs.values().any(|w| !matches!(w, Wr::Recv { .. }));
        while sending(&self.wrs) && std::time::Instant::now() < end {
            self.device_completions();
            std::thread::yield_now();
        }
    }

    /// The connection could not be made: the EQ's error event, and the end.
    fn refused(&mut self, error: i32, private_data: Vec<u8>) {
        if self.phase == Phase::Connecting {
            self.eq.push(Event::Failed {
                tag: self.tag,
                error,
                private_data,
            });
        }
        self.down(false);
    }

    /// The connection is over: `Shutdown` on the EQ if it was made and `notify`, queued
    /// sends and waiting receives fail, the posted ones flush.
    pub(super) fn down(&mut self, notify: bool) {
        if self.phase == Phase::Down {
            return;
        }
        if notify && self.phase == Phase::Connected {
            self.eq.push(Event::Shutdown { tag: self.tag });
        }
        self.phase = Phase::Down;
        if let Some(id) = &self.id {
            let _ = id.disconnect();
        }
        while let Some(q) = self.queued.pop_front() {
            self.fail(q.wr, errno::ECANCELED);
        }
        while let Some((context, buf)) = self.early_recvs.pop_front() {
            let f = flags::RECV | flags::MSG;
            self.cntrs.report(
                &self.rx_cq,
                Completion::of(context, f, buf, 0, errno::ECANCELED),
            );
        }
    }
}

impl crate::auto::Driven for State {
    fn app_reads(&self) -> u64 {
        self.app_reads
    }

    fn note_app_read(&mut self) {
        self.app_reads = self.app_reads.wrapping_add(1);
    }

    fn device_cq(&self) -> Option<&crate::auto::DeviceCq> {
        Some(&self.vcq)
    }

    fn progress_all(&mut self) {
        State::progress_all(self);
    }
}
