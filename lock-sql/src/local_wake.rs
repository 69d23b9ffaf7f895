//! Releases announced within this process, for the databases that have no
//! notifications (MySQL/MariaDB, SQLite): a waiter in the releaser's process tries
//! again at once instead of at its next poll. Waiters in other processes still poll,
//! which also covers an announcement missed here.

use std::sync::{Arc, OnceLock};

use tokio::sync::broadcast;

/// Announcements kept for slow receivers; one that falls further behind is woken (a
/// lagged receiver tries again, as for any announcement).
const CAPACITY: usize = 1024;

fn bus() -> &'static broadcast::Sender<Arc<str>> {
    static BUS: OnceLock<broadcast::Sender<Arc<str>>> = OnceLock::new();
    BUS.get_or_init(|| broadcast::channel(CAPACITY).0)
}

/// The topic of key `khash` in the tables at `scope` (the backend's location).
pub(crate) fn topic(scope: &str, khash: &str) -> Arc<str> {
    format!("{scope}\n{khash}").into()
}

/// Announcements from now on.
pub(crate) fn subscribe() -> broadcast::Receiver<Arc<str>> {
    bus().subscribe()
}

/// Tells this process's waiters on `topic` that it may be free.
pub(crate) fn announce(topic: Arc<str>) {
    // No receiver is no error: nobody here waits.
    let _ = bus().send(topic);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_subscriber_hears_announcements_made_after_it_subscribed() {
        let mut rx = subscribe();
        announce(topic("db-a tables t", "k1"));
        assert_eq!(&*rx.recv().await.unwrap(), "db-a tables t\nk1");
        assert_ne!(topic("db-a", "k"), topic("db-b", "k"));
    }
}
