//! Large plain READs answered on the connection thread from the
//! object's file: the reply's data goes from the page cache to the
//! socket, with no hand-off to the I/O pool and no copy into a reply
//! buffer: one range with `sendfile`, a scatter/gather or strided list
//! with one `writev` of a piece of a shared mapping of the file per
//! segment, or, when the client takes a span reply and the segments
//! ascend closely enough, their whole span with `sendfile` as one range
//! (NBD's mapped reads do the same for one range of an export;
//! see docs/design/0006-object-server.md for what a reader may see while
//! a write to the same range runs, and why a list is copied into the
//! socket rather than spliced). A connection keeps the mapping of the
//! file it last sent a list from ([`ListMapping`]).

use std::fs::File;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use sluice_obj_proto::{Command, DdtKind, Opcode, ReplyHeader, Request};
use sluice_objstore::{ObjectId, ObjectRef, PartitionId};
use sluice_storage::MappedBytes;

use super::execute::ObjRequest;
use super::ObjSession;
use crate::config::PipelineMode;
use crate::driver::{Dispatch, Execute};

/// Reads at least this long are sent from the file when they can be;
/// shorter ones cost less copied and batched with other replies (NBD's
/// mapped reads draw the line at the same length).
const FILE_READ_MIN: u64 = 128 * 1024;

/// The shared mapping of the object file a connection last sent a list
/// read from, kept for its next one: a fresh mapping per request cost an
/// `mmap`, page faults as the kernel copied from it and an `munmap`
/// (with its TLB flush) each time. Which bytes a reply carries does not depend on it:
/// each read is lent the file by the store first, under the same rule
/// as a fresh mapping, and only then sent from this one if the file is
/// the same. Holding it keeps the file open, so a removed object's
/// space is given back once the connection reads a list of another
/// object, or closes.
#[derive(Debug)]
pub(super) struct ListMapping {
    file: Arc<File>,
    map: MappedBytes,
}

impl ListMapping {
    /// `held` (and true) if it maps `file` at least up to `end`, else a
    /// new mapping of `file` (the old one unmapped first); `None` if the
    /// file cannot be mapped.
    fn covering(held: Option<Self>, file: Arc<File>, end: u64) -> Option<(Self, bool)> {
        if let Some(m) = held {
            if Arc::ptr_eq(&m.file, &file) && m.map.len() as u64 >= end {
                return Some((m, true));
            }
        }
        // Up to the file's end (at least to `end`), so a list of another
        // part of the same object finds it mapped too. Pages past the
        // file's end are never sent: the store lends only ranges inside
        // the object's length.
        let len = file.metadata().map_or(end, |m| m.len().max(end));
        let map = MappedBytes::map(&file, len).ok()?;
        Some((Self { file, map }, false))
    }
}

/// A READ without attribute entries (whose data may be read without
/// its attributes: docs/protocol.md, section 6).
fn plain_read(request: &ObjRequest) -> bool {
    request.op == Opcode::Read && request.head.attr_len == 0
}

impl ObjSession {
    /// Whether [`file_read`](Self::file_read) may answer `request`.
    fn may_send_from_file(&self, request: &ObjRequest, d: &Dispatch) -> bool {
        self.sends_from_file
            && plain_read(request)
            && request.ddt == DdtKind::Contiguous
            && request.bytes >= FILE_READ_MIN
            && d.pipeline() == PipelineMode::Flexible
            && d.is_plain()
    }

    /// Whether `request` is a READ to try on the connection thread, read
    /// into the reply batch if the store can answer it without waiting
    /// (else it goes to the pool): plain reads the file path does not
    /// take (scatter/gather and strided reads the mapped path declined,
    /// small reads).
    pub(super) fn reads_inline(&self, request: &ObjRequest, d: &Dispatch) -> bool {
        plain_read(request) && !self.may_send_from_file(request, d)
    }

    /// Answers a large scatter/gather or strided READ with no attribute
    /// entries from the object's file: its segments' span with `sendfile`
    /// if the client takes a span reply and the span is dense
    /// ([`Ddt::dense_span`](sluice_obj_proto::Ddt::dense_span)), else from a
    /// shared mapping of the file (the one the connection kept, if it is
    /// of the same file and long enough), one piece per segment in list
    /// order; either when the store lends the file for
    /// the segments' whole span (as [`file_read`](Self::file_read) does
    /// for one range) on a plain socket in completion order. Returns false,
    /// having sent nothing, otherwise (the caller then runs it as
    /// before).
    pub(super) fn mapped_read(
        &mut self,
        req: &Request<'_>,
        request: &ObjRequest,
        received: Instant,
        d: &mut Dispatch,
    ) -> bool {
        if !(self.sends_from_file
            && plain_read(request)
            && request.ddt != DdtKind::Contiguous
            && request.bytes >= FILE_READ_MIN
            && d.pipeline() == PipelineMode::Flexible
            && d.is_plain())
        {
            return false;
        }
        let h = &request.head;
        let Command::Read { ddt, .. } = req.command else {
            return false;
        };
        let mut span: Option<(u64, u64)> = None;
        for s in ddt.segments() {
            let Some(end) = s.offset.checked_add(s.length) else {
                return false;
            };
            span = Some(span.map_or((s.offset, end), |(a, b)| (a.min(s.offset), b.max(end))));
        }
        let Some((start, end)) = span else {
            return false;
        };
        let object = ObjectRef {
            partition: PartitionId(self.exec.session.partition),
            object: ObjectId(h.object),
        };
        // Every segment lies inside the object's length and the page
        // cache: no zeros to add, nothing to wait for.
        let Some(file) = self.exec.store.lend_resident(object, start, end - start) else {
            return false;
        };
        // Validated: a READ's total is within the published payload
        // limit (a `u32`).
        let len = request.bytes as u32;
        if req.span_ok {
            // The client takes the segments' span, holes included: it goes
            // from the page cache to the socket by reference, as a
            // contiguous read does, where a list must be copied.
            let spanned = ddt.dense_span().and_then(|span| {
                let span_len = u32::try_from(span.length).ok()?;
                (span_len <= self.exec.session.limits.max_payload).then_some((span, span_len))
            });
            if let Some((span, span_len)) = spanned {
                self.reply_header.clear();
                ReplyHeader::ok(h.id, request.bytes, 0, span_len)
                    .spanned()
                    .encode(&mut self.reply_header);
                // Counted before the reply goes, so whoever reads the
                // reply finds it counted.
                self.exec.metrics.objects.record_span_read();
                let failed = d
                    .send_file(
                        &self.reply_header,
                        file.as_fd(),
                        span.offset,
                        span_len as usize,
                    )
                    .is_err();
                self.exec.completed(request, failed, received.elapsed());
                return true;
            }
        }
        let Some((mapping, kept)) = ListMapping::covering(self.list_map.take(), file, end) else {
            return false;
        };
        let map = &self.list_map.insert(mapping).map;
        let mut pieces = Vec::with_capacity(request.segments as usize);
        for s in ddt.segments() {
            let Some(piece) = usize::try_from(s.length)
                .ok()
                .and_then(|len| map.iovec(s.offset, len))
            else {
                return false;
            };
            pieces.push(piece);
        }
        self.reply_header.clear();
        ReplyHeader::ok(h.id, request.bytes, 0, len).encode(&mut self.reply_header);
        // `map` stays mapped until after the send (it is kept for the
        // next list read).
        let failed = d.send_mapped_pieces(&self.reply_header, &pieces).is_err();
        d.metrics().mapped_reads.fetch_add(1, Ordering::Relaxed);
        if kept {
            d.metrics()
                .kept_mapping_reads
                .fetch_add(1, Ordering::Relaxed);
        }
        self.exec.completed(request, failed, received.elapsed());
        true
    }

    /// Answers a READ of one contiguous range with no attribute entries
    /// by sending it straight from the object's file, when the store
    /// lends the file (the object is cached, unchanged at the moment,
    /// the range inside its length and in the page cache: see
    /// `ObjectStore::lend_resident`) on a plain socket in completion
    /// order. Returns false, having sent nothing, otherwise.
    pub(super) fn file_read(
        &mut self,
        request: &ObjRequest,
        received: Instant,
        d: &mut Dispatch,
    ) -> bool {
        let h = &request.head;
        if !self.may_send_from_file(request, d) {
            return false;
        }
        let object = ObjectRef {
            partition: PartitionId(self.exec.session.partition),
            object: ObjectId(h.object),
        };
        let Some(file) = self.exec.store.lend_resident(object, h.offset, h.length) else {
            return false;
        };
        // Validated: a contiguous READ's length is its total, within the
        // published payload limit (a `u32`).
        let len = h.length as u32;
        self.reply_header.clear();
        ReplyHeader::ok(h.id, h.length, 0, len).encode(&mut self.reply_header);
        let failed = d
            .send_file(&self.reply_header, file.as_fd(), h.offset, len as usize)
            .is_err();
        self.exec.completed(request, failed, received.elapsed());
        true
    }
}
