//! Virtual-host-style addressing: with a domain `D` configured
//! ([`crate::S3Options::domain`]), a request whose `Host` is `BUCKET.D`
//! (any port) addresses bucket `BUCKET`, the path being the key; a host
//! of `D` itself, or any other name, is path-style (`/BUCKET/KEY`), and
//! so are IP addresses, which s3s never hands to a host parser.

use s3s::host::{S3Host, VirtualHost};
use s3s::S3Result;

/// Why a domain cannot be the endpoint's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{domain:?} is not a domain name (letters, digits, '-' and '.' only, no empty label)")]
pub struct DomainError {
    pub domain: String,
}

/// The virtual-host parser of one domain.
#[derive(Debug, Clone)]
pub(crate) struct Domain {
    /// Lower case, without a trailing dot.
    name: String,
}

impl Domain {
    pub(crate) fn new(domain: &str) -> Result<Self, DomainError> {
        let name = domain.trim_end_matches('.').to_ascii_lowercase();
        let valid = !name.is_empty()
            && name.split('.').all(|label| {
                !label.is_empty()
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        if !valid {
            return Err(DomainError {
                domain: domain.to_owned(),
            });
        }
        Ok(Self { name })
    }

    /// The bucket `host` (a `Host` header, with or without a port)
    /// names as a virtual host of this domain, if it does.
    pub(crate) fn bucket<'a>(&self, host: &'a str) -> Option<&'a str> {
        let name = match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        };
        let at = name.len().checked_sub(self.name.len() + 1)?;
        let (bucket, rest) = name.split_at_checked(at)?;
        let ours = rest.strip_prefix('.')?.eq_ignore_ascii_case(&self.name);
        (ours && !bucket.is_empty()).then_some(bucket)
    }
}

impl S3Host for Domain {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> S3Result<VirtualHost<'a>> {
        Ok(match self.bucket(host) {
            Some(bucket) => VirtualHost::new(self.name.as_str()).with_bucket(bucket),
            None => VirtualHost::new(host),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_the_labels_before_the_domain() {
        let d = Domain::new("S3.Example.com.").expect("valid");
        assert_eq!(d.bucket("photos.s3.example.com"), Some("photos"));
        assert_eq!(d.bucket("photos.s3.example.com:10811"), Some("photos"));
        assert_eq!(
            d.bucket("my.dotted.bucket.S3.EXAMPLE.com"),
            Some("my.dotted.bucket")
        );
        assert_eq!(d.bucket("s3.example.com:10811"), None);
        assert_eq!(d.bucket("s3.example.com"), None);
        assert_eq!(d.bucket(".s3.example.com"), None);
        assert_eq!(d.bucket("localhost:10811"), None);
        assert_eq!(d.bucket("photosXs3.example.com"), None);
        assert_eq!(d.bucket("photos.other.com"), None);
        for bad in ["", ".", "a..b", "under_score.com", "sp ace"] {
            assert!(Domain::new(bad).is_err(), "{bad:?}");
        }
    }
}
