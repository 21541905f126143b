//! Large plain READs answered on the connection thread from the
//! object's file: the reply's data goes from the page cache to the
//! socket with `sendfile`, with no hand-off to the I/O pool and no copy
//! into a reply buffer (NBD's mapped reads do the same for exports; see
//! docs/design/0006-object-server.md for what a reader may see while a
//! write to the same range runs).

use std::os::fd::AsFd;
use std::time::Instant;

use sluice_obj_proto::{DdtKind, ReplyHeader};
use sluice_objstore::{ObjectId, ObjectRef, PartitionId};

use super::execute::ObjRequest;
use super::ObjSession;
use crate::config::PipelineMode;
use crate::driver::{Dispatch, Execute};
use crate::metrics::ObjCommand;

/// Reads at least this long are sent from the file when they can be;
/// shorter ones cost less copied and batched with other replies (NBD's
/// mapped reads draw the line at the same length).
const FILE_READ_MIN: u64 = 128 * 1024;

/// A READ without attribute entries (whose data may be read without
/// its attributes: docs/protocol.md, section 6).
fn plain_read(request: &ObjRequest) -> bool {
    request.command == ObjCommand::Read && request.head.attr_len == 0
}

impl ObjSession {
    /// Whether [`file_read`](Self::file_read) may answer `request`.
    fn may_send_from_file(request: &ObjRequest, d: &Dispatch) -> bool {
        plain_read(request)
            && request.ddt == DdtKind::Contiguous
            && request.bytes >= FILE_READ_MIN
            && d.pipeline() == PipelineMode::Flexible
            && d.is_plain()
    }

    /// Whether `request` is a READ to try on the connection thread, read
    /// into the reply batch if the store can answer it without waiting
    /// (else it goes to the pool): plain reads the file path does not
    /// take (scatter/gather, strided, small).
    pub(super) fn reads_inline(&self, request: &ObjRequest, d: &Dispatch) -> bool {
        plain_read(request) && !Self::may_send_from_file(request, d)
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
        if !Self::may_send_from_file(request, d) {
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
