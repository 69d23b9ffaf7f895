//! Acquires one lock on a backend, prints `ACQUIRED <fencing token>`, and holds it
//! (the watchdog renewing) until killed. Tests kill it with SIGKILL to check that a
//! crashed holder's lock comes free.

use std::io::Write;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use lock_core::prelude::*;
use lock_core::{LockBackend, LockClient, LockGuard};

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
    /// The backend: `memory` (in this process only; for trying the tool out).
    #[arg(long)]
    backend: String,
    /// The backend's URL, where it needs one.
    #[arg(long)]
    url: Option<String>,
    /// The namespace.
    #[arg(long, default_value = lock_core::DEFAULT_NAMESPACE)]
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

async fn hold<B: LockBackend>(backend: B, args: &Args) -> lock_core::Result<LockGuard> {
    let client = LockClient::builder(backend)
        .namespace(args.namespace.clone())
        .watchdog_lease(Duration::from_millis(args.watchdog_lease_ms))
        .build()?;
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
    let held = match args.backend.as_str() {
        "memory" if args.url.is_some() => {
            eprintln!("lock-holder: the memory backend takes no --url");
            std::process::exit(2);
        }
        "memory" => hold(lock_core::memory::MemoryBackend::new(), &args).await,
        other => {
            eprintln!("lock-holder: unknown backend {other:?}");
            std::process::exit(2);
        }
    };
    let guard = match held {
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
