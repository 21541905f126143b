//! Commands that do not fit one request, cut to the server's limits:
//! reads and writes in pieces (in flight together, attributes with the
//! first or last), creates of many objects, appends and
//! create-and-writes whose data outgrows one payload. Both object
//! clients split so: each is a [`Carrier`], and [`Split`] is written
//! once over it.

use std::io::{IoSlice, IoSliceMut};

use sluice_obj_proto::{Opcode, Segment};

use super::attr::{AttrChange, Attrs};
use super::codec::{check_name, data_command, in_collection, refused, subject, Codec};
use super::error::Subject;
use super::gather::{scatter, total_mut, Payload};
use super::plan::pieces_overlap;
use super::request::{DataOptions, ObjRequest, ObjResponse, ReadReply};
use super::wire::{RawReply, Wire};
use super::ObjError;
use crate::Durability;

/// What splitting needs of a client.
pub(super) trait Carrier {
    /// How requests are encoded for this client's session.
    fn codec(&self) -> Codec<'_>;
    /// Every wire in flight together; the first failure wins.
    fn all(&mut self, wires: &[Wire<'_>]) -> Result<Vec<RawReply>, ObjError>;
    /// Runs one command, split as needed.
    fn run(&mut self, req: &ObjRequest<'_>) -> Result<ObjResponse, ObjError>;

    /// Takes back a read's buffer, done with (a client that keeps them
    /// for later large reads does; others drop it).
    fn recycle(&mut self, _data: Vec<u8>) {}

    /// Pieces of a write or punch: in flight together unless two
    /// overlap, then one at a time.
    fn in_order(&mut self, wires: Vec<Wire<'_>>, overlap: bool) -> Result<(), ObjError> {
        if overlap {
            for w in wires {
                self.all(std::slice::from_ref(&w))?;
            }
            Ok(())
        } else {
            self.all(&wires).map(drop)
        }
    }

    fn violation(&self, reason: impl Into<String>) -> ObjError {
        self.codec().violation(reason)
    }

    fn get_attrs(&mut self, object: u64, keys: &[&str]) -> Result<Attrs, ObjError> {
        match self.run(&ObjRequest::GetAttrs { object, keys })? {
            ObjResponse::Attrs(a) => Ok(a),
            other => Err(self.violation(format!("GET_ATTRS answered {other:?}"))),
        }
    }

    fn set_attrs(
        &mut self,
        object: u64,
        changes: &[AttrChange],
        durability: Durability,
    ) -> Result<(), ObjError> {
        self.run(&ObjRequest::SetAttrs {
            object,
            changes,
            durability,
        })
        .map(drop)
    }
}

/// Cutting commands to the server's limits, for any [`Carrier`].
pub(super) trait Split: Carrier {
    /// Runs a command that does not fit one request, cut as the
    /// server's limits require.
    fn run_split(&mut self, req: &ObjRequest<'_>) -> Result<ObjResponse, ObjError> {
        match *req {
            ObjRequest::Create {
                collection,
                count,
                durability,
            } => self.create_split(req, collection, count, durability),
            ObjRequest::Read {
                object,
                segments,
                get,
            } => {
                let s = subject(Opcode::Read, object);
                self.read_pieces(s, Opcode::Read, object, segments, get)
                    .map(ObjResponse::Read)
            }
            ObjRequest::ExtentRead { export, segments } => {
                let s = self.codec().extent_subject(Opcode::ExtentRead, export);
                self.read_pieces(s, Opcode::ExtentRead, export, segments, &[])
                    .map(ObjResponse::Read)
            }
            ObjRequest::ExtentWrite {
                export,
                segments,
                data,
                durability,
            } => {
                let s = self.codec().extent_subject(Opcode::ExtentWrite, export);
                let options = DataOptions {
                    durability,
                    attrs: Vec::new(),
                };
                self.write_pieces(
                    &s,
                    Opcode::ExtentWrite,
                    export,
                    segments,
                    data.into(),
                    &options,
                )?;
                Ok(ObjResponse::Done)
            }
            ObjRequest::Write {
                object,
                segments,
                data,
                options,
            } => {
                let s = subject(Opcode::Write, object);
                self.write_pieces(&s, Opcode::Write, object, segments, data.into(), options)?;
                Ok(ObjResponse::Done)
            }
            ObjRequest::Punch {
                object,
                segments,
                options,
            } => {
                let s = subject(Opcode::Punch, object);
                self.write_pieces(
                    &s,
                    Opcode::Punch,
                    object,
                    segments,
                    Payload::default(),
                    options,
                )?;
                Ok(ObjResponse::Done)
            }
            ObjRequest::Append {
                object,
                data,
                options,
            } => self.append_split(object, data, options),
            ObjRequest::CreateAndWrite {
                collection,
                segments,
                data,
                options,
            } => self.create_and_write_split(collection, segments, data, options),
            // Everything else is always one request; `single` refused it
            // for a reason it reports itself.
            _ => Err(self.violation("a request that cannot be split did not fit one frame")),
        }
    }

    /// CREATE of more objects than one request may make: one request
    /// per `max_segments`, pipelined, the ids in order.
    fn create_split(
        &mut self,
        req: &ObjRequest<'_>,
        collection: &str,
        count: u32,
        durability: Durability,
    ) -> Result<ObjResponse, ObjError> {
        let s = in_collection(Opcode::Create, collection);
        if count == 0 {
            return Err(refused(s, "a count of 0 creates nothing"));
        }
        let step = self.codec().limits().max_segments.max(1);
        let counts: Vec<u32> = (0..count)
            .step_by(step as usize)
            .map(|start| step.min(count - start))
            .collect();
        let mut wires = Vec::with_capacity(counts.len());
        for c in counts {
            let req = ObjRequest::Create {
                collection,
                count: c,
                durability,
            };
            match self.codec().single(&req)? {
                Some(w) => wires.push(w),
                None => return Err(refused(s, "the server's limits allow no CREATE")),
            }
        }
        let mut ids = Vec::with_capacity(count as usize);
        for r in self.all(&wires)? {
            match self.codec().interpret(req, r)? {
                ObjResponse::Created(v) => ids.extend(v),
                other => return Err(self.violation(format!("CREATE answered {other:?}"))),
            }
        }
        Ok(ObjResponse::Created(ids))
    }

    /// APPEND of more than one request carries: the first piece is
    /// appended, the rest written after it, attributes with the last.
    fn append_split(
        &mut self,
        object: u64,
        data: &[u8],
        options: &DataOptions,
    ) -> Result<ObjResponse, ObjError> {
        // The first piece is appended; the rest is written after
        // it, attributes with the last piece.
        let s = subject(Opcode::Append, object);
        self.codec().change_list(&s, &options.attrs)?;
        let first_len =
            (u64::from(self.codec().limits().max_payload).min(data.len() as u64)) as usize;
        let (first, rest) = data.split_at(first_len);
        let plain = DataOptions {
            durability: options.durability,
            attrs: Vec::new(),
        };
        let at = match self.run(&ObjRequest::Append {
            object,
            data: first,
            options: &plain,
        })? {
            ObjResponse::Offset(at) => at,
            other => return Err(self.violation(format!("APPEND answered {other:?}"))),
        };
        let seg = [Segment {
            offset: at + first_len as u64,
            length: rest.len() as u64,
        }];
        self.write_pieces(&s, Opcode::Write, object, &seg, rest.into(), options)?;
        Ok(ObjResponse::Offset(at))
    }

    /// CREATE_AND_WRITE of more than one request carries: the object is
    /// made with the first piece and the rest written into it.
    fn create_and_write_split(
        &mut self,
        collection: &str,
        segments: &[Segment],
        data: &[u8],
        options: &DataOptions,
    ) -> Result<ObjResponse, ObjError> {
        // Create with the first piece; write the rest into it.
        let s = in_collection(Opcode::CreateAndWrite, collection);
        let a = self.codec().change_list(&s, &options.attrs)?;
        check_name(&s, collection)?;
        let merged = self.codec().segments(&s, segments)?;
        let pieces = self
            .codec()
            .pieces(&s, &merged, a.len() + 1 + collection.len())?;
        let Some((first, rest)) = pieces.split_first() else {
            return Err(self.violation("nothing to create"));
        };
        let first_len: u64 = first.iter().map(|s| s.length).sum();
        let (head, tail) = data
            .split_at_checked(first_len as usize)
            .ok_or_else(|| refused(s.clone(), "fewer data bytes than the segments take"))?;
        let plain = DataOptions {
            durability: options.durability,
            attrs: Vec::new(),
        };
        let id = match self.run(&ObjRequest::CreateAndWrite {
            collection,
            segments: first,
            data: head,
            options: &plain,
        })? {
            ObjResponse::Object(id) => id,
            other => return Err(self.violation(format!("CREATE_AND_WRITE answered {other:?}"))),
        };
        let rest: Vec<Segment> = rest.iter().flat_map(|p| p.iter()).copied().collect();
        self.write_pieces(
            &subject(Opcode::Write, id),
            Opcode::Write,
            id,
            &rest,
            tail.into(),
            options,
        )?;
        Ok(ObjResponse::Object(id))
    }

    /// Reads `segments` (of an object, or of an attached export), cut
    /// as the limits require; attributes `get` come with the first piece.
    fn read_pieces(
        &mut self,
        s: Subject,
        op: Opcode,
        object: u64,
        segments: &[Segment],
        get: &[&str],
    ) -> Result<ReadReply, ObjError> {
        let merged = self.codec().segments(&s, segments)?;
        if merged.is_empty() {
            let attrs = if get.is_empty() {
                Attrs::default()
            } else {
                self.get_attrs(object, get)?
            };
            return Ok(ReadReply {
                attrs,
                ..ReadReply::default()
            });
        }
        let a = self.codec().get_list(&s, get)?;
        let pieces = self.codec().pieces(&s, &merged, a.len())?;
        let wires: Vec<Wire<'_>> = pieces
            .iter()
            .enumerate()
            .map(|(i, p)| {
                // Attributes are read with the first piece.
                let a = if i == 0 { a.clone() } else { Vec::new() };
                self.codec().data_wire(
                    s.clone(),
                    data_command(op, object),
                    p,
                    &a,
                    Payload::default(),
                    Durability::Buffered,
                )
            })
            .collect::<Result<_, _>>()?;
        let total: u64 = merged.iter().map(|s| s.length).sum();
        let mut out = ReadReply {
            data: Vec::with_capacity(total as usize),
            ..ReadReply::default()
        };
        for (i, (r, w)) in self.all(&wires)?.into_iter().zip(&wires).enumerate() {
            if r.body.len() as u64 != w.header.length {
                return Err(self.violation(format!(
                    "READ reply of {} bytes for {} requested",
                    r.body.len(),
                    w.header.length
                )));
            }
            if i == 0 {
                out.attrs = Attrs::decode(&r.attrs, self.codec().limits().max_attr_size).map_err(
                    |source| ObjError::Protocol {
                        server: self.codec().server.to_owned(),
                        source,
                    },
                )?;
            }
            out.real_bytes += r.real_bytes;
            out.data.extend_from_slice(&r.body);
        }
        Ok(out)
    }

    /// Writes (or punches) `segments`, cut as the limits require, the
    /// pieces in flight together; attributes ride on the last piece, sent
    /// once the others succeeded.
    fn write_pieces(
        &mut self,
        s: &Subject,
        op: Opcode,
        object: u64,
        segments: &[Segment],
        data: Payload<'_>,
        options: &DataOptions,
    ) -> Result<(), ObjError> {
        let carries = matches!(op, Opcode::Write | Opcode::ExtentWrite);
        if carries {
            self.codec().check_data_len(s, segments, data.len())?;
        }
        let a = self.codec().change_list(s, &options.attrs)?;
        let merged = self.codec().segments(s, segments)?;
        if merged.is_empty() {
            if !options.attrs.is_empty() {
                return self.set_attrs(object, &options.attrs, options.durability);
            }
            return Ok(());
        }
        let pieces = self.codec().pieces(s, &merged, a.len())?;
        let overlap = pieces_overlap(&pieces);
        let mut wires = Vec::with_capacity(pieces.len());
        let mut at = 0usize;
        let last = pieces.len() - 1;
        for (i, p) in pieces.iter().enumerate() {
            let chunk = match (carries, pieces.len()) {
                (false, _) => Payload::default(),
                // The only piece moves every byte (checked above).
                (true, 1) => data.clone(),
                (true, _) => {
                    let len: u64 = p.iter().map(|s| s.length).sum();
                    data.cut(at, len as usize).ok_or_else(|| {
                        refused(s.clone(), "fewer data bytes than the segments take")
                    })?
                }
            };
            at += chunk.len();
            let attrs = if i == last { a.clone() } else { Vec::new() };
            wires.push(self.codec().data_wire(
                s.clone(),
                data_command(op, object),
                p,
                &attrs,
                chunk,
                options.durability,
            )?);
        }
        // Attributes must not change unless the data landed: their piece
        // waits for the others. Without them every piece goes at once.
        let tail = if a.is_empty() { None } else { wires.pop() };
        self.in_order(wires, overlap)?;
        if let Some(w) = tail {
            self.all(std::slice::from_ref(&w))?;
        }
        Ok(())
    }

    /// Writes the bytes of `bufs`, in order, over `segments` of
    /// `object`, split as [`write_pieces`](Self::write_pieces) splits; no
    /// byte is copied to gather them here (each piece's wire names the
    /// parts of the buffers it sends).
    fn write_gathered(
        &mut self,
        object: u64,
        segments: &[Segment],
        bufs: &[IoSlice<'_>],
        options: &DataOptions,
    ) -> Result<(), ObjError> {
        let s = subject(Opcode::Write, object);
        // The same check a write of one buffer gets (its data is not
        // looked at).
        let req = ObjRequest::Write {
            object,
            segments,
            data: &[],
            options,
        };
        self.codec().check_attrs_on_data(&req)?;
        self.write_pieces(
            &s,
            Opcode::Write,
            object,
            segments,
            Payload::gather(bufs),
            options,
        )
    }

    /// Reads `segments` of `object` into `bufs`, in order; their lengths
    /// must add up to the segments' (refused before anything is sent).
    /// Returns how many of the bytes lie below the object's length.
    fn read_scattered(
        &mut self,
        object: u64,
        segments: &[Segment],
        bufs: &mut [IoSliceMut<'_>],
    ) -> Result<u64, ObjError> {
        let s = subject(Opcode::Read, object);
        let want = segments
            .iter()
            .try_fold(0u64, |t, s| t.checked_add(s.length));
        let have = total_mut(bufs);
        if want.is_none() || want != have {
            return Err(refused(
                s,
                format!(
                    "buffers of {} bytes for segments totalling {}",
                    have.map_or_else(|| "more than 2^64".into(), |h| h.to_string()),
                    want.map_or_else(|| "more than 2^64".into(), |w| w.to_string())
                ),
            ));
        }
        let reply = self.read_pieces(s, Opcode::Read, object, segments, &[])?;
        // One copy, out of the reply's body: replies are received into
        // buffers of the connection (on another thread for the shared
        // client), which the caller's buffers cannot be handed to.
        scatter(&reply.data, bufs);
        let real = reply.real_bytes;
        self.recycle(reply.data);
        Ok(real)
    }
}

impl<C: Carrier> Split for C {}
