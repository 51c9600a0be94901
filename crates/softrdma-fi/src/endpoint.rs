//! Opening an endpoint (`fi_endpoint`): the info's checks, then an [`Ep`] with the data
//! operations of `xfer`. Runs on the calling thread; no locks of its own.

use crate::abi::*;
use crate::domain::Domain;
use crate::entry::{self, guard_int};
use crate::ep::{DataOps, Ep};
use crate::eq::ConnReq;
use crate::{rma, xfer};
use std::ffi::{c_int, c_void};
use std::net::SocketAddr;

/// `fi_endpoint`.
pub unsafe extern "C" fn ep_open(
    domain: *mut fid_domain,
    info: *mut fi_info,
    ep: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        let d = entry::get::<Domain>(domain.cast())?;
        // SAFETY: libfabric's info, valid or null, and its attrs.
        let (info, ep_attr, tx) = unsafe {
            let i = info.as_ref().ok_or(FI_EINVAL)?;
            (i, i.ep_attr.as_ref(), i.tx_attr.as_ref())
        };
        if ep.is_null() {
            return Err(FI_EINVAL);
        }
        let ep_type = match ep_attr.map_or(FI_EP_UNSPEC, |a| a.type_) {
            FI_EP_UNSPEC => FI_EP_RDM,
            t => t,
        };
        let offer = crate::info::offer(ep_type).ok_or(FI_ENOSYS)?;
        if info.caps & !offer.caps != 0 {
            return Err(FI_ENODATA);
        }
        // An endpoint for a connection request takes it from the info's handle.
        let req = match info.handle {
            h if h.is_null() || ep_type != FI_EP_MSG => None,
            h => Some(ConnReq::take(h)?),
        };
        // SAFETY: the info's source address, valid for its length.
        let src = unsafe { crate::sockaddr::from_c(info.src_addr, info.src_addrlen) }
            .filter(|s| s.ip() == d.dev.info.ip)
            .unwrap_or(SocketAddr::new(d.dev.info.ip, 0));
        // SAFETY: libfabric's rx attr, valid or null.
        let rx_flags = unsafe { info.rx_attr.as_ref() }.map_or(0, |r| r.op_flags);
        let caps = if info.caps == 0 {
            offer.caps
        } else {
            info.caps
        };
        let inject_size = tx
            .map_or(crate::info::INJECT, |t| t.inject_size)
            .min(crate::info::INJECT);
        let e = entry::open(Ep::new(
            context,
            DataOps {
                msg: &xfer::MSG_OPS.0,
                tagged: &xfer::TAGGED_OPS.0,
                rma: &rma::RMA_OPS.0,
                atomic: &rma::ATOMIC_OPS.0,
            },
            (ep_type, req),
            (d.dev.clone(), src.port()),
            caps,
            (tx.map_or(0, |t| t.op_flags), rx_flags),
            inject_size,
        ));
        // SAFETY: `ep` is writable, checked non-null.
        unsafe { *ep = e.cast() };
        Ok(0)
    })
}

/// `fi_endpoint2`: no flags are offered.
pub unsafe extern "C" fn ep_open2(
    domain: *mut fid_domain,
    info: *mut fi_info,
    ep: *mut *mut fid_ep,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    if flags != 0 {
        return -FI_EBADFLAGS;
    }
    // SAFETY: forwarded from libfabric.
    unsafe { ep_open(domain, info, ep, context) }
}
