//! `sluice generate`: the man pages and shell completions, made from the
//! CLI definition itself so they never drift from `--help`. The Debian
//! package (scripts/package-deb) ships what this writes.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

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
                .with_context(|| format!("cannot write the man pages into {}", dir.display()))?;
            add_sections(&dir)
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

/// The exit status every command shares, in roff.
const EXIT_STATUS: &str =
    ".SH \"EXIT STATUS\"\n0 on success; 2 for bad usage (one line on stderr, \
naming what was wrong); 1 for any other failure (one line naming what failed and on what).\n";

/// Examples of the pages that have them: (page, command lines).
const EXAMPLES: &[(&str, &[&str])] = &[
    (
        "sluice-serve.1",
        &[
            "sluice serve",
            "sluice serve --listen 0.0.0.0:10809 --export vm1=file:/var/lib/sluice/vm1.img,size=20G",
            "sluice serve --export vol=raid5:unit=64K,members=nbd://a/m,nbd://b/m,nbd://c/m --admin unix:./sluice-data/admin.sock",
            "sluice serve --stdin --export default=file:disk.img",
        ],
    ),
    (
        "sluice-obj.1",
        &[
            "id=$(sluice obj create)",
            "sluice obj put $id photo.jpg",
            "sluice obj get $id --range 0:4K",
            "sluice obj stat $id",
            "sluice obj --meta sluice://meta:10810 put logs/day1 day1.bin --stripe 64K",
        ],
    ),
    (
        "sluice-meta.1",
        &[
            "sluice meta --meta sluice://meta:10810 add-server sluice://a:10810 sluice://b:10810",
            "sluice meta --meta sluice://meta:10810 ls-servers",
        ],
    ),
    (
        "sluice-raid.1",
        &[
            "sluice raid create --level 5 --unit 64K nbd://a/m nbd://b/m nbd://c/m",
            "sluice raid status",
            "sluice raid replace vol 1 nbd://d/m --wait",
            "sluice raid scrub vol",
        ],
    ),
];

/// Adds EXAMPLES (where there are some) and EXIT STATUS to every page
/// `clap_mangen` wrote into `dir`.
fn add_sections(dir: &Path) -> Result<()> {
    let pages = fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    for page in pages {
        let path = page
            .with_context(|| format!("cannot read {}", dir.display()))?
            .path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !(name.starts_with("sluice") && name.ends_with(".1")) {
            continue;
        }
        let mut extra = String::new();
        if let Some((_, lines)) = EXAMPLES.iter().find(|(page, _)| *page == name) {
            extra.push_str(".SH EXAMPLES\n.nf\n");
            for line in *lines {
                // A backslash starts a roff escape (doubled, it prints);
                // a bare `-` may print as a hyphen, which no shell reads.
                extra.push_str(&line.replace('\\', "\\\\").replace('-', "\\-"));
                extra.push('\n');
            }
            extra.push_str(".fi\n");
        }
        extra.push_str(EXIT_STATUS);
        fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(extra.as_bytes()))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_get_examples_and_the_exit_status() {
        let dir = tempfile::tempdir().unwrap();
        let cli = ClapCommand::new("sluice")
            .subcommand(ClapCommand::new("serve"))
            .subcommand(ClapCommand::new("bench"));
        run(
            GenerateArgs {
                what: Generate::Man {
                    dir: dir.path().to_owned(),
                },
            },
            cli,
        )
        .unwrap();
        let serve = fs::read_to_string(dir.path().join("sluice-serve.1")).unwrap();
        assert!(
            serve.contains(".SH EXAMPLES\n.nf\nsluice serve\n"),
            "{serve}"
        );
        assert!(serve.contains(".SH \"EXIT STATUS\""), "{serve}");
        assert!(serve.contains("sluice serve \\-\\-stdin"), "{serve}");
        let bench = fs::read_to_string(dir.path().join("sluice-bench.1")).unwrap();
        assert!(!bench.contains("EXAMPLES") && bench.contains("EXIT STATUS"));
    }
}
