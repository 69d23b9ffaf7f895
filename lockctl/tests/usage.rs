//! Bad input and unreachable servers: one line on stderr and a documented exit code,
//! at once; never a panic or a hang.

mod common;

use std::time::{Duration, Instant};

use common::{Lockctl, UNAVAILABLE, USAGE};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_one_line_and_the_usage_code() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = common::sqlite_url(dir.path());
    let ctl = Lockctl::new(&sqlite, "usage");
    let cases: &[(&str, &[&str], &str)] = &[
        ("no command", &["run", "jobs"], "COMMAND"),
        (
            "bad duration",
            &["run", "--wait", "soon", "jobs", "--", "true"],
            "invalid duration",
        ),
        (
            "negative duration",
            &["run", "--lease", "-5s", "jobs", "--", "true"],
            "-5",
        ),
        (
            "unknown option",
            &["run", "--frobnicate", "jobs", "--", "true"],
            "--frobnicate",
        ),
        (
            "both waits",
            &["run", "--no-wait", "--wait", "1s", "jobs", "--", "true"],
            "cannot be used",
        ),
        ("bad name", &["run", "", "--", "true"], "name"),
        (
            "--url and --system",
            &["--system", "status", "jobs"],
            "cannot be used together",
        ),
        (
            "a command string and a command",
            &["run", "jobs", "-c", "true", "--", "true"],
            "cannot be used with",
        ),
        (
            "lease too short",
            &["run", "--lease", "0s", "jobs", "--", "true"],
            "lease",
        ),
    ];
    for (what, args, words) in cases {
        let started = Instant::now();
        let (code, _, stderr) = ctl.output(args).await;
        assert_eq!(code, USAGE, "{what}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{what}: one line: {stderr}");
        assert!(stderr.contains(words), "{what}: {stderr}");
        assert!(!stderr.contains("panicked"), "{what}: {stderr}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{what}: at once"
        );
    }
    for (url, words) in [
        ("not a url", "not a URL"),
        ("nosuch://host", "unknown or disabled"),
        ("redis://host:notaport", "Redis URL"),
        ("sqlite://", "file path"),
        // In-process only: it cannot exclude another lockctl.
        ("memory://", "other processes"),
    ] {
        let ctl = Lockctl::new(url, "usage");
        let (code, _, stderr) = ctl.output(&["run", "jobs", "--", "true"]).await;
        assert_eq!(code, USAGE, "{url}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{url}: {stderr}");
        assert!(stderr.contains(words), "{url}: {stderr}");
    }
    // A command that cannot be run: the shell's codes, and the lock is left free.
    let (code, _, stderr) = ctl.output(&["run", "jobs", "--", "/no/such/program"]).await;
    assert_eq!(code, 127, "{stderr}");
    let (code, _, stderr) = ctl
        .output(&["run", "jobs", "--", dir.path().to_str().unwrap()])
        .await;
    assert_eq!(code, 126, "a directory is not executable: {stderr}");
    let (_, stdout, _) = ctl.output(&["status", "jobs"]).await;
    assert_eq!(stdout.trim(), "free");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_the_unavailable_code_within_seconds() {
    let port = conformance_tests::server::free_port().unwrap();
    for url in [
        format!("redis://127.0.0.1:{port}"),
        format!("etcd://127.0.0.1:{port}"),
        format!("postgres://locks@127.0.0.1:{port}/locks"),
    ] {
        let ctl = Lockctl::new(&url, "down");
        let started = Instant::now();
        let (code, _, stderr) = ctl.output(&["run", "jobs", "--", "true"]).await;
        assert_eq!(code, UNAVAILABLE, "{url}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{url}: {stderr}");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{url}: {:?}",
            started.elapsed()
        );
    }
}

/// `lockctl --help` ends with every exit code lockctl gives itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_lists_the_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let ctl = Lockctl::new(&common::sqlite_url(dir.path()), "usage");
    let (code, stdout, stderr) = ctl.output(&["--help"]).await;
    assert_eq!(code, 0, "{stderr}");
    let codes = stdout
        .split("Exit codes:")
        .nth(1)
        .unwrap_or_else(|| panic!("no exit codes in --help: {stdout}"));
    for listed in ["64", "69", "70", "75", "79", "126, 127", "128 + N"] {
        assert!(codes.contains(listed), "{listed} missing: {codes}");
    }
}
