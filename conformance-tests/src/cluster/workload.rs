//! The fault suite's workload: clients looping acquire, write, release on one lock
//! against a [`FencedStore`], while a test injects a fault and heals it.
//!
//! Each client has its own connection, its own OS thread and its own single-threaded
//! runtime, so [`Workload::pause_a_holder`] can freeze one client whole (its watchdog
//! included) the way a GC pause or SIGSTOP would, while the others go on.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use distributed_locks::{connect, AcquireOptions, ConnectOptions, DistributedLock, LeaseLoss};
use tokio::time::Instant;

use super::fenced::{FencedStore, StoreCounts, Write};

/// The lock every client of a run contends for.
const NAME: &str = "fault-suite";

/// How a run's clients behave.
#[derive(Clone, Debug)]
pub struct WorkloadConfig {
    /// The backend URL (every node of the cluster).
    pub url: String,
    /// The namespace of this run.
    pub namespace: String,
    /// How many clients.
    pub clients: usize,
    /// The watchdog lease.
    pub lease: Duration,
    /// How long a holder holds (it writes three times in that time).
    pub hold: Duration,
}

#[derive(Debug)]
struct Shared {
    config: WorkloadConfig,
    store: FencedStore,
    started: Instant,
    stop: AtomicBool,
    grants: AtomicU64,
    errors: AtomicU64,
    last_error: Mutex<String>,
    /// Writes accepted although a higher token had already been claimed when they were
    /// issued: what fencing exists to prevent (must stay 0).
    stale_accepted: AtomicU64,
    claimed: AtomicU64,
    fault_at: Mutex<Option<Instant>>,
    healed_at: Mutex<Option<Instant>>,
    recovered_after: Mutex<Option<Duration>>,
    losses: Mutex<Vec<(Duration, String)>>,
    pause: Mutex<Option<Duration>>,
}

impl Shared {
    fn error(&self, err: impl fmt::Display) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        *self.last_error.lock().expect("lock") = err.to_string();
    }

    fn granted(&self) {
        self.grants.fetch_add(1, Ordering::Relaxed);
        if let Some(healed) = *self.healed_at.lock().expect("lock") {
            let mut recovered = self.recovered_after.lock().expect("lock");
            if recovered.is_none() {
                *recovered = Some(healed.elapsed());
            }
        }
    }

    /// Records a real loss of a lease granted at `granted`, timed from the fault or
    /// the grant, whichever came later: how long the holder went on believing.
    fn lost(&self, loss: LeaseLoss, granted: Instant) {
        if loss == LeaseLoss::Released {
            return;
        }
        let since_fault = match *self.fault_at.lock().expect("lock") {
            Some(at) => at.max(granted).elapsed(),
            None => granted.elapsed(),
        };
        self.losses
            .lock()
            .expect("lock")
            .push((since_fault, loss.to_string()));
    }

    /// A fenced write, checked against the highest token claimed so far.
    fn write(&self, token: u64, first: bool) -> Write {
        let claimed = self.claimed.load(Ordering::SeqCst);
        let result = self.store.write(token, first);
        if result == Write::Accepted {
            if token < claimed {
                self.stale_accepted.fetch_add(1, Ordering::Relaxed);
            }
            if first {
                self.claimed.fetch_max(token, Ordering::SeqCst);
            }
        }
        result
    }
}

/// A running workload.
#[derive(Debug)]
pub struct Workload {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

/// What one run under one fault showed.
#[derive(Clone, Debug)]
pub struct Report {
    /// Grants in the whole run.
    pub grants: u64,
    /// What the store saw.
    pub store: StoreCounts,
    /// Writes accepted after a higher token was claimed (must be 0).
    pub stale_accepted: u64,
    /// Real losses reported by `lost()`, each with how long after the fault (or the
    /// grant, if later) it fired.
    pub losses: Vec<(Duration, String)>,
    /// From the heal to the first grant after it.
    pub recovered_after: Option<Duration>,
    /// Failed acquires and releases (unavailable servers, lost leases).
    pub errors: u64,
    /// The last such error.
    pub last_error: String,
    /// Whether the lock was still held by someone after every client stopped and a
    /// lease had passed.
    pub leftover: bool,
}

impl Report {
    /// The slowest loss report after the fault, if any.
    pub fn slowest_loss(&self) -> Option<Duration> {
        self.losses.iter().map(|(d, _)| *d).max()
    }
}

impl Workload {
    /// Starts `config.clients` clients.
    pub fn start(config: WorkloadConfig) -> Workload {
        let shared = Arc::new(Shared {
            store: FencedStore::default(),
            started: Instant::now(),
            stop: AtomicBool::new(false),
            grants: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            last_error: Mutex::new(String::new()),
            stale_accepted: AtomicU64::new(0),
            claimed: AtomicU64::new(0),
            fault_at: Mutex::new(None),
            healed_at: Mutex::new(None),
            recovered_after: Mutex::new(None),
            losses: Mutex::new(Vec::new()),
            pause: Mutex::new(None),
            config,
        });
        let threads = (0..shared.config.clients)
            .map(|_| {
                let shared = shared.clone();
                std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("a client runtime");
                    runtime.block_on(client(shared));
                })
            })
            .collect();
        Workload { shared, threads }
    }

    /// Grants so far.
    pub fn grants(&self) -> u64 {
        self.shared.grants.load(Ordering::Relaxed)
    }

    /// Marks the moment the fault begins (loss reports are timed from here).
    pub fn fault_started(&self) {
        *self.shared.fault_at.lock().expect("lock") = Some(Instant::now());
    }

    /// Marks the moment the fault is healed (recovery is timed from here).
    pub fn fault_healed(&self) {
        *self.shared.healed_at.lock().expect("lock") = Some(Instant::now());
        *self.shared.recovered_after.lock().expect("lock") = None;
    }

    /// Freezes the next client that holds the lock for `pause`, between its check that
    /// it holds and its write, with its whole runtime (watchdog included).
    pub fn pause_a_holder(&self, pause: Duration) {
        *self.shared.pause.lock().expect("lock") = Some(pause);
    }

    /// Waits until a grant after the heal (at most `limit`), stops every client and
    /// checks that the lock is free within a lease after.
    pub async fn finish(self, limit: Duration) -> Report {
        let deadline = Instant::now() + limit;
        while self.shared.recovered_after.lock().expect("lock").is_none()
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Let the clients run a little on the healed cluster.
        tokio::time::sleep(Duration::from_millis(500)).await;
        self.shared.stop.store(true, Ordering::SeqCst);
        let threads = self.threads;
        tokio::task::spawn_blocking(move || {
            for t in threads {
                let _ = t.join();
            }
        })
        .await
        .expect("join clients");
        let leftover = still_locked(&self.shared.config).await;
        let s = &self.shared;
        Report {
            grants: s.grants.load(Ordering::Relaxed),
            store: s.store.counts(),
            stale_accepted: s.stale_accepted.load(Ordering::Relaxed),
            losses: s.losses.lock().expect("lock").clone(),
            recovered_after: *s.recovered_after.lock().expect("lock"),
            errors: s.errors.load(Ordering::Relaxed),
            last_error: s.last_error.lock().expect("lock").clone(),
            leftover,
        }
    }

    /// How long the workload has run.
    pub fn elapsed(&self) -> Duration {
        self.shared.started.elapsed()
    }
}

async fn provider(config: &WorkloadConfig) -> distributed_locks::Result<Arc<dyn DistributedLock>> {
    let options = ConnectOptions::default()
        .namespace(config.namespace.clone())
        .watchdog_lease(config.lease);
    connect(&config.url, options).await?.lock(NAME)
}

/// Whether the lock is still held two leases (plus slack) after every client stopped
/// and the cluster answers. The window starts again at each moment it does not answer:
/// a leader elected after a heal (etcd) gives every lease its whole time to live
/// again, so a lease left behind runs out that long after the cluster is back.
async fn still_locked(config: &WorkloadConfig) -> bool {
    let window = config.lease * 2 + Duration::from_secs(5);
    // A cluster that never answers again still ends the check.
    let give_up = Instant::now() + window + Duration::from_secs(60);
    let mut deadline = Instant::now() + window;
    loop {
        let answered = match provider(config).await {
            Ok(lock) => match try_once(&*lock).await {
                Ok(Some(guard)) => {
                    let _ = guard.release().await;
                    return false;
                }
                Ok(None) => true,
                Err(_) => false,
            },
            Err(_) => false,
        };
        let now = Instant::now();
        if !answered {
            deadline = deadline.max(now + window).min(give_up);
        }
        if now >= deadline {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One try, no waiting.
async fn try_once(
    lock: &dyn DistributedLock,
) -> distributed_locks::Result<Option<distributed_locks::LockGuard>> {
    match lock.acquire_with(AcquireOptions::try_once()).await {
        Ok(guard) => Ok(Some(guard)),
        Err(distributed_locks::Error::Timeout { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

async fn client(shared: Arc<Shared>) {
    let lock = loop {
        match provider(&shared.config).await {
            Ok(lock) => break lock,
            Err(e) => {
                shared.error(e);
                if shared.stop.load(Ordering::SeqCst) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let hold = shared.config.hold;
    while !shared.stop.load(Ordering::SeqCst) {
        let guard = match lock
            .acquire_with(AcquireOptions::wait_for(Duration::from_secs(1)))
            .await
        {
            Ok(guard) => guard,
            Err(distributed_locks::Error::Timeout { .. }) => continue,
            Err(e) => {
                shared.error(e);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        shared.granted();
        let token = guard.fencing_token();
        let lost = guard.lost();
        let watcher = shared.clone();
        let granted = Instant::now();
        tokio::spawn(async move { watcher.lost(lost.await, granted) });

        shared.write(token, true);
        let read = shared.store.enter();
        for _ in 0..3 {
            tokio::time::sleep(hold / 3).await;
            if !guard.is_held() {
                break;
            }
            // A pause between the check and the write: the write may be stale.
            let pause = shared.pause.lock().expect("lock").take();
            if let Some(pause) = pause {
                std::thread::sleep(pause);
            }
            shared.write(token, false);
        }
        shared.store.leave(read);
        if let Err(e) = guard.release().await {
            shared.error(e);
        }
    }
}
