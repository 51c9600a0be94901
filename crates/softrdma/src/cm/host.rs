//! The per-device agent host (`Core`): starting it for a device (or finding it in the
//! `registry`), with QP1 (`gsi`) and the CM thread (`thread`); running its agent
//! (`settle`/`flush` send what it produced and hand its events to `dispatch`); its alarm;
//! ending what dropped IDs leave; and `CmPort`, a host held up with no ID open.
//!
//! Calls the verbs (QP1, its CQs and region) and the device's CM glue (listener registry,
//! ID tag, inline consumers). Locks, outermost first: `CmCores` (the registry, while a
//! host starts), `CmAgent` (the agent's state), `CmDropped` (a leaf); the device's own
//! under `CmAgent` when the agent sends or a listen ends.

use super::agent::AgentGuard;
use super::dev;
use super::exit::at_exit;
use super::gsi::{GSI_BUF, GSI_RECVS, SEND_WR_BASE, post_gsi_recv};
use super::objects::{Core, CoreSt, Ended};
use super::registry::{CORES, CoreEntry};
use super::thread::{inline_service, serve};
use crate::error::{CmError, Error, Result};
use crate::eventfd;
use crate::sync::{Lock, Rank};
use crate::verbs::context::Context;
use crate::verbs::qp::QpInitAttr;
use softrdma_proto::cm::{CmAgent, CmConfig};
use softrdma_proto::{AccessFlags, Instant, QpCaps, QpType};
use softrdma_wire::cm::{self as wire, GSI_QKEY, GSI_QPN};
use softrdma_wire::{Psn, Qpn};
use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The device's CM agent and QP1 held up with no ID open: in a process that owns a shared
/// device (`softrdma service`), so that MADs that name no process's agent still get the
/// answer IBTA gives (a REJ for a REQ nobody listens for, a DREP for an unknown DREQ)
/// instead of a requester's timeout.
pub struct CmPort {
    _core: Arc<Core>,
}

impl CmPort {
    /// Starts (or joins) the agent of `ctx`'s device.
    pub fn open(ctx: &Context) -> Result<CmPort> {
        Ok(CmPort {
            _core: Core::of(ctx)?,
        })
    }
}

impl Core {
    pub(super) fn of(ctx: &Context) -> Result<Arc<Core>> {
        let key = dev::key(ctx);
        let mut cores = CORES.lock();
        cores.retain(|c| c.core.strong_count() > 0);
        if let Some(c) = cores
            .iter()
            .find(|c| c.key == key)
            .and_then(|c| c.core.upgrade())
        {
            return Ok(c);
        }
        // The device's previous core may still be going: its last handle went on the CM
        // thread, which drops it (and QP1 with it) a moment later. QP1 is this process's
        // alone, so it is free again within that moment.
        let deadline = std::time::Instant::now() + Duration::from_secs(1);
        let before = ctx.handles();
        let core = loop {
            match Core::new(ctx) {
                Err(Error::Cm {
                    why: CmError::Qp1Taken,
                    ..
                }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                r => break Arc::new(r?),
            }
        };
        // The context's handles the core holds itself (its own, its PD's, CQ's, QP's...):
        // more than these, and the application still has the device.
        let own = ctx.handles().saturating_sub(before);
        cores.push(CoreEntry {
            key,
            core: Arc::downgrade(&core),
            dev: dev::weak(ctx),
        });
        pub(super) static AT_EXIT: std::sync::Once = std::sync::Once::new();
        // SAFETY: atexit takes a function that lives as long as the program.
        AT_EXIT.call_once(|| unsafe {
            libc::atexit(at_exit);
        });
        let (weak, gate, wake) = (Arc::downgrade(&core), core.gate.clone(), core.wake.clone());
        dev::set_inline_consumer(
            ctx,
            &core.chan,
            Box::new(move || inline_service(&weak, &gate, &wake)),
        );
        let held = core.clone();
        std::thread::Builder::new()
            .name("softrdma-cm".into())
            .spawn(move || serve(held, own))
            .map_err(Error::io("rdma_create_id"))?;
        Ok(core)
    }

    pub(super) fn new(ctx: &Context) -> Result<Core> {
        let pd = ctx.alloc_pd();
        let chan = ctx.create_comp_channel()?;
        let cq = ctx.create_cq(4 * GSI_RECVS as usize, Some(&chan))?;
        let send_cq = ctx.create_cq(512, None)?;
        let qp = pd.create_gsi_qp(QpInitAttr {
            cap: QpCaps {
                max_send_wr: 256,
                max_recv_wr: GSI_RECVS as u32,
                max_send_sge: 1,
                max_recv_sge: 1,
                // A MAD goes inline: no region per send.
                max_inline_data: wire::MAD_LEN as u32,
            },
            sq_sig_all: true,
            send_cq: send_cq.clone(),
            ..QpInitAttr::new(QpType::Ud, &cq)
        })?;
        qp.connect(
            Psn::new(0),
            &crate::verbs::qp::Peer {
                addr: ctx.addr(),
                qpn: Qpn::new(GSI_QPN),
                psn: Psn::new(0),
            },
            &crate::verbs::qp::ConnectAttr {
                qkey: GSI_QKEY,
                ..Default::default()
            },
        )?;
        let bufs = pd.register(
            vec![0; GSI_RECVS as usize * GSI_BUF],
            AccessFlags::LOCAL_WRITE,
        )?;
        for i in 0..GSI_RECVS {
            post_gsi_recv(&qp, &bufs, i)?;
        }
        cq.req_notify(false)?;
        let seed = rand::random::<u64>();
        let mut agent = CmAgent::new(
            CmConfig {
                ca_guid: ctx.node_guid(),
                ack_delay: crate::config::limits::LOCAL_CA_ACK_DELAY as u8,
                ..CmConfig::default()
            },
            seed,
        );
        // The device's other processes run agents of their own behind the same QP1.
        agent.set_id_tag(dev::id_tag(ctx));
        Ok(Core {
            ctx: ctx.clone(),
            cq,
            send_cq,
            chan,
            qp,
            bufs,
            st: Lock::new(
                Rank::CmAgent,
                CoreSt {
                    agent,
                    ids: HashMap::new(),
                    listeners: HashMap::new(),
                },
            ),
            dropped: Lock::new(Rank::CmDropped, Vec::new()),
            wake: Arc::new(eventfd::new(true).map_err(Error::io("rdma_create_id"))?),
            gate: Arc::new(Lock::new(Rank::CmGate, true)),
            timer: nix::sys::timerfd::TimerFd::new(
                nix::sys::timerfd::ClockId::CLOCK_MONOTONIC,
                nix::sys::timerfd::TimerFlags::TFD_NONBLOCK
                    | nix::sys::timerfd::TimerFlags::TFD_CLOEXEC,
            )
            .map_err(|e| Error::io("rdma_create_id")(e.into()))?,
            sleep_until: AtomicU64::new(u64::MAX),
            epoch: std::time::Instant::now(),
            next_send: AtomicU64::new(SEND_WR_BASE),
        })
    }

    pub(super) fn now(&self) -> Instant {
        Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    /// The agent's state, once its mutex is free.
    pub(super) fn agent(&self) -> AgentGuard<'_> {
        AgentGuard::new(self.st.lock())
    }

    /// The agent's state if its mutex is free now (`None` while another holder, this
    /// thread included, has it).
    pub(super) fn try_agent(&self) -> Option<AgentGuard<'_>> {
        self.st.try_lock().map(AgentGuard::new)
    }

    pub(super) fn wake(&self) {
        eventfd::signal(self.wake.as_raw_fd());
    }

    /// Sends what the agent produced and hands out its events ([`Core::flush`]), and
    /// brings the CM thread's alarm forward to the agent's next deadline if that is
    /// earlier: the thread sleeps on, and wakes only when a timer is due.
    pub(super) fn settle(&self, cs: &mut CoreSt) {
        self.flush(cs);
        self.set_alarm(cs, false);
    }

    /// Sets [`Core::timer`] to the agent's next deadline: when it comes before the one
    /// set, or (`always`, the CM thread after its pass) whenever it differs.
    pub(super) fn set_alarm(&self, cs: &CoreSt, always: bool) {
        use nix::sys::timerfd::{Expiration, TimerSetTimeFlags};
        let next = cs.agent.poll_timeout().map_or(u64::MAX, |t| t.as_nanos());
        let set = self.sleep_until.load(Ordering::Relaxed);
        if next >= set && !(always && next != set) {
            return;
        }
        self.sleep_until.store(next, Ordering::Relaxed);
        let r = if next == u64::MAX {
            self.timer.unset()
        } else {
            // Relative, and never zero, which would disarm it.
            let d = Duration::from_nanos(next.saturating_sub(self.now().as_nanos()).max(1));
            self.timer.set(
                Expiration::OneShot(nix::sys::time::TimeSpec::from_duration(d)),
                TimerSetTimeFlags::empty(),
            )
        };
        if r.is_err() {
            // The thread looks at the deadline itself.
            self.wake();
        }
    }

    /// Ends the listens and connections of IDs dropped since (see `IdInner`'s drop).
    pub(super) fn reap(&self, cs: &mut CoreSt) {
        let dropped = std::mem::take(&mut *self.dropped.lock());
        for ended in dropped {
            self.end(cs, ended);
        }
    }

    /// Ends a dropped ID's listen and connection (see `IdInner`'s drop).
    pub(super) fn end(
        &self,
        cs: &mut CoreSt,
        Ended {
            listening,
            comm,
            bound,
        }: Ended,
    ) {
        if let Some(sid) = bound.filter(|b| Some(*b) != listening) {
            cs.agent.unbind(sid);
        }
        if let Some(sid) = listening {
            cs.agent.unlisten(self.now(), sid);
            cs.listeners.remove(&sid);
            dev::unlisten(&self.ctx, sid);
        }
        if let Some(c) = comm {
            cs.agent.destroy(self.now(), c);
            cs.ids.remove(&c);
        }
    }

    /// Sends what the agent produced and hands its events to the IDs, until both are done
    /// (an event may make the agent send: the RTU after a REP).
    pub(super) fn flush(&self, cs: &mut CoreSt) {
        loop {
            let mut any = false;
            while let Some((to, mad)) = cs.agent.poll_transmit() {
                any = true;
                self.send(to, &mad);
            }
            while let Some(ev) = cs.agent.poll_event() {
                any = true;
                self.dispatch(cs, ev);
            }
            if !any {
                return;
            }
        }
    }
}
