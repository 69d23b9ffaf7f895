//! Prints latency tables for one lock backend: uncontended acquire + release, the
//! handoff between two clients, and the handoff distribution under contention.
//!
//! ```text
//! cargo run --release -p lock-bench --all-features -- --url memory://
//! cargo run --release -p lock-bench --all-features -- --start redis --start etcd
//! ```

mod scenarios;
mod servers;
mod stats;

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use distributed_locks::{connect, ConnectOptions, LockProvider};
use stats::{Micros, Samples};

/// Measure a lock backend.
#[derive(Debug, Parser)]
struct Args {
    /// The backend's URL (`memory://`, or any scheme enabled by features).
    #[arg(long)]
    url: Vec<String>,
    /// Start a server for the run and bench it: redis, zookeeper, etcd, postgres,
    /// mysql, sqlite (the packages the tests use), or `all`.
    #[arg(long)]
    start: Vec<String>,
    /// Uncontended acquire + release iterations.
    #[arg(long, default_value_t = 2000)]
    iterations: usize,
    /// Handoffs between two clients.
    #[arg(long, default_value_t = 200)]
    handoffs: usize,
    /// Workers in the contended run.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Acquisitions per worker in the contended run.
    #[arg(long, default_value_t = 100)]
    cycles: usize,
}

fn row(name: &str, s: &Samples) {
    println!(
        "| {name} | {} | {} | {} | {} | {} |",
        s.len(),
        Micros(s.percentile(50.0)),
        Micros(s.percentile(90.0)),
        Micros(s.percentile(99.0)),
        Micros(s.max())
    );
}

async fn client(url: &str, namespace: &str) -> Arc<dyn LockProvider> {
    let options = ConnectOptions::default()
        .namespace(namespace)
        .watchdog_lease(Duration::from_secs(30));
    match connect(url, options).await {
        Ok(client) => client,
        Err(err) => {
            eprintln!("lock-bench: {url}: {err}");
            std::process::exit(1);
        }
    }
}

#[tokio::main]
async fn main() -> distributed_locks::Result<()> {
    let args = Args::parse();
    let mut started = Vec::new();
    for name in &args.start {
        let names: Vec<&str> = match name.as_str() {
            "all" => servers::NAMES.to_vec(),
            one => vec![one],
        };
        for name in names {
            eprintln!("lock-bench: starting {name}");
            match servers::start(name).await {
                Ok(server) => started.push(server),
                Err(err) => {
                    eprintln!("lock-bench: {err}");
                    std::process::exit(1);
                }
            }
        }
    }
    let mut urls = args.url.clone();
    urls.extend(started.iter().map(|s| s.url.clone()));
    if urls.is_empty() {
        urls.push("memory://".into());
    }
    for url in &urls {
        bench(&args, url).await?;
        println!();
    }
    Ok(())
}

async fn bench(args: &Args, url: &str) -> distributed_locks::Result<()> {
    let namespace = format!("bench-{}", std::process::id());
    // In-memory backends are per connect() call: share one client there.
    let shared = url.starts_with("memory:");
    let first = client(url, &namespace).await;
    let mut clients = vec![first.clone()];
    for _ in 1..args.workers.max(2) {
        clients.push(if shared {
            first.clone()
        } else {
            client(url, &namespace).await
        });
    }
    println!("## backend `{}` at {url}", first.backend_name());
    println!();
    println!("| scenario | samples | p50 (us) | p90 (us) | p99 (us) | max (us) |");
    println!("|---|---|---|---|---|---|");
    let [acquire, release, both] = scenarios::uncontended(&*first, args.iterations).await?;
    row("uncontended acquire", &acquire);
    row("uncontended release", &release);
    row("uncontended acquire + release", &both);
    let handoff = scenarios::handoff(&*clients[0], &*clients[1], args.handoffs).await?;
    row("handoff, 2 clients", &handoff);
    let refs: Vec<&dyn LockProvider> = clients.iter().take(args.workers).map(|c| &**c).collect();
    let contended = scenarios::contended(&refs, args.cycles).await?;
    row(
        &format!("handoff, {} clients contending", refs.len()),
        &contended,
    );
    println!();
    println!(
        "contended handoffs over 20 ms: {} of {}",
        contended.over(Duration::from_millis(20)),
        contended.len()
    );
    Ok(())
}
