//! The plots: per server, each contender's uncontended latency by percentile, and the
//! distribution of its handoffs to a different worker. SVG, so no font or image
//! library is needed.

use std::path::Path;
use std::time::Duration;

use plotters::prelude::*;

use crate::contender::BenchError;
use crate::measured::Target;
use crate::stats::Samples;

const PANEL: (u32, u32) = (620, 400);
/// Points per line: enough for a smooth curve, few enough for a small file.
const MAX_POINTS: usize = 300;

/// Writes `latency.svg` and `handoff.svg` into `dir`.
pub fn write(targets: &[Target], dir: &Path) -> Result<(), BenchError> {
    panels(&dir.join("latency.svg"), targets, Kind::Latency)?;
    panels(&dir.join("handoff.svg"), targets, Kind::Handoff)?;
    Ok(())
}

#[derive(Clone, Copy)]
enum Kind {
    /// Uncontended cycle time (log µs) against percentile.
    Latency,
    /// Share of handoffs (0 to 1) done within a time (log µs).
    Handoff,
}

fn micros(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).max(1.0)
}

/// The samples `kind` plots for each contender of `target`, with its name.
fn series(target: &Target, kind: Kind) -> Vec<(String, &Samples)> {
    target
        .measured
        .iter()
        .map(|m| {
            let samples = match kind {
                Kind::Latency => &m.cycle,
                Kind::Handoff => &m.contended.handoffs,
            };
            (m.name.clone(), samples)
        })
        .filter(|(_, s)| !s.is_empty())
        .collect()
}

fn panels(path: &Path, targets: &[Target], kind: Kind) -> Result<(), BenchError> {
    let cols = targets.len().clamp(1, 2);
    let rows = targets.len().div_ceil(cols).max(1);
    let size = (PANEL.0 * cols as u32, PANEL.1 * rows as u32);
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    for (area, target) in root.split_evenly((rows, cols)).iter().zip(targets) {
        panel(area, target, kind).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

type Panel<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type Lines = Vec<(String, Vec<(f64, f64)>)>;

fn panel(area: &Panel<'_>, target: &Target, kind: Kind) -> Result<(), BenchError> {
    let series = series(target, kind);
    let all: Vec<f64> = series
        .iter()
        .flat_map(|(_, s)| [s.percentile(1.0), s.max()])
        .map(micros)
        .collect();
    let lo = all.iter().copied().fold(f64::INFINITY, f64::min).min(1e6) / 1.5;
    let hi = all.iter().copied().fold(1.0, f64::max) * 1.5;
    // Each contender's samples in ascending order, as (µs, rank from 0 to 1].
    let ranked = |samples: &Samples| -> Vec<(f64, f64)> {
        let sorted = samples.sorted();
        let n = sorted.len();
        // At most about MAX_POINTS points a line, always with the last (the maximum).
        let step = n.div_ceil(MAX_POINTS).max(1);
        (0..n)
            .filter(|k| k % step == 0 || *k == n - 1)
            .map(|k| (micros(sorted[k]), (k as f64 + 1.0) / n as f64))
            .collect()
    };
    let mut builder = ChartBuilder::on(area);
    builder
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60);
    let error = |e: &dyn std::fmt::Display| e.to_string();
    match kind {
        Kind::Latency => {
            let title = format!("{}: uncontended acquire + release", target.backend);
            let lines: Lines = series
                .iter()
                .map(|(name, s)| {
                    let points = ranked(s).into_iter().map(|(us, r)| (100.0 * r, us));
                    (name.clone(), points.collect())
                })
                .collect();
            let mut chart = builder
                .caption(title, ("sans-serif", 18))
                .build_cartesian_2d(0f64..100f64, (lo..hi).log_scale())
                .map_err(|e| error(&e))?;
            chart
                .configure_mesh()
                .x_desc("percentile")
                .y_desc("µs")
                .draw()
                .map_err(|e| error(&e))?;
            draw(&mut chart, lines)
        }
        Kind::Handoff => {
            let title = format!("{}: handoff to another worker", target.backend);
            let lines: Lines = series
                .iter()
                .map(|(name, s)| (name.clone(), ranked(s)))
                .collect();
            let mut chart = builder
                .caption(title, ("sans-serif", 18))
                .build_cartesian_2d((lo..hi).log_scale(), 0f64..1f64)
                .map_err(|e| error(&e))?;
            chart
                .configure_mesh()
                .x_desc("µs from release to the next worker's grant")
                .y_desc("share of handoffs")
                .draw()
                .map_err(|e| error(&e))?;
            draw(&mut chart, lines)
        }
    }
}

/// One line per contender, with a legend.
fn draw<'a, 'b: 'a, X, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'b>, Cartesian2d<X, Y>>,
    lines: Lines,
) -> Result<(), BenchError>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for (i, (name, points)) in lines.into_iter().enumerate() {
        let style = Palette99::pick(i).stroke_width(2);
        chart
            .draw_series(LineSeries::new(points, style))
            .map_err(|e| e.to_string())?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contender::Role;
    use crate::measured::Measured;
    use crate::scenarios::Contended;

    #[test]
    fn writes_both_plots_with_a_line_per_contender() {
        let samples = |base: u64| {
            Samples::from(
                (1..=50)
                    .map(|i| Duration::from_micros(base * i))
                    .collect::<Vec<_>>(),
            )
        };
        let measured = |name: &str, base| {
            Measured::new(
                name.into(),
                Role::Peer,
                samples(base),
                Contended {
                    grants: 50,
                    counter: 50,
                    overlaps: 0,
                    elapsed: Duration::from_millis(5),
                    handoffs: samples(base * 2),
                    same_worker: 0,
                },
            )
        };
        let targets = vec![Target {
            backend: "redis".into(),
            measured: vec![measured("ours", 10), measured("rslock", 20)],
            failed: vec![],
            held: None,
            crowd: None,
            permits: Vec::new(),
        }];
        let dir = tempfile::tempdir().unwrap();
        write(&targets, dir.path()).unwrap();
        for file in ["latency.svg", "handoff.svg"] {
            let svg = std::fs::read_to_string(dir.path().join(file)).unwrap();
            assert!(svg.starts_with("<svg"), "{file}");
            assert!(
                svg.contains("ours") && svg.contains("rslock"),
                "{file}: legend"
            );
            assert!(svg.matches("<polyline").count() >= 2, "{file}: lines");
        }
    }
}
