//! What lockctl tells the user: JSON lines with `--json`, a progress line while it
//! waits on a terminal, otherwise nothing but errors.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Reports one lock's events.
#[derive(Clone, Debug)]
pub(crate) struct Reporter {
    json: bool,
    name: String,
    namespace: String,
    backend: &'static str,
}

impl Reporter {
    pub(crate) fn new(json: bool, name: &str, namespace: &str, backend: &'static str) -> Self {
        Reporter {
            json,
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            backend,
        }
    }

    /// Writes `{"event": event, "name": .., "namespace": .., "backend": .., ..fields}`
    /// on stderr, with `--json` only.
    pub(crate) fn event(&self, event: &str, fields: Value) {
        if !self.json {
            return;
        }
        let mut line = json!({
            "event": event,
            "name": self.name,
            "namespace": self.namespace,
            "backend": self.backend,
        });
        if let (Some(line), Value::Object(fields)) = (line.as_object_mut(), fields) {
            line.extend(fields);
        }
        let mut stderr = std::io::stderr().lock();
        let _ = writeln!(stderr, "{line}");
    }

    /// Shows how long this has waited, once a second, on stderr, while the returned
    /// value lives; only when stderr is a terminal and `--json` is off.
    pub(crate) fn progress(&self, what: &'static str) -> Option<Progress> {
        if self.json || !std::io::stderr().is_terminal() {
            return None;
        }
        let label = format!("lockctl: {what} `{}` ({})", self.name, self.backend);
        let started = Instant::now();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tick.tick().await;
                let waited = started.elapsed().as_secs();
                let mut stderr = std::io::stderr().lock();
                let _ = write!(
                    stderr,
                    "\r\x1b[K{label}: held by another owner, waited {waited}s"
                );
                let _ = stderr.flush();
            }
        });
        Some(Progress { task })
    }
}

/// The progress line; dropping it stops and clears it.
#[derive(Debug)]
pub(crate) struct Progress {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.task.abort();
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, "\r\x1b[K");
        let _ = stderr.flush();
    }
}
