//! The library example from docs/client-readme.md (kept compiling here).
//! Run: cargo run -p redis-lease-client --example leader

use redis_lease_client::{Elector, ElectorConfig, RunOutcome};
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), redis_lease_client::LeaseError> {
    let config = ElectorConfig::new(
        "redis://10.0.0.5:6379/",
        "jobs/nightly-report",
        Duration::from_secs(10),
    );
    let mut elector = Elector::new(config)?;

    // resign() from elsewhere (e.g. on SIGTERM): stops the task, releases the lease, ends run().
    let handle = elector.handle();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        handle.resign();
    });

    let outcome = elector
        .run(|ctx| async move {
            // We lead now. ctx.token() is this reign's fencing token.
            loop {
                tokio::select! {
                    // Fires stop_budget (default ttl/5) before the local deadline: stop now.
                    _ = ctx.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {
                        // One step of work, carrying ctx.token() to the resource
                        // (e.g. inside LEASE.FENCE or a token column the resource checks).
                        // Without fencing, at least check before every step:
                        if !ctx.is_leader() { break; }
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
