//! The only way the engine touches memory.
//!
//! Every access names a protection domain, a key, an address range and the kind of access;
//! the [`Memory`] implementation checks all of them before it reads or writes a byte. The
//! engine cannot reach memory it was not given: it holds no pointers, only keys.
//!
//! [`SimMemory`] is a complete implementation over owned buffers, used by the simulator and
//! the tests; the soft device provides one over registered user memory.

use crate::types::AccessFlags;
use std::sync::Mutex;

/// A protection domain handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Pd(pub u32);

/// The kind of access, which decides the key (L_Key or R_Key) and the flag required.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// The local HCA reads a gather list (no flag needed).
    LocalRead,
    /// The local HCA writes a scatter list (`LOCAL_WRITE`).
    LocalWrite,
    /// A remote RDMA READ (`REMOTE_READ`).
    RemoteRead,
    /// A remote RDMA WRITE (`REMOTE_WRITE`).
    RemoteWrite,
    /// A remote atomic (`REMOTE_ATOMIC`).
    RemoteAtomic,
}

impl Access {
    /// The flag the MR must carry.
    pub fn required(self) -> AccessFlags {
        match self {
            Access::LocalRead => AccessFlags::empty(),
            Access::LocalWrite => AccessFlags::LOCAL_WRITE,
            Access::RemoteRead => AccessFlags::REMOTE_READ,
            Access::RemoteWrite => AccessFlags::REMOTE_WRITE,
            Access::RemoteAtomic => AccessFlags::REMOTE_ATOMIC,
        }
    }
}

/// Why an access was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum MemError {
    /// No MR has this key.
    #[error("no memory region has key {0:#x}")]
    InvalidKey(u32),
    /// The MR belongs to another protection domain.
    #[error("memory region {0:#x} is in another protection domain")]
    WrongPd(u32),
    /// The range is not inside the MR.
    #[error("range {addr:#x}+{len} is outside memory region {key:#x}")]
    OutOfBounds {
        /// Key.
        key: u32,
        /// Start address.
        addr: u64,
        /// Length.
        len: u64,
    },
    /// The MR lacks the access flag.
    #[error("memory region {key:#x} does not allow {access:?}")]
    AccessDenied {
        /// Key.
        key: u32,
        /// What was attempted.
        access: Access,
    },
    /// An atomic address that is not 8-byte aligned.
    #[error("atomic address {0:#x} is not 8-byte aligned")]
    Misaligned(u64),
}

/// An 8-byte atomic operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    /// Store `swap` if the value equals `compare`.
    CompareSwap {
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
    /// Add `add`, wrapping.
    FetchAdd {
        /// Addend.
        add: u64,
    },
}

impl AtomicOp {
    /// The value after the operation on `old`.
    pub fn apply(self, old: u64) -> u64 {
        match self {
            AtomicOp::CompareSwap { compare, swap } if old == compare => swap,
            AtomicOp::CompareSwap { .. } => old,
            AtomicOp::FetchAdd { add } => old.wrapping_add(add),
        }
    }
}

/// A registered region as the checks of every [`Memory`] need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionBounds {
    /// Its key.
    pub key: u32,
    /// Its protection domain.
    pub pd: Pd,
    /// Its first virtual address.
    pub addr: u64,
    /// Its length in bytes.
    pub len: u64,
    /// What it grants.
    pub access: AccessFlags,
}

impl RegionBounds {
    /// The checks of an access to this region, in one place for every [`Memory`]: the PD,
    /// the access right, then `addr..addr + len` inside the region (without overflow).
    /// Returns the offset of `addr` in the region. (The key was matched by the caller.)
    pub fn offset(&self, pd: Pd, addr: u64, len: u64, access: Access) -> Result<u64, MemError> {
        let key = self.key;
        if self.pd != pd {
            return Err(MemError::WrongPd(key));
        }
        if !self.access.contains(access.required()) {
            return Err(MemError::AccessDenied { key, access });
        }
        let oob = MemError::OutOfBounds { key, addr, len };
        let off = addr.checked_sub(self.addr).ok_or(oob)?;
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(off),
            _ => Err(oob),
        }
    }
}

/// Registered memory as the engine sees it.
///
/// Implementations must check the key, PD, bounds and access flag on every call, and must
/// make [`Memory::atomic`] atomic with respect to every other `atomic` call on the same device.
/// Atomics use host byte order on the wire's big-endian value: the engine passes and receives
/// plain `u64`s, and memory holds them in host order, as ibverbs does.
pub trait Memory: Send + Sync {
    /// Checks an access without performing it.
    fn check(&self, pd: Pd, key: u32, addr: u64, len: u64, access: Access) -> Result<(), MemError>;
    /// Reads `buf.len()` bytes at `addr`.
    fn read(
        &self,
        pd: Pd,
        key: u32,
        addr: u64,
        buf: &mut [u8],
        access: Access,
    ) -> Result<(), MemError>;
    /// Writes `data` at `addr`.
    fn write(
        &self,
        pd: Pd,
        key: u32,
        addr: u64,
        data: &[u8],
        access: Access,
    ) -> Result<(), MemError>;
    /// Performs `op` on the 8-byte value at `addr` (remote atomic access) and returns the
    /// original value.
    fn atomic(&self, pd: Pd, key: u32, addr: u64, op: AtomicOp) -> Result<u64, MemError>;
    /// Whether [`Memory::lend`] may lend at all: when not, the engine copies every payload
    /// without first checksumming headers for a loan that will not come. The default: no.
    fn lends(&self) -> bool {
        false
    }
    /// Shows the `len` bytes at `addr` to `visit` where they lie, so that a packet can carry
    /// them without a copy (a zero-copy send). `Ok(true)`: `visit` saw them, in order and in
    /// one or more pieces, and the sender will take them from the region when it sends (the
    /// engine's `Transmit` names them in its `lent`). `Ok(false)`: this memory does not lend
    /// this range, `visit` was not called, and the engine copies it with [`Memory::read`].
    /// The checks are those of `read`. The default lends nothing.
    fn lend(
        &self,
        _pd: Pd,
        _key: u32,
        _addr: u64,
        _len: u64,
        _access: Access,
        _visit: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, MemError> {
        Ok(false)
    }
}

#[derive(Debug)]
struct Region {
    key: u32,
    pd: Pd,
    addr: u64,
    access: AccessFlags,
    data: Vec<u8>,
}

/// Memory regions over owned buffers, for the simulator and tests. One lock makes atomics
/// atomic with respect to each other and to reads and writes.
#[derive(Debug, Default)]
pub struct SimMemory {
    regions: Mutex<Vec<Region>>,
    key_salt: u32,
    /// Whether [`Memory::lend`] lends (off by default: a test that looks at the engine's
    /// packets then finds every payload in the buffer).
    lends: std::sync::atomic::AtomicBool,
}

impl SimMemory {
    /// An empty table whose keys are salted with `salt`, so that two tables hand out
    /// different keys, as two devices would.
    pub fn new(salt: u32) -> Self {
        Self {
            regions: Mutex::new(Vec::new()),
            key_salt: salt & 0xFF,
            lends: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Makes [`Memory::lend`] lend every range it checks (as the soft device's owned regions
    /// do), so that the engine sends payloads of [`LEND_MIN_BYTES`](crate::LEND_MIN_BYTES)
    /// and more as [`Lent`](crate::Lent) ranges; take their bytes with
    /// [`SimMemory::lent_bytes`].
    pub fn set_lending(&self, on: bool) {
        self.lends.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// The bytes of a lent payload, as the sender takes them when it sends: no PD or access
    /// check (the engine made them when it lent the range), only that the range is still in
    /// a region. `None` if it is not (the region went away in between).
    pub fn lent_bytes(&self, lent: &crate::Lent) -> Option<Vec<u8>> {
        let r = self.lock();
        let reg = r.iter().find(|r| r.key == lent.key)?;
        let off = usize::try_from(lent.addr.checked_sub(reg.addr)?).ok()?;
        reg.data
            .get(off..off + lent.len as usize)
            .map(<[u8]>::to_vec)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Region>> {
        // A panic while holding the lock cannot leave a region half-updated in a way that
        // matters to a test, so a poisoned lock is still usable.
        self.regions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers `len` zeroed bytes at virtual address `addr` and returns the key (used as
    /// both L_Key and R_Key).
    pub fn register(&self, pd: Pd, addr: u64, len: usize, access: AccessFlags) -> u32 {
        let mut r = self.lock();
        let key = ((r.len() as u32 + 1) << 8) | self.key_salt;
        r.push(Region {
            key,
            pd,
            addr,
            access,
            data: vec![0; len],
        });
        key
    }

    /// Registers `len` zeroed bytes at `addr` under a key the caller chooses (to replay a
    /// capture whose keys are fixed). Returns false if the key is taken.
    pub fn register_with_key(
        &self,
        key: u32,
        pd: Pd,
        addr: u64,
        len: usize,
        access: AccessFlags,
    ) -> bool {
        let mut r = self.lock();
        if r.iter().any(|x| x.key == key) {
            return false;
        }
        r.push(Region {
            key,
            pd,
            addr,
            access,
            data: vec![0; len],
        });
        true
    }

    /// A copy of a region's bytes.
    pub fn snapshot(&self, key: u32) -> Option<Vec<u8>> {
        self.lock()
            .iter()
            .find(|r| r.key == key)
            .map(|r| r.data.clone())
    }

    /// Overwrites part of a region, bypassing access checks (test setup).
    pub fn fill(&self, key: u32, offset: usize, data: &[u8]) {
        let mut r = self.lock();
        if let Some(reg) = r.iter_mut().find(|r| r.key == key) {
            reg.data[offset..offset + data.len()].copy_from_slice(data);
        }
    }

    fn with<T>(
        &self,
        pd: Pd,
        key: u32,
        addr: u64,
        len: u64,
        access: Access,
        f: impl FnOnce(&mut [u8]) -> T,
    ) -> Result<T, MemError> {
        let mut regions = self.lock();
        let r = regions
            .iter_mut()
            .find(|r| r.key == key)
            .ok_or(MemError::InvalidKey(key))?;
        let start = RegionBounds {
            key,
            pd: r.pd,
            addr: r.addr,
            len: r.data.len() as u64,
            access: r.access,
        }
        .offset(pd, addr, len, access)?;
        Ok(f(&mut r.data[start as usize..(start + len) as usize]))
    }
}

impl Memory for SimMemory {
    fn lends(&self) -> bool {
        self.lends.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn lend(
        &self,
        pd: Pd,
        key: u32,
        addr: u64,
        len: u64,
        access: Access,
        visit: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, MemError> {
        if !self.lends.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(false);
        }
        self.with(pd, key, addr, len, access, |m| visit(m))?;
        Ok(true)
    }

    fn check(&self, pd: Pd, key: u32, addr: u64, len: u64, access: Access) -> Result<(), MemError> {
        self.with(pd, key, addr, len, access, |_| ())
    }

    fn read(
        &self,
        pd: Pd,
        key: u32,
        addr: u64,
        buf: &mut [u8],
        access: Access,
    ) -> Result<(), MemError> {
        self.with(pd, key, addr, buf.len() as u64, access, |m| {
            buf.copy_from_slice(m)
        })
    }

    fn write(
        &self,
        pd: Pd,
        key: u32,
        addr: u64,
        data: &[u8],
        access: Access,
    ) -> Result<(), MemError> {
        self.with(pd, key, addr, data.len() as u64, access, |m| {
            m.copy_from_slice(data)
        })
    }

    fn atomic(&self, pd: Pd, key: u32, addr: u64, op: AtomicOp) -> Result<u64, MemError> {
        if addr % 8 != 0 {
            return Err(MemError::Misaligned(addr));
        }
        self.with(pd, key, addr, 8, Access::RemoteAtomic, |m| {
            let mut b = [0u8; 8];
            b.copy_from_slice(m);
            let old = u64::from_ne_bytes(b);
            m.copy_from_slice(&op.apply(old).to_ne_bytes());
            old
        })
    }
}
