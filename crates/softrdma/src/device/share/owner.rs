//! The owner's loop: it accepts members, reads their records, hands each to the control
//! plane (`control`) and carries out the actions it returns: answers, closed
//! connections, forwarding routes (`forward`), steering programs and probes (`steer`).
//! It also runs the steering part of the progress thread's turn (`Share::tick`).
//!
//! # Threads and locks
//! Run by the progress thread for control events, under the control lock
//! (`Rank::ShareCtl`), which it holds while it writes the routes (`ShareRoutes`,
//! `ShareCm`) and hands held REQs over (`ShareWaitingReqs`). A member's records are read
//! without blocking; an answer is one `sendmsg` on a `SOCK_SEQPACKET` connection.

use super::control::{Action, MemberId, OWN};
use super::forward::CmListen;
use super::sock::{recv, same_user, send, watch};
use super::{Change, Conn, Ctl, FORWARD_BUF, HANDBACK_BASE, LISTEN, MEMBER_BASE, OWNER, Role};
use super::{SPILL, Share, log, steer};
use crate::datapath::socket as sys;
use nix::sys::socket::{self as ns, MsgFlags, SockFlag};
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl Share {
    /// Handles a control event of the progress thread's poll: `token` is [`LISTEN`],
    /// [`OWNER`] or a member's. `closed`: the poll saw the other end hang up.
    pub(crate) fn event(&self, r: &mio::Registry, token: mio::Token, closed: bool) -> Change {
        if token == SPILL {
            // Read by the next receive, without the control lock.
            self.rx.spilled();
            return Change::None;
        }
        if token.0 >= HANDBACK_BASE {
            // What a member handed back: read by the next receive, with the port.
            self.rx.handed();
            return Change::None;
        }
        let mut ctl = self.ctl.lock();
        match token {
            LISTEN => {
                self.accept(&mut ctl, r);
                Change::None
            }
            OWNER => {
                let gone = closed || {
                    let Role::Member { conn, .. } = &ctl.role else {
                        return Change::None;
                    };
                    // Readable with no request waiting: only an end of stream (or a record
                    // no request asked for, which is a broken owner) makes that.
                    matches!(
                        recv(
                            conn.as_raw_fd(),
                            MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_PEEK
                        ),
                        Ok(None) | Err(nix::Error::ECONNRESET)
                    )
                };
                if gone {
                    self.carry_on(&mut ctl, r)
                } else {
                    Change::None
                }
            }
            mio::Token(t) if t >= MEMBER_BASE => {
                self.serve(&mut ctl, r, t, closed);
                Change::None
            }
            _ => Change::None,
        }
    }

    /// Accepts every waiting member (owner).
    pub(super) fn accept(&self, ctl: &mut Ctl, r: &mio::Registry) {
        let Role::Owner {
            listener,
            conns,
            next,
        } = &mut ctl.role
        else {
            return;
        };
        loop {
            let fd = match ns::accept4(
                listener.raw(),
                SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            ) {
                // SAFETY: accept4 returned a new descriptor that nothing else owns.
                Ok(fd) => unsafe { OwnedFd::from_raw_fd(fd) },
                Err(nix::Error::EINTR) => continue,
                Err(_) => return,
            };
            let pid = match same_user(&fd) {
                Ok(pid) => pid,
                Err(e) => {
                    // Said once, to whoever watches the owner; the connection just closes.
                    eprintln!("softrdma: {}: refused a connection: {e}", self.addr);
                    continue;
                }
            };
            let t = MEMBER_BASE + *next;
            *next += 1;
            if watch(r, fd.as_raw_fd(), mio::Token(t)).is_err() {
                continue;
            }
            conns.insert(
                t,
                Conn {
                    conn: fd,
                    data: None,
                },
            );
            ctl.core.accepted(t, pid);
        }
    }

    /// Reads member `t`'s records and carries out what the control plane makes of them
    /// (owner); a member that hung up is dropped with its QPNs.
    fn serve(&self, ctl: &mut Ctl, r: &mio::Registry, t: MemberId, closed: bool) {
        let now = Instant::now();
        let mut rng = rand::rng();
        if closed {
            let acts = ctl.core.hang_up(now, &mut rng, t);
            self.drop_conn(ctl, r, t);
            self.apply(ctl, Some(r), acts, Vec::new());
            return;
        }
        loop {
            let Role::Owner { conns, .. } = &ctl.role else {
                return;
            };
            let Some(c) = conns.get(&t) else {
                return;
            };
            let (rec, fds) = match recv(c.conn.as_raw_fd(), MsgFlags::MSG_DONTWAIT) {
                Ok(Some(x)) => x,
                Err(nix::Error::EAGAIN) | Err(nix::Error::EINTR) => return,
                Ok(None) | Err(_) => {
                    let acts = ctl.core.hang_up(now, &mut rng, t);
                    self.drop_conn(ctl, r, t);
                    self.apply(ctl, Some(r), acts, Vec::new());
                    return;
                }
            };
            let msg = super::msg::Msg::decode(&rec);
            // A listen finds its service free if the member that held it is gone, though
            // its hang-up is not served yet (see `Control::evict_listen`).
            if let Ok(super::msg::Msg::CmListen(sid)) = msg {
                self.evict_dead_listener(ctl, sid);
            }
            let acts = ctl.core.decoded(now, &mut rng, t, msg, fds.len());
            self.apply(ctl, Some(r), acts, fds);
        }
    }

    /// Carries out the control plane's `acts` in order (owner). `fds`: the descriptors
    /// that came with the record they answer (a hello's forwarding pair). A member that
    /// cannot be sent to is hung up, and what that changes is carried out too.
    pub(super) fn apply(
        &self,
        ctl: &mut Ctl,
        r: Option<&mio::Registry>,
        acts: Vec<Action>,
        mut fds: Vec<OwnedFd>,
    ) {
        let mut queue = VecDeque::from(acts);
        while let Some(a) = queue.pop_front() {
            let sent = match a {
                Action::Send { to, msg } => {
                    let fd = conn_of(ctl, to).map(|c| c.conn.as_raw_fd());
                    fd.is_some_and(|fd| send(fd, &msg, &[]).is_ok())
                        .then_some(())
                        .ok_or(to)
                }
                Action::Welcome { to, msg } => self.welcome(ctl, r, to, &msg, fds.pop()),
                Action::Close { to, why } => {
                    if let Some(why) = why {
                        eprintln!("softrdma: {}: {why}", self.addr);
                    }
                    if let Some(r) = r {
                        self.drop_conn(ctl, r, to);
                    }
                    Ok(())
                }
                Action::Route { qpn, to } => {
                    self.route(qpn, to.and_then(|t| data_of(ctl, t)));
                    Ok(())
                }
                Action::CmSlot { slot, to } => {
                    let data = to.and_then(|t| data_of(ctl, t));
                    self.cm_routes(|cm| match data {
                        Some(d) => {
                            cm.by_slot.insert(slot, d);
                        }
                        None => {
                            cm.by_slot.remove(&slot);
                        }
                    });
                    Ok(())
                }
                Action::CmService { sid, to, ended } => {
                    let data = to.and_then(|t| data_of(ctl, t));
                    self.cm_routes(|cm| match data {
                        Some(data) => {
                            cm.by_service.insert(sid, CmListen { data, ended });
                        }
                        None => {
                            cm.by_service.remove(&sid);
                        }
                    });
                    Ok(())
                }
                Action::DeliverWaiting { sid, to } => {
                    if let Some(d) = data_of(ctl, to) {
                        self.deliver_waiting(sid, d.as_raw_fd());
                    }
                    Ok(())
                }
                Action::Probe { count, nonce } => {
                    let to = crate::datapath::udp::roce_port(self.addr, self.scope_id);
                    for i in 0..count {
                        let _ = steer::send_probe(self.rx.get().0, to, i, nonce);
                    }
                    if ctl.core.probe_due().is_some() {
                        self.again.store(true, Ordering::Relaxed);
                    }
                    Ok(())
                }
                Action::Install { own, routes } => {
                    match steer::attach(self.rx.get().0, &steer::program(own, &routes)) {
                        Ok(()) => {
                            log(format_args!(
                                "{}: steering program: owner at {own}, slots {routes:?}",
                                self.addr
                            ));
                            ctl.core.installed(own, routes);
                        }
                        Err(e) => eprintln!("softrdma: {}: cannot steer members: {e}", self.addr),
                    }
                    Ok(())
                }
                Action::Log(line) => {
                    log(format_args!("{}: {line}", self.addr));
                    Ok(())
                }
            };
            // The member is gone: what the control plane makes of that comes next.
            if let Err(t) = sent {
                let acts = ctl.core.hang_up(Instant::now(), &mut rand::rng(), t);
                if let Some(r) = r {
                    self.drop_conn(ctl, r, t);
                }
                queue.extend(acts);
            }
        }
    }

    /// Keeps member `to`'s end of its forwarding pair, `data`, and welcomes it with the
    /// port's socket alongside; `Err(to)` if that cannot be done (it is gone).
    fn welcome(
        &self,
        ctl: &mut Ctl,
        r: Option<&mio::Registry>,
        to: MemberId,
        msg: &super::msg::Msg,
        data: Option<OwnedFd>,
    ) -> Result<(), MemberId> {
        let (Some(r), Some(data)) = (r, data) else {
            return Err(to);
        };
        let Some(c) = conn_of(ctl, to) else {
            return Err(to);
        };
        let _ = sys::set_int_opt(
            data.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            FORWARD_BUF,
        );
        // An owner reads the port itself: its receive socket is the one to share.
        if send(c.conn.as_raw_fd(), msg, &[self.rx.get().0]).is_err() {
            return Err(to);
        }
        let data = Arc::new(data);
        // What the member hands back comes in on its pair.
        if watch(
            r,
            data.as_raw_fd(),
            mio::Token(HANDBACK_BASE + to - MEMBER_BASE),
        )
        .is_ok()
        {
            self.rx.set_handback(&data, true);
        }
        if let Role::Owner { conns, .. } = &mut ctl.role
            && let Some(c) = conns.get_mut(&to)
        {
            c.data = Some(data);
        }
        Ok(())
    }

    /// Closes member `t`'s connection and stops watching its forwarding pair (owner).
    fn drop_conn(&self, ctl: &mut Ctl, r: &mio::Registry, t: MemberId) {
        let Role::Owner { conns, .. } = &mut ctl.role else {
            return;
        };
        let Some(c) = conns.remove(&t) else {
            return;
        };
        let _ = r.deregister(&mut mio::unix::SourceFd(&c.conn.as_raw_fd()));
        if let Some(d) = &c.data {
            let _ = r.deregister(&mut mio::unix::SourceFd(&d.as_raw_fd()));
            self.rx.set_handback(d, false);
        }
    }

    /// Forgets the listen on `sid` of a member whose process is gone though its hang-up is
    /// not served yet (owner; see `Control::evict_listen`).
    pub(super) fn evict_dead_listener(&self, ctl: &mut Ctl, sid: u64) {
        let Role::Owner { conns, .. } = &ctl.role else {
            return;
        };
        let Some(h) = ctl.core.listener(sid) else {
            return;
        };
        let gone = conns.get(&h).is_none_or(|c| {
            let mut p = libc::pollfd {
                fd: c.conn.as_raw_fd(),
                events: libc::POLLRDHUP,
                revents: 0,
            };
            // SAFETY: one valid pollfd; no wait.
            let n = unsafe { libc::poll(&mut p, 1, 0) };
            n == 1 && p.revents & (libc::POLLHUP | libc::POLLRDHUP) != 0
        });
        if gone {
            let acts = ctl.core.evict_listen(sid, h);
            self.apply(ctl, None, acts, Vec::new());
        }
    }

    /// The progress thread's part in steering, at each of its turns: reports the probes
    /// the receive path saw (a member tells its owner; the owner notes its own index),
    /// and makes a due probe round (owner). Returns how soon it wants to run again.
    pub(crate) fn tick(&self) -> Option<Duration> {
        let probed = self.probed.swap(false, Ordering::AcqRel);
        if !probed && !self.again.load(Ordering::Relaxed) {
            return None;
        }
        let seen = std::mem::take(&mut *self.probes.lock());
        let mut ctl = self.ctl.lock();
        let now = Instant::now();
        let mut acts = Vec::new();
        for (index, nonce) in seen {
            match &ctl.role {
                Role::Member { conn, .. } => {
                    let probed = super::msg::Msg::Probed { index, nonce };
                    let _ = send(conn.as_raw_fd(), &probed, &[]);
                }
                Role::Owner { .. } => acts.extend(ctl.core.probed_at(OWN, index, nonce)),
                Role::Alone => {}
            }
        }
        let owner = matches!(ctl.role, Role::Owner { .. });
        if owner {
            acts.extend(ctl.core.tick(now, &mut rand::rng()));
        }
        self.apply(&mut ctl, None, acts, Vec::new());
        let due = ctl.core.probe_due().filter(|_| owner);
        self.again.store(due.is_some(), Ordering::Relaxed);
        due.map(|at| at.saturating_duration_since(now))
    }
}

/// Member `t`'s connection (owner).
fn conn_of(ctl: &Ctl, t: MemberId) -> Option<&Conn> {
    match &ctl.role {
        Role::Owner { conns, .. } => conns.get(&t),
        _ => None,
    }
}

/// Member `t`'s end of its forwarding pair (owner), once it said hello.
fn data_of(ctl: &Ctl, t: MemberId) -> Option<Arc<OwnedFd>> {
    conn_of(ctl, t).and_then(|c| c.data.clone())
}
