//! What a contender node of ours carries as its data, and what `inspect` reads back
//! from any contender's node.
//!
//! Ours: the owner token, a newline, and the client's description of itself (host and
//! pid by default; lock-core refuses control characters in it, so the newline is
//! unambiguous). Curator's nodes carry the client's IP address and kazoo's its
//! identifier: read back whole as the owner, with no description.

use std::time::{Duration, UNIX_EPOCH};

use lock_core::{HolderInfo, LockKind};
use zookeeper_client::Stat;

/// The data of a node of `owner`, whose client describes itself as `description`.
pub(crate) fn encode(owner: &str, description: &str) -> Vec<u8> {
    format!("{owner}\n{description}").into_bytes()
}

/// A holder as its node tells it: the owner and description from the data, the
/// fencing token from the node's last write (its create, or the write that drew the
/// token of a contended grant), and that write's time by the server's clock. No
/// expiry: the lease is the session.
pub(crate) fn holder_info(kind: LockKind, data: &[u8], stat: &Stat) -> HolderInfo {
    let text = String::from_utf8_lossy(data);
    if kind == LockKind::Leader {
        // A leader's node holds its value alone (Curator's participant id), and its
        // term is the node's czxid.
        let mut info = HolderInfo::new(kind).with_description(text);
        if let Ok(term) = u64::try_from(stat.czxid) {
            info = info.with_fencing_token(term);
        }
        return info;
    }
    let (owner, description) = match text.split_once('\n') {
        Some((owner, description)) => (owner.to_owned(), Some(description.to_owned())),
        None => (text.into_owned(), None),
    };
    let mut info = HolderInfo::new(kind).with_owner(owner);
    if let Ok(token) = u64::try_from(stat.mzxid) {
        info = info.with_fencing_token(token);
    }
    if let Ok(ms) = u64::try_from(stat.mtime) {
        info = info.with_acquired_at(UNIX_EPOCH + Duration::from_millis(ms));
    }
    if let Some(description) = description.filter(|d| !d.is_empty()) {
        info = info.with_description(description);
    }
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ours_and_foreign_data_read_back() {
        let stat = Stat {
            czxid: 40,
            mzxid: 42,
            pzxid: 40,
            ctime: 1_700_000_000_000,
            mtime: 1_700_000_000_000,
            version: 1,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 7,
            data_length: 0,
            num_children: 0,
        };
        let ours = holder_info(LockKind::Exclusive, &encode("c:1", "host pid 7"), &stat);
        assert_eq!(ours.owner.as_deref(), Some("c:1"));
        assert_eq!(ours.description.as_deref(), Some("host pid 7"));
        assert_eq!(ours.fencing_token, Some(42));
        assert!(ours.acquired_at.is_some());
        let curator = holder_info(LockKind::Exclusive, b"10.0.0.7", &stat);
        assert_eq!(curator.owner.as_deref(), Some("10.0.0.7"));
        assert_eq!(curator.description, None);
    }
}
