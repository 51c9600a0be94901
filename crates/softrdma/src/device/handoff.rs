//! The device's two hand-offs whose correctness rests on an argument about memory ordering
//! and locks rather than on one lock held throughout, each written once and instantiated
//! twice: over std's types for the device, and over `loom`'s in the tests, which explore
//! every interleaving of the same code.
//!
//! - [`WakeGate`]: a thread that arms a timer (or defers ACKs) and the progress thread that
//!   is about to sleep. Either the arming thread sees the sleeper's wake-up time and wakes
//!   it, or the sleeper sees the new deadline (or the deferred ACKs) and sleeps less.
//! - [`Registry`]: the region table's keys against in-flight accesses. An access runs under
//!   the table's read lock, so a deregistration (the write lock) returns only after every
//!   access to the region has ended, and the application may then free raw memory; a lent
//!   payload holds its own reference, so an owned buffer outlives its deregistration until
//!   the send that took it is done.

/// Defines the wake gate over the given atomic types (see the module docs).
macro_rules! wake_gate {
    ($name:ident, $u64:ty, $bool:ty, $fence:path) => {
        /// The progress thread's wake-up time against the deadlines other threads arm. Each
        /// side writes its part, then a SeqCst fence, then reads the other's part: the two
        /// fences are ordered one way or the other, and whichever comes second has its
        /// read see the first side's write (the store-buffer pattern; SeqCst accesses
        /// without the fences would do on std, but the fences say it plainly and are what
        /// `loom` can check).
        pub(crate) struct $name {
            /// The earliest deadline armed since the last timer pass (nanoseconds on the
            /// device clock; `u64::MAX`: none).
            next_timer: $u64,
            /// When the progress thread will wake by itself (`u64::MAX`: never).
            sleep_until: $u64,
            /// Busy pollers run the timers: arming one need not wake the progress thread.
            app_polling: $bool,
            /// ACKs wait in the deferred batch for the progress thread to send.
            deferred: $bool,
        }

        impl $name {
            /// Nothing armed, nobody asleep.
            pub(crate) fn new() -> Self {
                Self {
                    next_timer: <$u64>::new(u64::MAX),
                    sleep_until: <$u64>::new(u64::MAX),
                    app_polling: <$bool>::new(false),
                    deferred: <$bool>::new(false),
                }
            }

            /// Records a deadline; true if the caller must wake the progress thread (it
            /// would otherwise sleep past it). The deadline is published before the wake-up
            /// time is read; [`Self::publish_sleep`] does the opposite.
            pub(crate) fn arm(&self, deadline: u64) -> bool {
                use std::sync::atomic::Ordering::SeqCst;
                self.next_timer.fetch_min(deadline, SeqCst);
                $fence(SeqCst);
                if self.app_polling.load(SeqCst) {
                    return false;
                }
                if deadline < self.sleep_until.load(SeqCst) {
                    self.sleep_until.store(deadline, SeqCst);
                    return true;
                }
                false
            }

            /// The progress thread publishes when it plans to wake (`planned`, worked out
            /// from [`Self::next_timer`] read before), then reads what was armed meanwhile:
            /// returns when it must wake, and whether deferred ACKs wait (it must then wake
            /// within a poller's grace).
            pub(crate) fn publish_sleep(&self, planned: u64) -> (u64, bool) {
                use std::sync::atomic::Ordering::SeqCst;
                self.sleep_until.store(planned, SeqCst);
                $fence(SeqCst);
                let armed = self.next_timer.load(SeqCst);
                (planned.min(armed), self.deferred.load(SeqCst))
            }

            /// The earliest deadline armed (a cheap read for busy pollers).
            pub(crate) fn next_timer(&self) -> u64 {
                self.next_timer.load(std::sync::atomic::Ordering::SeqCst)
            }

            /// A timer pass starts: deadlines armed from now on are recorded beside what
            /// the pass finds.
            pub(crate) fn start_pass(&self) {
                self.next_timer
                    .store(u64::MAX, std::sync::atomic::Ordering::SeqCst);
            }

            /// Whether busy pollers run the timers.
            pub(crate) fn set_app_polling(&self, on: bool) {
                self.app_polling
                    .store(on, std::sync::atomic::Ordering::SeqCst);
            }

            /// ACKs were deferred; the caller then arms the grace deadline ([`Self::arm`]).
            pub(crate) fn set_deferred(&self) {
                self.deferred
                    .store(true, std::sync::atomic::Ordering::SeqCst);
            }

            /// Whether ACKs wait; a sender that takes them clears it with `take`.
            pub(crate) fn deferred(&self, take: bool) -> bool {
                use std::sync::atomic::Ordering::SeqCst;
                if take {
                    self.deferred.swap(false, SeqCst)
                } else {
                    self.deferred.load(SeqCst)
                }
            }
        }
    };
}

/// Defines the registry over the given `Arc` and `RwLock` (see the module docs).
macro_rules! registry {
    ($name:ident, $arc:ident, $rwlock:ident) => {
        /// Values by random key, reached only under the read lock or through a reference
        /// taken under it.
        pub(crate) struct $name<T> {
            map: $rwlock<softrdma_proto::endpoint::check::KeyMap<$arc<T>>>,
        }

        impl<T> $name<T> {
            /// An empty registry.
            pub(crate) fn new() -> Self {
                Self {
                    map: $rwlock::new(Default::default()),
                }
            }

            /// Adds `make(key)` under the first key that `pick` draws and that is free.
            pub(crate) fn insert(
                &self,
                mut pick: impl FnMut() -> u32,
                make: impl FnOnce(u32) -> T,
            ) -> $arc<T> {
                let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
                let key = loop {
                    let k = pick();
                    if !map.contains_key(&k) {
                        break k;
                    }
                };
                let v = $arc::new(make(key));
                map.insert(key, v.clone());
                v
            }

            /// Puts `make(key)` in place of `key`'s value, under the same key; `None` (and
            /// nothing made) if `key` is not there. Like a removal, it returns once no
            /// access under the read lock still runs on the old value.
            pub(crate) fn replace(&self, key: u32, make: impl FnOnce(u32) -> T) -> Option<$arc<T>> {
                let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
                let slot = map.get_mut(&key)?;
                let v = $arc::new(make(key));
                *slot = v.clone();
                Some(v)
            }

            /// Removes `key`. Returns once no access under the read lock still runs on it.
            pub(crate) fn remove(&self, key: u32) -> Option<$arc<T>> {
                self.map
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&key)
            }

            /// What `f` makes of every value, under the read lock (no reference to a
            /// value outlives the call, so a removal that follows finds it unshared).
            pub(crate) fn collect<R>(&self, f: impl Fn(&T) -> R) -> Vec<R> {
                let map = self.map.read().unwrap_or_else(|e| e.into_inner());
                map.values().map(|v| f(v)).collect()
            }

            /// A reference to `key`'s value if `keep` accepts it: it outlives a removal.
            pub(crate) fn lend(&self, key: u32, keep: impl Fn(&T) -> bool) -> Option<$arc<T>> {
                let map = self.map.read().unwrap_or_else(|e| e.into_inner());
                map.get(&key).filter(|v| keep(v)).cloned()
            }

            /// Runs `f` on `key`'s value under the read lock: a removal waits for it.
            pub(crate) fn with<R>(&self, key: u32, f: impl FnOnce(&T) -> R) -> Option<R> {
                let map = self.map.read().unwrap_or_else(|e| e.into_inner());
                map.get(&key).map(|v| f(v))
            }
        }
    };
}

wake_gate!(
    WakeGate,
    std::sync::atomic::AtomicU64,
    std::sync::atomic::AtomicBool,
    std::sync::atomic::fence
);
registry!(Registry, Arc, RwLock);
use std::sync::{Arc, RwLock};

#[cfg(test)]
mod loom_models {
    // The device uses every method; these models, only the ones a hand-off needs.
    #![allow(dead_code)]
    use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use loom::sync::{Arc, RwLock};

    wake_gate!(
        LoomWakeGate,
        loom::sync::atomic::AtomicU64,
        loom::sync::atomic::AtomicBool,
        loom::sync::atomic::fence
    );
    registry!(LoomRegistry, Arc, RwLock);

    /// A thread arms a deadline while the progress thread, awake since its last plan (to
    /// wake at 3), decides how long to sleep next: in every interleaving the arming thread
    /// wakes it or it sleeps no later than the deadline. (An arming thread that reads the old
    /// plan, 3, rightly does not wake it: the sleeper reads the deadline after publishing.)
    #[test]
    fn an_armed_timer_is_never_slept_through() {
        loom::model(|| {
            let gate = Arc::new(LoomWakeGate::new());
            gate.publish_sleep(3);
            let g = gate.clone();
            let armer = loom::thread::spawn(move || g.arm(5));
            // The sleeper's own plan: its next timer at 10, or what it read was armed.
            let planned = gate.next_timer().min(10);
            let (wake_at, _) = gate.publish_sleep(planned);
            let woken = armer.join().unwrap();
            assert!(
                woken || wake_at <= 5,
                "slept until {wake_at} past a deadline at 5"
            );
        });
    }

    /// A poller defers ACKs and arms its grace deadline while the progress thread decides
    /// how long to sleep: it is woken, or it sees the ACKs or the deadline.
    #[test]
    fn deferred_acks_are_never_left_behind() {
        loom::model(|| {
            let gate = Arc::new(LoomWakeGate::new());
            gate.publish_sleep(3);
            let g = gate.clone();
            let poller = loom::thread::spawn(move || {
                g.set_deferred();
                g.arm(200)
            });
            let (wake_at, deferred) = gate.publish_sleep(u64::MAX);
            let woken = poller.join().unwrap();
            assert!(woken || deferred || wake_at <= 200);
        });
    }

    /// A region whose application memory is freed as soon as its deregistration returns
    /// (a raw region): no access under the table's read lock ever touches it after that.
    #[test]
    fn deregistration_waits_for_an_access_in_flight() {
        loom::model(|| {
            let table = Arc::new(LoomRegistry::<u32>::new());
            let freed = Arc::new(AtomicBool::new(false));
            table.insert(|| 7, |_| 0);
            let (t, f) = (table.clone(), freed.clone());
            let access = loom::thread::spawn(move || {
                t.with(7, |_| {
                    assert!(!f.load(Ordering::SeqCst), "an access ran on freed memory");
                })
            });
            table.remove(7);
            freed.store(true, Ordering::SeqCst);
            access.join().unwrap();
        });
    }

    /// What a lent payload's region drops when the last reference goes.
    struct Owned(Arc<AtomicU64>);

    impl Drop for Owned {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A send that took a lent payload keeps the owned buffer alive across a concurrent
    /// deregistration, which frees it once, after the send is done.
    #[test]
    fn a_lent_buffer_outlives_its_deregistration() {
        loom::model(|| {
            let drops = Arc::new(AtomicU64::new(0));
            let table = Arc::new(LoomRegistry::<Owned>::new());
            let d = drops.clone();
            table.insert(|| 9, move |_| Owned(d));
            let (t, d) = (table.clone(), drops.clone());
            let send = loom::thread::spawn(move || {
                if let Some(lent) = t.lend(9, |_| true) {
                    assert_eq!(
                        d.load(Ordering::SeqCst),
                        0,
                        "the buffer was freed under a send"
                    );
                    drop(lent);
                }
            });
            drop(table.remove(9));
            send.join().unwrap();
            assert_eq!(drops.load(Ordering::SeqCst), 1, "freed exactly once");
        });
    }
}
