//! The fault model: what a network does to each packet (loses, duplicates, corrupts, delays
//! or reorders it), decided by a random number generator the caller owns. One model serves
//! the simulator (seeded, so that a run repeats packet for packet) and the soft device's
//! fault injector (`SOFTRDMA_FAULTS`, see [`LinkFaults::parse`]), in the same order of
//! draws: [`LinkFaults::lost`], then [`LinkFaults::duplicated`], then for each copy
//! [`LinkFaults::corrupted`] and [`LinkFaults::copy_delay`].

use crate::types::Instant;
use core::time::Duration;
use rand::Rng;

/// Faults applied to every packet on a link. Probabilities are in `0.0..=1.0`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkFaults {
    /// Probability a packet is lost.
    pub loss: f64,
    /// Probability a packet is delivered twice.
    pub dup: f64,
    /// Probability a packet is held back long enough to arrive after later ones.
    pub reorder: f64,
    /// Probability one bit of a packet is flipped.
    pub corrupt: f64,
    /// One-way delay.
    pub delay: Duration,
    /// The least a reordered packet is held back: the larger of this and `delay` plus a
    /// microsecond is the hold's base, long enough for the packets sent after it to pass.
    /// Zero in the simulator, whose packets are microseconds apart; 20 µs on a device,
    /// whose timers and sockets are coarser.
    pub reorder_hold: Duration,
    /// How far beyond its base a hold may reach: the hold is uniform in
    /// `base..=base * (1 + reorder_spread)`. 4 in the simulator; 9 on a device (20 to
    /// 200 µs).
    pub reorder_spread: f64,
    /// Extra random delay, uniform in `0..=jitter`.
    pub jitter: Duration,
    /// From this instant on, nothing is delivered.
    pub partition_at: Option<Instant>,
    /// A link of finite rate with a drop-tail queue; `None`: infinitely fast.
    pub rate: Option<LinkRate>,
}

/// A link's speed and its sending queue: packets leave one after another at `bits_per_sec`,
/// each taking its length plus [`FRAME_OVERHEAD`] bytes of the wire, and a packet that
/// finds `queue_pkts` packets waiting is dropped (drop-tail), as a switch port does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkRate {
    /// Line rate.
    pub bits_per_sec: u64,
    /// Packets the queue holds, the one on the wire included.
    pub queue_pkts: usize,
}

/// Bytes a RoCE v2 packet takes on an Ethernet wire beyond its InfiniBand part: preamble and
/// inter-frame gap (20), Ethernet header and FCS (18), IPv4 (20) and UDP (8) headers.
pub const FRAME_OVERHEAD: usize = 66;

impl LinkRate {
    /// How long a packet of `len` bytes (InfiniBand part) occupies the wire.
    pub fn wire_time(&self, len: usize) -> Duration {
        let bits = ((len + FRAME_OVERHEAD) * 8) as u128;
        Duration::from_nanos((bits * 1_000_000_000 / u128::from(self.bits_per_sec.max(1))) as u64)
    }
}

impl Default for LinkFaults {
    fn default() -> Self {
        Self {
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            delay: Duration::from_micros(5),
            reorder_hold: Duration::ZERO,
            reorder_spread: 4.0,
            jitter: Duration::ZERO,
            partition_at: None,
            rate: None,
        }
    }
}

impl LinkFaults {
    /// No fault and no delay: what a device injects for an empty `SOFTRDMA_FAULTS`.
    pub const NONE: LinkFaults = LinkFaults {
        loss: 0.0,
        dup: 0.0,
        reorder: 0.0,
        corrupt: 0.0,
        delay: Duration::ZERO,
        reorder_hold: Duration::ZERO,
        reorder_spread: 4.0,
        jitter: Duration::ZERO,
        partition_at: None,
        rate: None,
    };

    /// Whether the packet is lost.
    pub fn lost(&self, rng: &mut impl Rng) -> bool {
        rng.random_bool(self.loss)
    }

    /// Whether the packet is delivered twice.
    pub fn duplicated(&self, rng: &mut impl Rng) -> bool {
        rng.random_bool(self.dup)
    }

    /// Flips one bit of `bytes` if this copy is corrupted; whether it was.
    pub fn corrupted(&self, rng: &mut impl Rng, bytes: &mut [u8]) -> bool {
        if !rng.random_bool(self.corrupt) || bytes.is_empty() {
            return false;
        }
        let bit = rng.random_range(0..bytes.len() * 8);
        bytes[bit / 8] ^= 1 << (bit % 8);
        true
    }

    /// How long after it is sent a copy arrives (the delay, jitter, and a reordering hold),
    /// and whether it was held back to be reordered.
    pub fn copy_delay(&self, rng: &mut impl Rng) -> (Duration, bool) {
        let mut delay = self.delay;
        if !self.jitter.is_zero() {
            delay += self.jitter.mul_f64(rng.random::<f64>());
        }
        let held = rng.random_bool(self.reorder);
        if held {
            // Long enough to be overtaken by packets sent after it.
            let base = (self.delay + Duration::from_micros(1)).max(self.reorder_hold);
            delay += base.mul_f64(1.0 + self.reorder_spread * rng.random::<f64>());
        }
        (delay, held)
    }

    /// Parses `SOFTRDMA_FAULTS`' syntax: comma-separated `drop=P` (or `loss=P`), `dup=P`,
    /// `reorder=P`, `corrupt=P` (probabilities), `delay_us=N` and `jitter_us=N`. What it
    /// does not name is as in [`LinkFaults::NONE`], except that reordered packets are held at
    /// 20 to 200 µs ([`LinkFaults::reorder_hold`], [`LinkFaults::reorder_spread`]).
    pub fn parse(s: &str) -> Result<Self, FaultsError> {
        let mut f = LinkFaults {
            reorder_hold: Duration::from_micros(20),
            reorder_spread: 9.0,
            ..LinkFaults::NONE
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| FaultsError::NotKeyValue(part.to_owned()))?;
            let num: f64 = v.parse().map_err(|_| FaultsError::NotANumber {
                key: k.to_owned(),
                value: v.to_owned(),
            })?;
            let prob = |x: f64| {
                if (0.0..=1.0).contains(&x) {
                    Ok(x)
                } else {
                    Err(FaultsError::NotAProbability {
                        key: k.to_owned(),
                        value: x,
                    })
                }
            };
            let micros = |x: f64| {
                if (0.0..=1e9).contains(&x) {
                    Ok(Duration::from_secs_f64(x / 1e6))
                } else {
                    Err(FaultsError::BadDelay {
                        key: k.to_owned(),
                        value: x,
                    })
                }
            };
            match k {
                "drop" | "loss" => f.loss = prob(num)?,
                "dup" => f.dup = prob(num)?,
                "reorder" => f.reorder = prob(num)?,
                "corrupt" => f.corrupt = prob(num)?,
                "delay_us" => f.delay = micros(num)?,
                "jitter_us" => f.jitter = micros(num)?,
                _ => return Err(FaultsError::UnknownKey(k.to_owned())),
            }
        }
        Ok(f)
    }
}

/// Why a fault specification did not parse.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FaultsError {
    /// A part without `=`.
    #[error("{0:?} is not KEY=VALUE")]
    NotKeyValue(String),
    /// A value that is not a number.
    #[error("{key}={value:?}: not a number")]
    NotANumber {
        /// The key.
        key: String,
        /// Its value.
        value: String,
    },
    /// A probability outside `0..=1`.
    #[error("{key}={value} is not a probability between 0 and 1")]
    NotAProbability {
        /// The key.
        key: String,
        /// Its value.
        value: f64,
    },
    /// A negative or absurd delay.
    #[error("{key}={value} is not a delay in microseconds (0 to 1e9)")]
    BadDelay {
        /// The key.
        key: String,
        /// Its value.
        value: f64,
    },
    /// A part of the model that only the simulator has (a link's rate, a partition), asked
    /// of a device.
    #[error("{0} is simulated only: a device cannot apply it")]
    SimulatorOnly(&'static str),
    /// A key the model does not have.
    #[error("unknown key {0:?} (use drop, dup, reorder, corrupt, delay_us, jitter_us)")]
    UnknownKey(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_syntax_parses_into_the_model_and_bad_input_is_named() {
        let f = LinkFaults::parse("drop=0.01, dup=0.02,reorder=0.05,corrupt=0.001,delay_us=50")
            .unwrap();
        assert_eq!(
            (f.loss, f.dup, f.reorder, f.corrupt),
            (0.01, 0.02, 0.05, 0.001)
        );
        assert_eq!(f.delay, Duration::from_micros(50));
        assert_eq!(LinkFaults::parse("").unwrap().loss, 0.0);
        for (bad, want) in [
            ("drop", "is not KEY=VALUE"),
            ("drop=x", "not a number"),
            ("drop=2", "not a probability"),
            ("delay_us=-1", "not a delay"),
            ("latency=1", "unknown key"),
        ] {
            let e = LinkFaults::parse(bad).unwrap_err().to_string();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }
}
