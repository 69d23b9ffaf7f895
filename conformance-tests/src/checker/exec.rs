//! Runs a plan against a backend and records its history.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use lock_core::{
    AcquireOptions, DistributedLock, Election, FairLock, LockGuard, LockKind, LockProvider,
    MultiGuard, MultiLock, ReadWriteLock, Semaphore,
};
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout, Instant};

use super::client_cut::ClientCut;
use super::gen::{CallPlan, Family, LeasePlan, Op, Plan, WaitPlan, PERMITS};
use super::history::{History, HoldId, Recorded, What};
use crate::backend::{Backend, ClientOptions};
use crate::server::Freezer;

/// The longest a release, extend, downgrade or shutdown may take before the run stops
/// waiting for it (a cut-off client's calls wait for their command timeout).
const CALL_LIMIT: Duration = Duration::from_secs(30);
/// How many times a downgrade is asked in full while it fails retryably.
const DOWNGRADE_ASKS: usize = 4;
/// How long all the tasks of a run may take before it counts as hung. Every op is
/// bounded, so only a call that ignores its own limits gets here.
const RUN_LIMIT: Duration = Duration::from_secs(180);
/// The run itself, in the history's task column.
pub(super) const RUN: usize = usize::MAX;

/// A client that can be cut off from its server: the backend it is made from, and
/// the proxy its connections go through.
pub(crate) struct Cuttable {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) proxy: Arc<crate::proxy::Blackhole>,
}

/// What a run may do to the server itself: freeze it, kill and restart it.
pub(crate) struct ServerFaults {
    pub(crate) freezer: Option<Freezer>,
    pub(crate) restarts: Option<super::Restarts>,
    pub(crate) members: Option<Arc<super::Members>>,
}

/// A frozen server, thawed when this goes, however the run ends (an aborted side task
/// included): a server left frozen would fail every later test.
struct Frozen(Option<Freezer>);

impl Frozen {
    /// Thaws it now, saying how that went.
    fn thaw(mut self) -> Result<(), String> {
        self.0.take().map_or(Ok(()), |freezer| freezer.thaw())
    }
}

/// Runs `work` (a `kill` or `docker` command) off the runtime's threads, for at most
/// 10 s.
async fn blocking(
    work: impl FnOnce() -> Result<(), String> + Send + 'static,
) -> Result<(), String> {
    match timeout(Duration::from_secs(10), tokio::task::spawn_blocking(work)).await {
        Ok(Ok(result)) => result,
        Ok(Err(err)) => Err(format!("the command's thread failed: {err}")),
        Err(_) => Err("no answer within 10 s".to_owned()),
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if let Some(Err(err)) = self.0.take().map(|freezer| freezer.thaw()) {
            eprintln!("could not thaw the server: {err}");
        }
    }
}

/// What a run left: its history, and what the run itself saw go wrong.
pub(crate) struct Ran {
    pub(crate) rec: Recorded,
    /// What the server still kept after every client was shut down and the longest
    /// lease had run out.
    pub(crate) leftovers: Vec<String>,
    /// Panics of the tasks, and runs that did not finish.
    pub(crate) failures: Vec<(&'static str, String)>,
}

/// One handle, of whichever lock type.
#[derive(Clone)]
enum Lock {
    Exclusive(Arc<dyn DistributedLock>),
    Fair(Arc<dyn FairLock>),
    ReadWrite(Arc<dyn ReadWriteLock>),
    Semaphore(Arc<dyn Semaphore>),
    Election(Arc<dyn Election>),
}

impl Lock {
    fn acquire(
        &self,
        kind: LockKind,
        options: AcquireOptions,
    ) -> BoxFuture<'_, lock_core::Result<LockGuard>> {
        match (self, kind) {
            (Lock::Exclusive(lock), _) => lock.acquire_with(options),
            (Lock::Fair(lock), _) => lock.acquire_with(options),
            (Lock::ReadWrite(lock), LockKind::Read) => lock.read_with(options),
            (Lock::ReadWrite(lock), _) => lock.write_with(options),
            (Lock::Semaphore(semaphore), _) => semaphore.acquire_with(options),
            (Lock::Election(election), _) => Box::pin(async move {
                let leadership = election.campaign_with("checker", options).await?;
                Ok(leadership.into_guard())
            }),
        }
    }
}

/// A guard a task holds, and the holds it stands for.
enum Held {
    One(LockGuard, HoldId),
    Many(MultiGuard, Vec<HoldId>),
}

impl Held {
    fn holds(&self) -> Vec<HoldId> {
        match self {
            Held::One(_, hold) => vec![*hold],
            Held::Many(_, holds) => holds.clone(),
        }
    }
}

/// How a bounded call ended.
enum Ended<T> {
    Done(T),
    Cancelled,
    OuterTimeout,
}

/// Runs `fut` as `call` says: inside a timeout, and dropped after a while.
async fn bounded<T>(call: CallPlan, fut: impl Future<Output = T>) -> Ended<T> {
    let limited = async {
        match call.timeout_ms {
            Some(ms) => match timeout(Duration::from_millis(ms), fut).await {
                Ok(out) => Ended::Done(out),
                Err(_) => Ended::OuterTimeout,
            },
            None => Ended::Done(fut.await),
        }
    };
    match call.cancel_ms {
        Some(ms) => tokio::select! {
            biased;
            out = limited => out,
            () = sleep(Duration::from_millis(ms)) => Ended::Cancelled,
        },
        None => limited.await,
    }
}

fn options(call: CallPlan) -> AcquireOptions {
    let options = match call.wait {
        WaitPlan::Try => AcquireOptions::try_once(),
        WaitPlan::For(ms) => AcquireOptions::wait_for(Duration::from_millis(ms)),
        WaitPlan::Forever => AcquireOptions::wait_forever(),
    };
    match call.lease {
        LeasePlan::Watchdog => options,
        LeasePlan::Fixed(ms) => options.lease(Duration::from_millis(ms)),
    }
}

fn limit(call: CallPlan) -> Option<Duration> {
    match call.wait {
        WaitPlan::Try => Some(Duration::ZERO),
        WaitPlan::For(ms) => Some(Duration::from_millis(ms)),
        WaitPlan::Forever => None,
    }
}

/// What every task of a run shares.
struct Shared {
    history: Arc<History>,
    plan: Plan,
    locks: Vec<Lock>,
    /// Client 0's network fault, if the plan has one.
    client_cut: Option<Arc<ClientCut>>,
    watchers: std::sync::Mutex<Vec<JoinHandle<()>>>,
}

impl Shared {
    /// Records a grant, and its `lost()` when it comes.
    fn grant(
        &self,
        task: usize,
        call: usize,
        client: usize,
        guard: &LockGuard,
        owner: Option<HoldId>,
    ) -> HoldId {
        let name = self
            .plan
            .names
            .iter()
            .position(|n| n == guard.name().as_str())
            .expect("a name of the plan");
        let watch = guard.watch();
        let hold =
            self.history
                .granted(task, call, client, name, guard.kind(), owner, watch.clone());
        let history = self.history.clone();
        let watcher = tokio::spawn(async move {
            let reason = watch.lost().await;
            history.record(
                task,
                What::Lost {
                    hold,
                    reason: reason.to_string(),
                },
            );
        });
        self.watchers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(watcher);
        hold
    }
}

/// One task: its ops in order, and the guards it holds.
struct Worker {
    shared: Arc<Shared>,
    task: usize,
    client: usize,
    held: Vec<Held>,
}

fn outcome<T>(ended: &Ended<lock_core::Result<T>>) -> (String, bool) {
    match ended {
        Ended::Done(Ok(_)) => ("granted".into(), true),
        Ended::Done(Err(err @ lock_core::Error::Timeout { .. })) => (format!("error: {err}"), true),
        Ended::Done(Err(err)) => (format!("error: {err}"), false),
        Ended::Cancelled => ("cancelled (future dropped)".into(), false),
        Ended::OuterTimeout => ("outer tokio::time::timeout elapsed".into(), false),
    }
}

impl Worker {
    fn history(&self) -> &History {
        &self.shared.history
    }

    async fn run(mut self, ops: Vec<Op>) {
        for op in ops {
            self.step(op).await;
        }
        while let Some(held) = self.held.pop() {
            self.release(held, true).await;
        }
    }

    fn take(&mut self, pick: usize) -> Option<Held> {
        (!self.held.is_empty()).then(|| self.held.remove(pick % self.held.len()))
    }

    async fn step(&mut self, op: Op) {
        let shared = self.shared.clone();
        let plan = &shared.plan;
        match op {
            Op::Acquire { handle, kind, call } => {
                let name = plan.handles[handle].name;
                let desc = format!(
                    "{kind:?} `{}` through handle {handle}, {call:?}",
                    plan.names[name]
                );
                let id = self
                    .history()
                    .call(self.task, self.client, desc, vec![name], limit(call));
                let lock = &shared.locks[handle];
                let ended = bounded(call, lock.acquire(kind, options(call))).await;
                let (text, timed) = outcome(&ended);
                if let Ended::Done(Ok(guard)) = ended {
                    let hold = shared.grant(self.task, id, self.client, &guard, None);
                    self.held.push(Held::One(guard, hold));
                }
                self.history().returned(self.task, id, text, timed);
            }
            Op::Multi { members, call } => {
                let names: Vec<usize> =
                    members.iter().map(|&(h, _)| plan.handles[h].name).collect();
                let desc = format!(
                    "MultiLock [{}], {call:?}",
                    members
                        .iter()
                        .map(|&(h, kind)| format!(
                            "{kind:?} `{}`",
                            plan.names[plan.handles[h].name]
                        ))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                let id = self
                    .history()
                    .call(self.task, self.client, desc, names, limit(call));
                let mut builder = MultiLock::builder();
                for &(handle, kind) in &members {
                    builder = match (&shared.locks[handle], kind) {
                        (Lock::Exclusive(lock), _) => builder.lock(lock.clone()),
                        (Lock::Fair(lock), _) => builder.lock(lock.clone()),
                        (Lock::ReadWrite(lock), LockKind::Read) => builder.read(lock.clone()),
                        (Lock::ReadWrite(lock), _) => builder.write(lock.clone()),
                        (Lock::Semaphore(semaphore), _) => builder.permit(semaphore.clone()),
                        (Lock::Election(_), _) => {
                            unreachable!("plans put no election in a MultiLock (gen.rs)")
                        }
                    };
                }
                let multi = match builder.build() {
                    Ok(multi) => multi,
                    Err(err) => {
                        self.history()
                            .returned(self.task, id, format!("error: {err}"), false);
                        return;
                    }
                };
                let ended = bounded(call, multi.acquire_with(options(call))).await;
                let (text, timed) = outcome(&ended);
                if let Ended::Done(Ok(guard)) = ended {
                    let holds = guard
                        .guards()
                        .map(|g| shared.grant(self.task, id, self.client, g, None))
                        .collect();
                    self.held.push(Held::Many(guard, holds));
                }
                self.history().returned(self.task, id, text, timed);
            }
            Op::Reenter { pick } => {
                if self.held.is_empty() {
                    return;
                }
                let at = pick % self.held.len();
                let holds = self.held[at].holds();
                let names = holds.iter().map(|&h| self.name_of(h)).collect();
                let id = self.history().call(
                    self.task,
                    self.client,
                    format!("reenter {holds:?}"),
                    names,
                    None,
                );
                let again = match &self.held[at] {
                    Held::One(guard, hold) => guard.reenter().map(|g| Held::One(g, *hold)),
                    Held::Many(guard, holds) => {
                        guard.reenter().map(|g| Held::Many(g, holds.clone()))
                    }
                };
                let text = match again {
                    Ok(held) => {
                        for &hold in &holds {
                            self.history().add_guard(hold);
                        }
                        self.held.push(held);
                        "reentered".to_owned()
                    }
                    Err(err) => format!("error: {err}"),
                };
                self.history().returned(self.task, id, text, false);
            }
            Op::Downgrade { pick, cut_ms } => {
                let writers: Vec<usize> = (0..self.held.len())
                    .filter(|&i| matches!(&self.held[i], Held::One(g, _) if g.kind() == LockKind::Write))
                    .collect();
                if writers.is_empty() {
                    return;
                }
                let at = writers[pick % writers.len()];
                let Held::One(guard, hold) = &self.held[at] else {
                    unreachable!("picked among single guards");
                };
                let hold = *hold;
                if self.client == 0 {
                    if let Some(cut) = &shared.client_cut {
                        cut.downgrade_asked();
                    }
                }
                // The first ask cut short, if the plan says so, then asked again in full
                // while it did not answer or failed retryably, as a user would.
                let cut = cut_ms.map(Duration::from_millis);
                let mut granted = None;
                let asks = std::iter::repeat_n(CALL_LIMIT, DOWNGRADE_ASKS);
                for limit in cut.into_iter().chain(asks) {
                    let id = self.history().call(
                        self.task,
                        self.client,
                        format!("downgrade h{hold}"),
                        vec![self.name_of(hold)],
                        None,
                    );
                    let ended = match timeout(limit, guard.downgrade()).await {
                        Ok(out) => Ended::Done(out),
                        Err(_) if limit < CALL_LIMIT => Ended::Cancelled,
                        Err(_) => Ended::OuterTimeout,
                    };
                    let (text, _) = outcome(&ended);
                    // Cut short or failed for now: a user asks again.
                    let answered = match &ended {
                        Ended::Cancelled => false,
                        Ended::Done(Err(err)) => !err.is_retryable(),
                        _ => true,
                    };
                    if let Ended::Done(Ok(read)) = ended {
                        // Asked while the read side an earlier downgrade made is held, a
                        // downgrade re-enters it.
                        let token = read.fencing_token();
                        let new = match self.history().reentered_read(hold, token) {
                            Some(earlier) => earlier,
                            None => shared.grant(self.task, id, self.client, &read, Some(hold)),
                        };
                        granted = Some(Held::One(read, new));
                    }
                    self.history().returned(self.task, id, text, false);
                    if answered {
                        break;
                    }
                }
                self.held.extend(granted);
            }
            Op::Release { pick } => {
                if let Some(held) = self.take(pick) {
                    self.release(held, true).await;
                }
            }
            Op::Drop { pick } => {
                if let Some(held) = self.take(pick) {
                    self.release(held, false).await;
                }
            }
            Op::Extend { pick, ms } => {
                if self.held.is_empty() {
                    return;
                }
                let held = &self.held[pick % self.held.len()];
                let holds = held.holds();
                let names: Vec<usize> = holds.iter().map(|&h| self.name_of(h)).collect();
                let id = self.history().call(
                    self.task,
                    self.client,
                    format!("extend {holds:?} to {ms} ms"),
                    names.clone(),
                    None,
                );
                let ttl = Duration::from_millis(ms);
                let result = match held {
                    Held::One(guard, _) => timeout(CALL_LIMIT, guard.extend(ttl)).await,
                    Held::Many(guard, _) => timeout(CALL_LIMIT, guard.extend(ttl)).await,
                };
                let text = match result {
                    Ok(Ok(())) => "extended".to_owned(),
                    Ok(Err(err)) => format!("error: {err}"),
                    Err(_) => "no answer".to_owned(),
                };
                self.history().returned(self.task, id, text, false);
                for name in names {
                    self.history().probe(self.task, name);
                }
            }
            Op::Hold { ms } => {
                let until = Instant::now() + Duration::from_millis(ms);
                loop {
                    let names: Vec<usize> = self
                        .held
                        .iter()
                        .flat_map(Held::holds)
                        .map(|h| self.name_of(h))
                        .collect();
                    for name in names {
                        self.history().probe(self.task, name);
                    }
                    if Instant::now() >= until {
                        break;
                    }
                    sleep(Duration::from_millis(ms.clamp(1, 25))).await;
                }
            }
            Op::Sleep { ms } => sleep(Duration::from_millis(ms)).await,
        }
    }

    fn name_of(&self, hold: HoldId) -> usize {
        self.shared.history.name_of(hold)
    }

    /// Gives up `held`: releases it (`release`) or drops it.
    async fn release(&mut self, held: Held, release: bool) {
        let holds = held.holds();
        let how = if release { "release" } else { "drop" };
        let names = holds.iter().map(|&h| self.name_of(h)).collect();
        let id = self.history().call(
            self.task,
            self.client,
            format!("{how} {holds:?}"),
            names,
            None,
        );
        for &hold in &holds {
            self.history().give_up(self.task, hold, how);
        }
        let text = match held {
            _ if !release => {
                drop(held);
                "dropped".to_owned()
            }
            Held::One(guard, _) => match timeout(CALL_LIMIT, guard.release()).await {
                Ok(Ok(())) => "released".to_owned(),
                Ok(Err(err)) => format!("release failed: {err}"),
                Err(_) => "no answer".to_owned(),
            },
            Held::Many(guard, _) => match timeout(CALL_LIMIT, guard.release()).await {
                Ok(Ok(())) => "released".to_owned(),
                Ok(Err(err)) => format!("release failed: {err:?}"),
                Err(_) => "no answer".to_owned(),
            },
        };
        self.history().returned(self.task, id, text, false);
    }
}

/// Makes the clients and handles of `plan` in `namespace` and runs it.
pub(crate) async fn run(
    backend: &Arc<dyn Backend>,
    cuttable: Option<Cuttable>,
    faults: ServerFaults,
    plan: &Plan,
    namespace: &str,
) -> Result<Ran, String> {
    let mut cut = None;
    let mut clients: Vec<Arc<dyn LockProvider>> = Vec::new();
    let mut cuttable = if plan.cut.is_some() { cuttable } else { None };
    for (i, client) in plan.clients.iter().enumerate() {
        let options = ClientOptions {
            namespace: namespace.to_owned(),
            watchdog_lease: Duration::from_millis(client.watchdog_ms),
            holder_description: Some(format!("checker seed {} client {i}", plan.seed)),
        };
        let made = match cuttable.take() {
            Some(c) if i == 0 => {
                cut = Some(c.proxy);
                c.backend.client(options).await
            }
            other => {
                cuttable = other;
                backend.client(options).await
            }
        };
        clients.push(made.map_err(|err| format!("could not make client {i}: {err}"))?);
    }
    let mut locks = Vec::new();
    for handle in &plan.handles {
        let client = &clients[handle.client];
        let name = &plan.names[handle.name];
        let lock = match handle.family {
            Family::Exclusive => client.lock(name).map(Lock::Exclusive),
            Family::Fair => client.fair_lock(name).map(Lock::Fair),
            Family::ReadWrite => client.rw_lock(name).map(Lock::ReadWrite),
            Family::Semaphore => client.semaphore(name, PERMITS).map(Lock::Semaphore),
            Family::Election => client.election(name).map(Lock::Election),
        };
        locks.push(lock.map_err(|err| format!("lock handle: {err}"))?);
    }
    let history = Arc::new(History::new(plan.names.clone()));
    let client_cut = match (plan.cut, cut) {
        (Some(fault), Some(proxy)) => Some(ClientCut::new(proxy, fault, history.clone())),
        _ => None,
    };
    let shared = Arc::new(Shared {
        history: history.clone(),
        plan: plan.clone(),
        locks,
        client_cut: client_cut.clone(),
        watchers: std::sync::Mutex::new(Vec::new()),
    });
    let mut failures = Vec::new();

    // Samples every live hold now and then, beside the tasks' own samples.
    let prober = {
        let history = history.clone();
        tokio::spawn(async move {
            loop {
                history.probe_all(RUN);
                sleep(Duration::from_millis(17)).await;
            }
        })
    };
    let mut side = Vec::new();
    if let Some((client, ms)) = plan.shutdown {
        let history = history.clone();
        let provider = clients[client].clone();
        side.push(tokio::spawn(async move {
            sleep(Duration::from_millis(ms)).await;
            history.record(
                RUN,
                What::Shutdown {
                    client,
                    done: false,
                },
            );
            let result = timeout(CALL_LIMIT, provider.shutdown()).await;
            history.record(
                RUN,
                What::Note(format!("shutdown of c{client}: {result:?}")),
            );
            history.record(RUN, What::Shutdown { client, done: true });
            history.probe_client(RUN, client);
        }));
    }
    if let Some(cut) = &client_cut {
        side.push(tokio::spawn(cut.clone().run()));
    }
    if let (Some(pause), Some(freezer)) = (plan.pause, faults.freezer) {
        let history = history.clone();
        side.push(tokio::spawn(async move {
            sleep(Duration::from_millis(pause.at_ms)).await;
            history.record(RUN, What::Paused { ms: pause.for_ms });
            // Thawed when this goes, even if the freeze is still under way then.
            let frozen = Frozen(Some(freezer.clone()));
            let froze = blocking(move || freezer.freeze()).await;
            if let Err(err) = froze {
                history.record(RUN, What::Note(format!("could not freeze: {err}")));
            } else {
                sleep(Duration::from_millis(pause.for_ms)).await;
            }
            let thawed = blocking(move || frozen.thaw()).await;
            if let Err(err) = thawed {
                history.record(RUN, What::Note(format!("could not thaw: {err}")));
            }
            history.record(RUN, What::Resumed);
        }));
    }
    // Awaited to its end, however long the start takes: the next run needs the server.
    let restarting = match (plan.restart, faults.restarts) {
        (Some(restart), Some(restarts)) => {
            let stay_out = match restarts.after {
                super::AfterRestart::KeepsLocks => Duration::ZERO,
                super::AfterRestart::ForgetsLocks => {
                    Duration::from_millis(plan.longest_lease_ms()) + backend.slack() * 2
                }
            };
            let down = Duration::from_millis(restart.down_ms).max(stay_out);
            Some(tokio::spawn(restart_server(
                history.clone(),
                restarts.server,
                Duration::from_millis(restart.at_ms),
                down,
            )))
        }
        _ => None,
    };
    // Awaited to its end too: the next run needs the whole cluster.
    let member_fault = match (plan.member, faults.members) {
        (Some(member), Some(members)) => {
            let history = history.clone();
            Some(tokio::spawn(async move {
                members.run(history, RUN, member).await
            }))
        }
        _ => None,
    };
    let tasks: Vec<JoinHandle<()>> = plan
        .tasks
        .iter()
        .enumerate()
        .map(|(task, t)| {
            let worker = Worker {
                shared: shared.clone(),
                task,
                client: t.client,
                held: Vec::new(),
            };
            tokio::spawn(worker.run(t.ops.clone()))
        })
        .collect();
    let aborts: Vec<_> = tasks.iter().map(JoinHandle::abort_handle).collect();
    match timeout(RUN_LIMIT, futures::future::join_all(tasks)).await {
        Ok(joined) => {
            for (task, joined) in joined.into_iter().enumerate() {
                if let Err(err) = joined {
                    if let Ok(panic) = err.try_into_panic() {
                        let message = panic
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                            .unwrap_or_else(|| "panicked".into());
                        failures.push(("panic", format!("task t{task} panicked: {message}")));
                    }
                }
            }
        }
        Err(_) => {
            for abort in aborts {
                abort.abort();
            }
            failures.push((
                "hung",
                format!("the tasks were still running after {RUN_LIMIT:?}"),
            ));
        }
    }
    for side in side {
        let _ = timeout(CALL_LIMIT, side).await;
    }
    if let Some(restarting) = restarting {
        match restarting.await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => failures.push(("setup", err)),
            Err(err) => failures.push(("setup", format!("the restart's task failed: {err}"))),
        }
    }
    if let Some(member_fault) = member_fault {
        match member_fault.await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => failures.push(("setup", err)),
            Err(err) => failures.push(("setup", format!("the member fault's task failed: {err}"))),
        }
    }
    prober.abort();
    history.probe_all(RUN);
    for (client, provider) in clients.iter().enumerate() {
        history.record(
            RUN,
            What::Shutdown {
                client,
                done: false,
            },
        );
        if let Err(err) = timeout(CALL_LIMIT, provider.shutdown()).await {
            history.record(RUN, What::Note(format!("shutdown of c{client}: {err}")));
        }
        history.record(RUN, What::Shutdown { client, done: true });
        history.probe_client(RUN, client);
    }
    // Released leases go at once; a lease whose release could not be sent (a cut-off
    // client) runs out on the server within its length.
    let deadline =
        Instant::now() + Duration::from_millis(plan.longest_lease_ms()) + backend.slack() * 2;
    let leftovers = loop {
        // A server just restarted may refuse a moment longer than its probe said.
        let left = match backend.leftovers(namespace).await {
            Err(_) if Instant::now() < deadline => None,
            left => Some(left?),
        };
        match left {
            Some(left) if left.is_empty() || Instant::now() >= deadline => break left,
            _ => sleep(Duration::from_millis(100)).await,
        }
    };
    for watcher in shared
        .watchers
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .drain(..)
    {
        watcher.abort();
    }
    Ok(Ran {
        rec: history.finish(),
        leftovers,
        failures,
    })
}

/// Kills the server `at` into the run, and starts it again `down` later. A kill that
/// failed fails the run without a restart (a restart would kill the server that still
/// serves and start it again at once, with no stay-out), and so does a server that does
/// not serve again: every later run would fail on it.
async fn restart_server(
    history: Arc<History>,
    server: crate::server::SharedServer,
    at: Duration,
    down: Duration,
) -> Result<(), String> {
    sleep(at).await;
    history.record(RUN, What::Killed);
    let failed = |err: String| {
        history.record(RUN, What::Note(err.clone()));
        Err(err)
    };
    if let Err(err) = server.kill().await {
        return failed(format!("could not kill the server: {err}"));
    }
    sleep(down).await;
    if let Err(err) = server.restart().await {
        return failed(format!(
            "the server did not serve again after its restart: {err}"
        ));
    }
    history.record(RUN, What::Restarted);
    Ok(())
}
