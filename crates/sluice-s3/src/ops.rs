//! The S3 operations: [`Gateway`] implements s3s's [`S3`] trait, each
//! operation a thin async method over the blocking [`Store`] (bucket and
//! object calls), `data.rs` (bodies) and `list.rs` (listings).

use std::collections::BTreeMap;
use std::sync::Arc;

use s3s::dto::*;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, S3};
use sluice_meta::Entry;

use crate::data::{self, PutDone};
use crate::error::GatewayError;
use crate::list::{self, Query};
use crate::multipart;
use crate::names::object_name;
use crate::store::{
    mtime_ms, now_ms, text_attr, Store, ATTR_ETAG, ATTR_META, ATTR_MTIME, SYSTEM_HEADERS,
};

/// The S3 service over sluice's striped objects.
pub(crate) struct Gateway {
    pub(crate) store: Arc<Store>,
}

/// S3's default and largest page of a listing.
const MAX_KEYS: usize = 1000;

pub(crate) fn timestamp(ms: u64) -> Timestamp {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    Timestamp::from(t)
}

pub(crate) fn etag_of(entry: &Entry) -> Option<ETag> {
    text_attr(entry, ATTR_ETAG).map(ETag::Strong)
}

/// The system headers and user metadata of a put or a copy that
/// replaces them, as attributes; the time of the put with them.
#[derive(Default)]
pub(crate) struct Headers {
    pub(crate) content_type: Option<String>,
    pub(crate) cache_control: Option<String>,
    pub(crate) content_disposition: Option<String>,
    pub(crate) content_encoding: Option<String>,
    pub(crate) content_language: Option<String>,
    pub(crate) metadata: Option<Metadata>,
}

/// The most bytes of user metadata (names and values together) an
/// object may carry, as in S3.
pub(crate) const MAX_USER_METADATA: usize = 2048;

impl Headers {
    /// The attributes; user metadata over [`MAX_USER_METADATA`] is
    /// refused.
    pub(crate) fn into_attrs(self) -> Result<BTreeMap<String, Vec<u8>>, GatewayError> {
        let size: usize = self
            .metadata
            .iter()
            .flatten()
            .map(|(k, v)| k.len() + v.len())
            .sum();
        if size > MAX_USER_METADATA {
            return Err(GatewayError::MetadataTooLarge {
                size,
                most: MAX_USER_METADATA,
            });
        }
        let mut attrs = BTreeMap::new();
        let values = [
            self.content_type,
            self.cache_control,
            self.content_disposition,
            self.content_encoding,
            self.content_language,
        ];
        for (name, value) in SYSTEM_HEADERS.iter().zip(values) {
            if let Some(v) = value {
                attrs.insert(format!("s3.{name}"), v.into_bytes());
            }
        }
        for (k, v) in self.metadata.unwrap_or_default() {
            attrs.insert(
                format!("{ATTR_META}{}", k.to_ascii_lowercase()),
                v.into_bytes(),
            );
        }
        attrs.insert(ATTR_MTIME.to_owned(), now_ms().to_string().into_bytes());
        Ok(attrs)
    }
}

/// The user metadata an entry carries.
fn metadata_of(entry: &Entry) -> Option<Metadata> {
    let meta: Metadata = entry
        .attrs
        .iter()
        .filter_map(|(k, v)| {
            let name = k.strip_prefix(ATTR_META)?;
            Some((name.to_owned(), String::from_utf8(v.clone()).ok()?))
        })
        .collect();
    (!meta.is_empty()).then_some(meta)
}

/// The attributes a copy carries over from its source (all but the
/// ETag, which is the copy's own, and the time, which is the copy's).
fn copied_attrs(entry: &Entry) -> BTreeMap<String, Vec<u8>> {
    let mut attrs: BTreeMap<String, Vec<u8>> = entry
        .attrs
        .iter()
        .filter(|(k, _)| k.starts_with("s3.") && *k != ATTR_ETAG && *k != ATTR_MTIME)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    attrs.insert(ATTR_MTIME.to_owned(), now_ms().to_string().into_bytes());
    attrs
}

/// The conditional headers of a GET or HEAD against the object's ETag
/// and time (second precision, as HTTP dates have).
pub(crate) struct Conditions<'a> {
    pub(crate) if_match: Option<&'a IfMatch>,
    pub(crate) if_none_match: Option<&'a IfNoneMatch>,
    pub(crate) if_modified_since: Option<&'a IfModifiedSince>,
    pub(crate) if_unmodified_since: Option<&'a IfUnmodifiedSince>,
}

fn matches(cond: &ETagCondition, etag: Option<&ETag>) -> bool {
    match (cond, etag) {
        (ETagCondition::Any, _) => true,
        (ETagCondition::ETag(want), Some(have)) => want.value() == have.value(),
        (ETagCondition::ETag(_), None) => false,
    }
}

impl Conditions<'_> {
    /// RFC 9110's order: If-Match, If-Unmodified-Since (without
    /// If-Match), If-None-Match, If-Modified-Since (without
    /// If-None-Match).
    pub(crate) fn check(&self, entry: &Entry) -> S3Result<()> {
        let etag = etag_of(entry);
        let secs = (mtime_ms(entry) / 1000) as i64;
        let since = |t: &Timestamp| time::OffsetDateTime::from(t.clone()).unix_timestamp();
        if let Some(c) = self.if_match {
            if !matches(c, etag.as_ref()) {
                return Err(s3_error!(PreconditionFailed, "If-Match does not match"));
            }
        } else if let Some(t) = self.if_unmodified_since {
            if secs > since(t) {
                return Err(s3_error!(
                    PreconditionFailed,
                    "modified since If-Unmodified-Since"
                ));
            }
        }
        if let Some(c) = self.if_none_match {
            if matches(c, etag.as_ref()) {
                return Err(S3Error::new(S3ErrorCode::NotModified));
            }
        } else if let Some(t) = self.if_modified_since {
            if secs <= since(t) {
                return Err(S3Error::new(S3ErrorCode::NotModified));
            }
        }
        Ok(())
    }
}

/// The bytes a Range header selects, and the Content-Range to answer it.
fn byte_range(
    range: Option<&Range>,
    size: u64,
) -> S3Result<(std::ops::Range<u64>, Option<String>)> {
    match range {
        None => Ok((0..size, None)),
        Some(r) => {
            let picked = r.check(size)?;
            let header = format!(
                "bytes {}-{}/{size}",
                picked.start,
                picked.end.saturating_sub(1)
            );
            Ok((picked, Some(header)))
        }
    }
}

/// The object's own Content-Encoding: the header less `aws-chunked`,
/// which only says how this request's body was framed.
fn own_encoding(header: Option<String>) -> Option<String> {
    let kept: Vec<&str> = header
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty() && !e.eq_ignore_ascii_case("aws-chunked"))
        .collect();
    (!kept.is_empty()).then(|| kept.join(", "))
}

fn max_keys(asked: Option<MaxKeys>) -> usize {
    asked.map_or(MAX_KEYS, |n| usize::try_from(n).unwrap_or(0).min(MAX_KEYS))
}

fn objects_of(listing: &list::Listing) -> (ObjectList, CommonPrefixList) {
    let contents = listing
        .objects
        .iter()
        .map(|(key, e)| Object {
            key: Some(key.clone()),
            size: Some(e.size as i64),
            e_tag: etag_of(e),
            last_modified: Some(timestamp(mtime_ms(e))),
            storage_class: Some(ObjectStorageClass::from_static(
                ObjectStorageClass::STANDARD,
            )),
            ..Object::default()
        })
        .collect();
    let prefixes = listing
        .prefixes
        .iter()
        .map(|p| CommonPrefix {
            prefix: Some(p.clone()),
        })
        .collect();
    (contents, prefixes)
}

impl Gateway {
    async fn listing(&self, query: Query) -> S3Result<list::Listing> {
        let bucket = query.bucket.clone();
        Ok(self
            .store
            .run(move |store, _| {
                store.bucket(&bucket)?;
                list::list(store.meta.as_ref(), &query)
            })
            .await?)
    }

    async fn put_body(
        &self,
        bucket: &str,
        key: &str,
        body: Option<StreamingBlob>,
        headers: Headers,
    ) -> S3Result<PutDone> {
        let name = object_name(bucket, key)?;
        let attrs = headers.into_attrs()?;
        let b = bucket.to_owned();
        self.store
            .run(move |store, _| store.bucket(&b).map(drop))
            .await?;
        Ok(data::put(&self.store, name, body, attrs).await?)
    }
}

#[async_trait::async_trait]
impl S3 for Gateway {
    async fn list_buckets(
        &self,
        _req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let buckets = self.store.run(|store, _| store.buckets()).await?;
        let buckets = buckets
            .into_iter()
            .map(|(name, ms)| Bucket {
                name: Some(name),
                creation_date: Some(timestamp(ms)),
                ..Bucket::default()
            })
            .collect();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            owner: Some(Owner {
                display_name: Some("sluice".into()),
                id: Some("sluice".into()),
            }),
            ..ListBucketsOutput::default()
        }))
    }

    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let bucket = req.input.bucket;
        let location = format!("/{bucket}");
        self.store
            .run(move |store, client| store.create_bucket(client, &bucket))
            .await?;
        Ok(S3Response::new(CreateBucketOutput {
            location: Some(location),
        }))
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        let bucket = req.input.bucket;
        self.store
            .run(move |store, _| store.bucket(&bucket))
            .await?;
        Ok(S3Response::new(HeadBucketOutput::default()))
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let bucket = req.input.bucket;
        self.store
            .run(move |store, client| store.delete_bucket(client, &bucket))
            .await?;
        Ok(S3Response::new(DeleteBucketOutput::default()))
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let input = req.input;
        let headers = Headers {
            content_type: input.content_type,
            cache_control: input.cache_control,
            content_disposition: input.content_disposition,
            content_encoding: own_encoding(input.content_encoding),
            content_language: input.content_language,
            metadata: input.metadata,
        };
        let done = self
            .put_body(&input.bucket, &input.key, input.body, headers)
            .await?;
        Ok(S3Response::new(PutObjectOutput {
            e_tag: Some(ETag::Strong(done.etag)),
            size: Some(done.size as i64),
            ..PutObjectOutput::default()
        }))
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let input = req.input;
        let (bucket, key) = (input.bucket.clone(), input.key.clone());
        let entry = self.store.run(move |s, _| s.object(&bucket, &key)).await?;
        Conditions {
            if_match: input.if_match.as_ref(),
            if_none_match: input.if_none_match.as_ref(),
            if_modified_since: input.if_modified_since.as_ref(),
            if_unmodified_since: input.if_unmodified_since.as_ref(),
        }
        .check(&entry)?;
        let (range, content_range) = byte_range(input.range.as_ref(), entry.size)?;
        let length = range.end - range.start;
        let mut out = GetObjectOutput {
            content_length: Some(length as i64),
            content_range: content_range.clone(),
            accept_ranges: Some("bytes".into()),
            e_tag: etag_of(&entry),
            last_modified: Some(timestamp(mtime_ms(&entry))),
            metadata: metadata_of(&entry),
            content_type: text_attr(&entry, "s3.content-type"),
            cache_control: text_attr(&entry, "s3.cache-control"),
            content_disposition: text_attr(&entry, "s3.content-disposition"),
            content_encoding: text_attr(&entry, "s3.content-encoding"),
            content_language: text_attr(&entry, "s3.content-language"),
            ..GetObjectOutput::default()
        };
        out.body = Some(StreamingBlob::wrap(data::read_stream(
            &self.store,
            entry,
            range,
        )));
        let mut response = S3Response::new(out);
        if content_range.is_some() {
            response.status = Some(hyper::StatusCode::PARTIAL_CONTENT);
        }
        Ok(response)
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let input = req.input;
        let (bucket, key) = (input.bucket.clone(), input.key.clone());
        let entry = self.store.run(move |s, _| s.object(&bucket, &key)).await?;
        Conditions {
            if_match: input.if_match.as_ref(),
            if_none_match: input.if_none_match.as_ref(),
            if_modified_since: input.if_modified_since.as_ref(),
            if_unmodified_since: input.if_unmodified_since.as_ref(),
        }
        .check(&entry)?;
        Ok(S3Response::new(HeadObjectOutput {
            content_length: Some(entry.size as i64),
            accept_ranges: Some("bytes".into()),
            e_tag: etag_of(&entry),
            last_modified: Some(timestamp(mtime_ms(&entry))),
            metadata: metadata_of(&entry),
            content_type: text_attr(&entry, "s3.content-type"),
            cache_control: text_attr(&entry, "s3.cache-control"),
            content_disposition: text_attr(&entry, "s3.content-disposition"),
            content_encoding: text_attr(&entry, "s3.content-encoding"),
            content_language: text_attr(&entry, "s3.content-language"),
            ..HeadObjectOutput::default()
        }))
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let (bucket, key) = (req.input.bucket, req.input.key);
        self.store
            .run(move |store, client| store.delete_object(client, &bucket, &key))
            .await?;
        Ok(S3Response::new(DeleteObjectOutput::default()))
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let bucket = req.input.bucket;
        let quiet = req.input.delete.quiet.unwrap_or(false);
        let keys: Vec<String> = req
            .input
            .delete
            .objects
            .into_iter()
            .map(|o| o.key)
            .collect();
        if keys.len() > MAX_KEYS {
            return Err(s3_error!(
                MalformedXML,
                "a DeleteObjects request names at most 1000 keys, not {}",
                keys.len()
            ));
        }
        let results = self
            .store
            .run(move |store, client| {
                store.bucket(&bucket)?;
                Ok(keys
                    .into_iter()
                    .map(|key| {
                        let r = store.delete_object(client, &bucket, &key);
                        (key, r)
                    })
                    .collect::<Vec<_>>())
            })
            .await?;
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for (key, r) in results {
            match r {
                Ok(()) if quiet => {}
                Ok(()) => deleted.push(DeletedObject {
                    key: Some(key),
                    ..DeletedObject::default()
                }),
                Err(e) => {
                    let s3 = S3Error::from(e);
                    errors.push(Error {
                        code: Some(s3.code().as_str().to_owned()),
                        key: Some(key),
                        message: s3.message().map(str::to_owned),
                        version_id: None,
                    });
                }
            }
        }
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: Some(errors),
            ..DeleteObjectsOutput::default()
        }))
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let input = req.input;
        let CopySource::Bucket {
            bucket: src_bucket,
            key: src_key,
            ..
        } = input.copy_source
        else {
            return Err(s3_error!(
                NotImplemented,
                "copies from access points are not supported"
            ));
        };
        let replace = input
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
        let headers = Headers {
            content_type: input.content_type,
            cache_control: input.cache_control,
            content_disposition: input.content_disposition,
            content_encoding: input.content_encoding,
            content_language: input.content_language,
            metadata: input.metadata,
        };
        let (bucket, key) = (input.bucket, input.key);
        let done = self
            .store
            .run(move |store, client| {
                let from = store.object(&src_bucket, &src_key)?;
                store.bucket(&bucket)?;
                let to = object_name(&bucket, &key)?;
                let attrs = if replace {
                    headers.into_attrs()?
                } else {
                    copied_attrs(&from)
                };
                data::copy(store, client, &from, &to, attrs)
            })
            .await?;
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(CopyObjectResult {
                e_tag: Some(ETag::Strong(done.etag)),
                last_modified: Some(timestamp(now_ms())),
                ..CopyObjectResult::default()
            }),
            ..CopyObjectOutput::default()
        }))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        multipart::create(self, req).await
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        multipart::upload_part(self, req).await
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        multipart::upload_part_copy(self, req).await
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        multipart::complete(self, req).await
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        multipart::abort(self, req).await
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        multipart::list_parts(self, req).await
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        multipart::list_uploads(self, req).await
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let input = req.input;
        let query = Query {
            bucket: input.bucket.clone(),
            prefix: input.prefix.clone().unwrap_or_default(),
            delimiter: input.delimiter.clone().filter(|d| !d.is_empty()),
            after: input.marker.clone().filter(|m| !m.is_empty()),
            max_keys: max_keys(input.max_keys),
        };
        let max = query.max_keys;
        let listing = self.listing(query).await?;
        let (contents, prefixes) = objects_of(&listing);
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(input.bucket),
            prefix: input.prefix,
            marker: input.marker,
            delimiter: input.delimiter,
            max_keys: Some(max as i32),
            is_truncated: Some(listing.truncated),
            next_marker: listing.truncated.then_some(listing.last).flatten(),
            contents: Some(contents),
            common_prefixes: Some(prefixes),
            encoding_type: input.encoding_type,
            ..ListObjectsOutput::default()
        }))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let input = req.input;
        // The continuation token is the last key or common prefix of the
        // page before: opaque to clients, and past start-after already.
        let after = input
            .continuation_token
            .clone()
            .or_else(|| input.start_after.clone())
            .filter(|a| !a.is_empty());
        let query = Query {
            bucket: input.bucket.clone(),
            prefix: input.prefix.clone().unwrap_or_default(),
            delimiter: input.delimiter.clone().filter(|d| !d.is_empty()),
            after,
            max_keys: max_keys(input.max_keys),
        };
        let max = query.max_keys;
        let listing = self.listing(query).await?;
        let (contents, prefixes) = objects_of(&listing);
        let key_count = (contents.len() + prefixes.len()) as i32;
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(input.bucket),
            prefix: input.prefix,
            delimiter: input.delimiter,
            max_keys: Some(max as i32),
            key_count: Some(key_count),
            continuation_token: input.continuation_token,
            start_after: input.start_after,
            is_truncated: Some(listing.truncated),
            next_continuation_token: listing.truncated.then_some(listing.last).flatten(),
            contents: Some(contents),
            common_prefixes: Some(prefixes),
            encoding_type: input.encoding_type,
            ..ListObjectsV2Output::default()
        }))
    }
}
