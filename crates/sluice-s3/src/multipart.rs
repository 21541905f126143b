//! Multipart uploads: an upload is an empty marker object
//! `.s3-uploads/BUCKET/ID` (its attributes: the key, and the headers
//! and metadata the finished object gets), each part a striped object
//! `.s3-parts/ID/NNNNN` (put like any object, invisible until complete).
//! Completing checks the parts (ascending, each named part there with
//! its ETag, every part but the last at least 5 MiB), then puts their
//! data one after another as the object (with `begin_put`, so it appears
//! whole or not at all), with the ETag `MD5-of-part-MD5s-N`, and removes
//! the parts and the marker. Neither prefix can be a bucket's (bucket
//! names start with a letter or digit).
//!
//! UploadPartCopy puts a byte range of an existing object as a part,
//! copied on the blocking pool like CopyObject.
//!
//! Not yet: completing without copying the parts' data (a layout made
//! of the parts' pieces).

use std::collections::BTreeMap;
use std::sync::Arc;

use md5::{Digest, Md5};
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};
use sluice_client::striped::{Shape, StripedClient, StripedError};
use sluice_meta::{Entry, EntryState, MetaError};

use crate::data::{self, hex};
use crate::error::GatewayError;
use crate::names::object_name;
use crate::ops::{etag_of, timestamp, Conditions, Gateway, Headers};
use crate::store::{mtime_ms, now_ms, text_attr, Store, ATTR_MTIME};

const UPLOADS: &str = ".s3-uploads/";
const PARTS: &str = ".s3-parts/";
/// The key an upload's object gets.
const ATTR_UPLOAD_KEY: &str = "s3.upload.key";
/// Smallest part but the last.
const MIN_PART: u64 = 5 << 20;
/// S3's part numbers.
const PART_NUMBERS: std::ops::RangeInclusive<i32> = 1..=10_000;

/// Refuses a part number S3 does not allow.
fn check_part_number(part: i32) -> S3Result<()> {
    if PART_NUMBERS.contains(&part) {
        Ok(())
    } else {
        Err(s3s::s3_error!(
            InvalidArgument,
            "a part number is 1 to 10000"
        ))
    }
}

fn marker(bucket: &str, id: &str) -> String {
    format!("{UPLOADS}{bucket}/{id}")
}

fn part_prefix(id: &str) -> String {
    format!("{PARTS}{id}/")
}

fn part_name(id: &str, part: i32) -> String {
    format!("{PARTS}{id}/{part:05}")
}

/// The part number of a part's name.
fn part_number(name: &str) -> Option<i32> {
    name.rsplit('/').next()?.parse().ok()
}

/// An ETag's bytes (its hex digits), for the multipart ETag.
fn etag_bytes(etag: &str) -> Option<Vec<u8>> {
    let hex = etag.trim_matches('"');
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

impl Store {
    /// The ready marker of upload `id` of `key` in `bucket`.
    fn upload(&self, bucket: &str, key: &str, id: &str) -> Result<Entry, GatewayError> {
        let missing = || GatewayError::NoSuchUpload { id: id.to_owned() };
        if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(missing());
        }
        self.bucket(bucket)?;
        match self.meta.lookup(&marker(bucket, id)) {
            Ok(e)
                if e.state == EntryState::Ready
                    && text_attr(&e, ATTR_UPLOAD_KEY).as_deref() == Some(key) =>
            {
                Ok(e)
            }
            Ok(_) | Err(MetaError::NotFound { .. }) => Err(missing()),
            Err(e) => Err(e.into()),
        }
    }

    fn create_upload(
        &self,
        client: &mut StripedClient,
        bucket: &str,
        key: &str,
        mut attrs: BTreeMap<String, Vec<u8>>,
    ) -> Result<String, GatewayError> {
        self.bucket(bucket)?;
        object_name(bucket, key)?;
        let (unit, _) = self.servers_for_put()?;
        let id = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
        let mut object = client.create(&marker(bucket, &id), &Shape::striped(unit, 1))?;
        attrs.insert(ATTR_UPLOAD_KEY.to_owned(), key.as_bytes().to_vec());
        client.set_attrs(&mut object, attrs, Vec::new())?;
        Ok(id)
    }

    /// The ready parts of upload `id`, in part order.
    fn parts(&self, id: &str) -> Result<Vec<Entry>, GatewayError> {
        let mut parts = Vec::new();
        for e in sluice_meta::entries(self.meta.as_ref(), &part_prefix(id)) {
            let e = e?;
            if e.state == EntryState::Ready {
                parts.push(e);
            }
        }
        Ok(parts)
    }

    /// Removes upload `id`: its parts, then its marker.
    fn remove_upload(
        &self,
        client: &mut StripedClient,
        bucket: &str,
        id: &str,
    ) -> Result<(), GatewayError> {
        for e in sluice_meta::entries(self.meta.as_ref(), &part_prefix(id)).collect::<Vec<_>>() {
            remove_quietly(client, &e?.name)?;
        }
        remove_quietly(client, &marker(bucket, id))
    }

    fn complete_upload(
        &self,
        client: &mut StripedClient,
        (bucket, key, id): (&str, &str, &str),
        listed: &[(i32, String)],
    ) -> Result<data::PutDone, GatewayError> {
        let upload = self.upload(bucket, key, id)?;
        if listed.is_empty() {
            return Err(GatewayError::InvalidPart {
                part: 0,
                why: "a complete names at least one part".into(),
            });
        }
        if listed.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(GatewayError::InvalidPartOrder);
        }
        let mut sources = Vec::with_capacity(listed.len());
        let mut md5 = Md5::new();
        for (i, (part, etag)) in listed.iter().enumerate() {
            let invalid = |why: &str| GatewayError::InvalidPart {
                part: *part,
                why: why.to_owned(),
            };
            let entry = match self.meta.lookup(&part_name(id, *part)) {
                Ok(e) if e.state == EntryState::Ready => e,
                Ok(_) | Err(MetaError::NotFound { .. }) => {
                    return Err(invalid("it was not uploaded"))
                }
                Err(e) => return Err(e.into()),
            };
            let have = etag_of(&entry)
                .map(|e| e.value().to_owned())
                .unwrap_or_default();
            if have != etag.trim_matches('"') {
                return Err(invalid("its ETag does not match the part uploaded"));
            }
            if i + 1 < listed.len() && entry.size < MIN_PART {
                return Err(GatewayError::EntityTooSmall {
                    part: *part,
                    size: entry.size,
                });
            }
            md5.update(etag_bytes(&have).ok_or_else(|| invalid("its ETag is not hex"))?);
            sources.push(entry);
        }
        let etag = format!("{}-{}", hex(&md5.finalize()), listed.len());
        let mut attrs: BTreeMap<String, Vec<u8>> = upload
            .attrs
            .into_iter()
            .filter(|(k, _)| k != ATTR_UPLOAD_KEY)
            .collect();
        attrs.insert(ATTR_MTIME.to_owned(), now_ms().to_string().into_bytes());
        let name = object_name(bucket, key)?;
        let whole: Vec<_> = sources.iter().map(|e| (e, 0..e.size)).collect();
        let done = data::concat(self, client, &whole, &name, attrs, Some(etag))?;
        if let Err(e) = self.remove_upload(client, bucket, id) {
            tracing::warn!(upload = id, error = %crate::error::error_chain(&e), "a completed upload's parts are left");
        }
        Ok(done)
    }
}

/// Removes `name`; one already gone is not an error.
fn remove_quietly(client: &mut StripedClient, name: &str) -> Result<(), GatewayError> {
    match client.remove(name) {
        Ok(())
        | Err(StripedError::Meta {
            source: MetaError::NotFound { .. },
            ..
        }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

pub(crate) async fn create(
    g: &Gateway,
    req: S3Request<CreateMultipartUploadInput>,
) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
    let input = req.input;
    let headers = Headers {
        content_type: input.content_type,
        cache_control: input.cache_control,
        content_disposition: input.content_disposition,
        content_encoding: input.content_encoding,
        content_language: input.content_language,
        metadata: input.metadata,
    };
    let (bucket, key) = (input.bucket.clone(), input.key.clone());
    let id = g
        .store
        .run(move |store, client| store.create_upload(client, &bucket, &key, headers.into_attrs()?))
        .await?;
    Ok(S3Response::new(CreateMultipartUploadOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(id),
        ..CreateMultipartUploadOutput::default()
    }))
}

pub(crate) async fn upload_part(
    g: &Gateway,
    req: S3Request<UploadPartInput>,
) -> S3Result<S3Response<UploadPartOutput>> {
    let input = req.input;
    let part = input.part_number;
    check_part_number(part)?;
    let (bucket, key, id) = (input.bucket, input.key, input.upload_id.clone());
    let name = part_name(&id, part);
    g.store
        .run(move |store, _| store.upload(&bucket, &key, &id).map(drop))
        .await?;
    // A part sent again replaces the one before, as any put does.
    let attrs = BTreeMap::from([(ATTR_MTIME.to_owned(), now_ms().to_string().into_bytes())]);
    let done = data::put(&g.store, name, input.body, attrs).await?;
    Ok(S3Response::new(UploadPartOutput {
        e_tag: Some(ETag::Strong(done.etag)),
        ..UploadPartOutput::default()
    }))
}

/// The bytes an `x-amz-copy-source-range` header (`bytes=FIRST-LAST`,
/// both offsets inclusive, as S3 requires) selects of an object of
/// `size` bytes; none is the whole object.
fn copy_range(header: Option<&str>, size: u64) -> S3Result<std::ops::Range<u64>> {
    let Some(header) = header else {
        return Ok(0..size);
    };
    let parsed = header
        .strip_prefix("bytes=")
        .and_then(|r| r.split_once('-'))
        .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)));
    match parsed {
        Some((first, last)) if first <= last && last < size => Ok(first..last + 1),
        Some(_) => Err(s3s::s3_error!(
            InvalidRange,
            "x-amz-copy-source-range {header:?} is outside the {size}-byte source"
        )),
        None => Err(s3s::s3_error!(
            InvalidArgument,
            "x-amz-copy-source-range must be bytes=FIRST-LAST, not {header:?}"
        )),
    }
}

pub(crate) async fn upload_part_copy(
    g: &Gateway,
    req: S3Request<UploadPartCopyInput>,
) -> S3Result<S3Response<UploadPartCopyOutput>> {
    let input = req.input;
    let part = input.part_number;
    check_part_number(part)?;
    let CopySource::Bucket {
        bucket: src_bucket,
        key: src_key,
        ..
    } = input.copy_source
    else {
        return Err(s3s::s3_error!(
            NotImplemented,
            "copies from access points are not supported"
        ));
    };
    let (bucket, key, id) = (input.bucket, input.key, input.upload_id.clone());
    let (src_bucket, src_key) = (src_bucket.to_string(), src_key.to_string());
    let source = g
        .store
        .run(move |store, _| {
            store.upload(&bucket, &key, &id)?;
            store.object(&src_bucket, &src_key)
        })
        .await?;
    // The source's conditions fail with 412, If-None-Match too (a copy
    // answers no 304).
    Conditions {
        if_match: input.copy_source_if_match.as_ref(),
        if_none_match: input.copy_source_if_none_match.as_ref(),
        if_modified_since: input.copy_source_if_modified_since.as_ref(),
        if_unmodified_since: input.copy_source_if_unmodified_since.as_ref(),
    }
    .check(&source)
    .map_err(|e| match e.code() {
        s3s::S3ErrorCode::NotModified => s3s::s3_error!(
            PreconditionFailed,
            "the copy source's conditions do not hold"
        ),
        _ => e,
    })?;
    let range = copy_range(input.copy_source_range.as_deref(), source.size)?;
    let name = part_name(&input.upload_id, part);
    let attrs = BTreeMap::from([(ATTR_MTIME.to_owned(), now_ms().to_string().into_bytes())]);
    let done = g
        .store
        .run(move |store, client| {
            data::concat(store, client, &[(&source, range)], &name, attrs, None)
        })
        .await?;
    Ok(S3Response::new(UploadPartCopyOutput {
        copy_part_result: Some(CopyPartResult {
            e_tag: Some(ETag::Strong(done.etag)),
            last_modified: Some(timestamp(now_ms())),
            ..CopyPartResult::default()
        }),
        ..UploadPartCopyOutput::default()
    }))
}

pub(crate) async fn complete(
    g: &Gateway,
    req: S3Request<CompleteMultipartUploadInput>,
) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
    let input = req.input;
    let listed: Vec<(i32, String)> = input
        .multipart_upload
        .and_then(|m| m.parts)
        .unwrap_or_default()
        .into_iter()
        .map(|p| {
            let etag = p.e_tag.map(|e| e.value().to_owned()).unwrap_or_default();
            (p.part_number.unwrap_or(0), etag)
        })
        .collect();
    let (bucket, key, id) = (input.bucket.clone(), input.key.clone(), input.upload_id);
    let done = g
        .store
        .run(move |store, client| store.complete_upload(client, (&bucket, &key, &id), &listed))
        .await?;
    Ok(S3Response::new(CompleteMultipartUploadOutput {
        location: Some(format!("/{}/{}", input.bucket, input.key)),
        bucket: Some(input.bucket),
        key: Some(input.key),
        e_tag: Some(ETag::Strong(done.etag)),
        ..CompleteMultipartUploadOutput::default()
    }))
}

pub(crate) async fn abort(
    g: &Gateway,
    req: S3Request<AbortMultipartUploadInput>,
) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
    let input = req.input;
    let (bucket, key, id) = (input.bucket, input.key, input.upload_id);
    g.store
        .run(move |store, client| {
            store.upload(&bucket, &key, &id)?;
            store.remove_upload(client, &bucket, &id)
        })
        .await?;
    Ok(S3Response::new(AbortMultipartUploadOutput::default()))
}

pub(crate) async fn list_parts(
    g: &Gateway,
    req: S3Request<ListPartsInput>,
) -> S3Result<S3Response<ListPartsOutput>> {
    let input = req.input;
    let max = input.max_parts.map_or(1000, |n| n.clamp(0, 1000)) as usize;
    let after = input.part_number_marker.unwrap_or(0);
    let (bucket, key, id) = (
        input.bucket.clone(),
        input.key.clone(),
        input.upload_id.clone(),
    );
    let parts = g
        .store
        .run(move |store, _| {
            store.upload(&bucket, &key, &id)?;
            store.parts(&id)
        })
        .await?;
    let mut listed: Vec<Part> = parts
        .iter()
        .filter_map(|e| Some((part_number(&e.name)?, e)))
        .filter(|(n, _)| *n > after)
        .map(|(n, e)| Part {
            part_number: Some(n),
            size: Some(e.size as i64),
            e_tag: etag_of(e),
            last_modified: Some(timestamp(mtime_ms(e))),
            ..Part::default()
        })
        .collect();
    let truncated = listed.len() > max;
    listed.truncate(max);
    let next = listed.last().and_then(|p| p.part_number);
    Ok(S3Response::new(ListPartsOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(input.upload_id),
        max_parts: Some(max as i32),
        part_number_marker: input.part_number_marker,
        is_truncated: Some(truncated),
        next_part_number_marker: truncated.then_some(next).flatten(),
        parts: Some(listed),
        ..ListPartsOutput::default()
    }))
}

pub(crate) async fn list_uploads(
    g: &Gateway,
    req: S3Request<ListMultipartUploadsInput>,
) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
    let input = req.input;
    let bucket = input.bucket.clone();
    let store: Arc<Store> = Arc::clone(&g.store);
    let markers = store
        .run(move |store, _| {
            store.bucket(&bucket)?;
            let prefix = format!("{UPLOADS}{bucket}/");
            let page = store.meta.list(&prefix, None, sluice_meta::MAX_PAGE)?;
            Ok(page.entries)
        })
        .await?;
    let prefix = input.prefix.clone().unwrap_or_default();
    let uploads = markers
        .iter()
        .filter(|e| e.state == EntryState::Ready)
        .filter_map(|e| {
            let key = text_attr(e, ATTR_UPLOAD_KEY)?;
            key.starts_with(&prefix).then(|| MultipartUpload {
                key: Some(key),
                upload_id: e.name.rsplit('/').next().map(str::to_owned),
                initiated: Some(timestamp(mtime_ms(e))),
                ..MultipartUpload::default()
            })
        })
        .collect();
    Ok(S3Response::new(ListMultipartUploadsOutput {
        bucket: Some(input.bucket),
        prefix: input.prefix,
        is_truncated: Some(false),
        uploads: Some(uploads),
        ..ListMultipartUploadsOutput::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_source_ranges_are_inclusive_and_inside_the_source() {
        assert_eq!(copy_range(None, 10).ok(), Some(0..10));
        assert_eq!(copy_range(Some("bytes=0-0"), 10).ok(), Some(0..1));
        assert_eq!(copy_range(Some("bytes=3-9"), 10).ok(), Some(3..10));
        let code = |h: &str| copy_range(Some(h), 10).err().map(|e| e.code().clone());
        assert_eq!(code("bytes=3-10"), Some(s3s::S3ErrorCode::InvalidRange));
        assert_eq!(code("bytes=5-4"), Some(s3s::S3ErrorCode::InvalidRange));
        for bad in ["bytes=3-", "bytes=-3", "3-4", "bytes=a-b", ""] {
            assert_eq!(code(bad), Some(s3s::S3ErrorCode::InvalidArgument), "{bad}");
        }
    }
}
