//! Two connected RC ends for the instruction-counting examples: each a device context, a
//! PD, a CQ, one QP and one registered buffer.

use softrdma::*;

/// One end.
pub struct End {
    pub ctx: Context,
    _pd: ProtectionDomain,
    pub cq: CompletionQueue,
    pub qp: QueuePair,
    pub mr: MemoryRegion,
}

/// An end on its own context on `addr` (device `name`), with a buffer of `len` bytes of
/// `access`.
pub fn end(name: &str, addr: &str, len: usize, access: AccessFlags) -> Result<End> {
    let ctx = Context::open_with(
        name,
        addr.parse().expect("an address"),
        Mtu::M4096,
        DeviceOptions::default(),
    )?;
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(256, None)?;
    let mut attr = QpInitAttr::new(QpType::Rc, &cq);
    attr.cap.max_send_wr = 64;
    let qp = pd.create_qp(attr)?;
    let mr = pd.register_zeroed(len, access)?;
    Ok(End {
        ctx,
        _pd: pd,
        cq,
        qp,
        mr,
    })
}

/// Connects `a` and `b` to each other (starting PSNs 1 and 2) with the path MTU of the
/// devices' port (4096), as `softrdma perf` and the connection manager connect.
pub fn connect(a: &End, b: &End) -> Result<()> {
    let attr = ConnectAttr {
        mtu: a.ctx.active_mtu(),
        ..ConnectAttr::default()
    };
    let (pa, pb) = (Psn::new(1), Psn::new(2));
    let peer = |e: &End, psn| Peer {
        addr: e.ctx.addr(),
        qpn: e.qp.qp_num(),
        psn,
    };
    a.qp.connect(pa, &peer(b, pb), &attr)?;
    b.qp.connect(pb, &peer(a, pa), &attr)
}
