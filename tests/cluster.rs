//! Redis Cluster (the commands' key spec; docs/protocol.md §4): 3 primaries + 3 replicas started by the test and
//! joined with `redis-cli --cluster create`; a lease lives on its slot's primary and a
//! cluster-aware client reaches it (MOVED followed); `CLUSTER FAILOVER` on one replica starts
//! grace on that new primary only; FENCE refuses an inner command in another slot.

mod common;
use common::*;
use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

const GRACE_MS: u64 = 2000;

fn start_node() -> RedisServer {
    RedisServer::start(
        ServerOptions::default()
            .module_args(&["lease.grace-ms", "0"])
            .extra_args(&[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "5000",
                "--repl-diskless-sync-delay",
                "0",
            ]),
    )
}

/// One line of `CLUSTER NODES`.
struct Node {
    port: u16,
    id: String,
    primary: bool,
    primary_id: String,
    slots: Vec<(u16, u16)>,
}

fn cluster_nodes(c: &mut Con) -> Vec<Node> {
    let text: String = redis::cmd("CLUSTER").arg("NODES").query(c).expect("nodes");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let port = f[1]
                .split('@')
                .next()
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| p.parse().ok())
                .expect("port");
            let slots = f[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .map(|s| {
                    let mut it = s.split('-').map(|n| n.parse::<u16>().expect("slot"));
                    let a = it.next().expect("slot");
                    (a, it.next().unwrap_or(a))
                })
                .collect();
            Node {
                port,
                id: f[0].to_string(),
                primary: f[2].contains("master"),
                primary_id: f[3].to_string(),
                slots,
            }
        })
        .collect()
}

fn keyslot(c: &mut Con, key: &str) -> u16 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(c)
        .expect("keyslot")
}

fn role(s: &RedisServer) -> String {
    let mut c = s.connection();
    info_value(&info_text(&mut c, "replication"), "role").unwrap_or_default()
}

fn cluster_err<T: redis::FromRedisValue + std::fmt::Debug>(r: redis::RedisResult<T>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or("")),
    }
}

/// Would catch: lease commands without a usable key spec (the cluster client could not route
/// them and MOVED would not be followed), grace missing on a primary promoted by CLUSTER
/// FAILOVER (it could grant a lease its old primary granted in writes it never received),
/// grace leaking onto primaries that did not fail over, renewals of replicated leases refused
/// after failover, tokens after grace not above the old primary's, and FENCE running an inner
/// command in another slot (RM_Call does not redirect, so it would act on the wrong node's
/// keyspace or fail confusingly).
#[test]
fn cluster_routes_leases_and_grace_follows_a_failover_to_that_shard_only() {
    let started = Instant::now();
    let nodes: Vec<RedisServer> = (0..6).map(|_| start_node()).collect();
    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let out = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", "1", "--cluster-yes"])
        .output()
        .expect("redis-cli");
    assert!(
        out.status.success(),
        "cluster create failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let by_port: HashMap<u16, &RedisServer> = nodes.iter().map(|n| (n.port, n)).collect();

    // Bounded wait: every node sees a healthy cluster and every replica has synced.
    let mut c0 = nodes[0].connection();
    let topo = wait_for(Duration::from_secs(20), || {
        for n in &nodes {
            let mut c = n.connection();
            let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c).ok()?;
            if !info.contains("cluster_state:ok") {
                return None;
            }
            let rep = info_text(&mut c, "replication");
            if info_value(&rep, "role").as_deref() == Some("slave")
                && info_value(&rep, "master_link_status").as_deref() != Some("up")
            {
                return None;
            }
        }
        // Every node must agree on who replicates whom: a primary refuses its vote in a
        // failover election to a node it still sees as an empty primary.
        let views: Vec<Vec<(String, bool, String)>> = nodes
            .iter()
            .map(|n| {
                let mut v: Vec<_> = cluster_nodes(&mut n.connection())
                    .into_iter()
                    .map(|x| (x.id, x.primary, x.primary_id))
                    .collect();
                v.sort();
                v
            })
            .collect();
        if views.iter().any(|v| v != &views[0]) {
            return None;
        }
        let t = cluster_nodes(&mut c0);
        (t.iter()
            .filter(|n| n.primary && !n.slots.is_empty())
            .count()
            == 3
            && t.iter().filter(|n| !n.primary).count() == 3)
            .then_some(t)
    })
    .expect("cluster did not become ok");
    eprintln!("cluster of 6 up in {:?}", started.elapsed());
    let primaries: Vec<&Node> = topo.iter().filter(|n| n.primary).collect();

    // One hash tag per shard: "{tN}..." keys all live in that shard's slot.
    let mut tags: Vec<Option<String>> = vec![None; 3];
    for i in 0.. {
        let tag = format!("{{t{i}}}");
        let slot = keyslot(&mut c0, &tag);
        let shard = primaries
            .iter()
            .position(|p| p.slots.iter().any(|&(a, b)| (a..=b).contains(&slot)))
            .expect("slot owned");
        tags[shard].get_or_insert(tag);
        if tags.iter().all(Option::is_some) {
            break;
        }
    }
    let tags: Vec<String> = tags.into_iter().map(Option::unwrap).collect();

    // A cluster-aware client that knows only one node reaches every shard.
    let client = redis::cluster::ClusterClient::new(vec![nodes[0].url()]).expect("client");
    let mut cc = client.get_connection().expect("cluster connection");
    let acq = |cc: &mut redis::cluster::ClusterConnection, key: &str, owner: &str| {
        redis::cmd("LEASE.ACQUIRE")
            .arg(key)
            .arg(owner)
            .arg(10_000)
            .query::<Option<u64>>(cc)
    };
    let mut held = vec![];
    for (shard, tag) in tags.iter().enumerate() {
        let key = format!("{tag}lease");
        let t = acq(&mut cc, &key, "holder")
            .expect("acquire")
            .expect("granted");
        // It lives on that shard's primary, nowhere else among the primaries.
        let mut owner_con = by_port[&primaries[shard].port].connection();
        assert_eq!(get(&mut owner_con, &key).map(|g| g.1), Some(t));
        for (other, p) in primaries.iter().enumerate() {
            if other != shard {
                let e = err_of(&mut by_port[&p.port].connection(), &["LEASE.GET", &key]);
                assert!(e.starts_with("MOVED"), "{e}");
            }
        }
        assert_eq!(
            wait_acks(&mut owner_con, 1, 2000),
            1,
            "replica of shard {shard}"
        );
        held.push((key, t));
    }

    // FENCE: an inner command in the lease key's slot runs; one in another slot is refused.
    let (ka, ta) = held[0].clone();
    let ok: String = redis::cmd("LEASE.FENCE")
        .arg(&ka)
        .arg(ta)
        .arg("SET")
        .arg(format!("{}data", tags[0]))
        .arg("v")
        .query(&mut cc)
        .expect("same-slot fence");
    assert_eq!(ok, "OK");
    let e = cluster_err(
        redis::cmd("LEASE.FENCE")
            .arg(&ka)
            .arg(ta)
            .arg("SET")
            .arg(format!("{}data", tags[1]))
            .arg("v")
            .query::<redis::Value>(&mut cc),
    );
    assert!(e.starts_with("CROSSSLOT"), "{e}");

    // Production-like grace from here on, and none of it left from start-up.
    for n in &nodes {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("lease.grace-ms")
            .arg(GRACE_MS)
            .query(&mut n.connection())
            .expect("config set");
    }
    wait_for(Duration::from_secs(5), || {
        nodes
            .iter()
            .all(|n| info_field(&mut n.connection(), "grace_active") == 0)
            .then_some(())
    })
    .expect("start-up grace over everywhere");

    // Fail shard 0 over to its replica.
    let old = by_port[&primaries[0].port];
    let replica_node = topo
        .iter()
        .find(|n| !n.primary && n.primary_id == primaries[0].id)
        .expect("replica of shard 0");
    let new = by_port[&replica_node.port];
    let t0 = Instant::now();
    // A manual failover that does not complete within Redis' own 5 s limit is abandoned by
    // the replica; ask again then (a busy machine can delay the vote).
    let mut done = false;
    for _ in 0..3 {
        let _: () = redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .query(&mut new.connection())
            .expect("cluster failover");
        done = wait_for(Duration::from_secs(6), || {
            (role(new) == "master" && role(old) == "slave").then_some(())
        })
        .is_some();
        if done {
            break;
        }
    }
    assert!(
        done,
        "failover did not complete; new primary log:\n{}\nold primary log:\n{}",
        new.log(),
        old.log()
    );
    let promoted_after = t0.elapsed();
    eprintln!("CLUSTER FAILOVER: replica promoted after {promoted_after:?}");

    let mut nc = new.connection();
    assert_eq!(
        info_field(&mut nc, "grace_active"),
        1,
        "grace on the new primary"
    );
    for p in &primaries[1..] {
        let mut c = by_port[&p.port].connection();
        assert_eq!(
            info_field(&mut c, "grace_active"),
            0,
            "no grace on {}",
            p.port
        );
    }
    // Through the cluster client (MOVED from the demoted node is followed): a new lease in
    // the failed-over shard is refused with GRACE; the other shards grant as usual.
    let e = cluster_err(acq(&mut cc, &format!("{}fresh", tags[0]), "newcomer"));
    assert!(e.starts_with("GRACE"), "{e}");
    for tag in &tags[1..] {
        let t = acq(&mut cc, &format!("{tag}fresh"), "newcomer").expect("acquire");
        assert!(t.is_some(), "shard without failover grants at once");
    }
    // The holder known to the new primary renews during grace.
    let renewed: i64 = redis::cmd("LEASE.RENEW")
        .arg(&ka)
        .arg("holder")
        .arg(ta)
        .arg(10_000)
        .query(&mut cc)
        .expect("renew");
    assert_eq!(renewed, 1);

    // BLOCK waits through grace on the new primary; the token is above the old primary's.
    let token: Option<u64> = redis::cmd("LEASE.ACQUIRE")
        .arg(format!("{}fresh", tags[0]))
        .arg("newcomer")
        .arg(1000)
        .arg("BLOCK")
        .arg(10_000)
        .query(&mut cc)
        .expect("blocking acquire");
    let waited = t0.elapsed();
    let token = token.expect("granted after grace");
    eprintln!("failover -> grant in that shard: {waited:?} (grace {GRACE_MS} ms)");
    assert!(waited >= Duration::from_millis(GRACE_MS));
    assert!(token > held.iter().map(|h| h.1).max().unwrap_or(0));
    eprintln!("cluster test total {:?}", started.elapsed());
}
