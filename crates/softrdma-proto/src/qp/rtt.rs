//! A requester's round-trip estimate, from which it times its tail-loss probes and judges
//! whether a loss came with queueing (congestion) or without (a lossy link).
//!
//! Samples are taken as RFC 6298 describes for TCP: one timed packet at a time, never a
//! retransmitted one (Karn's rule), smoothed with gains 1/8 and 1/4. All time is injected.

use core::time::Duration;

/// The shortest probe timeout. Below this a probe would race the ACK it waits for on any
/// real host, whose scheduler alone delays a reply by microseconds.
pub const MIN_PTO: Duration = Duration::from_micros(10);

/// The probe timeout before the first sample: long against a LAN's round trip, short
/// against every IBTA ACK timeout a program uses (ibv_rc_pingpong's 14 is 67 ms).
pub const INITIAL_PTO: Duration = Duration::from_micros(250);

/// Queueing delay (on top of the smallest round trip seen) that counts as congestion even
/// when the smallest round trip is tiny.
pub const MIN_QUEUE_DELAY: Duration = Duration::from_micros(20);

/// Smoothed round trip, its variation, and the smallest and latest samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    min: Option<Duration>,
    latest: Duration,
}

impl RttEstimator {
    /// Takes one sample.
    pub fn sample(&mut self, r: Duration) {
        self.latest = r;
        self.min = Some(self.min.map_or(r, |m| m.min(r)));
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                let err = s.abs_diff(r);
                self.rttvar = (self.rttvar * 3 + err) / 4;
                self.srtt = Some((s * 7 + r) / 8);
            }
        }
    }

    /// The smoothed round trip, once there is a sample.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// The smallest sample, once there is one.
    pub fn min(&self) -> Option<Duration> {
        self.min
    }

    /// How long silence must last before a probe: two round trips, or one plus four
    /// deviations when the round trip varies that much, at least [`MIN_PTO`], and at most
    /// `cap` (the ACK timeout, which a probe must come well before to be of any use).
    pub fn pto(&self, cap: Option<Duration>) -> Duration {
        let p = match self.srtt {
            None => INITIAL_PTO,
            Some(s) => (2 * s).max(s + 4 * self.rttvar).max(MIN_PTO),
        };
        cap.map_or(p, |c| p.min(c))
    }

    /// True when the latest sample shows a queue building: more than twice the smallest
    /// round trip and at least [`MIN_QUEUE_DELAY`] above it. With no sample yet, the answer
    /// is yes: a first burst that loses packets has no better evidence.
    pub fn queueing(&self) -> bool {
        match self.min {
            None => true,
            Some(m) => self.latest > 2 * m && self.latest > m + MIN_QUEUE_DELAY,
        }
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
    }

    #[test]
    fn queueing_needs_twice_the_minimum_and_a_margin() {
        let mut r = RttEstimator::default();
        assert!(r.queueing());
        r.sample(us(10));
        assert!(!r.queueing());
        r.sample(us(25));
        assert!(!r.queueing(), "2.5x but only 15 us above the minimum");
        r.sample(us(90));
        assert!(r.queueing());
        r.sample(us(11));
        assert!(!r.queueing());
    }
}
