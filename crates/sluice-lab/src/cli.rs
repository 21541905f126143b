//! The `sluice bench` command line: one workload (the default, the load
//! generator's [`RunArgs`]), `compare`, and the experiments (`sluice
//! bench preset NAME` or `sluice bench NAME`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use sluice_bench::cli::{run_single, BenchUsageError, RunArgs};
use sluice_bench::matrix::Driver;
use sluice_bench::workload::{parse_duration, Size};

use crate::presets;
use crate::setup::{self, PresetOptions};

/// `sluice bench`: measure an NBD server or local I/O.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchCli {
    #[command(subcommand)]
    command: Option<BenchCommand>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Run one workload, or the short standard set when no workload
    /// option is given (what `sluice bench` alone does).
    Run(RunArgs),
    /// sluice, nbdkit, qemu-nbd and local I/O on one image, driven by
    /// sluice's client and by fio, interleaved rounds, ratios to a baseline.
    Compare(CompareArgs),
    /// Run a named preset: pipelining, scaling, san, filesystem, pgbench, objects, raid, striped,
    /// merge, s3asim, noncontig, s3.
    Preset {
        #[command(subcommand)]
        preset: PresetCommand,
    },
    #[command(flatten)]
    Named(PresetCommand),
}

#[derive(Debug, Subcommand)]
enum PresetCommand {
    /// The pipelining paper's sweep: sequential read/write, outstanding I/O 1-16 x 512 B-128 KiB,
    /// server pipelining off vs fixed vs flexible (embedded server).
    Pipelining {
        #[command(flatten)]
        common: PresetArgs,
        /// Open the image with O_DIRECT (sizes below the device's
        /// logical block size, usually 4 KiB, are then left out).
        #[arg(long)]
        direct: bool,
    },
    /// The SuperNBD paper's scaling run: 1-16 clients streaming 1 MiB records, read and write;
    /// sluice vs nbdkit vs qemu-nbd vs local.
    Scaling {
        #[command(flatten)]
        common: PresetArgs,
        /// Requests each client keeps in flight.
        #[arg(long, default_value_t = 1)]
        qd: u32,
    },
    /// The SAN paper's experiments: 4 KiB QD1 latency, the 16-worker fio-style matrix, and 4 KiB
    /// random writes vs 1-64 workers, as fractions of local I/O.
    San {
        #[command(flatten)]
        common: PresetArgs,
    },
    /// ext4 on a loop device over nbdfuse: fio file workloads, sluice vs nbdkit.
    Filesystem {
        #[command(flatten)]
        common: PresetArgs,
    },
    /// The SAN paper's real-workload test: PostgreSQL with its data directory on ext4 over the
    /// export (nbdfuse + loop), pgbench TPC-B-like at 1-16 clients, synchronous_commit off and on;
    /// sluice vs nbdkit vs local I/O on the same image. Needs root and PostgreSQL.
    Pgbench {
        #[command(flatten)]
        common: PresetArgs,
        /// pgbench's scale factor (default 20; 5 with --quick).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        scale: Option<u32>,
        /// Client counts, comma-separated (default: 1,4,16).
        #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=200))]
        clients: Option<Vec<u32>>,
        /// synchronous_commit settings, comma-separated (default: off,on).
        #[arg(long, value_delimiter = ',', value_enum)]
        commit: Option<Vec<crate::pgbench::Commit>>,
    },
    /// The native object protocol, each case against its peer: SGL and strided vs contiguous
    /// reads, objects vs the NBD export, attributes riding on writes, creates with attributes,
    /// indexed queries, and (with --ceph-conf) Ceph RADOS through librados.
    Objects {
        #[command(flatten)]
        common: PresetArgs,
        /// Folder for the object store and the NBD export's file (default: a
        /// temporary folder in the system temp dir, removed afterwards).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Groups to run, comma-separated: ddt, nbd, attr, create, query, ceph
        /// (default: all; ceph only with a cluster).
        #[arg(long, value_delimiter = ',')]
        groups: Option<Vec<String>>,
        /// Objects in the query collection (default 100000; 5000 with --quick).
        #[arg(long)]
        query_objects: Option<u64>,
        /// A Ceph cluster's ceph.conf (default: $CEPH_CONF, if set): adds
        /// the ceph group (python3-rados drives it).
        #[arg(long)]
        ceph_conf: Option<PathBuf>,
        /// The Ceph pool to use, which must exist (default: $CEPH_POOL, else
        /// bench).
        #[arg(long)]
        ceph_pool: Option<String>,
        /// The ceph-osd process for OSD CPU (default: the ceph-osd whose
        /// command line names the ceph.conf).
        #[arg(long)]
        ceph_osd_pid: Option<u32>,
    },
    /// The networked RAID paper on this host: members in network namespaces behind rate-limited
    /// links (100 Mbit/s unless --link-rate); R(N) against MVA and bounds, RAID 0 and 5
    /// throughput, degraded reads, rebuild.
    Raid {
        #[command(flatten)]
        common: PresetArgs,
        #[command(flatten)]
        raid: crate::raid_presets::RaidArgs,
    },
    /// One striped object over 1-4 object servers, each behind its own rate-limited link (100
    /// Mbit/s unless --link-rate): 1 MiB sequential writes and reads against N x one link.
    Striped {
        #[command(flatten)]
        common: PresetArgs,
        #[command(flatten)]
        striped: crate::striped::StripedArgs,
    },
    /// An S3aSim-like sequence search (14 workers writing small results into one shared object):
    /// time vs database size, one write per result vs one SGL write per batch, on one object
    /// server and on four (striped, and the metadata-less baseline), over loopback and behind
    /// rate-limited links (800 Mbit/s unless --link-rate).
    S3asim {
        #[command(flatten)]
        common: PresetArgs,
        #[command(flatten)]
        s3asim: crate::s3asim::S3aSimArgs,
    },
    /// Temporal merge: 4 KiB random writes from 1-64 threads over one connection, to objects or
    /// (--export) a block export, merge off vs always vs adaptive (and NBD on the export), and
    /// latency at queue depth 1.
    Merge {
        #[command(flatten)]
        common: PresetArgs,
        /// Folder for the object store (default: a temporary folder).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Thread counts, comma-separated (default: 1,2,4,8,16,32,64).
        #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(usize))]
        workers: Option<Vec<usize>>,
        /// Write the server's block export instead of objects: through the native protocol's
        /// extent commands (merging fuses them into one scatter/gather command), and through NBD
        /// as the baseline row (the SAN paper's figure 5 on a block export).
        #[arg(long)]
        export: bool,
    },
    /// The object paper's non-contiguous I/O: one-segment transfers by size with each DDT, and
    /// blocks with 2-byte holes (8 B-64 KiB) iterative vs SGL vs strided on an object and on mem
    /// and file exports, over an unshaped and an 800 Mbit/s link (--link-rate), beside the model
    /// T = S/BW + N.
    Noncontig {
        #[command(flatten)]
        common: PresetArgs,
        #[command(flatten)]
        noncontig: crate::noncontig::NoncontigArgs,
    },
    /// S3 endpoints side by side (sluice's, radosgw, ...) and sluice's native protocol: PUT and
    /// GET of 4 KiB-64 MiB objects at 1-64 clients and a LIST of 10,000 keys; ops/s, MB/s,
    /// latency, client and server CPU per operation.
    S3 {
        #[command(flatten)]
        common: PresetArgs,
        #[command(flatten)]
        s3: crate::s3bench::S3Args,
    },
}

#[derive(Debug, Args)]
struct PresetArgs {
    /// Smaller images and shorter runs (every preset under 10 minutes).
    #[arg(long)]
    quick: bool,
    /// Interleaved rounds (medians are taken over them).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Length of each timed run (e.g. 500ms, 2s).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Folder for JSON and CSV results.
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
    /// Folder for plots (default: the --out folder).
    #[arg(long)]
    plot_dir: Option<PathBuf>,
    /// Image to serve (created and filled if missing; default: a
    /// temporary file in /dev/shm, removed afterwards).
    #[arg(long)]
    image: Option<PathBuf>,
    /// Image size when creating it.
    #[arg(long)]
    image_size: Option<Size>,
    /// The sluice binary to run `serve` with (default: this program, or a
    /// `sluice` beside it).
    #[arg(long)]
    sluice_bin: Option<PathBuf>,
    /// Targets to include, comma-separated (sluice, nbdkit, qemu-nbd,
    /// local, and LABEL=PATH for another sluice binary, e.g. an older
    /// build, or a script that runs one with other options; for
    /// pipelining: off, fixed, flexible).
    #[arg(long, value_delimiter = ',')]
    targets: Option<Vec<String>>,
    /// Which client drives the load: own, fio or both.
    #[arg(long, value_enum)]
    driver: Option<Driver>,
    /// Never show progress bars.
    #[arg(long)]
    no_progress: bool,
    /// Put each server process in a network namespace behind a veth link
    /// shaped to this rate with tc tbf (e.g. 100M, 800mbit); the link's
    /// measured RTT and bandwidth go with the results. Needs root.
    #[arg(long, value_parser = |s: &str| s.parse::<crate::link::LinkRate>())]
    link_rate: Option<crate::link::LinkRate>,
}

impl PresetArgs {
    fn options(&self, default_driver: Driver) -> PresetOptions {
        PresetOptions {
            quick: self.quick,
            rounds: self.rounds,
            duration: self.duration,
            out_dir: self.out.clone(),
            plot_dir: self.plot_dir.clone().unwrap_or_else(|| self.out.clone()),
            image: self.image.clone(),
            image_size: self.image_size.map(|s| s.0),
            sluice_bin: self.sluice_bin.clone(),
            targets: self.targets.clone(),
            driver: self.driver.unwrap_or(default_driver),
            progress: !self.no_progress,
            link_rate: self.link_rate,
        }
    }

    /// Refuses --link-rate for a preset whose servers cannot sit behind
    /// a link (in-process, or reached through a local mount).
    fn no_link(&self, preset: &str) -> Result<()> {
        match self.link_rate {
            Some(_) => Err(BenchUsageError(format!(
                "--link-rate: the {preset} preset does not put its servers behind a link (compare, scaling, san, raid, striped, s3asim and noncontig do)"
            ))
            .into()),
            None => Ok(()),
        }
    }
}

#[derive(Debug, Args)]
struct CompareArgs {
    #[command(flatten)]
    common: PresetArgs,
    /// Cases to run, comma-separated (default: all of randread-4k-qd1,
    /// randread-4k-qd16, randwrite-4k-qd16, randread-4k-qd16-w2,
    /// seqread-1m-qd8, seqwrite-1m-qd8).
    #[arg(long, value_delimiter = ',')]
    cases: Option<Vec<String>>,
    /// Target the ratios are relative to.
    #[arg(long, default_value = "nbdkit")]
    baseline: String,
}

fn run_preset(p: PresetCommand) -> Result<()> {
    match p {
        PresetCommand::Pipelining { common, direct } => {
            common.no_link("pipelining")?;
            let o = common.options(Driver::Own);
            setup::check_out_dir(&o.out_dir)?;
            presets::pipelining(&o, direct).map(drop)
        }
        PresetCommand::Scaling { common, qd } => {
            let o = common.options(Driver::Own);
            setup::check_out_dir(&o.out_dir)?;
            presets::scaling(&o, qd).map(drop)
        }
        PresetCommand::San { common } => {
            let o = common.options(Driver::Own);
            setup::check_out_dir(&o.out_dir)?;
            presets::san(&o).map(drop)
        }
        PresetCommand::Filesystem { common } => {
            common.no_link("filesystem")?;
            let o = common.options(Driver::Own);
            setup::check_out_dir(&o.out_dir)?;
            crate::fsbench::filesystem(&o).map(drop)
        }
        PresetCommand::Pgbench {
            common,
            scale,
            clients,
            commit,
        } => {
            common.no_link("pgbench")?;
            let o = common.options(Driver::Own);
            setup::check_out_dir(&o.out_dir)?;
            let report = crate::pgbench::pgbench(&crate::pgbench::PgbenchOptions {
                preset: o,
                scale,
                clients,
                commits: commit,
            })?;
            if report.samples.is_empty() {
                bail!("every run failed; see the messages above");
            }
            Ok(())
        }
        PresetCommand::Objects {
            common,
            dir,
            groups,
            query_objects,
            ceph_conf,
            ceph_pool,
            ceph_osd_pid,
        } => {
            common.no_link("objects")?;
            let o = common.options(Driver::Own);
            setup::check_out_dir(&o.out_dir)?;
            let report = crate::objects::objects(&crate::objects::ObjectsOptions {
                preset: o,
                dir,
                query_objects,
                groups,
                ceph: ceph_conf
                    .or_else(|| std::env::var_os("CEPH_CONF").map(PathBuf::from))
                    .map(|conf| crate::objects::CephPeer {
                        conf,
                        pool: ceph_pool
                            .or_else(|| std::env::var("CEPH_POOL").ok())
                            .unwrap_or_else(|| "bench".into()),
                        osd_pid: ceph_osd_pid,
                    }),
            })?;
            if report.samples.is_empty() {
                bail!("every run failed; see the messages above");
            }
            Ok(())
        }
        PresetCommand::Raid { common, raid } => {
            let o = common.options(Driver::Own);
            setup::check_out_dir(&o.out_dir)?;
            let report = crate::raid_presets::raid(&o, &raid)?;
            if report.rows.is_empty() {
                bail!("every experiment failed; see the messages above");
            }
            Ok(())
        }
        PresetCommand::Striped { common, striped } => {
            let o = common.options(Driver::Own);
            setup::check_out_dir(&o.out_dir)?;
            let report = crate::striped::striped(&o, &striped)?;
            if report.rows.is_empty() {
                bail!("every server count failed; see the messages above");
            }
            Ok(())
        }
        PresetCommand::S3asim { common, s3asim } => {
            let o = common.options(Driver::Own);
            setup::check_out_dir(&o.out_dir)?;
            let report = crate::s3asim::s3asim(&o, &s3asim)?;
            if report.samples.is_empty() {
                bail!("every run failed; see the messages above");
            }
            Ok(())
        }
        PresetCommand::Merge {
            common,
            dir,
            workers,
            export,
        } => {
            let o = common.options(Driver::Own);
            setup::check_out_dir(&o.out_dir)?;
            if workers.as_ref().is_some_and(|w| w.contains(&0)) {
                return Err(BenchUsageError("--workers: thread counts start at 1".into()).into());
            }
            let report = crate::merge::merge(&crate::merge::MergeOptions {
                preset: o,
                dir,
                workers,
                target: if export {
                    crate::merge::MergeTarget::Export
                } else {
                    crate::merge::MergeTarget::Objects
                },
            })?;
            if report.samples.is_empty() {
                bail!("every run failed; see the messages above");
            }
            Ok(())
        }
        PresetCommand::Noncontig { common, noncontig } => {
            let o = common.options(Driver::Own);
            noncontig.plan(o.quick).map_err(BenchUsageError)?;
            setup::check_out_dir(&o.out_dir)?;
            let report = crate::noncontig::noncontig(&o, &noncontig)?;
            if report.points.is_empty() {
                bail!("every point failed; see the messages above");
            }
            Ok(())
        }
        PresetCommand::S3 { common, s3 } => run_s3(&common, &s3),
    }
}

fn run_s3(common: &PresetArgs, s3: &crate::s3bench::S3Args) -> Result<()> {
    common.no_link("s3")?;
    let o = common.options(Driver::Own);
    setup::check_out_dir(&o.out_dir)?;
    let report = crate::s3bench::s3(&o, s3)?;
    if report.samples.is_empty() {
        bail!("every case failed; see the messages above");
    }
    Ok(())
}

/// Runs `sluice bench` with parsed arguments.
pub fn run(cli: BenchCli) -> Result<()> {
    match cli.command {
        None => run_single(cli.run),
        Some(BenchCommand::Run(a)) => run_single(a),
        Some(BenchCommand::Compare(a)) => {
            let o = a.common.options(Driver::Both);
            setup::check_out_dir(&o.out_dir)?;
            let report = presets::compare(&o, a.cases.as_deref(), &a.baseline)?;
            if report.runs.runs.is_empty() {
                bail!("every run failed; see the messages above");
            }
            Ok(())
        }
        Some(BenchCommand::Preset { preset }) | Some(BenchCommand::Named(preset)) => {
            run_preset(preset)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use sluice_bench::is_usage_error;

    #[derive(Debug, Parser)]
    struct Top {
        #[command(flatten)]
        bench: BenchCli,
    }

    fn parse(args: &[&str]) -> Result<BenchCli, clap::Error> {
        let mut v = vec!["bench"];
        v.extend_from_slice(args);
        Top::try_parse_from(v).map(|t| t.bench)
    }

    #[test]
    fn command_lines_parse() {
        let c = parse(&[]).unwrap();
        assert!(c.command.is_none() && !c.run.custom());
        let c = parse(&[
            "--rw",
            "mixed",
            "--read-pct",
            "30",
            "--bs",
            "64K",
            "--qd",
            "4",
        ])
        .unwrap();
        let w = c.run.workloads().unwrap();
        assert_eq!(w.len(), 1);
        assert_eq!(
            (w[0].read_pct, w[0].block_size, w[0].queue_depth),
            (30, 65536, 4)
        );
        assert!(matches!(
            parse(&["san", "--quick"]).unwrap().command,
            Some(BenchCommand::Named(PresetCommand::San { .. }))
        ));
        assert!(matches!(
            parse(&["preset", "pipelining", "--direct"])
                .unwrap()
                .command,
            Some(BenchCommand::Preset {
                preset: PresetCommand::Pipelining { direct: true, .. }
            })
        ));
        assert!(matches!(
            parse(&["compare", "--driver", "fio", "--rounds", "3"])
                .unwrap()
                .command,
            Some(BenchCommand::Compare(_))
        ));
        let c = parse(&[
            "s3",
            "--native",
            "native,sluice://127.0.0.1:10810,42",
            "--clients",
            "1,16",
            "--ops",
            "put,get",
            "--sizes",
            "4K,64M",
        ])
        .unwrap();
        let Some(BenchCommand::Named(PresetCommand::S3 { s3, .. })) = c.command else {
            panic!("not the s3 preset");
        };
        assert_eq!(s3.native[0].pids, vec![42]);
        assert_eq!(crate::s3bench::cases(&s3).len(), 8);
        for bad in [
            &["s3", "--clients", "0"][..],
            &["s3", "--ops", "delete"],
            &["s3", "--native", "just-a-label"],
            &["s3", "--s3", "a,http://h:1,/no/such/key-file"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn bad_input_is_refused() {
        assert!(parse(&["--read-pct", "101"]).is_err());
        assert!(parse(&["--qd", "0"]).is_err());
        assert!(parse(&["--duration", "2s", "--ops", "5"]).is_err());
        assert!(parse(&["--uri", "nbd://x/", "--local", "/tmp/x"]).is_err());
        assert!(parse(&["--bs", "4Q"]).is_err());
        assert!(parse(&["--backing", "disk"]).is_err());
        assert!(parse(&["compare", "--rounds", "0"]).is_err());
        let c = parse(&["--bs", "64M"]).unwrap();
        assert!(c.run.workloads().is_err());
    }

    #[test]
    fn link_rates_go_to_server_presets_only() {
        let c = parse(&[
            "raid",
            "--quick",
            "--link-rate",
            "800M",
            "--cases",
            "jobs,raid0",
        ])
        .unwrap();
        let Some(BenchCommand::Named(PresetCommand::Raid { common, raid })) = c.command else {
            panic!("not the raid preset");
        };
        assert_eq!(
            common.options(Driver::Own).link_rate,
            Some(crate::link::LinkRate(800_000_000))
        );
        assert_eq!(
            raid.cases,
            Some(vec![
                crate::raid_presets::RaidCase::Jobs,
                crate::raid_presets::RaidCase::Raid0
            ])
        );
        assert!(parse(&["san", "--link-rate", "fast"]).is_err());
        assert!(parse(&["raid", "--cases", "tape"]).is_err());
        let c = parse(&[
            "striped",
            "--quick",
            "--link-rate",
            "1G",
            "--servers",
            "1,4",
        ])
        .unwrap();
        let Some(BenchCommand::Named(PresetCommand::Striped { common, striped })) = c.command
        else {
            panic!("not the striped preset");
        };
        assert_eq!(
            common.options(Driver::Own).link_rate,
            Some(crate::link::LinkRate(1_000_000_000))
        );
        assert_eq!(striped.servers, Some(vec![1, 4]));
        assert!(parse(&["striped", "--servers", "5"]).is_err());
        let c = parse(&[
            "s3asim",
            "--quick",
            "--link-rate",
            "100M",
            "--setups",
            "one",
        ])
        .unwrap();
        let Some(BenchCommand::Named(PresetCommand::S3asim { common, s3asim })) = c.command else {
            panic!("not the s3asim preset");
        };
        assert_eq!(
            common.options(Driver::Own).link_rate,
            Some(crate::link::LinkRate(100_000_000))
        );
        assert_eq!(s3asim.setups, Some(vec![crate::s3asim::Setup::One]));
        assert!(parse(&["s3asim", "--setups", "two"]).is_err());
        let c = parse(&[
            "noncontig",
            "--quick",
            "--link-rate",
            "800M",
            "--total",
            "64K",
        ])
        .unwrap();
        let Some(BenchCommand::Named(PresetCommand::Noncontig { common, noncontig })) = c.command
        else {
            panic!("not the noncontig preset");
        };
        assert_eq!(
            common.options(Driver::Own).link_rate,
            Some(crate::link::LinkRate(800_000_000))
        );
        assert_eq!(noncontig.total.map(|s| s.0), Some(64 << 10));
        // Sizes that cannot run are a usage error before anything runs.
        let c = parse(&["noncontig", "--total", "4K", "--blocks", "8K"]).unwrap();
        let Some(BenchCommand::Named(p)) = c.command else {
            panic!("noncontig did not parse as a preset");
        };
        let e = run_preset(p).unwrap_err();
        assert!(is_usage_error(&e), "{e:#}");
        // Presets whose servers cannot sit behind a link refuse the
        // option before running anything.
        for preset in ["pipelining", "filesystem", "objects", "pgbench"] {
            let c = parse(&[preset, "--link-rate", "100M"]).unwrap();
            let Some(BenchCommand::Named(p)) = c.command else {
                panic!("{preset} did not parse as a preset");
            };
            let e = run_preset(p).unwrap_err();
            assert!(is_usage_error(&e), "{preset}: {e:#}");
            assert!(format!("{e}").contains("--link-rate"), "{preset}: {e}");
        }
    }

    #[test]
    fn pgbench_options_parse() {
        let c = parse(&[
            "pgbench",
            "--quick",
            "--scale",
            "3",
            "--clients",
            "1,8",
            "--commit",
            "on",
            "--targets",
            "sluice,local",
        ])
        .unwrap();
        let Some(BenchCommand::Named(PresetCommand::Pgbench {
            common,
            scale,
            clients,
            commit,
        })) = c.command
        else {
            panic!("not the pgbench preset");
        };
        let o = common.options(Driver::Own);
        assert!(o.quick);
        assert_eq!(o.targets, Some(vec!["sluice".into(), "local".into()]));
        assert_eq!(scale, Some(3));
        assert_eq!(clients, Some(vec![1, 8]));
        assert_eq!(commit, Some(vec![crate::pgbench::Commit::On]));
        for bad in [
            &["pgbench", "--clients", "0"][..],
            &["pgbench", "--clients", "4,x"],
            &["pgbench", "--clients", "201"],
            &["pgbench", "--scale", "0"],
            &["pgbench", "--commit", "local"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
