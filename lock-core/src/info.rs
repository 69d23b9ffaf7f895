//! What a backend can say about a lock right now: who holds it and how many wait.

use std::time::SystemTime;

use crate::error::{Error, Result};
use crate::kinds::LockKind;

/// The longest holder description accepted, in bytes.
pub const MAX_HOLDER_DESCRIPTION_BYTES: usize = 256;

/// A lock as its backend sees it now (see
/// [`DistributedLock::inspect`](crate::DistributedLock::inspect)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// Who holds it: one holder, or the readers of a read-write lock's read side. Empty
    /// when it is free.
    pub holders: Vec<HolderInfo>,
    /// How many wait for it, where the backend can know (queues it keeps); `None`
    /// where waiters leave no trace on the server.
    pub waiters: Option<usize>,
}

impl LockInfo {
    /// A lock with these holders and waiters.
    pub fn new(holders: Vec<HolderInfo>, waiters: Option<usize>) -> Self {
        LockInfo { holders, waiters }
    }

    /// Whether anyone holds it.
    pub fn is_locked(&self) -> bool {
        !self.holders.is_empty()
    }
}

/// One holder of a lock, with what the backend keeps of it. Fields a backend does not
/// store are `None`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderInfo {
    /// Which side or type of lock it holds.
    pub kind: LockKind,
    /// Its owner token as the backend stores it (`<client uuid>:<acquisition>` for ours;
    /// another client's own format for a foreign holder such as redis-py).
    pub owner: Option<String>,
    /// Its fencing token.
    pub fencing_token: Option<u64>,
    /// What its client said about itself
    /// ([`LockClientBuilder::holder_description`](crate::LockClientBuilder::holder_description);
    /// by default the host name and process id).
    pub description: Option<String>,
    /// When it was granted, by the server's clock.
    pub acquired_at: Option<SystemTime>,
    /// When its lease runs out unless renewed, by the server's clock; `None` for a lease
    /// that is a session (ZooKeeper) or a connection (SQL row locks).
    pub expires_at: Option<SystemTime>,
}

impl HolderInfo {
    /// A holder of `kind` the backend knows nothing else of; set the rest with the
    /// `with_*` methods.
    pub fn new(kind: LockKind) -> Self {
        HolderInfo {
            kind,
            owner: None,
            fencing_token: None,
            description: None,
            acquired_at: None,
            expires_at: None,
        }
    }

    /// With its owner token.
    pub fn with_owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// With its fencing token.
    pub fn with_fencing_token(mut self, token: u64) -> Self {
        self.fencing_token = Some(token);
        self
    }

    /// With its client's description of itself.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// With when it was granted.
    pub fn with_acquired_at(mut self, at: SystemTime) -> Self {
        self.acquired_at = Some(at);
        self
    }

    /// With when its lease runs out.
    pub fn with_expires_at(mut self, at: SystemTime) -> Self {
        self.expires_at = Some(at);
        self
    }
}

/// Checks a holder description: at most [`MAX_HOLDER_DESCRIPTION_BYTES`] bytes, no
/// control characters (it is stored beside the lock and printed by tools).
pub(crate) fn check_description(description: &str) -> Result<()> {
    if description.len() > MAX_HOLDER_DESCRIPTION_BYTES {
        return Err(Error::invalid_argument(format!(
            "holder description is {} bytes long; at most {MAX_HOLDER_DESCRIPTION_BYTES} are allowed",
            description.len()
        )));
    }
    if let Some(c) = description.chars().find(|c| c.is_control()) {
        return Err(Error::invalid_argument(format!(
            "holder description {description:?} contains the control character {c:?}"
        )));
    }
    Ok(())
}

/// `<host name> pid <process id>`: what a client says about itself unless told
/// ([`LockClientBuilder::holder_description`](crate::LockClientBuilder::holder_description)),
/// and a good campaign value for an [`Election`](crate::Election) candidate.
pub fn default_description() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its whole length, which is passed; gethostname
    // writes at most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let host = if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "unknown-host".to_owned()
    };
    let host: String = host.chars().filter(|c| !c.is_control()).take(200).collect();
    format!("{host} pid {}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_are_checked_and_the_default_passes() {
        assert!(check_description(&default_description()).is_ok());
        assert!(default_description().contains(&format!("pid {}", std::process::id())));
        assert!(check_description(&"x".repeat(257)).is_err());
        assert!(check_description("tab\there").is_err());
        assert!(check_description("web-3 pid 42, job nightly").is_ok());
    }
}
