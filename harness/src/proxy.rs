//! Fault-injecting TCP proxy between one elector and Redis.
//!
//! Every elector connects to Redis through its own proxy, so a fault can hit one elector
//! (the leader, typically) and not the others, and a promotion can move every elector to the
//! new primary without the client library knowing about replicas.
//!
//! Modes, modelled on what a real network does to a TCP connection:
//! - `Pass`: bytes flow.
//! - `Delay(d)`: every chunk is delivered `d` after it was read, in order (a slow link).
//! - `Blackhole`: nothing is read or delivered (TCP stalls: the peer's writes fill buffers,
//!   its reads hang); new connections are accepted and then stall too. When the blackhole
//!   ends every connection is closed, as a connection that timed out in an outage would be.
//! - `Partition`: every connection is closed at once and new ones are closed on accept
//!   (connection refused/reset).
//!
//! `retarget` changes the upstream (after a promotion) and closes every connection.

use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Pass,
    Delay(Duration),
    Blackhole,
    Partition,
}

#[derive(Clone, Debug)]
struct Ctl {
    mode: Mode,
    upstream: SocketAddr,
    /// Bumped to close every live connection.
    epoch: u64,
}

pub struct Proxy {
    addr: SocketAddr,
    ctl: watch::Sender<Ctl>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listen on a free loopback port and forward to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (ctl, rx) = watch::channel(Ctl {
            mode: Mode::Pass,
            upstream,
            epoch: 0,
        });
        let accept = tokio::spawn(accept_loop(listener, rx));
        Ok(Proxy { addr, ctl, accept })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn mode(&self) -> Mode {
        self.ctl.borrow().mode
    }

    pub fn set_mode(&self, mode: Mode) {
        self.ctl.send_modify(|c| {
            let close =
                mode == Mode::Partition || (c.mode == Mode::Blackhole && mode != Mode::Blackhole);
            c.mode = mode;
            if close {
                c.epoch += 1;
            }
        });
    }

    /// Point at a new upstream and drop every connection to the old one.
    pub fn retarget(&self, upstream: SocketAddr) {
        self.ctl.send_modify(|c| {
            c.upstream = upstream;
            c.epoch += 1;
        });
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Closing the channel ends every connection task (they watch for it).
        self.ctl.send_modify(|c| c.epoch += 1);
    }
}

async fn accept_loop(listener: TcpListener, rx: watch::Receiver<Ctl>) {
    // Bounded by the proxy's life: the task is aborted on drop.
    loop {
        let Ok((sock, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = sock.set_nodelay(true);
        tokio::spawn(connection(sock, rx.clone()));
    }
}

/// Wait until the connection's epoch is over (or the proxy is gone).
async fn epoch_over(rx: &mut watch::Receiver<Ctl>, epoch: u64) {
    loop {
        if rx.borrow_and_update().epoch != epoch {
            return;
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

async fn connection(client: TcpStream, mut rx: watch::Receiver<Ctl>) {
    let ctl = rx.borrow_and_update().clone();
    let epoch = ctl.epoch;
    match ctl.mode {
        Mode::Partition => return, // dropped: the peer sees the connection closed
        Mode::Blackhole => {
            // Accepted but never answered, until the outage ends.
            epoch_over(&mut rx, epoch).await;
            return;
        }
        Mode::Pass | Mode::Delay(_) => {}
    }
    let upstream = tokio::select! {
        r = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(ctl.upstream)) => match r {
            Ok(Ok(s)) => s,
            _ => return, // upstream down: close, like a refused connection
        },
        _ = epoch_over(&mut rx, epoch) => return,
    };
    let _ = upstream.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (ur, uw) = upstream.into_split();
    let mut tasks = tokio::task::JoinSet::new();
    for (r, w) in [(cr, uw), (ur, cw)] {
        let (tx, qrx) = mpsc::unbounded_channel();
        tasks.spawn(reader(r, tx, rx.clone()));
        tasks.spawn(writer(w, qrx));
    }
    // The connection ends when any side ends or the epoch is over; dropping the JoinSet
    // aborts the other pumps and closes both sockets.
    tokio::select! {
        _ = epoch_over(&mut rx, epoch) => {},
        _ = tasks.join_next() => {},
    }
}

async fn reader(
    mut r: tokio::net::tcp::OwnedReadHalf,
    tx: mpsc::UnboundedSender<(Instant, Vec<u8>)>,
    mut rx: watch::Receiver<Ctl>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        // A blackhole stalls before reading, so the sender's bytes back up in TCP buffers.
        loop {
            let mode = rx.borrow_and_update().mode;
            if mode != Mode::Blackhole {
                break;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => {
                // A close during a blackhole does not cross it either (a FIN is lost like any
                // other packet): the other side learns of it only when the outage ends. The
                // split-brain fault relies on this: a promoted replica drops its link, and
                // the old primary must not hear of it before its replication lag says so.
                while rx.borrow_and_update().mode == Mode::Blackhole {
                    if rx.changed().await.is_err() {
                        break;
                    }
                }
                return;
            }
            Ok(n) => n,
        };
        if rx.borrow().mode == Mode::Blackhole {
            // The read was already pending when the outage began: the bytes are lost and the
            // connection stalls until the end of the blackhole closes it.
            loop {
                if rx.changed().await.is_err() || rx.borrow().mode != Mode::Blackhole {
                    return;
                }
            }
        }
        let now = Instant::now();
        let due = match rx.borrow().mode {
            Mode::Delay(d) => now + d,
            _ => now,
        };
        if tx.send((due, buf[..n].to_vec())).is_err() {
            return;
        }
    }
}

async fn writer(
    mut w: tokio::net::tcp::OwnedWriteHalf,
    mut q: mpsc::UnboundedReceiver<(Instant, Vec<u8>)>,
) {
    while let Some((due, bytes)) = q.recv().await {
        // No timer when nothing is delayed: a tokio timer rounds up to the next millisecond
        // tick, which would add ~1 ms per hop to every hand-over we measure.
        if due > Instant::now() {
            tokio::time::sleep_until(due).await;
        }
        if w.write_all(&bytes).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn roundtrip(s: &mut TcpStream, msg: &[u8], within: Duration) -> Option<Vec<u8>> {
        s.write_all(msg).await.ok()?;
        let mut got = vec![0u8; msg.len()];
        match tokio::time::timeout(within, s.read_exact(&mut got)).await {
            Ok(Ok(_)) => Some(got),
            _ => None,
        }
    }

    #[tokio::test]
    async fn pass_delay_blackhole_partition_retarget() {
        let echo = echo_server().await;
        let p = Proxy::start(echo).await.expect("proxy");
        let mut s = TcpStream::connect(p.addr()).await.expect("connect");
        assert_eq!(
            roundtrip(&mut s, b"ping", Duration::from_secs(2))
                .await
                .as_deref(),
            Some(&b"ping"[..])
        );

        // Delay: a round trip crosses the proxy twice.
        p.set_mode(Mode::Delay(Duration::from_millis(100)));
        let t0 = std::time::Instant::now();
        assert!(roundtrip(&mut s, b"slow", Duration::from_secs(2))
            .await
            .is_some());
        assert!(
            t0.elapsed() >= Duration::from_millis(200),
            "delay not applied: {:?}",
            t0.elapsed()
        );

        // Blackhole: nothing comes back, the connection stays open.
        p.set_mode(Mode::Blackhole);
        assert_eq!(
            roundtrip(&mut s, b"lost", Duration::from_millis(300)).await,
            None
        );
        // End of the blackhole closes the stalled connection.
        p.set_mode(Mode::Pass);
        let mut buf = [0u8; 8];
        let r = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await;
        assert!(
            matches!(r, Ok(Ok(0)) | Ok(Err(_))),
            "stalled connection not closed: {r:?}"
        );

        // Partition: existing connections are closed, new ones too.
        let mut s2 = TcpStream::connect(p.addr()).await.expect("connect");
        assert!(roundtrip(&mut s2, b"ok", Duration::from_secs(2))
            .await
            .is_some());
        p.set_mode(Mode::Partition);
        let r = tokio::time::timeout(Duration::from_secs(2), s2.read(&mut buf)).await;
        assert!(
            matches!(r, Ok(Ok(0)) | Ok(Err(_))),
            "partition kept connection: {r:?}"
        );
        let mut s3 = TcpStream::connect(p.addr())
            .await
            .expect("connect (accepted, then closed)");
        assert_eq!(
            roundtrip(&mut s3, b"no", Duration::from_millis(500)).await,
            None
        );

        // Retarget to a second upstream while passing.
        p.set_mode(Mode::Pass);
        let echo2 = echo_server().await;
        p.retarget(echo2);
        let mut s4 = TcpStream::connect(p.addr()).await.expect("connect");
        assert_eq!(
            roundtrip(&mut s4, b"again", Duration::from_secs(2))
                .await
                .as_deref(),
            Some(&b"again"[..])
        );
    }
}
