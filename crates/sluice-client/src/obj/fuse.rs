//! Fused requests: temporal merge's one command for many
//! (docs/design/0008-temporal-merge.md). Block requests waiting to be
//! sent together, each one range of the same attached export
//! (EXTENT_READ or EXTENT_WRITE, contiguous, with the same flags), go out
//! as one request whose scatter/gather list names each one's range, in
//! order, whatever their offsets: the "jumbo command" of "SAN
//! Optimization for High Performance Storage with RDMA Data Transfer". The
//! server runs it as one request (one device call for a write), and its
//! one reply is split back among the requests it carried: a read's bytes
//! come in list order, so each takes its own length of them.
//!
//! A fused request succeeds or fails whole: a refusal (a device error on
//! any of its ranges) fails every request in it. Overlapping writes from
//! different callers were concurrent, so either order is theirs; the
//! server applies the later one in the list last.
//!
//! Everything here reads the members' frames as the client encoded them
//! ([`Wire`](super::wire::Wire)) and builds the fused one with the
//! protocol crate's encoder, so nothing here knows the wire layout but
//! the header's fields.

use sluice_obj_proto::consts::{FLAG_DDT_MASK, FLAG_FUA, REQUEST_HEADER_LEN, SGL_ENTRY_LEN};
use sluice_obj_proto::{
    encode_sgl, Command, Ddt, DdtKind, Limits, Opcode, Request, RequestHeader, Segment,
};

use super::wire::RawReply;
use crate::net::mux::Group;

/// What the members of one fused request share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    opcode: Opcode,
    export: u64,
    flags: u16,
}

/// The key and range of a request that can be fused: one contiguous
/// range of an attached export, with no flag but FUA and no regions but
/// a write's data.
fn fusible(frame: &[u8]) -> Option<(Key, Segment)> {
    let h = RequestHeader::decode(frame).ok()??;
    let opcode = Opcode::from_wire(h.opcode)?;
    let data = match opcode {
        Opcode::ExtentRead => 0,
        Opcode::ExtentWrite => h.length,
        _ => return None,
    };
    let plain = DdtKind::from_flags(h.flags) == Some(DdtKind::Contiguous)
        && h.flags & !(FLAG_DDT_MASK | FLAG_FUA) == 0
        && h.ddt_len == 0
        && h.param_len == 0
        && h.attr_len == 0
        && h.length > 0
        && u64::from(h.data_len) == data
        && frame.len() as u64 == REQUEST_HEADER_LEN as u64 + data;
    plain.then_some((
        Key {
            opcode,
            export: h.object,
            flags: h.flags,
        },
        Segment {
            offset: h.offset,
            length: h.length,
        },
    ))
}

/// How the requests about to go out (`frames`, in order) are grouped:
/// runs of two or more that can be fused within `limits` are fused; the
/// others go in batch frames (within the payload and member limits) as
/// they come.
pub(super) fn groups(frames: &[&[u8]], limits: &Limits) -> Vec<Group> {
    let Limits {
        max_payload,
        max_batch,
        max_segments,
        ..
    } = *limits;
    let max_payload = u64::from(max_payload);
    let mut groups = Vec::new();
    let (mut n, mut body) = (0usize, 0u64);
    let mut i = 0;
    while i < frames.len() {
        let run = fusible(frames[i]).map_or(1, |(key, first)| {
            // Members, and the fused request's DDT and data bytes (its
            // total is also what a read's reply carries).
            let (mut k, mut total) = (1, first.length);
            while let Some((next, s)) = frames.get(i + k).and_then(|f| fusible(f)) {
                let ddt = 4 + (k as u64 + 1) * SGL_ENTRY_LEN as u64;
                let fits = next == key
                    && k < max_segments as usize
                    && total + s.length + ddt <= max_payload;
                if !fits {
                    break;
                }
                k += 1;
                total += s.length;
            }
            k
        });
        if run > 1 {
            if n > 0 {
                groups.push(Group::frame(n));
                (n, body) = (0, 0);
            }
            groups.push(Group {
                members: run,
                fused: true,
            });
            i += run;
            continue;
        }
        let len = frames[i].len() as u64;
        if n > 0 && (body + len > max_payload || n as u64 >= u64::from(max_batch)) {
            groups.push(Group::frame(n));
            (n, body) = (0, 0);
        }
        n += 1;
        body += len;
        i += 1;
    }
    if n > 0 {
        groups.push(Group::frame(n));
    }
    groups
}

/// Appends the fused request of `members` (frames [`groups`] fused),
/// under `id`; when they cannot be fused after all (never, for what
/// [`groups`] fused), appends nothing and returns `false`.
pub(super) fn fuse(
    id: u64,
    partition: u64,
    limits: &Limits,
    members: &[&[u8]],
    out: &mut Vec<u8>,
) -> bool {
    let mut segments = Vec::with_capacity(members.len());
    let mut key = None;
    for m in members {
        let Some((k, s)) = fusible(m) else {
            return false;
        };
        if *key.get_or_insert(k) != k {
            return false;
        }
        segments.push(s);
    }
    let Some(key) = key else {
        return false;
    };
    let total = segments.iter().map(|s| s.length).sum();
    let mut raw = Vec::with_capacity(4 + segments.len() * SGL_ENTRY_LEN);
    encode_sgl(&segments, &mut raw);
    let Ok(ddt) = Ddt::parse(DdtKind::Sgl, 0, total, &raw, limits) else {
        return false;
    };
    let command = match key.opcode {
        Opcode::ExtentRead => Command::ExtentRead {
            export: key.export,
            ddt,
        },
        // The data region is the members' own, appended below.
        _ => Command::ExtentWrite {
            export: key.export,
            ddt,
            data: &[],
        },
    };
    let mut request = Request::new(id, command);
    request.fua = key.flags & FLAG_FUA != 0;
    let mut regions = Vec::new();
    let Ok(mut header) = request.encode_head(partition, &mut regions) else {
        return false;
    };
    let write = key.opcode == Opcode::ExtentWrite;
    if write {
        header.data_len = total as u32;
    }
    header.encode(out);
    out.extend_from_slice(&regions);
    if write {
        for m in members {
            out.extend_from_slice(&m[REQUEST_HEADER_LEN..]);
        }
    }
    true
}

/// The fused reply `reply` split among its members, whose reads expect
/// `lens` bytes each (0 for writes); `None` if its body is not theirs.
pub(super) fn split(reply: RawReply, lens: &[u64]) -> Option<Vec<RawReply>> {
    let want: u64 = lens.iter().sum();
    if reply.span || reply.body.len() as u64 != want {
        return None;
    }
    let mut at = 0usize;
    Some(
        lens.iter()
            .map(|&len| {
                let len = len as usize;
                let body = reply.body[at..at + len].to_vec();
                at += len;
                RawReply {
                    real_bytes: len as u64,
                    attrs: Vec::new(),
                    body,
                    span: false,
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn limits() -> Limits {
        Limits {
            max_segments: 4,
            max_payload: 1 << 20,
            max_batch: 64,
            ..Limits::default()
        }
    }

    fn frame(command: Command<'_>, fua: bool) -> Vec<u8> {
        let mut r = Request::new(7, command);
        r.fua = fua;
        let mut out = Vec::new();
        r.encode(1, &mut out).expect("encode");
        out
    }

    fn write(export: u64, offset: u64, data: &[u8]) -> Vec<u8> {
        let ddt = Ddt::Contiguous(Segment {
            offset,
            length: data.len() as u64,
        });
        frame(Command::ExtentWrite { export, ddt, data }, false)
    }

    fn read(export: u64, offset: u64, length: u64) -> Vec<u8> {
        let ddt = Ddt::Contiguous(Segment { offset, length });
        frame(Command::ExtentRead { export, ddt }, false)
    }

    #[test]
    fn runs_of_one_export_and_kind_fuse_and_the_rest_batch() {
        let f = [
            write(1, 0, b"aa"),
            write(1, 100, b"bb"),
            write(2, 0, b"cc"),
            read(2, 0, 8),
            read(2, 50, 8),
            read(2, 90, 8),
            frame(
                Command::Flush(sluice_obj_proto::FlushScope::Partition),
                false,
            ),
            write(1, 0, b"dd"),
        ];
        let frames: Vec<&[u8]> = f.iter().map(|v| &v[..]).collect();
        let fused = |members| Group {
            members,
            fused: true,
        };
        assert_eq!(
            groups(&frames, &limits()),
            [fused(2), Group::frame(1), fused(3), Group::frame(2)]
        );
        // At most max_segments members; FUA and plain do not mix.
        let f: Vec<Vec<u8>> = (0..6).map(|k| write(1, k * 10, b"x")).collect();
        let frames: Vec<&[u8]> = f.iter().map(|v| &v[..]).collect();
        assert_eq!(groups(&frames, &limits()), [fused(4), fused(2)]);
        let ddt = Ddt::Contiguous(Segment {
            offset: 0,
            length: 1,
        });
        let durable = frame(
            Command::ExtentWrite {
                export: 1,
                ddt,
                data: b"y",
            },
            true,
        );
        let frames: Vec<&[u8]> = vec![&f[0], &durable];
        assert_eq!(groups(&frames, &limits()), [Group::frame(2)]);
    }

    #[test]
    fn a_fused_write_is_one_sgl_request_the_server_reads_back_as_theirs() {
        let f = [write(3, 4096, b"first"), write(3, 0, b"second")];
        let frames: Vec<&[u8]> = f.iter().map(|v| &v[..]).collect();
        let mut out = Vec::new();
        assert!(fuse(99, 1, &limits(), &frames, &mut out));
        let h = RequestHeader::decode(&out).expect("header").expect("whole");
        assert_eq!(h.id, 99);
        let req = Request::decode(&h, &out[REQUEST_HEADER_LEN..], &limits()).expect("valid");
        let Command::ExtentWrite { export, ddt, data } = req.command else {
            panic!("not a write: {req:?}");
        };
        assert_eq!(export, 3);
        assert_eq!(data, b"firstsecond");
        let segs: Vec<Segment> = ddt.segments().collect();
        assert_eq!(
            segs,
            [
                Segment {
                    offset: 4096,
                    length: 5
                },
                Segment {
                    offset: 0,
                    length: 6
                }
            ]
        );
    }

    #[test]
    fn a_fused_read_reply_is_split_in_list_order() {
        let reply = RawReply {
            real_bytes: 7,
            body: b"abcdefg".to_vec(),
            ..RawReply::default()
        };
        let parts = split(reply, &[3, 4]).expect("theirs");
        assert_eq!(parts[0].body, b"abc");
        assert_eq!(parts[1].body, b"defg");
        let short = RawReply {
            body: b"ab".to_vec(),
            ..RawReply::default()
        };
        assert!(split(short, &[3]).is_none());
        let writes = split(RawReply::default(), &[0, 0]).expect("writes");
        assert_eq!(writes.len(), 2);
    }

    /// One generated request: a write (with FUA or not) or a read of
    /// `len` bytes at `offset` of export 1 or 2.
    fn request() -> impl Strategy<Value = (bool, bool, u64, u64, u64)> {
        (
            any::<bool>(),
            any::<bool>(),
            1u64..3,
            0u64..1 << 20,
            1u64..3000,
        )
    }

    proptest! {
        /// Whatever the queue holds, the groups cover it in order within
        /// the limits, and every fused group's request, decoded by the
        /// protocol crate as the server decodes it, is its members'
        /// ranges and bytes in order.
        #[test]
        fn fused_requests_are_their_members(
            reqs in prop::collection::vec(request(), 1..40),
            max_segments in 2u32..6,
        ) {
            let limits = Limits {
                max_segments,
                max_payload: 16 << 10,
                ..limits()
            };
            let f: Vec<Vec<u8>> = reqs
                .iter()
                .enumerate()
                .map(|(k, &(write, fua, export, offset, len))| {
                    let ddt = Ddt::Contiguous(Segment { offset, length: len });
                    let data = pattern(k as u64, len as usize);
                    let command = if write {
                        Command::ExtentWrite { export, ddt, data: &data }
                    } else {
                        Command::ExtentRead { export, ddt }
                    };
                    frame(command, fua && write)
                })
                .collect();
            let frames: Vec<&[u8]> = f.iter().map(|v| &v[..]).collect();
            let groups = groups(&frames, &limits);
            prop_assert_eq!(groups.iter().map(|g| g.members).sum::<usize>(), frames.len());
            let mut at = 0;
            for g in groups {
                let members = &frames[at..at + g.members];
                at += g.members;
                if !g.fused {
                    continue;
                }
                prop_assert!(g.members >= 2 && g.members <= max_segments as usize);
                let mut out = Vec::new();
                prop_assert!(fuse(5, 1, &limits, members, &mut out));
                let h = RequestHeader::decode(&out).unwrap().unwrap();
                prop_assert_eq!(out.len() as u64, REQUEST_HEADER_LEN as u64 + h.payload_len());
                let req = Request::decode(&h, &out[REQUEST_HEADER_LEN..], &limits);
                prop_assert!(req.is_ok(), "{:?}", req);
                let req = req.unwrap();
                let (first, _) = fusible(members[0]).unwrap();
                prop_assert_eq!(req.fua, first.flags & FLAG_FUA != 0);
                let ddt = req.command.ddt().unwrap();
                let segs: Vec<Segment> = ddt.segments().collect();
                let mut data = Vec::new();
                for (m, s) in members.iter().zip(&segs) {
                    let (key, seg) = fusible(m).unwrap();
                    prop_assert_eq!(key, first);
                    prop_assert_eq!(seg, *s);
                    if key.opcode == Opcode::ExtentWrite {
                        data.extend_from_slice(&m[REQUEST_HEADER_LEN..]);
                    }
                }
                prop_assert_eq!(segs.len(), members.len());
                prop_assert_eq!(req.command.data(), &data[..]);
            }
        }
    }

    fn pattern(seed: u64, len: usize) -> Vec<u8> {
        (0..len as u64).map(|i| (seed * 31 + i) as u8).collect()
    }
}
