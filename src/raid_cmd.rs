//! `sluice raid`: managing arrays whose members are other NBD servers.
//! Today `create`, which writes the members' superblocks; the volume
//! crate does the work, this module reads the command line.

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use sluice_volume::{BaseSpec, VolumeBuilder, VolumeSpec};

/// Arguments of `sluice raid`.
#[derive(Debug, Args)]
pub(crate) struct RaidArgs {
    #[command(subcommand)]
    command: RaidCommand,
}

#[derive(Debug, Subcommand)]
enum RaidCommand {
    /// Make members a new array: zero their data areas and write a
    /// superblock on each (array id, member index, geometry, event
    /// counter). Give the array as in `--export NAME=SPEC`
    /// (`raid5:unit=64K,members=URI,URI,URI`), or as `--level 5 --unit
    /// 64K URI URI URI`.
    Create(CreateArgs),
}

#[derive(Debug, Args)]
struct CreateArgs {
    /// Overwrite members that hold another array's superblock.
    #[arg(long)]
    force: bool,
    /// RAID level (0 or 5), with --unit and member URIs instead of a SPEC.
    #[arg(long, requires = "unit")]
    level: Option<u8>,
    /// Stripe unit (e.g. 64K), with --level.
    #[arg(long, requires = "level")]
    unit: Option<String>,
    /// The array SPEC, or with --level and --unit the member URIs in
    /// array order.
    #[arg(required = true, value_name = "SPEC|URI")]
    members: Vec<String>,
}

impl CreateArgs {
    /// The array spec, written the one way specs are written.
    fn spec(&self) -> anyhow::Result<VolumeSpec> {
        let text = match (&self.level, &self.unit, self.members.as_slice()) {
            (Some(level), Some(unit), uris) => {
                format!("raid{level}:unit={unit},members={}", uris.join(","))
            }
            (None, None, [spec]) => spec.clone(),
            _ => bail!("give one array SPEC, or --level, --unit and the member URIs"),
        };
        let spec: VolumeSpec = text.parse()?;
        if !matches!(spec.base, BaseSpec::Raid(_)) {
            bail!("{text:?} is not an array spec (raid0:... or raid5:...)");
        }
        Ok(spec)
    }
}

/// Runs `sluice raid`.
pub(crate) fn run(args: RaidArgs) -> anyhow::Result<()> {
    match args.command {
        RaidCommand::Create(create) => {
            let spec = create.spec()?;
            let uuid = VolumeBuilder::default()
                .create_raid(&spec, create.force)
                .context("cannot create the array")?;
            let BaseSpec::Raid(raid) = &spec.base else {
                unreachable!("checked by spec()")
            };
            println!(
                "created {} array {uuid}: {} members, {}-byte stripe unit",
                format!("{:?}", raid.level).to_lowercase(),
                raid.members.len(),
                raid.unit
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Top {
        #[command(flatten)]
        raid: RaidArgs,
    }

    fn spec(args: &[&str]) -> anyhow::Result<VolumeSpec> {
        let top = Top::try_parse_from(std::iter::once("raid").chain(args.iter().copied()))?;
        let RaidCommand::Create(create) = top.raid.command;
        create.spec()
    }

    #[test]
    fn both_forms_give_the_same_spec() {
        let a = spec(&[
            "create",
            "raid5:unit=64K,members=nbd://a/x,nbd://b/x,nbd://c/x",
        ])
        .expect("spec form");
        let b = spec(&[
            "create",
            "--level",
            "5",
            "--unit",
            "64K",
            "nbd://a/x",
            "nbd://b/x",
            "nbd://c/x",
        ])
        .expect("flag form");
        assert_eq!(a, b);
        let e = spec(&["create", "mem:1M"]).expect_err("not an array");
        assert!(e.to_string().contains("is not an array spec"), "{e}");
        let e = spec(&["create", "nbd://a/x", "nbd://b/x"]).expect_err("no level");
        assert!(e.to_string().contains("give one array SPEC"), "{e}");
        assert!(spec(&["create", "--level", "5", "nbd://a/x"]).is_err());
    }
}
