//! `lockctl status`, `wait` and `force-unlock`: looking at a lock without holding it.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distributed_locks::LockProvider;
use serde_json::json;

use crate::events::Reporter;
use crate::exit::{self, Failure};

/// Prints `held` or `free`; exit 0 when free, 1 when held.
pub(crate) async fn status(
    client: Arc<dyn LockProvider>,
    name: &str,
    reporter: &Reporter,
) -> Result<u8, Failure> {
    let held = client.lock(name)?.is_locked().await?;
    reporter.event("status", json!({ "held": held }));
    println!("{}", if held { "held" } else { "free" });
    Ok(u8::from(held))
}

/// The first and the longest pause between two looks at a held lock.
const FIRST_LOOK: Duration = Duration::from_millis(50);
const LONGEST_LOOK: Duration = Duration::from_secs(1);

/// Returns once `name` is free (exit 0), or 75 when `limit` runs out first. It looks,
/// it does not take the lock: waiters of the lock are not delayed.
pub(crate) async fn wait(
    client: Arc<dyn LockProvider>,
    name: &str,
    limit: Option<Duration>,
    reporter: &Reporter,
) -> Result<u8, Failure> {
    let lock = client.lock(name)?;
    let started = Instant::now();
    let _progress = reporter.progress("waiting until free:");
    let mut pause = FIRST_LOOK;
    while lock.is_locked().await? {
        let waited = started.elapsed();
        if limit.is_some_and(|limit| waited + pause > limit) {
            reporter.event(
                "still_held",
                json!({ "waited_ms": waited.as_millis() as u64 }),
            );
            return Err(Failure::new(
                exit::NOT_ACQUIRED,
                format!("lock `{name}` was still held after {waited:?}"),
            ));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LONGEST_LOOK);
    }
    reporter.event(
        "free",
        json!({ "waited_ms": started.elapsed().as_millis() as u64 }),
    );
    Ok(0)
}

/// Removes whoever holds `name`, after asking on a terminal unless `yes`.
pub(crate) async fn force_unlock(
    client: Arc<dyn LockProvider>,
    name: &str,
    yes: bool,
    reporter: &Reporter,
) -> Result<u8, Failure> {
    let lock = client.lock(name)?;
    if !yes {
        if !std::io::stdin().is_terminal() {
            return Err(Failure::new(
                exit::USAGE,
                "force-unlock asks for confirmation on a terminal; pass --yes to run it without one",
            ));
        }
        eprint!(
            "Force-unlock `{name}` in namespace `{}` on {}? Its holder loses it. [y/N] ",
            client.namespace().as_str(),
            client.backend_name()
        );
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        let _ = std::io::stdin().lock().read_line(&mut answer);
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            eprintln!("lockctl: not confirmed; nothing changed");
            return Ok(1);
        }
    }
    let was_held = lock.force_unlock().await?;
    reporter.event("force_unlocked", json!({ "was_held": was_held }));
    println!("{}", if was_held { "unlocked" } else { "was free" });
    Ok(0)
}
