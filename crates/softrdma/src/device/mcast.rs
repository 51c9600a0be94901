//! Multicast: the groups the device's UD QPs are attached to (rxe's `rxe_mcast.c`), the
//! joining and leaving of each group's socket, and the receive pass over those sockets,
//! whose datagrams go to every member.
//!
//! Owns: `attach`, `detach`, `detach_all` and `drain_groups`, over the device's `groups`
//! and `grouped`. May call: the datapath's group sockets, the progress thread's poll
//! (registering a group's socket), and the receive path's services ([`super::rx`]).
//!
//! Threads and locks: attach and detach run on application threads and take `Groups`;
//! the receive pass runs on the progress thread and takes `Rx`, under it the QP table's
//! read lock and then `Groups` (a lookup of the members), then each member's lock.

use super::Device;
use super::progress::{GROUP, SocketRef};
use super::rx::RxState;
use mio::Interest;
use std::net::IpAddr;
use std::sync::atomic::Ordering;

impl Device {
    /// Attaches QP `qpn` to the multicast group at IP address `group` (the first member
    /// joins the group on the device's interface). Attaching twice is attaching once.
    /// ENOMEM past the device's limits (`max_mcast_grp`, `max_mcast_qp_attach`,
    /// `max_total_mcast_qp_attach`), as rxe.
    pub(crate) fn attach(&self, qpn: u32, group: IpAddr) -> std::io::Result<()> {
        use crate::config::limits::{
            MAX_MCAST_GRP, MAX_MCAST_QP_ATTACH, MAX_TOTAL_MCAST_QP_ATTACH,
        };
        let full = || std::io::Error::from_raw_os_error(libc::ENOMEM);
        let mut groups = self.groups.lock();
        let total: usize = groups.values().map(Vec::len).sum();
        if let Some(m) = groups.get_mut(&group) {
            if !m.contains(&qpn) {
                if m.len() >= MAX_MCAST_QP_ATTACH as usize
                    || total >= MAX_TOTAL_MCAST_QP_ATTACH as usize
                {
                    return Err(full());
                }
                m.push(qpn);
            }
            return Ok(());
        }
        if groups.len() >= MAX_MCAST_GRP as usize || total >= MAX_TOTAL_MCAST_QP_ATTACH as usize {
            return Err(full());
        }
        if let Some(fd) = self.datapath.join(group)? {
            let r = self
                .registry
                .register(&mut SocketRef(fd), GROUP, Interest::READABLE);
            if let Err(e) = r {
                self.datapath.leave(group);
                return Err(e);
            }
        }
        groups.insert(group, vec![qpn]);
        self.grouped.store(true, Ordering::Release);
        Ok(())
    }

    /// Detaches QP `qpn` from `group`; false if it was not attached. The last member
    /// leaves the group.
    pub(crate) fn detach(&self, qpn: u32, group: IpAddr) -> bool {
        let mut groups = self.groups.lock();
        let Some(m) = groups.get_mut(&group) else {
            return false;
        };
        let Some(i) = m.iter().position(|q| *q == qpn) else {
            return false;
        };
        m.swap_remove(i);
        if m.is_empty() {
            groups.remove(&group);
            // Closing the socket takes it out of the poll too.
            self.datapath.leave(group);
            self.grouped.store(!groups.is_empty(), Ordering::Release);
        }
        true
    }

    /// Detaches QP `qpn` from every group (it is being destroyed).
    pub(crate) fn detach_all(&self, qpn: u32) {
        let joined: Vec<IpAddr> = self
            .groups
            .lock()
            .iter()
            .filter(|(_, m)| m.contains(&qpn))
            .map(|(g, _)| *g)
            .collect();
        for g in joined {
            self.detach(qpn, g);
        }
    }

    /// Receives what waits for the multicast groups and hands each datagram to the
    /// group's members, then services them as [`Device::drain`] does. True if anything
    /// came.
    pub(super) fn drain_groups(&self, defer: bool) -> bool {
        let mut st = self.rx.lock();
        let RxState { rx, group_buf, .. } = &mut *st;
        // The largest UDP datagram.
        group_buf.resize(65536, 0);
        let now = self.now();
        let n = self
            .datapath
            .recv_groups(group_buf, &mut |group, from, data| {
                rx.datagram(self, now, group, from.ip(), from.port(), data);
            });
        if n == 0 {
            return false;
        }
        self.publish(rx.take_counts());
        self.service_touched(rx, now);
        if defer {
            self.defer_acks(now);
        } else {
            self.flush_batch(true);
        }
        true
    }
}
