//! The builder opens what specs say, and the stacks it opens pass the
//! conformance suite.

use std::path::Path;

use sluice_storage::{BlockDevice, CacheConfig, CacheMode};
use sluice_testkit::conformance::{Access, Subject};
use sluice_volume::{BaseSpec, LayerSpec, VolumeBuilder, VolumeError, VolumeSpec};

fn metric_names(dev: &dyn BlockDevice) -> Vec<&'static str> {
    dev.metrics().iter().map(|m| m.name).collect()
}

fn cache(mode: CacheMode) -> Option<CacheConfig> {
    Some(CacheConfig {
        mode,
        capacity: 1 << 20,
        ..CacheConfig::default()
    })
}

#[test]
fn the_builder_stacks_what_the_spec_and_the_server_say() {
    let spec: VolumeSpec = "mem:1M,power-loss=9,fail=write:eio:nth=2"
        .parse()
        .expect("spec");
    let plain = VolumeBuilder::default().open("d", &spec).expect("open");
    let names = metric_names(plain.as_ref());
    assert!(names.contains(&"power_loss_cached_bytes"), "{names:?}");
    assert!(names.contains(&"faults_injected_total"), "{names:?}");
    assert!(!names.contains(&"cache_read_hits_total"), "{names:?}");
    // Error injection sits over the power-loss layer and names the volume.
    plain.write_at(&[1; 512], 0, false).expect("1st write");
    let e = plain.write_at(&[1; 512], 0, false).expect_err("2nd write");
    assert!(e.to_string().contains("export \"d\""), "{e}");

    let cached = VolumeBuilder::new(cache(CacheMode::WriteBack))
        .open("d", &spec)
        .expect("open");
    let names = metric_names(cached.as_ref());
    assert!(names.contains(&"cache_read_hits_total"), "{names:?}");
    assert!(names.contains(&"faults_injected_total"), "{names:?}");

    let ro: VolumeSpec = "mem:1M,ro".parse().expect("spec");
    let dev = VolumeBuilder::new(cache(CacheMode::WriteThrough))
        .open("r", &ro)
        .expect("open");
    assert!(dev.capability().read_only);
    assert_eq!(dev.size(), 1 << 20);
}

#[test]
fn a_missing_file_without_a_size_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("absent.img");
    let spec = VolumeSpec::new(BaseSpec::File {
        path: path.clone(),
        size: None,
        direct: false,
    });
    let e = VolumeBuilder::default()
        .open("x", &spec)
        .expect_err("no size");
    assert!(matches!(e, VolumeError::Open(_)), "{e:?}");
    assert!(e.to_string().contains("give a size"), "{e}");
}

const SIZE: u64 = 4 << 20;

/// Opens `spec` (over a file in `dir` when it names one) with `access`;
/// a read-only file is created writable first.
fn open(dir: &Path, mut spec: VolumeSpec, access: Access, builder: &VolumeBuilder) -> Subject {
    if let BaseSpec::File { path, .. } = &mut spec.base {
        *path = dir.join("image");
        if access == Access::ReadOnly {
            drop(
                VolumeBuilder::default()
                    .open("create", &spec)
                    .expect("create"),
            );
        }
    }
    spec.read_only = access == Access::ReadOnly;
    Subject::new(builder.open("conformance", &spec).expect("open the stack"))
}

fn built(spec: &str, cache_mode: Option<CacheMode>) -> impl Fn(Access) -> Subject {
    let spec: VolumeSpec = spec.parse().expect("spec");
    move |access| {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let builder = VolumeBuilder::new(cache_mode.and_then(cache));
        open(dir.path(), spec.clone(), access, &builder).keeping(dir)
    }
}

fn fault_without_rules(access: Access) -> Subject {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut spec: VolumeSpec = format!("file:image,size={SIZE}").parse().expect("spec");
    spec.layers.push(LayerSpec::Fault { rules: Vec::new() });
    open(dir.path(), spec, access, &VolumeBuilder::default()).keeping(dir)
}

sluice_testkit::conformance_tests! {
    built_mem_power_loss_writethrough => built("mem:4M,power-loss=5", Some(CacheMode::WriteThrough)),
    built_file_direct_writeback => built("file:image,size=4M,direct", Some(CacheMode::WriteBack)),
    built_file_power_loss => built("file:image,size=4M,power-loss=3", None),
    built_file_fault_without_rules => fault_without_rules,
}

/// A `sluice://HOST:PORT/EXPORT` spec is the export over the native
/// protocol: its bytes are the export's.
#[test]
fn a_native_protocol_spec_opens_the_export() {
    use std::sync::Arc;

    use sluice_storage::MemDevice;
    use sluice_testkit::test_server::TestServer;

    let dir = tempfile::tempdir().expect("tempdir");
    let disk = Arc::new(MemDevice::new(1 << 20, false));
    let server = TestServer::builder()
        .export("disk", disk.clone())
        .objects(dir.path().join("objects"))
        .start();
    let spec: VolumeSpec = format!("{}/disk?merge=always,timeout=5s", server.obj_uri())
        .parse()
        .expect("spec");
    assert!(matches!(spec.base, BaseSpec::Export(_)), "{spec:?}");
    let dev = VolumeBuilder::default().open("n", &spec).expect("open");
    assert_eq!(dev.size(), 1 << 20);
    dev.write_at(b"through the native protocol", 4096, true)
        .expect("write");
    let mut got = [0u8; 27];
    disk.read_at(&mut got, 4096).expect("read the export");
    assert_eq!(&got, b"through the native protocol");
    let missing: VolumeSpec = format!("{}/absent", server.obj_uri())
        .parse()
        .expect("spec");
    let e = VolumeBuilder::default()
        .open("m", &missing)
        .expect_err("no such export");
    assert!(matches!(e, VolumeError::Export { .. }), "{e:?}");
}
