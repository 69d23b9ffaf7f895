//! etcd-specific behaviour against a real etcd: interop with `etcdctl lock` and
//! `etcdctl elect`, a lease revoked behind the holder's back, no herd with 50
//! waiters, and etcd going away.

mod common;

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use common::{backend, endpoint, key, start};
use futures::StreamExt;
use lock_core::backend::LockBackend;
use lock_core::prelude::*;
use lock_core::{Error, LeaseLoss, LockClient, LockFamily};
use lock_etcd::{EtcdBackend, EtcdConfig};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

const NS: &str = "interop";

fn client(backend: EtcdBackend, watchdog: Duration) -> LockClient<EtcdBackend> {
    LockClient::builder(backend)
        .namespace(NS)
        .watchdog_lease(watchdog)
        .build()
        .unwrap()
}

/// `etcdctl lock NAME`: prints the lock's key once it holds it, then holds it until
/// SIGTERM (then it releases).
struct Etcdctl {
    child: Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Etcdctl {
    fn lock(url: &str, name: &str) -> Self {
        Self::run(url, &["lock", name])
    }

    /// `etcdctl elect NAME PROPOSAL`: prints the leader key and its value once it
    /// leads, then leads until SIGTERM. With `-l` instead of a proposal, prints the
    /// leader's key and value at each change.
    fn elect(url: &str, args: &[&str]) -> Self {
        let mut all = vec!["elect"];
        all.extend_from_slice(args);
        Self::run(url, &all)
    }

    fn run(url: &str, args: &[&str]) -> Self {
        let mut child = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg("--endpoints")
            .arg(endpoint(url))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("etcdctl must be installed (apt-get install etcd-client)");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Etcdctl { child, lines }
    }

    /// The next line etcdctl printed (the key, on acquiring), if it did within `limit`.
    async fn acquired(&mut self, limit: Duration) -> Option<String> {
        tokio::time::timeout(limit, self.lines.next_line())
            .await
            .ok()
            .and_then(|line| line.ok().flatten())
    }

    /// SIGTERM (etcdctl then releases), and reaps it.
    async fn stop(mut self) {
        let pid = self.child.id().expect("running").to_string();
        let status = Command::new("kill").args(["-TERM", &pid]).status().await;
        assert!(status.is_ok_and(|s| s.success()), "kill -TERM {pid}");
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_lock_excludes_ours_and_ours_excludes_etcdctl() {
    let (server, _) = start().await;
    let url = server.url();
    let ours = client(backend(&url).await, Duration::from_secs(10));
    let lock = ours.lock("shared").unwrap();

    // etcdctl holds: ours cannot acquire, and gets it after etcdctl lets go.
    let mut etcdctl = Etcdctl::lock(&url, &format!("{NS}/shared"));
    let key = etcdctl.acquired(Duration::from_secs(10)).await;
    let key = key.expect("etcdctl acquires a free lock");
    assert!(key.starts_with(&format!("{NS}/shared/")), "{key}");
    assert!(
        lock.try_acquire().await.unwrap().is_none(),
        "ours got in while etcdctl held"
    );
    let waiting = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire_timeout(Duration::from_secs(20)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "ours got in while etcdctl held");
    etcdctl.stop().await;
    let guard = waiting.await.unwrap().expect("ours after etcdctl released");

    // Ours holds: etcdctl waits, and gets it after our release.
    let mut etcdctl = Etcdctl::lock(&url, &format!("{NS}/shared"));
    assert_eq!(
        etcdctl.acquired(Duration::from_millis(1500)).await,
        None,
        "etcdctl got in while ours held"
    );
    guard.release().await.unwrap();
    let key = etcdctl.acquired(Duration::from_secs(10)).await;
    assert!(
        key.is_some(),
        "etcdctl did not get the lock after our release"
    );
    assert!(
        lock.try_acquire().await.unwrap().is_none(),
        "ours got in while etcdctl held"
    );
    etcdctl.stop().await;
    let guard = lock.acquire_timeout(Duration::from_secs(10)).await.unwrap();
    guard.release().await.unwrap();
}

/// The next leader etcdctl reports (`elect` once it leads, `elect -l` at each
/// change): its key and value lines.
async fn next_leader(etcdctl: &mut Etcdctl, limit: Duration) -> Option<(String, String)> {
    let key = etcdctl.acquired(limit).await?;
    let value = etcdctl.acquired(limit).await?;
    Some((key, value))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_elect_and_ours_share_one_election() {
    let (server, _) = start().await;
    let url = server.url();
    let ours = client(backend(&url).await, Duration::from_secs(10));
    let election = ours.election("office").unwrap();
    let name = format!("{NS}/office");

    // etcdctl leads: ours reads its value, cannot lead, and leads after it resigns.
    let mut theirs = Etcdctl::elect(&url, &[&name, "theirs"]);
    let (key, value) = next_leader(&mut theirs, Duration::from_secs(10))
        .await
        .expect("etcdctl leads a free election");
    assert!(key.starts_with(&format!("{name}/")), "{key}");
    assert_eq!(value, "theirs");
    let leader = election.leader().await.unwrap().expect("etcdctl leads");
    assert_eq!(leader.value, "theirs");
    let mut observed = election.observe();
    let seen = tokio::time::timeout(Duration::from_secs(10), observed.next())
        .await
        .expect("observe sees etcdctl's leader")
        .unwrap()
        .unwrap();
    assert_eq!(seen, leader);
    assert!(
        election.try_campaign("ours").await.unwrap().is_none(),
        "two leaders"
    );
    let waiting = tokio::spawn({
        let election = election.clone();
        async move {
            election
                .campaign_timeout("ours", Duration::from_secs(20))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "ours led beside etcdctl");
    theirs.stop().await;
    let leadership = waiting.await.unwrap().expect("ours leads after etcdctl");
    assert!(leadership.term() > leader.term, "terms increase");

    // Ours leads: `etcdctl elect -l` follows its value, and etcdctl waits its turn.
    let mut follower = Etcdctl::elect(&url, &["-l", &name]);
    let (_, value) = next_leader(&mut follower, Duration::from_secs(10))
        .await
        .expect("etcdctl observes our leader");
    assert_eq!(value, "ours");
    leadership.proclaim("ours, moved").await.unwrap();
    let (_, value) = next_leader(&mut follower, Duration::from_secs(10))
        .await
        .expect("etcdctl observes our proclaim");
    assert_eq!(value, "ours, moved");
    let mut theirs = Etcdctl::elect(&url, &[&name, "theirs-again"]);
    assert_eq!(
        next_leader(&mut theirs, Duration::from_millis(1500)).await,
        None,
        "etcdctl led beside ours"
    );
    leadership.resign().await.unwrap();
    let (_, value) = next_leader(&mut theirs, Duration::from_secs(10))
        .await
        .expect("etcdctl leads after ours resigned");
    assert_eq!(value, "theirs-again");
    let seen = loop {
        let seen = tokio::time::timeout(Duration::from_secs(10), observed.next())
            .await
            .expect("observe follows the leaders")
            .unwrap()
            .unwrap();
        if seen.value == "theirs-again" {
            break seen;
        }
    };
    assert!(seen.term > leader.term);
    theirs.stop().await;
    follower.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_revoked_behind_the_holders_back_is_reported() {
    let (server, admin) = start().await;
    let watchdog = Duration::from_secs(2);
    let holder = client(backend(&server.url()).await, watchdog);
    let lock = holder.lock("revoked").unwrap();
    let guard = lock.acquire().await.unwrap();
    let reentry = guard.reenter().unwrap();
    let other_lock = holder.lock("revoked-too").unwrap().acquire().await.unwrap();
    let lease = holder
        .backend()
        .session_lease_id(watchdog)
        .await
        .expect("a session lease");
    assert_eq!(
        guard.fencing_token(),
        reentry.fencing_token(),
        "one acquisition"
    );
    admin.client().clone().lease_revoke(lease).await.unwrap();
    for g in [&guard, &other_lock] {
        let loss = tokio::time::timeout(watchdog + Duration::from_secs(3), g.lost())
            .await
            .expect("loss reported within the watchdog lease");
        assert_eq!(loss, LeaseLoss::SessionLost);
        assert!(!g.is_held());
    }
    let lost_token = guard.fencing_token();
    assert!(matches!(
        guard.release().await,
        Err(Error::LeaseLost { .. })
    ));
    // A new session is taken for the next acquisition.
    let again = lock
        .try_acquire()
        .await
        .unwrap()
        .expect("free after the loss");
    assert!(again.fencing_token() > lost_token);
    again.release().await.unwrap();
}

/// A guard whose session lease is gone, still kept by its user, must not hold up the
/// other owners of its client: their turn on the key (the per-client gate) comes at
/// once, not when the stale guard is dropped. Here the loss reaches the guard through
/// the session (another acquire finds the lease gone), long before the watchdog's
/// next renewal (a third of 30 s) would have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_guard_does_not_block_other_owners_of_its_client() {
    let (server, admin) = start().await;
    let watchdog = Duration::from_secs(30);
    let holder = client(backend(&server.url()).await, watchdog);
    let stale = holder.lock("gated").unwrap().acquire().await.unwrap();
    let lease = holder
        .backend()
        .session_lease_id(watchdog)
        .await
        .expect("a session lease");
    admin.client().clone().lease_revoke(lease).await.unwrap();
    // Another lock of the client finds the session gone and takes a new one.
    let elsewhere = holder.lock("elsewhere").unwrap().acquire().await.unwrap();
    let loss = tokio::time::timeout(Duration::from_secs(3), stale.lost())
        .await
        .expect("loss reported through the session");
    assert_eq!(loss, LeaseLoss::SessionLost);
    // `stale` is kept: another owner of the same client asks for its lock.
    let other = holder.lock("gated").unwrap();
    let guard = other
        .acquire_timeout(Duration::from_secs(5))
        .await
        .expect("another owner of the client gets the lock while the stale guard lives");
    assert!(guard.fencing_token() > stale.fencing_token());
    guard.release().await.unwrap();
    elsewhere.release().await.unwrap();
    drop(stale);
}

/// How a holder's key is taken away behind its back.
#[derive(Clone, Copy, Debug)]
enum TakenAway {
    /// An operator's `force_unlock` deletes the key; the session lease lives on.
    ForceUnlocked,
    /// An operator revokes the session lease, and etcd deletes every key on it.
    LeaseRevoked,
}

/// The holder's key is gone, its user keeps the stale guard, and nothing else of the
/// client touches etcd: another owner of the same client asks for the lock. It must
/// get it promptly, not once the watchdog's next renewal (a third of 30 s) finds the
/// key gone, and the stale guard must learn of its loss.
async fn stale_guard_gives_way(how: TakenAway) {
    let (server, admin) = start().await;
    let watchdog = Duration::from_secs(30);
    let holder = client(backend(&server.url()).await, watchdog);
    let stale = holder.lock("taken").unwrap().acquire().await.unwrap();
    match how {
        TakenAway::ForceUnlocked => {
            let operator = client(admin.clone(), watchdog);
            assert!(operator
                .lock("taken")
                .unwrap()
                .force_unlock()
                .await
                .unwrap());
        }
        TakenAway::LeaseRevoked => {
            let lease = holder
                .backend()
                .session_lease_id(watchdog)
                .await
                .expect("a session lease");
            admin.client().clone().lease_revoke(lease).await.unwrap();
        }
    }
    let started = Instant::now();
    let other = holder.lock("taken").unwrap();
    let guard = other.acquire_timeout(Duration::from_secs(5)).await;
    let waited = started.elapsed();
    let guard = guard.unwrap_or_else(|err| {
        panic!(
            "{how:?}: another owner of the client did not get the lock within 5 s while the stale guard was kept ({err}); the stale guard says held: {}",
            stale.is_held()
        )
    });
    println!("{how:?}: another owner of the client got the lock after {waited:.2?}");
    assert!(guard.fencing_token() > stale.fencing_token());
    let loss = tokio::time::timeout(Duration::from_secs(3), stale.lost())
        .await
        .expect("the stale guard learns of its loss");
    assert!(
        matches!(loss, LeaseLoss::Revoked | LeaseLoss::SessionLost),
        "{loss:?}"
    );
    assert!(!stale.is_held());
    guard.release().await.unwrap();
    assert!(matches!(
        stale.release().await,
        Err(Error::LeaseLost { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlocked_stale_guard_does_not_block_its_client() {
    stale_guard_gives_way(TakenAway::ForceUnlocked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_stale_guard_does_not_block_its_client() {
    stale_guard_gives_way(TakenAway::LeaseRevoked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_waiters_each_release_wakes_one() {
    const WAITERS: usize = 50;
    let (server, admin) = start().await;
    let url = server.url();
    let holder = client(backend(&url).await, Duration::from_secs(30));
    let guard = holder.lock("herd").unwrap().acquire().await.unwrap();
    let mut backends = Vec::new();
    let mut tasks = Vec::new();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    for i in 0..WAITERS {
        // A client each: each waiter has its own lease and key at etcd.
        let b = backend(&url).await;
        backends.push(b.clone());
        let lock = client(b, Duration::from_secs(30)).lock("herd").unwrap();
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let g = lock
                .acquire_timeout(Duration::from_secs(120))
                .await
                .unwrap();
            order.lock().unwrap().push((i, g.fencing_token()));
            g.release().await.unwrap();
        }));
    }
    // Wait until every waiter's key is in place.
    let started = Instant::now();
    loop {
        let mut kv = admin.client().kv_client();
        let keys = kv
            .get(
                format!("{NS}/herd/"),
                Some(
                    etcd_client::GetOptions::new()
                        .with_prefix()
                        .with_count_only(),
                ),
            )
            .await
            .unwrap();
        if keys.count() as usize == WAITERS + 1 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "waiters did not queue"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let wakeups = wake_ups_until_done(&backends, vec![guard], tasks).await;
    // 50 handoffs; a herd would wake every remaining waiter on each (about 1275).
    assert!(
        wakeups <= WAITERS as u64,
        "{wakeups} wake-ups for {WAITERS} handoffs"
    );
    let order = order.lock().unwrap().clone();
    assert!(
        order.windows(2).all(|w| w[0].1 < w[1].1),
        "tokens not increasing in grant order: {order:?}"
    );
    assert!(!admin
        .is_locked(&key(NS, "herd"), LockFamily::Exclusive)
        .await
        .unwrap());
}

/// A released permit wakes the first waiter only (it watches the semaphore's
/// deletions), and its grant wakes the one behind it (which watches its predecessor):
/// about two wake-ups per grant, where a herd would wake every waiter on each release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_permit_waiters_wake_about_two_per_grant() {
    const WAITERS: usize = 30;
    const PERMITS: u32 = 3;
    let (server, admin) = start().await;
    let url = server.url();
    let holder = client(backend(&url).await, Duration::from_secs(30));
    let sem = holder.semaphore("herd-sem", PERMITS).unwrap();
    let mut held = Vec::new();
    for _ in 0..PERMITS {
        held.push(sem.try_acquire().await.unwrap().expect("a free permit"));
    }
    let mut backends = Vec::new();
    let mut tasks = Vec::new();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    for i in 0..WAITERS {
        let b = backend(&url).await;
        backends.push(b.clone());
        let sem = client(b, Duration::from_secs(30))
            .semaphore("herd-sem", PERMITS)
            .unwrap();
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let g = sem.acquire_timeout(Duration::from_secs(120)).await.unwrap();
            order.lock().unwrap().push(i);
            g.release().await.unwrap();
        }));
        // Queue in a known order.
        let started = Instant::now();
        while sem_keys(&admin, "herd-sem").await < PERMITS as usize + i + 1 {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "waiter {i} did not queue"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let wakeups = wake_ups_until_done(&backends, held, tasks).await;
    // A herd would wake every waiter behind on each release: about 450 here.
    assert!(
        wakeups <= 2 * WAITERS as u64 + u64::from(PERMITS),
        "{wakeups} wake-ups for {WAITERS} grants"
    );
    eprintln!("{wakeups} wake-ups for {WAITERS} grants");
    // (Grant order is `semaphore::fifo_order`'s: here waiters may be granted at once.)
    assert_eq!(order.lock().unwrap().len(), WAITERS);
    assert_eq!(sem_keys(&admin, "herd-sem").await, 0, "keys left behind");
}

/// A permit granted by the count to a contender that stalls before its re-stamp (here
/// a key written by hand, which nothing re-stamps) must not hold up the waiter behind
/// it until that contender's lease ends: the waiter looks again at its lease's refresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_predecessor_does_not_hold_up_the_next_permit() {
    let (server, admin) = start().await;
    let url = server.url();
    let holder = client(backend(&url).await, Duration::from_secs(30));
    let sem = holder.semaphore("stall", 2).unwrap();
    let first = sem.try_acquire().await.unwrap().expect("a free permit");
    let second = sem.try_acquire().await.unwrap().expect("a free permit");
    let mut raw = admin.client().clone();
    let lease = raw.lease_grant(120, None).await.unwrap().id();
    let put = etcd_client::PutOptions::new().with_lease(lease);
    raw.put(format!("{NS}/stall\u{1f}sem/2/{lease:x}-0"), "", Some(put))
        .await
        .unwrap();
    let waiter = client(backend(&url).await, Duration::from_secs(3))
        .semaphore("stall", 2)
        .unwrap();
    let task = tokio::spawn(async move { waiter.acquire_timeout(Duration::from_secs(60)).await });
    let started = Instant::now();
    while sem_keys(&admin, "stall").await < 4 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the waiter did not queue"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.release().await.unwrap();
    second.release().await.unwrap();
    // The stalled key and the waiter are the first two now: the waiter holds.
    let granted = tokio::time::timeout(Duration::from_secs(90), task)
        .await
        .expect("the acquire ends")
        .unwrap()
        .expect("granted while the stalled key's lease lasts");
    granted.release().await.unwrap();
    raw.lease_revoke(lease).await.unwrap();
}

/// Releases `held` once every waiter is queued and none was woken yet, waits for the
/// waiters' tasks, and returns how many wake-ups their clients saw.
async fn wake_ups_until_done(
    backends: &[EtcdBackend],
    held: Vec<lock_core::LockGuard>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
) -> u64 {
    let before: u64 = backends.iter().map(EtcdBackend::waiter_wakeups).sum();
    assert_eq!(before, 0, "woken before any release");
    for guard in held {
        guard.release().await.unwrap();
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("waiters finish")
            .unwrap();
    }
    backends.iter().map(EtcdBackend::waiter_wakeups).sum()
}

/// How many keys the semaphore `name` has in etcd.
async fn sem_keys(admin: &EtcdBackend, name: &str) -> usize {
    let mut kv = admin.client().kv_client();
    let options = etcd_client::GetOptions::new()
        .with_prefix()
        .with_count_only();
    let found = kv
        .get(format!("{NS}/{name}\u{1f}sem/"), Some(options))
        .await
        .unwrap();
    usize::try_from(found.count()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_down_is_unavailable_and_retryable() {
    let (mut server, _) = start().await;
    let url = server.url();
    let config = EtcdConfig::from_url(&url)
        .unwrap()
        .with_connect_timeout(Duration::from_millis(500))
        .with_request_timeout(Duration::from_millis(500));
    let holder = client(
        EtcdBackend::connect(config.clone()).await.unwrap(),
        Duration::from_secs(10),
    );
    let lock = holder.lock("outage").unwrap();
    lock.acquire().await.unwrap().release().await.unwrap();
    server.kill().await.expect("kill etcd");
    let started = Instant::now();
    let err = lock.try_acquire().await.unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    assert!(err.is_retryable());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    let started = Instant::now();
    let err = EtcdBackend::connect(config).await.unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
}

/// A waiter whose first write meets a stalled etcd (no answer within the request
/// timeout, as under a thousand waiters at once) keeps asking while its lease holds,
/// rather than failing an acquire that has time left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_placed_while_etcd_stalls_still_gets_its_turn() {
    let (mut server, _) = start().await;
    let url = server.url();
    let holder = client(backend(&url).await, Duration::from_secs(10));
    let waiter = client(backend(&url).await, Duration::from_secs(10));
    // Its session lease exists before the stall: only the queue write meets it.
    let warm = waiter.fair_lock("warm").unwrap();
    warm.acquire().await.unwrap().release().await.unwrap();
    let held = holder.fair_lock("stall").unwrap().acquire().await.unwrap();

    server.pause().await.expect("pause etcd");
    let waiting = tokio::spawn({
        let lock = waiter.fair_lock("stall").unwrap();
        async move { lock.acquire_timeout(Duration::from_secs(60)).await }
    });
    // Longer than the request timeout (2 s), well within the lease (10 s).
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    server.resume().await.expect("resume etcd");
    tokio::time::sleep(Duration::from_millis(500)).await;
    if waiting.is_finished() {
        let err = waiting.await.unwrap().err();
        panic!("the waiter stopped during the stall: {err:?}");
    }
    held.release().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the waiter is served after the release")
        .unwrap()
        .expect("granted before its deadline");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_owners_of_one_client_take_turns_on_one_key() {
    let (server, admin) = start().await;
    let holder = client(backend(&server.url()).await, Duration::from_secs(10));
    let a = holder.lock("turns").unwrap();
    let b = holder.lock("turns").unwrap();
    let first = a.acquire().await.unwrap();
    assert!(
        b.try_acquire().await.unwrap().is_none(),
        "second owner got in"
    );
    let waiting = tokio::spawn(async move { b.acquire_timeout(Duration::from_secs(10)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished());
    let first_token = first.fencing_token();
    first.release().await.unwrap();
    let second = waiting.await.unwrap().unwrap();
    assert!(second.fencing_token() > first_token);
    // Still etcd's layout: one key, named by the session lease.
    let mut kv = admin.client().kv_client();
    let keys = kv
        .get(
            format!("{NS}/turns/"),
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    assert_eq!(keys.kvs().len(), 1);
    let lease = keys.kvs()[0].lease();
    assert_eq!(
        keys.kvs()[0].key_str().unwrap(),
        format!("{NS}/turns/{lease:x}")
    );
    // Its value names the holder (owner token, newline, description), for operators
    // and `inspect`; etcd's recipe reads only keys and revisions, so `etcdctl lock`
    // (whose value is empty) still excludes it (see the interop test above).
    let value = keys.kvs()[0].value_str().unwrap();
    assert!(
        value
            .split_once('\n')
            .is_some_and(|(owner, _)| owner.contains(':')),
        "{value:?}"
    );
    second.release().await.unwrap();
}

/// The keys of the fair lock `name` now (`{NS}/{name}<US>fair/...`).
async fn fair_keys(admin: &EtcdBackend, name: &str) -> Vec<String> {
    keys_under(admin, &format!("{NS}/{name}\u{1f}fair/")).await
}

/// The keys under `prefix` now.
async fn keys_under(admin: &EtcdBackend, prefix: &str) -> Vec<String> {
    let mut kv = admin.client().kv_client();
    let found = kv
        .get(
            prefix,
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_keys_only(),
            ),
        )
        .await
        .unwrap();
    found
        .kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .collect()
}

/// A fair waiter dropped while its client cannot reach etcd, for longer than the
/// clean-up of its key used to keep trying (eight tries, about 17 s with a 500 ms
/// request timeout), while the client keeps its session lease alive through another
/// lock: once etcd is reachable again the key must still go. Left on the session
/// lease, it would block the fair lock for as long as the client holds anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_key_is_removed_after_a_long_outage() {
    let (server, admin) = start().await;
    let url = server.url();
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    let proxy = conformance_tests::proxy::Blackhole::to(port)
        .await
        .expect("proxy");
    // Long enough that the session lease outlives the outage without a keep-alive.
    let watchdog = Duration::from_secs(60);
    let config = EtcdConfig::from_url(&format!("etcd://127.0.0.1:{}", proxy.port()))
        .unwrap()
        .with_connect_timeout(Duration::from_millis(500))
        .with_request_timeout(Duration::from_millis(500));
    let cut_off = client(EtcdBackend::connect(config).await.unwrap(), watchdog);
    // Held throughout: the client keeps its session lease alive.
    let kept = cut_off.lock("kept").unwrap().acquire().await.unwrap();
    let other = client(backend(&url).await, watchdog);
    let holder = other.fair_lock("fair").unwrap().acquire().await.unwrap();
    let lock = cut_off.fair_lock("fair").unwrap();
    let waiter = tokio::spawn(async move { lock.acquire_timeout(Duration::from_secs(120)).await });
    let started = Instant::now();
    while fair_keys(&admin, "fair").await.len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the waiter did not queue"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    proxy.cut();
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    // The clean-up runs as the backend's pending work: wait for it to end, or for
    // longer than the old retries lasted.
    let cut_off_backend = cut_off.backend().clone();
    let outage = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(25), cut_off_backend.settle())
        .await
        .is_ok();
    println!(
        "clean-up of the abandoned key {} during the outage ({:.1?})",
        if ended { "gave up" } else { "still trying" },
        outage.elapsed()
    );
    proxy.heal();
    holder.release().await.unwrap();
    let third = client(common::backend(&url).await, watchdog);
    let got = third
        .fair_lock("fair")
        .unwrap()
        .acquire_timeout(Duration::from_secs(15))
        .await;
    let keys = fair_keys(&admin, "fair").await;
    let guard = got.unwrap_or_else(|err| {
        panic!("the fair lock stayed blocked after the outage ({err}); keys: {keys:?}")
    });
    guard.release().await.unwrap();
    kept.release().await.unwrap();
}

/// Two owners of one client wait, longer than the client's lease, behind another
/// client's holder. When the first is granted, the second must keep waiting: they
/// share the key `<prefix>/<session lease>`, and the second would write over it. (The
/// second once took the turn when the first's lease, counted from the start of its
/// wait, looked ended for the moment before lock-core counted it from the grant; a
/// race, so three rounds.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_after_a_wait_longer_than_the_lease_keeps_its_clients_turn() {
    let (server, _admin) = start().await;
    let other = client(backend(&server.url()).await, Duration::from_secs(10));
    let waiters = client(backend(&server.url()).await, Duration::from_secs(1));
    for round in 0..3 {
        let name = format!("long-wait-{round}");
        let held = other.lock(&name).unwrap().acquire().await.unwrap();
        let (first, second) = (waiters.lock(&name).unwrap(), waiters.lock(&name).unwrap());
        let first =
            tokio::spawn(async move { first.acquire_timeout(Duration::from_secs(30)).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let second =
            tokio::spawn(async move { second.acquire_timeout(Duration::from_secs(30)).await });
        // Past the waiters' lease of 1 s, counted from the start of their waits.
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        held.release().await.unwrap();
        let first = first.await.unwrap().expect("the first waiter is granted");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            !second.is_finished(),
            "round {round}: the second owner of the client was let in beside the first \
             (first held: {}): {:?}",
            first.is_held(),
            second
                .await
                .unwrap()
                .map(|g| (g.fencing_token(), g.is_held()))
        );
        assert!(first.is_held(), "round {round}: the first lost its lock");
        let token = first.fencing_token();
        first.release().await.unwrap();
        let second = second.await.unwrap().expect("the second waiter is granted");
        assert!(second.fencing_token() > token);
        second.release().await.unwrap();
    }
}

/// An acquire dropped after etcd granted it but before its caller read the grant (a
/// `tokio::time::timeout` around it, racing the grant) leaves nothing behind: the
/// grant goes back, and another client gets the lock. Forced here by polling the
/// acquire once, letting it be granted, and dropping it unread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_its_caller_never_read_goes_back() {
    let (server, admin) = start().await;
    let holder = client(backend(&server.url()).await, Duration::from_secs(3));
    // Keeps the session lease alive: a key left on it would stay for good.
    let other_lock = holder
        .lock("unread-keepalive")
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let lock = holder.lock("unread").unwrap();
    let mut acquiring = Box::pin(lock.acquire());
    assert!(
        futures::poll!(acquiring.as_mut()).is_pending(),
        "granted on the first poll"
    );
    // Granted at etcd meanwhile; the grant waits unread for its caller.
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(acquiring);
    let other = client(backend(&server.url()).await, Duration::from_secs(3));
    let taken = other
        .lock("unread")
        .unwrap()
        .acquire_timeout(Duration::from_secs(10))
        .await;
    let keys = keys_under(&admin, &format!("{NS}/unread/")).await;
    assert!(
        taken.is_ok(),
        "the unread grant kept the lock from another client ({:?}); keys: {keys:?}",
        taken.err(),
    );
    taken.unwrap().release().await.unwrap();
    other_lock.release().await.unwrap();
    holder.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}

/// A fair waiter behind a holder that extends its lease often (each extend writes the
/// holder's key, which the waiter watches): the waiter still keeps its own lease
/// fresh, so its key, and its place in the queue, outlive that lease's length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_behind_a_holder_that_extends_often_keeps_its_place() {
    let (server, admin) = start().await;
    let url = server.url();
    let holder = client(backend(&url).await, Duration::from_secs(10));
    let waiter = client(backend(&url).await, Duration::from_secs(10));
    let lease = Duration::from_secs(3);
    let held = holder
        .fair_lock("busy")
        .unwrap()
        .acquire_with(lock_core::AcquireOptions::try_once().lease(lease))
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let lock = waiter.fair_lock("busy").unwrap();
        async move {
            let options = lock_core::AcquireOptions::wait_for(Duration::from_secs(60)).lease(lease);
            lock.acquire_with(options).await
        }
    });
    let placed = Instant::now();
    while fair_keys(&admin, "busy").await.len() < 2 {
        assert!(
            placed.elapsed() < Duration::from_secs(10),
            "the waiter never queued"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Twice the waiter's lease, with an extend every 300 ms.
    let extending = Instant::now();
    while extending.elapsed() < 2 * lease {
        tokio::time::sleep(Duration::from_millis(300)).await;
        held.extend(lease).await.expect("extend");
    }
    assert_eq!(
        fair_keys(&admin, "busy").await.len(),
        2,
        "the waiter's key ran out while it waited"
    );
    assert!(!waiting.is_finished());
    held.release().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the waiter is served after the release")
        .unwrap()
        .expect("granted");
    guard.release().await.unwrap();
}

/// An extend dropped while its move to a new lease is on its way (the reply late, the
/// move done at etcd), and then the client cut off: the key may now hang on a lease
/// nobody keeps, and no watch event can tell the guard. Once another client can have
/// the lock, the first guard must not say held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extend_dropped_in_flight_never_leaves_two_owners() {
    let (server, admin) = start().await;
    let url = server.url();
    let port: u16 = endpoint(&url).rsplit(':').next().unwrap().parse().unwrap();
    let proxy = conformance_tests::proxy::Blackhole::to(port).await.unwrap();
    let proxied = format!("etcd://127.0.0.1:{}", proxy.port());
    let first = client(backend(&proxied).await, Duration::from_secs(30));
    let other = client(backend(&url).await, Duration::from_secs(30));
    let guard = first.lock("moved").unwrap().acquire().await.unwrap();
    let key_lease = || async {
        let mut kv = admin.client().kv_client();
        let options = etcd_client::GetOptions::new().with_prefix();
        let found = kv.get(format!("{NS}/moved/"), Some(options)).await.unwrap();
        found.kvs().first().map(|kv| kv.lease())
    };
    let session = key_lease().await.expect("the key is there");
    // Every reply to the first client comes 1 s late: the move lands at etcd while its
    // answer is on its way, and the extend is dropped then.
    proxy.delay_replies(Duration::from_millis(1_000));
    {
        let extend = guard.extend(Duration::from_secs(3));
        tokio::pin!(extend);
        let moved = async {
            while key_lease().await == Some(session) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::select! {
            answer = &mut extend => panic!("the extend answered before the move was seen: {answer:?}"),
            () = moved => {}
            () = tokio::time::sleep(Duration::from_secs(20)) => panic!("the move never landed"),
        }
    }
    proxy.cut();
    let taken = other
        .lock("moved")
        .unwrap()
        .acquire_timeout(Duration::from_secs(15))
        .await
        .expect("the other client gets the lock once the moved key runs out");
    assert!(
        !guard.is_held(),
        "two owners: the first guard says held while the other client holds the lock"
    );
    taken.release().await.unwrap();
}

/// Every key in etcd with its create revision.
async fn keys_with_revisions(url: &str) -> std::collections::BTreeMap<Vec<u8>, i64> {
    let mut raw = etcd_client::Client::connect([endpoint(url)], None)
        .await
        .unwrap();
    let all = etcd_client::GetOptions::new().with_prefix();
    let found = raw.get(vec![0u8], Some(all)).await.unwrap();
    found
        .kvs()
        .iter()
        .map(|kv| (kv.key().to_vec(), kv.create_revision()))
        .collect()
}

/// An operator's `force_unlock` of a fair lock or an election takes only the holder:
/// the waiters' keys stay as they were (the same create revisions, so the same places
/// in line), and the first waiter is next, ahead of the one behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_takes_only_the_holder_and_the_waiters_keep_their_places() {
    let (server, _) = start().await;
    let url = server.url();
    for election in [false, true] {
        let name = if election { "office" } else { "line" };
        let holder = client(backend(&url).await, Duration::from_secs(30));
        let take = |client: LockClient<EtcdBackend>| async move {
            if election {
                let leader = client.election(name).unwrap().campaign("v").await?;
                Ok::<_, Error>(leader.into_guard())
            } else {
                client.fair_lock(name).unwrap().acquire().await
            }
        };
        let first = take(holder.clone()).await.unwrap();
        let info = || async {
            let info = if election {
                holder.election(name).unwrap().inspect().await
            } else {
                holder.fair_lock(name).unwrap().inspect().await
            };
            info.unwrap()
        };
        let mut waiters = Vec::new();
        for n in 1..=2 {
            let next = client(backend(&url).await, Duration::from_secs(30));
            waiters.push(tokio::spawn(take(next)));
            let started = Instant::now();
            while info().await.waiters != Some(n) {
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "waiter {n} never queued"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let before = keys_with_revisions(&url).await;
        let forced = if election {
            holder.election(name).unwrap().force_unlock().await
        } else {
            holder.fair_lock(name).unwrap().force_unlock().await
        };
        assert!(forced.unwrap(), "someone held it");
        let told = tokio::time::timeout(Duration::from_secs(10), first.lost()).await;
        assert!(told.is_ok(), "[{name}] the holder was not told");
        let second = tokio::time::timeout(Duration::from_secs(10), &mut waiters[0])
            .await
            .expect("the first waiter is next")
            .unwrap()
            .unwrap();
        let after = keys_with_revisions(&url).await;
        let moved: Vec<String> = before
            .iter()
            .filter(|(key, revision)| after.get(*key).is_some_and(|now| now != *revision))
            .map(|(key, _)| String::from_utf8_lossy(key).into_owned())
            .collect();
        let kept = before.keys().filter(|key| after.contains_key(*key)).count();
        assert!(
            moved.is_empty() && kept + 1 >= before.len(),
            "[{name}] the waiters' keys were taken and written again: {moved:?} ({kept} of {} kept)",
            before.len()
        );
        assert!(
            !waiters[1].is_finished(),
            "[{name}] the second waiter got ahead"
        );
        second.release().await.unwrap();
        let third = tokio::time::timeout(Duration::from_secs(10), &mut waiters[1])
            .await
            .expect("the second waiter is next")
            .unwrap()
            .unwrap();
        third.release().await.unwrap();
    }
}
