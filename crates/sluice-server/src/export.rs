//! Exports: a named device plus what the handshake tells clients about it.
//! The device stack itself is built by `sluice_volume::VolumeBuilder`.

use std::sync::Arc;

use sluice_nbd_proto::consts::*;
use sluice_nbd_proto::{BlockSizes, ExportCatalog, ExportInfo};
use sluice_storage::{BlockDevice, CacheConfig, CacheMode, Capability};
use sluice_volume::{RaidHandle, VolumeBuilder};

use crate::config::{CachePolicy, ExportConfig, ServerConfig};
use crate::metrics::ExportMetrics;

/// Why an export could not be opened: its device stack could not be.
pub type ExportOpenError = sluice_volume::VolumeError;

/// A device served under a name.
#[derive(Debug)]
pub struct Export {
    /// Name clients ask for.
    pub name: String,
    /// Description for listings.
    pub description: String,
    /// The device.
    pub device: Arc<dyn BlockDevice>,
    /// Its capabilities, read once.
    pub capability: Capability,
    /// Request counters and latency histograms.
    pub metrics: ExportMetrics,
    /// The array under the device, for a RAID export (the admin socket
    /// drives it).
    pub raid: Option<RaidHandle>,
}

/// NBD transmission flags for a device's capabilities. `NBD_FLAG_SEND_DF`
/// is added by the handshake when chunked replies are negotiated.
pub fn transmission_flags(cap: &Capability) -> u16 {
    let mut flags = FLAG_HAS_FLAGS;
    let mut set = |cond: bool, flag: u16| {
        if cond {
            flags |= flag;
        }
    };
    set(cap.read_only, FLAG_READ_ONLY);
    set(cap.flush, FLAG_SEND_FLUSH);
    set(cap.fua, FLAG_SEND_FUA);
    set(cap.rotational, FLAG_ROTATIONAL);
    set(cap.trim, FLAG_SEND_TRIM);
    set(cap.write_zeroes, FLAG_SEND_WRITE_ZEROES);
    set(cap.write_zeroes && cap.fast_zero, FLAG_SEND_FAST_ZERO);
    set(cap.multi_conn, FLAG_CAN_MULTI_CONN);
    set(cap.cache, FLAG_SEND_CACHE);
    flags
}

impl Export {
    /// Opens the device stack an export config names, behind the
    /// server's buffer cache unless that is [`CachePolicy::None`].
    pub fn open(config: &ExportConfig, server: &ServerConfig) -> Result<Self, ExportOpenError> {
        let volume = volume_builder(server).open_volume(&config.name, &config.spec)?;
        let mut export = Self::new(
            config.name.clone(),
            config.description.clone(),
            volume.device,
        );
        export.raid = volume.raid;
        Ok(export)
    }

    /// Wraps an existing device.
    pub fn new(name: String, description: String, device: Arc<dyn BlockDevice>) -> Self {
        let capability = device.capability();
        Self {
            name,
            description,
            device,
            capability,
            metrics: ExportMetrics::default(),
            raid: None,
        }
    }

    /// What the handshake sends about this export; `max_payload` is the
    /// server's largest request (`Limits::max_request_size`).
    pub fn info(&self, max_payload: u32) -> ExportInfo {
        let minimum = self.capability.min_block.max(1);
        let preferred = self.capability.min_block.max(4096);
        ExportInfo {
            name: self.name.clone(),
            description: self.description.clone(),
            size: self.device.size(),
            flags: transmission_flags(&self.capability),
            block_sizes: BlockSizes {
                minimum,
                preferred,
                // A multiple of the minimum, and never below the preferred.
                maximum_payload: (max_payload / minimum * minimum).max(preferred),
            },
            base_allocation: true,
        }
    }
}

/// What the server's settings add to every export's stack: the buffer
/// cache, over all of the spec's layers.
fn volume_builder(server: &ServerConfig) -> VolumeBuilder {
    let mode = match server.cache {
        CachePolicy::None => None,
        CachePolicy::WriteThrough => Some(CacheMode::WriteThrough),
        CachePolicy::WriteBack => Some(CacheMode::WriteBack),
    };
    VolumeBuilder::new(mode.map(|mode| CacheConfig {
        mode,
        capacity: server.cache_size.0,
        readahead_max: server.readahead_max.0,
        ..CacheConfig::default()
    }))
    .with_rebuild_rate(server.rebuild_rate.0)
}

/// All exports of a server; the default export answers the empty name.
#[derive(Debug)]
pub struct ExportRegistry {
    exports: Vec<Arc<Export>>,
    /// The largest request payload, advertised with every export.
    max_payload: u32,
}

impl Default for ExportRegistry {
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

impl ExportRegistry {
    /// A registry of the given exports (names must be unique), with the
    /// default maximum request size.
    pub fn new(exports: Vec<Arc<Export>>) -> Self {
        Self {
            exports,
            max_payload: crate::config::Limits::default().max_payload(),
        }
    }

    /// Advertises `max_payload` as every export's largest request.
    pub fn with_max_payload(mut self, max_payload: u32) -> Self {
        self.max_payload = max_payload;
        self
    }

    /// The export a client asking for `name` gets: `""` means the one named
    /// `default`, else the first.
    pub fn get(&self, name: &str) -> Option<&Arc<Export>> {
        if name.is_empty() {
            return self
                .exports
                .iter()
                .find(|e| e.name == "default")
                .or(self.exports.first());
        }
        self.exports.iter().find(|e| e.name == name)
    }

    /// Every export.
    pub fn all(&self) -> &[Arc<Export>] {
        &self.exports
    }
}

impl ExportCatalog for ExportRegistry {
    fn list(&self) -> Vec<(String, String)> {
        self.exports
            .iter()
            .map(|e| (e.name.clone(), e.description.clone()))
            .collect()
    }

    fn lookup(&self, name: &str) -> Option<ExportInfo> {
        self.get(name).map(|e| e.info(self.max_payload))
    }
}
