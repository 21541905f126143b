//! The gateway's errors, and the one mapping from them to S3's error
//! codes ([`GatewayError::to_s3`]).

use s3s::{S3Error, S3ErrorCode};
use sluice_client::striped::StripedError;
use sluice_meta::MetaError;
use thiserror::Error;

/// Why an S3 request failed on sluice's side.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum GatewayError {
    #[error("bucket {bucket:?} does not exist")]
    NoSuchBucket { bucket: String },
    #[error("key {key:?} does not exist in bucket {bucket:?}")]
    NoSuchKey { bucket: String, key: String },
    #[error("bucket {bucket:?} already exists")]
    BucketExists { bucket: String },
    #[error("bucket {bucket:?} is not empty")]
    BucketNotEmpty { bucket: String },
    #[error("bucket name {bucket:?} is not valid: {why}")]
    InvalidBucketName { bucket: String, why: String },
    #[error("key {key:?} is not valid: {why}")]
    InvalidKey { key: String, why: String },
    #[error("key {key:?} is too long: at most {most} bytes in this bucket")]
    KeyTooLong { key: String, most: usize },
    #[error("the deployment has no object servers; add one with 'sluice meta add-server'")]
    NoServers,
    #[error("upload {id:?} does not exist")]
    NoSuchUpload { id: String },
    #[error("part {part}: {why}")]
    InvalidPart { part: i32, why: String },
    #[error("the parts are not listed in ascending order")]
    InvalidPartOrder,
    #[error("part {part} is {size} bytes; every part but the last is at least 5 MiB")]
    EntityTooSmall { part: i32, size: u64 },
    #[error("the user metadata is {size} bytes; at most {most}")]
    MetadataTooLarge { size: usize, most: usize },
    #[error("the request body failed: {why}")]
    Body { why: String },
    #[error("the object store failed")]
    Striped(#[from] StripedError),
    #[error("the metadata service failed")]
    Meta(#[from] MetaError),
    #[error("a worker thread failed: {0}")]
    Worker(String),
}

impl GatewayError {
    /// The S3 error a client gets for this.
    pub fn to_s3(&self) -> S3Error {
        let code = match self {
            Self::NoSuchBucket { .. } => S3ErrorCode::NoSuchBucket,
            Self::NoSuchKey { .. } => S3ErrorCode::NoSuchKey,
            Self::BucketExists { .. } => S3ErrorCode::BucketAlreadyOwnedByYou,
            Self::BucketNotEmpty { .. } => S3ErrorCode::BucketNotEmpty,
            Self::InvalidBucketName { .. } => S3ErrorCode::InvalidBucketName,
            Self::InvalidKey { .. } => S3ErrorCode::InvalidArgument,
            Self::KeyTooLong { .. } => S3ErrorCode::KeyTooLongError,
            Self::Body { .. } => S3ErrorCode::IncompleteBody,
            Self::MetadataTooLarge { .. } => S3ErrorCode::MetadataTooLarge,
            Self::NoSuchUpload { .. } => S3ErrorCode::NoSuchUpload,
            Self::InvalidPart { .. } => S3ErrorCode::InvalidPart,
            Self::InvalidPartOrder => S3ErrorCode::InvalidPartOrder,
            Self::EntityTooSmall { .. } => S3ErrorCode::EntityTooSmall,
            // Another put of the same key completed first.
            Self::Striped(StripedError::Replaced { .. }) => S3ErrorCode::OperationAborted,
            Self::NoServers | Self::Striped(_) | Self::Meta(_) | Self::Worker(_) => {
                S3ErrorCode::InternalError
            }
        };
        S3Error::with_message(code, error_chain(self))
    }
}

impl From<GatewayError> for S3Error {
    fn from(e: GatewayError) -> Self {
        if matches!(
            e,
            GatewayError::Striped(_) | GatewayError::Meta(_) | GatewayError::Worker(_)
        ) {
            tracing::warn!(error = %error_chain(&e), "S3 request failed inside sluice");
        }
        e.to_s3()
    }
}

/// `e` and its sources, joined by ": ".
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// A metadata error on `name`'s entry as the gateway's: a missing entry
/// is `missing`.
pub(crate) fn not_found_or(
    e: StripedError,
    missing: impl FnOnce() -> GatewayError,
) -> GatewayError {
    match e {
        StripedError::Meta {
            source: MetaError::NotFound { .. },
            ..
        } => missing(),
        other => GatewayError::Striped(other),
    }
}
