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
use std::time::{Duration, Instant};

/// How long the thread sleeps at most, between looks at its stop flag.
const TICK: Duration = Duration::from_millis(50);
/// How recently the program must have read its CQ to count as polling.
const BUSY: Duration = Duration::from_millis(2);

/// An endpoint's state, as its progress thread drives it.
pub(crate) trait Driven: Send + 'static {
    /// How many times the program has read a CQ of the endpoint's (a count, not a
    /// time: a clock read on every CQ read cost more than the rest of an empty read).
    fn app_reads(&self) -> u64;
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

/// Whether the program polls: it has read a CQ of the endpoint's within about [`BUSY`],
/// as the thread sees from the count of its reads at each wake-up.
struct Watch {
    reads: u64,
    changed: Option<Instant>,
}

impl Watch {
    fn busy(&mut self, reads: u64) -> bool {
        if reads != self.reads {
            self.reads = reads;
            self.changed = Some(Instant::now());
        }
        self.changed.is_some_and(|t| t.elapsed() < BUSY)
    }
}

fn run<S: Driven>(st: &Weak<Lock<S>>, stop: &AtomicBool, cm_fd: RawFd, cq_fd: RawFd) {
    // The CQ's events are on at the start (the endpoint asked for the first).
    let mut armed = true;
    let mut watch = Watch {
        reads: 0,
        changed: None,
    };
    while !stop.load(Ordering::Relaxed) {
        let Some(s) = st.upgrade() else {
            return;
        };
        let busy = watch.busy(s.lock().app_reads());
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
        if watch.busy(g.app_reads()) {
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
    /// The batch [`drain`] polls into, kept between polls so that a poll allocates
    /// nothing.
    batch: Vec<softrdma::Completion>,
}

impl DeviceCq {
    /// A CQ of `size` entries on `ctx`, its first event asked for.
    pub(crate) fn new(ctx: &softrdma::Context, size: usize) -> softrdma::Result<Self> {
        let chan = ctx.create_comp_channel()?;
        let cq = ctx.create_cq(size, Some(&chan))?;
        cq.req_notify(false)?;
        Ok(Self {
            cq,
            chan,
            batch: Vec::with_capacity(BATCH),
        })
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

/// How many device completions [`drain`] takes a poll.
const BATCH: usize = 64;

/// Hands every device completion that waits on `st`'s device CQ (`cq` finds it) to
/// `handle`, in order; how many there were.
///
/// The device CQ is polled again only after a full batch: a poll that finds the CQ empty
/// makes the device send the ACKs it holds back at once, where the ACK of what just came
/// would otherwise ride in the same send as the application's answer (a ping-pong then
/// costs one packet a turn instead of two).
pub(crate) fn drain<S>(
    st: &mut S,
    cq: impl Fn(&mut S) -> &mut DeviceCq,
    mut handle: impl FnMut(&mut S, softrdma::Completion),
) -> usize {
    let mut seen = 0;
    loop {
        let c = cq(st);
        let mut wcs = std::mem::take(&mut c.batch);
        let n = c.cq.poll_into(BATCH, &mut wcs);
        seen += n;
        for wc in wcs.drain(..) {
            handle(st, wc);
        }
        cq(st).batch = wcs;
        if n < BATCH {
            return seen;
        }
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
