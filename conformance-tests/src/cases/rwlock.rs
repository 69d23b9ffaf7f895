//! Read-write cases: sharing, exclusion, downgrade, no upgrade, cancel safety.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::prelude::*;
use lock_core::LockProvider;

use crate::check::{expect_err, got, is_invalid, ok, refused, settle, within};
use crate::runner::Ctx;

const NAME: &str = "table";

fn rw(client: &dyn LockProvider) -> Arc<dyn ReadWriteLock> {
    client.rw_lock(NAME).expect("lock")
}

/// Several owners hold the read side at once.
pub(crate) async fn readers_share(ctx: &Ctx) {
    let mut guards = Vec::new();
    for _ in 0..3 {
        let lock = rw(&*ctx.client().await);
        guards.push(got("reader", lock.try_read().await));
    }
    let fences: Vec<u64> = guards.iter().map(|g| g.fencing_token()).collect();
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "reader tokens {fences:?}"
    );
    let writer = rw(&*ctx.client().await);
    refused("writer while read", writer.try_write().await);
    assert!(ok("is_locked", writer.is_locked().await));
    for guard in guards {
        ok("release", guard.release().await);
    }
    got("writer after readers", writer.try_write().await)
        .release()
        .await
        .expect("release");
}

/// A writer excludes other readers and writers.
pub(crate) async fn writer_excludes_everyone(ctx: &Ctx) {
    let writer = rw(&*ctx.client().await);
    let other = rw(&*ctx.client().await);
    let guard = ok("write", writer.write().await);
    assert_eq!(writer.write_hold_count(), 1);
    refused("other read", other.try_read().await);
    refused("other write", other.try_write().await);
    ok("release", guard.release().await);
    got("other read after", other.try_read().await)
        .release()
        .await
        .expect("release");
}

/// A waiting writer gets the lock once the last reader leaves.
pub(crate) async fn writer_waits_for_readers(ctx: &Ctx) {
    let reader_a = rw(&*ctx.client().await);
    let reader_b = rw(&*ctx.client().await);
    let writer = rw(&*ctx.client().await);
    let a = ok("read a", reader_a.read().await);
    let b = ok("read b", reader_b.read().await);
    let waiting = tokio::spawn(async move {
        let guard = writer
            .write_with(lock_core::AcquireOptions::wait_for(Duration::from_secs(60)))
            .await;
        (guard, writer)
    });
    settle().await;
    ok("release a", a.release().await);
    settle().await;
    assert!(!waiting.is_finished(), "writer got in while a reader held");
    ok("release b", b.release().await);
    let (joined, _) = within("writer", ctx.slack() * 2, waiting).await;
    let (guard, writer) = joined.expect("writer task");
    let guard = ok("writer", guard);
    assert_eq!(writer.write_hold_count(), 1);
    ok("release", guard.release().await);
}

/// The writer takes the read side too (`downgrade`), releases the write side, and keeps
/// reading: others may then read but not write.
pub(crate) async fn downgrade(ctx: &Ctx) {
    let owner = rw(&*ctx.client().await);
    let other = rw(&*ctx.client().await);
    let write = ok("write", owner.write().await);
    let (read, _) = within("downgrade", ctx.slack(), write.downgrade()).await;
    let read = ok("downgrade", read);
    assert_eq!((owner.write_hold_count(), owner.read_hold_count()), (1, 1));
    refused("other read while write held", other.try_read().await);
    ok("release write", write.release().await);
    assert!(read.is_held());
    refused("other write after downgrade", other.try_write().await);
    let other_read = got("other read after downgrade", other.try_read().await);
    ok("release other read", other_read.release().await);
    ok("release read", read.release().await);
    got("other write at the end", other.try_write().await)
        .release()
        .await
        .expect("release");
}

/// The writer takes the read side twice: each read guard holds until it is released,
/// so releasing the second (and the write side) leaves the first reading, and no
/// writer gets in until it goes too.
pub(crate) async fn downgrade_twice(ctx: &Ctx) {
    let owner = rw(&*ctx.client().await);
    let other = rw(&*ctx.client().await);
    let write = ok("write", owner.write().await);
    let first = ok("first downgrade", write.downgrade().await);
    let second = ok("second downgrade", write.downgrade().await);
    assert_eq!(owner.read_hold_count(), 2);
    ok("release the second read", second.release().await);
    ok("release write", write.release().await);
    assert!(first.is_held(), "the first read guard was lost");
    assert_eq!(owner.read_hold_count(), 1);
    if let Some(writer) = other.try_write().await.ok().flatten() {
        let token = writer.fencing_token();
        let _ = writer.release().await;
        panic!(
            "another writer was granted (token {token}) while the first read guard (token {}) still said held: {}",
            first.fencing_token(),
            first.is_held()
        );
    }
    got("other read beside the first", other.try_read().await)
        .release()
        .await
        .expect("release");
    ok("release the first read", first.release().await);
    got("other write at the end", other.try_write().await)
        .release()
        .await
        .expect("release");
}

/// The writer drops (does not release) the read guard a downgrade made and at once
/// downgrades again: the second downgrade is granted (after the dropped guard's release
/// has reached the backend, where that matters), and holds the read side alone.
pub(crate) async fn downgrade_after_dropping_the_read_side(ctx: &Ctx) {
    let owner = rw(&*ctx.client().await);
    let other = rw(&*ctx.client().await);
    let write = ok("write", owner.write().await);
    let first = ok("first downgrade", write.downgrade().await);
    let first_token = first.fencing_token();
    drop(first);
    let (second, _) = within("second downgrade", ctx.slack(), write.downgrade()).await;
    let second = ok(
        "downgrade right after dropping the first read guard",
        second,
    );
    assert!(
        second.fencing_token() > first_token,
        "the second downgrade re-entered the dropped read hold (token {first_token})"
    );
    assert_eq!((owner.write_hold_count(), owner.read_hold_count()), (1, 1));
    ok("release write", write.release().await);
    // The dropped guard's release, however late, must leave the second read hold.
    settle().await;
    assert!(second.is_held(), "the second read guard was lost");
    if let Some(writer) = other.try_write().await.ok().flatten() {
        let token = writer.fencing_token();
        let _ = writer.release().await;
        panic!(
            "another writer was granted (token {token}) while the second read guard (token {}) still said held: {}",
            second.fencing_token(),
            second.is_held()
        );
    }
    ok("release the second read", second.release().await);
    got("other write at the end", other.try_write().await)
        .release()
        .await
        .expect("release");
}

/// Another owner's writer is already queued when the holder of the write lock takes
/// the read side (its read entry comes after the queued writer) and then releases
/// the write side: the queued writer must go on waiting while the read side is held,
/// and get the write lock once it is released.
pub(crate) async fn downgrade_with_queued_writer(ctx: &Ctx) {
    let owner = rw(&*ctx.client().await);
    let other = rw(&*ctx.client().await);
    let write = ok("write", owner.write().await);
    let mut waiting = tokio::spawn(async move {
        let guard = other
            .write_with(lock_core::AcquireOptions::wait_for(Duration::from_secs(60)))
            .await;
        (guard, other)
    });
    settle().await;
    assert!(
        !waiting.is_finished(),
        "the other writer got in while the write lock was held"
    );
    let (read, _) = within("downgrade", ctx.slack(), write.downgrade()).await;
    let read = ok("downgrade", read);
    assert_eq!((owner.write_hold_count(), owner.read_hold_count()), (1, 1));
    ok("release write", write.release().await);
    settle().await;
    // A bounded wait: the queued writer must not finish while the read side is held.
    if let Ok(joined) = tokio::time::timeout(ctx.slack(), &mut waiting).await {
        let (guard, _) = joined.expect("writer task");
        match guard {
            Ok(guard) => panic!(
                "the queued writer was granted the write lock (fencing token {}) while the downgraded owner's read guard (token {}) still says held: {}",
                guard.fencing_token(),
                read.fencing_token(),
                read.is_held()
            ),
            Err(err) => panic!("the queued writer failed while the read side was held: {err}"),
        }
    }
    assert!(read.is_held(), "the downgraded read lock was lost");
    assert_eq!(owner.read_hold_count(), 1);
    ok("release read", read.release().await);
    let (joined, _) = within(
        "queued writer after the read side was released",
        ctx.slack() * 2,
        waiting,
    )
    .await;
    let (guard, other) = joined.expect("writer task");
    let guard = ok("queued writer", guard);
    assert_eq!(other.write_hold_count(), 1);
    refused("read while the queued writer holds", owner.try_read().await);
    ok("release", guard.release().await);
}

/// A reader cannot become a writer: only a write guard downgrades, and a write through
/// the reader's own handle is another owner, refused while the read is held. The read
/// hold survives both.
pub(crate) async fn no_upgrade(ctx: &Ctx) {
    let owner = rw(&*ctx.client().await);
    let read = ok("read", owner.read().await);
    expect_err("downgrade a read guard", read.downgrade().await, is_invalid);
    refused("write through the reader's handle", owner.try_write().await);
    assert!(read.is_held());
    assert_eq!(owner.read_hold_count(), 1);
    ok("release", read.release().await);
    got("write after release", owner.try_write().await)
        .release()
        .await
        .expect("release");
}

/// Writers update a counter while readers check, under the read lock, that no writer
/// is inside.
pub(crate) async fn readers_never_see_a_writer(ctx: &Ctx) {
    let writing = Arc::new(AtomicBool::new(false));
    let counter = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for w in 0..6 {
        let lock = rw(&*ctx.client().await);
        let (writing, counter) = (writing.clone(), counter.clone());
        let is_writer = w % 3 == 0;
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                if is_writer {
                    let guard = ok("write", lock.write().await);
                    assert!(!writing.swap(true, Ordering::SeqCst), "two writers");
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    counter.store(seen + 1, Ordering::SeqCst);
                    writing.store(false, Ordering::SeqCst);
                    ok("release", guard.release().await);
                } else {
                    let guard = ok("read", lock.read().await);
                    assert!(!writing.load(Ordering::SeqCst), "a reader saw a writer");
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    assert!(
                        !writing.load(Ordering::SeqCst),
                        "a writer entered during a read"
                    );
                    ok("release", guard.release().await);
                }
            }
        }));
    }
    for task in tasks {
        within("workers", ctx.slack() * 30, task)
            .await
            .0
            .expect("worker panicked");
    }
    assert_eq!(counter.load(Ordering::SeqCst), 20, "lost writes");
}

/// A writer that gives up while readers hold leaves nothing that blocks new readers.
pub(crate) async fn cancelled_writer_leaves_nothing(ctx: &Ctx) {
    let reader = rw(&*ctx.client().await);
    let writer = rw(&*ctx.client().await);
    let newcomer = rw(&*ctx.client().await);
    let read = ok("read", reader.read().await);
    let attempt = tokio::time::timeout(Duration::from_millis(300), writer.write()).await;
    assert!(attempt.is_err(), "writer got in while a reader held");
    let (second_reader, took) = within(
        "reader after cancelled writer",
        ctx.slack() * 2,
        newcomer.read(),
    )
    .await;
    assert!(
        took < ctx.slack(),
        "the cancelled writer blocked readers for {took:?}"
    );
    ok("release", ok("reader", second_reader).release().await);
    ok("release", read.release().await);
    assert_eq!(writer.write_hold_count(), 0);
    got("writer later", writer.try_write().await)
        .release()
        .await
        .expect("release");
}
