//! The measured points of the non-contiguous I/O experiment: rounds
//! collected into medians, the model's time beside each, and the checks
//! of the experiment's targets.

use sluice_bench::machine::{load1, steal_since};
use sluice_bench::stats::{median, ratio};
use sluice_model::noncontig::{transfer_time, Ddt, Direction};

use super::report::sibling;
use super::{
    model_error, model_params, LinkKind, NcPoint, Op, TargetCheck, Volume, ITERATIVE_QD1,
    TARGET_BLOCKS, TARGET_MODEL_ERROR, TARGET_SPEEDUP,
};
use crate::link::LinkMeasurement;

/// Identifies a curve point.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Key {
    pub(super) part: &'static str,
    pub(super) link: LinkKind,
    pub(super) volume: Volume,
    pub(super) op: Op,
    pub(super) ddt: &'static str,
    pub(super) block: u64,
}

/// Collects rounds into points.
pub(super) struct Points(pub(super) Vec<NcPoint>);

impl Points {
    #[allow(clippy::too_many_arguments)] // one measurement's fields
    pub(super) fn add(
        &mut self,
        key: &Key,
        segments: u64,
        payload: u64,
        time_s: f64,
        reps: u32,
        reads: u64,
        layout: u64,
        steal0: (u64, u64),
    ) {
        let i = match self.0.iter().position(|p| {
            p.part == key.part
                && p.link == key.link
                && p.volume == key.volume
                && p.op == key.op.name()
                && p.ddt == key.ddt
                && p.block_bytes == key.block
        }) {
            Some(i) => i,
            None => {
                self.0.push(NcPoint {
                    part: key.part.into(),
                    link: key.link,
                    volume: key.volume,
                    op: key.op.name().into(),
                    ddt: key.ddt.into(),
                    block_bytes: key.block,
                    segments,
                    payload_bytes: payload,
                    rounds_s: Vec::new(),
                    reps: Vec::new(),
                    time_s: 0.0,
                    mb_s: 0.0,
                    model_time_s: None,
                    model_mb_s: None,
                    model_error: None,
                    verified_reads: 0,
                    layout_checks: 0,
                    load1_max: 0.0,
                    steal_pct_max: 0.0,
                });
                self.0.len() - 1
            }
        };
        let p = &mut self.0[i];
        p.rounds_s.push(time_s);
        p.reps.push(reps);
        p.verified_reads += reads;
        p.layout_checks += layout;
        p.load1_max = p.load1_max.max(load1());
        p.steal_pct_max = p.steal_pct_max.max(steal_since(steal0));
    }
}

/// Sets each point's medians and the model's prediction for it.
pub fn finish_points(
    points: &mut [NcPoint],
    links: &[(LinkKind, LinkMeasurement)],
    max_segments: Option<u64>,
) {
    for p in points {
        p.time_s = median(&p.rounds_s).unwrap_or(0.0);
        p.mb_s = if p.time_s > 0.0 {
            p.payload_bytes as f64 / p.time_s / 1e6
        } else {
            0.0
        };
        let Some((_, m)) = links.iter().find(|(k, _)| *k == p.link) else {
            continue;
        };
        // The model's iterative is one request per round trip; it has no
        // form for requests pipelined 64 deep.
        if p.ddt == "iterative" {
            continue;
        }
        let direction = if p.op == "read" {
            Direction::Read
        } else {
            Direction::Write
        };
        let ddt = match p.ddt.as_str() {
            "sgl" => Ddt::Sgl,
            "strided" => Ddt::Strided,
            _ => Ddt::Iterative,
        };
        // Iterative in the model is n requests of x bytes; the contiguous
        // part's segments are one request each (n = 1).
        let x = p.payload_bytes.checked_div(p.segments).unwrap_or(0);
        if let Ok(t) = transfer_time(
            &model_params(m, direction, max_segments),
            ddt,
            p.segments,
            x.max(1),
        ) {
            p.model_time_s = Some(t.time);
            p.model_mb_s = Some(t.throughput / 1e6);
            p.model_error = model_error(p.time_s, t.time);
        }
    }
}

/// The paper's claims at each shaped-link view point with blocks of
/// [`TARGET_BLOCKS`] bytes. "Iterative" is the paper's: one request at a
/// time ([`ITERATIVE_QD1`]); the pipelined one is reported beside it.
pub fn check_targets(points: &[NcPoint]) -> Vec<TargetCheck> {
    let mut out = Vec::new();
    for p in points.iter().filter(|p| {
        p.part == "view"
            && p.link.is_rate_limited()
            && p.ddt == ITERATIVE_QD1
            && TARGET_BLOCKS.contains(&p.block_bytes)
    }) {
        let (sgl, strided) = (sibling(points, p, "sgl"), sibling(points, p, "strided"));
        let pipelined = sibling(points, p, "iterative");
        let over = |q: Option<&NcPoint>, base: Option<&NcPoint>| {
            q.zip(base).and_then(|(q, b)| ratio(q.mb_s, b.mb_s))
        };
        let err = |q: Option<&NcPoint>| q.and_then(|q| q.model_error);
        let (so, to) = (over(sgl, Some(p)), over(strided, Some(p)));
        let (se, te) = (err(sgl), err(strided));
        let model_over = sgl
            .and_then(|q| q.model_mb_s)
            .zip(p.model_mb_s)
            .and_then(|(q, b)| ratio(q, b));
        let mut why = Vec::new();
        for (name, r) in [("sgl", so), ("strided", to)] {
            match (r, model_over) {
                (Some(r), _) if r >= TARGET_SPEEDUP => {}
                (Some(r), Some(m)) if m < TARGET_SPEEDUP => why.push(format!(
                    "{name} {r:.1}x (the model gives SGL only {m:.1}x at this link's RTT)"
                )),
                (Some(r), _) => why.push(format!("{name} {r:.1}x")),
                (None, _) => why.push(format!("{name}: not measured")),
            }
        }
        for (name, e) in [("sgl", se), ("strided", te)] {
            match e {
                Some(e) if e.abs() <= TARGET_MODEL_ERROR => {}
                Some(e) if e < 0.0 => why.push(format!(
                    "{name} {:.0}% below model (per-request CPU)",
                    -e * 100.0
                )),
                Some(e) => why.push(format!(
                    "{name} {:.0}% above model (beat the measured rate)",
                    e * 100.0
                )),
                None => why.push(format!("{name}: no model (link not measured)")),
            }
        }
        out.push(TargetCheck {
            link: p.link,
            volume: p.volume,
            op: p.op.clone(),
            block_bytes: p.block_bytes,
            sgl_over_iterative: so,
            strided_over_iterative: to,
            model_sgl_over_iterative: model_over,
            sgl_over_pipelined: over(sgl, pipelined),
            strided_over_pipelined: over(strided, pipelined),
            sgl_model_error: se,
            strided_model_error: te,
            met: why.is_empty(),
            why: why.join("; "),
        });
    }
    out
}
