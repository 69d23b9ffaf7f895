//! Acquires one lock, prints `ACQUIRED <fencing token>`, and holds it (the watchdog
//! renewing) until killed. Tests kill it with SIGKILL to check that a crashed
//! holder's lock comes free. With `--wait-ms`, it gives up after that long, prints
//! `TIMED_OUT` and exits with code 4 at once, as a program that ends right after a
//! timeout does. With `--shutdown`, once it holds the lock it starts waiting on the
//! exclusive lock `--queue-on` (if given), calls `shutdown` on its client, prints
//! `SHUT_DOWN` and exits with code 0 at once, as a program that ends cleanly does.
//! With `--release-after-ms`, it releases the lock that long after it got it, prints
//! `RELEASED` and stays, its client connected, until killed: what the release itself
//! tells other processes, not its connections' end.
//! With `--kind permit --permits N`, it holds a permit of the semaphore NAME of N; with
//! `--kind leader --value V`, the leadership of the election NAME, campaigning with V.
//!
//! ```text
//! lock-holder --url redis://127.0.0.1:6379 --namespace ns --name orders
//! ```

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use distributed_locks::{
    connect, AcquireOptions, ConnectOptions, DistributedLockExt, LockGuard, LockKind, LockProvider,
};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Kind {
    Exclusive,
    Fair,
    Read,
    Write,
    Permit,
    Leader,
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
    /// With `--kind permit`: the semaphore's count.
    #[arg(long, default_value_t = 1)]
    permits: u32,
    /// With `--kind leader`: the campaign's value.
    #[arg(long, default_value = "lock-holder")]
    value: String,
    /// The watchdog lease, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    watchdog_lease_ms: u64,
    /// Give up waiting after this many milliseconds (default: wait without limit).
    #[arg(long)]
    wait_ms: Option<u64>,
    /// Once the lock is held, shut the client down and exit.
    #[arg(long)]
    shutdown: bool,
    /// With `--shutdown`: first start waiting on this exclusive lock.
    #[arg(long)]
    queue_on: Option<String>,
    /// Release the lock this many milliseconds after getting it, and stay until killed.
    #[arg(long)]
    release_after_ms: Option<u64>,
}

async fn hold(args: &Args, client: &Arc<dyn LockProvider>) -> distributed_locks::Result<LockGuard> {
    let wait = match args.wait_ms {
        Some(ms) => AcquireOptions::wait_for(Duration::from_millis(ms)),
        None => AcquireOptions::wait_forever(),
    };
    let kind = match args.kind {
        Kind::Exclusive => LockKind::Exclusive,
        Kind::Fair => LockKind::Fair,
        Kind::Read => LockKind::Read,
        Kind::Write => LockKind::Write,
        Kind::Permit => LockKind::Permit,
        Kind::Leader => LockKind::Leader,
    };
    let name = args.name.as_str();
    conformance_tests::holder::take(&**client, name, kind, args.permits, &args.value, wait).await
}

/// Starts a wait on `queue_on`, then shuts the client down: the wait must end with
/// `Closed`, and the process exits at once.
async fn shut_down(client: Arc<dyn LockProvider>, queue_on: Option<&str>) -> ! {
    let waiter = queue_on.map(|name| {
        let lock = client.lock(name);
        tokio::spawn(async move { lock?.acquire().await.map(drop) })
    });
    if waiter.is_some() {
        // Time to queue; a wait not yet queued is ended just the same.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    if let Err(err) = client.shutdown().await {
        eprintln!("lock-holder: shutdown: {err}");
        std::process::exit(1);
    }
    if let Some(waiter) = waiter {
        match waiter.await {
            Ok(Err(distributed_locks::Error::Closed)) => {}
            other => {
                eprintln!("lock-holder: the wait did not end with Closed: {other:?}");
                std::process::exit(1);
            }
        }
    }
    println!("{}", conformance_tests::holder::SHUT_DOWN);
    let _ = std::io::stdout().flush();
    std::process::exit(0);
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let options = ConnectOptions::default()
        .namespace(args.namespace.clone())
        .watchdog_lease(Duration::from_millis(args.watchdog_lease_ms));
    let client = match connect(&args.url, options).await {
        Ok(client) => client,
        Err(err) => {
            eprintln!("lock-holder: {err}");
            std::process::exit(1);
        }
    };
    let guard = match hold(&args, &client).await {
        Ok(guard) => guard,
        Err(distributed_locks::Error::Timeout { .. }) => {
            println!("{}", conformance_tests::holder::TIMED_OUT);
            let _ = std::io::stdout().flush();
            std::process::exit(4);
        }
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
    if args.shutdown {
        shut_down(client, args.queue_on.as_deref()).await;
    }
    if let Some(ms) = args.release_after_ms {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        if let Err(err) = guard.release().await {
            eprintln!("lock-holder: release: {err}");
            std::process::exit(1);
        }
        // The test may have stopped reading.
        let _ = writeln!(std::io::stdout(), "{}", conformance_tests::holder::RELEASED);
        let _ = std::io::stdout().flush();
        let _keep = client;
        match std::future::pending::<std::convert::Infallible>().await {}
    }
    let loss = guard.lost().await;
    eprintln!("lock-holder: {loss}");
    std::process::exit(3);
}
