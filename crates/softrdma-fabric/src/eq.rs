//! The event queue (`fid_eq`): what happens to connections of MSG endpoints, in order: a
//! peer's request on a passive endpoint ([`Event::ConnRequest`]), a connection made or
//! ended, a connection that could not be made (an error event); and the events the
//! application writes itself ([`EventQueue::write`], `fi_eq_write`), in their place among
//! them. Each connection event names the endpoint it is about by the number the endpoint
//! was opened with (its `tag`: the C face passes its fid there).
//!
//! A queue made [`EventQueue::with_fd`] (`FI_WAIT_FD`) has an eventfd that polls readable
//! exactly while events wait: a program sleeps on it in `poll(2)` beside its other
//! descriptors, as on a CQ's.
//!
//! Threads and locks: `FabricEq` around the events, held only to add or take one (and,
//! with a descriptor, to set it to match); the endpoints' progress threads add them under
//! their own lock (`FabricEp`).

use crate::error::Result;
use crate::ready::Ready;
use softrdma::cm::CmId;
use softrdma::sync::{Lock, Rank};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A peer's connection request, on a passive endpoint: accept it with
/// [`crate::MsgEndpoint::accept`], or [`ConnRequest::reject`] it.
pub struct ConnRequest {
    pub(crate) id: CmId,
    /// Who asks: the peer's address.
    pub peer: SocketAddr,
    /// Where it asked: the passive endpoint's address.
    pub local: SocketAddr,
    /// What the peer's `fi_connect` sent with it.
    pub private_data: Vec<u8>,
}

impl std::fmt::Debug for ConnRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnRequest")
            .field("peer", &self.peer)
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

impl ConnRequest {
    /// Refuses the request (`fi_reject`), with `private_data` (at most
    /// [`ACCEPT_DATA_MAX`] bytes) for the peer.
    pub fn reject(self, private_data: &[u8]) -> Result<()> {
        let framed = frame(private_data, ACCEPT_DATA_MAX, "fi_reject")?;
        Ok(self.id.reject(&framed)?)
    }
}

/// One event.
#[derive(Debug)]
pub enum Event {
    /// A peer asks the passive endpoint `tag` for a connection (`FI_CONNREQ`).
    ConnRequest {
        /// The passive endpoint's tag.
        tag: u64,
        /// The request.
        req: ConnRequest,
    },
    /// Endpoint `tag` is connected (`FI_CONNECTED`).
    Connected {
        /// The endpoint's tag.
        tag: u64,
        /// What the peer's accept sent with it.
        private_data: Vec<u8>,
    },
    /// Endpoint `tag`'s connection ended (`FI_SHUTDOWN`): its peer ended it, or it failed
    /// after it was made.
    Shutdown {
        /// The endpoint's tag.
        tag: u64,
    },
    /// An event the application wrote (`fi_eq_write`): its number and its bytes, given
    /// back as written.
    User {
        /// The event number.
        event: u32,
        /// The bytes.
        data: Vec<u8>,
    },
    /// Endpoint `tag`'s connection could not be made (an error entry, `fi_eq_readerr`):
    /// `error` is `FI_ECONNREFUSED` for a rejection, else `FI_EIO`.
    Failed {
        /// The endpoint's tag.
        tag: u64,
        /// libfabric's error number.
        error: i32,
        /// What the peer's reject sent with it.
        private_data: Vec<u8>,
    },
}

/// An event queue.
pub struct EventQueue {
    events: Lock<VecDeque<Event>>,
    /// An eventfd, readable while events wait (`with_fd`).
    fd: Option<Ready>,
}

impl std::fmt::Debug for EventQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventQueue").finish_non_exhaustive()
    }
}

impl EventQueue {
    /// An empty queue (`fi_eq_open`).
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            events: Lock::new(Rank::FabricEq, VecDeque::new()),
            fd: None,
        })
    }

    /// An empty queue with a descriptor that polls readable while events wait
    /// (`FI_WAIT_FD`; [`EventQueue::fd`]).
    pub fn with_fd() -> std::io::Result<Arc<Self>> {
        Ok(Arc::new(Self {
            events: Lock::new(Rank::FabricEq, VecDeque::new()),
            fd: Some(Ready::new()?),
        }))
    }

    /// The descriptor of a queue made [`EventQueue::with_fd`] (`FI_GETWAIT`): poll it for
    /// reading; it stays readable while events wait.
    pub fn fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(Ready::fd)
    }

    /// Whether no event waits, so that the program may sleep on the descriptor
    /// (`fi_trywait`: false is `-FI_EAGAIN`).
    pub fn try_wait(&self) -> bool {
        self.events.lock().is_empty()
    }

    /// Makes the descriptor say whether `q` has events. Called with the events' lock
    /// held, after a change that may have emptied or filled `q`.
    fn signal(&self, q: &VecDeque<Event>) {
        if let Some(r) = &self.fd {
            r.set(!q.is_empty());
        }
    }

    pub(crate) fn push(&self, e: Event) {
        let mut q = self.events.lock();
        q.push_back(e);
        if q.len() == 1 {
            self.signal(&q);
        }
    }

    /// Adds an event of the application's own (`fi_eq_write`), after those already
    /// queued.
    pub fn write(&self, event: u32, data: Vec<u8>) {
        self.push(Event::User { event, data });
    }

    /// Puts `e` back at the head (a reader whose buffer was too small for it).
    pub fn unread(&self, e: Event) {
        let mut q = self.events.lock();
        q.push_front(e);
        if q.len() == 1 {
            self.signal(&q);
        }
    }

    /// Takes the oldest event (`fi_eq_read`).
    pub fn read(&self) -> Option<Event> {
        let mut q = self.events.lock();
        let e = q.pop_front();
        if e.is_some() && q.is_empty() {
            self.signal(&q);
        }
        e
    }

    /// The oldest event if it is one the application wrote, left in the queue
    /// (`fi_eq_read` with `FI_PEEK`): its number and a copy of its bytes.
    pub fn peek_user(&self) -> Option<(u32, Vec<u8>)> {
        match self.events.lock().front() {
            Some(Event::User { event, data }) => Some((*event, data.clone())),
            _ => None,
        }
    }

    /// Whether the oldest event is an error (`-FI_EAVAIL` for `fi_eq_read`).
    pub fn error_next(&self) -> bool {
        matches!(self.events.lock().front(), Some(Event::Failed { .. }))
    }

    /// Takes the oldest event, waiting up to `within` for one (`fi_eq_sread`; the
    /// endpoints' progress threads bring the events).
    pub fn wait(&self, within: Duration) -> Option<Event> {
        let end = Instant::now().checked_add(within);
        loop {
            if let Some(e) = self.read() {
                return Some(e);
            }
            if end.is_some_and(|end| Instant::now() >= end) {
                return None;
            }
            // Connection events are few and slow: a short sleep leaves the CPU to the
            // progress threads that bring them, where a spin would take it.
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

/// The most private data a connection request carries (the REQ's 56 bytes, less the
/// length byte this layer puts first).
pub const CONNECT_DATA_MAX: usize = 55;
/// The most an accept or a reject carries (the REP's and REJ's, likewise).
pub const ACCEPT_DATA_MAX: usize = 147;

/// `data` as the CM carries it: its length first, so that the peer gets it back exactly
/// (the CM's messages pad private data with zeros to their fixed size).
pub(crate) fn frame(data: &[u8], max: usize, what: &'static str) -> Result<Vec<u8>> {
    if data.len() > max {
        return Err(crate::FabricError::Invalid {
            what,
            why: format!(
                "{} bytes of private data, over the {max} it may carry",
                data.len()
            ),
        });
    }
    let mut v = Vec::with_capacity(data.len() + 1);
    v.push(data.len() as u8);
    v.extend_from_slice(data);
    Ok(v)
}

/// The private data a peer framed (nothing, for what does not parse).
pub(crate) fn unframe(carried: &[u8]) -> Vec<u8> {
    match carried.split_first() {
        Some((&n, rest)) if usize::from(n) <= rest.len() => rest[..usize::from(n)].to_vec(),
        _ => Vec::new(),
    }
}
