//! Releases announced within this process, for the databases that have no
//! notifications (MySQL/MariaDB, SQLite): the next waiter in the releaser's process
//! tries again at once instead of at its next poll. Waiters in other processes poll,
//! which also covers an announcement missed here, or on MariaDB watch the holder's
//! doorbell ([`crate::bells`]).

use std::sync::{Arc, OnceLock};

use crate::wait_line::WaitLines;

/// This process's waiters, on every such database.
pub(crate) fn lines() -> &'static Arc<WaitLines> {
    static LINES: OnceLock<Arc<WaitLines>> = OnceLock::new();
    LINES.get_or_init(Arc::default)
}

/// The topic of key `khash` in the tables at `scope` (the backend's location).
pub(crate) fn topic(scope: &str, khash: &str) -> Arc<str> {
    format!("{scope}\n{khash}").into()
}

/// Tells this process's waiters on `topic` that it may be free.
pub(crate) fn announce(topic: Arc<str>) {
    lines().announce(&topic);
}

#[cfg(test)]
mod tests {
    use lock_core::LockKind;

    use super::*;
    use crate::wait_line::Group;

    #[tokio::test]
    async fn a_waiter_hears_announcements_of_its_topic() {
        let backend = Arc::new(());
        let waiting = Group::of(LockKind::Exclusive, &backend);
        let place = lines().join(topic("db-a tables t", "k1"), waiting);
        announce(topic("db-a tables t", "k1"));
        let soon = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        tokio::time::timeout(std::time::Duration::from_secs(10), place.until_woken(soon))
            .await
            .expect("woken");
        assert_ne!(topic("db-a", "k"), topic("db-b", "k"));
    }
}
