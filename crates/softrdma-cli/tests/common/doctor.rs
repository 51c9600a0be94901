//! What the `softrdma doctor` tests share: finding a check in the JSON report by id and
//! asserting verdicts.
#![allow(dead_code)]

use serde_json::Value;

/// The check with this id.
pub fn check<'a>(r: &'a Value, id: &str) -> &'a Value {
    r["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no check {id} in {r:#}"))
}

/// Asserts each `(id, verdict)`.
pub fn expect(r: &Value, want: &[(&str, &str)]) {
    for (id, verdict) in want {
        let c = check(r, id);
        assert_eq!(c["verdict"], *verdict, "{id}: {c:#}");
    }
}

/// A text field of a check (empty when absent).
pub fn field(c: &Value, name: &str) -> String {
    c[name].as_str().unwrap_or_default().to_owned()
}

/// What doctor must find on an rxe VM of `../shared/rxe-peer` whose address is `ip` (the
/// fixture copied from one, and a live one): rxe0 with its two RoCE v2 GIDs on eth0, index 1
/// for IPv4, libibverbs listing it, and softrdma0's port 4791 held by rdma_rxe in the kernel.
pub fn assert_rxe_vm(r: &Value, ip: &str) {
    expect(
        r,
        &[
            ("modules.loaded", "ok"),
            ("modules.ib_core", "ok"),
            ("modules.ib_uverbs", "ok"),
            ("modules.rdma_ucm", "ok"),
            ("modules.rdma_rxe_port", "warn"),
            ("device.rxe0", "ok"),
            ("port.rxe0/1", "ok"),
            ("port.rxe0/1.mtu", "ok"),
            ("port.rxe0/1.gids", "ok"),
            ("port.rxe0/1.gid_index", "ok"),
            ("devfiles.uverbs", "ok"),
            ("devfiles.rdma_cm", "ok"),
            ("abi.uverbs", "ok"),
            ("provider.rxe0", "ok"),
            ("memlock", "ok"),
            ("libibverbs.devices", "ok"),
            ("softrdma.softrdma0.port", "fail"),
        ],
    );
    let gids = check(r, "port.rxe0/1.gids")["data"]
        .as_array()
        .expect("GIDs")
        .clone();
    assert_eq!(gids.len(), 2, "{gids:#?}");
    assert!(field(&gids[0], "gid").starts_with("fe80::"), "{gids:#?}");
    assert_eq!(gids[1]["gid"], format!("::ffff:{ip}"));
    for g in &gids {
        assert_eq!(g["type"], "RoCE v2", "{g:#}");
        assert_eq!(g["ndev"], "eth0", "{g:#}");
    }
    assert_eq!(check(r, "port.rxe0/1.gid_index")["data"]["ipv4"], 1);
    assert!(field(check(r, "port.rxe0/1.mtu"), "detail").contains("active MTU 1024"));
    let port = check(r, "softrdma.softrdma0.port");
    assert!(field(port, "detail").contains("the kernel"), "{port:#}");
    assert!(field(port, "reason").contains("rdma_rxe"), "{port:#}");
    assert!(
        field(port, "fix").contains("modprobe -r rdma_rxe"),
        "{port:#}"
    );
    assert_eq!(check(r, "libibverbs.devices")["data"]["listed"][0], "rxe0");
}
