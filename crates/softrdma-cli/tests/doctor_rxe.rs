//! softrdma's tools and its kernel backend (`softrdma::kernel`) for real inside the rxe VM
//! (`../shared/rxe-peer`: Debian 12's kernel 6.1 with `rdma_rxe`, rdma-core 44):
//! - `softrdma doctor` must find rxe0, its GIDs with their types, and the UDP 4791 conflict
//!   (rdma_rxe's tunnel socket, which no process holds);
//! - `softrdma devinfo` and `link show` must list rxe0 beside softrdma0 and print what
//!   rdma-core's `ibv_devinfo` and iproute2's `rdma link` print of it;
//! - softrdma's Rust verbs must run on rxe0 (this test binary, run inside the VM).
//!
//! It needs root, qemu and the rxe-peer scripts. Each test boots its own VM, one at a time
//! (`vm7` on 10.77.0.8, `vm8` on 10.77.0.9, `vm9` on 10.77.0.10 by default;
//! `SOFTRDMA_DOCTOR_VM`, `SOFTRDMA_KERNEL_VM` and `SOFTRDMA_KERNEL_VERBS_VM`, as `NAME:IP`,
//! pick others) beside any other in the `rxepeer` namespace, and stops only that VM. The
//! binaries are copied into the VM's share (the VM runs the same Debian 12 glibc). Run:
//! `cargo test -p softrdma-cli --test doctor_rxe -- --ignored`.

mod common;
#[path = "common/doctor.rs"]
mod doctor;

use common::{spawn, text, wait};
use doctor::assert_rxe_vm;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

const PEER_RUN: &str = "/tmp/softrdma-rxe-peer";

/// This test's VM; stopped (that one alone) when the test ends.
struct Vm {
    dir: PathBuf,
    name: String,
    /// This file's tests take turns (see [`boot`]); the turn ends after the VM stops.
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl Vm {
    fn script(&self, name: &str) -> Command {
        let mut c = Command::new(self.dir.join(name));
        c.env("RXE_PEER_DIR", PEER_RUN);
        c
    }

    /// Runs a script of rxe-peer under the common time limit.
    fn run(&self, script: &str, args: &[&str]) -> Output {
        wait(spawn(self.script(script).args(args)), script)
    }

    fn exec(&self, cmd: &str) -> Output {
        let mut c = self.script("vmexec.sh");
        c.env("TIMEOUT", "90").arg(&self.name).arg(cmd);
        wait(spawn(&mut c), cmd)
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        let name = self.name.clone();
        let _ = self.run("stop-vm.sh", &[&name]);
    }
}

/// Boots this test's VM (`var`, `NAME:IP`, else `default`) with the binary in its share
/// as `/host/softrdma-doctor`; the VM and its address.
fn boot(var: &str, default: &str) -> (Vm, String) {
    let dir = std::env::var_os("SOFTRDMA_RXE_PEER").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/rxe-peer"),
        PathBuf::from,
    );
    assert!(
        dir.join("run-vm.sh").exists(),
        "rxe-peer scripts not found at {}",
        dir.display()
    );
    assert!(nix::unistd::geteuid().is_root(), "this test needs root");
    let which = std::env::var(var).unwrap_or_else(|_| default.into());
    let (name, ip) = which.split_once(':').expect("NAME:IP");
    // One VM at a time: under software emulation on two cores, three at once starve each
    // other past vmexec's limit; and build-vm.sh rewrites the one image each time.
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let vm = Vm {
        dir,
        name: name.to_owned(),
        _turn: TURN.lock().unwrap_or_else(|p| p.into_inner()),
    };
    let o = vm.run("build-vm.sh", &["--quiet"]);
    assert!(o.status.success(), "build-vm.sh:\n{}", text(&o));
    let o = vm.run("run-vm.sh", &[name, ip]);
    assert!(o.status.success(), "run-vm.sh:\n{}", text(&o));
    let share = PathBuf::from(PEER_RUN).join("run").join(name).join("share");
    std::fs::copy(
        env!("CARGO_BIN_EXE_softrdma"),
        share.join("softrdma-doctor"),
    )
    .expect("copy the binary into the VM's share");
    (vm, ip.to_owned())
}

#[test]
#[ignore = "needs root, qemu and ../shared/rxe-peer"]
fn doctor_inside_the_rxe_vm() {
    let (vm, ip) = boot("SOFTRDMA_DOCTOR_VM", "vm7:10.77.0.8");
    let ip = ip.as_str();

    let o = vm.exec("/host/softrdma-doctor doctor --json");
    assert_eq!(
        o.status.code(),
        Some(1),
        "softrdma0 cannot bind beside rxe, so doctor reports it broken:\n{}",
        text(&o)
    );
    let r: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", text(&o)));
    assert_rxe_vm(&r, ip);

    // What ibv_devinfo in the VM says agrees, and softrdma really cannot take the port.
    let o = vm.exec("ibv_devinfo -l");
    assert!(text(&o).contains("rxe0"), "{}", text(&o));
    let o = vm.exec("timeout 20 /host/softrdma-doctor service");
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("4791"), "{}", text(&o));
}

/// The value of each `key:` line of an `ibv_devinfo` listing, in order (a key that
/// repeats, as `GID[...]` does not, keeps its first).
fn fields(out: &str) -> Vec<(String, String)> {
    out.lines()
        .filter_map(|l| l.trim().split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// softrdma's `devinfo` lists the VM's kernel rxe0 beside its own device, and, through the
/// system's rdma-core loaded at run time, prints what rdma-core's `ibv_devinfo -v` prints
/// of it (and `link show` what iproute2's `rdma link show` does): the GUIDs, firmware and vendor, the limits, the port's state and MTUs, and every
/// GID with its type. A Rust program opening rxe0 for verbs is told plainly that it is a
/// kernel device.
#[test]
#[ignore = "needs root, qemu and ../shared/rxe-peer"]
fn devinfo_lists_and_queries_the_kernel_rxe_device() {
    let (vm, ip) = boot("SOFTRDMA_KERNEL_VM", "vm8:10.77.0.9");
    let o = vm.exec("/host/softrdma-doctor devinfo -l");
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("2 HCAs found:"), "{t}");
    assert!(t.contains("\tsoftrdma0") && t.contains("\trxe0"), "{t}");
    let ours = vm.exec("/host/softrdma-doctor devinfo -v -d rxe0");
    assert!(ours.status.success(), "{}", text(&ours));
    let theirs = vm.exec("ibv_devinfo -v -d rxe0");
    assert!(theirs.status.success(), "{}", text(&theirs));
    let (ours, theirs) = (text(&ours), text(&theirs));
    let (o, t) = (fields(&ours), fields(&theirs));
    let get = |v: &[(String, String)], k: &str| {
        v.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("no {k}:\n{ours}\n---\n{theirs}"))
    };
    for k in [
        "hca_id",
        "fw_ver",
        "node_guid",
        "sys_image_guid",
        "vendor_id",
        "vendor_part_id",
        "hw_ver",
        "phys_port_cnt",
        "max_mr_size",
        "page_size_cap",
        "max_qp",
        "max_qp_wr",
        "max_sge",
        "max_cq",
        "max_cqe",
        "max_mr",
        "max_pd",
        "max_qp_rd_atom",
        "max_res_rd_atom",
        "max_qp_init_rd_atom",
        "atomic_cap",
        "max_mcast_grp",
        "max_ah",
        "max_srq",
        "max_srq_wr",
        "max_pkeys",
        "local_ca_ack_delay",
        "port",
        "state",
        "max_mtu",
        "active_mtu",
        "link_layer",
        "max_msg_sz",
        "gid_tbl_len",
    ] {
        assert_eq!(get(&o, k), get(&t, k), "{k}:\n{ours}\n---\n{theirs}");
    }
    // Every GID line of rdma-core's, in softrdma's: the IPv4-mapped one of the VM's
    // address as RoCE v2 among them.
    let gid_lines = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| l.trim_start().starts_with("GID["))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect()
    };
    assert_eq!(
        gid_lines(&ours),
        gid_lines(&theirs),
        "{ours}\n---\n{theirs}"
    );
    assert!(
        gid_lines(&ours)
            .iter()
            .any(|l| l.ends_with(&format!("::ffff:{ip}, RoCE v2"))),
        "{ours}"
    );
    // `link show` begins as iproute2's `rdma link show` does, and adds the address.
    let ours = vm.exec("/host/softrdma-doctor link show rxe0");
    let theirs = vm.exec("rdma link show rxe0/1");
    assert!(ours.status.success() && theirs.status.success());
    let (ours, theirs) = (text(&ours), text(&theirs));
    assert!(ours.starts_with(theirs.trim_end()), "{ours}\n---\n{theirs}");
    assert!(ours.contains(&format!(" addr {ip} ")), "{ours}");
}

/// softrdma's Rust verbs on the VM's kernel rxe0, through the system's rdma-core: this test
/// binary copies itself into the VM and runs [`kernel_verbs_inside_the_vm`] there, which
/// connects two RC QPs of rxe0 to each other and checks a SEND, an RDMA WRITE, an RDMA READ
/// and both atomics byte for byte, and a WRITE with a wrong R_Key completing with
/// REM_ACCESS_ERR; then a WRITE with immediate between two UC QPs, and a UD datagram into a
/// receive of an SRQ; waiting on a completion channel throughout.
#[test]
#[ignore = "needs root, qemu and ../shared/rxe-peer"]
fn rust_verbs_run_on_the_kernel_rxe_device() {
    let (vm, ip) = boot("SOFTRDMA_KERNEL_VERBS_VM", "vm9:10.77.0.10");
    let me = std::env::current_exe().unwrap();
    let share = PathBuf::from(PEER_RUN)
        .join("run")
        .join(&vm.name)
        .join("share");
    std::fs::copy(&me, share.join("doctor_rxe_test")).expect("copy the test into the VM");
    let o = vm.exec(&format!(
        "SOFTRDMA_INSIDE_VM={ip} /host/doctor_rxe_test --ignored --exact \
         kernel_verbs_inside_the_vm --nocapture"
    ));
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("kernel verbs ok"), "{t}");
}

/// The part of [`rust_verbs_run_on_the_kernel_rxe_device`] that runs inside the VM (a no-op
/// elsewhere).
#[test]
#[ignore = "runs inside the rxe VM, started by rust_verbs_run_on_the_kernel_rxe_device"]
fn kernel_verbs_inside_the_vm() {
    use softrdma::kernel::{KernelContext, KernelQpInit};
    use softrdma::{
        AccessFlags, AddressVector, Payload, QpAttr, QpCaps, QpState, QpType, RecvWr, SendOp,
        SendWr, UdDest, WcOpcode, WcStatus, sg,
    };
    let Ok(ip) = std::env::var("SOFTRDMA_INSIDE_VM") else {
        return;
    };
    let ip: std::net::IpAddr = ip.parse().unwrap();
    let ctx = KernelContext::open("rxe0").expect("open rxe0");
    let port = ctx.query_port(1).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let channel = ctx.create_comp_channel().unwrap();
    let cq = ctx.create_cq(64, Some(&channel)).unwrap();
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let mut bufs = [vec![0u8; 4096], vec![0u8; 4096]];
    let [a_buf, b_buf] = &mut bufs;
    // SAFETY: the buffers outlive the regions (dropped before the final checks).
    let (ma, mb) = unsafe {
        (
            pd.register_raw(a_buf.as_mut_ptr(), 4096, access).unwrap(),
            pd.register_raw(b_buf.as_mut_ptr(), 4096, access).unwrap(),
        )
    };
    let init = |qp_type| KernelQpInit {
        qp_type,
        send_cq: &cq,
        recv_cq: &cq,
        cap: QpCaps::default(),
        sq_sig_all: false,
        srq: None,
    };
    let qa = pd.create_qp(init(QpType::Rc)).unwrap();
    let qb = pd.create_qp(init(QpType::Rc)).unwrap();
    let av = AddressVector {
        src: ip,
        dst: ip,
        flow_label: 0,
        traffic_class: 0,
    };
    for (q, peer) in [(&qa, qb.qpn()), (&qb, qa.qpn())] {
        let step = |a: QpAttr| q.modify(&a).unwrap();
        step(QpAttr {
            state: Some(QpState::Init),
            pkey_index: Some(0),
            port: Some(1),
            access_flags: Some(access),
            ..Default::default()
        });
        step(QpAttr {
            state: Some(QpState::Rtr),
            av: Some(av),
            path_mtu: Some(port.active_mtu),
            dest_qpn: Some(peer),
            rq_psn: Some(softrdma::Psn::new(0)),
            max_dest_rd_atomic: Some(1),
            min_rnr_timer: Some(12),
            ..Default::default()
        });
        step(QpAttr {
            state: Some(QpState::Rts),
            sq_psn: Some(softrdma::Psn::new(0)),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(1),
            ..Default::default()
        });
    }
    // Each wait sleeps on the completion channel between polls, as an event-driven
    // program does.
    let wait = |n: usize| {
        let mut got = Vec::new();
        let t = std::time::Instant::now();
        loop {
            cq.poll_into(n - got.len(), &mut got).unwrap();
            if got.len() == n {
                break;
            }
            cq.req_notify(false).unwrap();
            cq.poll_into(n - got.len(), &mut got).unwrap();
            if got.len() == n {
                break;
            }
            channel
                .get_cq_event(Some(std::time::Duration::from_millis(200)))
                .unwrap();
            assert!(t.elapsed().as_secs() < 20, "completions: {got:?}");
        }
        for c in &got {
            assert_eq!(c.status, WcStatus::Success, "{got:?}");
        }
        got
    };
    // SEND: A's first 64 bytes into B's receive at offset 1024.
    for (i, b) in a_buf[..64].iter_mut().enumerate() {
        *b = i as u8 ^ 0x5a;
    }
    qb.post_recv(&RecvWr {
        wr_id: 1,
        sg_list: sg![mb.sge(1024, 64)],
    })
    .unwrap();
    qa.post_send(&SendWr::signaled(
        2,
        SendOp::Send,
        Payload::Sges(sg![ma.sge(0, 64)]),
    ))
    .unwrap();
    let got = wait(2);
    assert!(
        got.iter()
            .any(|c| c.wr_id == 1 && c.opcode == WcOpcode::Recv && c.byte_len == 64)
    );
    // WRITE: A's bytes 64..128 to B at 2048, with no receive.
    for (i, b) in a_buf[64..128].iter_mut().enumerate() {
        *b = i as u8 ^ 0xa5;
    }
    qa.post_send(&SendWr::signaled(
        3,
        SendOp::Write {
            remote_addr: mb.addr() + 2048,
            rkey: mb.rkey(),
        },
        Payload::Sges(sg![ma.sge(64, 64)]),
    ))
    .unwrap();
    assert_eq!(wait(1)[0].opcode, WcOpcode::RdmaWrite);
    // READ: B's bytes at 1024 (the SEND's) back into A at 3072.
    qa.post_send(&SendWr::signaled(
        4,
        SendOp::Read {
            remote_addr: mb.addr() + 1024,
            rkey: mb.rkey(),
        },
        Payload::Sges(sg![ma.sge(3072, 64)]),
    ))
    .unwrap();
    assert_eq!(wait(1)[0].opcode, WcOpcode::RdmaRead);
    // Atomics on B's word at 3584 (8-byte aligned): fetch-add, then compare-and-swap, each
    // returning the old value into A at 3584 and 3592.
    let atomic = |wr_id, op, at: u64| {
        qa.post_send(&SendWr::signaled(
            wr_id,
            op,
            Payload::Sges(sg![ma.sge(at, 8)]),
        ))
        .unwrap();
        wait(1)[0]
    };
    let c = atomic(
        5,
        SendOp::FetchAdd {
            remote_addr: mb.addr() + 3584,
            rkey: mb.rkey(),
            add: 0x1_0000_0001,
        },
        3584,
    );
    assert_eq!(c.opcode, WcOpcode::FetchAdd);
    let c = atomic(
        6,
        SendOp::CompareSwap {
            remote_addr: mb.addr() + 3584,
            rkey: mb.rkey(),
            compare: 0x1_0000_0001,
            swap: 0xdead_beef,
        },
        3592,
    );
    assert_eq!(c.opcode, WcOpcode::CompSwap);
    // A WRITE with a wrong R_Key: the responder refuses it, and the requester completes
    // it with REM_ACCESS_ERR (and its QP goes to ERROR), as the kernel reports it.
    qa.post_send(&SendWr::signaled(
        7,
        SendOp::Write {
            remote_addr: mb.addr(),
            rkey: mb.rkey() ^ 0x100,
        },
        Payload::Sges(sg![ma.sge(0, 8)]),
    ))
    .unwrap();
    let t = std::time::Instant::now();
    let bad = loop {
        if let Some(c) = cq.poll(1).unwrap().pop() {
            break c;
        }
        assert!(
            t.elapsed().as_secs() < 20,
            "no completion for the bad R_Key"
        );
    };
    assert_eq!((bad.wr_id, bad.status), (7, WcStatus::RemAccessErr));
    // UC: two more QPs, connected as the RC pair was (no READ or atomics on UC), and a
    // WRITE with immediate data, which consumes a receive at the target.
    let (ua, ub) = (
        pd.create_qp(init(QpType::Uc)).unwrap(),
        pd.create_qp(init(QpType::Uc)).unwrap(),
    );
    for (q, peer) in [(&ua, ub.qpn()), (&ub, ua.qpn())] {
        for a in [
            QpAttr {
                state: Some(QpState::Init),
                pkey_index: Some(0),
                port: Some(1),
                access_flags: Some(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE),
                ..Default::default()
            },
            QpAttr {
                state: Some(QpState::Rtr),
                av: Some(av),
                path_mtu: Some(port.active_mtu),
                dest_qpn: Some(peer),
                rq_psn: Some(softrdma::Psn::new(0)),
                ..Default::default()
            },
            QpAttr {
                state: Some(QpState::Rts),
                sq_psn: Some(softrdma::Psn::new(0)),
                ..Default::default()
            },
        ] {
            q.modify(&a).unwrap();
        }
    }
    for (i, b) in a_buf[128..192].iter_mut().enumerate() {
        *b = i as u8 ^ 0x3c;
    }
    ub.post_recv(&RecvWr {
        wr_id: 10,
        sg_list: sg![],
    })
    .unwrap();
    ua.post_send(&SendWr::signaled(
        11,
        SendOp::WriteWithImm {
            remote_addr: mb.addr() + 3840,
            rkey: mb.rkey(),
            imm: 0x0bad_cafe,
        },
        Payload::Sges(sg![ma.sge(128, 64)]),
    ))
    .unwrap();
    let got = wait(2);
    let r = got.iter().find(|c| c.wr_id == 10).expect("the UC receive");
    assert_eq!(
        (r.opcode, r.imm_data),
        (WcOpcode::RecvRdmaWithImm, 0x0bad_cafe),
        "{got:?}"
    );
    // UD, with the receive on an SRQ: a datagram from one UD QP to another, addressed by IP
    // (the QP makes the address handle), lands after the 40-byte GRH area.
    let srq = pd.create_srq(16, 1).unwrap();
    let ud = |srq| {
        let q = pd
            .create_qp(KernelQpInit {
                srq,
                ..init(QpType::Ud)
            })
            .unwrap();
        for a in [
            QpAttr {
                state: Some(QpState::Init),
                pkey_index: Some(0),
                port: Some(1),
                qkey: Some(0x1111),
                ..Default::default()
            },
            QpAttr {
                state: Some(QpState::Rtr),
                ..Default::default()
            },
            QpAttr {
                state: Some(QpState::Rts),
                sq_psn: Some(softrdma::Psn::new(0)),
                ..Default::default()
            },
        ] {
            q.modify(&a).unwrap();
        }
        q
    };
    let (us, ur) = (ud(None), ud(Some(&srq)));
    srq.post_recv(&RecvWr {
        wr_id: 8,
        sg_list: sg![mb.sge(256, 40 + 32)],
    })
    .unwrap();
    us.post_send(&SendWr {
        ud: Some(UdDest {
            src: ip,
            ip,
            qpn: ur.qpn(),
            qkey: 0x1111,
            traffic_class: 0,
        }),
        ..SendWr::signaled(9, SendOp::Send, Payload::Sges(sg![ma.sge(3072, 32)]))
    })
    .unwrap();
    let got = wait(2);
    let r = got.iter().find(|c| c.wr_id == 8).expect("the UD receive");
    assert_eq!((r.byte_len, r.src_qp), (40 + 32, us.qpn()), "{got:?}");
    drop((qa, qb, ua, ub, us, ur, srq, ma, mb));
    let [a_buf, b_buf] = &bufs;
    assert_eq!(&b_buf[1024..1088], &a_buf[..64], "SEND");
    assert_eq!(&b_buf[2048..2112], &a_buf[64..128], "WRITE");
    assert_eq!(&a_buf[3072..3136], &a_buf[..64], "READ");
    let word = |b: &[u8], at: usize| u64::from_ne_bytes(b[at..at + 8].try_into().unwrap());
    assert_eq!(word(a_buf, 3584), 0, "FETCH_ADD returned the old value");
    assert_eq!(
        word(a_buf, 3592),
        0x1_0000_0001,
        "CMP_SWP returned the old value"
    );
    assert_eq!(word(b_buf, 3584), 0xdead_beef, "CMP_SWP swapped");
    assert_eq!(&b_buf[296..328], &a_buf[3072..3104], "UD SEND");
    assert_eq!(&b_buf[3840..3904], &a_buf[128..192], "UC WRITE");
    println!(
        "kernel verbs ok: SEND, WRITE, READ, FETCH_ADD, CMP_SWP and a refused R_Key between \
         two RC QPs of rxe0, a UC WRITE with immediate, a UD SEND into an SRQ, waits on a \
         completion channel"
    );
}
