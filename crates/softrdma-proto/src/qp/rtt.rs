//! A requester's round-trip estimate, from which it times its tail-loss probes and judges
//! whether a loss came with queueing (congestion) or without (a lossy link).
//!
//! Samples are taken as RFC 6298 describes for TCP: one timed packet at a time, never a
//! retransmitted one (Karn's rule), smoothed with gains 1/8 and 1/4. All time is injected.

use core::time::Duration;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The shortest probe timeout. Below this a probe would race the ACK it waits for on any
/// real host, whose scheduler alone delays a reply by microseconds.
pub const MIN_PTO: Duration = Duration::from_micros(10);

/// The probe timeout before the first sample, with no ACK timeout to scale it from (an
/// infinite one); otherwise it is a quarter of the ACK timeout (17 ms at ibv_rc_pingpong's
/// 14). A path's first round trip may be slow (a peer's first message through a cold
/// emulated VM took 5.5 ms here), and a probe then would only be a needless duplicate.
pub const INITIAL_PTO: Duration = Duration::from_millis(20);

/// Queueing delay (on top of the smallest round trip seen) that counts as congestion even
/// when the smallest round trip is tiny.
pub const MIN_QUEUE_DELAY: Duration = Duration::from_micros(20);

/// The smallest round trip seen on one path (one destination, from one device) by any of
/// the QPs that share it, as Linux keeps TCP's metrics per destination. A QP that opens
/// while the path's queue is already full never sees the path empty by itself, and would
/// take the full queue for the path's normal delay; the QPs that share a path share their
/// smallest sample. Lock-free: any thread may offer samples.
#[derive(Debug)]
pub struct PathRtt(AtomicU64);

impl Default for PathRtt {
    /// A path with no sample yet.
    fn default() -> Self {
        Self(AtomicU64::new(u64::MAX))
    }
}

impl PathRtt {
    /// A path with no sample yet, to share.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The smallest sample offered, if any.
    pub fn min(&self) -> Option<Duration> {
        match self.0.load(Ordering::Relaxed) {
            u64::MAX => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    /// Offers a sample.
    pub fn offer(&self, r: Duration) {
        let ns = u64::try_from(r.as_nanos()).unwrap_or(u64::MAX - 1);
        self.0.fetch_min(ns, Ordering::Relaxed);
    }
}

/// Smoothed round trip, its variation, and the smallest and latest samples. Kept in
/// nanoseconds, and the probe timeout worked out once per sample, because the engine consults
/// them on every ACK and every timer poll.
#[derive(Debug, Clone)]
pub struct RttEstimator {
    /// Smoothed round trip; 0 before the first sample.
    srtt: u64,
    rttvar: u64,
    /// This QP's smallest sample; `u64::MAX` before the first.
    min: u64,
    latest: u64,
    /// The probe timeout the samples give, before the ACK delay and the cap.
    pto: u64,
    path: Option<Arc<PathRtt>>,
    ack_delay: u64,
}

impl Default for RttEstimator {
    fn default() -> Self {
        Self {
            srtt: 0,
            rttvar: 0,
            min: u64::MAX,
            latest: 0,
            pto: 0,
            path: None,
            ack_delay: 0,
        }
    }
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl RttEstimator {
    /// Shares the smallest round trip with the other QPs of `path`.
    pub fn share(&mut self, path: Arc<PathRtt>) {
        if self.min != u64::MAX {
            path.offer(Duration::from_nanos(self.min));
        }
        self.path = Some(path);
    }

    /// Takes one sample.
    pub fn sample(&mut self, r: Duration) {
        let r = ns(r).max(1);
        self.latest = r;
        if r < self.min {
            self.min = r;
            if let Some(p) = &self.path
                && p.min().is_none_or(|m| r < ns(m))
            {
                p.offer(Duration::from_nanos(r));
            }
        }
        if self.srtt == 0 {
            self.srtt = r;
            self.rttvar = r / 2;
        } else {
            let err = self.srtt.abs_diff(r);
            self.rttvar = (self.rttvar * 3 + err) / 4;
            self.srtt = (self.srtt * 7 + r) / 8;
        }
        self.pto = (2 * self.srtt)
            .max(self.srtt + 4 * self.rttvar)
            .max(ns(MIN_PTO));
    }

    /// Takes a sample that may be short of the real round trip (the ACK of a resent packet,
    /// which may answer an earlier copy): it counts only if it shows a queue even so.
    pub fn sample_lower_bound(&mut self, r: Duration) {
        let before = self.latest;
        self.latest = ns(r);
        if !self.over() {
            self.latest = before;
        }
    }

    /// The smoothed round trip, once there is a sample.
    pub fn srtt(&self) -> Option<Duration> {
        (self.srtt != 0).then(|| Duration::from_nanos(self.srtt))
    }

    /// The smallest sample, this QP's or the path's, once there is one of its own.
    pub fn min(&self) -> Option<Duration> {
        self.min_ns().map(Duration::from_nanos)
    }

    fn min_ns(&self) -> Option<u64> {
        if self.min == u64::MAX {
            return None;
        }
        let path = self
            .path
            .as_ref()
            .and_then(|p| p.min())
            .map_or(u64::MAX, ns);
        Some(self.min.min(path))
    }

    /// Allows for a peer that may hold an ACK back this long (IBTA 9.7.5.1 lets it
    /// coalesce and delay ACKs within the requester's timeout): probes wait that much more,
    /// as TCP's tail-loss probe waits out a delayed ACK.
    pub fn set_peer_ack_delay(&mut self, d: Duration) {
        self.ack_delay = ns(d);
    }

    /// How long silence must last before a probe: two round trips, or one plus four
    /// deviations when the round trip varies that much, at least [`MIN_PTO`] (before any
    /// sample of its own, three of the path's smallest round trips, or with none of those
    /// either [`INITIAL_PTO`] or a quarter of `cap`), plus the peer's ACK delay, and at most
    /// `cap` (the ACK timeout, which a probe must come well before to be of any use).
    pub fn pto(&self, cap: Option<Duration>) -> Duration {
        let p = if self.srtt != 0 {
            self.pto
        } else {
            match self.path.as_ref().and_then(|p| p.min()) {
                // As if the path's smallest round trip were this QP's first sample.
                Some(m) => (3 * ns(m)).max(ns(MIN_PTO)),
                None => ns(cap.map_or(INITIAL_PTO, |c| c / 4)),
            }
        };
        let p = Duration::from_nanos(p.saturating_add(self.ack_delay));
        cap.map_or(p, |c| p.min(c))
    }

    /// True when the latest sample shows a queue building (see
    /// [`RttEstimator::over_target`]). With no sample yet, the answer is yes: a first burst
    /// that loses packets has no better evidence.
    pub fn queueing(&self) -> bool {
        self.min == u64::MAX || self.over()
    }

    /// The delay target: half as much again as the smallest round trip, and at least
    /// [`MIN_QUEUE_DELAY`] above it.
    fn target(&self) -> Option<u64> {
        let m = self.min_ns()?;
        Some(m + (m / 2).max(ns(MIN_QUEUE_DELAY)))
    }

    fn over(&self) -> bool {
        self.target().is_some_and(|t| self.latest > t)
    }

    /// How far the latest sample is over the delay target (see above), as a share of the
    /// sample: `None` when it is not over, or there is no sample yet. The margin is no wider
    /// because a QP that first measured a queue already half full must still see the rest
    /// of it; narrower, and a host's scheduling jitter would pass for a queue.
    pub fn over_target(&self) -> Option<f64> {
        let t = self.target()?;
        (self.latest > t).then(|| (self.latest - t) as f64 / self.latest as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn first_sample_sets_srtt_and_half_variation() {
        let mut r = RttEstimator::default();
        assert_eq!(r.pto(None), INITIAL_PTO);
        assert_eq!(r.pto(Some(us(1000))), us(250));
        r.sample(us(100));
        assert_eq!(r.srtt(), Some(us(100)));
        // max(2 * 100, 100 + 4 * 50)
        assert_eq!(r.pto(None), us(300));
        assert_eq!(r.pto(Some(us(120))), us(120));
    }

    #[test]
    fn steady_samples_converge_to_two_round_trips() {
        let mut r = RttEstimator::default();
        for _ in 0..100 {
            r.sample(us(40));
        }
        assert_eq!(r.srtt(), Some(us(40)));
        assert_eq!(r.pto(None), us(80));
        for _ in 0..100 {
            r.sample(us(1));
        }
        assert_eq!(r.pto(None), MIN_PTO);
        r.set_peer_ack_delay(us(1000));
        assert_eq!(r.pto(None), MIN_PTO + us(1000));
    }

    #[test]
    fn queueing_needs_half_the_minimum_and_a_margin_more() {
        let mut r = RttEstimator::default();
        assert!(r.queueing());
        r.sample(us(10));
        assert!(!r.queueing());
        r.sample(us(25));
        assert!(!r.queueing(), "2.5x but only 15 us above the minimum");
        r.sample(us(31));
        assert!(r.queueing());
        r.sample(us(11));
        assert!(!r.queueing());
    }

    #[test]
    fn a_path_shares_its_smallest_round_trip() {
        let path = PathRtt::new();
        let mut early = RttEstimator::default();
        early.share(path.clone());
        early.sample(us(10));
        let mut late = RttEstimator::default();
        late.share(path.clone());
        // Its first sample already waited in a full queue.
        let mut fresh = RttEstimator::default();
        fresh.share(path.clone());
        assert_eq!(
            fresh.pto(Some(us(100_000))),
            us(30),
            "before its own first sample"
        );
        late.sample(us(90));
        assert_eq!(late.min(), Some(us(10)));
        assert!(late.queueing());
        assert_eq!(path.min(), Some(us(10)));
    }
}
