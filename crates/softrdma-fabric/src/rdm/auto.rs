//! Automatic progress (`FI_PROGRESS_AUTO`): a thread per endpoint that sleeps in `poll(2)`
//! on the endpoint's connection events and its device CQ's completion channel, and runs
//! the endpoint's progress when either is readable. So a peer's connection request is
//! answered, and a rendezvous READ started or finished, while the program is not reading
//! its CQ (it may be busy, or waiting on another endpoint). Reading the CQ still runs the
//! progress itself, at once.
//!
//! Threads and locks: the thread takes the endpoint's lock for each pass and nothing else
//! of its own. It holds the endpoint weakly and ends within [`TICK`] of being told to
//! stop; the endpoint joins it before its descriptors close.

use super::State;
use crate::cq::Progress;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the thread sleeps at most, between looks at its stop flag.
const TICK: Duration = Duration::from_millis(50);

/// The running thread and its stop flag.
pub(super) struct Auto {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Auto {
    /// Starts the thread for `st`, whose connection events are readable on `cm_fd` and
    /// whose device completions on `cq_fd`.
    pub(super) fn start(
        st: &Arc<Mutex<State>>,
        cm_fd: RawFd,
        cq_fd: RawFd,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let (weak, flag) = (Arc::downgrade(st), stop.clone());
        let thread = std::thread::Builder::new()
            .name("softrdma-fabric".into())
            .spawn(move || run(&weak, &flag, [cm_fd, cq_fd]))?;
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

fn run(st: &Weak<Mutex<State>>, stop: &AtomicBool, fds: [RawFd; 2]) {
    while !stop.load(Ordering::Relaxed) {
        let mut p = fds.map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        // SAFETY: `p` holds two valid pollfd entries; the descriptors stay open until the
        // endpoint has joined this thread.
        let n = unsafe { libc::poll(p.as_mut_ptr(), 2, TICK.as_millis() as i32) };
        if n <= 0 || stop.load(Ordering::Relaxed) {
            continue;
        }
        let Some(st) = st.upgrade() else {
            return;
        };
        if p[1].revents != 0 {
            st.lock().unwrap_or_else(|e| e.into_inner()).rearm();
        }
        st.progress();
    }
}
