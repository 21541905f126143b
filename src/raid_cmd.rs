//! `sluice raid`: managing arrays whose members are other NBD servers.
//! `create` writes the members' superblocks (the volume crate does the
//! work); `status`, `replace` and `scrub` ask a running server over its
//! admin socket (`sluice serve --admin unix:PATH`).

use std::path::Path;
use std::time::Duration;

use crate::progress::Progress;
use crate::UsageError;
use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use sluice_raid::{ArrayStatus, ScrubReport};
use sluice_server::admin::{self, AdminReply, AdminRequest, ExportStatus};
use sluice_volume::{BaseSpec, VolumeBuilder, VolumeSpec};

/// Where `sluice raid status|replace|scrub` look for the admin socket
/// unless told.
pub(crate) const DEFAULT_ADMIN: &str = "./sluice-data/admin.sock";

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
    /// Show each array a running server exports: level, unit, state
    /// (clean, degraded, rebuilding, failed), each member's URI, state,
    /// event counter and I/O counts, rebuild and scrub progress.
    Status(StatusArgs),
    /// Put a new member (an NBD URI) in place MEMBER of array EXPORT on
    /// a running server and rebuild it online; with --wait, show the
    /// rebuild's progress until it ends.
    Replace(ReplaceArgs),
    /// Read every stripe of array EXPORT on a running server and check
    /// its parity; with --repair, rewrite the parity of stripes that do
    /// not match.
    Scrub(ScrubArgs),
}

/// The admin socket of the packaged configuration (contrib/sluice.toml).
const PACKAGED_ADMIN: &str = "/run/sluice/admin.sock";

/// `--admin PATH`.
#[derive(Debug, Args)]
struct AdminArg {
    /// The server's admin socket (PATH or unix:PATH). Default:
    /// ./sluice-data/admin.sock (what 'sluice serve' opens with no
    /// arguments), else /run/sluice/admin.sock (the packaged
    /// configuration's) if that exists.
    #[arg(long, value_name = "PATH")]
    admin: Option<String>,
}

impl AdminArg {
    fn path(&self) -> &Path {
        match &self.admin {
            Some(a) => Path::new(a.strip_prefix("unix:").unwrap_or(a)),
            None if !Path::new(DEFAULT_ADMIN).exists() && Path::new(PACKAGED_ADMIN).exists() => {
                Path::new(PACKAGED_ADMIN)
            }
            None => Path::new(DEFAULT_ADMIN),
        }
    }

    /// Sends `request`; an error reply is an error.
    fn ask(&self, request: &AdminRequest) -> anyhow::Result<AdminReply> {
        let path = self.path();
        let reply = admin::request(path, request).map_err(|e| {
            // Nothing there, or nobody answering: the server has no admin
            // socket at this path.
            let absent = matches!(&e, admin::AdminError::Io { source, .. }
                if matches!(source.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused));
            let hint = if absent {
                format!(
                    "; is a server running with '--admin unix:{}'? (--admin PATH names another socket)",
                    path.display()
                )
            } else {
                String::new()
            };
            anyhow::Error::new(e).context(format!(
                "cannot ask the server on {}{hint}",
                path.display()
            ))
        })?;
        if let AdminReply::Error { message } = reply {
            bail!("{message}");
        }
        Ok(reply)
    }
}

#[derive(Debug, Args)]
struct StatusArgs {
    #[command(flatten)]
    admin: AdminArg,
    /// Print the arrays as JSON: a list with one object per RAID export
    /// (`export` and the array's status fields: level, unit, size,
    /// state, members, rebuild, scrub, journal), the `arrays` of the
    /// admin protocol's status reply.
    #[arg(long)]
    json: bool,
    /// Only this export.
    export: Option<String>,
}

#[derive(Debug, Args)]
struct ReplaceArgs {
    #[command(flatten)]
    admin: AdminArg,
    /// Wait for the rebuild to end, showing its progress.
    #[arg(long)]
    wait: bool,
    /// The array's export name.
    export: String,
    /// Index of the member to replace (0 is the first).
    member: usize,
    /// The new member: nbd://HOST:PORT/EXPORT (or nbds://, nbd+unix://).
    uri: String,
}

#[derive(Debug, Args)]
struct ScrubArgs {
    #[command(flatten)]
    admin: AdminArg,
    /// Rewrite the parity of stripes that do not match their data.
    #[arg(long)]
    repair: bool,
    /// The array's export name.
    export: String,
}

fn statuses(admin: &AdminArg, export: Option<String>) -> anyhow::Result<Vec<ExportStatus>> {
    match admin.ask(&AdminRequest::Status { export })? {
        AdminReply::Status { arrays } => Ok(arrays),
        other => bail!("the server answered a status request with {other:?}"),
    }
}

fn percent(done: u64, total: u64) -> f64 {
    if total == 0 {
        100.0
    } else {
        done as f64 * 100.0 / total as f64
    }
}

/// A state as every `sluice raid` command spells it: `clean`,
/// `degraded`, `active`.
fn state(s: &dyn std::fmt::Debug) -> String {
    format!("{s:?}").to_lowercase()
}

/// The text `sluice raid status` prints for one array.
fn describe(export: &str, a: &ArrayStatus) -> String {
    let mut out = format!(
        "{export}: {} unit {} size {} members {} state {}",
        a.level,
        a.unit,
        a.size,
        a.members.len(),
        state(&a.state)
    );
    if let Some(uuid) = a.array_uuid {
        out.push_str(&format!(" array {uuid}"));
    }
    out.push('\n');
    for m in &a.members {
        out.push_str(&format!(
            "  member {} {} state {} events {} reads {} writes {} errors {} read_bytes {} written_bytes {} probes {} last_answer {}\n",
            m.index,
            m.name,
            state(&m.state),
            m.events.map_or("-".into(), |e| e.to_string()),
            m.reads,
            m.writes,
            m.errors,
            m.read_bytes,
            m.written_bytes,
            m.probes,
            m.silent_ms.map_or("never".into(), |ms| format!(
                "{:.1}s ago",
                ms as f64 / 1000.0
            )),
        ));
    }
    if let Some(r) = &a.rebuild {
        out.push_str(&format!(
            "  rebuild member {} {:.1}% ({} of {} bytes, rate limit {} bytes/s)\n",
            r.member,
            percent(r.done_bytes, r.total_bytes),
            r.done_bytes,
            r.total_bytes,
            r.rate
        ));
    }
    if let Some(j) = &a.journal {
        out.push_str(&format!(
            "  journal {} dirty_stripes {} writing {} commits {} resynced {}\n",
            j.path, j.dirty_stripes, j.writing_stripes, j.commits, j.resynced
        ));
    }
    if let Some(s) = &a.scrub {
        out.push_str(&format!(
            "  scrub {} {:.1}% ({} of {} stripes) mismatches {} repaired {}\n",
            if s.running { "running" } else { "done" },
            percent(s.done_stripes, s.total_stripes),
            s.done_stripes,
            s.total_stripes,
            s.mismatches,
            s.repaired
        ));
    }
    out
}

/// Shows the rebuild of `member` of `export` until it ends.
fn wait_for_rebuild(admin: &AdminArg, export: &str, member: usize) -> anyhow::Result<()> {
    let mut progress = None;
    loop {
        let arrays = statuses(admin, Some(export.to_owned()))?;
        let Some(a) = arrays.first() else {
            bail!("the server no longer reports array {export:?}");
        };
        match &a.array.rebuild {
            Some(r) if r.member == member => {
                progress
                    .get_or_insert_with(|| {
                        Progress::operation(
                            &format!("rebuilding member {member} of {export}"),
                            r.total_bytes,
                            "bytes",
                        )
                    })
                    .set(r.done_bytes);
            }
            _ => {
                drop(progress.take());
                let m = a.array.members.get(member);
                match m.map(|m| m.state) {
                    Some(sluice_raid::MemberCondition::Active) => {
                        println!(
                            "member {member} of {export} rebuilt; array {}",
                            state(&a.array.state)
                        );
                        return Ok(());
                    }
                    other => bail!(
                        "the rebuild of member {member} of {export} stopped: the member is {}",
                        other.map_or_else(|| "gone".to_owned(), |s| state(&s))
                    ),
                }
            }
        }
        std::thread::sleep(POLL);
    }
}

/// How often a command that shows a server's progress asks for it.
const POLL: Duration = Duration::from_millis(500);

/// Runs `scrub` (the request, which answers when the scrub ends) and,
/// on a terminal, shows the scrub's progress meanwhile from status
/// requests on a second connection.
fn with_scrub_progress<T>(
    admin: &AdminArg,
    export: &str,
    scrub: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    if !crate::progress::drawn() {
        return scrub();
    }
    let (done, ended) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut progress = None;
            // Until the scrub's answer came (or the sender is gone).
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = ended.recv_timeout(POLL) {
                let Ok(arrays) = statuses(admin, Some(export.to_owned())) else {
                    continue;
                };
                if let Some(s) = arrays
                    .first()
                    .and_then(|a| a.array.scrub.as_ref())
                    .filter(|s| s.running)
                {
                    progress
                        .get_or_insert_with(|| {
                            Progress::operation(
                                &format!("scrubbing {export}"),
                                s.total_stripes,
                                "stripes",
                            )
                        })
                        .set(s.done_stripes);
                }
            }
        });
        let result = scrub();
        drop(done);
        result
    })
}

fn scrub_text(export: &str, r: &ScrubReport) -> String {
    format!(
        "scrub of {export}: {} stripes checked, {} mismatches, {} repaired",
        r.stripes, r.mismatches, r.repaired
    )
}

#[derive(Debug, Args)]
struct CreateArgs {
    /// Overwrite members that hold another array's superblock.
    #[arg(long)]
    force: bool,
    /// RAID level (0, 1, 5, 6 or 10), with --unit and member URIs instead of a SPEC.
    #[arg(long, requires = "unit")]
    level: Option<u8>,
    /// RAID 10: copies of each chunk (md's near layout; default 2).
    #[arg(long, requires = "level")]
    copies: Option<usize>,
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
                let copies = self
                    .copies
                    .map(|c| format!("copies={c},"))
                    .unwrap_or_default();
                format!("raid{level}:unit={unit},{copies}members={}", uris.join(","))
            }
            (None, None, [spec]) => spec.clone(),
            _ => {
                return Err(UsageError(
                    "give one array SPEC, or --level, --unit and the member URIs".into(),
                )
                .into())
            }
        };
        let spec: VolumeSpec = text.parse().map_err(|e| UsageError(format!("{e}")))?;
        if !matches!(spec.base, BaseSpec::Raid(_)) {
            return Err(UsageError(format!(
                "{text:?} is not an array spec (raid0:..., raid1:..., raid5:..., raid6:... or raid10:...)"
            ))
            .into());
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
                raid.level.name(),
                raid.members.len(),
                raid.unit
            );
            Ok(())
        }
        RaidCommand::Status(args) => {
            let arrays = statuses(&args.admin, args.export)?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&arrays)?);
            } else if arrays.is_empty() {
                println!("no RAID exports");
            } else {
                for a in &arrays {
                    print!("{}", describe(&a.export, &a.array));
                }
            }
            Ok(())
        }
        RaidCommand::Replace(args) => {
            args.admin.ask(&AdminRequest::Replace {
                export: args.export.clone(),
                member: args.member,
                uri: args.uri.clone(),
            })?;
            println!(
                "member {} of {} replaced by {}; rebuilding",
                args.member, args.export, args.uri
            );
            // The superblocks are what a restart checks the member list
            // against: the serving config must follow them.
            println!(
                "change member {} of {} to {} in the serving config (--export or TOML): a restart that names the old member is refused",
                args.member, args.export, args.uri
            );
            if args.wait {
                wait_for_rebuild(&args.admin, &args.export, args.member)?;
            }
            Ok(())
        }
        RaidCommand::Scrub(args) => {
            let request = AdminRequest::Scrub {
                export: args.export.clone(),
                repair: args.repair,
            };
            let reply =
                with_scrub_progress(&args.admin, &args.export, || args.admin.ask(&request))?;
            let AdminReply::Scrubbed { export, report } = reply else {
                bail!("the server answered a scrub request with {reply:?}");
            };
            println!("{}", scrub_text(&export, &report));
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
        let RaidCommand::Create(create) = top.raid.command else {
            anyhow::bail!("not create");
        };
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
