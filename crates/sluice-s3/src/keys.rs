//! Access keys: `ACCESS_KEY_ID SECRET_ACCESS_KEY` pairs from a key file
//! (one pair a line; blank lines and `#` comments ignored), never from
//! the command line, where any user could read them in the process list.

use std::path::{Path, PathBuf};

use thiserror::Error;

/// Why a key file could not be used.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum KeyFileError {
    #[error("cannot read the S3 key file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("S3 key file {path}, line {line}: expected ACCESS_KEY_ID SECRET_ACCESS_KEY")]
    Syntax { path: PathBuf, line: usize },
}

/// An access key id and its secret.
#[derive(Clone, PartialEq, Eq)]
pub struct AccessKey {
    pub id: String,
    pub secret: String,
}

impl std::fmt::Debug for AccessKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// The keys in the file at `path`. A file others may read is used, with
/// a warning.
pub fn read_key_file(path: &Path) -> Result<Vec<AccessKey>, KeyFileError> {
    let read_err = |source| KeyFileError::Read {
        path: path.to_owned(),
        source,
    };
    let text = std::fs::read_to_string(path).map_err(read_err)?;
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .map_err(read_err)?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            tracing::warn!(
                path = %path.display(),
                mode = format!("{:o}", mode & 0o777),
                "the S3 key file may be read by other users; chmod 600 it"
            );
        }
    }
    parse_keys(&text).map_err(|line| KeyFileError::Syntax {
        path: path.to_owned(),
        line,
    })
}

/// The keys of a key file's text, or the number of the first bad line.
pub fn parse_keys(text: &str) -> Result<Vec<AccessKey>, usize> {
    let mut keys = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some(id), Some(secret), None) => keys.push(AccessKey {
                id: id.to_owned(),
                secret: secret.to_owned(),
            }),
            _ => return Err(i + 1),
        }
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_comments_and_bad_lines() {
        let keys = parse_keys("# mine\n\nAKID  s3cret\nOTHER x\n").expect("valid");
        assert_eq!(keys.len(), 2);
        assert_eq!(
            (keys[0].id.as_str(), keys[0].secret.as_str()),
            ("AKID", "s3cret")
        );
        assert_eq!(parse_keys("AKID\n"), Err(1));
        assert_eq!(parse_keys("ok fine\na b c\n"), Err(2));
        assert!(!format!("{:?}", keys[0]).contains("s3cret"));
    }
}
