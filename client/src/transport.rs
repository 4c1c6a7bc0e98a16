//! The Redis layer: a small [`Transport`] trait with one method per module command the loop
//! needs, and [`RedisTransport`], its implementation on one `redis` connection. Tests script
//! a fake `Transport` instead of running a server.

use std::future::Future;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Value};

use crate::error::{CommandError, LeaseError};

/// Ask the server to confirm replication after a write: `WAIT replicas timeout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitFor {
    pub replicas: u32,
    pub timeout: Duration,
}

/// A write's reply plus, when a [`WaitFor`] was given and the write took effect, how many
/// replicas acknowledged it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replicated<T> {
    pub value: T,
    pub acked: Option<u32>,
}

/// `LEASE.GET` reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseInfo {
    pub owner: String,
    pub token: u64,
    /// Remaining server-side time to live.
    pub pttl: Duration,
}

/// The module commands the election loop uses. Every method may be cancelled (dropped) at any
/// await point; an implementation must then not reuse a connection with a reply in flight.
///
/// `WAIT` must run on the same connection right after the write it confirms (it counts acks
/// of *this connection's* writes), hence it is part of `acquire`/`renew`, not a method.
pub trait Transport: Send + 'static {
    /// `LEASE.ACQUIRE key owner ttl [BLOCK timeout]` (+ `WAIT` when granted and `wait` is set).
    /// `Ok(value: None)` = not granted.
    fn acquire(
        &mut self,
        key: &str,
        owner: &str,
        ttl: Duration,
        block: Option<Duration>,
        wait: Option<WaitFor>,
    ) -> impl Future<Output = Result<Replicated<Option<u64>>, CommandError>> + Send;

    /// `LEASE.RENEW key owner token ttl` (+ `WAIT` when renewed and `wait` is set).
    fn renew(
        &mut self,
        key: &str,
        owner: &str,
        token: u64,
        ttl: Duration,
        wait: Option<WaitFor>,
    ) -> impl Future<Output = Result<Replicated<bool>, CommandError>> + Send;

    /// `LEASE.RELEASE key owner token`: true if it was held and is now free.
    fn release(
        &mut self,
        key: &str,
        owner: &str,
        token: u64,
    ) -> impl Future<Output = Result<bool, CommandError>> + Send;

    /// `LEASE.GET key`.
    fn get(
        &mut self,
        key: &str,
    ) -> impl Future<Output = Result<Option<LeaseInfo>, CommandError>> + Send;

    /// After a renewal answered "not held": does this transport still hold the lease
    /// somewhere? A single server said it does not, so no (the default). A quorum transport
    /// can: the nodes that confirmed while a majority did not. The election loop then
    /// releases those once its task has stopped (R13), never before: released early, they
    /// could complete a successor's majority while our task still acts.
    fn holds_after_rejection(&self) -> bool {
        false
    }

    /// True (once) when the last `acquire` sent a RELEASE under its owner: a quorum round
    /// that did not make a reign releases its partial grants. The loop then advances the
    /// reign (protocol Q4, R17), so that RELEASE is the last command ever sent under that
    /// owner: executed late, after a next round under the same owner had refreshed the same
    /// node, it would free that node inside the new reign (found by the quorum model check).
    fn take_retired_owner(&mut self) -> bool {
        false
    }

    /// The instant before the sends of the commands the last `acquire`'s grant rests on, when
    /// it is later than the instant the loop took before calling `acquire` (once; `None`
    /// otherwise). Quorum mode waits on one node and then runs a fresh round (protocol Q10):
    /// every node counted in that round set its expiry after this instant, so the loop may
    /// measure the deadline from it instead of from before the wait.
    fn take_round_start(&mut self) -> Option<tokio::time::Instant> {
        None
    }
}

/// [`Transport`] over one multiplexed `redis` connection, opened lazily and dropped (so the
/// next call reconnects) after any connection error or a cancelled call.
pub struct RedisTransport {
    client: redis::Client,
    conn: Option<MultiplexedConnection>,
    connect_timeout: Duration,
    /// Set while a command is in flight. If a call is dropped half-way (timeout, resign), the
    /// next call sees it still set and reconnects: a late reply (say, a grant from a BLOCK we
    /// gave up on) must never be read as the reply to a later command.
    in_flight: bool,
    /// `redis+sentinel://` URL: `client` is re-resolved through Sentinel on every connect
    /// (crate::sentinel).
    sentinel: Option<crate::sentinel::SentinelAddr>,
    /// The connection to the importing node that took the last command through a Cluster
    /// `ASK`: a `WAIT` right after that write must run there, where the write's replication
    /// offset is (crate::sentinel). Cleared by every other command.
    asked: Option<MultiplexedConnection>,
}

use crate::decide::wire_ms as ms;

impl RedisTransport {
    pub fn new(redis_url: &str, connect_timeout: Duration) -> Result<Self, LeaseError> {
        let sentinel = crate::sentinel::SentinelAddr::parse(redis_url)
            .map_err(|e| LeaseError::Config(format!("invalid sentinel url: {e}")))?;
        // With Sentinel, this placeholder (the first Sentinel) is replaced before any use.
        let redis_url = match &sentinel {
            Some(s) => format!("redis://{}/", s.sentinels[0]),
            None => redis_url.to_string(),
        };
        let client = redis::Client::open(redis_url)
            // Not echoing the URL: it may carry a password.
            .map_err(|e| LeaseError::Config(format!("invalid redis url: {e}")))?;
        Ok(RedisTransport {
            client,
            conn: None,
            connect_timeout,
            in_flight: false,
            sentinel,
            asked: None,
        })
    }

    /// Like [`RedisTransport::new`], with TLS files and credentials (see [`crate::ConnectOptions`]).
    pub fn with_options(
        redis_url: &str,
        opts: &crate::tls::ConnectOptions,
        connect_timeout: Duration,
    ) -> Result<Self, LeaseError> {
        let sentinel = crate::sentinel::SentinelAddr::parse(redis_url)
            .map_err(|e| LeaseError::Config(format!("invalid sentinel url: {e}")))?;
        if sentinel.is_some() {
            // Not yet: the data nodes found through Sentinel would need the same TLS files and
            // credentials, and Sentinel itself its own (docs/security.md says so).
            if opts.has_tls_files() || opts.username.is_some() || opts.password.is_some() {
                return Err(LeaseError::Config(
                    "TLS files and separate credentials are not supported with Sentinel addressing yet"
                        .into(),
                ));
            }
            return RedisTransport::new(redis_url, connect_timeout);
        }
        Ok(RedisTransport {
            client: crate::tls::redis_client(redis_url, opts)?,
            conn: None,
            connect_timeout,
            in_flight: false,
            sentinel: None,
            asked: None,
        })
    }

    async fn conn(&mut self) -> Result<MultiplexedConnection, CommandError> {
        if self.in_flight {
            self.conn = None;
            self.in_flight = false;
        }
        if let Some(c) = &self.conn {
            return Ok(c.clone());
        }
        if let Some(s) = self.sentinel.as_mut() {
            self.client = s.resolve(self.connect_timeout).await?;
        }
        // No response timeout from the crate: callers bound every call themselves (BLOCK
        // replies legitimately take up to the block timeout).
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None);
        let c = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        self.conn = Some(c.clone());
        Ok(c)
    }

    /// Run one command; on connection-level failure forget the connection. Follows up to two
    /// Cluster `MOVED` redirections, and an `ASK` (crate::sentinel).
    async fn query(&mut self, cmd: &redis::Cmd) -> Result<Value, CommandError> {
        self.asked = None;
        let mut redirects = 0;
        loop {
            match self.query_once(cmd).await {
                Err(e) if redirects < 2 => {
                    if let Some(c) = crate::sentinel::redirect_target(&e, &self.client, "MOVED") {
                        self.client = c;
                        self.conn = None;
                        redirects += 1;
                    } else if let Some(c) =
                        crate::sentinel::redirect_target(&e, &self.client, "ASK")
                    {
                        return self.query_asking(&c, cmd).await;
                    } else {
                        return Err(e);
                    }
                }
                r => return r,
            }
        }
    }

    /// A Cluster `ASK`: the key's slot is migrating and the key is already on the importing
    /// node. Send `ASKING` and the command there, pipelined on one fresh connection (`ASKING`
    /// admits only the next command of its connection); the slot's owner stays `self.client`
    /// for later commands, as the spec of `ASK` says (the migration may yet be rolled back).
    /// Safe to resend: the node that answered `ASK` did not execute the command.
    async fn query_asking(
        &mut self,
        target: &redis::Client,
        cmd: &redis::Cmd,
    ) -> Result<Value, CommandError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None);
        let mut c = target
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let mut pipe = redis::pipe();
        pipe.cmd("ASKING").ignore().add_command(cmd.clone());
        let r: redis::RedisResult<Vec<Value>> = pipe.query_async(&mut c).await;
        let v = match r {
            Ok(mut vs) if vs.len() == 1 => reply(Ok(vs.remove(0)))?,
            Ok(vs) => return Err(CommandError::protocol(format!("ASKING replied {vs:?}"))),
            Err(e) => reply(Err(e))?,
        };
        self.asked = Some(c);
        Ok(v)
    }

    async fn query_once(&mut self, cmd: &redis::Cmd) -> Result<Value, CommandError> {
        let mut c = self.conn().await?;
        self.in_flight = true;
        let r = cmd.query_async::<Value>(&mut c).await;
        self.in_flight = false;
        let r = reply(r);
        if r.as_ref().is_err_and(|e| e.kind.is_unreachable()) {
            self.conn = None;
        }
        r.inspect_err(|e| {
            if self.sentinel.is_some() && crate::sentinel::means_rediscover(e) {
                self.conn = None;
            }
        })
    }

    async fn wait(&mut self, w: WaitFor) -> Result<u32, CommandError> {
        let mut cmd = redis::cmd("WAIT");
        // Never 0: `WAIT n 0` waits forever.
        cmd.arg(w.replicas).arg(ms(w.timeout));
        let v = match self.asked.take() {
            // The write went to the importing node through ASK: confirm it there.
            Some(mut c) => reply(cmd.query_async::<Value>(&mut c).await)?,
            None => self.query(&cmd).await?,
        };
        match v {
            Value::Int(n) if n >= 0 => Ok(n.min(u32::MAX as i64) as u32),
            other => Err(CommandError::protocol(format!("WAIT replied {other:?}"))),
        }
    }

    /// `LEASE.FENCE key token`: remaining ms of the live lease if `token` is current,
    /// `ErrorKind::Fenced` if it is stale.
    pub async fn fence(&mut self, key: &str, token: u64) -> Result<Duration, CommandError> {
        match self
            .query(redis::cmd("LEASE.FENCE").arg(key).arg(token))
            .await?
        {
            Value::Int(n) if n >= 0 => Ok(Duration::from_millis(n as u64)),
            other => Err(CommandError::protocol(format!(
                "LEASE.FENCE replied {other:?}"
            ))),
        }
    }
}

/// One reply as a value or a classified error. Error replies may come back as a Value (RESP3)
/// or an Err; unify. (Shared by the quorum transport.)
pub(crate) fn reply(r: redis::RedisResult<Value>) -> Result<Value, CommandError> {
    match r {
        Ok(Value::ServerError(e)) => Err(CommandError::from_server(
            e.code(),
            e.details().unwrap_or(""),
        )),
        Ok(v) => Ok(v),
        Err(e) => Err(CommandError::from(e)),
    }
}

/// `LEASE.GET`'s reply: nil, a RESP2 array `[owner, token, pttl]` or a RESP3 map.
pub(crate) fn lease_info_of(v: Value) -> Result<Option<LeaseInfo>, CommandError> {
    let fields: Vec<Value> = match v {
        Value::Nil => return Ok(None),
        Value::Array(items) => items,
        // RESP3: a map owner/token/pttl.
        Value::Map(pairs) => {
            let find = |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| string_of(k).as_deref() == Some(name))
                    .map(|(_, v)| v.clone())
                    .unwrap_or(Value::Nil)
            };
            vec![find("owner"), find("token"), find("pttl")]
        }
        other => {
            return Err(CommandError::protocol(format!(
                "LEASE.GET replied {other:?}"
            )))
        }
    };
    match fields.as_slice() {
        [o, Value::Int(t), Value::Int(p)] if *t > 0 && *p >= 0 => match string_of(o) {
            Some(owner) => Ok(Some(LeaseInfo {
                owner,
                token: *t as u64,
                pttl: Duration::from_millis(*p as u64),
            })),
            None => Err(CommandError::protocol("LEASE.GET owner is not a string")),
        },
        _ => Err(CommandError::protocol(format!(
            "LEASE.GET replied {fields:?}"
        ))),
    }
}

fn token_of(v: &Value) -> Option<u64> {
    match v {
        Value::Int(n) if *n > 0 => Some(*n as u64),
        _ => None,
    }
}

fn string_of(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

impl Transport for RedisTransport {
    async fn acquire(
        &mut self,
        key: &str,
        owner: &str,
        ttl: Duration,
        block: Option<Duration>,
        wait: Option<WaitFor>,
    ) -> Result<Replicated<Option<u64>>, CommandError> {
        let mut cmd = redis::cmd("LEASE.ACQUIRE");
        cmd.arg(key).arg(owner).arg(ms(ttl));
        if let Some(b) = block {
            cmd.arg("BLOCK").arg(ms(b));
        }
        let token = match self.query(&cmd).await? {
            Value::Nil => None,
            v => match token_of(&v) {
                Some(t) => Some(t),
                None => {
                    return Err(CommandError::protocol(format!(
                        "LEASE.ACQUIRE replied {v:?}"
                    )))
                }
            },
        };
        let acked = match (token, wait) {
            (Some(_), Some(w)) => Some(self.wait(w).await?),
            _ => None,
        };
        Ok(Replicated {
            value: token,
            acked,
        })
    }

    async fn renew(
        &mut self,
        key: &str,
        owner: &str,
        token: u64,
        ttl: Duration,
        wait: Option<WaitFor>,
    ) -> Result<Replicated<bool>, CommandError> {
        let v = self
            .query(
                redis::cmd("LEASE.RENEW")
                    .arg(key)
                    .arg(owner)
                    .arg(token)
                    .arg(ms(ttl)),
            )
            .await?;
        let renewed = match v {
            Value::Int(1) => true,
            Value::Int(0) => false,
            other => {
                return Err(CommandError::protocol(format!(
                    "LEASE.RENEW replied {other:?}"
                )))
            }
        };
        let acked = match (renewed, wait) {
            (true, Some(w)) => Some(self.wait(w).await?),
            _ => None,
        };
        Ok(Replicated {
            value: renewed,
            acked,
        })
    }

    async fn release(&mut self, key: &str, owner: &str, token: u64) -> Result<bool, CommandError> {
        match self
            .query(redis::cmd("LEASE.RELEASE").arg(key).arg(owner).arg(token))
            .await?
        {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            other => Err(CommandError::protocol(format!(
                "LEASE.RELEASE replied {other:?}"
            ))),
        }
    }

    async fn get(&mut self, key: &str) -> Result<Option<LeaseInfo>, CommandError> {
        let v = self.query(redis::cmd("LEASE.GET").arg(key)).await?;
        lease_info_of(v)
    }
}
