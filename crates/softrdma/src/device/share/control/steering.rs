//! The control plane's part in steering (see `share::steer`): probe rounds, the indexes
//! each socket of the group reported, and the program they make. Pure, as the rest of
//! [`super::Control`].

use super::{Action, Control, MemberId, OWN, PROBE_AGAIN};
use rand::Rng;
use std::time::Instant;

impl Control {
    /// The owner's socket (or member `t`'s) received the probe for `index` in round
    /// `nonce`: the program is rebuilt from what this round has found so far.
    pub(crate) fn probed_at(&mut self, t: MemberId, index: u32, nonce: u64) -> Vec<Action> {
        let r = &mut self.rounds;
        if nonce != r.nonce {
            return Vec::new();
        }
        if !r.this_round.insert(t) && r.seen.get(&t) != Some(&index) {
            r.ambiguous.insert(t);
        }
        r.seen.insert(t, index);
        self.install().into_iter().collect()
    }

    /// The probe round due at `now`, if one is (owner).
    pub(crate) fn tick(&mut self, now: Instant, rng: &mut impl Rng) -> Vec<Action> {
        match self.rounds.again {
            Some(at) if now >= at => {
                self.rounds.again = None;
                self.probe_round(now, rng, false, false)
            }
            _ => Vec::new(),
        }
    }

    /// The program `want` is attached.
    pub(crate) fn installed(&mut self, own: u32, routes: Vec<(u8, u32)>) {
        self.rounds.installed = Some((own, routes));
    }

    /// Probes every index the group should have (owner): the port's socket and each
    /// steered member's. `changed`: the group just changed, so it is probed once more a
    /// little later; `moved`: a socket left it, so what the last rounds found no longer
    /// holds.
    pub(super) fn probe_round(
        &mut self,
        now: Instant,
        rng: &mut impl Rng,
        changed: bool,
        moved: bool,
    ) -> Vec<Action> {
        let n = self.members.values().filter(|m| m.steering).count();
        let r = &mut self.rounds;
        r.nonce = rng.random();
        if moved {
            r.seen.clear();
        }
        r.this_round.clear();
        r.ambiguous.clear();
        if changed {
            r.again = Some(now + PROBE_AGAIN);
        }
        // Only indexes that exist: the kernel hashes a probe for one past the end to any
        // socket, which would report it as its own.
        vec![Action::Probe {
            count: n as u32 + 1,
            nonce: r.nonce,
        }]
    }

    /// The program that this round's findings make, if it is not the one attached.
    pub(super) fn install(&mut self) -> Option<Action> {
        let r = &self.rounds;
        let own = match r.seen.get(&OWN) {
            Some(&i) if !r.ambiguous.contains(&OWN) => i,
            _ => 0,
        };
        let mut routes: Vec<(u8, u32)> = self
            .members
            .iter()
            .filter(|(t, m)| m.steering && !r.ambiguous.contains(t))
            .filter_map(|(t, m)| Some((m.slot, *r.seen.get(t)?)))
            .collect();
        routes.sort_unstable();
        if r.installed
            .as_ref()
            .is_some_and(|i| i.0 == own && i.1 == routes)
        {
            return None;
        }
        Some(Action::Install { own, routes })
    }
}
