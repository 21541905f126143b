//! Device stacks: what a volume is made of ([`VolumeSpec`]: a base device
//! and the layers over it), the `SPEC` syntax of `--export NAME=SPEC`, and
//! [`VolumeBuilder`], the one place a spec becomes a [`BlockDevice`]
//! stack. It sits above `sluice-storage` (the devices and layers) and
//! below the server, which keeps only its export registry and the NBD
//! view of a device.
//!
//! Specs are recursive in shape: a composite base (a RAID whose members
//! are remote volumes, each with its own layers) holds member
//! `VolumeSpec`s, opened by the same builder.
//!
//! [`BlockDevice`]: sluice_storage::BlockDevice

mod builder;
mod fan_out;
mod spec;

pub use builder::{RaidHandle, Volume, VolumeBuilder, VolumeError, DEFAULT_JOURNAL_DIR};
pub use fan_out::BatchFanOut;
pub use spec::{
    BaseSpec, JournalSpec, LayerSpec, RaidSpec, RemoteSpec, SpecError, VolumeSpec,
    DEFAULT_REMOTE_RECONNECT, DEFAULT_REMOTE_TIMEOUT,
};
