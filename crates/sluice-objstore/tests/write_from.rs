#![allow(clippy::unwrap_used)] // helper functions outside #[test] unwrap too
//! `ObjectStore::write_from`: a write whose bytes come from a
//! `WriteSource` (the server's payload pipe) rather than memory. It must
//! land exactly as `write` of the same bytes does: into the object's file
//! straight from the source when the object has one, through memory when
//! the store keeps the bytes there (inline objects, journaled durable
//! writes), with the same length, times, attributes and failures.

use std::cell::Cell;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use sluice_objstore::{
    AttrValue, BatchChange, Edit, ObjStoreError, ObjectRef, ObjectStore, PartitionId, Segment,
    StoreOptions, WriteOptions, WriteSource,
};

const P: PartitionId = PartitionId(7);

/// A source over bytes in memory that records how the store took them.
struct Recorded {
    data: Vec<u8>,
    /// Calls of `write_to` and of `read_into`.
    written: Cell<u32>,
    read: Cell<u32>,
    /// Fail `write_to` after writing this many bytes.
    fail_after: Option<usize>,
}

impl Recorded {
    fn new(data: Vec<u8>) -> Self {
        Self {
            data,
            written: Cell::new(0),
            read: Cell::new(0),
            fail_after: None,
        }
    }
}

impl WriteSource for Recorded {
    fn bytes(&self) -> u64 {
        self.data.len() as u64
    }

    fn write_to(&self, file: &File, offset: u64) -> io::Result<()> {
        self.written.set(self.written.get() + 1);
        match self.fail_after {
            Some(n) => {
                file.write_all_at(&self.data[..n], offset)?;
                Err(io::Error::other("the source broke"))
            }
            None => file.write_all_at(&self.data, offset),
        }
    }

    fn read_into(&self, out: &mut Vec<u8>) -> io::Result<()> {
        self.read.set(self.read.get() + 1);
        out.extend_from_slice(&self.data);
        Ok(())
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u8)
                .wrapping_mul(29)
                .wrapping_add(seed ^ (i >> 12) as u8)
        })
        .collect()
}

fn open(options: StoreOptions) -> (tempfile::TempDir, ObjectStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = ObjectStore::open_with(dir.path(), options).unwrap();
    store.create_partition(P).unwrap();
    (dir, store)
}

fn new_object(store: &ObjectStore) -> ObjectRef {
    ObjectRef {
        partition: P,
        object: store.create(P, None, 1, &WriteOptions::default()).unwrap()[0],
    }
}

/// Writes `data` from the object's start, from memory.
fn put(store: &ObjectStore, o: ObjectRef, data: &[u8]) {
    store
        .write(
            o,
            &[Segment::new(0, data.len() as u64)],
            data,
            &WriteOptions::default(),
        )
        .unwrap();
}

/// The whole object and its length.
fn contents(store: &ObjectStore, o: ObjectRef) -> (Vec<u8>, u64) {
    let (info, _) = store.get_attrs(o, &[]).unwrap();
    let r = store.read(o, &[Segment::new(0, info.length)], &[]).unwrap();
    (r.data, info.length)
}

/// Applies a write of `data` at `offset` to the model `bytes`.
fn model_write(bytes: &mut Vec<u8>, offset: usize, data: &[u8]) {
    if bytes.len() < offset + data.len() {
        bytes.resize(offset + data.len(), 0);
    }
    bytes[offset..offset + data.len()].copy_from_slice(data);
}

#[test]
fn a_file_object_is_written_from_the_source_and_reads_back_as_written() {
    let (_dir, store) = open(StoreOptions::default());
    let o = new_object(&store);
    let mut model = pattern(1 << 20, 1);
    put(&store, o, &model);
    assert!(store.has_cached_file(o), "written and cached as a file");
    let (before, _) = store.get_attrs(o, &[]).unwrap();
    // Inside, straddling the end, and past it leaving a hole.
    for (k, (offset, len)) in [
        (4099usize, 128usize << 10),
        ((1 << 20) - 1000, 300 << 10),
        ((2 << 20) + 12345, (1 << 20) + 1),
    ]
    .into_iter()
    .enumerate()
    {
        let source = Recorded::new(pattern(len, k as u8 + 10));
        let info = store
            .write_from(o, offset as u64, &source, &WriteOptions::default())
            .unwrap();
        assert_eq!((source.written.get(), source.read.get()), (1, 0));
        model_write(&mut model, offset, &source.data);
        assert_eq!(info.length, model.len() as u64);
        let (got, length) = contents(&store, o);
        assert_eq!(length, model.len() as u64, "length after write {k}");
        assert!(got == model, "bytes after write {k}");
    }
    let (after, _) = store.get_attrs(o, &[]).unwrap();
    assert!(after.data_modified > before.data_modified);
    assert_eq!(after.attrs_modified, before.attrs_modified);
}

#[test]
fn attributes_ride_on_a_write_from_a_source_and_batches_take_sources() {
    let (_dir, store) = open(StoreOptions::default());
    let o = new_object(&store);
    put(&store, o, &[3u8; 64 << 10]);
    let source = Recorded::new(pattern(200 << 10, 4));
    let opts = WriteOptions {
        attrs: vec![("v".to_owned(), AttrValue::Integer(9))],
        durable: false,
    };
    store.write_from(o, 1000, &source, &opts).unwrap();
    let (_, attrs) = store.get_attrs(o, &["v"]).unwrap();
    assert_eq!(attrs, vec![("v".to_owned(), AttrValue::Integer(9))]);
    // The write set an attribute, so its bytes were journaled (and
    // written after its commit); the flush retires the rows, after
    // which plain changes share one commit again.
    store.flush_object(o).unwrap();

    // Two changes to one object in a batch: the later one starts from
    // the earlier one's state.
    let second = Recorded::new(pattern(130 << 10, 5));
    let plain = WriteOptions::default();
    let tail = vec![0xabu8; 10];
    let outcome = store.change_batch(&[
        BatchChange {
            object: o,
            edit: Edit::WriteFrom(500 << 10, &second),
            opts: &plain,
        },
        BatchChange {
            object: o,
            edit: Edit::Write(&[Segment::new((630 << 10) + 1, 10)], &tail),
            opts: &plain,
        },
    ]);
    assert!(outcome.results.iter().all(Result::is_ok));
    assert_eq!(outcome.commits, 1);
    let mut model = vec![3u8; 64 << 10];
    model_write(&mut model, 1000, &source.data);
    model_write(&mut model, 500 << 10, &second.data);
    model_write(&mut model, (630 << 10) + 1, &tail);
    let (got, length) = contents(&store, o);
    assert_eq!(length, model.len() as u64);
    assert!(got == model);
}

#[test]
fn bytes_the_store_keeps_in_memory_are_read_out_of_the_source() {
    // Inline up to 1 MiB, and durable writes up to 1 MiB journaled.
    let (dir, store) = open(StoreOptions {
        inline_max: 1 << 20,
        journal_max: 1 << 20,
        ..StoreOptions::default()
    });
    let o = new_object(&store);
    let source = Recorded::new(pattern(300 << 10, 6));
    store
        .write_from(o, 100, &source, &WriteOptions::default())
        .unwrap();
    assert_eq!((source.written.get(), source.read.get()), (0, 1), "inline");
    let mut model = vec![0u8; 100];
    model.extend_from_slice(&source.data);
    assert!(contents(&store, o).0 == model);

    // Grows past the inline limit: moved to its file, written from the
    // source there.
    let big = Recorded::new(pattern(900 << 10, 7));
    store
        .write_from(o, 500 << 10, &big, &WriteOptions::default())
        .unwrap();
    assert_eq!(
        (big.written.get(), big.read.get()),
        (1, 0),
        "moved to a file"
    );
    model_write(&mut model, 500 << 10, &big.data);
    assert!(contents(&store, o).0 == model);

    // A durable write of a synced file within the journal limit is
    // journaled: its bytes are read out to go into the journal row, and
    // survive reopening the store (the rows replayed if needed).
    store.flush_object(o).unwrap();
    let durable = Recorded::new(pattern(200 << 10, 8));
    let opts = WriteOptions {
        attrs: Vec::new(),
        durable: true,
    };
    store.write_from(o, 7, &durable, &opts).unwrap();
    assert_eq!(
        (durable.written.get(), durable.read.get()),
        (0, 1),
        "journaled"
    );
    model_write(&mut model, 7, &durable.data);
    assert!(contents(&store, o).0 == model);
    drop(store);
    let store = ObjectStore::open(dir.path()).unwrap();
    assert!(contents(&store, o).0 == model, "after reopening");
}

#[test]
fn a_failed_write_from_a_source_changes_no_length() {
    let (_dir, store) = open(StoreOptions::default());
    let o = new_object(&store);
    let old = pattern(256 << 10, 9);
    put(&store, o, &old);

    // Past the largest object: refused before the source is touched.
    let source = Recorded::new(vec![1; 4096]);
    let e = store
        .write_from(o, u64::MAX - 10, &source, &WriteOptions::default())
        .unwrap_err();
    assert!(matches!(e, ObjStoreError::OutOfRange { .. }), "{e}");
    assert_eq!((source.written.get(), source.read.get()), (0, 0));

    // An unknown object: nothing taken.
    let missing = ObjectRef {
        partition: P,
        object: sluice_objstore::ObjectId(o.object.0 + 1000),
    };
    let e = store
        .write_from(missing, 0, &source, &WriteOptions::default())
        .unwrap_err();
    assert!(matches!(e, ObjStoreError::UnknownObject { .. }), "{e}");
    assert_eq!((source.written.get(), source.read.get()), (0, 0));

    // The source breaks half-way through extending the object: the
    // error is the write's, and the length is the old one (the bytes it
    // left past the end are cut when the object is next loaded).
    let mut broken = Recorded::new(pattern(512 << 10, 10));
    broken.fail_after = Some(300 << 10);
    let e = store
        .write_from(o, 128 << 10, &broken, &WriteOptions::default())
        .unwrap_err();
    assert!(matches!(e, ObjStoreError::Io { .. }), "{e}");
    let (got, length) = contents(&store, o);
    assert_eq!(length, old.len() as u64, "length unchanged");
    assert!(got[..128 << 10] == old[..128 << 10]);
    // A later extension shows zeros where the failed write's bytes lay
    // past the old length.
    store
        .write(
            o,
            &[Segment::new((1 << 20) - 1, 1)],
            &[0xee],
            &WriteOptions::default(),
        )
        .unwrap();
    let (got, _) = contents(&store, o);
    assert!(
        got[old.len()..(1 << 20) - 1].iter().all(|&b| b == 0),
        "no stale bytes past the old length"
    );
}
