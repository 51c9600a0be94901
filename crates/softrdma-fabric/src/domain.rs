//! The fabric and its domains (`fid_fabric`, `fid_domain`): every softrdma device is a
//! domain of the one fabric, `softrdma`. A [`Domain`] owns the device's context and one
//! protection domain; its endpoints open on it and its memory regions ([`Region`]) are
//! good on every one of them, as libfabric's domain-wide registrations are.
//!
//! Threads and locks: a domain is shared (`Arc`) by its endpoints and regions and holds
//! no lock of its own; softrdma's context and protection domain take theirs. The open
//! domains, by address, are behind `FabricDomains`, held while one opens.

use crate::error::Result;
use softrdma::sync::{Lock, Rank};
use softrdma::{AccessFlags, Context, MemoryRegion, ProtectionDomain};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, LazyLock, Weak};

/// What peers may do to a [`Region`]: [`Access::READ`], [`Access::WRITE`],
/// [`Access::ATOMIC`], or any of them together (`|`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access(u8);

impl Access {
    /// Nothing: only the program that registered it uses it.
    pub const NONE: Access = Access(0);
    /// Read it (`FI_REMOTE_READ`).
    pub const READ: Access = Access(1);
    /// Write it (`FI_REMOTE_WRITE`).
    pub const WRITE: Access = Access(2);
    /// Apply atomics to it (an atomic is a remote read and write: `FI_REMOTE_READ |
    /// FI_REMOTE_WRITE` on a domain with `FI_ATOMIC`).
    pub const ATOMIC: Access = Access(4);
    /// Read and write it.
    pub const READ_WRITE: Access = Access(3);

    /// Whether every access of `other` is in this one.
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    fn flags(self) -> AccessFlags {
        let mut f = AccessFlags::LOCAL_WRITE;
        if self.contains(Access::READ) {
            f |= AccessFlags::REMOTE_READ;
        }
        if self.contains(Access::WRITE) {
            f |= AccessFlags::REMOTE_WRITE;
        }
        if self.contains(Access::ATOMIC) {
            f |= AccessFlags::REMOTE_ATOMIC;
        }
        f
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// Memory that peers of the domain's endpoints read, write or apply atomics to
/// (`fid_mr`), by [`Region::key`] and addresses from [`Region::addr`] on.
#[derive(Debug)]
pub struct Region(MemoryRegion);

impl Region {
    /// The key peers name it by (`fi_mr_key`).
    pub fn key(&self) -> u64 {
        u64::from(self.0.rkey())
    }

    /// The address of its first byte, as peers name it (`FI_MR_VIRT_ADDR`).
    pub fn addr(&self) -> u64 {
        self.0.addr()
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of its bytes now.
    pub fn to_vec(&self) -> Vec<u8> {
        self.0.to_vec()
    }

    /// Deregisters it (`fi_close`) and gives its buffer back.
    pub fn into_vec(self) -> Option<Vec<u8>> {
        self.0.into_vec()
    }
}

/// A device of the fabric, as [`Fabric::domains`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainInfo {
    /// Its name (`softrdma0`), the domain's name.
    pub name: String,
    /// Its address: its endpoints listen there.
    pub ip: IpAddr,
    /// Its active MTU in bytes: the largest datagram of a DGRAM endpoint on it.
    pub mtu: usize,
}

/// The fabric (`fid_fabric`): every softrdma device, by name or address.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fabric;

impl Fabric {
    /// The fabric's name.
    pub const NAME: &'static str = "softrdma";

    /// The configured devices (`fi_getinfo`'s domains).
    pub fn domains(&self) -> Vec<DomainInfo> {
        softrdma::config::devices()
            .unwrap_or_default()
            .into_iter()
            .map(|d| DomainInfo {
                name: d.name,
                ip: d.addr,
                mtu: d.active_mtu.bytes(),
            })
            .collect()
    }

    /// Opens the domain named `name` (`fi_domain`).
    pub fn domain(&self, name: &str) -> Result<Arc<Domain>> {
        let d = self.domains().into_iter().find(|d| d.name == name).ok_or(
            crate::FabricError::Invalid {
                what: "fi_domain",
                why: format!("no softrdma device is named {name:?}"),
            },
        )?;
        Domain::open(d.ip)
    }
}

/// A domain (`fid_domain`): one softrdma device, open.
pub struct Domain {
    ctx: Context,
    pd: ProtectionDomain,
    ip: IpAddr,
}

impl std::fmt::Debug for Domain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Domain").field("ip", &self.ip).finish()
    }
}

impl Domain {
    /// Opens the device on `ip`: the configured one with that address (its name, and the
    /// path MTU its interface allows), else one made for it, with the MTU of the
    /// interface that has the address (a 4096-byte MTU on a 1500-byte link would send
    /// datagrams the link drops). A device open already in this process is shared:
    /// a passive endpoint's connection requests are accepted on its context.
    pub fn open(ip: IpAddr) -> Result<Arc<Domain>> {
        static OPEN: LazyLock<Lock<HashMap<IpAddr, Weak<Domain>>>> =
            LazyLock::new(|| Lock::new(Rank::FabricDomains, HashMap::new()));
        let mut open = OPEN.lock();
        if let Some(d) = open.get(&ip).and_then(Weak::upgrade) {
            return Ok(d);
        }
        open.retain(|_, d| d.strong_count() > 0);
        let d = Self::open_new(ip)?;
        open.insert(ip, Arc::downgrade(&d));
        Ok(d)
    }

    fn open_new(ip: IpAddr) -> Result<Arc<Domain>> {
        use softrdma::config::{Binding, DeviceSpec};
        let configured = softrdma::config::devices()
            .ok()
            .and_then(|ds| ds.into_iter().find(|d| d.addr == ip));
        let d = match configured {
            Some(d) => d,
            None => softrdma::config::resolve(&DeviceSpec {
                name: "fabric".into(),
                binding: Binding::Addr(ip),
            })?,
        };
        let ctx = Context::open_addr(&d.name, d.addr, d.active_mtu)?;
        let pd = ctx.alloc_pd();
        Ok(Arc::new(Domain { ctx, pd, ip }))
    }

    /// The device's address.
    pub fn ip(&self) -> IpAddr {
        self.ip
    }

    /// Registers `buf` for peers of the domain's endpoints to reach with `access`
    /// (`fi_mr_reg`).
    pub fn register(&self, buf: Vec<u8>, access: Access) -> Result<Region> {
        Ok(Region(self.pd.register(buf, access.flags())?))
    }

    /// Registers the caller's memory for peers to reach with `access` (`fi_mr_reg` on
    /// the C face).
    ///
    /// # Safety
    /// As [`crate::Buf::raw`], until the region is dropped.
    pub unsafe fn register_raw(&self, ptr: *mut u8, len: usize, access: Access) -> Result<Region> {
        // SAFETY: forwarded from this function's contract.
        Ok(Region(unsafe {
            self.pd.register_raw(ptr, len, access.flags())?
        }))
    }

    pub(crate) fn ctx(&self) -> &Context {
        &self.ctx
    }

    pub(crate) fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }
}

/// The connection parameters every endpoint's RC connections use: READs and atomics
/// allowed in flight (`RD_ATOMIC` each way), and an RNR NAK retried for ever (a receiver
/// out of receives is slow, not gone).
pub(crate) fn conn_param(private_data: Vec<u8>) -> softrdma::cm::ConnParam {
    /// READs and atomics in flight each side allows: a window of rendezvous messages.
    const RD_ATOMIC: u8 = 16;
    softrdma::cm::ConnParam {
        private_data,
        responder_resources: RD_ATOMIC,
        initiator_depth: RD_ATOMIC,
        retry_count: 7,
        rnr_retry_count: 7,
        ..Default::default()
    }
}
