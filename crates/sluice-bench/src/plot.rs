//! Line charts of sweeps, written as SVG and PNG with plotters.
//!
//! plotters needs a TrueType font to lay out text; rather than link
//! fontconfig, the first font found in the usual system folders is loaded
//! at run time (DejaVu or Liberation on Debian). Without one, plotting is
//! skipped with a message and the numbers are still written.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

/// How the x axis is scaled and labelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XAxis {
    /// Linear, plain numbers.
    Linear,
    /// Log base 2, plain numbers (1, 2, 4, …).
    Log2,
    /// Log base 2, sizes (512, 4k, 1m, …).
    Log2Bytes,
}

/// One line.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (x, y) points, in x order.
    pub points: Vec<(f64, f64)>,
}

/// One plot area of a chart.
#[derive(Debug, Clone)]
pub struct Panel {
    /// Caption.
    pub title: String,
    /// Lines.
    pub series: Vec<Series>,
}

/// A chart of one or more panels sharing axis labels.
#[derive(Debug, Clone)]
pub struct Chart {
    /// Title over everything.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// X scale.
    pub x_axis: XAxis,
    /// Panels per row.
    pub columns: usize,
    /// The panels.
    pub panels: Vec<Panel>,
}

const FONT_DIRS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/liberation2/LiberationSans-Regular.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

fn find_font_file(dir: &Path, depth: u32) -> Option<PathBuf> {
    let entries = std::fs::read_dir(dir).ok()?;
    let mut subdirs = Vec::new();
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            subdirs.push(p);
        } else if p.extension().is_some_and(|x| x.eq_ignore_ascii_case("ttf")) {
            return Some(p);
        }
    }
    if depth == 0 {
        return None;
    }
    subdirs.sort();
    subdirs
        .into_iter()
        .find_map(|d| find_font_file(&d, depth - 1))
}

/// Loads and registers a font once; the error says why plots are skipped.
fn ensure_font() -> Result<(), String> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let path = FONT_DIRS
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .or_else(|| find_font_file(Path::new("/usr/share/fonts"), 3))
            .ok_or_else(|| {
                "no TrueType font under /usr/share/fonts (apt-get install fonts-dejavu-core)"
                    .to_owned()
            })?;
        let bytes =
            std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        // plotters keeps fonts for the life of the process.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| format!("{} is not a usable font", path.display()))
    })
    .clone()
}

/// Distinct colours that read well on white (no yellow).
fn color(i: usize) -> RGBAColor {
    const COLORS: [(u8, u8, u8); 8] = [
        (214, 39, 40),
        (31, 119, 180),
        (44, 160, 44),
        (0, 0, 0),
        (148, 103, 189),
        (255, 127, 14),
        (140, 86, 75),
        (23, 190, 207),
    ];
    let (r, g, b) = COLORS[i % COLORS.len()];
    RGBColor(r, g, b).to_rgba()
}

fn x_value(axis: XAxis, x: f64) -> f64 {
    match axis {
        XAxis::Linear => x,
        XAxis::Log2 | XAxis::Log2Bytes => x.max(f64::MIN_POSITIVE).log2(),
    }
}

fn x_tick(axis: XAxis, v: f64) -> String {
    match axis {
        XAxis::Linear => crate::report::num(v),
        XAxis::Log2 | XAxis::Log2Bytes => {
            if (v - v.round()).abs() > 1e-6 {
                return String::new();
            }
            let x = 2f64.powf(v.round());
            if axis == XAxis::Log2Bytes && x >= 1.0 {
                crate::workload::format_size(x as u64)
            } else if x >= 1.0 {
                format!("{}", x as u64)
            } else {
                crate::report::num(x)
            }
        }
    }
}

fn draw_on<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, chart: &Chart) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let e = |err: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("cannot draw the chart: {err}");
    root.fill(&WHITE).map_err(e)?;
    let root = root.titled(&chart.title, ("sans-serif", 20)).map_err(e)?;
    let cols = chart.columns.clamp(1, chart.panels.len().max(1));
    let rows = chart.panels.len().div_ceil(cols).max(1);
    let areas = root.split_evenly((rows, cols));
    for (panel, area) in chart.panels.iter().zip(areas.iter()) {
        let xs = panel
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| x_value(chart.x_axis, p.0)));
        let (xmin, xmax) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(x), b.max(x))
        });
        let (xmin, xmax) = if xmin.is_finite() && xmax > xmin {
            (xmin, xmax)
        } else {
            (0.0, 1.0)
        };
        let ymax = panel
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .filter(|y| y.is_finite())
            .fold(0.0f64, f64::max);
        let ymax = if ymax > 0.0 { ymax * 1.12 } else { 1.0 };
        let pad = (xmax - xmin) * 0.03;
        let mut cc = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 14))
            .margin(6)
            .x_label_area_size(34)
            .y_label_area_size(52)
            .build_cartesian_2d((xmin - pad)..(xmax + pad), 0f64..ymax)
            .map_err(e)?;
        let ticks = if chart.x_axis == XAxis::Linear {
            8
        } else {
            (xmax - xmin).round() as usize + 1
        };
        let axis = chart.x_axis;
        cc.configure_mesh()
            .x_desc(&chart.x_label)
            .y_desc(&chart.y_label)
            .x_labels(ticks.clamp(2, 12))
            .y_labels(6)
            .x_label_formatter(&move |v| x_tick(axis, *v))
            .y_label_formatter(&|v| crate::report::num(*v))
            .label_style(("sans-serif", 11))
            .axis_desc_style(("sans-serif", 12))
            .light_line_style(WHITE)
            .draw()
            .map_err(e)?;
        for (i, s) in panel.series.iter().enumerate() {
            let color = color(i);
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter(|p| p.1.is_finite())
                .map(|p| (x_value(axis, p.0), p.1))
                .collect();
            cc.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(e)?
                .label(s.name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
            cc.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))
                .map_err(e)?;
        }
        cc.configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .label_font(("sans-serif", 10))
            .draw()
            .map_err(e)?;
    }
    root.present().map_err(e)?;
    Ok(())
}

/// Draws `chart` to `base.svg` and `base.png`; returns the files written.
/// Without a font, returns an error that says so (callers warn and go on).
pub fn draw(chart: &Chart, base: &Path) -> Result<Vec<PathBuf>> {
    ensure_font().map_err(|e| anyhow!("plots skipped: {e}"))?;
    if let Some(dir) = base.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let cols = chart.columns.clamp(1, chart.panels.len().max(1));
    let rows = chart.panels.len().div_ceil(cols).max(1) as u32;
    let size = ((380 * cols as u32).max(640), 280 * rows + 40);
    let svg = base.with_extension("svg");
    let png = base.with_extension("png");
    draw_on(SVGBackend::new(&svg, size).into_drawing_area(), chart)
        .with_context(|| format!("cannot write {}", svg.display()))?;
    draw_on(BitMapBackend::new(&png, size).into_drawing_area(), chart)
        .with_context(|| format!("cannot write {}", png.display()))?;
    Ok(vec![svg, png])
}

/// Draws and reports where, or warns why not; never fails the run.
pub fn draw_or_warn(chart: &Chart, base: &Path) -> Vec<PathBuf> {
    match draw(chart, base) {
        Ok(files) => {
            for f in &files {
                eprintln!("plot: {}", f.display());
            }
            files
        }
        Err(e) => {
            eprintln!("warning: {e:#}");
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_ticks_label_powers_of_two_only() {
        assert_eq!(x_tick(XAxis::Log2, 4.0), "16");
        assert_eq!(x_tick(XAxis::Log2Bytes, 17.0), "128k");
        assert_eq!(x_tick(XAxis::Log2, 2.5), "");
        assert_eq!(x_value(XAxis::Log2, 8.0), 3.0);
    }
}
