//! sluice's S3 endpoint: the S3 REST API over the striped named objects
//! of a metadata service ([`sluice_meta::MetaStore`]), their data on the
//! deployment's object servers through
//! [`sluice_client::striped::StripedClient`].
//!
//! The HTTP side (routing, XML, Signature V4 in headers and presigned
//! URLs, `aws-chunked` bodies and their trailing checksums) is the `s3s`
//! crate's, generated from the AWS model; this crate implements its
//! [`s3s::S3`] trait (`ops.rs`) over blocking striped-object calls run on
//! tokio's blocking pool (`store.rs`, `data.rs`, `list.rs`). How buckets
//! and keys become names is in `names.rs`, virtual hosts in `host.rs`.
//! [`S3Endpoint`] binds the
//! listener and serves it on a runtime of its own, one access log line
//! per request (`endpoint.rs`).

mod data;
mod endpoint;
mod error;
mod host;
mod keys;
mod list;
mod metrics;
mod multipart;
mod names;
mod ops;
mod store;

pub use endpoint::{RunningS3, S3Endpoint, S3Options, S3StartError, DEFAULT_S3_PORT};
pub use error::GatewayError;
pub use host::DomainError;
pub use keys::{parse_keys, read_key_file, AccessKey, KeyFileError};
pub use metrics::S3Metrics;
pub use names::BUCKET_MARKERS;
pub use store::LayoutOptions;
