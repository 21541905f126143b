//! `sluice bench` as a standalone program, for running the bench before
//! (or without) the `sluice` binary: `cargo run --release -p sluice-lab
//! --example bench -- [ARGS]`. It takes exactly the arguments of
//! `sluice bench`; presets that serve with sluice find
//! target/release/sluice beside target/release/examples/.

use std::process::ExitCode;

use clap::Parser;

/// Load generator for NBD servers and local I/O.
#[derive(Debug, Parser)]
#[command(name = "sluice-bench")]
struct Cli {
    #[command(flatten)]
    bench: sluice_lab::BenchCli,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match sluice_lab::run(cli.bench) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice-bench: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
