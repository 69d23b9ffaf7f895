//! `lockctl run`: hold a lock around a command.
//!
//! The command runs under a supervisor (`supervisor.rs`) in a process group of its
//! own. Every signal lockctl passes on, and the stop after a loss, go to that whole
//! group; lockctl releases the lock only once the supervisor has exited, which it does
//! only when the command and every process it left behind are gone. If lockctl dies,
//! the supervisor kills the group.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::{Duration, Instant};

use distributed_locks::{AcquireOptions, Error, FairLock, LeaseLoss, LockGuard, LockProvider};
use serde_json::json;

use crate::cli::{ElectArgs, JobArgs, RunArgs};
use crate::events::Reporter;
use crate::exit::{self, Failure};
use crate::group::{CommandGroup, Event, Launch};
use crate::locks::RunLock;
use crate::signals::{self, Inherited, Signals, SIGKILL, SIGTERM};
use crate::terminal::Terminal;

/// How long the release at the end may take before lockctl leaves the lease to
/// expire on its own (a backend that went away while the command ran).
pub(crate) const RELEASE_LIMIT: Duration = Duration::from_secs(5);

/// `elect --again` campaigns at most once per this long.
const AGAIN_PAUSE: Duration = Duration::from_secs(1);

/// `elect --again` after a campaign failed with a retryable error (the backend down):
/// the pause doubles from [`AGAIN_PAUSE`] up to this.
const LONGEST_AGAIN_PAUSE: Duration = Duration::from_secs(30);

/// After SIGKILL, how long lockctl waits for the supervisor to report the group gone.
const AFTER_SIGKILL: Duration = Duration::from_secs(10);

/// How often lockctl repeats its order to kill everything below the supervisor.
const ORDER_AGAIN: Duration = Duration::from_millis(100);

/// How often lockctl looks at the lease's end while nothing else happens.
const LOOK_AGAIN: Duration = Duration::from_secs(1);

/// A stop timer that fires this much after its time was held up.
const LATE: Duration = Duration::from_millis(250);

/// How long a stop found by a late timer waits for the watchdog's renewal.
const RENEWAL_WAIT: Duration = Duration::from_secs(2);

/// What a run takes: the lock (or election), the fair lock's ticket with `--fair`,
/// and which side.
struct Taking {
    lock: RunLock,
    fair: Option<Arc<dyn FairLock>>,
    shared: bool,
    permits: Option<u32>,
    /// The campaign's value, for `elect`.
    value: Option<String>,
}

/// `lockctl run`: acquires, runs the command, releases; returns the exit code.
pub(crate) async fn run(
    client: Arc<dyn LockProvider>,
    args: RunArgs,
    reporter: Reporter,
    mut signals: Signals,
    inherited: Inherited,
) -> Result<u8, Failure> {
    let name = &args.job.name;
    let lock = match args.permits {
        Some(permits) => RunLock::semaphore(&*client, name, permits),
        None => RunLock::of(&*client, name),
    }?;
    if args.shared && !lock.can_share() {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "--shared needs read-write locks, which the {} backend does not have",
                client.backend_name()
            ),
        ));
    }
    let fair = match args.fair {
        true => Some(client.fair_lock(name)?),
        false => None,
    };
    let taking = Taking {
        lock,
        fair,
        shared: args.shared,
        permits: args.permits,
        value: None,
    };
    hold_and_run(
        &*client,
        &taking,
        &args.job,
        &reporter,
        &mut signals,
        inherited,
    )
    .await
}

/// `lockctl elect`: campaigns, runs the command while leading, resigns; with
/// `--again`, campaigns again after each run until interrupted. Returns the last
/// run's exit code.
pub(crate) async fn elect(
    client: Arc<dyn LockProvider>,
    args: ElectArgs,
    reporter: Reporter,
    mut signals: Signals,
    inherited: Inherited,
) -> Result<u8, Failure> {
    let value = args
        .value
        .clone()
        .unwrap_or_else(distributed_locks::default_holder_description);
    let taking = Taking {
        lock: RunLock::election(&*client, &args.job.name)?,
        fair: None,
        shared: false,
        permits: None,
        value: Some(value),
    };
    let mut failed_in_a_row = 0;
    loop {
        let started = Instant::now();
        let ran = hold_and_run(
            &*client,
            &taking,
            &args.job,
            &reporter,
            &mut signals,
            inherited,
        )
        .await;
        let code = match ran {
            Ok(code) => {
                failed_in_a_row = 0;
                code
            }
            // The backend down or restarting: a standby that gave up would leave
            // nobody to lead once it is back.
            Err(failure) if args.again && failure.retryable => {
                failed_in_a_row += 1;
                let pause = AGAIN_PAUSE
                    .saturating_mul(1 << (failed_in_a_row - 1).min(5))
                    .min(LONGEST_AGAIN_PAUSE);
                eprintln!("lockctl: {failure}; campaigning again in {pause:?}");
                tokio::select! {
                    () = tokio::time::sleep(pause) => continue,
                    signal = signals.next() => return Ok(exit::for_signal(signal)),
                }
            }
            Err(failure) => return Err(failure),
        };
        // Ctrl-C at a terminal reaches only the command, which has the foreground: its
        // death by SIGINT or SIGQUIT ends the loop as lockctl's own would.
        let interrupted = [libc::SIGINT, libc::SIGQUIT]
            .into_iter()
            .any(|signal| code == exit::for_signal(signal));
        if !args.again || signals.ending() || interrupted {
            return Ok(code);
        }
        // A command that ends at once is not run in a tight loop.
        let rest = AGAIN_PAUSE.saturating_sub(started.elapsed());
        tokio::select! {
            () = tokio::time::sleep(rest) => {}
            signal = signals.next() => return Ok(exit::for_signal(signal)),
        }
    }
}

/// Acquires, runs the command, releases; returns the exit code.
async fn hold_and_run(
    client: &dyn LockProvider,
    taking: &Taking,
    args: &JobArgs,
    reporter: &Reporter,
    signals: &mut Signals,
    inherited: Inherited,
) -> Result<u8, Failure> {
    let started = Instant::now();
    let progress = reporter.progress("waiting for");
    let acquired = tokio::select! {
        acquired = acquire(taking, args) => acquired,
        // Given up while waiting: dropping the acquire leaves nothing held or queued,
        // and lockctl ends (a job-control signal too: `elect --again` stops here).
        signal = signals.next() => {
            signals.end();
            return Ok(exit::for_signal(signal));
        }
    };
    drop(progress);
    let guard = match acquired {
        Ok(guard) => guard,
        Err(Error::Timeout { .. }) => {
            let waited = started.elapsed();
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
                args.conflict_exit_code,
                format!("{} `{}` not acquired: {why}", taking.lock.what(), args.name),
            ));
        }
        Err(error) => return Err(error.into()),
    };
    let token = guard.fencing_token();
    reporter.event(
        "acquired",
        json!({
            "token": token,
            "shared": taking.shared,
            "permits": taking.permits,
            "value": taking.value,
            "waited_ms": started.elapsed().as_millis() as u64,
        }),
    );
    let terminal = Terminal::controlling();
    if terminal.is_some() {
        // lockctl moves the terminal between groups and may write while the command
        // has it (with `stty tostop`): SIGTTOU must not stop it. The command gets the
        // disposition lockctl inherited.
        signals::ignore(libc::SIGTTOU);
    }
    if let Err(error) = signals.catch_job_control() {
        release(guard, reporter, None).await;
        return Err(Failure::new(
            exit::FAILED,
            format!("cannot catch signals: {error}"),
        ));
    }
    let argv = args.command_line();
    let mut env = vec![
        ("LOCK_NAME", args.name.clone()),
        ("LOCK_FENCING_TOKEN", token.to_string()),
        ("LOCK_BACKEND", client.backend_name().to_owned()),
    ];
    if let Some(value) = &taking.value {
        env.push(("LOCK_LEADER_VALUE", value.clone()));
    }
    let launch = Launch {
        argv: &argv,
        env,
        inherited,
        terminal: terminal.as_ref(),
        give_terminal: terminal.as_ref().is_some_and(Terminal::ours),
    };
    if !guard.is_held() {
        // Lost between the grant and now (a suspend, a force-unlock): not started.
        reporter.event(
            "lost",
            json!({ "token": token, "reason": LeaseLoss::Expired.to_string() }),
        );
        eprintln!(
            "lockctl: lock `{}` was lost before the command started",
            args.name
        );
        drop(guard);
        return Ok(exit::LOST);
    }
    let group = match CommandGroup::start(launch).await {
        Ok(group) => group,
        Err(failure) => {
            release(guard, reporter, None).await;
            return Err(failure);
        }
    };
    supervise(group, guard, args, reporter, signals, terminal).await
}

/// Takes the fair lock's place in line first with `--fair`, then the lock itself,
/// all within `--wait`.
///
/// A fair lock and the exclusive or read-write lock of one name are separate locks,
/// so `--fair` cannot just take the fair lock: it would not exclude runs without
/// `--fair`. The fair lock is a ticket: the run holding it is the only `--fair` run
/// asking for the lock itself, the others wait in line behind it; it gives the
/// ticket back once it has the lock (a `--shared` one then lets the next shared run
/// in at once).
async fn acquire(taking: &Taking, args: &JobArgs) -> Result<LockGuard, Error> {
    let deadline = args.wait.map(|wait| Instant::now() + wait);
    let options = || match (args.no_wait, deadline) {
        (true, _) => AcquireOptions::try_once(),
        (false, Some(at)) => AcquireOptions::wait_for(at.saturating_duration_since(Instant::now())),
        (false, None) => AcquireOptions::wait_forever(),
    };
    let ticket = match &taking.fair {
        Some(fair) => Some(fair.acquire_with(options()).await?),
        None => None,
    };
    let mut main = options();
    if let Some(lease) = args.lease {
        main = main.lease(lease);
    }
    let guard = taking
        .lock
        .acquire(taking.shared, taking.value.as_deref(), main)
        .await;
    // Released in the background (lock-core sees it through; shutdown waits for it).
    drop(ticket);
    guard
}

/// How supervision ended.
enum Outcome {
    Ended(ExitStatus),
    /// The lease runs out within the command's stop time: it was not renewed in time
    /// (or is a fixed `--lease`).
    Expiring,
    /// Lost without warning (a force-unlock, the server lost it, a stop longer than
    /// the lease).
    Lost(LeaseLoss),
}

/// When a command must be gone and when it is told to go, counted back from the end
/// of the lease (as this client counts it, which is already before the server's).
#[derive(Clone, Copy)]
struct StopTimes {
    /// SIGKILL comes this long before the end: time for the signal and the processes'
    /// deaths on a loaded machine.
    kill_ahead: Duration,
    /// SIGTERM comes this long before SIGKILL: `--kill-grace`, at most a third of the
    /// lease, so that a watchdog lease renewed on time (every third of it) never starts
    /// a stop, with a fifth of the lease to spare for the renewal's round trip and the
    /// clock-drift margin.
    grace: Duration,
}

impl StopTimes {
    fn of(args: &JobArgs) -> Self {
        let lease = args.lease.unwrap_or(args.watchdog_lease);
        StopTimes {
            kill_ahead: (lease / 10).min(Duration::from_secs(1)),
            grace: args.kill_grace.min(lease / 3),
        }
    }

    /// When the command is killed, for a lease that ends at `end`.
    fn kill_at(self, end: tokio::time::Instant) -> tokio::time::Instant {
        end.checked_sub(self.kill_ahead).unwrap_or(end)
    }

    /// When the command is told to stop, for a lease that ends at `end`.
    fn term_at(self, end: tokio::time::Instant) -> tokio::time::Instant {
        let kill_at = self.kill_at(end);
        kill_at.checked_sub(self.grace).unwrap_or(kill_at)
    }
}

/// Waits for the command while watching the lease, passing signals on to the
/// command's group, and following job control.
async fn supervise(
    mut group: CommandGroup,
    guard: LockGuard,
    args: &JobArgs,
    reporter: &Reporter,
    signals: &mut Signals,
    terminal: Option<Terminal>,
) -> Result<u8, Failure> {
    let mut lost = Box::pin(guard.lost());
    let times = StopTimes::of(args);
    // A watchdog lease: renewed, so a late look may be followed by a renewal.
    let watched = args.lease.is_none();
    // Set while a stop is put off for a renewal that a held-up timer may have kept
    // waiting: until when, at the latest.
    let mut put_off: Option<tokio::time::Instant> = None;
    let outcome = loop {
        let now = tokio::time::Instant::now();
        // Not held: the loss is reported at once below. Looked at every second too: the
        // timer's clock stops while the machine is suspended, the lease's count does not.
        let wake_at = match (put_off, guard.expires_at()) {
            (_, None) => far_future(),
            (Some(until), Some(end)) => until.min(times.kill_at(end)).min(now + LOOK_AGAIN),
            (None, Some(end)) => times.term_at(end).min(now + LOOK_AGAIN),
        };
        tokio::select! {
            biased;
            event = group.next() => match event {
                Event::Ended(status) => break Outcome::Ended(status),
                Event::Stopped(signal) => {
                    reporter.event("stopped", json!({ "signal": signal }));
                    stop_with_the_command(&group, terminal.as_ref());
                }
                Event::Group(_) | Event::Empty => {}
            },
            loss = &mut lost => break Outcome::Lost(loss),
            () = tokio::time::sleep_until(wake_at) => {
                let now = tokio::time::Instant::now();
                // A renewal since may have moved the end on.
                let Some(end) = guard.expires_at().filter(|&end| times.term_at(end) <= now) else {
                    put_off = None;
                    continue;
                };
                match put_off {
                    // Fired late: lockctl was stopped (Ctrl-Z) or starved, and the
                    // watchdog, held up alike, may have a renewal on its way. Waited
                    // for, but never past the kill time. (A fixed lease has none.)
                    None if watched && now.saturating_duration_since(wake_at) > LATE => {
                        put_off = Some(now + RENEWAL_WAIT);
                    }
                    Some(until) if now < until.min(times.kill_at(end)) => {}
                    _ => break Outcome::Expiring,
                }
            }
            signal = signals.next() => match signal {
                libc::SIGCONT => {
                    // Stopped for longer than the lease: the command must not go on.
                    if !guard.is_held() {
                        break Outcome::Lost(LeaseLoss::Expired);
                    }
                    reporter.event("continued", json!({}));
                    resume(&group, terminal.as_ref());
                }
                // SIGTSTP included: the command stops, the supervisor says so, and
                // lockctl stops after it.
                signal => group.signal(signal),
            },
        }
    };
    let token = guard.fencing_token();
    let status = match outcome {
        Outcome::Ended(status) => status,
        Outcome::Expiring => {
            let end = guard.expires_at();
            let left = end.map_or(Duration::ZERO, |end| {
                end.saturating_duration_since(tokio::time::Instant::now())
            });
            reporter.event(
                "expiring",
                json!({ "token": token, "remaining_ms": left.as_millis() as u64 }),
            );
            eprintln!(
                "lockctl: the lease of lock `{}` ends in {left:?}; stopping the command",
                args.name
            );
            // SIGKILL before the end, however long the grace.
            let kill_at = end.map_or_else(tokio::time::Instant::now, |end| {
                times
                    .kill_at(end)
                    .min(tokio::time::Instant::now() + args.kill_grace)
            });
            let ended = stop_the_group(&mut group, kill_at, &mut lost).await;
            after_a_stop(&group, terminal.as_ref()).await;
            // Still held, most likely: freed for the next run at once.
            release(guard, reporter, ended.map(code_of)).await;
            return Ok(exit::LOST);
        }
        Outcome::Lost(loss) => {
            reporter.event(
                "lost",
                json!({ "token": token, "reason": loss.to_string() }),
            );
            eprintln!(
                "lockctl: lock `{}` lost ({loss}); killing the command",
                args.name
            );
            // Another run may hold the lock already: no grace.
            let _ = kill_the_group(&mut group).await;
            after_a_stop(&group, terminal.as_ref()).await;
            drop(guard);
            return Ok(exit::LOST);
        }
    };
    if let Some(terminal) = &terminal {
        terminal.take_back_from(group.terminal_id());
    }
    let mut code = code_of(status);
    if let Some(left) = group.left_behind() {
        // Only if the supervisor was killed (by someone else): its group is on its own.
        eprintln!(
            "lockctl: the command's supervisor was killed ({status}) while processes of its group still ran; stopping them before the lock is released"
        );
        stop_leftovers(left, args.kill_grace).await;
        code = exit::FAILED;
    }
    Ok(release(guard, reporter, Some(code)).await.unwrap_or(code))
}

/// The command stopped for job control: lockctl takes the terminal back and stops
/// too, so the shell that started it sees the job stopped. The SIGCONT that resumes
/// lockctl resumes the command (see [`resume`]). With no job-control shell above
/// (lockctl's group is orphaned), lockctl does not stop and the command stays stopped
/// until lockctl gets SIGCONT.
fn stop_with_the_command(group: &CommandGroup, terminal: Option<&Terminal>) {
    if let Some(terminal) = terminal {
        terminal.take_back_from(group.terminal_id());
    }
    signals::stop_self();
}

/// lockctl got SIGCONT (`fg`, `bg`, `kill -CONT`): the command goes on too, with the
/// terminal if lockctl's group has it (`fg`), without it otherwise (`bg`).
fn resume(group: &CommandGroup, terminal: Option<&Terminal>) {
    if let (Some(terminal), Some(id)) = (terminal.filter(|t| t.ours()), group.live_id()) {
        terminal.give_to(id);
    }
    group.signal(libc::SIGCONT);
}

/// The lease is about to run out: SIGTERM to the whole group (and SIGCONT, for a
/// stopped one), then SIGKILL at `kill_at`, or at once if the lease is lost first;
/// returns once the supervisor says all of it is gone, or a while after SIGKILL if it
/// does not (processes that left the group).
async fn stop_the_group(
    group: &mut CommandGroup,
    kill_at: tokio::time::Instant,
    lost: &mut (impl std::future::Future<Output = LeaseLoss> + Unpin),
) -> Option<ExitStatus> {
    group.signal(SIGTERM);
    group.signal(libc::SIGCONT);
    tokio::select! {
        status = group.ended() => return Some(status),
        () = tokio::time::sleep_until(kill_at) => {}
        _ = lost => {}
    }
    kill_the_group(group).await
}

/// SIGKILL to the whole group; returns (with the command's status) once the supervisor
/// says all of it is gone, or a while after if it does not (processes that left the
/// group).
async fn kill_the_group(group: &mut CommandGroup) -> Option<ExitStatus> {
    group.signal(SIGKILL);
    let given_up = tokio::time::Instant::now() + AFTER_SIGKILL;
    // The supervisor acts on an order from its wait for children, which one order
    // may miss (landing just before it waits again): repeated until all is gone.
    while tokio::time::Instant::now() < given_up {
        group.kill_everything();
        let next = (tokio::time::Instant::now() + ORDER_AGAIN).min(given_up);
        if let Ok(status) = tokio::time::timeout_at(next, group.ended()).await {
            return Some(status);
        }
    }
    if group.live_id().is_some_and(signals::group_exists) {
        eprintln!(
            "lockctl: processes of the command's group are still there {AFTER_SIGKILL:?} after SIGKILL"
        );
    } else {
        eprintln!(
            "lockctl: the command's process group is gone, but processes it moved out of its group still run; lockctl leaves them"
        );
    }
    None
}

/// After the command was stopped for its lock: the terminal back, and what is left of
/// its group killed at once if the supervisor was killed meanwhile (by someone else),
/// leaving the group on its own.
async fn after_a_stop(group: &CommandGroup, terminal: Option<&Terminal>) {
    if let Some(terminal) = terminal {
        terminal.take_back_from(group.terminal_id());
    }
    if let Some(left) = group.left_behind() {
        stop_leftovers(left, Duration::ZERO).await;
    }
}

/// An instant no lease reaches: a timer that never fires.
fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(100 * 365 * 24 * 60 * 60)
}

/// The supervisor is gone but its group is not: SIGTERM, SIGKILL after `grace`, and
/// wait (bounded) until the group is empty. Nobody reaps these for lockctl: they were
/// handed to init or the nearest subreaper, which does.
async fn stop_leftovers(group: libc::pid_t, grace: Duration) {
    signals::send_to_group(group, SIGTERM);
    signals::send_to_group(group, libc::SIGCONT);
    let gone = |limit: Duration| async move {
        let started = Instant::now();
        while signals::group_exists(group) {
            if started.elapsed() > limit {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    };
    if gone(grace).await {
        return;
    }
    signals::send_to_group(group, SIGKILL);
    if !gone(AFTER_SIGKILL).await {
        eprintln!(
            "lockctl: processes of the command's group are still there {AFTER_SIGKILL:?} after SIGKILL"
        );
    }
}

/// Releases `guard` after the command ended with `code`; `Some(LOST)` if the lease
/// turned out to be gone (the command may not have run alone). A backend that does not
/// answer within [`RELEASE_LIMIT`] leaves the lease to expire on its own.
async fn release(guard: LockGuard, reporter: &Reporter, code: Option<u8>) -> Option<u8> {
    let token = guard.fencing_token();
    let name = guard.name().to_string();
    let expires = expiry_note(guard.remaining());
    match tokio::time::timeout(RELEASE_LIMIT, guard.release()).await {
        Ok(Ok(())) => {
            reporter.event("released", json!({ "token": token, "exit_code": code }));
            None
        }
        Ok(Err(Error::LeaseLost { .. })) => {
            reporter.event(
                "lost",
                json!({
                    "token": token,
                    "reason": LeaseLoss::Revoked.to_string(),
                    "exit_code": code,
                }),
            );
            eprintln!("lockctl: lock `{name}` was lost before the command ended");
            Some(exit::LOST)
        }
        Ok(Err(error)) => {
            // The command's result still stands.
            let error = error.to_string().replace(['\n', '\r'], " ");
            reporter.event(
                "release_failed",
                json!({ "token": token, "exit_code": code, "error": error }),
            );
            eprintln!("lockctl: could not release lock `{name}` ({error}); {expires}");
            None
        }
        Err(_) => {
            reporter.event(
                "release_failed",
                json!({ "token": token, "exit_code": code, "error": "no answer" }),
            );
            eprintln!(
                "lockctl: the backend did not answer the release of lock `{name}` within {RELEASE_LIMIT:?}; {expires}"
            );
            None
        }
    }
}

/// "its lease expires on its own (within about N s)".
pub(crate) fn expiry_note(remaining: Option<Duration>) -> String {
    match remaining {
        Some(left) => format!(
            "its lease expires on its own within about {}s",
            left.as_secs() + 1
        ),
        None => "its lease expires on its own".to_owned(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn stop_times(lease: Option<u64>, watchdog: u64, grace: u64) -> StopTimes {
        use clap::Parser;
        let (lease, watchdog, grace) = (
            lease.map(|s| format!("{s}s")),
            format!("{watchdog}s"),
            format!("{grace}s"),
        );
        let mut argv = vec![
            "lockctl",
            "run",
            "--watchdog-lease",
            &watchdog,
            "--kill-grace",
            &grace,
        ];
        if let Some(lease) = &lease {
            argv.extend(["--lease", lease]);
        }
        argv.extend(["job", "--", "true"]);
        match crate::cli::Cli::try_parse_from(argv).unwrap().command {
            crate::cli::Command::Run(args) => StopTimes::of(&args.job),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn a_watchdog_lease_renewed_on_time_never_starts_a_stop() {
        // Renewed every third of the lease, it has two thirds left at worst, less the
        // clock-drift margin (1 % and 2 ms) and the renewal's round trip.
        for (watchdog, grace) in [(30, 10), (30, 60), (6, 10), (1, 10), (3, 0), (600, 10)] {
            let times = stop_times(None, watchdog, grace);
            let lease = Duration::from_secs(watchdog);
            let end = tokio::time::Instant::now() + lease;
            let left_at_term = end - times.term_at(end);
            let drift = lease / 100 + Duration::from_millis(2);
            let round_trip = lease / 5;
            assert!(
                left_at_term + drift + round_trip <= lease * 2 / 3,
                "{watchdog} s lease, {grace} s grace: stop with {left_at_term:?} left"
            );
            assert!(times.grace <= Duration::from_secs(grace));
        }
    }

    #[test]
    fn the_kill_comes_before_the_end_and_the_grace_before_the_kill() {
        let fixed = stop_times(Some(3), 30, 8);
        let end = tokio::time::Instant::now() + Duration::from_secs(3);
        assert_eq!(end - fixed.kill_at(end), Duration::from_millis(300));
        assert_eq!(
            fixed.kill_at(end) - fixed.term_at(end),
            Duration::from_secs(1)
        );
        let watchdog = stop_times(None, 30, 10);
        let end = tokio::time::Instant::now() + Duration::from_secs(30);
        assert_eq!(end - watchdog.kill_at(end), Duration::from_secs(1));
        assert_eq!(
            watchdog.kill_at(end) - watchdog.term_at(end),
            Duration::from_secs(10)
        );
    }
}
