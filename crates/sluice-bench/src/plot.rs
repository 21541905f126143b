//! Charts of bench results written as SVG and PNG files. Drawing is the
//! model crate's ([`sluice_model::plot`]: one plotting module for bench
//! and model); this module only writes the files.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use sluice_model::plot::{render_png_figure, render_svg_figure, Figure};

/// Draws `figure` to `base.svg` and `base.png` (charts without a point
/// left out); returns the files written.
pub fn draw(figure: &Figure, base: &Path) -> Result<Vec<PathBuf>> {
    let mut figure = figure.clone();
    figure.charts.retain(|c| c.has_points());
    if figure.charts.is_empty() {
        bail!("plots skipped: '{}' has no measurements", figure.title);
    }
    if let Some(dir) = base.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let size = figure.grid_size();
    let svg = base.with_extension("svg");
    let png = base.with_extension("png");
    let text = render_svg_figure(&figure, size)
        .with_context(|| format!("cannot draw {}", svg.display()))?;
    std::fs::write(&svg, text).with_context(|| format!("cannot write {}", svg.display()))?;
    let bytes = render_png_figure(&figure, size)
        .with_context(|| format!("cannot draw {}", png.display()))?;
    std::fs::write(&png, bytes).with_context(|| format!("cannot write {}", png.display()))?;
    Ok(vec![svg, png])
}

/// Draws and reports where, or warns why not; never fails the run.
pub fn draw_or_warn(figure: &Figure, base: &Path) -> Vec<PathBuf> {
    match draw(figure, base) {
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
    use sluice_model::plot::{Axes, XAxis};

    #[test]
    fn figures_are_written_as_svg_and_png_without_empty_charts() {
        let dir = tempfile::tempdir().unwrap();
        let axes = Axes {
            x_label: "clients".into(),
            y_label: "MiB/s".into(),
            x_axis: XAxis::Log2,
        };
        let figure = Figure {
            title: "Scaling".into(),
            columns: 2,
            charts: vec![
                axes.chart(
                    "read",
                    vec![("sluice".into(), vec![(1.0, 5.0), (8.0, 40.0)])],
                ),
                axes.chart("write", vec![("sluice".into(), vec![])]),
            ],
        };
        let base = dir.path().join("plots/bench-scaling");
        let files = draw(&figure, &base).unwrap();
        assert_eq!(
            files,
            [base.with_extension("svg"), base.with_extension("png")]
        );
        let svg = std::fs::read_to_string(&files[0]).unwrap();
        assert!(svg.contains("read") && !svg.contains("write"), "{svg}");
        assert!(std::fs::read(&files[1]).unwrap().starts_with(b"\x89PNG"));
        let nothing = Figure {
            charts: vec![figure.charts[1].clone()],
            ..figure
        };
        let e = draw(&nothing, &base).unwrap_err();
        assert!(e.to_string().contains("no measurements"), "{e}");
    }
}
