//! The throughput cases of the RAID presets: RAID 0 scaling, full-stripe
//! and small writes, a failed member's degraded reads and a rebuild.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use sluice_bench::runner::{self, Endpoint, RunOptions, ServerCpu};
use sluice_bench::workload::{Limit, Pattern, Rw};
use sluice_model::exact_mva_points;

use super::jobs::fork_join_calibration;
use super::{metric_sum, row, scrape, set_ratio, snapshot, Array, Bed, RaidCase, RaidRow};

pub(super) fn raid0(bed: &mut Bed<'_>) -> Result<Vec<RaidRow>> {
    let mut rows: Vec<RaidRow> = Vec::new();
    for k in 1..=4usize {
        let links: Vec<usize> = (0..k).collect();
        let array = bed.array("raid0", &links)?;
        let ep = array.head.endpoint();
        bed.prefill(&ep)?;
        let w = bed.workload(Pattern::Seq, Rw::Read, 1 << 20, 4, 1);
        let r = bed.run(&ep, &w, &format!("raid0 over {k}"))?;
        rows.push(row(
            RaidCase::Raid0,
            &format!("raid0 over {k}"),
            k as u32,
            r,
        ));
    }
    let one = rows[0].mib_s;
    for r in &mut rows {
        set_ratio(r, one, "raid0 over 1");
    }
    Ok(rows)
}

pub(super) fn full_stripe(bed: &mut Bed<'_>) -> Result<Vec<RaidRow>> {
    let w = bed.workload(Pattern::Seq, Rw::Write, 1 << 20, 4, 1);
    let single = {
        let m = bed.member(0)?;
        let ep = Endpoint::Nbd {
            uri: m.uri(),
            server_cpu: ServerCpu::Unknown,
        };
        bed.run(&ep, &w, "one member")?
    };
    let array = bed.array("raid5", &[0, 1, 2])?;
    let r = bed.run(&array.head.endpoint(), &w, "raid5 over 3")?;
    let mut one = row(RaidCase::FullStripe, "one member, direct", 0, single);
    let mut five = row(RaidCase::FullStripe, "raid5 over 3", 3, r);
    let reference = one.mib_s;
    set_ratio(&mut one, reference, "one member");
    set_ratio(&mut five, reference, "one member");
    Ok(vec![one, five])
}

/// Client requests in flight in the `small-writes` case (one worker).
pub(super) const SMALL_WRITES_IN_FLIGHT: u32 = 16;

pub(super) fn small_writes(bed: &mut Bed<'_>) -> Result<Vec<RaidRow>> {
    let array = bed.array("raid5", &[0, 1, 2])?;
    let ep = array.head.endpoint();
    bed.prefill(&ep)?;
    let ios = |text: &str| -> Result<f64> {
        Ok(metric_sum(
            text,
            "sluice_raid_member_requests_total",
            &[("export", "vol"), ("op", "read")],
        )? + metric_sum(
            text,
            "sluice_raid_member_requests_total",
            &[("export", "vol"), ("op", "write")],
        )?)
    };
    let before = ios(&scrape(array.head.metrics)?)?;
    let (head_before, members_before) = (
        snapshot(array.head.metrics, "vol")?,
        bed.member_snapshots(&array)?,
    );
    let w = bed.workload(Pattern::Rand, Rw::Write, 4096, SMALL_WRITES_IN_FLIGHT, 1);
    let r = bed.run(&ep, &w, "raid5 over 3")?;
    let (head_after, members_after) = (
        snapshot(array.head.metrics, "vol")?,
        bed.member_snapshots(&array)?,
    );
    let after = ios(&scrape(array.head.metrics)?)?;
    let writes = r.writes as f64;
    let mut out = row(RaidCase::SmallWrites, "raid5 over 3, 4 KiB", 3, r);
    out.member_ios_per_write = (writes > 0.0).then(|| (after - before) / writes);
    // The same calibration as the jobs sweep, over this run: the closed
    // network at the run's requests in flight predicts its throughput.
    let completions = head_after
        .counters
        .total_requests()
        .saturating_sub(head_before.counters.total_requests());
    let model = fork_join_calibration(
        completions,
        (&head_before, &head_after),
        (&members_before, &members_after),
    )
    .and_then(|f| Ok(f.network.network(0.0)?))
    .and_then(|net| Ok(exact_mva_points(&net, &[SMALL_WRITES_IN_FLIGHT])?));
    match model {
        Ok(points) => out.model_iops = points.first().map(|p| p.throughput),
        Err(e) => eprintln!("warning: small-writes: no model prediction: {e:#}"),
    }
    Ok(vec![out])
}

/// Cuts member `i`'s link and reads until the head has marked it failed.
fn fail_member(bed: &Bed<'_>, array: &Array, i: usize) -> Result<()> {
    bed.links[i].cut()?;
    let ep = array.head.endpoint();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let failed = metric_sum(
            &scrape(array.head.metrics)?,
            "sluice_raid_members_failed",
            &[("export", "vol")],
        )?;
        if failed >= 1.0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the head did not mark member {i} failed within 60 s of cutting its link");
        }
        // Reads that touch the member make the head notice.
        let mut w = bed.workload(Pattern::Seq, Rw::Read, 1 << 20, 1, 1);
        w.limit = Limit::Ops(4);
        let _ = runner::run_workload(&ep, &w, &RunOptions::default());
    }
}

pub(super) fn degraded(bed: &mut Bed<'_>) -> Result<Vec<RaidRow>> {
    let array = bed.array("raid5", &[0, 1, 2])?;
    let ep = array.head.endpoint();
    bed.prefill(&ep)?;
    let w = bed.workload(Pattern::Seq, Rw::Read, 1 << 20, 4, 1);
    let healthy = bed.run(&ep, &w, "raid5 healthy")?;
    fail_member(bed, &array, 1)?;
    let r = bed.run(&ep, &w, "raid5 degraded")?;
    bed.links[1].restore()?;
    let mut h = row(RaidCase::Degraded, "raid5 over 3, healthy", 3, healthy);
    let mut d = row(RaidCase::Degraded, "raid5, member 1 cut off", 3, r);
    let reference = h.mib_s;
    set_ratio(&mut h, reference, "healthy");
    set_ratio(&mut d, reference, "healthy");
    Ok(vec![h, d])
}

pub(super) fn rebuild(bed: &mut Bed<'_>) -> Result<Vec<RaidRow>> {
    let array = bed.array("raid5", &[0, 1, 2])?;
    let ep = array.head.endpoint();
    let volume = ep.size()?;
    fail_member(bed, &array, 1)?;
    let fresh = bed.member(3)?;
    let admin = format!("unix:{}", array.head.admin.display());
    let started = Instant::now();
    bed.sluice(&[
        "raid",
        "replace",
        "--admin",
        &admin,
        "--wait",
        "vol",
        "1",
        &fresh.uri_string(),
    ])?;
    let took = started.elapsed().as_secs_f64();
    bed.links[1].restore()?;
    // RAID 5 over three: each member holds half the volume's bytes.
    let bytes = volume as f64 / 2.0;
    let mib_s = bytes / took / f64::from(1 << 20);
    let link = bed.measured[3].up_mbit_s * 1e6 / 8.0 / f64::from(1 << 20);
    let mut r = RaidRow {
        case: RaidCase::Rebuild.name().into(),
        config: format!(
            "idle raid5, {} onto a fresh member in {took:.1} s",
            sluice_types::format_size(bytes as u64)
        ),
        members: 3,
        mib_s,
        iops: 0.0,
        mean_us: 0.0,
        ratio: None,
        ratio_to: String::new(),
        member_ios_per_write: None,
        model_iops: None,
        run: None,
    };
    set_ratio(&mut r, link, "the new member's link");
    drop(fresh);
    Ok(vec![r])
}
