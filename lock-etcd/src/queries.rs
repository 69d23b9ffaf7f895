//! The requests of the lock recipe, and what their answers say about a contender.

use etcd_client::{
    Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
    TxnResponse,
};
use lock_core::{LockKind, Result};

use crate::error;
use crate::keys::{is_writer, Prefix};

/// Where a contender stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Position {
    /// It holds the lock.
    Granted,
    /// Blocked; the answer did not name the key to wait for: ask [`locate`].
    Unknown,
    /// Blocked until this key (the newest conflicting key created before its own) goes.
    Behind(Vec<u8>),
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
}

fn oldest(limit: i64) -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(limit)
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
pub(crate) fn place(prefix: &Prefix, kind: LockKind, key: &str, value: &[u8], lease: i64) -> Txn {
    let put = TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease)));
    let reads = match kind {
        LockKind::Exclusive | LockKind::Fair | LockKind::Write => {
            vec![TxnOp::get(prefix.range(), Some(oldest(1).with_keys_only()))]
        }
        // The oldest key (downgrade: is it this owner's write lock?) and the two
        // oldest writers (at most one of them is this owner's).
        LockKind::Read => vec![
            TxnOp::get(prefix.range(), Some(oldest(1))),
            TxnOp::get(prefix.writers(), Some(oldest(2))),
        ],
    };
    let mut then = vec![put];
    then.extend(reads);
    Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then(then)
        .or_else([TxnOp::get(key, Some(GetOptions::new().with_keys_only()))])
}

/// Reads the answer to [`place`].
pub(crate) fn placed(
    reply: &TxnResponse,
    prefix: &Prefix,
    kind: LockKind,
    key: &str,
    owner: &str,
) -> Result<Placed> {
    let ops = reply.op_responses();
    if !reply.succeeded() {
        let revision = gets(&ops)
            .first()
            .and_then(|kvs| kvs.first())
            .map(|kv| kv.create_revision())
            .ok_or_else(|| error::unexpected("the lock key exists but could not be read"))?;
        return Ok(Placed::Exists { revision });
    }
    let revision = reply
        .header()
        .map(|h| h.revision())
        .ok_or_else(|| error::unexpected("a transaction answer without a header"))?;
    let reads = gets(&ops);
    let position = match kind {
        LockKind::Exclusive | LockKind::Fair | LockKind::Write => {
            match reads.first().and_then(|kvs| kvs.first()) {
                Some(first) if first.key() == key.as_bytes() => Position::Granted,
                _ => Position::Unknown,
            }
        }
        LockKind::Read => {
            let oldest = reads.first().and_then(|kvs| kvs.first());
            let downgrade = oldest
                .is_some_and(|kv| is_writer(prefix, kv.key()) && kv.value() == owner.as_bytes());
            let writers = reads.get(1).map(Vec::as_slice).unwrap_or_default();
            if downgrade || writers.iter().all(|kv| kv.value() == owner.as_bytes()) {
                Position::Granted
            } else {
                Position::Unknown
            }
        }
    };
    Ok(Placed::At { revision, position })
}

/// The check after every wake-up, in one transaction: is the own key still there
/// (with its create revision: the lease behind it is alive, etcd #11456), and which
/// conflicting key created before it is the newest?
pub(crate) fn locate(prefix: &Prefix, kind: LockKind, key: &str, revision: i64) -> Txn {
    let own = TxnOp::get(key, Some(GetOptions::new().with_keys_only()));
    let before = match kind {
        LockKind::Exclusive | LockKind::Fair | LockKind::Write => TxnOp::get(
            prefix.range(),
            Some(newest_before(revision, Some(1)).with_keys_only()),
        ),
        LockKind::Read => TxnOp::get(prefix.writers(), Some(newest_before(revision, Some(2)))),
    };
    Txn::new().and_then([own, before])
}

/// Reads the answer to [`locate`]. `Unknown` means the newest earlier key belongs to a
/// lock whose name extends this one's: [`scan`] finds the real predecessor.
pub(crate) fn located(
    reply: &TxnResponse,
    prefix: &Prefix,
    kind: LockKind,
    revision: i64,
    owner: &str,
) -> Position {
    let ops = reply.op_responses();
    let reads = gets(&ops);
    let own_there = reads
        .first()
        .and_then(|kvs| kvs.first())
        .is_some_and(|kv| kv.create_revision() == revision);
    if !own_there {
        return Position::Vanished;
    }
    let before = reads.get(1).map(Vec::as_slice).unwrap_or_default();
    let blocker = match kind {
        LockKind::Read => before.iter().find(|kv| kv.value() != owner.as_bytes()),
        _ => before.first(),
    };
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

/// The key-value lists of the range reads among `ops`, in order.
pub(crate) fn gets(ops: &[TxnOpResponse]) -> Vec<Vec<etcd_client::KeyValue>> {
    ops.iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get.kvs().to_vec()),
            _ => None,
        })
        .collect()
}
