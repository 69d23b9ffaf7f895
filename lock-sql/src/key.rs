//! How a lock key and kind are stored: a fixed-length hash as the primary key (so any
//! name, up to lock-core's length limit, fits every database's index), with the
//! namespace and name kept alongside as plain text for people reading the table.

use lock_core::{LockFamily, LockKey, LockKind};
use sha2::{Digest, Sha256};

/// The stored identity of one lock key.
#[derive(Clone, Debug)]
pub(crate) struct KeyId {
    /// Lowercase hex SHA-256 of the length-prefixed namespace and the name.
    pub(crate) hash: String,
    pub(crate) namespace: String,
    pub(crate) name: String,
}

impl KeyId {
    pub(crate) fn of(key: &LockKey) -> Self {
        let namespace = key.namespace().as_str();
        let name = key.name().as_str();
        let mut digest = Sha256::new();
        // The length prefix keeps ("a", "bc") and ("ab", "c") apart.
        digest.update((namespace.len() as u64).to_be_bytes());
        digest.update(namespace.as_bytes());
        digest.update(name.as_bytes());
        let hash = push_hex(String::with_capacity(64), &digest.finalize());
        KeyId {
            hash,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }
}

/// `out` with `bytes` in lowercase hex appended (keys and lock names are digested on
/// every call: one allocation, where `format!` per byte would make one a byte).
pub(crate) fn push_hex(mut out: String, bytes: &[u8]) -> String {
    lock_core::backend::push_hex(&mut out, bytes);
    out
}

/// The `kind` column's value.
pub(crate) fn kind_code(kind: LockKind) -> i64 {
    match kind {
        LockKind::Exclusive => 0,
        LockKind::Fair => 1,
        LockKind::Read => 2,
        LockKind::Write => 3,
        LockKind::Permit => 4,
        LockKind::Leader => 5,
    }
}

/// The inverse of [`kind_code`].
pub(crate) fn kind_of(code: i64) -> Option<LockKind> {
    Some(match code {
        0 => LockKind::Exclusive,
        1 => LockKind::Fair,
        2 => LockKind::Read,
        3 => LockKind::Write,
        4 => LockKind::Permit,
        5 => LockKind::Leader,
        _ => return None,
    })
}

/// The `kind` values of a family, as an inclusive range.
pub(crate) fn family_range(family: LockFamily) -> (i64, i64) {
    match family {
        LockFamily::Exclusive => (0, 0),
        LockFamily::Fair => (1, 1),
        LockFamily::ReadWrite => (2, 3),
        LockFamily::Semaphore => (4, 4),
        LockFamily::Election => (5, 5),
    }
}

/// The `holder` column: empty for the one-holder kinds, the owner for readers (so
/// several readers have rows of their own).
pub(crate) fn holder_of(kind: LockKind, owner: &str) -> &str {
    match kind {
        LockKind::Read | LockKind::Permit => owner,
        LockKind::Exclusive | LockKind::Fair | LockKind::Write | LockKind::Leader => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::{LockName, Namespace};

    fn key(ns: &str, name: &str) -> KeyId {
        KeyId::of(&LockKey::new(
            Namespace::new(ns).unwrap(),
            LockName::new(name).unwrap(),
        ))
    }

    #[test]
    fn hashes_are_fixed_length_and_unambiguous() {
        let a = key("a", "bc");
        // Stored in every lock row: the same text for the same name, release after
        // release (SHA-256 of the length-prefixed namespace and the name, in hex).
        assert_eq!(
            a.hash,
            "e98bc483cc6af9ccf82bc23e481a128c12818251d9d359a7b560dcabfd7909d6"
        );
        assert_eq!(push_hex("x".into(), &[0, 0x0f, 0xa0, 0xff]), "x000fa0ff");
        assert_ne!(a.hash, key("ab", "c").hash);
        assert_eq!(a.hash, key("a", "bc").hash);
        for kind in [
            LockKind::Exclusive,
            LockKind::Fair,
            LockKind::Read,
            LockKind::Write,
        ] {
            assert_eq!(kind_of(kind_code(kind)), Some(kind));
        }
    }
}
