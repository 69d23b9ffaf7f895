//! The three measurements, the same for every contender: the uncontended cycle, and
//! one contended run that gives throughput (checked by an exact counter), the handoff
//! latency to a different worker, and how often the releaser took the lock straight
//! back.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::contender::{BenchError, Contender};
use crate::stats::Samples;

/// `iterations` acquire + release cycles by one worker with nobody else around, after
/// a warm-up (connections, prepared statements, script caches).
pub async fn uncontended(
    contender: &dyn Contender,
    iterations: usize,
) -> Result<Samples, BenchError> {
    let mut worker = contender.worker("uncontended").await?;
    for _ in 0..iterations.min(50) {
        worker.acquire().await?;
        worker.release().await?;
    }
    if let Some(timed) = worker.timed_cycles(iterations).await? {
        return Ok(Samples::from(timed));
    }
    let mut cycles = Samples::default();
    let allocations_before = crate::allocated::allocations();
    for _ in 0..iterations {
        let started = Instant::now();
        worker.acquire().await?;
        worker.release().await?;
        cycles.push(started.elapsed());
    }
    if crate::allocated::per_cycle() && iterations > 0 {
        let made = crate::allocated::allocations() - allocations_before;
        eprintln!(
            "lock-bench: {}: {:.1} heap allocations per uncontended cycle",
            contender.name(),
            made as f64 / iterations as f64
        );
    }
    Ok(cycles)
}

/// What one contended run measured.
#[derive(Debug, Clone)]
pub struct Contended {
    /// Grants in all.
    pub grants: u64,
    /// The shared counter at the end: equal to `grants` unless two holders overlapped.
    pub counter: u64,
    /// Times a worker entered the critical section while another was inside.
    pub overlaps: u64,
    /// From the first acquire call to the last release.
    pub elapsed: Duration,
    /// From a holder's release call to the grant of a *different* worker.
    pub handoffs: Samples,
    /// Grants to the worker that held the lock just before.
    pub same_worker: u64,
}

impl Contended {
    /// Grants per second.
    pub fn throughput(&self) -> f64 {
        self.grants as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    /// Whether the counter proves mutual exclusion held throughout.
    pub fn exact(&self) -> bool {
        self.counter == self.grants && self.overlaps == 0
    }

    /// Adds another run's counts and handoffs (its elapsed time too, so the throughput
    /// is over all runs).
    pub fn absorb(&mut self, other: &Contended) {
        self.grants += other.grants;
        self.counter += other.counter;
        self.overlaps += other.overlaps;
        self.elapsed += other.elapsed;
        self.handoffs.extend(&other.handoffs);
        self.same_worker += other.same_worker;
    }

    /// The share of grants that went back to the releaser, 0.0 to 1.0.
    pub fn same_worker_share(&self) -> f64 {
        self.same_worker as f64 / (self.grants.max(1)) as f64
    }
}

/// Who held the lock last, and when they started to give it back.
#[derive(Default)]
struct Baton {
    last_holder: Option<usize>,
    released_at: Option<Instant>,
    handoffs: Samples,
    same_worker: u64,
}

/// `workers` workers, each with its own connection, take one lock `cycles` times each
/// as fast as they can. Inside, each one reads a shared counter, yields, and writes it
/// back plus one: any overlap of two holders loses an increment.
pub async fn contended(
    contender: &dyn Contender,
    workers: usize,
    cycles: usize,
) -> Result<Contended, BenchError> {
    let mut handles = Vec::with_capacity(workers);
    for _ in 0..workers {
        handles.push(contender.worker("contended").await?);
    }
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicU64::new(0));
    let baton = Arc::new(Mutex::new(Baton::default()));
    let started = Instant::now();
    // Dropped with the run (a failed worker, the bench's run limit), the set aborts the
    // workers still running, so none goes on loading the server under the next numbers.
    let mut tasks = tokio::task::JoinSet::new();
    for (me, mut worker) in handles.into_iter().enumerate() {
        let (counter, inside, overlaps, baton) = (
            counter.clone(),
            inside.clone(),
            overlaps.clone(),
            baton.clone(),
        );
        tasks.spawn(async move {
            for _ in 0..cycles {
                worker.acquire().await?;
                let granted = Instant::now();
                {
                    let mut baton = baton.lock().unwrap();
                    if baton.last_holder == Some(me) {
                        baton.same_worker += 1;
                    } else if let Some(at) = baton.released_at {
                        baton.handoffs.push(granted - at);
                    }
                    baton.last_holder = Some(me);
                }
                if inside.swap(true, Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(seen + 1, Ordering::SeqCst);
                inside.store(false, Ordering::SeqCst);
                baton.lock().unwrap().released_at = Some(Instant::now());
                worker.release().await?;
            }
            Ok::<_, BenchError>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let elapsed = started.elapsed();
    let baton = baton.lock().unwrap();
    Ok(Contended {
        grants: (workers * cycles) as u64,
        counter: counter.load(Ordering::SeqCst),
        overlaps: overlaps.load(Ordering::SeqCst),
        elapsed,
        handoffs: baton.handoffs.clone(),
        same_worker: baton.same_worker,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use async_trait::async_trait;

    use super::*;
    use crate::contender::{Role, Worker};

    /// Workers of one in-process lock that count their acquires; the first worker
    /// fails its acquire after `fail_after` cycles, if set.
    struct Counting {
        lock: Arc<tokio::sync::Mutex<()>>,
        acquires: Arc<AtomicUsize>,
        made: AtomicUsize,
        fail_after: Option<usize>,
    }

    struct CountingWorker {
        lock: Arc<tokio::sync::Mutex<()>>,
        held: Option<tokio::sync::OwnedMutexGuard<()>>,
        acquires: Arc<AtomicUsize>,
        left_before_failing: Option<usize>,
    }

    #[async_trait]
    impl Contender for Counting {
        fn name(&self) -> String {
            "counting".into()
        }
        fn role(&self) -> Role {
            Role::Floor
        }
        async fn worker(&self, _name: &str) -> Result<Box<dyn Worker>, BenchError> {
            let first = self.made.fetch_add(1, Ordering::SeqCst) == 0;
            Ok(Box::new(CountingWorker {
                lock: self.lock.clone(),
                held: None,
                acquires: self.acquires.clone(),
                left_before_failing: self.fail_after.filter(|_| first),
            }))
        }
    }

    #[async_trait]
    impl Worker for CountingWorker {
        async fn acquire(&mut self) -> Result<(), BenchError> {
            if let Some(left) = self.left_before_failing.as_mut() {
                if *left == 0 {
                    return Err("the server went away".into());
                }
                *left -= 1;
            }
            self.held = Some(self.lock.clone().lock_owned().await);
            self.acquires.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        async fn release(&mut self) -> Result<(), BenchError> {
            self.held = None;
            Ok(())
        }
    }

    fn counting(fail_after: Option<usize>) -> (Counting, Arc<AtomicUsize>) {
        let acquires = Arc::new(AtomicUsize::new(0));
        let contender = Counting {
            lock: Arc::new(tokio::sync::Mutex::new(())),
            acquires: acquires.clone(),
            made: AtomicUsize::new(0),
            fail_after,
        };
        (contender, acquires)
    }

    /// Whether any worker still takes the lock after the run ended.
    async fn still_running(acquires: &AtomicUsize) -> bool {
        let before = acquires.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(50)).await;
        acquires.load(Ordering::SeqCst) != before
    }

    /// A worker that fails ends the run, and the other workers with it: they would
    /// otherwise go on loading the server under the next contender's numbers.
    #[tokio::test]
    async fn a_failed_worker_stops_the_others() {
        let (contender, acquires) = counting(Some(3));
        let run = contended(&contender, 4, 1_000_000).await;
        assert!(run.is_err(), "the failure is reported");
        assert!(!still_running(&acquires).await, "workers outlived the run");
    }

    /// A run dropped at the bench's run limit stops its workers too.
    #[tokio::test]
    async fn a_run_dropped_at_its_limit_stops_its_workers() {
        let (contender, acquires) = counting(None);
        let run = tokio::time::timeout(
            Duration::from_millis(20),
            contended(&contender, 4, usize::MAX),
        )
        .await;
        assert!(run.is_err(), "the run was cut off");
        assert!(!still_running(&acquires).await, "workers outlived the run");
    }
}
