//! A server started here, shared between a test and the fault hooks that kill, restart
//! and freeze it while the test still needs it afterwards.

use std::sync::Arc;

use tokio::sync::{Mutex, MutexGuard};

use super::{Freezer, TestServer};

/// A [`TestServer`] several owners may act on, one at a time.
#[derive(Clone, Debug)]
pub struct SharedServer(Arc<Mutex<TestServer>>);

impl SharedServer {
    /// Shares `server`.
    pub fn new(server: TestServer) -> Self {
        SharedServer(Arc::new(Mutex::new(server)))
    }

    /// The server, once nobody else acts on it.
    pub async fn lock(&self) -> MutexGuard<'_, TestServer> {
        self.0.lock().await
    }

    /// A [`Freezer`] for the server as it runs now (a restart makes a new process, so
    /// an earlier one would name a process that is gone). `None` for a server given by
    /// URL, or while a restart is under way.
    pub fn freezer(&self) -> Option<Freezer> {
        self.0.try_lock().ok()?.freezer()
    }

    /// Kills it at once (SIGKILL; `docker kill`), its data kept.
    ///
    /// # Errors
    /// As [`TestServer::kill`].
    pub async fn kill(&self) -> Result<(), String> {
        self.0.lock().await.kill().await
    }

    /// Starts it again on the same port with the same data and waits until it serves.
    ///
    /// # Errors
    /// As [`TestServer::restart`].
    pub async fn restart(&self) -> Result<(), String> {
        self.0.lock().await.restart().await
    }
}
