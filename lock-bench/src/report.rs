//! The markdown report: one table per server, each contender's numbers with its
//! ratios to the floor and to the best peer on that server.

use std::fmt::Write;
use std::time::Duration;

use crate::contender::Role;
use crate::measured::{cycle_p50, handoff_p50, Measured, Target};
use crate::stats::Micros;

/// Handoffs slower than this are counted: a wake-up that was missed.
const SLOW_HANDOFF: Duration = Duration::from_millis(20);

/// The report for `targets`, with the settings it ran with. With several runs, a
/// median is the median of the runs' medians, followed by their range; a p99 and the
/// counts are over all runs' samples.
pub fn markdown(targets: &[Target], settings: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{settings}\n");
    for target in targets {
        let _ = writeln!(out, "### {}\n", target.backend);
        let _ = writeln!(
            out,
            "| lock | cycle p50 µs | cycle p99 µs | cycle ÷ floor | cycle ÷ best peer \
             | grants/s | counter | handoff p50 µs | handoff p99 µs | handoff ÷ floor \
             | handoff ÷ best peer | handoffs > 20 ms | back to releaser |"
        );
        let _ = writeln!(out, "|---|--:|--:|--:|--:|--:|---|--:|--:|--:|--:|--:|--:|");
        for m in &target.measured {
            let _ = writeln!(out, "{}", row(target, m));
        }
        for (name, why) in &target.failed {
            let _ = writeln!(out, "| {name} | failed: {} |", why.replace('|', "/"));
        }
        let _ = writeln!(out);
    }
    held_table(&mut out, targets);
    crowd_table(&mut out, targets);
    permits_table(&mut out, targets);
    out
}

/// Semaphores, ours and peers', per backend (`--permits`).
fn permits_table(out: &mut String, targets: &[Target]) {
    let rows: Vec<(&str, &crate::permits::Permits)> = targets
        .iter()
        .flat_map(|t| t.permits.iter().map(|p| (t.backend.as_str(), p)))
        .collect();
    let Some((_, first)) = rows.first() else {
        return;
    };
    let _ = writeln!(
        out,
        "### A semaphore of {} permits ({} workers x {} permits contended)\n",
        first.permits, first.workers, first.cycles
    );
    let _ = writeln!(
        out,
        "| backend | semaphore | permit cycle p50 µs | permit cycle p99 µs \
         | contended grants/s | most holders at once | grants beyond the count |"
    );
    let _ = writeln!(out, "|---|---|--:|--:|--:|--:|--:|");
    for (backend, p) in rows {
        let name = match p.role {
            Role::Ours => format!("**{}**", p.name),
            _ => p.name.clone(),
        };
        let _ = writeln!(
            out,
            "| {backend} | {name} | {} | {} | {:.0} | {} | {} |",
            Micros(p.cycle.percentile(50.0)),
            Micros(p.cycle.percentile(99.0)),
            p.throughput,
            p.most_at_once,
            if p.over == 0 {
                "0".to_owned()
            } else {
                format!("**{}**", p.over)
            }
        );
    }
    let _ = writeln!(out);
}

/// One client of ours holding many locks, per backend (`--held`).
fn held_table(out: &mut String, targets: &[Target]) {
    let rows: Vec<(&str, &crate::held::Held)> = targets
        .iter()
        .filter_map(|t| t.held.as_ref().map(|h| (t.backend.as_str(), h)))
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(out, "### One client holding many locks\n");
    let _ = writeln!(
        out,
        "| backend | locks | acquired in | client heap per lock | renewal tick \
         | sent per tick | received per tick | sent per lock per tick |"
    );
    let _ = writeln!(out, "|---|--:|--:|--:|--:|--:|--:|--:|");
    for (backend, h) in rows {
        let (sent, received, per_lock) = match h.per_tick {
            Some((sent, received)) => (
                format!("{:.0} B", sent),
                format!("{:.0} B", received),
                format!("{:.1} B", sent / h.locks.max(1) as f64),
            ),
            None => ("—".into(), "—".into(), "—".into()),
        };
        let _ = writeln!(
            out,
            "| {backend} | {} | {:.1?} | {:.0} B | {:.1?} | {sent} | {received} | {per_lock} |",
            h.locks, h.acquired_in, h.heap_per_lock, h.tick
        );
    }
    let _ = writeln!(out);
}

/// One lock passed through a crowd of waiters, per backend (`--crowd`).
fn crowd_table(out: &mut String, targets: &[Target]) {
    let rows: Vec<(&str, &crate::crowd::Crowd)> = targets
        .iter()
        .filter_map(|t| t.crowd.as_ref().map(|c| (t.backend.as_str(), c)))
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(out, "### One lock through a crowd of waiters\n");
    let _ = writeln!(
        out,
        "| backend | waiters | drained in | handoff p50 µs | handoff p99 µs | handoff max µs \
         | sent per handoff | received per handoff |"
    );
    let _ = writeln!(out, "|---|--:|--:|--:|--:|--:|--:|--:|");
    for (backend, c) in rows {
        let (sent, received) = match c.per_handoff {
            Some((sent, received)) => (format!("{sent:.0} B"), format!("{received:.0} B")),
            None => ("—".into(), "—".into()),
        };
        let _ = writeln!(
            out,
            "| {backend} | {} | {:.1?} | {} | {} | {} | {sent} | {received} |",
            c.waiters,
            c.drained_in,
            c.handoffs.percentile(50.0).as_micros(),
            c.handoffs.percentile(99.0).as_micros(),
            c.handoffs.max().as_micros(),
        );
    }
    let _ = writeln!(out);
}

fn row(target: &Target, m: &Measured) -> String {
    let c = &m.contended;
    let h = &c.handoffs;
    let name = match m.role {
        Role::Ours => format!("**{}**", m.name),
        Role::Floor => format!("{} (floor)", m.name),
        Role::Peer => m.name.clone(),
        Role::FloorWithPromises => format!("{} (floor + promises)", m.name),
    };
    let dash = |spread: Option<crate::stats::Spread>| {
        spread.map_or_else(|| "—".to_owned(), |s| s.to_string())
    };
    let handoff_p99 = if h.is_empty() {
        "—".to_owned()
    } else {
        Micros(h.percentile(99.0)).to_string()
    };
    let counter = if c.exact() {
        format!("{} exact", c.counter)
    } else {
        format!("**{} of {}, {} overlaps**", c.counter, c.grants, c.overlaps)
    };
    format!(
        "| {name} | {} | {} | {} | {} | {} | {counter} | {} | {handoff_p99} | {} | {} | {} of {} | {:.0}% |",
        dash(m.cycle_spread()),
        Micros(m.cycle.percentile(99.0)),
        ratio(target, m, cycle_p50, false),
        ratio(target, m, cycle_p50, true),
        dash(m.throughput_spread()),
        dash(m.handoff_spread()),
        ratio(target, m, handoff_p50, false),
        ratio(target, m, handoff_p50, true),
        h.over(SLOW_HANDOFF),
        h.len(),
        c.same_worker_share() * 100.0,
    )
}

/// `m`'s median over the floor's (or, with `to_peer`, over the best other peer's).
fn ratio(
    target: &Target,
    m: &Measured,
    metric: fn(&Measured) -> Option<f64>,
    to_peer: bool,
) -> String {
    let base = if to_peer {
        // Peers are compared with the best peer only from ours: a peer's own row
        // would compare it with itself.
        if m.role != Role::Ours {
            return String::new();
        }
        target.best_peer(metric).map(|(v, _)| v)
    } else {
        match target.floor() {
            Some(floor) if floor.role != m.role => metric(floor),
            _ => None,
        }
    };
    match (metric(m), base) {
        (Some(v), Some(b)) if b > 0.0 => ratio_text(v / b),
        _ => String::new(),
    }
}

/// A ratio with two decimals, or with two significant digits when it is smaller than
/// that shows (a handoff in microseconds beside a peer's in tens of milliseconds).
fn ratio_text(ratio: f64) -> String {
    if ratio > 0.0 && ratio < 0.01 {
        let decimals = (-ratio.log10()).floor() as usize + 2;
        format!("{ratio:.decimals$}×")
    } else {
        format!("{ratio:.2}×")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_too_small_for_two_decimals_keeps_two_digits() {
        assert_eq!(ratio_text(1.5), "1.50×");
        assert_eq!(ratio_text(0.01), "0.01×");
        assert_eq!(ratio_text(101.0 / 21_542.0), "0.0047×");
        assert_eq!(ratio_text(0.000_52), "0.00052×");
        assert_eq!(ratio_text(0.0), "0.00×");
    }
    use crate::scenarios::Contended;
    use crate::stats::Samples;

    fn measured(name: &str, role: Role, cycle_us: u64, handoff_us: u64) -> Measured {
        let us = |n| Samples::from(vec![Duration::from_micros(n); 10]);
        Measured::new(
            name.into(),
            role,
            us(cycle_us),
            Contended {
                grants: 10,
                counter: 10,
                overlaps: 0,
                elapsed: Duration::from_millis(10),
                handoffs: us(handoff_us),
                same_worker: 0,
            },
        )
    }

    #[test]
    fn ratios_are_to_the_floor_and_to_the_best_peer() {
        let target = Target {
            backend: "postgres".into(),
            measured: vec![
                measured("ours", Role::Ours, 300, 400),
                measured("floor", Role::Floor, 100, 100),
                measured("slow peer", Role::Peer, 900, 900),
                measured("fast peer", Role::Peer, 600, 200),
            ],
            failed: vec![("broken".into(), "no | server".into())],
            held: None,
            crowd: None,
            permits: Vec::new(),
        };
        let report = markdown(&[target], "settings");
        let ours = report
            .lines()
            .find(|l| l.starts_with("| **ours**"))
            .unwrap();
        let cells: Vec<&str> = ours.split('|').map(str::trim).collect();
        // cycle ÷ floor, cycle ÷ best peer, handoff ÷ floor, handoff ÷ best peer.
        assert_eq!(cells[4], "3.00×");
        assert_eq!(cells[5], "0.50×");
        assert_eq!(cells[10], "4.00×");
        assert_eq!(cells[11], "2.00×");
        assert_eq!(cells[7], "10 exact");
        assert!(report.contains("| broken | failed: no / server |"));
    }

    #[test]
    fn a_lost_increment_is_shown() {
        let mut m = measured("ours", Role::Ours, 1, 1);
        m.contended.counter = 9;
        m.contended.overlaps = 1;
        let target = Target {
            backend: "x".into(),
            measured: vec![m],
            failed: vec![],
            held: None,
            crowd: None,
            permits: Vec::new(),
        };
        assert!(markdown(&[target], "").contains("**9 of 10, 1 overlaps**"));
    }

    #[test]
    fn several_runs_show_the_median_of_their_medians_and_the_range() {
        let mut ours = measured("ours", Role::Ours, 300, 400);
        ours.absorb(measured("ours", Role::Ours, 100, 500));
        ours.absorb(measured("ours", Role::Ours, 200, 600));
        let mut floor = measured("floor", Role::Floor, 100, 100);
        floor.absorb(measured("floor", Role::Floor, 100, 100));
        let target = Target {
            backend: "x".into(),
            measured: vec![ours, floor],
            failed: vec![],
            held: None,
            crowd: None,
            permits: Vec::new(),
        };
        let report = markdown(&[target], "");
        let ours = report
            .lines()
            .find(|l| l.starts_with("| **ours**"))
            .unwrap();
        let cells: Vec<&str> = ours.split('|').map(str::trim).collect();
        assert_eq!(cells[2], "200 (100–300)");
        assert_eq!(cells[4], "2.00×");
        assert_eq!(cells[7], "30 exact");
        assert_eq!(cells[8], "500 (400–600)");
    }
}
