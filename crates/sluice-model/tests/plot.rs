//! Charts render to SVG and PNG bytes (feature `plot`).
#![cfg(feature = "plot")]

use sluice_model::noncontig::{
    by_segment_size, figure8_sizes, NoncontigParams, FIGURE8_FILE_BYTES,
};
use sluice_model::plot::{
    noncontig_chart, raid_chart, render_png, render_svg, sweep_chart, Chart, XAxis, DEFAULT_SIZE,
};
use sluice_model::raid::{default_customers, raid_curve, sweep, RaidParams, SweepKind};

#[test]
fn raid_chart_renders_svg_with_labels() {
    let c = raid_curve(&RaidParams::paper(), &default_customers()).unwrap();
    let svg = render_svg(&raid_chart(&c, "paper setting"), DEFAULT_SIZE).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
    assert!(svg.contains("paper setting"));
    assert!(svg.contains("exact MVA"));
    assert!(svg.contains("concurrent jobs N"));
}

#[test]
fn every_sweep_and_figure8_render() {
    for kind in SweepKind::ALL {
        let s = sweep(
            &RaidParams::paper(),
            kind,
            &kind.default_values(),
            &[1, 2, 3],
        )
        .unwrap();
        render_svg(&sweep_chart(&s), DEFAULT_SIZE).unwrap();
    }
    let pts = by_segment_size(
        &NoncontigParams::paper(),
        FIGURE8_FILE_BYTES,
        &figure8_sizes(),
    )
    .unwrap();
    let svg = render_svg(&noncontig_chart(&pts, "figure 8"), DEFAULT_SIZE).unwrap();
    assert!(svg.contains("strided"));
}

#[test]
fn png_has_signature() {
    let c = raid_curve(&RaidParams::paper(), &[1, 2, 3]).unwrap();
    let png = render_png(&raid_chart(&c, "png"), (400, 300)).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
}

#[test]
fn empty_or_oversized_charts_are_errors() {
    let empty = Chart {
        title: "nothing".into(),
        x_label: String::new(),
        y_label: String::new(),
        x_axis: XAxis::Linear,
        y_log: false,
        series: vec![],
        legend: Default::default(),
    };
    let e = render_svg(&empty, DEFAULT_SIZE).unwrap_err();
    assert!(e.to_string().contains("no values"), "{e}");
    let c = raid_curve(&RaidParams::paper(), &[1]).unwrap();
    assert!(render_svg(&raid_chart(&c, "x"), (10, 10)).is_err());
}
