//! Runs the built `lockctl` binary as real processes against a real backend, and the
//! scenarios every backend's test file runs.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

/// Generous: these run on a loaded 2-core machine.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// lockctl's documented exit codes.
pub const NOT_ACQUIRED: i32 = 75;
pub const LOST: i32 = 79;
pub const USAGE: i32 = 64;
pub const UNAVAILABLE: i32 = 69;

/// `lockctl --url URL --namespace NS ...`, with a scratch directory for the commands'
/// marker files.
pub struct Lockctl {
    pub url: String,
    pub namespace: String,
    pub dir: tempfile::TempDir,
}

impl Lockctl {
    pub fn new(url: &str, namespace: &str) -> Self {
        Lockctl {
            url: url.to_owned(),
            namespace: namespace.to_owned(),
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    /// A marker file's path.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `lockctl` with the URL and namespace set, the environment cleaned of
    /// `LOCKCTL_URL`, and the scratch directory as `$D` and working directory.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockctl"));
        cmd.env_remove("LOCKCTL_URL")
            .env("D", self.dir.path())
            .current_dir(self.dir.path())
            .arg("--url")
            .arg(&self.url)
            .arg("--namespace")
            .arg(&self.namespace)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// Starts `lockctl ARGS` in the background.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args).spawn().expect("start lockctl")
    }

    /// Runs `lockctl ARGS` to the end: exit code, stdout, stderr.
    pub async fn output(&self, args: &[&str]) -> (i32, String, String) {
        let output = tokio::time::timeout(PATIENCE, self.command(args).output())
            .await
            .unwrap_or_else(|_| panic!("lockctl {args:?} did not end within {PATIENCE:?}"))
            .expect("run lockctl");
        (
            code(output.status),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// Waits until the marker `name` exists.
    pub async fn wait_for_file(&self, name: &str) {
        let path = self.file(name);
        let started = Instant::now();
        while !path.exists() {
            assert!(
                started.elapsed() < PATIENCE,
                "{} never appeared",
                path.display()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.file(name))
            .unwrap_or_else(|e| panic!("read {name}: {e}"))
            .trim()
            .to_owned()
    }
}

pub fn code(status: ExitStatus) -> i32 {
    status.code().unwrap_or(-1)
}

/// Waits for a background lockctl: exit code and stderr.
pub async fn finish(child: Child) -> (i32, String) {
    let output = tokio::time::timeout(PATIENCE, child.wait_with_output())
        .await
        .expect("lockctl ended in time")
        .expect("wait for lockctl");
    (
        code(output.status),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

pub fn signal(child: &Child, signal: i32) {
    let pid = child.id().expect("still running") as libc::pid_t;
    // SAFETY: kill(2) on our own, not yet reaped, child.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// A shell command that records that it started, then sleeps until a signal: on
/// SIGTERM or SIGINT it writes the signal's name to `$D/<prefix>.signal` and exits
/// 143 or 130.
pub fn sleeper(prefix: &str) -> String {
    format!(
        "trap 'echo TERM > \"$D/{prefix}.signal\"; kill $! 2>/dev/null; exit 143' TERM; \
         trap 'echo INT > \"$D/{prefix}.signal\"; kill $! 2>/dev/null; exit 130' INT; \
         echo \"$LOCK_FENCING_TOKEN\" > \"$D/{prefix}.token\"; \
         touch \"$D/{prefix}.started\"; sleep 120 & wait"
    )
}

/// Every scenario, in order, on one backend; `backend` is what `LOCK_BACKEND` says.
pub async fn all_scenarios(url: &str, backend: &str) {
    let started = Instant::now();
    two_runs_serialise(url, backend).await;
    no_wait_fails_at_once_while_held(url).await;
    sigint_reaches_the_command_and_the_lock_is_released(url).await;
    force_unlock_stops_the_command_with_the_lost_code(url).await;
    sigkill_of_lockctl_frees_the_lock_within_the_lease(url).await;
    println!(
        "lockctl[{backend}]: all scenarios passed in {:?}",
        started.elapsed()
    );
}

/// Two `lockctl run` at once: the second waits, then runs with a higher token, and
/// each exits with its command's code.
pub async fn two_runs_serialise(url: &str, backend: &str) {
    let ctl = Lockctl::new(url, "serialise");
    let first = ctl.spawn(&[
        "run",
        "jobs",
        "--",
        "sh",
        "-c",
        "echo \"$LOCK_NAME $LOCK_BACKEND\" > \"$D/a.env\"; echo \"$LOCK_FENCING_TOKEN\" > \"$D/a.token\"; \
         touch \"$D/a.started\"; sleep 1; touch \"$D/a.done\"",
    ]);
    ctl.wait_for_file("a.started").await;
    let (code, _, stderr) = ctl
        .output(&[
            "run",
            "jobs",
            "--",
            "sh",
            "-c",
            "test -e \"$D/a.done\" && echo \"$LOCK_FENCING_TOKEN\" > \"$D/b.token\"; exit 7",
        ])
        .await;
    assert_eq!(
        code, 7,
        "the second run exits with its command's code: {stderr}"
    );
    let (code, stderr) = finish(first).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(ctl.read("a.env"), format!("jobs {backend}"));
    assert!(
        ctl.file("b.token").exists(),
        "the second command ran only after the first had finished"
    );
    let (a, b): (u64, u64) = (
        ctl.read("a.token").parse().unwrap(),
        ctl.read("b.token").parse().unwrap(),
    );
    assert!(b > a, "fencing tokens increase: {a} then {b}");
    println!("lockctl[{backend}] PASS two_runs_serialise (tokens {a} < {b})");
}

/// `--no-wait` (and a short `--wait`) exit with the not-acquired code while another
/// run holds the lock; SIGTERM to the holder's lockctl reaches its command.
pub async fn no_wait_fails_at_once_while_held(url: &str) {
    let ctl = Lockctl::new(url, "nowait");
    let holder = ctl.spawn(&["run", "jobs", "--", "sh", "-c", &sleeper("h")]);
    ctl.wait_for_file("h.started").await;
    let started = Instant::now();
    let (code, _, stderr) = ctl
        .output(&["run", "--no-wait", "jobs", "--", "true"])
        .await;
    assert_eq!(code, NOT_ACQUIRED, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("not acquired"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(10), "at once");
    let (code, _, stderr) = ctl
        .output(&["run", "--wait", "300ms", "jobs", "--", "true"])
        .await;
    assert_eq!(code, NOT_ACQUIRED, "{stderr}");
    let (code, stdout, _) = ctl.output(&["status", "jobs"]).await;
    assert_eq!((code, stdout.trim()), (1, "held"));

    signal(&holder, libc::SIGTERM);
    let (code, stderr) = finish(holder).await;
    assert_eq!(code, 143, "the command's own code after SIGTERM: {stderr}");
    assert_eq!(ctl.read("h.signal"), "TERM");
    let (code, stdout, _) = ctl.output(&["status", "jobs"]).await;
    assert_eq!(
        (code, stdout.trim()),
        (0, "free"),
        "released after the command ended"
    );
    println!("lockctl PASS no_wait_fails_at_once_while_held");
}

/// SIGINT to lockctl reaches the command; the lock is released when it exits.
pub async fn sigint_reaches_the_command_and_the_lock_is_released(url: &str) {
    let ctl = Lockctl::new(url, "sigint");
    let holder = ctl.spawn(&["run", "jobs", "--", "sh", "-c", &sleeper("h")]);
    ctl.wait_for_file("h.started").await;
    signal(&holder, libc::SIGINT);
    let (code, stderr) = finish(holder).await;
    assert_eq!(code, 130, "{stderr}");
    assert_eq!(ctl.read("h.signal"), "INT");
    let (code, stdout, _) = ctl.output(&["status", "jobs"]).await;
    assert_eq!((code, stdout.trim()), (0, "free"));
    // A waiting lockctl given SIGINT gives up without running anything.
    let holder = ctl.spawn(&["run", "jobs", "--", "sh", "-c", &sleeper("h2")]);
    ctl.wait_for_file("h2.started").await;
    let waiter = ctl.spawn(&["run", "jobs", "--", "touch", "never"]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    signal(&waiter, libc::SIGINT);
    let (code, _) = finish(waiter).await;
    assert_eq!(code, 130);
    signal(&holder, libc::SIGTERM);
    finish(holder).await;
    assert!(!ctl.file("never").exists(), "a wait given up runs nothing");
    println!("lockctl PASS sigint_reaches_the_command_and_the_lock_is_released");
}

/// `force-unlock` while the command runs: the holder's lockctl notices the loss,
/// SIGTERMs its command and exits with the lost code.
pub async fn force_unlock_stops_the_command_with_the_lost_code(url: &str) {
    let ctl = Lockctl::new(url, "force");
    let holder = ctl.spawn(&[
        "--json",
        "run",
        "--watchdog-lease",
        "3s",
        "jobs",
        "--",
        "sh",
        "-c",
        &sleeper("h"),
    ]);
    ctl.wait_for_file("h.started").await;
    let (code, _, stderr) = ctl.output(&["force-unlock", "jobs"]).await;
    assert_eq!(code, USAGE, "no terminal, no --yes: refused: {stderr}");
    let (code, stdout, stderr) = ctl.output(&["force-unlock", "--yes", "jobs"]).await;
    assert_eq!((code, stdout.trim()), (0, "unlocked"), "{stderr}");
    let unlocked = Instant::now();
    let (code, stderr) = finish(holder).await;
    assert_eq!(code, LOST, "{stderr}");
    assert_eq!(ctl.read("h.signal"), "TERM", "the command got SIGTERM");
    assert!(stderr.contains("\"event\":\"lost\""), "{stderr}");
    println!(
        "lockctl PASS force_unlock_stops_the_command_with_the_lost_code (stopped {:?} after the unlock)",
        unlocked.elapsed()
    );
}

/// A SIGKILLed lockctl releases nothing; its lock comes free when the watchdog lease
/// runs out.
pub async fn sigkill_of_lockctl_frees_the_lock_within_the_lease(url: &str) {
    let ctl = Lockctl::new(url, "sigkill");
    let lease = Duration::from_secs(2);
    let mut holder = ctl.spawn(&[
        "run",
        "--watchdog-lease",
        "2s",
        "jobs",
        "--",
        "sh",
        "-c",
        "echo $$ > \"$D/h.pid\"; touch \"$D/h.started\"; exec sleep 120",
    ]);
    ctl.wait_for_file("h.started").await;
    signal(&holder, libc::SIGKILL);
    let _ = holder.wait().await;
    let killed = Instant::now();
    let (code, _, stderr) = ctl
        .output(&["run", "--wait", "20s", "jobs", "--", "true"])
        .await;
    let freed_after = killed.elapsed();
    // The orphaned command is ours to clean up.
    let pid: libc::pid_t = ctl.read("h.pid").parse().unwrap();
    // SAFETY: kill(2) of the sleep this test started.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    assert_eq!(code, 0, "{stderr}");
    assert!(
        freed_after < lease + Duration::from_secs(8),
        "free within the lease (plus slack): {freed_after:?}"
    );
    println!("lockctl PASS sigkill_of_lockctl_frees_the_lock_within_the_lease ({freed_after:?})");
}

/// The path of a file under `dir`, as a URL for SQLite.
pub fn sqlite_url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("locks.db").display())
}
