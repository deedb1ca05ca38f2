//! One SVG timeline per scenario and load (plotters), from its first trial: per client, the
//! successes and errors per second of each loop over time, and every call's latency, with the
//! fault shaded and the fault, heal and new leader marked.

use std::error::Error;
use std::path::Path;

use plotters::prelude::*;

use crate::plan::ScenarioRun;
use crate::trial::{ClientTrial, TrialRecord};
use crate::workload::{LoopKind, Sample};

/// Width of a throughput bucket: 250 ms, 25 calls of one paced task, fine enough to show a
/// sub-second gap, coarse enough not to be noise.
const BUCKET_S: f64 = 0.25;

/// Height of one client's row and width of one chart, in pixels.
const ROW_HEIGHT: u32 = 300;
/// Width of each of the two charts of a row.
const CHART_WIDTH: u32 = 760;

/// The throughput charts' y axis ends at the peak times this: the legend's six lines fit
/// above the data.
const LEGEND_ROOM_LINEAR: f64 = 1.8;

/// The latency charts' y axis (log) ends at the slowest call times this: about one and a half
/// decades for the legend.
const LEGEND_ROOM_LOG: f64 = 40.0;

/// The colour of a loop's series.
fn color(kind: LoopKind) -> RGBColor {
    match kind {
        LoopKind::Put => RGBColor(31, 119, 180),
        LoopKind::LinearizableGet => RGBColor(44, 160, 44),
        LoopKind::SerializableGet => RGBColor(255, 127, 14),
    }
}

/// Writes the timeline of `run` to `path`; `false` (and nothing written) when it has no trial.
pub fn timeline(run: &ScenarioRun, path: &Path) -> std::io::Result<bool> {
    let Some(trial) = run.trials.first() else {
        return Ok(false);
    };
    draw(run, trial, path).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(true)
}

/// Draws the chart; plotters' errors are boxed.
fn draw(run: &ScenarioRun, trial: &TrialRecord, path: &Path) -> Result<(), Box<dyn Error>> {
    let clients: Vec<&ClientTrial> = trial
        .clients
        .iter()
        .filter(|c| !c.loops.is_empty())
        .collect();
    let rows = clients.len().max(1);
    let size = (2 * CHART_WIDTH, 50 + ROW_HEIGHT * rows as u32);
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE)?;
    let title = format!(
        "{} - {}, trial {} - {}",
        run.scenario,
        run.load.label(),
        trial.trial,
        run.description
    );
    let root = root.titled(&title, ("sans-serif", 20))?;
    let panels = root.split_evenly((rows, 2));
    let p = &trial.phases;
    // The charts end with the window: after it the loops start no call, and the buckets of
    // the calls still in flight would show a drop that is not the clients'.
    let end_s = p.window_end().as_secs_f64();
    let marks = Marks {
        fault: p.fault().as_secs_f64(),
        during_end: p.during_end().as_secs_f64(),
        healed: p.heal_us.is_some(),
        window_end: p.window_end().as_secs_f64(),
        leader: trial.reelection_ms.map(|ms| {
            let at = p.fault().as_secs_f64() + ms / 1000.0;
            let name = trial.new_leader.clone().unwrap_or_default();
            (at, name)
        }),
    };
    for (row, client) in clients.iter().enumerate() {
        throughput(&panels[2 * row], client, end_s, &marks)?;
        latency(&panels[2 * row + 1], client, end_s, &marks)?;
    }
    root.present()?;
    Ok(())
}

/// The instants every chart marks, in seconds since the loops' start.
struct Marks {
    fault: f64,
    during_end: f64,
    healed: bool,
    window_end: f64,
    /// When the new leader was seen, and its name.
    leader: Option<(f64, String)>,
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// Shading and vertical lines for the fault, the heal and the new leader, on a chart whose y
/// axis spans `y0..y1`.
fn draw_marks<DB: DrawingBackend, Y: Ranged<ValueType = f64>>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>,
    marks: &Marks,
    (y0, y1): (f64, f64),
) -> Result<(), Box<dyn Error>>
where
    DB::ErrorType: 'static,
{
    let shade_end = if marks.healed {
        marks.during_end
    } else {
        marks.window_end
    };
    chart.draw_series(std::iter::once(Rectangle::new(
        [(marks.fault, y0), (shade_end, y1)],
        RED.mix(0.10).filled(),
    )))?;
    let vline = |x: f64, style: ShapeStyle| PathElement::new(vec![(x, y0), (x, y1)], style);
    chart
        .draw_series(std::iter::once(vline(marks.fault, RED.stroke_width(2))))?
        .label(if marks.healed {
            "fault (shaded until heal)"
        } else {
            "fault (stays)"
        })
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], RED.stroke_width(2)));
    if marks.healed {
        chart
            .draw_series(std::iter::once(vline(
                marks.during_end,
                GREEN.stroke_width(2),
            )))?
            .label("heal")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], GREEN.stroke_width(2)));
    }
    if let Some((at, name)) = &marks.leader {
        chart
            .draw_series(std::iter::once(vline(*at, MAGENTA.stroke_width(2))))?
            .label(format!("new leader {name}"))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], MAGENTA.stroke_width(2)));
    }
    Ok(())
}

/// Successes per second of each loop and errors per second of all loops, per bucket.
fn throughput(
    area: &Area<'_>,
    client: &ClientTrial,
    end_s: f64,
    marks: &Marks,
) -> Result<(), Box<dyn Error>> {
    // Whole buckets inside the window only: a partial last bucket would read as a dip.
    let buckets = (end_s / BUCKET_S).floor() as usize;
    let mut ok = vec![vec![0u32; buckets]; client.loops.len()];
    let mut errors = vec![0u32; buckets];
    for (i, l) in client.loops.iter().enumerate() {
        for s in &l.samples {
            let b = (s.finished().as_secs_f64() / BUCKET_S) as usize;
            match (&s.error, b < buckets) {
                (None, true) => ok[i][b] += 1,
                (Some(_), true) => errors[b] += 1,
                _ => {}
            }
        }
    }
    let rate = |n: u32| f64::from(n) / BUCKET_S;
    let peak = ok
        .iter()
        .flatten()
        .chain(&errors)
        .copied()
        .max()
        .unwrap_or(1);
    // Head room above the highest series for the legend.
    let y1 = rate(peak.max(1)) * LEGEND_ROOM_LINEAR;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!(
                "{}: calls/s ({} ms buckets)",
                client.client.name(),
                BUCKET_S * 1000.0
            ),
            ("sans-serif", 15),
        )
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(48)
        .build_cartesian_2d(0f64..end_s, 0f64..y1)?;
    chart
        .configure_mesh()
        .x_desc("s since the loops started")
        .y_desc("calls/s")
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    draw_marks(&mut chart, marks, (0.0, y1))?;
    let at = |b: usize| (b as f64 + 0.5) * BUCKET_S;
    for (i, l) in client.loops.iter().enumerate() {
        let c = color(l.kind);
        let points: Vec<(f64, f64)> = ok[i]
            .iter()
            .enumerate()
            .map(|(b, &n)| (at(b), rate(n)))
            .collect();
        chart
            .draw_series(LineSeries::new(points, c.stroke_width(2)))?
            .label(format!("{} ok", l.kind.name()))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], c.stroke_width(2)));
    }
    let points: Vec<(f64, f64)> = errors
        .iter()
        .enumerate()
        .map(|(b, &n)| (at(b), rate(n)))
        .collect();
    chart
        .draw_series(LineSeries::new(points, RED.stroke_width(1)))?
        .label("errors (all loops)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], RED));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font(("sans-serif", 11))
        .draw()?;
    Ok(())
}

/// Every call's latency (log scale): successes as dots per loop, errors as red crosses;
/// thinned past [`MAX_POINTS`] per series.
fn latency(
    area: &Area<'_>,
    client: &ClientTrial,
    end_s: f64,
    marks: &Marks,
) -> Result<(), Box<dyn Error>> {
    let ms = |s: &Sample| (s.latency().as_secs_f64() * 1000.0).max(0.02);
    let slowest = client
        .loops
        .iter()
        .flat_map(|l| l.samples.iter().map(ms))
        .fold(1.0, f64::max);
    // Head room above the slowest call for the legend.
    let (y0, y1) = (0.02, slowest * LEGEND_ROOM_LOG);
    let oks: Vec<(LoopKind, Vec<&Sample>)> = client
        .loops
        .iter()
        .map(|l| {
            let ok = l.samples.iter().filter(|s| s.error.is_none()).collect();
            (l.kind, thin(ok))
        })
        .collect();
    let errors = thin(
        client
            .loops
            .iter()
            .flat_map(|l| l.samples.iter())
            .filter(|s| s.error.is_some())
            .collect(),
    );
    let all: usize = client.loops.iter().map(|l| l.samples.len()).sum();
    let drawn = errors.len() + oks.iter().map(|(_, v)| v.len()).sum::<usize>();
    let note = if drawn < all {
        format!(" ({drawn} of {all} calls: evenly spaced, and all above p99)")
    } else {
        String::new()
    };
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{}: latency per call [ms]{note}", client.client.name()),
            ("sans-serif", 15),
        )
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(48)
        .build_cartesian_2d(0f64..end_s, (y0..y1).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("call start, s since the loops started")
        .y_desc("ms")
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    draw_marks(&mut chart, marks, (y0, y1))?;
    for (kind, ok) in &oks {
        let c = color(*kind);
        let dots = ok
            .iter()
            .map(|s| Circle::new((s.started().as_secs_f64(), ms(s)), 1, c.filled()));
        chart
            .draw_series(dots)?
            .label(format!("{} ok", kind.name()))
            .legend(move |(x, y)| Circle::new((x + 7, y), 3, c.filled()));
    }
    let crosses = errors
        .iter()
        .map(|s| Cross::new((s.started().as_secs_f64(), ms(s)), 3, RED));
    chart
        .draw_series(crosses)?
        .label("error")
        .legend(|(x, y)| Cross::new((x + 7, y), 3, RED));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font(("sans-serif", 11))
        .draw()?;
    Ok(())
}

/// Most points one series of a latency chart draws: 3000, about what 10 s of one paced task
/// make. Past it (many tasks, an open loop), calls are thinned to stay viewable: an SVG of a
/// few hundred thousand circles is tens of megabytes and slow to open.
const MAX_POINTS: usize = 3000;

/// `samples` thinned to about [`MAX_POINTS`]: every k-th, plus every call slower than the
/// series' 99th percentile, so the outliers that matter are all drawn.
fn thin(samples: Vec<&Sample>) -> Vec<&Sample> {
    if samples.len() <= MAX_POINTS {
        return samples;
    }
    let stride = samples.len().div_ceil(MAX_POINTS);
    let mut latencies: Vec<_> = samples.iter().map(|s| s.latency()).collect();
    latencies.sort();
    let p99 = latencies[latencies.len() * 99 / 100];
    samples
        .into_iter()
        .enumerate()
        .filter(|(i, s)| i % stride == 0 || s.latency() > p99)
        .map(|(_, s)| s)
        .collect()
}
