//! Signals: what lockctl inherited, what it catches, and passing them on to the
//! command's process group.
//!
//! lockctl catches the signals a user or a service manager sends to stop or steer a
//! job (SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2) and passes each on to the
//! command's whole process group. While the command runs it also catches SIGTSTP
//! (passed on: the command stops, and then lockctl stops itself, see
//! [`stop_self`]) and SIGCONT (lockctl resumes the command). A signal lockctl
//! inherited as ignored (`nohup`, `trap '' HUP`) is left ignored: not caught, not
//! passed on, and ignored in the command too.

use std::mem::MaybeUninit;

use signal_hook::consts::{SIGCONT, SIGHUP, SIGINT, SIGQUIT, SIGTSTP, SIGUSR1, SIGUSR2};
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::iterator::SignalsInfo;
use signal_hook::low_level::siginfo::Origin;
use tokio::sync::mpsc;

pub(crate) use signal_hook::consts::{SIGKILL, SIGTERM};

/// The signals lockctl passes on to the command, from the start (a signal while
/// lockctl still waits for the lock ends the wait instead).
const PASSED_ON: [i32; 6] = [SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2];

/// Caught only while the command runs: job control. Before that, Ctrl-Z stops
/// lockctl the usual way.
const JOB_CONTROL: [i32; 2] = [SIGTSTP, SIGCONT];

/// The highest signal number on Linux (`SIGRTMAX`).
const LAST_SIGNAL: i32 = 64;

/// Which signals lockctl inherited as ignored.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Inherited {
    /// Bit `n - 1` for signal `n`.
    ignored: u64,
}

impl Inherited {
    /// Reads the dispositions this process started with. Must run before anything
    /// installs a handler (first thing in `main`).
    pub(crate) fn capture() -> Self {
        let mut ignored = 0u64;
        for signal in 1..=LAST_SIGNAL {
            let mut old = MaybeUninit::<libc::sigaction>::zeroed();
            // SAFETY: a null new action only reads the current one into `old`.
            let read = unsafe { libc::sigaction(signal, std::ptr::null(), old.as_mut_ptr()) };
            // SAFETY: sigaction filled `old` in when it returned 0 (zeroed otherwise).
            if read == 0 && unsafe { old.assume_init() }.sa_sigaction == libc::SIG_IGN {
                ignored |= bit(signal);
            }
        }
        // Rust's runtime ignores SIGPIPE before `main`, so what lockctl inherited for it
        // is unknown; std gives every child the default, as lockctl always did.
        ignored &= !bit(libc::SIGPIPE);
        Inherited { ignored }
    }

    /// Whether `signal` was ignored when lockctl started.
    pub(crate) fn is_ignored(self, signal: i32) -> bool {
        self.ignored & bit(signal) != 0
    }

    /// The set as a bit mask (bit `n - 1` for signal `n`), for the supervisor.
    pub(crate) fn mask(self) -> u64 {
        self.ignored
    }
}

fn bit(signal: i32) -> u64 {
    1u64 << (signal - 1)
}

/// The caught signals, as they arrive.
#[derive(Debug)]
pub(crate) struct Signals {
    arrived: mpsc::UnboundedReceiver<Origin>,
    /// Whether a signal that asks lockctl to end (SIGHUP, SIGINT, SIGQUIT, SIGTERM)
    /// has come.
    ending: bool,
    handle: signal_hook::iterator::Handle,
    inherited: Inherited,
}

impl Signals {
    /// Catches [`PASSED_ON`] from now on, but those inherited as ignored.
    pub(crate) fn catch(inherited: Inherited) -> std::io::Result<Self> {
        let wanted = PASSED_ON.into_iter().filter(|s| !inherited.is_ignored(*s));
        let mut signals = SignalsInfo::<WithOrigin>::new(wanted)?;
        let handle = signals.handle();
        let (tx, arrived) = mpsc::unbounded_channel();
        // signal-hook delivers on a thread of its own; the channel brings them to async code.
        std::thread::spawn(move || {
            for origin in signals.forever() {
                if tx.send(origin).is_err() {
                    break;
                }
            }
        });
        Ok(Signals {
            arrived,
            ending: false,
            handle,
            inherited,
        })
    }

    /// Whether lockctl was asked to end: `elect --again` then campaigns no more.
    pub(crate) fn ending(&self) -> bool {
        self.ending
    }

    /// Marks lockctl as ending, whatever the signal that ends it.
    pub(crate) fn end(&mut self) {
        self.ending = true;
    }

    /// Catches SIGTSTP and SIGCONT too (but one inherited as ignored), for the time
    /// the command runs.
    pub(crate) fn catch_job_control(&self) -> std::io::Result<()> {
        for signal in JOB_CONTROL {
            if !self.inherited.is_ignored(signal) {
                self.handle.add_signal(signal)?;
            }
        }
        Ok(())
    }

    /// The next caught signal.
    ///
    /// # Cancel safety
    /// Cancel safe: a signal not yet returned stays queued.
    pub(crate) async fn next(&mut self) -> i32 {
        match self.arrived.recv().await {
            Some(origin) => {
                self.ending |= [SIGHUP, SIGINT, SIGQUIT, SIGTERM].contains(&origin.signal);
                origin.signal
            }
            // The thread is gone: nothing more will arrive.
            None => std::future::pending().await,
        }
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        self.handle.close();
    }
}

/// Sends `signal` to every process of the process group `group`. Never to group 0,
/// 1 or lockctl's own group: only to the command's.
pub(crate) fn send_to_group(group: libc::pid_t, signal: i32) {
    // SAFETY: getpgrp has no preconditions.
    if group <= 1 || group == unsafe { libc::getpgrp() } {
        return;
    }
    // SAFETY: kill(2) has no memory-safety preconditions; the negative pid names a group.
    unsafe {
        libc::kill(-group, signal);
    }
}

/// Whether any process of `group` is left (zombies count until they are reaped).
pub(crate) fn group_exists(group: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks that the group exists and may be signalled.
    group > 1 && unsafe { libc::kill(-group, 0) } == 0
}

/// Stops lockctl the way Ctrl-Z would: with SIGTSTP at its default disposition, so
/// the shell that started lockctl sees the job stopped and takes the terminal. It
/// returns once lockctl is continued, or at once if its process group is orphaned (no
/// job-control shell would ever continue it, so the kernel does not stop it).
pub(crate) fn stop_self() {
    // SAFETY: SIGTSTP's action is set to the default for the moment of the raise and
    // then restored to the one saved (signal-hook's handler, or the default).
    unsafe {
        let mut default = MaybeUninit::<libc::sigaction>::zeroed().assume_init();
        default.sa_sigaction = libc::SIG_DFL;
        let mut saved = MaybeUninit::<libc::sigaction>::zeroed();
        if libc::sigaction(SIGTSTP, &default, saved.as_mut_ptr()) != 0 {
            return;
        }
        // raise() signals this thread: it stops here, before raise returns.
        libc::raise(SIGTSTP);
        libc::sigaction(SIGTSTP, saved.as_ptr(), std::ptr::null_mut());
    }
}

/// Sets `signal` to ignored in lockctl itself (not in the command, which gets what
/// lockctl inherited).
pub(crate) fn ignore(signal: i32) {
    // SAFETY: SIG_IGN is a valid disposition for any catchable signal.
    unsafe {
        libc::signal(signal, libc::SIG_IGN);
    }
}
