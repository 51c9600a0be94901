//! The shared receive queue: receive WRs posted once and taken by whichever QP needs one.
//!
//! Owns [`Srq`] and its limit event; calls nothing in the QP. The responder takes and
//! gives back WRs through `take` and `untake`.

use super::*;

/// A shared receive queue. Cloning gives another handle to the same queue.
#[derive(Debug, Clone, Default)]
pub struct Srq(Arc<Mutex<SrqInner>>);

#[derive(Debug, Default)]
struct SrqInner {
    wrs: VecDeque<RecvWr>,
    max_wr: u32,
    max_sge: u32,
    limit: Option<u32>,
}

impl Srq {
    /// An SRQ of `max_wr` WRs with up to `max_sge` SGEs each.
    pub fn new(max_wr: u32, max_sge: u32) -> Self {
        Self(Arc::new(Mutex::new(SrqInner {
            wrs: VecDeque::new(),
            max_wr,
            max_sge,
            limit: None,
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SrqInner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Posts a receive WR.
    pub fn post_recv(&self, wr: RecvWr) -> Result<(), PostError> {
        let mut s = self.lock();
        if s.wrs.len() as u32 >= s.max_wr {
            return Err(PostError::QueueFull {
                verb: "post_srq_recv",
                depth: s.max_wr,
            });
        }
        if wr.sg_list.len() as u32 > s.max_sge {
            return Err(PostError::OverLimit {
                verb: "post_srq_recv",
                attr: "num_sge",
                requested: wr.sg_list.len() as u64,
                max: u64::from(s.max_sge),
                limit: "max_sge",
            });
        }
        s.wrs.push_back(wr);
        Ok(())
    }

    /// Arms the limit event: it fires once when fewer than `limit` WRs remain
    /// (`ibv_modify_srq` with `IBV_SRQ_LIMIT`).
    pub fn arm_limit(&self, limit: u32) {
        self.lock().limit = Some(limit);
    }

    /// Whether the limit is armed (it disarms when its event is raised).
    pub fn limit_armed(&self) -> bool {
        self.lock().limit.is_some()
    }

    /// WRs posted and not yet consumed.
    pub fn len(&self) -> usize {
        self.lock().wrs.len()
    }

    /// True when no WR is posted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes the next WR; the second value is true when this crossed the armed limit.
    pub(super) fn take(&self) -> Option<(RecvWr, bool)> {
        let mut s = self.lock();
        let wr = s.wrs.pop_front()?;
        let fired = match s.limit {
            Some(l) if (s.wrs.len() as u32) < l => {
                s.limit = None;
                true
            }
            _ => false,
        };
        Some((wr, fired))
    }

    /// Puts back a WR taken for a message that was then dropped.
    pub(super) fn untake(&self, wr: RecvWr) {
        self.lock().wrs.push_front(wr);
    }
}
