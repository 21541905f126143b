//! How S3 buckets and keys map onto the metadata service's names.
//!
//! An object is the striped object named `BUCKET/KEY`: the bucket is the
//! top-level name component and the key the rest, slashes and all, kept
//! byte for byte (no escaping: the metadata service takes any UTF-8 name
//! without NUL, and lists in byte order, which is S3's key order). A
//! bucket name never holds `/` (S3's rules: 3 to 63 of `a-z 0-9 . -`,
//! starting and ending with a letter or digit), so `BUCKET/` is exactly
//! that bucket's keys and no two buckets' names overlap.
//!
//! A bucket itself is an empty striped object named
//! [`BUCKET_MARKERS`]`BUCKET` (`.s3-buckets/photos`). No bucket can be
//! named `.s3-buckets` (a bucket starts with a letter or digit), so the
//! markers never mix with any bucket's keys, and listing the buckets is
//! one listing of that prefix. Names in the metadata service outside
//! these forms (objects put with `sluice obj --meta`, a top-level name
//! with no marker) are not seen through S3.

use crate::error::GatewayError;

/// The prefix of the bucket markers' names.
pub const BUCKET_MARKERS: &str = ".s3-buckets/";

/// Checks `bucket` against S3's naming rules (the ones every S3 client
/// also checks), so a name that passes can never hold `/` or start with
/// `.`.
pub(crate) fn check_bucket(bucket: &str) -> Result<(), GatewayError> {
    let invalid = |why: &str| {
        Err(GatewayError::InvalidBucketName {
            bucket: bucket.to_owned(),
            why: why.to_owned(),
        })
    };
    if !(3..=63).contains(&bucket.len()) {
        return invalid("a bucket name is 3 to 63 characters long");
    }
    if !bucket
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
    {
        return invalid("a bucket name holds only a-z, 0-9, '.' and '-'");
    }
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = bucket.as_bytes();
    if !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return invalid("a bucket name starts and ends with a letter or digit");
    }
    if bucket.contains("..") {
        return invalid("a bucket name has no two adjacent periods");
    }
    Ok(())
}

/// The name of `bucket`'s marker.
pub(crate) fn marker(bucket: &str) -> String {
    format!("{BUCKET_MARKERS}{bucket}")
}

/// The prefix every key of `bucket` has.
pub(crate) fn bucket_prefix(bucket: &str) -> String {
    format!("{bucket}/")
}

/// The name of `key` in `bucket`: refused if the key is empty, holds a
/// NUL, or makes the name longer than the metadata service takes.
pub(crate) fn object_name(bucket: &str, key: &str) -> Result<String, GatewayError> {
    let why = if key.is_empty() {
        "a key is not empty"
    } else if key.contains('\0') {
        "a key holds no NUL character"
    } else {
        let name = format!("{bucket}/{key}");
        if name.len() > sluice_meta::MAX_NAME_LEN {
            return Err(GatewayError::KeyTooLong {
                key: key.to_owned(),
                most: sluice_meta::MAX_NAME_LEN - bucket.len() - 1,
            });
        }
        return Ok(name);
    };
    Err(GatewayError::InvalidKey {
        key: key.to_owned(),
        why: why.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_rules() {
        for good in ["abc", "my-bucket.1", "0a0"] {
            assert!(check_bucket(good).is_ok(), "{good}");
        }
        for bad in [
            "ab",
            ".s3-buckets",
            "a/b",
            "Abc",
            "abc-",
            "a..b",
            &"a".repeat(64),
        ] {
            assert!(check_bucket(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_of_keys_and_markers_never_meet() {
        assert_eq!(object_name("a1b", "x/y").expect("valid"), "a1b/x/y");
        assert_eq!(marker("a1b"), ".s3-buckets/a1b");
        assert!(object_name("a1b", "").is_err());
        assert!(object_name("a1b", "a\0b").is_err());
        assert!(matches!(
            object_name("a1b", &"k".repeat(1021)),
            Err(GatewayError::KeyTooLong { most: 1020, .. })
        ));
        assert!(object_name("a1b", &"k".repeat(1020)).is_ok());
    }
}
