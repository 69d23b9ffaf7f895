//! A spawned server's processes, read from `/proc`: the harness freezes and kills a
//! server with every process it started (PostgreSQL serves each connection from a child
//! of the postmaster, which would otherwise answer on that connection for a moment).

use std::time::{Duration, Instant};

/// How long to wait for a process sent SIGSTOP to stop (it may be in a fork).
const STOP_WAIT: Duration = Duration::from_secs(1);
/// Rounds of "find the new processes, stop them" before giving up on a tree that keeps
/// growing.
const FREEZE_ROUNDS: usize = 10;

/// The parent PID and state letter of `pid`, from `/proc/<pid>/stat`; `None` once it is
/// gone. The command name in parentheses may hold anything, so fields are read after
/// its closing one.
fn parent_and_state(pid: u32) -> Option<(u32, char)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let parent = fields.next()?.parse().ok()?;
    Some((parent, state))
}

/// `root` and every process descended from it at the time of the call, parents before
/// their children.
pub(super) fn tree(root: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, parent_and_state(pid)?.0)))
        .collect();
    let mut tree = vec![root];
    let mut next = 0;
    while next < tree.len() {
        let parent = tree[next];
        tree.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(pid, _)| *pid),
        );
        next += 1;
    }
    tree
}

/// Whether `pid` is still running (a zombie has stopped running).
pub(super) fn running(pid: u32) -> bool {
    parent_and_state(pid).is_some_and(|(_, state)| state != 'Z')
}

/// Whether `pid` has stopped on a signal, or is no longer running.
fn halted(pid: u32) -> bool {
    parent_and_state(pid).is_none_or(|(_, state)| matches!(state, 'T' | 't' | 'Z' | 'X'))
}

/// Sends `signal` to `pid`; a process already gone is no error here.
pub(super) fn signal(pid: u32, signal: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// Stops `root` and every process descended from it (SIGSTOP) and returns them, parents
/// before their children. A signal only stops a process once a fork it is in has
/// finished, so each round waits until the processes it stopped have halted, then looks
/// for children they made meanwhile.
pub(super) fn freeze(root: u32) -> Vec<u32> {
    let mut frozen: Vec<u32> = Vec::new();
    for _ in 0..FREEZE_ROUNDS {
        let new: Vec<u32> = tree(root)
            .into_iter()
            .filter(|pid| !frozen.contains(pid))
            .collect();
        if new.is_empty() {
            break;
        }
        for &pid in &new {
            signal(pid, libc::SIGSTOP);
        }
        let started = Instant::now();
        while !new.iter().all(|&pid| halted(pid)) && started.elapsed() < STOP_WAIT {
            std::thread::sleep(Duration::from_millis(1));
        }
        frozen.extend(new);
    }
    frozen
}

/// Waits until none of `pids` runs, for at most `limit`; says which still run after it.
pub(super) fn wait_gone(pids: &[u32], limit: Duration) {
    let started = Instant::now();
    while pids.iter().any(|&pid| running(pid)) {
        if started.elapsed() >= limit {
            let left: Vec<u32> = pids.iter().copied().filter(|&pid| running(pid)).collect();
            eprintln!("test server: processes {left:?} still run {limit:?} after SIGKILL");
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
