//! Sentinel and Cluster addressing for [`crate::RedisTransport`].
//!
//! # Sentinel
//! `redis+sentinel://[[user]:password@]host:port[,host:port...]/master-name[/db]`: the
//! transport asks the Sentinels for the primary's address each time it (re)connects, and
//! reconnects after connection errors, timeouts, `READONLY`, `NOREPLICAS`, `LOADING` and
//! `MASTERDOWN` (docs/client-protocol.md §9). Credentials and db apply to the data nodes;
//! the Sentinels are asked without credentials.
//!
//! Resolution follows Redis' "Sentinel clients" guidelines: ask the Sentinels in order, take
//! the first answer, move that Sentinel to the front, then confirm with `ROLE` on the named
//! node that it is a primary (a Sentinel may still name a node that was demoted; asking it
//! anyway would only cost `READONLY` errors, but confirming first keeps the elector from
//! treating a half-finished failover as an outage of the new primary). Every step is bounded
//! by the caller's connect timeout, so a stopped Sentinel or a stopped primary cannot hang the
//! election loop (it bounds every call by its own deadline as well).
//!
//! Safety does not depend on any of this: whichever node a client reaches, the lease is
//! judged there, a promoted node grants nothing new during `lease.grace-ms`, and a client
//! whose renewals fail steps down at its local deadline (R9). Addressing only decides how
//! soon electors find the new primary.
//!
//! We do not use the `redis` crate's `sentinel` feature: its lookups are not bounded by our
//! timeouts, and this keeps `Cargo.toml` unchanged. The crate's own URL parser handles the
//! data node connection (credentials, db).
//!
//! # Cluster
//! A plain `redis://` URL of any cluster node works: a `MOVED slot host:port` reply makes the
//! transport switch to that node (same credentials and db) and send the command again there
//! (a refused command was not executed, so this is safe). `WAIT` then runs on the node that
//! took the write. An `ASK slot host:port` reply (the slot is migrating and the key already
//! moved) makes the transport send `ASKING` and the command, pipelined, on a connection to
//! that node, for that one command (the slot's owner is unchanged until the migration ends);
//! a `WAIT` right after runs on that connection too. So a leader keeps its term through a
//! migration however long the slot stays migrating (`client/tests/cluster.rs`).

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Value};

use crate::error::{CommandError, ErrorKind};

/// URL scheme of Sentinel addresses.
pub const SCHEME: &str = "redis+sentinel://";

/// `redis+sentinel://h:p,h:p/name` from a list of Sentinels and the master name (`lease-run
/// --sentinel ... --master-name ...`).
pub fn url(sentinels: &[String], master_name: &str) -> String {
    format!("{SCHEME}{}/{master_name}", sentinels.join(","))
}

/// A parsed `redis+sentinel://` URL. Debug hides the password of `userinfo`.
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelAddr {
    /// `host:port` of every Sentinel, the one that answered last first.
    pub sentinels: Vec<String>,
    pub master_name: String,
    /// `[user]:password@` as written (applied to data nodes), without the `@`.
    pub userinfo: Option<String>,
    pub db: Option<i64>,
}

impl std::fmt::Debug for SentinelAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let userinfo = self.userinfo.as_ref().map(|u| match u.split_once(':') {
            Some((user, _)) => format!("{user}:<redacted>"),
            None => "<redacted>".to_string(),
        });
        f.debug_struct("SentinelAddr")
            .field("sentinels", &self.sentinels)
            .field("master_name", &self.master_name)
            .field("userinfo", &userinfo)
            .field("db", &self.db)
            .finish()
    }
}

impl SentinelAddr {
    /// Parse `redis+sentinel://...`; `Ok(None)` for any other URL.
    pub fn parse(url: &str) -> Result<Option<SentinelAddr>, String> {
        let Some(rest) = url.strip_prefix(SCHEME) else {
            return Ok(None);
        };
        let (authority, path) = rest.split_once('/').ok_or_else(|| {
            format!("sentinel url needs /master-name after the hosts ({SCHEME}h:p,h:p/name)")
        })?;
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u.to_string()), h),
            None => (None, authority),
        };
        let mut sentinels = vec![];
        for h in hosts.split(',').filter(|h| !h.is_empty()) {
            let (host, port) = h
                .rsplit_once(':')
                .ok_or_else(|| format!("sentinel address {h:?} needs host:port"))?;
            let port: u16 = port
                .parse()
                .map_err(|_| format!("sentinel address {h:?}: bad port"))?;
            if host.is_empty() {
                return Err(format!("sentinel address {h:?}: empty host"));
            }
            sentinels.push(format!("{host}:{port}"));
        }
        if sentinels.is_empty() {
            return Err("sentinel url names no sentinel".into());
        }
        let mut parts = path.trim_end_matches('/').splitn(2, '/');
        let master_name = parts.next().unwrap_or("").to_string();
        if master_name.is_empty() {
            return Err("sentinel url needs a master name".into());
        }
        let db = match parts.next() {
            None | Some("") => None,
            Some(d) => Some(d.parse().map_err(|_| format!("bad db {d:?}"))?),
        };
        Ok(Some(SentinelAddr {
            sentinels,
            master_name,
            userinfo,
            db,
        }))
    }

    /// The `redis://` URL of a data node at `host:port` with this address' credentials and db.
    fn node_url(&self, host_port: &str) -> String {
        let auth = self
            .userinfo
            .as_ref()
            .map(|u| format!("{u}@"))
            .unwrap_or_default();
        let db = self.db.map(|d| d.to_string()).unwrap_or_default();
        format!("redis://{auth}{host_port}/{db}")
    }

    /// Ask the Sentinels for the primary, confirm it with `ROLE`, and return a client for it.
    /// Each Sentinel and the confirmation get at most `timeout`.
    pub async fn resolve(&mut self, timeout: Duration) -> Result<Client, CommandError> {
        let mut why = vec![];
        for i in 0..self.sentinels.len() {
            let s = self.sentinels[i].clone();
            match ask_sentinel(&s, &self.master_name, timeout).await {
                Ok(Some(addr)) => {
                    // The guideline: the Sentinel that answered goes first next time.
                    let answered = self.sentinels.remove(i);
                    self.sentinels.insert(0, answered);
                    let client = Client::open(self.node_url(&addr)).map_err(|e| {
                        CommandError::new(ErrorKind::Protocol, format!("node url: {e}"))
                    })?;
                    return match role_of(&client, timeout).await {
                        Ok(r) if r == "master" => Ok(client),
                        Ok(r) => Err(CommandError::new(
                            // Mid-failover: the named node is not a primary (yet). Treated as
                            // unreachable: back off and ask again.
                            ErrorKind::Connection,
                            format!("sentinel {s} names {addr}, which reports role {r}"),
                        )),
                        Err(e) => Err(CommandError::new(
                            e.kind,
                            format!("primary {addr} (from sentinel {s}): {}", e.message),
                        )),
                    };
                }
                Ok(None) => why.push(format!("{s}: unknown master")),
                Err(e) => why.push(format!("{s}: {e}")),
            }
        }
        Err(CommandError::new(
            ErrorKind::Connection,
            format!(
                "no sentinel named a primary for {}: {}",
                self.master_name,
                why.join("; ")
            ),
        ))
    }
}

async fn connect(
    client: &Client,
    timeout: Duration,
) -> Result<MultiplexedConnection, CommandError> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    Ok(client
        .get_multiplexed_async_connection_with_config(&config)
        .await?)
}

/// `SENTINEL get-master-addr-by-name` on one Sentinel: `host:port`, or None if it does not
/// know the name.
async fn ask_sentinel(
    sentinel: &str,
    name: &str,
    timeout: Duration,
) -> Result<Option<String>, CommandError> {
    let client = Client::open(format!("redis://{sentinel}/"))
        .map_err(|e| CommandError::new(ErrorKind::Protocol, e.to_string()))?;
    let mut con = connect(&client, timeout).await?;
    let v = tokio::time::timeout(
        timeout,
        redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(name)
            .query_async::<Value>(&mut con),
    )
    .await
    .map_err(|_| CommandError::timeout(timeout))??;
    match v {
        Value::Nil => Ok(None),
        Value::Array(items) => match items.as_slice() {
            [h, p] => match (text(h), text(p)) {
                (Some(h), Some(p)) if p.parse::<u16>().is_ok() => Ok(Some(if h.contains(':') {
                    format!("[{h}]:{p}") // IPv6
                } else {
                    format!("{h}:{p}")
                })),
                _ => Err(CommandError::protocol(format!(
                    "get-master-addr-by-name replied {items:?}"
                ))),
            },
            _ => Err(CommandError::protocol(format!(
                "get-master-addr-by-name replied {items:?}"
            ))),
        },
        other => Err(CommandError::protocol(format!(
            "get-master-addr-by-name replied {other:?}"
        ))),
    }
}

/// `ROLE`'s first element.
async fn role_of(client: &Client, timeout: Duration) -> Result<String, CommandError> {
    let mut con = connect(client, timeout).await?;
    let v = tokio::time::timeout(timeout, redis::cmd("ROLE").query_async::<Value>(&mut con))
        .await
        .map_err(|_| CommandError::timeout(timeout))??;
    match &v {
        Value::Array(items) => items
            .first()
            .and_then(text)
            .ok_or_else(|| CommandError::protocol(format!("ROLE replied {v:?}"))),
        _ => Err(CommandError::protocol(format!("ROLE replied {v:?}"))),
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// Errors after which a Sentinel-addressed transport forgets its connection and asks the
/// Sentinels again: the node it talks to may no longer be the primary.
pub fn means_rediscover(e: &CommandError) -> bool {
    match &e.kind {
        ErrorKind::ReadOnly | ErrorKind::NoReplicas | ErrorKind::Loading => true,
        ErrorKind::Server(code) => code == "MASTERDOWN",
        k => k.is_unreachable(),
    }
}

/// For a Cluster redirection `CODE slot host:port` (`MOVED` or `ASK`): a client for
/// `host:port` with `current`'s credentials and db.
pub fn redirect_target(e: &CommandError, current: &Client, code: &str) -> Option<Client> {
    if e.kind != ErrorKind::Server(code.into()) {
        return None;
    }
    // The message is the server's detail, "slot host:port" (see CommandError::from_server).
    let addr = e.message.split_whitespace().find(|w| w.contains(':'))?;
    let (host, port) = addr.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let mut info = current.get_connection_info().clone();
    info = info.set_addr(redis::ConnectionAddr::Tcp(
        host.trim_matches(|c| c == '[' || c == ']').to_string(),
        port,
    ));
    Client::open(info).ok()
}

#[cfg(test)]
mod tests {

    #[test]
    fn debug_hides_the_password() {
        let a = SentinelAddr::parse("redis+sentinel://u:hunter2@s1:26379,s2:26379/m")
            .expect("valid")
            .expect("a sentinel url");
        let dbg = format!("{a:?}");
        assert!(
            !dbg.contains("hunter2") && dbg.contains("u:<redacted>"),
            "{dbg}"
        );
        assert_eq!(
            a.userinfo.as_deref(),
            Some("u:hunter2"),
            "the value itself is kept"
        );
    }

    use super::*;

    #[test]
    fn parses_sentinel_urls() {
        let a = SentinelAddr::parse("redis+sentinel://:pw@10.0.0.1:26379,s2:26380/mymaster/3")
            .unwrap()
            .unwrap();
        assert_eq!(a.sentinels, vec!["10.0.0.1:26379", "s2:26380"]);
        assert_eq!(a.master_name, "mymaster");
        assert_eq!(a.userinfo.as_deref(), Some(":pw"));
        assert_eq!(a.db, Some(3));
        assert_eq!(a.node_url("h:1"), "redis://:pw@h:1/3");
        let b = SentinelAddr::parse("redis+sentinel://s1:1/m")
            .unwrap()
            .unwrap();
        assert_eq!(b.node_url("h:1"), "redis://h:1/");
        assert_eq!(SentinelAddr::parse("redis://h:1/").unwrap(), None);
        for bad in [
            "redis+sentinel://s1:1",
            "redis+sentinel://s1:1/",
            "redis+sentinel:///m",
            "redis+sentinel://s1/m",
            "redis+sentinel://s1:x/m",
            "redis+sentinel://:1/m",
            "redis+sentinel://s1:1/m/x",
        ] {
            assert!(SentinelAddr::parse(bad).is_err(), "{bad} must be refused");
        }
    }

    #[test]
    fn rediscovers_on_role_errors_only() {
        let e = |code: &str| CommandError::from_server(code, "x");
        assert!(means_rediscover(&e("READONLY")));
        assert!(means_rediscover(&e("NOREPLICAS")));
        assert!(means_rediscover(&e("LOADING")));
        assert!(means_rediscover(&e("MASTERDOWN")));
        assert!(means_rediscover(&CommandError::timeout(
            Duration::from_secs(1)
        )));
        assert!(!means_rediscover(&e("GRACE")));
        assert!(!means_rediscover(&e("ERR")));
        assert!(!means_rediscover(&e("WRONGTYPE")));
    }

    #[test]
    fn moved_names_the_new_node_with_the_same_credentials() {
        let cur = Client::open("redis://:pw@127.0.0.1:7000/").unwrap();
        let e = CommandError::from_server("MOVED", "3999 127.0.0.1:7002");
        let c = redirect_target(&e, &cur, "MOVED").expect("a client for the named node");
        assert_eq!(c.get_connection_info().addr().to_string(), "127.0.0.1:7002");
        assert_eq!(
            c.get_connection_info().redis_settings().password(),
            Some("pw")
        );
        let err = CommandError::from_server("ERR", "x");
        assert!(redirect_target(&err, &cur, "MOVED").is_none());
        // Each code is its own: an ASK is not a MOVED (the owner must not change on an ASK).
        let ask = CommandError::from_server("ASK", "3999 127.0.0.1:7003");
        assert!(redirect_target(&ask, &cur, "MOVED").is_none());
        let c = redirect_target(&ask, &cur, "ASK").expect("the importing node");
        assert_eq!(c.get_connection_info().addr().to_string(), "127.0.0.1:7003");
    }
}
