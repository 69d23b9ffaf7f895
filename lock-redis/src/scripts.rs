//! The Lua scripts, compiled into the binary and hashed once. [`redis::Script`] calls
//! them by `EVALSHA`; on a server that has not seen one yet (first call, restart,
//! `SCRIPT FLUSH`) it loads it and retries, transparently (on a cluster, `SCRIPT LOAD`
//! goes to every node).
//!
//! Each script comes in two forms: as written, for one server, and with its
//! `publish` calls turned into `spublish` for Redis Cluster, where waiters listen on
//! sharded channels (`SSUBSCRIBE`) at the node that owns the lock's slot.

use std::sync::LazyLock;

use redis::Script;

/// One script in both forms.
pub(crate) struct Scripts {
    plain: LazyLock<Script>,
    sharded: LazyLock<Script>,
}

impl Scripts {
    /// The form for one server (`sharded` false) or for a cluster.
    pub(crate) fn get(&'static self, sharded: bool) -> &'static Script {
        if sharded {
            &self.sharded
        } else {
            &self.plain
        }
    }
}

/// `source` with every `publish` call made a sharded one.
pub(crate) fn sharded(source: &str) -> String {
    source.replace("redis.call('publish'", "redis.call('spublish'")
}

macro_rules! script {
    ($name:ident, $prelude:ident, $file:literal) => {
        pub(crate) static $name: Scripts = Scripts {
            plain: LazyLock::new(|| {
                Script::new(&format!(
                    "{}{}",
                    $prelude,
                    include_str!(concat!("lua/", $file))
                ))
            }),
            sharded: LazyLock::new(|| {
                let source = format!("{}{}", $prelude, include_str!(concat!("lua/", $file)));
                Script::new(&sharded(&source))
            }),
        };
    };
    ($name:ident, $file:literal) => {
        script!($name, NO_PRELUDE, $file);
    };
}

/// What the scripts that grant nothing start with.
const NO_PRELUDE: &str = "";
/// `next_fence(key)`, for the scripts that grant leases (see the file).
const NEXT_FENCE: &str = include_str!("lua/next_fence.lua");
/// What the release scripts share: `released_before(receipt, first)` (see the file).
const RELEASE_COMMON: &str = include_str!("lua/release_common.lua");

script!(EXCLUSIVE_ACQUIRE, NEXT_FENCE, "exclusive_acquire.lua");
script!(EXCLUSIVE_RELEASE, RELEASE_COMMON, "exclusive_release.lua");
script!(FAIR_ACQUIRE, NEXT_FENCE, "fair_acquire.lua");
script!(FAIR_RELEASE, RELEASE_COMMON, "fair_release.lua");
script!(FAIR_LEAVE, "fair_leave.lua");
script!(RW_ACQUIRE, NEXT_FENCE, "rw_acquire.lua");
script!(RW_RELEASE, RELEASE_COMMON, "rw_release.lua");
script!(RW_LEAVE, "rw_leave.lua");
script!(RENEW, "renew.lua");
/// Renews leases of many slots on one cluster node in one call.
pub(crate) static RENEW_ON_NODE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/renew_on_node.lua")));
script!(INSPECT, "inspect.lua");
script!(HOLDERS, "holders.lua");
script!(HELD, "held.lua");
script!(REDLOCK_SETTLE, "redlock_settle.lua");

/// What an acquire script answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Granted with this fencing token.
    Granted(u64),
    /// Blocked by someone else.
    Blocked(Blocker),
}

/// What a blocked acquire learned about what blocks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Blocker {
    /// The holder's remaining lease in ms (or when the next blocker may expire);
    /// negative when nothing will expire on its own.
    pub(crate) ms: i64,
    /// The holder is another kind of client (redis-py, redsync, a raw `SET NX PX`):
    /// its release publishes nothing, so a waiter must look again by itself.
    pub(crate) silent: bool,
}

impl Attempt {
    /// Decodes the `{granted, n}` (or `{0, ms, silent}`) reply every acquire script
    /// returns.
    pub(crate) fn from_reply(reply: Vec<i64>) -> Result<Self, crate::error::Error> {
        match reply[..] {
            [1, fence] if fence > 0 => Ok(Attempt::Granted(fence as u64)),
            [0, ms] => Ok(Attempt::Blocked(Blocker { ms, silent: false })),
            [0, ms, silent @ (0 | 1)] => Ok(Attempt::Blocked(Blocker {
                ms,
                silent: silent == 1,
            })),
            _ => Err(crate::error::Error::UnexpectedReply(format!("{reply:?}"))),
        }
    }
}
