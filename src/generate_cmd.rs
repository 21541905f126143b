//! `sluice generate`: the man pages and shell completions, made from the
//! CLI definition itself so they never drift from `--help`. The Debian
//! package (scripts/package-deb) ships what this writes.

use std::fs;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Command as ClapCommand, Subcommand};
use clap_complete::Shell;

#[derive(Debug, Args)]
pub(crate) struct GenerateArgs {
    #[command(subcommand)]
    what: Generate,
}

#[derive(Debug, Subcommand)]
enum Generate {
    /// Write one roff man page per command into DIR: sluice.1,
    /// sluice-serve.1, sluice-obj-put.1, ... (view one with `man -l`).
    Man {
        /// The directory to write into (created if missing).
        dir: PathBuf,
    },
    /// Print the completion script for SHELL on stdout, e.g.
    /// `sluice generate completions bash > /etc/bash_completion.d/sluice`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: Shell,
    },
}

pub(crate) fn run(args: GenerateArgs, mut cli: ClapCommand) -> Result<()> {
    match args.what {
        Generate::Man { dir } => {
            fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create the directory {}", dir.display()))?;
            clap_mangen::generate_to(cli, &dir)
                .with_context(|| format!("cannot write the man pages into {}", dir.display()))
        }
        Generate::Completions { shell } => {
            // Into memory first: the generator panics on a write error
            // (a closed pipe); this way it is an error like any other.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cli, "sluice", &mut script);
            std::io::stdout()
                .write_all(&script)
                .context("cannot write the completion script to stdout")
        }
    }
}
