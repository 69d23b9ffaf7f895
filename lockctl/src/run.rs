//! `lockctl run`: hold a lock around a command.

use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Instant;

use distributed_locks::{AcquireOptions, Error, LeaseLoss, LockGuard, LockProvider};
use serde_json::json;
use tokio::process::{Child, Command};

use crate::cli::RunArgs;
use crate::events::Reporter;
use crate::exit::{self, Failure};
use crate::signals::{self, Signals, SIGKILL, SIGTERM};

/// Acquires, runs the command, releases; returns the exit code.
pub(crate) async fn run(
    client: Arc<dyn LockProvider>,
    args: RunArgs,
    reporter: Reporter,
    mut signals: Signals,
) -> Result<u8, Failure> {
    let lock = client.lock(&args.name)?;
    let mut options = match (args.no_wait, args.wait) {
        (true, _) => AcquireOptions::try_once(),
        (false, Some(limit)) => AcquireOptions::wait_for(limit),
        (false, None) => AcquireOptions::wait_forever(),
    };
    if let Some(lease) = args.lease {
        options = options.lease(lease);
    }
    let started = Instant::now();
    let progress = reporter.progress("waiting for");
    let acquired = tokio::select! {
        acquired = lock.acquire_with(options) => acquired,
        // Given up while waiting: dropping the acquire leaves nothing held or queued.
        caught = signals.next() => return Ok(exit::for_signal(caught.number())),
    };
    drop(progress);
    let guard = match acquired {
        Ok(guard) => guard,
        Err(Error::Timeout { waited, .. }) => {
            reporter.event(
                "not_acquired",
                json!({ "waited_ms": waited.as_millis() as u64 }),
            );
            let why = if args.no_wait {
                "it is held".to_owned()
            } else {
                format!("it was still held after {waited:?}")
            };
            return Err(Failure::new(
                exit::NOT_ACQUIRED,
                format!("lock `{}` not acquired: {why}", args.name),
            ));
        }
        Err(error) => return Err(error.into()),
    };
    let token = guard.fencing_token();
    reporter.event(
        "acquired",
        json!({ "token": token, "waited_ms": started.elapsed().as_millis() as u64 }),
    );
    let child = match spawn(&args, client.backend_name(), token) {
        Ok(child) => child,
        Err(failure) => {
            release(guard, &reporter, None).await;
            return Err(failure);
        }
    };
    supervise(child, guard, &args, &reporter, &mut signals).await
}

fn spawn(args: &RunArgs, backend: &str, token: u64) -> Result<Child, Failure> {
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| Failure::new(exit::USAGE, "no command given"))?;
    Command::new(program)
        .args(rest)
        .env("LOCK_NAME", &args.name)
        .env("LOCK_FENCING_TOKEN", token.to_string())
        .env("LOCK_BACKEND", backend)
        .spawn()
        .map_err(|error| {
            let code = match error.kind() {
                ErrorKind::NotFound => exit::NOT_FOUND,
                _ => exit::CANNOT_RUN,
            };
            let program = program.to_string_lossy();
            Failure::new(code, format!("cannot run {program:?}: {error}"))
        })
}

/// Waits for the command while watching the lease and passing signals on.
async fn supervise(
    mut child: Child,
    guard: LockGuard,
    args: &RunArgs,
    reporter: &Reporter,
    signals: &mut Signals,
) -> Result<u8, Failure> {
    let pid = child.id().unwrap_or(0);
    let mut lost = Box::pin(guard.lost());
    let loss = loop {
        tokio::select! {
            status = child.wait() => {
                let status = status.map_err(|e| Failure::new(exit::FAILED, format!("waiting for the command: {e}")))?;
                let code = code_of(status);
                return Ok(release(guard, reporter, Some(code)).await.unwrap_or(code));
            }
            loss = &mut lost => break loss,
            caught = signals.next() => caught.pass_on(pid),
        }
    };
    let token = guard.fencing_token();
    reporter.event(
        "lost",
        json!({ "token": token, "reason": loss.to_string() }),
    );
    eprintln!(
        "lockctl: lock `{}` lost ({loss}); stopping the command",
        args.name
    );
    signals::send(pid, SIGTERM);
    let stopped = tokio::time::timeout(args.kill_grace, child.wait()).await;
    if stopped.is_err() {
        signals::send(pid, SIGKILL);
        let _ = child.wait().await;
    }
    drop(guard);
    Ok(exit::LOST)
}

/// Releases `guard` after the command ended with `code`; `Some(LOST)` if the lease
/// turned out to be gone (the command may not have run alone).
async fn release(guard: LockGuard, reporter: &Reporter, code: Option<u8>) -> Option<u8> {
    let token = guard.fencing_token();
    let name = guard.name().to_string();
    match guard.release().await {
        Ok(()) => {
            reporter.event("released", json!({ "token": token, "exit_code": code }));
            None
        }
        Err(Error::LeaseLost { .. }) => {
            reporter.event(
                "lost",
                json!({ "token": token, "reason": LeaseLoss::Revoked.to_string() }),
            );
            eprintln!("lockctl: lock `{name}` was lost before the command ended");
            Some(exit::LOST)
        }
        Err(error) => {
            // The lease expires on its own; the command's result still stands.
            eprintln!("lockctl: could not release lock `{name}` ({error}); it expires on its own");
            None
        }
    }
}

/// The exit code a shell would report for `status`.
fn code_of(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(exit::FAILED),
        (None, Some(signal)) => exit::for_signal(signal),
        (None, None) => exit::FAILED,
    }
}
