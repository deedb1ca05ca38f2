//! Curves of the scale benchmarks as SVG: each panel a figure per item (CPU per renewal,
//! memory per watch, resume time...) against the number of items, both axes logarithmic, a
//! line per series. A cost that grows with the count shows as a rising line; a flat one is
//! what issue 20 asks for.
//!
//! ```no_run
//! use etcd_ha_bench::scale_plot::{Panel, Series, curves};
//!
//! let cpu = Panel::new("CPU per renewal", "us").with(Series::new(
//!     "etcd-ha",
//!     vec![(1_000.0, 18.5), (10_000.0, 11.5), (100_000.0, 5.5)],
//! ));
//! curves("target/scale.svg".as_ref(), "Leases on one client", "leases", &[cpu]).unwrap();
//! ```

use std::error::Error;
use std::path::Path;

use plotters::prelude::*;

/// One line: `(items, value)` points; points that are not positive and finite are left out
/// (a log axis has no place for them).
#[derive(Clone, Debug)]
pub struct Series {
    /// The legend's name of the line.
    pub name: String,
    /// `(items, value)`, in the order drawn.
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// A line named `name`.
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        let points = points
            .into_iter()
            .filter(|(x, y)| x.is_finite() && y.is_finite() && *x > 0.0 && *y > 0.0)
            .collect();
        Series {
            name: name.into(),
            points,
        }
    }
}

/// One chart: a figure (its unit on the y axis) and its lines.
#[derive(Clone, Debug)]
pub struct Panel {
    /// The figure shown (the panel's caption).
    pub title: String,
    /// Its unit, on the y axis.
    pub unit: String,
    /// The lines; none draws "no figure".
    pub series: Vec<Series>,
}

impl Panel {
    /// An empty panel for `title`, in `unit`.
    pub fn new(title: impl Into<String>, unit: impl Into<String>) -> Self {
        Panel {
            title: title.into(),
            unit: unit.into(),
            series: Vec::new(),
        }
    }

    /// This panel with one more line (a line with no point is left out).
    pub fn with(mut self, series: Series) -> Self {
        if !series.points.is_empty() {
            self.series.push(series);
        }
        self
    }
}

/// The line colours, in turn.
const COLORS: [RGBColor; 6] = [
    RGBColor(200, 30, 30),
    RGBColor(30, 80, 200),
    RGBColor(20, 140, 60),
    RGBColor(160, 40, 170),
    RGBColor(220, 130, 0),
    RGBColor(90, 90, 90),
];

/// Write `panels` side by side into the SVG file `path` (its directory made if missing), under
/// `caption`, items counted in `items` on every x axis.
pub fn curves(
    path: &Path,
    caption: &str,
    items: &str,
    panels: &[Panel],
) -> Result<(), Box<dyn Error>> {
    if panels.is_empty() {
        return Err("no panel to draw".into());
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let width = 460 * panels.len() as u32;
    // Room under the charts for the longest legend: a line per series.
    let lines = panels.iter().map(|p| p.series.len()).max().unwrap_or(0) as u32;
    let legend = LEGEND_LINE * lines + 10;
    let root = SVGBackend::new(path, (width, 440 + legend)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(caption, ("sans-serif", 22))?;
    // One x range for every panel, so that counts line up across them.
    let x = bounds(
        panels
            .iter()
            .flat_map(|p| p.series.iter().flat_map(|s| s.points.iter().map(|p| p.0))),
    );
    for (area, panel) in root.split_evenly((1, panels.len())).iter().zip(panels) {
        let (chart, below) = area.split_vertically(area.dim_in_pixel().1 - legend);
        draw(&chart, panel, items, x)?;
        draw_legend(&below, panel)?;
    }
    root.present()?;
    Ok(())
}

/// Pixels a legend line takes.
const LEGEND_LINE: u32 = 18;

/// The panel's legend under its chart, a line per series (on the chart it would hide points).
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    panel: &Panel,
) -> Result<(), Box<dyn Error>>
where
    DB::ErrorType: 'static,
{
    for (i, (series, color)) in panel.series.iter().zip(COLORS.iter().cycle()).enumerate() {
        let y = 6 + (i as u32 * LEGEND_LINE) as i32 + LEGEND_LINE as i32 / 2;
        area.draw(&PathElement::new(
            vec![(70, y), (92, y)],
            color.stroke_width(2),
        ))?;
        area.draw(&Text::new(
            series.name.clone(),
            (98, y - 7),
            ("sans-serif", 13),
        ))?;
    }
    Ok(())
}

/// The bounds of a log axis around `values`: a factor of 2 either side, one decade at least.
fn bounds(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let (lo, hi) = values.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo > hi {
        return None;
    }
    let (lo, hi) = (lo / 2.0, hi * 2.0);
    Some(if hi / lo < 10.0 {
        let mid = (lo * hi).sqrt();
        (mid / 3.2, mid * 3.2)
    } else {
        (lo, hi)
    })
}

/// Labels for a log axis over `lo..hi`: 1, 2 and 5 times each power of ten inside it, so that
/// a range under a decade or two still reads (plotters' own choice labelled 2.3-23 only at 10
/// and 20).
fn log_labels(lo: f64, hi: f64) -> Vec<f64> {
    let (first, last) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    (first..=last)
        .flat_map(|d| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(d)))
        .filter(|v| (lo..=hi).contains(v))
        .collect()
}

fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    panel: &Panel,
    items: &str,
    x: Option<(f64, f64)>,
) -> Result<(), Box<dyn Error>>
where
    DB::ErrorType: 'static,
{
    let values = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1));
    let (Some(x), Some(y)) = (x, bounds(values)) else {
        area.draw(&Text::new(
            format!("{}: no figure", panel.title),
            (20, 40),
            ("sans-serif", 16),
        ))?;
        return Ok(());
    };
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(38)
        .y_label_area_size(62)
        .build_cartesian_2d(
            // Both axes labelled 1-2-5: plotters' own x labels, over 5,000-200,000 watches,
            // put every multiple of 10,000 into the upper decade, on top of each other.
            (x.0..x.1).log_scale().with_key_points(log_labels(x.0, x.1)),
            (y.0..y.1).log_scale().with_key_points(log_labels(y.0, y.1)),
        )?;
    chart
        .configure_mesh()
        .x_desc(items)
        .y_desc(&panel.unit)
        .x_label_formatter(&|v| format!("{v:.0}"))
        // One faint line between labelled ones: plotters' default (10) packs a log axis's
        // upper decade, where the labels sit close, into a grey band.
        .max_light_lines(1)
        .y_label_formatter(&|v| match *v {
            v if v >= 9.95 => format!("{v:.0}"),
            v if v >= 0.995 => format!("{v:.1}"),
            v => format!("{v:.2}"),
        })
        .draw()?;
    for (series, color) in panel.series.iter().zip(COLORS.iter().cycle()) {
        chart.draw_series(LineSeries::new(
            series.points.iter().copied(),
            color.stroke_width(2),
        ))?;
        chart.draw_series(
            series
                .points
                .iter()
                .map(|&p| Circle::new(p, 3, color.filled())),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_a_log_axis_cannot_show_are_left_out() {
        let s = Series::new(
            "s",
            vec![(1.0, 0.0), (10.0, f64::NAN), (100.0, 2.0), (0.0, 1.0)],
        );
        assert_eq!(s.points, vec![(100.0, 2.0)]);
        assert!(
            Panel::new("p", "u")
                .with(Series::new("none", vec![]))
                .series
                .is_empty()
        );
    }

    #[test]
    fn log_labels_are_one_two_five_per_decade_inside_the_range() {
        assert_eq!(log_labels(2.26, 23.1), [5.0, 10.0, 20.0]);
        assert_eq!(log_labels(0.46, 12.9), [0.5, 1.0, 2.0, 5.0, 10.0]);
    }

    #[test]
    fn axes_span_a_decade_at_least() {
        let (lo, hi) = bounds([5.0, 6.0].into_iter()).unwrap();
        assert!(hi / lo >= 10.0 && lo < 5.0 && hi > 6.0, "{lo} {hi}");
        assert_eq!(bounds(std::iter::empty()), None);
    }

    #[test]
    fn writes_an_svg_with_every_series_named() {
        let dir = std::env::temp_dir().join(format!("scale-plot-{}", std::process::id()));
        let path = dir.join("curves.svg");
        let cpu = Panel::new("CPU per renewal", "us")
            .with(Series::new(
                "etcd-ha",
                vec![(1e3, 18.5), (1e4, 11.5), (1e5, 5.5)],
            ))
            .with(Series::new("etcd-client", vec![(1e3, 40.0), (1e4, 41.0)]));
        let empty = Panel::new("Lost", "leases");
        curves(&path, "Leases on one client", "leases", &[cpu, empty]).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40.min(svg.len())]);
        for text in [
            "etcd-ha",
            "etcd-client",
            "CPU per renewal",
            "Lost: no figure",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
