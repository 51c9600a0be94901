//! `softrdma devinfo` (the layout of `ibv_devinfo`) and `softrdma link` (modelled on iproute2's
//! `rdma link`).

use crate::error::CliError;
use clap::{Args, Subcommand};
use softrdma::config::{self, Binding, DeviceInfo, DeviceSpec};
use softrdma::{Device, device_attr, port_attr};
use std::net::IpAddr;
use std::process::ExitCode;

/// Flags of `softrdma devinfo` (those of `ibv_devinfo`).
#[derive(Debug, Args)]
pub struct DevinfoArgs {
    /// Only this device.
    #[arg(short = 'd', long = "ib-dev")]
    ib_dev: Option<String>,
    /// Only this port.
    #[arg(short = 'i', long = "ib-port")]
    ib_port: Option<u8>,
    /// Print all the attributes, and the GID table.
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,
    /// Only list the device names.
    #[arg(short = 'l', long = "list")]
    list: bool,
}

fn guid(g: u64) -> String {
    let b = g.to_be_bytes();
    format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

fn mtu_line(m: softrdma::Mtu) -> String {
    format!("{} ({})", m.bytes(), m as u8)
}

/// What `devinfo` prints of one device, soft or kernel.
struct Shown {
    name: String,
    attr: softrdma::DeviceAttr,
    port: softrdma::PortAttr,
    /// The GID table's entries that are set: index, GID, type.
    gids: Vec<(u32, std::net::Ipv6Addr, &'static str)>,
}

fn soft_shown(d: &DeviceInfo) -> Shown {
    let gids = config::gid_table(d.addr)
        .into_iter()
        .zip(0..)
        .map(|(g, i)| (i, g, "RoCE v2"))
        .collect();
    Shown {
        name: d.name.clone(),
        attr: device_attr(d.addr),
        port: port_attr(d.active_mtu),
        gids,
    }
}

/// A kernel device's attributes, through the system's rdma-core.
fn kernel_shown(name: &str, port: u8) -> Result<Shown, softrdma::Error> {
    use softrdma::kernel::{GidType, KernelContext};
    let ctx = KernelContext::open(name)?;
    let gids = ctx
        .gids(port)?
        .into_iter()
        .map(|(i, g, t)| {
            let t = match t {
                GidType::RoceV2 => "RoCE v2",
                GidType::RoceV1 => "RoCE v1",
                GidType::Ib => "IB",
                GidType::Unknown => "",
            };
            (i, g, t)
        })
        .collect();
    Ok(Shown {
        name: name.to_owned(),
        attr: ctx.query_device()?,
        port: ctx.query_port(port)?,
        gids,
    })
}

/// Runs `softrdma devinfo`: softrdma's devices, then the kernel's (through the system's
/// rdma-core, where there is one).
pub fn devinfo(a: &DevinfoArgs) -> ExitCode {
    let devs = match softrdma::devices() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("softrdma devinfo: {e}");
            return ExitCode::from(1);
        }
    };
    if a.list {
        println!(
            "{} HCA{} found:",
            devs.len(),
            if devs.len() == 1 { "" } else { "s" }
        );
        for d in &devs {
            println!("\t{}", d.name());
        }
        return ExitCode::SUCCESS;
    }
    let chosen: Vec<&Device> = devs
        .iter()
        .filter(|d| a.ib_dev.as_ref().is_none_or(|n| n == d.name()))
        .collect();
    match (&a.ib_dev, chosen.is_empty()) {
        // ibv_devinfo's own words, and exit status, for both.
        (Some(name), true) => {
            eprintln!("IB device '{name}' wasn't found");
            return ExitCode::from(255);
        }
        (None, true) => {
            eprintln!("No IB devices found");
            return ExitCode::from(255);
        }
        _ => {}
    }
    let port = a.ib_port.unwrap_or(1);
    let mut status = ExitCode::SUCCESS;
    for d in chosen {
        let shown = match d {
            Device::Soft(_) if port != 1 => Err(None),
            Device::Soft(s) => Ok(soft_shown(s)),
            Device::Kernel(k) => kernel_shown(&k.name, port).map_err(Some),
        };
        match shown {
            Ok(s) => print!("{}", render(&s, port, a.verbose)),
            Err(e) => {
                // ibv_devinfo's words for a port it cannot query, with softrdma's reason.
                eprintln!("Failed to query port {port} props");
                if let Some(e) = e {
                    eprintln!("softrdma devinfo: {e}");
                }
                status = ExitCode::from(255);
            }
        }
    }
    status
}

fn render(d: &Shown, port_num: u8, verbose: bool) -> String {
    let attr = &d.attr;
    let port = &d.port;
    let mut s = String::new();
    let mut line = |t: &str| {
        s.push_str(t);
        s.push('\n');
    };
    line(&format!("hca_id:\t{}", d.name));
    line("\ttransport:\t\t\tInfiniBand (0)");
    line(&format!("\tfw_ver:\t\t\t\t{}", attr.fw_ver));
    line(&format!("\tnode_guid:\t\t\t{}", guid(attr.node_guid)));
    line(&format!(
        "\tsys_image_guid:\t\t\t{}",
        guid(attr.sys_image_guid)
    ));
    line(&format!("\tvendor_id:\t\t\t{:#x}", attr.vendor_id));
    line(&format!("\tvendor_part_id:\t\t\t{}", attr.vendor_part_id));
    line(&format!("\thw_ver:\t\t\t\t{:#x}", attr.hw_ver));
    line(&format!("\tphys_port_cnt:\t\t\t{}", attr.phys_port_cnt));
    if verbose {
        line(&format!("\tmax_mr_size:\t\t\t{:#x}", attr.max_mr_size));
        line(&format!("\tpage_size_cap:\t\t\t{:#x}", attr.page_size_cap));
        line(&format!("\tmax_qp:\t\t\t\t{}", attr.max_qp));
        line(&format!("\tmax_qp_wr:\t\t\t{}", attr.max_qp_wr));
        line(&format!("\tmax_sge:\t\t\t{}", attr.max_sge));
        line(&format!("\tmax_sge_rd:\t\t\t{}", attr.max_sge_rd));
        line(&format!("\tmax_cq:\t\t\t\t{}", attr.max_cq));
        line(&format!("\tmax_cqe:\t\t\t{}", attr.max_cqe));
        line(&format!("\tmax_mr:\t\t\t\t{}", attr.max_mr));
        line(&format!("\tmax_pd:\t\t\t\t{}", attr.max_pd));
        line(&format!("\tmax_qp_rd_atom:\t\t\t{}", attr.max_qp_rd_atom));
        line("\tmax_ee_rd_atom:\t\t\t0");
        line(&format!("\tmax_res_rd_atom:\t\t{}", attr.max_res_rd_atom));
        line(&format!(
            "\tmax_qp_init_rd_atom:\t\t{}",
            attr.max_qp_init_rd_atom
        ));
        line("\tmax_ee_init_rd_atom:\t\t0");
        line(&format!(
            "\tatomic_cap:\t\t\t{} ({})",
            attr.atomic_cap,
            match attr.atomic_cap {
                "ATOMIC_HCA" => 1,
                "ATOMIC_GLOB" => 2,
                _ => 0,
            }
        ));
        // What ibv_devinfo prints between them: no EE, RDD, MW or raw QPs; multicast.
        for (name, tabs) in [
            ("max_ee", "\t\t\t\t"),
            ("max_rdd", "\t\t\t"),
            ("max_mw", "\t\t\t\t"),
            ("max_raw_ipv6_qp", "\t\t"),
            ("max_raw_ethy_qp", "\t\t"),
        ] {
            line(&format!("\t{name}:{tabs}0"));
        }
        line(&format!("\tmax_mcast_grp:\t\t\t{}", attr.max_mcast_grp));
        line(&format!(
            "\tmax_mcast_qp_attach:\t\t{}",
            attr.max_mcast_qp_attach
        ));
        line(&format!(
            "\tmax_total_mcast_qp_attach:\t{}",
            attr.max_total_mcast_qp_attach
        ));
        line(&format!("\tmax_ah:\t\t\t\t{}", attr.max_ah));
        line("\tmax_fmr:\t\t\t0");
        line(&format!("\tmax_srq:\t\t\t{}", attr.max_srq));
        line(&format!("\tmax_srq_wr:\t\t\t{}", attr.max_srq_wr));
        line(&format!("\tmax_srq_sge:\t\t\t{}", attr.max_srq_sge));
        line(&format!("\tmax_pkeys:\t\t\t{}", attr.max_pkeys));
        line(&format!(
            "\tlocal_ca_ack_delay:\t\t{}",
            attr.local_ca_ack_delay
        ));
        line(&format!("\tmax_inline_data:\t\t{}", attr.max_inline_data));
    }
    line(&format!("\t\tport:\t{port_num}"));
    line(&format!(
        "\t\t\tstate:\t\t\t{} ({})",
        port.state,
        port_state_code(port.state)
    ));
    line(&format!("\t\t\tmax_mtu:\t\t{}", mtu_line(port.max_mtu)));
    line(&format!(
        "\t\t\tactive_mtu:\t\t{}",
        mtu_line(port.active_mtu)
    ));
    line(&format!("\t\t\tsm_lid:\t\t\t{}", port.sm_lid));
    line(&format!("\t\t\tport_lid:\t\t{}", port.lid));
    line("\t\t\tport_lmc:\t\t0x00");
    line(&format!("\t\t\tlink_layer:\t\t{}", port.link_layer));
    if verbose {
        line(&format!("\t\t\tmax_msg_sz:\t\t{:#x}", attr.max_msg_sz));
        line("\t\t\tpkey_tbl_len:\t\t1");
        line(&format!("\t\t\tgid_tbl_len:\t\t{}", port.gid_tbl_len));
        for (i, g, t) in &d.gids {
            let t = if t.is_empty() {
                String::new()
            } else {
                format!(", {t}")
            };
            line(&format!("\t\t\tGID[{i:>3}]:\t\t{g}{t}"));
        }
    }
    line("");
    s
}

/// The number `ibv_devinfo` prints beside a port state's name.
fn port_state_code(state: &str) -> usize {
    softrdma::kernel::PORT_STATES
        .iter()
        .position(|s| *s == state)
        .unwrap_or(0)
}

/// `rdma link show`'s line for a kernel device's port 1: its state from the system's
/// rdma-core, its physical state and netdev from sysfs (as `rdma` reads them over
/// netlink), then softrdma's own fields: the address of its first IPv4 RoCE v2 GID, the
/// MTUs and the GIDs.
fn kernel_link_line(name: &str) -> Result<String, CliError> {
    use softrdma::kernel::{GidType, KernelContext};
    let ctx = KernelContext::open(name)?;
    let port = ctx.query_port(1)?;
    let gids = ctx.gids(1)?;
    let sys = std::path::Path::new("/sys/class/infiniband")
        .join(name)
        .join("ports/1");
    let read = |p: &std::path::Path| std::fs::read_to_string(p).ok().map(|s| s.trim().to_owned());
    // "5: LinkUp" -> LINK_UP, as iproute2 names it.
    let phys = read(&sys.join("phys_state"))
        .and_then(|s| s.split_once(": ").map(|(_, n)| n.to_owned()))
        .map(|n| match n.as_str() {
            "LinkUp" => "LINK_UP".to_owned(),
            "Disabled" => "DISABLED".to_owned(),
            "Polling" => "POLLING".to_owned(),
            other => other.to_uppercase(),
        })
        .unwrap_or_else(|| "-".into());
    let netdev = gids
        .iter()
        .find_map(|(i, _, _)| read(&sys.join(format!("gid_attrs/ndevs/{i}"))));
    let mtu = netdev
        .as_ref()
        .and_then(|n| read(&std::path::Path::new("/sys/class/net").join(n).join("mtu")))
        .unwrap_or_else(|| "-".into());
    let addr = gids
        .iter()
        .filter(|g| g.2 == GidType::RoceV2)
        .find_map(|(_, g, _)| g.to_ipv4_mapped())
        .map_or_else(|| "-".to_owned(), |a| a.to_string());
    let gid_list: String = gids.iter().map(|(_, g, _)| format!(" gid {g}")).collect();
    Ok(format!(
        "link {name}/1 state {} physical_state {phys} netdev {} addr {addr} mtu {mtu} active_mtu {}{gid_list}",
        port.state.trim_start_matches("PORT_"),
        netdev.as_deref().unwrap_or("-"),
        port.active_mtu.bytes()
    ))
}

/// `softrdma link` subcommands.
#[derive(Debug, Subcommand)]
pub enum LinkCommand {
    /// Add a device: `link add NAME netdev IFACE` or `link add NAME addr IP`.
    #[command(
        after_help = "Example:\n  softrdma link add softrdma1 addr 127.0.0.2\n  softrdma link add softrdma2 netdev eth0"
    )]
    Add {
        /// Device name.
        name: String,
        /// `netdev` or `addr`.
        kind: String,
        /// Interface name or IP address.
        target: String,
    },
    /// Delete a device.
    #[command(after_help = "Example:\n  softrdma link delete softrdma1")]
    Delete {
        /// Device name.
        name: String,
    },
    /// Show devices: state, netdev, MTU, GIDs; with -s, their counters.
    #[command(after_help = "Example:\n  softrdma link show -s softrdma0")]
    Show {
        /// Show the counters of the processes that have the device open.
        #[arg(short = 's', long = "stats")]
        stats: bool,
        /// Only this device.
        name: Option<String>,
    },
}

/// Runs `softrdma link`.
pub fn link(cmd: &LinkCommand) -> ExitCode {
    match link_inner(cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softrdma link: {e}");
            ExitCode::from(1)
        }
    }
}

/// A file of the device config that cannot be read or written.
fn file_error(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> CliError + '_ {
    move |source| CliError::Io {
        what: path.display().to_string(),
        source,
    }
}

fn read_specs() -> Result<Vec<DeviceSpec>, CliError> {
    match config::config_path() {
        Some(p) => {
            let text = std::fs::read_to_string(&p).map_err(file_error(&p))?;
            config::parse(&text).map_err(|source| CliError::Config { path: p, source })
        }
        None => Ok(Vec::new()),
    }
}

fn write_specs(specs: &[DeviceSpec]) -> Result<(), CliError> {
    let p = config::write_path();
    if let Some(dir) = p.parent() {
        std::fs::create_dir_all(dir).map_err(file_error(dir))?;
    }
    std::fs::write(&p, config::render(specs)).map_err(file_error(&p))
}

fn link_inner(cmd: &LinkCommand) -> Result<(), CliError> {
    match cmd {
        LinkCommand::Add { name, kind, target } => {
            let binding =
                match kind.as_str() {
                    "netdev" => Binding::Netdev(target.clone()),
                    "addr" => Binding::Addr(target.parse::<IpAddr>().map_err(|_| {
                        CliError::Usage(format!("{target:?} is not an IP address"))
                    })?),
                    k => {
                        return Err(CliError::Usage(format!(
                            "unknown link type {k:?}: use netdev IFACE or addr IP"
                        )));
                    }
                };
            let spec = DeviceSpec {
                name: name.clone(),
                binding,
            };
            // Refuse what cannot work now: an interface that does not exist.
            config::resolve(&spec)?;
            let mut specs = read_specs()?;
            if specs.iter().any(|d| d.name == *name) {
                return Err(CliError::DeviceExists(name.clone()));
            }
            specs.push(spec);
            write_specs(&specs)
        }
        LinkCommand::Delete { name } => {
            let mut specs = read_specs()?;
            let before = specs.len();
            specs.retain(|d| d.name != *name);
            if specs.len() == before {
                return Err(CliError::NoDevice(name.clone()));
            }
            write_specs(&specs)
        }
        LinkCommand::Show { stats, name } => {
            let devs = config::devices()?;
            let mut found = false;
            for d in devs
                .iter()
                .filter(|d| name.as_ref().is_none_or(|n| *n == d.name))
            {
                found = true;
                let gids: String = config::gid_table(d.addr)
                    .iter()
                    .map(|g| format!(" gid {g}"))
                    .collect();
                println!(
                    "link {}/1 state ACTIVE physical_state LINK_UP netdev {} addr {} mtu {} active_mtu {}{gids}",
                    d.name,
                    d.netdev.as_deref().unwrap_or("-"),
                    d.addr,
                    d.netdev_mtu,
                    d.active_mtu.bytes()
                );
                if *stats {
                    let c = softrdma::stats::read(&softrdma::stats::key(&d.name, d.addr));
                    let line: String = c.iter().map(|(k, v)| format!(" {k} {v}")).collect();
                    println!("link {}/1{line}", d.name);
                }
            }
            // The kernel's devices after softrdma's, through the system's rdma-core, with
            // what `rdma link show` prints of them.
            for k in softrdma::kernel::devices()
                .iter()
                .filter(|k| name.as_ref().is_none_or(|n| *n == k.name))
                .filter(|k| !devs.iter().any(|d| d.name == k.name))
            {
                found = true;
                println!("{}", kernel_link_line(&k.name)?);
            }
            // As `rdma link show`: no devices at all is an empty list, a missing name
            // an error.
            if let (false, Some(name)) = (found, name) {
                return Err(CliError::NoDevice(name.clone()));
            }
            Ok(())
        }
    }
}
