//! Time the machine spent suspended, which the lease accounting must count.
//!
//! tokio's clock (`CLOCK_MONOTONIC` on Linux) stops while the machine sleeps, but a
//! server's lease keeps running: after a laptop or VM suspend longer than the lease, a
//! guard would still say held while the server has freed the lock. Linux counts the
//! sleep in `CLOCK_BOOTTIME`; the difference of the two clocks grows by exactly the time
//! spent suspended, so a lease counts it by reading that difference when its clock is
//! set and again when it is checked. Elsewhere the difference is taken as zero: macOS
//! and Windows offer no such pair of clocks to std, so a suspend there is covered only
//! by the fencing token (see the README).

use std::time::Duration;

/// How long the machine has been suspended since it booted, as far as this platform
/// can tell; only differences of two readings mean anything.
pub(crate) fn suspended() -> Duration {
    platform_suspended() + simulated::offset()
}

#[cfg(target_os = "linux")]
fn platform_suspended() -> Duration {
    fn read(clock: libc::clockid_t) -> Option<Duration> {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; the call only writes into it.
        let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
        if rc != 0 {
            return None;
        }
        Some(Duration::new(
            u64::try_from(ts.tv_sec).ok()?,
            u32::try_from(ts.tv_nsec).ok()?,
        ))
    }
    // Read boot time second: a suspend between the two reads then counts (a lease ends
    // early), never the other way round.
    let monotonic = read(libc::CLOCK_MONOTONIC);
    let boot = read(libc::CLOCK_BOOTTIME);
    match (boot, monotonic) {
        (Some(boot), Some(monotonic)) => boot.saturating_sub(monotonic),
        _ => Duration::ZERO,
    }
}

#[cfg(not(target_os = "linux"))]
fn platform_suspended() -> Duration {
    Duration::ZERO
}

/// A suspend the tests can pretend happened, on their own thread only.
mod simulated {
    use std::time::Duration;

    #[cfg(test)]
    thread_local! {
        static OFFSET: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
    }

    #[cfg(test)]
    pub(crate) fn offset() -> Duration {
        OFFSET.with(|o| o.get())
    }

    #[cfg(not(test))]
    pub(crate) fn offset() -> Duration {
        Duration::ZERO
    }

    /// Pretends the machine slept for `d` (on this thread's clock reads).
    #[cfg(test)]
    pub(crate) fn suspend(d: Duration) {
        OFFSET.with(|o| o.set(o.get() + d));
    }
}

#[cfg(test)]
pub(crate) use simulated::suspend as simulate_suspend;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_never_go_back() {
        let first = suspended();
        let second = suspended();
        // A thread preempted between its two clock reads takes a reading too large by
        // the time it waited (a lease then ends early, never late), so on a loaded
        // machine a later reading may be smaller by that much.
        let preempted = Duration::from_millis(200);
        assert!(second + preempted >= first);
        simulate_suspend(Duration::from_secs(5));
        assert!(suspended() + preempted >= first + Duration::from_secs(5));
    }
}
