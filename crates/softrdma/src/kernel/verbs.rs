//! The verbs objects on a kernel device: PD, MR, CQ and QP over the system's rdma-core,
//! taking and giving softrdma's own types (`QpAttr`, `SendWr`, `RecvWr`, `Completion`,
//! `AccessFlags`, `QpCaps`), so that the soft device's API can sit on them next.
//!
//! Each object holds the ones it was made from (a QP its PD and CQs, an MR its PD, each
//! the context), so rdma-core sees them destroyed in the order it requires whatever order
//! the program drops them in. Posting and polling go through the context's `ops` table,
//! as rdma-core's own inline `ibv_post_send` and `ibv_poll_cq` do.
//!
//! Not here yet: SRQs, AHs and UD sends, completion channels, async events, and the lending
//! poll; a UD WR is refused with [`Error::KernelDevice`].

use super::convert;
use super::{Ctx, KernelContext};
use crate::error::{Error, Result};
use softrdma_abi::{
    ibv_cq, ibv_mr, ibv_pd, ibv_qp, ibv_qp_cap, ibv_qp_init_attr, ibv_recv_wr, ibv_wc,
};
use softrdma_proto::{AccessFlags, Completion, Mtu, QpAttr, QpCaps, QpType, RecvWr, SendWr};
use softrdma_wire::Qpn;
use std::ptr::NonNull;
use std::sync::Arc;

struct Pd {
    ctx: Arc<Ctx>,
    pd: NonNull<ibv_pd>,
}

struct Cq {
    ctx: Arc<Ctx>,
    cq: NonNull<ibv_cq>,
}

struct Mr {
    pd: Arc<Pd>,
    mr: NonNull<ibv_mr>,
}

struct Qp {
    pd: Arc<Pd>,
    _cqs: [Arc<Cq>; 2],
    qp: NonNull<ibv_qp>,
}

// SAFETY: rdma-core's objects may be used from any thread; each of the four is only
// destroyed in its Drop, once.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}
// SAFETY: as above.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}
// SAFETY: as above.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}
// SAFETY: as above.
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: the PD allocated in `alloc_pd`, freed once, after every MR and QP on it
        // (each holds this `Pd`).
        unsafe { (self.ctx.lib.dealloc_pd)(self.pd.as_ptr()) };
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

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: the QP made in `create_qp`, destroyed once, before its PD and CQs.
        unsafe { (self.pd.ctx.lib.destroy_qp)(self.qp.as_ptr()) };
    }
}

/// A protection domain on a kernel device (`ibv_alloc_pd`).
#[derive(Clone)]
pub struct KernelPd {
    inner: Arc<Pd>,
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

/// A queue pair on a kernel device (`ibv_create_qp`).
pub struct KernelQp {
    inner: Qp,
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

    /// Creates a completion queue of at least `cqe` entries, with no channel
    /// (`ibv_create_cq`).
    pub fn create_cq(&self, cqe: usize) -> Result<KernelCq> {
        let c = &self.inner;
        let n = i32::try_from(cqe).map_err(|_| Error::OutOfRange {
            verb: "ibv_create_cq",
            attr: "cqe",
            requested: cqe as u64,
            min: 1,
            max: i32::MAX as u64,
        })?;
        // SAFETY: a live context; no user context, channel or vector.
        let cq = unsafe {
            (c.lib.create_cq)(
                c.ctx.as_ptr(),
                n,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        let cq = NonNull::new(cq).ok_or_else(|| Error::kernel("ibv_create_cq", &c.name))?;
        Ok(KernelCq {
            inner: Arc::new(Cq { ctx: c.clone(), cq }),
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

    /// Creates a queue pair in RESET (`ibv_create_qp`). The kernel may give larger limits
    /// than `cap` asks.
    pub fn create_qp(
        &self,
        qp_type: QpType,
        send_cq: &KernelCq,
        recv_cq: &KernelCq,
        cap: QpCaps,
        sq_sig_all: bool,
    ) -> Result<KernelQp> {
        let p = &self.inner;
        let mut init = ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: send_cq.inner.cq.as_ptr(),
            recv_cq: recv_cq.inner.cq.as_ptr(),
            srq: std::ptr::null_mut(),
            cap: ibv_qp_cap {
                max_send_wr: cap.max_send_wr,
                max_recv_wr: cap.max_recv_wr,
                max_send_sge: cap.max_send_sge,
                max_recv_sge: cap.max_recv_sge,
                max_inline_data: cap.max_inline_data,
            },
            qp_type: convert::qp_type(qp_type),
            sq_sig_all: i32::from(sq_sig_all),
        };
        // SAFETY: a live PD and CQs of the same context, and a filled init struct.
        let qp = unsafe { (p.ctx.lib.create_qp)(p.pd.as_ptr(), &mut init) };
        let qp = NonNull::new(qp).ok_or_else(|| Error::kernel("ibv_create_qp", &p.ctx.name))?;
        Ok(KernelQp {
            inner: Qp {
                pd: p.clone(),
                _cqs: [send_cq.inner.clone(), recv_cq.inner.clone()],
                qp,
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

    /// Moves the QP (`ibv_modify_qp`). An address vector's source GID is looked up in the
    /// device's GID table among the RoCE v2 entries; `mtu` stands in for an unset path MTU.
    pub fn modify(
        &self,
        attr: &QpAttr,
        gids: &[(u32, std::net::Ipv6Addr)],
        mtu: Mtu,
    ) -> Result<()> {
        let (mut a, mask) = convert::to_ibv_qp_attr(attr, mtu, |ip| {
            let g = convert::gid_of_ip(ip);
            gids.iter().find(|(_, x)| *x == g).map(|(i, _)| *i as usize)
        });
        let c = self.ctx();
        // SAFETY: a live QP and a filled attribute struct with its mask.
        let rc = unsafe { (c.lib.modify_qp)(self.inner.qp.as_ptr(), &mut a, mask) };
        if rc != 0 {
            return Err(Error::kernel_rc("ibv_modify_qp", &c.name, rc));
        }
        Ok(())
    }

    /// Posts a send WR (`ibv_post_send`).
    pub fn post_send(&self, wr: &SendWr) -> Result<()> {
        let c = self.ctx();
        let mut head = convert::send_wr_head(wr).ok_or_else(|| Error::KernelDevice {
            verb: "ibv_post_send (UD)",
            device: c.name.clone(),
        })?;
        let mut sges = convert::send_sges(&wr.payload);
        head.sg_list = sges.as_mut_ptr();
        head.num_sge = sges.len() as i32;
        // SAFETY: a live QP; its context's ops table is the provider's.
        let post = unsafe { (*c.ctx.as_ptr()).ops.post_send }
            .ok_or_else(|| Error::kernel_rc("ibv_post_send", &c.name, libc::ENOSYS))?;
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live QP and one WR whose SGE list (and an inline payload's bytes) live
        // until the call returns, which is as long as rdma-core reads them.
        let rc = unsafe { post(self.inner.qp.as_ptr(), &mut head, &mut bad) };
        if rc != 0 {
            return Err(Error::kernel_rc("ibv_post_send", &c.name, rc));
        }
        Ok(())
    }

    /// Posts a receive WR (`ibv_post_recv`).
    pub fn post_recv(&self, wr: &RecvWr) -> Result<()> {
        let c = self.ctx();
        let mut sges = convert::recv_sges(wr);
        let mut w = ibv_recv_wr {
            wr_id: wr.wr_id,
            next: std::ptr::null_mut(),
            sg_list: sges.as_mut_ptr(),
            num_sge: sges.len() as i32,
        };
        // SAFETY: a live QP; its context's ops table is the provider's.
        let post = unsafe { (*c.ctx.as_ptr()).ops.post_recv }
            .ok_or_else(|| Error::kernel_rc("ibv_post_recv", &c.name, libc::ENOSYS))?;
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live QP and one WR whose SGE list lives until the call returns.
        let rc = unsafe { post(self.inner.qp.as_ptr(), &mut w, &mut bad) };
        if rc != 0 {
            return Err(Error::kernel_rc("ibv_post_recv", &c.name, rc));
        }
        Ok(())
    }
}
