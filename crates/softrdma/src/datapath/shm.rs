//! The same-host path's ring: a single-producer single-consumer ring of whole RoCE
//! packets in a sealed memfd that two processes of one user map, with an eventfd for the
//! consumer's wake-up. One process (the producer) creates it and passes both descriptors
//! to the other over a connection that checked the peer's uid (see `device::local`); the
//! kernel's UDP stack is then not involved between them.
//!
//! The ring carries what the UDP path would: each entry is one packet exactly as it would
//! leave (BTH to ICRC) and the UDP source port it would leave from. The consumer copies
//! each entry out of the shared memory first and then hands the copy to the normal
//! receive path, which checks every field as it checks a datagram from the network (the
//! ICRC included). So the responder, which owns the memory a packet targets, does every
//! key, range and access check itself: a producer can write nothing but ring entries.
//!
//! Layout (little-endian, every offset fixed): a 256-byte header of three cache lines
//! (magic and geometry; the producer's `head`; the consumer's `tail`, and its `armed`
//! word), then [`SLOTS`] slots of [`SLOT_SIZE`] bytes, each a `len: u32`, a `sport: u16`,
//! two bytes of padding, and the packet. `head` and `tail` count entries for ever
//! (wrapping `u64`s); slot `n % SLOTS` holds entry `n`.
//!
//! After the slots come [`ACKS`] ACK boxes of a cache line each: a responder whose
//! requester reads this ring leaves its positive ACKs there instead of sending ACK packets
//! (see [`Producer::ack`]): a sequence word (odd while it is written), the requester's QPN
//! (with bit 31 set; 0 is an empty box), the PSN acknowledged, and the number of entries
//! written before it, which the consumer must have read first, so that an ACK is never
//! applied ahead of the responses sent before it. `ack_gen`, beside `head`, counts the
//! boxes' writes, so that a consumer looks at the boxes only when one changed.
//!
//! Trust: each side keeps its own index in private memory and only publishes it, so the
//! other side's writes to the header can make it skip or repeat entries, never read or
//! write outside the mapping. The consumer also refuses a memfd whose size is not the
//! layout's or that is not sealed against shrinking (a shrink would turn its reads into
//! SIGBUS). A hostile producer can thus send garbage packets, as any UDP sender can, and
//! ACKs for any of the consumer's QPNs, as an ACK packet could: the QP checks an ACK's PSN
//! against what it has outstanding either way. Nothing more.
//!
//! Threads: a [`Producer`] is used under its owner's lock (one writer at a time); a
//! [`Consumer`] by the one thread that holds the device's receive state.
//!
//! Wake-ups: the consumer's progress thread, before it sleeps, sets `armed` and looks at
//! the ring once more; a producer, after publishing, clears `armed` and writes the
//! eventfd if it was set. Both sides fence between their store and their load, so one of
//! them always sees the other: a packet is never left with its consumer asleep. While an
//! application thread busy-polls, `armed` stays clear and a send costs no system call.

use super::shared_mem::{Map, ShmError, last_os, map_peers, sealed_memfd};
use super::socket::RecvBatch;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{Ordering, fence};

/// Entries in a ring: more than the packets an RC window keeps in flight to one peer
/// process, so a sender outruns its receiver only when the receiver stalls.
pub(crate) const SLOTS: u32 = 512;
/// Bytes per slot: an entry header and the largest packet (a 4096-byte payload and every
/// header a RoCE packet can carry, with room to spare), a multiple of a cache line.
pub(crate) const SLOT_SIZE: u32 = 4352;
/// An entry's header: `len: u32`, `sport: u16`, padding.
const ENTRY: usize = 8;
/// The longest packet an entry holds.
pub(crate) const MAX_PACKET: usize = SLOT_SIZE as usize - ENTRY;
/// The header's size; the slots start here.
const HEADER: usize = 256;
const MAGIC: u64 = u64::from_le_bytes(*b"SRDMRING");
const HEAD: usize = 64;
/// The producer's count of ACK box writes, and the box it wrote last, on `head`'s cache
/// line: a consumer one write behind looks at that box alone.
const ACK_GEN: usize = 72;
const ACK_LAST: usize = 80;
const TAIL: usize = 128;
const ARMED: usize = 192;
/// ACK boxes: enough for the RC QPs of one process that a peer process answers, each in
/// the box its QPN hashes to (one that finds its box taken sends packets, as before).
pub(crate) const ACKS: usize = 64;
/// An ACK box's size, and where the boxes start.
const ACK_BOX: usize = 64;
const ACK_AREA: usize = HEADER + SLOTS as usize * SLOT_SIZE as usize;
/// A box's words: sequence, QPN (bit 31 set), PSN, and the entries written before it.
const BOX_SEQ: usize = 0;
const BOX_QPN: usize = 4;
const BOX_PSN: usize = 8;
const BOX_AT: usize = 16;

/// The memfd's size.
pub(crate) const fn ring_bytes() -> usize {
    ACK_AREA + ACKS * ACK_BOX
}

/// The box QPN `qpn`'s ACKs go in (its index).
fn ack_box(qpn: u32) -> usize {
    (qpn.wrapping_mul(0x9E37_79B1) >> 26) as usize % ACKS
}

/// Where box `i` lies in the mapping.
const fn box_at(i: usize) -> usize {
    ACK_AREA + i * ACK_BOX
}

/// Slot `n % SLOTS` of a ring's mapping.
fn slot(map: &Map, n: u64) -> *mut u8 {
    let i = (n % u64::from(SLOTS)) as usize;
    debug_assert!(HEADER + (i + 1) * SLOT_SIZE as usize <= map.len);
    // SAFETY: `i < SLOTS`, so the slot lies inside a ring's mapping.
    unsafe { map.ptr.add(HEADER + i * SLOT_SIZE as usize) }
}

/// A new eventfd, non-blocking.
fn eventfd() -> Result<OwnedFd, ShmError> {
    crate::eventfd::new(true).map_err(|source| ShmError::Io {
        what: "eventfd",
        source,
    })
}

/// The producing side of a ring.
pub(crate) struct Producer {
    map: Map,
    /// The next entry to write (private: the consumer cannot move it).
    head: u64,
    /// The consumer's `tail` when last read: read again only when the ring looks full,
    /// since each read is a cache miss on a line the consumer writes.
    tail: u64,
    /// The ACK box writes so far.
    ack_gen: u64,
    memfd: OwnedFd,
    wake: OwnedFd,
}

impl Producer {
    /// A new ring, with its memfd sealed at its size, and its consumer's eventfd.
    pub(crate) fn create() -> Result<Self, ShmError> {
        let memfd = sealed_memfd(c"softrdma-ring", ring_bytes())?;
        let map = Map::new(&memfd, ring_bytes())?;
        map.word64(0).store(MAGIC, Ordering::Relaxed);
        Ok(Self {
            map,
            head: 0,
            tail: 0,
            ack_gen: 0,
            memfd,
            wake: eventfd()?,
        })
    }

    /// The descriptors to pass to the consumer: the memfd and the eventfd.
    pub(crate) fn fds(&self) -> [RawFd; 2] {
        [self.memfd.as_raw_fd(), self.wake.as_raw_fd()]
    }

    /// Whether there is room for another entry.
    pub(crate) fn has_room(&mut self) -> bool {
        if self.head.wrapping_sub(self.tail) < u64::from(SLOTS) {
            return true;
        }
        self.tail = self.map.word64(TAIL).load(Ordering::Acquire);
        self.head.wrapping_sub(self.tail) < u64::from(SLOTS)
    }

    /// Writes one packet, given as its pieces in order, that leaves from UDP port
    /// `sport`, and publishes it. False if the ring is full or the packet too long.
    pub(crate) fn push(&mut self, pieces: &[(*const u8, usize)], sport: u16) -> bool {
        let len: usize = pieces.iter().map(|p| p.1).sum();
        if len > MAX_PACKET || !self.has_room() {
            return false;
        }
        let slot = slot(&self.map, self.head);
        let mut hdr = [0u8; ENTRY];
        hdr[..4].copy_from_slice(&(len as u32).to_le_bytes());
        hdr[4..6].copy_from_slice(&sport.to_le_bytes());
        // SAFETY: the slot holds ENTRY + MAX_PACKET bytes and `len <= MAX_PACKET`; each
        // piece is valid for its length (the send batch's contract); the consumer reads
        // this slot only after `head` is published below.
        unsafe {
            std::ptr::copy_nonoverlapping(hdr.as_ptr(), slot, ENTRY);
            let mut at = ENTRY;
            for &(p, n) in pieces.iter().filter(|p| p.1 > 0) {
                std::ptr::copy_nonoverlapping(p, slot.add(at), n);
                at += n;
            }
        }
        self.head = self.head.wrapping_add(1);
        self.map.word64(HEAD).store(self.head, Ordering::Release);
        true
    }

    /// Leaves a positive ACK of `psn` for the consumer's QP `qpn` in its box, behind
    /// every entry written so far; the caller then wakes the consumer as after a push.
    /// False if the box is another QP's (the ACK goes as a packet).
    pub(crate) fn ack(&mut self, qpn: u32, psn: u32) -> bool {
        let i = ack_box(qpn);
        let b = box_at(i);
        let tag = qpn | 1 << 31;
        let owner = self.map.word32(b + BOX_QPN);
        let held = owner.load(Ordering::Relaxed);
        if held != 0 && held != tag {
            return false;
        }
        let seq = self.map.word32(b + BOX_SEQ);
        let s = seq.load(Ordering::Relaxed);
        // A seqlock: odd while written, so a consumer never applies a torn ACK.
        seq.store(s.wrapping_add(1) | 1, Ordering::Relaxed);
        fence(Ordering::Release);
        owner.store(tag, Ordering::Relaxed);
        self.map.word32(b + BOX_PSN).store(psn, Ordering::Relaxed);
        self.map
            .word64(b + BOX_AT)
            .store(self.head, Ordering::Relaxed);
        seq.store((s | 1).wrapping_add(1), Ordering::Release);
        self.ack_gen = self.ack_gen.wrapping_add(1);
        self.map.word32(ACK_LAST).store(i as u32, Ordering::Relaxed);
        self.map
            .word64(ACK_GEN)
            .store(self.ack_gen, Ordering::Release);
        true
    }

    /// Publishes `head` as it stands, whatever was written: a hostile producer, for tests.
    #[cfg(test)]
    pub(crate) fn publish_raw(&self, head: u64) {
        self.map.word64(HEAD).store(head, Ordering::Release);
    }

    /// After publishing: wakes the consumer if it sleeps (see the module docs).
    pub(crate) fn wake(&self) {
        fence(Ordering::SeqCst);
        let armed = self.map.word32(ARMED);
        if armed.load(Ordering::Relaxed) != 0 && armed.swap(0, Ordering::Relaxed) != 0 {
            crate::eventfd::signal(self.wake.as_raw_fd());
        }
    }
}

/// The consuming side of a ring a peer created.
pub(crate) struct Consumer {
    map: Map,
    /// The next entry to read (private: the producer cannot move it).
    tail: u64,
    wake: OwnedFd,
    /// The address every entry comes from (the device's own: both ends share it).
    from: IpAddr,
    /// The producer's `ack_gen` when every box was last read, and each box's sequence
    /// word then.
    ack_gen: u64,
    ack_seen: [u32; ACKS],
}

impl Consumer {
    /// Maps the ring a producer passed (`memfd`, `wake`) after checking its size and
    /// seals; its packets count as coming from `from`.
    pub(crate) fn open(memfd: OwnedFd, wake: OwnedFd, from: IpAddr) -> Result<Self, ShmError> {
        // The eventfd is read by the progress thread, which must never block on it,
        // whatever the peer passed.
        // SAFETY: plain fcntls on a descriptor we hold.
        unsafe {
            let fl = libc::fcntl(wake.as_raw_fd(), libc::F_GETFL);
            if fl < 0 || libc::fcntl(wake.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
                return Err(last_os("the ring's eventfd"));
            }
        }
        let map = map_peers(&memfd, ring_bytes())?;
        // It starts wherever the producer is (a fresh ring: 0).
        let tail = map.word64(TAIL).load(Ordering::Acquire);
        Ok(Self {
            map,
            tail,
            wake,
            from,
            ack_gen: 0,
            ack_seen: [0; ACKS],
        })
    }

    /// The descriptor that becomes readable when the producer wakes this consumer.
    pub(crate) fn wake_fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }

    /// Empties the eventfd after a wake-up.
    pub(crate) fn clear_wake(&self) {
        // Non-blocking: an empty counter reads nothing.
        crate::eventfd::drain(self.wake.as_raw_fd());
    }

    /// Whether an entry or an ACK waits.
    pub(crate) fn pending(&self) -> bool {
        self.map.word64(HEAD).load(Ordering::Acquire) != self.tail
            || self.map.word64(ACK_GEN).load(Ordering::Acquire) != self.ack_gen
    }

    /// Adds to `out` the ACKs left in the boxes since the last call, as (QPN, PSN), each
    /// once the entries written before it were read (a call after [`Consumer::recv`]
    /// finds them). One not yet due, or being written, is looked at again next time.
    pub(crate) fn acks(&mut self, out: &mut Vec<(u32, u32)>) {
        let generation = self.map.word64(ACK_GEN).load(Ordering::Acquire);
        if generation == self.ack_gen {
            return;
        }
        let head = self.map.word64(HEAD).load(Ordering::Acquire);
        // One write since the last look (a ping-pong's every turn): only its box changed,
        // if the producer says true; one that lies only delays its own ACKs, whose
        // requesters then retry and are answered again. That box alone is read, not all
        // [`ACKS`] of them: this runs on every turn of a ping-pong.
        let last = self.map.word32(ACK_LAST).load(Ordering::Relaxed) as usize;
        let all = if generation == self.ack_gen.wrapping_add(1) && last < ACKS {
            self.ack_box_read(last, head, out)
        } else {
            // Every box is read, whatever the ones before it said.
            let mut all = true;
            for i in 0..ACKS {
                all &= self.ack_box_read(i, head, out);
            }
            all
        };
        if all {
            self.ack_gen = generation;
        }
    }

    /// Reads ACK box `i` if it changed since it was last read, adding its ACK to `out` if
    /// it is due (`head`: the producer's published head). False if it must be looked at
    /// again: it is being written, or names entries not yet read.
    fn ack_box_read(&mut self, i: usize, head: u64, out: &mut Vec<(u32, u32)>) -> bool {
        let b = box_at(i);
        let seq = self.map.word32(b + BOX_SEQ);
        let s1 = seq.load(Ordering::Acquire);
        if s1 == self.ack_seen[i] {
            return true;
        }
        let tag = self.map.word32(b + BOX_QPN).load(Ordering::Relaxed);
        let psn = self.map.word32(b + BOX_PSN).load(Ordering::Relaxed);
        let at = self.map.word64(b + BOX_AT).load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        if s1 & 1 != 0 || seq.load(Ordering::Relaxed) != s1 {
            return false;
        }
        // Due once the entries before it are read; one that names entries the producer
        // never published is garbage, and skipped like a malformed entry.
        let early = at.wrapping_sub(self.tail) as i64 > 0;
        if early && at.wrapping_sub(head) as i64 <= 0 {
            return false;
        }
        self.ack_seen[i] = s1;
        if !early && tag & 1 << 31 != 0 {
            out.push((tag & 0xFF_FFFF, psn & 0xFF_FFFF));
        }
        true
    }

    /// Before the progress thread sleeps: asks for a wake-up, and says whether an entry
    /// already waits (then it must not sleep).
    pub(crate) fn arm(&self) -> bool {
        self.map.word32(ARMED).store(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        self.pending()
    }

    /// Copies up to `want` waiting entries into `batch` from slot `first` on; how many
    /// slots it filled, and how many entries were malformed (counted, and skipped).
    pub(crate) fn recv(
        &mut self,
        batch: &mut RecvBatch,
        first: usize,
        want: usize,
    ) -> Result<(usize, usize), ShmError> {
        let head = self.map.word64(HEAD).load(Ordering::Acquire);
        let avail = head.wrapping_sub(self.tail);
        if avail > u64::from(SLOTS) {
            return Err(ShmError::Index {
                head,
                tail: self.tail,
            });
        }
        let n = (avail as usize).min(want);
        let (mut got, mut bad) = (0, 0);
        for _ in 0..n {
            let slot = slot(&self.map, self.tail);
            let mut hdr = [0u8; ENTRY];
            // SAFETY: the slot lies in the mapping; a copy, since the producer may be
            // writing it (a hostile one; a correct one published it and is done).
            unsafe { std::ptr::copy_nonoverlapping(slot, hdr.as_mut_ptr(), ENTRY) };
            let len = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]) as usize;
            let sport = u16::from_le_bytes([hdr[4], hdr[5]]);
            if len > MAX_PACKET {
                bad += 1;
            } else {
                let from = SocketAddr::new(self.from, sport);
                batch.fill(first + got, from, |buf| {
                    // SAFETY: `len <= MAX_PACKET`, so the bytes lie in the slot, and `buf`
                    // (a receive slot) is longer than any packet; copied out as above.
                    unsafe {
                        std::ptr::copy_nonoverlapping(slot.add(ENTRY), buf.as_mut_ptr(), len)
                    };
                    len
                });
                got += 1;
            }
            self.tail = self.tail.wrapping_add(1);
        }
        if n > 0 {
            self.map.word64(TAIL).store(self.tail, Ordering::Release);
        }
        Ok((got, bad))
    }

    /// The producer's view, for tests that play a hostile one.
    #[cfg(test)]
    fn header(&self, at: usize) -> &std::sync::atomic::AtomicU64 {
        self.map.word64(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::os::fd::FromRawFd;

    fn pair() -> (Producer, Consumer) {
        let p = Producer::create().unwrap();
        let dup = |fd: RawFd| {
            // SAFETY: dup of a live descriptor.
            unsafe { OwnedFd::from_raw_fd(libc::dup(fd)) }
        };
        let [m, w] = p.fds();
        let c = Consumer::open(dup(m), dup(w), "127.0.0.1".parse().unwrap()).unwrap();
        (p, c)
    }

    fn push(p: &mut Producer, data: &[u8], sport: u16) -> bool {
        p.push(&[(data.as_ptr(), data.len())], sport)
    }

    #[test]
    fn packets_arrive_in_order_with_their_port() {
        let (mut p, mut c) = pair();
        let mut b = RecvBatch::default();
        for round in 0..3u32 {
            for i in 0..SLOTS {
                assert!(push(&mut p, &(round * SLOTS + i).to_le_bytes(), i as u16));
            }
            assert!(!push(&mut p, b"full", 1), "a full ring refuses");
            let mut seen = 0u32;
            while seen < SLOTS {
                let (n, bad) = c.recv(&mut b, 0, 16).unwrap();
                assert_eq!(bad, 0);
                for k in 0..n {
                    let (d, from, _, _) = b.get(k);
                    assert_eq!(d, (round * SLOTS + seen).to_le_bytes());
                    assert_eq!(from.unwrap().port(), seen as u16);
                    seen += 1;
                }
            }
            assert!(!c.pending());
        }
    }

    #[test]
    fn an_armed_consumer_is_woken_once() {
        let (mut p, c) = pair();
        assert!(!c.arm());
        assert!(push(&mut p, b"x", 1));
        p.wake();
        p.wake();
        assert_eq!(crate::eventfd::drain(c.wake_fd()), 1);
        assert!(c.arm(), "an entry waits: the consumer must not sleep");
    }

    #[test]
    fn acks_arrive_once_and_never_ahead_of_the_packets_before_them() {
        let (mut p, mut c) = pair();
        let mut b = RecvBatch::default();
        let mut acks = Vec::new();
        let q = 0x12_3456;
        assert!(push(&mut p, b"read response", 7));
        assert!(p.ack(q, 5));
        assert!(c.pending());
        c.acks(&mut acks);
        assert!(acks.is_empty(), "applied ahead of the entry before it");
        assert!(c.pending(), "the ACK still waits");
        assert_eq!(c.recv(&mut b, 0, 16).unwrap(), (1, 0));
        c.acks(&mut acks);
        assert_eq!(acks, [(q, 5)]);
        acks.clear();
        c.acks(&mut acks);
        assert!(acks.is_empty(), "an ACK is handed on once");
        assert!(!c.pending());
        // Later ACKs of one QP replace each other: the newest is what counts.
        assert!(p.ack(q, 6) && p.ack(q, 7));
        c.acks(&mut acks);
        assert_eq!(acks, [(q, 7)]);
        // Another QP whose box is taken sends packets instead.
        let other = (1..0xFF_FFFF)
            .find(|&o| o != q && ack_box(o) == ack_box(q))
            .unwrap();
        assert!(!p.ack(other, 1));
        // An armed consumer is woken by an ACK as by a packet.
        acks.clear();
        assert!(!c.arm());
        assert!(p.ack(q, 8));
        assert!(c.arm(), "an ACK waits: the consumer must not sleep");
    }

    #[test]
    fn an_ack_being_written_is_not_applied_until_it_is_whole() {
        let (mut p, mut c) = pair();
        let mut acks = Vec::new();
        let q = 77;
        assert!(p.ack(q, 1));
        let b = box_at(ack_box(q));
        // The producer is in the middle of its next write: the sequence word is odd.
        let seq = p.map.word32(b + BOX_SEQ);
        let s = seq.load(Ordering::Relaxed);
        seq.store(s + 1, Ordering::Relaxed);
        p.map.word64(ACK_GEN).store(99, Ordering::Release);
        c.acks(&mut acks);
        assert!(acks.is_empty(), "a torn ACK was applied: {acks:?}");
        assert!(c.pending(), "it is looked at again");
        seq.store(s + 2, Ordering::Release);
        c.acks(&mut acks);
        assert_eq!(acks, [(q, 1)]);
        assert!(!c.pending());
    }

    #[test]
    fn an_unsealed_or_short_memfd_is_refused() {
        // SAFETY: a NUL-terminated name.
        let fd = unsafe { libc::memfd_create(c"t".as_ptr(), libc::MFD_CLOEXEC) };
        // SAFETY: a new descriptor.
        let m = unsafe { OwnedFd::from_raw_fd(fd) };
        let ip = "127.0.0.1".parse().unwrap();
        assert!(matches!(
            Consumer::open(m.try_clone().unwrap(), eventfd().unwrap(), ip),
            Err(ShmError::Size(0, _))
        ));
        // SAFETY: plain call on our descriptor.
        assert_eq!(unsafe { libc::ftruncate(fd, ring_bytes() as i64) }, 0);
        assert!(matches!(
            Consumer::open(m, eventfd().unwrap(), ip),
            Err(ShmError::Unsealed(_))
        ));
    }

    proptest! {
        /// A hostile producer writes anything into the slots and the header: the consumer
        /// never reads or writes outside its mapping, never panics, and hands on only
        /// entries that fit a slot.
        #[test]
        fn garbage_from_the_producer_is_refused_or_skipped(
            writes in proptest::collection::vec((0usize..ring_bytes() / 8, any::<u64>()), 0..200),
            heads in proptest::collection::vec(any::<u64>(), 1..6),
        ) {
            let (_p, mut c) = pair();
            let mut b = RecvBatch::default();
            for (at, v) in writes {
                if at * 8 == TAIL {
                    continue;
                }
                // The producer's side of the mapping, written as a hostile peer would.
                // SAFETY: `at * 8` is inside the mapping.
                unsafe { c.map.ptr.add(at * 8).cast::<u64>().write_volatile(v) };
            }
            for h in heads {
                c.header(HEAD).store(h, Ordering::Release);
                match c.recv(&mut b, 0, 16) {
                    Ok((n, _)) => {
                        prop_assert!(n <= 16);
                        for k in 0..n {
                            prop_assert!(b.get(k).0.len() <= MAX_PACKET);
                        }
                    }
                    Err(ShmError::Index { .. }) => {}
                    Err(e) => prop_assert!(false, "{e}"),
                }
                // The ACK boxes: whatever they hold, each is handed on at most once per
                // write, with a 24-bit QPN and PSN.
                let mut acks = Vec::new();
                c.acks(&mut acks);
                c.acks(&mut acks);
                prop_assert!(acks.len() <= ACKS);
                for (q, psn) in acks {
                    prop_assert!(q <= 0xFF_FFFF && psn <= 0xFF_FFFF);
                }
            }
        }
    }
}
