//! Fault-injecting TCP proxy between one elector and Redis.
//!
//! Every elector connects to Redis through its own proxy, so a fault can hit one elector
//! (the leader, typically) and not the others, and a promotion can move every elector to the
//! new primary without the client library knowing about replicas.
//!
//! Modes, modelled on what a real network does to a TCP connection:
//! - `Pass`: bytes flow.
//! - `Delay(d)`: every chunk is delivered `d` after it was read, in order (a slow link).
//! - `Late { hold, commands }`: every client command named in `commands` (RESP is parsed just
//!   enough to name each command) is delivered to Redis `hold` after the client sent it, and
//!   everything the client sent after it on that connection waits behind it (TCP keeps order
//!   per connection). Lost and retransmitted segments do this to a real connection: the
//!   client gives up on its command, the server still executes it later.
//! - `Blackhole`: nothing is read or delivered (TCP stalls: the peer's writes fill buffers,
//!   its reads hang); new connections are accepted and then stall too. When the blackhole
//!   ends every connection is closed, as a connection that timed out in an outage would be.
//! - `Partition`: every connection is closed at once and new ones are closed on accept
//!   (connection refused/reset).
//!
//! Real-TCP delivery (every mode): bytes the client wrote before closing its side are still
//! delivered to Redis, in order, and only then is Redis's side half-closed (a FIN follows
//! the data, as the kernel does after `close()`). The proxy used to drop whatever it still
//! queued when the client closed, which hid every "abandoned command executes later" bug
//! (issue 23: a RELEASE abandoned on timeout freed the next reign). Replies to a client that
//! is gone are read and discarded. Only `Partition`, `Blackhole`'s end and `retarget` (a
//! reset, a dead path, a failover) drop queued bytes.
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
    /// Hold the client's `commands` for `hold` each (and what follows them, in order).
    Late {
        hold: Duration,
        commands: Held,
    },
    Blackhole,
    Partition,
}

/// The client commands [`Mode::Late`] holds back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    pub acquire: bool,
    pub renew: bool,
    pub release: bool,
    /// `LEASE.RAISE` (quorum mode's second step).
    pub raise: bool,
}

impl Held {
    /// Whether a command named `name` (as sent, any case) is held.
    pub fn holds(&self, name: &[u8]) -> bool {
        (self.acquire && name.eq_ignore_ascii_case(b"LEASE.ACQUIRE"))
            || (self.renew && name.eq_ignore_ascii_case(b"LEASE.RENEW"))
            || (self.release && name.eq_ignore_ascii_case(b"LEASE.RELEASE"))
            || (self.raise && name.eq_ignore_ascii_case(b"LEASE.RAISE"))
    }

    /// `ACQUIRE,RENEW,RELEASE` (the ones held), for fault records.
    pub fn names(&self) -> String {
        [
            (self.acquire, "ACQUIRE"),
            (self.renew, "RENEW"),
            (self.release, "RELEASE"),
            (self.raise, "RAISE"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, n)| *n)
        .collect::<Vec<_>>()
        .join(",")
    }
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
        Proxy::start_on(std::net::Ipv4Addr::LOCALHOST.into(), upstream).await
    }

    /// Listen on a free port of `ip` (`--netns`: the harness side of an elector's veth link)
    /// and forward to `upstream`.
    pub async fn start_on(ip: std::net::IpAddr, upstream: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind(SocketAddr::new(ip, 0)).await?;
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

    pub fn upstream(&self) -> SocketAddr {
        self.ctl.borrow().upstream
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

/// Quorum mode: re-points one elector's proxies (one per node) so that the k-th smallest
/// URL leads to node k, and orders them by node. Why: followers wait on the node with the
/// smallest URL (client-protocol.md Q10), which the protocol takes to be the same node for
/// every elector; with proxy ports drawn at random each elector picked its own. Call before
/// anything connects (re-pointing drops connections).
pub fn line_up(
    proxies: &mut [Proxy],
    url: impl Fn(SocketAddr) -> String,
    node: impl Fn(usize) -> SocketAddr,
) {
    proxies.sort_by_key(|p| url(p.addr()));
    for (k, p) in proxies.iter().enumerate() {
        p.retarget(node(k));
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
        Mode::Pass | Mode::Delay(_) | Mode::Late { .. } => {}
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
    let (tx_up, q_up) = mpsc::unbounded_channel();
    let (tx_down, q_down) = mpsc::unbounded_channel();
    let (rx_up, rx_down) = (rx.clone(), rx.clone());
    let to_redis = async move {
        tokio::join!(
            reader(cr, tx_up, rx_up, Some(Splitter::default())),
            writer(uw, q_up, Direction::ToRedis)
        )
    };
    let to_client = async move {
        tokio::join!(
            reader(ur, tx_down, rx_down, None),
            writer(cw, q_down, Direction::ToClient)
        )
    };
    tokio::pin!(to_redis, to_client);
    // Real TCP: the client closing its side ends the client->Redis direction only after every
    // byte it wrote was delivered (then Redis gets a FIN). Redis closing (or the path to it
    // breaking) ends everything: nothing more can be delivered.
    tokio::select! {
        _ = epoch_over(&mut rx, epoch) => return,
        _ = &mut to_client => return,
        _ = &mut to_redis => {}
    }
    // Redis answers the FIN by closing; bounded in case it does not.
    tokio::select! {
        _ = epoch_over(&mut rx, epoch) => {},
        _ = &mut to_client => {},
        _ = tokio::time::sleep(Duration::from_secs(10)) => {},
    }
}

/// Splits the client's byte stream into whole commands (RESP arrays of bulk strings), so
/// that `Mode::Late` can name each one. Anything it cannot parse turns
/// it off for the rest of the connection (bytes then flow as they come, unnamed): a test
/// proxy must never break a connection it does not understand.
#[derive(Default)]
struct Splitter {
    buf: Vec<u8>,
    raw: bool,
}

/// One piece of the client's stream: its bytes and, for a whole command, its name.
type Piece = (Vec<u8>, Option<Vec<u8>>);

enum Parsed {
    Whole { len: usize, name: Option<Vec<u8>> },
    Partial,
    Bad,
}

/// `\r\n`-terminated line at `at`: (the line without its terminator, index after it).
fn line(b: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = b.get(at..)?;
    let i = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..i], at + i + 2))
}

fn int_of(b: &[u8]) -> Option<i64> {
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// Longest header line we wait for (`*<n>` / `$<len>`); longer is not RESP from a client.
const MAX_HEADER: usize = 32;
/// Largest bulk string we follow (Redis's own proto-max-bulk-len default).
const MAX_BULK: i64 = 512 * 1024 * 1024;

fn parse_one(b: &[u8]) -> Parsed {
    let Some(&first) = b.first() else {
        return Parsed::Partial;
    };
    if first != b'*' {
        // Not a RESP array: no client library sends inline commands, so this is not a
        // Redis client (or not one we understand). Pass it on as it comes.
        return Parsed::Bad;
    }
    let Some((head, mut at)) = line(b, 1) else {
        return if b.len() > MAX_HEADER {
            Parsed::Bad
        } else {
            Parsed::Partial
        };
    };
    let Some(n) = int_of(head) else {
        return Parsed::Bad;
    };
    if n <= 0 {
        return Parsed::Whole {
            len: at,
            name: None,
        };
    }
    if n > 1024 * 1024 {
        return Parsed::Bad;
    }
    let mut name = None;
    for i in 0..n {
        match b.get(at) {
            None => return Parsed::Partial,
            Some(b'$') => {}
            Some(_) => return Parsed::Bad,
        }
        let Some((head, body)) = line(b, at + 1) else {
            return if b.len() - at > MAX_HEADER {
                Parsed::Bad
            } else {
                Parsed::Partial
            };
        };
        let len = match int_of(head) {
            Some(l) if (0..=MAX_BULK).contains(&l) => l as usize,
            _ => return Parsed::Bad,
        };
        let end = body + len;
        if b.len() < end + 2 {
            return Parsed::Partial;
        }
        if &b[end..end + 2] != b"\r\n" {
            return Parsed::Bad;
        }
        if i == 0 {
            name = Some(b[body..end].to_vec());
        }
        at = end + 2;
    }
    Parsed::Whole { len: at, name }
}

impl Splitter {
    /// Bytes of an unfinished command (at the end of the stream).
    fn rest(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }

    /// Feed what was read; returns the pieces that can be forwarded now, in order.
    fn feed(&mut self, bytes: &[u8]) -> Vec<Piece> {
        if self.raw {
            return vec![(bytes.to_vec(), None)];
        }
        self.buf.extend_from_slice(bytes);
        let mut out = vec![];
        loop {
            match parse_one(&self.buf) {
                Parsed::Whole { len, name } => {
                    let rest = self.buf.split_off(len);
                    out.push((std::mem::replace(&mut self.buf, rest), name));
                }
                Parsed::Partial => break,
                Parsed::Bad => {
                    self.raw = true;
                    out.push((std::mem::take(&mut self.buf), None));
                    break;
                }
            }
        }
        out
    }
}

async fn reader(
    mut r: tokio::net::tcp::OwnedReadHalf,
    tx: mpsc::UnboundedSender<(Instant, Vec<u8>)>,
    mut rx: watch::Receiver<Ctl>,
    mut splitter: Option<Splitter>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    // Delivery times only grow: TCP delivers in order, so a byte waits behind a held one.
    let mut last_due = Instant::now();
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
                // A command the client did not finish is still delivered as far as it got.
                if let Some(rest) = splitter.as_mut().map(Splitter::rest) {
                    if !rest.is_empty() {
                        let _ = tx.send((last_due, rest));
                    }
                }
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
        let mode = rx.borrow().mode;
        let pieces = match splitter.as_mut() {
            Some(s) => s.feed(&buf[..n]),
            None => vec![(buf[..n].to_vec(), None)],
        };
        for (bytes, name) in pieces {
            let due = match (mode, &name) {
                (Mode::Delay(d), _) => now + d,
                (Mode::Late { hold, commands }, Some(name)) if commands.holds(name) => now + hold,
                _ => now,
            };
            last_due = last_due.max(due);
            if tx.send((last_due, bytes)).is_err() {
                return;
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// Client -> Redis: once the client closed and the queue is empty, half-close Redis's
    /// side (the FIN after the data).
    ToRedis,
    /// Redis -> client: a client that is gone cannot take replies; they are read and
    /// dropped, so the other direction keeps delivering.
    ToClient,
}

async fn writer(
    mut w: tokio::net::tcp::OwnedWriteHalf,
    mut q: mpsc::UnboundedReceiver<(Instant, Vec<u8>)>,
    dir: Direction,
) {
    let mut broken = false;
    while let Some((due, bytes)) = q.recv().await {
        if broken {
            continue;
        }
        // No timer when nothing is delayed: a tokio timer rounds up to the next millisecond
        // tick, which would add ~1 ms per hop to every hand-over we measure.
        if due > Instant::now() {
            tokio::time::sleep_until(due).await;
        }
        if w.write_all(&bytes).await.is_err() {
            match dir {
                Direction::ToRedis => return,
                Direction::ToClient => broken = true,
            }
        }
    }
    if dir == Direction::ToRedis {
        let _ = w.shutdown().await;
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

    /// An upstream that records what each connection delivered, with the arrival time of
    /// each read, until the connection's EOF.
    async fn recording_server() -> (SocketAddr, mpsc::UnboundedReceiver<Vec<(Instant, Vec<u8>)>>) {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut got = vec![];
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        got.push((Instant::now(), buf[..n].to_vec()));
                    }
                    let _ = tx.send(got);
                });
            }
        });
        (addr, rx)
    }

    fn resp(words: &[&str]) -> Vec<u8> {
        let mut v = format!("*{}\r\n", words.len()).into_bytes();
        for w in words {
            v.extend(format!("${}\r\n{w}\r\n", w.len()).into_bytes());
        }
        v
    }

    #[test]
    fn splitter_names_whole_commands_across_reads() {
        let renew = resp(&["LEASE.RENEW", "k", "o", "7", "1000"]);
        let ping = resp(&["PING"]);
        let mut all = renew.clone();
        all.extend(&ping);
        // Byte by byte: pieces come out whole, named, in order.
        let mut s = Splitter::default();
        let mut pieces = vec![];
        for b in &all {
            pieces.extend(s.feed(std::slice::from_ref(b)));
        }
        let names: Vec<Option<Vec<u8>>> = pieces.iter().map(|p| p.1.clone()).collect();
        assert_eq!(
            names,
            vec![Some(b"LEASE.RENEW".to_vec()), Some(b"PING".to_vec())]
        );
        assert_eq!(
            pieces.iter().flat_map(|p| p.0.clone()).collect::<Vec<u8>>(),
            all
        );
        // Not RESP: passed on unnamed, and the rest of the connection too.
        let mut s = Splitter::default();
        let bad = s.feed(b"*x\r\n");
        assert_eq!(bad, vec![(b"*x\r\n".to_vec(), None)]);
        assert_eq!(s.feed(&renew), vec![(renew.clone(), None)]);
        assert!(Held {
            renew: true,
            ..Held::default()
        }
        .holds(b"lease.renew"));
        assert!(!Held {
            release: true,
            ..Held::default()
        }
        .holds(b"LEASE.RENEW"));
    }

    /// Would catch: proxies left in the order their random ports came (each elector then
    /// picks its own wait node, Q10). Ports "1000" < "999" as URLs: string order, as clients sort.
    #[tokio::test]
    async fn lined_up_proxies_lead_the_smallest_url_to_node_0() {
        let nodes: Vec<SocketAddr> = (0..5)
            .map(|k| SocketAddr::from(([127, 0, 0, 1], 7200 + k)))
            .collect();
        for _ in 0..5 {
            let mut ps = vec![];
            for n in &nodes {
                ps.push(Proxy::start(*n).await.expect("proxy"));
            }
            let url = |a: SocketAddr| format!("redis://{a}/");
            line_up(&mut ps, url, |k| nodes[k]);
            let urls: Vec<String> = ps.iter().map(|p| url(p.addr())).collect();
            let mut sorted = urls.clone();
            sorted.sort();
            assert_eq!(urls, sorted);
            for (k, p) in ps.iter().enumerate() {
                assert_eq!(p.upstream(), nodes[k]);
            }
        }
    }

    /// Real TCP: what the client wrote before closing still reaches Redis, in order, a held
    /// command `hold` late and whatever followed it behind it; then Redis sees the EOF.
    #[tokio::test]
    async fn late_commands_are_delivered_after_the_client_closed() {
        let (up, mut conns) = recording_server().await;
        let p = Proxy::start(up).await.expect("proxy");
        let hold = Duration::from_millis(300);
        p.set_mode(Mode::Late {
            hold,
            commands: Held {
                release: true,
                ..Held::default()
            },
        });
        let mut s = TcpStream::connect(p.addr()).await.expect("connect");
        let ping = resp(&["PING"]);
        let release = resp(&["LEASE.RELEASE", "k", "o#1", "7"]);
        let get = resp(&["LEASE.GET", "k"]);
        let t0 = Instant::now();
        s.write_all(&ping).await.expect("write");
        s.write_all(&release).await.expect("write");
        s.write_all(&get).await.expect("write");
        drop(s); // the client gives up and closes at once
        let got = tokio::time::timeout(Duration::from_secs(5), conns.recv())
            .await
            .expect("upstream connection ended")
            .expect("recorded");
        let bytes: Vec<u8> = got.iter().flat_map(|g| g.1.clone()).collect();
        let mut want = ping.clone();
        want.extend(&release);
        want.extend(&get);
        assert_eq!(bytes, want, "everything delivered, in order");
        let first = got.first().expect("data");
        assert!(first.0 - t0 < hold, "the unheld PING went at once");
        let at_release = got
            .iter()
            .find(|g| g.1.windows(13).any(|w| w == b"LEASE.RELEASE"))
            .expect("release delivered");
        assert!(
            at_release.0 - t0 >= hold,
            "RELEASE held: {:?}",
            at_release.0 - t0
        );
    }

    /// A delayed chunk of a closed client is delivered too (the old proxy dropped it).
    #[tokio::test]
    async fn delayed_bytes_survive_the_client_close() {
        let (up, mut conns) = recording_server().await;
        let p = Proxy::start(up).await.expect("proxy");
        p.set_mode(Mode::Delay(Duration::from_millis(200)));
        let mut s = TcpStream::connect(p.addr()).await.expect("connect");
        s.write_all(b"abc").await.expect("write");
        drop(s);
        let got = tokio::time::timeout(Duration::from_secs(5), conns.recv())
            .await
            .expect("upstream connection ended")
            .expect("recorded");
        let bytes: Vec<u8> = got.iter().flat_map(|g| g.1.clone()).collect();
        assert_eq!(bytes, b"abc");
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
