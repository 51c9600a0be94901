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

use super::State;
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

/// The running thread and its stop flag.
pub(super) struct Auto {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Auto {
    /// Starts the thread for `st`, whose connection events are readable on `cm_fd` and
    /// whose device completions on `cq_fd`.
    pub(super) fn start(
        st: &Arc<Lock<State>>,
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

fn run(st: &Weak<Lock<State>>, stop: &AtomicBool, cm_fd: RawFd, cq_fd: RawFd) {
    // The CQ's events are on at the start (the endpoint asked for the first).
    let mut armed = true;
    while !stop.load(Ordering::Relaxed) {
        let Some(s) = st.upgrade() else {
            return;
        };
        let busy = s.lock().app_read.elapsed() < BUSY;
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
        if g.app_read.elapsed() < BUSY {
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
