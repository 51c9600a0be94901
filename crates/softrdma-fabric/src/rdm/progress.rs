//! The endpoint's device completions: a receive slot's message (parsed, matched, handed
//! to its receive or kept as unexpected, the slot posted again at the next progress: see
//! `repost_later`), a send's completion, a
//! rendezvous READ's end (then the FIN to the sender), and a FIN (then the sender's
//! completion, its buffer back).
//!
//! Runs under the endpoint's lock, from the progress that a bound CQ's read drives.

use super::{Arrived, Out, Queued, Recv, SLOT_LEN, State, Wr};
use crate::cq::{Completion, errno};
use crate::matching::{FiAddr, Offers};
use crate::wire::{HEADER_LEN, Header, Op};
use softrdma::{AccessFlags, Payload, SendFlags, SendOp, SendWr, WcOpcode, WcStatus};
use std::borrow::Cow;

/// Messages up to this size (header included) are read from their slot onto the stack.
const SMALL: usize = 512;

impl State {
    /// Handles every device completion that waits ([`crate::auto::drain`]); how many.
    pub(super) fn device_completions(&mut self) -> usize {
        crate::auto::drain(self, |s| &mut s.vcq, Self::device_completion)
    }

    /// One device completion.
    fn device_completion(&mut self, wc: softrdma::Completion) {
        let conn = self.by_qpn.get(&wc.qp_num.value()).copied();
        let ok = wc.status == WcStatus::Success;
        // An error (not a flush after one) leaves the QP in the error state: the
        // connection is done, and the next send to its peer makes another. Checked
        // before the WR is looked up: an unsignaled send (an inject, a FIN) is known
        // only by its failure.
        if !ok
            && wc.status != WcStatus::WrFlushErr
            && let Some(c) = conn
        {
            self.lost(c);
        }
        let Some(wr) = self.wrs.remove(&wc.wr_id) else {
            return;
        };
        if !matches!(wr, Wr::Slot { .. })
            && let Some(c) = conn
        {
            let n = &mut self.conns[c].in_flight;
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.retire(c);
            }
        }
        // Protocol bytes posted from an owned buffer leave the QP's table; a slot,
        // an RMA and a READ use registered memory, with nothing parked.
        if matches!(wr, Wr::Send { .. } | Wr::Rts { .. } | Wr::Fin)
            && let Some(qp) = conn.and_then(|c| self.conns[c].qp.as_ref())
        {
            qp.reclaim(wc.wr_id);
        }
        match wr {
            Wr::Slot { conn, slot } if ok && wc.opcode == WcOpcode::RecvRdmaWithImm => {
                // Not this protocol's (its WRITEs with data announce themselves
                // by a header): the slot holds nothing new, and goes back.
                self.slot_done(conn);
                self.repost_later(conn, slot);
                self.bad_headers += 1;
            }
            Wr::Slot { conn, slot } if ok => {
                // Out of the slot (a message may wait unexpected), which goes back
                // (`repost_later`; unless its connection has ended, which keeps its
                // slots until each has completed: what it received is still taken).
                // A small message is read onto the stack: a receive waiting for it takes
                // it from there, and only an unexpected one is copied to the heap.
                let len = (wc.byte_len as usize).min(SLOT_LEN);
                let (mut small, mut big) = ([0u8; SMALL], Vec::new());
                if len > SMALL {
                    big = vec![0; len];
                }
                let b = if len <= SMALL {
                    &mut small[..len]
                } else {
                    &mut big[..]
                };
                let read = self.conns[conn].slots.get(slot).map(|mr| mr.read(0, b));
                let b = if len <= SMALL {
                    Cow::Borrowed(&small[..len])
                } else {
                    Cow::Owned(big)
                };
                self.slot_done(conn);
                self.repost_later(conn, slot);
                if let Some(Ok(())) = read {
                    self.arrived(conn, b);
                }
            }
            Wr::Slot { conn, .. } => self.slot_done(conn),
            Wr::Read {
                recv,
                reg,
                conn,
                hdr,
                src,
            } => {
                self.send_fin(conn, hdr.msg_id);
                let r = Recv {
                    buf: reg.back(),
                    ..recv
                };
                let error = if ok { 0 } else { errno::EIO };
                self.complete_recv(r, &hdr, src, hdr.len as usize, error);
            }
            Wr::Rma {
                context,
                flags,
                reg,
                silent,
            } => {
                let len = reg.mr.len();
                let (len, error) = match wc.status {
                    WcStatus::Success => (len, 0),
                    WcStatus::RemAccessErr => (0, errno::EACCES),
                    _ => (0, errno::EIO),
                };
                if !silent || error != 0 {
                    self.complete(context, flags, reg.back(), len, error);
                } else {
                    self.counted(flags, false);
                }
            }
            wr if ok => self.sent(wr),
            wr => self.fail(wr, errno::EIO),
        }
    }

    /// A message from a slot of connection `c`.
    fn arrived(&mut self, c: usize, slot: Cow<'_, [u8]>) {
        let hdr = match Header::parse(&slot) {
            Ok((h, _)) => h,
            Err(_) => {
                self.bad_headers += 1;
                return;
            }
        };
        let src = self.peer_id(self.conns[c].peer);
        let offers = Offers {
            tagged: hdr.tagged,
            tag: hdr.tag,
            src,
        };
        let m = match hdr.op {
            Op::Fin => {
                if let Some(o) = self.rndv_out.remove(&hdr.msg_id) {
                    if o.silent {
                        self.counted(o.flags, false);
                    } else {
                        let len = o.mr.mr.len();
                        self.complete(o.context, o.flags, o.mr.back(), len, 0);
                    }
                }
                return;
            }
            Op::WriteData => {
                self.remote_write(hdr.len as usize, hdr.data.unwrap_or(0));
                return;
            }
            Op::Eager => match self.matcher.take_posted(&offers) {
                Some(r) if r.multi.is_none() => {
                    self.deliver_eager(r, src, &hdr, &slot[HEADER_LEN..]);
                    return;
                }
                Some(r) => {
                    let m = Arrived::Eager {
                        hdr,
                        slot: slot.into_owned(),
                    };
                    self.deliver(r, src, m);
                    return;
                }
                None => Arrived::Eager {
                    hdr,
                    slot: slot.into_owned(),
                },
            },
            Op::Rts { .. } => Arrived::Rts { hdr, conn: c },
        };
        if let Some((r, m)) = self.matcher.arrive(offers, m) {
            self.deliver(r, src, m);
        }
    }

    /// Hands an eager message's `payload` from `src` to receive `r` (not a multi-receive
    /// buffer's).
    fn deliver_eager(&mut self, mut r: Recv, src: FiAddr, hdr: &Header, payload: &[u8]) {
        let n = payload.len().min(r.buf.len());
        r.buf[..n].copy_from_slice(&payload[..n]);
        self.complete_recv(r, hdr, src, payload.len(), 0);
    }

    /// Hands message `m` from `src` to receive `r`.
    pub(super) fn deliver(&mut self, mut r: Recv, src: FiAddr, m: Arrived) {
        if r.multi.is_some_and(|p| p.takes()) {
            self.deliver_multi(r, src, m);
            return;
        }
        match m {
            Arrived::Eager { hdr, slot } => self.deliver_eager(r, src, &hdr, &slot[HEADER_LEN..]),
            Arrived::Rts { hdr, conn } => {
                let Op::Rts { addr, rkey } = hdr.op else {
                    unreachable!("kept as an RTS")
                };
                let want = (hdr.len as usize).min(r.buf.len());
                let qp = self.conns[conn].qp.clone();
                let (Some(qp), 1..) = (qp, want) else {
                    self.send_fin(conn, hdr.msg_id);
                    let error = if want == 0 { 0 } else { errno::EIO };
                    self.complete_recv(r, &hdr, src, hdr.len as usize, error);
                    return;
                };
                let buf = std::mem::replace(&mut r.buf, Vec::new().into());
                let reg = match buf.register(self.dom.pd(), want, AccessFlags::LOCAL_WRITE) {
                    Ok(reg) => reg,
                    Err(_) => {
                        self.send_fin(conn, hdr.msg_id);
                        self.complete_recv(r, &hdr, src, hdr.len as usize, errno::EIO);
                        return;
                    }
                };
                let w = self.wr_id();
                let posted = qp.post_send(SendWr {
                    wr_id: w,
                    op: SendOp::Read {
                        remote_addr: addr,
                        rkey,
                    },
                    payload: Payload::Sges(softrdma_proto::sg![reg.mr.sge(0, want as u32)]),
                    flags: SendFlags::SIGNALED,
                    ud: None,
                });
                if posted.is_ok() {
                    self.conns[conn].in_flight += 1;
                    let wr = Wr::Read {
                        recv: r,
                        reg,
                        conn,
                        hdr,
                        src,
                    };
                    self.wrs.insert(w, wr);
                } else {
                    r.buf = reg.back();
                    self.send_fin(conn, hdr.msg_id);
                    self.complete_recv(r, &hdr, src, hdr.len as usize, errno::EIO);
                }
            }
        }
    }

    /// Tells connection `c`'s peer that its rendezvous message `msg_id` is read (or
    /// dropped unread, `FI_DISCARD`).
    pub(super) fn send_fin(&mut self, c: usize, msg_id: u64) {
        let hdr = Header {
            op: Op::Fin,
            tagged: false,
            tag: 0,
            data: None,
            len: 0,
            msg_id,
        };
        let q = Queued {
            out: Out::Bytes(hdr.emit().to_vec()),
            op: SendOp::Send,
            wr: Wr::Fin,
        };
        self.enqueue(c, q);
    }

    /// A receive's completion: `len` is the message's whole length; what did not fit is
    /// an `ETRUNC` error entry. `src` is the sender as matching knows it.
    fn complete_recv(&mut self, r: Recv, hdr: &Header, src: FiAddr, len: usize, error: i32) {
        if r.multi.is_some() {
            // A rendezvous message's READ for a multi-receive buffer.
            self.multi_read(r, hdr, src, error);
            return;
        }
        let src = self.source(src);
        let cap = r.buf.len();
        let (got, error) = match error {
            0 if len > cap => (cap, errno::ETRUNC),
            e => (len.min(cap), e),
        };
        self.complete_rx(Completion {
            context: r.context,
            flags: super::recv_flags(r.tagged, hdr.data.is_some()),
            len: got,
            buf: r.buf,
            data: hdr.data,
            tag: hdr.tag,
            src,
            error,
            olen: len - got,
            offset: 0,
        });
    }

    /// A send WR completed.
    fn sent(&mut self, wr: Wr) {
        match wr {
            Wr::Send {
                context,
                flags,
                buf,
                inject: false,
            } => {
                let len = buf.len();
                self.complete(context, flags, buf, len, 0);
            }
            Wr::Send { flags, .. } => self.counted(flags, false),
            _ => {}
        }
    }

    /// What `wr` was for fails with `error` (its buffer back).
    pub(super) fn fail(&mut self, wr: Wr, error: i32) {
        match wr {
            Wr::Send {
                context,
                flags,
                buf,
                ..
            } => self.complete(context, flags, buf, 0, error),
            Wr::Rma {
                context,
                flags,
                reg,
                ..
            } => self.complete(context, flags, reg.back(), 0, error),
            Wr::Rts { msg_id } => {
                if let Some(o) = self.rndv_out.remove(&msg_id) {
                    self.complete(o.context, o.flags, o.mr.back(), 0, error);
                }
            }
            Wr::Read {
                mut recv,
                reg,
                hdr,
                src,
                ..
            } => {
                recv.buf = reg.back();
                self.complete_recv(recv, &hdr, src, hdr.len as usize, error)
            }
            Wr::Slot { .. } | Wr::Fin => {}
        }
    }
}
