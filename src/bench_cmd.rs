//! `sluice bench`: the load generator. The options and subcommands live
//! in the sluice-lab crate (so its example binary and tests share them);
//! this module only hands them over.

use clap::Args;

/// Arguments of `sluice bench` (a workload, `compare`, or a preset).
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    #[command(flatten)]
    bench: sluice_lab::BenchCli,
}

/// Runs `sluice bench`.
pub(crate) fn run(args: BenchArgs) -> anyhow::Result<()> {
    sluice_lab::run(args.bench)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Top {
        #[command(flatten)]
        bench: BenchArgs,
    }

    #[test]
    fn a_tiny_verified_run_through_the_subcommand() {
        let top = Top::try_parse_from([
            "bench",
            "--size",
            "8M",
            "--rw",
            "mixed",
            "--bs",
            "4K",
            "--qd",
            "4",
            "--ops",
            "200",
            "--verify",
            "--no-progress",
            "--format",
            "json",
        ])
        .expect("arguments parse");
        run(top.bench).expect("the run succeeds");
    }
}
