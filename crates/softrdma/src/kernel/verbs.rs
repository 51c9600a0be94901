//! The verbs objects on a kernel device: PD, MR, CQ with its completion channel, SRQ and
//! QP over the system's rdma-core, taking and giving softrdma's own types (`QpAttr`,
//! `SendWr`, `RecvWr`, `Completion`, `AccessFlags`, `QpCaps`), so that the soft device's API
//! can sit on them next.
//!
//! Each object holds the ones it was made from (a QP its PD, CQs and SRQ, an MR or SRQ its
//! PD, each the context), so rdma-core sees them destroyed in the order it requires whatever
//! order the program drops them in. Posting and polling go through the context's `ops`
//! table, as rdma-core's own inline `ibv_post_send` and `ibv_poll_cq` do.
//!
//! A UD QP sends through address handles it makes itself, one per destination (source and
//! destination address, traffic class), kept for the QP's life: softrdma's `SendWr` names a
//! UD destination by address, where rdma-core's names it by AH.
//!
//! Not here yet: async events, the lending poll, `ibv_query_qp`, memory windows.
//!
//! Threads and locks: a UD QP's table of address handles is behind a mutex of its own,
//! taken by its posts and nothing else; everything else is rdma-core's.

use super::convert;
use super::{Ctx, KernelContext};
use crate::error::{Error, Result};
use softrdma_abi::{
    ibv_ah, ibv_ah_attr, ibv_comp_channel, ibv_cq, ibv_gid, ibv_global_route, ibv_mr, ibv_pd,
    ibv_qp, ibv_qp_cap, ibv_qp_init_attr, ibv_recv_wr, ibv_srq, ibv_srq_attr, ibv_srq_init_attr,
    ibv_ud, ibv_wc, ibv_wr_union,
};
use softrdma_proto::{AccessFlags, Completion, QpAttr, QpCaps, QpType, RecvWr, SendWr};
use softrdma_wire::Qpn;
use std::collections::HashMap;
use std::net::IpAddr;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use std::time::Duration;

struct Pd {
    ctx: Arc<Ctx>,
    pd: NonNull<ibv_pd>,
}

struct Channel {
    ctx: Arc<Ctx>,
    ch: NonNull<ibv_comp_channel>,
}

struct Cq {
    ctx: Arc<Ctx>,
    _channel: Option<Arc<Channel>>,
    cq: NonNull<ibv_cq>,
}

struct Mr {
    pd: Arc<Pd>,
    mr: NonNull<ibv_mr>,
}

struct Srq {
    pd: Arc<Pd>,
    srq: NonNull<ibv_srq>,
}

/// A UD destination's address handle key: source, destination, traffic class.
type AhKey = (IpAddr, IpAddr, u8);

struct Qp {
    pd: Arc<Pd>,
    _cqs: [Arc<Cq>; 2],
    _srq: Option<Arc<Srq>>,
    qp: NonNull<ibv_qp>,
    /// A UD QP's address handles, by destination.
    ahs: Mutex<HashMap<AhKey, NonNull<ibv_ah>>>,
}

// SAFETY: rdma-core's objects may be used from any thread; each of these is only
// destroyed in its Drop, once, and a QP's address handles only under its mutex or in its
// Drop.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}
// SAFETY: as above.
unsafe impl Send for Channel {}
// SAFETY: as above.
unsafe impl Sync for Channel {}
// SAFETY: as above.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}
// SAFETY: as above.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}
// SAFETY: as above.
unsafe impl Send for Srq {}
// SAFETY: as above.
unsafe impl Sync for Srq {}
// SAFETY: as above.
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: the PD allocated in `alloc_pd`, freed once, after every MR, SRQ and QP on
        // it (each holds this `Pd`).
        unsafe { (self.ctx.lib.dealloc_pd)(self.pd.as_ptr()) };
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: the channel made in `create_comp_channel`, destroyed once, after every
        // CQ on it (each holds this `Channel`).
        unsafe { (self.ctx.lib.destroy_comp_channel)(self.ch.as_ptr()) };
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: the CQ made in `create_cq`, destroyed once, after every QP on it.
        unsafe { (self.ctx.lib.destroy_cq)(self.cq.as_ptr()) };
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: the MR made in `register_raw`, deregistered once.
        unsafe { (self.pd.ctx.lib.dereg_mr)(self.mr.as_ptr()) };
    }
}

impl Drop for Srq {
    fn drop(&mut self) {
        // SAFETY: the SRQ made in `create_srq`, destroyed once, after every QP on it.
        unsafe { (self.pd.ctx.lib.destroy_srq)(self.srq.as_ptr()) };
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        let lib = self.pd.ctx.lib;
        // SAFETY: the QP made in `create_qp`, destroyed once, before its PD, CQs and SRQ.
        unsafe { (lib.destroy_qp)(self.qp.as_ptr()) };
        let ahs = std::mem::take(self.ahs.get_mut().unwrap_or_else(|p| p.into_inner()));
        for ah in ahs.into_values() {
            // SAFETY: an AH this QP made, no longer used by any WR (the QP is gone).
            unsafe { (lib.destroy_ah)(ah.as_ptr()) };
        }
    }
}

/// A protection domain on a kernel device (`ibv_alloc_pd`).
#[derive(Clone)]
pub struct KernelPd {
    inner: Arc<Pd>,
}

/// A completion channel on a kernel device (`ibv_create_comp_channel`).
#[derive(Clone)]
pub struct KernelChannel {
    inner: Arc<Channel>,
}

/// A completion queue on a kernel device (`ibv_create_cq`).
#[derive(Clone)]
pub struct KernelCq {
    inner: Arc<Cq>,
}

/// A memory region on a kernel device (`ibv_reg_mr`).
pub struct KernelMr {
    inner: Mr,
}

/// A shared receive queue on a kernel device (`ibv_create_srq`).
#[derive(Clone)]
pub struct KernelSrq {
    inner: Arc<Srq>,
}

/// A queue pair on a kernel device (`ibv_create_qp`).
pub struct KernelQp {
    inner: Qp,
}

/// What a kernel QP is made with (`struct ibv_qp_init_attr`).
pub struct KernelQpInit<'a> {
    /// Transport.
    pub qp_type: QpType,
    /// Where send completions go.
    pub send_cq: &'a KernelCq,
    /// Where receive completions go.
    pub recv_cq: &'a KernelCq,
    /// Queue limits (the kernel may give more).
    pub cap: QpCaps,
    /// Signal every send WR.
    pub sq_sig_all: bool,
    /// Take receives from this shared receive queue.
    pub srq: Option<&'a KernelSrq>,
}

impl KernelContext {
    /// Allocates a protection domain (`ibv_alloc_pd`).
    pub fn alloc_pd(&self) -> Result<KernelPd> {
        let c = &self.inner;
        // SAFETY: a live context.
        let pd = NonNull::new(unsafe { (c.lib.alloc_pd)(c.ctx.as_ptr()) })
            .ok_or_else(|| Error::kernel("ibv_alloc_pd", &c.name))?;
        Ok(KernelPd {
            inner: Arc::new(Pd { ctx: c.clone(), pd }),
        })
    }

    /// Creates a completion channel (`ibv_create_comp_channel`).
    pub fn create_comp_channel(&self) -> Result<KernelChannel> {
        let c = &self.inner;
        // SAFETY: a live context.
        let ch = NonNull::new(unsafe { (c.lib.create_comp_channel)(c.ctx.as_ptr()) })
            .ok_or_else(|| Error::kernel("ibv_create_comp_channel", &c.name))?;
        Ok(KernelChannel {
            inner: Arc::new(Channel { ctx: c.clone(), ch }),
        })
    }

    /// Creates a completion queue of at least `cqe` entries, its events on `channel` if
    /// given (`ibv_create_cq`).
    pub fn create_cq(&self, cqe: usize, channel: Option<&KernelChannel>) -> Result<KernelCq> {
        let c = &self.inner;
        let n = i32::try_from(cqe).map_err(|_| Error::OutOfRange {
            verb: "ibv_create_cq",
            attr: "cqe",
            requested: cqe as u64,
            min: 1,
            max: i32::MAX as u64,
        })?;
        let ch = channel.map_or(std::ptr::null_mut(), |h| h.inner.ch.as_ptr());
        // SAFETY: a live context, and a channel of it or none; no user context or vector.
        let cq = unsafe { (c.lib.create_cq)(c.ctx.as_ptr(), n, std::ptr::null_mut(), ch, 0) };
        let cq = NonNull::new(cq).ok_or_else(|| Error::kernel("ibv_create_cq", &c.name))?;
        Ok(KernelCq {
            inner: Arc::new(Cq {
                ctx: c.clone(),
                _channel: channel.map(|h| h.inner.clone()),
                cq,
            }),
        })
    }
}

impl KernelPd {
    /// Registers memory the caller owns (`ibv_reg_mr`).
    ///
    /// # Safety
    /// `addr..addr + len` must be valid for reads and writes, and stay so, until the
    /// returned region is dropped; the device and remote peers may read and write it at
    /// any time until then.
    pub unsafe fn register_raw(
        &self,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<KernelMr> {
        let p = &self.inner;
        // SAFETY: a live PD, and memory the caller vouches for.
        let mr =
            unsafe { (p.ctx.lib.reg_mr)(p.pd.as_ptr(), addr.cast(), len, access.bits() as i32) };
        let mr = NonNull::new(mr).ok_or_else(|| Error::kernel("ibv_reg_mr", &p.ctx.name))?;
        Ok(KernelMr {
            inner: Mr { pd: p.clone(), mr },
        })
    }

    /// Creates a shared receive queue of `max_wr` WRs of `max_sge` SGEs each
    /// (`ibv_create_srq`).
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<KernelSrq> {
        let p = &self.inner;
        let mut init = ibv_srq_init_attr {
            srq_context: std::ptr::null_mut(),
            attr: ibv_srq_attr {
                max_wr,
                max_sge,
                srq_limit: 0,
            },
        };
        // SAFETY: a live PD and a filled init struct.
        let srq = unsafe { (p.ctx.lib.create_srq)(p.pd.as_ptr(), &mut init) };
        let srq = NonNull::new(srq).ok_or_else(|| Error::kernel("ibv_create_srq", &p.ctx.name))?;
        Ok(KernelSrq {
            inner: Arc::new(Srq { pd: p.clone(), srq }),
        })
    }

    /// Creates a queue pair in RESET (`ibv_create_qp`).
    pub fn create_qp(&self, init: KernelQpInit<'_>) -> Result<KernelQp> {
        let p = &self.inner;
        let cap = init.cap;
        let mut c = ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: init.send_cq.inner.cq.as_ptr(),
            recv_cq: init.recv_cq.inner.cq.as_ptr(),
            srq: init
                .srq
                .map_or(std::ptr::null_mut(), |s| s.inner.srq.as_ptr()),
            cap: ibv_qp_cap {
                max_send_wr: cap.max_send_wr,
                max_recv_wr: cap.max_recv_wr,
                max_send_sge: cap.max_send_sge,
                max_recv_sge: cap.max_recv_sge,
                max_inline_data: cap.max_inline_data,
            },
            qp_type: convert::qp_type(init.qp_type),
            sq_sig_all: i32::from(init.sq_sig_all),
        };
        // SAFETY: a live PD, CQs and SRQ of the same context, and a filled init struct.
        let qp = unsafe { (p.ctx.lib.create_qp)(p.pd.as_ptr(), &mut c) };
        let qp = NonNull::new(qp).ok_or_else(|| Error::kernel("ibv_create_qp", &p.ctx.name))?;
        Ok(KernelQp {
            inner: Qp {
                pd: p.clone(),
                _cqs: [init.send_cq.inner.clone(), init.recv_cq.inner.clone()],
                _srq: init.srq.map(|s| s.inner.clone()),
                qp,
                ahs: Mutex::new(HashMap::new()),
            },
        })
    }
}

impl KernelMr {
    fn mr(&self) -> &ibv_mr {
        // SAFETY: the live MR rdma-core gave; its public fields are plain data it does not
        // change after registration.
        unsafe { self.inner.mr.as_ref() }
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.mr().lkey
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.mr().rkey
    }

    /// The start address.
    pub fn addr(&self) -> u64 {
        self.mr().addr as u64
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.mr().length
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// An SGE over `len` bytes at `offset` of the region, as
    /// [`crate::MemoryRegion::sge`] gives one.
    pub fn sge(&self, offset: u64, len: u32) -> softrdma_proto::Sge {
        softrdma_proto::Sge {
            addr: self.addr() + offset,
            length: len,
            lkey: self.lkey(),
        }
    }
}

impl KernelChannel {
    /// Waits up to `timeout` (for ever with `None`) for a CQ event, takes and acknowledges
    /// it: true if one came (`ibv_get_cq_event`, `ibv_ack_cq_events`).
    pub fn get_cq_event(&self, timeout: Option<Duration>) -> Result<bool> {
        let c = &self.inner;
        // SAFETY: the live channel; its descriptor is a plain int.
        let fd = unsafe { c.ch.as_ref() }.fd;
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.map_or(-1, |t| i32::try_from(t.as_millis()).unwrap_or(i32::MAX));
        // SAFETY: one pollfd of ours.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n < 0 {
            return Err(Error::kernel("ibv_get_cq_event (poll)", &c.ctx.name));
        }
        if n == 0 {
            return Ok(false);
        }
        let mut cq = std::ptr::null_mut();
        let mut ctx = std::ptr::null_mut();
        // SAFETY: the live channel, readable, and places for the CQ and its context.
        if unsafe { (c.ctx.lib.get_cq_event)(c.ch.as_ptr(), &mut cq, &mut ctx) } != 0 {
            return Err(Error::kernel("ibv_get_cq_event", &c.ctx.name));
        }
        // SAFETY: the CQ the event named, live (its handle holds this channel).
        unsafe { (c.ctx.lib.ack_cq_events)(cq, 1) };
        Ok(true)
    }
}

impl KernelCq {
    /// Takes up to `max` completions (`ibv_poll_cq`).
    pub fn poll(&self, max: usize) -> Result<Vec<Completion>> {
        let mut out = Vec::new();
        self.poll_into(max, &mut out)?;
        Ok(out)
    }

    /// Takes up to `max` completions into `out`; how many came.
    pub fn poll_into(&self, max: usize, out: &mut Vec<Completion>) -> Result<usize> {
        let c = &self.inner;
        // SAFETY: a live CQ; its context's ops table is rdma-core's provider's.
        let poll = unsafe { (*c.ctx.ctx.as_ptr()).ops.poll_cq }
            .ok_or_else(|| Error::kernel_rc("ibv_poll_cq", &c.ctx.name, libc::ENOSYS))?;
        let mut wc = [ibv_wc::default(); 16];
        let mut got = 0;
        while got < max {
            let n = (max - got).min(wc.len()) as i32;
            // SAFETY: a live CQ and an array of `n` entries.
            let r = unsafe { poll(c.cq.as_ptr(), n, wc.as_mut_ptr()) };
            if r < 0 {
                return Err(Error::kernel_rc("ibv_poll_cq", &c.ctx.name, libc::EIO));
            }
            let r = r as usize;
            out.extend(wc[..r].iter().map(convert::completion));
            got += r;
            if r < n as usize {
                break;
            }
        }
        Ok(got)
    }

    /// Asks for an event on the CQ's channel at the next completion, or the next solicited
    /// one (`ibv_req_notify_cq`).
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        let c = &self.inner;
        // SAFETY: a live CQ; its context's ops table is the provider's.
        let arm = unsafe { (*c.ctx.ctx.as_ptr()).ops.req_notify_cq }
            .ok_or_else(|| Error::kernel_rc("ibv_req_notify_cq", &c.ctx.name, libc::ENOSYS))?;
        // SAFETY: a live CQ.
        let rc = unsafe { arm(c.cq.as_ptr(), i32::from(solicited_only)) };
        if rc != 0 {
            return Err(Error::kernel_rc("ibv_req_notify_cq", &c.ctx.name, rc));
        }
        Ok(())
    }
}

/// Posts one receive WR through `post` (a QP's or an SRQ's).
fn post_one_recv<T>(
    ctx: &Ctx,
    verb: &'static str,
    obj: *mut T,
    post: Option<unsafe extern "C" fn(*mut T, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> i32>,
    wr: &RecvWr,
) -> Result<()> {
    let post = post.ok_or_else(|| Error::kernel_rc(verb, &ctx.name, libc::ENOSYS))?;
    let mut sges = convert::recv_sges(wr);
    let mut w = ibv_recv_wr {
        wr_id: wr.wr_id,
        next: std::ptr::null_mut(),
        sg_list: sges.as_mut_ptr(),
        num_sge: sges.len() as i32,
    };
    let mut bad = std::ptr::null_mut();
    // SAFETY: a live QP or SRQ of `ctx` and one WR whose SGE list lives until the call
    // returns.
    let rc = unsafe { post(obj, &mut w, &mut bad) };
    if rc != 0 {
        return Err(Error::kernel_rc(verb, &ctx.name, rc));
    }
    Ok(())
}

impl KernelSrq {
    /// Posts a receive WR to the SRQ (`ibv_post_srq_recv`).
    pub fn post_recv(&self, wr: &RecvWr) -> Result<()> {
        let s = &self.inner;
        let c = &s.pd.ctx;
        // SAFETY: a live SRQ; its context's ops table is the provider's.
        let post = unsafe { (*c.ctx.as_ptr()).ops.post_srq_recv };
        post_one_recv(c, "ibv_post_srq_recv", s.srq.as_ptr(), post, wr)
    }
}

impl KernelQp {
    /// The QP number.
    pub fn qpn(&self) -> Qpn {
        // SAFETY: the live QP; `qp_num` is set at creation and never changes.
        Qpn::new(unsafe { self.inner.qp.as_ref() }.qp_num)
    }

    fn ctx(&self) -> &Ctx {
        &self.inner.pd.ctx
    }

    /// Moves the QP (`ibv_modify_qp`). An address vector's source address is found among
    /// port 1's RoCE v2 GIDs; an unset path MTU is port 1's active MTU.
    pub fn modify(&self, attr: &QpAttr) -> Result<()> {
        let c = self.ctx();
        let (mut a, mask) = convert::to_ibv_qp_attr(attr, c.active_mtu(), |ip| c.sgid_index(ip));
        // SAFETY: a live QP and a filled attribute struct with its mask.
        let rc = unsafe { (c.lib.modify_qp)(self.inner.qp.as_ptr(), &mut a, mask) };
        if rc != 0 {
            return Err(Error::kernel_rc("ibv_modify_qp", &c.name, rc));
        }
        Ok(())
    }

    /// The address handle of a UD destination, made on first use.
    fn ah(&self, d: &softrdma_proto::UdDest) -> Result<NonNull<ibv_ah>> {
        let c = self.ctx();
        let key = (d.src, d.ip, d.traffic_class);
        let mut ahs = self.inner.ahs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(ah) = ahs.get(&key) {
            return Ok(*ah);
        }
        let sgid = c.sgid_index(d.src).ok_or_else(|| {
            Error::kernel_rc(
                "ibv_create_ah (the UD source address is none of port 1's RoCE v2 GIDs)",
                &c.name,
                libc::EADDRNOTAVAIL,
            )
        })?;
        let mut attr = ibv_ah_attr {
            grh: ibv_global_route {
                dgid: ibv_gid {
                    raw: convert::gid_of_ip(d.ip).octets(),
                },
                flow_label: 0,
                sgid_index: sgid as u8,
                hop_limit: 64,
                traffic_class: d.traffic_class,
            },
            is_global: 1,
            port_num: 1,
            ..Default::default()
        };
        let pd = &self.inner.pd;
        // SAFETY: a live PD and a filled attribute struct.
        let ah = unsafe { (c.lib.create_ah)(pd.pd.as_ptr(), &mut attr) };
        let ah = NonNull::new(ah).ok_or_else(|| Error::kernel("ibv_create_ah", &c.name))?;
        ahs.insert(key, ah);
        Ok(ah)
    }

    /// Posts a send WR (`ibv_post_send`); a UD WR's destination gets its address handle.
    pub fn post_send(&self, wr: &SendWr) -> Result<()> {
        let c = self.ctx();
        let mut head = convert::send_wr_head(wr);
        if let Some(d) = &wr.ud {
            head.wr = ibv_wr_union {
                ud: ibv_ud {
                    ah: self.ah(d)?.as_ptr(),
                    remote_qpn: d.qpn.value(),
                    remote_qkey: d.qkey,
                },
            };
        }
        let mut sges = convert::send_sges(&wr.payload);
        head.sg_list = sges.as_mut_ptr();
        head.num_sge = sges.len() as i32;
        // SAFETY: a live QP; its context's ops table is the provider's.
        let post = unsafe { (*c.ctx.as_ptr()).ops.post_send }
            .ok_or_else(|| Error::kernel_rc("ibv_post_send", &c.name, libc::ENOSYS))?;
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live QP and one WR whose SGE list (and an inline payload's bytes, and
        // its AH) live until the call returns, which is as long as rdma-core reads them.
        let rc = unsafe { post(self.inner.qp.as_ptr(), &mut head, &mut bad) };
        if rc != 0 {
            return Err(Error::kernel_rc("ibv_post_send", &c.name, rc));
        }
        Ok(())
    }

    /// Posts a receive WR (`ibv_post_recv`).
    pub fn post_recv(&self, wr: &RecvWr) -> Result<()> {
        let c = self.ctx();
        // SAFETY: a live QP; its context's ops table is the provider's.
        let post = unsafe { (*c.ctx.as_ptr()).ops.post_recv };
        post_one_recv(c, "ibv_post_recv", self.inner.qp.as_ptr(), post, wr)
    }
}
