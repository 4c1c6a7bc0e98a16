//! An in-memory stand-in for a Redis primary with the lease module, driven by tokio time (so
//! tests run with a paused clock). It models the module's contract (grant, refresh by the
//! same owner, renew, release, BLOCK waking on release/expiry, expiry judged at execution
//! time, one-way latency) and lets a test inject faults: the server down (refusing or
//! hanging), scripted errors, replicas that do not acknowledge.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis_lease_client::{CommandError, ErrorKind, LeaseInfo, Replicated, Transport, WaitFor};
use tokio::sync::Notify;
use tokio::time::{sleep, sleep_until, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Down {
    Up,
    /// Connections refused at once.
    Refuse,
    /// Requests never answered (a frozen server or a black-holed network).
    Hang,
}

#[derive(Clone, Debug)]
pub struct Lease {
    pub owner: String,
    pub token: u64,
    pub expiry: Instant,
}

/// One command as the server saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub at: Instant,
    pub op: &'static str,
    pub owner: String,
    pub block: bool,
}

pub struct State {
    pub lease: Option<Lease>,
    pub last_token: u64,
    pub down: Down,
    /// One-way latency: the command executes `latency` after it was sent, and the reply
    /// arrives another `latency` later.
    pub latency: Duration,
    /// Replicas that acknowledge a `WAIT`.
    pub replicas: u32,
    /// Scripted one-shot errors per op ("acquire", "renew", "release").
    pub faults: VecDeque<(&'static str, CommandError)>,
    pub seen: Vec<Seen>,
}

#[derive(Clone)]
pub struct FakeServer {
    pub state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
}

impl Default for FakeServer {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeServer {
    pub fn new() -> Self {
        FakeServer {
            state: Arc::new(Mutex::new(State {
                lease: None,
                last_token: 0,
                down: Down::Up,
                latency: Duration::from_millis(1),
                replicas: 0,
                faults: VecDeque::new(),
                seen: vec![],
            })),
            changed: Arc::new(Notify::new()),
        }
    }

    pub fn transport(&self) -> FakeTransport {
        FakeTransport {
            server: self.clone(),
        }
    }

    /// Read or change the state. Does not wake blocked acquirers (see `changed`).
    pub fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut s = self.state.lock().unwrap();
        f(&mut s)
    }

    /// Wake blocked acquirers after a change that may free the lease or end a BLOCK.
    pub fn changed(&self) {
        self.changed.notify_waiters();
    }

    pub fn set_down(&self, d: Down) {
        self.with(|s| s.down = d);
        self.changed();
    }

    pub fn fault(&self, op: &'static str, kind: ErrorKind) {
        self.with(|s| {
            s.faults
                .push_back((op, CommandError::new(kind, "scripted")))
        });
    }

    /// The live lease (judged now), if any.
    pub fn live(&self) -> Option<Lease> {
        let now = Instant::now();
        self.with(|s| s.lease.clone().filter(|l| l.expiry > now))
    }

    /// Someone else takes the lease (as if ours expired unseen and another process won).
    pub fn steal(&self, ttl: Duration) -> u64 {
        self.with(|s| {
            s.last_token += 1;
            s.lease = Some(Lease {
                owner: "thief".into(),
                token: s.last_token,
                expiry: Instant::now() + ttl,
            });
            s.last_token
        })
        // (taking a lease never frees one: nobody to wake)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.with(|s| s.seen.clone())
    }

    /// Wait out the network towards the server; `Err` if the server is down.
    async fn reach(&self, op: &'static str, owner: &str, block: bool) -> Result<(), CommandError> {
        let (down, latency) = self.with(|s| (s.down, s.latency));
        match down {
            Down::Refuse => {
                return Err(CommandError::new(
                    ErrorKind::Connection,
                    "connection refused",
                ))
            }
            Down::Hang => std::future::pending::<()>().await,
            Down::Up => {}
        }
        sleep(latency).await;
        // The server may have gone down while the request travelled.
        if self.with(|s| s.down) != Down::Up {
            return Err(CommandError::new(ErrorKind::Connection, "connection reset"));
        }
        let fault = self.with(|s| {
            s.seen.push(Seen {
                at: Instant::now(),
                op,
                owner: owner.to_string(),
                block,
            });
            let pos = s.faults.iter().position(|(o, _)| *o == op);
            pos.and_then(|p| s.faults.remove(p)).map(|(_, e)| e)
        });
        match fault {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    async fn back(&self) -> Result<(), CommandError> {
        let latency = self.with(|s| s.latency);
        sleep(latency).await;
        Ok(())
    }

    fn wait_acks(&self, w: Option<WaitFor>) -> Option<u32> {
        w.map(|w| self.with(|s| s.replicas.min(w.replicas)))
    }
}

pub struct FakeTransport {
    server: FakeServer,
}

impl Transport for FakeTransport {
    async fn acquire(
        &mut self,
        _key: &str,
        owner: &str,
        ttl: Duration,
        block: Option<Duration>,
        wait: Option<WaitFor>,
    ) -> Result<Replicated<Option<u64>>, CommandError> {
        let srv = self.server.clone();
        srv.reach("acquire", owner, block.is_some()).await?;
        let block_end = block.map(|b| Instant::now() + b);
        loop {
            let notified = srv.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let now = Instant::now();
            let (granted, expiry) = srv.with(|s| {
                let live = s.lease.as_ref().filter(|l| l.expiry > now).cloned();
                match live {
                    Some(l) if l.owner == owner => {
                        s.lease = Some(Lease {
                            expiry: now + ttl,
                            ..l.clone()
                        });
                        (Some(l.token), None)
                    }
                    Some(l) => (None, Some(l.expiry)),
                    None => {
                        s.last_token += 1;
                        s.lease = Some(Lease {
                            owner: owner.to_string(),
                            token: s.last_token,
                            expiry: now + ttl,
                        });
                        (Some(s.last_token), None)
                    }
                }
            });
            if let Some(t) = granted {
                srv.back().await?;
                return Ok(Replicated {
                    value: Some(t),
                    acked: srv.wait_acks(wait),
                });
            }
            let Some(end) = block_end else {
                srv.back().await?;
                return Ok(Replicated {
                    value: None,
                    acked: None,
                });
            };
            if Instant::now() >= end {
                srv.back().await?;
                return Ok(Replicated {
                    value: None,
                    acked: None,
                });
            }
            let wake = expiry.map(|e| e.min(end)).unwrap_or(end);
            tokio::select! {
                _ = notified => {}
                _ = sleep_until(wake) => {}
            }
            if srv.with(|s| s.down) != Down::Up {
                return Err(CommandError::new(ErrorKind::Connection, "connection reset"));
            }
        }
    }

    async fn renew(
        &mut self,
        _key: &str,
        owner: &str,
        token: u64,
        ttl: Duration,
        wait: Option<WaitFor>,
    ) -> Result<Replicated<bool>, CommandError> {
        let srv = self.server.clone();
        srv.reach("renew", owner, false).await?;
        let now = Instant::now();
        let ok = srv.with(|s| match &mut s.lease {
            Some(l) if l.expiry > now && l.owner == owner && l.token == token => {
                l.expiry = now + ttl;
                true
            }
            _ => false,
        });
        srv.back().await?;
        Ok(Replicated {
            value: ok,
            acked: if ok { srv.wait_acks(wait) } else { None },
        })
    }

    async fn release(&mut self, _key: &str, owner: &str, token: u64) -> Result<bool, CommandError> {
        let srv = self.server.clone();
        srv.reach("release", owner, false).await?;
        let now = Instant::now();
        let ok = srv.with(|s| match &s.lease {
            Some(l) if l.expiry > now && l.owner == owner && l.token == token => {
                s.lease = None;
                true
            }
            _ => false,
        });
        if ok {
            srv.changed();
        }
        srv.back().await?;
        Ok(ok)
    }

    async fn get(&mut self, _key: &str) -> Result<Option<LeaseInfo>, CommandError> {
        let srv = self.server.clone();
        srv.reach("get", "", false).await?;
        let now = Instant::now();
        let r = srv.with(|s| {
            s.lease
                .as_ref()
                .filter(|l| l.expiry > now)
                .map(|l| LeaseInfo {
                    owner: l.owner.clone(),
                    token: l.token,
                    pttl: l.expiry - now,
                })
        });
        srv.back().await?;
        Ok(r)
    }
}
