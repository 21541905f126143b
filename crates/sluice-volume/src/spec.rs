//! What a volume is made of, and the `SPEC` syntax of `--export NAME=SPEC`.

use std::path::PathBuf;
use std::str::FromStr;

use sluice_storage::{CacheConfig, FaultRule};
use thiserror::Error;

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
    /// A sparse RAM disk (`mem:BYTES`).
    Memory {
        /// Size in bytes.
        size: u64,
    },
    // Planned, opened by the same builder:
    // - `Remote { uri }`: a volume served by another NBD server
    //   (`nbd://host/export`), through the client crate's remote device;
    // - `Raid { level, unit, members: Vec<VolumeSpec> }`
    //   (`raid5:unit=16K,members=nbd://...`): each member a whole stack
    //   with its own layers, opened by recursing into the builder.
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

/// Why a spec could not be parsed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpecError {
    /// The spec does not follow the syntax.
    #[error("bad export spec {spec:?}: {reason} (expected file:PATH[,size=BYTES][,ro][,direct] or mem:BYTES[,ro], and for testing [,fail=OPS:ERRNO:TRIGGER][,power-loss[=SEED]])")]
    Syntax {
        /// The whole spec.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A size in it is not one.
    #[error(transparent)]
    Size(#[from] sluice_types::ParseError),
}

impl FromStr for VolumeSpec {
    type Err = SpecError;

    /// Parses `KIND:ARG[,OPTION]...`: `file:PATH` or `mem:BYTES`, then
    /// `size=BYTES`, `ro`, `direct`, `fail=RULE` and `power-loss[=SEED]` in
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
            .ok_or_else(|| bad("missing KIND:".into()))?;
        let mut parts = rest.split(',');
        let first = parts.next().unwrap_or_default();
        let mut read_only = false;
        let mut size = None;
        let mut direct = false;
        let mut rules = Vec::new();
        let mut power_loss_seed = None;
        for opt in parts {
            match opt.split_once('=') {
                None if opt == "ro" => read_only = true,
                None if opt == "direct" => direct = true,
                None if opt == "power-loss" => power_loss_seed = Some(1),
                Some(("size", v)) => size = Some(sluice_types::parse_size(v)?),
                Some(("fail", v)) => rules.push(v.parse().map_err(|e| bad(format!("{e}")))?),
                Some(("power-loss", v)) => {
                    power_loss_seed = Some(
                        v.parse()
                            .map_err(|e| bad(format!("bad power-loss seed {v:?}: {e}")))?,
                    )
                }
                _ => return Err(bad(format!("unknown option {opt:?}"))),
            }
        }
        let base = match kind {
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
                BaseSpec::Memory {
                    size: sluice_types::parse_size(first)?,
                }
            }
            other => return Err(bad(format!("unknown backend {other:?}"))),
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
            BaseSpec::Memory { .. } => Vec::new(),
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
        assert_eq!(m, VolumeSpec::new(BaseSpec::Memory { size: 64 << 20 }));
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        for (spec, says) in [
            ("tape:/dev/st0", "unknown backend \"tape\""),
            ("file:/a,bogus", "unknown option \"bogus\""),
            ("file:", "empty path"),
            ("nokind", "missing KIND:"),
            ("mem:1M,size=2M", "mem takes its size as mem:BYTES"),
            ("mem:1M,direct", "mem takes its size as mem:BYTES"),
            ("file:/x,power-loss=soon", "bad power-loss seed \"soon\""),
            ("mem:1M,fail=write:eio", "three parts"),
        ] {
            let e = spec.parse::<VolumeSpec>().expect_err(spec);
            let text = e.to_string();
            assert!(
                text.starts_with(&format!("bad export spec {spec:?}: ")),
                "{text}"
            );
            assert!(text.contains(says), "{spec}: {text}");
            assert!(text.contains("expected file:PATH"), "{text}");
        }
        let e = "mem:lots".parse::<VolumeSpec>().expect_err("size");
        assert!(matches!(e, SpecError::Size(_)), "{e:?}");
        assert!(e.to_string().contains("bad size \"lots\""), "{e}");
        assert!("file:/x,size=1Q".parse::<VolumeSpec>().is_err());
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
