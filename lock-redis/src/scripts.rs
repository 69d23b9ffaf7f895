//! The Lua scripts, compiled into the binary and hashed once. [`redis::Script`] calls
//! them by `EVALSHA`; on a server that has not seen one yet (first call, restart,
//! `SCRIPT FLUSH`) it loads it and retries, transparently.

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($name:ident, $file:literal) => {
        pub(crate) static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(include_str!(concat!("lua/", $file))));
    };
}

script!(EXCLUSIVE_ACQUIRE, "exclusive_acquire.lua");
script!(EXCLUSIVE_RELEASE, "exclusive_release.lua");
script!(FAIR_ACQUIRE, "fair_acquire.lua");
script!(FAIR_RELEASE, "fair_release.lua");
script!(FAIR_LEAVE, "fair_leave.lua");
script!(RW_ACQUIRE, "rw_acquire.lua");
script!(RW_RELEASE, "rw_release.lua");
script!(RW_LEAVE, "rw_leave.lua");
script!(RENEW, "renew.lua");
script!(INSPECT, "inspect.lua");
script!(REDLOCK_SETTLE, "redlock_settle.lua");

/// What an acquire script answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Granted with this fencing token.
    Granted(u64),
    /// Blocked. The holder's remaining lease in ms (or when the next blocker may
    /// expire); negative when nothing will expire on its own.
    Blocked(i64),
}

impl Attempt {
    /// Decodes the `{granted, n}` pair every acquire script returns.
    pub(crate) fn from_reply(reply: (i64, i64)) -> Result<Self, crate::error::Error> {
        match reply {
            (1, fence) if fence > 0 => Ok(Attempt::Granted(fence as u64)),
            (0, wait) => Ok(Attempt::Blocked(wait)),
            other => Err(crate::error::Error::UnexpectedReply(format!("{other:?}"))),
        }
    }
}
