//! Bad input gets a clear error and loses nothing; names and namespaces keep locks apart.

use std::time::Duration;

use lock_core::prelude::*;
use lock_core::{AcquireOptions, Error, MAX_NAME_BYTES};

use crate::backend::ClientOptions;
use crate::cases::flavor::Flavor;
use crate::check::{expect_err, got, is_invalid, ok, refused};
use crate::runner::Ctx;

fn bad_names() -> Vec<String> {
    vec![
        String::new(),
        "x".repeat(MAX_NAME_BYTES + 1),
        "x".repeat(10_000),
        "new\nline".into(),
        "nul\0byte".into(),
        "escape\u{1b}[2J".into(),
    ]
}

/// Every lock type refuses bad names with `InvalidArgument`, saying what is wrong.
pub(crate) async fn invalid_names(ctx: &Ctx) {
    let client = ctx.client().await;
    for name in bad_names() {
        let shown: String = name.chars().take(20).collect();
        let err = expect_err(&format!("lock({shown:?})"), client.lock(&name), is_invalid);
        assert!(
            err.to_string().contains("lock name"),
            "unclear message: {err}"
        );
        expect_err(
            &format!("fair_lock({shown:?})"),
            client.fair_lock(&name),
            is_invalid,
        );
        expect_err(
            &format!("rw_lock({shown:?})"),
            client.rw_lock(&name),
            is_invalid,
        );
    }
}

/// Bad durations are refused before anything is sent, and a lock already held stays
/// held with its count unchanged.
pub(crate) async fn invalid_durations_keep_holds(ctx: &Ctx) {
    let client = ctx.client().await;
    let lock = client.lock("held").expect("lock");
    let guard = ok("acquire", lock.acquire().await);
    let bad = [
        AcquireOptions::try_once().lease(Duration::ZERO),
        AcquireOptions::try_once().lease(Duration::from_nanos(1)),
        AcquireOptions::wait_forever().lease(Duration::MAX),
        AcquireOptions::wait_for(Duration::MAX),
        AcquireOptions::wait_for(Duration::from_secs(u64::MAX / 2)).lease(Duration::from_secs(1)),
    ];
    for options in bad {
        let err = expect_err(
            &format!("{options:?}"),
            lock.acquire_with(options).await,
            is_invalid,
        );
        assert!(!err.is_retryable());
    }
    expect_err("extend(0)", guard.extend(Duration::ZERO).await, is_invalid);
    expect_err("extend(MAX)", guard.extend(Duration::MAX).await, is_invalid);
    assert!(guard.is_held(), "a bad call cost the lock");
    assert_eq!(lock.hold_count(), 1, "a bad call changed the hold count");
    let other = client.lock("held").expect("lock");
    refused("other while held", other.try_acquire().await);
    ok("release", guard.release().await);
}

/// A client with a bad namespace, watchdog lease or holder description is refused with
/// `InvalidArgument`.
pub(crate) async fn invalid_client_options(ctx: &Ctx) {
    let options = |namespace: String, watchdog_lease: Duration| ClientOptions {
        namespace,
        watchdog_lease,
        holder_description: None,
    };
    let bad = [
        options("tab\there".into(), Duration::from_secs(10)),
        options("y".repeat(MAX_NAME_BYTES + 1), Duration::from_secs(10)),
        options(String::new(), Duration::from_secs(10)),
        options(format!("{}:x", ctx.namespace()), Duration::from_secs(10)),
        options(format!("{}/x", ctx.namespace()), Duration::from_secs(10)),
        options(format!("{{{}", ctx.namespace()), Duration::from_secs(10)),
        options(ctx.namespace().into(), Duration::ZERO),
        options(ctx.namespace().into(), Duration::MAX),
        ClientOptions {
            holder_description: Some("line\nbreak".into()),
            ..options(ctx.namespace().into(), Duration::from_secs(10))
        },
        ClientOptions {
            holder_description: Some("d".repeat(lock_core::MAX_HOLDER_DESCRIPTION_BYTES + 1)),
            ..options(ctx.namespace().into(), Duration::from_secs(10))
        },
    ];
    for options in bad {
        match ctx.backend().client(options.clone()).await {
            Err(Error::InvalidArgument { .. }) => {}
            Err(err) => panic!("{options:?}: wrong error {err}"),
            Ok(_) => panic!("{options:?}: accepted"),
        }
    }
}

/// Names with quotes, separators, SQL and shell syntax, any script, and the longest
/// allowed length are stored safely: each is its own lock.
pub(crate) async fn hostile_names(ctx: &Ctx) {
    let names = [
        "quote'd \"name\"".to_owned(),
        "semi;colon; DROP TABLE locks; --".to_owned(),
        "slash/and\\backslash".to_owned(),
        "colon:and{brace}".to_owned(),
        "$(rm -rf /) `echo` %s %n *?[".to_owned(),
        "ünïcødé 锁 🔒".to_owned(),
        "l".repeat(MAX_NAME_BYTES),
    ];
    let client = ctx.client().await;
    let mut guards = Vec::new();
    for name in &names {
        let lock = client.lock(name).expect("valid name");
        guards.push(got(
            &format!("acquire {name:.20}"),
            lock.try_acquire().await,
        ));
    }
    let other = ctx.client().await;
    for name in &names {
        let lock = other.lock(name).expect("valid name");
        refused(&format!("other on {name:.20}"), lock.try_acquire().await);
        assert!(ok("is_locked", lock.is_locked().await));
    }
    for guard in guards {
        ok("release", guard.release().await);
    }
}

/// Names that extend one another past a `/`, or that look like a backend's contender
/// entries (Curator's `-lock-`, `-__READ__`, `-__WRIT__`, kazoo's `__lock__` and
/// `__rlock__` with a sequence, an etcd lease id) or its family markers (`%fair`,
/// `%rw`).
fn nested_names() -> Vec<&'static str> {
    vec![
        "a",
        "/a",
        "a/b",
        "a/",
        "a//",
        "a/b/c",
        "a/694d8a2b1c",
        "a/x-lock-0000000001",
        "a/x__lock__0000000000",
        "a/x__rlock__0000000000",
        "a/x-__READ__0000000001",
        "a/x-__WRIT__0000000001",
        "a%fair",
        "a%rw",
        "a%25",
    ]
}

/// Holding a lock of one of [`nested_names`] never makes another of them report
/// `is_locked` nor refuses its `try_acquire`, for every ordered pair and every lock
/// family (exclusive, fair, the write side and the read side of read-write locks).
/// Collects every colliding pair before failing.
pub(crate) async fn nested_names_do_not_block(ctx: &Ctx) {
    let caps = ctx.capabilities();
    let holder = ctx.client().await;
    let prober = ctx.client().await;
    let names = nested_names();
    let mut families = vec![Flavor::Exclusive];
    if caps.fair {
        families.push(Flavor::Fair);
    }
    if caps.read_write {
        families.push(Flavor::WriteSide);
    }
    let mut collisions = Vec::new();
    let mut pairs = 0;
    for &flavor in &families {
        for held_name in &names {
            let held = got(
                &format!("{} {held_name:?}", flavor.prefix()),
                flavor.lock(&*holder, held_name).try_acquire().await,
            );
            for probe_name in names.iter().filter(|n| *n != held_name) {
                pairs += 1;
                let probe = flavor.lock(&*prober, probe_name);
                if ok("is_locked", probe.is_locked().await) {
                    collisions.push(format!(
                        "{}: holding {held_name:?} makes {probe_name:?} report held",
                        flavor.prefix()
                    ));
                }
                match ok("try_acquire", probe.try_acquire().await) {
                    Some(guard) => ok("release", guard.release().await),
                    None => collisions.push(format!(
                        "{}: holding {held_name:?} refuses {probe_name:?}",
                        flavor.prefix()
                    )),
                }
            }
            let again = flavor.lock(&*prober, held_name);
            assert!(
                ok("is_locked", again.is_locked().await),
                "{held_name:?} not reported held"
            );
            ok("release", held.release().await);
        }
    }
    if caps.read_write {
        // The read side's entries differ from the write side's.
        for held_name in &names {
            let lock = holder.rw_lock(held_name).expect("valid name");
            let held = got(&format!("read {held_name:?}"), lock.try_read().await);
            for probe_name in names.iter().filter(|n| *n != held_name) {
                pairs += 1;
                let probe = prober.rw_lock(probe_name).expect("valid name");
                match ok("try_write", probe.try_write().await) {
                    Some(guard) => ok("release", guard.release().await),
                    None => collisions.push(format!(
                        "read: holding {held_name:?} refuses the write side of {probe_name:?}"
                    )),
                }
            }
            ok("release", held.release().await);
        }
    }
    assert!(
        collisions.is_empty(),
        "{} of {pairs} ordered name pairs collide:\n{}",
        collisions.len(),
        collisions.join("\n")
    );
}

/// The same name in two namespaces is two locks; in one namespace, one lock.
pub(crate) async fn namespaces_isolated(ctx: &Ctx) {
    let ns_a = format!("{}-a", ctx.namespace());
    let ns_b = format!("{}-b", ctx.namespace());
    let a = ctx.client_with(&ns_a, Duration::from_secs(10)).await;
    let b = ctx.client_with(&ns_b, Duration::from_secs(10)).await;
    let a2 = ctx.client_with(&ns_a, Duration::from_secs(10)).await;
    assert_eq!(a.namespace().as_str(), ns_a);
    let held_a = got(
        "a",
        a.lock("shared-name").expect("lock").try_acquire().await,
    );
    let held_b = got(
        "b",
        b.lock("shared-name").expect("lock").try_acquire().await,
    );
    refused(
        "a2 in a's namespace",
        a2.lock("shared-name").expect("lock").try_acquire().await,
    );
    ok("release", held_a.release().await);
    ok("release", held_b.release().await);
}

/// Exclusive, fair and read-write locks of one name are separate locks.
pub(crate) async fn lock_kinds_are_separate(ctx: &Ctx) {
    let client = ctx.client().await;
    let caps = ctx.capabilities();
    let exclusive = got(
        "exclusive",
        client.lock("kinds").expect("lock").try_acquire().await,
    );
    let fair = if caps.fair {
        Some(got(
            "fair",
            client.fair_lock("kinds").expect("lock").try_acquire().await,
        ))
    } else {
        None
    };
    let write = if caps.read_write {
        Some(got(
            "write",
            client.rw_lock("kinds").expect("lock").try_write().await,
        ))
    } else {
        None
    };
    ok("release", exclusive.release().await);
    for guard in [fair, write].into_iter().flatten() {
        ok("release", guard.release().await);
    }
}
