//! The device conformance suite over `RemoteDevice` against four real
//! servers: sluice in process (a memory, a file and a power-loss
//! export, the last with a crash hook for the durability check), nbdkit's
//! memory and file plugins (the memory one also behind filters that take
//! capabilities away or enforce block sizes), and qemu-nbd on a raw file. Every subject
//! gets its own freshly started server, so each device starts zeroed;
//! the server lives as long as the subject.

mod common;

use std::sync::Arc;

use common::{image, Peer};
use sluice_client::RemoteDevice;
use sluice_storage::{
    BlockDevice, FileDevice, FileOptions, MemDevice, PowerLossConfig, PowerLossDevice,
};
use sluice_testkit::conformance::{Access, Subject};
use sluice_testkit::test_server::TestServer;

const SIZE: u64 = 4 << 20;

fn open(uri: &str) -> Arc<dyn BlockDevice> {
    Arc::new(RemoteDevice::open(uri).unwrap_or_else(|e| panic!("cannot open {uri}: {e}")))
}

/// `device` served by an in-process sluice server as `disk`; a read-only
/// device makes a read-only export.
fn sluice(device: Arc<dyn BlockDevice>) -> Subject {
    let server = TestServer::builder().export("disk", device).start();
    Subject::new(open(&server.uri("disk"))).keeping(server)
}

fn sluice_mem(access: Access) -> Subject {
    sluice(Arc::new(MemDevice::new(SIZE, access == Access::ReadOnly)))
}

/// A sluice export of a simulated disk that loses unflushed writes on a
/// power cut (what an export spec's `power-loss` option builds): the
/// durability check then proves flush and FUA travel over NBD to the
/// disk. The crash cuts the disk's power under the running server and
/// reads the survivors from the disk itself.
fn sluice_power_loss(access: Access) -> Subject {
    let disk = Arc::new(PowerLossDevice::new(
        Arc::new(MemDevice::new(SIZE, access == Access::ReadOnly)),
        PowerLossConfig {
            seed: 11,
            early_write_percent: 40,
            torn_percent: 30,
            max_cached_bytes: 1 << 20,
        },
    ));
    let crash = Arc::clone(&disk);
    sluice(disk).with_crash(move || {
        crash.power_loss();
        crash
    })
}

fn sluice_file(access: Access) -> Subject {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = image(dir.path(), SIZE);
    let file = FileDevice::open(
        &path,
        &FileOptions {
            read_only: access == Access::ReadOnly,
            direct: false,
            size: Some(SIZE),
        },
    )
    .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    sluice(Arc::new(file)).keeping(dir)
}

/// `program` with `-r` first for a read-only export.
fn peer(program: &str, access: Access, args: impl FnOnce(&str, &str) -> Vec<String>) -> Subject {
    let server = Peer::start(program, |socket, dir| {
        let mut argv = Vec::new();
        if access == Access::ReadOnly {
            argv.push("-r".to_owned());
        }
        argv.extend(args(
            &socket.display().to_string(),
            &image(dir, SIZE).display().to_string(),
        ));
        argv
    });
    Subject::new(open(&server.uri())).keeping(server)
}

fn nbdkit_memory(access: Access) -> Subject {
    peer("nbdkit", access, |socket, _| {
        ["-f", "-U", socket, "memory", &format!("size={SIZE}")]
            .map(String::from)
            .into()
    })
}

/// nbdkit's memory plugin behind `filters` (each `--filter=NAME`) with
/// their `params`: a server that offers less, or demands more.
fn nbdkit_filtered(access: Access, filters: &[&str], params: &[&str]) -> Subject {
    peer("nbdkit", access, |socket, _| {
        let mut argv: Vec<String> = ["-f", "-U", socket].map(String::from).into();
        argv.extend(filters.iter().map(|f| format!("--filter={f}")));
        argv.extend(["memory".to_owned(), format!("size={SIZE}")]);
        argv.extend(params.iter().map(|p| (*p).to_owned()));
        argv
    })
}

/// No WRITE_ZEROES (so no fast zero either), and block status that
/// calls everything data (base:allocation is still negotiated): zeroing
/// becomes writes of zeroes.
fn nbdkit_no_zero_no_extents(access: Access) -> Subject {
    nbdkit_filtered(access, &["nozero", "noextents"], &["zeromode=none"])
}

/// WRITE_ZEROES without fast zero: a fast zero must be refused.
fn nbdkit_no_fast_zero(access: Access) -> Subject {
    nbdkit_filtered(
        access,
        &["nozero"],
        &["zeromode=plugin", "fastzeromode=none"],
    )
}

/// A 4 KiB minimum block and a 64 KiB maximum payload, enforced: a
/// request the device did not align or split fails.
fn nbdkit_4k_blocks(access: Access) -> Subject {
    nbdkit_filtered(
        access,
        &["blocksize-policy"],
        &[
            "blocksize-minimum=4096",
            "blocksize-preferred=4096",
            "blocksize-maximum=65536",
            "blocksize-error-policy=error",
        ],
    )
}

fn nbdkit_file(access: Access) -> Subject {
    peer("nbdkit", access, |socket, image| {
        ["-f", "-U", socket, "file", image].map(String::from).into()
    })
}

fn qemu_nbd(access: Access) -> Subject {
    peer("qemu-nbd", access, |socket, image| {
        [
            "--persistent",
            "-f",
            "raw",
            "-k",
            socket,
            "--discard=unmap",
            image,
        ]
        .map(String::from)
        .into()
    })
}

sluice_testkit::conformance_tests! {
    sluice_mem => sluice_mem,
    sluice_file => sluice_file,
    sluice_power_loss => sluice_power_loss,
    nbdkit_memory => nbdkit_memory,
    nbdkit_file => nbdkit_file,
    nbdkit_no_zero_no_extents => nbdkit_no_zero_no_extents,
    nbdkit_no_fast_zero => nbdkit_no_fast_zero,
    nbdkit_4k_blocks => nbdkit_4k_blocks,
    qemu_nbd => qemu_nbd,
}
