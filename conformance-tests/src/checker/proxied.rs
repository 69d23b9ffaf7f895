//! A [`CutOff`] for any backend whose URL names its server as `127.0.0.1:<port>`.

use std::sync::Arc;

use async_trait::async_trait;

use super::{AfterRestart, CutOff, Restarts};
use crate::backend::Backend;
use crate::proxy::Blackhole;
use crate::server::{Freezer, SharedServer};

/// Makes the backend of a URL.
pub type MakeBackend = dyn Fn(String) -> Arc<dyn Backend> + Send + Sync;

/// Clients of the server at `127.0.0.1:<port>` of a URL, each set through a fresh
/// [`Blackhole`] in front of that port: the URL is the same with the proxy's port.
pub struct ProxiedUrl {
    url: String,
    port: u16,
    make: Box<MakeBackend>,
    server: Option<SharedServer>,
    after_restart: Option<AfterRestart>,
}

impl ProxiedUrl {
    /// The hook for `url`, whose backends `make` builds from a URL.
    ///
    /// # Errors
    /// If `url` names no `127.0.0.1:<port>`.
    pub fn new(
        url: &str,
        make: impl Fn(String) -> Arc<dyn Backend> + Send + Sync + 'static,
    ) -> Result<Self, String> {
        let port = loopback_port(url)?;
        Ok(ProxiedUrl {
            url: url.to_owned(),
            port,
            make: Box::new(make),
            server: None,
            after_restart: None,
        })
    }

    /// The same hook, which also freezes `server` now and then (if it was started
    /// here).
    pub fn with_server(mut self, server: SharedServer) -> Self {
        self.server = Some(server);
        self
    }

    /// The same hook, which also kills and restarts the server of
    /// [`with_server`](Self::with_server) now and then; `after` says what the server
    /// keeps when it does.
    pub fn restarting(mut self, after: AfterRestart) -> Self {
        self.after_restart = Some(after);
        self
    }
}

/// The port of the `127.0.0.1:<port>` that `url` names.
///
/// # Errors
/// If `url` names no `127.0.0.1:<port>`.
pub fn loopback_port(url: &str) -> Result<u16, String> {
    let after = url
        .split_once("127.0.0.1:")
        .ok_or_else(|| format!("no 127.0.0.1:<port> in {url}"))?
        .1;
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits
        .parse()
        .map_err(|e| format!("no port after 127.0.0.1: in {url}: {e}"))
}

/// `url` with its `127.0.0.1:<port>` replaced by `127.0.0.1:<proxy_port>`.
pub fn through(url: &str, port: u16, proxy_port: u16) -> String {
    url.replacen(
        &format!("127.0.0.1:{port}"),
        &format!("127.0.0.1:{proxy_port}"),
        1,
    )
}

#[async_trait]
impl CutOff for ProxiedUrl {
    async fn cuttable(&self) -> Result<(Arc<dyn Backend>, Arc<Blackhole>), String> {
        let proxy = Blackhole::to(self.port).await.map_err(|e| e.to_string())?;
        let through = through(&self.url, self.port, proxy.port());
        Ok(((self.make)(through), Arc::new(proxy)))
    }

    fn freezer(&self) -> Option<Freezer> {
        self.server.as_ref()?.freezer()
    }

    fn restarts(&self) -> Option<Restarts> {
        let server = self.server.clone()?;
        // A server given by URL has no freezer, and cannot be restarted either.
        server.freezer()?;
        Some(Restarts {
            server,
            after: self.after_restart?,
        })
    }
}
