//! A randomized history checker: generated workloads against a backend, through the
//! public API, with every call, grant and belief recorded and checked as a whole.
//!
//! From a seed, [`check`] makes 3-4 clients, each with a few lock handles (exclusive,
//! fair, read-write, as the backend's capabilities allow) over 2-3 names, and tasks
//! that share those handles and run random ops on them: acquires (single tries, wait
//! limits, waits without limit, fixed and watchdog leases, some under
//! `tokio::time::timeout`, some dropped at a random moment), MultiLocks over random
//! sets, re-entry, downgrade, extend, release, dropping guards, holding while
//! sampling, and a client shut down mid-run. Each hold's `is_held()` is sampled along
//! the way, under one lock, so the history orders the samples as they happened.
//!
//! The checks (see `docs/checker.md`): no two conflicting holds of different owners
//! were believed held at once; fencing tokens of a name follow real-time order; every
//! wait the library ended ended within its limit plus [`Backend::slack`]; a shut-down
//! client's guards say not held; valid calls are never refused as invalid or
//! unsupported; nothing is left on the server ([`Backend::leftovers`]) once every
//! client is shut down; no task panics or hangs. A failing seed is rerun with shorter
//! variants of its ops, and the shortest that still fails is printed with an excerpt
//! of its history.
//!
//! `LOCK_CHECK_SEED=<n>` replays one seed; `LOCK_CHECK_SEEDS=<n>` runs that many seeds
//! from a random start; `LOCK_CHECK_MINUTES=<m>` keeps running random seeds for that
//! long (a soak). With `LOCK_CHECK_HISTORY` set, every run's whole history is printed.

mod client_cut;
mod exec;
mod gen;
mod history;
mod members;
mod proxied;
mod verify;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::Capabilities;

use crate::backend::{Backend, ClientOptions};
use exec::Cuttable;
use gen::{generate, Limits, Plan};
pub use members::{Consensus, Members};
pub use proxied::{loopback_port, through, MakeBackend, ProxiedUrl};
pub use verify::Violation;

/// How many seeds each real-server test target runs after its conformance suite: what
/// CI spends there (a seed takes a few seconds against a server).
pub const SERVER_SEEDS: u64 = 4;

/// Seeds per server target for the run with one client cut off
/// ([`check_with_cut_off`]); about half of them cut.
pub const CUT_OFF_SEEDS: u64 = 2;

/// How much a [`check`] runs, before the `LOCK_CHECK_*` variables have their say.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// How many seeds (1, 2, ... unless `LOCK_CHECK_SEEDS` asks for random ones).
    pub seeds: u64,
    /// How many shorter variants of a failing seed to try.
    pub shrink_runs: usize,
}

impl Budget {
    /// `seeds` seeds, and up to 12 shrinking runs per failing seed.
    pub fn seeds(seeds: u64) -> Self {
        Budget {
            seeds,
            shrink_runs: 12,
        }
    }
}

/// A hook that makes clients which can be cut off from the server: for a backend
/// behind a [`crate::proxy::Blackhole`]. It may also offer the server's faults.
#[async_trait]
pub trait CutOff: Send + Sync {
    /// A backend whose clients all go through a fresh proxy, and that proxy (which the
    /// run cuts, cuts one way, and heals).
    async fn cuttable(&self) -> Result<(Arc<dyn Backend>, Arc<crate::proxy::Blackhole>), String>;

    /// Whether [`cuttable`](Self::cuttable) can make such clients (a hook that only
    /// offers the server's faults says no).
    fn can_cut(&self) -> bool {
        true
    }

    /// Freezes and thaws the server every client talks to, if the target can (a
    /// server started here); the run then freezes it now and then.
    fn freezer(&self) -> Option<crate::server::Freezer> {
        None
    }

    /// Kills and restarts the server every client talks to, if the target can; the run
    /// then restarts it now and then.
    fn restarts(&self) -> Option<Restarts> {
        None
    }

    /// The members of the cluster every client talks to, if the target is one; the
    /// run then faults one of them now and then.
    fn members(&self) -> Option<Arc<Members>> {
        None
    }
}

/// What a server keeps when it is killed and started again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterRestart {
    /// Its locks, leases and counters (written out before it answered: to disk, or for
    /// the PostgreSQL and MariaDB test servers to the OS, which a kill does not lose).
    KeepsLocks,
    /// Nothing (no persistence): it then stays down for the longest lease of the run
    /// before it starts again, as a RedLock master that restarts empty must.
    ForgetsLocks,
}

/// A server a run may kill and start again.
#[derive(Clone, Debug)]
pub struct Restarts {
    /// The server.
    pub server: crate::server::SharedServer,
    /// What it keeps.
    pub after: AfterRestart,
}

/// One failing seed.
#[derive(Clone, Debug)]
pub struct Failure {
    /// The seed (`LOCK_CHECK_SEED` replays it).
    pub seed: u64,
    /// What broke, in the shortest variant found.
    pub violations: Vec<Violation>,
    /// The ops of that variant, one line per task.
    pub ops: Vec<String>,
}

/// What a [`check`] did and found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The backend's name.
    pub backend: String,
    /// How many seeds ran (shrinking runs not counted).
    pub seeds: u64,
    /// How many ops they had.
    pub ops: usize,
    /// How many events their histories had.
    pub events: usize,
    /// How many acquisitions were granted (downgrades included, re-entries not).
    pub grants: usize,
    /// How many acquires were cut short by a dropped future or an outer timeout.
    pub cancels: usize,
    /// How many leases were lost (expired, revoked, ...) rather than released.
    pub losses: usize,
    /// How many runs froze the server for a while.
    pub pauses: usize,
    /// How many runs killed and restarted the server.
    pub restarts: usize,
    /// How many runs faulted a member of the cluster.
    pub member_faults: usize,
    /// How many runs started client 0's network fault as it asked to downgrade.
    pub aimed: usize,
    /// How long it took (wall clock).
    pub elapsed: Duration,
    /// The failing seeds.
    pub failures: Vec<Failure>,
}

impl Report {
    /// `N seeds, M ops (G grants, C cancelled, L leases lost), K events, F failing, in T`,
    /// and how many runs froze or restarted the server, if any did.
    pub fn summary(&self) -> String {
        let mut faults = String::new();
        if self.pauses > 0 {
            faults.push_str(&format!(", {} with the server frozen", self.pauses));
        }
        if self.restarts > 0 {
            faults.push_str(&format!(", {} with the server restarted", self.restarts));
        }
        if self.aimed > 0 {
            faults.push_str(&format!(
                ", {} with a client's network fault aimed at its downgrade",
                self.aimed
            ));
        }
        if self.member_faults > 0 {
            faults.push_str(&format!(
                ", {} with a member of the cluster faulted",
                self.member_faults
            ));
        }
        format!(
            "{} seeds{faults}, {} ops ({} grants, {} cancelled, {} leases lost), {} events, {} failing, in {:.1?}",
            self.seeds,
            self.ops,
            self.grants,
            self.cancels,
            self.losses,
            self.events,
            self.failures.len(),
            self.elapsed
        )
    }

    /// Panics naming every failing seed, if there is one.
    pub fn assert_ok(&self) {
        if !self.failures.is_empty() {
            let seeds: Vec<String> = self
                .failures
                .iter()
                .map(|f| format!("{} ({})", f.seed, f.violations[0].check))
                .collect();
            panic!(
                "checker[{}]: failing seeds {} (replay with LOCK_CHECK_SEED=<seed>)",
                self.backend,
                seeds.join(", ")
            );
        }
    }
}

/// Which seeds to run.
enum Seeds {
    One(u64),
    Range { from: u64, count: u64 },
    Random { minutes: f64, count: Option<u64> },
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn random_base() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    gen::Rng::new(nanos ^ u64::from(std::process::id())).next() >> 16
}

fn seeds(budget: Budget) -> Seeds {
    if let Some(seed) = env_u64("LOCK_CHECK_SEED") {
        return Seeds::One(seed);
    }
    let count = env_u64("LOCK_CHECK_SEEDS");
    if let Some(minutes) = std::env::var("LOCK_CHECK_MINUTES")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
    {
        return Seeds::Random { minutes, count };
    }
    match count {
        Some(count) => Seeds::Range {
            from: random_base(),
            count,
        },
        None => Seeds::Range {
            from: 1,
            count: budget.seeds,
        },
    }
}

/// Runs the checker against `backend`: seeds as [`Budget`] and the `LOCK_CHECK_*`
/// variables say, each in a namespace of its own. Prints a line per failing seed with
/// its shortest failing variant and an excerpt, and a summary line
/// `checker[<backend>]: ...`. Returns the report; [`Report::assert_ok`] fails a test.
pub async fn check(backend: Arc<dyn Backend>, budget: Budget) -> Report {
    check_inner(backend, None, budget).await
}

/// As [`check`], with one client of some seeds made through `cut_off` and cut off from
/// the server at a random moment.
pub async fn check_with_cut_off(
    backend: Arc<dyn Backend>,
    cut_off: Arc<dyn CutOff>,
    budget: Budget,
) -> Report {
    check_inner(backend, Some(cut_off), budget).await
}

/// What a server target runs behind its proxy hook: [`check_with_cut_off`] with
/// `budget`, then [`crate::slow_network::wait_limit_holds_under_late_replies`].
///
/// # Panics
/// On a failing seed or a failed check, naming the backend.
pub async fn check_behind_proxy(
    backend: Arc<dyn Backend>,
    cut_off: Arc<dyn CutOff>,
    budget: Budget,
) {
    check_behind_proxies(backend, cut_off.clone(), &*cut_off, budget).await;
}

/// As [`check_behind_proxy`], with the wait-limit check's client made through
/// `late_replies` instead: a hook whose clients wait for a reply longer than that
/// check's wait, where `cut_off`'s give up sooner.
///
/// # Panics
/// On a failing seed or a failed check, naming the backend.
pub async fn check_behind_proxies(
    backend: Arc<dyn Backend>,
    cut_off: Arc<dyn CutOff>,
    late_replies: &dyn CutOff,
    budget: Budget,
) {
    check_with_cut_off(backend.clone(), cut_off, budget)
        .await
        .assert_ok();
    let name = backend.name().to_owned();
    crate::slow_network::wait_limit_holds_under_late_replies(backend, late_replies)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
}

struct Runner {
    backend: Arc<dyn Backend>,
    cut_off: Option<Arc<dyn CutOff>>,
    run: String,
    runs: u64,
}

impl Runner {
    /// Runs `plan` once; the violations, and what its history had.
    async fn once(&mut self, plan: &Plan) -> (Vec<Violation>, Counts) {
        self.runs += 1;
        let namespace = format!("checker-{}-{}-{}", self.run, plan.seed, self.runs);
        let cuttable = match (&self.cut_off, plan.cut) {
            (Some(hook), Some(_)) => match hook.cuttable().await {
                Ok((backend, proxy)) => Some(Cuttable { backend, proxy }),
                Err(err) => return (vec![setup(err)], Counts::default()),
            },
            _ => None,
        };
        let freezer = match (&self.cut_off, plan.pause) {
            (Some(hook), Some(_)) => hook.freezer(),
            _ => None,
        };
        let restarts = match (&self.cut_off, plan.restart) {
            (Some(hook), Some(_)) => hook.restarts(),
            _ => None,
        };
        let members = match (&self.cut_off, plan.member) {
            (Some(hook), Some(_)) => hook.members(),
            _ => None,
        };
        let faults = exec::ServerFaults {
            freezer,
            restarts,
            members,
        };
        let ran = match exec::run(&self.backend, cuttable, faults, plan, &namespace).await {
            Ok(ran) => ran,
            Err(err) => return (vec![setup(err)], Counts::default()),
        };
        if std::env::var_os("LOCK_CHECK_HISTORY").is_some() {
            println!("checker[{}] seed {} history:", self.run, plan.seed);
            for event in &ran.rec.events {
                println!("    {}", ran.rec.line(event));
            }
        }
        let mut violations = verify::verify(&ran.rec, self.backend.slack());
        for (check, message) in ran.failures {
            violations.push(Violation {
                check,
                message,
                excerpt: Vec::new(),
            });
        }
        if !ran.leftovers.is_empty() {
            violations.push(Violation {
                check: "leftovers",
                message: format!(
                    "after every client was shut down and the longest lease ran out, the server still keeps {:?}",
                    ran.leftovers
                ),
                excerpt: verify::leftover_excerpt(&ran.rec, &ran.leftovers),
            });
        }
        (violations, Counts::of(&ran.rec))
    }

    /// Shorter variants of `plan`, most promising first.
    fn variants(plan: &Plan) -> Vec<Plan> {
        let mut out = Vec::new();
        for task in 0..plan.tasks.len() {
            if plan.tasks.len() > 1 {
                let mut p = plan.clone();
                p.tasks.remove(task);
                out.push(p);
            }
        }
        for keep in [2, 3] {
            let mut p = plan.clone();
            let mut shorter = false;
            for t in &mut p.tasks {
                let len = t.ops.len() * keep / 4;
                if len < t.ops.len() {
                    t.ops.truncate(len.max(1));
                    shorter |= true;
                }
            }
            if shorter && p.op_count() < plan.op_count() {
                out.push(p);
            }
        }
        for task in 0..plan.tasks.len() {
            if plan.tasks[task].ops.len() > 1 {
                let mut p = plan.clone();
                p.tasks[task].ops.pop();
                out.push(p);
            }
        }
        if plan.shutdown.is_some() {
            let mut p = plan.clone();
            p.shutdown = None;
            out.push(p);
        }
        if plan.cut.is_some() {
            let mut p = plan.clone();
            p.cut = None;
            out.push(p);
        }
        if plan.pause.is_some() {
            let mut p = plan.clone();
            p.pause = None;
            out.push(p);
        }
        if plan.restart.is_some() {
            let mut p = plan.clone();
            p.restart = None;
            out.push(p);
        }
        if plan.member.is_some() {
            let mut p = plan.clone();
            p.member = None;
            out.push(p);
        }
        out
    }

    /// The shortest variant of a failing `plan` found in `runs` tries, and what it broke.
    async fn shrink(
        &mut self,
        plan: Plan,
        violations: Vec<Violation>,
        runs: usize,
    ) -> (Plan, Vec<Violation>) {
        let (mut best, mut broke) = (plan, violations);
        let mut left = runs;
        'outer: while left > 0 {
            for variant in Self::variants(&best) {
                if left == 0 {
                    break 'outer;
                }
                left -= 1;
                let (found, _) = self.once(&variant).await;
                if found.iter().any(|v| v.check == broke[0].check) {
                    best = variant;
                    broke = found;
                    continue 'outer;
                }
            }
            break;
        }
        (best, broke)
    }
}

/// What one history had.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    events: usize,
    grants: usize,
    cancels: usize,
    losses: usize,
    pauses: usize,
    restarts: usize,
    member_faults: usize,
    aimed: usize,
}

impl Counts {
    fn of(rec: &history::Recorded) -> Self {
        use history::What;
        let mut counts = Counts {
            events: rec.events.len(),
            ..Counts::default()
        };
        for event in &rec.events {
            match &event.what {
                What::Granted { .. } => counts.grants += 1,
                What::Returned { outcome, .. }
                    if outcome.starts_with("cancelled") || outcome.starts_with("outer") =>
                {
                    counts.cancels += 1;
                }
                What::Lost { reason, .. } if !reason.contains("released") => counts.losses += 1,
                What::Paused { .. } => counts.pauses += 1,
                What::Killed => counts.restarts += 1,
                What::Member { .. } => counts.member_faults += 1,
                What::AimedAtDowngrade { .. } => counts.aimed += 1,
                _ => {}
            }
        }
        counts
    }
}

fn setup(message: String) -> Violation {
    Violation {
        check: "setup",
        message,
        excerpt: Vec::new(),
    }
}

async fn capabilities(backend: &dyn Backend) -> Capabilities {
    let probe = backend
        .client(ClientOptions {
            namespace: "checker-probe".into(),
            watchdog_lease: Duration::from_secs(10),
            holder_description: None,
        })
        .await
        .unwrap_or_else(|err| panic!("could not make a {} client: {err}", backend.name()));
    let caps = probe.capabilities();
    let _ = probe.shutdown().await;
    caps
}

fn describe(plan: &Plan) -> Vec<String> {
    let mut lines = vec![format!(
        "names {:?}; clients {:?}; handles {:?}; shutdown {:?}; cut {:?}; pause {:?}; restart {:?}; member {:?}",
        plan.names,
        plan.clients
            .iter()
            .map(|c| c.watchdog_ms)
            .collect::<Vec<_>>(),
        plan.handles
            .iter()
            .map(|h| format!("c{}:{:?}:{}", h.client, h.family, plan.names[h.name]))
            .collect::<Vec<_>>(),
        plan.shutdown,
        plan.cut,
        plan.pause,
        plan.restart,
        plan.member
    )];
    for (i, task) in plan.tasks.iter().enumerate() {
        lines.push(format!("t{i} (c{}): {:?}", task.client, task.ops));
    }
    lines
}

async fn check_inner(
    backend: Arc<dyn Backend>,
    cut_off: Option<Arc<dyn CutOff>>,
    budget: Budget,
) -> Report {
    let started = std::time::Instant::now();
    let name = backend.name().to_owned();
    let limits = Limits {
        caps: capabilities(&*backend).await,
        can_cut: cut_off.as_ref().is_some_and(|hook| hook.can_cut()),
        can_pause: cut_off
            .as_ref()
            .is_some_and(|hook| hook.freezer().is_some()),
        can_restart: cut_off
            .as_ref()
            .is_some_and(|hook| hook.restarts().is_some()),
        can_fault_members: cut_off
            .as_ref()
            .is_some_and(|hook| hook.members().is_some()),
    };
    let mut runner = Runner {
        backend,
        cut_off,
        run: uuid::Uuid::new_v4().simple().to_string()[..8].to_owned(),
        runs: 0,
    };
    let mut report = Report {
        backend: name.clone(),
        ..Report::default()
    };
    let which = seeds(budget);
    let mut next = match which {
        Seeds::One(seed) => seed,
        Seeds::Range { from, .. } => from,
        Seeds::Random { .. } => random_base(),
    };
    if let Seeds::Range { from, count } = which {
        if from != 1 {
            println!("checker[{name}]: {count} seeds from {from}");
        }
    }
    loop {
        let more = match which {
            Seeds::One(seed) => report.seeds == 0 && next == seed,
            Seeds::Range { count, .. } => report.seeds < count,
            Seeds::Random { minutes, count } => {
                started.elapsed().as_secs_f64() < minutes * 60.0
                    && count.is_none_or(|c| report.seeds < c)
            }
        };
        if !more {
            break;
        }
        let seed = next;
        next = next.wrapping_add(1);
        let plan = generate(seed, limits);
        report.seeds += 1;
        report.ops += plan.op_count();
        let (violations, counts) = runner.once(&plan).await;
        report.events += counts.events;
        report.grants += counts.grants;
        report.cancels += counts.cancels;
        report.losses += counts.losses;
        report.pauses += counts.pauses;
        report.restarts += counts.restarts;
        report.member_faults += counts.member_faults;
        report.aimed += counts.aimed;
        if matches!(which, Seeds::One(_)) {
            println!(
                "checker[{name}] seed {seed}: {} ops, {counts:?}",
                plan.op_count()
            );
        }
        if violations.is_empty() {
            continue;
        }
        let ops = plan.op_count();
        let (plan, violations) = runner.shrink(plan, violations, budget.shrink_runs).await;
        let failure = Failure {
            seed,
            ops: describe(&plan),
            violations,
        };
        print_failure(&name, &failure, ops, plan.op_count());
        report.failures.push(failure);
    }
    report.elapsed = started.elapsed();
    println!("checker[{name}]: {}", report.summary());
    report
}

fn print_failure(backend: &str, failure: &Failure, ops: usize, shrunk: usize) {
    let first = &failure.violations[0];
    let mut out = format!(
        "checker[{backend}] FAIL seed {} ({}): {}\n  replay: LOCK_CHECK_SEED={}\n  shortest failing variant: {shrunk} of {ops} ops:\n",
        failure.seed, first.check, first.message, failure.seed
    );
    for line in &failure.ops {
        out.push_str(&format!("    {line}\n"));
    }
    for violation in &failure.violations {
        out.push_str(&format!("  {}: {}\n", violation.check, violation.message));
        for line in &violation.excerpt {
            out.push_str(&format!("    {line}\n"));
        }
    }
    println!("{out}");
}
