//! One shared pub/sub connection per backend, multiplexing per-lock channels to the
//! waiters of this process.
//!
//! A waiter [`register`](PubSub::register)s for a channel, waits until the server has
//! confirmed the subscription ([`Registration::ready`]), and only then tries the lock:
//! a release published after the try is then seen, so no wake-up is lost. The first
//! waiter of a channel subscribes, the last one to leave unsubscribes; dropping a
//! [`Registration`] (for example with a dropped acquire future) is all it takes.
//!
//! Who is woken by a message is the waiter's [`Interest`], so a handoff wakes one
//! waiter per process rather than all of them.
//!
//! If the connection is lost, every waiter is woken; it retries, and its next
//! [`Registration::ready`] reconnects and subscribes again. A connection that goes
//! silent without closing is found by a PING every request timeout while anyone
//! waits, and dropped. On a Redis Cluster the connection is one per primary: when one
//! of them drops, the cluster client reconnects it and subscribes there again, and
//! only the waiters of the channels subscribed again are woken.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, RedisResult};
use tokio::sync::Notify;

use crate::error;
use crate::primary::Primary;

/// Which messages on a channel wake a waiter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Interest {
    /// Any message wakes one such waiter of this process (RedLock's exclusive
    /// waiters: only one can win, so waking more is wasted work).
    One,
    /// Any message wakes every such waiter.
    All,
    /// Only a message with exactly this payload wakes it (a fair waiter's id; a
    /// reader waiting for a writer to leave).
    Payload(Vec<u8>),
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    interest: Interest,
    /// Set when a wake-up was handed to this waiter and not yet consumed; a `One`
    /// waiter that leaves with it set passes it on, so a wake-up is never lost.
    pending: AtomicBool,
    notify: Notify,
}

impl Waiter {
    fn wake(&self) {
        self.pending.store(true, Ordering::Release);
        self.notify.notify_one();
    }
}

/// Called with the payload of an [`Unclaimed`] message.
pub(crate) type UnclaimedFn = dyn Fn(&[u8]) + Send + Sync;

/// What to do with a message on a channel that names no waiter registered here.
#[derive(Clone)]
pub(crate) struct Unclaimed(pub(crate) Arc<UnclaimedFn>);

impl std::fmt::Debug for Unclaimed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Unclaimed")
    }
}

#[derive(Debug, Default)]
struct Channel {
    waiters: Vec<Arc<Waiter>>,
    /// Called with a message no [`Interest::Payload`] waiter here matched: on an
    /// exclusive lock's backend channel, a wake-up for a waiter of this backend that
    /// is gone (its entry outlived it), which must be passed on.
    unclaimed: Option<Unclaimed>,
    /// The connection generation on which the server confirmed the subscription.
    subscribed: Option<u64>,
    /// Subscriptions sent here whose confirmation (a push on a cluster) has not been
    /// read yet: a confirmation beyond them is the cluster client's own.
    own_subscribes: u32,
}

#[derive(Debug, Default)]
struct State {
    channels: HashMap<String, Channel>,
    /// The generation of the live connection, if any.
    live: Option<u64>,
    next_generation: u64,
}

impl State {
    fn dispatch(&self, channel: &str, payload: &[u8]) {
        let Some(entry) = self.channels.get(channel) else {
            return;
        };
        let mut woke_one = false;
        let mut claimed = false;
        for waiter in &entry.waiters {
            match &waiter.interest {
                Interest::All => waiter.wake(),
                Interest::Payload(p) if p.as_slice() == payload => {
                    waiter.wake();
                    claimed = true;
                }
                Interest::Payload(_) => {}
                Interest::One if woke_one => {}
                Interest::One => {
                    // Skip waiters already woken: they will retry anyway.
                    if !waiter.pending.load(Ordering::Acquire) {
                        waiter.wake();
                        woke_one = true;
                    }
                }
            }
        }
        if let (false, Some(unclaimed)) = (claimed, &entry.unclaimed) {
            (unclaimed.0)(payload);
        }
    }

    /// Forgets `channel`'s subscription (the server dropped it) and wakes its
    /// waiters, whose next [`Registration::ready`] subscribes again. A channel nobody
    /// waits on any more was unsubscribed by us: nothing to do.
    fn resubscribe(&mut self, channel: &str) {
        if let Some(entry) = self.channels.get_mut(channel) {
            entry.subscribed = None;
            for waiter in &entry.waiters {
                waiter.wake();
            }
        }
    }

    /// The server confirmed a subscription to `channel`. One that is not the answer
    /// to a subscription sent here was made again by the cluster client after a
    /// node's connection dropped or a slot moved: messages published meanwhile were
    /// lost, so the channel's waiters look at their locks again.
    fn confirmed(&mut self, channel: &str) {
        let live = self.live;
        let Some(entry) = self.channels.get_mut(channel) else {
            return;
        };
        if entry.own_subscribes > 0 {
            entry.own_subscribes -= 1;
        } else if entry.subscribed.is_some() && entry.subscribed == live {
            for waiter in &entry.waiters {
                waiter.wake();
            }
        }
    }

    fn wake_all(&self) {
        for entry in self.channels.values() {
            for waiter in &entry.waiters {
                waiter.wake();
            }
        }
    }
}

/// The subscribing half of a live connection (a clone shares it).
#[derive(Clone)]
enum Sink {
    /// `SUBSCRIBE` on one server (or the current primary).
    Single(PubSubSink),
    /// `SSUBSCRIBE` on a cluster: each channel at the node that owns its slot (the
    /// connection resubscribes by itself after a slot moves).
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Sink::Single(_) => "Sink::Single",
            Sink::Cluster(_) => "Sink::Cluster",
        })
    }
}

impl Sink {
    async fn subscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            Sink::Single(sink) => sink.subscribe(channel).await,
            Sink::Cluster(conn) => conn.ssubscribe(channel).await,
        }
    }

    async fn unsubscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            Sink::Single(sink) => sink.unsubscribe(channel).await,
            Sink::Cluster(conn) => conn.sunsubscribe(channel).await,
        }
    }

    /// A PING on the connection; on a cluster, on every primary's (where the
    /// subscriptions are).
    async fn ping(&mut self) -> RedisResult<()> {
        match self {
            Sink::Single(sink) => sink.ping::<redis::Value>().await.map(drop),
            Sink::Cluster(conn) => {
                use redis::cluster_routing::{
                    MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo,
                };
                let every_primary = RoutingInfo::MultiNode((
                    MultipleNodeRoutingInfo::AllMasters,
                    Some(ResponsePolicy::AllSucceeded),
                ));
                conn.route_command(redis::cmd("PING"), every_primary)
                    .await
                    .map(drop)
            }
        }
    }
}

#[derive(Debug)]
struct Inner {
    primary: Arc<Primary>,
    /// Set for a Redis Cluster: sharded channels through the cluster client.
    cluster: Option<crate::config::RedisConfig>,
    connect_timeout: Duration,
    request_timeout: Duration,
    state: Mutex<State>,
    /// The subscribing half of the live connection. The async mutex also orders every
    /// SUBSCRIBE and UNSUBSCRIBE, so an unsubscribe can never overtake a newer
    /// subscribe of the same channel.
    sink: tokio::sync::Mutex<Option<(u64, Sink)>>,
    reader: Mutex<Option<tokio::task::AbortHandle>>,
    next_waiter: AtomicU64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(reader) = lock(&self.reader).take() {
            reader.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section below leaves the state consistent at each step.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The shared pub/sub connection of one backend (one Redis server).
#[derive(Clone, Debug)]
pub(crate) struct PubSub {
    inner: Arc<Inner>,
}

impl PubSub {
    /// No I/O: the connection is made by the first [`Registration::ready`].
    pub(crate) fn new(
        config: &crate::config::RedisConfig,
        primary: Arc<Primary>,
    ) -> lock_core::Result<Self> {
        let connect_timeout = config.connect_timeout();
        let request_timeout = config.request_timeout();
        Ok(PubSub {
            inner: Arc::new(Inner {
                primary,
                cluster: config.is_cluster().then(|| config.clone()),
                connect_timeout,
                request_timeout,
                state: Mutex::new(State::default()),
                sink: tokio::sync::Mutex::new(None),
                reader: Mutex::new(None),
                next_waiter: AtomicU64::new(1),
            }),
        })
    }

    /// Registers a waiter on `channel`. Messages are delivered to it from the moment
    /// [`Registration::ready`] returns.
    pub(crate) fn register(&self, channel: String, interest: Interest) -> Registration {
        let waiter = Arc::new(Waiter {
            id: self.inner.next_waiter.fetch_add(1, Ordering::Relaxed),
            interest,
            pending: AtomicBool::new(false),
            notify: Notify::new(),
        });
        lock(&self.inner.state)
            .channels
            .entry(channel.clone())
            .or_default()
            .waiters
            .push(waiter.clone());
        Registration {
            inner: self.inner.clone(),
            channel,
            waiter,
        }
    }

    /// How many channels this process is subscribed to or about to be (tests use it
    /// to check that dropped waiters leave nothing behind).
    pub(crate) fn channels(&self) -> usize {
        lock(&self.inner.state).channels.len()
    }
}

/// One waiter's interest in one channel. Dropping it removes the waiter and, if it
/// was the channel's last, unsubscribes (in a spawned task).
#[derive(Debug)]
pub(crate) struct Registration {
    inner: Arc<Inner>,
    channel: String,
    waiter: Arc<Waiter>,
}

impl Registration {
    /// Sets what a message on this registration's channel that names no waiter here
    /// does (see [`Unclaimed`]); the channel keeps it while anyone waits on it.
    pub(crate) fn on_unclaimed(&self, unclaimed: Unclaimed) {
        if let Some(entry) = lock(&self.inner.state).channels.get_mut(&self.channel) {
            entry.unclaimed = Some(unclaimed);
        }
    }

    /// Returns once the server has confirmed the subscription on the live connection,
    /// connecting first if needed.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call leaves at most a subscription that the last
    /// registration's drop removes.
    pub(crate) async fn ready(&self) -> lock_core::Result<()> {
        if self.is_subscribed() {
            return Ok(());
        }
        let mut sink = self.inner.sink.lock().await;
        let live = lock(&self.inner.state).live;
        let generation = match (&*sink, live) {
            (Some((generation, _)), Some(live)) if *generation == live => live,
            _ => {
                *sink = None;
                let (generation, new_sink) = connect(&self.inner).await?;
                *sink = Some((generation, new_sink));
                generation
            }
        };
        if self.is_subscribed() {
            return Ok(());
        }
        let Some((_, conn)) = sink.as_mut() else {
            return Err(error::Error::UnexpectedReply("pub/sub connection vanished".into()).into());
        };
        if let Some(entry) = lock(&self.inner.state).channels.get_mut(&self.channel) {
            entry.own_subscribes += 1;
        }
        let result = error::within(
            "SUBSCRIBE",
            self.inner.request_timeout,
            conn.subscribe(&self.channel),
        )
        .await;
        if let Err(err) = result {
            // The connection may be half dead: make the next waiter start afresh.
            drop_connection(&self.inner, &mut sink, "SUBSCRIBE failed");
            return Err(err);
        }
        let mut state = lock(&self.inner.state);
        if let Some(entry) = state.channels.get_mut(&self.channel) {
            entry.subscribed = Some(generation);
        }
        Ok(())
    }

    fn is_subscribed(&self) -> bool {
        let state = lock(&self.inner.state);
        let subscribed = state
            .channels
            .get(&self.channel)
            .and_then(|entry| entry.subscribed);
        subscribed.is_some() && subscribed == state.live
    }

    /// Resolves when a message for this waiter arrives (or arrived since the last
    /// call), or when the connection is lost.
    ///
    /// # Cancel safety
    /// Cancel safe: an undelivered wake-up stays stored for the next call.
    pub(crate) async fn notified(&self) {
        self.waiter.notify.notified().await;
        self.waiter.pending.store(false, Ordering::Release);
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut state = lock(&self.inner.state);
        let Some(entry) = state.channels.get_mut(&self.channel) else {
            return;
        };
        entry.waiters.retain(|w| w.id != self.waiter.id);
        if self.waiter.interest == Interest::One && self.waiter.pending.load(Ordering::Acquire) {
            // We were woken but leave without retrying: hand the wake-up on.
            if let Some(next) = entry
                .waiters
                .iter()
                .find(|w| w.interest == Interest::One && !w.pending.load(Ordering::Acquire))
            {
                next.wake();
            }
        }
        if !entry.waiters.is_empty() {
            return;
        }
        let subscribed = entry.subscribed.is_some();
        state.channels.remove(&self.channel);
        drop(state);
        if !subscribed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to unsubscribe from; the subscription only costs messages
            // that nobody reads, and ends with the connection.
            return;
        };
        let inner = Arc::downgrade(&self.inner);
        let channel = std::mem::take(&mut self.channel);
        runtime.spawn(unsubscribe(inner, channel));
    }
}

async fn unsubscribe(inner: Weak<Inner>, channel: String) {
    let Some(inner) = inner.upgrade() else {
        return;
    };
    let mut sink = inner.sink.lock().await;
    // A new waiter may have registered meanwhile; then the subscription stays.
    if lock(&inner.state).channels.contains_key(&channel) {
        return;
    }
    if let Some((_, conn)) = sink.as_mut() {
        let result = tokio::time::timeout(inner.request_timeout, conn.unsubscribe(&channel)).await;
        if !matches!(result, Ok(Ok(()))) {
            drop_connection(&inner, &mut sink, "UNSUBSCRIBE failed");
        }
    }
}

/// Opens a new pub/sub connection and starts its reader task.
async fn connect(inner: &Arc<Inner>) -> lock_core::Result<(u64, Sink)> {
    if let Some(config) = &inner.cluster {
        return connect_cluster(inner, config).await;
    }
    connect_single(inner).await
}

/// The next generation, made live; every channel must subscribe again on it.
fn next_generation(inner: &Inner) -> u64 {
    let mut state = lock(&inner.state);
    state.next_generation += 1;
    let generation = state.next_generation;
    state.live = Some(generation);
    for entry in state.channels.values_mut() {
        entry.subscribed = None;
        entry.own_subscribes = 0;
    }
    generation
}

/// A cluster connection whose pushes (RESP3) carry the sharded messages.
async fn connect_cluster(
    inner: &Arc<Inner>,
    config: &crate::config::RedisConfig,
) -> lock_core::Result<(u64, Sink)> {
    let (push, pushes) = tokio::sync::mpsc::unbounded_channel();
    let client = crate::cluster::client(config, Some(push))?;
    let conn = crate::cluster::connect(&client, inner.connect_timeout).await?;
    let generation = next_generation(inner);
    let task = tokio::spawn(read_pushes(Arc::downgrade(inner), pushes, generation));
    if let Some(old) = lock(&inner.reader).replace(task.abort_handle()) {
        old.abort();
    }
    tokio::spawn(keep_alive(Arc::downgrade(inner), generation));
    Ok((generation, Sink::Cluster(conn)))
}

/// Delivers sharded messages until the cluster connection ends, then wakes everyone so
/// they retry and subscribe again. One node's connection dropping ends nothing: the
/// cluster client reconnects it and subscribes there again, and each channel's
/// confirmation wakes only that channel's waiters.
async fn read_pushes(
    inner: Weak<Inner>,
    mut pushes: tokio::sync::mpsc::UnboundedReceiver<PushInfo>,
    generation: u64,
) {
    while let Some(push) = pushes.recv().await {
        let Some(inner) = inner.upgrade() else {
            return;
        };
        match push.kind {
            PushKind::SMessage | PushKind::Message => {
                if let [redis::Value::BulkString(channel), redis::Value::BulkString(payload), ..] =
                    &push.data[..]
                {
                    let channel = String::from_utf8_lossy(channel);
                    lock(&inner.state).dispatch(&channel, payload);
                }
            }
            // The server dropped a sharded subscription: its slot moved to another
            // node (a failover or resharding). The channel's waiters subscribe again,
            // where the slot is now, and look at the lock.
            PushKind::SUnsubscribe => {
                if let Some(redis::Value::BulkString(channel)) = push.data.first() {
                    let channel = String::from_utf8_lossy(channel);
                    lock(&inner.state).resubscribe(&channel);
                }
            }
            PushKind::SSubscribe | PushKind::Subscribe => {
                if let Some(redis::Value::BulkString(channel)) = push.data.first() {
                    let channel = String::from_utf8_lossy(channel);
                    lock(&inner.state).confirmed(&channel);
                }
            }
            _ => {}
        }
    }
    let Some(inner) = inner.upgrade() else {
        return;
    };
    let mut state = lock(&inner.state);
    if state.live == Some(generation) {
        state.live = None;
    }
    tracing::debug!("Redis Cluster pub/sub connection lost; waking every waiter");
    state.wake_all();
}

/// Opens a new pub/sub connection to the current primary and starts its reader task.
/// (Under Sentinel, a subscription left on a demoted primary still hears releases: a
/// primary's `PUBLISH` reaches its replicas' subscribers too.)
async fn connect_single(inner: &Arc<Inner>) -> lock_core::Result<(u64, Sink)> {
    let (primary, client) = inner.primary.client(inner.connect_timeout).await?;
    let pubsub = error::within(
        "connecting for pub/sub",
        inner.connect_timeout,
        client.get_async_pubsub(),
    )
    .await;
    let pubsub = match pubsub {
        Ok(pubsub) => pubsub,
        Err(err) => {
            // Refused or no answer: the primary may have moved.
            inner.primary.forget(primary);
            return Err(err);
        }
    };
    let (sink, stream) = pubsub.split();
    let generation = next_generation(inner);
    let task = tokio::spawn(read(Arc::downgrade(inner), stream, generation));
    if let Some(old) = lock(&inner.reader).replace(task.abort_handle()) {
        old.abort();
    }
    tokio::spawn(keep_alive(Arc::downgrade(inner), generation));
    Ok((generation, Sink::Single(sink)))
}

/// Pings the pub/sub connection of `generation` every request timeout while anyone
/// waits on it. A connection can die without closing (a firewall or NAT that forgot
/// it, a peer that vanished): its reader then waits for ever, and waiters would hear
/// of no release until each holder's lease ran out. One that does not answer within
/// the request timeout is dropped, and its waiters woken: they look at their locks and
/// subscribe again on a new connection.
async fn keep_alive(inner: Weak<Inner>, generation: u64) {
    loop {
        let Some(every) = inner.upgrade().map(|inner| inner.request_timeout) else {
            return;
        };
        tokio::time::sleep(every).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        {
            let state = lock(&inner.state);
            if state.live != Some(generation) {
                return;
            }
            if state.channels.is_empty() {
                continue;
            }
        }
        // Pinged on a clone, outside the sink's lock: subscribing waiters do not wait
        // behind a PING to a silent connection.
        let mut conn = match &*inner.sink.lock().await {
            Some((live, conn)) if *live == generation => conn.clone(),
            _ => return,
        };
        let answer = tokio::time::timeout(inner.request_timeout, conn.ping()).await;
        if matches!(answer, Ok(Ok(_))) {
            continue;
        }
        let mut sink = inner.sink.lock().await;
        if !matches!(&*sink, Some((live, _)) if *live == generation) {
            return; // replaced meanwhile
        }
        tracing::warn!(
            "Redis pub/sub connection did not answer a PING within {:?}; reconnecting",
            inner.request_timeout
        );
        // On a cluster the PING went to every primary: one silent primary replaces
        // the whole connection, and wakes every waiter.
        drop_connection(&inner, &mut sink, "PING unanswered");
        return;
    }
}

/// Drops the live connection held in `sink` (the caller holds the sink's lock): stops
/// its reader, and wakes every waiter, whose subscriptions were on it. They look at
/// their locks again and subscribe on a new connection; a waiter left asleep would
/// hear of no release until its holder's lease ran out.
fn drop_connection(inner: &Inner, sink: &mut Option<(u64, Sink)>, why: &str) {
    let Some((generation, _)) = sink.take() else {
        return;
    };
    if let Some(reader) = lock(&inner.reader).take() {
        reader.abort();
    }
    let mut state = lock(&inner.state);
    if state.live == Some(generation) {
        state.live = None;
    }
    tracing::debug!(
        why,
        "dropped the Redis pub/sub connection; waking every waiter"
    );
    state.wake_all();
}

/// Delivers messages until the connection ends, then wakes everyone so they retry
/// (and resubscribe on a new connection).
async fn read(inner: Weak<Inner>, mut stream: PubSubStream, generation: u64) {
    while let Some(msg) = stream.next().await {
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let channel = msg.get_channel_name();
        lock(&inner.state).dispatch(channel, msg.get_payload_bytes());
    }
    let Some(inner) = inner.upgrade() else {
        return;
    };
    let mut state = lock(&inner.state);
    if state.live == Some(generation) {
        state.live = None;
    }
    tracing::debug!("Redis pub/sub connection lost; waking every waiter");
    state.wake_all();
}
