//! What a device holds in this process (PDs, CQs, MRs, QPs), published for
//! `softrdma res show`, which lists every process's, as iproute2's `rdma res show` lists
//! the kernel's.
//!
//! A soft device lives in each process that opens it, so no one process knows every
//! resource. Each one publishes its own to `DIR/NAME.PID.res` ([`super::stats::dir`]),
//! one resource per line, `KIND key value key value ...` (the first line is `proc pid P
//! comm C`); the command reads the files of live processes. The progress thread writes
//! the file after a change ([`Resources::changed`]; at most every [`EVERY`], so that a
//! program creating 10,000 QPs does not write it 10,000 times) and with the counters
//! while traffic moves (PSNs and states change without a call), and removes it when the
//! device closes.
//!
//! Threads and locks: `pds` and `cqs` are taken by whoever creates one and by the
//! progress thread when it publishes; publishing takes the QP table's read lock and each
//! QP's lock in turn, never two at once.

use super::Device;
use super::cq::CqInner;
use crate::sync::{Lock, Rank};
use softrdma_proto::WcStatus;
use std::fmt::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The shortest time between two writes of the file.
pub(crate) const EVERY: Duration = Duration::from_millis(100);

/// A PD's entry: alive while any handle to the PD is.
pub(crate) struct PdEntry {
    /// Its number.
    pub pdn: u32,
}

/// A connection-manager ID's entry: alive while the ID is; its published fields
/// (`lqpn N qp-type RC state CONNECT ps TCP src-addr A:P dst-addr A:P`), which the CM
/// updates as the ID moves.
pub(crate) struct CmIdEntry {
    /// The ID's number in this process.
    pub idn: u32,
    /// Its fields as published.
    pub fields: Lock<String>,
}

/// The device's list of its PDs, CQs and CM IDs (QPs and MRs have tables of their own).
pub(crate) struct Resources {
    pds: Lock<Vec<Weak<PdEntry>>>,
    cm_ids: Lock<Vec<Weak<CmIdEntry>>>,
    next_cm_idn: AtomicU32,
    cqs: Lock<Vec<(u32, Weak<CqInner>)>>,
    next_cqn: AtomicU32,
    /// Something changed since the file was last written.
    dirty: AtomicBool,
}

impl Default for Resources {
    fn default() -> Self {
        Self {
            pds: Lock::new(Rank::ResLists, Vec::new()),
            cm_ids: Lock::new(Rank::ResLists, Vec::new()),
            next_cm_idn: AtomicU32::new(0),
            cqs: Lock::new(Rank::ResLists, Vec::new()),
            next_cqn: AtomicU32::new(0),
            dirty: AtomicBool::new(false),
        }
    }
}

impl Resources {
    /// Notes PD `pdn`; it stays listed while the returned entry lives.
    pub(crate) fn add_pd(&self, pdn: u32) -> Arc<PdEntry> {
        let e = Arc::new(PdEntry { pdn });
        let mut pds = self.pds.lock();
        pds.retain(|p| p.strong_count() > 0);
        pds.push(Arc::downgrade(&e));
        e
    }

    /// Notes a CQ; it stays listed while it lives. Its number.
    pub(crate) fn add_cq(&self, cq: &Arc<CqInner>) -> u32 {
        let n = self.next_cqn.fetch_add(1, Ordering::Relaxed) + 1;
        let mut cqs = self.cqs.lock();
        cqs.retain(|c| c.1.strong_count() > 0);
        cqs.push((n, Arc::downgrade(cq)));
        n
    }

    /// Notes a CM ID; it stays listed while the returned entry lives.
    pub(crate) fn add_cm_id(&self) -> Arc<CmIdEntry> {
        let e = Arc::new(CmIdEntry {
            idn: self.next_cm_idn.fetch_add(1, Ordering::Relaxed),
            fields: Lock::new(Rank::ResFields, String::new()),
        });
        let mut ids = self.cm_ids.lock();
        ids.retain(|p| p.strong_count() > 0);
        ids.push(Arc::downgrade(&e));
        e
    }

    /// Something was created, destroyed or modified: true if the file was up to date
    /// (the caller then wakes the progress thread to write it).
    pub(crate) fn changed(&self) -> bool {
        !self.dirty.swap(true, Ordering::Relaxed)
    }

    /// Takes the change flag: whether the file must be written.
    pub(crate) fn take_dirty(&self) -> bool {
        self.dirty.swap(false, Ordering::Relaxed)
    }

    /// Whether a change waits to be written.
    pub(crate) fn is_dirty(&self) -> bool {
        self.dirty.load(Ordering::Relaxed)
    }
}

/// Where device `name`'s resources of this process go.
pub(crate) fn path(name: &str) -> PathBuf {
    super::stats::dir().join(format!("{name}.{}.res", std::process::id()))
}

/// `WcStatus::RetryExcErr` as `ibv_wc_status` names it, without the prefix:
/// `RETRY_EXC_ERR`.
fn status_name(s: WcStatus) -> String {
    let mut out = String::new();
    for (i, c) in format!("{s:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// The file's text: every resource `dev` holds now.
pub(crate) fn render(dev: &Device) -> String {
    let comm = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
    let mut s = format!("proc pid {} comm {}\n", std::process::id(), comm.trim());
    let qps = dev.qp_list();
    let cqs: Vec<(u32, Arc<CqInner>)> = dev
        .res
        .cqs
        .lock()
        .iter()
        .filter_map(|(n, w)| Some((*n, w.upgrade()?)))
        .collect();
    let cqn = |c: &Arc<CqInner>| {
        cqs.iter()
            .find(|(_, x)| Arc::ptr_eq(x, c))
            .map_or(0, |(n, _)| *n)
    };
    let mrs = dev.mrs.list();
    let mut qp_pds = Vec::with_capacity(qps.len());
    for q in &qps {
        let (qpn, a, cfg_pd, t, c) = {
            let qp = q.qp.lock();
            (qp.qpn(), qp.query(), qp.pd(), qp.qp_type(), qp.counters())
        };
        qp_pds.push(cfg_pd.0);
        let _ = write!(
            s,
            "qp lqpn {} type {} state {} sq-psn {} rq-psn {} pdn {} sq-cq {} rq-cq {}",
            qpn.value(),
            match t {
                softrdma_proto::QpType::Rc => "RC",
                softrdma_proto::QpType::Uc => "UC",
                softrdma_proto::QpType::Ud => "UD",
            },
            a.state.map_or("-".into(), |s| s.to_string()),
            a.sq_psn.map_or(0, |p| p.value()),
            a.rq_psn.map_or(0, |p| p.value()),
            cfg_pd.0,
            cqn(&q.send_cq),
            cqn(&q.recv_cq),
        );
        if let (Some(d), Some(av)) = (a.dest_qpn, a.av)
            && t != softrdma_proto::QpType::Ud
        {
            let _ = write!(s, " rqpn {} peer {}", d.value(), av.dst);
        }
        let _ = write!(
            s,
            " retries {} timeouts {} rnr-naks-sent {} rnr-naks-rcvd {} sent {} rcvd {}",
            c.retransmits,
            c.timeouts,
            c.rnr_naks_sent,
            c.rnr_naks_rcvd,
            c.sent_packets,
            c.rcvd_packets
        );
        if let Some(e) = *q.last_error.lock() {
            let _ = write!(s, " last-error {}", status_name(e));
        }
        s.push('\n');
    }
    for (n, c) in &cqs {
        let users = qps
            .iter()
            .filter(|q| Arc::ptr_eq(&q.send_cq, c) || Arc::ptr_eq(&q.recv_cq, c))
            .count();
        let _ = writeln!(
            s,
            "cq cqn {n} cqe {} users {users}",
            c.cap.load(Ordering::Relaxed)
        );
    }
    for m in &mrs {
        let _ = writeln!(
            s,
            "mr mrn {} lkey {} rkey {} iova {} mrlen {} pdn {} access {}",
            m.key,
            m.key,
            m.key,
            m.addr,
            m.len,
            m.pd.0,
            m.access.bits()
        );
    }
    let pds: Vec<u32> = dev
        .res
        .pds
        .lock()
        .iter()
        .filter_map(|w| Some(w.upgrade()?.pdn))
        .collect();
    for pdn in pds {
        let users = qp_pds.iter().filter(|p| **p == pdn).count()
            + mrs.iter().filter(|m| m.pd.0 == pdn).count();
        let _ = writeln!(s, "pd pdn {pdn} users {users}");
    }
    let ids: Vec<Arc<CmIdEntry>> = crate::sync::upgraded(&dev.res.cm_ids.lock());
    for e in ids {
        let f = e.fields.lock().clone();
        let _ = writeln!(s, "cm_id cm-idn {} {f}", e.idn);
    }
    s
}

/// Writes `dev`'s file (whole: see [`super::stats::replace`]).
pub(crate) fn write(dev: &Device) {
    super::stats::replace(&path(&dev.stats_key()), &render(dev));
}
