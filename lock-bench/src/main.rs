//! Compares this library's locks with the floor and the peers on each server: the
//! same three measurements for all, run one after another on the same servers, then
//! a markdown table with ratios and two plots.
//!
//! ```text
//! cargo run --release -p lock-bench --all-features -- --start all
//! cargo run --release -p lock-bench --all-features -- --url redis://my-redis:6379
//! ```

mod allocated;
mod contender;
mod counting_proxy;
mod crowd;
mod held;
mod measured;
mod ours;
mod peers;
mod permits;
#[cfg(feature = "sql")]
mod piped_ours;
mod plots;
mod report;
mod scenarios;
mod servers;
mod stats;

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use contender::{BenchError, Contender};
use measured::{Measured, Target};

/// Compare lock implementations on real servers.
#[derive(Debug, Parser)]
struct Args {
    /// A server to bench at, by our URL (`memory://`, `redis://`, `postgres://`, ...).
    #[arg(long)]
    url: Vec<String>,
    /// Start a server for the run and bench it: redis, zookeeper, etcd, postgres,
    /// mysql, sqlite (the packages the tests use), or `all`.
    #[arg(long)]
    start: Vec<String>,
    /// Run started PostgreSQL and MariaDB with the tests' shortcuts (no sync at
    /// commit) instead of their default durability.
    #[arg(long)]
    fast_commits: bool,
    /// Uncontended acquire + release cycles per contender.
    #[arg(long, default_value_t = 2000)]
    iterations: usize,
    /// Workers in the contended run, each with its own connection.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Acquisitions per worker in the contended run.
    #[arg(long, default_value_t = 100)]
    cycles: usize,
    /// Runs of every measurement, taken in turns (each contender once per round, so
    /// drift on the machine falls on all alike); medians are reported with their
    /// range over the runs.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
    /// Only contenders whose name contains this, or one of these comma-separated
    /// words (e.g. `ours`, `advisory`, `ours,Semaphore`).
    #[arg(long)]
    only: Option<String>,
    /// Also hold this many locks with one client at each server, and report the
    /// client's heap per held lock and its watchdog's traffic per renewal tick.
    #[arg(long, default_value_t = 0)]
    held: usize,
    /// Count the heap allocations of the whole process (every thread: the caller's, the
    /// clients' connection tasks) over each contender's uncontended cycles, and print
    /// them per cycle (for contenders driven in this process). Counting costs every
    /// allocation two shared increments: read the times of such a run with that in
    /// mind.
    #[arg(long)]
    count_allocations: bool,
    /// Also pass one lock through this many waiting handles of one client at each
    /// server: each handoff's time and the waiting client's traffic per handoff.
    #[arg(long, default_value_t = 0)]
    crowd: usize,
    /// Also bench our semaphore with this many permits at each server that has
    /// semaphores, and the peers' where they run there (kazoo's `Semaphore` and
    /// Curator's `InterProcessSemaphoreV2` on ZooKeeper): the permit cycle, and
    /// `--permit-workers` clients contending.
    #[arg(long, default_value_t = 0)]
    permits: u32,
    /// Workers in the semaphore's contended run.
    #[arg(long, default_value_t = 16)]
    permit_workers: usize,
    /// Where to write `report.md`, `latency.svg` and `handoff.svg`.
    #[arg(long, default_value = "target/lock-bench")]
    out: PathBuf,
    /// Serve as one worker of `ours (a process per worker)` on stdin and stdout,
    /// taking the lock NAME at URL, instead of running the bench.
    #[arg(long, num_args = 2, value_names = ["URL", "NAME"], hide = true)]
    piped_worker: Option<Vec<String>>,
}

impl Args {
    /// Whether `--only` lets the contender `name` run.
    fn selects(&self, name: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.split(',').any(|word| name.contains(word)))
    }
}

/// A contender's run may not take longer than this.
const RUN_LIMIT: Duration = Duration::from_secs(300);

#[global_allocator]
static HEAP: allocated::Counting = allocated::Counting;

#[tokio::main]
async fn main() {
    let args = Args::parse();
    #[cfg(feature = "sql")]
    if let Some([url, name]) = args.piped_worker.as_deref() {
        if let Err(err) = piped_ours::serve(url, name).await {
            eprintln!("lock-bench worker: {err}");
            std::process::exit(1);
        }
        return;
    }
    if args.held > 0 {
        allocated::start_counting();
    }
    if args.count_allocations {
        allocated::count_per_cycle();
    }
    if let Err(err) = run(args).await {
        eprintln!("lock-bench: {err}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> Result<(), BenchError> {
    let mut started = Vec::new();
    for name in &args.start {
        let names: Vec<&str> = match name.as_str() {
            "all" => servers::NAMES.to_vec(),
            one => vec![one],
        };
        for name in names {
            eprintln!("lock-bench: starting {name}");
            started.push(servers::start(name, !args.fast_commits).await?);
        }
    }
    let mut urls = args.url.clone();
    urls.extend(started.iter().map(|s| s.url.clone()));
    if urls.is_empty() {
        urls.push("memory://".into());
    }
    let mut targets = Vec::new();
    for url in &urls {
        targets.push(bench(&args, url).await?);
    }
    let settings = format!(
        "{} run(s) of: {} uncontended cycles per lock; {} workers x {} cycles contended; \
         PostgreSQL and MariaDB {}.",
        args.runs,
        args.iterations,
        args.workers,
        args.cycles,
        if args.fast_commits {
            "without sync at commit"
        } else {
            "with their default durability"
        }
    );
    let report = report::markdown(&targets, &settings);
    println!("{report}");
    std::fs::create_dir_all(&args.out)?;
    std::fs::write(args.out.join("report.md"), &report)?;
    plots::write(&targets, &args.out)?;
    eprintln!(
        "lock-bench: wrote report.md, latency.svg and handoff.svg to {}",
        args.out.display()
    );
    Ok(())
}

/// Every contender at `url`, ours first.
async fn bench(args: &Args, url: &str) -> Result<Target, BenchError> {
    let ours = ours::Ours::new(url).await?;
    let mut contenders: Vec<Box<dyn Contender>> = vec![Box::new(ours)];
    if let Some(session) = ours::Ours::session(url).await? {
        contenders.push(Box::new(session));
    }
    #[cfg(feature = "sql")]
    if matches!(
        url.split("://").next().unwrap_or_default(),
        "postgres" | "postgresql" | "mysql" | "mariadb" | "sqlite"
    ) {
        // Whether a release in another process is told as one in this process is.
        contenders.extend(peers::Piped::ours(url).map(|c| Box::new(c) as Box<dyn Contender>));
    }
    contenders.extend(peers::for_url(url));
    let backend = url.split("://").next().unwrap_or(url).to_owned();
    let mut target = Target {
        backend,
        measured: Vec::new(),
        failed: Vec::new(),
        held: None,
        crowd: None,
        permits: Vec::new(),
    };
    contenders.retain(|contender| args.selects(&contender.name()));
    // Each contender's runs so far; `None` once one of its runs failed.
    let mut results: Vec<Option<Measured>> = vec![None; contenders.len()];
    let mut failed = vec![false; contenders.len()];
    for run in 1..=args.runs {
        for (i, contender) in contenders.iter().enumerate() {
            if failed[i] {
                continue;
            }
            let name = contender.name();
            eprintln!(
                "lock-bench: {} / {name} (run {run} of {})",
                target.backend, args.runs
            );
            let why = match tokio::time::timeout(RUN_LIMIT, measure(args, &**contender)).await {
                Ok(Ok(measured)) => {
                    match &mut results[i] {
                        Some(earlier) => earlier.absorb(measured),
                        slot => *slot = Some(measured),
                    }
                    continue;
                }
                Ok(Err(err)) => err.to_string(),
                Err(_) => format!("over {RUN_LIMIT:?}"),
            };
            failed[i] = true;
            results[i] = None;
            target.failed.push((name, format!("run {run}: {why}")));
        }
    }
    target.measured = results.into_iter().flatten().collect();
    if args.held > 0 {
        eprintln!(
            "lock-bench: {} / one client holding {}",
            target.backend, args.held
        );
        target.held = within_limit(
            "held locks",
            &mut target.failed,
            held::measure(url, args.held),
        )
        .await;
    }
    if args.crowd > 0 {
        eprintln!(
            "lock-bench: {} / a crowd of {} waiters",
            target.backend, args.crowd
        );
        target.crowd =
            within_limit("crowd", &mut target.failed, crowd::measure(url, args.crowd)).await;
    }
    if args.permits > 0 {
        eprintln!(
            "lock-bench: {} / a semaphore of {}",
            target.backend, args.permits
        );
        let mut semaphores: Vec<Box<dyn Contender>> =
            vec![Box::new(ours::Ours::semaphore(url, args.permits).await?)];
        semaphores.extend(peers::semaphores(url, args.permits));
        semaphores.retain(|semaphore| args.selects(&semaphore.name()));
        for semaphore in semaphores {
            let run = permits::measure(
                semaphore.as_ref(),
                args.permits,
                args.iterations,
                args.permit_workers,
                args.cycles,
            );
            let what = format!("{} semaphore", semaphore.name());
            if let Some(measured) = within_limit(&what, &mut target.failed, run).await {
                target.permits.push(measured);
            }
        }
    }
    Ok(target)
}

/// Runs one of the extra measurements within [`RUN_LIMIT`]; a failure is noted in
/// `failed` under `what`.
async fn within_limit<T>(
    what: &str,
    failed: &mut Vec<(String, String)>,
    run: impl std::future::Future<Output = Result<T, BenchError>>,
) -> Option<T> {
    let why = match tokio::time::timeout(RUN_LIMIT, run).await {
        Ok(Ok(measured)) => return Some(measured),
        Ok(Err(err)) => err.to_string(),
        Err(_) => format!("over {RUN_LIMIT:?}"),
    };
    failed.push((what.to_owned(), why));
    None
}

async fn measure(args: &Args, contender: &dyn Contender) -> Result<Measured, BenchError> {
    let cycle = scenarios::uncontended(contender, args.iterations).await?;
    let contended = scenarios::contended(contender, args.workers, args.cycles).await?;
    Ok(Measured::new(
        contender.name(),
        contender.role(),
        cycle,
        contended,
    ))
}
