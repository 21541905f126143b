//! The one place device stacks are built.

use std::path::PathBuf;
use std::sync::Arc;

use sluice_client::obj::{ExportDevice, ObjError, ObjOptions};
use sluice_client::{ClientError, ConnectOptions, ExportUri, NbdUri, Reconnect, RemoteDevice};
use sluice_raid::{
    create_array, Geometry, JournalPlace, MemberError, NamedMember, RaidDevice, RaidError,
    RaidLevel, Uuid, DEFAULT_REBUILD_RATE,
};
use sluice_storage::{
    machine_memory, BlockDevice, CacheConfig, CacheDevice, DeviceError, FaultInjectionDevice,
    FileDevice, FileOptions, MemDevice, OpenError, PowerLossConfig, PowerLossDevice,
};
use thiserror::Error;

use crate::fan_out::BatchFanOut;
use crate::{BaseSpec, JournalSpec, LayerSpec, RaidSpec, RemoteSpec, VolumeSpec};

/// Where RAID 5 arrays keep their write-intent journals unless their
/// spec says (`journal=`): `sluice serve`'s data folder, beside its
/// default export and admin socket.
pub const DEFAULT_JOURNAL_DIR: &str = "./sluice-data";

/// Bytes in a GiB, for sizes in messages.
const GIB: f64 = (1u64 << 30) as f64;

/// Why a volume could not be opened.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum VolumeError {
    /// The base file or device could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The buffer cache could not start its threads (the cause is in
    /// the message, printed once).
    #[error("cannot start its cache: {0}")]
    Cache(DeviceError),
    /// A remote export could not be reached or refused the connection.
    #[error("cannot open remote export {uri}")]
    Remote {
        /// The URI.
        uri: String,
        /// What the client said (boxed: it is large, and errors travel
        /// far).
        #[source]
        source: Box<ClientError>,
    },
    /// A block export over the native protocol could not be reached.
    #[error("cannot open export {uri}")]
    Export {
        /// The URI.
        uri: String,
        /// What the client said (boxed, as for `Remote`).
        #[source]
        source: Box<ObjError>,
    },
    /// An array member could not be opened.
    #[error("cannot open member {index} of the array")]
    Member {
        /// Index of the member in the array.
        index: usize,
        /// Why.
        #[source]
        source: Box<Self>,
    },
    /// The members do not make an array (the message names the member;
    /// boxed: it is large).
    #[error(transparent)]
    Raid(Box<RaidError>),
    /// A RAM disk larger than the machine's memory, without
    /// `overcommit` in its spec.
    #[error(
        "a RAM disk of {size} bytes ({:.1} GiB) is larger than this machine's memory ({:.1} GiB); add ,overcommit to its spec to serve it anyway (writes past the memory then fail)",
        *.size as f64 / GIB, *.memory as f64 / GIB
    )]
    MemoryTooLarge {
        /// The size asked for.
        size: u64,
        /// Bytes of memory the machine has.
        memory: u64,
    },
    /// `create_raid` was given a spec that is not an array.
    #[error("not an array spec (expected raid0:, raid1:, raid5:, raid6: or raid10:)")]
    NotAnArray,
    /// A replacement member is not an NBD URI.
    #[error(
        "the new member {uri:?} is not an NBD URI (nbd://, nbds://, nbd+unix://, nbds+unix://)"
    )]
    NotAMemberUri {
        /// What was given.
        uri: String,
    },
}

/// An opened volume: the device to serve and, for an array, the handle
/// operators drive it through.
#[derive(Debug)]
pub struct Volume {
    /// The whole stack (the builder's cache, the spec's layers, the base).
    pub device: Arc<dyn BlockDevice>,
    /// The array under the stack, if the base is one.
    pub raid: Option<RaidHandle>,
}

/// An array volume's operator side: the array below the volume's layers
/// (status, scrub) and what replacing a member needs (the member
/// settings of the spec, the remote fan-out).
#[derive(Debug, Clone)]
pub struct RaidHandle {
    array: Arc<RaidDevice>,
    fan_out: Arc<BatchFanOut>,
    spec: RaidSpec,
}

impl RaidHandle {
    /// The array.
    pub fn array(&self) -> &Arc<RaidDevice> {
        &self.array
    }

    /// Connects to the NBD export `uri` (with the timeout and reconnect
    /// window of the member it replaces, if that was remote), puts it in
    /// place `index` of the array and starts rebuilding it in the
    /// background (see [`RaidDevice::replace_member`]).
    pub fn replace(&self, index: usize, uri: &str) -> Result<(), VolumeError> {
        if !uri.contains("://") || uri.parse::<NbdUri>().is_err() {
            return Err(VolumeError::NotAMemberUri { uri: uri.into() });
        }
        let mut remote = match self.spec.members.get(index).map(|m| &m.base) {
            Some(BaseSpec::Remote(old)) => old.clone(),
            _ => RemoteSpec::new(uri),
        };
        remote.uri = uri.to_owned();
        let redundant = self.spec.level != RaidLevel::Raid0;
        let device =
            Arc::new(
                connect_remote(&remote, redundant).map_err(|e| VolumeError::Member {
                    index,
                    source: Box::new(e),
                })?,
            );
        self.array.replace_member(
            index,
            NamedMember {
                name: remote.uri.clone(),
                device: device.clone(),
            },
        )?;
        self.fan_out.set_remote(index, Some(device));
        self.array.start_rebuild();
        Ok(())
    }
}

impl RaidHandle {
    /// Connects again to member `index` (as its spec says) and puts it
    /// back if it is the member that failed there within the re-add
    /// window (see [`RaidDevice::readd_member`]): a RAID 1 mirror then
    /// resyncs only what it missed.
    pub fn readd(&self, index: usize) -> Result<(), VolumeError> {
        let Some(BaseSpec::Remote(remote)) = self.spec.members.get(index).map(|m| &m.base) else {
            return Err(VolumeError::NotAnArray);
        };
        let redundant = self.spec.level != RaidLevel::Raid0;
        let device =
            Arc::new(
                connect_remote(remote, redundant).map_err(|e| VolumeError::Member {
                    index,
                    source: Box::new(e),
                })?,
            );
        self.array.readd_member(
            index,
            NamedMember {
                name: remote.uri.clone(),
                device: device.clone(),
            },
        )?;
        self.fan_out.set_remote(index, Some(device));
        self.array.start_rebuild();
        Ok(())
    }

    /// Starts the array's background work: the rebuild of a member
    /// marked rebuilding (at `rebuild_rate`), probing idle members, and
    /// putting failed RAID 1 mirrors back.
    fn start_background(&self, rebuild_rate: u64) {
        self.array.set_rebuild_rate(rebuild_rate);
        self.array.start_rebuild();
        self.array.start_probing(self.spec.probe);
        self.array.set_readd_window(self.spec.readd);
        self.start_readding();
    }

    /// Starts a thread that, every probe interval while the array is
    /// open, tries to connect again to each member that failed within
    /// the re-add window and puts it back when it is the same member
    /// (RAID 1 and 10 with `readd=`; nothing otherwise).
    fn start_readding(&self) {
        let interval = self.spec.probe;
        let mirrored = matches!(self.spec.level, RaidLevel::Raid1 | RaidLevel::Raid10 { .. });
        if !mirrored || self.spec.readd.is_zero() || interval.is_zero() {
            return;
        }
        let weak = Arc::downgrade(&self.array);
        // The thread must not keep the array open: it holds it only
        // while it looks.
        let (fan_out, spec) = (Arc::clone(&self.fan_out), self.spec.clone());
        let spawned = std::thread::Builder::new()
            .name("raid-readd".into())
            .spawn(move || loop {
                std::thread::sleep(interval);
                let Some(array) = weak.upgrade() else {
                    return;
                };
                let handle = Self {
                    array,
                    fan_out: Arc::clone(&fan_out),
                    spec: spec.clone(),
                };
                for index in handle.array.readd_candidates() {
                    match handle.readd(index) {
                        Ok(()) => {}
                        Err(e) => tracing::debug!(
                            member = index,
                            error = &e as &dyn std::error::Error,
                            "member not back yet"
                        ),
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the member re-add thread");
        }
    }
}

/// Opens device stacks from [`VolumeSpec`]s, with the settings that are
/// the server's rather than the spec's: today, the buffer cache put over
/// every volume it opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeBuilder {
    /// A buffer cache over each volume opened (over all of its layers);
    /// `None` for none.
    pub cache: Option<CacheConfig>,
    /// Rebuild and scrub rate of the arrays opened, bytes per second.
    pub rebuild_rate: u64,
    /// The folder of the journals of RAID 5 arrays whose spec names
    /// none, each `raid-UUID.journal` (created when missing).
    pub journal_dir: PathBuf,
}

impl Default for VolumeBuilder {
    fn default() -> Self {
        Self::new(None)
    }
}

impl VolumeBuilder {
    /// A builder that puts `cache`, if any, over every volume it opens.
    pub fn new(cache: Option<CacheConfig>) -> Self {
        Self {
            cache,
            rebuild_rate: DEFAULT_REBUILD_RATE,
            journal_dir: PathBuf::from(DEFAULT_JOURNAL_DIR),
        }
    }

    /// Opens the stack `spec` describes, then the builder's cache over it.
    /// `name` names the volume in logs and injected errors (the export
    /// name).
    pub fn open(&self, name: &str, spec: &VolumeSpec) -> Result<Arc<dyn BlockDevice>, VolumeError> {
        Ok(self.open_volume(name, spec)?.device)
    }

    /// Opens the stack like [`Self::open`] and, if its base is an array,
    /// returns the array's handle beside it; an array with a member
    /// being rebuilt starts rebuilding it at the builder's rate.
    pub fn open_volume(&self, name: &str, spec: &VolumeSpec) -> Result<Volume, VolumeError> {
        let (mut device, raid) = match &spec.base {
            BaseSpec::Raid(raid) => {
                let handle = self.open_raid_handle(raid)?;
                let device: Arc<dyn BlockDevice> = handle.array.clone();
                (device, Some(handle))
            }
            base => (self.open_base(base, spec.read_only)?, None),
        };
        for layer in &spec.layers {
            device = add_layer(name, device, layer)?;
        }
        if let Some(config) = self.cache {
            device = add_layer(name, device, &LayerSpec::Cache(config))?;
        }
        if let Some(raid) = &raid {
            raid.start_background(self.rebuild_rate);
        }
        Ok(Volume { device, raid })
    }

    /// Keeps the journals of arrays whose spec names none in `dir`.
    pub fn with_journal_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.journal_dir = dir.into();
        self
    }

    /// Sets the rebuild (and scrub) rate limit of the arrays this
    /// builder opens, bytes per second (0: none).
    pub fn with_rebuild_rate(mut self, bytes_per_second: u64) -> Self {
        self.rebuild_rate = bytes_per_second;
        self
    }

    /// The base, then each layer over it, bottom first. The members of a
    /// composite base (RAID) will be opened by calling this again, so each
    /// carries its own layers and none gets the builder's cache.
    fn open_stack(
        &self,
        name: &str,
        spec: &VolumeSpec,
    ) -> Result<Arc<dyn BlockDevice>, VolumeError> {
        let mut device = self.open_base(&spec.base, spec.read_only)?;
        for layer in &spec.layers {
            device = add_layer(name, device, layer)?;
        }
        Ok(device)
    }

    fn open_base(
        &self,
        base: &BaseSpec,
        read_only: bool,
    ) -> Result<Arc<dyn BlockDevice>, VolumeError> {
        Ok(match base {
            BaseSpec::File { path, size, direct } => Arc::new(FileDevice::open(
                path,
                &FileOptions {
                    read_only,
                    direct: *direct,
                    size: *size,
                },
            )?),
            BaseSpec::Memory { size, overcommit } => {
                let memory = machine_memory();
                if !overcommit && memory > 0 && *size > memory {
                    return Err(VolumeError::MemoryTooLarge {
                        size: *size,
                        memory,
                    });
                }
                Arc::new(MemDevice::new(*size, read_only))
            }
            BaseSpec::Remote(remote) => open_remote(remote)?,
            BaseSpec::Export(remote) => open_export(remote)?,
            BaseSpec::Raid(raid) => {
                // An array as a member of another: it runs its own
                // rebuilds, probes and re-adds.
                let handle = self.open_raid_handle(raid)?;
                handle.start_background(self.rebuild_rate);
                handle.array
            }
        })
    }

    /// Opens every member (each with its own layers, none with the
    /// builder's cache), then assembles the array from their superblocks;
    /// plain remote members are driven by a [`BatchFanOut`].
    fn open_raid_handle(&self, raid: &RaidSpec) -> Result<RaidHandle, VolumeError> {
        let geometry =
            Geometry::new(raid.level, raid.members.len(), raid.unit).map_err(RaidError::from)?;
        let (opened, remotes) = self.open_members(raid);
        // A redundant array starts without as many members as it
        // survives losing (the array decides whether that is safe);
        // otherwise the first member that could not be opened is the
        // error.
        let unreachable = opened.iter().filter(|m| m.is_err()).count();
        let mut members = Vec::with_capacity(opened.len());
        let mut missing = None;
        for (index, m) in opened.into_iter().enumerate() {
            match m {
                Ok(m) => members.push(Ok(m)),
                Err((name, e)) if unreachable <= geometry.tolerance() => {
                    tracing::warn!(member = index, name = %name,
                        error = &e as &dyn std::error::Error,
                        "cannot open the array member; starting the array without it");
                    members.push(Err(name));
                    missing.get_or_insert((index, e));
                }
                Err((_, source)) => {
                    return Err(VolumeError::Member {
                        index,
                        source: Box::new(source),
                    })
                }
            }
        }
        let fan_out = Arc::new(BatchFanOut::new(remotes));
        let journal = match &raid.journal {
            JournalSpec::Default => JournalPlace::Dir(self.journal_dir.clone()),
            JournalSpec::Off => JournalPlace::Off,
            JournalSpec::File(path) => JournalPlace::File(path.clone()),
        };
        let array = match assemble_kicking(geometry, members, &fan_out, &journal, raid) {
            Ok(array) => array,
            // Unless the missing member is the reason (a dirty degraded
            // start), the member that could not be opened is named: it
            // is the first thing to fix.
            Err(e) if !matches!(e, RaidError::DirtyDegraded { .. }) && missing.is_some() => {
                let Some((index, source)) = missing else {
                    return Err(e.into());
                };
                tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "the array cannot start without the member either"
                );
                return Err(VolumeError::Member {
                    index,
                    source: Box::new(source),
                });
            }
            Err(e) => return Err(e.into()),
        };
        Ok(RaidHandle {
            array: Arc::new(array),
            fan_out,
            spec: raid.clone(),
        })
    }

    /// Writes the superblocks of a new array over the members `spec`
    /// names (see [`sluice_raid::create_array`]: it zeroes their data
    /// areas first); refuses members of another array unless `force`.
    /// Returns the new array's uuid.
    pub fn create_raid(&self, spec: &VolumeSpec, force: bool) -> Result<Uuid, VolumeError> {
        let BaseSpec::Raid(raid) = &spec.base else {
            return Err(VolumeError::NotAnArray);
        };
        let geometry =
            Geometry::new(raid.level, raid.members.len(), raid.unit).map_err(RaidError::from)?;
        // A two-level array: its member arrays first, so it is made
        // over their volumes.
        for member in &raid.members {
            if matches!(member.base, BaseSpec::Raid(_)) {
                self.create_raid(member, force)?;
            }
        }
        let members = self
            .open_members(raid)
            .0
            .into_iter()
            .enumerate()
            .map(|(index, m)| {
                m.map_err(|(_, e)| VolumeError::Member {
                    index,
                    source: Box::new(e),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(create_array(geometry, &members, force).map_err(RaidError::from)?)
    }

    /// Opens an array's members, named by their URIs (or their place),
    /// with the remote device of each plain remote member for the
    /// fan-out; a member that cannot be opened is its name and why.
    fn open_members(&self, raid: &RaidSpec) -> OpenedMembers {
        let mut members = Vec::new();
        let mut remotes = Vec::new();
        let redundant = raid.level != RaidLevel::Raid0;
        for (index, spec) in raid.members.iter().enumerate() {
            let name = match &spec.base {
                BaseSpec::Remote(remote) => remote.uri.clone(),
                _ => format!("member {index}"),
            };
            match (&spec.base, spec.layers.is_empty()) {
                (BaseSpec::Remote(remote), true) => match connect_remote(remote, redundant) {
                    Ok(device) => {
                        let device = Arc::new(device);
                        members.push(Ok(NamedMember {
                            name,
                            device: device.clone(),
                        }));
                        remotes.push(Some(device));
                    }
                    Err(e) => {
                        members.push(Err((name, e)));
                        remotes.push(None);
                    }
                },
                _ => {
                    members.push(match self.open_stack(&name, spec) {
                        Ok(device) => Ok(NamedMember { name, device }),
                        Err(e) => Err((name, e)),
                    });
                    remotes.push(None);
                }
            }
        }
        (members, remotes)
    }
}

impl From<RaidError> for VolumeError {
    fn from(e: RaidError) -> Self {
        Self::Raid(Box::new(e))
    }
}

/// Assembles the array from `members`; with the spec's `kick-stale`, a
/// member that answers but is behind the others (stale, or recorded
/// failed) is left out as if it could not be reached, while the array
/// survives that (as md kicks such a member and starts degraded).
fn assemble_kicking(
    geometry: Geometry,
    mut members: Vec<Result<NamedMember, String>>,
    fan_out: &Arc<BatchFanOut>,
    journal: &JournalPlace,
    raid: &RaidSpec,
) -> Result<RaidDevice, RaidError> {
    loop {
        let result = RaidDevice::assemble_with_missing(
            geometry,
            members.clone(),
            fan_out.clone(),
            journal,
            raid.start_dirty_degraded,
        );
        let (index, why) = match &result {
            Err(
                e @ RaidError::Member(
                    MemberError::Stale { index, .. } | MemberError::RecordedFailed { index, .. },
                ),
            ) if raid.kick_stale => (*index, e.to_string()),
            _ => return result,
        };
        let missing = members.iter().filter(|m| m.is_err()).count();
        let Some(Ok(member)) = members
            .get(index)
            .filter(|_| missing < geometry.tolerance())
        else {
            return result;
        };
        tracing::warn!(member = index, name = %member.name, why = %why,
            "kick-stale: starting the array without the member; it must be replaced to come back");
        members[index] = Err(member.name.clone());
        fan_out.set_remote(index, None);
    }
}

/// An array's members, named (or the name of one that could not be
/// opened and why), and the remote device of each plain remote one (for
/// the fan-out), by index.
type OpenedMembers = (
    Vec<Result<NamedMember, (String, VolumeError)>>,
    Vec<Option<Arc<RemoteDevice>>>,
);

/// Connects to a remote export with the spec's timeout and reconnect
/// window. A member of an array that survives losing it (`redundant`)
/// does not hold requests while its server refuses connections: they
/// fail at once, the array fails the member and goes on degraded
/// instead of stalling for the window (docs/RAID.md, "What a dead
/// member costs"); anything else waits the window out.
fn connect_remote(remote: &RemoteSpec, redundant: bool) -> Result<RemoteDevice, VolumeError> {
    let error = |source| VolumeError::Remote {
        uri: remote.uri.clone(),
        source: Box::new(source),
    };
    let uri: NbdUri = remote.uri.parse().map_err(error)?;
    let options = ConnectOptions {
        request_timeout: Some(remote.timeout),
        reconnect: Reconnect {
            fail_when_refused: redundant,
            ..Reconnect::within(remote.reconnect)
        },
        ..ConnectOptions::default()
    };
    RemoteDevice::connect(&uri, &options).map_err(error)
}

fn open_remote(remote: &RemoteSpec) -> Result<Arc<dyn BlockDevice>, VolumeError> {
    Ok(Arc::new(connect_remote(remote, false)?))
}

/// Connects to a block export over the native protocol, with the spec's
/// timeout and reconnect window and the URI's merge policy (else
/// adaptive).
fn open_export(remote: &RemoteSpec) -> Result<Arc<dyn BlockDevice>, VolumeError> {
    let error = |source| VolumeError::Export {
        uri: remote.uri.clone(),
        source: Box::new(source),
    };
    let uri: ExportUri = remote.uri.parse().map_err(|e| error(ObjError::BadUri(e)))?;
    let options = ObjOptions {
        request_timeout: Some(remote.timeout),
        reconnect: Reconnect::within(remote.reconnect),
        ..ObjOptions::default()
    };
    Ok(Arc::new(
        ExportDevice::connect(&uri, &options).map_err(error)?,
    ))
}

/// Puts one layer over `device`.
fn add_layer(
    name: &str,
    device: Arc<dyn BlockDevice>,
    layer: &LayerSpec,
) -> Result<Arc<dyn BlockDevice>, VolumeError> {
    Ok(match layer {
        LayerSpec::PowerLoss { seed } => {
            tracing::warn!(volume = %name, seed, "power-loss simulation on: writes not flushed are lost when the process dies");
            Arc::new(PowerLossDevice::new(
                device,
                PowerLossConfig {
                    seed: *seed,
                    ..PowerLossConfig::default()
                },
            ))
        }
        LayerSpec::Fault { rules } => {
            let shown: Vec<String> = rules.iter().map(ToString::to_string).collect();
            tracing::warn!(volume = %name, rules = ?shown, "error injection on");
            Arc::new(FaultInjectionDevice::new(
                device,
                format!("export {name:?}"),
                rules.clone(),
            ))
        }
        LayerSpec::Cache(config) => {
            Arc::new(CacheDevice::new(device, *config).map_err(VolumeError::Cache)?)
        }
    })
}
