//! `compare`'s report: the markdown table of every figure with its ratio to raw UDP, and the
//! goals, each judged from the back-to-back pairs or from this run's figures. Its lines are
//! what `bench/compare.sh` and the docs quote: keep their format. Prints to stdout.

use super::figures::{Figure, Kind};
use super::paired::{PAIRS, Paired};
use crate::pair::Pin;
use crate::stats::median;

/// The median of `v` and the list it came from, as the table prints them.
fn median_of(v: &[f64]) -> Option<(f64, String)> {
    let list = v
        .iter()
        .map(|r| format!("{r:.2}×"))
        .collect::<Vec<_>>()
        .join(", ");
    median(v).map(|m| (m, list))
}

/// Prints the table and the goals.
pub(super) fn print_table(figs: &[Figure], pin: &Pin, seconds: u64, paired: &Paired) {
    let base = |k: Kind| {
        figs.iter()
            .find(|f| f.kind == k && f.what.starts_with("raw UDP"))
            .and_then(|f| f.value)
    };
    let (lat0, bw0) = (base(Kind::Lat), base(Kind::Bw));
    println!();
    if pin.server.is_empty() {
        println!("Processes not pinned (fewer than 2 CPUs or no taskset).");
    } else {
        println!(
            "Server pinned to CPU 0 and client to CPU 1 (taskset); bandwidth runs {seconds} s."
        );
    }
    println!();
    println!("| Figure | Value | Ratio to raw UDP |");
    println!("|---|---:|---:|");
    for f in figs {
        let (val, ratio) = match (f.value, f.kind) {
            (None, _) => (format!("skipped: {}", f.note.replace('|', "/")), "".into()),
            (Some(v), Kind::Lat) => (
                format!("{v:.2} µs"),
                lat0.map_or(String::new(), |b| format!("{:.2}×", v / b)),
            ),
            (Some(v), Kind::Bw) => (
                format!("{:.2} GB/s", v / 1e9),
                bw0.map_or(String::new(), |b| format!("{:.2}×", v / b)),
            ),
            (Some(v), Kind::Rate) => (format!("{:.3} M/s", v / 1e6), String::new()),
            (Some(v), Kind::Size) => (format!("{v:.1} KiB"), String::new()),
        };
        println!("| {} | {val} | {ratio} |", f.what);
    }
    let get = |p: &str| {
        figs.iter()
            .find(|f| f.what.starts_with(p))
            .and_then(|f| f.value)
    };
    println!();
    println!("Goals (the two ratios: the median of {PAIRS} back-to-back pairs, each listed):");
    let verdict = |ok: bool| if ok { "met" } else { "missed" };
    match median_of(&paired.lat) {
        Some((m, list)) => println!(
            "- 8 B WRITE latency ≤ 1.3× raw UDP: {m:.2}× ({}; pairs {list}; in the table above {})",
            verdict(m <= 1.3),
            get("softrdma write-lat")
                .zip(lat0)
                .map_or("-".into(), |(l, b)| format!("{:.2}×", l / b)),
        ),
        None => println!("- 8 B WRITE latency: no pair completed"),
    }
    match median_of(&paired.bw) {
        Some((m, list)) => println!(
            "- 1 MiB WRITE bandwidth ≥ 0.8× raw UDP GSO+GRO: {m:.2}× ({}; pairs {list}; in the table above {})",
            verdict(m >= 0.8),
            get("softrdma write-bw 1 MiB")
                .zip(bw0)
                .map_or("-".into(), |(w, b)| format!("{:.2}×", w / b)),
        ),
        None => println!("- 1 MiB WRITE bandwidth: no pair completed"),
    }
    if let (Some(l), Some(f)) = (
        get("softrdma write-lat 8 B,"),
        get("the same with a 20 B ACK"),
    ) {
        println!(
            "- (for reference) RC write-lat against the RC floor of this run: {:.2}×",
            l / f
        );
    }
    if let (Some((f, flist)), Some((w, wlist))) =
        (median_of(&paired.floor), median_of(&paired.bw_floor))
    {
        let bound = if f < 0.8 {
            ", so no RoCE endpoint on this path reaches 0.8×"
        } else {
            ""
        };
        println!(
            "- (for reference) the bandwidth floor itself: {f:.2}× raw UDP (pairs {flist}){bound}; write-bw 1 MiB against it: {w:.2}× (pairs {wlist})"
        );
    }
    let within = |name: &str, v: &[f64], low: f64, high: f64| match median_of(v) {
        Some((m, list)) => println!(
            "- {name}: {m:.2}× ({}; pairs {list})",
            verdict(m >= low && m <= high)
        ),
        None => println!("- {name}: no pair completed"),
    };
    within(
        "drop-in ib_write_lat 8 B within 10 % of softrdma perf write-lat (t_typical)",
        &paired.dropin_lat,
        0.0,
        1.1,
    );
    within(
        "drop-in ib_write_bw 1 MiB within 5 % of softrdma perf write-bw",
        &paired.dropin_bw,
        0.95,
        f64::INFINITY,
    );
    within(
        "drop-in ib_write_bw 8 B -t 512 -Q 64 message rate within 10 % of softrdma perf's",
        &paired.dropin_rate,
        0.9,
        f64::INFINITY,
    );
    within(
        "one device: drop-in ib_write_lat 8 B within 10 % of softrdma perf write-lat (t_typical)",
        &paired.one_lat,
        0.0,
        1.1,
    );
    within(
        "one device: drop-in ib_write_bw 1 MiB within 5 % of softrdma perf write-bw",
        &paired.one_bw,
        0.95,
        f64::INFINITY,
    );
    within(
        "one device: drop-in ib_write_bw 8 B -t 512 -Q 64 message rate within 10 % of softrdma perf's",
        &paired.one_rate,
        0.9,
        f64::INFINITY,
    );
    // The same-host goals (issue 15), each against its peer from this run.
    let ratio = |name: &str, ours: &str, theirs: &str, goal: f64, higher: bool| match (
        get(ours),
        get(theirs),
    ) {
        (Some(a), Some(b)) if b > 0.0 => {
            let r = a / b;
            let ok = if higher { r >= goal } else { r <= goal };
            println!(
                "- {name}: {r:.2}× ({a:.3e} against {b:.3e}; {})",
                verdict(ok)
            );
        }
        _ => println!("- {name}: a figure is missing"),
    };
    ratio(
        "same-host write-lat 8 B ≤ 2× UCX posix ucp_put_lat",
        "same host, one device (rings): softrdma write-lat",
        "UCX shared memory ucp_put_lat",
        2.0,
        false,
    );
    ratio(
        "same-host write-bw 1 MiB, application memory, ≥ 0.6× UCX's best same-host tag_bw (posix with CMA)",
        "same host, one device (rings), application memory: softrdma write-bw 1 MiB",
        "UCX shared memory with CMA tag_bw",
        0.6,
        true,
    );
    ratio(
        "same-host write-bw 1 MiB, memory softrdma allocates, ≥ 0.8× UCX posix ucp_put_bw",
        "same host, one device (rings): softrdma write-bw 1 MiB",
        "UCX shared memory ucp_put_bw",
        0.8,
        true,
    );
    ratio(
        "two processes on one device, one talking to another device: latency ≤ 1.5× a lone process's",
        "a member of a shared device (steered) to another device",
        "softrdma write-lat 8 B, t_typical",
        1.5,
        false,
    );
    ratio(
        "same-host placed WRITEs against rings alone (SOFTRDMA_CMA=0), write-bw 1 MiB",
        "same host, one device (rings): softrdma write-bw 1 MiB",
        "same host, one device (rings, SOFTRDMA_CMA=0): softrdma write-bw 1 MiB",
        1.0,
        true,
    );
    ratio(
        "same-host rings against the same device over UDP, write-lat 8 B (lower is better)",
        "same host, one device (rings): softrdma write-lat",
        "same host, one device (SOFTRDMA_SHM=0, UDP): softrdma write-lat",
        1.0,
        false,
    );
    // The libfabric goal (issue 37), from back-to-back pairs: verbs;ofi_rxm on softrdma's
    // same-host path against libfabric's own tcp provider (tcp;ofi_rxm), 8 B latency.
    within(
        "libfabric verbs;ofi_rxm over softrdma (one device) ≥ 3× faster than libfabric tcp;ofi_rxm, fi_pingpong 8 B latency (tcp's over ours)",
        &paired.fi_lat,
        3.0,
        f64::INFINITY,
    );
    // softrdma's native libfabric provider (issue 40), from back-to-back pairs.
    within(
        "libfabric softrdma (native), two devices: fi_pingpong 8 B latency ≤ 1.2× softrdma perf send-lat 8 B (both means: fi_pingpong reports its mean)",
        &paired.native_send_lat,
        0.0,
        1.2,
    );
    within(
        "(for reference) the same against send-lat's t_typical (a median)",
        &paired.native_send_lat_typ,
        0.0,
        1.2,
    );
    within(
        "libfabric softrdma (native), two devices: fi_pingpong 8 B latency ≤ 0.6× verbs;ofi_rxm over softrdma's",
        &paired.native_rxm_lat,
        0.0,
        0.6,
    );
    within(
        "libfabric softrdma (native), two devices: fi_pingpong 1 MiB bandwidth ≥ 0.9× softrdma perf write-bw 1 MiB",
        &paired.native_bw,
        0.9,
        f64::INFINITY,
    );
    within(
        "libfabric softrdma (native), one device: fi_pingpong 8 B latency within 2× libfabric shm's",
        &paired.native_shm_lat,
        0.0,
        2.0,
    );
    ratio(
        "Open MPI point-to-point 8 B latency over mtl ofi: softrdma (native) lower than verbs;ofi_rxm over softrdma",
        super::mpi::NATIVE_ROW,
        super::mpi::RXM_ROW,
        1.0,
        false,
    );
    for (what, name, goal) in [
        (
            "write-lat 8 B ≤ 0.5 µs",
            "same host, one device (rings): softrdma write-lat",
            0.5,
        ),
        (
            "send-lat 8 B ≤ 0.6 µs",
            "same host, one device (rings): softrdma send-lat",
            0.6,
        ),
    ] {
        if let Some(us) = get(name) {
            println!("- same-host {what}: {us:.2} µs ({})", verdict(us <= goal));
        }
    }
    // Many QPs at once (issue 42), from this run's rows.
    if let (Some(one), Some(many)) = (get(&super::qps::row(1)), get(&super::qps::row(4096))) {
        println!(
            "- aggregate write-bw 64 KiB with 4,096 RC QPs ≥ 0.8× one QP's: {:.2}× ({:.3e} against {:.3e}; {})",
            many / one,
            many,
            one,
            verdict(many >= 0.8 * one)
        );
    }
    if let Some(r) = get("same host, one device (rings): softrdma write-bw 8 B") {
        println!(
            "- same-host 8 B WRITE message rate ≥ 5 M/s: {:.3} M/s ({})",
            r / 1e6,
            verdict(r >= 5e6)
        );
    }
    if let Some(r) = get("softrdma write-bw 8 B") {
        println!(
            "- 8 B WRITE message rate ≥ 1 M/s: {:.3} M/s ({})",
            r / 1e6,
            verdict(r >= 1e6)
        );
    }
}
