//! `--netns`: every elector in its own network namespace, joined to the harness's namespace
//! (where Redis, the proxies and the resource listen) by a veth pair, so that the kernel's own
//! network tools can hurt each elector's link, each direction separately (issue 30).
//!
//! Link `i`: namespace `lh-<pid>-e<i>`, veth `lh<pid>h<i>` (harness side, `10.231.<i>.1/30`)
//! and `lh<pid>n<i>` (elector side, `10.231.<i>.2/30`). The elector reaches its Redis proxy
//! and its resource proxy at `10.231.<i>.1`, an address that exists only on that link: no
//! traffic ever leaves the namespaces this module creates. The Sentinel topology has no
//! per-elector proxy: its servers and Sentinels also listen on [`SERVICE_IP`], an address the
//! harness puts on every link's harness side (and routes to from every elector's namespace
//! over its own link only), which Sentinel hands out as the primary's address.
//! `<pid>` is the harness's pid, so
//! a run removes the leftovers of a harness that died (its pid is gone) and refuses to run
//! beside a live one (the addresses would clash).
//!
//! Directions: *elector→Redis* is the elector side's egress (tc) and the harness side's
//! ingress (nftables, `inet lh_<pid>` in the harness's namespace); *Redis→elector* is the
//! harness side's egress (tc) and the elector namespace's ingress (nftables `inet lh` in
//! it). Drops sit on the receiving side so that the sender's kernel sees a silent network,
//! not a local EPERM, and keeps its connections open: TCP retransmits after the heal.

use std::net::Ipv4Addr;
use std::process::Command;

const PREFIX_NS: &str = "lh-";
const HOST_TABLE: &str = "lh_";

/// `--netns --topology sentinel`: the one address of the servers and Sentinels that every
/// elector namespace reaches, each over its own link. Sentinel reports a single address for
/// the primary to every client, so it cannot be a link's own `10.231.<i>.1`; `10.231.255.x`
/// is never a link's (at most 250 links: `10.231.0..250`). It sits as a /32 on each link's
/// harness side, so it exists only while the links do and leaves with them.
pub const SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 231, 255, 1);

/// What a fault does to a direction of a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Elector → Redis/resource (the elector's sends).
    Up,
    /// Redis/resource → elector (the replies).
    Down,
}

pub struct Link {
    pub ns: String,
    pub host_if: String,
    pub ns_if: String,
    pub host_ip: Ipv4Addr,
}

pub struct Links {
    pid: u32,
    pub links: Vec<Link>,
}

fn run(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args[0]))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn in_ns(ns: &str, args: &[&str]) -> Result<String, String> {
    let mut v = vec!["ip", "netns", "exec", ns];
    v.extend_from_slice(args);
    run(&v)
}

fn pid_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// `lh-<pid>-e<i>` → pid.
fn ns_pid(name: &str) -> Option<u32> {
    name.strip_prefix(PREFIX_NS)?
        .split('-')
        .next()?
        .parse()
        .ok()
}

/// One line saying what is missing, or Ok: root, `ip`, `tc`, `nft`.
pub fn check_privileges() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("--netns needs root (network namespaces, veth, tc, nftables)".into());
    }
    for tool in [["ip", "-V"], ["tc", "-V"], ["nft", "--version"]] {
        if Command::new(tool[0]).arg(tool[1]).output().is_err() {
            return Err(format!(
                "--netns needs `{}` (scripts/setup installs iproute2 and nftables)",
                tool[0]
            ));
        }
    }
    Ok(())
}

/// Remove namespaces, veths and nftables tables of harnesses that are gone; Err if a live
/// harness other than this one has links (the addresses would clash).
pub fn remove_leftovers() -> Result<(), String> {
    let me = std::process::id();
    let list = run(&["ip", "netns", "list"]).unwrap_or_default();
    for line in list.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(pid) = ns_pid(name) else { continue };
        if pid != me && pid_alive(pid) {
            return Err(format!(
                "another --netns harness (pid {pid}) is running; its namespace {name} exists"
            ));
        }
        if pid != me {
            let _ = run(&["ip", "netns", "delete", name]);
        }
    }
    // A veth whose namespace side was never moved (a crash in the middle of a set-up).
    let links = run(&["ip", "-o", "link", "show"]).unwrap_or_default();
    for l in links.lines() {
        let Some(name) = l
            .split(':')
            .nth(1)
            .map(|s| s.trim().split('@').next().unwrap_or(""))
        else {
            continue;
        };
        let Some(rest) = name.strip_prefix("lh") else {
            continue;
        };
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        if let Ok(pid) = digits.parse::<u32>() {
            if pid != me && !pid_alive(pid) {
                let _ = run(&["ip", "link", "delete", name]);
            }
        }
    }
    let tables = run(&["nft", "list", "tables"]).unwrap_or_default();
    for t in tables.lines() {
        // "table inet lh_1234"
        let Some(name) = t.strip_prefix("table inet ") else {
            continue;
        };
        if let Some(pid) = name
            .strip_prefix(HOST_TABLE)
            .and_then(|p| p.parse::<u32>().ok())
        {
            if pid != me && !pid_alive(pid) {
                let _ = run(&["nft", "delete", "table", "inet", name]);
            }
        }
    }
    Ok(())
}

/// Whether this kernel has tc netem (`CONFIG_NET_SCH_NETEM`): tried on a veth pair made for
/// the purpose (`lh<pid>p0`/`lh<pid>p1`, removed at once).
pub fn netem_available() -> bool {
    let pid = std::process::id();
    let (a, b) = (format!("lh{pid}p0"), format!("lh{pid}p1"));
    if run(&["ip", "link", "add", &a, "type", "veth", "peer", "name", &b]).is_err() {
        return false;
    }
    let ok = run(&[
        "tc", "qdisc", "add", "dev", &a, "root", "netem", "delay", "1ms",
    ])
    .is_ok();
    let _ = run(&["ip", "link", "delete", &a]);
    ok
}

/// The nftables match of the TCP ports `ports` of harness-side address `addr`, as seen by the
/// receiver of direction `dir` (`ip daddr .. tcp dport ..` going up, `saddr`/`sport` coming
/// down), with a trailing space; "" for `None` (every packet). The address as well as the
/// ports: a proxy on a link address and a server on another address may share a port
/// number. An anonymous set: one rule covers every node's proxy of a quorum elector, or
/// every server and Sentinel of the Sentinel topology.
fn target_match(dir: Dir, target: Option<(Ipv4Addr, &[u16])>) -> String {
    let (a, p) = match dir {
        Dir::Up => ("daddr", "dport"),
        Dir::Down => ("saddr", "sport"),
    };
    match target {
        None => String::new(),
        Some((addr, ports)) => {
            let list: Vec<String> = ports.iter().map(u16::to_string).collect();
            format!("ip {a} {addr} tcp {p} {{ {} }} ", list.join(", "))
        }
    }
}

impl Links {
    /// `n` links (leftovers of an earlier run removed first); with `service`, each link also
    /// carries [`SERVICE_IP`] (harness side) and the elector's namespace a route to it over
    /// that link, and nowhere else (no default route: nothing can leave the namespaces).
    pub fn create(n: usize, service: bool) -> Result<Links, String> {
        if n > 250 {
            return Err("--netns supports up to 250 electors".into());
        }
        remove_leftovers()?;
        let pid = std::process::id();
        let mut me = Links { pid, links: vec![] };
        // Our own leftovers (the previous run of this campaign) go too.
        me.teardown();
        let table = format!("{HOST_TABLE}{pid}");
        run(&["nft", "add", "table", "inet", &table])?;
        run(&[
            "nft",
            &format!(
                "add chain inet {table} input {{ type filter hook input priority 0; policy accept; }}"
            ),
        ])?;
        for i in 0..n {
            let ns = format!("{PREFIX_NS}{pid}-e{i}");
            let host_if = format!("lh{pid}h{i}");
            let ns_if = format!("lh{pid}n{i}");
            let host_ip = Ipv4Addr::new(10, 231, i as u8, 1);
            run(&["ip", "netns", "add", &ns])?;
            // Pushed before the rest so that a failure below still tears it down.
            me.links.push(Link {
                ns: ns.clone(),
                host_if: host_if.clone(),
                ns_if: ns_if.clone(),
                host_ip,
            });
            run(&[
                "ip", "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if, "netns", &ns,
            ])?;
            run(&[
                "ip",
                "addr",
                "add",
                &format!("{host_ip}/30"),
                "dev",
                &host_if,
            ])?;
            run(&["ip", "link", "set", &host_if, "up"])?;
            let ns_ip = Ipv4Addr::new(10, 231, i as u8, 2);
            run(&[
                "ip",
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{ns_ip}/30"),
                "dev",
                &ns_if,
            ])?;
            run(&["ip", "-n", &ns, "link", "set", &ns_if, "up"])?;
            run(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
            if service {
                run(&[
                    "ip",
                    "addr",
                    "add",
                    &format!("{SERVICE_IP}/32"),
                    "dev",
                    &host_if,
                ])?;
                run(&[
                    "ip",
                    "-n",
                    &ns,
                    "route",
                    "add",
                    &format!("{SERVICE_IP}/32"),
                    "via",
                    &host_ip.to_string(),
                    "dev",
                    &ns_if,
                ])?;
            }
            in_ns(&ns, &["nft", "add table inet lh"])?;
            in_ns(
                &ns,
                &[
                    "nft",
                    "add chain inet lh input { type filter hook input priority 0; policy accept; }",
                ],
            )?;
        }
        Ok(me)
    }

    /// `ip netns exec NS` words to put in front of elector `i`'s command.
    pub fn exec_prefix(&self, i: usize) -> Vec<String> {
        vec![
            "ip".into(),
            "netns".into(),
            "exec".into(),
            self.links[i].ns.clone(),
        ]
    }

    /// tc netem on direction `dir` of link `i` (`spec`: "loss 20%", "delay 80ms 40ms ...").
    pub fn netem(&self, i: usize, dir: Dir, spec: &str) -> Result<(), String> {
        let l = &self.links[i];
        let mut words: Vec<&str> = spec.split_whitespace().collect();
        match dir {
            // The elector's egress carries its sends.
            Dir::Up => {
                let mut v = vec!["tc", "qdisc", "replace", "dev", &l.ns_if, "root", "netem"];
                v.append(&mut words);
                in_ns(&l.ns, &v)?;
            }
            Dir::Down => {
                let mut v = vec!["tc", "qdisc", "replace", "dev", &l.host_if, "root", "netem"];
                v.append(&mut words);
                run(&v)?;
            }
        }
        Ok(())
    }

    /// Drop, on the receiving side of direction `dir` of link `i`, the TCP packets of the
    /// harness-side address and ports `target` (`None`: every packet of the link).
    pub fn drop_packets(
        &self,
        i: usize,
        dir: Dir,
        target: Option<(Ipv4Addr, &[u16])>,
    ) -> Result<(), String> {
        if target.is_some_and(|(_, p)| p.is_empty()) {
            // `{ }` is no nft set, and "none of the ports" is no fault: a caller's mistake.
            return Err("netns drop of an empty port set".into());
        }
        let l = &self.links[i];
        let m = target_match(dir, target);
        match dir {
            Dir::Up => {
                run(&[
                    "nft",
                    &format!(
                        "add rule inet {HOST_TABLE}{} input iifname \"{}\" {m}drop",
                        self.pid, l.host_if
                    ),
                ])?;
            }
            Dir::Down => {
                in_ns(
                    &l.ns,
                    &[
                        "nft",
                        &format!("add rule inet lh input iifname \"{}\" {m}drop", l.ns_if),
                    ],
                )?;
            }
        }
        Ok(())
    }

    /// Random loss of `pct` % of the packets of direction `dir` of link `i`, dropped by
    /// nftables (`numgen random`) on the receiving side: tc netem would do the same on the
    /// sender's egress, but not every kernel has it (see [`netem_available`]), and a drop at
    /// the receiver is what a lossy wire does.
    pub fn loss(&self, i: usize, dir: Dir, pct: u32) -> Result<(), String> {
        let l = &self.links[i];
        // nft's `< N` takes 0..=99 after `mod 100`: 100 % is a plain drop.
        let sample = if pct >= 100 {
            String::new()
        } else {
            format!("numgen random mod 100 < {pct} ")
        };
        let rule = |ifname: &str| format!("iifname \"{ifname}\" {sample}drop");
        match dir {
            Dir::Up => run(&[
                "nft",
                &format!(
                    "add rule inet {HOST_TABLE}{} input {}",
                    self.pid,
                    rule(&l.host_if)
                ),
            ])?,
            Dir::Down => in_ns(
                &l.ns,
                &["nft", &format!("add rule inet lh input {}", rule(&l.ns_if))],
            )?,
        };
        Ok(())
    }

    /// Remove every netem and drop rule of link `i`.
    pub fn heal(&self, i: usize) -> Result<(), String> {
        let l = &self.links[i];
        // "No such file" when there was no qdisc: not an error.
        let _ = in_ns(&l.ns, &["tc", "qdisc", "del", "dev", &l.ns_if, "root"]);
        let _ = run(&["tc", "qdisc", "del", "dev", &l.host_if, "root"]);
        in_ns(&l.ns, &["nft", "flush chain inet lh input"])?;
        // Only this link's rules of the shared host chain: faults hit one link at a time,
        // so flushing the whole chain is the same and cannot leave a rule behind.
        run(&[
            "nft",
            &format!("flush chain inet {HOST_TABLE}{} input", self.pid),
        ])?;
        Ok(())
    }

    fn teardown(&mut self) {
        let list = run(&["ip", "netns", "list"]).unwrap_or_default();
        for line in list.lines() {
            let name = line.split_whitespace().next().unwrap_or("");
            if ns_pid(name) == Some(self.pid) {
                // Deleting the namespace deletes its veth end, which deletes the pair.
                let _ = run(&["ip", "netns", "delete", name]);
            }
        }
        for l in &self.links {
            let _ = run(&["ip", "link", "delete", &l.host_if]);
        }
        let _ = run(&[
            "nft",
            "delete",
            "table",
            "inet",
            &format!("{HOST_TABLE}{}", self.pid),
        ]);
        self.links.clear();
    }
}

impl Drop for Links {
    fn drop(&mut self) {
        self.teardown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drop_matches_the_address_and_a_port_set_per_direction() {
        let a = Ipv4Addr::new(10, 231, 3, 1);
        assert_eq!(target_match(Dir::Up, None), "");
        assert_eq!(
            target_match(Dir::Up, Some((a, &[7101]))),
            "ip daddr 10.231.3.1 tcp dport { 7101 } "
        );
        assert_eq!(
            target_match(Dir::Down, Some((SERVICE_IP, &[7101, 7102, 7103]))),
            "ip saddr 10.231.255.1 tcp sport { 7101, 7102, 7103 } "
        );
    }

    #[test]
    fn the_service_address_is_no_link_address() {
        // Links are 10.231.<i>.0/30 for i < 250 (`create` refuses more).
        assert_eq!(SERVICE_IP.octets()[..2], [10, 231]);
        assert!(SERVICE_IP.octets()[2] >= 250);
        assert_eq!(ns_pid("lh-42-e3"), Some(42));
    }
}
