//! One scatter/gather write and read of 256 segments of 4 KiB separated
//! by 2-byte holes, plus one read of 256 adjacent segments. Run it under
//! `strace -f -e trace=preadv,pwritev` to see one vectored call per
//! merged run, never one per segment:
//!
//! `cargo run -p sluice-objstore --example sgl`

use sluice_objstore::{ObjectRef, ObjectStore, PartitionId, Segment, WriteOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = ObjectStore::open(dir.path())?;
    let p = PartitionId(1);
    store.create_partition(p)?;
    let id = store.create_and_write(
        p,
        None,
        &[Segment::new(0, 1 << 21)],
        &vec![1u8; 1 << 21],
        &WriteOptions::default(),
    )?;
    let obj = ObjectRef {
        partition: p,
        object: id,
    };
    let holes: Vec<Segment> = (0..256).map(|i| Segment::new(i * 4098, 4096)).collect();
    let adjacent: Vec<Segment> = (0..256).map(|i| Segment::new(i * 4096, 4096)).collect();
    store.write(
        obj,
        &holes,
        &vec![2u8; 256 * 4096],
        &WriteOptions::default(),
    )?;
    let scattered = store.read(obj, &holes, &[])?;
    let merged = store.read(obj, &adjacent, &[])?;
    println!(
        "read {} bytes in 256 separated segments and {} bytes in 256 adjacent ones",
        scattered.real, merged.real
    );
    Ok(())
}
