//! Which posted receive a message goes to, libfabric's way: untagged messages to the
//! oldest posted untagged receive, tagged ones to the oldest posted tagged receive whose
//! tag agrees outside its ignore mask, either only from the source it names, if it names
//! one (`FI_DIRECTED_RECV`). A message that finds none waits as unexpected, in arrival
//! order, for the receive posted later that matches it.
//!
//! Sans-I/O and generic over what a receive and a message carry: the endpoint keeps the
//! buffers and contexts, this module only the order and the rule.

use std::collections::VecDeque;

/// A source address in an address vector.
pub type FiAddr = u64;

/// A receive's source when it takes any (and a message's when its sender is not in the
/// address vector): libfabric's `FI_ADDR_UNSPEC` and `FI_ADDR_NOTAVAIL`.
pub const FI_ADDR_UNSPEC: FiAddr = u64::MAX;

/// What a posted receive accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepts {
    /// Tagged (`fi_trecv`) or untagged (`fi_recv`).
    pub tagged: bool,
    /// The tag it wants (tagged only).
    pub tag: u64,
    /// The bits of the tag it does not care about.
    pub ignore: u64,
    /// The source it takes messages from; [`FI_ADDR_UNSPEC`] for any.
    pub src: FiAddr,
}

/// What an arriving message offers to the matching.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offers {
    /// Whether it was sent tagged.
    pub tagged: bool,
    /// Its tag.
    pub tag: u64,
    /// Its sender, or [`FI_ADDR_UNSPEC`] when the sender is not in the address vector.
    pub src: FiAddr,
}

impl Accepts {
    /// Whether a message offering `o` goes to this receive.
    pub fn takes(&self, o: &Offers) -> bool {
        self.tagged == o.tagged
            && (!self.tagged || (self.tag ^ o.tag) & !self.ignore == 0)
            && (self.src == FI_ADDR_UNSPEC || self.src == o.src)
    }
}

/// Posted receives (`R`) and unexpected messages (`M`), each kept in order.
#[derive(Debug)]
pub struct Matcher<R, M> {
    posted: VecDeque<(Accepts, R)>,
    unexpected: VecDeque<(Offers, M)>,
}

impl<R, M> Default for Matcher<R, M> {
    fn default() -> Self {
        Self {
            posted: VecDeque::new(),
            unexpected: VecDeque::new(),
        }
    }
}

impl<R, M> Matcher<R, M> {
    /// Posts receive `r`: the oldest unexpected message it takes, if one waits (then `r`
    /// is not kept), else `r` waits.
    pub fn post(&mut self, a: Accepts, r: R) -> Option<(R, Offers, M)> {
        self.post_at(a, r, false)
    }

    /// [`Matcher::post`], `r` waiting first with `front`, else last.
    fn post_at(&mut self, a: Accepts, r: R, front: bool) -> Option<(R, Offers, M)> {
        match self.unexpected.iter().position(|(o, _)| a.takes(o)) {
            Some(i) => {
                let (o, m) = self.unexpected.remove(i).expect("found");
                Some((r, o, m))
            }
            None if front => {
                self.posted.push_front((a, r));
                None
            }
            None => {
                self.posted.push_back((a, r));
                None
            }
        }
    }

    /// A message arrives: the oldest posted receive that takes it, if any (then the
    /// message is not kept), else it waits as unexpected.
    pub fn arrive(&mut self, o: Offers, m: M) -> Option<(R, M)> {
        match self.take_posted(&o) {
            Some(r) => Some((r, m)),
            None => {
                self.unexpected.push_back((o, m));
                None
            }
        }
    }

    /// The oldest posted receive that takes a message offering `o`, taken; `None` leaves
    /// everything as it was. What [`Matcher::arrive`] does first, for a caller that keeps
    /// the message only if no receive takes it (an eager message copied straight from its
    /// slot into the receive).
    pub fn take_posted(&mut self, o: &Offers) -> Option<R> {
        let i = self.posted.iter().position(|(a, _)| a.takes(o))?;
        self.posted.remove(i).map(|(_, r)| r)
    }

    /// Puts back a receive that took a message and has room for more (a multi-receive
    /// buffer, `FI_MULTI_RECV`), ahead of those posted after it: the oldest unexpected
    /// message it takes, if one waits (then `r` is not kept), else it waits first.
    pub fn repost_front(&mut self, a: Accepts, r: R) -> Option<(R, Offers, M)> {
        self.post_at(a, r, true)
    }

    /// Takes back the oldest posted receive for which `which` holds (`fi_cancel`).
    pub fn cancel(&mut self, which: impl Fn(&R) -> bool) -> Option<R> {
        let i = self.posted.iter().position(|(_, r)| which(r))?;
        self.posted.remove(i).map(|(_, r)| r)
    }

    /// The oldest message that `a` would take, if one waits unexpected (`FI_PEEK`); it
    /// stays.
    pub fn peek(&self, a: &Accepts) -> Option<(&Offers, &M)> {
        self.unexpected
            .iter()
            .find(|(o, _)| a.takes(o))
            .map(|(o, m)| (o, m))
    }

    /// Takes the message [`Matcher::peek`] would find out of the queue (`FI_PEEK |
    /// FI_CLAIM`): no receive can take it any more.
    pub fn claim(&mut self, a: &Accepts) -> Option<(Offers, M)> {
        let i = self.unexpected.iter().position(|(o, _)| a.takes(o))?;
        self.unexpected.remove(i)
    }

    /// How many receives are posted and how many messages wait unexpected.
    pub fn lens(&self) -> (usize, usize) {
        (self.posted.len(), self.unexpected.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tagged(tag: u64, ignore: u64) -> Accepts {
        Accepts {
            tagged: true,
            tag,
            ignore,
            src: FI_ADDR_UNSPEC,
        }
    }

    fn offer(tagged: bool, tag: u64, src: FiAddr) -> Offers {
        Offers { tagged, tag, src }
    }

    /// A receive put back at the front (a multi-receive buffer with room) is matched
    /// before those posted after it, and takes a waiting message at once.
    #[test]
    fn a_receive_put_back_goes_first() {
        let any = Accepts {
            tagged: false,
            tag: 0,
            ignore: 0,
            src: FI_ADDR_UNSPEC,
        };
        let mut m = Matcher::default();
        assert!(m.post(any, "later").is_none());
        assert!(m.repost_front(any, "multi").is_none());
        assert_eq!(m.arrive(offer(false, 0, 1), 1), Some(("multi", 1)));
        assert_eq!(m.arrive(offer(false, 0, 1), 2), Some(("later", 2)));
        assert_eq!(m.arrive(offer(false, 0, 1), 3), None);
        assert_eq!(
            m.repost_front(any, "multi").map(|(r, _, x)| (r, x)),
            Some(("multi", 3))
        );
        assert_eq!(m.lens(), (0, 0));
    }

    /// `take_posted` takes what `arrive` would hand the message to, and keeps nothing
    /// when no receive fits.
    #[test]
    fn take_posted_takes_the_oldest_fitting_receive_and_keeps_nothing() {
        let mut m = Matcher::<&str, u32>::default();
        assert!(m.post(tagged(0x10, 0), "a").is_none());
        assert!(m.post(tagged(0x10, 0x0f), "b").is_none());
        assert_eq!(m.take_posted(&offer(true, 0x20, 1)), None);
        assert_eq!(
            m.lens(),
            (2, 0),
            "no receive fits: nothing kept as unexpected"
        );
        assert_eq!(m.take_posted(&offer(true, 0x11, 1)), Some("b"));
        assert_eq!(m.take_posted(&offer(true, 0x10, 1)), Some("a"));
        assert_eq!(m.lens(), (0, 0));
    }

    #[test]
    fn tags_match_outside_the_ignore_mask_and_in_order() {
        let mut m = Matcher::default();
        assert!(m.post(tagged(0x10, 0x0f), "a").is_none());
        assert!(m.post(tagged(0x10, 0), "b").is_none());
        // 0x13 only fits `a`; 0x10 fits both, and goes to the older, `a`... which is gone,
        // so to `b`.
        assert_eq!(m.arrive(offer(true, 0x13, 1), 1), Some(("a", 1)));
        assert_eq!(m.arrive(offer(true, 0x20, 1), 2), None, "fits nothing");
        assert_eq!(m.arrive(offer(false, 0x10, 1), 3), None, "untagged");
        assert_eq!(m.arrive(offer(true, 0x10, 1), 4), Some(("b", 4)));
        assert_eq!(m.lens(), (0, 2));
        // Unexpected ones are taken in arrival order by the receive that fits them.
        let any = Accepts {
            tagged: false,
            tag: 0,
            ignore: 0,
            src: FI_ADDR_UNSPEC,
        };
        assert_eq!(m.post(any, "c").map(|(r, _, x)| (r, x)), Some(("c", 3)));
        assert_eq!(
            m.peek(&tagged(0x20, 0)).map(|(o, x)| (o.tag, *x)),
            Some((0x20, 2))
        );
        assert_eq!(m.lens(), (0, 1), "a peek leaves it");
        assert_eq!(
            m.claim(&tagged(0x20, 0)).map(|(o, x)| (o.tag, x)),
            Some((0x20, 2))
        );
        assert_eq!(m.lens(), (0, 0), "a claim takes it");
        assert!(m.claim(&tagged(0x20, 0)).is_none());
    }

    #[test]
    fn a_directed_receive_takes_only_its_source_and_cancel_takes_it_back() {
        let mut m = Matcher::default();
        let from2 = Accepts {
            src: 2,
            ..tagged(7, 0)
        };
        assert!(m.post(from2, 1).is_none());
        assert_eq!(m.arrive(offer(true, 7, 3), "x"), None);
        assert_eq!(m.arrive(offer(true, 7, 2), "y"), Some((1, "y")));
        assert!(m.post(from2, 2).is_none());
        assert_eq!(m.cancel(|r| *r == 2), Some(2));
        assert_eq!(m.cancel(|r| *r == 2), None);
    }

    proptest! {
        /// Against a plain model: every message goes to the first receive that takes it,
        /// whichever side came first, and nothing is lost or matched twice.
        #[test]
        fn the_matcher_agrees_with_a_model(
            steps in proptest::collection::vec((any::<bool>(), any::<bool>(), 0u64..4, 0u64..4, 0u64..3), 0..60),
        ) {
            let mut m: Matcher<usize, usize> = Matcher::default();
            let (mut posted, mut unexpected) = (Vec::<(Accepts, usize)>::new(), Vec::<(Offers, usize)>::new());
            for (i, (is_post, is_tagged, tag, ignore, src)) in steps.into_iter().enumerate() {
                if is_post {
                    let a = Accepts { tagged: is_tagged, tag, ignore, src: if src == 0 { FI_ADDR_UNSPEC } else { src } };
                    let want = unexpected.iter().position(|(o, _)| a.takes(o)).map(|k| unexpected.remove(k));
                    if want.is_none() { posted.push((a, i)); }
                    prop_assert_eq!(m.post(a, i), want.map(|(o, x)| (i, o, x)));
                } else {
                    let o = Offers { tagged: is_tagged, tag, src: src + 1 };
                    let want = posted.iter().position(|(a, _)| a.takes(&o)).map(|k| posted.remove(k));
                    if want.is_none() { unexpected.push((o, i)); }
                    prop_assert_eq!(m.arrive(o, i), want.map(|(_, r)| (r, i)));
                }
                prop_assert_eq!(m.lens(), (posted.len(), unexpected.len()));
            }
        }
    }
}
