//! The UC and UD responders: executing requests that get no ACKs, have no duplicates to
//! answer and no resends to wait for, and the GRH area a UD receive starts with.
//!
//! Owns no state of its own: it works on the [`super::Responder`] and calls the checks and
//! helpers of `responder/mod.rs`, and `qp/sge.rs` to place data.

use super::*;

impl QueuePair {
    pub(super) fn uc_request(&mut self, pkt: &IbPacket<&[u8]>) {
        let p = pkt.bth().psn();
        let info = pkt.info();
        if p.diff(self.resp.epsn) < 0 {
            // Old or duplicated: UC delivers each message at most once, in order.
            self.counters.duplicate_requests += 1;
            return;
        }
        if p != self.resp.epsn || self.resp.uc_drop {
            if p != self.resp.epsn && self.resp.cur.is_some() {
                // A packet of the message in progress was lost: drop the whole message.
                self.counters.out_of_sequence += 1;
                self.abort_message();
            }
            if !info.starts_message() {
                self.resp.uc_drop = true;
                self.resp.epsn = p.next();
                self.counters.dropped += 1;
                return;
            }
            self.resp.uc_drop = false;
        }
        self.resp.epsn = p.next();
        if !self.sequence_and_length_ok(pkt) {
            self.abort_message();
            self.resp.cur = None;
            self.resp.uc_drop = !info.starts_message();
            self.counters.dropped += 1;
            return;
        }
        match info.operation {
            Operation::Send => {
                if info.starts_message() {
                    let Some((wr, from_srq)) = self.take_recv() else {
                        // UC has no RNR: the message is lost.
                        self.resp.uc_drop = !info.ends_message();
                        self.counters.dropped += 1;
                        return;
                    };
                    self.resp.cur = Some(InMsg::Send {
                        wr,
                        from_srq,
                        offset: 0,
                    });
                }
                self.receive_send_data(pkt, false);
            }
            Operation::Write => self.uc_write(pkt),
            _ => self.counters.dropped += 1,
        }
    }

    fn uc_write(&mut self, pkt: &IbPacket<&[u8]>) {
        let info = pkt.info();
        let data = pkt.payload();
        if info.starts_message() {
            match self.open_write(pkt, true) {
                None => return,
                Some(Err(_)) => {
                    self.resp.uc_drop = !info.ends_message();
                    self.counters.dropped += 1;
                    return;
                }
                Some(Ok(())) => {}
            }
        }
        let Some(InMsg::Write { len, buffered, .. }) = &mut self.resp.cur else {
            return;
        };
        let buf = buffered.get_or_insert_with(Vec::new);
        if (buf.len() + data.len()) as u64 > *len {
            self.resp.cur = None;
            self.resp.uc_drop = !info.ends_message();
            self.counters.dropped += 1;
            return;
        }
        buf.extend_from_slice(data);
        if !info.ends_message() {
            return;
        }
        let Some(InMsg::Write {
            va,
            rkey,
            len,
            buffered,
            ..
        }) = self.resp.cur.take()
        else {
            return;
        };
        let data = buffered.unwrap_or_default();
        if data.len() as u64 != len {
            self.counters.dropped += 1;
            return;
        }
        let recv = if info.has_immediate {
            match self.take_recv() {
                Some(r) => Some(r),
                None => {
                    self.counters.dropped += 1;
                    return;
                }
            }
        } else {
            None
        };
        if !data.is_empty()
            && self
                .mem
                .write(self.cfg.pd, rkey, va, &data, Access::RemoteWrite)
                .is_err()
        {
            if let Some((wr, from_srq)) = recv {
                self.untake_recv(wr, from_srq);
            }
            self.counters.dropped += 1;
            return;
        }
        self.resp.msn = self.resp.msn.next();
        self.resp.answered = true;
        if let Some((wr, _)) = recv {
            self.complete_write_with_imm(wr.wr_id, len, pkt);
        }
    }

    pub(super) fn ud_request(&mut self, src: IpAddr, dst: IpAddr, pkt: &IbPacket<&[u8]>) {
        let Some(deth) = pkt.deth() else { return };
        let data = pkt.payload();
        // Q_Key mismatch: silently dropped (IBTA vol. 1, 10.2.5).
        if deth.qkey() != self.attrs.qkey || data.len() > self.attrs.mtu.bytes() {
            self.counters.dropped += 1;
            return;
        }
        let Some((wr, _)) = self.take_recv() else {
            self.counters.dropped += 1;
            return;
        };
        let grh = grh_area(src, dst, pkt.as_bytes().len());
        let pd = self.cfg.pd;
        let res = scatter(&*self.mem, pd, &wr.sg_list, 0, &grh)
            .and_then(|()| scatter(&*self.mem, pd, &wr.sg_list, GRH_LEN as u64, data));
        let status = match res {
            Ok(()) => WcStatus::Success,
            Err(ScatterError::TooLong) => WcStatus::LocLenErr,
            Err(ScatterError::Mem(_)) => WcStatus::LocProtErr,
        };
        let imm = pkt.imm_dt().map(|i| i.imm());
        let src_qp = deth.src_qp();
        self.complete_recv(wr.wr_id, status, |wc| {
            wc.src_qp = src_qp;
            if status == WcStatus::Success {
                wc.byte_len = (GRH_LEN + data.len()) as u32;
                wc.wc_flags |= WcFlags::GRH;
                if let Some(imm) = imm {
                    wc.imm_data = imm;
                    wc.wc_flags |= WcFlags::WITH_IMM;
                }
            }
        });
    }
}

/// The 40 bytes a UD receive buffer starts with: the IPv6 header as a GRH, or for IPv4 twenty
/// zero bytes and then the IPv4 header, as rxe writes them.
fn grh_area(src: IpAddr, dst: IpAddr, ib_len: usize) -> [u8; GRH_LEN] {
    use softrdma_wire::roce::IpRepr;
    let mut grh = [0u8; GRH_LEN];
    let udp_len = 8 + ib_len;
    match IpRepr::for_addrs(src.to_canonical(), dst.to_canonical()) {
        Some(IpRepr::V4(mut r)) => {
            r.payload_len = udp_len;
            r.emit(&mut grh[20..]);
        }
        Some(IpRepr::V6(mut r)) => {
            r.payload_len = udp_len;
            r.emit(&mut grh);
        }
        None => {}
    }
    grh
}
