//! A client's background loop (the lease watchdog, a backend's starter of holder
//! watches) runs on one runtime at a time: the runtime of the call that started it.
//! A client may be used from several runtimes at once, as `#[tokio::test]`s sharing
//! one do, each on a thread of its own. When the loop's runtime shuts down, the loop
//! moves to the runtime of another call that still needs it, rather than leaving that
//! call's leases unrenewed (or unwatched) until the next call starts a loop.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use tokio::runtime::{Handle, Id};

/// Whether a client's background loop runs. Kept under the lock of what the loop
/// serves, beside it, so that a loop ending because it has nothing left and a call
/// adding work never miss each other.
#[derive(Debug, Default)]
pub struct BackgroundLoop {
    running: bool,
}

impl BackgroundLoop {
    /// Marks the loop running; returns whether it was not, and the caller must spawn
    /// it (outside the lock, with a [`LoopGuard`] made first).
    pub fn claim(&mut self) -> bool {
        !std::mem::replace(&mut self.running, true)
    }

    /// The loop ends by itself, having found nothing left to do under the same lock.
    pub fn end(&mut self, guard: &mut LoopGuard) {
        self.running = false;
        guard.armed = false;
    }
}

/// What a background loop serves, kept under one lock with its [`BackgroundLoop`].
pub trait LoopWork {
    /// Whether the loop runs.
    fn background(&mut self) -> &mut BackgroundLoop;

    /// The runtimes of the calls whose work is left: where the loop may move.
    fn runtimes(&self) -> impl Iterator<Item = &Handle>;
}

/// A move's spawn, until the mover learns how it went.
const SPAWNING: u8 = 0;
/// The runtime took the moved loop.
const SPAWNED: u8 = 1;
/// The moved loop was dropped before the move learned how its spawn went: inside the
/// spawn (its runtime is shut down), or at once after it on another thread.
const REFUSED: u8 = 2;

/// What a background loop's future holds: made before the spawn, it goes with the
/// future wherever it is dropped. Its owner's `Drop` calls [`LoopGuard::dropped`]
/// while [`LoopGuard::is_armed`].
#[derive(Debug)]
pub struct LoopGuard {
    /// The runtime the loop is spawned on.
    runtime: Id,
    /// Cleared when the loop ends by itself.
    armed: bool,
    /// For a loop spawned by a move, how that spawn went: a loop dropped inside it
    /// leaves the next try to the move, rather than moving again from inside that
    /// spawn.
    spawn: Option<Arc<AtomicU8>>,
}

impl LoopGuard {
    /// The guard of a loop about to be spawned on `runtime`.
    pub fn new(runtime: &Handle) -> Self {
        LoopGuard {
            runtime: runtime.id(),
            armed: true,
            spawn: None,
        }
    }

    /// Whether the loop was dropped before ending by itself.
    pub fn is_armed(&self) -> bool {
        self.armed
    }

    /// Whether a move spawned the loop: the loop it replaces may have been late
    /// (failing, or not polled), so its work may be due at once.
    pub fn is_moved(&self) -> bool {
        self.spawn.is_some()
    }

    /// From the `Drop` of the loop's future, while armed: the loop's runtime shut
    /// down under it (perhaps before it first ran). Spawns the loop again with `spawn`
    /// on a runtime of the work left in `work`, trying each other runtime until one
    /// takes it; with none, marks the loop stopped, and the next call that adds work
    /// starts one. The loop stays marked running while it moves, so no call starts a
    /// second one meanwhile.
    pub fn dropped<W: LoopWork>(&self, work: &Mutex<W>, spawn: impl Fn(&Handle, LoopGuard)) {
        if let Some(spawn) = &self.spawn {
            if spawn
                .compare_exchange(SPAWNING, REFUSED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                // Inside the move's spawn, or before it learned how the spawn went:
                // the move tries the next runtime.
                return;
            }
        }
        let lock = || work.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut tried = vec![self.runtime];
        loop {
            let runtime = {
                let mut work = lock();
                let untried = work
                    .runtimes()
                    .find(|runtime| !tried.contains(&runtime.id()))
                    .cloned();
                match untried {
                    Some(runtime) => runtime,
                    None => {
                        work.background().running = false;
                        return;
                    }
                }
            };
            tried.push(runtime.id());
            let outcome = Arc::new(AtomicU8::new(SPAWNING));
            let guard = LoopGuard {
                spawn: Some(outcome.clone()),
                ..LoopGuard::new(&runtime)
            };
            spawn(&runtime, guard);
            if outcome
                .compare_exchange(SPAWNING, SPAWNED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    /// The work of a loop: the runtimes of the calls that need it.
    #[derive(Default)]
    struct Work {
        background: BackgroundLoop,
        runtimes: Vec<Handle>,
    }

    struct Task {
        work: Arc<Mutex<Work>>,
        guard: LoopGuard,
        spawns: Arc<AtomicUsize>,
    }

    impl LoopWork for Work {
        fn background(&mut self) -> &mut BackgroundLoop {
            &mut self.background
        }

        fn runtimes(&self) -> impl Iterator<Item = &Handle> {
            self.runtimes.iter()
        }
    }

    impl Drop for Task {
        fn drop(&mut self) {
            if !self.guard.is_armed() {
                return;
            }
            self.guard.dropped(&self.work, |runtime, guard| {
                self.spawns.fetch_add(1, Ordering::SeqCst);
                let task = Task {
                    work: self.work.clone(),
                    guard,
                    spawns: self.spawns.clone(),
                };
                drop(runtime.spawn(run(task)));
            });
        }
    }

    async fn run(task: Task) {
        let _task = task;
        std::future::pending::<()>().await;
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }

    fn work(runtimes: &[&tokio::runtime::Runtime]) -> Arc<Mutex<Work>> {
        Arc::new(Mutex::new(Work {
            background: BackgroundLoop::default(),
            runtimes: runtimes.iter().map(|r| r.handle().clone()).collect(),
        }))
    }

    fn start(work: &Arc<Mutex<Work>>, on: &tokio::runtime::Runtime) -> Arc<AtomicUsize> {
        let spawns = Arc::new(AtomicUsize::new(0));
        assert!(work.lock().unwrap().background.claim());
        let task = Task {
            work: work.clone(),
            guard: LoopGuard::new(on.handle()),
            spawns: spawns.clone(),
        };
        drop(on.spawn(run(task)));
        spawns
    }

    fn runs(work: &Arc<Mutex<Work>>) -> bool {
        !work.lock().unwrap().background.claim()
    }

    #[test]
    fn a_loop_moves_past_runtimes_shut_down_and_stops_when_none_is_left() {
        let (a, b, c) = (runtime(), runtime(), runtime());
        let work = work(&[&a, &b, &c]);
        let spawns = start(&work, &a);
        drop(b);
        // The loop's runtime goes: the move finds `b` shut down, and `c` takes it.
        drop(a);
        assert_eq!(spawns.load(Ordering::SeqCst), 2);
        assert!(runs(&work), "the loop runs on `c`");
        // `c` goes too (before the moved loop first ran): nowhere is left.
        drop(c);
        assert_eq!(spawns.load(Ordering::SeqCst), 4);
        assert!(!runs(&work), "no loop runs: the next call starts one");
    }

    #[test]
    fn a_moved_loop_moves_again_when_its_new_runtime_shuts_down() {
        let (a, b, c) = (runtime(), runtime(), runtime());
        let work = work(&[&a, &b, &c]);
        let spawns = start(&work, &a);
        drop(a);
        assert_eq!(spawns.load(Ordering::SeqCst), 1, "`b` takes it");
        drop(b);
        assert_eq!(
            spawns.load(Ordering::SeqCst),
            3,
            "`a` is gone, `c` takes it"
        );
        assert!(runs(&work));
        drop(c);
        assert!(!runs(&work));
    }
}
