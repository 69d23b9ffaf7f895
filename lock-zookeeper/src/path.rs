//! Where each lock lives in the tree, and the names of contender nodes (Curator's
//! layout), parsed back into their order.
//!
//! Layout (below the chroot):
//!
//! * exclusive lock: `/<namespace>/<name>` (the bare path, as Curator's
//!   `InterProcessMutex` on the same path uses it);
//! * fair lock: `/<namespace>/<name>%fair`;
//! * read-write lock: `/<namespace>/<name>%rw`;
//! * semaphore: `/<namespace>/<name>%sem`, whose contenders carry the count they were
//!   made with: `_c_<uuid>-__PERMITS_<count>-lock-<seq>`.
//!
//! The namespace is one path segment; the name keeps its `/` as segments where that
//! gives a valid path. Anything ZooKeeper refuses or that could be mistaken for
//! something else is percent-encoded (always `%`, so `%fair` / `%rw` can never come
//! from a name, and decoding is unambiguous: distinct names give distinct paths).

use std::fmt::Write as _;

use lock_core::{LockFamily, LockKey, LockKind};

/// The marker of exclusive and fair contenders, as Curator's `InterProcessMutex` writes it.
pub(crate) const LOCK_MARKER: &str = "-lock-";
/// The marker of an election candidate's node, Curator's `LeaderLatch`'s.
pub(crate) const LATCH_MARKER: &str = "-latch-";
/// The markers of kazoo's `Lock`/`WriteLock` and `ReadLock` nodes.
const KAZOO_LOCK_MARKER: &str = "__lock__";
const KAZOO_READ_MARKER: &str = "__rlock__";
/// The markers of Curator's `InterProcessReadWriteLock` nodes.
pub(crate) const READ_MARKER: &str = "-__READ__";
pub(crate) const WRITE_MARKER: &str = "-__WRIT__";
/// Put before [`READ_MARKER`] in the node of a downgrade (the read side taken by the
/// holder of the write lock): `_c_<uuid>-__DOWN__-__READ__<seq>`. Curator still sees a
/// reader in its sequence order (it classifies by `__WRIT__` and sorts by what follows
/// `__READ__`); our writers wait for every such node, whatever its place.
const DOWNGRADE_TAG: &str = "-__DOWN__";
/// Put before [`LOCK_MARKER`] in a permit's node, followed by its semaphore's count.
const PERMITS_TAG: &str = "-__PERMITS_";

/// The node every lock of `family` on `key` queues under.
pub(crate) fn lock_path(key: &LockKey, family: LockFamily) -> String {
    let mut path = String::new();
    if !key.namespace().as_str().is_empty() {
        path.push('/');
        encode_segment(&mut path, key.namespace().as_str(), true);
    }
    let name = key.name().as_str();
    let segments_ok = name
        .split('/')
        .all(|s| !s.is_empty() && s != "." && s != "..");
    if segments_ok {
        for segment in name.split('/') {
            path.push('/');
            let first = path.len() == 1;
            encode_segment(&mut path, segment, first);
        }
    } else {
        // A name like "a//b" or "/x" has no valid segment form: keep it one segment.
        path.push('/');
        let first = path.len() == 1;
        encode_segment(&mut path, name, first);
    }
    match family {
        LockFamily::Exclusive => {}
        LockFamily::Fair => path.push_str("%fair"),
        LockFamily::ReadWrite => path.push_str("%rw"),
        LockFamily::Semaphore => path.push_str("%sem"),
        LockFamily::Election => path.push_str("%election"),
    }
    path
}

/// Appends `segment` percent-encoded where needed (`/` always is). `at_root`: the
/// segment is a child of the root, where `zookeeper` is the server's own node.
fn encode_segment(out: &mut String, segment: &str, at_root: bool) {
    // A segment that looks like a contender would join the queue of its parent lock
    // (lock "a" and lock "a/x-lock-0000000001" or "a/x__lock__0000000000"): break
    // every marker `parse` knows, Curator's and kazoo's, by encoding `-`/`_`.
    let looks_like_contender = [
        "lock-",
        "__READ__",
        "__WRIT__",
        KAZOO_LOCK_MARKER,
        KAZOO_READ_MARKER,
    ]
    .iter()
    .any(|marker| segment.contains(marker));
    // "/zookeeper" is the server's own subtree; "." and ".." are not valid segments.
    let reserved = (at_root && segment == "zookeeper") || segment == "." || segment == "..";
    for (i, c) in segment.char_indices() {
        let encode = match c {
            '%' | '/' => true,
            '-' | '_' => looks_like_contender,
            // ZooKeeper refuses private-use code points, U+FFF0.. and anything outside
            // the BMP (Java sees those as surrogates, which it refuses too).
            '\u{E000}'..='\u{F8FF}' | '\u{FFF0}'..='\u{FFFF}' => true,
            c if c as u32 > 0xFFFF => true,
            _ => reserved && i == 0,
        };
        if encode {
            let mut buf = [0u8; 4];
            for byte in c.encode_utf8(&mut buf).bytes() {
                let _ = write!(out, "%{byte:02X}");
            }
        } else {
            out.push(c);
        }
    }
}

/// The marker a contender of `kind` writes into its node name.
pub(crate) fn marker(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Exclusive | LockKind::Fair | LockKind::Permit => LOCK_MARKER,
        LockKind::Read => READ_MARKER,
        LockKind::Write => WRITE_MARKER,
        LockKind::Leader => LATCH_MARKER,
    }
}

/// The name prefix of one contender, before ZooKeeper appends the sequence:
/// `_c_<uuid>-lock-` (Curator's protected form: the uuid finds the node again after a
/// create whose reply was lost).
pub(crate) fn node_prefix(protect: &uuid::Uuid, kind: LockKind) -> String {
    format!("_c_{}{}", protect.hyphenated(), marker(kind))
}

/// The name prefix of a permit of a semaphore of `permits`:
/// `_c_<uuid>-__PERMITS_<permits>-lock-`.
pub(crate) fn permit_prefix(protect: &uuid::Uuid, permits: u32) -> String {
    format!(
        "_c_{}{PERMITS_TAG}{permits}{LOCK_MARKER}",
        protect.hyphenated()
    )
}

/// The name prefix of a downgrade reader: `_c_<uuid>-__DOWN__-__READ__`.
pub(crate) fn downgrade_prefix(protect: &uuid::Uuid) -> String {
    format!("_c_{}{DOWNGRADE_TAG}{READ_MARKER}", protect.hyphenated())
}

/// One child of a lock path that takes part in the queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Contender {
    /// The child's name.
    pub(crate) name: String,
    /// The sequence ZooKeeper appended.
    pub(crate) seq: i64,
    /// Whether it is a writer (read-write paths only; exclusive contenders are writers).
    pub(crate) writer: bool,
    /// Whether it is a downgrade reader (see [`downgrade_prefix`]).
    pub(crate) downgrade: bool,
    /// The count a semaphore's contender was made with (see [`permit_prefix`]).
    pub(crate) permits: Option<u32>,
}

/// The contenders among `children` of a lock path of `family`, in queue order.
///
/// Like Curator, the order is the sequence after the marker, so nodes of other
/// Curator-compatible clients (any `_c_` prefix, or none) take their place in line.
/// Children without a marker and sequence (nested locks' nodes) are not contenders.
pub(crate) fn contenders(children: &[String], family: LockFamily) -> Vec<Contender> {
    let mut found: Vec<Contender> = children
        .iter()
        .filter_map(|name| parse(name, family))
        .collect();
    found.sort_by(|a, b| a.seq.cmp(&b.seq).then_with(|| a.name.cmp(&b.name)));
    found
}

fn parse(name: &str, family: LockFamily) -> Option<Contender> {
    // Curator's markers, and kazoo's (`<hex>__lock__<seq>`, `__rlock__` for its read
    // lock), so a kazoo lock on the same path is a contender like any other.
    let markers: &[(&str, bool)] = match family {
        LockFamily::Exclusive | LockFamily::Fair | LockFamily::Semaphore => {
            &[("lock-", true), (KAZOO_LOCK_MARKER, true)]
        }
        LockFamily::Election => &[("latch-", true)],
        LockFamily::ReadWrite => &[
            ("__READ__", false),
            ("__WRIT__", true),
            (KAZOO_READ_MARKER, false),
            (KAZOO_LOCK_MARKER, true),
        ],
    };
    markers.iter().find_map(|&(marker, writer)| {
        let at = name.rfind(marker)?;
        let digits = &name[at + marker.len()..];
        // ZooKeeper's sequence: ten digits (a sign once the counter wraps).
        let valid = digits.len() >= 10
            && digits
                .trim_start_matches('-')
                .bytes()
                .all(|b| b.is_ascii_digit());
        let seq = if valid {
            digits.parse().ok()?
        } else {
            return None;
        };
        let downgrade = !writer
            && family == LockFamily::ReadWrite
            && name[..at]
                .strip_suffix('-')
                .is_some_and(|head| head.ends_with(DOWNGRADE_TAG));
        let permits = match family {
            LockFamily::Semaphore => name[..at]
                .strip_suffix('-')
                .and_then(|head| head.rsplit_once(PERMITS_TAG))
                .and_then(|(_, count)| count.parse().ok()),
            _ => None,
        };
        Some(Contender {
            name: name.to_owned(),
            seq,
            writer,
            downgrade,
            permits,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::{LockName, Namespace};

    fn key(ns: &str, name: &str) -> LockKey {
        LockKey::new(Namespace::new(ns).unwrap(), LockName::new(name).unwrap())
    }

    #[test]
    fn plain_names_keep_their_curator_path() {
        assert_eq!(
            lock_path(&key("locks", "orders/42"), LockFamily::Exclusive),
            "/locks/orders/42"
        );
        assert_eq!(
            lock_path(&key("locks", "orders"), LockFamily::Fair),
            "/locks/orders%fair"
        );
        assert_eq!(
            lock_path(&key("app", "orders"), LockFamily::ReadWrite),
            "/app/orders%rw"
        );
    }

    #[test]
    fn hostile_names_are_encoded_and_distinct() {
        let names = [
            "a//b",
            "/a",
            "a/",
            ".",
            "..",
            "a/../b",
            "100%",
            "100%25",
            "x%fair",
            "🔒",
            "\u{E000}",
            "a/x-lock-0000000001",
            "zookeeper",
            "a/x__lock__0000000000",
            "a/x__rlock__0000000000",
            "a/x-__READ__0000000001",
            "a/x-__WRIT__0000000001",
        ];
        let mut paths: Vec<String> = names
            .iter()
            .map(|n| lock_path(&key("ns", n), LockFamily::Exclusive))
            .collect();
        for p in &paths {
            assert!(
                p.starts_with('/') && !p.ends_with('/') && !p.contains("//"),
                "{p}"
            );
            assert!(p.split('/').skip(1).all(|s| s != "." && s != ".."), "{p}");
            assert!(!p.chars().any(|c| c as u32 > 0xFFFF), "{p}");
            assert_ne!(p, "/zookeeper");
        }
        assert_eq!(paths[11], "/ns/a/x%2Dlock%2D0000000001");
        assert_eq!(paths[13], "/ns/a/x%5F%5Flock%5F%5F0000000000");
        // No nested lock's path is a contender of its parent lock, in any family.
        let parent = lock_path(&key("ns", "a"), LockFamily::Exclusive);
        for path in &paths {
            if let Some(child) = path.strip_prefix(&format!("{parent}/")) {
                let child = child.split('/').next().unwrap().to_owned();
                for family in [
                    LockFamily::Exclusive,
                    LockFamily::Fair,
                    LockFamily::ReadWrite,
                ] {
                    assert!(
                        contenders(std::slice::from_ref(&child), family).is_empty(),
                        "{path} is a contender of {parent}"
                    );
                }
            }
        }
        paths.sort();
        paths.dedup();
        assert_eq!(paths.len(), names.len());
        assert_ne!(
            lock_path(&key("ns", "x%fair"), LockFamily::Exclusive),
            lock_path(&key("ns", "x"), LockFamily::Fair)
        );
    }

    #[test]
    fn kazoo_nodes_are_contenders() {
        let children: Vec<String> = [
            "0f1e2d3c4b5a69788796a5b4c3d2e1f0__lock__0000000002",
            "_c_aaaa-lock-0000000001",
            "9a8b__rlock__0000000003",
        ]
        .map(String::from)
        .to_vec();
        let exclusive: Vec<i64> = contenders(&children, LockFamily::Exclusive)
            .iter()
            .map(|c| c.seq)
            .collect();
        assert_eq!(exclusive, [1, 2]);
        let rw: Vec<(i64, bool)> = contenders(&children, LockFamily::ReadWrite)
            .iter()
            .map(|c| (c.seq, c.writer))
            .collect();
        assert_eq!(rw, [(2, true), (3, false)]);
    }

    #[test]
    fn contenders_sort_by_sequence_across_prefixes() {
        let children: Vec<String> = [
            "_c_bbbb-lock-0000000003",
            "_c_aaaa-lock-0000000005",
            "lock-0000000004",
            "nested",
            "x-lock-12",
            "_c_cccc-lock-0000000001",
        ]
        .map(String::from)
        .to_vec();
        let order: Vec<i64> = contenders(&children, LockFamily::Exclusive)
            .iter()
            .map(|c| c.seq)
            .collect();
        assert_eq!(order, [1, 3, 4, 5]);
        let rw: Vec<String> = ["_c_a-__WRIT__0000000002", "_c_b-__READ__0000000001"]
            .map(String::from)
            .to_vec();
        let parsed = contenders(&rw, LockFamily::ReadWrite);
        assert_eq!((parsed[0].seq, parsed[0].writer), (1, false));
        assert_eq!((parsed[1].seq, parsed[1].writer), (2, true));
        assert!(contenders(&rw, LockFamily::Exclusive).is_empty());
        assert!(parsed.iter().all(|c| !c.downgrade));
    }

    #[test]
    fn downgrade_nodes_are_readers_in_curators_order_and_told_apart() {
        let protect = uuid::Uuid::new_v4();
        let down = format!("{}0000000003", downgrade_prefix(&protect));
        assert!(down.starts_with(&format!("_c_{}-", protect.hyphenated())));
        // As Curator reads it: no `__WRIT__`, sorted by what follows `__READ__`.
        assert!(!down.contains("__WRIT__"));
        assert_eq!(&down[down.rfind("__READ__").unwrap() + 8..], "0000000003");
        let children: Vec<String> = [
            down.clone(),
            format!("{}0000000002", node_prefix(&protect, LockKind::Write)),
            format!("{}0000000004", node_prefix(&protect, LockKind::Read)),
        ]
        .to_vec();
        let parsed: Vec<(i64, bool, bool)> = contenders(&children, LockFamily::ReadWrite)
            .iter()
            .map(|c| (c.seq, c.writer, c.downgrade))
            .collect();
        assert_eq!(
            parsed,
            [(2, true, false), (3, false, true), (4, false, false)]
        );
    }

    #[test]
    fn a_permit_node_carries_its_semaphores_count() {
        let protect = uuid::Uuid::nil();
        let name = format!("{}0000000007", permit_prefix(&protect, 12));
        let found = contenders(
            &[name.clone(), "x__lock__0000000003".to_owned()],
            LockFamily::Semaphore,
        );
        assert_eq!(found.len(), 2);
        assert_eq!(
            (found[0].seq, found[0].permits),
            (3, None),
            "a node without a count"
        );
        assert_eq!(
            (found[1].name.as_str(), found[1].permits),
            (name.as_str(), Some(12))
        );
        let lock = contenders(&[name], LockFamily::Exclusive);
        assert_eq!(
            lock[0].permits, None,
            "a count only counts on a semaphore's path"
        );
    }
}
