//! Who holds a lock, as its keys in etcd tell it, and breaking one holder.
//!
//! A key's value is its owner token, a newline and the client's description of itself
//! (`etcdctl lock` writes an empty value). Its token is the revision of its last write:
//! the create for a grant on the first look, the re-stamp for one after a wait (an
//! `extend` to another length writes the key again, and moves it on).

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp};
use lock_core::{HolderInfo, LockFamily, LockInfo, LockKey, LockKind, Result};

use crate::backend::Inner;
use crate::error::within;
use crate::keys::Prefix;

/// How many holders' keys `force_unlock` deletes at once (a semaphore may have many).
const DELETES_AT_ONCE: usize = 100;

/// The value of our keys.
pub(crate) fn value(owner: &str, description: &str) -> Vec<u8> {
    format!("{owner}\n{description}").into_bytes()
}

/// Every holder of `family` on `key`, and how many contenders wait behind them.
pub(crate) async fn inspect(inner: &Inner, key: &LockKey, family: LockFamily) -> Result<LockInfo> {
    let prefix = Prefix::new(key, family);
    let queue = contenders(inner, &prefix).await?;
    let holding = holders(&prefix, &queue);
    let infos = holding.iter().map(|kv| holder_info(&prefix, kv)).collect();
    Ok(LockInfo::new(infos, Some(queue.len() - holding.len())))
}

/// Deletes every holder's key, each only if it was not written since (a key written
/// meanwhile is a new grant); the waiters' keys stay, so they keep their places and
/// the next in line is granted as after a release. Returns whether any was deleted.
pub(crate) async fn force_unlock(inner: &Inner, key: &LockKey, family: LockFamily) -> Result<bool> {
    let prefix = Prefix::new(key, family);
    let queue = contenders(inner, &prefix).await?;
    let mut any = false;
    for chunk in holders(&prefix, &queue).chunks(DELETES_AT_ONCE) {
        // One transaction per holder: a compare that fails skips only its own delete.
        let deletes = chunk
            .iter()
            .map(|kv| delete_unchanged(inner, "force_unlock", kv));
        for deleted in futures::future::join_all(deletes).await {
            any |= deleted?;
        }
    }
    Ok(any)
}

/// Deletes `kv`'s key if it was not written since it was read; `what` names the call
/// in errors and metrics.
async fn delete_unchanged(inner: &Inner, what: &'static str, kv: &KeyValue) -> Result<bool> {
    let txn = Txn::new()
        .when([Compare::mod_revision(
            kv.key(),
            CompareOp::Equal,
            kv.mod_revision(),
        )])
        .and_then([TxnOp::delete(kv.key(), None)]);
    Ok(inner.txn(what, txn).await?.succeeded())
}

/// Deletes the holder's key whose token is `fence`, only if it was not written since.
pub(crate) async fn force_unlock_holder(
    inner: &Inner,
    key: &LockKey,
    family: LockFamily,
    fence: u64,
) -> Result<bool> {
    let prefix = Prefix::new(key, family);
    let queue = contenders(inner, &prefix).await?;
    let Some(kv) = holders(&prefix, &queue)
        .into_iter()
        .find(|kv| token(&prefix, kv) == Some(fence))
    else {
        return Ok(false);
    };
    delete_unchanged(inner, "force_unlock_holder", kv).await
}

/// The lock's contenders, oldest first.
async fn contenders(inner: &Inner, prefix: &Prefix) -> Result<Vec<KeyValue>> {
    let mut kv = inner.client.kv_client();
    let options = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend);
    let found = within(
        "inspect",
        inner.config.request_timeout(),
        kv.get(prefix.range(), Some(options)),
    )
    .await?;
    Ok(found
        .kvs()
        .iter()
        .filter(|kv| prefix.is_contender(kv.key()))
        .cloned()
        .collect())
}

/// The holders among `queue` (oldest first): the first key; for a semaphore the first
/// as many as its count; for a read-write lock the readers before the first writer (or
/// that writer alone), and every downgrade reader.
fn holders<'a>(prefix: &Prefix, queue: &'a [KeyValue]) -> Vec<&'a KeyValue> {
    let writer = |kv: &KeyValue| kind_of(prefix, kv) == LockKind::Write;
    let front = match queue.first() {
        None => 0,
        Some(first) if prefix.family() == LockFamily::Semaphore => {
            let permits = prefix.permits_of(first.key()).unwrap_or(1);
            usize::try_from(permits).map_or(queue.len(), |n| n.min(queue.len()))
        }
        Some(first) if kind_of(prefix, first) == LockKind::Read => {
            queue.iter().take_while(|kv| !writer(kv)).count()
        }
        Some(_) => 1,
    };
    let downgrades = prefix.downgrades();
    queue
        .iter()
        .enumerate()
        .filter(|(i, kv)| *i < front || kv.key().starts_with(downgrades.as_bytes()))
        .map(|(_, kv)| kv)
        .collect()
}

/// Which side a key of this lock holds.
fn kind_of(prefix: &Prefix, kv: &KeyValue) -> LockKind {
    match prefix.family() {
        LockFamily::Exclusive => LockKind::Exclusive,
        LockFamily::Election => LockKind::Leader,
        LockFamily::Fair => LockKind::Fair,
        LockFamily::Semaphore => LockKind::Permit,
        LockFamily::ReadWrite if kv.key().starts_with(prefix.writers().as_bytes()) => {
            LockKind::Write
        }
        LockFamily::ReadWrite => LockKind::Read,
    }
}

/// A holder's token: the revision of its key's last write for a lock; for an election
/// the create revision, as a proclaim writes the key again.
fn token(prefix: &Prefix, kv: &KeyValue) -> Option<u64> {
    let revision = match prefix.family() {
        LockFamily::Election => kv.create_revision(),
        _ => kv.mod_revision(),
    };
    u64::try_from(revision).ok()
}

fn holder_info(prefix: &Prefix, kv: &KeyValue) -> HolderInfo {
    let kind = kind_of(prefix, kv);
    let text = String::from_utf8_lossy(kv.value());
    if kind == LockKind::Leader {
        // The value is the leader's, nothing else (etcd's layout).
        let info = HolderInfo::new(kind).with_description(text);
        return match token(prefix, kv) {
            Some(term) => info.with_fencing_token(term),
            None => info,
        };
    }
    let (owner, description) = match text.split_once('\n') {
        Some((owner, description)) => (owner.to_owned(), Some(description.to_owned())),
        None => (text.into_owned(), None),
    };
    let mut info = HolderInfo::new(kind);
    if !owner.is_empty() {
        info = info.with_owner(owner);
    }
    if let Some(description) = description.filter(|d| !d.is_empty()) {
        info = info.with_description(description);
    }
    if let Some(token) = token(prefix, kv) {
        info = info.with_fencing_token(token);
    }
    info
}
