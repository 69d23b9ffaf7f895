//! The client's view of a lease never outlasts the server's, whatever order renewal
//! replies arrive in: a watchdog renewal answered after an `extend` does not override
//! it, and a renewal answered after the lease ran out locally does not bring it back.
//! Timing is forced with paused tokio time and a backend that holds replies back.

mod support;

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use lock_core::prelude::*;
use lock_core::{LeaseLoss, LockClient};
use support::Wrapped;

/// An exclusive acquire of `name` by `client`, in a task of its own.
fn spawn_acquire(
    client: &LockClient<Wrapped>,
    name: &str,
) -> tokio::task::JoinHandle<lock_core::Result<lock_core::LockGuard>> {
    let lock = client.lock(name).unwrap();
    tokio::spawn(async move { lock.acquire().await })
}

fn client(backend: &Wrapped, watchdog_lease: Duration) -> LockClient<Wrapped> {
    LockClient::builder(backend.clone())
        .watchdog_lease(watchdog_lease)
        .build()
        .unwrap()
}

/// A watchdog tick renews for 30 s at the server, and its reply is late; meanwhile the
/// holder shortens the lease to 5 s with `extend`. Whatever order the replies land in,
/// the client must not believe the 30 s once the server's lease is 5 s.
#[tokio::test(start_paused = true)]
async fn a_watchdog_renewal_answered_after_extend_does_not_override_it() {
    let backend = Wrapped::default();
    let client = client(&backend, Duration::from_secs(30));
    let lock = client.lock("extended").unwrap();
    let guard = lock.acquire().await.unwrap();
    backend.hold_renewal_replies(Duration::from_secs(30));
    // The first tick, at a third of the lease, reaches the server; its reply is held.
    tokio::time::sleep(Duration::from_millis(10_100)).await;
    assert_eq!(backend.held_renewals(), 1, "the tick is in flight");

    let extend = tokio::spawn(async move {
        let result = guard.extend(Duration::from_secs(5)).await;
        (guard, result)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    backend.answer_renewals();
    let (guard, result) = extend.await.unwrap();
    result.expect("extend");

    // Past the 5 s the server now keeps: someone else may hold the lock.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let other = client.lock("extended").unwrap();
    let taken = other.try_acquire().await.unwrap();
    assert!(taken.is_some(), "the server let the lease go after 5 s");
    assert!(
        !guard.is_held(),
        "the guard still says held while another owner holds the lock"
    );
}

/// A renewal sent before the local expiry but answered after it: the guard already
/// reported the loss, and must not report held again.
#[tokio::test(start_paused = true)]
async fn a_renewal_answered_after_local_expiry_does_not_revive_the_lease() {
    let backend = Wrapped::default();
    let client = client(&backend, Duration::from_secs(3));
    let guard = client.lock("late").unwrap().acquire().await.unwrap();
    // The tick at 1 s renews until 4 s at the server; its reply lands at 3.5 s, after
    // the lease ran out locally at 3 s.
    backend.delay_renewal_replies(Duration::from_millis(2_500));
    let lost = tokio::spawn(guard.lost());
    tokio::time::sleep(Duration::from_millis(3_200)).await;
    assert!(lost.is_finished(), "the lease ran out locally at 3 s");
    assert_eq!(lost.await.unwrap(), LeaseLoss::Expired);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        !guard.is_held(),
        "a late renewal brought an expired lease back"
    );
}

/// A backend that guarantees less than the ttl it was asked for (RedLock's clock-drift
/// margin): grants, renewals and extensions all count the shorter validity.
#[tokio::test(start_paused = true)]
async fn leases_count_the_validity_the_backend_guarantees() {
    let margin = Duration::from_millis(500);
    let backend = Wrapped::default().with_lease_margin(margin);
    // No drift factor: only the backend's margin (and the 2 ms floor) counts here.
    let client = LockClient::builder(backend.clone())
        .watchdog_lease(Duration::from_secs(3))
        .clock_drift(0.0)
        .build()
        .unwrap();
    let lock = client.lock("margin").unwrap();
    let fixed = lock_core::AcquireOptions::try_once().lease(Duration::from_secs(10));
    let guard = lock.acquire_with(fixed).await.unwrap();
    tokio::time::sleep(Duration::from_millis(9_400)).await;
    assert!(guard.is_held());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !guard.is_held(),
        "held past the 9.5 s the backend guarantees"
    );
    drop(guard);

    let guard = lock.acquire().await.unwrap();
    guard.extend(Duration::from_secs(4)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(3_600)).await;
    assert!(!guard.is_held(), "an extension counts the margin too");
    drop(guard);

    // The watchdog renews at a third of 3 s; each renewal guarantees 2.5 s.
    let guard = lock.acquire().await.unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(guard.is_held(), "the watchdog keeps a lease with a margin");
    guard.release().await.unwrap();
}

/// Every lease keeps the clock-drift margin back: a 3 s lease with the default factor
/// (1 % + 2 ms) is held for 2.968 s from its send, and a wider factor keeps more back.
#[tokio::test(start_paused = true)]
async fn leases_keep_a_clock_drift_margin() {
    let backend = Wrapped::default();
    let lease = lock_core::AcquireOptions::try_once().lease(Duration::from_secs(3));
    let client = client(&backend, Duration::from_secs(3));
    let guard = client
        .lock("drift")
        .unwrap()
        .acquire_with(lease)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2_960)).await;
    assert!(guard.is_held());
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(
        !guard.is_held(),
        "held into the drift margin of a 3 s lease"
    );
    drop(guard);

    let wide = LockClient::builder(backend.clone())
        .clock_drift(0.1)
        .build()
        .unwrap();
    let guard = wide
        .lock("drift-wide")
        .unwrap()
        .acquire_with(lease)
        .await
        .unwrap();
    let left = guard.remaining().unwrap();
    assert!(
        left <= Duration::from_millis(2_698),
        "a 10 % drift leaves at most 2.698 s of 3 s, not {left:?}"
    );
    tokio::time::sleep(Duration::from_millis(2_700)).await;
    assert!(!guard.is_held());
    assert!(
        LockClient::builder(backend)
            .clock_drift(0.7)
            .build()
            .is_err(),
        "a drift beyond half the lease is refused"
    );
}

/// A lease that ran out here is reported lost by `release`, even when the backend, whose
/// lease lasts a margin longer, still had it and released it: the holder was told it
/// held nothing for a while, so its critical section may not have been exclusive.
#[tokio::test(start_paused = true)]
async fn release_after_local_expiry_reports_the_loss_whatever_the_backend_says() {
    let backend = Wrapped::default().with_lease_margin(Duration::from_millis(500));
    let client = client(&backend, Duration::from_secs(3));
    let lock = client.lock("expired-here").unwrap();
    let fixed = lock_core::AcquireOptions::try_once().lease(Duration::from_secs(2));
    let guard = lock.acquire_with(fixed).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_700)).await;
    assert!(!guard.is_held(), "past the 1.5 s the backend guarantees");
    assert!(lock.is_locked().await.unwrap(), "the backend still has it");
    let err = guard.release().await.unwrap_err();
    assert!(
        matches!(err, lock_core::Error::LeaseLost { .. }),
        "release reported {err:?}"
    );
    assert!(
        !lock.is_locked().await.unwrap(),
        "and it was still released"
    );
}

/// A watchdog renewal that reaches the server just after a release (and is answered
/// before the release is) finds the lease gone: that is the release, not a loss, and
/// the guard must not report one.
#[tokio::test(start_paused = true)]
async fn a_renewal_racing_a_release_reports_no_loss() {
    let backend = Wrapped::default();
    let client = client(&backend, Duration::from_secs(3));
    let guard = client.lock("racing").unwrap().acquire().await.unwrap();
    let lost = tokio::spawn(guard.lost());
    // The tick at 1 s reaches the server at 1.2 s; the release, sent at 1.1 s, takes
    // effect at once but is answered only at 1.6 s.
    backend.delay_renewal_requests(Duration::from_millis(200));
    backend.delay_release_replies(Duration::from_millis(500));
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    guard.release().await.unwrap();
    assert_eq!(lost.await.unwrap(), LeaseLoss::Released);
}

/// An `extend` that fails (no answer) changes nothing: a lease the watchdog kept is
/// still kept, rather than left to run out unrenewed.
#[tokio::test(start_paused = true)]
async fn a_failed_extend_leaves_the_watchdog_keeping_the_lease() {
    let backend = Wrapped::default();
    let client = client(&backend, Duration::from_secs(3));
    let guard = client.lock("kept").unwrap().acquire().await.unwrap();
    backend.fail_next_renewals(1);
    let err = guard.extend(Duration::from_secs(60)).await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        guard.is_held(),
        "a failed extend left the watchdog lease to run out"
    );
    assert_eq!(client.watched_leases(), 1);
    guard.release().await.unwrap();
}

/// A multi-lock with a fixed lease, over a lock that another acquire of the same handle
/// holds with a watchdog lease, must not turn that lease into a fixed one: the
/// multi-lock is an owner of its own and waits for it.
#[tokio::test(start_paused = true)]
async fn a_multi_lock_never_changes_a_lease_it_did_not_take() {
    let backend = Wrapped::default();
    let client = client(&backend, Duration::from_secs(3));
    let shared = client.lock("a").unwrap();
    let outer = shared.acquire().await.unwrap();
    let multi = lock_core::MultiLock::builder()
        .lock(shared.clone())
        .lock(client.lock("b").unwrap())
        .build()
        .unwrap();
    let options =
        lock_core::AcquireOptions::wait_for(Duration::from_secs(1)).lease(Duration::from_secs(5));
    let taken = multi.acquire_with(options).await;
    assert!(taken.is_err(), "the multi-lock got in beside the holder");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        outer.is_held(),
        "the holder's watchdog lease was made a fixed one"
    );
    outer.release().await.unwrap();
}

/// A grant that comes after a wait longer than its lease is live when the backend hands
/// it over: its lease counts from the attempt that won it, not from the start of the
/// wait. A backend may act on that at once (etcd passes the next owner of the client
/// its turn when a grant's notifier says it ended), so a notifier that said "ended"
/// here would let a second owner in beside a holder lock-core then reports held.
#[tokio::test(start_paused = true)]
async fn a_grant_after_a_long_wait_is_live_when_the_backend_hands_it_over() {
    let backend = Wrapped::default();
    let client = client(&backend, Duration::from_secs(1));
    let holder = client.lock("waited").unwrap().acquire().await.unwrap();
    let waiter = client.lock("waited").unwrap();
    let waiting = tokio::spawn(async move {
        let options = lock_core::AcquireOptions::wait_for(Duration::from_secs(30));
        waiter.acquire_with(options).await
    });
    // Well past the waiter's lease of 1 s, counted from the start of its wait.
    tokio::time::sleep(Duration::from_secs(5)).await;
    holder.release().await.unwrap();
    let guard = waiting.await.unwrap().expect("granted after the release");
    assert!(guard.is_held());
    assert_eq!(
        *backend.calls.live_at_grant.lock().unwrap(),
        [true, true],
        "the waiter's loss notifier said its lease had ended as the backend granted it"
    );
    guard.release().await.unwrap();
}

/// A grant that reached a stalled backend long after it was sent: its reply comes
/// after the watchdog lease's validity, counted from the send, has run out here,
/// though the backend counts the lease from when it took it. The acquire confirms
/// the lease with a renewal before it hands the guard over, rather than hand over a
/// guard that is lost already.
#[tokio::test(start_paused = true)]
async fn a_grant_that_reached_a_stalled_backend_late_is_confirmed_and_held() {
    let backend = Wrapped::default();
    let client = client(&backend, Duration::from_millis(600));
    backend.delay_grant_requests(Duration::from_millis(800));
    let guard = client.lock("stalled").unwrap().acquire().await.unwrap();
    assert!(guard.is_held(), "a live lease was handed over as lost");
    assert_eq!(
        backend.calls.renew.load(SeqCst),
        1,
        "one renewal confirmed the lease"
    );
    // The watchdog keeps it from there.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(guard.is_held());
    guard.release().await.expect("released as held");
}

/// A grant answered with less of its lease left than the watchdog's interval (a
/// third of it): confirmed too, so the lease does not run out before the first tick.
#[tokio::test(start_paused = true)]
async fn a_grant_answered_near_its_lease_end_is_confirmed_and_held() {
    let backend = Wrapped::default();
    let client = client(&backend, Duration::from_millis(600));
    // 600 ms less the drift margin, less 450 ms: about 140 ms left at the reply.
    backend.delay_grant_requests(Duration::from_millis(450));
    let guard = client.lock("nearly").unwrap().acquire().await.unwrap();
    assert_eq!(
        backend.calls.renew.load(SeqCst),
        1,
        "one renewal confirmed the lease"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        guard.is_held(),
        "the lease ran out before the watchdog's first tick"
    );
    guard.release().await.expect("released as held");
}

/// A grant whose reply came back after the lease had run out at the backend too, and
/// another owner took the lock meanwhile: the confirming renewal finds it gone, and the
/// guard handed over says so; only the other owner holds the lock.
#[tokio::test(start_paused = true)]
async fn a_grant_answered_after_the_backend_let_it_go_is_handed_over_lost() {
    let backend = Wrapped::default();
    let first = client(&backend, Duration::from_millis(600));
    backend.delay_grant_replies(Duration::from_millis(1_500));
    let late = spawn_acquire(&first, "gone");
    // The first grant took effect at once and ran out at the backend at 600 ms.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    backend.delay_grant_replies(Duration::ZERO);
    let other = client(&backend, Duration::from_secs(30));
    let taken = other.lock("gone").unwrap().try_acquire().await.unwrap();
    let taken = taken.expect("the backend let the first lease go");
    let guard = late.await.unwrap().unwrap();
    assert!(!guard.is_held(), "two owners say they hold the lock");
    assert!(taken.is_held());
    assert!(matches!(
        guard.release().await,
        Err(lock_core::Error::LeaseLost { .. })
    ));
}

/// An acquire dropped while its late grant is being confirmed leaves no lease behind.
#[tokio::test(start_paused = true)]
async fn an_acquire_dropped_while_its_late_grant_is_confirmed_releases_it() {
    let backend = Wrapped::default();
    let first = client(&backend, Duration::from_millis(600));
    backend.delay_grant_requests(Duration::from_millis(800));
    backend.delay_renewal_requests(Duration::from_millis(500));
    let acquiring = spawn_acquire(&first, "dropped");
    // Granted at 800 ms; the confirming renewal reaches the backend at 1.3 s.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(backend.calls.acquire.load(SeqCst), 1);
    acquiring.abort();
    assert!(acquiring.await.unwrap_err().is_cancelled());
    first.shutdown().await.expect("shut down");
    assert_eq!(backend.calls.release.load(SeqCst), 1);
    backend.delay_grant_requests(Duration::ZERO);
    let other = client(&backend, Duration::from_secs(30));
    let taken = other.lock("dropped").unwrap().try_acquire().await.unwrap();
    assert!(taken.is_some(), "a dropped acquire left its lease behind");
}

/// A shutdown while a late grant is being confirmed: the acquire ends with `Closed`,
/// and the shutdown returns only once the grant was released.
#[tokio::test(start_paused = true)]
async fn a_shutdown_while_a_late_grant_is_confirmed_releases_it() {
    let backend = Wrapped::default();
    let first = client(&backend, Duration::from_secs(6));
    // About 0.9 s of the 6 s lease left at the reply; the confirming renewal then
    // takes 3 s to arrive, longer than a shutdown waits for acquires under way.
    backend.delay_grant_requests(Duration::from_secs(5));
    backend.delay_renewal_requests(Duration::from_secs(3));
    let acquiring = spawn_acquire(&first, "shut");
    tokio::time::sleep(Duration::from_millis(5_200)).await;
    first.shutdown().await.expect("shut down");
    assert_eq!(
        backend.calls.release.load(SeqCst),
        1,
        "the shutdown returned with the grant still held"
    );
    assert!(matches!(
        acquiring.await.unwrap(),
        Err(lock_core::Error::Closed)
    ));
}

/// A grant answered near its lease's end whose confirming renewal finds it lost (a
/// backend that lost it and notifies nobody): the guard handed over says so at once,
/// rather than held for what was left of the lease.
#[tokio::test(start_paused = true)]
async fn a_late_grant_whose_confirming_renewal_finds_it_lost_is_handed_over_lost() {
    let backend = Wrapped::default();
    let client = client(&backend, Duration::from_millis(600));
    // About 140 ms of the lease left at the reply, as above.
    backend.delay_grant_requests(Duration::from_millis(450));
    backend.lose_next_renewals(1);
    let guard = client.lock("lost-late").unwrap().acquire().await.unwrap();
    assert_eq!(
        backend.calls.renew.load(SeqCst),
        1,
        "one confirming renewal"
    );
    assert!(
        !guard.is_held(),
        "the backend said the lease was gone, yet the guard says held"
    );
    assert_eq!(guard.lost().await, LeaseLoss::Revoked);
}

/// A watchdog tick learns the lease is gone while an `extend` waits for that tick's
/// renewal, and the `extend` is dropped before it sends its own: the loss is still
/// reported, rather than the guard saying held until the lease's local end.
#[tokio::test(start_paused = true)]
async fn a_loss_found_while_an_extend_waits_is_reported_when_the_extend_is_dropped() {
    let backend = Wrapped::default();
    let client = client(&backend, Duration::from_secs(30));
    let guard = client.lock("lost-extend").unwrap().acquire().await.unwrap();
    backend.lose_next_renewals(1);
    backend.hold_renewal_replies(Duration::from_secs(30));
    // The first tick, at a third of the lease, is answered `Lost`; its reply is held.
    tokio::time::sleep(Duration::from_millis(10_100)).await;
    assert_eq!(backend.held_renewals(), 1, "the tick is in flight");
    let extend = tokio::time::timeout(
        Duration::from_millis(100),
        guard.extend(Duration::from_secs(20)),
    )
    .await;
    assert!(extend.is_err(), "the extend waited for the tick's renewal");
    backend.answer_renewals();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !guard.is_held(),
        "the backend said the lease was gone, yet the guard says held"
    );
    assert_eq!(guard.lost().await, LeaseLoss::Revoked);
}

/// One server of several does not answer the renewals of the leases it keeps (a
/// cluster node down), the others answer: only its leases run out and are reported
/// lost, the others stay renewed; an `extend` of an unanswered lease is a retryable
/// error that leaves it held until then.
#[tokio::test(start_paused = true)]
async fn an_unanswered_lease_is_lost_alone() {
    let backend = Wrapped::default();
    let client = client(&backend, Duration::from_secs(3));
    let kept = client.lock("kept").unwrap().acquire().await.unwrap();
    let cut_off = client.lock("cut-off").unwrap().acquire().await.unwrap();
    backend.leave_renewals_unanswered("cut-off");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let extended = cut_off.extend(Duration::from_secs(3)).await;
    assert!(
        extended.as_ref().is_err_and(lock_core::Error::is_retryable),
        "{extended:?}"
    );
    assert!(cut_off.is_held(), "held until its local end");
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(
        kept.is_held(),
        "a lease whose server answered was lost with the other"
    );
    assert!(!cut_off.is_held());
    let loss = cut_off.lost().await;
    assert!(
        matches!(loss, LeaseLoss::RenewalFailed { .. } | LeaseLoss::Expired),
        "reported as run out: {loss:?}"
    );
}
