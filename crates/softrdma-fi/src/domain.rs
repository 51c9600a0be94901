//! The domain (`fid_domain`): one softrdma device, by the name and address of its info.
//! It opens nothing by itself: each endpoint opens the device at the domain's address
//! when it is enabled. Its operations are wired in `fabric`, which opens it.

use crate::abi::*;
use crate::entry::{Errno, object};
use crate::info::{self, Device};

/// A domain: one softrdma device.
#[repr(C)]
pub struct Domain {
    /// Its public part, first.
    pub fid: fid_domain,
    /// The device.
    pub dev: Device,
    /// The API version the application asked for.
    pub api_version: u32,
}

object!(Domain, FI_CLASS_DOMAIN, DOMAIN_FI_OPS);

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
