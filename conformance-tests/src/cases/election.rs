//! Election cases: one leader at a time, terms that increase, the leader's value read
//! and followed, leadership lost and refused after.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use lock_core::prelude::*;
use lock_core::{Leader, LeaderChanges, Leadership, LeaseLoss};

use crate::check::{expect_err, is_lease_lost, is_timeout, ok, settle, within};
use crate::runner::Ctx;

const NAME: &str = "leader";

async fn election(ctx: &Ctx) -> Arc<dyn Election> {
    ok("election", ctx.client().await.election(NAME))
}

/// What `election` says of its leader: `Some((value, term))`.
async fn leader_of(election: &Arc<dyn Election>) -> Option<(String, u64)> {
    ok("leader", election.leader().await).map(|l| (l.value, l.term))
}

/// Candidates of several clients campaign in turns: never two leaders at once, each
/// leader reads itself as the leader with its own term, and terms strictly increase
/// from leader to leader.
pub(crate) async fn one_leader_at_a_time(ctx: &Ctx) {
    const CLIENTS: usize = 3;
    const TASKS: usize = 2;
    const ROUNDS: usize = 3;
    let in_office = Arc::new(AtomicUsize::new(0));
    let terms = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let election = election(ctx).await;
        for t in 0..TASKS {
            let (election, in_office, terms) = (election.clone(), in_office.clone(), terms.clone());
            tasks.push(tokio::spawn(async move {
                for r in 0..ROUNDS {
                    let value = format!("candidate-{c}-{t}-{r}");
                    let leadership = ok(
                        "campaign",
                        election
                            .campaign_timeout(&value, Duration::from_secs(60))
                            .await,
                    );
                    let now = in_office.fetch_add(1, Ordering::SeqCst) + 1;
                    assert_eq!(now, 1, "{now} leaders at once");
                    terms.lock().unwrap().push(leadership.term());
                    assert!(leadership.is_leader());
                    let read = leader_of(&election).await;
                    assert_eq!(
                        read,
                        Some((value, leadership.term())),
                        "the leader reads another leader"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    in_office.fetch_sub(1, Ordering::SeqCst);
                    ok("resign", leadership.resign().await);
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("candidate task");
    }
    let terms = terms.lock().unwrap().clone();
    assert_eq!(terms.len(), CLIENTS * TASKS * ROUNDS);
    assert!(
        terms.windows(2).all(|w| w[0] < w[1]),
        "terms do not increase from leader to leader: {terms:?}"
    );
    assert_eq!(leader_of(&election(ctx).await).await, None);
}

/// Candidates that campaign one after another lead in that order, each as soon as the
/// one before resigns (not when its lease would have run out).
pub(crate) async fn candidates_lead_in_the_order_they_came(ctx: &Ctx) {
    const CANDIDATES: usize = 4;
    let first = ok("campaign", election(ctx).await.campaign("first").await);
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..CANDIDATES {
        let election = election(ctx).await;
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let value = format!("candidate-{i}");
            let leadership = ok(
                "campaign",
                election
                    .campaign_timeout(&value, Duration::from_secs(60))
                    .await,
            );
            let read = leader_of(&election).await.map(|(value, _)| value);
            order.lock().unwrap().push((i, read));
            ok("resign", leadership.resign().await);
        }));
        // Let this candidate queue before the next one campaigns.
        settle().await;
    }
    ok("resign", first.resign().await);
    for task in tasks {
        within("candidates", ctx.slack() * 4, task)
            .await
            .0
            .expect("candidate task");
    }
    let expected: Vec<_> = (0..CANDIDATES)
        .map(|i| (i, Some(format!("candidate-{i}"))))
        .collect();
    assert_eq!(
        *order.lock().unwrap(),
        expected,
        "candidates did not lead in the order they came"
    );
}

/// The leader's value is its campaign's until it proclaims another; nobody leads after
/// it resigns (the timed-out candidate below withdrew); a single try fails while
/// someone leads, and a limited wait times out.
pub(crate) async fn value_proclaim_and_resign(ctx: &Ctx) {
    let election = election(ctx).await;
    let other = ctx.client().await.election(NAME).expect("election");
    assert_eq!(
        leader_of(&election).await,
        None,
        "a leader before anyone ran"
    );
    let leadership = ok("campaign", election.campaign("10.0.0.1:80").await);
    let term = leadership.term();
    assert_eq!(
        leader_of(&other).await,
        Some(("10.0.0.1:80".to_owned(), term))
    );
    ok("proclaim", leadership.proclaim("10.0.0.1:8080").await);
    assert_eq!(
        leader_of(&other).await,
        Some(("10.0.0.1:8080".to_owned(), term)),
        "a proclaim changes the value, not the term"
    );
    assert!(
        ok("try_campaign", other.try_campaign("second").await).is_none(),
        "two leaders"
    );
    expect_err(
        "a limited campaign while someone leads",
        other
            .campaign_timeout("second", Duration::from_millis(300))
            .await,
        is_timeout,
    );
    ok("resign", leadership.resign().await);
    // Nobody, once the timed-out candidate has withdrawn (promptly, but a loaded
    // machine may take a moment).
    within(
        "nobody leads after the resignation",
        ctx.slack() * 2,
        async {
            while leader_of(&other).await.is_some() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        },
    )
    .await;
    // A campaign, not a single try: the timed-out one above may still be withdrawing.
    let next = ok(
        "campaign after",
        other
            .campaign_timeout("second", Duration::from_secs(30))
            .await,
    );
    assert!(next.term() > term, "the term did not increase");
    ok("resign", next.resign().await);
}

/// An operator removes the leader: its leadership reports the loss within the
/// watchdog's renewal (at once where the backend notices), and a proclaim after is
/// refused without writing.
pub(crate) async fn lost_leadership_refuses_proclaim(ctx: &Ctx) {
    let lease = Duration::from_secs(3);
    let client = ctx.client_with(ctx.namespace(), lease).await;
    let election = ok("election", client.election(NAME));
    let leadership = ok("campaign", election.campaign("first").await);
    let operator = ok("election", ctx.client().await.election(NAME));
    assert!(ok("force_unlock", operator.force_unlock().await));
    let (loss, _) = within(
        "the leader told of its removal",
        lease + ctx.slack(),
        leadership.lost(),
    )
    .await;
    assert_eq!(loss, LeaseLoss::Revoked);
    assert!(!leadership.is_leader());
    expect_err(
        "proclaim after the loss",
        leadership.proclaim("stale").await,
        is_lease_lost,
    );
    assert_eq!(
        leader_of(&operator).await,
        None,
        "the lost leader's proclaim was written"
    );
    let _ = leadership.resign().await;
}

/// Waits for the next item of `changes`, which must be `Ok`.
async fn next_change(ctx: &Ctx, changes: &mut LeaderChanges, what: &str) -> Leader {
    let limit = lock_core::OBSERVE_EVERY * 5 + ctx.slack();
    let (item, _) = within(what, limit, changes.next()).await;
    ok(what, item.expect("the stream goes on"))
}

/// A follower's `observe` sees the first leader, its proclaimed value and the next
/// leader, in order, with the terms the leaders hold.
pub(crate) async fn observe_sees_every_change_in_order(ctx: &Ctx) {
    let follower = election(ctx).await;
    let mut changes = follower.observe();
    let first = election(ctx).await;
    let second = election(ctx).await;
    let a = ok("campaign", first.campaign("a").await);
    let seen = next_change(ctx, &mut changes, "the first leader").await;
    assert_eq!((seen.value.as_str(), seen.term), ("a", a.term()));
    ok("proclaim", a.proclaim("a2").await);
    let seen = next_change(ctx, &mut changes, "the proclaimed value").await;
    assert_eq!((seen.value.as_str(), seen.term), ("a2", a.term()));
    let waiting = tokio::spawn(async move {
        second
            .campaign_timeout("b", Duration::from_secs(60))
            .await
            .map(|l| (l.term(), l))
    });
    settle().await;
    let old = a.term();
    ok("resign", a.resign().await);
    let (term, b): (u64, Leadership) = ok("second campaign", waiting.await.expect("task"));
    let seen = next_change(ctx, &mut changes, "the next leader").await;
    assert_eq!((seen.value.as_str(), seen.term), ("b", term));
    assert!(term > old, "the term did not increase");
    ok("resign", b.resign().await);
}
