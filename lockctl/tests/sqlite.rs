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
async fn the_command_group_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    common::group_scenarios(&sqlite_url(dir.path()), "sqlite").await;
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
