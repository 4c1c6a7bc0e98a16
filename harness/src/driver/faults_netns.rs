//! The `--netns` faults (issue 30): the kernel's network on one elector's veth link, each
//! direction apart (`netns.rs` makes and heals the links).

use super::run::Run;
use tokio::time::sleep;

impl Run<'_> {
    /// The `--netns` faults (see [`super::cli::NETNS_FAULTS`]) on one elector's link, mostly the
    /// leader's, then healed; the record says what and which direction.
    pub async fn netns_fault(
        &mut self,
        kind: &str,
        t: u64,
        leader: Option<usize>,
    ) -> Result<(), String> {
        use crate::netns::Dir;
        let i = match leader {
            Some(l) if self.rng.f64() < 0.8 => l,
            _ => self.rng.usize(..self.slots.len()),
        };
        let id = self.slot_id(i);
        // The coordination service's ports on this link: the elector's proxy to every node
        // (one in the replica topology, N in quorum mode), or, under Sentinel (no proxies),
        // every data node's and Sentinel's port on the shared service address.
        let host_ip = self
            .links
            .as_ref()
            .ok_or("netns faults need --netns")?
            .links[i]
            .host_ip;
        let (redis_ip, redis_ports): (_, Vec<u16>) = if self.slots[i].proxies.is_empty() {
            (crate::netns::SERVICE_IP, self.backend.direct_ports())
        } else {
            (
                host_ip,
                self.slots[i]
                    .proxies
                    .iter()
                    .map(|p| p.addr().port())
                    .collect(),
            )
        };
        if redis_ports.is_empty() {
            return Err("netns fault without a port of the coordination service".into());
        }
        let resource_port = self.slots[i]
            .resource_proxy
            .as_ref()
            .map(|p| p.addr().port())
            .ok_or("netns fault without a resource link")?;
        // "redis" in the records, with how many servers it stands for when more than one.
        let redis_what = match (self.cfg.topology.is_quorum(), redis_ports.len()) {
            (true, n) => format!("every node ({n})"),
            (false, 1) => "redis".to_string(),
            (false, n) => format!("every server and sentinel ({n})"),
        };
        let dirs: Vec<Dir> = match self.rng.u32(..3) {
            0 => vec![Dir::Up],
            1 => vec![Dir::Down],
            _ => vec![Dir::Up, Dir::Down],
        };
        let name = |d: &[Dir]| match d {
            [Dir::Up] => "elector->redis",
            [Dir::Down] => "redis->elector",
            _ => "both ways",
        };
        let (d, detail) = match kind {
            "loss" => {
                let pct = [5u32, 20, 50, 80, 100][self.rng.usize(..5)];
                let d = self.rand_ttl(1.5, 3.0);
                (d, vec![(dirs.clone(), pct.to_string())])
            }
            "delay-jitter" => {
                let ms = (self.between(0.05, 0.4) * self.cfg.ttl_ms as f64) as u64;
                let d = self.rand_ttl(2.0, 4.0);
                let spec = format!(
                    "delay {ms}ms {}ms 25% reorder 25% 50% duplicate 5%",
                    (ms / 2).max(1)
                );
                (d, vec![(dirs.clone(), spec)])
            }
            _ => (self.rand_ttl(1.5, 3.0), vec![]),
        };
        let links = self.links.as_ref().ok_or("netns faults need --netns")?;
        let what = match kind {
            "loss" => {
                // The whole link (every node's proxy, or every server of the service
                // address, and the resource): a lossy wire does not pick ports.
                let pct: u32 = detail[0].1.parse().unwrap_or(100);
                for dir in &detail[0].0 {
                    links.loss(i, *dir, pct)?;
                }
                format!("nft random loss {pct}% {}", name(&detail[0].0))
            }
            "delay-jitter" => {
                for (ds, spec) in &detail {
                    for dir in ds {
                        links.netem(i, *dir, spec)?;
                    }
                }
                format!("netem {} {}", detail[0].1, name(&detail[0].0))
            }
            "oneway" => {
                // One direction only, by construction. Quorum: to and from every node at
                // once, not one node: one node is a minority, which the quorum rides over
                // (node-partition covers that), while a whole direction lost is what can
                // fool an elector: its RENEWs land on every node but their replies are lost
                // (it must step down at its own deadline), or it hears but is not heard.
                // Sentinel: every server and Sentinel, since the primary moves.
                let dir = if self.rng.bool() { Dir::Up } else { Dir::Down };
                links.drop_packets(i, dir, Some((redis_ip, &redis_ports)))?;
                format!("nft drop {} ({redis_what} only)", name(&[dir]))
            }
            "cut-resource" => {
                // Only the resource proxy's port: every node's link stays up.
                links.drop_packets(i, Dir::Up, Some((host_ip, &[resource_port])))?;
                links.drop_packets(i, Dir::Down, Some((host_ip, &[resource_port])))?;
                format!("nft drop elector<->resource both ways, {redis_what} kept")
            }
            _ => {
                links.drop_packets(i, Dir::Up, None)?;
                links.drop_packets(i, Dir::Down, None)?;
                "nft drop every packet both ways, connections kept, delivered on heal".to_string()
            }
        };
        sleep(d).await;
        if let Some(l) = &self.links {
            l.heal(i)?;
        }
        self.fault(
            kind,
            t,
            &id,
            format!("{what} for {} ms", d.as_millis()),
            None,
        );
        Ok(())
    }
}
