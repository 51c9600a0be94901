//! Placement grants over the same-host connections: a sender asks a peer for a grant to
//! place WRITEs to one of its QPs through an R_Key ([`Local::granted`]), the peer's
//! progress thread answers ([`Local::answer`], in its placement table), and a granted
//! WRITE is copied straight into the peer's memory ([`Local::place`]). The grants
//! themselves, the tables and the copies are [`super::super::place`]'s.
//!
//! May call: placement ([`super::super::place`]) and the sharing's record I/O.
//!
//! Threads and locks: a sender takes `LocalRoutes`, then `LocalPlacements`, then
//! `LocalConns` to ask, one after the other; the progress thread takes `LocalConns` to
//! answer, and the issued grants' lock (`PlaceIssued`) after it to revoke a grant it could
//! not say.

use super::super::place::{self, Grant, Table};
use super::super::share::{self, msg::Msg};
use super::Local;
use super::conn::Conn;
use std::os::fd::AsRawFd;
use std::sync::Arc;

impl Local {
    /// The placement table for the peer on connection `token`, made on its first ask.
    pub(crate) fn table_for(&self, token: usize) -> Option<Arc<Table>> {
        let mut conns = self.conns.lock();
        let Some(Conn::In { pid, table, .. }) = conns.get_mut(&token) else {
            return None;
        };
        if table.is_none() {
            *table = Table::create(*pid);
        }
        table.clone()
    }

    /// Answers the ask for (`qpn`, `rkey`) on connection `token` with `grant` (made in
    /// `table`), or with a refusal. A grant that can no longer be said (the connection
    /// went meanwhile) is revoked.
    pub(crate) fn answer(
        &self,
        token: usize,
        qpn: u32,
        rkey: u32,
        grant: Option<Grant>,
        table: &Arc<Table>,
        memfd: Option<std::os::fd::RawFd>,
    ) {
        let conns = self.conns.lock();
        let m = Msg::Placed {
            qpn,
            rkey,
            grant: grant.unwrap_or(Grant::REFUSED),
        };
        let said = match conns.get(&token) {
            Some(Conn::In { fd, .. }) => {
                // The table, and the region's memory when it is shareable.
                let fds: Vec<_> = match grant {
                    Some(_) => std::iter::once(table.shm.fd()).chain(memfd).collect(),
                    None => Vec::new(),
                };
                share::send(fd.as_raw_fd(), &m, &fds).is_ok()
            }
            _ => false,
        };
        drop(conns);
        if !said && grant.is_some() {
            self.granted.revoke_table(table);
        }
    }

    /// Places a WRITE of the `local` pieces at `remote_addr` of QPN `qpn`'s process
    /// through `rkey`, under the grant `p` it holds for them ([`Local::granted`]): a plain
    /// copy into a mapped region, a cross-memory copy otherwise (see [`super::super::place`]).
    /// Anything but `Done` (the grant was revoked, the range is outside it, or the kernel
    /// refused): the WRITE then takes the ring.
    pub(crate) fn place(
        &self,
        p: &place::Placement,
        qpn: u32,
        rkey: u32,
        remote_addr: u64,
        local: &[(*const u8, usize)],
    ) -> place::Placed {
        place::write(&self.placements, p, qpn, rkey, remote_addr, local)
    }

    /// The grant to place WRITEs to QPN `qpn` through `rkey`, if one is held (none when
    /// placement is off). If none is, one is asked for (once in a while).
    pub(crate) fn granted(&self, qpn: u32, rkey: u32) -> Option<Arc<place::Placement>> {
        if !self.cma {
            return None;
        }
        let held = self.placements.lock().held(qpn, rkey);
        if held.is_none() {
            self.ask(qpn, rkey);
        }
        held
    }

    /// Asks QPN `qpn`'s process for a grant through `rkey`, if a ring reaches it and it
    /// was not asked lately.
    fn ask(&self, qpn: u32, rkey: u32) {
        let out = {
            let routes = self.routes.lock();
            routes.by_qpn.get(&qpn).and_then(|r| r.ring.clone())
        };
        let Some(out) = out else {
            return;
        };
        if !self.placements.lock().should_ask(qpn, rkey) {
            return;
        }
        let conns = self.conns.lock();
        if let Some(Conn::Out { fd, .. }) = conns.get(&out.token) {
            let _ = share::send(fd.as_raw_fd(), &Msg::Place { qpn, rkey }, &[]);
        }
    }
}
