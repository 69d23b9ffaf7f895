//! lockctl's side of the supervisor (`supervisor.rs`): starting it, learning the
//! command's process group from it, signalling that group, and learning when all of
//! it is gone.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus};

use tokio::sync::mpsc;

use crate::exit::{self, Failure};
use crate::signals::{self, Inherited};
use crate::supervisor;
use crate::terminal::Terminal;

/// What the supervisor reports.
#[derive(Debug)]
pub(crate) enum Event {
    /// The command's process group exists: its id.
    Group(libc::pid_t),
    /// The command stopped for job control (Ctrl-Z, or reading the terminal from the
    /// background), with this signal.
    Stopped(i32),
    /// No process is left in the command's group (processes that left it may still
    /// run); its id may be reused from now on.
    Empty,
    /// The supervisor exited: the command and every process it left are gone (or the
    /// supervisor itself was killed, see [`CommandGroup::left_behind`]).
    Ended(ExitStatus),
}

/// The command, run under its supervisor in a process group of its own.
#[derive(Debug)]
pub(crate) struct CommandGroup {
    /// The command's process group, 0 until the supervisor says.
    group: libc::pid_t,
    events: mpsc::UnboundedReceiver<Event>,
    /// A report that came before the group's (the end of a command that never ran).
    early: Option<Event>,
    /// The supervisor said the group is empty: its id must not be used again.
    empty: bool,
    ended: bool,
    /// The supervisor, as a pidfd (none on a kernel without them): signalled through
    /// it, never a process that took its number once it was reaped.
    supervisor: Option<OwnedFd>,
    /// The supervisor's pid, for a kernel without pidfds (until it is reaped).
    supervisor_pid: libc::pid_t,
}

/// What [`CommandGroup::start`] needs.
pub(crate) struct Launch<'a> {
    /// The program and its arguments.
    pub(crate) argv: &'a [OsString],
    /// Variables added to the command's environment.
    pub(crate) env: Vec<(&'static str, String)>,
    /// What lockctl inherited: the command gets the same.
    pub(crate) inherited: Inherited,
    /// lockctl's controlling terminal, if it may hand it over.
    pub(crate) terminal: Option<&'a Terminal>,
    /// Whether the command gets the terminal now (lockctl's group has it).
    pub(crate) give_terminal: bool,
}

impl CommandGroup {
    /// Starts the supervisor, which starts the command; returns once the command's
    /// process group exists, or the supervisor has ended (the command could not be
    /// started: it said why on stderr, and [`next`](Self::next) gives its status).
    ///
    /// Must be called on the thread that runs lockctl's `block_on` (the main thread):
    /// `PR_SET_PDEATHSIG` fires when the thread that forked the supervisor ends, so the
    /// supervisor must be forked by a thread that lives as long as lockctl. (Its handler
    /// also tells a thread's end from lockctl's with `getppid()`.)
    pub(crate) async fn start(launch: Launch<'_>) -> Result<CommandGroup, Failure> {
        // SAFETY: gettid and getpid have no preconditions.
        debug_assert_eq!(
            unsafe { libc::gettid() },
            unsafe { libc::getpid() },
            "the supervisor must be forked by lockctl's main thread"
        );
        let cannot = |what: &str, error: std::io::Error| {
            Failure::new(exit::FAILED, format!("cannot {what}: {error}"))
        };
        let (read, write) = pipe().map_err(|e| cannot("make a pipe", e))?;
        let report = write.as_raw_fd();
        let terminal = launch.terminal.map(Terminal::raw_fd);
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        let orders = supervisor::arguments(
            parent,
            report,
            terminal,
            launch.give_terminal,
            launch.inherited.mask(),
        );
        // /proc/self/exe runs this very binary even if the file was replaced or
        // removed since lockctl started (an upgrade); current_exe() if there is no /proc.
        let exe = if std::path::Path::new("/proc/self/exe").exists() {
            std::path::PathBuf::from("/proc/self/exe")
        } else {
            std::env::current_exe().map_err(|e| cannot("find lockctl's own program", e))?
        };
        let mut command = Command::new(exe);
        command
            .arg0("lockctl")
            .arg(supervisor::ARG)
            .args(orders)
            .args(launch.argv)
            .envs(launch.env);
        // SAFETY: prctl and fcntl are async-signal-safe; nothing allocates.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    supervisor::PARENT_DIED as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                // These two descriptors, and only these, go on to the supervisor.
                libc::fcntl(report, libc::F_SETFD, 0);
                if let Some(fd) = terminal {
                    libc::fcntl(fd, libc::F_SETFD, 0);
                }
                Ok(())
            });
        }
        let child = command
            .spawn()
            .map_err(|e| cannot("start the command's supervisor", e))?;
        // Only the supervisor holds the write end now: its exit is the end of the pipe.
        drop(write);
        let supervisor = pidfd_of(child.id());
        let supervisor_pid = child.id() as libc::pid_t;
        let (tx, events) = mpsc::unbounded_channel();
        std::thread::spawn(move || listen(read, child, &tx));
        let mut group = CommandGroup {
            group: 0,
            events,
            early: None,
            empty: false,
            ended: false,
            supervisor,
            supervisor_pid,
        };
        match group.events.recv().await {
            Some(Event::Group(id)) => group.group = id,
            // Ended before the command ran: kept for `next`.
            other => group.early = other,
        }
        Ok(group)
    }

    /// The id the command's group had, for taking the terminal back only: the
    /// terminal names the group it was given, even once the number could be reused.
    /// Never for signals: see [`live_id`](Self::live_id).
    pub(crate) fn terminal_id(&self) -> libc::pid_t {
        self.group
    }

    /// The command's process group while it may have processes; `None` before it
    /// started and once the supervisor said it is empty or ended (the id may be reused).
    pub(crate) fn live_id(&self) -> Option<libc::pid_t> {
        (self.group > 1 && !self.empty && !self.ended).then_some(self.group)
    }

    /// Sends `signal` to every process of the command's group, while it may exist.
    pub(crate) fn signal(&self, signal: i32) {
        if let Some(group) = self.live_id() {
            signals::send_to_group(group, signal);
        }
    }

    /// Orders the supervisor to SIGKILL every process below it: the command's group,
    /// and the processes that left it (which a signal to the group misses).
    pub(crate) fn kill_everything(&self) {
        let order = supervisor::kill_all_signal();
        match &self.supervisor {
            // SAFETY: pidfd_send_signal on our own pidfd; it fails harmlessly once the
            // supervisor has exited.
            Some(fd) => unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    fd.as_raw_fd(),
                    order,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                );
            },
            // Not yet reported ended: not reaped by the listener either, but for the
            // moment between its wait and its report.
            None if !self.ended => unsafe {
                // SAFETY: kill(2) of our own child.
                libc::kill(self.supervisor_pid, order);
            },
            None => {}
        }
    }

    /// The next report: a job-control stop, or the end.
    ///
    /// # Cancel safety
    /// Cancel safe: a report not yet returned stays queued.
    pub(crate) async fn next(&mut self) -> Event {
        let event = match self.early.take() {
            Some(event) => Some(event),
            None => self.events.recv().await,
        };
        match event {
            Some(event) => {
                match event {
                    Event::Ended(_) => self.ended = true,
                    Event::Empty => self.empty = true,
                    _ => {}
                }
                event
            }
            // The listener always sends `Ended` before it goes; never again after.
            None => std::future::pending().await,
        }
    }

    /// Waits for the end, letting job-control stops pass.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`next`](Self::next).
    pub(crate) async fn ended(&mut self) -> ExitStatus {
        loop {
            if let Event::Ended(status) = self.next().await {
                return status;
            }
        }
    }

    /// After the end: the command's group, if processes of it may still run. That
    /// happens only if the supervisor itself was killed: it outlives the group
    /// otherwise, and says so first.
    pub(crate) fn left_behind(&self) -> Option<libc::pid_t> {
        (self.group > 1 && !self.empty && signals::group_exists(self.group)).then_some(self.group)
    }
}

/// Reads the supervisor's reports until it exits, then reaps it and says how it ended.
fn listen(read: OwnedFd, mut child: std::process::Child, tx: &mpsc::UnboundedSender<Event>) {
    let lines = BufReader::new(std::fs::File::from(read)).lines();
    for line in lines.map_while(Result::ok) {
        let mut words = line.split_whitespace();
        let event = match (words.next(), words.next().and_then(|w| w.parse().ok())) {
            (Some("group"), Some(id)) => Event::Group(id),
            (Some("stopped"), Some(signal)) => Event::Stopped(signal),
            (Some("empty"), None) => Event::Empty,
            _ => continue,
        };
        let _ = tx.send(event);
    }
    // The pipe ends when the supervisor exits; waiting is short.
    let status = child.wait().unwrap_or_else(|_| {
        // Cannot happen for our own child; a status that reads as "failed" if it does.
        ExitStatus::from_raw(i32::from(exit::FAILED) << 8)
    });
    let _ = tx.send(Event::Ended(status));
}

/// A pidfd of the process `pid` (a child not yet reaped), closed on exec; none if the
/// kernel has no pidfds.
fn pidfd_of(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open returns a new descriptor, or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: a descriptor pidfd_open just opened for us alone (O_CLOEXEC by default).
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A pipe whose two ends close on exec.
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills in two descriptors when it returns 0.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both were just opened and are owned here alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
