//! Acquires one lock, prints `ACQUIRED <fencing token>`, and holds it (the watchdog
//! renewing) until killed. Tests kill it with SIGKILL to check that a crashed
//! holder's lock comes free.
//!
//! ```text
//! lock-holder --url redis://127.0.0.1:6379 --namespace ns --name orders
//! ```

use std::io::Write;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use distributed_locks::prelude::*;
use distributed_locks::{connect, ConnectOptions, LockGuard};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Kind {
    Exclusive,
    Fair,
    Read,
    Write,
}

/// Hold a distributed lock until killed.
#[derive(Debug, Parser)]
struct Args {
    /// The backend's URL (`memory://` holds a lock inside this process only).
    #[arg(long)]
    url: String,
    /// The namespace.
    #[arg(long, default_value = distributed_locks::DEFAULT_NAMESPACE)]
    namespace: String,
    /// The lock's name.
    #[arg(long)]
    name: String,
    /// Which lock to take.
    #[arg(long, value_enum, default_value = "exclusive")]
    kind: Kind,
    /// The watchdog lease, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    watchdog_lease_ms: u64,
}

async fn hold(args: &Args) -> distributed_locks::Result<LockGuard> {
    let options = ConnectOptions::default()
        .namespace(args.namespace.clone())
        .watchdog_lease(Duration::from_millis(args.watchdog_lease_ms));
    let client = connect(&args.url, options).await?;
    match args.kind {
        Kind::Exclusive => client.lock(&args.name)?.acquire().await,
        Kind::Fair => client.fair_lock(&args.name)?.acquire().await,
        Kind::Read => client.rw_lock(&args.name)?.read().await,
        Kind::Write => client.rw_lock(&args.name)?.write().await,
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let guard = match hold(&args).await {
        Ok(guard) => guard,
        Err(err) => {
            eprintln!("lock-holder: {err}");
            std::process::exit(1);
        }
    };
    println!(
        "{} {}",
        conformance_tests::holder::ACQUIRED,
        guard.fencing_token()
    );
    let _ = std::io::stdout().flush();
    let loss = guard.lost().await;
    eprintln!("lock-holder: {loss}");
    std::process::exit(3);
}
