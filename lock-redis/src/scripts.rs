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

/// `source` with every `publish` call made a sharded one, however it is written
/// (`call` or `pcall`, either quote).
pub(crate) fn sharded(source: &str) -> String {
    let mut out = source.to_owned();
    for call in ["call", "pcall"] {
        for quote in ['\'', '"'] {
            out = out.replace(
                &format!("redis.{call}({quote}publish{quote}"),
                &format!("redis.{call}({quote}spublish{quote}"),
            );
        }
    }
    out
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
/// What the release scripts share: `released_before(receipt, first)`, `wake_next`
/// (see the file).
const RELEASE_COMMON: &str = include_str!("lua/release_common.lua");
const SEMAPHORE_COMMON: &str = include_str!("lua/semaphore_common.lua");
const SEMAPHORE_GRANT: &str = concat!(
    include_str!("lua/next_fence.lua"),
    include_str!("lua/semaphore_common.lua")
);
const SEMAPHORE_RELEASE_COMMON: &str = concat!(
    include_str!("lua/release_common.lua"),
    include_str!("lua/semaphore_common.lua")
);

script!(EXCLUSIVE_ACQUIRE, NEXT_FENCE, "exclusive_acquire.lua");
script!(EXCLUSIVE_RELEASE, RELEASE_COMMON, "exclusive_release.lua");
script!(EXCLUSIVE_LEAVE, RELEASE_COMMON, "exclusive_leave.lua");
script!(FAIR_ACQUIRE, NEXT_FENCE, "fair_acquire.lua");
script!(FAIR_RELEASE, RELEASE_COMMON, "fair_release.lua");
script!(FAIR_LEAVE, "fair_leave.lua");
script!(RW_ACQUIRE, NEXT_FENCE, "rw_acquire.lua");
script!(RW_RELEASE, RELEASE_COMMON, "rw_release.lua");
script!(RW_LEAVE, "rw_leave.lua");
script!(SEMAPHORE_ACQUIRE, SEMAPHORE_GRANT, "semaphore_acquire.lua");
script!(
    SEMAPHORE_RELEASE,
    SEMAPHORE_RELEASE_COMMON,
    "semaphore_release.lua"
);
script!(SEMAPHORE_LEAVE, SEMAPHORE_COMMON, "semaphore_leave.lua");
script!(RENEW, "renew.lua");
/// Renews leases of many slots on one cluster node in one call.
pub(crate) static RENEW_ON_NODE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/renew_on_node.lua")));
script!(INSPECT, SEMAPHORE_RELEASE_COMMON, "inspect.lua");
script!(HOLDERS, "holders.lua");
script!(HELD, "held.lua");
script!(PROCLAIM, "proclaim.lua");
script!(REDLOCK_SETTLE, "redlock_settle.lua");

/// What an acquire script answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Granted with this fencing token.
    Granted(u64),
    /// Blocked by someone else.
    Blocked(Blocker),
    /// A semaphore's holders or waiters use this count, not the request's.
    OtherCount(u32),
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
            [-1, count] if count > 0 && count <= i64::from(u32::MAX) => {
                Ok(Attempt::OtherCount(count as u32))
            }
            [0, ms] => Ok(Attempt::Blocked(Blocker { ms, silent: false })),
            [0, ms, silent @ (0 | 1)] => Ok(Attempt::Blocked(Blocker {
                ms,
                silent: silent == 1,
            })),
            _ => Err(crate::error::Error::UnexpectedReply(format!("{reply:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every script file, by name.
    const SOURCES: &[(&str, &str)] = &[
        (
            "exclusive_acquire.lua",
            include_str!("lua/exclusive_acquire.lua"),
        ),
        (
            "exclusive_leave.lua",
            include_str!("lua/exclusive_leave.lua"),
        ),
        (
            "exclusive_release.lua",
            include_str!("lua/exclusive_release.lua"),
        ),
        ("fair_acquire.lua", include_str!("lua/fair_acquire.lua")),
        ("fair_leave.lua", include_str!("lua/fair_leave.lua")),
        ("fair_release.lua", include_str!("lua/fair_release.lua")),
        ("held.lua", include_str!("lua/held.lua")),
        ("holders.lua", include_str!("lua/holders.lua")),
        ("inspect.lua", include_str!("lua/inspect.lua")),
        ("next_fence.lua", include_str!("lua/next_fence.lua")),
        ("proclaim.lua", include_str!("lua/proclaim.lua")),
        ("redlock_settle.lua", include_str!("lua/redlock_settle.lua")),
        ("release_common.lua", include_str!("lua/release_common.lua")),
        ("renew.lua", include_str!("lua/renew.lua")),
        ("renew_on_node.lua", include_str!("lua/renew_on_node.lua")),
        ("rw_acquire.lua", include_str!("lua/rw_acquire.lua")),
        ("rw_leave.lua", include_str!("lua/rw_leave.lua")),
        ("rw_release.lua", include_str!("lua/rw_release.lua")),
        (
            "semaphore_acquire.lua",
            include_str!("lua/semaphore_acquire.lua"),
        ),
        (
            "semaphore_common.lua",
            include_str!("lua/semaphore_common.lua"),
        ),
        (
            "semaphore_leave.lua",
            include_str!("lua/semaphore_leave.lua"),
        ),
        (
            "semaphore_release.lua",
            include_str!("lua/semaphore_release.lua"),
        ),
    ];

    #[test]
    fn the_list_names_every_script_file() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/lua");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        let listed: Vec<&str> = SOURCES.iter().map(|(name, _)| *name).collect();
        assert_eq!(files, listed);
    }

    /// A waiter on a cluster listens on a sharded channel: a plain `publish` left in a
    /// script's cluster form would wake nobody (its waiters would sleep until their
    /// poll or the holder's lease).
    #[test]
    fn the_cluster_form_publishes_only_on_sharded_channels() {
        for (name, source) in SOURCES {
            let cluster = sharded(source).to_ascii_lowercase();
            let publishes = cluster.matches("publish").count();
            let sharded_ones = cluster.matches("spublish").count();
            // Every publish the source makes, in any spelling, became an spublish;
            // mentions in comments are counted on both sides alike.
            let in_comments = source
                .lines()
                .filter_map(|line| line.split_once("--").map(|(_, comment)| comment))
                .map(|comment| comment.to_ascii_lowercase().matches("publish").count())
                .sum::<usize>();
            assert_eq!(
                publishes - in_comments,
                sharded_ones,
                "{name}: a publish call the cluster form keeps"
            );
        }
        let spellings = "redis.call('publish', a, b) redis.pcall(\"publish\", a, b)";
        assert_eq!(
            sharded(spellings),
            "redis.call('spublish', a, b) redis.pcall(\"spublish\", a, b)"
        );
    }
}
