//! The one place device stacks are built.

use std::sync::Arc;

use sluice_storage::{
    BlockDevice, CacheConfig, CacheDevice, DeviceError, FaultInjectionDevice, FileDevice,
    FileOptions, MemDevice, OpenError, PowerLossConfig, PowerLossDevice,
};
use thiserror::Error;

use crate::{BaseSpec, LayerSpec, VolumeSpec};

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
        })
    }
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
