//! The guard of a held agent lock (`CmAgent`), counted per thread, so that a thread knows
//! whether it may wait for an agent (an ID's drop) or must not (it holds one already).
//! Takes no lock itself.

use super::objects::CoreSt;

thread_local! {
    /// How many agents' mutexes this thread holds (see [`AgentGuard`]).
    pub(super) static HOLDS_AGENT: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// A held agent mutex, counted in [`HOLDS_AGENT`] while it is held: a thread that holds
/// none may wait for one (an ID's drop, which must send its DREP before it returns),
/// while one that holds an agent already (the last handle of an ID dropped while an event
/// is dispatched) must not, for the agents' mutexes are not ordered.
pub(super) struct AgentGuard<'a>(crate::sync::Guard<'a, CoreSt>);

impl<'a> AgentGuard<'a> {
    pub(super) fn new(g: crate::sync::Guard<'a, CoreSt>) -> Self {
        HOLDS_AGENT.with(|h| h.set(h.get() + 1));
        Self(g)
    }

    /// Whether this thread holds an agent's mutex.
    pub(super) fn held_here() -> bool {
        HOLDS_AGENT.with(|h| h.get() > 0)
    }
}

impl Drop for AgentGuard<'_> {
    fn drop(&mut self) {
        HOLDS_AGENT.with(|h| h.set(h.get().saturating_sub(1)));
    }
}

impl std::ops::Deref for AgentGuard<'_> {
    type Target = CoreSt;
    fn deref(&self) -> &CoreSt {
        &self.0
    }
}

impl std::ops::DerefMut for AgentGuard<'_> {
    fn deref_mut(&mut self) -> &mut CoreSt {
        &mut self.0
    }
}
