//! What a volume is made of, and the `SPEC` syntax of `--export NAME=SPEC`.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use sluice_client::{ExportUri, NbdUri};
use sluice_raid::RaidLevel;
use sluice_storage::{CacheConfig, FaultRule};
use thiserror::Error;

/// How long a remote base waits for one reply before the request fails
/// (and, in an array, the member counts as failed), unless the spec says.
pub const DEFAULT_REMOTE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a remote base keeps trying to get a lost server back before
/// its requests fail, unless the spec says. Short enough that an array
/// whose member died goes on degraded within seconds; long enough for a
/// member server's restart.
pub const DEFAULT_REMOTE_RECONNECT: Duration = Duration::from_secs(10);

/// A device stack: a base device and the layers over it. Recursive in
/// shape: a base can be made of other volumes (a RAID of members, each a
/// `VolumeSpec` with its own layers), which the same builder opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeSpec {
    /// The device at the bottom.
    pub base: BaseSpec,
    /// Open the base read-only; every layer then refuses writes too.
    pub read_only: bool,
    /// Layers over the base, bottom first.
    pub layers: Vec<LayerSpec>,
}

/// The device at the bottom of a stack.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BaseSpec {
    /// A regular file or block device (`file:PATH[,size=BYTES][,direct]`).
    File {
        /// Path of the file or device.
        path: PathBuf,
        /// Size to create or extend to.
        size: Option<u64>,
        /// Open with O_DIRECT.
        direct: bool,
    },
    /// A sparse RAM disk (`mem:BYTES[,overcommit]`).
    Memory {
        /// Size in bytes.
        size: u64,
        /// `overcommit`: serve it even when it is larger than the
        /// machine's memory (writes past the memory then fail); refused
        /// otherwise, when the volume is opened.
        overcommit: bool,
    },
    /// An export of another NBD server, written as its URI
    /// (`nbd://HOST[:PORT]/EXPORT`, `nbds://...`, `nbd+unix:///EXPORT?socket=PATH`,
    /// `nbds+unix://...`), opened through `sluice_client::RemoteDevice`.
    Remote(RemoteSpec),
    /// A block export of a sluice server over the native protocol
    /// (`sluice://HOST[:PORT]/EXPORT[?merge=POLICY]`, `sluices://...`),
    /// opened through `sluice_client::obj::ExportDevice`: requests many
    /// callers have in flight go out fused into one extent command
    /// (temporal merge). Not an array member.
    Export(RemoteSpec),
    /// RAID 0, 1 or 5 over member volumes
    /// (`raid5:unit=SIZE,members=URI,URI,...`).
    Raid(RaidSpec),
}

/// A remote export and how patient to be with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteSpec {
    /// The URI as written (checked to parse as an [`NbdUri`]).
    pub uri: String,
    /// Longest wait for one reply (`timeout=DURATION`).
    pub timeout: Duration,
    /// How long to try to get a lost connection back (`reconnect=DURATION`).
    pub reconnect: Duration,
}

impl RemoteSpec {
    /// `uri` with the default timeout and reconnect window.
    pub fn new(uri: impl Into<String>) -> Self {
        Self {
            uri: uri.into(),
            timeout: DEFAULT_REMOTE_TIMEOUT,
            reconnect: DEFAULT_REMOTE_RECONNECT,
        }
    }
}

/// An array: level, stripe unit and member volumes in array order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaidSpec {
    /// RAID 0, 1 or 5.
    pub level: RaidLevel,
    /// Stripe unit in bytes.
    pub unit: u64,
    /// The members, in array order (member 0 first); each a whole stack.
    pub members: Vec<VolumeSpec>,
    /// Where RAID 5 and 6 keep their write-intent journal (`journal=PATH|off`).
    pub journal: JournalSpec,
    /// `start-dirty-degraded`: start a RAID 5 array with a member
    /// missing even when stripes may have parity that does not match
    /// their data (md's `start_dirty_degraded`); refused otherwise.
    pub start_dirty_degraded: bool,
    /// `kick-stale`: start without a member that answers but is behind
    /// the others (stale, or recorded failed), as if it could not be
    /// reached, as md kicks such a member; refused otherwise.
    pub kick_stale: bool,
    /// How often members that have not answered are probed, so a dead
    /// one is marked failed while the array is idle (`probe=DURATION`,
    /// `probe=off`: zero, never).
    pub probe: Duration,
    /// How long a failed RAID 1 mirror's missed writes are tracked, so
    /// that when it answers again it is put back and resynced from them
    /// (`readd=DURATION`, `readd=off`: zero, a member that failed must
    /// be replaced).
    pub readd: Duration,
}

/// Where an array's write-intent journal lives (see
/// [`sluice_raid::journal`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum JournalSpec {
    /// Not written: a file named after the array in the builder's
    /// journal folder ([`crate::VolumeBuilder::journal_dir`]).
    #[default]
    Default,
    /// `journal=off`: none (a crash during a partial-stripe write can
    /// leave a stripe whose parity does not match).
    Off,
    /// `journal=PATH`: this file.
    File(PathBuf),
}

/// A layer over a device.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LayerSpec {
    /// Power-loss simulation (`power-loss[=SEED]`), a testing tool: a
    /// volatile write cache that loses whatever was not flushed when the
    /// process dies. See [`sluice_storage::PowerLossDevice`].
    PowerLoss {
        /// Seed of the simulation's choices.
        seed: u64,
    },
    /// Error injection (`fail=OPS:ERRNO:TRIGGER`, repeatable), a testing
    /// tool. See [`FaultRule`].
    Fault {
        /// The rules, in the order given.
        rules: Vec<FaultRule>,
    },
    /// A buffer cache. Not written in a spec today: the server puts one
    /// over every export from its own settings (see
    /// [`VolumeBuilder`](crate::VolumeBuilder)).
    Cache(CacheConfig),
}

/// The kinds of spec, for a spec of none of them (the options of each
/// are in `sluice serve --help` and the README: a whole grammar in one
/// error line hides what was wrong).
const KINDS: &str = "expected file:PATH, mem:BYTES, an nbd[s][+unix]:// or \
                     sluice[s]://HOST/EXPORT URI, or raid0|1|5|6|10:unit=SIZE,members=...";

/// Why a spec could not be parsed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpecError {
    /// The spec does not follow the syntax.
    #[error("bad export spec {spec:?}: {reason}")]
    Syntax {
        /// The whole spec.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A size or duration in it is not one.
    #[error(transparent)]
    Size(#[from] sluice_types::ParseError),
    /// A remote URI in it is not an NBD URI.
    #[error("bad export spec {spec:?}: {reason}")]
    Uri {
        /// The whole spec.
        spec: String,
        /// The URI.
        uri: String,
        /// Why it does not parse (the client's message, which names it).
        reason: String,
    },
}

/// URI schemes a remote base or member is written with.
const URI_SCHEMES: [&str; 4] = ["nbd", "nbds", "nbd+unix", "nbds+unix"];

/// The base of a `sluice[s]://HOST/EXPORT` spec: a block export over the
/// native protocol.
fn export_base(
    spec: &str,
    timeout: Option<Duration>,
    reconnect: Option<Duration>,
) -> Result<BaseSpec, SpecError> {
    let uri = spec.split(',').next().unwrap_or_default();
    uri.parse::<ExportUri>().map_err(|e| SpecError::Uri {
        spec: spec.to_owned(),
        uri: uri.to_owned(),
        reason: e.to_string(),
    })?;
    Ok(BaseSpec::Export(RemoteSpec {
        uri: uri.to_owned(),
        timeout: timeout.unwrap_or(DEFAULT_REMOTE_TIMEOUT),
        reconnect: reconnect.unwrap_or(DEFAULT_REMOTE_RECONNECT),
    }))
}

impl FromStr for VolumeSpec {
    type Err = SpecError;

    /// Parses `KIND:ARG[,OPTION]...`:
    ///
    /// - `file:PATH` or `mem:BYTES`, with `size=BYTES`, `ro`, `direct`
    ///   (`mem:` takes `ro` and `overcommit`: larger than the machine's
    ///   memory);
    /// - an NBD URI (`nbd://HOST[:PORT]/EXPORT` and the other schemes the
    ///   client takes), with `ro`, `timeout=DURATION` (longest wait for
    ///   a reply) and `reconnect=DURATION` (window to get a lost server
    ///   back);
    /// - `raid0:`, `raid1:`, `raid5:`, `raid6:` or `raid10:` (with
    ///   `copies=N`, default 2) with `unit=SIZE` and `members=URI`, every
    ///   further item that is a URI being the next member (so
    ///   `members=URI,URI,URI`), `journal=PATH` or `journal=off` (RAID
    ///   5's and 6's write-intent journal), `start-dirty-degraded` (start with a
    ///   member missing even after an unclean shutdown), `kick-stale`
    ///   (start without a reachable member that is behind), `probe=DURATION`
    ///   or `probe=off` (how often idle members are probed), `readd=DURATION`
    ///   or `readd=off` (RAID 1: how long a failed mirror may come back
    ///   and be resynced from what it missed), and `ro`,
    ///   `timeout=`, `reconnect=`
    ///   (applied to every member);
    ///
    /// then, for testing, `fail=RULE` and `power-loss[=SEED]`, options in
    /// any order. The testing layers stack in a fixed order, whatever the
    /// order written: power loss right over the base (where a disk's
    /// volatile cache is), error injection over it.
    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let bad = |reason: String| SpecError::Syntax {
            spec: spec.to_owned(),
            reason,
        };
        let (kind, rest) = spec
            .split_once(':')
            .ok_or_else(|| bad(format!("missing KIND: ({KINDS})")))?;
        let mut parts = split_items(rest).into_iter();
        let first = parts.next().unwrap_or_default();
        let is_raid = matches!(kind, "raid0" | "raid1" | "raid5" | "raid6" | "raid10");
        // In a RAID spec the first item is an option like the others.
        let items = is_raid.then_some(first).into_iter().chain(parts);
        let SpecOptions {
            read_only,
            size,
            direct,
            overcommit,
            rules,
            power_loss_seed,
            timeout,
            reconnect,
            unit,
            copies,
            members,
            journal,
            start_dirty_degraded,
            kick_stale,
            probe,
            readd,
        } = SpecOptions::parse(spec, kind, items)?;
        let remote_options_used = timeout.is_some() || reconnect.is_some();
        let remote = |uri: &str| -> Result<RemoteSpec, SpecError> {
            uri.parse::<NbdUri>().map_err(|e| SpecError::Uri {
                spec: spec.to_owned(),
                uri: uri.to_owned(),
                reason: e.to_string(),
            })?;
            Ok(RemoteSpec {
                uri: uri.to_owned(),
                timeout: timeout.unwrap_or(DEFAULT_REMOTE_TIMEOUT),
                reconnect: reconnect.unwrap_or(DEFAULT_REMOTE_RECONNECT),
            })
        };
        let base = match kind {
            "file" | "mem" if remote_options_used => {
                return Err(bad(
                    "timeout= and reconnect= are for remote volumes and arrays".into(),
                ))
            }
            "file" => {
                if first.is_empty() {
                    return Err(bad("empty path".into()));
                }
                BaseSpec::File {
                    path: PathBuf::from(first),
                    size,
                    direct,
                }
            }
            "mem" => {
                if size.is_some() || direct {
                    return Err(bad("mem takes its size as mem:BYTES".into()));
                }
                let size = sluice_types::parse_size(first)?;
                if size == 0 {
                    return Err(bad("a RAM disk of 0 bytes holds nothing".into()));
                }
                BaseSpec::Memory { size, overcommit }
            }
            _ if size.is_some() || direct => {
                return Err(bad(format!(
                    "size= and direct are for file volumes, not {kind}"
                )))
            }
            _ if read_only => {
                return Err(bad(format!(
                    "ro is not supported on {kind} volumes (serve the members read-only instead)"
                )))
            }
            _ if URI_SCHEMES.contains(&kind) => {
                let uri = spec.split(',').next().unwrap_or_default();
                BaseSpec::Remote(remote(uri)?)
            }
            "sluice" | "sluices" => export_base(spec, timeout, reconnect)?,
            "raid0" | "raid1" | "raid5" | "raid6" | "raid10" => {
                let level = match kind {
                    "raid0" => RaidLevel::Raid0,
                    "raid1" => RaidLevel::Raid1,
                    "raid5" => RaidLevel::Raid5,
                    "raid6" => RaidLevel::Raid6,
                    _ => RaidLevel::Raid10 {
                        copies: copies.unwrap_or(sluice_raid::DEFAULT_RAID10_COPIES),
                    },
                };
                let unit = unit.ok_or_else(|| bad("missing unit=SIZE".into()))?;
                let uris = members.ok_or_else(|| bad("missing members=URI,URI,...".into()))?;
                let members = uris
                    .iter()
                    .map(|u| match nested(u) {
                        // An array as a member: its own spec, options
                        // and all (a two-level array).
                        Some(inner) => inner.parse::<Self>(),
                        None => remote(u).map(|r| Self::new(BaseSpec::Remote(r))),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let geometry = sluice_raid::Geometry::new(level, members.len(), unit)
                    .map_err(|e| bad(e.to_string()))?;
                // Wrong-order and duplicate members are refused from
                // their superblocks when the array opens; the same URI
                // twice is refused here already.
                for (i, u) in uris.iter().enumerate() {
                    if let Some(j) = uris[..i].iter().position(|o| o == u) {
                        return Err(bad(format!(
                            "member {u:?} is given twice (members {j} and {i})"
                        )));
                    }
                }
                BaseSpec::Raid(RaidSpec {
                    level: geometry.level(),
                    unit: geometry.unit(),
                    members,
                    journal: journal.unwrap_or_default(),
                    start_dirty_degraded,
                    kick_stale,
                    probe,
                    readd,
                })
            }
            other => return Err(bad(format!("unknown backend {other:?} ({KINDS})"))),
        };
        let mut layers = Vec::new();
        if let Some(seed) = power_loss_seed {
            layers.push(LayerSpec::PowerLoss { seed });
        }
        if !rules.is_empty() {
            layers.push(LayerSpec::Fault { rules });
        }
        Ok(Self {
            base,
            read_only,
            layers,
        })
    }
}

/// The options of a spec, every item after KIND (and after the path,
/// size or URI of a non-RAID spec), before they are checked against
/// the kind of volume.
struct SpecOptions {
    read_only: bool,
    size: Option<u64>,
    direct: bool,
    overcommit: bool,
    rules: Vec<FaultRule>,
    power_loss_seed: Option<u64>,
    timeout: Option<Duration>,
    reconnect: Option<Duration>,
    unit: Option<u64>,
    /// RAID 10's copies of each chunk (`copies=N`).
    copies: Option<usize>,
    members: Option<Vec<String>>,
    journal: Option<JournalSpec>,
    start_dirty_degraded: bool,
    kick_stale: bool,
    probe: Duration,
    readd: Duration,
}

impl SpecOptions {
    /// Reads `items`, the options of `spec` (of kind `kind`); a RAID
    /// spec's URIs after `members=` are its further members.
    fn parse<'a>(
        spec: &str,
        kind: &str,
        items: impl Iterator<Item = &'a str>,
    ) -> Result<Self, SpecError> {
        let bad = |reason: String| SpecError::Syntax {
            spec: spec.to_owned(),
            reason,
        };
        let is_raid = matches!(kind, "raid0" | "raid1" | "raid5" | "raid6" | "raid10");
        let mut read_only = false;
        let mut size = None;
        let mut direct = false;
        let mut overcommit = false;
        let mut rules = Vec::new();
        let mut power_loss_seed = None;
        let mut timeout = None;
        let mut reconnect = None;
        let mut unit = None;
        let mut copies = None;
        let mut members: Option<Vec<String>> = None;
        let mut journal = None;
        let mut start_dirty_degraded = false;
        let mut kick_stale = false;
        let mut probe = sluice_raid::DEFAULT_PROBE_INTERVAL;
        let mut readd = sluice_raid::DEFAULT_READD_WINDOW;
        for opt in items {
            if let Some(list) = members.as_mut().filter(|_| is_member(opt)) {
                list.push(opt.to_owned());
                continue;
            }
            match opt.split_once('=') {
                None if opt == "ro" => read_only = true,
                None if opt == "direct" => direct = true,
                None if opt == "overcommit" && kind == "mem" => overcommit = true,
                None if opt == "power-loss" => power_loss_seed = Some(1),
                None if opt == "start-dirty-degraded" && is_raid => start_dirty_degraded = true,
                None if opt == "kick-stale" && is_raid => kick_stale = true,
                Some(("size", v)) => size = Some(sluice_types::parse_size(v)?),
                Some(("fail", v)) => rules.push(v.parse().map_err(|e| bad(format!("{e}")))?),
                Some(("power-loss", v)) => {
                    power_loss_seed = Some(
                        v.parse()
                            .map_err(|e| bad(format!("bad power-loss seed {v:?}: {e}")))?,
                    )
                }
                Some(("timeout", v)) => timeout = Some(sluice_types::parse_duration(v)?),
                Some(("reconnect", v)) => reconnect = Some(sluice_types::parse_duration(v)?),
                Some(("unit", v)) if is_raid => unit = Some(sluice_types::parse_size(v)?),
                Some(("copies", v)) if kind == "raid10" => {
                    copies =
                        Some(v.parse::<usize>().map_err(|e| {
                            bad(format!("copies={v:?} is not a number of copies: {e}"))
                        })?)
                }
                Some(("probe", "off")) if is_raid => probe = Duration::ZERO,
                Some(("probe", v)) if is_raid => probe = sluice_types::parse_duration(v)?,
                Some(("readd", "off")) if is_raid => readd = Duration::ZERO,
                Some(("readd", v)) if is_raid => readd = sluice_types::parse_duration(v)?,
                Some(("journal", "")) if is_raid => return Err(bad("empty journal path".into())),
                Some(("journal", "off")) if is_raid => journal = Some(JournalSpec::Off),
                Some(("journal", v)) if is_raid => journal = Some(JournalSpec::File(v.into())),
                Some(("members", v)) if is_raid && members.is_none() => {
                    if !is_member(v) {
                        return Err(bad(format!(
                            "member {v:?} is not an nbd://, nbds://, nbd+unix:// or nbds+unix:// URI, or an array's spec in parentheses"
                        )));
                    }
                    members = Some(vec![v.to_owned()]);
                }
                _ => return Err(bad(format!("unknown option {opt:?}"))),
            }
        }
        Ok(Self {
            read_only,
            size,
            direct,
            overcommit,
            rules,
            power_loss_seed,
            timeout,
            reconnect,
            unit,
            copies,
            members,
            journal,
            start_dirty_degraded,
            kick_stale,
            probe,
            readd,
        })
    }
}

/// Whether a spec item is a remote URI (a RAID member).
/// The spec inside a member written in parentheses, if `item` is one.
fn nested(item: &str) -> Option<&str> {
    item.strip_prefix('(')?.strip_suffix(')')
}

/// A member of an array spec: a URI, or an array's spec in parentheses.
fn is_member(item: &str) -> bool {
    is_uri(item) || nested(item).is_some()
}

/// `text` split at the commas outside parentheses (a nested array
/// member's spec is one item).
fn split_items(text: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&text[start..]);
    items
}

fn is_uri(item: &str) -> bool {
    item.split_once("://")
        .is_some_and(|(scheme, _)| URI_SCHEMES.contains(&scheme))
}

impl VolumeSpec {
    /// A plain stack: `base`, writable, without layers.
    pub fn new(base: BaseSpec) -> Self {
        Self {
            base,
            read_only: false,
            layers: Vec::new(),
        }
    }

    /// The error-injection rules of the stack, all layers together.
    pub fn fault_rules(&self) -> impl Iterator<Item = &FaultRule> {
        self.layers.iter().flat_map(|l| match l {
            LayerSpec::Fault { rules } => rules.as_slice(),
            _ => &[],
        })
    }

    /// The files the stack opens (and may create), members' included: a
    /// server whose start fails removes the ones that did not exist.
    pub fn files(&self) -> Vec<&std::path::Path> {
        match &self.base {
            BaseSpec::File { path, .. } => vec![path.as_path()],
            BaseSpec::Memory { .. } | BaseSpec::Remote(_) | BaseSpec::Export(_) => Vec::new(),
            BaseSpec::Raid(raid) => raid.members.iter().flat_map(Self::files).collect(),
        }
    }

    /// The seed of the stack's power-loss simulation, if it has one.
    pub fn power_loss_seed(&self) -> Option<u64> {
        self.layers.iter().find_map(|l| match l {
            LayerSpec::PowerLoss { seed } => Some(*seed),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_and_memory() {
        let s: VolumeSpec = "file:/tmp/a.img,size=1G,ro".parse().expect("spec");
        assert_eq!(
            s,
            VolumeSpec {
                base: BaseSpec::File {
                    path: "/tmp/a.img".into(),
                    size: Some(1 << 30),
                    direct: false,
                },
                read_only: true,
                layers: Vec::new(),
            }
        );
        let s: VolumeSpec = "file:/dev/sdb,direct".parse().expect("spec");
        assert!(matches!(s.base, BaseSpec::File { direct: true, .. }));
        let m: VolumeSpec = "mem:64M".parse().expect("spec");
        assert_eq!(
            m,
            VolumeSpec::new(BaseSpec::Memory {
                size: 64 << 20,
                overcommit: false
            })
        );
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        for (spec, says) in [
            ("tape:/dev/st0", "unknown backend \"tape\""),
            ("file:/a,bogus", "unknown option \"bogus\""),
            ("file:", "empty path"),
            ("nokind", "missing KIND:"),
            ("mem:1M,size=2M", "mem takes its size as mem:BYTES"),
            ("mem:0", "a RAM disk of 0 bytes"),
            ("mem:1M,direct", "mem takes its size as mem:BYTES"),
            ("file:/x,power-loss=soon", "bad power-loss seed \"soon\""),
            ("mem:1M,fail=write:eio", "three parts"),
            (
                "mem:1M,timeout=1s",
                "timeout= and reconnect= are for remote",
            ),
            ("nbd://h/e,size=1M", "size= and direct are for file volumes"),
            ("nbd://h/e,ro", "ro is not supported on nbd volumes"),
            ("raid5:members=nbd://a/x,nbd://b/x", "missing unit=SIZE"),
            ("raid5:unit=64K", "missing members=URI"),
            (
                "raid5:unit=64K,journal=,members=nbd://a/x,nbd://b/x",
                "empty journal path",
            ),
            ("mem:1M,journal=/j", "unknown option \"journal=/j\""),
            (
                "raid0:unit=64K,members=/dev/sdb",
                "member \"/dev/sdb\" is not an nbd://",
            ),
            (
                "raid5:unit=64K,members=nbd://a/x",
                "raid5 needs at least 2 members, got 1",
            ),
            (
                "raid6:unit=64K,members=nbd://a/x,nbd://b/x,nbd://c/x",
                "raid6 needs at least 4 members, got 3",
            ),
            (
                "raid0:unit=64K,members=nbd://a/x",
                "raid0 needs at least 2 members, got 1",
            ),
            (
                "raid1:unit=64K,members=nbd://a/x",
                "raid1 needs at least 2 members, got 1",
            ),
            (
                "raid5:unit=1000,members=nbd://a/x,nbd://b/x,nbd://c/x",
                "stripe unit 1000",
            ),
            (
                "raid5:unit=64K,members=nbd://a/x,nbd://b/x,nbd://a/x",
                "given twice (members 0 and 2)",
            ),
            (
                "raid0:unit=64K,members=nbd://a/x,bogus",
                "unknown option \"bogus\"",
            ),
        ] {
            let e = spec.parse::<VolumeSpec>().expect_err(spec);
            let text = e.to_string();
            assert!(
                text.starts_with(&format!("bad export spec {spec:?}: ")),
                "{text}"
            );
            assert!(text.contains(says), "{spec}: {text}");
            // What was wrong, not the whole grammar.
            assert!(!text.contains("[,"), "{text}");
        }
        let e = "mem:lots".parse::<VolumeSpec>().expect_err("size");
        assert!(matches!(e, SpecError::Size(_)), "{e:?}");
        assert!(e.to_string().contains("bad size \"lots\""), "{e}");
        assert!("file:/x,size=1Q".parse::<VolumeSpec>().is_err());
        let e = "nbd+unix:///e"
            .parse::<VolumeSpec>()
            .expect_err("no socket");
        assert!(matches!(e, SpecError::Uri { .. }), "{e:?}");
        assert!(
            e.to_string().contains("bad NBD URI \"nbd+unix:///e\""),
            "{e}"
        );
    }

    #[test]
    fn remote_bases_are_their_uris() {
        let s: VolumeSpec = "nbd://host:10810/disk".parse().expect("spec");
        assert_eq!(
            s,
            VolumeSpec::new(BaseSpec::Remote(RemoteSpec::new("nbd://host:10810/disk")))
        );
        let s: VolumeSpec = "nbd+unix:///disk?socket=/run/s.sock,timeout=2s,reconnect=500ms"
            .parse()
            .expect("spec");
        assert_eq!(
            s.base,
            BaseSpec::Remote(RemoteSpec {
                uri: "nbd+unix:///disk?socket=/run/s.sock".into(),
                timeout: Duration::from_secs(2),
                reconnect: Duration::from_millis(500),
            })
        );
    }

    #[test]
    fn native_protocol_exports_are_their_uris() {
        let s: VolumeSpec = "sluice://host:10810/disk?merge=always,timeout=2s"
            .parse()
            .expect("spec");
        assert_eq!(
            s.base,
            BaseSpec::Export(RemoteSpec {
                uri: "sluice://host:10810/disk?merge=always".into(),
                timeout: Duration::from_secs(2),
                reconnect: DEFAULT_REMOTE_RECONNECT,
            })
        );
        let e = "sluice://host".parse::<VolumeSpec>().unwrap_err();
        assert!(e.to_string().contains("missing the export"), "{e}");
        let e = "sluice://h/x?merge=often"
            .parse::<VolumeSpec>()
            .unwrap_err();
        assert!(e.to_string().contains("merge"), "{e}");
    }

    #[test]
    fn probe_and_readd_are_array_options() {
        let probe = |spec: &str| match spec.parse::<VolumeSpec>().expect("spec").base {
            BaseSpec::Raid(raid) => raid.probe,
            other => panic!("not an array: {other:?}"),
        };
        let members = "members=nbd://a/x,nbd://b/x,nbd://c/x";
        assert_eq!(
            probe(&format!("raid5:unit=4K,{members}")),
            sluice_raid::DEFAULT_PROBE_INTERVAL
        );
        assert_eq!(
            probe(&format!("raid5:unit=4K,probe=250ms,{members}")),
            Duration::from_millis(250)
        );
        assert_eq!(
            probe(&format!("raid0:unit=4K,probe=off,{members}")),
            Duration::ZERO
        );
        let readd = |spec: &str| match spec.parse::<VolumeSpec>().expect("spec").base {
            BaseSpec::Raid(raid) => raid.readd,
            other => panic!("not an array: {other:?}"),
        };
        assert_eq!(
            readd(&format!("raid1:unit=4K,{members}")),
            sluice_raid::DEFAULT_READD_WINDOW
        );
        assert_eq!(
            readd(&format!("raid1:unit=4K,readd=30s,{members}")),
            Duration::from_secs(30)
        );
        assert_eq!(
            readd(&format!("raid1:unit=4K,readd=off,{members}")),
            Duration::ZERO
        );
        let e = "mem:1M,probe=1s"
            .parse::<VolumeSpec>()
            .expect_err("not an array");
        assert!(e.to_string().contains("unknown option"), "{e}");
    }

    #[test]
    fn an_array_member_may_be_an_array_in_parentheses() {
        let s: VolumeSpec = "raid0:unit=64K,members=(raid1:unit=4K,members=nbd://a/x,nbd://b/x,reconnect=1s),(raid5:unit=4K,members=nbd://c/x,nbd://d/x,nbd://e/x),timeout=3s"
            .parse()
            .expect("spec");
        let BaseSpec::Raid(outer) = s.base else {
            panic!("{s:?}")
        };
        assert_eq!((outer.level, outer.members.len()), (RaidLevel::Raid0, 2));
        let inner = |i: usize| match &outer.members[i].base {
            BaseSpec::Raid(r) => r.clone(),
            other => panic!("member {i} is not an array: {other:?}"),
        };
        assert_eq!(
            (inner(0).level, inner(0).members.len()),
            (RaidLevel::Raid1, 2)
        );
        assert_eq!(
            (inner(1).level, inner(1).members.len()),
            (RaidLevel::Raid5, 3)
        );
        // Each level's options are its own.
        assert_eq!(
            inner(0).members[0].base,
            BaseSpec::Remote(RemoteSpec {
                reconnect: Duration::from_secs(1),
                ..RemoteSpec::new("nbd://a/x")
            })
        );
        // A member array with its parenthesis left open is no member.
        let e = "raid0:unit=64K,members=(raid1:unit=4K,members=nbd://a/x,nbd://b/x"
            .parse::<VolumeSpec>()
            .expect_err("unbalanced");
        assert!(e.to_string().contains("not an nbd://"), "{e}");
    }

    #[test]
    fn raid6_is_a_level_with_a_journal() {
        let s: VolumeSpec =
            "raid6:unit=64K,journal=/j/r6,members=nbd://a/x,nbd://b/x,nbd://c/x,nbd://d/x"
                .parse()
                .expect("spec");
        let BaseSpec::Raid(raid) = s.base else {
            panic!("not an array: {:?}", s.base);
        };
        assert_eq!(raid.level, RaidLevel::Raid6);
        assert_eq!(raid.members.len(), 4);
        assert_eq!(raid.journal, JournalSpec::File("/j/r6".into()));
    }

    #[test]
    fn start_dirty_degraded_is_an_array_flag() {
        let raid = |spec: &str| match spec.parse::<VolumeSpec>().expect("spec").base {
            BaseSpec::Raid(raid) => raid.start_dirty_degraded,
            other => panic!("not an array: {other:?}"),
        };
        assert!(raid(
            "raid5:unit=4K,start-dirty-degraded,members=nbd://a/x,nbd://b/x,nbd://c/x"
        ));
        assert!(!raid("raid5:unit=4K,members=nbd://a/x,nbd://b/x,nbd://c/x"));
        let e = "mem:1M,start-dirty-degraded"
            .parse::<VolumeSpec>()
            .expect_err("not an array");
        assert!(e.to_string().contains("unknown option"), "{e}");
    }

    #[test]
    fn raid_members_are_the_uris_after_members() {
        let s: VolumeSpec =
            "raid5:unit=16K,members=nbd://a/x,nbds://b:10810/y?tls-certificates=/etc/pki,nbd+unix:///z?socket=/s,timeout=3s,fail=read:eio:nth=9"
                .parse()
                .expect("spec");
        let member = |uri: &str| {
            VolumeSpec::new(BaseSpec::Remote(RemoteSpec {
                timeout: Duration::from_secs(3),
                ..RemoteSpec::new(uri)
            }))
        };
        assert_eq!(
            s.base,
            BaseSpec::Raid(RaidSpec {
                level: RaidLevel::Raid5,
                unit: 16 << 10,
                members: vec![
                    member("nbd://a/x"),
                    member("nbds://b:10810/y?tls-certificates=/etc/pki"),
                    member("nbd+unix:///z?socket=/s"),
                ],
                journal: JournalSpec::Default,
                start_dirty_degraded: false,
                kick_stale: false,
                probe: sluice_raid::DEFAULT_PROBE_INTERVAL,
                readd: sluice_raid::DEFAULT_READD_WINDOW,
            })
        );
        // The testing layers go over the array.
        assert_eq!(s.fault_rules().count(), 1);
        // Options may come before the members or between them.
        let t: VolumeSpec = "raid0:members=nbd://a/x,unit=1M,nbd://b/x"
            .parse()
            .expect("spec");
        let BaseSpec::Raid(raid) = t.base else {
            panic!("{t:?}")
        };
        assert_eq!(
            (raid.level, raid.unit, raid.members.len()),
            (RaidLevel::Raid0, 1 << 20, 2)
        );
        let journal = |spec: &str| match spec.parse::<VolumeSpec>().expect("spec").base {
            BaseSpec::Raid(raid) => raid.journal,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            journal("raid5:unit=4K,journal=/var/lib/j,members=nbd://a/x,nbd://b/x,nbd://c/x"),
            JournalSpec::File("/var/lib/j".into())
        );
        assert_eq!(
            journal("raid5:unit=4K,members=nbd://a/x,nbd://b/x,nbd://c/x,journal=off"),
            JournalSpec::Off
        );
    }

    #[test]
    fn testing_layers_stack_in_a_fixed_order() {
        let s: VolumeSpec = "mem:1M,fail=write:enospc:after=3,power-loss=42,fail=flush:eio:nth=1"
            .parse()
            .expect("spec");
        let rules: Vec<String> = s.fault_rules().map(ToString::to_string).collect();
        assert_eq!(rules, ["write:enospc:after=3", "flush:eio:nth=1"]);
        assert_eq!(s.power_loss_seed(), Some(42));
        assert!(matches!(
            s.layers.as_slice(),
            [LayerSpec::PowerLoss { seed: 42 }, LayerSpec::Fault { .. }]
        ));
        let p: VolumeSpec = "file:/x,power-loss".parse().expect("spec");
        assert_eq!(p.power_loss_seed(), Some(1));
        assert_eq!(p.fault_rules().count(), 0);
    }
}
