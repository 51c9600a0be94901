//! Whether the firewall drops RoCE v2 (UDP 4791) on its way in.
//!
//! The rules come from `nft list ruleset` or `iptables-save` on the running system (both
//! need root), else from the files the boot loads (`/etc/nftables.conf`,
//! `/etc/iptables/rules.v4`), which are all there is below a fixture root. Only the input
//! path is judged, in order: the first rule that matches every UDP datagram to 4791
//! decides; with none, the chain's policy does. A rule with further conditions (a source,
//! an interface, conntrack state) decides only for some traffic and is reported as such.
//! Jumps to other chains are not followed.

use super::{Check, Ctx, Layer, run_quiet as run};

/// RoCE v2's UDP port, the one judged.
const PORT: u16 = 4791;

/// What one rule does to UDP 4791.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Effect {
    /// Every datagram to 4791.
    All(bool),
    /// Some datagrams to 4791 (other conditions).
    Some(bool),
    /// Not 4791, or not a verdict.
    None,
}

/// The judgement on one input chain.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Judgement {
    /// Where (`inet filter input`, `filter INPUT`).
    chain: String,
    /// Whether 4791 gets through.
    passes: bool,
    /// The rule that decided, or `policy drop`.
    by: String,
    /// Rules that decide for some traffic only.
    partial: Vec<String>,
}

/// Whether a port expression (`4791`, `{ 53, 4791 }`, `4000-5000`, `4000:5000`,
/// `53,4791`) covers 4791.
fn covers(expr: &str) -> bool {
    let cleaned = expr.replace(['{', '}'], " ");
    cleaned
        .split([',', ' '])
        .filter(|s| !s.is_empty())
        .any(|item| match item.split_once(['-', ':']) {
            Some((a, b)) => match (a.parse::<u16>(), b.parse::<u16>()) {
                (Ok(a), Ok(b)) => (a..=b).contains(&PORT),
                _ => false,
            },
            None => item.parse::<u16>() == Ok(PORT),
        })
}

/// One rule of nft's text syntax.
fn nft_rule(rule: &str) -> Effect {
    let r = rule.split(" comment ").next().unwrap_or(rule);
    let toks: Vec<&str> = r.split_whitespace().collect();
    let verdict = toks.iter().rev().find_map(|t| match *t {
        "accept" => Some(true),
        "drop" | "reject" => Some(false),
        _ => None,
    });
    let Some(verdict) = verdict else {
        return Effect::None;
    };
    let mut conditional = false;
    let mut udp_ok = true;
    let mut port_ok = true;
    let mut i = 0;
    while i < toks.len() {
        match toks[i] {
            "udp" if toks.get(i + 1) == Some(&"dport") => {
                // The value runs to the next keyword; a set runs to its brace.
                let mut j = i + 2;
                let mut expr = String::new();
                let negated = toks.get(j) == Some(&"!=");
                if negated {
                    j += 1;
                }
                if toks.get(j) == Some(&"{") {
                    while j < toks.len() && toks[j] != "}" {
                        expr.push_str(toks[j]);
                        expr.push(' ');
                        j += 1;
                    }
                } else if let Some(t) = toks.get(j) {
                    expr.push_str(t);
                }
                port_ok = covers(&expr) != negated;
                i = j + 1;
                continue;
            }
            "tcp" | "icmp" | "icmpv6" | "sctp" => udp_ok = false,
            "l4proto" | "protocol" | "nexthdr" => {
                if let Some(p) = toks.get(i + 1) {
                    udp_ok = *p == "udp" || p.contains("udp");
                }
                i += 2;
                continue;
            }
            "meta" | "ip" | "ip6" | "counter" | "log" | "accept" | "drop" | "reject" => {}
            "saddr" | "daddr" | "iif" | "iifname" | "ct" | "state" | "sport" | "oif"
            | "oifname" | "mark" | "limit" | "pkttype" | "fib" => conditional = true,
            _ => {}
        }
        i += 1;
    }
    if !udp_ok || !port_ok {
        Effect::None
    } else if conditional {
        Effect::Some(verdict)
    } else {
        Effect::All(verdict)
    }
}

/// A block of nft's syntax being read.
enum Block {
    /// A table, by its family and name (`inet filter`).
    Table(String),
    /// Name, whether it hooks input, whether its policy lets packets through, its rules.
    Chain(String, bool, bool, Vec<String>),
    /// A set, map, flowtable or anything else with braces.
    Other,
}

/// Judges nft's text syntax (`nft list ruleset`, `/etc/nftables.conf`).
fn judge_nft(text: &str) -> Vec<Judgement> {
    let mut out = Vec::new();
    let mut stack: Vec<Block> = Vec::new();
    for raw in text.lines() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if line == "}" {
            if let Some(Block::Chain(name, true, policy_ok, rules)) = stack.pop() {
                let table = stack.iter().rev().find_map(|b| match b {
                    Block::Table(t) => Some(t.as_str()),
                    _ => None,
                });
                out.push(decide(
                    format!("{} {name}", table.unwrap_or("?")),
                    policy_ok,
                    &rules,
                    nft_rule,
                ));
            }
            continue;
        }
        if let Some(head) = line.strip_suffix('{') {
            let head = head.trim();
            stack.push(if let Some(t) = head.strip_prefix("table ") {
                Block::Table(t.trim().to_owned())
            } else if let Some(c) = head.strip_prefix("chain ") {
                Block::Chain(c.trim().to_owned(), false, true, Vec::new())
            } else {
                Block::Other
            });
            continue;
        }
        let Some(Block::Chain(_, input, policy_ok, rules)) = stack.last_mut() else {
            continue;
        };
        if line.starts_with("type ") {
            *input = line.contains("hook input");
            if let Some(p) = line.split("policy ").nth(1) {
                *policy_ok = !p.trim_start().starts_with("drop");
            }
        } else if line.starts_with("policy ") {
            *policy_ok = !line.contains("drop");
        } else {
            rules.push(line.to_owned());
        }
    }
    out
}

/// One `-A CHAIN ...` rule of iptables-save.
fn ipt_rule(rule: &str) -> Effect {
    let toks: Vec<&str> = rule.split_whitespace().collect();
    let mut verdict = None;
    let mut conditional = false;
    let mut udp_ok = true;
    let mut port_ok = true;
    let mut i = 0;
    while i < toks.len() {
        let next = toks.get(i + 1).copied().unwrap_or("");
        match toks[i] {
            "-j" => {
                verdict = match next {
                    "ACCEPT" => Some(true),
                    "DROP" | "REJECT" => Some(false),
                    _ => None,
                };
                i += 2;
                continue;
            }
            "-p" | "--protocol" => {
                udp_ok = next == "udp" || next == "all";
                i += 2;
                continue;
            }
            "--dport" | "--dports" | "--destination-port" | "--destination-ports" => {
                port_ok = covers(next);
                i += 2;
                continue;
            }
            "-s" | "--source" | "-i" | "--in-interface" | "--state" | "--ctstate" | "--sport"
            | "--sports" | "--src-type" | "--dst-type" | "--mark" | "--limit" => {
                conditional = true;
                i += 2;
                continue;
            }
            "-A" | "-m" | "--comment" => {
                i += 2;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    match verdict {
        None => Effect::None,
        Some(_) if !udp_ok || !port_ok => Effect::None,
        Some(v) if conditional => Effect::Some(v),
        Some(v) => Effect::All(v),
    }
}

/// Judges iptables-save's format (`iptables-save`, `/etc/iptables/rules.v4`).
fn judge_ipt(text: &str) -> Vec<Judgement> {
    let mut table = String::new();
    let mut policy_ok = true;
    let mut rules = Vec::new();
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(t) = line.strip_prefix('*') {
            table = t.to_owned();
        } else if let Some(p) = line.strip_prefix(":INPUT ") {
            if table == "filter" {
                policy_ok = !p.starts_with("DROP");
            }
        } else if line.starts_with("-A INPUT ") && table == "filter" {
            rules.push(line.to_owned());
        } else if line == "COMMIT" && table == "filter" {
            out.push(decide("filter INPUT".into(), policy_ok, &rules, ipt_rule));
            rules.clear();
            policy_ok = true;
        }
    }
    out
}

/// Walks a chain's rules in order: the first that decides for every datagram to 4791
/// settles it; the conditional ones before it are kept as partial; with none, the policy.
fn decide(chain: String, policy_ok: bool, rules: &[String], f: fn(&str) -> Effect) -> Judgement {
    let mut partial = Vec::new();
    for r in rules {
        match f(r) {
            Effect::All(passes) => {
                return Judgement {
                    chain,
                    passes,
                    by: r.clone(),
                    partial,
                };
            }
            Effect::Some(_) => partial.push(r.clone()),
            Effect::None => {}
        }
    }
    Judgement {
        chain,
        passes: policy_ok,
        by: if policy_ok {
            "policy accept"
        } else {
            "policy drop"
        }
        .into(),
        partial,
    }
}

/// The firewall check.
pub fn check(ctx: &Ctx) -> Check {
    let l = Layer::UserSpace;
    let (id, title) = ("firewall", "firewall, UDP 4791");
    let mut sources: Vec<(String, Vec<Judgement>)> = Vec::new();
    let mut boot_only = false;
    if ctx.root.live() {
        if let Some(t) = run("nft", &["list", "ruleset"]) {
            sources.push(("nft list ruleset".into(), judge_nft(&t)));
        }
        // iptables-nft's rules are in nft's listing already; only legacy ones are not.
        if sources.is_empty() {
            if let Some(t) = run("iptables-save", &[]) {
                sources.push(("iptables-save".into(), judge_ipt(&t)));
            }
        }
    }
    if sources.is_empty() {
        boot_only = ctx.root.live();
        if let Some(t) = ctx.root.read("/etc/nftables.conf") {
            sources.push(("/etc/nftables.conf".into(), judge_nft(&t)));
        }
        if let Some(t) = ctx.root.read("/etc/iptables/rules.v4") {
            sources.push(("/etc/iptables/rules.v4".into(), judge_ipt(&t)));
        }
    }
    if sources.is_empty() {
        return if boot_only && !nix::unistd::geteuid().is_root() {
            Check::warn(l, id, title)
                .detail("the rules cannot be read without root")
                .why("nft and iptables-save need root to list the rules, so a drop of UDP 4791 cannot be ruled out.")
                .fix("sudo softrdma doctor")
        } else {
            Check::ok(l, id, title).detail("no rules found")
        };
    }
    let from: Vec<&str> = sources.iter().map(|s| s.0.as_str()).collect();
    let all: Vec<&Judgement> = sources.iter().flat_map(|s| &s.1).collect();
    let from_text = format!(
        "{}{}",
        from.join(", "),
        if boot_only {
            " (the boot-time rules; the live ones need root)"
        } else {
            ""
        }
    );
    if let Some(j) = all.iter().find(|j| !j.passes) {
        let fix = if j.chain.starts_with("filter INPUT") {
            "iptables -I INPUT -p udp --dport 4791 -j ACCEPT".to_owned()
        } else {
            format!("nft insert rule {} udp dport 4791 accept", j.chain)
        };
        return Check::fail(l, id, title)
            .detail(format!("{}: {}", j.chain, j.by))
            .why(format!(
                "the {} chain drops RoCE v2 (UDP 4791), so peers' packets never arrive and QPs time out (\"Failed status transport retry counter exceeded\").",
                j.chain
            ))
            .fix(fix)
            .note(format!("from {from_text}"));
    }
    let partial: Vec<&String> = all.iter().flat_map(|j| &j.partial).collect();
    let mut c = Check::ok(l, id, title).detail(format!("UDP 4791 passes ({from_text})"));
    for p in partial {
        c = c.note(format!("for some traffic only: {p}"));
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports() {
        assert!(covers("4791"));
        assert!(covers("{ 53, 4791 }"));
        assert!(covers("4000-5000"));
        assert!(covers("4000:5000"));
        assert!(covers("53,4791"));
        assert!(!covers("53"));
        assert!(!covers("x-y"));
    }

    #[test]
    fn nft_policy_drop_without_an_accept_drops() {
        let t = "table inet filter {\n\tchain input {\n\t\ttype filter hook input priority filter; policy drop;\n\t\tct state established,related accept\n\t\ttcp dport 22 accept\n\t}\n}\n";
        let j = judge_nft(t);
        assert_eq!(j.len(), 1);
        assert!(!j[0].passes);
        assert_eq!(j[0].by, "policy drop");
        assert_eq!(j[0].partial.len(), 1);
        let ok = t.replace("tcp dport 22 accept", "udp dport { 4791, 53 } accept");
        assert!(judge_nft(&ok)[0].passes);
    }

    #[test]
    fn nft_explicit_drop_decides_first() {
        let t = "table ip f {\n chain c {\n  type filter hook input priority 0; policy accept;\n  udp dport 4791 counter drop\n  udp dport 4791 accept\n }\n chain o {\n  type filter hook output priority 0; policy drop;\n }\n}\n";
        let j = judge_nft(t);
        assert_eq!(j.len(), 1, "output chains are not judged");
        assert!(!j[0].passes);
        assert_eq!(j[0].by, "udp dport 4791 counter drop");
    }

    #[test]
    fn nft_sets_and_maps_do_not_end_the_chain() {
        let t = "table inet f {\n set ok {\n  type inet_service\n  elements = {\n   4791,\n  }\n }\n chain input {\n  type filter hook input priority 0; policy accept;\n  udp dport 4791 drop\n }\n}\n";
        let j = judge_nft(t);
        assert_eq!(j.len(), 1);
        assert_eq!(j[0].chain, "inet f input");
        assert!(!j[0].passes);
    }

    #[test]
    fn iptables() {
        let t = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n-A INPUT -p udp -m udp --dport 4791 -j DROP\nCOMMIT\n";
        let j = judge_ipt(t);
        assert!(!j[0].passes);
        let t = "*filter\n:INPUT DROP [0:0]\n-A INPUT -s 10.0.0.0/8 -p udp -j ACCEPT\n-A INPUT -p udp -m multiport --dports 53,4791 -j ACCEPT\nCOMMIT\n";
        let j = judge_ipt(t);
        assert!(j[0].passes);
        assert_eq!(j[0].partial.len(), 1);
    }
}
