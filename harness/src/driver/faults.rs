//! The fault scheduler's one dispatcher, and the faults every backend shares: those on an
//! elector (its process, or its proxies to every node) and those on one node of the backend.
//! Which names a topology draws is `cli.rs`'s table; the replica topology's names (`restart`,
//! `clock-jump`, ...) are the quorum ones (`node-restart`, `node-clock-jump`, ...) on its only
//! primary. A fault that cannot run here is recorded as skipped with its one-line reason.

use super::run::Run;
use crate::procs::signal;
use lease_harness::clock::mono_ns;
use lease_harness::history::RunEvent;
use lease_harness::proxy::{Held, Mode};
use std::time::Duration;
use tokio::time::sleep;

impl Run<'_> {
    pub async fn inject(&mut self, kind: &str) -> Result<(), String> {
        let t = mono_ns();
        let needs_leader =
            ["kill", "pause", "resign", "delay", "late-delivery", "split"].contains(&kind);
        let leader = self.leader();
        if needs_leader && leader.is_none() {
            self.fault(kind, t, "-", String::new(), Some("no leader".into()));
            return Ok(());
        }
        let needs_proxy = [
            "partition",
            "blackhole",
            "split",
            "delay",
            "late-delivery",
            "node-partition",
        ]
        .contains(&kind);
        if needs_proxy && self.backend.nodes() == 0 {
            let why = "electors reach this backend directly, without a proxy to cut";
            self.fault(kind, t, "-", String::new(), Some(why.into()));
            return Ok(());
        }
        let lead = leader.unwrap_or(0);
        match kind {
            "kill" => self.kill_elector(t, lead).await?,
            "pause" => {
                let id = self.slot_id(lead);
                let d = self.rand_ttl(1.5, 3.0);
                if let Some(p) = &self.slots[lead].proc {
                    signal(p.child.id(), libc::SIGSTOP);
                }
                sleep(d).await;
                if let Some(p) = &self.slots[lead].proc {
                    signal(p.child.id(), libc::SIGCONT);
                }
                self.fault(kind, t, &id, format!("SIGSTOP {} ms", d.as_millis()), None);
            }
            "partition" | "blackhole" | "split" => self.cut(kind, t, leader).await,
            "delay" => {
                let id = self.slot_id(lead);
                let lag = self.rand_ttl(0.05, 0.5);
                let d = self.rand_ttl(2.0, 4.0);
                self.set_slot_mode(lead, Mode::Delay(lag));
                sleep(d).await;
                self.set_slot_mode(lead, Mode::Pass);
                let detail = format!("+{} ms each way for {} ms", lag.as_millis(), d.as_millis());
                self.fault(kind, t, &id, detail, None);
            }
            "late-delivery" => self.late_delivery(t, lead).await,
            "resign" => {
                let id = self.slot_id(lead);
                if let Some(mut p) = self.slots[lead].proc.take() {
                    p.stop(Duration::from_secs(5)).await;
                }
                self.fault(kind, t, &id, "SIGTERM (graceful resign)".into(), None);
                self.spawn_elector(lead)?;
            }
            "restart" | "restart-aof" | "node-restart" | "node-restart-aof" => {
                let k = self.pick_node();
                self.restart_node(kind, t, k, !kind.ends_with("-aof"))
                    .await?
            }
            "node-kill" => {
                let k = self.pick_node();
                let name = self.backend.node_name(k);
                let d = self.rand_ttl(1.5, 3.0);
                self.backend.kill(k);
                sleep(d).await;
                self.backend.restart(k)?;
                let kept = self.backend.kept();
                let detail = format!("kill -9, down {} ms, restarted, {kept}", d.as_millis());
                self.fault(kind, t, &name, detail, None);
            }
            "node-partition" => {
                let k = self.pick_node();
                let name = self.backend.node_name(k);
                let d = self.rand_ttl(1.5, 3.0);
                self.set_node_mode(k, Mode::Partition);
                sleep(d).await;
                self.set_node_mode(k, Mode::Pass);
                let detail = format!("every elector cut off for {} ms", d.as_millis());
                self.fault(kind, t, &name, detail, None);
            }
            "node-pause" => {
                let k = self.pick_node();
                let name = self.backend.node_name(k);
                let d = self.rand_ttl(1.5, 3.0);
                self.backend.signal(k, libc::SIGSTOP);
                sleep(d).await;
                self.backend.signal(k, libc::SIGCONT);
                let detail = format!("SIGSTOP {} ms", d.as_millis());
                self.fault(kind, t, &name, detail, None);
            }
            "clock-jump" | "node-clock-jump" => self.clock_jump(kind, t).await?,
            "failover" | "node-failover" | "node-split-brain" => {
                let k = self.pick_node();
                self.failover(kind, t, k, kind == "node-split-brain")
                    .await?
            }
            "sentinel-failover" => self.sentinel_failover(t).await?,
            "client-pause" => self.client_pause(t).await?,
            "failover-coordinated" => self.failover_coordinated(t).await?,
            "split-brain" => self.split_brain(t, leader).await?,
            "loss" | "delay-jitter" | "oneway" | "cut-resource" | "heal-delivers" => {
                self.netns_fault(kind, t, leader).await?;
            }
            "none" => {
                // A quiet period: nothing injected, nothing recorded, so it counts as
                // fault-free time for the flapping figure.
                sleep(self.ttl(2.0)).await;
            }
            other => return Err(format!("unknown fault {other}")),
        }
        Ok(())
    }

    /// The node a node fault hits: drawn from the seed (the only one of a single primary).
    fn pick_node(&mut self) -> usize {
        match self.backend.nodes() {
            0 | 1 => 0,
            n => self.rng.usize(..n),
        }
    }

    /// Every proxy of elector slot `i` (one per node) to `mode`.
    pub fn set_slot_mode(&self, i: usize, mode: Mode) {
        for p in &self.slots[i].proxies {
            p.set_mode(mode);
        }
    }

    /// Every elector's proxy to node `k` to `mode`.
    fn set_node_mode(&self, k: usize, mode: Mode) {
        for s in &self.slots {
            s.proxies[k].set_mode(mode);
        }
    }

    async fn kill_elector(&mut self, t: u64, i: usize) -> Result<(), String> {
        let id = self.slot_id(i);
        if let Some(mut p) = self.slots[i].proc.take() {
            let _ = p.child.kill(); // SIGKILL
            let _ = p.child.wait();
        }
        self.fault("kill", t, &id, "SIGKILL".into(), None);
        sleep(Duration::from_millis(100)).await;
        self.spawn_elector(i)
    }

    /// `partition` / `blackhole`: an elector (mostly the leader: that is where it hurts,
    /// sometimes a follower) cut from every node; `split`: the leader cut from a random
    /// majority of nodes (the rest stays reachable: a leader that still renews on a minority
    /// must step down), recorded as `partition` (the checker's loss-failover figure).
    async fn cut(&mut self, kind: &str, t: u64, leader: Option<usize>) {
        let i = match leader {
            Some(l) if kind == "split" || self.rng.f64() < 0.8 => l,
            _ => self.rng.usize(..self.slots.len()),
        };
        let id = self.slot_id(i);
        let n = self.slots[i].proxies.len();
        let mut cut: Vec<usize> = (0..n).collect();
        if kind == "split" {
            self.rng.shuffle(&mut cut);
            cut.truncate(n / 2 + 1);
        }
        let d = self.rand_ttl(1.5, 3.0);
        let mode = if kind == "blackhole" {
            Mode::Blackhole
        } else {
            Mode::Partition
        };
        for &k in &cut {
            self.slots[i].proxies[k].set_mode(mode);
        }
        sleep(d).await;
        for &k in &cut {
            self.slots[i].proxies[k].set_mode(Mode::Pass);
        }
        let (kind, detail) = if self.cfg.topology.is_quorum() {
            let kind = if kind == "split" { "partition" } else { kind };
            (
                kind,
                format!("cut from nodes {cut:?} for {} ms", d.as_millis()),
            )
        } else {
            (kind, format!("{} ms", d.as_millis()))
        };
        self.fault(kind, t, &id, detail, None);
    }

    /// Issue 23: the leader's RENEW and RELEASE (and in a third of the cases its ACQUIREs,
    /// and in quorum mode its RAISEs) reach every node `hold` after it sent them, past its op
    /// timeout (T/5 by default in every client), and still execute, in order per connection,
    /// even after the client gave up and closed the connection (the proxy delivers like TCP
    /// does). Holds up to 0.7 T keep late renewals inside the lease's life, so the old lease
    /// is still alive when the elector campaigns again: the case where a reused owner would
    /// refresh it and the stale RELEASE would then free the new reign.
    async fn late_delivery(&mut self, t: u64, i: usize) {
        let id = self.slot_id(i);
        let hold = self.rand_ttl(0.3, 0.7);
        let d = self.rand_ttl(2.0, 4.0);
        let more = self.rng.u32(..3) == 0;
        let quorum = self.cfg.topology.is_quorum();
        let commands = Held {
            acquire: more,
            renew: true,
            release: true,
            raise: more && quorum,
        };
        self.set_slot_mode(i, Mode::Late { hold, commands });
        sleep(d).await;
        self.set_slot_mode(i, Mode::Pass);
        let detail = format!(
            "{} held {} ms each{} for {} ms",
            commands.names(),
            hold.as_millis(),
            if quorum { " on every node" } else { "" },
            d.as_millis()
        );
        self.fault("late-delivery", t, &id, detail, None);
    }

    /// kill -9 node `k`, its data wiped or kept (AOF everysec), started again at once.
    async fn restart_node(
        &mut self,
        kind: &str,
        t: u64,
        k: usize,
        wipe: bool,
    ) -> Result<(), String> {
        let name = self.backend.node_name(k);
        self.backend.kill(k);
        if wipe {
            self.backend.wipe(k);
        }
        sleep(Duration::from_millis(50)).await;
        self.backend.restart(k)?;
        let detail = if wipe {
            "kill -9, data wiped".to_string()
        } else {
            format!("kill -9, {}", self.backend.kept())
        };
        self.fault(kind, t, &name, detail, None);
        if self.single_primary() {
            self.record(RunEvent::RedisUp {
                t: mono_ns(),
                why: kind.into(),
            });
        }
        Ok(())
    }

    /// A node's wall clock 10..120 min ahead or behind for 2..4 TTL, then back (its monotonic
    /// clock, which lease expiry runs on, stays real).
    async fn clock_jump(&mut self, kind: &str, t: u64) -> Result<(), String> {
        let k = self.pick_node();
        let name = self.backend.node_name(k);
        let secs = self.between(600.0, 7200.0).round() * if self.rng.bool() { 1.0 } else { -1.0 };
        if let Err(why) = self.backend.set_clock(k, secs) {
            self.fault(kind, t, &name, String::new(), Some(why));
            return Ok(());
        }
        let d = self.rand_ttl(2.0, 4.0);
        sleep(d).await;
        self.backend.set_clock(k, 0.0)?;
        let detail = format!("wall clock {secs:+} s for {} ms, then back", d.as_millis());
        self.fault(kind, t, &name, detail, None);
        Ok(())
    }
}
