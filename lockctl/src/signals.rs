//! SIGINT, SIGTERM and SIGHUP: caught from the start, so a wait can be given up
//! cleanly, and passed on to the command once it runs.

use signal_hook::consts::{SIGHUP, SIGINT};
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::iterator::SignalsInfo;
use signal_hook::low_level::siginfo::{Cause, Origin};
use tokio::sync::mpsc;

pub(crate) use signal_hook::consts::{SIGKILL, SIGTERM};

/// The signals lockctl handles instead of dying at once.
const CAUGHT: [i32; 3] = [SIGINT, SIGTERM, SIGHUP];

/// The caught signals, as they arrive.
#[derive(Debug)]
pub(crate) struct Signals {
    arrived: mpsc::UnboundedReceiver<Origin>,
    handle: signal_hook::iterator::Handle,
}

impl Signals {
    /// Catches [`CAUGHT`] from now on.
    pub(crate) fn catch() -> std::io::Result<Self> {
        let mut signals = SignalsInfo::<WithOrigin>::new(CAUGHT)?;
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
        Ok(Signals { arrived, handle })
    }

    /// The next caught signal.
    ///
    /// # Cancel safety
    /// Cancel safe: a signal not yet returned stays queued.
    pub(crate) async fn next(&mut self) -> Caught {
        match self.arrived.recv().await {
            Some(origin) => Caught(origin),
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

/// One caught signal and where it came from.
#[derive(Debug)]
pub(crate) struct Caught(Origin);

impl Caught {
    /// The signal's number.
    pub(crate) fn number(&self) -> i32 {
        self.0.signal
    }

    /// Whether the command already got it: the terminal (Ctrl-C, hang-up) signals the
    /// whole foreground process group, the command included, so passing it on would
    /// deliver it twice. A signal sent to lockctl alone (`kill`, systemd) is not.
    fn reached_the_group(&self) -> bool {
        self.0.cause == Cause::Kernel
    }

    /// Passes the signal on to the process `pid` (the command, which shares lockctl's
    /// process group), unless it already got it.
    pub(crate) fn pass_on(&self, pid: u32) {
        if !self.reached_the_group() {
            send(pid, self.0.signal);
        }
    }
}

/// Sends `signal` to the process `pid`.
pub(crate) fn send(pid: u32, signal: i32) {
    // Never 0 or negative: kill(2) would then signal a whole process group, lockctl's own.
    let Some(pid) = libc::pid_t::try_from(pid).ok().filter(|pid| *pid > 0) else {
        return;
    };
    debug_assert!(signal == SIGKILL || CAUGHT.contains(&signal));
    // SAFETY: kill(2) has no memory-safety preconditions; `pid` is our own child, which
    // is not reaped before this call (the caller still owns its handle).
    unsafe {
        libc::kill(pid, signal);
    }
}
