//! The domain (`fid_domain`): one softrdma device, by the name and address of its info,
//! opened (the fabric layer's [`softrdma_fabric::Domain`]) on first use: the first memory
//! registration or endpoint enabled. Its endpoints and regions share it. Its operations
//! are wired in `fabric`, which opens it.
//!
//! Threads and locks: the opened device is behind `FiDomain`, taken alone (softrdma's own
//! locks under it while the device opens).

use crate::abi::*;
use crate::entry::{Errno, object};
use crate::info::{self, Device};
use softrdma::sync::{Lock, Rank};
use std::sync::Arc;

/// A domain: one softrdma device.
#[repr(C)]
pub struct Domain {
    /// Its public part, first.
    pub fid: fid_domain,
    /// The device.
    pub dev: Arc<DomainDevice>,
    /// The API version the application asked for.
    pub api_version: u32,
}

object!(Domain, FI_CLASS_DOMAIN, DOMAIN_FI_OPS);

/// A domain's device: named by its info, opened on first use and then shared by the
/// domain's endpoints and regions (each holds it, so that closing them in any order is
/// safe).
pub struct DomainDevice {
    /// Its name and address.
    pub info: Device,
    opened: Lock<Option<Arc<softrdma_fabric::Domain>>>,
}

impl DomainDevice {
    /// The device `info` names, not yet opened.
    pub fn new(info: Device) -> Arc<Self> {
        Arc::new(Self {
            info,
            opened: Lock::new(Rank::FiDomain, None),
        })
    }

    /// The device, opened now if it was not.
    pub fn open(&self) -> Result<Arc<softrdma_fabric::Domain>, Errno> {
        let mut o = self.opened.lock();
        if let Some(d) = &*o {
            return Ok(d.clone());
        }
        let d = softrdma_fabric::Domain::open(self.info.ip).map_err(|e| e.errno())?;
        *o = Some(d.clone());
        Ok(d)
    }
}

/// The device an info names: by its domain name, else by its source address.
pub fn device_of(info: &fi_info) -> Result<Device, Errno> {
    // SAFETY: libfabric's info: its attrs valid or null, names C strings.
    let name = unsafe {
        info.domain_attr
            .as_ref()
            .filter(|d| !d.name.is_null())
            .map(|d| {
                std::ffi::CStr::from_ptr(d.name)
                    .to_string_lossy()
                    .into_owned()
            })
    };
    // SAFETY: as above; the source address valid for its length.
    let src = unsafe { crate::sockaddr::from_c(info.src_addr, info.src_addrlen) };
    info::devices()
        .into_iter()
        .find(|d| match (&name, src) {
            (Some(n), _) => *n == d.name,
            (None, Some(s)) => s.ip() == d.ip,
            (None, None) => true,
        })
        .ok_or(FI_ENODATA)
}
