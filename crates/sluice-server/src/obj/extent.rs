//! Scatter/gather and strided I/O on an attached NBD export's device
//! (EXTENT_READ, EXTENT_WRITE): the same device stack, cache included,
//! that NBD clients of the export use. Segments are sorted and merged
//! into runs with the object store's planner, and each run is one
//! device call, never one per segment; reads also bridge small gaps
//! (see [`READ_BRIDGE`]). A write is one device call for all its runs
//! ([`BlockDevice::write_pieces`]), so a view of small blocks behind
//! holes, which cannot be merged, costs what the device makes of many
//! pieces (one lock per page in memory, a copy into a file's mapping).
//! Ranges were checked against the export when the request was
//! validated.

use sluice_objstore::{ascends, buffer_offsets, plan, Run, Segment};
use sluice_storage::{BlockDevice, DeviceError};

/// Segments of a read at most this far apart are read as one span, the
/// gaps into scratch space: a view of small blocks separated by small
/// holes is then one device read instead of one per block. A gap this
/// small costs a device about what a second request would (one page),
/// and nothing at all in the page cache. Writes never bridge: writing a
/// gap back would undo a concurrent client's write to it.
const READ_BRIDGE: u64 = 4096;

/// Reads `segments` (in list order) into `out`, which is exactly their
/// total length.
pub(super) fn read(
    device: &dyn BlockDevice,
    segments: &[Segment],
    out: &mut [u8],
) -> Result<(), DeviceError> {
    let starts = buffer_offsets(segments);
    let mut scratch = Vec::new();
    for (run, members) in plan(segments, READ_BRIDGE).iter() {
        // A run whose members follow each other in the list as they do
        // on the device, with no gap, lands in one piece of `out`: read
        // it in place.
        let first = members[0];
        let in_place = !run.overlapping
            && !run.gapped
            && members.iter().enumerate().all(|(k, &i)| i == first + k);
        if in_place {
            let at = starts[first];
            device.read_at(&mut out[at..at + run.len as usize], run.offset)?;
            continue;
        }
        scratch.resize(run.len as usize, 0);
        device.read_at(&mut scratch, run.offset)?;
        for &i in members {
            let s = segments[i];
            let from = (s.offset - run.offset) as usize;
            out[starts[i]..starts[i] + s.len as usize]
                .copy_from_slice(&scratch[from..from + s.len as usize]);
        }
    }
    Ok(())
}

/// Writes `data` (the segments' bytes in list order) over `segments`;
/// where segments overlap the later one in the list wins. Segments that
/// touch are one piece; all go to the device in one call.
pub(super) fn write(
    device: &dyn BlockDevice,
    segments: &[Segment],
    data: &[u8],
    fua: bool,
) -> Result<(), DeviceError> {
    // The usual list, each segment after the one before it: its pieces
    // are the list's own bytes, joined where segments touch, with nothing
    // sorted or copied.
    if ascends(segments) {
        let mut pieces: Vec<(u64, &[u8])> = Vec::with_capacity(segments.len());
        let mut at = 0usize;
        for s in segments.iter().filter(|s| s.len > 0) {
            let len = s.len as usize;
            match pieces.last_mut() {
                Some((offset, bytes)) if *offset + bytes.len() as u64 == s.offset => {
                    *bytes = &data[at - bytes.len()..at + len];
                }
                _ => pieces.push((s.offset, &data[at..at + len])),
            }
            at += len;
        }
        return device.write_pieces(&pieces, fua);
    }
    // Otherwise runs of the sorted list: a run whose members are in list
    // order is its bytes of `data`; any other is assembled in list order
    // so later segments win (runs have no gaps at bridge 0, so every byte
    // is covered).
    let starts = buffer_offsets(segments);
    let runs = plan(segments, 0);
    let in_place = |run: &Run, members: &[usize]| {
        !run.overlapping
            && members
                .iter()
                .enumerate()
                .all(|(k, &i)| i == members[0] + k)
    };
    let assembled: Vec<Option<Vec<u8>>> = runs
        .iter()
        .map(|(run, members)| {
            (!in_place(run, members)).then(|| {
                let mut buf = vec![0u8; run.len as usize];
                let mut in_list_order = members.to_vec();
                in_list_order.sort_unstable();
                for i in in_list_order {
                    let s = segments[i];
                    let to = (s.offset - run.offset) as usize;
                    buf[to..to + s.len as usize]
                        .copy_from_slice(&data[starts[i]..starts[i] + s.len as usize]);
                }
                buf
            })
        })
        .collect();
    let pieces: Vec<(u64, &[u8])> = runs
        .iter()
        .zip(&assembled)
        .map(|((run, members), buf)| {
            let bytes = match buf {
                Some(buf) => buf.as_slice(),
                None => {
                    let at = starts[members[0]];
                    &data[at..at + run.len as usize]
                }
            };
            (run.offset, bytes)
        })
        .collect();
    device.write_pieces(&pieces, fua)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use sluice_storage::{DeviceLayer, MemDevice};

    use super::*;

    /// Counts device calls.
    #[derive(Debug)]
    struct Counting {
        inner: MemDevice,
        reads: AtomicUsize,
        writes: AtomicUsize,
    }

    impl DeviceLayer for Counting {
        fn inner(&self) -> &dyn BlockDevice {
            &self.inner
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
            self.reads.fetch_add(1, Ordering::Relaxed);
            self.inner.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<(), DeviceError> {
            self.writes.fetch_add(1, Ordering::Relaxed);
            self.inner.write_at(buf, offset, fua)
        }
    }

    fn device() -> Counting {
        Counting {
            inner: MemDevice::new(1 << 20, false),
            reads: AtomicUsize::new(0),
            writes: AtomicUsize::new(0),
        }
    }

    #[test]
    fn runs_are_one_call_reads_bridge_small_gaps_later_overlaps_win() {
        let d = device();
        let pattern: Vec<u8> = (0..=255u8).cycle().take(8192).collect();
        d.inner.write_at(&pattern, 0, false).unwrap();
        // Three adjacent segments in list order, one far away: two reads.
        let segs = [
            Segment::new(100, 10),
            Segment::new(110, 20),
            Segment::new(130, 5),
            Segment::new(5000, 3),
        ];
        let mut out = vec![0u8; 38];
        read(&d, &segs, &mut out).unwrap();
        assert_eq!(d.reads.load(Ordering::Relaxed), 2);
        assert_eq!(&out[..35], &pattern[100..135]);
        assert_eq!(&out[35..], &pattern[5000..5003]);
        // Out of order and overlapping: one read, bytes in list order.
        let segs = [Segment::new(20, 4), Segment::new(0, 22)];
        let mut out = vec![0u8; 26];
        read(&d, &segs, &mut out).unwrap();
        assert_eq!(d.reads.load(Ordering::Relaxed), 3);
        assert_eq!(&out[..4], &pattern[20..24]);
        assert_eq!(&out[4..], &pattern[..22]);
        // A view of 8-byte blocks behind 2-byte holes, in reverse list
        // order: one read across the holes, each block in its place.
        let segs: Vec<Segment> = (0..100u64).rev().map(|k| Segment::new(k * 10, 8)).collect();
        let mut out = vec![0u8; 800];
        read(&d, &segs, &mut out).unwrap();
        assert_eq!(d.reads.load(Ordering::Relaxed), 4);
        for (j, k) in (0..100usize).rev().enumerate() {
            assert_eq!(
                &out[j * 8..j * 8 + 8],
                &pattern[k * 10..k * 10 + 8],
                "block {k}"
            );
        }
        // A gap wider than the bridge is a second read.
        let segs = [Segment::new(0, 8), Segment::new(8 + READ_BRIDGE + 1, 8)];
        let mut out = vec![0u8; 16];
        read(&d, &segs, &mut out).unwrap();
        assert_eq!(d.reads.load(Ordering::Relaxed), 6);
        assert_eq!(&out[8..], &pattern[(8 + READ_BRIDGE + 1) as usize..][..8]);
        // Overlapping writes: one device write, the later entry wins.
        let segs = [Segment::new(0, 4), Segment::new(2, 4)];
        write(&d, &segs, b"aaaabbbb", false).unwrap();
        assert_eq!(d.writes.load(Ordering::Relaxed), 1);
        let mut got = [0u8; 6];
        d.inner.read_at(&mut got, 0).unwrap();
        assert_eq!(&got, b"aabbbb");
        // Writes never bridge a gap: two blocks apart are two writes,
        // and the gap keeps its bytes.
        write(
            &d,
            &[Segment::new(0, 2), Segment::new(4, 2)],
            b"xxyy",
            false,
        )
        .unwrap();
        assert_eq!(d.writes.load(Ordering::Relaxed), 1 + 2);
        d.inner.read_at(&mut got, 0).unwrap();
        assert_eq!(&got, b"xxbbyy");
    }

    #[test]
    fn a_view_of_small_blocks_on_a_file_is_copied_into_its_mapping() {
        use sluice_storage::{FileDevice, FileOptions};

        let dir = tempfile::tempdir().expect("tempdir");
        let d = FileDevice::open(
            &dir.path().join("img"),
            &FileOptions {
                size: Some(1 << 20),
                ..FileOptions::default()
            },
        )
        .expect("open");
        d.write_at(&[0xee; 4096], 0, false).expect("write");
        let pieces = |d: &FileDevice| {
            d.metrics()
                .into_iter()
                .find(|m| m.name == "file_mapped_write_pieces_total")
                .map(|m| m.value)
        };
        // 300 blocks of 8 bytes behind 2-byte holes, in reverse list order.
        let segs: Vec<Segment> = (0..300u64).rev().map(|k| Segment::new(k * 10, 8)).collect();
        let data: Vec<u8> = (0..300u32).flat_map(|j| [j as u8; 8]).collect();
        write(&d, &segs, &data, false).expect("write");
        assert_eq!(pieces(&d), Some(300.0));
        let mut got = vec![0u8; 3000];
        d.read_at(&mut got, 0).expect("read");
        for (j, k) in (0..300usize).rev().enumerate() {
            assert_eq!(&got[k * 10..k * 10 + 8], &[j as u8; 8], "block {k}");
            assert_eq!(&got[k * 10 + 8..k * 10 + 10], &[0xee, 0xee], "hole {k}");
        }
        // A few large segments are written as runs.
        let segs = [Segment::new(0, 8192), Segment::new(16384, 8192)];
        write(&d, &segs, &[1u8; 16384], false).expect("write");
        assert_eq!(pieces(&d), Some(300.0));
    }
}
