//! Multi-receive buffers (`FI_MULTI_RECV`): one posted buffer that takes message after
//! message, each placed after the one before, until less than its minimum free space is
//! left; each message completes on its own, naming where it lies (`Completion::offset`),
//! and the last one also gives the buffer back (`flags::MULTI_RECV`). An eager message is
//! copied in from its slot; a rendezvous one is read into a buffer of its own and copied in
//! when the READ completes, so that the buffer takes more messages meanwhile.
//!
//! The buffer stays in matching, ahead of the receives posted after it, while it has
//! room: it is put back at the front after each message it takes, and takes the
//! unexpected messages that wait, oldest first.
//!
//! Runs under the endpoint's lock, from its calls and its progress.

use super::{Arrived, Endpoint, Recv, State, recv_flags};
use crate::buf::Buf;
use crate::cq::{Completion, errno, flags};
use crate::error::Result;
use crate::matching::{Accepts, FiAddr};
use crate::wire::{HEADER_LEN, Header};

/// A multi-receive buffer.
pub(super) struct Multi {
    buf: Buf,
    /// Bytes taken, from the start.
    used: usize,
    /// The space under which it is released.
    min_free: usize,
    context: u64,
    /// Rendezvous READs into its own buffers, to copy in when they complete.
    reads: usize,
    /// Whether it is in matching (it had room after its last message).
    posted: bool,
    accepts: Accepts,
}

/// Which multi-receive buffer a receive stands for, and, once a rendezvous message has a
/// place in it, where (`placed`: the receive's own buffer is then the READ's).
#[derive(Debug, Clone, Copy)]
pub(super) struct Part {
    id: u64,
    off: usize,
    placed: bool,
}

impl Part {
    /// Whether the receive takes a message for its buffer (not one already placed).
    pub(super) fn takes(self) -> bool {
        !self.placed
    }

    /// The buffer's number.
    pub(super) fn id(self) -> u64 {
        self.id
    }
}

impl Endpoint {
    /// Posts a multi-receive buffer for untagged messages from `src` (`fi_recvmsg` with
    /// `FI_MULTI_RECV`): it takes messages until less than `min_free` bytes of it are left
    /// (`FI_OPT_MIN_MULTI_RECV`). A message longer than the room left is cut (`ETRUNC`).
    /// With the caller's memory (`Buf::raw`) each completion's `buf` is where its message
    /// lies; an owned vector comes back with the last completion.
    pub fn recv_multi(
        &self,
        buf: impl Into<Buf>,
        min_free: usize,
        src: FiAddr,
        context: u64,
    ) -> Result<()> {
        let mut st = self.st();
        let accepts = Accepts {
            tagged: false,
            tag: 0,
            ignore: 0,
            src: st.matching_src(src)?,
        };
        let id = st.next_multi;
        st.next_multi += 1;
        let m = Multi {
            buf: buf.into(),
            used: 0,
            min_free,
            context,
            reads: 0,
            posted: true,
            accepts,
        };
        st.multis.insert(id, m);
        st.post_multi(id, false);
        Ok(())
    }
}

impl State {
    /// Puts multi-receive buffer `id` in matching (at the back when first posted, at the
    /// front again after a message), placing the unexpected messages it takes while it
    /// has room.
    fn post_multi(&mut self, id: u64, front: bool) {
        let mut front = front;
        loop {
            let Some(mb) = self.multis.get(&id) else {
                return;
            };
            let r = Recv {
                context: mb.context,
                buf: Vec::new().into(),
                tagged: false,
                multi: Some(Part {
                    id,
                    off: 0,
                    placed: false,
                }),
            };
            let a = mb.accepts;
            let got = if front {
                self.matcher.repost_front(a, r)
            } else {
                self.matcher.post(a, r)
            };
            let Some((r, o, m)) = got else {
                return;
            };
            self.place(r, o.src, m);
            if !self.multis.get(&id).is_some_and(|mb| mb.posted) {
                return;
            }
            front = true;
        }
    }

    /// Message `m` from `src` for multi-receive buffer `r`, from matching: placed, and the
    /// buffer put back in matching if it has room.
    pub(super) fn deliver_multi(&mut self, r: Recv, src: FiAddr, m: Arrived) {
        let id = r.multi.map(|p| p.id);
        self.place(r, src, m);
        if let Some(id) = id
            && self.multis.get(&id).is_some_and(|mb| mb.posted)
        {
            self.post_multi(id, true);
        }
    }

    /// Gives message `m` its place in the buffer `r` stands for: an eager one copied in
    /// and completed, a rendezvous one read into a buffer of its own.
    fn place(&mut self, r: Recv, src: FiAddr, m: Arrived) {
        let Some(p) = r.multi else {
            return;
        };
        let Some(mb) = self.multis.get_mut(&p.id) else {
            return;
        };
        let off = mb.used;
        let room = mb.buf.len() - off;
        let len = match &m {
            Arrived::Eager { slot, .. } => slot.len() - HEADER_LEN,
            Arrived::Rts { hdr, .. } => hdr.len as usize,
        };
        let n = len.min(room);
        mb.used += n;
        mb.posted = mb.buf.len() - mb.used >= mb.min_free;
        match m {
            Arrived::Eager { hdr, slot } => {
                mb.buf[off..off + n].copy_from_slice(&slot[HEADER_LEN..HEADER_LEN + n]);
                self.multi_done(p.id, &hdr, src, (off, n, len), 0);
            }
            Arrived::Rts { hdr, conn } => {
                mb.reads += 1;
                let r = Recv {
                    context: r.context,
                    buf: vec![0; n].into(),
                    tagged: false,
                    multi: Some(Part {
                        id: p.id,
                        off,
                        placed: true,
                    }),
                };
                self.deliver(r, src, Arrived::Rts { hdr, conn });
            }
        }
    }

    /// A rendezvous message's READ for a multi-receive buffer ended (`error` 0: its
    /// `len` bytes are in `r`'s buffer): copied in, and completed.
    pub(super) fn multi_read(&mut self, r: Recv, hdr: &Header, src: FiAddr, error: i32) {
        let Some(p) = r.multi else {
            return;
        };
        let Some(mb) = self.multis.get_mut(&p.id) else {
            return;
        };
        mb.reads -= 1;
        let n = r.buf.len();
        if error == 0 {
            mb.buf[p.off..p.off + n].copy_from_slice(&r.buf);
        }
        self.multi_done(p.id, hdr, src, (p.off, n, hdr.len as usize), error);
    }

    /// One message of buffer `id` completes: at `off`, `n` bytes of `len`; the last one
    /// the buffer will take (it is out of matching and no READ for it is left) gives the
    /// buffer back.
    fn multi_done(
        &mut self,
        id: u64,
        hdr: &Header,
        src: FiAddr,
        (off, n, len): (usize, usize, usize),
        error: i32,
    ) {
        let Some(mb) = self.multis.get(&id) else {
            return;
        };
        let context = mb.context;
        let release = !mb.posted && mb.reads == 0;
        let buf = match release {
            true => self
                .multis
                .remove(&id)
                .map_or_else(|| Vec::new().into(), |m| m.buf),
            false => mb.buf.view(off, n),
        };
        let error = match error {
            0 if n < len => errno::ETRUNC,
            e => e,
        };
        let released = if release { flags::MULTI_RECV } else { 0 };
        let c = Completion {
            context,
            flags: recv_flags(false, hdr.data.is_some()) | released,
            len: n,
            buf,
            data: hdr.data,
            tag: hdr.tag,
            src: self.source(src),
            error,
            olen: len - n,
            offset: off,
        };
        self.complete_rx(c);
    }

    /// Takes multi-receive buffer `id` back (`fi_cancel`): its completion, cancelled, with
    /// the buffer.
    pub(super) fn cancel_multi(&mut self, id: u64) {
        if let Some(mb) = self.multis.remove(&id) {
            let f = recv_flags(false, false) | flags::MULTI_RECV;
            let c = Completion {
                offset: mb.used,
                ..Completion::of(mb.context, f, mb.buf, 0, errno::ECANCELED)
            };
            self.complete_rx(c);
        }
    }
}
