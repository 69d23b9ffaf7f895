//! lockctl against an SQLite file, and with no URL at all (the default file).

mod common;

use common::{all_scenarios, sqlite_url, Lockctl};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    all_scenarios(&sqlite_url(dir.path()), "sqlite").await;
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
