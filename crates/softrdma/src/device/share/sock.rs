//! The sockets between the processes of a shared device: the abstract `SOCK_SEQPACKET`
//! name each device's owner listens on, the `SO_PEERCRED` check both ends make, records
//! with descriptors alongside (`SCM_RIGHTS`), a member's hello and its timed requests,
//! and the wait for a steering probe. No state of the control plane lives here (see
//! `control`); every call is a system call or a bounded wait on one.

use super::msg::{MAX_QPNS, Msg, VERSION};
use super::{ANSWER_TIMEOUT, FORWARD_BUF, ShareError, steer};
use crate::datapath::socket as sys;
use nix::sys::socket::{
    self as ns, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType,
    UnixAddr,
};
use std::io::{IoSlice, IoSliceMut};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// Has the progress thread's poll wake when `fd` is readable, as `token`.
pub(super) fn watch(r: &mio::Registry, fd: RawFd, token: mio::Token) -> std::io::Result<()> {
    r.register(
        &mut mio::unix::SourceFd(&fd),
        token,
        mio::Interest::READABLE,
    )
}

/// Names the system call that failed.
pub(super) fn io(what: &'static str) -> impl Fn(nix::Error) -> ShareError {
    move |e| ShareError::Io {
        what,
        source: std::io::Error::from(e),
    }
}

/// The abstract socket name of the device on `addr`.
fn name(addr: IpAddr, scope_id: u32) -> UnixAddr {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let n = if scope_id != 0 {
        format!("softrdma/{uid}/{addr}%{scope_id}")
    } else {
        format!("softrdma/{uid}/{addr}")
    };
    UnixAddr::new_abstract(n.as_bytes()).expect("the name is far shorter than sun_path")
}

fn seqpacket() -> Result<OwnedFd, ShareError> {
    ns::socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(io("socket(AF_UNIX, SOCK_SEQPACKET)"))
}

/// Checks that the process at the other end of `fd` has our effective uid.
pub(crate) fn same_user(fd: &OwnedFd) -> Result<i32, ShareError> {
    let cred = ns::getsockopt(fd, ns::sockopt::PeerCredentials).map_err(io("SO_PEERCRED"))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    if cred.uid() != unsafe { libc::geteuid() } {
        return Err(ShareError::OtherUser {
            uid: cred.uid(),
            pid: cred.pid(),
        });
    }
    Ok(cred.pid())
}

/// Sends record `m`, with descriptors `fds` alongside.
pub(crate) fn send(fd: RawFd, m: &Msg, fds: &[RawFd]) -> nix::Result<()> {
    let b = m.encode();
    let cm = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &cm };
    ns::sendmsg::<()>(fd, &[IoSlice::new(&b)], cmsgs, MsgFlags::MSG_NOSIGNAL, None).map(drop)
}

/// One record and the descriptors that came with it; `Ok(None)` at end of stream.
pub(crate) fn recv(fd: RawFd, flags: MsgFlags) -> nix::Result<Option<(Vec<u8>, Vec<OwnedFd>)>> {
    let mut buf = vec![0u8; 8 + 4 * MAX_QPNS];
    // Room for as many descriptors as one message can carry (the kernel's SCM_MAX_FD),
    // so the kernel never truncates: it would install those that fit, and nix refuses to
    // read a truncated control buffer, which would leak them. Extra ones are closed.
    let mut space = nix::cmsg_space!([RawFd; 253]);
    let (n, fds) = {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let m = ns::recvmsg::<()>(
            fd,
            &mut iov,
            Some(&mut space),
            flags | MsgFlags::MSG_CMSG_CLOEXEC,
        )?;
        let mut fds = Vec::new();
        for c in m.cmsgs()? {
            if let ControlMessageOwned::ScmRights(r) = c {
                // SAFETY: the kernel just installed these descriptors for us; nothing else
                // owns them.
                fds.extend(r.into_iter().map(|f| unsafe { OwnedFd::from_raw_fd(f) }));
            }
        }
        (m.bytes, fds)
    };
    if n == 0 {
        return Ok(None);
    }
    buf.truncate(n);
    Ok(Some((buf, fds)))
}

/// The first probe that reaches non-blocking socket `fd` within `wait`; anything else that
/// arrives meanwhile is dropped.
pub(super) fn await_probe(fd: RawFd, wait: Duration) -> Option<(u32, u64)> {
    let deadline = Instant::now() + wait;
    let mut buf = [0u8; 64];
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `p` is one valid pollfd for the call.
        let n = unsafe { libc::poll(&mut p, 1, left.as_millis().max(1) as libc::c_int) };
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return None;
        }
        while let Ok(len) = ns::recv(fd, &mut buf, MsgFlags::MSG_DONTWAIT) {
            if let Some(p) = steer::parse_probe(&buf[..len.min(buf.len())]) {
                return Some(p);
            }
        }
    }
}

/// What a hello found at the device's name.
pub(super) enum Joined {
    /// Nobody listens on the name.
    Nobody,
    Member {
        conn: OwnedFd,
        owner_pid: u32,
        data: OwnedFd,
        port: OwnedFd,
    },
}

/// Connects to the device's owner and says hello.
pub(super) fn join(addr: IpAddr, scope_id: u32, ep: u64) -> Result<Joined, ShareError> {
    let conn = seqpacket()?;
    // A hung owner's full backlog would block the connect (and a send) for ever: both
    // wait at most this long.
    ns::setsockopt(
        &conn,
        ns::sockopt::SendTimeout,
        &nix::sys::time::TimeVal::new(ANSWER_TIMEOUT.as_secs() as i64, 0),
    )
    .map_err(io("SO_SNDTIMEO"))?;
    match ns::connect(conn.as_raw_fd(), &name(addr, scope_id)) {
        Ok(()) => {}
        Err(nix::Error::ECONNREFUSED) | Err(nix::Error::ENOENT) => return Ok(Joined::Nobody),
        Err(e) => return Err(io("connect to the device's owner")(e)),
    }
    let pid = same_user(&conn)?;
    let (mine, theirs) = ns::socketpair(
        AddressFamily::Unix,
        SockType::Datagram,
        None,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
    )
    .map_err(io("socketpair"))?;
    let _ = sys::set_int_opt(
        mine.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_RCVBUF,
        FORWARD_BUF,
    );
    ns::setsockopt(
        &conn,
        ns::sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(ANSWER_TIMEOUT.as_secs() as i64, 0),
    )
    .map_err(io("SO_RCVTIMEO"))?;
    let hello = Msg::Hello {
        version: VERSION,
        pid: std::process::id(),
        ep,
    };
    match send(conn.as_raw_fd(), &hello, &[theirs.as_raw_fd()]) {
        Ok(()) => {}
        // It closed as we came (going, or refusing a connection it could not watch):
        // whoever holds the name next will answer.
        Err(nix::Error::ECONNRESET) | Err(nix::Error::EPIPE) => return Ok(Joined::Nobody),
        Err(e) => return Err(io("hello to the device's owner")(e)),
    }
    drop(theirs);
    let owner = pid as u32;
    let (rec, mut fds) = match recv(conn.as_raw_fd(), MsgFlags::empty()) {
        Ok(Some(x)) => x,
        // It closed as we came: it is going; whoever follows it will answer.
        Ok(None) | Err(nix::Error::ECONNRESET) => return Ok(Joined::Nobody),
        Err(nix::Error::EAGAIN) => {
            return Err(ShareError::Owner {
                pid: owner,
                what: format!("did not answer a hello in {ANSWER_TIMEOUT:?}"),
            });
        }
        Err(e) => return Err(io("the owner's welcome")(e)),
    };
    match Msg::decode(&rec) {
        Ok(Msg::Welcome { version, .. }) if version == VERSION && fds.len() == 1 => {
            Ok(Joined::Member {
                conn,
                owner_pid: owner,
                data: mine,
                port: fds.pop().expect("one descriptor"),
            })
        }
        Ok(Msg::Welcome { version, .. }) | Ok(Msg::Refused { version, .. }) => {
            Err(ShareError::Version {
                pid: owner,
                theirs: version,
                ours: VERSION,
            })
        }
        Ok(other) => Err(ShareError::Owner {
            pid: owner,
            what: format!("answered a hello with {other:?}"),
        }),
        Err(e) => Err(ShareError::Owner {
            pid: owner,
            what: format!("answered a hello with a bad record: {e}"),
        }),
    }
}

/// Binds the device's abstract name; `None` if another process holds it.
pub(super) fn listen(addr: IpAddr, scope_id: u32) -> Result<Option<OwnedFd>, ShareError> {
    let l = ns::socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )
    .map_err(io("socket(AF_UNIX, SOCK_SEQPACKET)"))?;
    match ns::bind(l.as_raw_fd(), &name(addr, scope_id)) {
        Ok(()) => Ok(Some(l)),
        Err(nix::Error::EADDRINUSE) => Ok(None),
        Err(e) => Err(io("bind the device's name")(e)),
    }
}

/// A request and its answer, on a member's (blocking, timed) connection.
pub(super) fn request(fd: RawFd, owner: u32, m: &Msg) -> Result<Msg, ShareError> {
    let lost = |what: String| ShareError::Owner { pid: owner, what };
    send(fd, m, &[]).map_err(|e| lost(format!("is gone ({e})")))?;
    match recv(fd, MsgFlags::empty()) {
        Ok(Some((rec, _))) => {
            Msg::decode(&rec).map_err(|e| lost(format!("answered with a bad record: {e}")))
        }
        Ok(None) => Err(lost("closed the connection".into())),
        Err(nix::Error::EAGAIN) => Err(lost(format!("did not answer in {ANSWER_TIMEOUT:?}"))),
        Err(e) => Err(lost(format!("is gone ({e})"))),
    }
}
