//! The kernel's RDMA devices (rxe, siw, mlx5, whatever the system's rdma-core drives),
//! through the system's `libibverbs.so.1`, loaded at run time (see `library`).
//!
//! This is softrdma's second backend, so far in two parts:
//! - the device list and the queries (`ibv_query_device`, `ibv_query_port`, the GID table
//!   with its types), with the soft device's types ([`DeviceAttr`], [`PortAttr`]);
//! - the verbs objects, as types of their own ([`KernelPd`], [`KernelMr`], [`KernelCq`] with
//!   its [`KernelChannel`], [`KernelSrq`], [`KernelQp`]: RC, UC and UD QPs, SEND, WRITE,
//!   READ and atomics, receives, polling and CQ events) that
//!   take and give softrdma's own WR, completion and attribute types ([`convert`] maps them
//!   onto rdma-core's structs).
//!
//! [`crate::Context`] and the soft device's object types do not sit on these yet: opening a
//! kernel device by name there fails with [`Error::KernelDevice`], which says so.
//!
//! A host without rdma-core, or without kernel devices, lists none and prints nothing.
//!
//! Threads and locks: none of softrdma's. rdma-core's own calls are thread-safe, and every
//! object here is `Send` and `Sync`, as its C object is.

mod attr;
pub mod convert;
mod library;
mod verbs;

pub use attr::{GidType, PORT_STATES};
pub use verbs::{KernelChannel, KernelCq, KernelMr, KernelPd, KernelQp, KernelQpInit, KernelSrq};

use crate::config::limits::{DeviceAttr, PortAttr};
use crate::error::{Error, Result};
use softrdma_abi::{ibv_context, ibv_device, ibv_gid_entry};
use std::ffi::CStr;
use std::net::Ipv6Addr;
use std::ptr::NonNull;
use std::sync::Arc;

/// A kernel RDMA device, as the system's `ibv_get_device_list` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelDevice {
    /// Its name (`rxe0`, `mlx5_0`).
    pub name: String,
    /// Its node GUID, in host order.
    pub node_guid: u64,
}

/// The system's library that lists the kernel devices, if one was found and loaded.
pub fn library_path() -> Option<&'static std::path::Path> {
    library::get().map(|l| l.path.as_path())
}

/// Every kernel RDMA device the system's rdma-core lists; none where there is no
/// rdma-core (or `SOFTRDMA_KERNEL_VERBS=0`).
pub fn devices() -> Vec<KernelDevice> {
    let Some(lib) = library::get() else {
        return Vec::new();
    };
    with_list(lib, |list| {
        list.iter()
            .map(|&d| KernelDevice {
                name: device_name(d),
                // SAFETY: `d` is an entry of the live list.
                node_guid: u64::from_be(unsafe { (lib.get_device_guid)(d) }),
            })
            .collect()
    })
}

/// Runs `f` on the system's device list, freed after.
fn with_list<T>(lib: &library::Library, f: impl FnOnce(&[*mut ibv_device]) -> T) -> T {
    let mut n = 0;
    // SAFETY: rdma-core's ibv_get_device_list with a place for the count; NULL or an array
    // of `n` devices, freed below.
    let list = unsafe { (lib.get_device_list)(&mut n) };
    if list.is_null() {
        return f(&[]);
    }
    // SAFETY: the array rdma-core returned holds `n` device pointers.
    let devs = unsafe { std::slice::from_raw_parts(list, n.max(0) as usize) };
    let out = f(devs);
    // SAFETY: the list returned above, freed once; no pointer from it outlives `f`, except
    // those of devices opened meanwhile, which rdma-core keeps alive until they close.
    unsafe { (lib.free_device_list)(list) };
    out
}

fn device_name(d: *mut ibv_device) -> String {
    // SAFETY: `d` is a live device of rdma-core's list, whose `name` is NUL-terminated
    // inside its 64 bytes.
    unsafe { CStr::from_ptr((*d).name.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// An open kernel device (`ibv_open_device` of the system's rdma-core). Cloning gives
/// another handle; the device closes when the last handle, and every object made from it,
/// is gone.
#[derive(Clone)]
pub struct KernelContext {
    inner: Arc<Ctx>,
}

/// The open `ibv_context`, closed when the last handle and object go.
struct Ctx {
    lib: &'static library::Library,
    ctx: NonNull<ibv_context>,
    name: String,
    /// Port 1's RoCE v2 GIDs, by index, read when first needed.
    roce_gids: std::sync::OnceLock<Vec<(u32, Ipv6Addr)>>,
    /// Port 1's active MTU, read when first needed.
    mtu: std::sync::OnceLock<softrdma_proto::Mtu>,
}

// SAFETY: an ibv_context may be used from any thread (rdma-core's verbs are thread-safe),
// and the library's function pointers are plain code addresses.
unsafe impl Send for Ctx {}
// SAFETY: as for Send.
unsafe impl Sync for Ctx {}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: the context opened in `open`, closed once, after every object made from
        // it (each holds this `Ctx`).
        unsafe { (self.lib.close_device)(self.ctx.as_ptr()) };
    }
}

impl std::fmt::Debug for KernelContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelContext")
            .field("name", &self.inner.name)
            .finish()
    }
}

impl KernelContext {
    /// Opens the kernel device named `name`.
    pub fn open(name: &str) -> Result<Self> {
        let lib = library::get().ok_or_else(|| Error::NoDevice(name.to_owned()))?;
        let ctx = with_list(lib, |list| {
            let d = list.iter().copied().find(|&d| device_name(d) == name)?;
            // SAFETY: a device of the live list; rdma-core keeps it alive while open.
            Some(NonNull::new(unsafe { (lib.open_device)(d) }))
        });
        match ctx {
            None => Err(Error::NoDevice(name.to_owned())),
            Some(None) => Err(Error::kernel("ibv_open_device", name)),
            Some(Some(ctx)) => Ok(Self {
                inner: Arc::new(Ctx {
                    lib,
                    ctx,
                    name: name.to_owned(),
                    roce_gids: std::sync::OnceLock::new(),
                    mtu: std::sync::OnceLock::new(),
                }),
            }),
        }
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The device's limits (`ibv_query_device`).
    pub fn query_device(&self) -> Result<DeviceAttr> {
        let mut a = std::mem::MaybeUninit::zeroed();
        // SAFETY: a live context and a zeroed struct of the size rdma-core writes.
        let rc = unsafe { (self.inner.lib.query_device)(self.inner.ctx.as_ptr(), a.as_mut_ptr()) };
        if rc != 0 {
            return Err(Error::kernel_rc("ibv_query_device", &self.inner.name, rc));
        }
        // SAFETY: zeroed, then filled by rdma-core; every field is plain data.
        let mut d = attr::device_attr(&unsafe { a.assume_init() });
        // rdma-core keeps the largest message per port; the soft device's attribute is
        // port 1's.
        d.max_msg_sz = u64::from(self.raw_port(1)?.max_msg_sz);
        Ok(d)
    }

    /// Port `port`'s attributes (`ibv_query_port`).
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        self.inner.query_port(port)
    }

    fn raw_port(&self, port: u8) -> Result<softrdma_abi::ibv_port_attr> {
        self.inner.raw_port(port)
    }

    /// Port `port`'s GID table: each entry that is set, with its index and its type where
    /// the library can tell it (`_ibv_query_gid_ex`; else [`GidType::Unknown`]).
    pub fn gids(&self, port: u8) -> Result<Vec<(u32, Ipv6Addr, GidType)>> {
        self.inner.gids(port)
    }
}

impl Ctx {
    /// Port `port`'s attributes (`ibv_query_port`).
    pub(super) fn query_port(&self, port: u8) -> Result<PortAttr> {
        attr::port_attr(&self.raw_port(port)?)
            .ok_or_else(|| Error::kernel_rc("ibv_query_port", &self.name, libc::EPROTO))
    }

    pub(super) fn raw_port(&self, port: u8) -> Result<softrdma_abi::ibv_port_attr> {
        let mut a = softrdma_abi::ibv_port_attr::default();
        // SAFETY: a live context and a struct at least the size of the one the exported
        // `ibv_query_port` writes (rdma-core's compat struct, which lacks the last field).
        let rc = unsafe { (self.lib.query_port)(self.ctx.as_ptr(), port, &mut a) };
        if rc != 0 {
            return Err(Error::kernel_rc("ibv_query_port", &self.name, rc));
        }
        Ok(a)
    }

    /// Port `port`'s GID table: each entry that is set, with its index and its type where
    /// the library can tell it (`_ibv_query_gid_ex`; else [`GidType::Unknown`]).
    pub(super) fn gids(&self, port: u8) -> Result<Vec<(u32, Ipv6Addr, GidType)>> {
        let len = self.query_port(port)?.gid_tbl_len;
        let mut out = Vec::new();
        for i in 0..len {
            let Some((gid, ty)) = self.gid(port, i) else {
                continue;
            };
            if !gid.is_unspecified() {
                out.push((i, gid, ty));
            }
        }
        Ok(out)
    }

    /// GID `index` of `port`, or `None` where it is not set.
    fn gid(&self, port: u8, index: u32) -> Option<(Ipv6Addr, GidType)> {
        if let Some(ex) = self.lib.query_gid_ex {
            let mut e = ibv_gid_entry::default();
            // SAFETY: a live context and an entry of the size passed.
            let rc = unsafe {
                ex(
                    self.ctx.as_ptr(),
                    u32::from(port),
                    index,
                    &mut e,
                    0,
                    std::mem::size_of::<ibv_gid_entry>(),
                )
            };
            return (rc == 0).then(|| (Ipv6Addr::from(e.gid.raw), GidType::from_raw(e.gid_type)));
        }
        let mut g = softrdma_abi::ibv_gid::default();
        // SAFETY: a live context and one GID to write.
        let rc = unsafe { (self.lib.query_gid)(self.ctx.as_ptr(), port, index as i32, &mut g) };
        (rc == 0).then(|| (Ipv6Addr::from(g.raw), GidType::Unknown))
    }

    /// The index of port 1's RoCE v2 GID of `ip` (the table read once, when first needed).
    pub(super) fn sgid_index(&self, ip: std::net::IpAddr) -> Option<usize> {
        let g = convert::gid_of_ip(ip);
        self.roce_gids
            .get_or_init(|| {
                self.gids(1)
                    .map(|v| {
                        v.into_iter()
                            .filter(|e| e.2 == GidType::RoceV2)
                            .map(|(i, g, _)| (i, g))
                            .collect()
                    })
                    .unwrap_or_default()
            })
            .iter()
            .find(|(_, x)| *x == g)
            .map(|(i, _)| *i as usize)
    }

    /// Port 1's active MTU, the default path MTU of a QP (read once; 1024 where the port
    /// cannot be read).
    pub(super) fn active_mtu(&self) -> softrdma_proto::Mtu {
        *self.mtu.get_or_init(|| {
            self.query_port(1)
                .map_or(softrdma_proto::Mtu::M1024, |p| p.active_mtu)
        })
    }
}
