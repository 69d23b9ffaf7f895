//! ZooKeeper-specific checks, beyond the shared suite: what the session, the node
//! layout and the recipe promise.

use std::sync::Arc;
use std::time::Duration;

use conformance_tests::log_capture;
use conformance_tests::proxy::Blackhole;
use futures::future::BoxFuture;
use futures::FutureExt;
use lock_core::backend::LockBackend;
use lock_core::prelude::*;
use lock_core::{
    AcquireOptions, Error, LeaseLoss, LockClient, LockFamily, LockKey, LockName, Namespace,
};
use lock_zookeeper::zookeeper_client::{Acls, Client, CreateMode};
use lock_zookeeper::{ConnectionState, ZkBackend};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::time::Instant;

use conformance_tests::Backend as _;

use crate::faults::{op, Fault, ZkFaults};
use crate::{Zk, SESSION_TIMEOUT};

type Check = fn(Arc<Zk>) -> BoxFuture<'static, ()>;

/// Every check, in the order they run.
pub fn all() -> Vec<(&'static str, Check)> {
    vec![
        ("frozen_holder_session_expires", |zk| {
            frozen_holder_session_expires(zk).boxed()
        }),
        ("paused_server_reports_session_loss", |zk| {
            paused_server_reports_session_loss(zk).boxed()
        }),
        ("deleted_node_reports_loss", |zk| {
            deleted_node_reports_loss(zk).boxed()
        }),
        ("cancelled_acquire_leaves_no_child", |zk| {
            cancelled_acquire_leaves_no_child(zk).boxed()
        }),
        ("curator_nodes_are_contenders", |zk| {
            curator_nodes_are_contenders(zk).boxed()
        }),
        (
            "blackholed_holder_reports_loss_before_the_server_frees_it",
            |zk| blackholed_holder_reports_loss_before_the_server_frees_it(zk).boxed(),
        ),
        ("kazoo_locks_and_ours_exclude_each_other", |zk| {
            kazoo_locks_and_ours_exclude_each_other(zk).boxed()
        }),
        ("curator_leader_latch_and_ours_elect_one_leader", |zk| {
            curator_leader_latch_and_ours_elect_one_leader(zk).boxed()
        }),
        ("reader_tokens_lie_between_the_writers", |zk| {
            reader_tokens_lie_between_the_writers(zk).boxed()
        }),
        ("fifty_waiters_wake_one_each", |zk| {
            fifty_waiters_wake_one_each(zk).boxed()
        }),
        ("permit_waiters_wake_about_two_per_grant", |zk| {
            permit_waiters_wake_about_two_per_grant(zk).boxed()
        }),
        (
            "a_stalled_predecessor_does_not_hold_up_the_next_permit",
            |zk| a_stalled_predecessor_does_not_hold_up_the_next_permit(zk).boxed(),
        ),
        ("unreachable_server_is_unavailable", |zk| {
            unreachable_server_is_unavailable(zk).boxed()
        }),
        ("chroot_and_digest_acl", |zk| {
            chroot_and_digest_acl(zk).boxed()
        }),
        ("empty_lock_paths_are_reaped", |zk| {
            empty_lock_paths_are_reaped(zk).boxed()
        }),
        ("release_met_by_a_connection_reset_is_retried", |zk| {
            release_met_by_a_connection_reset_is_retried(zk).boxed()
        }),
        ("requests_cut_off_end_within_the_request_timeout", |zk| {
            requests_cut_off_end_within_the_request_timeout(zk).boxed()
        }),
        ("lost_create_reply_and_failed_lookup_leave_one_node", |zk| {
            lost_create_reply_and_failed_lookup_leave_one_node(zk).boxed()
        }),
    ]
}

fn namespace(check: &str) -> String {
    format!("zk-{check}-{}", uuid::Uuid::new_v4().simple())
}

fn key(ns: &str, name: &str) -> LockKey {
    LockKey::new(Namespace::new(ns).unwrap(), LockName::new(name).unwrap())
}

fn client(backend: &ZkBackend, ns: &str) -> LockClient<ZkBackend> {
    LockClient::builder(backend.clone())
        .namespace(ns)
        .build()
        .expect("client")
}

async fn raw(zk: &Zk) -> Client {
    zk.operator
        .zookeeper_client()
        .await
        .expect("operator client")
}

async fn within<T>(what: &str, limit: Duration, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(limit, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {limit:?}"))
}

/// Waits, by watching, until the children of `dir` satisfy `done`; returns them.
async fn children_until(
    raw: &Client,
    dir: &str,
    limit: Duration,
    done: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + limit;
    loop {
        let (children, watcher) = match raw.list_and_watch_children(dir).await {
            Ok(found) => found,
            Err(lock_zookeeper::zookeeper_client::Error::NoNode) => {
                if done(&[]) {
                    return Vec::new();
                }
                let (_, watcher) = raw.check_and_watch_stat(dir).await.expect("exists");
                (Vec::new(), watcher)
            }
            Err(err) => panic!("list {dir}: {err}"),
        };
        if done(&children) {
            return children;
        }
        if tokio::time::timeout_at(deadline, watcher.changed())
            .await
            .is_err()
        {
            panic!("children of {dir} still {children:?} after {limit:?}");
        }
    }
}

/// Polls a local counter (no server involved) until `done`.
async fn until(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Sends `signal` (`STOP`, `CONT`) to a process this test started, by its PID.
fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// Resumes a paused process when dropped, also when a check fails.
struct Resume(u32);

impl Drop for Resume {
    fn drop(&mut self) {
        signal(self.0, "CONT");
    }
}

/// Thaws a paused server when dropped, also when a check fails.
struct Thaw(conformance_tests::server::Freezer);

impl Drop for Thaw {
    fn drop(&mut self) {
        let _ = self.0.thaw();
    }
}

/// A holder process frozen (SIGSTOP) past its session timeout: the server expires its
/// session and hands the lock on; once thawed, the holder's guard reports the loss (the
/// holder prints it and exits with 3).
async fn frozen_holder_session_expires(zk: Arc<Zk>) {
    let session = Duration::from_secs(2);
    let spec = conformance_tests::HolderSpec {
        namespace: namespace("frozen"),
        name: "frozen".into(),
        watchdog_lease: session,
    };
    let mut command = zk.holder_command(&spec).expect("holder");
    command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().expect("spawn holder");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = within("holder acquires", zk.slack() * 10, lines.next_line())
        .await
        .expect("read")
        .expect("a line");
    assert!(line.starts_with("ACQUIRED"), "{line}");
    let pid = child.id().expect("running");
    signal(pid, "STOP");
    let resume = Resume(pid);
    let ours = client(
        &ZkBackend::new(zk.config(SESSION_TIMEOUT)).expect("valid settings"),
        &spec.namespace,
    );
    let frozen_at = Instant::now();
    let guard = within(
        "acquire after the frozen holder's session expired",
        session + zk.slack() * 2,
        ours.lock("frozen").unwrap().acquire(),
    )
    .await
    .expect("acquire");
    println!(
        "zookeeper: frozen holder's lock free after {:.2?}",
        frozen_at.elapsed()
    );
    drop(resume);
    let status = within("holder notices", zk.slack() * 3, child.wait())
        .await
        .expect("wait");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .await
        .unwrap();
    assert_eq!(status.code(), Some(3), "holder exit; stderr: {stderr}");
    // Thawed, it learns either that its session ended or, first, that the watchdog
    // lease ran out locally while it was frozen: a loss either way.
    assert!(
        stderr.contains("session ended") || stderr.contains("lease expired"),
        "holder said: {stderr}"
    );
    guard.release().await.expect("release");
}

/// The server paused (SIGSTOP): the connection is lost, locks are uncertain
/// (`Suspended`, renewals fail), and within a session timeout every guard of the
/// backend reports `SessionLost`. Once the server is back, a new session serves locks.
async fn paused_server_reports_session_loss(zk: Arc<Zk>) {
    let Some(server) = zk.server.clone() else {
        println!("zookeeper SKIP paused_server_reports_session_loss: server from the environment");
        return;
    };
    let ns = namespace("paused");
    let session = Duration::from_secs(2);
    let backend = ZkBackend::connect(zk.config(session))
        .await
        .expect("connect");
    let client = client(&backend, &ns);
    let guards = vec![
        client
            .lock("a")
            .unwrap()
            .acquire()
            .await
            .expect("exclusive"),
        client
            .fair_lock("b")
            .unwrap()
            .acquire()
            .await
            .expect("fair"),
        client.rw_lock("c").unwrap().read().await.expect("read"),
    ];
    assert_eq!(backend.connection_state(), ConnectionState::Connected);
    server.freeze().expect("pause the server");
    let resume = Thaw(server);
    until("suspended", session + zk.slack(), || {
        backend.connection_state() == ConnectionState::Suspended
    })
    .await;
    for guard in &guards {
        let loss = within("loss report", session + zk.slack() * 2, guard.lost()).await;
        assert_eq!(loss, LeaseLoss::SessionLost);
        assert!(!guard.is_held());
    }
    assert_eq!(backend.connection_state(), ConnectionState::Lost);
    drop(resume);
    let again = within("a new session", zk.slack() * 3, async {
        client.lock("a").unwrap().acquire().await
    })
    .await
    .expect("acquire on a new session");
    assert_eq!(backend.connection_state(), ConnectionState::Connected);
    again.release().await.expect("release");
    for guard in guards {
        assert!(matches!(
            guard.release().await,
            Err(Error::LeaseLost { .. })
        ));
    }
}

/// The holder's node deleted by someone else: its guard reports `Revoked` at once (the
/// watch on its own node, set 0.2 s after the grant), with no renewal needed.
async fn deleted_node_reports_loss(zk: Arc<Zk>) {
    let ns = namespace("deleted");
    let client = client(
        &ZkBackend::new(zk.config(SESSION_TIMEOUT)).expect("valid settings"),
        &ns,
    );
    let guard = client
        .lock("victim")
        .unwrap()
        .acquire()
        .await
        .expect("acquire");
    let raw = raw(&zk).await;
    let dir = ZkBackend::lock_path(&key(&ns, "victim"), LockFamily::Exclusive);
    let children = raw.list_children(&dir).await.expect("list");
    assert_eq!(children.len(), 1, "{children:?}");
    raw.delete(&format!("{dir}/{}", children[0]), None)
        .await
        .expect("delete");
    let loss = within("loss report", zk.slack(), guard.lost()).await;
    assert_eq!(loss, LeaseLoss::Revoked);
    assert!(matches!(
        guard.release().await,
        Err(Error::LeaseLost { .. })
    ));
}

/// An acquire dropped while it waits, or giving up at its limit, deletes its node.
async fn cancelled_acquire_leaves_no_child(zk: Arc<Zk>) {
    let ns = namespace("cancel");
    let dir = ZkBackend::lock_path(&key(&ns, "c"), LockFamily::Exclusive);
    let raw = raw(&zk).await;
    let holder = client(
        &ZkBackend::new(zk.config(SESSION_TIMEOUT)).expect("valid settings"),
        &ns,
    );
    let guard = holder.lock("c").unwrap().acquire().await.expect("acquire");
    let held = children_until(&raw, &dir, zk.slack(), |c| c.len() == 1).await;

    let waiter = client(
        &ZkBackend::new(zk.config(SESSION_TIMEOUT)).expect("valid settings"),
        &ns,
    );
    let lock = waiter.lock("c").unwrap();
    let task = tokio::spawn(async move { lock.acquire().await });
    children_until(&raw, &dir, zk.slack(), |c| c.len() == 2).await;
    task.abort();
    let left = children_until(&raw, &dir, zk.slack(), |c| c.len() == 1).await;
    assert_eq!(left, held, "the holder's node must be the one left");

    let lock = waiter.lock("c").unwrap();
    let err = lock
        .acquire_timeout(Duration::from_millis(300))
        .await
        .expect_err("held");
    assert!(err.is_retryable(), "{err}");
    let left = children_until(&raw, &dir, zk.slack(), |c| c.len() == 1).await;
    assert_eq!(left, held);
    guard.release().await.expect("release");
    children_until(&raw, &dir, zk.slack(), <[String]>::is_empty).await;
}

/// Nodes in Curator's layout made by another client (raw creates standing in for
/// Curator) are contenders in sequence order, for the mutex and the read-write lock;
/// ours are named as Curator names them.
async fn curator_nodes_are_contenders(zk: Arc<Zk>) {
    let ns = namespace("curator");
    let raw = raw(&zk).await;
    let dir = ZkBackend::lock_path(&key(&ns, "shared"), LockFamily::Exclusive);
    let container = CreateMode::Container.with_acls(Acls::anyone_all());
    let ephemeral = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    raw.mkdir(&dir, &container).await.expect("mkdir");
    let curator = |marker: &str| format!("{dir}/_c_{}-{marker}", uuid::Uuid::new_v4());
    let (_, seq) = raw
        .create(&curator("lock-"), b"10.0.0.1", &ephemeral)
        .await
        .expect("create");
    let children = raw.list_children(&dir).await.unwrap();
    let first = format!("{dir}/{}", children[0]);
    assert!(first.ends_with(&seq.to_string()));
    let (_, second_seq) = raw
        .create(&curator("lock-"), b"10.0.0.1", &ephemeral)
        .await
        .expect("create");
    let second = raw
        .list_children(&dir)
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.ends_with(&second_seq.to_string()))
        .map(|c| format!("{dir}/{c}"))
        .unwrap();

    let backend = ZkBackend::new(zk.config(SESSION_TIMEOUT)).expect("valid settings");
    let ours = client(&backend, &ns);
    assert!(
        ours.lock("shared")
            .unwrap()
            .try_acquire()
            .await
            .unwrap()
            .is_none(),
        "ignored Curator's holder"
    );
    let lock = ours.lock("shared").unwrap();
    let task = tokio::spawn(async move { lock.acquire_timeout(Duration::from_secs(60)).await });
    let queued = children_until(&raw, &dir, zk.slack(), |c| c.len() == 3).await;
    let mine = queued
        .iter()
        .find(|c| !first.ends_with(c.as_str()) && !second.ends_with(c.as_str()))
        .unwrap();
    let (head, tail) = mine.split_at(mine.len() - 10);
    assert!(tail.bytes().all(|b| b.is_ascii_digit()), "{mine}");
    assert!(
        head.starts_with("_c_") && head.ends_with("-lock-") && head.len() == 3 + 36 + 6,
        "{mine}"
    );

    // The node right before ours goes: we wake, see Curator's holder, wait again.
    until("queued", zk.slack(), || backend.stats().waiting == 1).await;
    raw.delete(&second, None).await.expect("delete second");
    until("woken and waiting again", zk.slack(), || {
        let s = backend.stats();
        s.predecessor_wakeups == 1 && s.waiting == 1
    })
    .await;
    assert!(!task.is_finished(), "acquired while Curator's holder held");
    raw.delete(&first, None).await.expect("delete first");
    let guard = within("handoff from Curator", zk.slack(), task)
        .await
        .unwrap()
        .expect("acquire");
    // A Curator contender arriving now queues behind us.
    let (_, later) = raw
        .create(&curator("lock-"), b"", &ephemeral)
        .await
        .unwrap();
    assert!(later.into_i64() > seq.into_i64());
    guard.release().await.expect("release");
    let rest = raw.list_children(&dir).await.unwrap();
    assert_eq!(rest.len(), 1);
    raw.delete(&format!("{dir}/{}", rest[0]), None)
        .await
        .unwrap();

    // Read-write: Curator's writer blocks our readers and writers; its reader blocks
    // only our writers.
    let rw_dir = ZkBackend::lock_path(&key(&ns, "table"), LockFamily::ReadWrite);
    raw.mkdir(&rw_dir, &container).await.expect("mkdir");
    let rw = ours.rw_lock("table").unwrap();
    let marker = |m: &str| format!("{rw_dir}/_c_{}-{m}", uuid::Uuid::new_v4());
    raw.create(&marker("__WRIT__"), b"", &ephemeral)
        .await
        .unwrap();
    assert!(
        rw.try_read().await.unwrap().is_none(),
        "read past Curator's writer"
    );
    assert!(
        rw.try_write().await.unwrap().is_none(),
        "write past Curator's writer"
    );
    for child in raw.list_children(&rw_dir).await.unwrap() {
        raw.delete(&format!("{rw_dir}/{child}"), None)
            .await
            .unwrap();
    }
    raw.create(&marker("__READ__"), b"", &ephemeral)
        .await
        .unwrap();
    let read = rw
        .try_read()
        .await
        .unwrap()
        .expect("readers share with Curator's reader");
    read.release().await.unwrap();
    assert!(
        rw.try_write().await.unwrap().is_none(),
        "write past Curator's reader"
    );
    for child in raw.list_children(&rw_dir).await.unwrap() {
        raw.delete(&format!("{rw_dir}/{child}"), None)
            .await
            .unwrap();
    }
}

/// Readers that hold at once, each in a session of its own: released together by a
/// writer, and starting together on a free lock. Their tokens are distinct, above the
/// token of the writer before them and below that of the writer after them; a reader
/// that starts after another's acquire returned gets a higher token. Among readers
/// holding at once the order of tokens is the order in which ZooKeeper saw their grants
/// (a grant's create, or its fencing write after a wait), not the order in which their
/// acquire calls return: that is documented, and printed here, not asserted.
async fn reader_tokens_lie_between_the_writers(zk: Arc<Zk>) {
    const READERS: usize = 6;
    let ns = namespace("readers");
    let dir = ZkBackend::lock_path(&key(&ns, "t"), LockFamily::ReadWrite);
    let raw = raw(&zk).await;
    let session = || {
        client(
            &ZkBackend::new(zk.config(SESSION_TIMEOUT)).expect("valid settings"),
            &ns,
        )
    };
    let writer = session();
    let first = writer
        .rw_lock("t")
        .unwrap()
        .write()
        .await
        .expect("first writer");
    let readers: Vec<_> = (0..READERS).map(|_| session()).collect();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for (i, reader) in readers.iter().enumerate() {
        let lock = reader.rw_lock("t").unwrap();
        let tx = tx.clone();
        tokio::spawn(async move {
            let guard = lock.read_with(AcquireOptions::wait_for(Duration::from_secs(60)));
            let _ = tx.send((i, guard.await));
        });
    }
    children_until(&raw, &dir, zk.slack() * 5, |c| c.len() == READERS + 1).await;
    let before = first.fencing_token();
    first.release().await.expect("release");
    let mut guards = Vec::new();
    for _ in 0..READERS {
        let (i, guard) = within("readers", zk.slack() * 2, rx.recv())
            .await
            .expect("sender");
        guards.push((i, guard.expect("reader")));
    }
    let later = session();
    let lock = later.rw_lock("t").unwrap();
    let second = tokio::spawn(async move {
        lock.write_with(AcquireOptions::wait_for(Duration::from_secs(60)))
            .await
    });
    children_until(&raw, &dir, zk.slack() * 5, |c| c.len() == READERS + 1).await;
    let tokens: Vec<u64> = guards.iter().map(|(_, g)| g.fencing_token()).collect();
    println!(
        "zookeeper: writer {before}, then {READERS} readers released together, tokens in the order their acquires returned (queue position: token): {:?}",
        guards
            .iter()
            .map(|(i, g)| format!("{i}: {}", g.fencing_token()))
            .collect::<Vec<_>>()
    );
    let mut distinct = tokens.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), READERS, "reader tokens {tokens:?}");
    assert!(
        tokens.iter().all(|&t| t > before),
        "reader tokens {tokens:?} not above the writer's {before}"
    );
    for (_, guard) in guards {
        guard.release().await.expect("release");
    }
    let second = within("second writer", zk.slack() * 2, second)
        .await
        .unwrap()
        .expect("second writer");
    let after = second.fencing_token();
    assert!(
        tokens.iter().all(|&t| t < after),
        "reader tokens {tokens:?} not below the next writer's {after}"
    );
    second.release().await.expect("release");

    // Readers starting together on a free lock, most granted on their first look.
    let mut tasks = Vec::new();
    for reader in &readers {
        let lock = reader.rw_lock("t").unwrap();
        tasks.push(tokio::spawn(async move {
            let guard = lock.read().await.expect("reader");
            (guard.fencing_token(), guard)
        }));
    }
    let mut together = Vec::new();
    for task in tasks {
        together.push(within("readers", zk.slack() * 2, task).await.unwrap());
    }
    let tokens: Vec<u64> = together.iter().map(|(t, _)| *t).collect();
    let mut distinct = tokens.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), READERS, "reader tokens {tokens:?}");
    assert!(
        tokens.iter().all(|&t| t > after),
        "reader tokens {tokens:?} not above the last writer's {after}"
    );
    // One more reader, starting after all of those returned: above all of them.
    let last = readers[0]
        .rw_lock("t")
        .unwrap()
        .read()
        .await
        .expect("reader");
    assert!(
        tokens.iter().all(|&t| t < last.fencing_token()),
        "a later reader's token {} not above {tokens:?}",
        last.fencing_token()
    );
    last.release().await.expect("release");
    for (_, guard) in together {
        guard.release().await.expect("release");
    }
}

/// Fifty waiters on one lock: each release wakes exactly one of them, which reads the
/// queue once: the cost of a handoff does not grow with the queue.
async fn fifty_waiters_wake_one_each(zk: Arc<Zk>) {
    const WAITERS: u64 = 50;
    let ns = namespace("herd");
    let backend = ZkBackend::new(zk.config(SESSION_TIMEOUT)).expect("valid settings");
    let client = client(&backend, &ns);
    let mut current = client
        .lock("herd")
        .unwrap()
        .acquire()
        .await
        .expect("acquire");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..WAITERS {
        let lock = client.lock("herd").unwrap();
        let tx = tx.clone();
        tokio::spawn(async move {
            let _ = tx.send(lock.acquire_timeout(Duration::from_secs(120)).await);
        });
    }
    until("all waiting", zk.slack() * 10, || {
        backend.stats().waiting == WAITERS
    })
    .await;
    let mut handoffs = Vec::new();
    for n in 1..=WAITERS {
        let before = backend.stats();
        let released = Instant::now();
        current.release().await.expect("release");
        let next = within("handoff", zk.slack(), rx.recv()).await;
        handoffs.push(released.elapsed());
        current = next.expect("sender").expect("acquire");
        until("the others still waiting", zk.slack(), || {
            backend.stats().waiting == WAITERS - n
        })
        .await;
        let after = backend.stats();
        assert_eq!(
            (
                after.predecessor_wakeups - before.predecessor_wakeups,
                after.children_reads - before.children_reads
            ),
            (1, 1),
            "handoff {n}: wake-ups and reads"
        );
    }
    current.release().await.expect("release");
    handoffs.sort();
    println!(
        "zookeeper: {WAITERS} handoffs with 1 wake-up and 1 read each; median {:.1?}, max {:.1?}",
        handoffs[handoffs.len() / 2],
        handoffs[handoffs.len() - 1]
    );
}

/// Thirty waiters on a semaphore of three: a release wakes the first waiter (it
/// watches the path's children) and each grant the one behind it (it watches its
/// predecessor's node, which the grant writes), so about two wake-ups per grant where
/// a herd would wake every waiter on each release.
async fn permit_waiters_wake_about_two_per_grant(zk: Arc<Zk>) {
    const WAITERS: u64 = 30;
    const PERMITS: u32 = 3;
    let ns = namespace("sem-herd");
    let backend = ZkBackend::new(zk.config(SESSION_TIMEOUT)).expect("valid settings");
    let client = client(&backend, &ns);
    let sem = client.semaphore("herd", PERMITS).unwrap();
    let mut held = Vec::new();
    for _ in 0..PERMITS {
        held.push(
            sem.try_acquire()
                .await
                .expect("try")
                .expect("a free permit"),
        );
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..WAITERS {
        let sem = client.semaphore("herd", PERMITS).unwrap();
        let tx = tx.clone();
        tokio::spawn(async move {
            let guard = sem.acquire_timeout(Duration::from_secs(120)).await;
            let released = match guard {
                Ok(guard) => guard.release().await,
                Err(err) => Err(err),
            };
            let _ = tx.send(released);
        });
    }
    until("all waiting", zk.slack() * 10, || {
        backend.stats().waiting == WAITERS
    })
    .await;
    let before = backend.stats();
    for guard in held {
        guard.release().await.expect("release");
    }
    for _ in 0..WAITERS {
        let done = within("every waiter's turn", zk.slack() * 10, rx.recv()).await;
        done.expect("sender").expect("acquire and release");
    }
    let wakeups = backend.stats().predecessor_wakeups - before.predecessor_wakeups;
    println!("zookeeper: {WAITERS} permit grants with {wakeups} wake-ups");
    assert!(
        wakeups <= 2 * WAITERS + u64::from(PERMITS),
        "{wakeups} wake-ups for {WAITERS} grants"
    );
    let info = sem.inspect().await.expect("inspect");
    assert!(
        info.holders.is_empty() && info.waiters == Some(0),
        "{info:?}"
    );
}

/// A permit granted by the count to a contender that stalls before its fencing write
/// (here a node made by hand, which nothing writes) must not hold up the waiter behind
/// it until that contender's session ends: the waiter looks again now and then.
async fn a_stalled_predecessor_does_not_hold_up_the_next_permit(zk: Arc<Zk>) {
    let ns = namespace("sem-stall");
    let backend = ZkBackend::new(zk.config(SESSION_TIMEOUT)).expect("valid settings");
    let client = client(&backend, &ns);
    let sem = client.semaphore("stall", 2).unwrap();
    let first = sem
        .try_acquire()
        .await
        .expect("try")
        .expect("a free permit");
    let second = sem
        .try_acquire()
        .await
        .expect("try")
        .expect("a free permit");
    let raw = raw(&zk).await;
    let dir = ZkBackend::lock_path(&key(&ns, "stall"), LockFamily::Semaphore);
    let ephemeral = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    let stalled = format!("{dir}/_c_{}-__PERMITS_2-lock-", uuid::Uuid::new_v4());
    let (_, seq) = raw.create(&stalled, b"", &ephemeral).await.expect("create");
    let waiting = ZkBackend::new(zk.config(SESSION_TIMEOUT)).expect("valid settings");
    let waiter = self::client(&waiting, &ns).semaphore("stall", 2).unwrap();
    let task = tokio::spawn(async move { waiter.acquire_timeout(Duration::from_secs(60)).await });
    children_until(&raw, &dir, zk.slack(), |c| c.len() == 4).await;
    until("the waiter watching", zk.slack(), || {
        waiting.stats().waiting == 1
    })
    .await;
    first.release().await.expect("release");
    second.release().await.expect("release");
    // The stalled node and the waiter are the first two now: the waiter holds.
    let granted = within("the waiter's grant", Duration::from_secs(90), task)
        .await
        .unwrap()
        .expect("granted while the stalled node's session lasts");
    granted.release().await.expect("release");
    raw.delete(&format!("{stalled}{seq}"), None)
        .await
        .expect("delete");
}

/// No server: a retryable `Unavailable` within the connect timeout, never a hang or a
/// panic; bad URLs are invalid arguments.
async fn unreachable_server_is_unavailable(zk: Arc<Zk>) {
    let port = conformance_tests::server::free_port().unwrap();
    // A refused port fails at once, saying so, however long the connect timeout.
    let url = format!("zk://127.0.0.1:{port}?connect_timeout_ms=20000");
    let started = Instant::now();
    let err = ZkBackend::connect_url(&url)
        .await
        .expect_err("nothing listens");
    assert!(
        matches!(err, Error::Unavailable { .. }) && err.is_retryable(),
        "{err:?}"
    );
    assert!(err.to_string().contains("refused"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(2) + zk.slack(),
        "took {:?}",
        started.elapsed()
    );

    let lazy = client(
        &ZkBackend::new(lock_zookeeper::ZkConfig::from_url(&url).unwrap()).expect("valid settings"),
        "x",
    );
    let err = lazy
        .lock("a")
        .unwrap()
        .try_acquire()
        .await
        .expect_err("nothing listens");
    assert!(err.is_retryable(), "{err:?}");

    for bad in [
        "zk://",
        "zk://h:99999",
        "http://h:1",
        "zk://h?session_timeout_ms=-1",
    ] {
        assert!(
            matches!(
                ZkBackend::connect_url(bad).await,
                Err(Error::InvalidArgument { .. })
            ),
            "{bad}"
        );
    }
}

/// A chroot holds a tenant's tree; with a digest, its nodes are creator-only: another
/// client can neither list nor delete them, nor queue on the lock.
async fn chroot_and_digest_acl(zk: Arc<Zk>) {
    let chroot = format!("/tenant-{}", uuid::Uuid::new_v4().simple());
    let hosts = zk.operator.config().hosts().join(",");
    let url = |user: &str| format!("zk://{user}@{hosts}{chroot}?session_timeout_ms=6000");
    let alice = ZkBackend::connect_url(&url("alice:secret"))
        .await
        .expect("alice");
    let guard = client(&alice, "ns")
        .lock("acl")
        .unwrap()
        .acquire()
        .await
        .expect("acquire");
    let raw = raw(&zk).await;
    assert!(
        raw.check_stat(&chroot).await.unwrap().is_some(),
        "chroot made"
    );
    let dir = format!("{chroot}/ns/acl");
    assert!(
        raw.list_children(&dir).await.is_err(),
        "listed alice's lock"
    );
    assert!(
        raw.delete(&format!("{dir}/anything"), None).await.is_err(),
        "deleted under alice's lock"
    );

    let mallory = ZkBackend::connect_url(&url("mallory:guess"))
        .await
        .expect("mallory");
    let err = client(&mallory, "ns")
        .lock("acl")
        .unwrap()
        .try_acquire()
        .await
        .expect_err("no access");
    assert!(!err.is_retryable(), "{err:?}");
    let alice2 = ZkBackend::connect_url(&url("alice:secret"))
        .await
        .expect("alice again");
    assert!(client(&alice2, "ns")
        .lock("acl")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    assert!(guard.is_held());
    guard.release().await.expect("release");
}

/// Lock paths are containers: once empty, the server removes them.
async fn empty_lock_paths_are_reaped(zk: Arc<Zk>) {
    let ns = namespace("reap");
    let client = client(
        &ZkBackend::new(zk.config(SESSION_TIMEOUT)).expect("valid settings"),
        &ns,
    );
    let guard = client
        .lock("tmp")
        .unwrap()
        .acquire()
        .await
        .expect("acquire");
    guard.release().await.expect("release");
    let raw = raw(&zk).await;
    let dir = ZkBackend::lock_path(&key(&ns, "tmp"), LockFamily::Exclusive);
    let deadline = Instant::now() + zk.slack() * 3;
    loop {
        let (stat, watcher) = raw.check_and_watch_stat(&dir).await.expect("exists");
        if stat.is_none() {
            break;
        }
        if tokio::time::timeout_at(deadline, watcher.changed())
            .await
            .is_err()
        {
            panic!("{dir} not reaped");
        }
    }
    assert!(!zk
        .operator
        .is_locked(&key(&ns, "tmp"), LockFamily::Exclusive)
        .await
        .unwrap());
}

/// Runs kazoo's `Lock` (Debian's python3-kazoo) on `path`: `hold` prints `ACQUIRED`
/// and holds until its stdin closes; `try` prints `ACQUIRED` or `REFUSED` after at
/// most a second. kazoo is told to see Curator-layout nodes (`extra_lock_patterns`,
/// its documented way to share a path with Curator-compatible clients).
const KAZOO: &str = r#"
import sys
from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout
hosts, path, mode = sys.argv[1:4]
zk = KazooClient(hosts=hosts)
zk.start(timeout=30)
lock = zk.Lock(path, "kazoo", extra_lock_patterns=["-lock-"])
if mode == "hold":
    lock.acquire()
    print("ACQUIRED", flush=True)
    sys.stdin.read()
    lock.release()
else:
    try:
        got = lock.acquire(timeout=1.0)
    except LockTimeout:
        got = False
    print("ACQUIRED" if got else "REFUSED", flush=True)
    if got:
        lock.release()
zk.stop()
"#;

fn kazoo(zk: &Zk, path: &str, mode: &str) -> tokio::process::Command {
    let hosts = zk.url.trim_start_matches("zk://");
    // Debian's interpreter, where python3-kazoo is installed (a `python3` earlier on
    // PATH may be another one).
    let mut cmd = tokio::process::Command::new("/usr/bin/python3");
    cmd.args(["-c", KAZOO, hosts, path, mode])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    cmd
}

async fn kazoo_try(zk: &Zk, path: &str) -> String {
    let out = within(
        "kazoo try",
        Duration::from_secs(30),
        kazoo(zk, path, "try").output(),
    )
    .await
    .expect("run /usr/bin/python3 (apt-get install python3-kazoo)");
    assert!(
        out.status.success(),
        "kazoo failed (apt-get install python3-kazoo): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// kazoo's `Lock` names its nodes `<hex>__lock__<seq>`: ours counts them as
/// contenders, so a kazoo holder keeps ours out and ours keeps kazoo out.
async fn kazoo_locks_and_ours_exclude_each_other(zk: Arc<Zk>) {
    let ns = namespace("kazoo");
    let path = format!("/{ns}/shared");
    let backend = ZkBackend::new(zk.config(SESSION_TIMEOUT)).expect("valid settings");
    let lock = client(&backend, &ns).lock("shared").unwrap();

    let mut holder = kazoo(&zk, &path, "hold")
        .spawn()
        .expect("run /usr/bin/python3 (apt-get install python3-kazoo)");
    let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
    let first = within("kazoo acquires", Duration::from_secs(30), lines.next_line())
        .await
        .expect("kazoo output");
    assert_eq!(first.as_deref(), Some("ACQUIRED"), "kazoo did not acquire");
    assert!(
        lock.try_acquire().await.unwrap().is_none(),
        "ours got the lock while kazoo held it"
    );
    // Closing its stdin makes kazoo release: ours is let in.
    drop(holder.stdin.take());
    let guard = lock
        .acquire_timeout(Duration::from_secs(10))
        .await
        .expect("ours after kazoo released");
    let _ = within("kazoo exits", Duration::from_secs(30), holder.wait()).await;

    assert_eq!(
        kazoo_try(&zk, &path).await,
        "REFUSED",
        "kazoo got in while ours held"
    );
    guard.release().await.unwrap();
    assert_eq!(
        kazoo_try(&zk, &path).await,
        "ACQUIRED",
        "kazoo after ours released"
    );
}

/// A real Curator `LeaderLatch` (`CuratorLatch.java` beside this file) on `path`
/// with participant id `id`, driven a line at a time through its stdin.
struct CuratorLatch {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl CuratorLatch {
    fn start(zk: &Zk, path: &str, id: &str) -> Self {
        let source = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/zookeeper/CuratorLatch.java"
        );
        let mut child = tokio::process::Command::new("java")
            .args(["-cp", &conformance_tests::curator::classpath(), source])
            .args([zk.url.trim_start_matches("zk://"), path, id])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "run java: {e} ({})",
                    conformance_tests::curator::INSTALL_HINT
                )
            });
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        CuratorLatch {
            child,
            stdin,
            lines,
        }
    }

    /// Sends `command`; its answer, if it came within `limit`.
    async fn ask(&mut self, command: &str, limit: Duration) -> Option<String> {
        use tokio::io::AsyncWriteExt;
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await
            .expect("write to the latch");
        self.stdin.flush().await.expect("write to the latch");
        self.answer(limit).await
    }

    async fn answer(&mut self, limit: Duration) -> Option<String> {
        tokio::time::timeout(limit, self.lines.next_line())
            .await
            .ok()
            .and_then(|line| line.ok().flatten())
    }

    async fn stop(mut self) {
        drop(self.stdin);
        let _ = within(
            "the latch exits",
            Duration::from_secs(30),
            self.child.wait(),
        )
        .await;
    }
}

/// Curator's `LeaderLatch` names its nodes `_c_<uuid>-latch-<seq>` with the
/// participant id as data, as ours does on the election's path: a Curator leader keeps
/// ours from leading and ours reads its id as the leader's value; ours leading keeps
/// the latch waiting, and Curator reads our value as the leader's id.
async fn curator_leader_latch_and_ours_elect_one_leader(zk: Arc<Zk>) {
    let ns = namespace("curator-elect");
    let path = format!("/{ns}/office%election");
    let backend = ZkBackend::new(zk.config(SESSION_TIMEOUT)).expect("valid settings");
    let election = client(&backend, &ns).election("office").unwrap();
    // JVM start-up and source compilation on a loaded machine.
    let slow = Duration::from_secs(60);

    let mut latch = CuratorLatch::start(&zk, &path, "curator-1");
    assert_eq!(latch.ask("await", slow).await.as_deref(), Some("LEADER"));
    let leader = election.leader().await.unwrap().expect("Curator leads");
    assert_eq!(leader.value, "curator-1");
    assert!(
        election.try_campaign("ours").await.unwrap().is_none(),
        "ours led beside Curator"
    );
    let waiting = tokio::spawn({
        let election = election.clone();
        async move {
            election
                .campaign_timeout("ours", Duration::from_secs(60))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "ours led beside Curator");
    assert_eq!(latch.ask("close", slow).await.as_deref(), Some("CLOSED"));
    let leadership = waiting.await.unwrap().expect("ours leads after Curator");
    assert!(leadership.term() > leader.term, "terms increase");
    latch.stop().await;

    let mut latch = CuratorLatch::start(&zk, &path, "curator-2");
    assert_eq!(
        latch.ask("leader", slow).await.as_deref(),
        Some("LEADER_IS ours"),
        "Curator does not read our leader"
    );
    assert_eq!(
        latch.ask("await", Duration::from_millis(1500)).await,
        None,
        "Curator led beside ours"
    );
    leadership.resign().await.unwrap();
    assert_eq!(
        latch.answer(Duration::from_secs(30)).await.as_deref(),
        Some("LEADER"),
        "Curator did not lead after ours resigned"
    );
    let leader = election.leader().await.unwrap().expect("Curator leads");
    assert_eq!(leader.value, "curator-2");
    latch.stop().await;
}

/// A holder cut off by a network that drops its packets: the server expires its
/// session a session timeout T after it last heard from it, at the earliest, and hands
/// the lock on. The holder's guard must report the loss before that, with the margin
/// the backend promises (at least a tenth of T): the proxy notes when the server last
/// heard from the holder, and the check measures when `is_held()` turns false against
/// that plus T, and against when the other client was granted. The loss is logged as
/// a warning naming the lock.
async fn blackholed_holder_reports_loss_before_the_server_frees_it(zk: Arc<Zk>) {
    let ns = namespace("blackhole");
    let port: u16 = zk.url.rsplit(':').next().unwrap().parse().unwrap();
    let proxy = Blackhole::to(port).await.expect("proxy");
    let session = Duration::from_secs(4);
    let url = format!(
        "zk://127.0.0.1:{}?session_timeout_ms={}&connect_timeout_ms=10000",
        proxy.port(),
        session.as_millis()
    );
    let cut_off = client(&ZkBackend::connect_url(&url).await.unwrap(), &ns);
    let guard = cut_off.lock("cut").unwrap().acquire().await.unwrap();
    let other = client(
        &ZkBackend::new(zk.config(SESSION_TIMEOUT)).expect("valid settings"),
        &ns,
    );
    let lock = other.lock("cut").unwrap();
    // Let a few pings through first, so the server and the client agree on "last heard".
    tokio::time::sleep(Duration::from_millis(700)).await;
    proxy.cut();
    let cut_at = Instant::now();
    let taken = tokio::spawn(async move {
        let guard = lock.acquire_timeout(Duration::from_secs(30)).await;
        (guard, Instant::now())
    });
    // Polls `is_held()` itself, as a holder checking before each write would.
    let lost_at = loop {
        if !guard.is_held() {
            break Instant::now();
        }
        assert!(
            cut_at.elapsed() < session * 2,
            "still held {:?} after the cut",
            cut_at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let heard = proxy.last_to_server().expect("the server heard the client");
    let (taken, taken_at) = within("the other client", Duration::from_secs(40), taken)
        .await
        .unwrap();
    let taken = taken.expect("the server handed the lock on");
    let may_expire = heard + session;
    let margin = may_expire.saturating_duration_since(lost_at);
    println!(
        "zookeeper: cut-off holder: last heard by the server {:.2?} before the cut; is_held() false {:.2?} after it, {:.2?} before the session may expire (T = {session:?}: {:.2} T); the other client granted {:.2?} after it",
        cut_at.saturating_duration_since(heard),
        lost_at - heard,
        margin,
        margin.as_secs_f64() / session.as_secs_f64(),
        taken_at.saturating_duration_since(heard),
    );
    assert!(
        lost_at <= taken_at,
        "the cut-off holder reported its loss {:?} after the cut, {:?} after the server had handed the lock on",
        lost_at - cut_at,
        lost_at - taken_at
    );
    assert!(
        lost_at + session / 10 <= may_expire,
        "the holder said held until {:?} after the server last heard from it: {margin:?} before the session may expire, less than a tenth of the session timeout {session:?}",
        lost_at - heard
    );
    taken.release().await.unwrap();
    // What the operator's log says of it.
    let lock = format!("{ns}/cut");
    let warning = log_capture::expect_warning(&lock, "lease lost", Duration::from_secs(5)).await;
    assert_eq!(warning.field("backend"), Some("zookeeper"), "{warning:?}");
    assert_eq!(
        warning.field("token"),
        Some(guard.fencing_token().to_string().as_str()),
        "{warning:?}"
    );
}

/// The port of the suite's server, on 127.0.0.1.
fn server_port(zk: &Zk) -> u16 {
    zk.url.rsplit(':').next().unwrap().parse().unwrap()
}

/// The URL of a client that goes through `proxy`.
fn through(proxy: &ZkFaults, session: Duration) -> String {
    format!(
        "zk://127.0.0.1:{}?session_timeout_ms={}&connect_timeout_ms=10000",
        proxy.port(),
        session.as_millis()
    )
}

/// A release whose delete meets a connection reset (an I/O error, which the client
/// library reports as a custom error, as it does an idle connection it gave up on):
/// the session lives on (the client reconnects at once), so the lock would stay held
/// as long as the process unless the release is retried.
async fn release_met_by_a_connection_reset_is_retried(zk: Arc<Zk>) {
    let ns = namespace("reset");
    let proxy = ZkFaults::to(server_port(&zk)).await.expect("proxy");
    let backend = ZkBackend::connect_url(&through(&proxy, SESSION_TIMEOUT))
        .await
        .expect("connect");
    let guard = client(&backend, &ns)
        .lock("r")
        .unwrap()
        .acquire()
        .await
        .expect("acquire");
    let raw = raw(&zk).await;
    let dir = ZkBackend::lock_path(&key(&ns, "r"), LockFamily::Exclusive);
    children_until(&raw, &dir, zk.slack(), |c| c.len() == 1).await;
    proxy.then(&[op::DELETE], Fault::Reset);
    let released = within("release", SESSION_TIMEOUT + zk.slack(), guard.release()).await;
    assert_eq!(proxy.fired(), [(op::DELETE, Fault::Reset)]);
    println!("zookeeper: a release whose delete met a connection reset answered {released:?}");
    children_until(&raw, &dir, zk.slack() * 3, <[String]>::is_empty).await;
    assert_eq!(backend.connection_state(), ConnectionState::Connected);
    released.expect("release retried");
}

/// Runs `op` to its end (at most `cap`), and says how long it took.
async fn timed<T>(
    cap: Duration,
    op: impl std::future::Future<Output = T>,
) -> (Option<T>, Duration) {
    let started = Instant::now();
    let out = tokio::time::timeout(cap, op).await.ok();
    (out, started.elapsed())
}

/// A client cut off from the server (a proxy drops every byte), first before it has
/// noticed, then once it has (`Suspended`), while its session still lives: a try-lock,
/// an acquire with a 100 ms limit and a release each end with a retryable error
/// within the default request timeout (5 s) and slack, rather than waiting for the
/// client to give up on the connection (2/5 of the session timeout) or the session
/// (7/5 of it).
async fn requests_cut_off_end_within_the_request_timeout(zk: Arc<Zk>) {
    let ns = namespace("stall");
    let session = Duration::from_secs(30);
    let limit = lock_zookeeper::DEFAULT_REQUEST_TIMEOUT + zk.slack();
    let proxy = ZkFaults::to(server_port(&zk)).await.expect("proxy");
    let backend = ZkBackend::connect_url(&through(&proxy, session))
        .await
        .expect("connect");
    let client = client(&backend, &ns);
    let mut held = Vec::new();
    for name in ["held-1", "held-2"] {
        held.push(client.lock(name).unwrap().acquire().await.expect("acquire"));
    }
    proxy.cut();
    for phase in ["just cut off", "suspended"] {
        if phase == "suspended" {
            until("suspended", session, || {
                backend.connection_state() == ConnectionState::Suspended
            })
            .await;
        }
        let guard = held.remove(0);
        let try_lock = client.lock("t").unwrap();
        let wait_lock = client.lock("w").unwrap();
        let ((tried, tried_in), (waited, waited_in), (released, released_in)) = tokio::join!(
            timed(session * 2, try_lock.try_acquire()),
            timed(
                session * 2,
                wait_lock.acquire_timeout(Duration::from_millis(100))
            ),
            timed(session * 2, guard.release()),
        );
        let line = format!(
            "{phase}: try-lock {tried_in:.2?} {:?}, 100 ms acquire {waited_in:.2?} {:?}, release {released_in:.2?} {:?}",
            tried.as_ref().map(|r| r.as_ref().map(Option::is_some)),
            waited.as_ref().map(|r| r.as_ref().map(drop)),
            released,
        );
        println!("zookeeper: cut-off client, {line}");
        assert!(
            [tried_in, waited_in, released_in]
                .iter()
                .all(|t| *t <= limit),
            "not all within {limit:?}: {line}"
        );
        let retryable = [
            tried.is_some_and(|r| r.is_err_and(|e| e.is_retryable())),
            waited.is_some_and(|r| r.is_err_and(|e| e.is_retryable())),
            released.is_some_and(|r| r.is_err_and(|e| e.is_retryable())),
        ];
        assert!(
            retryable.iter().all(|r| *r),
            "not all retryable errors: {line}"
        );
    }
}

/// A create that took effect but whose reply was lost (the connection closed), then a
/// lookup for it that failed too (the connection closed again): the acquire must not
/// create a second node, or its first one (same session, ahead in the queue) blocks
/// its owner and everyone else until the session ends. The acquire of a free lock
/// succeeds, with one node.
async fn lost_create_reply_and_failed_lookup_leave_one_node(zk: Arc<Zk>) {
    let ns = namespace("lost-create");
    let proxy = ZkFaults::to(server_port(&zk)).await.expect("proxy");
    let backend = ZkBackend::connect_url(&through(&proxy, SESSION_TIMEOUT))
        .await
        .expect("connect");
    let raw = raw(&zk).await;
    let dir = ZkBackend::lock_path(&key(&ns, "c"), LockFamily::Exclusive);
    proxy.then(&[op::CREATE2], Fault::LoseReply);
    proxy.then(&[op::GET_CHILDREN, op::GET_CHILDREN2], Fault::Close);
    let lock = client(&backend, &ns).lock("c").unwrap();
    let acquired = within(
        "acquire",
        Duration::from_secs(10) + zk.slack() * 2,
        lock.acquire_timeout(Duration::from_secs(10)),
    )
    .await;
    let fired = proxy.fired();
    let children = raw.list_children(&dir).await.unwrap_or_default();
    println!(
        "zookeeper: acquire after a lost create reply and a failed lookup ({fired:?}): {:?}; nodes {children:?}",
        acquired.as_ref().map(drop)
    );
    assert_eq!(
        fired,
        [
            (op::CREATE2, Fault::LoseReply),
            (op::GET_CHILDREN, Fault::Close)
        ]
    );
    let guard = acquired.unwrap_or_else(|err| {
        panic!("acquire of a free lock after a lost create reply: {err}; nodes {children:?}")
    });
    assert_eq!(children.len(), 1, "nodes {children:?}");
    guard.release().await.expect("release");
    children_until(&raw, &dir, zk.slack(), <[String]>::is_empty).await;
}
