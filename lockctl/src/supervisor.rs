//! The supervisor: a small process between lockctl and the command, so that the
//! command and everything it starts can never outlive lockctl.
//!
//! lockctl starts it by executing itself with [`ARG`] as the first argument (see
//! `group.rs`); it never appears in `--help`. The supervisor:
//!
//! * gets `PR_SET_PDEATHSIG` = SIGUSR2 from lockctl (set in lockctl's `pre_exec`):
//!   when lockctl dies, even by SIGKILL, its handler SIGKILLs the command's whole
//!   process group (and gives the terminal back to lockctl's group). It checks
//!   `getppid()` once its handler is in place, for a lockctl that died before;
//! * is a child subreaper: what the command leaves behind when its parent exits is
//!   re-parented here, not to init, so it is waited for; on lockctl's order
//!   ([`kill_all_signal`], when the lock is running out or lost) or its death, it
//!   SIGKILLs every process below it, those that left the command's group included;
//! * starts the command as the leader of a new process group (and gives it the
//!   terminal if lockctl passed one on), with exactly the signal dispositions
//!   lockctl inherited, and tells lockctl the group through a pipe;
//! * reaps every child until none is left, tells lockctl when the command stops for
//!   job control (Ctrl-Z, terminal input) and when its group is empty, and exits with
//!   the command's own status: its exit code, or the signal that killed it, raised
//!   again on itself.
//!
//! It stays in lockctl's process group, outside the command's: the signals lockctl
//! sends the command's group, SIGKILL included, never reach it, so it outlives every
//! process of the group and its exit always means "all of it is gone". It ignores
//! the signals that reach lockctl's group (a shell's `kill %1`, Ctrl-C while lockctl's
//! group has the terminal): lockctl passes those on.

use std::ffi::{OsStr, OsString};
use std::io::{ErrorKind, Write};
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use crate::exit;

/// The first argument that makes lockctl the supervisor.
pub(crate) const ARG: &str = "__lockctl-supervise";

/// The signal lockctl's death sends (`PR_SET_PDEATHSIG`).
pub(crate) const PARENT_DIED: i32 = libc::SIGUSR2;

/// The signal with which lockctl orders every process below the supervisor killed,
/// those that left the command's group included: a real-time one, which no shell or
/// service manager sends a process group.
pub(crate) fn kill_all_signal() -> i32 {
    libc::SIGRTMIN() + 1
}

/// What the supervisor ignores for itself: signals that reach lockctl's process
/// group as a whole and that lockctl passes on, or that would stop or end the
/// supervisor while the command runs.
const IGNORED_HERE: [i32; 9] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGUSR1,
    libc::SIGALRM,
    libc::SIGTSTP,
    libc::SIGTTIN,
    libc::SIGTTOU,
];

/// lockctl's pid, the command's process group (0 until it exists), the terminal's
/// descriptor (-1 without one), and whether lockctl was found gone: read by the
/// signal handler.
static PARENT: AtomicI32 = AtomicI32::new(0);
static GROUP: AtomicI32 = AtomicI32::new(0);
static TERMINAL: AtomicI32 = AtomicI32::new(-1);
static PARENT_GONE: AtomicBool = AtomicBool::new(false);
/// Every process below the supervisor is to be killed: lockctl ordered it, or died.
static KILL_ALL: AtomicBool = AtomicBool::new(false);

/// What lockctl passes: `ARG PARENT_PID REPORT_FD TERMINAL_FD|- GIVE_TERMINAL(0|1)
/// IGNORED_HEX -- PROGRAM ARGS...`.
struct Orders {
    parent: libc::pid_t,
    report: RawFd,
    terminal: Option<RawFd>,
    give_terminal: bool,
    ignored: u64,
    program: OsString,
    args: Vec<OsString>,
}

/// Builds the arguments [`main`] reads, after [`ARG`].
pub(crate) fn arguments(
    parent: libc::pid_t,
    report: RawFd,
    terminal: Option<RawFd>,
    give_terminal: bool,
    ignored: u64,
) -> Vec<OsString> {
    vec![
        parent.to_string().into(),
        report.to_string().into(),
        terminal
            .map_or_else(|| "-".to_owned(), |fd| fd.to_string())
            .into(),
        u8::from(give_terminal).to_string().into(),
        format!("{ignored:x}").into(),
        "--".into(),
    ]
}

fn parse(args: &[OsString]) -> Option<Orders> {
    let text = |i: usize| args.get(i).and_then(|a| a.to_str());
    let (program, rest) = args.get(6..)?.split_first()?;
    if text(5)? != "--" {
        return None;
    }
    Some(Orders {
        parent: text(0)?.parse().ok()?,
        report: text(1)?.parse().ok()?,
        terminal: match text(2)? {
            "-" => None,
            fd => Some(fd.parse().ok()?),
        },
        give_terminal: text(3)? == "1",
        ignored: u64::from_str_radix(text(4)?, 16).ok()?,
        program: program.clone(),
        args: rest.to_vec(),
    })
}

/// The supervisor's whole life; `args` are those after [`ARG`].
pub(crate) fn main(args: &[OsString]) -> ! {
    let Some(orders) = parse(args) else {
        eprintln!("lockctl: {ARG} is lockctl's own; it is not for use by hand");
        std::process::exit(i32::from(exit::USAGE));
    };
    // Neither descriptor goes on to the command.
    for fd in [Some(orders.report), orders.terminal].into_iter().flatten() {
        // SAFETY: fcntl on a descriptor number; a bad one only fails.
        unsafe {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
    PARENT.store(orders.parent, Ordering::SeqCst);
    TERMINAL.store(orders.terminal.unwrap_or(-1), Ordering::SeqCst);
    // SAFETY: the handler only makes async-signal-safe calls; SIG_IGN is valid for all
    // of these; prctl with these arguments has no memory effects.
    unsafe {
        // No SA_RESTART: the wait for children returns, and kills what is left.
        let mut action = std::mem::MaybeUninit::<libc::sigaction>::zeroed().assume_init();
        action.sa_sigaction = on_parent_death as extern "C" fn(libc::c_int) as usize;
        libc::sigaction(PARENT_DIED, &action, std::ptr::null_mut());
        let mut order = std::mem::MaybeUninit::<libc::sigaction>::zeroed().assume_init();
        order.sa_sigaction = on_kill_all
            as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
            as usize;
        order.sa_flags = libc::SA_SIGINFO;
        libc::sigaction(kill_all_signal(), &order, std::ptr::null_mut());
        for signal in IGNORED_HERE {
            libc::signal(signal, libc::SIG_IGN);
        }
        // An ignored SIGCHLD (inherited) would reap children unasked and lose the
        // command's status; the command still gets what lockctl inherited.
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    // lockctl may have died before PR_SET_PDEATHSIG was set in its child: then no
    // signal comes, and nothing must start.
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != orders.parent {
        std::process::exit(i32::from(exit::FAILED));
    }
    let mut report = {
        // SAFETY: lockctl passed this descriptor for this process alone to write to.
        unsafe { std::fs::File::from_raw_fd(orders.report) }
    };
    let child = match spawn(&orders) {
        Ok(child) => child,
        Err(error) => {
            let code = match error.kind() {
                ErrorKind::NotFound => exit::NOT_FOUND,
                _ => exit::CANNOT_RUN,
            };
            let program = orders.program.to_string_lossy();
            eprintln!("lockctl: cannot run {program:?}: {error}");
            std::process::exit(i32::from(code));
        }
    };
    let command = child.id() as libc::pid_t;
    // std waits for the exec, so the child has made itself the group's leader by now.
    GROUP.store(command, Ordering::SeqCst);
    if PARENT_GONE.load(Ordering::SeqCst) {
        // lockctl died between the check above and now; the handler saw no group yet.
        kill_group();
    }
    // lockctl may be gone: then nobody reads, and the write fails (SIGPIPE is ignored).
    let _ = writeln!(report, "group {command}");
    // The std handle is not needed: every child, this one included, is reaped below.
    drop(child);
    let status = reap_all(command, &mut report);
    if let Some(terminal) = orders.terminal {
        // SAFETY: tcgetpgrp/tcsetpgrp on the inherited descriptor; SIGTTOU is ignored.
        unsafe {
            if libc::tcgetpgrp(terminal) == command {
                libc::tcsetpgrp(terminal, libc::getpgrp());
            }
        }
    }
    exit_like(status)
}

/// Starts the command: leader of a new process group, with the terminal if asked,
/// and the signal dispositions lockctl inherited.
fn spawn(orders: &Orders) -> std::io::Result<std::process::Child> {
    let terminal = orders.terminal.filter(|_| orders.give_terminal);
    let ignored = orders.ignored;
    let mut command = Command::new(&orders.program);
    command.args(&orders.args);
    // SAFETY: only async-signal-safe calls (setpgid, sigprocmask, tcsetpgrp, getpid,
    // sigaction) on values prepared before the fork; nothing allocates.
    unsafe {
        command.pre_exec(move || {
            if libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(terminal) = terminal {
                // From the background, tcsetpgrp sends SIGTTOU unless it is blocked.
                let mut block = std::mem::MaybeUninit::<libc::sigset_t>::zeroed().assume_init();
                let mut saved = std::mem::MaybeUninit::<libc::sigset_t>::zeroed().assume_init();
                libc::sigemptyset(&mut block);
                libc::sigaddset(&mut block, libc::SIGTTOU);
                libc::sigprocmask(libc::SIG_BLOCK, &block, &mut saved);
                // Failing (lockctl no longer in the foreground) leaves the terminal alone.
                libc::tcsetpgrp(terminal, libc::getpid());
                libc::sigprocmask(libc::SIG_SETMASK, &saved, std::ptr::null_mut());
            }
            let mut action = std::mem::MaybeUninit::<libc::sigaction>::zeroed().assume_init();
            for signal in 1..=64 {
                if signal == libc::SIGKILL || signal == libc::SIGSTOP {
                    continue;
                }
                action.sa_sigaction = if ignored & (1u64 << (signal - 1)) != 0 {
                    libc::SIG_IGN
                } else {
                    libc::SIG_DFL
                };
                // Signals the C library keeps for itself refuse; that changes nothing.
                libc::sigaction(signal, &action, std::ptr::null_mut());
            }
            Ok(())
        });
    }
    command.spawn()
}

/// Reaps every child until none is left; returns the command's wait status.
fn reap_all(command: libc::pid_t, report: &mut std::fs::File) -> Option<libc::c_int> {
    let mut status_of_command = None;
    loop {
        if KILL_ALL.load(Ordering::SeqCst) {
            kill_descendants();
        }
        let mut status = 0;
        // SAFETY: waitpid writes the status of a child it reaps or sees stop.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WUNTRACED) };
        if pid < 0 {
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                // ECHILD: no child left, the command's or adopted.
                _ => return status_of_command,
            }
        }
        if !libc::WIFSTOPPED(status) {
            forget_the_group_once_empty(report);
        }
        if pid != command {
            continue;
        }
        if libc::WIFSTOPPED(status) {
            let signal = libc::WSTOPSIG(status);
            // Job control only: a SIGSTOP is someone freezing the command on purpose.
            if matches!(signal, libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU) {
                let _ = writeln!(report, "stopped {signal}");
            }
        } else {
            status_of_command = Some(status);
        }
    }
}

/// Once no process is left in the command's group, its id is forgotten here and
/// lockctl is told (`empty`): the number may then be reused, by a new process group
/// even (a daemon's `setsid`), while this process still waits for processes that left
/// the group; neither it nor lockctl may signal that number again.
fn forget_the_group_once_empty(report: &mut std::fs::File) {
    let group = GROUP.load(Ordering::SeqCst);
    // SAFETY: signal 0 only checks whether the group exists (zombies count).
    if group > 1 && unsafe { libc::kill(-group, 0) } != 0 {
        GROUP.store(0, Ordering::SeqCst);
        let _ = writeln!(report, "empty");
    }
}

/// Exits with the command's status: the same exit code, or the same signal.
fn exit_like(status: Option<libc::c_int>) -> ! {
    let Some(status) = status else {
        std::process::exit(i32::from(exit::FAILED));
    };
    if libc::WIFEXITED(status) {
        std::process::exit(libc::WEXITSTATUS(status));
    }
    let signal = libc::WTERMSIG(status);
    // SAFETY: plain calls on this process: no core file of the supervisor, the
    // signal's default action, unblocked, then raised.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        let none = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &none);
        libc::signal(signal, libc::SIG_DFL);
        let mut set = std::mem::MaybeUninit::<libc::sigset_t>::zeroed().assume_init();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(signal);
    }
    // A signal whose default is not to terminate: the shell's convention instead.
    std::process::exit(128 + signal)
}

/// SIGKILLs every process below this one, those that left the command's group
/// included (adopted here as the subreaper, or children of such), found through
/// `/proc/<pid>/task/<tid>/children`; looked at again after each kill, for children
/// forked meanwhile.
fn kill_descendants() {
    let mut below = vec![std::process::id()];
    let mut killed = std::collections::HashSet::new();
    while let Some(pid) = below.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children
                .split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok())
            {
                if killed.insert(child) {
                    // SAFETY: kill(2) of a process below this one, not yet reaped.
                    unsafe {
                        libc::kill(child as libc::pid_t, libc::SIGKILL);
                    }
                    below.push(child);
                }
            }
        }
    }
}

/// lockctl's order to kill everything below ([`kill_all_signal`]), done by the wait
/// loop, which the signal interrupts (lockctl repeats the order until all is gone:
/// one that lands just before the loop blocks again is acted on at the next). From
/// anyone but lockctl (a `kill` of lockctl's whole group), it is ignored.
extern "C" fn on_kill_all(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler; si_pid is
    // set for signals sent by a process.
    let sender = unsafe { info.as_ref().map(|info| info.si_pid()) };
    if sender == Some(PARENT.load(Ordering::SeqCst)) {
        KILL_ALL.store(true, Ordering::SeqCst);
    }
}

/// SIGKILLs the command's group, once it exists.
fn kill_group() {
    let group = GROUP.load(Ordering::SeqCst);
    if group > 1 {
        // SAFETY: kill(2) is async-signal-safe; the negative pid names the group.
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
    }
}

/// PR_SET_PDEATHSIG fires when the *thread* that forked this process ends, not only
/// when lockctl does; `getppid()` tells the two apart (re-parenting comes first). When
/// lockctl is gone, the command's group dies at once and the terminal goes back to
/// lockctl's group (the script or shell that ran lockctl). Async-signal-safe calls only.
extern "C" fn on_parent_death(_: libc::c_int) {
    // SAFETY: getppid, kill, tcgetpgrp, tcsetpgrp and getpgrp are async-signal-safe.
    unsafe {
        if libc::getppid() == PARENT.load(Ordering::SeqCst) {
            return;
        }
        PARENT_GONE.store(true, Ordering::SeqCst);
        KILL_ALL.store(true, Ordering::SeqCst);
        kill_group();
        let (terminal, group) = (
            TERMINAL.load(Ordering::SeqCst),
            GROUP.load(Ordering::SeqCst),
        );
        if terminal >= 0 && group > 1 && libc::tcgetpgrp(terminal) == group {
            libc::tcsetpgrp(terminal, libc::getpgrp());
        }
    }
}

/// Whether `args` (all of lockctl's, after the program name) ask for the supervisor.
pub(crate) fn wanted(args: &[OsString]) -> bool {
    args.first().map(OsString::as_os_str) == Some(OsStr::from_bytes(ARG.as_bytes()))
}
