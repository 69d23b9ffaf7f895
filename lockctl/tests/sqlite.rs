//! lockctl against an SQLite file, and with no URL at all (the default file).

mod common;

use std::time::{Duration, Instant};

use common::{all_scenarios, finish, signal, sqlite_url, until_go, Lockctl, Proc, NOT_ACQUIRED};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    all_scenarios(&sqlite_url(dir.path()), "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_n_runs_at_once_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    common::at_most_n_runs_at_once(&sqlite_url(dir.path())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_group_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    common::group_scenarios(&sqlite_url(dir.path()), "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_shorter_than_the_lease_leaves_the_command_running_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    common::a_stop_shorter_than_the_lease_leaves_the_command_running(
        &sqlite_url(dir.path()),
        "sqlite",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    common::option_scenarios(&sqlite_url(dir.path()), "sqlite").await;
}

/// `nohup lockctl run ...`: SIGHUP stays ignored in lockctl and in the command, and a
/// SIGHUP to lockctl changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nohup_keeps_sighup_ignored_in_lockctl_and_the_command() {
    const SIGHUP_BIT: u64 = 1 << (libc::SIGHUP - 1);
    let dir = tempfile::tempdir().unwrap();
    let ctl = Lockctl::new(&sqlite_url(dir.path()), "nohup");
    let script = format!(
        "grep ^SigIgn: /proc/$$/status > \"$D/ignored\"; {}",
        until_go("h", "go")
    );
    let holder = ctl
        .command_via(&["nohup"], &["run", "jobs", "--", "sh", "-c", &script])
        .spawn()
        .expect("start nohup lockctl");
    ctl.wait_for_file("h.in").await;
    // nohup execs lockctl: the pid is lockctl's.
    let lockctl = holder.id().unwrap() as i32;
    let in_lockctl = Proc::ignored_signals(lockctl);
    let line = ctl.read("ignored");
    let hex = line.trim_start_matches("SigIgn:").trim();
    let in_command = u64::from_str_radix(hex, 16).unwrap();
    signal(&holder, libc::SIGHUP);
    std::fs::write(ctl.file("go"), "").unwrap();
    let (code, stderr) = finish(holder).await;
    assert!(
        in_lockctl & SIGHUP_BIT != 0,
        "lockctl keeps the SIGHUP it inherited ignored (SigIgn {in_lockctl:016x})"
    );
    assert!(
        in_command & SIGHUP_BIT != 0,
        "the command inherits the ignored SIGHUP (SigIgn {in_command:016x})"
    );
    assert_eq!(code, 0, "a SIGHUP to lockctl changes nothing: {stderr}");
}

/// `wait --wait D` gives up only once D has passed (it gave up up to 1 s early), and
/// returns soon after the release (printed, not asserted: nothing here times speed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_waits_the_whole_limit() {
    let dir = tempfile::tempdir().unwrap();
    let ctl = Lockctl::new(&sqlite_url(dir.path()), "wait");
    let holder = ctl.spawn(&["run", "jobs", "--", "sh", "-c", &until_go("h", "go")]);
    ctl.wait_for_file("h.in").await;
    for limit in [Duration::from_secs(2), Duration::from_millis(1300)] {
        let arg = format!("{}ms", limit.as_millis());
        let started = Instant::now();
        let (code, _, stderr) = ctl.output(&["wait", "--wait", &arg, "jobs"]).await;
        let waited = started.elapsed();
        assert_eq!(code, NOT_ACQUIRED, "{stderr}");
        assert!(
            waited >= limit,
            "`wait --wait {arg}` gave up after {waited:?}, before its limit"
        );
    }
    // Returns once the lock is free: started while held, it has been looking a while.
    let waiter = ctl.spawn(&["wait", "jobs"]);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    std::fs::write(ctl.file("go"), "").unwrap();
    let (code, stderr) = finish(holder).await;
    assert_eq!(code, 0, "{stderr}");
    let released = Instant::now();
    let (code, stderr) = finish(waiter).await;
    assert_eq!(code, 0, "{stderr}");
    println!(
        "wait returned {:?} after the holder's lockctl exited",
        released.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_url_locks_live_in_the_state_directory() {
    let home = tempfile::tempdir().unwrap();
    let ctl = Lockctl::new("unused", "default");
    for state in [None, Some(home.path().join("xdg-state"))] {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_lockctl"));
        cmd.env_remove("LOCKCTL_URL")
            .env_remove("XDG_STATE_HOME")
            .env("HOME", home.path())
            .env("D", ctl.dir.path())
            .args([
                "run",
                "nightly",
                "--",
                "sh",
                "-c",
                "echo \"$LOCK_BACKEND\" > \"$D/backend\"",
            ]);
        let expected = match &state {
            Some(dir) => {
                cmd.env("XDG_STATE_HOME", dir);
                dir.join("lockctl/locks.db")
            }
            None => home.path().join(".local/state/lockctl/locks.db"),
        };
        let status = cmd.status().await.unwrap();
        assert!(status.success());
        assert_eq!(ctl.read("backend"), "sqlite");
        assert!(expected.exists(), "{} was made", expected.display());
    }
}

/// `--system`: one SQLite file for every user of the machine. Two users (uids 65534
/// and 65533, sharing a group, as with `install -d -m 2770 -g GROUP`) exclude each
/// other through it; a directory anyone could swap the file in is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_system_file_excludes_across_users() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    const GROUP: u32 = 4242;
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let setpriv = std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !root || !setpriv {
        println!("SKIP: running lockctl as two users needs root and setpriv");
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let mode = |path: &std::path::Path, bits: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(bits)).unwrap()
    };
    mode(base.path(), 0o755);
    let shared = base.path().join("lockctl");
    std::fs::create_dir(&shared).unwrap();
    std::os::unix::fs::chown(&shared, Some(0), Some(GROUP)).unwrap();
    mode(&shared, 0o2770);
    let scratch = base.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    mode(&scratch, 0o777);
    let marked = common::Marked::new();
    let as_user = |uid: u32, dir: &std::path::Path, args: &[&str]| {
        let mut cmd = tokio::process::Command::new("setpriv");
        cmd.args(["--reuid", &uid.to_string(), "--regid", &GROUP.to_string()])
            .args(["--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_lockctl"))
            .args(["--system", "--namespace", "system"])
            .args(args)
            .env_remove("LOCKCTL_URL")
            .env("LOCKCTL_SYSTEM_DIR", dir)
            .env("HOME", &scratch)
            .env("D", &scratch)
            .env(common::MARKER_VAR, &marked.marker)
            .current_dir(&scratch)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        cmd
    };
    let output = |mut cmd: tokio::process::Command| async move {
        let out = tokio::time::timeout(common::PATIENCE, cmd.output())
            .await
            .expect("lockctl ended in time")
            .expect("run lockctl");
        (
            common::code(out.status),
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let mut holder = as_user(
        65534,
        &shared,
        &["run", "jobs", "--", "sh", "-c", &until_go("h", "go")],
    )
    .spawn()
    .expect("start lockctl as uid 65534");
    let started = Instant::now();
    while !scratch.join("h.in").exists() {
        if holder.try_wait().unwrap().is_some() {
            let (code, stderr) = finish(holder).await;
            panic!("the first user's lockctl exited {code}: {stderr}");
        }
        assert!(
            started.elapsed() < common::PATIENCE,
            "the first user's command never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (code, _, stderr) = output(as_user(
        65533,
        &shared,
        &["run", "--no-wait", "jobs", "--", "true"],
    ))
    .await;
    assert_eq!(code, NOT_ACQUIRED, "another user is excluded: {stderr}");
    let (code, stdout, stderr) = output(as_user(65533, &shared, &["status", "jobs"])).await;
    assert_eq!((code, common::first_line(&stdout)), (1, "held"), "{stderr}");
    std::fs::write(scratch.join("go"), "").unwrap();
    let (code, stderr) = finish(holder).await;
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) = output(as_user(65533, &shared, &["run", "jobs", "--", "true"])).await;
    assert_eq!(code, 0, "the other user gets it once free: {stderr}");
    let file = std::fs::metadata(shared.join("locks.db")).unwrap();
    assert_eq!(file.mode() & 0o777, 0o666, "every user may use the file");

    // Refused: a directory everyone may write without the sticky bit, and a link.
    let open = base.path().join("open");
    std::fs::create_dir(&open).unwrap();
    mode(&open, 0o777);
    let link = base.path().join("link");
    std::os::unix::fs::symlink(&shared, &link).unwrap();
    for (dir, words) in [(&open, "sticky"), (&link, "symbolic link")] {
        let (code, _, stderr) = output(as_user(65533, dir, &["status", "jobs"])).await;
        assert_eq!(code, 70, "{}: {stderr}", dir.display());
        assert!(stderr.contains(words), "{}: {stderr}", dir.display());
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
}

/// A process that leaves the command's group (`setsid`) keeps the lock held until it
/// ends, though the command itself has exited; then lockctl releases and exits with
/// the command's code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_left_the_group_keeps_the_lock_until_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let ctl = Lockctl::new(&sqlite_url(dir.path()), "escapee");
    let marked = common::Marked::new();
    let holder = ctl.spawn_marked(
        &marked,
        &["run", "jobs", "--", "sh", "-c", "setsid sleep 60 & exit 3"],
    );
    let sleep = marked
        .wait_until(
            "the command's shell gone, its setsid sleep running",
            |found| {
                found.iter().any(|p| p.comm == "sleep") && !found.iter().any(|p| p.comm == "sh")
            },
        )
        .await
        .into_iter()
        .find(|p| p.comm == "sleep")
        .unwrap();
    assert_eq!(sleep.pgid, sleep.pid, "the sleep leads a group of its own");
    let (code, stdout, _) = ctl.output(&["status", "jobs"]).await;
    assert_eq!(
        (code, common::first_line(&stdout)),
        (1, "held"),
        "held while the sleep runs"
    );
    // SAFETY: kill(2) of the sleep this test started.
    unsafe {
        libc::kill(sleep.pid, libc::SIGKILL);
    }
    let (code, stderr) = finish(holder).await;
    assert_eq!(code, 3, "the command's own code: {stderr}");
    let (code, stdout, _) = ctl.output(&["status", "jobs"]).await;
    assert_eq!((code, stdout.trim()), (0, "free"));
}

/// `status` names the holder and `force-unlock --token N` breaks only it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_names_the_holder_and_a_token_breaks_only_it() {
    let dir = tempfile::tempdir().unwrap();
    common::status_names_the_holder_and_a_token_breaks_only_it(&sqlite_url(dir.path()), "sqlite")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_runs_at_a_time_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    common::one_leader_runs_at_a_time(&sqlite_url(dir.path())).await;
}
