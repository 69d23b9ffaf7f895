//! A flag that is set once and can be waited for.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// Starts closed; once [`open`](Latch::open), stays open and lets every waiter through.
///
/// Every acquisition has one, opened by its release, for a wait that only a downgrade
/// makes: it costs an atomic and a `Notify` that wakes nobody until it opens.
#[derive(Debug, Default)]
pub(crate) struct Latch {
    open: AtomicBool,
    opened: Notify,
}

impl Latch {
    /// Opens it for good, and wakes everyone waiting.
    pub(crate) fn open(&self) {
        if !self.open.swap(true, Ordering::AcqRel) {
            self.opened.notify_waiters();
        }
    }

    /// Whether it has been opened.
    pub(crate) fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Waits until it is open.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub(crate) async fn opened(&self) {
        let opened = self.opened.notified();
        tokio::pin!(opened);
        // Registered before the flag is read: an `open` after the read wakes this wait
        // rather than passing it by.
        opened.as_mut().enable();
        if self.is_open() {
            return;
        }
        opened.await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn waiters_before_and_after_the_opening_get_through() {
        let latch = Arc::new(Latch::default());
        let early = tokio::spawn({
            let latch = latch.clone();
            async move { latch.opened().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!early.is_finished());
        latch.open();
        early.await.unwrap();
        latch.opened().await;
        latch.open();
        assert!(latch.is_open());
    }
}
