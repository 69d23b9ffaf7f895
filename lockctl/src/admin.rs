//! `lockctl status`, `wait`, `force-unlock` and `leader`: looking at a lock or an
//! election without holding it.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use distributed_locks::{Election, Error, HolderInfo, Lease, LockKind, LockProvider, Result};
use serde_json::json;

use crate::events::Reporter;
use crate::exit::{self, Failure};
use crate::locks::RunLock;

/// Prints `held` or `free`; exit 0 when free, 1 when held (a semaphore: when every
/// permit is). Where the backend reports holders (`inspect`), a line per holder
/// follows: what its client said of itself (by default host and pid), its token,
/// since when, until when; for a semaphore, how many of its permits are held first.
pub(crate) async fn status(lock: Result<RunLock>, reporter: &Reporter) -> Result<u8, Failure> {
    let lock = lock?;
    let info = match lock.inspect().await {
        Ok(info) => info,
        // A backend that cannot say who holds can still say whether anyone does.
        Err(Error::Unsupported { .. }) => {
            let held = lock.is_locked().await?;
            reporter.event("status", json!({ "held": held, "permits": lock.permits() }));
            println!("{}", if held { "held" } else { "free" });
            return Ok(u8::from(held));
        }
        Err(error) => return Err(error.into()),
    };
    let taken = info.holders.len();
    let held = match lock.permits() {
        Some(permits) => taken >= permits as usize,
        None => info.is_locked(),
    };
    let holders: Vec<_> = info.holders.iter().map(holder_json).collect();
    reporter.event(
        "status",
        json!({
            "held": held,
            "holders": holders,
            "waiters": info.waiters,
            "permits": lock.permits(),
        }),
    );
    println!("{}", if held { "held" } else { "free" });
    if let Some(permits) = lock.permits() {
        println!("  {taken} of {permits} permits held");
    }
    for holder in &info.holders {
        println!("  {}", describe(holder));
    }
    if let Some(waiters) = info.waiters.filter(|n| *n > 0) {
        println!("  {waiters} waiting");
    }
    Ok(u8::from(held))
}

/// Prints the leader's value and term; exit 0 when someone leads, 1 when nobody does.
pub(crate) async fn leader(
    election: Result<Arc<dyn Election>>,
    reporter: &Reporter,
) -> Result<u8, Failure> {
    let leader = election?.leader().await?;
    reporter.event(
        "leader",
        json!({
            "value": leader.as_ref().map(|l| l.value.clone()),
            "term": leader.as_ref().map(|l| l.term),
        }),
    );
    match leader {
        Some(leader) => {
            // Another client's value may hold anything: no control character reaches
            // the terminal as is.
            let value: String = leader
                .value
                .chars()
                .map(|c| match c.is_control() {
                    true => c.escape_default().to_string(),
                    false => c.to_string(),
                })
                .collect();
            println!("{value} (term {})", leader.term);
            Ok(0)
        }
        None => {
            println!("no leader");
            Ok(1)
        }
    }
}

/// One line about a holder: what it said about itself, its token, since when, until when.
fn describe(holder: &HolderInfo) -> String {
    let mut line = match holder.kind {
        LockKind::Read => "shared by".to_owned(),
        _ => "by".to_owned(),
    };
    line.push(' ');
    line.push_str(holder.description.as_deref().unwrap_or("an unknown holder"));
    if let Some(token) = holder.fencing_token {
        line.push_str(&format!(", token {token}"));
    }
    let now = SystemTime::now();
    if let Some(since) = holder.acquired_at {
        let ago = now.duration_since(since).unwrap_or_default();
        line.push_str(&format!(", for {}", short(ago)));
    }
    if let Some(until) = holder.expires_at {
        let left = until.duration_since(now).unwrap_or_default();
        line.push_str(&format!(", lease ends in {}", short(left)));
    }
    if let Some(owner) = &holder.owner {
        line.push_str(&format!(" (owner {owner})"));
    }
    line
}

/// A duration to the second (to the millisecond below one).
fn short(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}s", d.as_secs())
    }
}

fn holder_json(holder: &HolderInfo) -> serde_json::Value {
    let millis = |t: Option<SystemTime>| {
        t.and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as u64)
    };
    json!({
        "shared": holder.kind == LockKind::Read,
        "description": holder.description,
        "token": holder.fencing_token,
        "owner": holder.owner,
        "acquired_at_ms": millis(holder.acquired_at),
        "expires_at_ms": millis(holder.expires_at),
    })
}

/// The first and the longest pause between two looks at a held lock.
///
/// `wait` looks (`is_locked`) instead of acquiring and releasing at once: taking the
/// lock would bump its fencing token and could get ahead of a real waiter, delaying
/// it by a round trip or, on a polling backend, by its next poll. The library has no
/// "tell me when it is free" call to wait on, so it polls, quickly: a release is seen
/// within about [`LONGEST_LOOK`] plus one round trip, on every backend.
const FIRST_LOOK: Duration = Duration::from_millis(10);
const LONGEST_LOOK: Duration = Duration::from_millis(100);

/// Returns once `name` is free (exit 0), or `conflict_code` once `limit` has passed
/// with `name` still held (never before). It looks, it does not take the lock:
/// waiters of the lock are not delayed.
pub(crate) async fn wait(
    lock: Result<RunLock>,
    name: &str,
    limit: Option<Duration>,
    conflict_code: u8,
    reporter: &Reporter,
) -> Result<u8, Failure> {
    let lock = lock?;
    let started = Instant::now();
    let deadline = limit.map(|limit| started + limit);
    let _progress = reporter.progress("waiting until free:");
    let mut pause = FIRST_LOOK;
    while lock.is_locked().await? {
        let now = Instant::now();
        let mut sleep = pause;
        if let Some(deadline) = deadline {
            // The last look is at the deadline or after it, never before.
            if now >= deadline {
                let waited = started.elapsed();
                reporter.event(
                    "still_held",
                    json!({ "waited_ms": waited.as_millis() as u64 }),
                );
                return Err(Failure::new(
                    conflict_code,
                    format!("lock `{name}` was still held after {waited:?}"),
                ));
            }
            sleep = sleep.min(deadline - now);
        }
        tokio::time::sleep(sleep).await;
        pause = (pause * 2).min(LONGEST_LOOK);
    }
    reporter.event(
        "free",
        json!({ "waited_ms": started.elapsed().as_millis() as u64 }),
    );
    Ok(0)
}

/// Removes whoever holds `name`, after asking on a terminal unless `yes`.
///
/// With `token`, only the holder whose fencing token it is, so that a fresh holder
/// that replaced a stuck one is not broken by mistake (where the backend can:
/// `force_unlock_holder`).
pub(crate) async fn force_unlock(
    client: &dyn LockProvider,
    lock: Result<RunLock>,
    name: &str,
    yes: bool,
    token: Option<u64>,
    reporter: &Reporter,
) -> Result<u8, Failure> {
    let lock = lock?;
    // A backend without this kind of lock refuses before anyone is asked.
    client
        .capabilities()
        .require(client.backend_name(), lock.kind(), Lease::Watchdog)?;
    if !yes {
        if !std::io::stdin().is_terminal() {
            return Err(Failure::new(
                exit::USAGE,
                "force-unlock asks for confirmation on a terminal; pass --yes to run it without one",
            ));
        }
        let whom = match token {
            Some(token) => format!("the holder with token {token}"),
            None => "every holder".to_owned(),
        };
        eprint!(
            "Force-unlock `{name}` in namespace `{}` on {}? {whom} loses it. [y/N] ",
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
    let was_held = match token {
        Some(token) => lock.force_unlock_holder(token).await?,
        None => lock.force_unlock().await?,
    };
    reporter.event(
        "force_unlocked",
        json!({ "was_held": was_held, "token": token }),
    );
    let said = match (was_held, token) {
        (true, _) => "unlocked".to_owned(),
        (false, None) => "was free".to_owned(),
        (false, Some(token)) => format!("no holder with token {token}; nothing changed"),
    };
    println!("{said}");
    Ok(0)
}
