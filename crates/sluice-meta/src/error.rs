use thiserror::Error;

/// Why a metadata operation failed.
#[derive(Debug, Error)]
pub enum MetaError {
    #[error("no object named {name:?}")]
    NotFound { name: String },
    #[error("an object named {name:?} already exists")]
    Exists { name: String },
    #[error("object {name:?} changed meanwhile (revision {expected} expected, {found} found)")]
    Conflict {
        name: String,
        expected: u64,
        found: u64,
    },
    #[error("object server {server} still holds pieces of {objects} object(s), e.g. {example:?}")]
    ServerInUse {
        server: String,
        objects: u64,
        example: String,
    },
    #[error("invalid {what}: {why}")]
    Invalid { what: String, why: String },
    /// The backend did not answer when the store was opened.
    #[error("cannot reach {backend} within {after:?}: {reason}")]
    Unreachable {
        backend: String,
        after: std::time::Duration,
        reason: String,
    },
    #[error("metadata backend {backend} failed to {action}")]
    Backend {
        backend: String,
        action: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}
