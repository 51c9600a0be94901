//! The back-to-back pairs `compare`'s goals are judged from: each runs a baseline and then
//! softrdma (or the drop-in and then the Rust API) seconds apart, since this machine drifts
//! between regimes from one minute to the next. Calls the families' runners.

use super::libfabric::{NATIVE, ONE, TWO, field};
use super::run::Run;

/// Back-to-back pairs the goals are judged from.
pub(super) const PAIRS: usize = 3;

/// Ratios of softrdma to its baseline, each from a pair of runs one right after the other.
#[derive(Default)]
pub(super) struct Paired {
    /// RC write-lat 8 B over the raw ping-pong.
    pub(super) lat: Vec<f64>,
    /// write-bw 1 MiB over the blaster.
    pub(super) bw: Vec<f64>,
    /// The bandwidth floor over the same blaster run.
    pub(super) floor: Vec<f64>,
    /// write-bw 1 MiB over the floor run right after it.
    pub(super) bw_floor: Vec<f64>,
    /// Unmodified ib_write_lat 8 B through the drop-in over softrdma perf write-lat.
    pub(super) dropin_lat: Vec<f64>,
    /// Unmodified ib_write_bw 1 MiB over softrdma perf write-bw.
    pub(super) dropin_bw: Vec<f64>,
    /// Unmodified ib_write_bw 8 B message rate over softrdma perf's.
    pub(super) dropin_rate: Vec<f64>,
    /// The same three with both ends on one device (the same-host path).
    pub(super) one_lat: Vec<f64>,
    /// The same for ib_write_bw 1 MiB.
    pub(super) one_bw: Vec<f64>,
    /// The same for the 8 B message rate.
    pub(super) one_rate: Vec<f64>,
    /// libfabric tcp;ofi_rxm fi_pingpong 8 B latency over verbs;ofi_rxm's on one softrdma
    /// device (how many times faster softrdma is).
    pub(super) fi_lat: Vec<f64>,
    /// The native provider's fi_pingpong 8 B latency between two devices over softrdma
    /// perf send-lat 8 B's mean on the same path (fi_pingpong's figure is a mean too).
    pub(super) native_send_lat: Vec<f64>,
    /// The same over send-lat's `t_typical` (a median), for reference.
    pub(super) native_send_lat_typ: Vec<f64>,
    /// The same over verbs;ofi_rxm's fi_pingpong 8 B between the same two devices.
    pub(super) native_rxm_lat: Vec<f64>,
    /// The native provider's fi_pingpong 1 MiB bandwidth between two devices over
    /// softrdma perf write-bw 1 MiB.
    pub(super) native_bw: Vec<f64>,
    /// The native provider's fi_pingpong 8 B latency on one device over libfabric's own
    /// shm provider's.
    pub(super) native_shm_lat: Vec<f64>,
}

/// Runs the pairs, [`PAIRS`] of each.
pub(super) fn pairs(run: &Run) -> Paired {
    // The two ratio goals again, from back-to-back pairs: this machine drifts between
    // regimes (the raw ping-pong moves by half a microsecond from one minute to the next), so
    // a ratio of two figures taken minutes apart can swing either way. Each pair runs the
    // baseline and then softrdma, seconds apart; the verdict takes the median pair.
    let mut paired = Paired::default();
    for _ in 0..PAIRS {
        if let (Ok(b), Ok(l)) = (run.pingpong(24001, &[]), run.write_lat()) {
            paired.lat.push(l / b);
        }
        if let (Ok(b), Ok(w)) = (run.blast(), run.write_bw_1m()) {
            paired.bw.push(w / b);
            // The floor right after: softrdma against what any RoCE endpoint must do.
            if let Ok(f) = run.blast_as(&["--roce"]) {
                paired.floor.push(f / b);
                paired.bw_floor.push(w / f);
            }
        }
    }

    // The drop-in against the Rust API, each pair back to back.
    for _ in 0..PAIRS {
        if let (Ok(c), Ok(r)) = (run.pt_lat_at(false), run.write_lat()) {
            paired.dropin_lat.push(c / r);
        }
        if let (Ok(c), Ok(r)) = (run.pt_bw_at(false), run.write_bw_1m()) {
            paired.dropin_bw.push(c / r);
        }
        if let (Ok(c), Ok(r)) = (run.pt_rate_at(false), run.rate_8()) {
            paired.dropin_rate.push(c / r);
        }
        // perftest's buffer is its own heap memory, so the Rust API's row registers its own
        // as well: the same placement (cross-memory copy) on both sides of the pair.
        if let (Ok(c), Ok(r)) = (run.pt_lat_at(true), run.same_lat_as(true)) {
            paired.one_lat.push(c / r);
        }
        if let (Ok(c), Ok(r)) = (run.pt_bw_at(true), run.same_bw_1m_as(true)) {
            paired.one_bw.push(c / r);
        }
        if let (Ok(c), Ok(r)) = (run.pt_rate_at(true), run.same_rate_8_as(true)) {
            paired.one_rate.push(c / r);
        }
        let one = Some(("127.0.0.4", "127.0.0.4"));
        if let (Ok(t), Ok(o)) = (
            field(run.fi("tcp;ofi_rxm", "8", "50000", 24040), 6),
            field(run.fi_at("verbs;ofi_rxm", "8", "50000", 24046, one), 6),
        ) {
            paired.fi_lat.push(t / o);
        }
    }

    // softrdma's native provider against its baselines (issue 40), each pair back to
    // back.
    for _ in 0..PAIRS {
        let native = |size, n, port, over| run.fi_at(NATIVE, size, n, port, Some(over));
        let f = field(native("8", "50000", 24052, TWO), 6);
        let p = run.perf("send-lat", &["-s", "8", "-n", "20000"], 24011);
        if let (Ok(f), Ok(avg)) = (&f, super::perf::lat_avg(&p)) {
            paired.native_send_lat.push(f / avg);
        }
        if let (Ok(f), Ok(typ)) = (f, super::perf::lat(p)) {
            paired.native_send_lat_typ.push(f / typ);
        }
        if let (Ok(f), Ok(r)) = (
            field(native("8", "50000", 24052, TWO), 6),
            field(
                run.fi_at("verbs;ofi_rxm", "8", "50000", 24048, Some(TWO)),
                6,
            ),
        ) {
            paired.native_rxm_lat.push(f / r);
        }
        if let (Ok(f), Ok(w)) = (
            field(native("1048576", "2000", 24053, TWO), 5),
            run.write_bw_1m(),
        ) {
            paired.native_bw.push(f * 1e6 / w);
        }
        if let (Ok(f), Ok(s)) = (
            field(native("8", "50000", 24050, ONE), 6),
            field(run.fi("shm", "8", "50000", 24044), 6),
        ) {
            paired.native_shm_lat.push(f / s);
        }
    }
    paired
}
