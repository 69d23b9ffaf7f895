//! lockctl on a terminal: a pseudo-terminal whose session runs `sh` (no job control)
//! or an interactive `bash` (job control), with lockctl and its command inside.
//! Ctrl-C and Ctrl-Z are typed on the terminal, as a user would; a question is asked
//! there only when it has to be.

mod common;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{sqlite_url, Marked, Proc, MARKER_VAR, PATIENCE};
use conformance_tests::server::{specs, TestServer};

/// A session on a new pseudo-terminal: the leader runs `program`, with the terminal as
/// its controlling terminal and its stdin, stdout and stderr.
struct Session {
    master: File,
    leader: Child,
    output: Arc<Mutex<Vec<u8>>>,
}

impl Session {
    fn start(program: &mut Command) -> Session {
        let (mut master, mut slave) = (-1, -1);
        // SAFETY: openpty fills in two descriptors; the null pointers ask for no name,
        // default terminal settings and size.
        let rc = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: both descriptors were just opened and are owned here alone.
        let (master, slave) = unsafe { (File::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        let stdio = |fd: &OwnedFd| Stdio::from(fd.try_clone().expect("dup the terminal"));
        program
            .stdin(stdio(&slave))
            .stdout(stdio(&slave))
            .stderr(stdio(&slave));
        // SAFETY: setsid and ioctl are async-signal-safe; fd 0 is the terminal by now.
        unsafe {
            program.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let leader = program.spawn().expect("start the session leader");
        drop(slave);
        let output = Arc::new(Mutex::new(Vec::new()));
        let mut reader = master.try_clone().expect("dup the master");
        let sink = Arc::clone(&output);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // Ends with EIO once no process has the terminal open.
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Session {
            master,
            leader,
            output,
        }
    }

    /// Types `bytes` on the terminal.
    fn type_in(&mut self, bytes: &[u8]) {
        self.master.write_all(bytes).expect("write to the terminal");
    }

    /// What the terminal showed so far.
    fn shown(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().unwrap()).into_owned()
    }

    /// Waits until the terminal showed `text`.
    async fn wait_for_output(&self, text: &str) {
        let started = Instant::now();
        while !self.shown().contains(text) {
            assert!(
                started.elapsed() < PATIENCE,
                "the terminal never showed {text:?}; it showed:\n{}",
                self.shown()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The terminal's foreground process group.
    fn foreground(&self) -> i32 {
        // SAFETY: tcgetpgrp on a descriptor this owns.
        unsafe { libc::tcgetpgrp(self.master.as_raw_fd()) }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.leader.kill();
        let _ = self.leader.wait();
    }
}

/// Waits until `path` exists.
async fn wait_for_file(path: &Path) {
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

/// Waits until `check` holds for the process `pid`.
async fn wait_for_state(what: &str, pid: i32, check: impl Fn(&Proc) -> bool) {
    let started = Instant::now();
    loop {
        let proc = Proc::read(pid);
        if proc.as_ref().is_some_and(&check) {
            return;
        }
        assert!(started.elapsed() < PATIENCE, "{what}: {proc:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// "pgrp tpgid" of a shell, as the command scripts below write them.
fn groups(path: &Path) -> (i32, i32) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut words = text.split_whitespace().map(|w| w.parse::<i32>().unwrap());
    (words.next().unwrap(), words.next().unwrap())
}

/// Writes "pgrp tpgid" of the shell running it to `$D/<file>`.
fn record_groups(file: &str) -> String {
    format!("set -- $(cat /proc/$$/stat); echo \"$5 $8\" > \"$D/{file}\"")
}

/// `force-unlock` of a semaphore on a backend without semaphores (RedLock), typed on a
/// terminal: refused at once (exit 64), before any question is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_of_what_the_backend_lacks_is_refused_before_the_question() {
    let server = TestServer::start(&specs::REDIS)
        .await
        .expect("redis server");
    let redlock = server.url().replacen("redis://", "redlock://", 1);
    let mut session = Session::start(Command::new(env!("CARGO_BIN_EXE_lockctl")).args([
        "--url",
        &redlock,
        "force-unlock",
        "-N",
        "2",
        "jobs",
    ]));
    session.wait_for_output("semaphores").await;
    let exited = tokio::time::timeout(PATIENCE, async {
        loop {
            if let Some(status) = session.leader.try_wait().expect("lockctl's status") {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "lockctl still runs; the terminal shows:\n{}",
            session.shown()
        )
    });
    assert_eq!(exited.code(), Some(64), "{}", session.shown());
    assert!(
        !session.shown().contains("[y/N]"),
        "asked first: {}",
        session.shown()
    );
}

/// A script (no job control) runs lockctl on its terminal: the command gets a process
/// group of its own and the terminal; Ctrl-C reaches it there, lockctl exits 130, and
/// the script has the terminal back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_reaches_the_command_in_its_own_foreground_group() {
    let dir = tempfile::tempdir().unwrap();
    let marked = Marked::new();
    let command = format!("{}; touch \"$D/in\"; sleep 60", record_groups("command"));
    let script = format!(
        "\"$LOCKCTL\" --url \"$URL\" run jobs -- sh -c '{command}'; echo $? > \"$D/rc\"; {}",
        record_groups("after")
    );
    let mut session = Session::start(
        Command::new("sh")
            .args(["-c", &script])
            .env("LOCKCTL", env!("CARGO_BIN_EXE_lockctl"))
            .env("URL", sqlite_url(dir.path()))
            .env("D", dir.path())
            .env(MARKER_VAR, &marked.marker),
    );
    let script_group = session.leader.id() as i32;
    wait_for_file(&dir.path().join("in")).await;
    let (group, foreground) = groups(&dir.path().join("command"));
    assert_ne!(
        group, script_group,
        "the command runs in a process group of its own"
    );
    assert_eq!(
        foreground, group,
        "the command's group has the terminal (foreground {foreground}, command {group})"
    );
    // Typed once `sleep` runs: while the shell forks it, the child may drop a signal.
    marked.wait_for_comm("sleep", 1).await;
    session.type_in(b"\x03");
    wait_for_file(&dir.path().join("after")).await;
    let rc = std::fs::read_to_string(dir.path().join("rc")).unwrap();
    assert_eq!(rc.trim(), "130", "terminal shows:\n{}", session.shown());
    let (group, foreground) = groups(&dir.path().join("after"));
    assert_eq!(group, script_group);
    assert_eq!(foreground, script_group, "the script has the terminal back");
    assert!(
        marked.processes_but(Some(script_group as u32)).is_empty(),
        "nothing of the command is left: {:?}",
        marked.processes()
    );
}

/// lockctl SIGKILLed while its command has the terminal: the command is gone and the
/// script that ran lockctl gets the terminal back. Within a moment, not before it runs
/// on: the kernel wakes the script as it tells the supervisor, which then gives the
/// terminal back; the script looks (bounded) until it has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_lockctl_gives_the_terminal_back() {
    let dir = tempfile::tempdir().unwrap();
    let marked = Marked::new();
    let command = format!("{}; touch \"$D/in\"; sleep 60", record_groups("command"));
    let script = format!(
        "\"$LOCKCTL\" --url \"$URL\" run jobs -- sh -c '{command}'; echo $? > \"$D/rc\"; \
         i=0; while [ $i -lt 1000 ]; do set -- $(cat /proc/$$/stat); [ \"$5\" = \"$8\" ] && break; \
         i=$((i+1)); sleep 0.01; done; echo \"$5 $8 $i\" > \"$D/after\""
    );
    let session = Session::start(
        Command::new("sh")
            .args(["-c", &script])
            .env("LOCKCTL", env!("CARGO_BIN_EXE_lockctl"))
            .env("URL", sqlite_url(dir.path()))
            .env("D", dir.path())
            .env(MARKER_VAR, &marked.marker),
    );
    let script_group = session.leader.id() as i32;
    wait_for_file(&dir.path().join("in")).await;
    let (group, _) = groups(&dir.path().join("command"));
    assert_ne!(
        group, script_group,
        "the command runs in a process group of its own"
    );
    let lockctl = marked
        .processes()
        .into_iter()
        .find(|p| p.ppid == script_group)
        .expect("lockctl, the script's child");
    // SAFETY: kill(2) of the lockctl this test started.
    unsafe {
        libc::kill(lockctl.pid, libc::SIGKILL);
    }
    wait_for_file(&dir.path().join("after")).await;
    let after = std::fs::read_to_string(dir.path().join("after")).unwrap();
    let (_, foreground) = groups(&dir.path().join("after"));
    assert_eq!(
        foreground, script_group,
        "the script has the terminal back (pgrp, tpgid, looks: {after})"
    );
    let left = marked.gone_within(Duration::from_secs(10)).await;
    assert!(left.is_ok(), "the command outlived lockctl: {left:?}");
}

/// Ctrl-Z in an interactive bash stops the command and lockctl (bash reports the job
/// stopped and has the terminal); `fg` resumes both and gives the command the terminal
/// again; Ctrl-C then ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_z_stops_the_job_and_fg_resumes_it() {
    let dir = tempfile::tempdir().unwrap();
    let marked = Marked::new();
    let mut session = Session::start(
        Command::new("bash")
            .args(["--norc", "--noprofile", "-i"])
            .env("PS1", "$ ")
            .env("TERM", "dumb")
            .env("LOCKCTL", env!("CARGO_BIN_EXE_lockctl"))
            .env("URL", sqlite_url(dir.path()))
            .env("D", dir.path())
            .env(MARKER_VAR, &marked.marker),
    );
    let bash = session.leader.id() as i32;
    session.type_in(
        format!(
            "\"$LOCKCTL\" --url \"$URL\" run jobs -- sh -c '{}; touch \"$D/in\"; sleep 60'\n",
            record_groups("command")
        )
        .as_bytes(),
    );
    wait_for_file(&dir.path().join("in")).await;
    let (group, _) = groups(&dir.path().join("command"));
    let lockctl = marked
        .processes()
        .into_iter()
        .find(|p| p.ppid == bash)
        .expect("lockctl, bash's child");
    assert_ne!(
        group, lockctl.pgid,
        "the command runs in a process group of its own"
    );
    let sleep = marked
        .wait_for_comm("sleep", 1)
        .await
        .into_iter()
        .find(|p| p.comm == "sleep")
        .unwrap();

    session.type_in(b"\x1a");
    session.wait_for_output("Stopped").await;
    wait_for_state("the command stops", sleep.pid, |p| p.state == 'T').await;
    wait_for_state("lockctl stops", lockctl.pid, |p| p.state == 'T').await;
    assert_eq!(
        session.foreground(),
        bash,
        "bash has the terminal while the job is stopped"
    );

    session.type_in(b"fg\n");
    wait_for_state("lockctl runs again", lockctl.pid, |p| p.state != 'T').await;
    wait_for_state("the command runs again", sleep.pid, |p| p.state != 'T').await;
    let started = Instant::now();
    while session.foreground() != group {
        assert!(
            started.elapsed() < PATIENCE,
            "the command never got the terminal back (foreground {})",
            session.foreground()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    session.type_in(b"\x03");
    // bash reads the next line once lockctl has exited (and been reaped).
    let started = Instant::now();
    while Proc::read(lockctl.pid).is_some() {
        assert!(
            started.elapsed() < PATIENCE,
            "lockctl did not exit after Ctrl-C"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    session.type_in(b"echo \"rc=$?\"\n");
    session.wait_for_output("rc=130").await;
    session.type_in(b"exit\n");
    println!("the terminal showed:\n{}", session.shown());
}
