//! Automatic progress (`FI_PROGRESS_AUTO`): a thread per endpoint that sleeps in `poll(2)`
//! on the endpoint's connection events and its device CQ's completion channel, and runs
//! the endpoint's progress when either is readable. So a peer's connection request is
//! answered, and a rendezvous READ started or finished, while the program is not reading
//! its CQ (it may be busy, or waiting on another endpoint).
//!
//! While the program reads its CQ itself (within [`BUSY`] of the last read), that read
//! runs the progress, and the thread stays out of its way: it leaves the device CQ's
//! events off (each would wake it for nothing, and on two cores take the CPU from the
//! program) and looks at connection events only. Once the program stops reading, the
//! thread turns the CQ's events on again and takes over.
//!
//! Threads and locks: the thread takes the endpoint's lock for each pass and nothing else
//! of its own. It holds the endpoint weakly and ends within [`TICK`] of being told to
//! stop; the endpoint joins it before its descriptors close.

use softrdma::sync::Lock;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the thread sleeps at most, between looks at its stop flag.
const TICK: Duration = Duration::from_millis(50);
/// How recently the program must have read its CQ to count as polling.
const BUSY: Duration = Duration::from_millis(2);

/// An endpoint's state, as its progress thread drives it.
pub(crate) trait Driven: Send + 'static {
    /// When the program last read a CQ of the endpoint's.
    fn app_read(&self) -> std::time::Instant;
    /// Notes that the program reads a CQ of the endpoint's now.
    fn note_app_read(&mut self);
    /// The endpoint's CQ on the device, if it has one.
    fn device_cq(&self) -> Option<&DeviceCq>;
    /// Handles what waits: device completions and connection events.
    fn progress_all(&mut self);

    /// The program's own progress, from its read of a CQ.
    fn app_progress(&mut self) {
        self.progress_all();
    }

    /// Takes the device CQ's event, if one came.
    fn take_cq_event(&mut self) {
        if let Some(c) = self.device_cq() {
            c.take_event();
        }
    }

    /// Asks for the device CQ's next event.
    fn arm(&mut self) {
        if let Some(c) = self.device_cq() {
            c.arm();
        }
    }
}

impl<S: Driven> crate::cq::Progress for Lock<S> {
    /// The program's own progress (its CQ read): noted, so that the progress thread
    /// stays out of its way while it polls.
    fn progress(&self) {
        let mut st = self.lock();
        st.note_app_read();
        st.app_progress();
    }
}

/// The running thread and its stop flag.
pub(crate) struct Auto {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Auto {
    /// Starts the thread for `st`, whose connection events are readable on `cm_fd` and
    /// whose device completions on `cq_fd` (-1: it has no CQ).
    pub(crate) fn start<S: Driven>(
        st: &Arc<Lock<S>>,
        cm_fd: RawFd,
        cq_fd: RawFd,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let (weak, flag) = (Arc::downgrade(st), stop.clone());
        let thread = std::thread::Builder::new()
            .name("softrdma-fabric".into())
            .spawn(move || run(&weak, &flag, cm_fd, cq_fd))?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Auto {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run<S: Driven>(st: &Weak<Lock<S>>, stop: &AtomicBool, cm_fd: RawFd, cq_fd: RawFd) {
    // The CQ's events are on at the start (the endpoint asked for the first).
    let mut armed = true;
    while !stop.load(Ordering::Relaxed) {
        let Some(s) = st.upgrade() else {
            return;
        };
        let busy = s.lock().app_read().elapsed() < BUSY;
        drop(s);
        // poll(2) passes over a negative descriptor: the CQ is left out while it is off.
        let mut p = [cm_fd, if armed { cq_fd } else { -1 }].map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        let wait = if busy { BUSY } else { TICK };
        // SAFETY: `p` holds two pollfd entries; the descriptors stay open until the
        // endpoint has joined this thread.
        unsafe { libc::poll(p.as_mut_ptr(), 2, wait.as_millis() as i32) };
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Some(s) = st.upgrade() else {
            return;
        };
        let mut g = s.lock();
        if p[1].revents != 0 {
            g.take_cq_event();
            armed = false;
        }
        if g.app_read().elapsed() < BUSY {
            // The program polls: connection events only (after the completions that came
            // before them, see `progress_all`).
            if p[0].revents != 0 {
                g.progress_all();
            }
            continue;
        }
        if !armed {
            g.arm();
            armed = true;
        }
        g.progress_all();
    }
}

/// An endpoint's CQ on the device, with the completion channel that wakes its progress
/// thread.
pub(crate) struct DeviceCq {
    pub(crate) cq: softrdma::CompletionQueue,
    chan: softrdma::CompletionChannel,
}

impl DeviceCq {
    /// A CQ of `size` entries on `ctx`, its first event asked for.
    pub(crate) fn new(ctx: &softrdma::Context, size: usize) -> softrdma::Result<Self> {
        let chan = ctx.create_comp_channel()?;
        let cq = ctx.create_cq(size, Some(&chan))?;
        cq.req_notify(false)?;
        Ok(Self { cq, chan })
    }

    /// What the progress thread sleeps on.
    pub(crate) fn fd(&self) -> RawFd {
        self.chan.fd()
    }

    /// Takes the CQ's event, if one came.
    pub(crate) fn take_event(&self) {
        let _ = self.chan.get_cq_event(Some(Duration::ZERO));
    }

    /// Asks for the CQ's next event, before its completions are polled (a completion
    /// after this wakes the progress thread again).
    pub(crate) fn arm(&self) {
        let _ = self.cq.req_notify(false);
    }
}

/// Binds `st` to the CQs its reads drive, and starts its progress thread, which sleeps
/// on `cm_fd` and `cq_fd`.
pub(crate) fn start<S: Driven>(
    st: &Arc<Lock<S>>,
    (tx_cq, rx_cq): (
        &Arc<crate::cq::CompletionQueue>,
        &Arc<crate::cq::CompletionQueue>,
    ),
    (cm_fd, cq_fd): (RawFd, RawFd),
) -> crate::error::Result<Auto> {
    let weak: Weak<dyn crate::cq::Progress> = Arc::downgrade(st) as _;
    tx_cq.bind(weak.clone());
    if !Arc::ptr_eq(tx_cq, rx_cq) {
        rx_cq.bind(weak);
    }
    Auto::start(st, cm_fd, cq_fd).map_err(|e| crate::error::FabricError::Invalid {
        what: "fi_endpoint",
        why: format!("no progress thread: {e}"),
    })
}
