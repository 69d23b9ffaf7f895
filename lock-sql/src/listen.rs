//! PostgreSQL `LISTEN`: one connection per backend receives the release
//! notifications and wakes the next waiters of this process.

use std::sync::Arc;
use std::time::Duration;

use lock_core::Result;
use tokio::task::JoinHandle;

use crate::error::{convert, timed_out};
use crate::wait_line::WaitLines;

/// The listening task; stopped when dropped.
#[derive(Debug)]
pub(crate) struct Listener {
    /// The waiters, by the hash of the key each waits for.
    lines: Arc<WaitLines>,
    task: JoinHandle<()>,
}

impl Listener {
    /// Connects and listens on `channel`; the payload of each notification is the
    /// released key's hash.
    #[cfg(feature = "postgres")]
    pub(crate) async fn start(url: &str, channel: &str, connect_timeout: Duration) -> Result<Self> {
        let connect = async {
            let mut listener = sqlx::postgres::PgListener::connect(url).await?;
            listener.listen(channel).await?;
            Ok::<_, sqlx::Error>(listener)
        };
        let mut listener = tokio::time::timeout(connect_timeout, connect)
            .await
            .map_err(|_| {
                timed_out(
                    "postgres",
                    "connecting the LISTEN connection",
                    connect_timeout,
                )
            })?
            .map_err(|e| convert("postgres", e))?;
        let lines = Arc::new(WaitLines::default());
        let waiters = lines.clone();
        let task = tokio::spawn(async move {
            loop {
                match listener.try_recv().await {
                    Ok(Some(n)) => waiters.announce(n.payload()),
                    Ok(None) => {
                        // The connection dropped and will be re-established by the next
                        // call; notifications in between are lost, so wake everyone.
                        tracing::debug!("LISTEN connection lost; reconnecting");
                        waiters.wake_all();
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "LISTEN connection failed; retrying");
                        waiters.wake_all();
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                }
            }
        });
        Ok(Listener { lines, task })
    }

    /// Without the `postgres` feature no PostgreSQL URL gets this far (see
    /// [`Dialect::check_compiled`](crate::Dialect)).
    #[cfg(not(feature = "postgres"))]
    pub(crate) async fn start(url: &str, channel: &str, connect_timeout: Duration) -> Result<Self> {
        let _ = (url, channel, connect_timeout, convert, timed_out);
        Err(lock_core::Error::invalid_argument(
            "PostgreSQL needs lock-sql's `postgres` feature",
        ))
    }

    /// The waiters this listener wakes, by key hash.
    pub(crate) fn lines(&self) -> &Arc<WaitLines> {
        &self.lines
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}
