//! A batch's send: `sendmmsg(2)` with UDP GSO (one send of many equal-sized segments,
//! `UDP_SEGMENT`), which moves many packets per system call, and the IP ID each packet's
//! ICRC must cover on a connected socket.
//!
//! Threads: a batch is its sender's alone; a send takes no lock but the socket's own.

use super::SendBatch;
use crate::datapath::socket::{
    BATCH, GSO_MAX_BYTES, GSO_MAX_SEGS, IOV_PER_CALL, SOL_UDP, UDP_SEGMENT, to_storage,
};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::RawFd;

/// Room for a sent message's control data: a GSO segment size (`UDP_SEGMENT`, a u16) and
/// a TOS or traffic class (an int), each in its aligned `CMSG_SPACE`.
const TX_CMSG_LEN: usize = 48;

impl SendBatch {
    /// Cuts the queued packets into the messages a flush sends, as (first packet, count,
    /// GSO segment size or 0): runs of equal-sized packets to one destination become one
    /// GSO message each (the last of a run may be shorter; at most [`GSO_MAX_SEGS`]
    /// segments and [`GSO_MAX_BYTES`] bytes), where GSO is allowed (`use_gso`) and the
    /// segments stay in the kernel (loopback, or anywhere with `everywhere`).
    fn group(&self, groups: &mut Vec<(usize, usize, usize)>, use_gso: bool, everywhere: bool) {
        groups.clear();
        let mut i = 0;
        while i < self.pkts.len() {
            let p = self.pkts[i];
            let seg = p.wire_len();
            let mut j = i + 1;
            let mut bytes = seg;
            // GSO only where the segments stay in the kernel (loopback): through a bridge to
            // a VM's tap, Linux 6.1 delivered only the first segment of each burst.
            let gso_here = use_gso && (p.dst.ip().is_loopback() || everywhere);
            while gso_here && j < self.pkts.len() && j - i < GSO_MAX_SEGS {
                let q = &self.pkts[j];
                let len = q.wire_len();
                // One GSO send has one IP header, so one TOS.
                if q.dst != p.dst || q.tos != p.tos || len > seg || bytes + len > GSO_MAX_BYTES {
                    break;
                }
                bytes += len;
                j += 1;
                if len < seg {
                    break; // only the last segment may be shorter
                }
            }
            groups.push((i, j - i, if j - i > 1 { seg } else { 0 }));
            i = j;
        }
    }

    /// Sends everything in as few calls as the kernel allows: runs of equal-sized packets to
    /// one destination go as single GSO sends (the last of a run may be shorter), the rest
    /// as individual datagrams, all through `sendmmsg`: one call per destination that has a
    /// connected socket, one for all others. Returns (sent, failed, system calls).
    pub fn flush(
        &mut self,
        tx: &crate::datapath::tx::TxPath,
        gso: &std::sync::atomic::AtomicBool,
    ) -> (usize, usize, usize) {
        use std::sync::atomic::Ordering;
        let mut groups = std::mem::take(&mut self.groups);
        self.group(&mut groups, gso.load(Ordering::Relaxed), tx.gso_everywhere);
        let (mut sent, mut failed, mut calls) = (0, 0, 0);
        let mut g = 0;
        let mut route = self.route.take();
        let mut conn_of = |dst: SocketAddr| match &route {
            // The path is alive (it is `tx`) and holds its sockets: the upgrade succeeds.
            Some((id, d, c)) if *id == tx.id && *d == dst => c.as_ref().and_then(|c| c.upgrade()),
            _ => {
                let (c, settled) = tx.route(dst);
                // Not while the learner is connecting it: ask again at the next flush.
                route = settled.then(|| (tx.id, dst, c.as_ref().map(std::sync::Arc::downgrade)));
                c
            }
        };
        while g < groups.len() {
            let dst = self.pkts[groups[g].0].dst;
            let conn = conn_of(dst);
            // A run: messages to this one destination when it has a connected socket, else
            // to any destinations that have none.
            let mut end = g + 1;
            while end < groups.len() && end - g < BATCH {
                let d = self.pkts[groups[end].0].dst;
                if d != dst && (conn.is_some() || conn_of(d).is_some()) {
                    break;
                }
                end += 1;
            }
            let chunk = &groups[g..end];
            calls += 1;
            let connected = conn
                .as_ref()
                .and_then(|c| self.send_connected(&mut c.lock(), tx, chunk));
            let result = match connected {
                Some(r) => r,
                None => {
                    // IPv4 packets leave with ID 0 here, and the segments of a GSO send, if
                    // the kernel splits it, with their index.
                    if dst.is_ipv4() {
                        self.set_idents(chunk, |_| 0);
                    }
                    self.send_chunk(tx.plain_fd(), chunk, true)
                }
            };
            match result {
                Ok(n) => {
                    sent += chunk.iter().take(n).map(|c| c.1).sum::<usize>();
                    g += n;
                }
                Err(e) => {
                    let no_gso = matches!(
                        e.raw_os_error(),
                        Some(libc::EINVAL | libc::EIO | libc::ENOPROTOOPT)
                    );
                    if chunk[0].2 > 0 && no_gso {
                        // No GSO here: send the rest one datagram at a time from now on.
                        gso.store(false, Ordering::Relaxed);
                        let first = chunk[0].0;
                        self.pkts.drain(..first);
                        self.groups = groups;
                        let (s2, f2, c2) = self.flush(tx, gso);
                        return (sent + s2, failed + f2, calls + c2);
                    }
                    // The first message could not go (a full buffer, an unreachable address):
                    // drop it; retransmission recovers what matters.
                    failed += chunk[0].1;
                    g += 1;
                }
            }
        }
        // The kernel has copied every payload by now (or the packet was dropped).
        self.clear();
        self.groups = groups;
        self.route = route;
        (sent, failed, calls)
    }

    /// Sends `chunk` (messages to one destination) on its connected socket, each packet's
    /// ICRC patched for the IPv4 ID the kernel will give it; `None` if the socket's counter
    /// is unknown and a probe could not learn it (the unconnected socket then serves).
    fn send_connected(
        &mut self,
        c: &mut crate::datapath::tx::Conn,
        tx: &crate::datapath::tx::TxPath,
        chunk: &[(usize, usize, usize)],
    ) -> Option<std::io::Result<usize>> {
        let plan = c.plan(tx, chunk.iter().map(|m| m.1 as u16))?;
        if !plan.ids().is_empty() {
            // The segments of a GSO send get its ID plus their index when split.
            self.set_idents(chunk, |m| plan.ids()[m]);
        }
        let r = self.send_chunk(c.fd(), chunk, false);
        match &r {
            Ok(n) => c.commit(&plan, *n, true),
            Err(_) => c.commit(&plan, 0, false),
        }
        Some(r)
    }

    /// Patches the ICRC of every packet of `chunk` for the IPv4 ID it gets: its message's
    /// (`ids(m)` for message `m`) plus its index in the message, as the kernel numbers the
    /// segments of a GSO send when it splits it (`inet_gso_segment`).
    fn set_idents(&mut self, chunk: &[(usize, usize, usize)], ids: impl Fn(usize) -> u16) {
        for (m, &(first, count, _)) in chunk.iter().enumerate() {
            let base = ids(m);
            for k in 0..count {
                let p = &mut self.pkts[first + k];
                let to = base.wrapping_add(k as u16);
                if p.ident == to || p.len < 4 {
                    continue;
                }
                let x = self.patches.xor(p.wire_len() - 4, p.ident, to);
                let at = p.at + p.len - 4;
                let icrc = &mut self.data[at..at + 4];
                let v = u32::from_le_bytes([icrc[0], icrc[1], icrc[2], icrc[3]]) ^ x;
                icrc.copy_from_slice(&v.to_le_bytes());
                p.ident = to;
            }
        }
    }

    /// One `sendmmsg` of `chunk` (at most [`BATCH`] messages; `sendmsg` for one) on `fd`;
    /// how many went.
    /// Messages carry their destination when `named`; a connected socket needs none.
    fn send_chunk(
        &mut self,
        fd: RawFd,
        chunk: &[(usize, usize, usize)],
        named: bool,
    ) -> std::io::Result<usize> {
        // Only the headers in use are written: zeroing all BATCH of them would cost a
        // small message more than its system call.
        let mut names = [const { MaybeUninit::<libc::sockaddr_storage>::uninit() }; BATCH];
        let mut iov = [const { MaybeUninit::<libc::iovec>::uninit() }; IOV_PER_CALL];
        let mut cmsgs = [const { MaybeUninit::<[u64; TX_CMSG_LEN / 8]>::uninit() }; BATCH];
        let mut msgs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; BATCH];
        let mut starts = [0usize; BATCH];
        let mut used = 0;
        let mut count = 0;
        for (k, c) in chunk.iter().enumerate() {
            let pkts = &self.pkts[c.0..c.0 + c.1];
            let most: usize = pkts
                .iter()
                .map(|p| if p.ext.is_some() { 3 } else { 1 })
                .sum();
            if used + most > IOV_PER_CALL {
                break; // the rest goes in the next call
            }
            let start = used;
            if self.held.is_empty() {
                // Nothing lent: packets are queued back to back, so a message is one piece.
                let (first, last) = (&pkts[0], &pkts[pkts.len() - 1]);
                iov[used].write(libc::iovec {
                    iov_base: self.data[first.at..].as_ptr() as *mut libc::c_void,
                    iov_len: last.at + last.len - first.at,
                });
                used += 1;
            } else {
                // The message's pieces, each joined to the one before where they touch:
                // packets built back to back are one piece, as are a lent payload's pad and
                // ICRC and the next packet's headers.
                let mut end: *const u8 = std::ptr::null();
                for (ptr, len) in pkts.iter().flat_map(|p| self.pieces(p)) {
                    if len == 0 {
                        continue;
                    }
                    if used > start && ptr == end {
                        // SAFETY: written in an earlier round of this loop.
                        unsafe { iov[used - 1].assume_init_mut() }.iov_len += len;
                    } else {
                        iov[used].write(libc::iovec {
                            iov_base: ptr as *mut libc::c_void,
                            iov_len: len,
                        });
                        used += 1;
                    }
                    // SAFETY: one past the end of the piece, which lies in one allocation.
                    end = unsafe { ptr.add(len) };
                }
            }
            // SAFETY: all-zero mmsghdr is valid.
            let m = msgs[k].write(unsafe { MaybeUninit::zeroed().assume_init() });
            // `msg_iov` is set below, once `iov` is written: a pointer taken now would not
            // survive the writes of the next messages' pieces.
            m.msg_hdr.msg_iovlen = used - start;
            starts[k] = start;
            count += 1;
            if named {
                let (ss, len) = to_storage(pkts[0].dst);
                m.msg_hdr.msg_name = (names[k].write(ss) as *mut libc::sockaddr_storage).cast();
                m.msg_hdr.msg_namelen = len;
            }
            let (seg, tos) = (c.2, pkts[0].tos);
            if seg > 0 || tos != 0 {
                let buf = cmsgs[k].write([0; TX_CMSG_LEN / 8]);
                m.msg_hdr.msg_control = buf.as_mut_ptr().cast();
                m.msg_hdr.msg_controllen = TX_CMSG_LEN;
                // SAFETY: the control buffer is TX_CMSG_LEN bytes, room for both messages
                // (CMSG_SPACE(2) + CMSG_SPACE(4)); CMSG_FIRSTHDR and CMSG_NXTHDR stay
                // inside it, and `cmsgs[k]` outlives the call.
                unsafe {
                    let mut c = libc::CMSG_FIRSTHDR(&m.msg_hdr);
                    let mut used = 0;
                    if seg > 0 {
                        (*c).cmsg_level = SOL_UDP;
                        (*c).cmsg_type = UDP_SEGMENT;
                        (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
                        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg as u16);
                        used += libc::CMSG_SPACE(2) as usize;
                        c = libc::CMSG_NXTHDR(&m.msg_hdr, c);
                    }
                    if tos != 0 {
                        // The per-packet TOS (IP_TOS) or traffic class (IPV6_TCLASS): one
                        // socket serves QPs of every traffic class.
                        ((*c).cmsg_level, (*c).cmsg_type) = if pkts[0].dst.is_ipv4() {
                            (libc::IPPROTO_IP, libc::IP_TOS)
                        } else {
                            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
                        };
                        (*c).cmsg_len = libc::CMSG_LEN(4) as usize;
                        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<i32>(), tos.into());
                        used += libc::CMSG_SPACE(4) as usize;
                    }
                    m.msg_hdr.msg_controllen = used;
                }
            }
        }
        let iov = iov.as_mut_ptr().cast::<libc::iovec>();
        for (m, start) in msgs.iter_mut().zip(starts).take(count) {
            // SAFETY: the first `count` headers were written above; `start < used <=
            // IOV_PER_CALL`, so the pointer stays inside `iov`.
            unsafe { m.assume_init_mut().msg_hdr.msg_iov = iov.add(start) };
        }
        if count == 1 {
            // One message (a ping-pong's turn) goes through `sendmsg`, which spares
            // `sendmmsg`'s loop and copy of the message vector: about 50 ns a turn.
            // SAFETY: the first header was written above and points into arrays and
            // `self.data`, which live across the call.
            let r = unsafe { libc::sendmsg(fd, &msgs[0].assume_init_ref().msg_hdr, 0) };
            return if r < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(1)
            };
        }
        // SAFETY: the first `count` headers of `msgs` were written above and point into
        // arrays, `self.data` and the regions `self.held` keeps, which live across the call.
        let n = unsafe {
            libc::sendmmsg(
                fd,
                msgs.as_mut_ptr().cast::<libc::mmsghdr>(),
                count as u32,
                0,
            )
        };
        if n <= 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datapath::socket::{find_ipv4, sent_copy, set_int_opt};
    use softrdma_wire::icrc;
    use std::net::{IpAddr, Ipv4Addr};

    /// How a batch is cut into GSO messages, with no socket: a run of equal packets to one
    /// loopback destination is one message (its last packet may be shorter, and ends it), a
    /// new destination or a longer packet starts another, the segment limit splits a long
    /// run, and with GSO off, or to a remote address, every packet goes alone.
    #[test]
    fn runs_of_equal_packets_to_one_destination_become_one_gso_message() {
        let x: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        let y: SocketAddr = "127.0.0.3:4791".parse().unwrap();
        let far: SocketAddr = "10.0.0.9:4791".parse().unwrap();
        let mut b = SendBatch::default();
        for (len, dst) in [(1000, x), (1000, x), (1000, x), (500, x), (1000, x)] {
            b.push(&vec![0u8; len], dst, 0);
        }
        b.push(&[0u8; 1000], y, 0);
        b.push(&[0u8; 1200], y, 0);
        let mut g = Vec::new();
        b.group(&mut g, true, false);
        assert_eq!(g, [(0, 4, 1000), (4, 1, 0), (5, 1, 0), (6, 1, 0)]);
        b.group(&mut g, false, false);
        assert_eq!(g.len(), 7, "no GSO: one message per packet");
        b.clear();
        for _ in 0..GSO_MAX_SEGS + 3 {
            b.push(&[0u8; 100], x, 0);
        }
        b.group(&mut g, true, false);
        assert_eq!(g, [(0, GSO_MAX_SEGS, 100), (GSO_MAX_SEGS, 3, 100)]);
        b.clear();
        for _ in 0..3 {
            b.push(&[0u8; 100], far, 0);
        }
        b.group(&mut g, true, false);
        assert_eq!(g.len(), 3, "a remote destination gets no GSO unless asked");
        b.group(&mut g, true, true);
        assert_eq!(g, [(0, 3, 100)]);
    }

    /// A change of TOS ends a GSO run: one GSO send has one IP header.
    #[test]
    fn a_new_tos_starts_a_new_gso_message() {
        let x: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        let mut b = SendBatch::default();
        for tos in [0, 0, 0x68, 0x68, 0x68, 0] {
            b.push(&[0u8; 100], x, tos);
        }
        let mut g = Vec::new();
        b.group(&mut g, true, false);
        assert_eq!(g, [(0, 2, 100), (2, 3, 100), (5, 1, 0)]);
    }

    /// Receives one datagram on `sock` (which asked for IP_RECVTOS or IPV6_RECVTCLASS):
    /// its first byte and the TOS or traffic class it arrived with.
    fn recv_with_tos(sock: &std::net::UdpSocket) -> (u8, u8) {
        use std::os::fd::AsRawFd;
        let mut data = [0u8; 2048];
        let mut control = [0u64; 16];
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr().cast(),
            iov_len: data.len(),
        };
        // SAFETY: all-zero msghdr is valid; it points at buffers that outlive the call.
        let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
        m.msg_iov = &mut iov;
        m.msg_iovlen = 1;
        m.msg_control = control.as_mut_ptr().cast();
        m.msg_controllen = std::mem::size_of_val(&control);
        // SAFETY: a valid socket and the message set up above.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut m, 0) };
        assert!(n > 0, "recvmsg: {}", std::io::Error::last_os_error());
        let mut tos = None;
        // SAFETY: the kernel filled `control` up to msg_controllen; CMSG_FIRSTHDR and
        // CMSG_NXTHDR walk inside it.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&m);
            while !c.is_null() {
                let (l, t) = ((*c).cmsg_level, (*c).cmsg_type);
                if (l, t) == (libc::IPPROTO_IP, libc::IP_TOS) {
                    tos = Some(*libc::CMSG_DATA(c));
                } else if (l, t) == (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) {
                    tos = Some(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<i32>()) as u8);
                }
                c = libc::CMSG_NXTHDR(&m, c);
            }
        }
        (data[0], tos.expect("the datagram's TOS"))
    }

    /// Each packet leaves with its own TOS (IPv4) or traffic class (IPv6), as the
    /// receiving kernel reports it: DSCP and ECN bits, GSO runs and single datagrams,
    /// through the unconnected socket and a connected one, 0 where none was asked.
    #[test]
    fn packets_leave_with_their_traffic_class() {
        let (v4a, v4b) = (Ipv4Addr::new(127, 0, 78, 1), Ipv4Addr::new(127, 0, 78, 2));
        let v6 = std::net::Ipv6Addr::LOCALHOST;
        let pairs: [(IpAddr, IpAddr); 2] = [(v4a.into(), v4b.into()), (v6.into(), v6.into())];
        for (me, peer) in pairs {
            for connect in [false, true] {
                let sink = std::net::UdpSocket::bind((peer, 0)).unwrap();
                sink.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                    .unwrap();
                let fd = std::os::fd::AsRawFd::as_raw_fd(&sink);
                if peer.is_ipv4() {
                    set_int_opt(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1).unwrap();
                } else {
                    set_int_opt(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1).unwrap();
                }
                let dst = sink.local_addr().unwrap();
                let tx = crate::datapath::tx::TxPath::new(
                    Default::default(),
                    me,
                    0,
                    crate::datapath::tx::TxOptions {
                        connect,
                        gso: true,
                        gso_everywhere: false,
                    },
                )
                .unwrap();
                if connect {
                    assert!(tx.conn_settled(dst).is_some(), "a connected socket");
                }
                let gso = std::sync::atomic::AtomicBool::new(true);
                let mut b = SendBatch::default();
                let want = [0x68, 0x68, 0x68, 0, 0xb9, 0xb9, 0x04];
                for (i, &tos) in want.iter().enumerate() {
                    b.push(&[i as u8; 64], dst, tos);
                }
                let (sent, failed, _) = b.flush(&tx, &gso);
                assert_eq!((sent, failed), (want.len(), 0));
                let mut got = vec![None; want.len()];
                for _ in 0..want.len() {
                    let (i, tos) = recv_with_tos(&sink);
                    got[usize::from(i)] = Some(tos);
                }
                let want: Vec<_> = want.iter().map(|&t| Some(t)).collect();
                assert_eq!(got, want, "{me} -> {peer}, connected {connect}");
            }
        }
    }

    /// An InfiniBand part (BTH, payload) of `len` bytes with the ICRC that the engine writes:
    /// for IP ID 0.
    fn packet(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, len: usize, seed: u8) -> Vec<u8> {
        let mut p: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect();
        p[0] = 0x0a; // RC RDMA WRITE Only
        let c = icrc::compute_for(src.into(), dst.into(), sport, &p[..len - 4]).unwrap();
        p[len - 4..].copy_from_slice(&c.to_le_bytes());
        p
    }

    /// What left a connected socket, read back from the kernel's own copies (a transmit
    /// timestamp on every send): every segment's ICRC is right for the IP ID it carries
    /// (the send's ID plus the segment's index), for single datagrams and GSO sends alike.
    #[test]
    fn connected_sends_carry_an_icrc_right_for_their_ip_id() {
        sends_carry_an_icrc_right_for_their_ip_id(true, 62);
    }

    /// The same for the unconnected socket, which sends ID 0 (its GSO segments: their index).
    #[test]
    fn unconnected_sends_carry_an_icrc_right_for_their_ip_id() {
        sends_carry_an_icrc_right_for_their_ip_id(false, 64);
    }

    fn sends_carry_an_icrc_right_for_their_ip_id(connect: bool, last: u8) {
        let (me, peer) = (
            Ipv4Addr::new(127, 0, 77, last),
            Ipv4Addr::new(127, 0, 77, last + 1),
        );
        let tx = crate::datapath::tx::TxPath::new(
            Default::default(),
            me.into(),
            0,
            crate::datapath::tx::TxOptions {
                connect,
                gso: true,
                gso_everywhere: false,
            },
        )
        .unwrap();
        let _sink = std::net::UdpSocket::bind((peer, softrdma_wire::ROCE_V2_PORT)).unwrap();
        let dst = SocketAddr::new(peer.into(), softrdma_wire::ROCE_V2_PORT);
        let fd = match tx.conn_settled(dst) {
            Some(c) => c.lock().fd(),
            None => {
                assert!(!connect, "a connected socket");
                tx.plain_fd()
            }
        };
        set_int_opt(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, 1 << 8).unwrap();
        let gso = std::sync::atomic::AtomicBool::new(true);
        let mut b = SendBatch::default();
        let mut checked = 0;
        // A GSO send of four segments (the last shorter), a single datagram, a [WRITE, ACK]
        // pair, and a run of 70 (two sends: at most 64 segments each).
        for sizes in [vec![60, 60, 60, 32], vec![40], vec![56, 20], vec![48; 70]] {
            for (i, &n) in sizes.iter().enumerate() {
                b.push(&packet(me, peer, tx.port(), n, i as u8), dst, 0);
            }
            let (sent, failed, _) = b.flush(&tx, &gso);
            assert_eq!((sent, failed), (sizes.len(), 0));
            let mut left = &sizes[..];
            while !left.is_empty() {
                let segs = left.len().min(GSO_MAX_SEGS);
                let total: usize = left[..segs].iter().sum();
                let mut copy = vec![0u8; 65536];
                let n = sent_copy(fd, &mut copy, std::time::Duration::from_secs(2)).unwrap();
                let at = find_ipv4(&copy[..n], me, peer, 28 + total).expect("an IPv4 header");
                let ident = u16::from_be_bytes([copy[at + 4], copy[at + 5]]);
                let mut p = at + 28;
                for (k, &len) in left[..segs].iter().enumerate() {
                    let ib = &copy[p..p + len];
                    let wire = u32::from_le_bytes(ib[len - 4..].try_into().unwrap());
                    let id = ident.wrapping_add(k as u16);
                    let want =
                        icrc::compute_for_ipv4_ident(me, peer, id, tx.port(), &ib[..len - 4])
                            .unwrap();
                    assert_eq!(wire, want, "segment {k} of {segs}, IP ID {id}");
                    p += len;
                    checked += 1;
                }
                left = &left[segs..];
            }
        }
        assert_eq!(checked, 77);
    }
}
