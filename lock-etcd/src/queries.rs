//! The requests of the lock recipe, and what their answers say about a contender.

use etcd_client::{
    Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
    TxnResponse,
};
use lock_core::{Error, LockKey, LockKind, Result};

use crate::error;
use crate::keys::Prefix;

/// Where a contender stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Position {
    /// It holds the lock.
    Granted,
    /// Blocked; the answer did not name the key to wait for: ask [`locate`].
    Unknown,
    /// Blocked until this key goes: the newest conflicting key created before its own,
    /// or for a writer with none, a downgrade reader.
    Behind(Vec<u8>),
    /// A permit waiter with exactly as many keys before it as the semaphore has
    /// permits: the first waiter, granted when any key before it goes.
    First,
    /// Its own key is gone (its lease ended, or the lock was force-unlocked).
    Vanished,
}

/// What the first transaction of an acquisition found.
#[derive(Debug)]
pub(crate) enum Placed {
    /// The key was written at this revision (its create revision, the fencing token).
    At { revision: i64, position: Position },
    /// The key already existed, created at this revision: a leftover of this lease
    /// (a release that failed); it must go before this acquisition can count.
    Exists { revision: i64 },
    /// A downgrade found the owner's write key gone (released or lost meanwhile):
    /// nothing was written; the read must queue as an ordinary reader.
    WriteGone,
}

/// The write key a read request of its owner downgrades from: the read key is written
/// only while this key still exists with this create revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HeldWrite {
    pub(crate) key: String,
    pub(crate) revision: i64,
}

fn oldest(limit: i64) -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(limit)
}

/// Any one key of a range.
fn any() -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_limit(1)
        .with_keys_only()
}

/// The newest `limit` keys of a range created before `revision`.
fn newest_before(revision: i64, limit: Option<i64>) -> GetOptions {
    let options = GetOptions::new()
        .with_prefix()
        .with_max_create_revision(revision - 1)
        .with_sort(SortTarget::Create, SortOrder::Descend);
    match limit {
        Some(limit) => options.with_limit(limit),
        None => options,
    }
}

/// The first transaction, and the only one when the lock is free (etcd's recipe):
/// create the key if it does not exist, and in the same revision read who is first.
///
/// With `downgrade` (a read request of the holder of the write lock), the key is a
/// downgrade reader's and is written only while the write key still exists: such a
/// reader holds at once, and every writer waits for it whatever its place, so a writer
/// queued before the downgrade never gets in while the read side is held.
pub(crate) fn place(
    prefix: &Prefix,
    kind: LockKind,
    key: &str,
    value: &[u8],
    lease: i64,
    downgrade: Option<&HeldWrite>,
) -> Txn {
    let put = TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease)));
    let absent = Compare::create_revision(key, CompareOp::Equal, 0);
    let own = TxnOp::get(key, Some(GetOptions::new().with_keys_only()));
    if let Some(write) = downgrade {
        let write_there =
            Compare::create_revision(write.key.as_str(), CompareOp::Equal, write.revision);
        return Txn::new()
            .when([absent, write_there])
            .and_then([put])
            .or_else([own]);
    }
    let reads = match kind {
        // Permits are placed by `place_permit`.
        LockKind::Exclusive | LockKind::Fair | LockKind::Permit | LockKind::Leader => {
            vec![TxnOp::get(prefix.range(), Some(oldest(1).with_keys_only()))]
        }
        // The oldest key, and whether any downgrade reader exists.
        LockKind::Write => vec![
            TxnOp::get(prefix.range(), Some(oldest(1).with_keys_only())),
            TxnOp::get(prefix.downgrades(), Some(any())),
        ],
        // Any writer: all of them are older than this key.
        LockKind::Read => vec![TxnOp::get(prefix.writers(), Some(any()))],
    };
    let mut then = vec![put];
    then.extend(reads);
    Txn::new().when([absent]).and_then(then).or_else([own])
}

/// A range of keys `[start, end)` holds no key.
fn empty(start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> Compare {
    Compare::create_revision(start, CompareOp::Equal, 0).with_range(end)
}

/// The first key after every key that starts with `prefix` (which ends in `/`).
fn past(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

/// [`place`] for a permit of a semaphore of `permits`: write the key only if no key
/// of another count is in the range (so every contender agrees on the count), and in
/// the same revision count the keys: the new key is the newest, so it holds if the
/// count is at most `permits`. Otherwise read the own key (a leftover) and a key of
/// another count.
pub(crate) fn place_permit(
    prefix: &Prefix,
    key: &str,
    value: &[u8],
    lease: i64,
    permits: u32,
) -> Txn {
    let range = prefix.range();
    let ours = prefix.permits_range(permits);
    let (before, after) = (ours.clone(), past(&ours));
    let end = past(range);
    let put = TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease)));
    let count = GetOptions::new().with_prefix().with_count_only();
    let one = |to: Vec<u8>| {
        GetOptions::new()
            .with_range(to)
            .with_limit(1)
            .with_keys_only()
    };
    Txn::new()
        .when([
            Compare::create_revision(key, CompareOp::Equal, 0),
            empty(range, before.clone()),
            empty(after.clone(), end.clone()),
        ])
        .and_then([put, TxnOp::get(range, Some(count))])
        .or_else([
            TxnOp::get(key, Some(GetOptions::new().with_keys_only())),
            TxnOp::get(range, Some(one(before.into_bytes()))),
            TxnOp::get(after, Some(one(end))),
        ])
}

/// Reads the answer to [`place_permit`].
pub(crate) fn placed_permit(
    reply: &TxnResponse,
    prefix: &Prefix,
    lock: &LockKey,
    permits: u32,
) -> Result<Placed> {
    let ops = reply.op_responses();
    if !reply.succeeded() {
        let reads = gets(&ops);
        let first = |i: usize| reads.get(i).and_then(|kvs| kvs.first());
        if let Some(own) = first(0) {
            return Ok(Placed::Exists {
                revision: own.create_revision(),
            });
        }
        let other = first(1).or(first(2)).map(|kv| prefix.permits_of(kv.key()));
        return Err(match other {
            Some(Some(in_force)) => Error::other_permit_count(lock, in_force, permits),
            _ => error::unexpected("a semaphore key without a permit count"),
        });
    }
    let revision = reply
        .header()
        .map(|h| h.revision())
        .ok_or_else(|| error::unexpected("a transaction answer without a header"))?;
    let keys = counts(&ops).first().copied().unwrap_or(i64::MAX);
    let position = if keys <= i64::from(permits) {
        Position::Granted
    } else {
        Position::Unknown
    };
    Ok(Placed::At { revision, position })
}

/// [`locate`] for a permit: is the own key still there, and the newest keys created
/// before it, up to one more than the semaphore has permits. (etcd counts a range
/// before filtering it by revision, so a count cannot say how many keys came before.)
pub(crate) fn locate_permit(prefix: &Prefix, key: &str, revision: i64, permits: u32) -> Txn {
    let limit = i64::from(permits) + 1;
    Txn::new().and_then([
        TxnOp::get(key, Some(GetOptions::new().with_keys_only())),
        TxnOp::get(
            prefix.range(),
            Some(newest_before(revision, Some(limit)).with_keys_only()),
        ),
    ])
}

/// Reads the answer to [`locate_permit`]: fewer keys before than `permits` hold;
/// exactly `permits` make the first waiter, which waits for any key to go; a later
/// waiter waits for its predecessor to go or to be granted (re-stamped).
pub(crate) fn located_permit(reply: &TxnResponse, revision: i64, permits: u32) -> Position {
    let ops = reply.op_responses();
    let reads = gets(&ops);
    if !own_there(&reads, revision) {
        return Position::Vanished;
    }
    let before = reads.get(1).map(Vec::as_slice).unwrap_or_default();
    let permits = usize::try_from(permits).unwrap_or(usize::MAX);
    match before.len().cmp(&permits) {
        std::cmp::Ordering::Less => Position::Granted,
        std::cmp::Ordering::Equal => Position::First,
        // Newest first: the first is the predecessor.
        std::cmp::Ordering::Greater => Position::Behind(before[0].key().to_vec()),
    }
}

/// Reads the answer to [`place`] (`downgrade`: whether it placed a downgrade reader).
pub(crate) fn placed(
    reply: &TxnResponse,
    kind: LockKind,
    key: &str,
    downgrade: bool,
) -> Result<Placed> {
    let ops = reply.op_responses();
    if !reply.succeeded() {
        let existing = gets(&ops)
            .first()
            .and_then(|kvs| kvs.first())
            .map(|kv| kv.create_revision());
        return match existing {
            Some(revision) => Ok(Placed::Exists { revision }),
            // The key is absent, so the write key's compare failed.
            None if downgrade => Ok(Placed::WriteGone),
            None => Err(error::unexpected(
                "the lock key exists but could not be read",
            )),
        };
    }
    let revision = reply
        .header()
        .map(|h| h.revision())
        .ok_or_else(|| error::unexpected("a transaction answer without a header"))?;
    if downgrade {
        return Ok(Placed::At {
            revision,
            position: Position::Granted,
        });
    }
    let reads = gets(&ops);
    let first = |i: usize| reads.get(i).and_then(|kvs| kvs.first());
    let own_first = first(0).is_some_and(|kv| kv.key() == key.as_bytes());
    let granted = match kind {
        LockKind::Exclusive | LockKind::Fair | LockKind::Permit | LockKind::Leader => own_first,
        LockKind::Write => own_first && first(1).is_none(),
        LockKind::Read => first(0).is_none(),
    };
    let position = if granted {
        Position::Granted
    } else {
        Position::Unknown
    };
    Ok(Placed::At { revision, position })
}

/// The check after every wake-up, in one transaction: is the own key still there
/// (with its create revision: the lease behind it is alive, etcd #11456), and which
/// conflicting key created before it is the newest? A writer also looks for any
/// downgrade reader, created before or after it.
pub(crate) fn locate(prefix: &Prefix, kind: LockKind, key: &str, revision: i64) -> Txn {
    Txn::new().and_then(checks(prefix, kind, key, revision))
}

/// The reads of [`locate`]: the own key, then the conflicting keys to look for.
fn checks(prefix: &Prefix, kind: LockKind, key: &str, revision: i64) -> Vec<TxnOp> {
    let own = TxnOp::get(key, Some(GetOptions::new().with_keys_only()));
    let before = |range: String| {
        TxnOp::get(
            range,
            Some(newest_before(revision, Some(1)).with_keys_only()),
        )
    };
    match kind {
        LockKind::Exclusive | LockKind::Fair | LockKind::Permit | LockKind::Leader => {
            vec![own, before(prefix.range().to_owned())]
        }
        LockKind::Write => vec![
            own,
            before(prefix.range().to_owned()),
            TxnOp::get(prefix.downgrades(), Some(any())),
        ],
        LockKind::Read => vec![own, before(prefix.writers())],
    }
}

/// The check after a wake-up of an exclusive, fair, read or write waiter, and its
/// grant's fence, in one transaction: if the own key is still the one created at
/// `revision`, write it again (keeping its value and whichever lease it is on: a claim
/// whose answer was lost may land after the grant, and an `extend` may have moved the
/// key meanwhile) and, in the same revision, read what [`locate`] reads. When that
/// finds the key first, the write's revision fences the grant, as [`restamp`]'s would:
/// keys created before it can only have gone since.
/// A waiter not yet first has written its key again for nothing, which its own waiters
/// (watching for its deletion) do not notice. Not for permits, whose waiters take a
/// write of the key before theirs as its grant, nor for leaderships, whose term is the
/// key's create revision.
pub(crate) fn claim(prefix: &Prefix, kind: LockKind, key: &str, revision: i64) -> Txn {
    let keep = PutOptions::new().with_ignore_value().with_ignore_lease();
    let rewrite = TxnOp::put(key, "", Some(keep));
    let mut ops = vec![rewrite];
    ops.extend(checks(prefix, kind, key, revision));
    Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, revision)])
        .and_then(ops)
}

/// Reads the answer to [`claim`]: where the waiter stands, and for a waiter found first
/// the revision that fences its grant.
pub(crate) fn claimed(
    reply: &TxnResponse,
    prefix: &Prefix,
    revision: i64,
) -> (Position, Option<i64>) {
    if !reply.succeeded() {
        return (Position::Vanished, None);
    }
    let position = located(reply, prefix, revision);
    let fence = match position {
        Position::Granted => reply.header().map(|h| h.revision()),
        _ => None,
    };
    (position, fence)
}

/// Reads the answer to [`locate`]. `Unknown` means the newest earlier key belongs to a
/// lock whose name extends this one's: [`scan`] finds the real predecessor.
pub(crate) fn located(reply: &TxnResponse, prefix: &Prefix, revision: i64) -> Position {
    let ops = reply.op_responses();
    let reads = gets(&ops);
    if !own_there(&reads, revision) {
        return Position::Vanished;
    }
    // The newest key before ours; else (a writer) a downgrade reader.
    let blocker = reads.iter().skip(1).find_map(|kvs| kvs.first());
    match blocker {
        None => Position::Granted,
        Some(kv) if prefix.is_contender(kv.key()) => Position::Behind(kv.key().to_vec()),
        Some(_) => Position::Unknown,
    }
}

/// Every key of the exclusive range created before `revision` (keys only), for
/// [`scanned`]: needed only when keys of a nested lock name sit in the range.
pub(crate) fn scan(prefix: &Prefix, revision: i64) -> (String, GetOptions) {
    (
        prefix.range().to_owned(),
        newest_before(revision, None).with_keys_only(),
    )
}

/// The newest contender among the keys [`scan`] returned (newest first).
pub(crate) fn scanned(kvs: &[etcd_client::KeyValue], prefix: &Prefix) -> Position {
    match kvs.iter().find(|kv| prefix.is_contender(kv.key())) {
        Some(kv) => Position::Behind(kv.key().to_vec()),
        None => Position::Granted,
    }
}

/// Deletes `key` only if it is still the one created at `revision`: a stale release
/// never touches a newer key of the same lease (etcd #22082).
pub(crate) fn delete_if(key: &[u8], revision: i64) -> Txn {
    Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, revision)])
        .and_then([TxnOp::delete(key, None)])
}

/// Writes `key` again (same value, same lease) if it is still the one created at
/// `revision`: the write's revision fences a grant that came after a wait, since the
/// create revision was drawn when the waiter queued, before grants it waited behind.
pub(crate) fn restamp(key: &[u8], revision: i64, value: &[u8], lease: i64) -> Txn {
    Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, revision)])
        .and_then([TxnOp::put(
            key,
            value,
            Some(PutOptions::new().with_lease(lease)),
        )])
}

/// An election leader's new value on its key, guarded by the key's create `revision`
/// as etcd's `Election.Proclaim` is; the key stays on whichever lease it is on now (an
/// `extend` may be moving it).
pub(crate) fn proclaim(key: &[u8], revision: i64, value: &[u8]) -> Txn {
    Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, revision)])
        .and_then([TxnOp::put(
            key,
            value,
            Some(PutOptions::new().with_ignore_lease()),
        )])
}

/// Whether the first read (of the own key) found it with its create `revision`: the
/// lease behind it is alive (etcd #11456).
fn own_there(reads: &[Vec<etcd_client::KeyValue>], revision: i64) -> bool {
    reads
        .first()
        .and_then(|kvs| kvs.first())
        .is_some_and(|kv| kv.create_revision() == revision)
}

/// The counts of the range reads among `ops`, in order.
fn counts(ops: &[TxnOpResponse]) -> Vec<i64> {
    ops.iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get.count()),
            _ => None,
        })
        .collect()
}

/// The key-value lists of the range reads among `ops`, in order.
pub(crate) fn gets(ops: &[TxnOpResponse]) -> Vec<Vec<etcd_client::KeyValue>> {
    ops.iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get.kvs().to_vec()),
            _ => None,
        })
        .collect()
}
