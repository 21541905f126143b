//! The one place device stacks are built.

use std::sync::Arc;

use sluice_client::{ClientError, ConnectOptions, NbdUri, Reconnect, RemoteDevice};
use sluice_raid::{create_array, Geometry, NamedMember, RaidDevice, RaidError, Uuid};
use sluice_storage::{
    BlockDevice, CacheConfig, CacheDevice, DeviceError, FaultInjectionDevice, FileDevice,
    FileOptions, MemDevice, OpenError, PowerLossConfig, PowerLossDevice,
};
use thiserror::Error;

use crate::fan_out::BatchFanOut;
use crate::{BaseSpec, LayerSpec, RaidSpec, RemoteSpec, VolumeSpec};

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
    /// `create_raid` was given a spec that is not an array.
    #[error("not an array spec (expected raid0: or raid5:)")]
    NotAnArray,
}

/// Opens device stacks from [`VolumeSpec`]s, with the settings that are
/// the server's rather than the spec's: today, the buffer cache put over
/// every volume it opens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VolumeBuilder {
    /// A buffer cache over each volume opened (over all of its layers);
    /// `None` for none.
    pub cache: Option<CacheConfig>,
}

impl VolumeBuilder {
    /// A builder that puts `cache`, if any, over every volume it opens.
    pub fn new(cache: Option<CacheConfig>) -> Self {
        Self { cache }
    }

    /// Opens the stack `spec` describes, then the builder's cache over it.
    /// `name` names the volume in logs and injected errors (the export
    /// name).
    pub fn open(&self, name: &str, spec: &VolumeSpec) -> Result<Arc<dyn BlockDevice>, VolumeError> {
        let device = self.open_stack(name, spec)?;
        match self.cache {
            None => Ok(device),
            Some(config) => add_layer(name, device, &LayerSpec::Cache(config)),
        }
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
            BaseSpec::Memory { size } => Arc::new(MemDevice::new(*size, read_only)),
            BaseSpec::Remote(remote) => open_remote(remote)?,
            BaseSpec::Raid(raid) => Arc::new(self.open_raid(raid)?),
        })
    }

    /// Opens every member (each with its own layers, none with the
    /// builder's cache), then assembles the array from their superblocks;
    /// plain remote members are driven by a [`BatchFanOut`].
    fn open_raid(&self, raid: &RaidSpec) -> Result<RaidDevice, VolumeError> {
        let geometry =
            Geometry::new(raid.level, raid.members.len(), raid.unit).map_err(RaidError::from)?;
        let (members, remotes) = self.open_members(raid)?;
        Ok(RaidDevice::assemble(
            geometry,
            members,
            Arc::new(BatchFanOut::new(remotes)),
        )?)
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
        let (members, _) = self.open_members(raid)?;
        Ok(create_array(geometry, &members, force).map_err(RaidError::from)?)
    }

    /// Opens an array's members, named by their URIs (or their place),
    /// with the remote device of each plain remote member for the
    /// fan-out.
    fn open_members(&self, raid: &RaidSpec) -> Result<OpenedMembers, VolumeError> {
        let mut members = Vec::new();
        let mut remotes = Vec::new();
        for (index, spec) in raid.members.iter().enumerate() {
            let member_error = |e| VolumeError::Member {
                index,
                source: Box::new(e),
            };
            match (&spec.base, spec.layers.is_empty()) {
                (BaseSpec::Remote(remote), true) => {
                    let device = Arc::new(connect_remote(remote).map_err(member_error)?);
                    members.push(NamedMember {
                        name: remote.uri.clone(),
                        device: device.clone(),
                    });
                    remotes.push(Some(device));
                }
                (base, _) => {
                    let name = match base {
                        BaseSpec::Remote(remote) => remote.uri.clone(),
                        _ => format!("member {index}"),
                    };
                    let device = self.open_stack(&name, spec).map_err(member_error)?;
                    members.push(NamedMember { name, device });
                    remotes.push(None);
                }
            }
        }
        Ok((members, remotes))
    }
}

impl From<RaidError> for VolumeError {
    fn from(e: RaidError) -> Self {
        Self::Raid(Box::new(e))
    }
}

/// An array's members, named, and the remote device of each plain remote
/// one (for the fan-out), by index.
type OpenedMembers = (Vec<NamedMember>, Vec<Option<Arc<RemoteDevice>>>);

/// Connects to a remote export with the spec's timeout and reconnect
/// window.
fn connect_remote(remote: &RemoteSpec) -> Result<RemoteDevice, VolumeError> {
    let error = |source| VolumeError::Remote {
        uri: remote.uri.clone(),
        source: Box::new(source),
    };
    let uri: NbdUri = remote.uri.parse().map_err(error)?;
    let options = ConnectOptions {
        request_timeout: Some(remote.timeout),
        reconnect: Reconnect::within(remote.reconnect),
        ..ConnectOptions::default()
    };
    RemoteDevice::connect(&uri, &options).map_err(error)
}

fn open_remote(remote: &RemoteSpec) -> Result<Arc<dyn BlockDevice>, VolumeError> {
    Ok(Arc::new(connect_remote(remote)?))
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
