//! Servers in containers (`LOCK_TEST_SERVERS=containers`), through testcontainers, from
//! images built on this machine by `scripts/images`: nothing is ever pulled.
//!
//! Each container publishes its server's port on a free 127.0.0.1 port only, carries
//! the label [`LABEL`], and is removed when dropped (also when a test panics).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use testcontainers::bollard::models::PortBinding;
use testcontainers::core::IntoContainerPort;
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, ContainerRequest, GenericImage, ImageExt};
use tokio::time::Instant;

use super::{free_port, ServerSpec, READY_LIMIT, START_ATTEMPTS};

/// The label on every container the harness starts: `docker ps -a --filter
/// label=distributed-locks-test` lists any left behind.
pub const LABEL: &str = "distributed-locks-test";

/// How a server of a [`ServerSpec`] runs in a container.
#[derive(Clone, Copy, Debug)]
pub struct ContainerSpec {
    /// The image's directory under `containers/` (`scripts/images` builds it).
    pub image: &'static str,
    /// The port the server listens on inside the container.
    pub port: u16,
    /// Arguments to the image's entry point, given the host port clients will use.
    pub args: fn(host_port: u16) -> Vec<String>,
}

/// The repository root, where `scripts/images` and `containers/` are.
fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate lives in the workspace")
        .to_path_buf()
}

fn images_script() -> Command {
    Command::new(repo_root().join("scripts/images"))
}

/// The image for `image`'s directory, built first if it is missing (unless
/// `LOCK_TEST_BUILD_IMAGES=0`, which makes a missing image an error naming the command).
fn ensure_image(image: &str) -> Result<(String, String), String> {
    let out = images_script()
        .args(["--tag", image])
        .output()
        .map_err(|e| format!("could not run scripts/images: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "scripts/images --tag {image}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let full = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let present = Command::new("docker")
        .args(["image", "inspect", &full])
        .output()
        .map_err(|e| format!("could not run docker: {e}"))?
        .status
        .success();
    if !present {
        if std::env::var("LOCK_TEST_BUILD_IMAGES").is_ok_and(|v| v == "0") {
            return Err(format!(
                "image {full} is missing; build it with `./scripts/images {image}`"
            ));
        }
        eprintln!("image {full} is missing; building it (./scripts/images {image})");
        let status = images_script()
            .arg(image)
            .status()
            .map_err(|e| format!("could not run scripts/images: {e}"))?;
        if !status.success() {
            return Err(format!("`./scripts/images {image}` failed ({status})"));
        }
    }
    let (name, tag) = full
        .rsplit_once(':')
        .ok_or_else(|| format!("scripts/images printed no tag: {full:?}"))?;
    Ok((name.to_owned(), tag.to_owned()))
}

/// The name and tag of `image`'s current image, built first if missing (see
/// [`ensure_image`]).
pub(crate) async fn image_of(image: &'static str) -> Result<(String, String), String> {
    tokio::task::spawn_blocking(move || ensure_image(image))
        .await
        .map_err(|e| format!("building the image: {e}"))?
}

/// A request for a container of `name:tag` labelled [`LABEL`]=`label`, with
/// `container_port` published on `127.0.0.1:host_port` only.
pub(crate) fn loopback_request(
    name: &str,
    tag: &str,
    host_port: u16,
    container_port: u16,
    label: &str,
) -> ContainerRequest<GenericImage> {
    GenericImage::new(name, tag)
        .with_mapped_port(host_port, container_port.tcp())
        .with_label(LABEL, label)
        // testcontainers publishes on every address; tests stay on loopback.
        .with_host_config_modifier(|config| {
            for bindings in config.port_bindings.iter_mut().flat_map(|m| m.values_mut()) {
                for binding in bindings.iter_mut().flatten() {
                    *binding = PortBinding {
                        host_ip: Some("127.0.0.1".into()),
                        ..binding.clone()
                    };
                }
            }
        })
}

/// Removes the container `name`, whatever its state: one whose start failed (its port
/// taken meanwhile, say) was created all the same, and would be left behind.
pub(crate) fn remove_by_name(name: &str) {
    let _ = Command::new("docker")
        .args(["rm", "-f", "-v", name])
        .output();
}

/// A server running in a container started for tests; removed on drop.
#[derive(Debug)]
pub struct ServerContainer {
    spec: ServerSpec,
    container: ContainerAsync<GenericImage>,
    port: u16,
    paused: bool,
}

impl ServerContainer {
    /// Starts `spec`'s image with its port published on a free loopback port, and
    /// waits until the server serves.
    ///
    /// # Errors
    /// Why it could not start, with the end of the container's log.
    pub async fn start(spec: &ServerSpec) -> Result<Self, String> {
        let c = spec
            .container
            .ok_or_else(|| format!("{} has no container image", spec.name))?;
        let (name, tag) = image_of(c.image).await?;
        let mut last_error = String::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port().map_err(|e| format!("free port: {e}"))?;
            let container_name = format!(
                "locks-{}-{}",
                spec.name,
                &uuid::Uuid::new_v4().simple().to_string()[..8]
            );
            let request = loopback_request(&name, &tag, port, c.port, spec.name)
                .with_container_name(&container_name)
                .with_cmd((c.args)(port));
            let container = match request.start().await {
                Ok(container) => container,
                Err(e) => {
                    remove_by_name(&container_name);
                    last_error = format!("could not start a {} container: {e}", spec.name);
                    continue;
                }
            };
            let server = ServerContainer {
                spec: *spec,
                container,
                port,
                paused: false,
            };
            match server.wait_ready(READY_LIMIT).await {
                Ok(()) => {
                    println!(
                        "{} in container {} ({name}:{tag}) on 127.0.0.1:{port}",
                        spec.name,
                        &server.id()[..12.min(server.id().len())]
                    );
                    return Ok(server);
                }
                Err(e) => last_error = e,
            }
        }
        Err(last_error)
    }

    async fn wait_ready(&self, limit: Duration) -> Result<(), String> {
        let started = Instant::now();
        loop {
            if self.spec.ready.ready(self.port).await {
                return Ok(());
            }
            if !self.container.is_running().await.unwrap_or(true) {
                return Err(format!(
                    "the {} container exited at start; log:\n{}",
                    self.spec.name,
                    self.log_tail().await
                ));
            }
            if started.elapsed() > limit {
                return Err(format!(
                    "{} in its container did not serve on port {} within {limit:?}; log:\n{}",
                    self.spec.name,
                    self.port,
                    self.log_tail().await
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The URL to connect to.
    pub fn url(&self) -> String {
        (self.spec.url)(self.port)
    }

    /// The host port its server is published on (127.0.0.1 only).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The container's id.
    pub fn id(&self) -> &str {
        self.container.id()
    }

    /// The last lines of the container's output.
    pub async fn log_tail(&self) -> String {
        let mut log = self.container.stdout_to_vec().await.unwrap_or_default();
        log.extend(self.container.stderr_to_vec().await.unwrap_or_default());
        let log = String::from_utf8_lossy(&log);
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Kills the server (the container stops at once); its data stays until drop.
    pub async fn kill(&mut self) -> Result<(), String> {
        if self.paused {
            self.resume().await?;
        }
        self.container
            .stop_with_timeout(Some(0))
            .await
            .map_err(|e| format!("docker kill {}: {e}", self.id()))
    }

    /// Starts it again with the same data and host port, after [`kill`](Self::kill)
    /// (or kills it first), and waits until it serves.
    pub async fn restart(&mut self) -> Result<(), String> {
        if self.container.is_running().await.unwrap_or(false) {
            self.kill().await?;
        }
        self.container
            .start()
            .await
            .map_err(|e| format!("docker start {}: {e}", self.id()))?;
        self.wait_ready(READY_LIMIT).await
    }

    /// Freezes every process of the server (`docker pause`).
    pub async fn pause(&mut self) -> Result<(), String> {
        self.container
            .pause()
            .await
            .map_err(|e| format!("docker pause {}: {e}", self.id()))?;
        self.paused = true;
        Ok(())
    }

    /// Thaws it after [`pause`](Self::pause) (`docker unpause`).
    pub async fn resume(&mut self) -> Result<(), String> {
        self.container
            .unpause()
            .await
            .map_err(|e| format!("docker unpause {}: {e}", self.id()))?;
        self.paused = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{specs::REDIS, Probe, Source, TestServer};
    use super::*;

    fn docker(args: &[&str]) -> String {
        let out = Command::new("docker").args(args).output().expect("docker");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// The whole life of a container: published on loopback only, every fault hook,
    /// and removed on drop. Runs in container mode only (it needs Docker and builds
    /// the Redis image if missing).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_container_serves_on_loopback_survives_faults_and_is_removed() {
        if Source::from_env() != Ok(Source::Containers) {
            println!("SKIP container life cycle: LOCK_TEST_SERVERS is not `containers`");
            return;
        }
        let mut server = TestServer::start(&REDIS).await.expect("start");
        let TestServer::Container(c) = &server else {
            panic!("not a container: {server:?}")
        };
        let id = c.id().to_owned();
        let port = c.port();
        let published = docker(&["port", &id]);
        assert_eq!(published, format!("6379/tcp -> 127.0.0.1:{port}"));
        let labels = docker(&[
            "inspect",
            "-f",
            "{{index .Config.Labels \"distributed-locks-test\"}}",
            &id,
        ]);
        assert_eq!(labels, "redis");

        server.pause().await.expect("pause");
        assert!(!Probe::Redis.ready(port).await, "a paused server answered");
        server.resume().await.expect("resume");
        assert!(Probe::Redis.ready(port).await);
        server.kill().await.expect("kill");
        assert!(!Probe::Redis.ready(port).await, "a killed server answered");
        server.restart().await.expect("restart");
        assert!(Probe::Redis.ready(port).await, "not back on the same port");
        assert_eq!(server.port(), Some(port));

        drop(server);
        assert_eq!(docker(&["ps", "-aq", "--filter", &format!("id={id}")]), "");
    }
}
