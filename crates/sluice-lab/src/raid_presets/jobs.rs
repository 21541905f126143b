//! The `jobs` case of the RAID presets: write response time against
//! concurrent jobs, measured and beside the fork-join queueing model
//! calibrated from the same run.

use anyhow::{anyhow, bail, Context, Result};
use sluice_bench::workload::{Pattern, Rw};
use sluice_model::raid::{raid_curve, RaidOp, RaidParams};
use sluice_model::{
    exact_mva_points, fork_join_bounds, fork_join_mva_points, CalibratedDemand, Calibration,
    ClosedNetwork, StationObservation,
};

use super::{
    cpu_delta, row, snapshot, Bed, JobsModel, JobsPoint, RaidCase, RaidRow, Snapshot, JOB_BYTES,
    UNIT,
};

/// The measured rows, and the model calibrated from them (or why not).
pub(super) fn jobs_sweep(
    bed: &mut Bed<'_>,
    max_jobs: u32,
) -> Result<(Vec<RaidRow>, Result<JobsModel>)> {
    let ns: Vec<u32> = if bed.opts.quick {
        [1, 2, 4, 8, 16, 32].to_vec()
    } else {
        [1, 2, 3, 4, 6, 8, 10, 12, 16, 20, 24, 28, 32].to_vec()
    }
    .into_iter()
    .filter(|&n| n <= max_jobs)
    .collect();
    let array = bed.array("raid5", &[0, 1, 2])?;
    let ep = array.head.endpoint();
    let head_before = snapshot(array.head.metrics, "vol")?;
    let members_before = bed.member_snapshots(&array)?;
    let mut rows = Vec::new();
    for &n in &ns {
        let mut w = bed.workload(Pattern::Rand, Rw::Write, JOB_BYTES, 1, n);
        w.name = format!("randwrite-128k-{n}jobs");
        let r = bed.run(&ep, &w, "raid5 over 3")?;
        rows.push(row(RaidCase::Jobs, &format!("{n} jobs"), 3, r));
    }
    let head_after = snapshot(array.head.metrics, "vol")?;
    let members_after = bed.member_snapshots(&array)?;
    let model = jobs_model(
        bed,
        &ns,
        &rows,
        (&head_before, &head_after),
        (&members_before, &members_after),
    );
    Ok((rows, model))
}

/// Calibrates the closed network from the scrapes around the sweep and
/// solves it (and the paper's equations) at every N.
fn jobs_model(
    bed: &Bed<'_>,
    ns: &[u32],
    rows: &[RaidRow],
    (head_before, head_after): (&Snapshot, &Snapshot),
    (members_before, members_after): (&[Snapshot], &[Snapshot]),
) -> Result<JobsModel> {
    let jobs = head_after
        .counters
        .total_requests()
        .saturating_sub(head_before.counters.total_requests());
    let interval = head_after.at.duration_since(head_before.at).as_secs_f64();
    let ForkJoin {
        head_cpu,
        member_cpu,
        member_demands,
        network: cal,
    } = fork_join_calibration(
        jobs,
        (head_before, head_after),
        (members_before, members_after),
    )?;
    let demands = cal.demands().context("calibrating the RAID 5 model")?;
    // Little's law on each point: N = X R (the workers issue the next
    // request as soon as a reply is in: no think time).
    let mut cycles = Vec::new();
    for (k, &n) in ns.iter().enumerate() {
        let measured = rows[k].run.as_ref().ok_or_else(|| anyhow!("no run"))?;
        cycles.push((f64::from(n) / measured.iops, measured.latency.mean_us / 1e6));
    }
    let little_gap = cycles
        .iter()
        .map(|&(cycle, r)| (cycle - r) / cycle)
        .fold(0.0, f64::max);
    // At saturation N/X is N D_max, the bounds' lower edge itself, so a
    // measurement sits on the edge and its resolution decides the side.
    // A run's X counts whole jobs over T: the bottleneck finishes T/D_max
    // of them, give or take one, and every run starts on full buckets
    // (after the idle spell between runs a shaper passes its bucket at
    // once, which the demand, bytes over rate, charges as time). So X can
    // beat 1/D_max by (bucket time + D_max) / T; the lower edges are
    // judged with that slack.
    let run_s = bed.duration.as_secs_f64();
    let bucket_s = members_after
        .iter()
        .filter_map(|m| m.shaped)
        .map(|s| s.burst_bytes / s.rate_bytes_s)
        .fold(0.0, f64::max);
    let d_max = demands.iter().map(|d| d.demand).fold(0.0, f64::max);
    let bound_slack = (bucket_s + d_max) / run_s;
    let net = cal.network(0.0)?;
    let branches = overlapping_branches(&net)?;
    let solved = exact_mva_points(&net, ns)?;
    let overlapped = fork_join_mva_points(&branches, ns)?;
    let rate = bed
        .measured
        .iter()
        .take(3)
        .map(|m| m.up_mbit_s)
        .fold(f64::INFINITY, f64::min);
    let paper_params = paper_params(head_cpu, &member_cpu, jobs, rate);
    let paper = paper_params.as_ref().and_then(|p| raid_curve(p, ns).ok());
    let mut points = Vec::new();
    for (k, &n) in ns.iter().enumerate() {
        let measured = rows[k].run.as_ref().ok_or_else(|| anyhow!("no run"))?;
        let r = measured.latency.mean_us / 1e6;
        let b = fork_join_bounds(&branches, n)?;
        let s = &solved[k];
        let bjb = b.balanced_job.response_time;
        points.push(JobsPoint {
            jobs: n,
            x: measured.iops,
            r,
            little_r: cycles[k].0,
            mva_x: s.throughput,
            mva_r: s.response_time,
            mva_error: (s.response_time - cycles[k].0) / cycles[k].0,
            fork_join_r: overlapped[k].response_time,
            fork_join_error: (overlapped[k].response_time - cycles[k].0) / cycles[k].0,
            bjb_r: bjb,
            inside_bounds: cycles[k].0 >= bjb[0] * (1.0 - bound_slack) && cycles[k].0 <= bjb[1],
            paper_r: paper.as_ref().map(|c| c.points[k].response_time),
        });
    }
    Ok(JobsModel {
        completions: jobs,
        interval_s: interval,
        little_gap,
        bound_slack,
        demands,
        member_demands,
        paper_params,
        points,
    })
}

/// The calibrated network's stations as the branches a job of the sweep
/// (a full-stripe write) runs side by side: the data going up the
/// members' links, the acknowledgements and replies coming down them at
/// the same time, and the CPU work of the head and the members. The
/// head's sends return once the data is in the sockets' buffers and the
/// members take it in as it arrives, so the CPUs work while the links
/// drain; a job alone takes about its link time, not the sum of every
/// demand a product-form network charges it (docs/BENCHMARKS.md,
/// "Networked RAID", measures this at two link rates).
fn overlapping_branches(net: &ClosedNetwork) -> Result<Vec<ClosedNetwork>> {
    let (links, cpus): (Vec<_>, Vec<_>) = net
        .stations()
        .iter()
        .cloned()
        .partition(|s| s.name.starts_with("members-link"));
    let z = net.think_time();
    let mut branches = links
        .into_iter()
        .filter(|s| s.demand > 0.0)
        .map(|s| ClosedNetwork::new(vec![s], z))
        .collect::<Result<Vec<_>, _>>()?;
    branches.push(ClosedNetwork::new(cpus, z)?);
    Ok(branches)
}

/// The RAID 5 head and members as a closed network, calibrated from
/// metrics scraped around a run of `completions` client requests.
pub(super) struct ForkJoin {
    /// The head's CPU seconds over the run.
    pub(super) head_cpu: f64,
    /// Each member's CPU seconds over the run.
    pub(super) member_cpu: Vec<f64>,
    /// Per-member demands (`mI-cpu`, `mI-link-up`, `mI-link-down`), for
    /// the report.
    pub(super) member_demands: Vec<CalibratedDemand>,
    /// Stations `head-cpu`, `members-cpu`, `members-link-up` and
    /// `members-link-down`.
    pub(super) network: Calibration,
}

pub(super) fn fork_join_calibration(
    completions: u64,
    (head_before, head_after): (&Snapshot, &Snapshot),
    (members_before, members_after): (&[Snapshot], &[Snapshot]),
) -> Result<ForkJoin> {
    let interval = head_after.at.duration_since(head_before.at).as_secs_f64();
    let jobs = completions;
    let station = |name: String, busy_seconds: f64| StationObservation {
        name,
        busy_seconds,
        servers: 1,
        delay: false,
    };
    let head_cpu = cpu_delta(head_before, head_after)?;
    let mut each = vec![station("head-cpu".into(), head_cpu)];
    let mut member_cpu = Vec::new();
    let (mut up_busy, mut down_busy) = (Vec::new(), Vec::new());
    for (i, (a, b)) in members_before.iter().zip(members_after).enumerate() {
        let cpu = cpu_delta(a, b)?;
        member_cpu.push(cpu);
        each.push(station(format!("m{i}-cpu"), cpu));
        // A link direction is busy for the bytes its shaper sent over
        // the rate it charges them at (tbf's own counters, headers and
        // all): writes go up to the member, reads come down from it. The
        // two directions of a veth pair carry data at once, so each is a
        // station of its own (a small write reads from one member while
        // it writes to the others).
        let (Some(sa), Some(sb)) = (a.shaped, b.shaped) else {
            bail!("member {i}'s snapshots have no link counters");
        };
        let up = sb.up.saturating_sub(sa.up) as f64 / sb.rate_bytes_s;
        let down = sb.down.saturating_sub(sa.down) as f64 / sb.rate_bytes_s;
        up_busy.push(up);
        down_busy.push(down);
        each.push(station(format!("m{i}-link-up"), up));
        each.push(station(format!("m{i}-link-down"), down));
    }
    let per_member = Calibration {
        interval_seconds: interval,
        completions: jobs,
        stations: each,
    };
    let mut member_demands = per_member
        .demands()
        .context("calibrating the RAID 5 model")?;
    member_demands.retain(|d| d.name != "head-cpu");
    // Each job's member I/O goes to every member at once and the job
    // waits for all of them (a fork-join), which a product-form network
    // cannot express: a network of a station per member would add up
    // work that happens side by side. The members' CPUs are one station
    // and their links another, each with the largest member's demand.
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let cal = Calibration {
        interval_seconds: interval,
        completions: jobs,
        stations: vec![
            station("head-cpu".into(), head_cpu),
            station("members-cpu".into(), max(&member_cpu)),
            station("members-link-up".into(), max(&up_busy)),
            station("members-link-down".into(), max(&down_busy)),
        ],
    };
    Ok(ForkJoin {
        head_cpu,
        member_cpu,
        member_demands,
        network: cal,
    })
}

/// The paper's parameters with what was measured: T_mpro from the head's
/// CPU per stripe unit, T_snpro from the members' (per-packet times 0,
/// so the measured CPU is all in the per-unit term), TRate_e the links'
/// measured rate, no disk (memory exports).
pub(super) fn paper_params(
    head_cpu: f64,
    member_cpu: &[f64],
    jobs: u64,
    rate_mbit_s: f64,
) -> Option<RaidParams> {
    if jobs == 0 || member_cpu.is_empty() {
        return None;
    }
    let c = jobs as f64;
    let units = f64::from(JOB_BYTES) / UNIT as f64;
    let head_cpu = head_cpu / c;
    let stp = 3.0;
    // D_Csn = T_snpro S_sn / (STP STU) with S_sn = S_mR / STP.
    let s_sn = f64::from(JOB_BYTES) * stp / (stp - 1.0) / stp;
    let member = member_cpu.iter().sum::<f64>() / member_cpu.len() as f64 / c;
    let p = RaidParams {
        op: RaidOp::Write,
        job_bytes: f64::from(JOB_BYTES),
        stripe_unit: UNIT as f64,
        stripe_width: 3,
        storage_servers: 3,
        central_cache_hit: 0.0,
        storage_cache_hit: 0.0,
        central_unit_time: head_cpu / units,
        central_packet_time: 0.0,
        storage_unit_time: member * stp * UNIT as f64 / s_sn,
        storage_packet_time: 0.0,
        mss: 1448.0,
        frame_bytes: 1514.0,
        ethernet_rate: rate_mbit_s * 1e6 / 8.0,
        disk_seek: 0.0,
        disk_latency: 0.0,
        disk_rate: 1e12,
        think_time: 0.0,
    };
    p.validate().ok().map(|()| p)
}
