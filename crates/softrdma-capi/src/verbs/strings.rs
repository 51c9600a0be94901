//! The string and rate helpers of libibverbs (`ibv_wc_status_str` & co, `ibv_rate_to_mult`
//! & co), with rdma-core's wording and tables.

use std::ffi::{CStr, c_char, c_int};

fn pick(table: &[&'static CStr], i: c_int) -> *const c_char {
    usize::try_from(i)
        .ok()
        .and_then(|i| table.get(i))
        .copied()
        .unwrap_or(c"unknown")
        .as_ptr()
}

/// `ibv_wc_status_str`: rdma-core's wording.
pub extern "C" fn ibv_wc_status_str(status: c_int) -> *const c_char {
    const T: &[&CStr] = &[
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
        c"TM error",
        c"TM software rendezvous",
    ];
    pick(T, status)
}

/// `ibv_event_type_str`.
pub extern "C" fn ibv_event_type_str(ev: c_int) -> *const c_char {
    const T: &[&CStr] = &[
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
    ];
    pick(T, ev)
}

/// `ibv_node_type_str`.
pub extern "C" fn ibv_node_type_str(t: c_int) -> *const c_char {
    const T: &[&CStr] = &[
        c"unknown",
        c"InfiniBand channel adapter",
        c"InfiniBand switch",
        c"InfiniBand router",
        c"iWARP NIC",
        c"usNIC",
        c"usNIC UDP",
        c"unspecified",
    ];
    pick(T, t)
}

/// `ibv_port_state_str`.
pub extern "C" fn ibv_port_state_str(s: c_int) -> *const c_char {
    const T: &[&CStr] = &[
        c"no state change (NOP)",
        c"down",
        c"init",
        c"armed",
        c"active",
        c"active defer",
    ];
    pick(T, s)
}

/// `enum ibv_rate` → (multiple of 2.5 Gb/s, Mb/s); index = the enum value.
const RATES: &[(c_int, c_int)] = &[
    (0, 0),
    (0, 0),
    (1, 2500),
    (4, 10000),
    (12, 30000),
    (2, 5000),
    (8, 20000),
    (16, 40000),
    (24, 60000),
    (32, 80000),
    (48, 120000),
    (0, 14062),
    (0, 56250),
    (0, 112500),
    (0, 168750),
    (0, 25781),
    (0, 103125),
    (0, 206250),
    (0, 309375),
    (0, 28125),
    (0, 53125),
    (0, 425000),
    (0, 637500),
];

/// A column of [`RATES`]: the multiple ([`MULT`]) or the Mb/s ([`MBPS`]).
type Column = fn(&(c_int, c_int)) -> c_int;
const MULT: Column = |&(mult, _)| mult;
const MBPS: Column = |&(_, mbps)| mbps;

/// The rate `r`'s value in `col`; -1 for a rate that is not in the table or has none
/// there (0).
fn rate_to(col: Column, r: c_int) -> c_int {
    usize::try_from(r)
        .ok()
        .and_then(|i| RATES.get(i))
        .map(col)
        .filter(|&x| x != 0)
        .unwrap_or(-1)
}

/// The rate whose value in `col` is `x`; 0 (`IBV_RATE_MAX`) for none.
fn rate_of(col: Column, x: c_int) -> c_int {
    RATES
        .iter()
        .position(|e| x != 0 && col(e) == x)
        .map_or(0, |i| i as c_int)
}

/// `ibv_rate_to_mult`.
pub extern "C" fn ibv_rate_to_mult(r: c_int) -> c_int {
    rate_to(MULT, r)
}

/// `mult_to_ibv_rate`.
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    rate_of(MULT, mult)
}

/// `ibv_rate_to_mbps`.
pub extern "C" fn ibv_rate_to_mbps(r: c_int) -> c_int {
    rate_to(MBPS, r)
}

/// `mbps_to_ibv_rate`.
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    rate_of(MBPS, mbps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_convert_both_ways_and_answer_none_outside_the_table() {
        // IBV_RATE_10_GBPS (3) and IBV_RATE_14_GBPS (11), which has no multiple.
        assert_eq!(ibv_rate_to_mult(3), 4);
        assert_eq!(ibv_rate_to_mbps(3), 10000);
        assert_eq!(mult_to_ibv_rate(4), 3);
        assert_eq!(mbps_to_ibv_rate(10000), 3);
        assert_eq!(ibv_rate_to_mult(11), -1);
        assert_eq!(ibv_rate_to_mbps(11), 14062);
        assert_eq!(mbps_to_ibv_rate(14062), 11);
        for r in [-1, 0, 1, 23, 100] {
            assert_eq!(
                (ibv_rate_to_mult(r), ibv_rate_to_mbps(r)),
                (-1, -1),
                "rate {r}"
            );
        }
        for x in [0, 3, 14061] {
            assert_eq!(
                (mult_to_ibv_rate(x), mbps_to_ibv_rate(x)),
                (0, 0),
                "value {x}"
            );
        }
    }
}
