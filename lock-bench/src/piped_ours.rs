//! This library with each worker a process of its own: the bench runs its own binary
//! as a worker (`--piped-worker URL NAME`), driven over a pipe with the
//! protocol of [`crate::peers`]' piped peers. Releases in one process and grants in
//! another show what crosses between processes (PostgreSQL's notifications, MariaDB's
//! doorbells, SQLite's polling), which workers of one process pass among themselves.

use std::time::{Duration, Instant};

use distributed_locks::prelude::*;
use distributed_locks::LockGuard;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::contender::BenchError;

/// Serves one worker on stdin and stdout until stdin closes.
pub async fn serve(url: &str, name: &str) -> Result<(), BenchError> {
    // The bench's run: every worker it started shares the lock.
    let namespace = format!("bench-{}", std::os::unix::process::parent_id());
    let provider = crate::ours::client(url, &namespace).await?;
    let lock = provider.lock(name)?;
    let mut out = tokio::io::stdout();
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut held: Option<LockGuard> = None;
    out.write_all(b"ok ready\n").await?;
    out.flush().await?;
    while let Some(line) = lines.next_line().await? {
        let words: Vec<&str> = line.split_whitespace().collect();
        let answer = match words.as_slice() {
            ["acquire"] => match lock.acquire().await {
                Ok(guard) => {
                    held = Some(guard);
                    "ok".to_owned()
                }
                Err(e) => format!("err {e}"),
            },
            ["release"] => match held.take() {
                Some(guard) => match guard.release().await {
                    Ok(()) => "ok".to_owned(),
                    Err(e) => format!("err {e}"),
                },
                None => "err release without a guard".to_owned(),
            },
            ["cycles", n] => match n.parse::<usize>() {
                Ok(n) => cycles(&*lock, n).await,
                Err(e) => format!("err {e}"),
            },
            _ => format!("err unknown command: {line}"),
        };
        out.write_all(format!("{answer}\n").as_bytes()).await?;
        out.flush().await?;
    }
    Ok(())
}

/// `n` uncontended cycles, each timed here, in microseconds.
async fn cycles(lock: &dyn DistributedLock, n: usize) -> String {
    let mut took = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let cycle = async { lock.acquire().await?.release().await };
        if let Err(e) = cycle.await {
            return format!("err {e}");
        }
        took.push(started.elapsed());
    }
    let us: Vec<String> = took
        .iter()
        .map(|d: &Duration| d.as_micros().to_string())
        .collect();
    format!("ok {}", us.join(" "))
}
