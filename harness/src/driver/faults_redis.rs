//! Faults only Redis has: replication failovers (of the replica topology's primary or of one
//! quorum node, with or without a lost grant, with or without a split brain), the operator's
//! `FAILOVER`, `CLIENT PAUSE`, and Sentinel's promotion after a crash.

use super::backend::redis_of;
use super::run::Run;
use lease_harness::clock::mono_ns;
use lease_harness::history::RunEvent;
use lease_harness::proxy::{Mode, Proxy};
use std::time::Duration;
use tokio::time::{sleep, Instant};

impl Run<'_> {
    /// `failover` (the primary), `node-failover` (quorum node `k`): make node `k`'s replica
    /// lag (cut its replication link, let renewals happen, for longer than a TTL sometimes:
    /// the replica's copy of the lease then expired), in half of the cases hand the lease over
    /// meanwhile so that the promoted replica never saw the newest grant (nor its raise), then
    /// crash the node and promote the replica; every elector's proxy for the node follows.
    /// `node-split-brain` (`split`): the old node stays up meanwhile, even electors keep
    /// talking to it and odd ones move to the promoted replica for 2..3 TTL, then it dies.
    pub async fn failover(
        &mut self,
        kind: &str,
        t: u64,
        k: usize,
        split: bool,
    ) -> Result<(), String> {
        let quorum = self.cfg.topology.is_quorum();
        let name = self.backend.node_name(k);
        let rb = redis_of(self.backend.as_mut())?;
        let Some((mut replica, link)) = rb.replicas.get_mut(k).and_then(|r| r.take()) else {
            let why = if quorum {
                "no replica (--node-replicas)"
            } else {
                "no replica"
            };
            self.fault(kind, t, &name, String::new(), Some(why.into()));
            return Ok(());
        };
        let lag = self.rand_ttl(0.3, 2.0);
        let lose_grant = self.rng.bool();
        link.set_mode(Mode::Blackhole);
        let frozen_at = Instant::now();
        let mut handed_over = String::new();
        if lose_grant {
            if let Some(i) = self.leader() {
                handed_over = self.slot_id(i);
                if let Some(mut p) = self.slots[i].proc.take() {
                    p.stop(Duration::from_secs(5)).await;
                }
                self.spawn_elector(i)?;
            }
        }
        let left = lag.saturating_sub(frozen_at.elapsed());
        sleep(left.max(Duration::from_millis(50))).await;
        if !split {
            self.backend.kill(k);
        }
        drop(link);
        let frozen_ms = frozen_at.elapsed().as_millis();
        replica.promote().await?;
        if split {
            for (j, s) in self.slots.iter().enumerate() {
                if j % 2 == 1 {
                    s.proxies[k].retarget(replica.addr());
                }
            }
            let d = self.rand_ttl(2.0, 3.0);
            sleep(d).await;
            self.backend.kill(k);
        }
        for s in &self.slots {
            s.proxies[k].retarget(replica.addr());
        }
        let up = mono_ns();
        let new_name = replica.name.clone();
        let rb = redis_of(self.backend.as_mut())?;
        drop(std::mem::replace(&mut rb.primaries[k], replica));
        let lost = match (handed_over.is_empty(), quorum) {
            (true, _) => String::new(),
            (false, false) => format!(", {handed_over} resigned meanwhile (that grant is lost)"),
            (false, true) => format!(
                ", {handed_over} resigned meanwhile (that grant and raise are lost on this node)"
            ),
        };
        let how = match (split, quorum) {
            (true, _) => "replica promoted while the node stays up (odd electors moved to it), then the node killed",
            (false, true) => "node kill -9, replica promoted",
            (false, false) => "primary kill -9, replica promoted",
        };
        let detail = format!("replica {new_name} cut off {frozen_ms} ms{lost}, {how}");
        self.fault(kind, t, &name, detail, None);
        if self.single_primary() {
            self.record(RunEvent::RedisUp {
                t: up,
                why: "promotion".into(),
            });
        }
        // A fresh replica for the next failover.
        redis_of(self.backend.as_mut())?.renew_replica(k).await
    }

    /// Err with the log when the primary is no longer up (the old module aborted the server
    /// when a lease expired while writes were paused: issue 35).
    async fn primary_still_up(&mut self, during: &str) -> Result<(), String> {
        for _ in 0..50 {
            if self.backend.answers(0) {
                return Ok(());
            }
            if !redis_of(self.backend.as_mut())?.primaries[0].srv.alive() {
                break;
            }
            sleep(Duration::from_millis(20)).await;
        }
        let log = self.backend.log(0);
        Err(format!("the primary died during {during}; log:\n{log}"))
    }

    /// `client-pause`: `CLIENT PAUSE d WRITE` (a third of the time `ALL`) on the primary for
    /// 0.5..2 TTL, so leases expire and renewals wait during it (docs/failover.md §2.6). The
    /// module must write nothing during the pause; at the old code the server aborted.
    pub async fn client_pause(&mut self, t: u64) -> Result<(), String> {
        let d = self.rand_ttl(0.5, 2.0);
        let mode = if self.rng.u32(..3) == 0 {
            "ALL"
        } else {
            "WRITE"
        };
        let ms = d.as_millis().to_string();
        redis_of(self.backend.as_mut())?.primaries[0]
            .query_string(&["CLIENT", "PAUSE", &ms, mode])
            .map_err(|e| format!("CLIENT PAUSE: {e}"))?;
        sleep(d + Duration::from_millis(50)).await;
        self.primary_still_up("CLIENT PAUSE").await?;
        let detail = format!("CLIENT PAUSE {ms} {mode}");
        self.fault("client-pause", t, "primary", detail, None);
        Ok(())
    }

    /// `failover-coordinated`: `FAILOVER` from the primary to its replica, the operator's
    /// planned switch-over. The replica is held back for 0.5..1.5 TTL first (its own `CLIENT
    /// PAUSE WRITE` stops it applying the stream), so the primary stays paused, waiting for
    /// it, while leases expire (docs/failover.md §2.6; at the old code the primary aborted).
    /// Then the two swap roles: the promoted replica starts grace, the old primary replicates
    /// from it through a new link proxy, and the electors' proxies follow the new primary.
    pub async fn failover_coordinated(&mut self, t: u64) -> Result<(), String> {
        let kind = "failover-coordinated";
        let rb = redis_of(self.backend.as_mut())?;
        let Some((replica, link)) = rb.replicas.first_mut().and_then(|r| r.take()) else {
            self.fault(kind, t, "primary", String::new(), Some("no replica".into()));
            return Ok(());
        };
        let hold = self.rand_ttl(0.5, 1.5);
        let hold_ms = hold.as_millis().to_string();
        let timeout = (self.ttl(10.0) + Duration::from_secs(5))
            .as_millis()
            .to_string();
        let _ = replica.query_string(&["CLIENT", "PAUSE", &hold_ms, "WRITE"]);
        // A write the held-back replica has not applied: the primary must wait for it.
        let nudge = mono_ns().to_string();
        let rb = redis_of(self.backend.as_mut())?;
        let _ = rb.primaries[0].query_string(&["SET", "chaos:failover-nudge", &nudge]);
        if let Err(e) = rb.primaries[0].query_string(&["FAILOVER", "TIMEOUT", &timeout]) {
            rb.replicas[0] = Some((replica, link));
            let why = format!("FAILOVER: {e}");
            self.fault(kind, t, "primary", String::new(), Some(why));
            return Ok(());
        }
        let deadline = Instant::now() + hold + Duration::from_secs(15);
        loop {
            let p = &mut rb.primaries[0];
            if replica.role() == "master" && p.role() == "slave" {
                break;
            }
            if !p.srv.alive() || Instant::now() > deadline {
                return Err(format!(
                    "FAILOVER did not complete (the primary {}); primary log:\n{}\nreplica log:\n{}",
                    if p.srv.alive() { "is up" } else { "died" },
                    p.log(),
                    replica.log()
                ));
            }
            sleep(Duration::from_millis(20)).await;
        }
        let up = mono_ns();
        drop(link);
        let mut new_primary = replica;
        new_primary.srv.opts.replica_of = None;
        for s in &self.slots {
            s.proxies[0].retarget(new_primary.addr());
        }
        // The old primary follows the new one through a link proxy, like every replica of
        // this topology (so that later `failover` faults can cut it).
        let new_link = Proxy::start(new_primary.addr())
            .await
            .map_err(|e| e.to_string())?;
        let rb = redis_of(self.backend.as_mut())?;
        let mut old = std::mem::replace(&mut rb.primaries[0], new_primary);
        let port = new_link.addr().port().to_string();
        old.query_string(&["REPLICAOF", "127.0.0.1", &port])
            .map_err(|e| format!("REPLICAOF on the old primary: {e}"))?;
        old.srv.opts.replica_of = Some(new_link.addr().port());
        let linked = old.wait_replica_link().await;
        rb.replicas[0] = Some((old, new_link));
        let detail = format!(
            "FAILOVER with the replica held back {hold_ms} ms; roles swapped{}",
            if linked {
                ""
            } else {
                " (old primary's new link not up)"
            }
        );
        self.fault(kind, t, "primary", detail, None);
        self.record(RunEvent::RedisUp {
            t: up,
            why: "promotion".into(),
        });
        Ok(())
    }

    /// `split-brain` (replica topology, `--min-replicas-max-lag L`): the replica is cut off
    /// and promoted while the old primary stays up and keeps its leader; every other elector
    /// moves to the new primary at once. The old primary accepts the old leader's renewals
    /// until it notices it lost its replica (L s after the last ack, counted by a 1 s cron:
    /// up to L + 2 s), then that lease lapses within a TTL. The new primary grants after its
    /// grace. So grace < max TTL + (L + 2) s lets two leaders act at once (the checker's
    /// `overlap`); grace at or above it does not. After the split the old primary is
    /// stopped (as Sentinel would demote it) and everyone follows the new one.
    pub async fn split_brain(&mut self, t0: u64, leader: Option<usize>) -> Result<(), String> {
        let kind = "split-brain";
        let Some(lead) = leader else {
            self.fault(kind, t0, "-", String::new(), Some("no leader".into()));
            return Ok(());
        };
        let rb = redis_of(self.backend.as_mut())?;
        let Some((mut replica, link)) = rb.replicas.first_mut().and_then(|r| r.take()) else {
            self.fault(
                kind,
                t0,
                "primary",
                String::new(),
                Some("no replica".into()),
            );
            return Ok(());
        };
        let lead_id = self.slot_id(lead);
        link.set_mode(Mode::Blackhole);
        replica.promote().await?;
        let up = mono_ns();
        // The new side gets a replica of its own at once (with min-replicas-to-write it
        // would refuse every grant without one).
        let rb = redis_of(self.backend.as_mut())?;
        let name = rb.new_name();
        let new_replica = rb.start_replica(&name, replica.addr(), 0.0).await?;
        for (j, s) in self.slots.iter().enumerate() {
            if j != lead {
                s.proxies[0].retarget(replica.addr());
            }
        }
        self.record(RunEvent::RedisUp {
            t: up,
            why: "promotion (split brain)".into(),
        });
        let lag_ms = self.cfg.min_replicas_max_lag.unwrap_or(0) * 1000;
        let hold = Duration::from_millis(self.cfg.grace_ms.max(lag_ms + 2000 + self.cfg.ttl_ms))
            + self.ttl(2.0);
        sleep(hold).await;
        // Heal: the old primary goes away, its leader's slot follows the new one.
        self.slots[lead].proxies[0].retarget(replica.addr());
        let rb = redis_of(self.backend.as_mut())?;
        drop(std::mem::replace(&mut rb.primaries[0], replica));
        drop(link);
        rb.replicas[0] = new_replica;
        let detail = format!(
            "replica cut off and promoted while the old primary kept {lead_id} for {} ms",
            hold.as_millis()
        );
        self.fault(kind, t0, &lead_id, detail, None);
        Ok(())
    }

    /// `sentinel-failover`: kill -9 the primary Sentinel names; Sentinel promotes a replica
    /// (the module starts grace there); electors find it through Sentinel. In half of the
    /// cases the grant is lost first: both replicas are frozen (SIGSTOP) and their links cut
    /// (`CLIENT KILL TYPE replica` on the primary; SIGSTOP alone would not lose the stream,
    /// the kernel buffers it for the stopped process), the leader resigns, a follower gets the
    /// lease on the primary only, then the primary dies and the replicas thaw. The old
    /// primary then comes back (same port and AOF) as a replica of the new one, as a
    /// supervised node would, and the run waits until Sentinel sees a full topology again.
    /// The fault's time is the crash: the checker measures leaderless time from it.
    pub async fn sentinel_failover(&mut self, t0: u64) -> Result<(), String> {
        let kind = "sentinel-failover";
        let rb = redis_of(self.backend.as_mut())?;
        let Some(p) = rb.sentinel.as_ref().and_then(|t| t.primary_index()) else {
            self.fault(
                kind,
                t0,
                "primary",
                String::new(),
                Some("no primary".into()),
            );
            return Ok(());
        };
        let lose_grant = self.rng.bool();
        let lag = self.rand_ttl(0.3, 2.0);
        let mut handed_over = String::new();
        if lose_grant {
            let rb = redis_of(self.backend.as_mut())?;
            let topo = rb.sentinel.as_ref().ok_or("no sentinel topology")?;
            for (i, n) in topo.nodes.iter().enumerate() {
                if i != p {
                    n.signal(libc::SIGSTOP);
                }
            }
            let _ = topo.nodes[p].query::<redis::Value>(&["CLIENT", "KILL", "TYPE", "replica"]);
            if let Some(i) = self.leader() {
                handed_over = self.slot_id(i);
                let t_resign = mono_ns();
                if let Some(mut pr) = self.slots[i].proc.take() {
                    pr.stop(Duration::from_secs(5)).await;
                }
                // Its own record: a hand-over (not fault-free time), measured as such.
                self.fault(
                    "resign",
                    t_resign,
                    &handed_over.clone(),
                    "SIGTERM while the replicas are cut off (sentinel-failover)".into(),
                    None,
                );
                self.spawn_elector(i)?;
            }
            sleep(lag).await;
        }
        let rb = redis_of(self.backend.as_mut())?;
        let topo = rb.sentinel.as_mut().ok_or("no sentinel topology")?;
        let old_port = topo.nodes[p].port;
        let crash = mono_ns();
        topo.nodes[p].kill();
        for (i, n) in topo.nodes.iter().enumerate() {
            if i != p {
                n.signal(libc::SIGCONT);
            }
        }
        let promoted = topo.wait_promotion(old_port, Duration::from_secs(60))?;
        let up = mono_ns();
        let new_port = topo.nodes[promoted].port;
        // Back as a replica of the new primary (AOF kept; the full sync replaces it).
        let opts = topo.nodes[p].opts.clone().replica_of(Some(new_port));
        topo.nodes[p].try_restart_with(opts)?;
        let ready = topo.wait_ready(Duration::from_secs(60));
        self.record(RunEvent::RedisUp {
            t: up,
            why: "sentinel promotion".into(),
        });
        self.fault(
            kind,
            crash,
            "primary",
            format!(
                "primary :{old_port} kill -9{}, every Sentinel names :{new_port} {} ms later{}",
                if handed_over.is_empty() {
                    String::new()
                } else {
                    format!(
                        " ({handed_over} resigned while the replicas were cut off for {} ms: \
                         that grant is lost)",
                        lag.as_millis()
                    )
                },
                (up - crash) / 1_000_000,
                match ready {
                    Ok(()) => String::new(),
                    Err(e) => format!("; topology not whole again: {e}"),
                }
            ),
            None,
        );
        Ok(())
    }
}
