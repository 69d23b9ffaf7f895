//! The checks over a whole history.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use lock_core::LockKind;

use super::gen::PERMITS;
use super::history::{HoldId, Recorded, What};

/// A broken rule, with the part of the history that shows it.
#[derive(Clone, Debug)]
pub struct Violation {
    /// Which check: `overlap`, `fencing`, `wait-limit`, `shutdown`, `error`,
    /// `leftovers`, `panic` or `hung`.
    pub check: &'static str,
    /// What is wrong.
    pub message: String,
    /// The events around it, one per line.
    pub excerpt: Vec<String>,
}

/// Whether holds of kinds `a` and `b` on one name exclude each other. Exclusive, fair
/// and read-write locks, semaphores and elections of one name are separate locks (lock-core's
/// `LockFamily`); permits exclude each other only beyond the count (see [`permits`]).
fn conflict(a: LockKind, b: LockKind) -> bool {
    a.family() == b.family()
        && !(a == LockKind::Read && b == LockKind::Read)
        && a != LockKind::Permit
}

/// Runs every check on `rec`; `slack` is how late a wait may return past its limit.
pub(crate) fn verify(rec: &Recorded, slack: Duration) -> Vec<Violation> {
    let mut found = Vec::new();
    overlaps(rec, &mut found);
    permits(rec, &mut found);
    fencing(rec, &mut found);
    waits(rec, slack, &mut found);
    after_shutdown(rec, &mut found);
    errors(rec, &mut found);
    found
}

/// (1) No two conflicting holds of different owners were both believed held at once.
/// `is_held()` only goes from true to false, so a hold sampled true at two places was
/// true everywhere between them: two such spans that meet had a moment in common.
fn overlaps(rec: &Recorded, found: &mut Vec<Violation>) {
    let mut span: HashMap<HoldId, (usize, usize)> = HashMap::new();
    for event in &rec.events {
        if let What::Sample { hold, held: true } = event.what {
            span.entry(hold)
                .and_modify(|s| s.1 = event.seq)
                .or_insert((event.seq, event.seq));
        }
    }
    let mut ids: Vec<HoldId> = span.keys().copied().collect();
    ids.sort_unstable();
    for (i, &a) in ids.iter().enumerate() {
        for &b in &ids[i + 1..] {
            let (ha, hb) = (rec.holds[a], rec.holds[b]);
            if ha.name != hb.name || ha.owner == hb.owner || !conflict(ha.kind, hb.kind) {
                continue;
            }
            let (sa, sb) = (span[&a], span[&b]);
            let from = sa.0.max(sb.0);
            let to = sa.1.min(sb.1);
            if from <= to {
                found.push(Violation {
                    check: "overlap",
                    message: format!(
                        "{:?} h{a} (token {}) and {:?} h{b} (token {}) of `{}` both said is_held() at #{from}..=#{to}",
                        ha.kind, ha.token, hb.kind, hb.token, rec.names[ha.name]
                    ),
                    excerpt: excerpt(rec, ha.name, &[a, b], &[from, to]),
                });
                return;
            }
        }
    }
}

/// (1b) Never more than [`PERMITS`] permits of one semaphore believed held at once.
/// As in [`overlaps`], a hold sampled true at two places was held everywhere between;
/// intervals that pairwise meet share a point, so a sweep over the spans finds the
/// largest number held at one moment.
fn permits(rec: &Recorded, found: &mut Vec<Violation>) {
    let mut span: HashMap<HoldId, (usize, usize)> = HashMap::new();
    for event in &rec.events {
        if let What::Sample { hold, held: true } = event.what {
            if rec.holds[hold].kind == LockKind::Permit {
                span.entry(hold)
                    .and_modify(|s| s.1 = event.seq)
                    .or_insert((event.seq, event.seq));
            }
        }
    }
    for name in 0..rec.names.len() {
        // (seq, 0 for a start / 1 for an end, hold): starts before ends at one seq.
        let mut edges: Vec<(usize, u8, HoldId)> = Vec::new();
        for (&hold, &(from, to)) in &span {
            if rec.holds[hold].name == name {
                edges.push((from, 0, hold));
                edges.push((to, 1, hold));
            }
        }
        edges.sort_unstable();
        let mut open: Vec<HoldId> = Vec::new();
        for (seq, edge, hold) in edges {
            if edge == 1 {
                open.retain(|&h| h != hold);
                continue;
            }
            open.push(hold);
            if open.len() > PERMITS as usize {
                let tokens: Vec<String> = open
                    .iter()
                    .map(|&h| format!("h{h} (token {})", rec.holds[h].token))
                    .collect();
                found.push(Violation {
                    check: "permits",
                    message: format!(
                        "{} permits of `{}` ({PERMITS} permits) all said is_held() at #{seq}: {}",
                        open.len(),
                        rec.names[name],
                        tokens.join(", ")
                    ),
                    excerpt: excerpt(rec, name, &open, &[seq]),
                });
                return;
            }
        }
    }
}

/// (2) Fencing tokens of one name (shared by its exclusive, fair and read-write locks)
/// follow real-time order: a grant that returned before another acquire was called
/// has the smaller token.
fn fencing(rec: &Recorded, found: &mut Vec<Violation>) {
    let mut call_start: HashMap<usize, usize> = HashMap::new();
    // (name, hold, call, granted at)
    let mut grants: Vec<(usize, HoldId, usize, usize)> = Vec::new();
    for event in &rec.events {
        match event.what {
            What::Call { call, .. } => {
                call_start.insert(call, event.seq);
            }
            What::Granted {
                call, hold, name, ..
            } => grants.push((name, hold, call, event.seq)),
            _ => {}
        }
    }
    for &(name, a, _, granted_a) in &grants {
        for &(name_b, b, call_b, _) in &grants {
            if name != name_b || a == b {
                continue;
            }
            let called_b = call_start[&call_b];
            let (ta, tb) = (rec.holds[a].token, rec.holds[b].token);
            if granted_a < called_b && ta >= tb {
                found.push(Violation {
                    check: "fencing",
                    message: format!(
                        "h{b} of `{}` was asked for (#{called_b}) after h{a} was granted (#{granted_a}) but got token {tb} <= {ta}",
                        rec.names[name]
                    ),
                    excerpt: excerpt(rec, name, &[a, b], &[called_b]),
                });
                return;
            }
        }
    }
}

/// (3) Every wait the library ended (a grant or its timeout) ended within its limit
/// plus `slack`. While a client's replies come late, a grant may also take two delays
/// more (the reply that found it free, and the one that completes it), and a single try
/// is bounded by the request timeout, not by its zero limit; a timeout must still come
/// on time. A frozen server delays every client's replies by up to its pause, and a
/// killed one the calls made before its restart by as long as it was down. A faulted
/// member of a cluster counts as a pause of the whole server for as long as the fault
/// lasts: until the others elect a leader, or a client finds another member, nothing
/// that needs the leader answers.
fn waits(rec: &Recorded, slack: Duration, found: &mut Vec<Violation>) {
    struct Open {
        started: Duration,
        limit: Duration,
        names: Vec<usize>,
        seq: usize,
        client: usize,
        /// The delay of the client's replies during the call, if any.
        slowed: Option<Duration>,
        /// The server's pause during the call, if any.
        frozen: Option<Duration>,
    }
    let mut open: HashMap<usize, Open> = HashMap::new();
    // Per client: the delay of its replies, and until when it lasts (replies held back
    // before the heal still arrive up to a delay after it).
    let mut slow: HashMap<usize, (Duration, Duration)> = HashMap::new();
    // The same for every client while the server is frozen.
    let mut frozen: Option<(Duration, Duration)> = None;
    let slowed_at = |slow: &HashMap<usize, (Duration, Duration)>,
                     frozen: Option<(Duration, Duration)>,
                     client: usize,
                     at: Duration| {
        let late = |(delay, until): (Duration, Duration)| (at < until).then_some(delay);
        let by_network = slow.get(&client).copied().and_then(late);
        let by_server = frozen.and_then(late);
        by_network.max(by_server)
    };
    // A server down between its kill and its restart answers nobody, as a frozen one:
    // each kill counts as a pause as long as that.
    let mut downs = down_times(rec).into_iter();
    for event in &rec.events {
        match &event.what {
            What::Paused { .. } | What::Killed | What::Member { .. } => {
                let pause = match &event.what {
                    What::Paused { ms } | What::Member { ms, .. } => Duration::from_millis(*ms),
                    _ => downs.next().unwrap_or_default(),
                };
                frozen = Some((pause, Duration::MAX));
                for call in open.values_mut() {
                    call.slowed = call.slowed.max(Some(pause));
                    call.frozen = Some(pause);
                }
            }
            // A killed server's connections were dropped, so no reply comes late after
            // its restart; a thawed one's held-back replies may, up to a pause later.
            What::Restarted => {
                if let Some((_, until)) = frozen.as_mut() {
                    *until = event.at;
                }
            }
            What::Resumed | What::MemberBack { .. } => {
                if let Some((pause, until)) = frozen.as_mut() {
                    *until = event.at + *pause;
                }
            }
            What::Delayed { client, ms } => {
                let delay = Duration::from_millis(*ms);
                slow.insert(*client, (delay, Duration::MAX));
                for call in open.values_mut().filter(|c| c.client == *client) {
                    call.slowed = Some(delay);
                }
            }
            What::Healed { client } => {
                if let Some((delay, until)) = slow.get_mut(client) {
                    *until = event.at + *delay;
                }
            }
            What::Call {
                call,
                client,
                limit: Some(limit),
                names,
                ..
            } => {
                open.insert(
                    *call,
                    Open {
                        started: event.at,
                        limit: *limit,
                        names: names.clone(),
                        seq: event.seq,
                        client: *client,
                        slowed: slowed_at(&slow, frozen, *client, event.at),
                        frozen: frozen
                            .filter(|(_, until)| event.at < *until)
                            .map(|(pause, _)| pause),
                    },
                );
            }
            What::Returned {
                call,
                timed: true,
                outcome,
            } => {
                if let Some(Open {
                    started,
                    limit,
                    names,
                    seq,
                    slowed,
                    frozen,
                    ..
                }) = open.remove(call)
                {
                    let extra = match slowed {
                        Some(_) if limit.is_zero() => continue,
                        Some(delay) if outcome.starts_with("granted") => delay * 2,
                        // A timeout may still wait out a frozen server once (a
                        // multi-lock gives back what it got before it answers).
                        _ => frozen.unwrap_or(Duration::ZERO),
                    };
                    let took = event.at.saturating_sub(started);
                    if took > limit + slack + extra {
                        let name = names.first().copied().unwrap_or(0);
                        found.push(Violation {
                            check: "wait-limit",
                            message: format!(
                                "call {call} with a wait limit of {limit:?} returned ({outcome}) after {took:?}, more than the limit plus {:?}", slack + extra
                            ),
                            excerpt: excerpt(rec, name, &[], &[seq]),
                        });
                        return;
                    }
                }
            }
            _ => {}
        }
    }
}

/// How long the server was down after each kill, in order: until it served again, or
/// until the history ends.
fn down_times(rec: &Recorded) -> Vec<Duration> {
    let end = rec.events.last().map_or(Duration::ZERO, |e| e.at);
    let mut downs = Vec::new();
    let mut killed = None;
    for event in &rec.events {
        match event.what {
            What::Killed => killed = Some(event.at),
            What::Restarted => {
                if let Some(at) = killed.take() {
                    downs.push(event.at.saturating_sub(at));
                }
            }
            _ => {}
        }
    }
    if let Some(at) = killed {
        downs.push(end.saturating_sub(at));
    }
    downs
}

/// A client's guards say not held once its `shutdown()` returned.
fn after_shutdown(rec: &Recorded, found: &mut Vec<Violation>) {
    let mut shut = BTreeSet::new();
    for event in &rec.events {
        match event.what {
            What::Shutdown { client, done: true } => {
                shut.insert(client);
            }
            What::Sample { hold, held: true } if shut.contains(&rec.holds[hold].client) => {
                let h = rec.holds[hold];
                found.push(Violation {
                    check: "shutdown",
                    message: format!(
                        "h{hold} of `{}` still said is_held() after client c{} was shut down",
                        rec.names[h.name], h.client
                    ),
                    excerpt: excerpt(rec, h.name, &[hold], &[event.seq]),
                });
                return;
            }
            _ => {}
        }
    }
}

/// Valid calls never fail as invalid or unsupported.
fn errors(rec: &Recorded, found: &mut Vec<Violation>) {
    for event in &rec.events {
        if let What::Returned { outcome, call, .. } = &event.what {
            if outcome.contains("invalid argument") || outcome.contains("does not support") {
                found.push(Violation {
                    check: "error",
                    message: format!("call {call} failed: {outcome}"),
                    excerpt: vec![rec.line(event)],
                });
                return;
            }
        }
    }
}

/// The events of `name` up to a little past the last of `marks`: calls naming it, its
/// grants, give-ups, losses, shutdowns and cuts, and the samples of `holds` where they
/// change or are marked.
pub(crate) fn excerpt(
    rec: &Recorded,
    name: usize,
    holds: &[HoldId],
    marks: &[usize],
) -> Vec<String> {
    let at = marks.iter().copied().max().unwrap_or(0);
    const BEFORE: usize = 40;
    const AFTER: usize = 6;
    let mut calls = BTreeSet::new();
    let mut last_sample: HashMap<HoldId, bool> = HashMap::new();
    let mut lines = Vec::new();
    let mut after = 0;
    for event in &rec.events {
        let keep = match &event.what {
            What::Call { call, names, .. } if names.contains(&name) => {
                calls.insert(*call);
                true
            }
            What::Returned { call, .. } => calls.contains(call),
            What::Granted { name: n, .. } => *n == name,
            What::GaveUp { hold, .. } | What::Lost { hold, .. } => rec.holds[*hold].name == name,
            What::Sample { hold, held } if holds.contains(hold) => {
                // Each probe samples every live hold of the name in turn, so a mark's
                // neighbours are the other holds of the same probe.
                let near = marks.iter().any(|&m| event.seq <= m && m - event.seq <= 4);
                last_sample.insert(*hold, *held) != Some(*held) || near
            }
            What::Shutdown { .. }
            | What::Cut { .. }
            | What::Delayed { .. }
            | What::Healed { .. }
            | What::AimedAtDowngrade { .. }
            | What::Paused { .. }
            | What::Resumed
            | What::Killed
            | What::Restarted
            | What::Member { .. }
            | What::MemberBack { .. }
            | What::Note(_) => true,
            _ => false,
        };
        if keep {
            lines.push(rec.line(event));
            if event.seq > at {
                after += 1;
                if after >= AFTER {
                    break;
                }
            }
        }
    }
    if lines.len() > BEFORE + AFTER {
        let cut = lines.len() - BEFORE - AFTER;
        lines.drain(..cut);
        lines.insert(
            0,
            format!("... ({cut} earlier events of this name left out)"),
        );
    }
    lines
}

/// For leftovers: the grants whose fencing token a leftover line names, what became of
/// them, and the calls that ended without the library's answer (cancelled, timed out
/// outside, a release that failed or got no answer).
pub(crate) fn leftover_excerpt(rec: &Recorded, leftovers: &[String]) -> Vec<String> {
    const MAX: usize = 40;
    let tokens: BTreeSet<u64> = leftovers
        .iter()
        .filter_map(|line| line.rsplit(' ').next()?.trim_matches('"').parse().ok())
        .collect();
    let named: BTreeSet<HoldId> = (0..rec.holds.len())
        .filter(|&h| tokens.contains(&rec.holds[h].token))
        .collect();
    let mut lines: Vec<String> = rec
        .events
        .iter()
        .filter(|event| match &event.what {
            What::Granted { hold, .. } | What::GaveUp { hold, .. } | What::Lost { hold, .. } => {
                named.contains(hold)
            }
            What::Returned { outcome, .. } => {
                outcome.starts_with("cancelled")
                    || outcome.starts_with("outer")
                    || outcome.starts_with("release failed")
                    || outcome == "no answer"
            }
            What::Shutdown { .. }
            | What::Cut { .. }
            | What::Delayed { .. }
            | What::Healed { .. }
            | What::Paused { .. }
            | What::Resumed
            | What::Killed
            | What::Restarted
            | What::Member { .. }
            | What::MemberBack { .. } => true,
            _ => false,
        })
        .map(|event| rec.line(event))
        .collect();
    if lines.len() > MAX {
        let cut = lines.len() - MAX;
        lines.drain(..cut);
        lines.insert(0, format!("... ({cut} earlier events left out)"));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::conflict;
    use lock_core::LockKind::*;

    #[test]
    fn families_do_not_conflict() {
        assert!(conflict(Exclusive, Exclusive));
        assert!(conflict(Fair, Fair));
        assert!(conflict(Read, Write));
        assert!(conflict(Write, Write));
        assert!(!conflict(Read, Read));
        assert!(!conflict(Permit, Permit), "counted by `permits` instead");
        assert!(!conflict(Exclusive, Fair));
        assert!(!conflict(Exclusive, Write));
        assert!(!conflict(Fair, Read));
        assert!(conflict(Leader, Leader), "one leader at a time");
        assert!(!conflict(Leader, Exclusive));
    }
}
