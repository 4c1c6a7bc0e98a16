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
        let redis_port = self.slots[i]
            .proxies
            .first()
            .map(|p| p.addr().port())
            .ok_or("netns fault without a proxy to Redis")?;
        let resource_port = self.slots[i]
            .resource_proxy
            .as_ref()
            .map(|p| p.addr().port())
            .ok_or("netns fault without a resource link")?;
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
                // One direction only, by construction.
                let dir = if self.rng.bool() { Dir::Up } else { Dir::Down };
                links.drop_packets(i, dir, Some(redis_port))?;
                format!("nft drop {} (redis only)", name(&[dir]))
            }
            "cut-resource" => {
                links.drop_packets(i, Dir::Up, Some(resource_port))?;
                links.drop_packets(i, Dir::Down, Some(resource_port))?;
                "nft drop elector<->resource both ways, redis kept".to_string()
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
