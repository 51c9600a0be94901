//! Memory shared between the processes of one user that share a device: a sealed memfd,
//! mapped by its maker and by the peer it is passed to (over a connection that checked the
//! peer's uid, see `device::local`). The same-host ring ([`super::shm`]) lives in one;
//! so does a region's memory that a peer may place WRITEs into ([`SharedMem`]), and the
//! table through which such a grant is taken back ([`GrantTable`]).
//!
//! Trust: a peer's memfd is mapped only if it has exactly the size its use needs and is
//! sealed against shrinking (a shrink would turn this process's accesses into SIGBUS).
//! What the peer writes into the mapping afterwards is the user of the mapping's to check.
//!
//! Threads: a [`Map`] is plain shared memory, accessed through atomics or through copies
//! whose races its users account for; nothing here takes a lock.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

/// What was wrong with shared memory a peer offered, or with a ring's state.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ShmError {
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The memfd is not the layout's size.
    #[error("the shared memory is {0} bytes, not the {1} its layout needs")]
    Size(u64, usize),
    /// The memfd may still shrink.
    #[error("the shared memory is not sealed against shrinking (seals {0:#x})")]
    Unsealed(i32),
    /// The producer published an index the consumer cannot have been given.
    #[error("the producer published entry {head} with the consumer at {tail}")]
    Index {
        /// The published head.
        head: u64,
        /// Where the consumer is.
        tail: u64,
    },
}

pub(super) fn last_os(what: &'static str) -> ShmError {
    ShmError::Io {
        what,
        source: std::io::Error::last_os_error(),
    }
}

/// A shared mapping of a memfd (a ring's, or a placement table's).
pub(super) struct Map {
    pub(super) ptr: *mut u8,
    pub(super) len: usize,
}

// SAFETY: the mapping is plain shared memory; every access to it goes through atomics or
// through raw copies whose races the module docs account for.
unsafe impl Send for Map {}
// SAFETY: as for Send.
unsafe impl Sync for Map {}

impl Map {
    /// Maps the first `len` bytes of `fd` (which the caller checked is that long and
    /// cannot shrink), shared.
    pub(super) fn new(fd: &OwnedFd, len: usize) -> Result<Self, ShmError> {
        // SAFETY: a fresh shared mapping of a descriptor we hold; the kernel picks where.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(last_os("mmap of shared memory"));
        }
        Ok(Self { ptr: p.cast(), len })
    }

    pub(super) fn word64(&self, at: usize) -> &AtomicU64 {
        assert!(
            at % 8 == 0 && at + 8 <= self.len,
            "a word inside the mapping"
        );
        // SAFETY: `at` is 8-byte aligned and inside the mapping (checked), which lives as
        // long as `self`; the word is only ever accessed atomically.
        unsafe { &*self.ptr.add(at).cast::<AtomicU64>() }
    }

    pub(super) fn word32(&self, at: usize) -> &AtomicU32 {
        assert!(
            at % 4 == 0 && at + 4 <= self.len,
            "a word inside the mapping"
        );
        // SAFETY: as for `word64`.
        unsafe { &*self.ptr.add(at).cast::<AtomicU32>() }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; no reference into it outlives
        // `self` (every accessor borrows it).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// A new memfd of `len` bytes, sealed at that size.
pub(super) fn sealed_memfd(name: &std::ffi::CStr, len: usize) -> Result<OwnedFd, ShmError> {
    // SAFETY: a NUL-terminated name, no other pointers.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(last_os("memfd_create"));
    }
    // SAFETY: a new descriptor nothing else owns.
    let memfd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain calls on our descriptor.
    let ok = unsafe {
        libc::ftruncate(fd, len as libc::off_t) == 0
            && libc::fcntl(
                fd,
                libc::F_ADD_SEALS,
                libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
            ) == 0
    };
    if !ok {
        return Err(last_os("sizing and sealing shared memory"));
    }
    Ok(memfd)
}

/// Checks that a memfd a peer passed is `len` bytes and cannot shrink (a shrink would turn
/// this process's accesses into SIGBUS), and maps it.
pub(super) fn map_peers(memfd: &OwnedFd, len: usize) -> Result<Map, ShmError> {
    // SAFETY: an all-zero stat is a valid out-parameter for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes `st`, which lives for the call.
    if unsafe { libc::fstat(memfd.as_raw_fd(), &mut st) } != 0 {
        return Err(last_os("fstat of shared memory"));
    }
    if st.st_size as u64 != len as u64 {
        return Err(ShmError::Size(st.st_size as u64, len));
    }
    // SAFETY: a plain fcntl on a descriptor we hold.
    let seals = unsafe { libc::fcntl(memfd.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
        return Err(ShmError::Unsealed(seals));
    }
    Map::new(memfd, len)
}

/// A region's memory in a sealed memfd, which a same-host peer granted the region maps to
/// place WRITEs with a plain copy (see `device::place`): the region's owner maps it
/// ([`SharedMem::create`]), the peer too ([`SharedMem::open`]).
pub(crate) struct SharedMem {
    map: Map,
    memfd: OwnedFd,
}

impl SharedMem {
    /// `len` zeroed bytes (more than 0).
    pub(crate) fn create(len: usize) -> Result<Self, ShmError> {
        Self::named(c"softrdma-region", len)
    }

    /// `len` zeroed bytes in a memfd called `name` (as `/proc/PID/maps` shows it).
    fn named(name: &std::ffi::CStr, len: usize) -> Result<Self, ShmError> {
        let memfd = sealed_memfd(name, len)?;
        let map = Map::new(&memfd, len)?;
        Ok(Self { map, memfd })
    }

    /// Maps the region memory a peer passed, after checking that it is `len` bytes and
    /// sealed against shrinking.
    pub(crate) fn open(memfd: OwnedFd, len: usize) -> Result<Self, ShmError> {
        let map = map_peers(&memfd, len)?;
        Ok(Self { map, memfd })
    }

    /// The first byte.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.map.ptr
    }

    /// Its length.
    pub(crate) fn len(&self) -> usize {
        self.map.len
    }

    /// The memfd, to pass to a peer.
    pub(crate) fn fd(&self) -> RawFd {
        self.memfd.as_raw_fd()
    }

    /// Copies the `pieces` (address and length, valid for reads) in order to `off` on,
    /// the last byte last (latency tests spin on it): false, and nothing copied, if they
    /// do not fit.
    pub(crate) fn write(&self, off: usize, pieces: &[(*const u8, usize)]) -> bool {
        let len: usize = pieces.iter().map(|p| p.1).sum();
        if pieces.iter().any(|p| p.1 == 0)
            || len == 0
            || off.checked_add(len).is_none_or(|end| end > self.map.len)
        {
            return false;
        }
        let mut at = off;
        for (k, &(p, n)) in pieces.iter().enumerate() {
            let n_now = if k + 1 == pieces.len() { n - 1 } else { n };
            // SAFETY: `at + n <= map.len` (checked above, the pieces summing to `len`), so
            // the destination lies inside the mapping; the source is the caller's, valid
            // for `n` reads. The ranges cannot overlap: one is the peer's shared memory.
            // Races with the peer's own accesses are a NIC's DMA races (see the module
            // docs of `device::regions`).
            unsafe { std::ptr::copy_nonoverlapping(p, self.map.ptr.add(at), n_now) };
            at += n_now;
        }
        let &(p, n) = pieces.last().expect("len > 0");
        fence(Ordering::Release);
        // SAFETY: the last byte of the last piece, to `off + len - 1`, inside the mapping.
        unsafe { std::ptr::write_volatile(self.map.ptr.add(at), p.add(n - 1).read_volatile()) };
        true
    }
}

/// Slots in a placement table: grants one process holds from another at once.
pub(crate) const GRANTS: u32 = 256;
/// A placement table's bytes: per slot, its `word` and its `inuse` count.
const GRANT_BYTES: usize = GRANTS as usize * 16;

/// A placement table: the shared words through which a process that granted a peer a
/// memory range (see `device::place`) takes the grant back. Slot `i` is two words: `word`,
/// the grant's stamp while it holds (0 once revoked), and `inuse`, how many of the peer's
/// writes into that range are under way. The peer enters a slot (`inuse` + 1, then
/// `word` still its stamp), writes, and leaves; the granting process revokes it (`word`
/// to 0, then waits until `inuse` is 0). Both sides use sequentially consistent
/// operations, so a write either saw the revocation and did not start, or the revoker
/// sees it under way and waits for it.
///
/// Trust: the words are the peer's to wreck, and only to its own loss: the table says
/// when the peer may write, and the peer could write that memory anyway (the kernel's
/// ptrace rules are what stop it; see `device::place`). A revoker waits for `inuse` for
/// a bounded time only.
pub(crate) struct GrantTable(SharedMem);

impl GrantTable {
    /// A new table, every slot revoked (the granting side).
    pub(crate) fn create() -> Result<Self, ShmError> {
        SharedMem::named(c"softrdma-grants", GRANT_BYTES).map(Self)
    }

    /// Maps the table a granting peer passed, after checking its size and seals.
    pub(crate) fn open(memfd: OwnedFd) -> Result<Self, ShmError> {
        SharedMem::open(memfd, GRANT_BYTES).map(Self)
    }

    /// The memfd, to pass to the peer.
    pub(crate) fn fd(&self) -> RawFd {
        self.0.fd()
    }

    fn words(&self, slot: u32) -> (&AtomicU64, &AtomicU64) {
        let at = (slot % GRANTS) as usize * 16;
        (self.0.map.word64(at), self.0.map.word64(at + 8))
    }

    /// Grants slot `slot` under `stamp` (not 0).
    pub(crate) fn grant(&self, slot: u32, stamp: u64) {
        debug_assert!(stamp != 0);
        let (word, inuse) = self.words(slot);
        inuse.store(0, Ordering::SeqCst);
        word.store(stamp, Ordering::SeqCst);
    }

    /// Takes slot `slot` back: no write starts in it from now on, and this returns once
    /// none is under way, or once `waited` (given how long it has waited) says to stop
    /// (the peer is dead, or took too long). True if no write was left under way.
    pub(crate) fn revoke(
        &self,
        slot: u32,
        mut waited: impl FnMut(std::time::Duration) -> bool,
    ) -> bool {
        let (word, inuse) = self.words(slot);
        word.store(0, Ordering::SeqCst);
        let start = std::time::Instant::now();
        let mut spins = 0u32;
        while inuse.load(Ordering::SeqCst) != 0 {
            spins += 1;
            if spins % 64 == 0 && waited(start.elapsed()) {
                return false;
            }
            std::thread::yield_now();
        }
        true
    }

    /// The peer's side: starts a write under the grant `stamp` in slot `slot`; false if
    /// the grant was revoked (nothing may be written then). Each true must be followed by
    /// [`GrantTable::leave`].
    pub(crate) fn enter(&self, slot: u32, stamp: u64) -> bool {
        let (word, inuse) = self.words(slot);
        inuse.fetch_add(1, Ordering::SeqCst);
        if word.load(Ordering::SeqCst) == stamp {
            return true;
        }
        inuse.fetch_sub(1, Ordering::SeqCst);
        false
    }

    /// The peer's side: the write that [`GrantTable::enter`] started is over.
    pub(crate) fn leave(&self, slot: u32) {
        self.words(slot).1.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A grant's slot: a write starts only under the live stamp; a revocation stops new
    /// ones at once and waits for the one under way (here given up on after its first
    /// look, so it reports the write still under way); a table a peer passed is mapped
    /// only if it is sealed at its size.
    #[test]
    fn a_revoked_grant_admits_no_write_and_waits_for_the_one_under_way() {
        let t = GrantTable::create().unwrap();
        t.grant(3, 7);
        let peer = GrantTable::open(
            // SAFETY: dup of a live descriptor, owned by the new OwnedFd.
            unsafe { OwnedFd::from_raw_fd(libc::dup(t.fd())) },
        )
        .unwrap();
        assert!(!peer.enter(3, 8), "a stale stamp");
        assert!(peer.enter(3, 7));
        let mut looks = 0;
        assert!(!t.revoke(3, |_| {
            looks += 1;
            true
        }));
        assert_eq!(looks, 1);
        assert!(!peer.enter(3, 7), "revoked: no new write");
        peer.leave(3);
        assert!(t.revoke(3, |_| panic!("nothing under way to wait for")));
        // SAFETY: a NUL-terminated name, no other pointers.
        let fd = unsafe { libc::memfd_create(c"t".as_ptr(), libc::MFD_CLOEXEC) };
        // SAFETY: a new descriptor nothing else owns.
        let m = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: a plain call on our descriptor.
        assert_eq!(unsafe { libc::ftruncate(fd, GRANT_BYTES as i64) }, 0);
        assert!(matches!(GrantTable::open(m), Err(ShmError::Unsealed(_))));
    }

    /// A peer's mapping of region memory sees what the owner's copy wrote, and a copy
    /// that does not fit (or has an empty piece) writes nothing.
    #[test]
    fn region_memory_copies_only_what_fits() {
        let owner = SharedMem::create(4096).unwrap();
        // SAFETY: dup of a live descriptor, owned by the new OwnedFd.
        let fd = unsafe { OwnedFd::from_raw_fd(libc::dup(owner.fd())) };
        assert!(matches!(
            SharedMem::open(fd, 8192),
            Err(ShmError::Size(4096, 8192))
        ));
        // SAFETY: as above.
        let peer =
            SharedMem::open(unsafe { OwnedFd::from_raw_fd(libc::dup(owner.fd())) }, 4096).unwrap();
        let (a, b) = ([1u8, 2, 3], [4u8, 5]);
        let pieces = [(a.as_ptr(), 3), (b.as_ptr(), 2)];
        assert!(peer.write(4091, &pieces));
        let mut got = [0u8; 5];
        // SAFETY: 5 bytes inside the owner's live mapping.
        unsafe { std::ptr::copy_nonoverlapping(owner.ptr().add(4091), got.as_mut_ptr(), 5) };
        assert_eq!(got, [1, 2, 3, 4, 5]);
        assert!(!peer.write(4092, &pieces), "one byte past the end");
        assert!(!peer.write(usize::MAX, &pieces));
        assert!(!peer.write(0, &[(a.as_ptr(), 0)]));
        assert!(!peer.write(0, &[(a.as_ptr(), 3), (b.as_ptr(), 0)]));
    }
}
