//! The control plane of a shared device, with no I/O: who holds which QPN, the QPN draw
//! and its quarantine, the steering slots and probe rounds, the members' registrations
//! after a change of owner, and the CM listens by service ID (see the parent module for
//! the design).
//!
//! [`Control`] takes what happened (a member's record, a hang-up, this process's own
//! verbs) with the time and a random source, changes its state, and returns
//! [`Action`]s for the caller to carry out: answers to send, connections to close,
//! forwarding routes to set, steering programs and probes, log lines. It holds no
//! descriptor, reads no clock and draws no randomness of its own, so that it is tested
//! without processes and fuzzed with hostile records (see `tests`); `owner.rs` and
//! `member.rs` are the loops that feed it and carry its actions out.
//!
//! # Threads and locks
//! None inside: the parent holds it under its control lock (`Rank::ShareCtl`).

use super::msg::{Msg, VERSION};
use rand::Rng;
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

/// How long a freed QPN stays out of the draw: longer than the retries of any peer that
/// still sends to it (7 retries of a 4 s timeout, the longest that rdma-core tools set,
/// take half a minute; a QP left at timeout 31 retries for hours and nothing could honour
/// that in a 24-bit space), so a dead process's QPN is not handed to a new QP while its
/// old peers' packets may still arrive.
pub(crate) const QUARANTINE: Duration = Duration::from_secs(120);
/// How many quarantined QPNs are kept at most (the oldest leave first).
const QUARANTINE_MAX: usize = 1 << 16;
/// How long a member takes REQs for a service it stopped listening on: longer than its
/// owner forwards them to it (`RELISTEN_GRACE`, counted from when the owner heard of it,
/// a moment later), so that a REQ the owner forwards is never handed back.
pub(crate) const MEMBER_GRACE: Duration = Duration::from_secs(3);
/// How long after a change of the group the owner probes it once more: a member that
/// died leaves the group when its process is torn down, which may be after its
/// connection closed.
const PROBE_AGAIN: Duration = Duration::from_millis(100);

/// The owner's name for a member: its connection's poll token.
pub(crate) type MemberId = usize;
/// The owner's own reports of probes, among its members' IDs.
pub(crate) const OWN: MemberId = usize::MAX;

/// What the caller is to do, in order, for what [`Control`] was told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// Send `msg` to member `to`; if that fails, the member is gone (tell
    /// [`Control::hang_up`]).
    Send { to: MemberId, msg: Msg },
    /// Member `to` said hello: keep the end of its forwarding pair that came with it, and
    /// answer `Welcome` with the port's socket alongside; if that fails, it is gone.
    Welcome { to: MemberId, msg: Msg },
    /// Close member `to`'s connection; `why`, if any, is said on stderr. Its state is
    /// gone already: do not tell [`Control::hang_up`].
    Close { to: MemberId, why: Option<String> },
    /// Datagrams for `qpn` go to member `to`'s forwarding socket (`None`: to nobody).
    Route { qpn: u32, to: Option<MemberId> },
    /// QP1's MADs whose communication ID carries `slot` go to member `to` (`None`: to
    /// this process's agent).
    CmSlot { slot: u8, to: Option<MemberId> },
    /// REQs for CM service `sid` go to member `to` (`None`: to this process's agent);
    /// `ended`: when it stopped listening (they still go there for a grace).
    CmService {
        sid: u64,
        to: Option<MemberId>,
        ended: Option<Instant>,
    },
    /// Hand the REQs held for service `sid` to member `to`, which now listens on it.
    DeliverWaiting { sid: u64, to: MemberId },
    /// Send a probe round: indexes `0..count` of the group, in round `nonce`.
    Probe { count: u32, nonce: u64 },
    /// Attach the steering program for `own` (the owner's index) and `routes` (slot,
    /// index); on success tell [`Control::installed`].
    Install { own: u32, routes: Vec<(u8, u32)> },
    /// A line for the sharing log.
    Log(String),
}

/// A member, as its owner knows it.
#[derive(Debug, Clone)]
struct Member {
    pid: i32,
    /// It said hello (its forwarding pair is kept).
    ready: bool,
    /// Its QPNs.
    qpns: HashSet<u32>,
    /// Its same-host endpoint (0: none).
    ep: u64,
    /// The slot its QPNs carry (0: none), and whether its socket is in the group.
    slot: u8,
    steering: bool,
    /// It said it leaves (its socket leaves the group).
    left: bool,
}

/// A member's listen on a CM service.
#[derive(Debug, Clone, Copy)]
struct Listen {
    member: MemberId,
    /// When it stopped listening.
    ended: Option<Instant>,
}

/// The owner's view of the steering group (see `steer`).
#[derive(Debug, Default)]
struct Rounds {
    /// The current probing round's nonce; the index each member's socket (or the
    /// owner's, [`OWN`]) received last, and who reported in this round.
    nonce: u64,
    seen: HashMap<MemberId, u32>,
    this_round: HashSet<MemberId>,
    /// Members that reported two indexes in one round (a probe the kernel hashed): not
    /// steered until the next round.
    ambiguous: HashSet<MemberId>,
    /// When to probe once more.
    again: Option<Instant>,
    /// The program attached last: the owner's index and the routes.
    installed: Option<(u32, Vec<(u8, u32)>)>,
}

/// A device's control plane (see the module docs). The member side keeps only its own
/// QPNs, slots and listens here; the rest is the owner's (or a process alone's).
#[derive(Debug)]
pub(crate) struct Control {
    /// This process's same-host endpoint (0: none).
    ep: u64,
    /// Whether members' sockets may join the steering group.
    steer: bool,
    /// This process's QPNs.
    mine: HashSet<u32>,
    /// Owner: every member's QPN, with the member.
    theirs: HashMap<u32, MemberId>,
    /// Owner: its members.
    members: HashMap<MemberId, Member>,
    /// Freed QPNs, oldest first, with when they may be drawn again.
    quarantine: VecDeque<(u32, Instant)>,
    quarantined: HashSet<u32>,
    /// Slots out of use until then: those of owners that went, whose newest QPNs may be
    /// in no file a successor can read, so that no QPN of theirs is drawn again while
    /// its peers retry.
    retired: VecDeque<(u8, Instant)>,
    /// The slot this process's QPNs carry (an owner that started as one has 0), and a
    /// member's owner's.
    my_slot: u8,
    owner_slot: u8,
    /// Owner: each granted slot's member; QP1's MADs for that slot go there too.
    slots: HashMap<u8, MemberId>,
    rounds: Rounds,
    /// Owner: the members' CM listens by service ID.
    listens: HashMap<u64, Listen>,
    /// The CM service IDs this process listens on (told again to a new owner), and those
    /// it stopped listening on, with when.
    my_listens: HashSet<u64>,
    unlistened: HashMap<u64, Instant>,
}

impl Control {
    /// The control plane of a process with same-host endpoint `ep` (0: none); `steer`:
    /// members may be steered; `slots`: this process's and its owner's (a member's).
    pub(crate) fn new(ep: u64, steer: bool, my_slot: u8, owner_slot: u8) -> Self {
        Control {
            ep,
            steer,
            mine: HashSet::new(),
            theirs: HashMap::new(),
            members: HashMap::new(),
            quarantine: VecDeque::new(),
            quarantined: HashSet::new(),
            retired: VecDeque::new(),
            my_slot,
            owner_slot,
            slots: HashMap::new(),
            rounds: Rounds::default(),
            listens: HashMap::new(),
            my_listens: HashSet::new(),
            unlistened: HashMap::new(),
        }
    }

    /// The slot this process's QPNs carry.
    pub(crate) fn my_slot(&self) -> u8 {
        self.my_slot
    }

    /// This process's QPNs.
    pub(crate) fn mine(&self) -> Vec<u32> {
        self.mine.iter().copied().collect()
    }

    /// Whether QPN `q` is this process's.
    pub(crate) fn is_mine(&self, q: u32) -> bool {
        self.mine.contains(&q)
    }

    /// The CM services this process listens on.
    pub(crate) fn my_listens(&self) -> Vec<u64> {
        self.my_listens.iter().copied().collect()
    }

    /// A new owner's slot, which its QPNs carry (a member that joined another owner).
    pub(crate) fn set_owner_slot(&mut self, slot: u8) {
        self.owner_slot = slot;
    }

    /// How many members the owner has.
    pub(crate) fn member_count(&self) -> usize {
        self.members.len()
    }

    /// The member that listens on CM service `sid`, if one does.
    pub(crate) fn listener(&self, sid: u64) -> Option<MemberId> {
        self.listens.get(&sid).map(|l| l.member)
    }

    /// When the next probe round is due (owner), if one is.
    pub(crate) fn probe_due(&self) -> Option<Instant> {
        self.rounds.again
    }

    /// The owner accepted member `t`, whose process is `pid`.
    pub(crate) fn accepted(&mut self, t: MemberId, pid: i32) {
        self.members.insert(
            t,
            Member {
                pid,
                ready: false,
                qpns: HashSet::new(),
                ep: 0,
                slot: 0,
                steering: false,
                left: false,
            },
        );
    }

    /// Member `t` sent record `rec` with `fds` descriptors (owner). A record that does
    /// not parse, or that the member may not send now, closes its connection.
    pub(crate) fn record(
        &mut self,
        now: Instant,
        rng: &mut impl Rng,
        t: MemberId,
        rec: &[u8],
        fds: usize,
    ) -> Vec<Action> {
        self.decoded(now, rng, t, Msg::decode(rec), fds)
    }

    /// [`Control::record`] for a record the caller decoded already (`msg`: what
    /// [`Msg::decode`] made of it).
    pub(crate) fn decoded(
        &mut self,
        now: Instant,
        rng: &mut impl Rng,
        t: MemberId,
        msg: Result<Msg, super::msg::MsgError>,
        fds: usize,
    ) -> Vec<Action> {
        let Some(m) = self.members.get(&t) else {
            return Vec::new();
        };
        let msg = match msg {
            Ok(msg) => msg,
            Err(e) => {
                let why = format!("dropping member pid {}: {e}", m.pid);
                return self.close(now, rng, t, Some(why));
            }
        };
        let mut out = Vec::new();
        let send = |out: &mut Vec<Action>, msg| out.push(Action::Send { to: t, msg });
        match (msg, m.ready) {
            (Msg::Hello { version, ep, .. }, false) => {
                let me = std::process::id();
                if version != VERSION || fds != 1 {
                    let refused = Msg::Refused {
                        version: VERSION,
                        pid: me,
                        ep: 0,
                    };
                    send(&mut out, refused);
                    out.extend(self.close(now, rng, t, None));
                    return out;
                }
                let m = self.members.get_mut(&t).expect("looked up above");
                m.ready = true;
                m.ep = ep;
                let welcome = Msg::Welcome {
                    version: VERSION,
                    pid: me,
                    ep: self.ep,
                };
                out.push(Action::Welcome {
                    to: t,
                    msg: welcome,
                });
                out.push(Action::Log(format!("member pid {} joined", m.pid)));
            }
            (Msg::Locate(q), true) => send(&mut out, Msg::Located(self.endpoint_of(q))),
            (Msg::Alloc, true) => {
                let slot = m.slot;
                let q = self.draw(now, rng, slot);
                self.theirs.insert(q, t);
                self.member(t).qpns.insert(q);
                out.push(Action::Route {
                    qpn: q,
                    to: Some(t),
                });
                send(&mut out, Msg::Qpn(q));
            }
            (Msg::Free(q), true) => {
                if self.member(t).qpns.remove(&q) {
                    self.theirs.remove(&q);
                    out.push(Action::Route { qpn: q, to: None });
                    self.retire(now, q);
                }
            }
            (Msg::Register(list), true) => {
                let mut taken = Vec::new();
                for q in list {
                    // IBTA 10.2.5: QP0 and QP1 are the SMI's and the GSI's on every port;
                    // nor is 0xFFFFFF, the multicast QPN, any process's.
                    if q <= 1 || q >= 0xFF_FFFF || self.in_use(now, q) {
                        taken.push(q);
                        continue;
                    }
                    self.theirs.insert(q, t);
                    self.member(t).qpns.insert(q);
                    out.push(Action::Route {
                        qpn: q,
                        to: Some(t),
                    });
                    // Its QPNs carry the slot it had under the owner that went: no one
                    // else gets that slot.
                    let slot = q as u8;
                    if !matches!(slot, 0 | 1 | 0xFF) && slot != self.my_slot {
                        let holder = *self.slots.entry(slot).or_insert(t);
                        if holder == t {
                            out.push(Action::CmSlot { slot, to: Some(t) });
                        }
                    }
                }
                send(&mut out, Msg::Registered(taken));
            }
            (Msg::Steer(want), true) => {
                // Every member gets a slot its QPNs carry; only with steering on may its
                // socket join the group.
                let slot = self.grant_slot(now, rng, t, want);
                if slot != 0 {
                    if self.steer {
                        // The group gets its program before the member's socket joins it:
                        // without one the kernel would hash other processes' datagrams
                        // to it.
                        out.extend(self.install());
                    }
                    self.member(t).slot = slot;
                    out.push(Action::CmSlot { slot, to: Some(t) });
                }
                let answer = Msg::Slot {
                    slot,
                    owner: self.my_slot,
                    join: self.steer,
                };
                send(&mut out, answer);
            }
            (Msg::Steering(slot), true) => {
                if self.steer && slot != 0 && m.slot == slot {
                    let pid = m.pid;
                    self.member(t).steering = true;
                    out.push(Action::Log(format!(
                        "member pid {pid} steered as slot {slot}"
                    )));
                    out.extend(self.probe_round(now, rng, true, false));
                }
            }
            (Msg::Leave, true) => {
                // Its socket leaves the group next, and the last one takes its index:
                // until the group is probed again, every member is forwarded to.
                if m.steering {
                    let m = self.member(t);
                    m.steering = false;
                    m.left = true;
                    // Reports of the round under way name indexes from before the move:
                    // none counts now.
                    self.rounds.nonce = rng.random();
                    self.rounds.seen.clear();
                    out.extend(self.install());
                }
                send(&mut out, Msg::Left);
            }
            (Msg::Probed { index, nonce }, true) => {
                if m.steering {
                    out.extend(self.probed_at(t, index, nonce));
                }
            }
            (Msg::CmListen(sid), true) => {
                let mine = self.my_listens.contains(&sid);
                let taken = self
                    .listens
                    .get(&sid)
                    .is_some_and(|l| l.member != t && l.ended.is_none());
                let ok = !mine && !taken;
                if ok {
                    let l = Listen {
                        member: t,
                        ended: None,
                    };
                    self.listens.insert(sid, l);
                    out.push(Action::CmService {
                        sid,
                        to: Some(t),
                        ended: None,
                    });
                }
                out.push(Action::Log(format!(
                    "member {t} listens on CM service {sid:#x}: {ok}"
                )));
                if ok {
                    out.push(Action::DeliverWaiting { sid, to: t });
                }
                send(&mut out, Msg::CmListened(ok));
            }
            (Msg::CmUnlisten(sid), true) => {
                if let Some(l) = self.listens.get_mut(&sid)
                    && l.member == t
                {
                    l.ended = Some(now);
                    out.push(Action::CmService {
                        sid,
                        to: Some(t),
                        ended: Some(now),
                    });
                }
            }
            (other, _) => {
                let why = format!("dropping member pid {}: unexpected {other:?}", m.pid);
                out.extend(self.close(now, rng, t, Some(why)));
            }
        }
        out
    }

    /// Member `t` hung up, or could not be sent to (owner): its QPNs go into quarantine,
    /// its routes and listens go, and the group is probed again if it was in it.
    pub(crate) fn hang_up(&mut self, now: Instant, rng: &mut impl Rng, t: MemberId) -> Vec<Action> {
        let Some(m) = self.members.remove(&t) else {
            return Vec::new();
        };
        let mut out = vec![Action::Log(format!(
            "member pid {} left, {} QPNs quarantined",
            m.pid,
            m.qpns.len()
        ))];
        for q in m.qpns {
            self.theirs.remove(&q);
            out.push(Action::Route { qpn: q, to: None });
            self.retire(now, q);
        }
        // Its MADs now go to this process's agent, which rejects REQs for its services
        // and answers a DREQ for one of its connections, as for any unknown one.
        let mut slots: Vec<u8> = self
            .slots
            .iter()
            .filter(|(_, o)| **o == t)
            .map(|(s, _)| *s)
            .collect();
        slots.sort_unstable();
        for slot in slots {
            self.slots.remove(&slot);
            out.push(Action::CmSlot { slot, to: None });
        }
        self.rounds.seen.remove(&t);
        let mut sids: Vec<u64> = self
            .listens
            .iter()
            .filter(|(_, l)| l.member == t)
            .map(|(s, _)| *s)
            .collect();
        sids.sort_unstable();
        for sid in sids {
            self.listens.remove(&sid);
            out.push(Action::CmService {
                sid,
                to: None,
                ended: None,
            });
        }
        // A member that left on purpose said so first (`Leave`); one that died did not.
        if m.steering || m.left {
            // Its socket left the group, and the last one took its index.
            out.extend(self.probe_round(now, rng, true, true));
            out.extend(self.install());
        }
        out
    }

    /// Closes member `t` as [`Control::hang_up`] does, and says why.
    fn close(
        &mut self,
        now: Instant,
        rng: &mut impl Rng,
        t: MemberId,
        why: Option<String>,
    ) -> Vec<Action> {
        // The close comes first: nothing more is sent to it.
        let mut out = vec![Action::Close { to: t, why }];
        out.extend(self.hang_up(now, rng, t));
        out
    }

    /// Forgets the listen on `sid` (owner) of member `t`, whose process is gone though
    /// its hang-up is not served yet: a program that exits and is run again at once
    /// (qperf's server, forked per test) must find its port free, as the kernel frees a
    /// dead process's port when its file closes.
    pub(crate) fn evict_listen(&mut self, sid: u64, t: MemberId) -> Vec<Action> {
        if self.listens.get(&sid).is_none_or(|l| l.member != t) {
            return Vec::new();
        }
        self.listens.remove(&sid);
        vec![
            Action::Log(format!(
                "member {t} is gone: its listen on CM service {sid:#x} ends"
            )),
            Action::CmService {
                sid,
                to: None,
                ended: None,
            },
        ]
    }

    /// Makes this process (owner or alone) the listener of CM service `sid`: false if a
    /// member listens on it.
    pub(crate) fn listen_here(&mut self, sid: u64) -> bool {
        let ours = self.listens.get(&sid).is_none_or(|l| l.ended.is_some());
        if ours {
            self.my_listens.insert(sid);
        }
        ours
    }

    /// This process (a member) listens on CM service `sid`, as its owner agreed.
    pub(crate) fn listened(&mut self, sid: u64) {
        self.my_listens.insert(sid);
    }

    /// This process no longer listens on CM service `sid`; false if it did not.
    pub(crate) fn unlisten(&mut self, now: Instant, sid: u64) -> bool {
        if !self.my_listens.remove(&sid) {
            return false;
        }
        self.unlistened
            .retain(|_, t| now.saturating_duration_since(*t) < MEMBER_GRACE);
        self.unlistened.insert(sid, now);
        true
    }

    /// Whether a REQ for `sid` that reaches the owner with members, for a service
    /// nobody of the device listens on, may be held for a listener to come.
    pub(crate) fn may_hold_req(&self, sid: u64) -> bool {
        !self.members.is_empty() && !self.my_listens.contains(&sid)
    }

    /// Whether a MAD addressed to `to` that this steered member's socket got belongs to
    /// another process (see `Share::misdelivered_mad`).
    pub(crate) fn not_mine(&self, now: Instant, to: softrdma_wire::cm::Addressee) -> bool {
        use softrdma_wire::cm::Addressee;
        match to {
            Addressee::Comm(id) => id as u8 != self.my_slot,
            Addressee::Service(sid) => {
                !self.my_listens.contains(&sid)
                    && self
                        .unlistened
                        .get(&sid)
                        .is_none_or(|t| now.saturating_duration_since(*t) >= MEMBER_GRACE)
            }
        }
    }

    /// A new QPN for this process, drawn here (owner, alone).
    pub(crate) fn draw_mine(&mut self, now: Instant, rng: &mut impl Rng) -> u32 {
        let slot = self.my_slot;
        let q = self.draw(now, rng, slot);
        self.mine.insert(q);
        q
    }

    /// QPN `q`, which this process's owner drew for it, is this process's (member).
    pub(crate) fn got(&mut self, q: u32) {
        self.mine.insert(q);
    }

    /// QPN `q` of this process is destroyed: false if it was not this process's. An
    /// owner (or a process alone) quarantines it; a member tells its owner.
    pub(crate) fn free_mine(&mut self, now: Instant, q: u32, owner: bool) -> bool {
        if !self.mine.remove(&q) {
            return false;
        }
        if owner {
            self.retire(now, q);
        }
        true
    }

    /// Quarantines the QPNs a process that went held (a dead owner's, which no member
    /// registers again); how many were free.
    pub(crate) fn quarantine(&mut self, now: Instant, qpns: &[u32]) -> usize {
        let mut n = 0;
        for &q in qpns {
            if !self.in_use(now, q) {
                self.retire(now, q);
                n += 1;
            }
        }
        n
    }

    /// This process became the owner after the one with `owner_slot` went: its slot is
    /// retired, the group starts over, and the program sends everything here.
    pub(crate) fn took_over(&mut self, now: Instant) -> Vec<Action> {
        self.rounds = Rounds::default();
        self.slots.clear();
        let gone = self.owner_slot;
        self.retire_slot(now, gone);
        self.install().into_iter().collect()
    }

    /// The endpoint of whichever process holds QPN `q` (owner, alone): 0 if none does,
    /// `u64::MAX` if one without an endpoint does (see [`Msg::Located`]).
    pub(crate) fn endpoint_of(&self, q: u32) -> u64 {
        let ep = |e: u64| if e == 0 { u64::MAX } else { e };
        if self.mine.contains(&q) {
            return ep(self.ep);
        }
        match self.theirs.get(&q) {
            Some(t) => self.members.get(t).map_or(0, |m| ep(m.ep)),
            None => 0,
        }
    }

    fn member(&mut self, t: MemberId) -> &mut Member {
        self.members
            .get_mut(&t)
            .expect("a member the caller looked up")
    }

    /// Whether `q` is anyone's, or quarantined.
    fn in_use(&mut self, now: Instant, q: u32) -> bool {
        self.expire(now);
        self.mine.contains(&q) || self.theirs.contains_key(&q) || self.quarantined.contains(&q)
    }

    /// Draws a free QPN for the process whose slot is `slot` (owner, alone): 16 random
    /// bits above the slot (see `steer`). Should that slot's numbers run out, any free
    /// QPN that no steered slot claims will do: the owner's socket receives it and
    /// forwards.
    fn draw(&mut self, now: Instant, rng: &mut impl Rng, slot: u8) -> u32 {
        self.expire(now);
        let tries = if self.is_retired(slot) { 0 } else { 1 << 17 };
        for _ in 0..tries {
            let q = rng.random::<u32>() & 0xFF_FF00 | u32::from(slot);
            if q > 1 && !self.in_use(now, q) {
                return q;
            }
        }
        loop {
            let q = rng.random::<u32>() & 0xFF_FFFF;
            let claimed = self.slots.contains_key(&(q as u8)) || self.is_retired(q as u8);
            if q > 1 && q != 0xFF_FFFF && !claimed && !self.in_use(now, q) {
                return q;
            }
        }
    }

    /// A steering slot for member `t` (owner): `want` if it is free or already `t`'s,
    /// otherwise (or for `want` 0) any free one; 0 if none is.
    fn grant_slot(&mut self, now: Instant, rng: &mut impl Rng, t: MemberId, want: u8) -> u8 {
        self.expire(now);
        let free = |s: u8, c: &Control| {
            // 0 is the first owner's; QP1 (the GSI, whose MADs the owner serves) and the
            // multicast QPN end in 1 and 0xFF.
            !matches!(s, 0 | 1 | 0xFF)
                && s != c.my_slot
                && !c.is_retired(s)
                && c.slots.get(&s).is_none_or(|o| *o == t)
        };
        let slot = if want != 0 {
            free(want, self).then_some(want)
        } else {
            // From a random start, so that a slot freed a moment ago is not the next one.
            let start = rng.random::<u8>();
            (0..=255u8)
                .map(|i| start.wrapping_add(i))
                .find(|&s| free(s, self) && !self.slots.contains_key(&s))
        };
        match slot {
            Some(s) => {
                self.slots.insert(s, t);
                s
            }
            None => 0,
        }
    }

    /// Takes slot `s` out of use for [`QUARANTINE`] (an owner that went had it).
    fn retire_slot(&mut self, now: Instant, s: u8) {
        self.retired.retain(|r| r.0 != s);
        self.retired.push_back((s, now + QUARANTINE));
    }

    /// Puts a freed QPN into quarantine.
    fn retire(&mut self, now: Instant, q: u32) {
        if self.quarantine.len() >= QUARANTINE_MAX
            && let Some((old, _)) = self.quarantine.pop_front()
        {
            self.quarantined.remove(&old);
        }
        self.quarantine.push_back((q, now + QUARANTINE));
        self.quarantined.insert(q);
    }

    /// Ends the quarantines and slot retirements that are over.
    fn expire(&mut self, now: Instant) {
        while let Some(&(q, until)) = self.quarantine.front() {
            if until > now {
                break;
            }
            self.quarantine.pop_front();
            self.quarantined.remove(&q);
        }
        while self.retired.front().is_some_and(|r| r.1 <= now) {
            self.retired.pop_front();
        }
    }

    /// Whether slot `s` is retired (see [`Control::retire_slot`]).
    fn is_retired(&self, s: u8) -> bool {
        self.retired.iter().any(|r| r.0 == s)
    }
}

pub(crate) mod fuzz;
mod steering;
#[cfg(test)]
mod tests;
