//! Protection domains and queue pairs.

use crate::device::qp::QpShared;
use crate::error::{CmError, Error, Result};
use crate::sync::{Lock, Rank};
use crate::verbs::context::Context;
use crate::verbs::cq::CompletionQueue;
use crate::verbs::mr::MemoryRegion;
use softrdma_proto::SendOp;
use softrdma_proto::{
    AccessFlags, Pd, QpAttr, QpCaps, QpConfig, QpType, RecvWr, SendFlags, SendWr,
};
use softrdma_wire::Qpn;
use std::net::IpAddr;
use std::sync::Arc;

impl Context {
    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> ProtectionDomain {
        ProtectionDomain::new(self.clone())
    }
}

/// A protection domain (`struct ibv_pd`).
#[derive(Clone)]
pub struct ProtectionDomain {
    ctx: Context,
    pd: Pd,
    /// Keeps it in `softrdma res show` while any handle lives.
    _res: Arc<crate::device::res::PdEntry>,
}

impl std::fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ProtectionDomain").field(&self.pd.0).finish()
    }
}

/// What a QP is created with (`struct ibv_qp_init_attr`).
#[derive(Debug, Clone)]
pub struct QpInitAttr {
    /// Transport.
    pub qp_type: QpType,
    /// Where send completions go.
    pub send_cq: CompletionQueue,
    /// Where receive completions go.
    pub recv_cq: CompletionQueue,
    /// Queue limits.
    pub cap: QpCaps,
    /// Signal every send WR.
    pub sq_sig_all: bool,
    /// Take receives from this shared receive queue.
    pub srq: Option<SharedReceiveQueue>,
}

impl QpInitAttr {
    /// The common case: sends and receives complete on one `cq`, default limits, send WRs
    /// signaled only when they ask, no SRQ. Change single fields with struct-update syntax.
    pub fn new(qp_type: QpType, cq: &CompletionQueue) -> Self {
        Self {
            qp_type,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            cap: QpCaps::default(),
            sq_sig_all: false,
            srq: None,
        }
    }
}

/// A shared receive queue (`struct ibv_srq`): receive WRs that any QP created with it
/// consumes.
#[derive(Debug, Clone)]
pub struct SharedReceiveQueue {
    inner: softrdma_proto::Srq,
}

impl SharedReceiveQueue {
    /// Posts a receive WR (`ibv_post_srq_recv`).
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        Ok(self.inner.post_recv(wr)?)
    }

    /// Arms the limit event (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): one
    /// [`AsyncEvent::SrqLimitReached`](softrdma_proto::AsyncEvent) when fewer than `limit`
    /// WRs remain.
    pub fn arm_limit(&self, limit: u32) {
        self.inner.arm_limit(limit)
    }

    /// Whether the limit is armed: it disarms when its event is raised.
    pub fn limit_armed(&self) -> bool {
        self.inner.limit_armed()
    }

    /// WRs posted and not yet consumed.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// True when no WR is posted.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }
}

/// An address handle (`struct ibv_ah`): where UD sends go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressHandle {
    src: std::net::IpAddr,
    dst: std::net::IpAddr,
    traffic_class: u8,
}

impl AddressHandle {
    /// The same handle with GRH traffic class `tc` (`ah_attr.grh.traffic_class`): the IP
    /// TOS or traffic class byte of the datagrams sent through it.
    pub fn with_traffic_class(self, tc: u8) -> Self {
        Self {
            traffic_class: tc,
            ..self
        }
    }

    /// Its GRH traffic class.
    pub fn traffic_class(&self) -> u8 {
        self.traffic_class
    }

    /// The destination of a UD send to QP `qpn` with Q_Key `qkey` through this handle.
    pub fn dest(&self, qpn: Qpn, qkey: u32) -> softrdma_proto::UdDest {
        softrdma_proto::UdDest {
            src: self.src,
            ip: self.dst,
            qpn,
            qkey,
            traffic_class: self.traffic_class,
        }
    }
}

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<ProtectionDomain>();
    send_sync::<QueuePair>();
    send_sync::<SharedReceiveQueue>();
    send_sync::<AddressHandle>();
};

impl ProtectionDomain {
    pub(crate) fn new(ctx: Context) -> Self {
        let dev = ctx.dev();
        let pd = dev.alloc_pd();
        let _res = dev.res.add_pd(pd.0);
        dev.res_changed();
        Self { ctx, pd, _res }
    }

    /// Registers an owned buffer (`ibv_reg_mr`). The region owns it until dropped.
    pub fn register(&self, buf: Vec<u8>, access: AccessFlags) -> Result<MemoryRegion> {
        check_access(access)?;
        let table = self.ctx.dev().mrs.clone();
        let inner = table.register_owned(self.pd, buf, access)?;
        self.ctx.dev().res_changed();
        Ok(MemoryRegion { inner, table })
    }

    /// Registers `len` zeroed bytes that the region owns. They are shareable memory (a
    /// sealed memfd): a same-host peer that this process grants the region to places its
    /// WRITEs there with a plain copy, with no system call (for a region peers may write,
    /// on a device shared with other processes; each such region holds a descriptor).
    /// After `fork()`, parent and child share these bytes (the mapping is shared, not
    /// copied on write).
    pub fn register_zeroed(&self, len: usize, access: AccessFlags) -> Result<MemoryRegion> {
        check_access(access)?;
        let dev = self.ctx.dev();
        if !access.contains(AccessFlags::REMOTE_WRITE) || !dev.shares_memory() {
            // No peer could map it: a heap buffer (and no descriptor) will do.
            return self.register(vec![0; len], access);
        }
        let table = dev.mrs.clone();
        let inner = table.register_zeroed(self.pd, len, access)?;
        self.ctx.dev().res_changed();
        Ok(MemoryRegion { inner, table })
    }

    /// Registers memory the caller owns (`ibv_reg_mr` on a raw buffer).
    ///
    /// # Safety
    /// `addr..addr + len` must be valid for reads and writes, and stay so, until the returned
    /// region is dropped; the device and remote peers may read and write it at any time
    /// until then.
    pub unsafe fn register_raw(
        &self,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<MemoryRegion> {
        // SAFETY: forwarded from this function's contract.
        unsafe { self.register_raw_iova(addr, len, addr as u64, access) }
    }

    /// Registers memory the caller owns, named by peers and SGEs at `iova` instead of its
    /// address (`ibv_reg_mr_iova`; an `iova` of 0 makes a zero-based region).
    ///
    /// # Safety
    /// As [`ProtectionDomain::register_raw`].
    pub unsafe fn register_raw_iova(
        &self,
        addr: *mut u8,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MemoryRegion> {
        check_access(access)?;
        let table = self.ctx.dev().mrs.clone();
        // SAFETY: forwarded from this function's contract.
        let inner = unsafe { table.register_raw(self.pd, addr, len, iova, access)? };
        self.ctx.dev().res_changed();
        Ok(MemoryRegion { inner, table })
    }

    /// Registers `mr` again (`ibv_rereg_mr`), in this PD, over `len` bytes at `addr` named
    /// at `iova`, with `access`; its keys stay. Accesses in flight on the old registration
    /// finish first. A region that owned its buffer frees it.
    ///
    /// # Safety
    /// As [`ProtectionDomain::register_raw`], for the new memory.
    pub unsafe fn reregister_raw(
        &self,
        mr: &mut MemoryRegion,
        addr: *mut u8,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<()> {
        check_access(access)?;
        if !Arc::ptr_eq(&mr.table, &self.ctx.dev().mrs) {
            return Err(Error::OutOfRange {
                verb: "ibv_rereg_mr",
                attr: "pd (of another device)",
                requested: 0,
                min: 0,
                max: 0,
            });
        }
        // SAFETY: forwarded from this function's contract.
        mr.inner = unsafe {
            mr.table
                .reregister_raw(mr.inner.key, self.pd, addr, len, iova, access)?
        };
        Ok(())
    }

    /// Creates a shared receive queue (`ibv_create_srq`).
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<SharedReceiveQueue> {
        let l = self.ctx.query_device();
        Error::check_range("ibv_create_srq", "attr.max_wr", max_wr, 1u32, l.max_srq_wr)?;
        Error::check_range(
            "ibv_create_srq",
            "attr.max_sge",
            max_sge,
            0u32,
            l.max_srq_sge,
        )?;
        Ok(SharedReceiveQueue {
            inner: softrdma_proto::Srq::new(max_wr, max_sge),
        })
    }

    /// Creates an address handle to the port whose GID is `dgid` (`ibv_create_ah`), sending
    /// from the device's GID `sgid_index`.
    pub fn create_ah(&self, dgid: std::net::Ipv6Addr, sgid_index: usize) -> Result<AddressHandle> {
        let gids = self.ctx.gids();
        gids.get(sgid_index).ok_or(Error::OutOfRange {
            verb: "ibv_create_ah",
            attr: "grh.sgid_index",
            requested: sgid_index as u64,
            min: 0,
            max: gids.len().saturating_sub(1) as u64,
        })?;
        if dgid.is_unspecified() {
            return Err(Error::NoDestinationGid);
        }
        // The device has one address, whichever of its GIDs is the source: the packet's
        // IP source (and so its ICRC) is that address.
        Ok(AddressHandle {
            src: self.ctx.addr(),
            dst: self.ctx.gid_addr(dgid),
            traffic_class: 0,
        })
    }

    /// Creates a queue pair in RESET (`ibv_create_qp`).
    pub fn create_qp(&self, init: QpInitAttr) -> Result<QueuePair> {
        let dev = self.ctx.dev().clone();
        let limits = self.ctx.query_device();
        let c = init.cap;
        let v = "ibv_create_qp";
        Error::check_range(v, "cap.max_send_wr", c.max_send_wr, 1u32, limits.max_qp_wr)?;
        Error::check_range(v, "cap.max_recv_wr", c.max_recv_wr, 0u32, limits.max_qp_wr)?;
        Error::check_range(v, "cap.max_send_sge", c.max_send_sge, 0u32, limits.max_sge)?;
        Error::check_range(v, "cap.max_recv_sge", c.max_recv_sge, 0u32, limits.max_sge)?;
        let inline = limits.max_inline_data;
        Error::check_range(v, "cap.max_inline_data", c.max_inline_data, 0u32, inline)?;
        // QPNs are random, so they cannot be guessed; 0 and 1 are the special QPs. Drawn
        // before the table is locked: a process that shares the device asks its owner.
        let qpn = dev.alloc_qpn(|n| dev.has_qp(n))?;
        self.create_numbered(init, qpn)
    }

    /// Creates QP1, the General Services Interface's UD QP that the connection manager
    /// receives its MADs on (IBTA 10.2.5: QP1 is the GSI's on every port).
    pub(crate) fn create_gsi_qp(&self, init: QpInitAttr) -> Result<QueuePair> {
        let qpn = softrdma_wire::cm::GSI_QPN;
        let taken = self.ctx.dev().has_qp(qpn);
        if taken {
            return Err(Error::cm("rdma_create_id", CmError::Qp1Taken));
        }
        self.create_numbered(init, qpn)
    }

    fn create_numbered(&self, init: QpInitAttr, qpn: u32) -> Result<QueuePair> {
        let dev = self.ctx.dev().clone();
        let c = init.cap;
        let shared = dev.insert_qp(qpn, || {
            let cfg = QpConfig {
                qpn: Qpn::new(qpn),
                qp_type: init.qp_type,
                pd: self.pd,
                caps: c,
                sq_sig_all: init.sq_sig_all,
                srq: init.srq.as_ref().map(|s| s.inner.clone()),
                port_mtu: dev.mtu,
                udp_sport: Some(dev.port()),
            };
            let mem: Arc<dyn softrdma_proto::Memory> = dev.mrs.clone();
            let mut engine = softrdma_proto::QueuePair::new(cfg, mem);
            // The peer may be a soft device too, which defers ACKs (see `device`).
            engine.set_peer_ack_delay(crate::device::PEER_ACK_DELAY);
            // Packets that go through a same-host ring need no ICRC; the device computes it
            // for those that go on a wire.
            engine.owe_icrc(dev.has_rings_path());
            Arc::new(QpShared {
                qp: Lock::new(Rank::Qp, engine),
                send_cq: init.send_cq.inner.clone(),
                recv_cq: init.recv_cq.inner.clone(),
                awaits: std::sync::atomic::AtomicBool::new(false),
                requests: std::sync::atomic::AtomicBool::new(false),
                last_error: Lock::new(Rank::QpError, None),
                granted: Default::default(),
            })
        });
        dev.res_changed();
        Ok(QueuePair {
            pd: self.clone(),
            shared,
            qpn: Qpn::new(qpn),
            owned: Lock::new(Rank::VerbsOwned, None),
        })
    }
}

fn check_access(access: AccessFlags) -> Result<()> {
    // IBTA: remote write and remote atomic need local write.
    if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
        && !access.contains(AccessFlags::LOCAL_WRITE)
    {
        return Err(Error::AccessNeedsLocalWrite {
            verb: "ibv_reg_mr",
            access,
        });
    }
    Ok(())
}

/// A queue pair (`struct ibv_qp`). Dropping it destroys it.
pub struct QueuePair {
    /// Its PD, and through it the context.
    pd: ProtectionDomain,
    shared: Arc<QpShared>,
    qpn: Qpn,
    /// Buffers posted by value, by WR ID, until reclaimed (made on the first: most QPs
    /// never post one; boxed, 8 bytes in every QP instead of a map's 48).
    #[expect(clippy::box_collection, reason = "lazily made, small when absent")]
    owned: Lock<Option<Box<std::collections::HashMap<u64, MemoryRegion>>>>,
}

impl std::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair").field("qpn", &self.qpn).finish()
    }
}

impl QueuePair {
    /// The QP number.
    pub fn qp_num(&self) -> Qpn {
        self.qpn
    }

    fn with<T>(&self, f: impl FnOnce(&mut softrdma_proto::QueuePair) -> T) -> T {
        let dev = self.pd.ctx.dev();
        let mut qp = self.shared.qp.lock();
        let r = f(&mut qp);
        dev.service(&self.shared, &mut qp);
        // Deferred ACKs ride along with whatever this sends.
        dev.flush_batch(false);
        // The progress thread sleeps until its earliest timer: tell it about an earlier one.
        dev.enter_timer(&mut qp);
        r
    }

    /// Modifies attributes and state (`ibv_modify_qp`). A move to RESET also takes this
    /// QP's completions out of its CQs, as rdma-core's providers do (mlx5's `cq_clean`):
    /// a QP brought back from ERROR through RESET must not meet the flushes of its past.
    pub fn modify(&self, attr: &QpAttr) -> Result<()> {
        let path = attr.av.map(|av| self.pd.ctx.dev().path_rtt(av.dst));
        self.with(|qp| {
            qp.modify(attr)?;
            if let Some(p) = path {
                qp.share_path_rtt(p);
            }
            Ok::<_, softrdma_proto::ModifyError>(())
        })?;
        self.pd.ctx.dev().res_changed();
        self.pd
            .ctx
            .dev()
            .modified(&self.shared, self.qpn.value(), attr);
        if attr.state == Some(softrdma_proto::QpState::Reset) {
            self.shared.send_cq.discard_qp(self.qpn);
            if !Arc::ptr_eq(&self.shared.send_cq, &self.shared.recv_cq) {
                self.shared.recv_cq.discard_qp(self.qpn);
            }
        }
        Ok(())
    }

    /// Attaches this UD QP to the multicast group `gid` (`ibv_attach_mcast`): it then
    /// receives, besides its own, the SENDs to the group (DQPN 0xFFFFFF, destination the
    /// group's address), if their Q_Key is its own. On RoCE v2 a group is an IP multicast
    /// group (an IPv4 group's GID is its mapped address, as rdma_cm makes it), joined on
    /// the device's interface; every member on the link, this process's included, gets
    /// every SEND to it, the sender's own QP too when attached. Attaching twice is
    /// attaching once. Destroying the QP detaches it.
    pub fn attach_mcast(&self, gid: std::net::Ipv6Addr) -> Result<()> {
        const VERB: &str = "ibv_attach_mcast";
        let group = self.group(VERB, gid)?;
        self.pd
            .ctx
            .dev()
            .attach(self.qpn.value(), group)
            .map_err(Error::io(VERB))
    }

    /// Detaches this QP from the multicast group `gid` (`ibv_detach_mcast`).
    pub fn detach_mcast(&self, gid: std::net::Ipv6Addr) -> Result<()> {
        const VERB: &str = "ibv_detach_mcast";
        let group = self.group(VERB, gid)?;
        if self.pd.ctx.dev().detach(self.qpn.value(), group) {
            Ok(())
        } else {
            Err(mcast_error(
                VERB,
                gid,
                crate::error::McastError::NotAttached,
            ))
        }
    }

    /// The QP's transport (RC, UC or UD).
    pub fn qp_type(&self) -> QpType {
        self.with(|qp| qp.qp_type())
    }

    /// Whether the QP takes its receives from a shared receive queue.
    pub fn has_srq(&self) -> bool {
        self.with(|qp| qp.has_srq())
    }

    /// The IP address of the group `gid`, checked against this QP and device.
    fn group(&self, verb: &'static str, gid: std::net::Ipv6Addr) -> Result<IpAddr> {
        use crate::error::McastError;
        if self.with(|qp| qp.qp_type()) != QpType::Ud {
            return Err(mcast_error(verb, gid, McastError::NotUd));
        }
        let group = IpAddr::V6(gid).to_canonical();
        if !group.is_multicast() {
            return Err(mcast_error(verb, gid, McastError::NotMulticast));
        }
        if group.is_ipv4() != self.pd.ctx.dev().addr.to_canonical().is_ipv4() {
            return Err(mcast_error(verb, gid, McastError::WrongFamily));
        }
        Ok(group)
    }

    /// The attributes in force (`ibv_query_qp`).
    pub fn query(&self) -> QpAttr {
        self.shared.qp.lock().query()
    }

    /// Posts a send WR (`ibv_post_send`). Its SGEs name registered memory by key; the device
    /// checks every access, so this is safe.
    pub fn post_send(&self, wr: SendWr) -> Result<()> {
        let dev = self.pd.ctx.dev();
        dev.note_send();
        Ok(self.with(|qp| dev.post_send(qp, wr))?)
    }

    /// Posts a chain of send WRs at once (`ibv_post_send` with a linked list): one lock, one
    /// pass of the engine, and their packets leave in as few system calls as the kernel
    /// allows (one UDP GSO send for a run of equal packets). This is how message rate is won
    /// on a soft device, where every system call costs more than the work it carries.
    ///
    /// Like `bad_wr`, an error says how many WRs were posted before the one that failed;
    /// those stay posted.
    pub fn post_send_list(
        &self,
        wrs: impl IntoIterator<Item = SendWr>,
    ) -> std::result::Result<(), (usize, Error)> {
        let dev = self.pd.ctx.dev();
        dev.note_send();
        self.with(|qp| {
            for (i, wr) in wrs.into_iter().enumerate() {
                dev.post_send(qp, wr).map_err(|e| (i, e.into()))?;
            }
            Ok(())
        })
    }

    /// Posts a receive WR (`ibv_post_recv`).
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        let dev = self.pd.ctx.dev();
        let mut qp = self.shared.qp.lock();
        qp.post_recv(wr)?;
        // IBTA 9.7.5.2.8: a requester that met an RNR NAK retries by its own timer, so a
        // receive WR gives the engine nothing to send and no timer. Only a QP in ERROR
        // answers it, with a flush completion for `service` to hand out; otherwise only
        // whether the QP awaits completions changes. A SEND ping-pong posts one receive
        // per turn, so this skips the full pass.
        if qp.state() == softrdma_proto::QpState::Error {
            dev.service(&self.shared, &mut qp);
            dev.flush_batch(false);
        } else {
            dev.note_awaits(&self.shared, &qp);
        }
        Ok(())
    }

    /// Posts a send WR whose data (or READ/atomic destination) is an owned buffer, which
    /// travels with the WR: [`QueuePair::reclaim`] gives it back once the WR has completed.
    /// The safe way to post without managing registrations.
    pub fn post_send_owned(
        &self,
        wr_id: u64,
        op: SendOp,
        flags: SendFlags,
        ud: Option<softrdma_proto::UdDest>,
        buf: Vec<u8>,
    ) -> Result<()> {
        self.post_owned("ibv_post_send", wr_id, buf, |sge| {
            self.post_send(SendWr {
                wr_id,
                op,
                payload: softrdma_proto::Payload::Sges(softrdma_proto::sg![sge]),
                flags,
                ud,
            })
        })
    }

    /// Posts a receive into an owned buffer; [`QueuePair::reclaim`] gives it back, filled,
    /// once the receive has completed.
    pub fn post_recv_owned(&self, wr_id: u64, buf: Vec<u8>) -> Result<()> {
        self.post_owned("ibv_post_recv", wr_id, buf, |sge| {
            self.post_recv(RecvWr {
                wr_id,
                sg_list: softrdma_proto::sg![sge],
            })
        })
    }

    /// Registers `buf`, parks it under `wr_id` and posts the WR that `post` makes of its SGE;
    /// if the post fails, the buffer is not left parked.
    fn post_owned(
        &self,
        verb: &'static str,
        wr_id: u64,
        buf: Vec<u8>,
        post: impl FnOnce(softrdma_proto::Sge) -> Result<()>,
    ) -> Result<()> {
        let len = u32::try_from(buf.len()).map_err(|_| Error::OutOfRange {
            verb,
            attr: "sg_list[0].length",
            requested: buf.len() as u64,
            min: 0,
            max: u64::from(u32::MAX),
        })?;
        let mr = self.pd.register(buf, AccessFlags::LOCAL_WRITE)?;
        let sge = mr.sge(0, len);
        self.park(wr_id, mr)?;
        let r = post(sge);
        if r.is_err() {
            self.unpark(wr_id);
        }
        r
    }

    /// Takes the buffer parked under `wr_id` out.
    fn unpark(&self, wr_id: u64) -> Option<MemoryRegion> {
        self.owned.lock().as_mut()?.remove(&wr_id)
    }

    fn park(&self, wr_id: u64, mr: MemoryRegion) -> Result<()> {
        let mut o = self.owned.lock();
        let o = o.get_or_insert_default();
        if o.contains_key(&wr_id) {
            return Err(Error::WrIdInFlight {
                verb: "ibv_post",
                wr_id,
            });
        }
        o.insert(wr_id, mr);
        Ok(())
    }

    /// The owned buffer of WR `wr_id`, after its completion has been polled.
    pub fn reclaim(&self, wr_id: u64) -> Option<Vec<u8>> {
        self.unpark(wr_id)?.into_vec()
    }

    /// The engine's counters for this QP.
    pub fn counters(&self) -> softrdma_proto::QpCounters {
        self.shared.qp.lock().counters()
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        let dev = self.pd.ctx.dev();
        {
            let mut qp = self.shared.qp.lock();
            qp.farewell_ack();
            dev.service(&self.shared, &mut qp);
            // What it still awaited, nobody will: it leaves the device's count.
            dev.set_awaits(&self.shared, false, false);
        }
        // The farewell, and ACKs this thread deferred, leave before the QP is gone.
        dev.flush_batch(true);
        dev.detach_all(self.qpn.value());
        dev.mrs.granted.revoke_qpn(self.qpn.value());
        dev.remove_qp(self.qpn.value());
        dev.free_qpn(self.qpn.value());
        dev.res_changed();
        let c = self.counters();
        dev.retire_counters(c);
    }
}

fn mcast_error(
    verb: &'static str,
    gid: std::net::Ipv6Addr,
    why: crate::error::McastError,
) -> Error {
    Error::Multicast { verb, gid, why }
}

/// The far end of a connection, as exchanged out of band (LID:QPN:PSN:GID in the rdma-core
/// tools).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// The peer's address (from its GID).
    pub addr: std::net::IpAddr,
    /// The peer's QP number.
    pub qpn: Qpn,
    /// The first PSN the peer will send.
    pub psn: softrdma_wire::Psn,
}

/// The connection attributes the rdma-core example programs use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectAttr {
    /// Path MTU.
    pub mtu: softrdma_proto::Mtu,
    /// Remote access rights granted to the peer.
    pub access: AccessFlags,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries.
    pub rnr_retry: u8,
    /// RNR timer code.
    pub min_rnr_timer: u8,
    /// Outstanding READs/atomics, both directions.
    pub max_rd_atomic: u8,
    /// GRH traffic class of an RC or UC QP's packets: their IP TOS (IPv4) or traffic
    /// class (IPv6) byte, DSCP and ECN bits both.
    pub traffic_class: u8,
}

impl Default for ConnectAttr {
    /// `ibv_rc_pingpong`'s values: timeout 14, retry 7, RNR retry 7, RNR timer 12.
    fn default() -> Self {
        Self {
            mtu: softrdma_proto::Mtu::M1024,
            access: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            qkey: 0x1111_1111,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            traffic_class: 0,
        }
    }
}

impl QueuePair {
    /// Moves the QP from RESET to INIT, after which receives can be posted.
    pub fn init(&self, a: &ConnectAttr) -> Result<()> {
        let ud = self.with(|qp| qp.qp_type()) == QpType::Ud;
        self.modify(&QpAttr {
            state: Some(softrdma_proto::QpState::Init),
            pkey_index: Some(0),
            port: Some(1),
            access_flags: (!ud).then_some(a.access),
            qkey: ud.then_some(a.qkey),
            ..Default::default()
        })
    }

    /// Brings the QP from RESET (or INIT) to RTS: connected to `peer` for RC and UC, ready to send and
    /// receive datagrams for UD (where `peer` is ignored). `my_psn` is the first PSN this QP
    /// sends.
    pub fn connect(&self, my_psn: softrdma_wire::Psn, peer: &Peer, a: &ConnectAttr) -> Result<()> {
        use softrdma_proto::{AddressVector, QpState};
        let t = self.with(|qp| qp.qp_type());
        let (rc, ud) = (t == QpType::Rc, t == QpType::Ud);
        let local = self.pd.ctx.addr();
        if self.query().state == Some(QpState::Reset) {
            self.init(a)?;
        }
        let steps = [
            QpAttr {
                state: Some(QpState::Rtr),
                av: (!ud).then_some(AddressVector {
                    src: local,
                    dst: peer.addr,
                    flow_label: 0,
                    traffic_class: a.traffic_class,
                }),
                path_mtu: (!ud).then_some(a.mtu),
                dest_qpn: (!ud).then_some(peer.qpn),
                rq_psn: (!ud).then_some(peer.psn),
                max_dest_rd_atomic: rc.then_some(a.max_rd_atomic),
                min_rnr_timer: rc.then_some(a.min_rnr_timer),
                ..Default::default()
            },
            QpAttr {
                state: Some(QpState::Rts),
                sq_psn: Some(my_psn),
                timeout: rc.then_some(a.timeout),
                retry_cnt: rc.then_some(a.retry_cnt),
                rnr_retry: rc.then_some(a.rnr_retry),
                max_rd_atomic: rc.then_some(a.max_rd_atomic),
                ..Default::default()
            },
        ];
        for s in &steps {
            self.modify(s)?;
        }
        Ok(())
    }
}
