//! The address verbs of an ID: `rdma_bind_addr`, `rdma_listen`, `rdma_resolve_addr` and
//! `rdma_resolve_route` (on RoCE v2 the GID is the address and a path needs no query, so
//! the resolves complete at once).
//!
//! Calls the host's agent and the device's listener registry. Locks: `CmAgent`, under it
//! `CmDropped` (a reap) and the device's `ShareCtl` (a listen); `CmId` alone.

use super::dev;
use super::objects::CmId;
use super::types::CmEventKind;
use crate::error::{CmError, Error, PortHolder, Result};
use softrdma_proto::cma::{IdStep, IdVerb};
use softrdma_wire::cm as wire;
use std::net::SocketAddr;
use std::sync::Arc;

impl CmId {
    /// Binds to `addr`, which must be this device's address or unspecified; port 0 picks
    /// one (`rdma_bind_addr`). Until the ID listens, a REQ for the port is dropped rather
    /// than rejected (see `softrdma_proto::cm::CmAgent::bind`).
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<()> {
        self.may("rdma_bind_addr", IdVerb::Bind)?;
        self.bind_to(addr)?;
        let port = self.local_addr().expect("bound").port();
        let sid = wire::ip_service_id(self.inner.ps.code(), port);
        let mut cs = self.inner.core.agent();
        cs.agent.bind(sid);
        self.st().bound = Some(sid);
        Ok(())
    }

    /// Binds the ID's address and port, as [`Self::bind_addr`] does for an address the
    /// caller chose; an active ID's own port is bound so, with no service expected on it.
    pub(super) fn bind_to(&self, addr: SocketAddr) -> Result<()> {
        let dev = self.inner.ctx.addr();
        if !addr.ip().is_unspecified() && addr.ip().to_canonical() != dev {
            return Err(Error::cm(
                "rdma_bind_addr",
                CmError::NotDeviceAddress {
                    addr: addr.ip(),
                    device: self.inner.ctx.name().to_owned(),
                    device_addr: dev,
                },
            ));
        }
        let port = if addr.port() == 0 {
            rand::random_range(32768..61000)
        } else {
            addr.port()
        };
        self.st().local = Some(SocketAddr::new(dev, port));
        self.moved(IdStep::Bound);
        Ok(())
    }

    /// Takes connection requests on the bound port (`rdma_listen`).
    pub fn listen(&self, _backlog: i32) -> Result<()> {
        self.may("rdma_listen", IdVerb::Listen)?;
        let local = match self.local_addr() {
            Some(l) => l,
            None => {
                self.bind_addr(SocketAddr::new(self.inner.ctx.addr(), 0))?;
                self.local_addr().expect("bound")
            }
        };
        let sid = wire::ip_service_id(self.inner.ps.code(), local.port());
        let mut core = self.inner.core.agent();
        // A listener this process dropped a moment ago no longer holds the port (a
        // program that listens again on it: perftest's -R).
        self.inner.core.reap(&mut core);
        let in_use = |holder| {
            Error::cm(
                "rdma_listen",
                CmError::PortInUse {
                    port: local.port(),
                    holder,
                },
            )
        };
        if core.listeners.contains_key(&sid) {
            return Err(in_use(PortHolder::ThisProcess));
        }
        // The device's QP1 takes REQs for every process: its reader learns which one
        // listens on the service.
        if !dev::listen(&self.inner.ctx, sid)? {
            return Err(in_use(PortHolder::OtherProcess));
        }
        core.agent
            .listen(sid)
            .map_err(|e| Error::cm("rdma_listen", CmError::ServiceInUse { source: e }))?;
        core.listeners.insert(sid, Arc::downgrade(&self.inner));
        self.st().listening = Some(sid);
        self.moved(IdStep::Listening);
        Ok(())
    }

    /// Resolves `dst` to this device's port and the peer's GID (`rdma_resolve_addr`): on
    /// RoCE the GID is the address, so this completes at once, with an
    /// [`CmEventKind::AddrResolved`] event.
    pub fn resolve_addr(&self, src: Option<SocketAddr>, dst: SocketAddr) -> Result<()> {
        // A multicast group is resolved without a port, to be joined (mckey).
        if dst.ip().is_unspecified() || (dst.port() == 0 && !dst.ip().to_canonical().is_multicast())
        {
            return Err(Error::cm(
                "rdma_resolve_addr",
                CmError::NotConnectable { dst },
            ));
        }
        let ours = self.inner.ctx.addr();
        if ours.to_canonical().is_ipv4() != dst.ip().to_canonical().is_ipv4() {
            // A RoCE v2 device sends from its address's family only: without this the REQ
            // could not leave, and the caller would wait for UNREACHABLE.
            return Err(Error::cm(
                "rdma_resolve_addr",
                CmError::NoRoute {
                    device: self.inner.ctx.name().to_owned(),
                    device_addr: ours,
                    dst: dst.ip(),
                },
            ));
        }
        self.may("rdma_resolve_addr", IdVerb::ResolveAddr)?;
        if self.local_addr().is_none() {
            self.bind_to(src.unwrap_or(SocketAddr::new(ours, 0)))?;
        }
        self.st().peer = Some(SocketAddr::new(dst.ip().to_canonical(), dst.port()));
        self.moved(IdStep::AddrResolved);
        self.event(CmEventKind::AddrResolved, vec![]);
        Ok(())
    }

    /// Makes the path to the resolved peer (`rdma_resolve_route`): a RoCE v2 path needs no
    /// query, so this completes at once, with a [`CmEventKind::RouteResolved`] event.
    pub fn resolve_route(&self) -> Result<()> {
        if self.peer_addr().is_none() {
            return Err(Error::cm("rdma_resolve_route", CmError::AddrNotResolved));
        }
        self.may("rdma_resolve_route", IdVerb::ResolveRoute)?;
        self.moved(IdStep::RouteResolved);
        self.event(CmEventKind::RouteResolved, vec![]);
        Ok(())
    }
}
