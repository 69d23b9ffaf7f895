//! Where each lock lives in etcd's key space.
//!
//! * Exclusive lock `name` in namespace `ns`: the prefix `ns/name`, one key per
//!   contender `ns/name/<lease id in lowercase hex>`: exactly the layout of etcd's
//!   `concurrency.Mutex`, `etcdctl lock ns/name` and the v3lock service, so they all
//!   exclude each other (the recipe reads keys and revisions only; our value, below,
//!   is for operators, where etcdctl's is empty).
//! * Election `name`: the exclusive lock's layout, `ns/name/<lease hex>`, with the
//!   candidate's value as the key's value: exactly etcd's `concurrency.Election` and
//!   `etcdctl elect ns/name`. As in etcd, an election and the exclusive lock of one
//!   name are one queue.
//! * Fair lock: `ns/name<US>fair/<lease hex>-<n>`.
//! * Semaphore of `p` permits: `ns/name<US>sem/<p>/<lease hex>-<n>`. The count in every
//!   key lets one transaction refuse a contender whose count differs from the holders'
//!   and waiters' (the range outside `sem/<p>/` must be empty).
//! * Read-write lock: writers `ns/name<US>rw/w/<lease hex>-<n>`, readers
//!   `ns/name<US>rw/r/<lease hex>-<n>`, and the readers of a downgrade (the read side
//!   taken by the holder of the write lock) `ns/name<US>rw/d/<lease hex>-<n>`.
//!
//! Every lock key of ours has the value `<owner token>\n<client description>`, which
//! `inspect` reports.
//!
//! `<US>` is the control character U+001F, which no valid lock name or namespace
//! contains: so no name can produce a fair or read-write prefix, and those prefixes
//! never fall inside an exclusive lock's range `ns/name/`. Lock names may contain `/`:
//! the exclusive lock `a` then sees the keys of lock `a/b` (`ns/a/b/<hex>`) in its range,
//! and skips them because their rest after `ns/a/` contains a further `/`.

use lock_core::{LockFamily, LockKey, LockKind};

/// The separator between a lock's name and its family marker.
const FAMILY_MARK: char = '\u{1f}';

/// The key range of one lock: its prefix plus `/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Prefix {
    /// With the trailing `/`.
    range: String,
    family: LockFamily,
}

impl Prefix {
    pub(crate) fn new(key: &LockKey, family: LockFamily) -> Self {
        let base = key.joined('/');
        let range = match family {
            LockFamily::Exclusive | LockFamily::Election => format!("{base}/"),
            LockFamily::Fair => format!("{base}{FAMILY_MARK}fair/"),
            LockFamily::ReadWrite => format!("{base}{FAMILY_MARK}rw/"),
            LockFamily::Semaphore => format!("{base}{FAMILY_MARK}sem/"),
        };
        Prefix { range, family }
    }

    /// Which lock family this is the range of.
    pub(crate) fn family(&self) -> LockFamily {
        self.family
    }

    /// Every contender's key starts with this.
    pub(crate) fn range(&self) -> &str {
        &self.range
    }

    /// The range of the writers of a read-write lock.
    pub(crate) fn writers(&self) -> String {
        format!("{}w/", self.range)
    }

    /// The range of the downgrade readers of a read-write lock: read keys written by
    /// the holder of the write lock, which every writer waits for whatever its place.
    pub(crate) fn downgrades(&self) -> String {
        format!("{}d/", self.range)
    }

    /// The key of a downgrade reader on `lease` (see [`Prefix::downgrades`]).
    pub(crate) fn downgrade_key(&self, lease: i64, seq: u64) -> String {
        format!("{}d/{lease:x}-{seq}", self.range)
    }

    /// The key a contender of `kind` on `lease` writes (`permits`: a semaphore's
    /// count, for a permit). `seq` makes fair, read-write and permit keys unique per
    /// acquisition, so owners sharing the client's lease are separate contenders; the
    /// exclusive key is the bare lease id (etcd's layout).
    pub(crate) fn own_key(&self, kind: LockKind, lease: i64, seq: u64, permits: u32) -> String {
        match kind {
            LockKind::Exclusive | LockKind::Leader => format!("{}{lease:x}", self.range),
            LockKind::Fair => format!("{}{lease:x}-{seq}", self.range),
            LockKind::Permit => format!("{}{lease:x}-{seq}", self.permits_range(permits)),
            LockKind::Write => format!("{}w/{lease:x}-{seq}", self.range),
            LockKind::Read => format!("{}r/{lease:x}-{seq}", self.range),
        }
    }

    /// The range of a semaphore's keys made with `permits`.
    pub(crate) fn permits_range(&self, permits: u32) -> String {
        format!("{}{permits}/", self.range)
    }

    /// The permit count a semaphore key was made with.
    pub(crate) fn permits_of(&self, key: &[u8]) -> Option<u32> {
        let rest = key.strip_prefix(self.range.as_bytes())?;
        let end = rest.iter().position(|b| *b == b'/')?;
        std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
    }

    /// Whether `key` (from this prefix's range) is a contender for this lock, rather
    /// than the key of a lock whose name extends this one's past a `/`.
    pub(crate) fn is_contender(&self, key: &[u8]) -> bool {
        match self.family {
            LockFamily::Exclusive | LockFamily::Election => key
                .strip_prefix(self.range.as_bytes())
                .is_some_and(|rest| !rest.is_empty() && !rest.contains(&b'/')),
            LockFamily::Fair | LockFamily::ReadWrite | LockFamily::Semaphore => {
                key.starts_with(self.range.as_bytes())
            }
        }
    }
}

/// Whether a read-write key is a writer's.
#[cfg(test)]
fn is_writer(prefix: &Prefix, key: &[u8]) -> bool {
    key.starts_with(prefix.writers().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::{LockName, Namespace};

    fn key(ns: &str, name: &str) -> LockKey {
        LockKey::new(Namespace::new(ns).unwrap(), LockName::new(name).unwrap())
    }

    #[test]
    fn exclusive_layout_is_etcds_and_families_do_not_overlap() {
        let p = Prefix::new(&key("ns", "jobs"), LockFamily::Exclusive);
        assert_eq!(
            p.own_key(LockKind::Exclusive, 0x694d8a2b1c, 7, 1),
            "ns/jobs/694d8a2b1c"
        );
        assert!(p.is_contender(b"ns/jobs/694d8a2b1c"));
        assert!(
            !p.is_contender(b"ns/jobs/sub/694d8a2b1c"),
            "a nested lock's key"
        );
        let fair = Prefix::new(&key("ns", "jobs"), LockFamily::Fair);
        let rw = Prefix::new(&key("ns", "jobs"), LockFamily::ReadWrite);
        for other in [&fair, &rw] {
            let k = other.own_key(LockKind::Fair, 1, 2, 1);
            assert!(
                !k.starts_with(p.range()),
                "{k:?} inside the exclusive range"
            );
        }
        let w = rw.own_key(LockKind::Write, 10, 1, 1);
        assert!(is_writer(&rw, w.as_bytes()));
        assert!(!is_writer(
            &rw,
            rw.own_key(LockKind::Read, 10, 2, 1).as_bytes()
        ));
        let d = rw.downgrade_key(10, 3);
        assert!(d.starts_with(&rw.downgrades()) && d.starts_with(rw.range()));
        assert!(!is_writer(&rw, d.as_bytes()));
        assert!(!rw
            .own_key(LockKind::Read, 10, 2, 1)
            .starts_with(&rw.downgrades()));
        assert_eq!(
            Prefix::new(&key("tenant", "x"), LockFamily::Exclusive).range(),
            "tenant/x/"
        );
    }

    #[test]
    fn a_permit_key_carries_its_semaphores_count() {
        let sem = Prefix::new(&key("ns", "exports"), LockFamily::Semaphore);
        let k = sem.own_key(LockKind::Permit, 0xab, 3, 12);
        assert_eq!(k, "ns/exports\u{1f}sem/12/ab-3");
        assert!(k.starts_with(&sem.permits_range(12)));
        assert!(!k.starts_with(&sem.permits_range(1)), "1 is a prefix of 12");
        assert_eq!(sem.permits_of(k.as_bytes()), Some(12));
        assert_eq!(sem.permits_of(b"ns/exports\x1fsem/x/ab-3"), None);
        assert!(sem.is_contender(k.as_bytes()));
    }
}
