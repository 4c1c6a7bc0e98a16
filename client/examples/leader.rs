//! The library example from docs/client-readme.md (kept compiling here).
//! Run: cargo run -p redis-lease-client --example leader

use redis_lease_client::{Elector, ElectorConfig, ErrorKind, RunOutcome};
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = "redis://10.0.0.5:6379/";
    let config = ElectorConfig::new(url, "jobs/nightly-report", Duration::from_secs(10));
    let mut elector = Elector::new(config)?;
    // The application's own connection, for its writes (the elector keeps its own).
    let conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;

    // resign() from elsewhere (e.g. on SIGTERM): stops the task, releases the lease, ends run().
    let handle = elector.handle();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        handle.resign();
    });

    let outcome = elector
        .run(|ctx| {
            let mut conn = conn.clone();
            async move {
                // We lead now. ctx.token() is this reign's fencing token.
                let mut step = 0u64;
                loop {
                    tokio::select! {
                        // Fires stop_budget (default ttl/5) before the local deadline: stop now.
                        _ = ctx.cancelled() => break,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {
                            step += 1;
                            let value = step.to_string();
                            // A write into the same Redis, fenced (LEASE.FENCE): the server runs
                            // HSET only while ctx.token() is the live token, whenever it lands.
                            match ctx.fence(&mut conn, &["HSET", "report:state", "step", &value]).await {
                                Ok(_) => {}
                                // A newer reign holds the lease; nothing was written: stop.
                                Err(e) if e.kind == ErrorKind::Fenced => break,
                                Err(e) => eprintln!("write failed, retried next step: {e}"),
                            }
                            // Work that cannot be fenced: check right before each step.
                            if !ctx.is_leader() { break; }
                        }
                    }
                }
            }
        })
        .await?;
    match outcome {
        RunOutcome::Resigned => println!("resigned; lease released"),
        RunOutcome::TaskFinished(()) => println!("the task returned by itself; lease released"),
    }
    Ok(())
}
