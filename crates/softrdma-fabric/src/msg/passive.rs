//! The passive endpoint (`fid_pep`): listens on a domain's address and port, and gives
//! each peer's connection request to its event queue ([`Event::ConnRequest`]), for
//! [`MsgEndpoint::accept`](super::MsgEndpoint::accept) or
//! [`ConnRequest::reject`](crate::ConnRequest::reject). A progress thread takes the
//! requests as they come.
//!
//! Threads and locks: its state (the listening ID and its channel) is behind `FabricEp`,
//! taken by the progress thread; the EQ's lock under it.

use crate::domain::Domain;
use crate::eq::{ConnRequest, Event, EventQueue};
use crate::error::{FabricError, Result};
use softrdma::cm::{CmEventKind, CmId, EventChannel, PortSpace};
use softrdma::sync::{Lock, Rank};
use std::net::SocketAddr;
use std::sync::Arc;

/// A passive endpoint, listening.
pub struct PassiveEndpoint {
    /// Stopped and joined first, before the channel closes.
    _auto: crate::auto::Auto,
    _st: Arc<Lock<State>>,
    addr: SocketAddr,
}

impl std::fmt::Debug for PassiveEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassiveEndpoint")
            .field("addr", &self.addr)
            .finish()
    }
}

struct State {
    chan: EventChannel,
    _listener: CmId,
    me: SocketAddr,
    eq: Arc<EventQueue>,
    tag: u64,
    /// Kept so that the domain's device stays open while it listens.
    _dom: Arc<Domain>,
}

impl PassiveEndpoint {
    /// Listens on `port` of `domain`'s address (0 picks one) (`fi_passive_ep`,
    /// `fi_pep_bind` and `fi_listen`); requests go to `eq` under `tag`.
    pub fn listen(domain: &Arc<Domain>, port: u16, eq: Arc<EventQueue>, tag: u64) -> Result<Self> {
        let chan = EventChannel::new()?;
        let listener = CmId::new(&chan, domain.ctx(), PortSpace::Tcp)?;
        let addr = SocketAddr::new(domain.ip(), port);
        listener.bind_addr(addr)?;
        listener.listen(128)?;
        let me = listener.local_addr().unwrap_or(addr);
        let cm_fd = chan.fd();
        let st = Arc::new(Lock::new(
            Rank::FabricEp,
            State {
                chan,
                _listener: listener,
                me,
                eq,
                tag,
                _dom: domain.clone(),
            },
        ));
        let auto = crate::auto::Auto::start(&st, cm_fd, -1).map_err(|e| FabricError::Invalid {
            what: "fi_listen",
            why: format!("no progress thread: {e}"),
        })?;
        Ok(Self {
            _auto: auto,
            _st: st,
            addr: me,
        })
    }

    /// The address it listens on (`fi_getname`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl crate::auto::Driven for State {
    fn app_reads(&self) -> u64 {
        // Nobody polls a passive endpoint: the thread always serves it.
        0
    }

    fn note_app_read(&mut self) {}

    fn device_cq(&self) -> Option<&crate::auto::DeviceCq> {
        None
    }

    fn progress_all(&mut self) {
        while let Some(ev) = self.chan.try_event() {
            if ev.kind != CmEventKind::ConnectRequest {
                continue;
            }
            let Some(peer) = ev.id.peer_addr() else {
                let _ = ev.id.reject(&[]);
                continue;
            };
            let req = ConnRequest {
                id: ev.id,
                peer,
                local: self.me,
                private_data: crate::eq::unframe(&ev.private_data),
            };
            self.eq.push(Event::ConnRequest { tag: self.tag, req });
        }
    }
}
