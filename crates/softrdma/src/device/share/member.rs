//! A member's side of sharing: asking its owner for a slot and joining the steering
//! group, and carrying on when the owner goes (becoming the owner, or joining whoever
//! did, and registering this process's QPNs and CM listens there again).
//!
//! # Threads and locks
//! `slot_join` runs while the device opens, before any other thread knows of it.
//! `carry_on` runs on the progress thread under the control lock (`Rank::ShareCtl`),
//! asking the new owner with timed requests ([`ANSWER_TIMEOUT`] each).

use super::msg::{MAX_QPNS, Msg};
use super::sock::{Joined, await_probe, join, listen, request, send, watch};
use super::{ANSWER_TIMEOUT, BindPort, Change, Ctl, LISTEN, OWNER, Role, SPILL, Share, log};
use crate::datapath::socket::{self as sys, Forgotten};
use crate::datapath::udp::PortBind;
use nix::sys::socket::{self as ns, Backlog};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// What a member learned of the slots: its own, and its owner's.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Slots {
    pub(super) mine: u8,
    pub(super) owner: u8,
}

/// Asks the owner (at the other end of `conn`) for a slot, `want` or any, and, if
/// `steer` and the owner agrees, joins the steering group with a socket of our own
/// (`None`: the member stays forwarded: no slot, no agreement, or a socket that could not
/// join).
pub(super) fn slot_join(
    conn: RawFd,
    owner: u32,
    want: u8,
    steer: bool,
    bind_port: BindPort<'_>,
) -> (Slots, Option<OwnedFd>) {
    let (slots, join) = match request(conn, owner, &Msg::Steer(want)) {
        Ok(Msg::Slot {
            slot,
            owner: theirs,
            join,
        }) if want == 0 || slot == want => (
            Slots {
                mine: slot,
                owner: theirs,
            },
            join && slot != 0,
        ),
        Ok(Msg::Slot { owner: theirs, .. }) => (
            Slots {
                mine: 0,
                owner: theirs,
            },
            false,
        ),
        _ => (Slots::default(), false),
    };
    if !(steer && join) {
        return (slots, None);
    }
    let Ok(sock) = bind_port(PortBind::Join) else {
        return (slots, None);
    };
    if send(conn, &Msg::Steering(slots.mine), &[]).is_err() {
        return (slots, None);
    }
    // The owner probes the group at once: answering the probe here, instead of from the
    // progress thread once something reads the socket, steers this process's first
    // packets too. Nothing else reaches the socket before the program names its slot.
    if let Some((index, nonce)) = await_probe(sock.as_raw_fd(), PROBE_WAIT) {
        let _ = send(conn, &Msg::Probed { index, nonce }, &[]);
    }
    (slots, Some(sock))
}

/// How long a joining member waits for its first probe.
const PROBE_WAIT: Duration = Duration::from_millis(200);

impl Share {
    /// The owner went: become the owner, or join whoever did (member).
    pub(super) fn carry_on(&self, ctl: &mut Ctl, r: &mio::Registry) -> Change {
        let Role::Member { conn, owner_pid } = &ctl.role else {
            return Change::None;
        };
        let _ = r.deregister(&mut mio::unix::SourceFd(&conn.as_raw_fd()));
        let old_owner = *owner_pid;
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        let (old, _) = self.rx.get();
        loop {
            match join(self.addr, self.scope_id, self.ep) {
                Ok(Joined::Member {
                    conn,
                    owner_pid,
                    data,
                    port,
                }) => {
                    // Tell the new owner which QPNs are ours.
                    let mine = ctl.core.mine();
                    for chunk in mine.chunks(MAX_QPNS) {
                        match request(conn.as_raw_fd(), owner_pid, &Msg::Register(chunk.into())) {
                            Ok(Msg::Registered(taken)) if taken.is_empty() => {}
                            Ok(Msg::Registered(taken)) => eprintln!(
                                "softrdma: {}: QPNs {taken:x?} are another process's now; \
                                 their packets go there",
                                self.addr
                            ),
                            _ => {}
                        }
                    }
                    // And which CM services.
                    for sid in ctl.core.my_listens() {
                        if !matches!(
                            request(conn.as_raw_fd(), owner_pid, &Msg::CmListen(sid)),
                            Ok(Msg::CmListened(true))
                        ) {
                            eprintln!(
                                "softrdma: {}: CM service {sid:#x} is another process's now",
                                self.addr
                            );
                        }
                    }
                    let _ = watch(r, conn.as_raw_fd(), OWNER);
                    log(format_args!(
                        "{}: owner pid {old_owner} went; pid {} joined owner pid {owner_pid}",
                        self.addr,
                        std::process::id()
                    ));
                    let port = Forgotten::new(port);
                    let data = Forgotten::new(data);
                    if let Some(fd) = self.rx.spill() {
                        let _ = r.deregister(&mut mio::unix::SourceFd(&fd));
                    }
                    // A member keeps its slot, which its QPNs carry, and a steered one its
                    // socket in the group, if the new owner agrees.
                    let slot = ctl.core.my_slot();
                    let kept = match request(conn.as_raw_fd(), owner_pid, &Msg::Steer(slot)) {
                        Ok(Msg::Slot {
                            slot: s,
                            owner,
                            join,
                        }) => {
                            ctl.core.set_owner_slot(owner);
                            s == slot && join && slot != 0 && ctl.steering.is_some()
                        }
                        _ => false,
                    } && send(conn.as_raw_fd(), &Msg::Steering(slot), &[]).is_ok();
                    if kept {
                        let raw = data.raw();
                        self.rx.set_spill(Some(data), slot);
                        let _ = watch(r, raw, SPILL);
                    } else {
                        if let Some(fd) = ctl.steering.take() {
                            sys::hollow(fd);
                        }
                        self.rx.set_spill(None, 0);
                        self.rx.set(data, true);
                    }
                    ctl.role = Role::Member { conn, owner_pid };
                    ctl.port = Some(port);
                    return Change::Rx {
                        old,
                        took_over: None,
                    };
                }
                Ok(Joined::Nobody) => {}
                // A new owner in the middle of taking over may fail one try; the
                // deadline below bounds the retries.
                Err(e) if Instant::now() >= deadline => {
                    eprintln!("softrdma: {}: lost the device's owner: {e}", self.addr);
                    return Change::None;
                }
                Err(_) => {}
            }
            if let Ok(Some(listener)) = listen(self.addr, self.scope_id) {
                let listener = Forgotten::new(listener);
                let Some(port) = ctl.port.take() else {
                    return Change::None;
                };
                if ns::listen(&listener.0, Backlog::new(128).expect("within SOMAXCONN")).is_err() {
                    ctl.port = Some(port);
                    return Change::None;
                }
                let _ = watch(r, listener.raw(), LISTEN);
                log(format_args!(
                    "{}: owner pid {old_owner} went; pid {} owns the device",
                    self.addr,
                    std::process::id()
                ));
                ctl.role = Role::Owner {
                    listener,
                    conns: HashMap::new(),
                    next: 0,
                };
                // The port is read from now on, and the group's program sends everything
                // to it until the members, steered again, are probed; then this process's
                // socket leaves the group.
                if let Some(fd) = self.rx.spill() {
                    let _ = r.deregister(&mut mio::unix::SourceFd(&fd));
                }
                self.rx.set_spill(None, 0);
                self.rx.set(port, false);
                let acts = ctl.core.took_over(Instant::now());
                self.apply(ctl, Some(r), acts, Vec::new());
                if let Some(fd) = ctl.steering.take() {
                    sys::hollow(fd);
                }
                // Members that connected before the listener was watched are waiting.
                self.accept(ctl, r);
                return Change::Rx {
                    old,
                    took_over: Some(old_owner),
                };
            }
            if Instant::now() >= deadline {
                eprintln!(
                    "softrdma: {}: the device's owner went and no process took its place",
                    self.addr
                );
                return Change::None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        // The socket leaves the group before the owner sees the connection close, so that
        // its probe round finds the group as it is; and after the owner's program stopped
        // steering to members, so that the socket that takes its index gets no datagram
        // of another's (a UC or UD one would be lost).
        let ctl = self.ctl.get_mut();
        if let Some(fd) = ctl.steering.take() {
            if let Role::Member { conn, owner_pid } = &ctl.role {
                let _ = request(conn.as_raw_fd(), *owner_pid, &Msg::Leave);
            }
            sys::hollow(fd);
        }
    }
}
