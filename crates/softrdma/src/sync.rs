//! The crate's one lock type: [`Lock`] (a mutex) and [`RwLock`], each made with a [`Rank`]
//! that names its purpose and its place in the lock order of the crate docs (`lib.rs`,
//! "Threads and locks").
//!
//! # Contract
//! - **Poisoning is handled here, once.** A thread that panicked under a lock left the
//!   value as it was at the panic; every user of these locks takes it as it is (the
//!   state machines inside are consistent between their steps, and a verb that panicked
//!   has already failed its caller). Nothing else in the crate writes
//!   `unwrap_or_else(|e| e.into_inner())`.
//! - **The order is checked in debug builds.** Each thread keeps the ranks of the locks it
//!   holds. Taking a lock whose rank is not above every rank held panics, naming both
//!   locks: that is a deadlock waiting for the right interleaving, found by any test that
//!   takes the path once. Two locks of one rank are never held together (two QPs, two
//!   CQs). `try_lock` cannot deadlock, so it is not checked, but what it takes counts as
//!   held. Release builds keep no record: a guard is the standard guard, nothing more.
//! - The loom models of `device::handoff` use loom's own locks, so the registry there is
//!   the one lock outside this type (its rank is listed in the crate docs all the same).

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{
    Mutex, MutexGuard, RwLock as StdRwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError,
};

macro_rules! ranks {
    ($($name:ident = $n:literal, $purpose:literal;)*) => {
        /// A lock's place in the crate's lock order: a thread takes locks in increasing
        /// rank only. The crate docs list every rank with the locks that have it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(u8)]
        // The loopback driver's ranks serve the tests only.
        #[cfg_attr(not(test), allow(dead_code))]
        pub(crate) enum Rank {
            $(
                #[doc = $purpose]
                $name = $n,
            )*
        }

        impl Rank {
            /// Every rank, in order.
            #[cfg(test)]
            pub(crate) const ALL: &[Rank] = &[$(Rank::$name),*];

            /// What the locks of this rank guard.
            pub(crate) fn purpose(self) -> &'static str {
                match self {
                    $(Rank::$name => $purpose,)*
                }
            }
        }
    };
}

ranks! {
    CmCores = 2, "the registry of per-device CM agent hosts (`cm`'s `CORES`)";
    CmAgent = 4, "a CM agent host's state: its agent, listeners and IDs by communication ID";
    CmGate = 6, "the CM agent host's inline-service gate (only `try_lock`ed)";
    CmId = 8, "an rdma_cm ID's state";
    CmIdChannel = 10, "the event channel an rdma_cm ID reports to";
    CmDropped = 12, "the CM agent host's IDs dropped while it was busy";
    CmEvents = 14, "an rdma_cm event channel's queue";
    Sweeping = 20, "the timer pass's own mark (only `try_lock`ed)";
    Rx = 22, "a device's receive state (a drain; pollers only `try_lock` it)";
    QpTable = 24, "a device's QP table";
    Paths = 26, "a device's round-trip records per peer address";
    Qp = 30, "one QP's engine";
    QpError = 31, "the error a QP's last flush completed with";
    LocalRoutes = 40, "the same-host path's routes, QPN to peer process";
    ShareCtl = 42, "the device-sharing control state: role, slots, members, QPN draw";
    ShareRoutes = 44, "the device owner's forwarding table, QPN to member socket";
    ShareCm = 46, "the device owner's CM routes: listeners and communication IDs";
    ShareHeldReqs = 48, "the REQs the owner remembers holding for a listener";
    ShareWaitingReqs = 50, "the REQs the owner holds until their listener comes";
    ShareProbes = 52, "the steering probes in flight";
    LocalConns = 54, "the same-host path's ring connections, by peer process";
    LocalRing = 56, "one same-host ring's producer end";
    LocalIncoming = 58, "the same-host rings a process receives on";
    LocalPlacements = 60, "the same-host placement grants a process holds from its peers";
    PlaceIssued = 62, "the placement grants a process has issued";
    PlaceFree = 64, "the free placement-grant slots";
    Cq = 70, "one CQ's state";
    CqReady = 72, "a completion channel's list of CQs with events";
    CqPollers = 74, "the devices a completion channel's CQs poll for progress";
    AsyncSubs = 76, "a device's async-event subscribers";
    AsyncQueue = 78, "one async-event queue";
    Timers = 80, "a device's timer queue";
    Deferred = 82, "a device's deferred-ACK batch";
    Retired = 84, "the counters of destroyed QPs";
    Groups = 86, "a device's multicast groups";
    Faults = 90, "the fault injector's held packets";
    Pcap = 92, "the capture file";
    TxConns = 94, "the send path's connected sockets, by destination";
    TxConn = 96, "one connected socket, for its send call";
    Learner = 98, "the send path's queue to its IPv4-ID learner";
    UdpHandbacks = 100, "the UDP driver's sockets handed back by the owner";
    UdpKeep = 102, "the UDP driver's sockets kept open for a forked child";
    UdpGroups = 104, "the UDP driver's multicast sockets";
    Loopback = 106, "the loopback fabric's queues (tests)";
    LoopbackIdent = 108, "the loopback driver's IPv4 IDs (tests)";
    ResFields = 110, "a published object's `res show` fields";
    ResLists = 112, "the lists of objects `res show` publishes";
    VerbsOwned = 120, "a QP's buffers posted by value";
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

/// A mutex with a [`Rank`]; see the module docs.
pub(crate) struct Lock<T: ?Sized> {
    rank: Rank,
    inner: Mutex<T>,
}

/// The guard of a [`Lock`].
pub(crate) struct Guard<'a, T: ?Sized> {
    inner: MutexGuard<'a, T>,
    _held: Held,
}

impl<T> Lock<T> {
    /// A lock of `rank` around `value`.
    pub(crate) const fn new(rank: Rank, value: T) -> Self {
        Self {
            rank,
            inner: Mutex::new(value),
        }
    }
}

impl<T: ?Sized> Lock<T> {
    fn addr(&self) -> usize {
        std::ptr::from_ref(&self.inner).cast::<u8>() as usize
    }

    /// Takes the lock, waiting for it; a poisoned lock is taken as it is.
    #[inline]
    pub(crate) fn lock(&self) -> Guard<'_, T> {
        Held::check(self.rank);
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        Guard {
            inner,
            _held: Held::take(self.rank, self.addr()),
        }
    }

    /// Takes the lock if no one holds it.
    #[inline]
    pub(crate) fn try_lock(&self) -> Option<Guard<'_, T>> {
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
    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.inner.get_mut().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T: ?Sized> fmt::Debug for Lock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Lock({:?})", self.rank)
    }
}

impl<T: ?Sized> Deref for Guard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T: ?Sized> DerefMut for Guard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

/// A readers-writer lock with a [`Rank`]; see the module docs. Readers count as holders
/// for the order: a thread never takes a read lock under another lock of its rank or
/// above, for a writer may be waiting between them.
pub(crate) struct RwLock<T: ?Sized> {
    rank: Rank,
    inner: StdRwLock<T>,
}

/// A read guard of a [`RwLock`].
pub(crate) struct ReadGuard<'a, T: ?Sized> {
    inner: RwLockReadGuard<'a, T>,
    _held: Held,
}

/// A write guard of a [`RwLock`].
pub(crate) struct WriteGuard<'a, T: ?Sized> {
    inner: RwLockWriteGuard<'a, T>,
    _held: Held,
}

impl<T> RwLock<T> {
    /// A lock of `rank` around `value`.
    pub(crate) const fn new(rank: Rank, value: T) -> Self {
        Self {
            rank,
            inner: StdRwLock::new(value),
        }
    }
}

impl<T: ?Sized> RwLock<T> {
    fn addr(&self) -> usize {
        std::ptr::from_ref(&self.inner).cast::<u8>() as usize
    }

    /// Takes the lock to read, waiting for a writer; poisoning is ignored.
    #[inline]
    pub(crate) fn read(&self) -> ReadGuard<'_, T> {
        Held::check(self.rank);
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        ReadGuard {
            inner,
            _held: Held::take(self.rank, self.addr()),
        }
    }

    /// Takes the lock to write, waiting for readers and writers; poisoning is ignored.
    #[inline]
    pub(crate) fn write(&self) -> WriteGuard<'_, T> {
        Held::check(self.rank);
        let inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        WriteGuard {
            inner,
            _held: Held::take(self.rank, self.addr()),
        }
    }
}

impl<T: ?Sized> fmt::Debug for RwLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RwLock({:?})", self.rank)
    }
}

impl<T: ?Sized> Deref for ReadGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T: ?Sized> Deref for WriteGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T: ?Sized> DerefMut for WriteGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
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

    #[cfg(debug_assertions)]
    #[test]
    fn a_lock_taken_out_of_order_panics_naming_both() {
        let outer = Lock::new(Rank::Cq, ());
        let inner = Lock::new(Rank::Qp, ());
        let r = std::panic::catch_unwind(|| {
            let _g = outer.lock();
            let _h = inner.lock();
        });
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
        let r = std::panic::catch_unwind(|| {
            let _g = a.lock();
            let _h = b.lock();
        });
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
