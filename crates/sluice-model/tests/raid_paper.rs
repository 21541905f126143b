//! The networked RAID model ("Study on I/O response time bounds of networked storage systems") in the paper's own setting: the
//! demands of equations (2)-(10), computed independently by hand, and the
//! paper's qualitative findings about figures 4-8.

use sluice_model::raid::{raid_curve, sweep, RaidOp, RaidParams, SweepKind};
use sluice_model::{bounds, exact_mva, ModelError};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn paper_write_demands_by_hand() {
    // S_mR5 = 200 MiB * 3/2; IP_num = ceil(S_mR5/1460) = 215461.
    let d = RaidParams::paper().demands().unwrap();
    assert_eq!(d.bytes_central, 314_572_800.0);
    assert_eq!(d.ip_packets, 215_461.0);
    assert!(close(
        d.central_cpu,
        0.027e-3 * 12800.0 + 0.045e-3 * 215_461.0
    )); // 10.041345
    assert!(close(d.central_cpu, 10.041345));
    assert!(close(d.central_nic, 26.16558384));
    assert!(close(d.network, 25.165824));
    assert!(close(d.storage_cpu, 0.740723111111111));
    assert!(close(d.storage_nic, 2.9072870933333332));
    assert!(close(d.disk, 17.830643809523806));
}

#[test]
fn paper_read_demands_by_hand() {
    let p = RaidParams {
        op: RaidOp::Read,
        ..RaidParams::paper()
    };
    let d = p.demands().unwrap();
    assert_eq!(d.ip_packets, 143_641.0);
    assert!(close(d.central_cpu, 6.809445));
    assert!(close(d.central_nic, 17.44376304));
    assert!(close(d.network, 16.777216));
    assert!(close(d.disk, 11.887095873015873));
}

#[test]
fn paper_network_and_equation_1() {
    let d = RaidParams::paper().demands().unwrap();
    let net = d.network().unwrap();
    assert_eq!(
        net.stations().len(),
        12,
        "3 central + 3 x 3 storage stations"
    );
    let sum = 125.80871488190476;
    let max = 26.16558384;
    let avg = sum / 12.0;
    for n in [1u32, 2, 5, 10, 20] {
        let b = bounds(&net, n).unwrap();
        let nf = f64::from(n);
        // Paper eq. (1): max(N Dmax, Dsum + (N-1) Davg) <= R(N).
        let eq1 = (nf * max).max(sum + (nf - 1.0) * avg);
        assert!(close(b.balanced_job.response_time[0], eq1), "N={n}");
        let r = exact_mva(&net, n).unwrap().response_time;
        assert!(eq1 <= r * (1.0 + 1e-12) && r <= b.balanced_job.response_time[1] * (1.0 + 1e-12));
    }
}

#[test]
fn curve_is_consistent_with_solvers() {
    let ns = [1, 3, 7];
    let c = raid_curve(&RaidParams::paper(), &ns).unwrap();
    let net = c.demands.network().unwrap();
    for (p, &n) in c.points.iter().zip(&ns) {
        assert_eq!(p.customers, n);
        let s = exact_mva(&net, n).unwrap();
        assert_eq!(p.response_time, s.response_time);
    }
    assert!(close(c.points[0].response_time, 125.80871488190476));
}

fn r_at(kind: SweepKind, values: &[f64], n: u32) -> Vec<f64> {
    let s = sweep(&RaidParams::paper(), kind, values, &[n]).expect("sweep");
    s.series
        .iter()
        .map(|x| x.curve.points[0].response_time)
        .collect()
}

/// Relative change of R when the parameter goes from the first to the last
/// value.
fn effect(kind: SweepKind, values: &[f64], n: u32) -> f64 {
    let r = r_at(kind, values, n);
    (r[0] - r[r.len() - 1]).abs() / r[0]
}

/// Figures 4 and 6, the paper's conclusions: at low concurrency the central
/// CPU matters more than bandwidth; at high concurrency bandwidth matters
/// and the CPU hardly does.
#[test]
fn key_factors_change_with_concurrency() {
    let bw = [100.0, 200.0];
    let cpu = [1.0, 2.0];
    // Doubling each. With the paper's own parameters bandwidth matters more
    // than the CPU even at N = 1 (24 % vs 4 %; docs/MODEL.md discusses it),
    // but the trends the paper reports hold: the CPU's effect fades with
    // concurrency and bandwidth's grows, becoming the only lever at N = 20.
    let (bw1, cpu1) = (
        effect(SweepKind::Bandwidth, &bw, 1),
        effect(SweepKind::Cpu, &cpu, 1),
    );
    let (bw20, cpu20) = (
        effect(SweepKind::Bandwidth, &bw, 20),
        effect(SweepKind::Cpu, &cpu, 20),
    );
    assert!(
        bw20 > 0.25,
        "bandwidth x2 at N=20 cuts R by a quarter: {bw20}"
    );
    assert!(bw20 > 100.0 * cpu20);
    assert!(cpu20 < 0.01, "CPU x2 at N=20 barely matters: {cpu20}");
    assert!(
        cpu1 > cpu20 * 10.0,
        "CPU matters more at low concurrency: {cpu1} vs {cpu20}"
    );
    assert!(
        bw20 > bw1,
        "bandwidth matters more at high concurrency: {bw1} vs {bw20}"
    );
}

/// Figure 5: the central cache hit rate matters at every concurrency.
#[test]
fn cache_hit_matters_at_every_concurrency() {
    for n in [1, 5, 20] {
        let e = effect(SweepKind::CacheHit, &[0.0, 0.5], n);
        assert!(e > 0.4, "N={n}: {e}");
    }
}

/// Figures 7 and 8: storage-server CPU and disk rate have little effect.
#[test]
fn storage_cpu_and_disk_rate_are_minor() {
    for n in [1, 20] {
        assert!(effect(SweepKind::StorageCpu, &[1.0, 2.0], n) < 0.02);
        assert!(effect(SweepKind::Disk, &[35.0, 70.0], n) < 0.03);
    }
}

#[test]
fn sweeps_cover_every_kind() {
    for kind in SweepKind::ALL {
        let s = sweep(
            &RaidParams::paper(),
            kind,
            &kind.default_values(),
            &[1, 2, 4],
        )
        .unwrap();
        assert_eq!(s.figure, kind.figure());
        assert!(!s.series.is_empty());
        assert_eq!(SweepKind::parse(kind.name()), Some(kind));
    }
}

#[test]
fn bad_parameters_are_named() {
    let p = RaidParams {
        central_cache_hit: 1.5,
        ..RaidParams::paper()
    };
    match p.demands() {
        Err(ModelError::InvalidParameter { name, .. }) => assert_eq!(name, "central_cache_hit"),
        other => panic!("{other:?}"),
    }
    let p = RaidParams {
        stripe_width: 1,
        ..RaidParams::paper()
    };
    let e = p.demands().unwrap_err();
    assert!(e.to_string().contains("stripe_width"), "{e}");
    assert!(sweep(&RaidParams::paper(), SweepKind::Bandwidth, &[-1.0], &[1]).is_err());
    assert!(sweep(&RaidParams::paper(), SweepKind::Concurrency, &[0.5], &[1]).is_err());
    assert!(raid_curve(&RaidParams::paper(), &[]).is_err());
    assert!(raid_curve(&RaidParams::paper(), &[0]).is_err());
}

#[test]
fn params_deserialize_partially_over_the_paper_preset() {
    let p: RaidParams = serde_json::from_str(r#"{"op":"read","ethernet_rate":125000000}"#).unwrap();
    assert_eq!(p.op, RaidOp::Read);
    assert_eq!(p.ethernet_rate, 125e6);
    assert_eq!(p.stripe_unit, 16384.0);
    assert!(serde_json::from_str::<RaidParams>(r#"{"ethernet":1}"#).is_err());
}
