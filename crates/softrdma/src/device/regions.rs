//! The region table the device checks every access against, and the regions in it.
//!
//! Region memory is treated like memory a NIC reaches by DMA: a peer's WRITE, READ or
//! atomic, a send's gather and the application may all touch the same bytes at once, and
//! the device makes no promise about what such a race leaves there (IBTA leaves it
//! undefined too). So no Rust reference ever points into a region: every access is a copy
//! through a raw pointer (or an `AtomicU64` for atomics), and every pointer is the region's
//! base pointer (the owned buffer's, or the one `register_raw` was given) offset with
//! `add`, never an integer cast back, so that it keeps the provenance of the allocation.

use crate::error::{Error, Result};
use softrdma_proto::{Access, AccessFlags, AtomicOp, MemError, Memory, Pd, RegionBounds};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where a region's bytes live.
enum Storage {
    /// A buffer the region owns (freed when the last reference goes).
    Owned(*mut [u8]),
    /// Memory the application owns (`register_raw`).
    Raw,
    /// A sealed memfd the region owns, which same-host peers it is granted to map (see
    /// [`super::place`]); unmapped when the last reference goes.
    Shared(crate::datapath::shared_mem::SharedMem),
}

pub(crate) struct MrInner {
    pub key: u32,
    pub pd: Pd,
    /// `base`'s address: what peers and SGEs name.
    pub addr: u64,
    pub len: u64,
    pub access: AccessFlags,
    /// The first byte, with the provenance of the memory it points into.
    base: *mut u8,
    storage: Storage,
}

// SAFETY: the region's memory is only reached through raw-pointer copies and atomics that
// the table bounds-checks; ownership of an owned buffer is with the `MrInner`, which frees it
// exactly once on drop.
unsafe impl Send for MrInner {}
// SAFETY: as above; shared access is copies of plain bytes, which cannot break invariants.
unsafe impl Sync for MrInner {}

impl Drop for MrInner {
    fn drop(&mut self) {
        if let Storage::Owned(ptr) = self.storage {
            // SAFETY: `ptr` came from `Box::into_raw` in `MrTable::register_owned` and is
            // dropped only here, once.
            drop(unsafe { Box::from_raw(ptr) });
        }
    }
}

impl MrInner {
    /// The address range `[addr, addr + len)` as a pointer, if inside the region.
    pub(crate) fn range(&self, addr: u64, len: u64) -> Option<*mut u8> {
        let off = addr.checked_sub(self.addr)?;
        (off.checked_add(len)? <= self.len).then(|| self.at(off))
    }

    /// The pointer `off` bytes into the region; `off` must be at most its length.
    fn at(&self, off: u64) -> *mut u8 {
        debug_assert!(off <= self.len);
        // SAFETY: `off <= len`, so the result is inside the region or one past its end,
        // which is within (or one past) the allocation `base` points into.
        unsafe { self.base.add(off as usize) }
    }

    /// Where the region's first byte lies in this process's address space (what a peer
    /// that was granted the region names for cross-memory copies, see [`super::place`]).
    pub(crate) fn vaddr(&self) -> u64 {
        self.base as u64
    }

    /// Whether the region owns its buffer, which a reference to it therefore keeps alive:
    /// only such a region lends its bytes to a send (see [`MrTable::lendable`]).
    fn owns_buffer(&self) -> bool {
        matches!(self.storage, Storage::Owned(_) | Storage::Shared(_))
    }

    /// The memfd of a region in shareable memory, which a peer granted it maps.
    pub(crate) fn shared_fd(&self) -> Option<std::os::fd::RawFd> {
        match &self.storage {
            Storage::Shared(m) => Some(m.fd()),
            _ => None,
        }
    }

    /// The lent payload `addr..addr + len` of this owned region, as a pointer valid while
    /// `self` lives; `None` if the range is not inside it or the region does not own its
    /// buffer.
    pub fn lent_ptr(&self, addr: u64, len: u64) -> Option<*const u8> {
        if !self.owns_buffer() {
            return None;
        }
        self.range(addr, len).map(|p| p as *const u8)
    }
}

impl super::place::Grantable for MrInner {
    fn iova(&self) -> u64 {
        self.addr
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn vaddr(&self) -> u64 {
        MrInner::vaddr(self)
    }
}

impl crate::datapath::batch::LentRegion for MrInner {
    fn key(&self) -> u32 {
        self.key
    }
    fn lent_ptr(&self, addr: u64, len: u64) -> Option<*const u8> {
        MrInner::lent_ptr(self, addr, len)
    }
}

impl crate::datapath::batch::Lender for MrTable {
    fn lend_region(&self, key: u32) -> Option<Arc<dyn crate::datapath::batch::LentRegion>> {
        self.lendable(key)
            .map(|m| m as Arc<dyn crate::datapath::batch::LentRegion>)
    }
}

/// The maker of a region over the application's `len` bytes at `addr`, named at `iova`,
/// once they are checked (not NULL, not empty, the IOVA range without overflow).
fn raw_region(
    verb: &'static str,
    pd: Pd,
    addr: *mut u8,
    len: usize,
    iova: u64,
    access: AccessFlags,
) -> Result<impl FnOnce(u32) -> MrInner> {
    if addr.is_null() {
        return Err(Error::NullAddress { verb });
    }
    Error::check_range(verb, "length", len as u64, 1u64, MAX_REGION)?;
    Error::check_range(verb, "iova", iova, 0u64, u64::MAX - len as u64)?;
    Ok(move |key| MrInner {
        key,
        pd,
        addr: iova,
        len: len as u64,
        access,
        base: addr,
        storage: Storage::Raw,
    })
}

/// What `softrdma res show` lists of a region (see [`MrTable::list`]).
pub(crate) struct MrRecord {
    pub key: u32,
    pub pd: Pd,
    pub addr: u64,
    pub len: u64,
    pub access: AccessFlags,
}

/// The longest region (a Rust allocation's limit).
const MAX_REGION: u64 = isize::MAX as u64;

/// The device's region table: key to region.
pub(crate) struct MrTable {
    /// Key to region (see [`super::handoff::Registry`], whose loom models check that a
    /// deregistration waits for the accesses in flight, and that a lent buffer outlives it).
    regions: super::handoff::Registry<MrInner>,
    /// Whether owned regions lend their bytes to sends (zero-copy sends).
    lends: bool,
    /// Moves on with every registration and deregistration (`softrdma res show` looks).
    generation: std::sync::atomic::AtomicU64,
    /// The grants of regions to same-host peers, revoked before a region goes or changes.
    pub(crate) granted: Arc<super::place::Granted>,
}

impl MrTable {
    /// An empty table; `lends`: see [`MrTable::lendable`].
    pub fn new(lends: bool) -> Self {
        Self {
            regions: super::handoff::Registry::new(),
            lends,
            generation: std::sync::atomic::AtomicU64::new(0),
            granted: Arc::default(),
        }
    }

    /// Region `key`, if registered, as a reference that outlives its deregistration.
    pub(crate) fn get(&self, key: u32) -> Option<Arc<MrInner>> {
        self.regions.lend(key, |_| true)
    }

    /// Runs `f` on the address and length of `len` bytes at `addr` of region `key`, after
    /// the checks a send's gather makes (PD, key, range); `None` if they fail. The region
    /// stays registered while `f` runs.
    pub(crate) fn with_local<T>(
        &self,
        pd: Pd,
        key: u32,
        addr: u64,
        len: u64,
        f: impl FnOnce(*const u8, usize) -> T,
    ) -> Option<T> {
        self.with_range(pd, key, addr, len, Access::LocalRead, |_, p| {
            f(p as *const u8, len as usize)
        })
        .ok()
    }

    /// Every region registered now.
    pub(crate) fn list(&self) -> Vec<MrRecord> {
        // Copies, not references: a reference held here would make a concurrent
        // `take_owned` fail to get its buffer back.
        self.regions.collect(|m| MrRecord {
            key: m.key,
            pd: m.pd,
            addr: m.addr,
            len: m.len,
            access: m.access,
        })
    }

    /// How many registrations and deregistrations there have been.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn insert(&self, make: impl FnOnce(u32) -> MrInner) -> Arc<MrInner> {
        // Keys are not guessable: random, never 0, never reused while registered.
        let pick = || loop {
            let k: u32 = rand::random();
            if k != 0 {
                return k;
            }
        };
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.regions.insert(pick, make)
    }

    /// Registers `len` zeroed bytes of memory the region owns, in shareable memory (a
    /// sealed memfd) so that same-host peers granted it place WRITEs with a plain copy;
    /// on a heap buffer where that memory cannot be had.
    pub fn register_zeroed(&self, pd: Pd, len: usize, access: AccessFlags) -> Result<Arc<MrInner>> {
        Error::check_range("ibv_reg_mr", "length", len as u64, 1u64, MAX_REGION)?;
        let Ok(mem) = crate::datapath::shared_mem::SharedMem::create(len) else {
            return self.register_owned(pd, vec![0; len], access);
        };
        let base = mem.ptr();
        Ok(self.insert(|key| MrInner {
            key,
            pd,
            addr: base as u64,
            len: mem.len() as u64,
            access,
            base,
            storage: Storage::Shared(mem),
        }))
    }

    pub fn register_owned(
        &self,
        pd: Pd,
        buf: Vec<u8>,
        access: AccessFlags,
    ) -> Result<Arc<MrInner>> {
        Error::check_range("ibv_reg_mr", "length", buf.len() as u64, 1u64, MAX_REGION)?;
        let ptr = Box::into_raw(buf.into_boxed_slice());
        let base = ptr as *mut u8;
        let (addr, len) = (base as u64, ptr.len() as u64);
        Ok(self.insert(|key| MrInner {
            key,
            pd,
            addr,
            len,
            access,
            base,
            storage: Storage::Owned(ptr),
        }))
    }

    /// # Safety
    /// `addr..addr + len` must stay valid for reads and writes until the region is dropped.
    pub unsafe fn register_raw(
        &self,
        pd: Pd,
        addr: *mut u8,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<Arc<MrInner>> {
        let make = raw_region("ibv_reg_mr", pd, addr, len, iova, access)?;
        Ok(self.insert(make))
    }

    /// Registers `len` bytes at `addr` again under `key` (`ibv_rereg_mr`): in `pd`, with
    /// `access`, named by peers and SGEs at `iova`. The key stays, so WRs and peers that
    /// hold it reach the new registration; an owned buffer of the old one is freed once
    /// the accesses in flight on it are over.
    ///
    /// # Safety
    /// As [`MrTable::register_raw`].
    pub unsafe fn reregister_raw(
        &self,
        key: u32,
        pd: Pd,
        addr: *mut u8,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<Arc<MrInner>> {
        let verb = "ibv_rereg_mr";
        let make = raw_region(verb, pd, addr, len, iova, access)?;
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let r = self.regions.replace(key, make);
        // A peer's grant named the old translation.
        self.granted.revoke_key(key);
        r.ok_or(Error::OutOfRange {
            verb,
            attr: "mr",
            requested: u64::from(key),
            min: 0,
            max: 0,
        })
    }

    /// Removes an owned region and gives its buffer back, if nothing else holds it.
    pub fn take_owned(&self, key: u32) -> Option<Vec<u8>> {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mr = self.regions.remove(key)?;
        self.granted.revoke_key(key);
        let mut inner = Arc::try_unwrap(mr).ok()?;
        match std::mem::replace(&mut inner.storage, Storage::Raw) {
            // SAFETY: the pointer came from `Box::into_raw` and, the storage now being `Raw`,
            // `Drop` will not free it again.
            Storage::Owned(ptr) => Some(unsafe { Box::from_raw(ptr) }.into_vec()),
            Storage::Raw => None,
            Storage::Shared(m) => {
                let mut v = vec![0; m.len()];
                // SAFETY: the whole mapping, valid for reads while `m` lives; a copy of
                // plain bytes.
                unsafe { std::ptr::copy_nonoverlapping(m.ptr(), v.as_mut_ptr(), m.len()) };
                Some(v)
            }
        }
    }

    /// Removes region `key`; returns once no access to it is in flight (a lent payload's
    /// send still holds an owned buffer, see [`MrTable::lendable`]).
    pub fn deregister(&self, key: u32) {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.regions.remove(key);
        // Before the caller may free the memory: no peer writes it from now on.
        self.granted.revoke_key(key);
    }

    /// Region `key`, if it lends its bytes to sends: a region over an owned buffer, which the
    /// returned reference keeps alive until the send is done with it even if it is
    /// deregistered meanwhile (as a NIC's DMA may finish after a deregistration starts). A
    /// raw region does not: its memory is the application's to free once it is deregistered.
    pub fn lendable(&self, key: u32) -> Option<Arc<MrInner>> {
        self.regions.lend(key, MrInner::owns_buffer)
    }

    /// Runs `f` on the region `key` and the address that `addr..addr + len` starts at, after
    /// the checks of [`RegionBounds::offset`]. The region stays registered while `f` runs:
    /// the table's read lock is held, which only a deregistration waits for. (Every packet
    /// comes here, so it takes no reference of its own to the region.)
    fn with_range<T>(
        &self,
        pd: Pd,
        key: u32,
        addr: u64,
        len: u64,
        access: Access,
        f: impl FnOnce(&MrInner, *mut u8) -> T,
    ) -> std::result::Result<T, MemError> {
        self.regions
            .with(key, |mr| {
                let off = RegionBounds {
                    key,
                    pd: mr.pd,
                    addr: mr.addr,
                    len: mr.len,
                    access: mr.access,
                }
                .offset(pd, addr, len, access)?;
                Ok(f(mr, mr.at(off)))
            })
            .unwrap_or(Err(MemError::InvalidKey(key)))
    }
}

impl Memory for MrTable {
    fn lends(&self) -> bool {
        self.lends
    }

    /// Lends ranges of regions over owned buffers (see [`MrTable::lendable`]); the device
    /// takes the bytes from the region when it sends, and holds the region until then.
    fn lend(
        &self,
        pd: Pd,
        key: u32,
        addr: u64,
        len: u64,
        access: Access,
        visit: &mut dyn FnMut(&[u8]),
    ) -> std::result::Result<bool, MemError> {
        if !self.lends {
            return Ok(false);
        }
        self.with_range(pd, key, addr, len, access, |mr, p| {
            if !mr.owns_buffer() {
                return false;
            }
            // The bytes are shown a piece at a time from a copy, never through a reference
            // into the region, which a peer's WRITE may be changing (see the module docs).
            // Bytes that change meanwhile make an ICRC that the packet the kernel sends
            // from the region fails, and the peer drops it, as it would a NIC's: the
            // application must leave a send buffer alone until its WR completes.
            let mut piece = [0u8; 1024];
            let mut done = 0;
            while done < len as usize {
                let n = piece.len().min(len as usize - done);
                // SAFETY: `p + done .. p + done + n` lies inside the region's owned buffer,
                // which stays registered (the table's read lock is held) while this runs;
                // `piece` is a distinct Rust buffer.
                unsafe { std::ptr::copy_nonoverlapping(p.add(done), piece.as_mut_ptr(), n) };
                visit(&piece[..n]);
                done += n;
            }
            true
        })
    }

    fn check(
        &self,
        pd: Pd,
        key: u32,
        addr: u64,
        len: u64,
        access: Access,
    ) -> std::result::Result<(), MemError> {
        self.with_range(pd, key, addr, len, access, |_, _| ())
    }

    fn read(
        &self,
        pd: Pd,
        key: u32,
        addr: u64,
        buf: &mut [u8],
        access: Access,
    ) -> std::result::Result<(), MemError> {
        self.with_range(pd, key, addr, buf.len() as u64, access, |_, p| {
            // SAFETY: `p..p + buf.len()` lies inside a region that stays registered while
            // this runs, and `buf` is a distinct Rust buffer.
            unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), buf.len()) }
        })
    }

    fn write(
        &self,
        pd: Pd,
        key: u32,
        addr: u64,
        data: &[u8],
        access: Access,
    ) -> std::result::Result<(), MemError> {
        self.with_range(pd, key, addr, data.len() as u64, access, |_, p| {
            // SAFETY: as in `read`; the destination is inside the live region.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) }
        })
    }

    fn atomic(
        &self,
        pd: Pd,
        key: u32,
        addr: u64,
        op: AtomicOp,
    ) -> std::result::Result<u64, MemError> {
        if addr % 8 != 0 {
            return Err(MemError::Misaligned(addr));
        }
        self.with_range(pd, key, addr, 8, Access::RemoteAtomic, |_, p| {
            // SAFETY: `p` is 8-byte aligned (checked above: addresses are the real pointers)
            // and the 8 bytes lie in the live region; every atomic of the device goes through
            // `AtomicU64`, so atomics are atomic with respect to each other.
            let a = unsafe { AtomicU64::from_ptr(p as *mut u64) };
            match op {
                AtomicOp::FetchAdd { add } => a.fetch_add(add, Ordering::SeqCst),
                AtomicOp::CompareSwap { compare, swap } => {
                    match a.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                        Ok(v) | Err(v) => v,
                    }
                }
            }
        })
    }
}
