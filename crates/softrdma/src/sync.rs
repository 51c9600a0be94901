//! The project's one lock type: [`Lock`] (a mutex) and [`RwLock`], each made with a
//! [`Rank`] that names its purpose and its place in the lock order of the crate docs
//! (`lib.rs`, "Threads and locks"), with a [`Condvar`] to wait on a [`Lock`]'s guard.
//!
//! softrdma's locks, the drop-in's (`softrdma-capi`, the C ABI over this crate) and the
//! fabric layer's (`softrdma-fabric`) share the type and one order, so that the check below
//! sees them all: the other crates' ranks come first, for they hold their locks around their
//! calls into softrdma, never the other way. The module is public for those two alone
//! (hidden from the docs); no other crate should build on it.
//!
//! # Contract
//! - **Poisoning is handled here, once.** A thread that panicked under a lock left the
//!   value as it was at the panic; every user of these locks takes it as it is (the
//!   state machines inside are consistent between their steps, and a verb that panicked
//!   has already failed its caller). Nothing else in softrdma or the drop-in writes
//!   `unwrap_or_else(|e| e.into_inner())`.
//! - **The order is checked in debug builds.** Each thread keeps the ranks of the locks it
//!   holds. Taking a lock whose rank is not above every rank held panics, naming both
//!   locks: that is a deadlock waiting for the right interleaving, found by any test that
//!   takes the path once. Two locks of one rank are never held together (two QPs, two
//!   CQs). `try_lock` cannot deadlock, so it is not checked, but what it takes counts as
//!   held. A [`Condvar`] wait keeps its lock's record: the thread takes nothing while it
//!   waits, and takes the same lock back. Release builds keep no record: a guard is the
//!   standard guard, nothing more.
//! - Any thread may take any lock; the record is per thread, so a guard stays on the
//!   thread that took it (the guards are not `Send`, as the standard ones are not).
//! - The loom models of `device::handoff` use loom's own locks, so the registry there is
//!   the one lock outside this type (its rank is listed in the crate docs all the same).

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{
    Condvar as StdCondvar, Mutex, MutexGuard, RwLock as StdRwLock, RwLockReadGuard,
    RwLockWriteGuard, TryLockError,
};

macro_rules! ranks {
    ($($name:ident = $n:literal, $purpose:literal;)*) => {
        /// A lock's place in the lock order of softrdma and the drop-in: a thread takes
        /// locks in increasing rank only. The crate docs list every rank with the locks
        /// that have it (and the drop-in's crate docs its own).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(u8)]
        pub enum Rank {
            $(
                #[doc = $purpose]
                $name = $n,
            )*
        }

        impl Rank {
            /// Every rank, in order (for the tests that hold the docs' lists to the enum).
            pub const ALL: &[Rank] = &[$(Rank::$name),*];

            /// What the locks of this rank guard.
            pub fn purpose(self) -> &'static str {
                match self {
                    $(Rank::$name => $purpose,)*
                }
            }
        }
    };
}

ranks! {
    // The native libfabric provider's (softrdma-fi): taken alone, never around another.
    FiObjects = 1, "the native libfabric provider's live objects, by address";
    FiEpSetup = 3, "a native-provider endpoint's bindings before it is enabled";
    FiEq = 5, "a native-provider event queue's connection requests not yet taken";
    FiDomain = 7, "a native-provider domain's device, opened on first use";
    // The drop-in's (softrdma-capi) first: it holds them around its calls into softrdma.
    CapiIdsLive = 2, "the drop-in's gate between an event's lookup of its rdma_cm ID and the ID's destruction (`LIVE`)";
    CapiIdRust = 4, "a drop-in rdma_cm ID's softrdma ID";
    CapiIdAlso = 6, "a drop-in wildcard listener's softrdma IDs on the other devices";
    CapiIdPeer = 8, "what the peer's REQ offered, for a drop-in ID's accept";
    CapiIdGroups = 10, "a drop-in ID's multicast groups and each join's context";
    CapiIdAcks = 12, "a drop-in ID's events handed out and acked";
    CapiChannels = 13, "the drop-in's live rdma_cm event channels, by address";
    CapiCmContexts = 14, "the contexts the drop-in's connection manager keeps open";
    CapiDeviceOpen = 16, "a drop-in device's open soft device and its count of contexts";
    CapiLibraryPds = 18, "the PDs the drop-in keeps on each context for the connection manager";
    CapiDeviceLists = 20, "the drop-in's device lists, one per process generation";
    CapiContextQps = 22, "a drop-in context's QPN to QP map";
    CapiContextCqs = 24, "a drop-in context's live CQs";
    CapiCqCursor = 26, "a drop-in extended CQ's current completion";
    CapiContextSrqs = 28, "a drop-in context's live SRQs";
    CapiSrqAttr = 30, "a drop-in SRQ's attributes";
    CapiQpBatch = 32, "a drop-in QP's `ibv_wr_*` batch being built";
    CapiPorts = 34, "the ports the drop-in's rdma_cm IDs are bound to";
    // The fabric layer's (softrdma-fabric): it too holds them around its calls into softrdma.
    FabricDomains = 33, "the fabric layer's open domains, by address";
    FabricCqBound = 35, "the endpoints bound to a fabric completion queue or counter";
    FabricEp = 36, "a fabric endpoint's state: connections, receives, WRs in flight";
    FabricAv = 37, "a fabric address vector's table";
    FabricCqEntries = 38, "a fabric completion queue's entries";
    FabricEq = 39, "a fabric event queue's events";
    // softrdma's own.
    CmCores = 42, "the registry of per-device CM agent hosts (`cm`'s `CORES`)";
    CmAgent = 44, "a CM agent host's state: its agent, listeners and IDs by communication ID";
    CmGate = 46, "the CM agent host's inline-service gate (only `try_lock`ed)";
    CmId = 48, "an rdma_cm ID's state";
    CmIdChannel = 50, "the event channel an rdma_cm ID reports to";
    CmDropped = 52, "the CM agent host's IDs dropped while it was busy";
    CmEvents = 54, "an rdma_cm event channel's queue";
    Sweeping = 60, "the timer pass's own mark (only `try_lock`ed)";
    Rx = 62, "a device's receive state (a drain; pollers only `try_lock` it)";
    QpTable = 64, "a device's QP table";
    Paths = 66, "a device's round-trip records per peer address";
    Qp = 70, "one QP's engine";
    QpError = 71, "the error a QP's last flush completed with";
    LocalLookup = 78, "the same-host path's one lookup at a time of a QPN's process";
    LocalRoutes = 80, "the same-host path's routes, QPN to peer process";
    LocalWanted = 81, "the QPNs a send found no same-host route for, to look up";
    ShareCtl = 82, "the device-sharing control state: role, slots, members, QPN draw";
    ShareRoutes = 84, "the device owner's forwarding table, QPN to member socket";
    ShareCm = 86, "the device owner's CM routes: listeners and communication IDs";
    ShareHeldReqs = 88, "the REQs the owner remembers holding for a listener";
    ShareWaitingReqs = 90, "the REQs the owner holds until their listener comes";
    ShareProbes = 92, "the steering probes in flight";
    LocalConns = 94, "the same-host path's ring connections, by peer process";
    LocalRing = 96, "one same-host ring's producer end";
    LocalIncoming = 98, "the same-host rings a process receives on";
    LocalPlacements = 100, "the same-host placement grants a process holds from its peers";
    PlaceIssued = 102, "the placement grants a process has issued";
    PlaceFree = 104, "the free placement-grant slots";
    Cq = 110, "one CQ's state";
    CqReady = 112, "a completion channel's list of CQs with events";
    CqPollers = 114, "the devices a completion channel's CQs poll for progress";
    AsyncSubs = 116, "a device's async-event subscribers";
    AsyncQueue = 118, "one async-event queue";
    Timers = 120, "a device's timer queue";
    Deferred = 122, "a device's deferred-ACK batch";
    Retired = 124, "the counters of destroyed QPs";
    Groups = 126, "a device's multicast groups";
    Faults = 130, "the fault injector's held packets";
    Pcap = 132, "the capture file";
    TxConns = 134, "the send path's connected sockets, by destination";
    TxConn = 136, "one connected socket, for its send call";
    Learner = 138, "the send path's queue to its IPv4-ID learner";
    UdpHandbacks = 140, "the UDP driver's sockets handed back by the owner";
    UdpKeep = 142, "the UDP driver's sockets kept open for a forked child";
    UdpGroups = 144, "the UDP driver's multicast sockets";
    Loopback = 146, "the loopback fabric's queues (tests)";
    LoopbackIdent = 148, "the loopback driver's IPv4 IDs (tests)";
    ResFields = 150, "a published object's `res show` fields";
    ResLists = 152, "the lists of objects `res show` publishes";
    VerbsOwned = 160, "a QP's buffers posted by value";
}

impl fmt::Display for Rank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} ({})", self, self.purpose())
    }
}

/// The per-thread record of held ranks, in debug builds.
#[cfg(debug_assertions)]
mod order {
    use super::Rank;
    use std::cell::RefCell;

    thread_local! {
        static HELD: RefCell<Vec<(Rank, usize)>> = const { RefCell::new(Vec::new()) };
    }

    /// Panics if the thread holds a lock of `rank` or above: taking `rank` now could
    /// deadlock against a thread that takes them in the crate's order.
    pub(super) fn check(rank: Rank) {
        let clash = HELD
            .try_with(|h| {
                h.borrow()
                    .iter()
                    .map(|&(r, _)| r)
                    .filter(|&r| r >= rank)
                    .max()
            })
            .ok()
            .flatten();
        if let Some(held) = clash {
            // Not under the borrow: the unwinding drops guards, which pop.
            panic!("lock order: taking {rank} while holding {held}");
        }
    }

    /// Records that the thread holds the lock at `addr`, of `rank`.
    pub(super) fn push(rank: Rank, addr: usize) {
        let _ = HELD.try_with(|h| h.borrow_mut().push((rank, addr)));
    }

    /// Records that the thread released the lock at `addr` (the latest taking of it).
    pub(super) fn pop(addr: usize) {
        let _ = HELD.try_with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().rposition(|&(_, a)| a == addr) {
                h.remove(i);
            }
        });
    }
}

/// Proof that the thread holds a lock, for the order check; releases the record when
/// dropped (after the guard beside it, which is declared first).
struct Held {
    #[cfg(debug_assertions)]
    addr: usize,
}

impl Held {
    /// Records the lock at `addr`, of `rank`, as held (the order was checked before the
    /// wait, or needs no check: `try_lock`).
    #[inline]
    fn take(rank: Rank, addr: usize) -> Self {
        #[cfg(debug_assertions)]
        {
            order::push(rank, addr);
            Held { addr }
        }
        #[cfg(not(debug_assertions))]
        {
            let _ = (rank, addr);
            Held {}
        }
    }

    /// Checks the order, then waits in `take` for the lock at `addr` (whatever kind of
    /// guard it gives), then records it as held.
    #[inline]
    fn wait_for<G>(rank: Rank, addr: usize, take: impl FnOnce() -> G) -> (G, Self) {
        Held::check(rank);
        let guard = take();
        (guard, Held::take(rank, addr))
    }

    /// Checks the order before a blocking acquisition.
    #[inline]
    fn check(rank: Rank) {
        #[cfg(debug_assertions)]
        order::check(rank);
        #[cfg(not(debug_assertions))]
        let _ = rank;
    }
}

#[cfg(debug_assertions)]
impl Drop for Held {
    fn drop(&mut self) {
        order::pop(self.addr);
    }
}

/// Where `inner` lives: what names a lock while it is held.
fn addr_of<T: ?Sized>(inner: &T) -> usize {
    std::ptr::from_ref(inner).cast::<u8>() as usize
}

/// A mutex with a [`Rank`]; see the module docs.
pub struct Lock<T: ?Sized> {
    rank: Rank,
    inner: Mutex<T>,
}

/// The guard of a [`Lock`].
pub struct Guard<'a, T: ?Sized> {
    inner: MutexGuard<'a, T>,
    _held: Held,
}

impl<T> Lock<T> {
    /// A lock of `rank` around `value`.
    pub const fn new(rank: Rank, value: T) -> Self {
        Self {
            rank,
            inner: Mutex::new(value),
        }
    }
}

impl<T: ?Sized> Lock<T> {
    /// Names this lock in the thread's record of what it holds.
    fn addr(&self) -> usize {
        addr_of(&self.inner)
    }

    /// Takes the lock, waiting for it; a poisoned lock is taken as it is.
    #[inline]
    pub fn lock(&self) -> Guard<'_, T> {
        let (inner, _held) = Held::wait_for(self.rank, self.addr(), || {
            self.inner.lock().unwrap_or_else(|e| e.into_inner())
        });
        Guard { inner, _held }
    }

    /// Takes the lock if no one holds it.
    #[inline]
    pub fn try_lock(&self) -> Option<Guard<'_, T>> {
        let inner = match self.inner.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        Some(Guard {
            inner,
            _held: Held::take(self.rank, self.addr()),
        })
    }

    /// The value, through exclusive access (no locking).
    pub fn get_mut(&mut self) -> &mut T {
        self.inner.get_mut().unwrap_or_else(|e| e.into_inner())
    }
}

/// A condition variable to wait on with a [`Lock`]'s guard; poisoning is ignored, as the
/// lock's is.
#[derive(Debug, Default)]
pub struct Condvar(StdCondvar);

impl Condvar {
    /// A condition variable no one waits on.
    pub const fn new() -> Self {
        Self(StdCondvar::new())
    }

    /// Releases `guard`'s lock until the condition variable is notified (or a spurious
    /// wake-up), then takes it back. The thread's record keeps the lock as held meanwhile:
    /// it takes nothing else while it waits.
    pub fn wait<'a, T>(&self, guard: Guard<'a, T>) -> Guard<'a, T> {
        let Guard { inner, _held } = guard;
        let inner = self.0.wait(inner).unwrap_or_else(|e| e.into_inner());
        Guard { inner, _held }
    }

    /// Wakes every thread waiting on it.
    pub fn notify_all(&self) {
        self.0.notify_all();
    }
}

impl<T: ?Sized> fmt::Debug for Lock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Lock({:?})", self.rank)
    }
}

/// A readers-writer lock with a [`Rank`]; see the module docs. Readers count as holders
/// for the order: a thread never takes a read lock under another lock of its rank or
/// above, for a writer may be waiting between them.
pub struct RwLock<T: ?Sized> {
    rank: Rank,
    inner: StdRwLock<T>,
}

/// A read guard of a [`RwLock`].
pub struct ReadGuard<'a, T: ?Sized> {
    inner: RwLockReadGuard<'a, T>,
    _held: Held,
}

/// A write guard of a [`RwLock`].
pub struct WriteGuard<'a, T: ?Sized> {
    inner: RwLockWriteGuard<'a, T>,
    _held: Held,
}

impl<T> RwLock<T> {
    /// A lock of `rank` around `value`.
    pub const fn new(rank: Rank, value: T) -> Self {
        Self {
            rank,
            inner: StdRwLock::new(value),
        }
    }
}

impl<T: ?Sized> RwLock<T> {
    /// Names this lock in the thread's record of what it holds.
    fn addr(&self) -> usize {
        addr_of(&self.inner)
    }

    /// Takes the lock to read, waiting for a writer; poisoning is ignored.
    #[inline]
    pub fn read(&self) -> ReadGuard<'_, T> {
        let (inner, _held) = Held::wait_for(self.rank, self.addr(), || {
            self.inner.read().unwrap_or_else(|e| e.into_inner())
        });
        ReadGuard { inner, _held }
    }

    /// Takes the lock to write, waiting for readers and writers; poisoning is ignored.
    #[inline]
    pub fn write(&self) -> WriteGuard<'_, T> {
        let (inner, _held) = Held::wait_for(self.rank, self.addr(), || {
            self.inner.write().unwrap_or_else(|e| e.into_inner())
        });
        WriteGuard { inner, _held }
    }
}

impl<T: ?Sized> fmt::Debug for RwLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RwLock({:?})", self.rank)
    }
}

/// A guard reads (and, where it may, writes) through to the value it guards.
macro_rules! guard_deref {
    ($guard:ident $(, $mut:ident)?) => {
        impl<T: ?Sized> Deref for $guard<'_, T> {
            type Target = T;
            #[inline]
            fn deref(&self) -> &T {
                &self.inner
            }
        }
        $(
            impl<T: ?Sized> $mut for $guard<'_, T> {
                #[inline]
                fn deref_mut(&mut self) -> &mut T {
                    &mut self.inner
                }
            }
        )?
    };
}
guard_deref!(Guard, DerefMut);
guard_deref!(ReadGuard);
guard_deref!(WriteGuard, DerefMut);

/// The entries of `list` that are still alive, taken out of the list's lock so that the
/// caller can use them without holding it.
pub(crate) fn upgraded<T: ?Sized>(list: &[std::sync::Weak<T>]) -> Vec<std::sync::Arc<T>> {
    list.iter().filter_map(std::sync::Weak::upgrade).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_taken_in_order_pass() {
        let a = Lock::new(Rank::QpTable, 1);
        let b = Lock::new(Rank::Qp, 2);
        let c = RwLock::new(Rank::Cq, 3);
        let ga = a.lock();
        let gb = b.lock();
        let gc = c.read();
        assert_eq!(*ga + *gb + *gc, 6);
        drop((gb, gc));
        // Released: the same rank may be taken again.
        let b2 = Lock::new(Rank::Qp, 4);
        assert_eq!(*b2.lock(), 4);
    }

    /// Takes `second` while holding `first`; the panic, if the order check makes one.
    #[cfg(debug_assertions)]
    fn nested(first: &Lock<()>, second: &Lock<()>) -> std::thread::Result<()> {
        std::panic::catch_unwind(|| {
            let _g = first.lock();
            let _h = second.lock();
        })
    }

    #[cfg(debug_assertions)]
    #[test]
    fn a_lock_taken_out_of_order_panics_naming_both() {
        let outer = Lock::new(Rank::Cq, ());
        let inner = Lock::new(Rank::Qp, ());
        let r = nested(&outer, &inner);
        let msg = *r.unwrap_err().downcast::<String>().unwrap();
        assert!(
            msg.contains("taking Qp") && msg.contains("holding Cq"),
            "{msg}"
        );
        // The unwinding released the record: in order again, it passes.
        let _h = inner.lock();
        let _g = outer.lock();
    }

    #[cfg(debug_assertions)]
    #[test]
    fn two_locks_of_one_rank_panic() {
        let a = Lock::new(Rank::Qp, ());
        let b = Lock::new(Rank::Qp, ());
        let r = nested(&a, &b);
        assert!(r.is_err());
    }

    #[test]
    fn try_lock_is_not_checked_but_counts_as_held() {
        let outer = Lock::new(Rank::Cq, ());
        let inner = Lock::new(Rank::Sweeping, ());
        let _g = outer.lock();
        let t = inner.try_lock();
        assert!(t.is_some());
        assert!(inner.try_lock().is_none());
    }

    #[test]
    fn a_poisoned_lock_is_taken_as_it_is() {
        let l = std::sync::Arc::new(Lock::new(Rank::Qp, 5));
        let l2 = l.clone();
        let _ = std::thread::spawn(move || {
            let mut g = l2.lock();
            *g = 6;
            panic!("poison it");
        })
        .join();
        assert_eq!(*l.lock(), 6);
        assert_eq!(*l.try_lock().unwrap(), 6);
    }

    #[test]
    fn a_condvar_wait_gives_the_lock_back() {
        let pair = std::sync::Arc::new((Lock::new(Rank::Qp, false), Condvar::new()));
        let p2 = pair.clone();
        let t = std::thread::spawn(move || {
            *p2.0.lock() = true;
            p2.1.notify_all();
        });
        let mut g = pair.0.lock();
        while !*g {
            g = pair.1.wait(g);
        }
        drop(g);
        t.join().unwrap();
        // Released after the wait, the record is clear: a lower rank may be taken.
        let lower = Lock::new(Rank::QpTable, ());
        drop(lower.lock());
    }

    /// The crate docs' lock table lists every rank, in rank order.
    #[test]
    fn the_crate_docs_list_every_rank_in_order() {
        let docs = include_str!("lib.rs");
        let mut at = 0;
        for r in Rank::ALL {
            let name = format!("`{r:?}`");
            let found = docs[at..]
                .find(&name)
                .unwrap_or_else(|| panic!("lib.rs lists no {name} after the previous rank"));
            at += found + name.len();
        }
    }
}
