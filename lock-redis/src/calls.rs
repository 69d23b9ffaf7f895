//! The script calls of each lock type, as owned values that can move into a spawned
//! task. Shared by the single-server backend and RedLock.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockFamily, LockKind};
use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, RedisWrite, Script, ServerErrorKind};

use crate::keys::{Keys, RedisLease, Stored, EXCLUSIVE_CHANNEL, EXCLUSIVE_WAITERS, FENCE, RECEIPT};
use crate::pubsub::{Interest, Unclaimed};
use crate::scripts;

/// One script call: the script, its keys and its arguments.
#[derive(Clone, Debug)]
pub(crate) struct Call {
    pub(crate) script: &'static Script,
    pub(crate) keys: Vec<String>,
    pub(crate) args: Vec<String>,
}

impl Call {
    /// The call as the command that runs it, built once in one buffer.
    pub(crate) fn invocation(&self) -> Invocation {
        let data: usize = self.keys.iter().chain(&self.args).map(String::len).sum();
        let mut packer = Packer::new(self.script, self.keys.len(), self.args.len(), data);
        for part in self.keys.iter().chain(&self.args) {
            packer.arg(part);
        }
        packer.done()
    }
}

/// Writes a script call straight into its command (`EVALSHA <sha> <number of keys>`,
/// the keys, then the arguments), in one buffer, with no string of its own for each
/// key or argument: for the calls every lock cycle makes. Keys and arguments are
/// written in the order the script reads them.
pub(crate) struct Packer {
    script: &'static Script,
    cmd: Cmd,
}

impl Packer {
    /// A call of `script` with `keys` keys and `args` arguments, about `data` bytes
    /// of them in all.
    pub(crate) fn new(script: &'static Script, keys: usize, args: usize, data: usize) -> Self {
        let mut cmd = Cmd::with_capacity(3 + keys + args, data + 64);
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys);
        Packer { script, cmd }
    }

    /// The next key or argument.
    pub(crate) fn arg(&mut self, arg: &str) -> &mut Self {
        self.cmd.arg(arg);
        self
    }

    /// The next key or argument, written from `parts` end to end.
    pub(crate) fn joined(&mut self, parts: &[&str]) -> &mut Self {
        use std::io::Write;
        {
            let mut arg = self.cmd.writer_for_next_arg();
            for part in parts {
                // Writing into the command's own buffer cannot fail.
                let _ = arg.write_all(part.as_bytes());
            }
        }
        self
    }

    /// The next argument: `d` in milliseconds (see [`millis`]).
    pub(crate) fn millis(&mut self, d: Duration) -> &mut Self {
        self.cmd.arg(millis_count(d));
        self
    }

    /// The command, ready to send.
    pub(crate) fn done(self) -> Invocation {
        Invocation {
            script: self.script,
            cmd: self.cmd,
        }
    }
}

/// A script call ready to send: its `EVALSHA` command. (redis-rs's
/// `ScriptInvocation` copies every key and argument twice more on each call.)
#[derive(Clone)]
pub(crate) struct Invocation {
    script: &'static Script,
    cmd: Cmd,
}

impl Invocation {
    /// Runs the call on `conn`, loading the script first if the server does not have
    /// it (a restarted server, or one that flushed its scripts).
    pub(crate) async fn invoke_async<T: FromRedisValue>(
        &self,
        conn: &mut impl ConnectionLike,
    ) -> RedisResult<T> {
        match self.cmd.query_async(conn).await {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.script.load_async(conn).await?;
                self.cmd.query_async(conn).await
            }
            reply => reply,
        }
    }
}

/// Milliseconds for a Redis argument; never 0 (`PX 0` is an error).
pub(crate) fn millis(d: Duration) -> String {
    millis_count(d).to_string()
}

fn millis_count(d: Duration) -> u64 {
    // `i64::MAX` fits a u64: it is what Redis reads an expiry into.
    d.as_millis().clamp(1, i64::MAX as u128) as u64
}

/// Everything about one acquire request that the scripts need.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub(crate) keys: Keys,
    pub(crate) kind: LockKind,
    /// A semaphore's count (1 for locks).
    pub(crate) permits: u32,
    pub(crate) owner: String,
    pub(crate) ttl: Duration,
    /// Identifies this request in a fair queue or among waiting writers: the
    /// backend's inbox, `/`, then a number.
    pub(crate) waiter: String,
    /// The id of the backend making the request (see [`Keys::exclusive_inbox`]).
    pub(crate) inbox: Arc<str>,
    pub(crate) waiter_lease: Duration,
}

impl Request {
    /// Whether a blocked request of this kind registers itself (queue place, or the
    /// waiting entry of an exclusive lock or a writer) that must be removed when it
    /// stops waiting. A reader only waits for writers to leave.
    pub(crate) fn registers(&self) -> bool {
        self.kind != LockKind::Read
    }

    /// One acquire call, identified by `lease` (a new one per call: see
    /// [`RedisLease`]); `wait` says whether a blocked request registers itself. The
    /// exclusive lock's, the call most lock cycles make, is written straight into its
    /// command.
    pub(crate) fn acquire_with(&self, lease: &RedisLease, wait: bool) -> Invocation {
        let k = &self.keys;
        let wait = if wait { "1" } else { "0" };
        let owned = || {
            (
                millis(self.ttl),
                wait.to_owned(),
                lease.request().to_owned(),
            )
        };
        match self.kind {
            LockKind::Exclusive => {
                let data = 3 * k.lock.len()
                    + self.owner.len()
                    + lease.request().len()
                    + self.waiter.len()
                    + 64;
                let mut call = Packer::new(scripts::EXCLUSIVE_ACQUIRE.get(k.sharded), 3, 6, data);
                call.arg(&k.lock)
                    .joined(&k.aux_parts(FENCE, ""))
                    .joined(&k.aux_parts(EXCLUSIVE_WAITERS, ""))
                    .arg(&self.owner)
                    .millis(self.ttl)
                    .arg(lease.request())
                    .arg(&self.waiter)
                    .millis(self.waiter_lease)
                    .arg(wait);
                call.done()
            }
            LockKind::Fair | LockKind::Leader => {
                let (ttl, wait, request) = owned();
                let line = Line::of(k, self.kind);
                Call {
                    script: scripts::FAIR_ACQUIRE.get(k.sharded),
                    keys: vec![line.holder, line.queue, line.timeouts, k.fence()],
                    args: self.queued_args(ttl, wait, line.channel, request),
                }
                .invocation()
            }
            LockKind::Permit => {
                let (ttl, wait, request) = owned();
                let mut args = self.queued_args(ttl, wait, k.semaphore_channel(), request);
                args.push(self.permits.to_string());
                Call {
                    script: scripts::SEMAPHORE_ACQUIRE.get(k.sharded),
                    keys: vec![
                        k.semaphore_holders(),
                        k.semaphore_queue(),
                        k.semaphore_timeouts(),
                        k.fence(),
                    ],
                    args,
                }
                .invocation()
            }
            LockKind::Read | LockKind::Write => {
                let (ttl, wait, request) = owned();
                Call {
                    script: scripts::RW_ACQUIRE.get(k.sharded),
                    keys: vec![
                        k.rw_writer(),
                        k.rw_readers(),
                        k.rw_waiting_writers(),
                        k.fence(),
                    ],
                    args: vec![
                        self.owner.clone(),
                        ttl,
                        side(self.kind).to_owned(),
                        self.waiter.clone(),
                        millis(self.waiter_lease),
                        wait,
                        request,
                    ],
                }
                .invocation()
            }
        }
    }

    /// The arguments the queued acquire scripts (fair lock, election, semaphore) begin
    /// with, in their order.
    fn queued_args(
        &self,
        ttl: String,
        wait: String,
        channel: String,
        request: String,
    ) -> Vec<String> {
        vec![
            self.owner.clone(),
            ttl,
            self.waiter.clone(),
            millis(self.waiter_lease),
            wait,
            channel,
            request,
        ]
    }

    /// The call that removes this request's queue place or waiting entry.
    pub(crate) fn leave(&self) -> Option<Call> {
        let k = &self.keys;
        match self.kind {
            LockKind::Exclusive => Some(Call {
                script: scripts::EXCLUSIVE_LEAVE.get(k.sharded),
                keys: vec![k.lock.clone(), k.exclusive_waiters()],
                args: vec![k.exclusive_channel(), self.waiter.clone()],
            }),
            LockKind::Fair | LockKind::Leader => {
                let line = Line::of(k, self.kind);
                Some(Call {
                    script: scripts::FAIR_LEAVE.get(k.sharded),
                    keys: vec![line.holder, line.queue, line.timeouts],
                    args: vec![line.channel, self.waiter.clone()],
                })
            }
            LockKind::Write => Some(Call {
                script: scripts::RW_LEAVE.get(k.sharded),
                keys: vec![k.rw_waiting_writers()],
                args: vec![k.rw_channel(), self.waiter.clone()],
            }),
            LockKind::Permit => Some(Call {
                script: scripts::SEMAPHORE_LEAVE.get(k.sharded),
                keys: vec![
                    k.semaphore_holders(),
                    k.semaphore_queue(),
                    k.semaphore_timeouts(),
                ],
                args: vec![k.semaphore_channel(), self.waiter.clone()],
            }),
            LockKind::Read => None,
        }
    }

    /// For an exclusive waiter: what its backend does with a wake-up on its channel
    /// for a waiter of its own that is no longer there (it left, but its entry
    /// outlived it: the removal failed or never ran). The entry is removed as that
    /// waiter's leave would, which wakes the next waiter if the lock is free, so a
    /// stale entry cannot swallow the releases' wake-ups until it expires.
    pub(crate) fn pass_on(&self, node: &crate::node::Node) -> Option<Unclaimed> {
        if self.kind != LockKind::Exclusive {
            return None;
        }
        let leave = self.leave()?;
        let node = node.clone();
        Some(Unclaimed(Arc::new(move |waiter: &[u8]| {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return;
            };
            let mut call = leave.clone();
            call.args[1] = String::from_utf8_lossy(waiter).into_owned();
            let caller = node.clone();
            node.cleanups().spawn_on(&runtime, async move {
                if let Err(error) = caller.call::<i64>("leave", &call).await {
                    tracing::debug!(%error, "could not pass on a wake-up for a waiter that is gone");
                }
            });
        })))
    }

    /// The channel to wait on and which messages wake this request.
    pub(crate) fn wake_on(&self) -> (String, Interest) {
        let k = &self.keys;
        match self.kind {
            LockKind::Exclusive => (
                k.exclusive_inbox(&self.inbox),
                Interest::Payload(self.waiter.clone().into_bytes()),
            ),
            LockKind::Fair | LockKind::Leader => (
                k.channel(self.kind),
                Interest::Payload(self.waiter.clone().into_bytes()),
            ),
            // A reader can only be unblocked by a writer leaving (or giving up).
            LockKind::Read => (k.rw_channel(), Interest::Payload(b"w".to_vec())),
            LockKind::Write => (k.rw_channel(), Interest::All),
            LockKind::Permit => (
                k.semaphore_channel(),
                Interest::Payload(self.waiter.clone().into_bytes()),
            ),
        }
    }

    /// The release of whatever the call of `lease` was granted, whatever its fence (a
    /// call run again after a lost reply takes its grant over with a new one): every
    /// value `owner:request:` starts. Only that call's request writes such values.
    pub(crate) fn undo(&self, lease: &RedisLease) -> Call {
        release(
            &self.keys,
            self.kind,
            &[crate::keys::concat(&[
                &self.owner,
                ":",
                lease.request(),
                ":",
            ])],
        )
    }
}

/// The undo of one acquire call ([`Request::undo`]), built only when it is needed:
/// most calls never need it.
#[derive(Clone, Debug)]
pub(crate) struct Undo {
    request: Arc<Request>,
    lease: RedisLease,
}

impl Undo {
    /// The undo of the call of `request` identified by `lease`.
    pub(crate) fn new(request: &Arc<Request>, lease: &RedisLease) -> Self {
        Undo {
            request: request.clone(),
            lease: lease.clone(),
        }
    }

    /// The call that frees whatever that acquire call was granted.
    pub(crate) fn call(&self) -> Call {
        self.request.undo(&self.lease)
    }
}

/// The keys of a line of candidates that take a lock one at a time in order: the fair
/// lock's, or an election's (the same scripts serve both).
struct Line {
    holder: String,
    queue: String,
    timeouts: String,
    channel: String,
}

impl Line {
    fn of(k: &Keys, kind: LockKind) -> Self {
        if kind == LockKind::Leader {
            Line {
                holder: k.leader(),
                queue: k.election_queue(),
                timeouts: k.election_timeouts(),
                channel: k.election_channel(),
            }
        } else {
            Line {
                holder: k.fair_holder(),
                queue: k.fair_queue(),
                timeouts: k.fair_timeouts(),
                channel: k.fair_channel(),
            }
        }
    }
}

fn side(kind: LockKind) -> &'static str {
    if kind == LockKind::Read {
        "r"
    } else {
        "w"
    }
}

/// How long a release receipt outlives the lease it freed (see
/// [`release_with_receipt`]): longer than lock-core keeps retrying a failed release,
/// which it gives up on a second after the lease would have run out (plus the drift
/// margin).
pub(crate) const RECEIPT_MARGIN: Duration = Duration::from_secs(5);

/// The release of a lease of `kind` holding any one of `values`, for callers that do
/// not read its outcome (undoing a grant, giving back a RedLock round): it leaves no
/// receipt. A value ending in `:` stands for every value it starts (see
/// [`Request::undo`]).
pub(crate) fn release(keys: &Keys, kind: LockKind, values: &[String]) -> Call {
    release_call(keys, kind, values, None)
}

/// The release of the lease `value` of `kind` won by the request of `lease`, whose
/// outcome is the caller's: when it frees the lease it writes a receipt
/// (`{namespace:name}:released:<request>`, holding `value`) that lives until the lease
/// would have run out and [`RECEIPT_MARGIN`] more. A release whose reply was lost
/// with its connection runs again (at once, on a new connection, or later from
/// lock-core's retries) and finds the lease gone; the receipt tells it that this
/// release freed it, so it succeeds rather than report the lease lost. A lease that
/// was already gone (run out, taken over, force-unlocked) when the release first ran
/// leaves no receipt and is still reported lost.
///
/// The exclusive lock's, the release most lock cycles make, is written straight into
/// its command.
pub(crate) fn release_with_receipt(
    keys: &Keys,
    kind: LockKind,
    lease: &RedisLease,
    value: &str,
) -> Invocation {
    if kind != LockKind::Exclusive {
        return release_call(keys, kind, &[value.to_owned()], Some(keys.receipt(lease)))
            .invocation();
    }
    let data = 4 * keys.lock.len() + lease.request().len() + value.len() + 64;
    let mut call = Packer::new(scripts::EXCLUSIVE_RELEASE.get(keys.sharded), 3, 3, data);
    call.arg(&keys.lock)
        .joined(&keys.aux_parts(EXCLUSIVE_WAITERS, ""))
        .joined(&keys.aux_parts(RECEIPT, lease.request()))
        .joined(&keys.aux_parts(EXCLUSIVE_CHANNEL, ""))
        .millis(RECEIPT_MARGIN)
        .arg(value);
    call.done()
}

fn release_call(keys: &Keys, kind: LockKind, values: &[String], receipt: Option<String>) -> Call {
    let margin = millis(RECEIPT_MARGIN);
    let (script, mut key_list, mut args): (&'static Script, _, _) = match kind {
        LockKind::Exclusive => (
            scripts::EXCLUSIVE_RELEASE.get(keys.sharded),
            vec![keys.lock.clone(), keys.exclusive_waiters()],
            vec![keys.exclusive_channel(), margin],
        ),
        LockKind::Fair | LockKind::Leader => {
            let line = Line::of(keys, kind);
            (
                scripts::FAIR_RELEASE.get(keys.sharded),
                vec![line.holder, line.queue],
                vec![line.channel, margin],
            )
        }
        LockKind::Permit => (
            scripts::SEMAPHORE_RELEASE.get(keys.sharded),
            vec![keys.semaphore_holders(), keys.semaphore_queue()],
            vec![keys.semaphore_channel(), margin],
        ),
        LockKind::Read | LockKind::Write => (
            scripts::RW_RELEASE.get(keys.sharded),
            vec![keys.rw_writer(), keys.rw_readers()],
            vec![keys.rw_channel(), side(kind).to_owned(), margin],
        ),
    };
    key_list.extend(receipt);
    args.extend(values.iter().cloned());
    Call {
        script,
        keys: key_list,
        args,
    }
}

/// One renewal of many leases on one cluster node, whatever their slots:
/// `(key, how it is stored, value)` each. The first key routes the call; the others are
/// arguments, which a script flagged `allow-cross-slot-keys` may touch when this node
/// serves them.
pub(crate) fn renew_on_node<'a>(
    leases: impl IntoIterator<Item = (String, Stored, &'a str)>,
    ttl: Duration,
) -> Call {
    let mut call = Call {
        script: &scripts::RENEW_ON_NODE,
        keys: Vec::new(),
        args: vec![millis(ttl)],
    };
    for (key, stored, value) in leases {
        if call.keys.is_empty() {
            call.keys.push(key.clone());
        }
        call.args.push(key);
        call.args.push(stored.code().to_owned());
        call.args.push(value.to_owned());
    }
    call
}

/// One renewal of many leases: `(key, how it is stored, value)` each.
pub(crate) fn renew<'a>(
    leases: impl IntoIterator<Item = (String, Stored, &'a str)>,
    ttl: Duration,
) -> Call {
    let mut call = Call {
        script: scripts::RENEW.get(false),
        keys: Vec::new(),
        args: vec![millis(ttl)],
    };
    for (key, stored, value) in leases {
        call.keys.push(key);
        call.args.push(stored.code().to_owned());
        call.args.push(value.to_owned());
    }
    call
}

/// RedLock holds no elections: a leader's value would have to be proclaimed on a
/// majority of masters and read back from one.
pub(crate) fn refuse_elections(family: LockFamily) -> lock_core::Result<()> {
    match family {
        LockFamily::Election => Err(lock_core::Error::Unsupported {
            backend: "redis",
            operation: "elections",
        }),
        _ => Ok(()),
    }
}

/// What [`inspect`] does with the leases of a lock family it finds.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Inspect {
    /// Answers whether any is held (`is_locked`).
    Look,
    /// Removes them all (`force_unlock`).
    RemoveAll,
    /// Removes the one with this fencing token (`force_unlock_holder`).
    RemoveToken(u64),
}

fn family_arg(family: LockFamily) -> &'static str {
    match family {
        LockFamily::Exclusive => "e",
        LockFamily::Fair => "f",
        LockFamily::ReadWrite => "rw",
        LockFamily::Semaphore => "s",
        LockFamily::Election => "l",
    }
}

/// `is_locked`, `force_unlock` or `force_unlock_holder` for `family`, as `what` says.
pub(crate) fn inspect(keys: &Keys, family: LockFamily, what: Inspect) -> Call {
    let mode = match what {
        Inspect::Look => "0".to_owned(),
        Inspect::RemoveAll => "1".to_owned(),
        Inspect::RemoveToken(fence) => format!("={fence}"),
    };
    Call {
        script: scripts::INSPECT.get(keys.sharded),
        keys: vec![
            keys.lock.clone(),
            keys.fair_holder(),
            keys.fair_queue(),
            keys.rw_writer(),
            keys.rw_readers(),
            keys.semaphore_holders(),
            keys.semaphore_queue(),
            keys.leader(),
            keys.election_queue(),
            keys.exclusive_waiters(),
        ],
        args: vec![
            family_arg(family).to_owned(),
            mode,
            keys.exclusive_channel(),
            keys.fair_channel(),
            keys.rw_channel(),
            keys.semaphore_channel(),
            keys.election_channel(),
        ],
    }
}

/// The holders of `family` and its waiters where they are counted (`holders.lua`).
pub(crate) fn holders(keys: &Keys, family: LockFamily) -> Call {
    Call {
        script: scripts::HOLDERS.get(keys.sharded),
        keys: vec![
            keys.lock.clone(),
            keys.fair_holder(),
            keys.fair_timeouts(),
            keys.rw_writer(),
            keys.rw_readers(),
            keys.semaphore_holders(),
            keys.semaphore_timeouts(),
            keys.leader(),
            keys.election_timeouts(),
            keys.exclusive_waiters(),
        ],
        args: vec![family_arg(family).to_owned()],
    }
}

/// Whether the lease stored as `value` of `kind` is still there (see `held.lua`).
pub(crate) fn held(k: &Keys, kind: LockKind, value: &str) -> Call {
    let (key, stored) = k.lease_key(kind);
    Call {
        script: scripts::HELD.get(k.sharded),
        keys: vec![key],
        args: vec![stored.code().to_owned(), value.to_owned()],
    }
}

/// Publishes `value` as the value of the leader whose lease is stored as `lease`
/// (see `proclaim.lua`).
pub(crate) fn proclaim(k: &Keys, lease: &str, value: &str) -> Call {
    Call {
        script: scripts::PROCLAIM.get(k.sharded),
        keys: vec![k.leader(), k.leader_value()],
        args: vec![lease.to_owned(), value.to_owned()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::{LockKey, LockName, Namespace};

    fn packed(invocation: &Invocation) -> Vec<u8> {
        invocation.cmd.get_packed_command()
    }

    fn exclusive_request(sharded: bool) -> Request {
        let key = LockKey::new(
            Namespace::new("app").unwrap(),
            LockName::new("jobs").unwrap(),
        );
        Request {
            keys: Keys::for_deployment(&key, sharded),
            kind: LockKind::Exclusive,
            permits: 1,
            owner: "c:1".into(),
            ttl: Duration::from_secs(30),
            waiter: "inbox/7".into(),
            inbox: "inbox".into(),
            waiter_lease: Duration::from_millis(1500),
        }
    }

    /// The exclusive lock's acquire and release are written straight into their
    /// commands; they must stay the calls the scripts read, key for key.
    #[test]
    fn the_exclusive_calls_written_in_place_are_the_scripts_calls() {
        for sharded in [false, true] {
            let request = exclusive_request(sharded);
            let k = &request.keys;
            let lease = RedisLease::new("9f.desc");
            for wait in [false, true] {
                let expected = Call {
                    script: scripts::EXCLUSIVE_ACQUIRE.get(sharded),
                    keys: vec![k.lock.clone(), k.fence(), k.exclusive_waiters()],
                    args: vec![
                        "c:1".into(),
                        "30000".into(),
                        "9f.desc".into(),
                        "inbox/7".into(),
                        "1500".into(),
                        if wait { "1" } else { "0" }.into(),
                    ],
                };
                assert_eq!(
                    packed(&request.acquire_with(&lease, wait)),
                    packed(&expected.invocation())
                );
            }
            let value = "c:1:9f.desc:12";
            let expected = release_call(
                k,
                LockKind::Exclusive,
                &[value.to_owned()],
                Some(k.receipt(&lease)),
            );
            assert_eq!(
                packed(&release_with_receipt(k, LockKind::Exclusive, &lease, value)),
                packed(&expected.invocation())
            );
        }
    }

    #[test]
    fn an_invocation_is_the_evalsha_of_the_calls_keys_and_arguments() {
        let call = Call {
            script: scripts::EXCLUSIVE_RELEASE.get(false),
            keys: vec!["app:jobs".into(), "{app:jobs}:waiting".into()],
            args: vec!["{app:jobs}:channel".into(), "5000".into(), "o:r:7".into()],
        };
        let hash = call.script.get_hash();
        let mut expected = format!(
            "*8\r\n$7\r\nEVALSHA\r\n${}\r\n{hash}\r\n$1\r\n2\r\n",
            hash.len()
        );
        for part in call.keys.iter().chain(&call.args) {
            expected.push_str(&format!("${}\r\n{part}\r\n", part.len()));
        }
        let packed = call.invocation().cmd.get_packed_command();
        assert_eq!(String::from_utf8_lossy(&packed), expected);
    }
}
