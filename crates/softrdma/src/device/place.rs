//! Placement: RDMA WRITEs that a process places in a same-host peer's memory itself,
//! instead of sending them through a ring for the peer to check and copy: with a plain
//! copy into a region the peer keeps in shareable memory (a sealed memfd it passes with the
//! grant: what the Rust API's `register_zeroed` allocates for remote writes), and with one
//! cross-memory copy (`process_vm_writev`, CMA) into any other region (application memory,
//! as C programs register).
//!
//! # Why
//! Through a ring, a WRITE lands only when a thread of the target process drains it: its
//! application thread if it polls, its progress thread otherwise. Latency tests (perftest's
//! `ib_write_lat`) spin on the target memory and make no call, so the progress thread has
//! to be scheduled on a machine whose CPUs both spin: tens of microseconds. Placed by the
//! sender, the WRITE is in the target memory when `ibv_post_send` returns, and the spinner
//! sees it with no thread of its own involved; a large WRITE costs one copy instead of
//! four.
//!
//! # The rule: only what the owner granted
//! A process writes another's memory only inside a range the owner granted it, after the
//! owner checked the key (the same checks its receive path makes: the QP exists, is RC,
//! can receive, allows remote writes, its peer is on this host, and the R_Key names a
//! region of the QP's PD that allows remote writes). Not UC: a UC WRITE completes as it
//! leaves, so one still in the ring could land after a later, placed one:
//! 1. The sender asks, over its ring's connection ([`Msg::Place`](super::share::msg::Msg)),
//!    after its first WRITE through that key went through the ring.
//! 2. The owner checks and grants the whole region in a slot of the placement table it keeps
//!    for that connection ([`GrantTable`]), or refuses.
//! 3. The sender caches the grant ([`Placements`]) and places WRITEs inside it once every
//!    earlier WR of its QP completed (a WRITE posted behind others is held until then; see
//!    `softrdma_proto::QueuePair::post_send_placed`): each write enters the slot, copies,
//!    and leaves.
//! 4. The owner revokes a grant before the region or the QP can change under it: at
//!    deregistration and re-registration (before `ibv_dereg_mr` returns), when the QP is
//!    modified or destroyed or falls into ERROR, and when the connection ends. A revocation
//!    returns once no write is under way in the slot, waiting at most [`REVOKE_WAIT`] (a
//!    peer that died mid-write is not waited for).
//!
//! The kernel's rules stay in force: CMA needs the right to ptrace the target (same uid,
//! and Yama's `ptrace_scope` at 0, or an exception the target made). Where the kernel
//! refuses (Yama at 1 or more, another PID namespace, seccomp, gVisor), WRITEs into that
//! peer's heap memory go through the ring as before, which is the pipelined copy through
//! shared memory (`place_refused` counts them), while a region it keeps in shareable memory
//! is still placed with a plain copy; softrdma never loosens ptrace permissions on its own.
//!
//! # Threads and locks
//! [`Granted`] has one lock, over its list of grants, taken to issue (by the progress
//! thread, under the QP's lock) and to revoke (by whichever thread deregisters, modifies
//! or services). A revocation waits for other processes' copies only, never for a lock,
//! so it may be called under a QP's lock. [`Placements`] is the sender's cache, taken
//! once per placed WRITE (to clone a grant) and by the progress thread to add or drop one.

use crate::datapath::shared_mem::{GRANTS, GrantTable, SharedMem};
use crate::sync::{Lock, Rank};
use softrdma_proto::endpoint::check::KeyHasher;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The longest a revocation waits for a write that is under way: a copy of a GiB takes
/// less; a peer that keeps a slot entered for longer is broken or hostile.
pub(crate) const REVOKE_WAIT: Duration = Duration::from_secs(1);
/// How long a refused or unanswered ask stands before the sender asks again.
const ASK_AGAIN: Duration = Duration::from_secs(1);

/// The placement table this process keeps for one peer connection, and its free slots.
pub(crate) struct Table {
    pub(crate) shm: GrantTable,
    free: Lock<Vec<u32>>,
    /// The peer's pid (waited for only while it lives).
    pid: i32,
}

impl Table {
    /// A new table for the peer `pid`.
    pub(crate) fn create(pid: i32) -> Option<Arc<Table>> {
        let shm = GrantTable::create()
            .map_err(|e| eprintln!("softrdma: no placement table: {e}"))
            .ok()?;
        Some(Arc::new(Table {
            shm,
            free: Lock::new(Rank::PlaceFree, (0..GRANTS).rev().collect()),
            pid,
        }))
    }
}

/// One grant this process issued.
struct Issued {
    key: u32,
    qpn: u32,
    table: Arc<Table>,
    slot: u32,
    /// Keeps an owned region's buffer alive until the grant is revoked, whatever order a
    /// deregistration takes.
    _mr: Arc<dyn Grantable>,
}

/// A memory region as a grant sees it (the region table's regions are these): where it
/// is, in the peer's terms and in this process's, and, held by the grant, alive until
/// the grant is revoked. A trait, so that grants need not know the region table, whose
/// deregistrations revoke them (it is the one that calls down here).
pub(crate) trait Grantable: Send + Sync {
    /// The address peers and SGEs name.
    fn iova(&self) -> u64;
    /// Its length in bytes.
    fn len(&self) -> u64;
    /// Where its bytes are in this process.
    fn vaddr(&self) -> u64;
}

pub(crate) use super::share::msg::Grant;

/// Why a peer's answer to an ask was refused (and its connection closed): each names what
/// the hostile or broken peer sent.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GrantRefused {
    /// Its slot, length or address range cannot be.
    #[error("an impossible grant {0:?}")]
    Impossible(Grant),
    /// Its mapping address overflows, or the peer's pid cannot be.
    #[error("a grant at {vaddr:#x} from pid {pid}")]
    BadOrigin {
        /// Where the peer says the region is mapped.
        vaddr: u64,
        /// The peer's pid.
        pid: i32,
    },
    /// More descriptors than a table and a region.
    #[error("a grant with {0} descriptors")]
    Descriptors(usize),
    /// A length this host cannot map.
    #[error("a grant too long ({0} bytes)")]
    TooLong(u64),
    /// The first grant of a peer came without its table.
    #[error("a grant without its table")]
    NoTable,
    /// The region's or the table's memory could not be mapped.
    #[error("mapping a grant: {0}")]
    Map(#[source] crate::datapath::shared_mem::ShmError),
}

/// Every grant this process issued, for revocation (kept by the region table, which every
/// deregistration goes through).
pub(crate) struct Granted {
    issued: Lock<Vec<Issued>>,
    /// How many are issued (read without the lock on every service of a QP).
    count: AtomicUsize,
    next_stamp: AtomicU64,
}

impl Default for Granted {
    fn default() -> Self {
        Self {
            issued: Lock::new(Rank::PlaceIssued, Vec::new()),
            count: AtomicUsize::new(0),
            next_stamp: AtomicU64::new(0),
        }
    }
}

impl Granted {
    /// Whether any grant is issued.
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) != 0
    }

    /// Issues a grant of region `mr` to QP `qpn` in `table`, if `mr` passes `ok` under the
    /// lock (so that a deregistration, which revokes under it, cannot pass in between).
    pub(crate) fn issue(
        &self,
        table: &Arc<Table>,
        qpn: u32,
        key: u32,
        mr: impl FnOnce() -> Option<Arc<dyn Grantable>>,
    ) -> Option<Grant> {
        let mut issued = self.issued.lock();
        let mr = mr()?;
        let slot = table.free.lock().pop()?;
        let stamp = self.next_stamp.fetch_add(1, Ordering::Relaxed) + 1;
        table.shm.grant(slot, stamp);
        let g = Grant {
            slot,
            stamp,
            iova: mr.iova(),
            len: mr.len(),
            vaddr: mr.vaddr(),
        };
        issued.push(Issued {
            key,
            qpn,
            table: table.clone(),
            slot,
            _mr: mr,
        });
        self.count.store(issued.len(), Ordering::Relaxed);
        Some(g)
    }

    /// Revokes the grants through region `key` (its deregistration or re-registration).
    pub(crate) fn revoke_key(&self, key: u32) {
        self.revoke(|i| i.key == key);
    }

    /// Revokes the grants to QP `qpn` (modified, destroyed, or in ERROR).
    pub(crate) fn revoke_qpn(&self, qpn: u32) {
        self.revoke(|i| i.qpn == qpn);
    }

    /// Revokes every grant in `table` (its connection ended).
    pub(crate) fn revoke_table(&self, table: &Arc<Table>) {
        self.revoke(|i| Arc::ptr_eq(&i.table, table));
    }

    fn revoke(&self, pick: impl Fn(&Issued) -> bool) {
        if !self.any() {
            return;
        }
        let mut issued = self.issued.lock();
        let mut gone = Vec::new();
        let mut i = 0;
        while i < issued.len() {
            if pick(&issued[i]) {
                gone.push(issued.swap_remove(i));
            } else {
                i += 1;
            }
        }
        self.count.store(issued.len(), Ordering::Relaxed);
        // Revoked under the lock: an issue that follows cannot reuse a slot whose write
        // is still under way.
        for g in gone {
            let pid = g.table.pid;
            let clean = g
                .table
                .shm
                .revoke(g.slot, |waited| waited >= REVOKE_WAIT || !alive(pid));
            if !clean && alive(pid) {
                eprintln!(
                    "softrdma: pid {pid} kept a write into a granted region under way for \
                     {REVOKE_WAIT:?}; revoked anyway"
                );
            }
            g.table.free.lock().push(g.slot);
        }
    }
}

/// Whether process `pid` lives (or is beyond our sight, which counts as living).
fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    pid > 0 && (unsafe { libc::kill(pid, 0) } == 0 || errno() == libc::EPERM)
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A grant this process holds from a peer.
#[derive(Clone)]
pub(crate) struct Placement {
    table: Arc<GrantTable>,
    grant: Grant,
    pid: i32,
    ep: u64,
    /// The region's memory, mapped, when the peer keeps it in shareable memory: written
    /// with a plain copy instead of a cross-memory one.
    mem: Option<Arc<SharedMem>>,
}

impl Placement {
    /// Whether the region is mapped here.
    pub(crate) fn mapped(&self) -> bool {
        self.mem.is_some()
    }
}

/// How one placed WRITE went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placed {
    /// The bytes are in the target's memory.
    Done,
    /// Not placed: no grant (one was asked for), or not inside it; send it as usual.
    NotNow,
    /// Not placed: the kernel refused the cross-memory copy (this peer's WRITEs into heap
    /// memory take the ring from now on); send it as usual.
    Refused,
}

/// The grants this process holds from its same-host peers, by (QPN, R_Key).
#[derive(Default)]
pub(crate) struct Placements {
    /// (Keyed by the R_Key's hash alone, which is random: the QPN only tells equal keys
    /// apart. Looked up per placed WRITE, where SipHash was a tenth of the work.)
    by: HashMap<(u32, u32), Arc<Placement>, BuildHasherDefault<KeyHasher>>,
    /// When each (QPN, R_Key) was last asked for (or refused).
    asked: HashMap<(u32, u32), Instant>,
    /// Each peer's placement table, mapped once.
    tables: HashMap<u64, Arc<GrantTable>>,
    /// Peers that CMA cannot reach (the kernel refused): their WRITEs into heap memory take
    /// the ring.
    unreachable: HashSet<u64>,
    /// Grants such a peer gave for heap memory, which only a cross-memory copy could use:
    /// not asked for again (each ask takes a slot of the peer's table).
    useless: HashSet<(u32, u32)>,
}

impl Placements {
    /// The grant for (`qpn`, `rkey`), if one is held.
    #[inline]
    pub(crate) fn held(&self, qpn: u32, rkey: u32) -> Option<Arc<Placement>> {
        self.by.get(&(qpn, rkey)).cloned()
    }

    /// Whether to ask for a grant for (`qpn`, `rkey`) now: it was not asked within
    /// [`ASK_AGAIN`], nor found useless. Noted as asked if so. A peer that CMA cannot reach
    /// is asked too: a region it keeps in shareable memory is placed by plain copy all the
    /// same (the answer says which it is).
    pub(crate) fn should_ask(&mut self, qpn: u32, rkey: u32) -> bool {
        if self.useless.contains(&(qpn, rkey)) {
            return false;
        }
        let now = Instant::now();
        match self.asked.get(&(qpn, rkey)) {
            Some(t) if now.duration_since(*t) < ASK_AGAIN => false,
            _ => {
                self.asked.insert((qpn, rkey), now);
                true
            }
        }
    }

    /// The peer at `ep` (pid `pid`) answered an ask; `fds` are its table's memfd and,
    /// for a region in shareable memory, the region's.
    pub(crate) fn answer(
        &mut self,
        ep: u64,
        pid: i32,
        qpn: u32,
        rkey: u32,
        grant: Option<Grant>,
        fds: Vec<std::os::fd::OwnedFd>,
    ) -> Result<(), GrantRefused> {
        let Some(g) = grant else {
            return Ok(());
        };
        if g.slot >= GRANTS || g.len == 0 || g.iova.checked_add(g.len).is_none() {
            return Err(GrantRefused::Impossible(g));
        }
        if g.vaddr.checked_add(g.len).is_none() || pid <= 0 {
            return Err(GrantRefused::BadOrigin {
                vaddr: g.vaddr,
                pid,
            });
        }
        if fds.len() > 2 {
            return Err(GrantRefused::Descriptors(fds.len()));
        }
        let mut fds = fds.into_iter();
        let (fd, region) = (fds.next(), fds.next());
        let mem = match region {
            Some(m) => {
                let len = usize::try_from(g.len).map_err(|_| GrantRefused::TooLong(g.len))?;
                Some(Arc::new(
                    SharedMem::open(m, len).map_err(GrantRefused::Map)?,
                ))
            }
            None => None,
        };
        let table = match (self.tables.get(&ep), fd) {
            (Some(t), _) => t.clone(),
            (None, Some(fd)) => {
                let t = Arc::new(GrantTable::open(fd).map_err(GrantRefused::Map)?);
                self.tables.insert(ep, t.clone());
                t
            }
            (None, None) => return Err(GrantRefused::NoTable),
        };
        if mem.is_none() && self.unreachable.contains(&ep) {
            // Only a cross-memory copy could place into it, which the kernel refuses.
            self.useless.insert((qpn, rkey));
            return Ok(());
        }
        self.asked.remove(&(qpn, rkey));
        self.by.insert(
            (qpn, rkey),
            Arc::new(Placement {
                table,
                grant: g,
                pid,
                ep,
                mem,
            }),
        );
        Ok(())
    }

    /// The peer at `ep` is gone: its grants and table go with it.
    pub(crate) fn forget(&mut self, ep: u64) {
        self.by.retain(|_, p| p.ep != ep);
        self.tables.remove(&ep);
        self.unreachable.remove(&ep);
        self.useless.clear();
    }

    /// A grant turned out revoked.
    fn revoked(&mut self, qpn: u32, rkey: u32) {
        self.by.remove(&(qpn, rkey));
    }

    /// The kernel refused CMA into the peer at `ep`: its grants of regions in shareable
    /// memory stay, since they need no system call.
    fn refused(&mut self, ep: u64) {
        self.by.retain(|_, p| p.ep != ep || p.mapped());
        self.unreachable.insert(ep);
    }
}

/// Places `len` bytes gathered from `local` (address, length pieces of this process's
/// memory, valid for reads) at `remote_addr` through the grant `p` for (`qpn`, `rkey`).
/// `cache` is taken again only when the grant turned out revoked or the kernel refused.
pub(crate) fn write(
    cache: &Lock<Placements>,
    p: &Placement,
    qpn: u32,
    rkey: u32,
    remote_addr: u64,
    local: &[(*const u8, usize)],
) -> Placed {
    let len: usize = local.iter().map(|l| l.1).sum();
    let g = &p.grant;
    let Some(off) = remote_addr.checked_sub(g.iova) else {
        return Placed::NotNow;
    };
    if off.checked_add(len as u64).is_none_or(|end| end > g.len) {
        // Outside the region: the ring's path makes the remote access error.
        return Placed::NotNow;
    }
    if !p.table.enter(g.slot, g.stamp) {
        cache.lock().revoked(qpn, rkey);
        return Placed::NotNow;
    }
    if let Some(mem) = &p.mem {
        // No system call: the region's memory is mapped here too.
        let done = mem.write(off as usize, local);
        p.table.leave(g.slot);
        return if done { Placed::Done } else { Placed::NotNow };
    }
    let iov: Vec<libc::iovec> = local
        .iter()
        .map(|&(ptr, n)| libc::iovec {
            iov_base: ptr as *mut libc::c_void,
            iov_len: n,
        })
        .collect();
    let remote = libc::iovec {
        iov_base: (g.vaddr + off) as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: the local pieces are this process's memory, valid for reads for the call
    // (the caller's contract); the remote range is the peer's, which the kernel checks,
    // inside the region the peer granted and has not revoked (the slot is entered).
    let n = unsafe {
        libc::process_vm_writev(
            p.pid,
            iov.as_ptr(),
            iov.len() as libc::c_ulong,
            &remote,
            1,
            0,
        )
    };
    let err = errno();
    p.table.leave(g.slot);
    if n >= 0 && n as usize == len {
        return Placed::Done;
    }
    // A short copy is sent again whole through the ring (a WRITE may land twice).
    if n < 0 && matches!(err, libc::EPERM | libc::ENOSYS | libc::ESRCH | libc::EFAULT) {
        eprintln!(
            "softrdma: same-host WRITEs to pid {} go through the ring: the kernel refuses \
             cross-memory attach ({})",
            p.pid,
            std::io::Error::from_raw_os_error(err)
        );
        cache.lock().refused(p.ep);
        return Placed::Refused;
    }
    Placed::NotNow
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{FromRawFd, OwnedFd};

    fn dup(fd: std::os::fd::RawFd) -> OwnedFd {
        // SAFETY: dup of a live descriptor; the copy is ours.
        unsafe { OwnedFd::from_raw_fd(libc::dup(fd)) }
    }

    /// Once the kernel refused cross-memory copies into a peer, a grant it gives for heap
    /// memory (no memfd alongside) is useless: it is dropped and never asked for again,
    /// since each ask takes a slot of the peer's table; its other regions are still asked
    /// for, and a grant of shareable memory would be kept.
    #[test]
    fn a_refused_peers_heap_grants_are_not_asked_for_again() {
        let table = GrantTable::create().unwrap();
        let mut p = Placements::default();
        let ep = 7;
        p.unreachable.insert(ep);
        let g = Grant {
            slot: 3,
            stamp: 1,
            iova: 0x1000,
            len: 4096,
            vaddr: 0x1000,
        };
        assert!(p.should_ask(1, 2));
        p.answer(ep, 42, 1, 2, Some(g), vec![dup(table.fd())])
            .unwrap();
        assert!(p.held(1, 2).is_none(), "a useless grant was kept");
        p.asked.clear();
        assert!(!p.should_ask(1, 2), "a useless grant is asked for again");
        assert!(p.should_ask(1, 3), "another region is still asked for");
        // A peer that CMA reaches keeps its heap grants.
        p.answer(8, 43, 1, 4, Some(g), vec![dup(table.fd())])
            .unwrap();
        assert!(p.held(1, 4).is_some());
    }
}
