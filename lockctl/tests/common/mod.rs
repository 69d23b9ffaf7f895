//! Runs the built `lockctl` binary as real processes against a real backend, and the
//! scenarios every backend's test file runs.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
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
/// marker files. Every process it starts is marked: dropping it kills what is left,
/// so a failing scenario leaves nothing running.
pub struct Lockctl {
    pub url: String,
    pub namespace: String,
    pub dir: tempfile::TempDir,
    marked: Marked,
}

impl Lockctl {
    pub fn new(url: &str, namespace: &str) -> Self {
        Lockctl {
            url: url.to_owned(),
            namespace: namespace.to_owned(),
            dir: tempfile::tempdir().expect("temp dir"),
            marked: Marked::new(),
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
            .env(MARKER_VAR, &self.marked.marker)
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

    /// Starts `lockctl ARGS` in the background with `marked`'s marker (instead of this
    /// one's) in its environment, which every process it starts inherits.
    pub fn spawn_marked(&self, marked: &Marked, args: &[&str]) -> Child {
        self.command(args)
            .env(MARKER_VAR, &marked.marker)
            .spawn()
            .expect("start lockctl")
    }

    /// `WRAPPER... lockctl ARGS` (e.g. `nohup`), set up as [`command`](Self::command).
    pub fn command_via(&self, wrapper: &[&str], args: &[&str]) -> Command {
        let (program, rest) = wrapper.split_first().expect("a wrapper");
        let mut cmd = Command::new(program);
        cmd.args(rest)
            .arg(env!("CARGO_BIN_EXE_lockctl"))
            .env_remove("LOCKCTL_URL")
            .env(MARKER_VAR, &self.marked.marker)
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

    /// Waits until a [`sleeper`] with `prefix` runs its `sleep`: a signal sent any
    /// earlier could land while the background `sleep` is forked but not yet executed,
    /// where the shell's child may lose it, and the `sleep` would outlive the trap.
    pub async fn wait_for_sleeper(&self, prefix: &str) {
        self.wait_for_file(&format!("{prefix}.started")).await;
        self.marked.wait_for_comm("sleep", 1).await;
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

/// The environment variable that marks the processes of one scenario: every process
/// lockctl starts inherits it, whatever process group or session it ends up in, so a
/// test finds them all in /proc.
pub const MARKER_VAR: &str = "LOCKCTL_TEST_MARKER";

/// One process, as /proc shows it.
#[derive(Clone, Debug)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    /// `R`, `S`, `T` (stopped), `Z` (zombie), ...
    pub state: char,
    pub comm: String,
}

impl Proc {
    /// `pid`'s entry, if it exists.
    pub fn read(pid: i32) -> Option<Proc> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name is in parentheses and may hold spaces: split after the last ')'.
        let open = stat.find('(')?;
        let close = stat.rfind(')')?;
        let comm = stat[open + 1..close].to_owned();
        let mut rest = stat[close + 1..].split_whitespace();
        let state = rest.next()?.chars().next()?;
        let ppid = rest.next()?.parse().ok()?;
        let pgid = rest.next()?.parse().ok()?;
        Some(Proc {
            pid,
            ppid,
            pgid,
            state,
            comm,
        })
    }

    /// The signals it ignores (bit N-1 for signal N), from /proc/PID/status.
    pub fn ignored_signals(pid: i32) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_else(|e| panic!("read /proc/{pid}/status: {e}"));
        let hex = status
            .lines()
            .find_map(|l| l.strip_prefix("SigIgn:"))
            .expect("SigIgn line")
            .trim();
        u64::from_str_radix(hex, 16).expect("SigIgn is hex")
    }
}

/// The live (not zombie) processes of one scenario, found by [`MARKER_VAR`]. Dropping
/// it SIGKILLs whatever is left, so a failed test leaves nothing running.
pub struct Marked {
    pub marker: String,
}

impl Default for Marked {
    fn default() -> Self {
        Self::new()
    }
}

impl Marked {
    pub fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        Marked {
            marker: format!(
                "{}-{nanos}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }

    /// The live processes carrying the marker now.
    pub fn processes(&self) -> Vec<Proc> {
        let wanted = format!("{MARKER_VAR}={}", self.marker);
        let mut found = Vec::new();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return found;
        };
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            // A process that ended meanwhile reads as nothing; a zombie's environ is empty.
            let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
                continue;
            };
            if !environ
                .split(|b| *b == 0)
                .any(|var| var == wanted.as_bytes())
            {
                continue;
            }
            if let Some(proc) = Proc::read(pid).filter(|p| p.state != 'Z' && p.state != 'X') {
                found.push(proc);
            }
        }
        found
    }

    /// The live marked processes but `pid` (lockctl itself, say).
    pub fn processes_but(&self, pid: Option<u32>) -> Vec<Proc> {
        let mut found = self.processes();
        found.retain(|p| Some(p.pid as u32) != pid);
        found
    }

    /// Waits (bounded) until `ready` holds for the marked processes; returns them.
    pub async fn wait_until(&self, what: &str, ready: impl Fn(&[Proc]) -> bool) -> Vec<Proc> {
        let started = Instant::now();
        loop {
            let found = self.processes();
            if ready(&found) {
                return found;
            }
            assert!(
                started.elapsed() < PATIENCE,
                "{what}: not so after {PATIENCE:?}; marked processes: {found:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until `count` processes named `comm` run.
    pub async fn wait_for_comm(&self, comm: &str, count: usize) -> Vec<Proc> {
        self.wait_until(&format!("{count} `{comm}` running"), |found| {
            found.iter().filter(|p| p.comm == comm).count() >= count
        })
        .await
    }

    /// How long until no marked process is left, or what is still there after `limit`.
    pub async fn gone_within(&self, limit: Duration) -> Result<Duration, Vec<Proc>> {
        let started = Instant::now();
        loop {
            let found = self.processes();
            if found.is_empty() {
                return Ok(started.elapsed());
            }
            if started.elapsed() > limit {
                return Err(found);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Marked {
    fn drop(&mut self) {
        for proc in self.processes() {
            // SAFETY: kill(2) of a process this scenario started (it carries the marker).
            unsafe {
                libc::kill(proc.pid, libc::SIGKILL);
            }
        }
    }
}

/// `pid` and its descendants, for failure messages.
pub fn descendants(pid: i32) -> Vec<Proc> {
    let all: Vec<Proc> = std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .filter_map(Proc::read)
                .collect()
        })
        .unwrap_or_default();
    let mut found: Vec<Proc> = all.iter().filter(|p| p.pid == pid).cloned().collect();
    let mut i = 0;
    while i < found.len() {
        let parent = found[i].pid;
        found.extend(all.iter().filter(|p| p.ppid == parent).cloned());
        i += 1;
    }
    found
}

pub fn code(status: ExitStatus) -> i32 {
    status.code().unwrap_or(-1)
}

/// Waits for a background lockctl: exit code and stderr. Fails if lockctl does not
/// exit in time, or exits while something it started still holds its stderr open.
pub async fn finish(mut child: Child) -> (i32, String) {
    use tokio::io::AsyncReadExt;
    let mut stderr = child.stderr.take().expect("stderr piped");
    let mut stdout = child.stdout.take().expect("stdout piped");
    let read_all = tokio::spawn(async move {
        let (mut err, mut out) = (Vec::new(), Vec::new());
        let _ = tokio::join!(stderr.read_to_end(&mut err), stdout.read_to_end(&mut out));
        err
    });
    let pid = child.id().map(|pid| pid as i32);
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "lockctl did not exit within {PATIENCE:?}; its processes: {:?}",
                pid.map(descendants)
            )
        })
        .expect("wait for lockctl");
    let code = code(status);
    let stderr = match tokio::time::timeout(Duration::from_secs(5), read_all).await {
        Ok(err) => err.expect("read lockctl's output"),
        Err(_) => panic!(
            "lockctl exited ({code}), but processes it started still hold its stdout or stderr open"
        ),
    };
    (code, String::from_utf8_lossy(&stderr).into_owned())
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

/// The first line of `lockctl status`: `held` or `free` (holders follow on their own
/// lines where the backend reports them).
pub fn first_line(stdout: &str) -> &str {
    stdout.lines().next().unwrap_or_default().trim()
}

/// `lockctl [global] run --watchdog-lease 3s jobs -- sh -c <sleeper "h">`, once its
/// command runs (it writes its token to `h.token`).
pub async fn hold_with_sleeper(ctl: &Lockctl, global: &[&str]) -> Child {
    let command = sleeper("h");
    let mut args = global.to_vec();
    args.extend([
        "run",
        "--watchdog-lease",
        "3s",
        "jobs",
        "--",
        "sh",
        "-c",
        &command,
    ]);
    let holder = ctl.spawn(&args);
    ctl.wait_for_sleeper("h").await;
    holder
}

/// Every scenario, in order, on one backend; `backend` is what `LOCK_BACKEND` says.
pub async fn all_scenarios(url: &str, backend: &str) {
    let started = Instant::now();
    two_runs_serialise(url, backend).await;
    no_wait_fails_at_once_while_held(url).await;
    sigint_reaches_the_command_and_the_lock_is_released(url).await;
    force_unlock_kills_the_command_with_the_lost_code(url).await;
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
    ctl.wait_for_sleeper("h").await;
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
    assert_eq!((code, first_line(&stdout)), (1, "held"));

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
    ctl.wait_for_sleeper("h").await;
    signal(&holder, libc::SIGINT);
    let (code, stderr) = finish(holder).await;
    assert_eq!(code, 130, "{stderr}");
    assert_eq!(ctl.read("h.signal"), "INT");
    let (code, stdout, _) = ctl.output(&["status", "jobs"]).await;
    assert_eq!((code, stdout.trim()), (0, "free"));
    // A waiting lockctl given SIGINT gives up without running anything.
    let holder = ctl.spawn(&["run", "jobs", "--", "sh", "-c", &sleeper("h2")]);
    ctl.wait_for_sleeper("h2").await;
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
/// kills its command at once (another run may hold the lock already: no SIGTERM and
/// grace, which the command's trap would show) and exits with the lost code.
pub async fn force_unlock_kills_the_command_with_the_lost_code(url: &str) {
    let ctl = Lockctl::new(url, "force");
    let holder = hold_with_sleeper(&ctl, &["--json"]).await;
    let (code, _, stderr) = ctl.output(&["force-unlock", "jobs"]).await;
    assert_eq!(code, USAGE, "no terminal, no --yes: refused: {stderr}");
    let (code, stdout, stderr) = ctl.output(&["force-unlock", "--yes", "jobs"]).await;
    assert_eq!((code, stdout.trim()), (0, "unlocked"), "{stderr}");
    let unlocked = Instant::now();
    let (code, stderr) = finish(holder).await;
    assert_eq!(code, LOST, "{stderr}");
    assert!(
        !ctl.file("h.signal").exists(),
        "the command was given SIGTERM and time after its lock was gone"
    );
    assert!(stderr.contains("\"event\":\"lost\""), "{stderr}");
    println!(
        "lockctl PASS force_unlock_kills_the_command_with_the_lost_code (killed {:?} after the unlock)",
        unlocked.elapsed()
    );
}

/// A SIGKILLed lockctl releases nothing; its lock comes free when the watchdog lease
/// runs out.
pub async fn sigkill_of_lockctl_frees_the_lock_within_the_lease(url: &str) {
    let ctl = Lockctl::new(url, "sigkill");
    let lease = Duration::from_secs(2);
    // Whatever the command leaves running is killed when `marked` goes.
    let marked = Marked::new();
    let mut holder = ctl.spawn_marked(
        &marked,
        &[
            "run",
            "--watchdog-lease",
            "2s",
            "jobs",
            "--",
            "sh",
            "-c",
            "touch \"$D/h.started\"; exec sleep 120",
        ],
    );
    ctl.wait_for_file("h.started").await;
    signal(&holder, libc::SIGKILL);
    let _ = holder.wait().await;
    let killed = Instant::now();
    let (code, _, stderr) = ctl
        .output(&["run", "--wait", "20s", "jobs", "--", "true"])
        .await;
    let freed_after = killed.elapsed();
    assert_eq!(code, 0, "{stderr}");
    assert!(
        freed_after < lease + Duration::from_secs(8),
        "free within the lease (plus slack): {freed_after:?}"
    );
    println!("lockctl PASS sigkill_of_lockctl_frees_the_lock_within_the_lease ({freed_after:?})");
}

/// Runs each scenario to its end, one after the other, each in a task of its own so
/// that one failing does not hide the others; then fails listing the ones that failed.
macro_rules! each_scenario {
    ($url:expr, $backend:expr, [$($scenario:ident),+ $(,)?]) => {{
        let mut failed = Vec::new();
        $(
            let (url, backend) = ($url.to_owned(), $backend.to_owned());
            let outcome = tokio::spawn(async move { $scenario(&url, &backend).await }).await;
            if outcome.is_err() {
                failed.push(stringify!($scenario));
            }
        )+
        assert!(failed.is_empty(), "[{}] failed: {failed:?}", $backend);
    }};
}

/// Every process-group scenario on one backend.
pub async fn group_scenarios(url: &str, backend: &str) {
    each_scenario!(
        url,
        backend,
        [
            sigkill_of_lockctl_takes_the_whole_command_with_it,
            force_unlock_stops_every_process_of_the_command,
            sigterm_to_lockctl_reaches_every_process_of_the_command,
            a_command_that_ignores_sigterm_is_killed_before_its_lease_ends,
            a_command_is_gone_before_its_lease_runs_out,
            a_process_that_left_the_group_is_killed_with_it,
            a_killed_supervisor_leaves_nothing_running,
        ]
    );
}

/// The shell command of the group scenarios: `sh` with a subshell in the background
/// whose `sleep` is the command's grandchild, and a `sleep` child in the foreground.
const SHELL_WITH_CHILDREN: &str = "(sleep 60; true) & sleep 60; true";

/// How long a process of the command may outlive lockctl: a moment, generously
/// counted on a loaded machine. Before the process-group work it lived on for the
/// whole 60 s of its sleep.
const A_MOMENT: Duration = Duration::from_secs(10);

/// SIGKILL lockctl (as the OOM killer would) while its command runs a shell with
/// children: no process of the command survives it by more than a moment.
pub async fn sigkill_of_lockctl_takes_the_whole_command_with_it(url: &str, backend: &str) {
    let ctl = Lockctl::new(url, "orphans");
    let marked = Marked::new();
    let mut holder = ctl.spawn_marked(
        &marked,
        &["run", "jobs", "--", "sh", "-c", SHELL_WITH_CHILDREN],
    );
    marked.wait_for_comm("sleep", 2).await;
    signal(&holder, libc::SIGKILL);
    let _ = holder.wait().await;
    match marked.gone_within(A_MOMENT).await {
        Ok(after) => println!(
            "lockctl[{backend}] PASS sigkill_of_lockctl_takes_the_whole_command_with_it (gone {after:?} after lockctl)"
        ),
        Err(left) => panic!(
            "[{backend}] {} process(es) of the command outlived a SIGKILLed lockctl by {A_MOMENT:?}: {left:?}",
            left.len()
        ),
    }
}

/// What a force-unlock of a `run --watchdog-lease <lease> jobs -- sh -c 'sleep 60; true'`
/// led to: lockctl's exit code and stderr, how long after the unlock it exited, and
/// the processes of the command still there at that moment.
struct ForcedRun {
    code: i32,
    stderr: String,
    took: Duration,
    left: Vec<Proc>,
}

async fn force_unlock_a_sleeping_run(ctl: &Lockctl, lease: &str) -> ForcedRun {
    let marked = Marked::new();
    let holder = ctl.spawn_marked(
        &marked,
        &[
            "run",
            "--watchdog-lease",
            lease,
            "jobs",
            "--",
            "sh",
            "-c",
            "sleep 60; true",
        ],
    );
    let lockctl = holder.id();
    marked.wait_for_comm("sleep", 1).await;
    let (code, stdout, stderr) = ctl.output(&["force-unlock", "--yes", "jobs"]).await;
    assert_eq!((code, stdout.trim()), (0, "unlocked"), "{stderr}");
    let unlocked = Instant::now();
    let (code, stderr) = finish(holder).await;
    let took = unlocked.elapsed();
    ForcedRun {
        code,
        stderr,
        took,
        left: marked.processes_but(lockctl),
    }
}

/// `force-unlock` while `sh -c 'sleep 60; true'` runs: every process of the command
/// is gone by the time lockctl exits with the lost code.
pub async fn force_unlock_stops_every_process_of_the_command(url: &str, backend: &str) {
    let ctl = Lockctl::new(url, "force-group");
    let run = force_unlock_a_sleeping_run(&ctl, "3s").await;
    assert_eq!(run.code, LOST, "[{backend}] {}", run.stderr);
    assert!(
        run.left.is_empty(),
        "[{backend}] still running when lockctl exited {LOST}: {:?}",
        run.left
    );
    println!(
        "lockctl[{backend}] PASS force_unlock_stops_every_process_of_the_command (exit {LOST} {:?} after the unlock)",
        run.took
    );
}

/// On a backend that tells a holder of a force-unlock (Redis, etcd, ZooKeeper), lockctl
/// stops its command and exits with the lost code within a second of the unlock (plus
/// slack for a loaded machine), not at its next renewal: with a 30 s watchdog lease
/// that comes 10 s after the grant.
pub async fn force_unlock_is_noticed_within_a_second(url: &str, backend: &str) {
    let ctl = Lockctl::new(url, "force-notice");
    let run = force_unlock_a_sleeping_run(&ctl, "30s").await;
    assert_eq!(run.code, LOST, "[{backend}] {}", run.stderr);
    assert!(
        run.took < Duration::from_secs(1) + Duration::from_secs(3),
        "[{backend}] lockctl exited {LOST} {:?} after the force-unlock; the next renewal comes 10 s after the grant",
        run.took
    );
    println!(
        "lockctl[{backend}] PASS force_unlock_is_noticed_within_a_second (exit {LOST} {:?} after the unlock)",
        run.took
    );
}

/// SIGTERM to lockctl (systemd stop, `kill`) reaches every process of the command, not
/// just the shell; lockctl exits once they are gone.
pub async fn sigterm_to_lockctl_reaches_every_process_of_the_command(url: &str, backend: &str) {
    let ctl = Lockctl::new(url, "term-group");
    let marked = Marked::new();
    let holder = ctl.spawn_marked(
        &marked,
        &["run", "jobs", "--", "sh", "-c", SHELL_WITH_CHILDREN],
    );
    let lockctl = holder.id();
    marked.wait_for_comm("sleep", 2).await;
    signal(&holder, libc::SIGTERM);
    let (code, stderr) = finish(holder).await;
    let left = marked.processes_but(lockctl);
    assert_eq!(
        code, 143,
        "[{backend}] the command died of SIGTERM: {stderr}"
    );
    assert!(
        left.is_empty(),
        "[{backend}] still running when lockctl exited: {left:?}"
    );
    let (code, stdout, _) = ctl.output(&["status", "jobs"]).await;
    assert_eq!((code, stdout.trim()), (0, "free"));
    println!("lockctl[{backend}] PASS sigterm_to_lockctl_reaches_every_process_of_the_command");
}

/// `lockctl run --lease 3s --kill-grace 1s jobs -c COMMAND`, once `sleeps` of its
/// `sleep`s run, to the end: lockctl's exit code and stderr, and the processes of the
/// command still there when it exited.
async fn outrun_a_fixed_lease(
    url: &str,
    namespace: &str,
    command: &str,
    sleeps: usize,
) -> (i32, String, Vec<Proc>) {
    let ctl = Lockctl::new(url, namespace);
    let marked = Marked::new();
    let holder = ctl.spawn_marked(
        &marked,
        &[
            "run",
            "--lease",
            "3s",
            "--kill-grace",
            "1s",
            "jobs",
            "-c",
            command,
        ],
    );
    let lockctl = holder.id();
    marked.wait_for_comm("sleep", sleeps).await;
    let (code, stderr) = finish(holder).await;
    (code, stderr, marked.processes_but(lockctl))
}

/// Whether `--lease` works on `backend` (ZooKeeper's lease is its session).
fn has_fixed_leases(backend: &str) -> bool {
    backend != "zookeeper"
}

/// A command that ignores SIGTERM, with a background child, and a fixed lease it
/// outruns: all of it gets SIGKILL before lockctl exits with the lost code.
pub async fn a_command_that_ignores_sigterm_is_killed_before_its_lease_ends(
    url: &str,
    backend: &str,
) {
    if !has_fixed_leases(backend) {
        println!("lockctl[{backend}] SKIP a_command_that_ignores_sigterm_is_killed_before_its_lease_ends: no fixed leases");
        return;
    }
    // An ignored SIGTERM is inherited: the sleeps ignore it too.
    let command = "trap '' TERM; (sleep 60; true) & sleep 60; true";
    let (code, stderr, left) = outrun_a_fixed_lease(url, "grace", command, 2).await;
    assert_eq!(code, LOST, "[{backend}] {stderr}");
    assert!(
        left.is_empty(),
        "[{backend}] still running when lockctl exited {LOST}: {left:?}"
    );
    println!(
        "lockctl[{backend}] PASS a_command_that_ignores_sigterm_is_killed_before_its_lease_ends"
    );
}

/// A fixed lease shorter than the command, which ignores SIGTERM, and a grace longer
/// than the lease: the command is stopped before the lease runs out, so the next run,
/// which gets the lock when it does, never overlaps it. Each records the time of day
/// (the holder every 20 ms), compared at the end.
pub async fn a_command_is_gone_before_its_lease_runs_out(url: &str, backend: &str) {
    if !has_fixed_leases(backend) {
        println!(
            "lockctl[{backend}] SKIP a_command_is_gone_before_its_lease_runs_out: no fixed leases"
        );
        return;
    }
    let ctl = Lockctl::new(url, "expiring");
    let holder = ctl.spawn(&[
        "run",
        "--lease",
        "3s",
        "--kill-grace",
        "8s",
        "jobs",
        "-c",
        "trap '' TERM; while :; do date +%s%N >> \"$D/a.times\"; sleep 0.02; done",
    ]);
    ctl.wait_for_file("a.times").await;
    let (code, _, stderr) = ctl
        .output(&[
            "run",
            "--wait",
            "20s",
            "jobs",
            "-c",
            "date +%s%N > \"$D/b.start\"",
        ])
        .await;
    assert_eq!(code, 0, "[{backend}] the next run: {stderr}");
    let (code, stderr) = finish(holder).await;
    assert_eq!(code, LOST, "[{backend}] {stderr}");
    let nanos = |line: &str| line.trim().parse::<u128>().expect("a time of day");
    let last = ctl.read("a.times").lines().map(nanos).max().unwrap();
    let next = nanos(&ctl.read("b.start"));
    assert!(
        last < next,
        "[{backend}] the command ran {} ms into the next run's hold",
        (last - next) / 1_000_000
    );
    println!(
        "lockctl[{backend}] PASS a_command_is_gone_before_its_lease_runs_out (gone {} ms before the next run)",
        (next - last) / 1_000_000
    );
}

/// A command that moved a process out of its process group (`setsid`, as daemons and
/// `timeout` do), which ignores SIGTERM, and a fixed lease it outruns: that process
/// is killed too before lockctl exits with the lost code, not left running without
/// the lock.
pub async fn a_process_that_left_the_group_is_killed_with_it(url: &str, backend: &str) {
    if !has_fixed_leases(backend) {
        println!("lockctl[{backend}] SKIP a_process_that_left_the_group_is_killed_with_it: no fixed leases");
        return;
    }
    let command = "setsid sh -c 'trap \"\" TERM; sleep 60; true' & wait";
    let (code, stderr, left) = outrun_a_fixed_lease(url, "escaped", command, 1).await;
    assert_eq!(code, LOST, "[{backend}] {stderr}");
    assert!(
        left.is_empty(),
        "[{backend}] a process that left the group still runs without the lock: {left:?}"
    );
    println!("lockctl[{backend}] PASS a_process_that_left_the_group_is_killed_with_it");
}

/// lockctl stopped (SIGSTOP, as a stopped job or a starved process) for two thirds of
/// a watchdog lease, right after its grant, then continued: its stop timer fires late,
/// but the lease is still there to renew, so the command runs on and ends on its own.
pub async fn a_stop_shorter_than_the_lease_leaves_the_command_running(url: &str, backend: &str) {
    let ctl = Lockctl::new(url, "paused");
    let holder = ctl.spawn(&[
        "run",
        "--watchdog-lease",
        "6s",
        "jobs",
        "-c",
        "touch \"$D/in\"; sleep 7; touch \"$D/out\"",
    ]);
    ctl.wait_for_file("in").await;
    signal(&holder, libc::SIGSTOP);
    tokio::time::sleep(Duration::from_secs(4)).await;
    signal(&holder, libc::SIGCONT);
    let (code, stderr) = finish(holder).await;
    assert_eq!(code, 0, "[{backend}] the command was stopped: {stderr}");
    assert!(ctl.file("out").exists(), "[{backend}] {stderr}");
    println!("lockctl[{backend}] PASS a_stop_shorter_than_the_lease_leaves_the_command_running");
}

/// The command's supervisor (lockctl's only child) SIGKILLed alone: lockctl stops
/// what is left of the command's group before it releases, and says so (exit 70).
pub async fn a_killed_supervisor_leaves_nothing_running(url: &str, backend: &str) {
    let ctl = Lockctl::new(url, "supervisor");
    let marked = Marked::new();
    let holder = ctl.spawn_marked(
        &marked,
        &[
            "run",
            "--kill-grace",
            "1s",
            "jobs",
            "--",
            "sh",
            "-c",
            SHELL_WITH_CHILDREN,
        ],
    );
    let lockctl = holder.id().map(|pid| pid as i32);
    let found = marked.wait_for_comm("sleep", 2).await;
    let supervisor = found
        .iter()
        .find(|p| Some(p.ppid) == lockctl)
        .unwrap_or_else(|| panic!("lockctl's child among {found:?}"));
    // SAFETY: kill(2) of a process this scenario started.
    unsafe {
        libc::kill(supervisor.pid, libc::SIGKILL);
    }
    let (code, stderr) = finish(holder).await;
    let left = marked.processes_but(lockctl.map(|pid| pid as u32));
    assert_eq!(code, 70, "[{backend}] {stderr}");
    assert!(stderr.contains("supervisor"), "[{backend}] {stderr}");
    assert!(
        left.is_empty(),
        "[{backend}] still running when lockctl exited: {left:?}"
    );
    let (code, stdout, _) = ctl.output(&["status", "jobs"]).await;
    assert_eq!((code, stdout.trim()), (0, "free"));
    println!("lockctl[{backend}] PASS a_killed_supervisor_leaves_nothing_running");
}

/// Every option scenario on one backend.
pub async fn option_scenarios(url: &str, backend: &str) {
    each_scenario!(
        url,
        backend,
        [
            conflict_exit_code_separates_the_commands_own_code,
            a_command_string_runs_through_sh,
            shared_runs_overlap_and_a_plain_run_waits_for_them,
            fair_runs_and_plain_runs_exclude_each_other,
        ]
    );
}

/// A shell command that says it is in (`$D/<prefix>.in`), waits for `$D/<go>`, then
/// says it is out (`$D/<prefix>.out`).
pub fn until_go(prefix: &str, go: &str) -> String {
    format!(
        "touch \"$D/{prefix}.in\"; while [ ! -e \"$D/{go}\" ]; do sleep 0.02; done; touch \"$D/{prefix}.out\""
    )
}

/// `-E N` / `--conflict-exit-code N` is the code for "not acquired", so a command's
/// own 75 is not mistaken for it; `wait` uses it too.
pub async fn conflict_exit_code_separates_the_commands_own_code(url: &str, backend: &str) {
    let ctl = Lockctl::new(url, "conflict");
    let (code, _, stderr) = ctl
        .output(&[
            "run",
            "--conflict-exit-code",
            "99",
            "jobs",
            "--",
            "sh",
            "-c",
            "exit 75",
        ])
        .await;
    assert_eq!(code, 75, "[{backend}] the command's own 75: {stderr}");
    let holder = ctl.spawn(&["run", "jobs", "--", "sh", "-c", &until_go("h", "go")]);
    ctl.wait_for_file("h.in").await;
    let (code, _, stderr) = ctl
        .output(&["run", "-E", "99", "-n", "jobs", "--", "true"])
        .await;
    assert_eq!(code, 99, "[{backend}] not acquired: {stderr}");
    assert!(stderr.contains("not acquired"), "{stderr}");
    let (code, _, stderr) = ctl
        .output(&["run", "-E", "98", "-w", "200ms", "jobs", "--", "true"])
        .await;
    assert_eq!(code, 98, "[{backend}] still held after the wait: {stderr}");
    let (code, _, stderr) = ctl
        .output(&["wait", "-E", "97", "-w", "200ms", "jobs"])
        .await;
    assert_eq!(code, 97, "[{backend}] wait ran out: {stderr}");
    std::fs::write(ctl.file("go"), "").unwrap();
    let (code, stderr) = finish(holder).await;
    assert_eq!(code, 0, "{stderr}");
    println!("lockctl[{backend}] PASS conflict_exit_code_separates_the_commands_own_code");
}

/// `-c "command string"` runs the string with `sh -c`, as flock's `-c` does; a
/// command after it as well is refused.
pub async fn a_command_string_runs_through_sh(url: &str, backend: &str) {
    let ctl = Lockctl::new(url, "string");
    let (code, _, stderr) = ctl
        .output(&[
            "run",
            "jobs",
            "-c",
            "echo \"$LOCK_NAME\" > \"$D/c.out\"; exit 3",
        ])
        .await;
    assert_eq!(code, 3, "[{backend}] {stderr}");
    assert_eq!(ctl.read("c.out"), "jobs");
    let (code, _, stderr) = ctl.output(&["run", "--command", "exit 4", "jobs"]).await;
    assert_eq!(code, 4, "[{backend}] {stderr}");
    let (code, _, stderr) = ctl
        .output(&["run", "jobs", "-c", "true", "--", "true"])
        .await;
    assert_eq!(code, USAGE, "[{backend}] a string and a command: {stderr}");
    println!("lockctl[{backend}] PASS a_command_string_runs_through_sh");
}

/// `--shared` takes the read side: two shared runs hold it at once; a plain run is
/// refused while they do, and a waiting one runs only after both are out.
pub async fn shared_runs_overlap_and_a_plain_run_waits_for_them(url: &str, backend: &str) {
    let ctl = Lockctl::new(url, "shared");
    let a = ctl.spawn(&[
        "run",
        "--shared",
        "jobs",
        "--",
        "sh",
        "-c",
        &until_go("a", "go"),
    ]);
    let b = ctl.spawn(&["run", "-s", "jobs", "--", "sh", "-c", &until_go("b", "go")]);
    // Neither leaves before `go`: both in at once is the overlap.
    ctl.wait_for_file("a.in").await;
    ctl.wait_for_file("b.in").await;
    let (code, _, stderr) = ctl
        .output(&["run", "--no-wait", "jobs", "--", "true"])
        .await;
    assert_eq!(
        code, NOT_ACQUIRED,
        "[{backend}] a plain run while shared runs hold: {stderr}"
    );
    let (code, stdout, _) = ctl.output(&["status", "jobs"]).await;
    assert_eq!(
        (code, first_line(&stdout)),
        (1, "held"),
        "[{backend}] status sees shared holders"
    );
    let plain = ctl.spawn(&[
        "run",
        "jobs",
        "--",
        "sh",
        "-c",
        "test -e \"$D/a.out\" && test -e \"$D/b.out\" && touch \"$D/c.ok\"",
    ]);
    std::fs::write(ctl.file("go"), "").unwrap();
    for child in [a, b, plain] {
        let (code, stderr) = finish(child).await;
        assert_eq!(code, 0, "[{backend}] {stderr}");
    }
    assert!(
        ctl.file("c.ok").exists(),
        "[{backend}] the plain run ran only after both shared runs were out"
    );
    // And the other way round: a shared run is refused while a plain run holds.
    let holder = ctl.spawn(&["run", "jobs", "--", "sh", "-c", &until_go("x", "go2")]);
    ctl.wait_for_file("x.in").await;
    let (code, _, stderr) = ctl.output(&["run", "-s", "-n", "jobs", "--", "true"]).await;
    assert_eq!(
        code, NOT_ACQUIRED,
        "[{backend}] a shared run while a plain run holds: {stderr}"
    );
    std::fs::write(ctl.file("go2"), "").unwrap();
    finish(holder).await;
    println!("lockctl[{backend}] PASS shared_runs_overlap_and_a_plain_run_waits_for_them");
}

/// `--fair` runs hold the same lock as plain runs: each excludes the other.
pub async fn fair_runs_and_plain_runs_exclude_each_other(url: &str, backend: &str) {
    let ctl = Lockctl::new(url, "fair");
    let fair = ctl.spawn(&[
        "run",
        "--fair",
        "jobs",
        "--",
        "sh",
        "-c",
        &until_go("f", "go"),
    ]);
    ctl.wait_for_file("f.in").await;
    let (code, _, stderr) = ctl.output(&["run", "-n", "jobs", "--", "true"]).await;
    assert_eq!(
        code, NOT_ACQUIRED,
        "[{backend}] a plain run while a fair run holds: {stderr}"
    );
    let (code, _, stderr) = ctl
        .output(&["run", "--fair", "-n", "jobs", "--", "true"])
        .await;
    assert_eq!(
        code, NOT_ACQUIRED,
        "[{backend}] a fair run while a fair run holds: {stderr}"
    );
    std::fs::write(ctl.file("go"), "").unwrap();
    let (code, stderr) = finish(fair).await;
    assert_eq!(code, 0, "{stderr}");
    let plain = ctl.spawn(&["run", "jobs", "--", "sh", "-c", &until_go("p", "go2")]);
    ctl.wait_for_file("p.in").await;
    let (code, _, stderr) = ctl
        .output(&["run", "--fair", "-n", "jobs", "--", "true"])
        .await;
    assert_eq!(
        code, NOT_ACQUIRED,
        "[{backend}] a fair run while a plain run holds: {stderr}"
    );
    // A fair run that waits gets in once the plain run is out.
    let waiter = ctl.spawn(&[
        "run",
        "--fair",
        "jobs",
        "--",
        "sh",
        "-c",
        "test -e \"$D/p.out\" && touch \"$D/w.ok\"",
    ]);
    std::fs::write(ctl.file("go2"), "").unwrap();
    for child in [plain, waiter] {
        let (code, stderr) = finish(child).await;
        assert_eq!(code, 0, "[{backend}] {stderr}");
    }
    assert!(
        ctl.file("w.ok").exists(),
        "[{backend}] the fair waiter ran after the plain run"
    );
    println!("lockctl[{backend}] PASS fair_runs_and_plain_runs_exclude_each_other");
}

/// The path of a file under `dir`, as a URL for SQLite.
pub fn sqlite_url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("locks.db").display())
}

/// `status` names the holder (what its client said of itself: host and pid by default,
/// its token, since when), and `force-unlock --token N` breaks only the holder with
/// that token: a wrong token changes nothing, the right one stops the command.
pub async fn status_names_the_holder_and_a_token_breaks_only_it(url: &str, backend: &str) {
    let ctl = Lockctl::new(url, "holder");
    let holder = hold_with_sleeper(&ctl, &[]).await;
    let token: u64 = ctl.read("h.token").parse().unwrap();
    let (code, stdout, stderr) = ctl.output(&["status", "jobs"]).await;
    assert_eq!((code, first_line(&stdout)), (1, "held"), "{stderr}");
    let line = stdout.lines().nth(1).unwrap_or_default();
    let pid = holder.id().expect("lockctl's pid");
    for part in [format!("pid {pid}"), format!("token {token}")] {
        assert!(
            line.contains(&part),
            "no `{part}` in the holder line: {stdout}"
        );
    }
    // Since when, where the backend keeps the grant's time (etcd keeps none).
    if backend != "etcd" {
        assert!(line.contains("for "), "no time held: {stdout}");
    }
    let (_, _, events) = ctl.output(&["--json", "status", "jobs"]).await;
    assert!(
        events.contains(&format!("\"token\":{token}")),
        "the status event lists the holder's token: {events}"
    );

    let wrong = (token + 1).to_string();
    let (code, stdout, stderr) = ctl
        .output(&["force-unlock", "--yes", "--token", &wrong, "jobs"])
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("nothing changed"), "{stdout}");
    let (code, _, _) = ctl.output(&["status", "jobs"]).await;
    assert_eq!(code, 1, "a wrong token breaks nothing");

    let right = token.to_string();
    let (code, stdout, stderr) = ctl
        .output(&["force-unlock", "--yes", "--token", &right, "jobs"])
        .await;
    assert_eq!((code, stdout.trim()), (0, "unlocked"), "{stderr}");
    let (code, stderr) = finish(holder).await;
    assert_eq!(code, LOST, "[{backend}] {stderr}");
    println!("lockctl[{backend}] PASS status_names_the_holder_and_a_token_breaks_only_it: {line}");
}

/// `run -N 2`: two runs of one name hold at once, a third is refused (`--no-wait`)
/// until one of them ends, and a run that names another count is a usage error.
/// `status`, `wait` and `force-unlock` with `-N 2` look at and break those permits.
pub async fn at_most_n_runs_at_once(url: &str) {
    let ctl = Lockctl::new(url, "permits");
    let run =
        |prefix: &str| ctl.spawn(&["run", "-N", "2", "jobs", "--", "sh", "-c", &sleeper(prefix)]);
    let a = run("a");
    ctl.wait_for_sleeper("a").await;
    let b = run("b");
    ctl.wait_for_sleeper("b").await;
    let (a_token, b_token): (u64, u64) = (
        ctl.read("a.token").parse().unwrap(),
        ctl.read("b.token").parse().unwrap(),
    );
    assert!(
        b_token > a_token,
        "tokens increase: {a_token} then {b_token}"
    );
    let (code, _, stderr) = ctl
        .output(&["run", "-N", "2", "--no-wait", "jobs", "--", "true"])
        .await;
    assert_eq!(code, NOT_ACQUIRED, "a third run while two hold: {stderr}");
    let (code, _, stderr) = ctl
        .output(&["run", "-N", "3", "--no-wait", "jobs", "--", "true"])
        .await;
    assert_eq!(code, 64, "another count is a usage error: {stderr}");
    assert!(stderr.contains("2 permits"), "{stderr}");
    // `status -N 2`: both permits held (exit 1), each holder with its token.
    let (code, stdout, stderr) = ctl.output(&["status", "-N", "2", "jobs"]).await;
    assert_eq!((code, first_line(&stdout)), (1, "held"), "{stderr}");
    assert!(stdout.contains("2 of 2 permits held"), "{stdout}");
    for token in [a_token, b_token] {
        assert!(stdout.contains(&format!("token {token}")), "{stdout}");
    }
    let (code, _, _) = ctl.output(&["status", "jobs"]).await;
    assert_eq!(
        code, 0,
        "the lock NAME is another lock than the semaphore NAME"
    );
    let (code, _, _) = ctl
        .output(&["wait", "-N", "2", "--wait", "200ms", "jobs"])
        .await;
    assert_eq!(code, NOT_ACQUIRED, "no permit frees within the wait");
    // `force-unlock -N 2 --token`: only that holder's permit; its run stops.
    let (code, stdout, stderr) = ctl
        .output(&[
            "force-unlock",
            "-N",
            "2",
            "--yes",
            "--token",
            &a_token.to_string(),
            "jobs",
        ])
        .await;
    assert_eq!((code, stdout.trim()), (0, "unlocked"), "{stderr}");
    assert_eq!(finish(a).await.0, LOST);
    let (code, stdout, stderr) = ctl.output(&["status", "-N", "2", "jobs"]).await;
    assert_eq!((code, first_line(&stdout)), (0, "free"), "{stderr}");
    assert!(stdout.contains("1 of 2 permits held"), "{stdout}");
    let (code, _, stderr) = ctl.output(&["wait", "-N", "2", "jobs"]).await;
    assert_eq!(code, 0, "a permit is free: {stderr}");
    let (code, _, stderr) = ctl
        .output(&["run", "-N", "2", "--no-wait", "jobs", "--", "true"])
        .await;
    assert_eq!(code, 0, "a permit is free once a run ended: {stderr}");
    signal(&b, libc::SIGTERM);
    assert_eq!(finish(b).await.0, 143);
    println!("lockctl PASS at_most_n_runs_at_once");
}

/// `elect`: one run of an election leads at a time, its term in LOCK_FENCING_TOKEN and
/// its value printed by `leader` and `status --election`; a waiting candidate leads
/// once the leader's command ends, or once `force-unlock --election` deposes the
/// leader (whose command is stopped with the lost code); with `--again`, a candidate
/// campaigns again after each run, with a higher term each time, until it is
/// interrupted; `wait --election` waits until nobody leads.
pub async fn one_leader_runs_at_a_time(url: &str) {
    let ctl = Lockctl::new(url, "elections");
    let (code, stdout, stderr) = ctl.output(&["leader", "office"]).await;
    assert_eq!((code, stdout.trim()), (1, "no leader"), "{stderr}");
    let elect = |value: &str, prefix: &str| {
        ctl.spawn(&[
            "elect",
            // A deposed leader hears of it by its next renewal where the server does
            // not tell it sooner (SQL).
            "--watchdog-lease",
            "3s",
            "--value",
            value,
            "office",
            "--",
            "sh",
            "-c",
            &sleeper(prefix),
        ])
    };
    let a = elect("alpha", "a");
    ctl.wait_for_sleeper("a").await;
    let a_term: u64 = ctl.read("a.token").parse().unwrap();
    let (code, stdout, stderr) = ctl.output(&["leader", "office"]).await;
    assert_eq!(
        (code, stdout.trim()),
        (0, format!("alpha (term {a_term})").as_str()),
        "{stderr}"
    );
    let (code, _, stderr) = ctl
        .output(&["elect", "--no-wait", "office", "--", "true"])
        .await;
    assert_eq!(code, NOT_ACQUIRED, "two leaders: {stderr}");
    let b = elect("beta", "b");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !ctl.file("b.started").exists(),
        "a second leader ran beside the first"
    );
    signal(&a, libc::SIGTERM);
    assert_eq!(finish(a).await.0, 143);
    ctl.wait_for_sleeper("b").await;
    let b_term: u64 = ctl.read("b.token").parse().unwrap();
    assert!(b_term > a_term, "terms increase: {a_term} then {b_term}");
    let (_, stdout, _) = ctl.output(&["leader", "office"]).await;
    assert_eq!(stdout.trim(), format!("beta (term {b_term})"));
    let (code, stdout, stderr) = ctl.output(&["status", "--election", "office"]).await;
    assert_eq!(code, 1, "{stdout} {stderr}");
    assert!(
        stdout.contains(&format!("by beta, token {b_term}")),
        "{stdout}"
    );
    let (code, _, stderr) = ctl
        .output(&["wait", "--election", "-w", "300ms", "office"])
        .await;
    assert_eq!(code, NOT_ACQUIRED, "{stderr}");
    let (code, _, stderr) = ctl
        .output(&["status", "--election", "-N", "2", "office"])
        .await;
    assert_eq!(code, USAGE, "{stderr}");
    let (code, _, stderr) = ctl
        .output(&[
            "force-unlock",
            "--election",
            "--yes",
            "--token",
            "1",
            "office",
        ])
        .await;
    assert_eq!(code, USAGE, "{stderr}");
    assert!(!ctl.file("b.signal").exists(), "{stderr}");

    // --again: after `b` ends, `c` leads run after run, each with a higher term.
    let c = ctl.spawn(&[
        "elect",
        "--again",
        "--value",
        "gamma",
        "office",
        "--",
        "sh",
        "-c",
        "echo \"$LOCK_FENCING_TOKEN $LOCK_LEADER_VALUE\" >> \"$D/c.runs\"; \
         [ $(wc -l < \"$D/c.runs\") -ge 3 ] && touch \"$D/c.thrice\"; sleep 0.1",
    ]);
    let (code, stdout, stderr) = ctl
        .output(&["force-unlock", "--election", "--yes", "office"])
        .await;
    assert_eq!((code, stdout.trim()), (0, "unlocked"), "{stderr}");
    let (code, stderr) = finish(b).await;
    assert_eq!(
        code, LOST,
        "the deposed leader's command is stopped: {stderr}"
    );
    ctl.wait_for_file("c.thrice").await;
    signal(&c, libc::SIGTERM);
    let (code, stderr) = finish(c).await;
    assert!(
        code == 0 || code == 143,
        "--again ends on SIGTERM: {code} {stderr}"
    );
    let runs = ctl.read("c.runs");
    let terms: Vec<u64> = runs
        .lines()
        .map(|line| {
            let (term, value) = line.split_once(' ').expect("term and value");
            assert_eq!(value, "gamma", "{runs}");
            term.parse().unwrap()
        })
        .collect();
    assert!(terms.len() >= 3, "{runs}");
    assert!(terms[0] > b_term, "{runs}");
    assert!(
        terms.windows(2).all(|w| w[0] < w[1]),
        "terms increase: {runs}"
    );
    let (code, stdout, _) = ctl.output(&["leader", "office"]).await;
    assert_eq!((code, stdout.trim()), (1, "no leader"));
    let (code, _, stderr) = ctl.output(&["wait", "--election", "office"]).await;
    assert_eq!(code, 0, "{stderr}");
    println!("lockctl PASS one_leader_runs_at_a_time");
}
