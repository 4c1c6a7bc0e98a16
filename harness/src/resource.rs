//! The protected resource: the thing a leader exists to write to.
//!
//! It enforces fencing the way a real store would (a storage service comparing a token column,
//! an object store with a conditional put): a write carries the writer's lease token and is
//! accepted only if that token is >= the highest token accepted so far. Every decision is
//! appended to `resource.jsonl` under the same lock that makes it, so the file order is the
//! order in which the resource's state changed.
//!
//! `fence = false` turns the check off (a resource that cannot fence): the negative control
//! that lets the checker prove it catches a stale write being accepted.
//!
//! # Format (one line per request, loopback TCP)
//! `W <token> <writer> <seq>\n` -> `OK\n` | `FENCED <highest>\n` | `ERR <why>\n`

use crate::clock::mono_ns;
use crate::history::{JsonlWriter, ResourceWrite};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

pub struct Resource {
    fence: bool,
    state: Mutex<State>,
}

struct State {
    highest: u64,
    log: JsonlWriter,
}

impl Resource {
    pub fn new(log: JsonlWriter, fence: bool) -> Arc<Resource> {
        Arc::new(Resource {
            fence,
            state: Mutex::new(State { highest: 0, log }),
        })
    }

    /// Decide on one write and record the decision. Returns (accepted, highest before).
    pub fn write(&self, token: u64, writer: &str, seq: u64) -> (bool, u64) {
        // A poisoned lock means a thread panicked mid-decision; keep going with the state as
        // it is rather than losing the rest of the history.
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let highest = st.highest;
        let accepted = !self.fence || token >= highest;
        if accepted && token > st.highest {
            st.highest = token;
        }
        let rec = ResourceWrite {
            t: mono_ns(),
            writer: writer.to_string(),
            token,
            seq,
            accepted,
            highest,
        };
        if let Err(e) = st.log.write(&rec) {
            eprintln!("resource: cannot record write: {e}");
        }
        (accepted, highest)
    }
}

/// Serve until the listener fails (the process is ended by a signal).
pub async fn serve(listener: TcpListener, res: Arc<Resource>) -> std::io::Result<()> {
    loop {
        let (sock, _) = listener.accept().await?;
        let _ = sock.set_nodelay(true);
        let res = res.clone();
        tokio::spawn(async move {
            if let Err(e) = handle(sock, res).await {
                eprintln!("resource: connection ended: {e}");
            }
        });
    }
}

async fn handle(sock: TcpStream, res: Arc<Resource>) -> std::io::Result<()> {
    let (rd, mut wr) = sock.into_split();
    let mut lines = BufReader::new(rd).lines();
    while let Some(line) = lines.next_line().await? {
        let reply = match parse(&line) {
            Ok((token, writer, seq)) => match res.write(token, writer, seq) {
                (true, _) => "OK\n".to_string(),
                (false, highest) => format!("FENCED {highest}\n"),
            },
            Err(e) => format!("ERR {e}\n"),
        };
        wr.write_all(reply.as_bytes()).await?;
    }
    Ok(())
}

fn parse(line: &str) -> Result<(u64, &str, u64), &'static str> {
    let mut it = line.split_ascii_whitespace();
    if it.next() != Some("W") {
        return Err("expected W");
    }
    let token = it.next().and_then(|s| s.parse().ok()).ok_or("bad token")?;
    let writer = it.next().ok_or("missing writer")?;
    let seq = it.next().and_then(|s| s.parse().ok()).ok_or("bad seq")?;
    if it.next().is_some() {
        return Err("trailing arguments");
    }
    Ok((token, writer, seq))
}

/// Client side, used by the electors: one connection, one request at a time.
pub struct ResourceClient {
    rd: tokio::io::Lines<BufReader<tokio::net::tcp::OwnedReadHalf>>,
    wr: tokio::net::tcp::OwnedWriteHalf,
}

#[derive(Debug, PartialEq, Eq)]
pub enum WriteResult {
    Ok,
    Fenced(u64),
}

impl ResourceClient {
    pub async fn connect(addr: &str) -> std::io::Result<ResourceClient> {
        let sock = TcpStream::connect(addr).await?;
        sock.set_nodelay(true)?;
        let (rd, wr) = sock.into_split();
        Ok(ResourceClient {
            rd: BufReader::new(rd).lines(),
            wr,
        })
    }

    pub async fn write(
        &mut self,
        token: u64,
        writer: &str,
        seq: u64,
    ) -> std::io::Result<WriteResult> {
        self.wr
            .write_all(format!("W {token} {writer} {seq}\n").as_bytes())
            .await?;
        let line = self.rd.next_line().await?.ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "resource closed")
        })?;
        if line == "OK" {
            Ok(WriteResult::Ok)
        } else if let Some(h) = line.strip_prefix("FENCED ") {
            Ok(WriteResult::Fenced(h.parse().unwrap_or(0)))
        } else {
            Err(std::io::Error::other(format!("resource: {line}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::read_jsonl;

    #[tokio::test]
    async fn fencing_rejects_lower_token_and_records_every_decision() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("resource.jsonl");
        let res = Resource::new(JsonlWriter::create(&path).expect("log"), true);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        tokio::spawn(serve(listener, res));
        let mut c = ResourceClient::connect(&addr).await.expect("connect");
        assert_eq!(c.write(5, "a", 1).await.expect("w"), WriteResult::Ok);
        assert_eq!(c.write(7, "b", 1).await.expect("w"), WriteResult::Ok);
        assert_eq!(c.write(5, "a", 2).await.expect("w"), WriteResult::Fenced(7));
        assert_eq!(c.write(7, "b", 2).await.expect("w"), WriteResult::Ok);
        let log: Vec<ResourceWrite> = read_jsonl(&path).expect("read");
        let got: Vec<(u64, bool)> = log.iter().map(|w| (w.token, w.accepted)).collect();
        assert_eq!(got, vec![(5, true), (7, true), (5, false), (7, true)]);
    }

    #[test]
    fn without_fencing_everything_is_accepted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let res = Resource::new(
            JsonlWriter::create(&dir.path().join("r")).expect("log"),
            false,
        );
        assert_eq!(res.write(9, "a", 1), (true, 0));
        assert_eq!(res.write(3, "b", 1), (true, 9));
    }

    #[test]
    fn malformed_requests_are_refused() {
        assert!(parse("W 1 a 2").is_ok());
        assert!(parse("W x a 2").is_err());
        assert!(parse("X 1 a 2").is_err());
        assert!(parse("W 1 a").is_err());
        assert!(parse("W 1 a 2 3").is_err());
    }
}
