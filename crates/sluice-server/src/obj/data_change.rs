//! WRITE, APPEND and PUNCH members of a batch frame that run together:
//! each validated into a [`DataChange`], all applied with one store call
//! (`ObjectStore::change_batch`), then each answered.

use sluice_obj_proto::Command;
use sluice_objstore::{
    BatchChange, Changed, Edit, ObjStoreError, ObjectRef, Segment, WriteOptions,
};

use super::attr_work::AttrWork;
use super::execute::{reply_ok, segments_of, ObjExecutor, ObjRequest};
use super::failure::{reply_failure, Failure};
use crate::buffer::ReplyBuf;

/// Which data change a [`DataChange`] is.
#[derive(Clone, Copy)]
enum ChangeKind {
    Write,
    Append,
    Punch,
}

/// A WRITE, APPEND or PUNCH member of a batch frame, validated, waiting
/// to join the one store call that applies its job's changes
/// (`ObjectStore::change_batch`), and then to be answered.
pub(crate) struct DataChange<'a> {
    id: u64,
    object: ObjectRef,
    kind: ChangeKind,
    segments: Vec<Segment>,
    data: &'a [u8],
    opts: WriteOptions,
    attrs: AttrWork<'a>,
}

impl DataChange<'_> {
    /// The change as the store takes it.
    pub(crate) fn change(&self) -> BatchChange<'_> {
        let edit = match self.kind {
            ChangeKind::Write => Edit::Write(&self.segments, self.data),
            ChangeKind::Append => Edit::Append(self.data),
            ChangeKind::Punch => Edit::Punch(&self.segments),
        };
        BatchChange {
            object: self.object,
            edit,
            opts: &self.opts,
        }
    }
}

impl ObjExecutor {
    /// `request` as a [`DataChange`] when it is a WRITE, APPEND or PUNCH
    /// (decoded again from `payload`); `None` for anything else
    /// ([`Execute::execute`] answers a frame that does not decode with its
    /// error). What it does then
    /// is what [`Self::run`] does with it, with the store call shared.
    pub(crate) fn data_change<'a>(
        &self,
        request: &ObjRequest,
        payload: &'a [u8],
    ) -> Option<DataChange<'a>> {
        let req = self.decode(&request.head, payload).ok()?;
        let (kind, object, segments, data) = match req.command {
            Command::Write { object, ddt, data } => {
                (ChangeKind::Write, object, segments_of(&ddt), data)
            }
            Command::Append { object, data } => (ChangeKind::Append, object, Vec::new(), data),
            Command::Punch { object, ddt } => {
                (ChangeKind::Punch, object, segments_of(&ddt), &[][..])
            }
            _ => return None,
        };
        let attrs = AttrWork::split(&req.attrs).ok()?;
        if !attrs.removes.is_empty() {
            return None;
        }
        Some(DataChange {
            id: req.id,
            object: self.object(object),
            kind,
            segments,
            data,
            opts: WriteOptions {
                attrs: attrs.sets.clone(),
                durable: req.fua,
            },
            attrs,
        })
    }

    /// Appends the reply of a [`DataChange`] the store applied with
    /// `result`; returns whether it failed.
    pub(crate) fn answer_change(
        &self,
        request: &ObjRequest,
        change: &DataChange<'_>,
        result: Result<Changed, ObjStoreError>,
        out: &mut ReplyBuf,
    ) -> bool {
        let mut list = Vec::new();
        let answered = result.map_err(Failure::from).and_then(|changed| {
            self.attrs_after(change.object, &change.attrs, &mut list)?;
            Ok(changed)
        });
        match answered {
            Ok(changed) => {
                let at;
                let body: &[u8] = match change.kind {
                    ChangeKind::Append => {
                        at = changed.before.length.to_be_bytes();
                        &at
                    }
                    ChangeKind::Write | ChangeKind::Punch => &[],
                };
                reply_ok(out, change.id, 0, &list, body);
                false
            }
            Err(f) => {
                reply_failure(&request.head, &f, out);
                true
            }
        }
    }
}
