//! Object data files: scatter/gather reads and writes as positional
//! vectored I/O (`preadv`/`pwritev`), one call per merged run (split
//! only at the kernel's iovec limit; a read run of small members is read
//! whole and copied out, see [`COPY_OUT_BELOW`]), and hole punching.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut};

use rustix::fs::FallocateFlags;
use rustix::io::Errno;

use crate::segments::{ascends, buffer_offsets, plan, Segment};

/// The most iovecs one call takes (Linux's `IOV_MAX`).
const IOV_MAX: usize = 1024;

/// Segments at most this far apart are done as one span: a read reads
/// the gap into scratch space, so segments separated by small holes cost
/// one `preadv`; a write reads the span once, lays its segments over it
/// and writes it back with one `pwritev` (the kernel has no write to
/// scattered file offsets). The caller holds the object's write lock, so
/// no other write changes a gap in between; rewriting a gap with the
/// bytes it held is harmless if a crash cuts it short.
const BRIDGE: u64 = 64 * 1024;

/// A read run whose members average fewer bytes than this is read whole
/// into scratch space and its members copied out, rather than read
/// straight into place with an iovec per member and per gap: the kernel
/// spends about as long on each iovec as on copying a few hundred bytes,
/// so a view of 8-byte blocks behind 2-byte holes (8,192 iovecs per
/// 4,096 blocks) costs several times what one read and 4,096 small
/// copies do.
const COPY_OUT_BELOW: u64 = 256;

/// Reads `segments` (already clamped to the object's logical length) of
/// `file` into `out`, each at its place in list order, and zeroes every
/// byte of `out` no read fills: past a segment's clamped length, past
/// the end of the file, and everything when the object has no file. So
/// `out` may hold anything on entry and no byte is written twice. `lens`
/// are the unclamped lengths, which decide where each segment sits in
/// `out`.
pub(crate) fn read_segments(
    file: Option<&File>,
    clamped: &[Segment],
    lens: &[Segment],
    out: &mut [u8],
) -> io::Result<()> {
    if let ([s], [l], Some(file)) = (clamped, lens, file) {
        // One segment (the common contiguous read): no plan, no lists.
        let (real, past) = out.split_at_mut(s.len as usize);
        past.fill(0);
        debug_assert_eq!(l.len as usize, real.len() + past.len());
        return preadv_all(file, &mut [IoSliceMut::new(real)], s.offset);
    }
    let starts = buffer_offsets(lens);
    // One disjoint chunk of `out` per segment, in list order.
    let mut chunks: Vec<Option<&mut [u8]>> = Vec::with_capacity(clamped.len());
    let mut rest = out;
    let mut at = 0usize;
    for (i, s) in clamped.iter().enumerate() {
        let skip = starts[i] - at;
        let (_, tail) = rest.split_at_mut(skip);
        let (chunk, tail) = tail.split_at_mut(lens[i].len as usize);
        let (real, past) = chunk.split_at_mut(s.len as usize);
        past.fill(0);
        chunks.push(Some(real));
        rest = tail;
        at = starts[i] + lens[i].len as usize;
    }
    let Some(file) = file else {
        for chunk in chunks.into_iter().flatten() {
            chunk.fill(0);
        }
        return Ok(());
    };
    for (run, members) in plan(clamped, BRIDGE).iter() {
        let covered: u64 = members.iter().map(|&i| clamped[i].len).sum();
        let small =
            members.len() > 1 && covered < COPY_OUT_BELOW.saturating_mul(members.len() as u64);
        if run.overlapping || small {
            let mut buf = vec![0u8; run.len as usize];
            preadv_all(file, &mut [IoSliceMut::new(&mut buf)], run.offset)?;
            for &i in members {
                let from = (clamped[i].offset - run.offset) as usize;
                if let Some(chunk) = chunks[i].as_deref_mut() {
                    chunk.copy_from_slice(&buf[from..from + chunk.len()]);
                }
            }
        } else {
            // Gaps between members land in one scratch buffer, split
            // into disjoint pieces.
            let mut scratch = vec![0u8; (run.len - covered) as usize];
            let mut gaps: &mut [u8] = &mut scratch;
            let mut slices: Vec<IoSliceMut<'_>> = Vec::with_capacity(2 * members.len());
            let mut pos = run.offset;
            for &i in members {
                let s = clamped[i];
                if s.offset > pos {
                    let (gap, rest) =
                        std::mem::take(&mut gaps).split_at_mut((s.offset - pos) as usize);
                    slices.push(IoSliceMut::new(gap));
                    gaps = rest;
                }
                if let Some(chunk) = chunks[i].take() {
                    slices.push(IoSliceMut::new(chunk));
                }
                pos = s.end();
            }
            preadv_all(file, &mut slices, run.offset)?;
        }
    }
    Ok(())
}

/// Writes `data` (the segments' bytes in list order) over `segments`;
/// where segments overlap, the later one in the list wins. The caller
/// holds the object's write lock (see [`BRIDGE`]).
pub(crate) fn write_segments(file: &File, segments: &[Segment], data: &[u8]) -> io::Result<()> {
    if ascends(segments) {
        return write_ascending(file, segments, data);
    }
    let starts = buffer_offsets(segments);
    for (run, members) in plan(segments, BRIDGE).iter() {
        if run.overlapping || run.gapped {
            // Assemble the run in list order so later segments win, over
            // the bytes the gaps hold now.
            let mut buf = vec![0u8; run.len as usize];
            if run.gapped {
                preadv_all(file, &mut [IoSliceMut::new(&mut buf)], run.offset)?;
            }
            // List order: where members overlap, the later one wins.
            let mut in_list_order = Cow::Borrowed(members);
            if !members.is_sorted() {
                in_list_order.to_mut().sort_unstable();
            }
            for &i in in_list_order.iter() {
                let s = segments[i];
                let to = (s.offset - run.offset) as usize;
                buf[to..to + s.len as usize]
                    .copy_from_slice(&data[starts[i]..starts[i] + s.len as usize]);
            }
            pwritev_all(file, &mut [IoSlice::new(&buf)], run.offset)?;
        } else {
            let mut slices: Vec<IoSlice<'_>> = members
                .iter()
                .map(|&i| IoSlice::new(&data[starts[i]..starts[i] + segments[i].len as usize]))
                .collect();
            pwritev_all(file, &mut slices, run.offset)?;
        }
    }
    Ok(())
}

/// [`write_segments`] of a list that [`ascends`]: its runs are stretches
/// of the list and their bytes stretches of `data`, found in one walk
/// (a view of 32,768 8-byte blocks took about 280 µs through the plan,
/// its index and its buffer offsets, each a pass over the list).
fn write_ascending(file: &File, segments: &[Segment], data: &[u8]) -> io::Result<()> {
    let mut buf: Vec<u8> = Vec::new();
    let mut at = 0usize;
    let mut rest = segments;
    while let Some(first) = rest.iter().position(|s| s.len > 0) {
        rest = &rest[first..];
        // The run: the segments up to the first non-empty one that starts
        // more than BRIDGE past the end of those before it.
        let offset = rest[0].offset;
        let mut end = offset;
        let mut gapped = false;
        let mut bytes = 0usize;
        let mut count = 0usize;
        for s in rest {
            if s.len > 0 {
                if s.offset > end.saturating_add(BRIDGE) {
                    break;
                }
                gapped |= s.offset > end;
                end = s.end();
                bytes += s.len as usize;
            }
            count += 1;
        }
        let (members, later) = rest.split_at(count);
        let run_data = &data[at..at + bytes];
        if gapped {
            // Laid over the bytes the gaps hold now (see BRIDGE).
            buf.clear();
            buf.resize((end - offset) as usize, 0);
            preadv_all(file, &mut [IoSliceMut::new(&mut buf)], offset)?;
            let mut from = 0usize;
            for s in members.iter().filter(|s| s.len > 0) {
                let (to, len) = ((s.offset - offset) as usize, s.len as usize);
                copy_small(&mut buf[to..to + len], &run_data[from..from + len]);
                from += len;
            }
            pwritev_all(file, &mut [IoSlice::new(&buf)], offset)?;
        } else {
            // Touching segments in file order: their bytes are one slice.
            pwritev_all(file, &mut [IoSlice::new(run_data)], offset)?;
        }
        at += bytes;
        rest = later;
    }
    Ok(())
}

/// `dst.copy_from_slice(src)`, with the small lengths of a view's blocks
/// copied in place: up to 16 bytes as two (overlapping) words or a few
/// bytes, where a call to `memcpy` for each 8-byte block cost more than
/// the block (about 2.7 ns a block, a third of writing a view of 8-byte
/// blocks into its run).
fn copy_small(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if dst.len() == n && (8..=16).contains(&n) {
        if let (Some(&head), Some(&tail)) = (src.first_chunk::<8>(), src.last_chunk::<8>()) {
            if let Some(d) = dst.first_chunk_mut::<8>() {
                *d = head;
            }
            if let Some(d) = dst.last_chunk_mut::<8>() {
                *d = tail;
            }
            return;
        }
    }
    if dst.len() == n && n < 8 {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = *s;
        }
        return;
    }
    dst.copy_from_slice(src);
}

/// Deallocates `[offset, offset + len)` without changing the file size.
pub(crate) fn punch(file: &File, offset: u64, len: u64) -> io::Result<()> {
    match rustix::fs::fallocate(
        file,
        FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
        offset,
        len,
    ) {
        Ok(()) => Ok(()),
        // A file system without hole punching: write zeros instead, so
        // the range still reads as zeros.
        Err(Errno::OPNOTSUPP) => {
            let zeros = vec![0u8; len.min(1 << 20) as usize];
            let mut at = offset;
            while at < offset + len {
                let n = (offset + len - at).min(zeros.len() as u64) as usize;
                pwritev_all(file, &mut [IoSlice::new(&zeros[..n])], at)?;
                at += n as u64;
            }
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Fills `bufs` from `offset`; what lies past the end of the file reads
/// as zeros.
fn preadv_all(file: &File, mut bufs: &mut [IoSliceMut<'_>], mut offset: u64) -> io::Result<()> {
    while !bufs.is_empty() {
        let k = bufs.len().min(IOV_MAX);
        match rustix::io::preadv(file, &mut bufs[..k], offset) {
            Ok(0) => {
                // End of file (shorter than the logical length after a
                // crash or a punch at the end): the rest is zeros.
                for b in bufs.iter_mut() {
                    b.fill(0);
                }
                break;
            }
            Ok(n) => {
                offset += n as u64;
                IoSliceMut::advance_slices(&mut bufs, n);
            }
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn pwritev_all(file: &File, mut bufs: &mut [IoSlice<'_>], mut offset: u64) -> io::Result<()> {
    while !bufs.is_empty() {
        let k = bufs.len().min(IOV_MAX);
        match rustix::io::pwritev(file, &bufs[..k], offset) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                offset += n as u64;
                IoSlice::advance_slices(&mut bufs, n);
            }
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
