//! Drives the `lock-holder` binary: a lock holder in another process, to kill.

use std::process::Stdio;
use std::time::Duration;

use lock_core::{
    AcquireOptions, DistributedLock, Election, LockGuard, LockKind, LockProvider, ReadWriteLock,
    Semaphore,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};

/// The line the holder prints once it holds the lock, followed by the fencing token.
pub const ACQUIRED: &str = "ACQUIRED";

/// What the holder prints when it gave up waiting (`--wait-ms`).
pub const TIMED_OUT: &str = "TIMED_OUT";

/// What the holder prints when its client was shut down (`--shutdown`).
pub const SHUT_DOWN: &str = "SHUT_DOWN";

/// What the holder prints once it released the lock (`--release-after-ms`).
pub const RELEASED: &str = "RELEASED";

/// Takes the lock `name` of `kind` from `provider` with `options`: for a permit, of the
/// semaphore of `permits`; for leadership, of the election, campaigning with `value`.
///
/// # Errors
/// The acquire's error, or the handle's (a bad name).
pub async fn take(
    provider: &dyn LockProvider,
    name: &str,
    kind: LockKind,
    permits: u32,
    value: &str,
    options: AcquireOptions,
) -> lock_core::Result<LockGuard> {
    match kind {
        LockKind::Exclusive => provider.lock(name)?.acquire_with(options).await,
        LockKind::Fair => provider.fair_lock(name)?.acquire_with(options).await,
        LockKind::Read => provider.rw_lock(name)?.read_with(options).await,
        LockKind::Write => provider.rw_lock(name)?.write_with(options).await,
        LockKind::Permit => {
            let semaphore = provider.semaphore(name, permits)?;
            semaphore.acquire_with(options).await
        }
        LockKind::Leader => {
            let election = provider.election(name)?;
            let leadership = election.campaign_with(value, options).await?;
            Ok(leadership.into_guard())
        }
    }
}

/// A running `lock-holder` process that holds a lock. Killed when dropped.
#[derive(Debug)]
pub struct HolderProcess {
    child: Child,
    fence: u64,
}

impl HolderProcess {
    /// Starts `command` and waits until it reports holding the lock.
    ///
    /// # Errors
    /// The process's stderr if it exits first, or a timeout.
    pub async fn start(mut command: Command, limit: Duration) -> Result<Self, String> {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|e| format!("spawn {command:?}: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let fence = tokio::time::timeout(limit, async {
            while let Some(line) = lines.next_line().await.map_err(|e| e.to_string())? {
                if let Some(fence) = line.strip_prefix(ACQUIRED) {
                    return fence
                        .trim()
                        .parse::<u64>()
                        .map_err(|e| format!("bad line {line:?}: {e}"));
                }
            }
            Err("exited before acquiring".to_owned())
        })
        .await
        .map_err(|_| format!("no {ACQUIRED} line within {limit:?}"))?;
        match fence {
            Ok(fence) => Ok(HolderProcess { child, fence }),
            Err(err) => {
                let _ = child.start_kill();
                let mut stderr = String::new();
                if let Some(mut pipe) = child.stderr.take() {
                    let _ = tokio::time::timeout(
                        Duration::from_secs(5),
                        pipe.read_to_string(&mut stderr),
                    )
                    .await;
                }
                Err(format!("{err}; stderr: {}", stderr.trim()))
            }
        }
    }

    /// The fencing token the holder got.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// The process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Kills the process with SIGKILL (no chance to release) and reaps it.
    pub async fn kill(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}
