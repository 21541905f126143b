//! Charts of model results and bench measurements, rendered to SVG text
//! or PNG bytes with plotters: one chart, charts side by side, or a grid
//! of charts under one title ([`Figure`]). No file I/O: callers write the
//! bytes where they like.
//!
//! Text is drawn with DejaVu Sans, embedded in the binary and registered
//! with plotters as `sans-serif` on first use, so a chart looks the same on
//! every machine (and plotters' `ab_glyph` text backend, which the
//! workspace enables, never meets a missing font).

use std::sync::OnceLock;

use image::ImageEncoder;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::error::{ModelError, Result};

mod model_charts;

pub use model_charts::{
    mva_charts, noncontig_chart, noncontig_title, raid_chart, sweep_chart, validation_charts,
    VALIDATION_SIZE,
};

/// How the x axis is scaled and labelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XAxis {
    /// Linear.
    #[default]
    Linear,
    /// Logarithmic, decades.
    Log10,
    /// Logarithmic base 2, labelled at powers of two (1, 2, 4, ...): queue
    /// depths, clients, workers.
    Log2,
}

/// How a series is stroked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineStyle {
    /// Continuous line with point markers (computed values).
    Solid,
    /// Dashed line (bounds).
    Dashed,
    /// Thin dotted line (looser bounds).
    Dotted,
    /// Markers only, no line (measured values).
    Markers,
}

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// (x, y) points in drawing order.
    pub points: Vec<(f64, f64)>,
    /// Stroke.
    pub style: LineStyle,
    /// Index into the palette; series sharing a colour belong together.
    pub color: usize,
}

/// A line chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// Caption.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// X scale.
    pub x_axis: XAxis,
    /// Logarithmic y axis.
    pub y_log: bool,
    /// The lines.
    pub series: Vec<Series>,
    /// Where the legend goes.
    pub legend: Legend,
}

/// Legend placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Legend {
    /// Top left corner (lines that start low).
    #[default]
    UpperLeft,
    /// Bottom right corner (lines that end high).
    LowerRight,
}

/// Tick label: integers without a fraction, large and small values with an
/// exponent, others with at most four significant digits.
fn tick(v: &f64) -> String {
    let a = v.abs();
    if a != 0.0 && !(1e-3..1e5).contains(&a) {
        format!("{v:e}")
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

/// Default size of rendered charts, pixels.
pub const DEFAULT_SIZE: (u32, u32) = (900, 600);

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

fn ensure_font() -> Result<()> {
    static FONT: OnceLock<bool> = OnceLock::new();
    let ok = *FONT.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
            .is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(ModelError::Plot(
            "the embedded DejaVu Sans font could not be loaded".into(),
        ))
    }
}

fn plot_err<E: std::fmt::Display>(e: E) -> ModelError {
    ModelError::Plot(e.to_string())
}

/// Data range of the finite (and, on a log axis, positive) values.
fn extent(
    chart: &Chart,
    pick: impl Fn(&(f64, f64)) -> f64,
    log: bool,
    zero_based: bool,
) -> Result<(f64, f64)> {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for v in chart.series.iter().flat_map(|s| s.points.iter().map(&pick)) {
        if v.is_finite() && (!log || v > 0.0) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
    }
    if lo > hi {
        return Err(ModelError::Plot(format!(
            "chart '{}' has no {}values to draw",
            chart.title,
            if log { "positive " } else { "" }
        )));
    }
    if log {
        Ok((lo / 1.2, hi * 1.2))
    } else {
        let lo = if zero_based { lo.min(0.0) } else { lo };
        let pad = if hi > lo {
            (hi - lo) * 0.05
        } else {
            hi.abs().max(1.0) * 0.05
        };
        Ok((lo, hi + pad))
    }
}

fn draw<DB: DrawingBackend>(chart: &Chart, root: DrawingArea<DB, Shift>) -> Result<()> {
    if chart.x_axis == XAxis::Log2 {
        // Drawn on a linear axis of log2(x), labelled 2^v at whole v.
        let log2 = Chart {
            x_axis: XAxis::Linear,
            series: chart
                .series
                .iter()
                .map(|s| Series {
                    points: s
                        .points
                        .iter()
                        .filter(|p| p.0 > 0.0)
                        .map(|&(x, y)| (x.log2(), y))
                        .collect(),
                    ..s.clone()
                })
                .collect(),
            ..chart.clone()
        };
        let x = extent(&log2, |p| p.0, false, false)?;
        let y = extent(&log2, |p| p.1, chart.y_log, true)?;
        let ticks = ((x.1 - x.0).round() as usize + 1).clamp(2, 12);
        let axis = Axis {
            labels: ticks,
            tick: &power_of_two_tick,
        };
        return if chart.y_log {
            draw_on(&log2, root, x.0..x.1, (y.0..y.1).log_scale(), axis)
        } else {
            draw_on(&log2, root, x.0..x.1, y.0..y.1, axis)
        };
    }
    let log_x = chart.x_axis == XAxis::Log10;
    let x = extent(chart, |p| p.0, log_x, false)?;
    let y = extent(chart, |p| p.1, chart.y_log, true)?;
    let axis = Axis {
        labels: 10,
        tick: &tick,
    };
    match (log_x, chart.y_log) {
        (false, false) => draw_on(chart, root, x.0..x.1, y.0..y.1, axis),
        (true, false) => draw_on(chart, root, (x.0..x.1).log_scale(), y.0..y.1, axis),
        (false, true) => draw_on(chart, root, x.0..x.1, (y.0..y.1).log_scale(), axis),
        (true, true) => draw_on(
            chart,
            root,
            (x.0..x.1).log_scale(),
            (y.0..y.1).log_scale(),
            axis,
        ),
    }
}

/// How the x axis is labelled: about how many labels, and their text.
#[derive(Clone, Copy)]
struct Axis<'a> {
    labels: usize,
    tick: &'a dyn Fn(&f64) -> String,
}

/// The label of `v` on a log2 axis: 2^v at whole v, nothing between.
fn power_of_two_tick(v: &f64) -> String {
    if (v - v.round()).abs() > 1e-6 {
        return String::new();
    }
    tick(&2f64.powf(v.round()))
}

fn draw_on<DB, XR, YR>(
    chart: &Chart,
    root: DrawingArea<DB, Shift>,
    x: XR,
    y: YR,
    x_axis: Axis<'_>,
) -> Result<()>
where
    DB: DrawingBackend,
    XR: AsRangedCoord<Value = f64>,
    YR: AsRangedCoord<Value = f64>,
    XR::CoordDescType: ValueFormatter<f64>,
    YR::CoordDescType: ValueFormatter<f64>,
{
    root.fill(&WHITE).map_err(plot_err)?;
    let mut ctx = ChartBuilder::on(&root)
        .caption(&chart.title, ("sans-serif", 20))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(x, y)
        .map_err(plot_err)?;
    ctx.configure_mesh()
        .x_desc(chart.x_label.as_str())
        .y_desc(chart.y_label.as_str())
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 15))
        .max_light_lines(2)
        .light_line_style(RGBColor(240, 240, 240))
        .x_labels(x_axis.labels)
        .x_label_formatter(x_axis.tick)
        .y_label_formatter(&tick)
        .draw()
        .map_err(plot_err)?;
    let keep = |p: &&(f64, f64)| {
        p.0.is_finite()
            && p.1.is_finite()
            && (chart.x_axis != XAxis::Log10 || p.0 > 0.0)
            && (!chart.y_log || p.1 > 0.0)
    };
    for s in &chart.series {
        let color = PALETTE[s.color % PALETTE.len()];
        let pts: Vec<(f64, f64)> = s.points.iter().filter(keep).copied().collect();
        let anno = match s.style {
            LineStyle::Solid => {
                let a = ctx
                    .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                    .map_err(plot_err)?;
                a.label(s.label.as_str()).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
                ctx.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                    .map_err(plot_err)?;
                continue;
            }
            LineStyle::Markers => {
                let a = ctx
                    .draw_series(pts.iter().map(|&p| {
                        EmptyElement::at(p)
                            + Circle::new((0, 0), 5, color.stroke_width(2))
                            + Circle::new((0, 0), 1, color.filled())
                    }))
                    .map_err(plot_err)?;
                a.label(s.label.as_str()).legend(move |(x, y)| {
                    EmptyElement::at((x + 10, y)) + Circle::new((0, 0), 5, color.stroke_width(2))
                });
                continue;
            }
            LineStyle::Dashed => ctx
                .draw_series(DashedLineSeries::new(pts, 8, 5, color.stroke_width(1)))
                .map_err(plot_err)?,
            LineStyle::Dotted => ctx
                .draw_series(DashedLineSeries::new(pts, 2, 4, color.stroke_width(1)))
                .map_err(plot_err)?,
        };
        let dash = s.style;
        anno.label(s.label.as_str()).legend(move |(x, y)| {
            let (on, off) = if dash == LineStyle::Dashed {
                (8, 5)
            } else {
                (2, 4)
            };
            plotters::element::DashedPathElement::new(
                vec![(x, y), (x + 20, y)],
                on,
                off,
                color.stroke_width(1),
            )
        });
    }
    ctx.configure_series_labels()
        .position(match chart.legend {
            Legend::UpperLeft => SeriesLabelPosition::UpperLeft,
            Legend::LowerRight => SeriesLabelPosition::LowerRight,
        })
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(180, 180, 180))
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(plot_err)?;
    Ok(())
}

fn check_size((w, h): (u32, u32)) -> Result<()> {
    if (200..=8000).contains(&w) && (150..=8000).contains(&h) {
        Ok(())
    } else {
        Err(ModelError::Plot(format!(
            "chart size {w}x{h} out of range (200..=8000 x 150..=8000 pixels)"
        )))
    }
}

/// The chart as an SVG document.
pub fn render_svg(chart: &Chart, size: (u32, u32)) -> Result<String> {
    render_svg_panels(std::slice::from_ref(chart), size)
}

/// The chart as a PNG image.
pub fn render_png(chart: &Chart, size: (u32, u32)) -> Result<Vec<u8>> {
    render_png_panels(std::slice::from_ref(chart), size)
}

/// What the charts of a grid share: axis labels and x scale.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Axes {
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// X scale.
    pub x_axis: XAxis,
}

impl Axes {
    /// A chart of measured lines, `(label, points)`, coloured in order:
    /// solid with markers, y from zero, the legend upper left.
    pub fn chart(&self, title: impl Into<String>, lines: Vec<(String, Vec<(f64, f64)>)>) -> Chart {
        Chart {
            title: title.into(),
            x_label: self.x_label.clone(),
            y_label: self.y_label.clone(),
            x_axis: self.x_axis,
            y_log: false,
            series: lines
                .into_iter()
                .enumerate()
                .map(|(color, (label, points))| Series {
                    label,
                    points,
                    style: LineStyle::Solid,
                    color,
                })
                .collect(),
            legend: Legend::UpperLeft,
        }
    }
}

impl Chart {
    /// True when some series has a point to draw.
    pub fn has_points(&self) -> bool {
        self.series.iter().any(|s| !s.points.is_empty())
    }
}

/// Charts in a grid, row by row, under one title.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// Title over every chart (none when empty).
    pub title: String,
    /// Charts per row.
    pub columns: usize,
    /// The charts.
    pub charts: Vec<Chart>,
}

impl Figure {
    /// Charts side by side in one row, without a title.
    pub fn row(charts: &[Chart]) -> Self {
        Self {
            title: String::new(),
            columns: charts.len(),
            charts: charts.to_vec(),
        }
    }

    fn grid(&self) -> (usize, usize) {
        let cols = self.columns.clamp(1, self.charts.len().max(1));
        (self.charts.len().div_ceil(cols).max(1), cols)
    }

    /// A size that gives each chart of the grid about 380 x 280 pixels.
    pub fn grid_size(&self) -> (u32, u32) {
        let (rows, cols) = self.grid();
        let (rows, cols) = (rows as u32, cols as u32);
        ((380 * cols).max(640), 280 * rows + 40)
    }
}

/// Draws the figure's charts in its grid, under its title.
fn draw_figure<DB: DrawingBackend>(figure: &Figure, root: DrawingArea<DB, Shift>) -> Result<()> {
    if figure.charts.is_empty() {
        return Err(ModelError::Plot("nothing to draw: no charts".into()));
    }
    root.fill(&WHITE).map_err(plot_err)?;
    let root = if figure.title.is_empty() {
        root
    } else {
        root.titled(&figure.title, ("sans-serif", 20))
            .map_err(plot_err)?
    };
    let areas = root.split_evenly(figure.grid());
    for (chart, area) in figure.charts.iter().zip(areas) {
        draw(chart, area)?;
    }
    root.present().map_err(plot_err)
}

/// Several charts side by side in one SVG document of `size` in all.
pub fn render_svg_panels(charts: &[Chart], size: (u32, u32)) -> Result<String> {
    render_svg_figure(&Figure::row(charts), size)
}

/// Several charts side by side in one PNG image of `size` in all.
pub fn render_png_panels(charts: &[Chart], size: (u32, u32)) -> Result<Vec<u8>> {
    render_png_figure(&Figure::row(charts), size)
}

/// A figure as one SVG document of `size` in all.
pub fn render_svg_figure(figure: &Figure, size: (u32, u32)) -> Result<String> {
    check_size(size)?;
    ensure_font()?;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        draw_figure(figure, root)?;
    }
    Ok(out)
}

/// A figure as one PNG image of `size` in all.
pub fn render_png_figure(figure: &Figure, size: (u32, u32)) -> Result<Vec<u8>> {
    check_size(size)?;
    ensure_font()?;
    let (w, h) = size;
    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
        draw_figure(figure, root)?;
    }
    let mut png = Vec::new();
    image::codecs::png::PngEncoder::new(&mut png)
        .write_image(&rgb, w, h, image::ColorType::Rgb8)
        .map_err(plot_err)?;
    Ok(png)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_ticks_label_powers_of_two_only() {
        assert_eq!(power_of_two_tick(&4.0), "16");
        assert_eq!(power_of_two_tick(&0.0), "1");
        assert_eq!(power_of_two_tick(&2.5), "");
    }

    #[test]
    fn a_log2_grid_renders_under_its_title() {
        let chart = |title: &str| Chart {
            title: title.into(),
            x_label: "outstanding I/O".into(),
            y_label: "MiB/s".into(),
            x_axis: XAxis::Log2,
            y_log: false,
            series: vec![Series {
                label: "sluice".into(),
                points: vec![(1.0, 10.0), (4.0, 30.0), (64.0, 90.0)],
                style: LineStyle::Solid,
                color: 0,
            }],
            legend: Legend::UpperLeft,
        };
        let figure = Figure {
            title: "Pipelining".into(),
            columns: 2,
            charts: vec![chart("read 4k"), chart("write 4k"), chart("read 1m")],
        };
        assert_eq!(figure.grid(), (2, 2));
        let svg = render_svg_figure(&figure, figure.grid_size()).unwrap();
        let texts: Vec<&str> = svg
            .split("</text>")
            .filter_map(|t| t.rsplit_once('>').map(|(_, text)| text.trim()))
            .collect();
        for want in [
            "Pipelining",
            "read 4k",
            "write 4k",
            "read 1m",
            "1",
            "2",
            "64",
        ] {
            assert!(texts.contains(&want), "{want}: {texts:?}");
        }
        // Only powers of two label the x axis.
        assert!(!texts.contains(&"3"), "{texts:?}");
    }
}
