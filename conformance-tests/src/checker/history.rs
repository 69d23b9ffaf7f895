//! What a run did: every call, grant, sample of the library's belief and give-up, in one
//! order, with times on one clock.
//!
//! Events are appended under one mutex, and a sample of `is_held()` is taken inside it,
//! so the order of the events is the order things happened in: a sample that says held
//! was true at its place in the list.

use std::fmt;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use lock_core::{LeaseWatch, LockKind};
use tokio::time::Instant;

/// Which acquisition a hold is: an index into [`History`]'s holds.
pub(crate) type HoldId = usize;

/// One thing that happened.
#[derive(Clone, Debug)]
pub(crate) struct Event {
    /// Its place in the history.
    pub(crate) seq: usize,
    /// When, since the run started.
    pub(crate) at: Duration,
    /// The task (or `usize::MAX` for the run itself).
    pub(crate) task: usize,
    /// What.
    pub(crate) what: What,
}

/// What happened.
#[derive(Clone, Debug)]
pub(crate) enum What {
    /// A call started: an acquire (of names `names`), a downgrade, a release, ...
    Call {
        call: usize,
        client: usize,
        desc: String,
        names: Vec<usize>,
        /// For an acquire with a wait limit: the limit.
        limit: Option<Duration>,
    },
    /// A call ended.
    Returned {
        call: usize,
        outcome: String,
        /// Whether this outcome counts for the wait-limit check (a grant or a timeout
        /// the library reported; not a cancel or an outer timeout).
        timed: bool,
    },
    /// An acquisition was granted (by `call`).
    Granted {
        call: usize,
        hold: HoldId,
        name: usize,
    },
    /// The library's belief about a hold, sampled.
    Sample { hold: HoldId, held: bool },
    /// The last guard of a hold was released or dropped: its holder gave up believing.
    GaveUp { hold: HoldId, how: &'static str },
    /// The hold's `lost()` future resolved.
    Lost { hold: HoldId, reason: String },
    /// A client was shut down (`done`: the call returned).
    Shutdown { client: usize, done: bool },
    /// A client was cut off from the server (or only from its replies).
    Cut { client: usize, replies_only: bool },
    /// The server's replies reach a client this many ms late from now on.
    Delayed { client: usize, ms: u64 },
    /// The network between that client and its server came back.
    Healed { client: usize },
    /// That client's network fault, aimed at a downgrade, starts as it asks for one.
    AimedAtDowngrade { client: usize },
    /// The server was frozen for this many ms: no client gets an answer meanwhile.
    Paused { ms: u64 },
    /// The server was thawed.
    Resumed,
    /// The server was killed (SIGKILL): every connection drops.
    Killed,
    /// The server was started again and serves.
    Restarted,
    /// A fault on one member of the cluster began (what, and on which member), to be
    /// healed `ms` later.
    Member { fault: String, ms: u64 },
    /// That member is back (its network healed, thawed, or serving again).
    MemberBack { fault: String },
    /// Anything else worth seeing in an excerpt.
    Note(String),
}

/// One acquisition and what the run knows about it.
pub(crate) struct Hold {
    pub(crate) name: usize,
    pub(crate) kind: LockKind,
    pub(crate) token: u64,
    /// Holds of one owner (a write hold and the read hold it downgraded to) never
    /// conflict.
    pub(crate) owner: usize,
    pub(crate) client: usize,
    /// Guards the task still has on it.
    pub(crate) guards: usize,
    watch: LeaseWatch,
}

#[derive(Default)]
struct Inner {
    events: Vec<Event>,
    holds: Vec<Hold>,
    calls: usize,
}

/// The history of one run.
pub(crate) struct History {
    start: Instant,
    inner: Mutex<Inner>,
    names: Vec<String>,
}

impl History {
    pub(crate) fn new(names: Vec<String>) -> Self {
        History {
            start: Instant::now(),
            inner: Mutex::new(Inner::default()),
            names,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, inner: &mut Inner, task: usize, what: What) {
        let seq = inner.events.len();
        inner.events.push(Event {
            seq,
            at: self.start.elapsed(),
            task,
            what,
        });
    }

    /// Records anything.
    pub(crate) fn record(&self, task: usize, what: What) {
        let mut inner = self.lock();
        self.push(&mut inner, task, what);
    }

    /// Records the start of a call; returns its id.
    pub(crate) fn call(
        &self,
        task: usize,
        client: usize,
        desc: String,
        names: Vec<usize>,
        limit: Option<Duration>,
    ) -> usize {
        let mut inner = self.lock();
        let call = inner.calls;
        inner.calls += 1;
        self.push(
            &mut inner,
            task,
            What::Call {
                call,
                client,
                desc,
                names,
                limit,
            },
        );
        call
    }

    /// Records the end of a call.
    pub(crate) fn returned(&self, task: usize, call: usize, outcome: String, timed: bool) {
        self.record(
            task,
            What::Returned {
                call,
                outcome,
                timed,
            },
        );
    }

    /// Records a grant and samples every live hold of its name; returns the hold's id.
    /// `owner` is the owner's first hold (`None`: a new owner, this hold).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn granted(
        &self,
        task: usize,
        call: usize,
        client: usize,
        name: usize,
        kind: LockKind,
        owner: Option<HoldId>,
        watch: LeaseWatch,
    ) -> HoldId {
        let mut inner = self.lock();
        let hold = inner.holds.len();
        let owner = owner.map_or(hold, |o| inner.holds[o].owner);
        let token = watch.fencing_token();
        inner.holds.push(Hold {
            name,
            kind,
            token,
            owner,
            client,
            guards: 1,
            watch,
        });
        self.push(&mut inner, task, What::Granted { call, hold, name });
        self.sample_name(&mut inner, task, name);
        hold
    }

    /// The name a hold is on.
    pub(crate) fn name_of(&self, hold: HoldId) -> usize {
        self.lock().holds[hold].name
    }

    /// The read hold that a downgrade of `write` re-entered, if its answer has the
    /// token of a read hold of the same owner still held (the read side an earlier
    /// downgrade made): it counts one more guard there instead of a grant.
    pub(crate) fn reentered_read(&self, write: HoldId, token: u64) -> Option<HoldId> {
        let mut inner = self.lock();
        let owner = inner.holds[write].owner;
        let hold = inner.holds.iter().position(|h| {
            h.owner == owner && h.kind == LockKind::Read && h.token == token && h.guards > 0
        })?;
        inner.holds[hold].guards += 1;
        Some(hold)
    }

    /// One more guard on `hold` (a re-entry).
    pub(crate) fn add_guard(&self, hold: HoldId) {
        self.lock().holds[hold].guards += 1;
    }

    /// A guard of `hold` is being released or dropped: samples the name first, and if
    /// it was the last guard, records that the holder gave up.
    pub(crate) fn give_up(&self, task: usize, hold: HoldId, how: &'static str) {
        let mut inner = self.lock();
        let name = inner.holds[hold].name;
        self.sample_name(&mut inner, task, name);
        let h = &mut inner.holds[hold];
        h.guards = h.guards.saturating_sub(1);
        if h.guards == 0 {
            self.push(&mut inner, task, What::GaveUp { hold, how });
        }
    }

    /// Samples every hold of `name` that its task has not given up.
    pub(crate) fn probe(&self, task: usize, name: usize) {
        let mut inner = self.lock();
        self.sample_name(&mut inner, task, name);
    }

    /// Samples every hold not given up.
    pub(crate) fn probe_all(&self, task: usize) {
        let mut inner = self.lock();
        for name in 0..self.names.len() {
            self.sample_name(&mut inner, task, name);
        }
    }

    /// Samples every hold of `client` not given up (after its shutdown).
    pub(crate) fn probe_client(&self, task: usize, client: usize) {
        let mut inner = self.lock();
        let live: Vec<(HoldId, bool)> = inner
            .holds
            .iter()
            .enumerate()
            .filter(|(_, h)| h.client == client && h.guards > 0)
            .map(|(id, h)| (id, h.watch.is_held()))
            .collect();
        for (hold, held) in live {
            self.push(&mut inner, task, What::Sample { hold, held });
        }
    }

    fn sample_name(&self, inner: &mut Inner, task: usize, name: usize) {
        // Each is_held() is read here, under the lock, in the order the samples are
        // listed.
        let live: Vec<(HoldId, bool)> = inner
            .holds
            .iter()
            .enumerate()
            .filter(|(_, h)| h.name == name && h.guards > 0)
            .map(|(id, h)| (id, h.watch.is_held()))
            .collect();
        for (hold, held) in live {
            self.push(inner, task, What::Sample { hold, held });
        }
    }

    /// The events and holds, once the run is over.
    pub(crate) fn finish(&self) -> Recorded {
        let inner = self.lock();
        Recorded {
            names: self.names.clone(),
            events: inner.events.clone(),
            holds: inner
                .holds
                .iter()
                .map(|h| HoldInfo {
                    name: h.name,
                    kind: h.kind,
                    token: h.token,
                    owner: h.owner,
                    client: h.client,
                })
                .collect(),
        }
    }
}

/// A hold, as the checks see it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HoldInfo {
    pub(crate) name: usize,
    pub(crate) kind: LockKind,
    pub(crate) token: u64,
    pub(crate) owner: usize,
    pub(crate) client: usize,
}

/// A finished history.
#[derive(Clone, Debug)]
pub(crate) struct Recorded {
    pub(crate) names: Vec<String>,
    pub(crate) events: Vec<Event>,
    pub(crate) holds: Vec<HoldInfo>,
}

impl Recorded {
    /// One event as a line of an excerpt.
    pub(crate) fn line(&self, event: &Event) -> String {
        let task = if event.task == usize::MAX {
            "run".to_owned()
        } else {
            format!("t{}", event.task)
        };
        format!(
            "#{:<5} {:>9.3?} {task:>4} {}",
            event.seq,
            event.at,
            Show(self, &event.what)
        )
    }
}

struct Show<'a>(&'a Recorded, &'a What);

impl fmt::Display for Show<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rec = self.0;
        let hold = |h: HoldId| {
            let info = rec.holds[h];
            format!(
                "h{h}({} {:?} token {} owner {} c{})",
                rec.names[info.name], info.kind, info.token, info.owner, info.client
            )
        };
        match self.1 {
            What::Call {
                call, client, desc, ..
            } => write!(f, "call {call} c{client}: {desc}"),
            What::Returned { call, outcome, .. } => write!(f, "call {call} returned: {outcome}"),
            What::Granted { call, hold: h, .. } => write!(f, "call {call} granted {}", hold(*h)),
            What::Sample { hold: h, held } => write!(f, "sample {} is_held={held}", hold(*h)),
            What::GaveUp { hold: h, how } => write!(f, "gave up {} ({how})", hold(*h)),
            What::Lost { hold: h, reason } => write!(f, "lost() of {}: {reason}", hold(*h)),
            What::Shutdown { client, done } => {
                write!(
                    f,
                    "shutdown of c{client} {}",
                    if *done { "returned" } else { "called" }
                )
            }
            What::Cut {
                client,
                replies_only,
            } => match replies_only {
                false => write!(f, "c{client} cut off from the server"),
                true => write!(
                    f,
                    "c{client}'s replies lost from now on (requests still act)"
                ),
            },
            What::Delayed { client, ms } => {
                write!(f, "c{client}'s replies {ms} ms late from now on")
            }
            What::Healed { client } => write!(f, "c{client}'s network back"),
            What::AimedAtDowngrade { client } => {
                write!(f, "c{client} asks to downgrade: its network fault starts")
            }
            What::Paused { ms } => write!(f, "the server frozen for {ms} ms"),
            What::Killed => write!(f, "the server killed"),
            What::Restarted => write!(f, "the server started again, serving"),
            What::Resumed => f.write_str("the server thawed"),
            What::Member { fault, ms } => write!(f, "cluster: {fault} for {ms} ms"),
            What::MemberBack { fault } => write!(f, "cluster: healed after {fault}"),
            What::Note(note) => f.write_str(note),
        }
    }
}
