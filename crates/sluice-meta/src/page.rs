//! Paged listing: [`MetaStore::list`] returns one [`Page`] of at most
//! [`MAX_PAGE`] entries at a time, and [`entries`] pages through a whole
//! prefix with it, holding one page in memory at a time.
//!
//! A page resumes after a continuation key, the last name the previous
//! page returned: it starts strictly after that name, so names created or
//! removed between pages never make a page repeat a name, nor skip one
//! that existed throughout the listing.

use crate::{Entry, MetaError, MetaStore};

/// Most entries one page may hold. A larger limit is refused (it is also
/// the most one `META` LIST request of the object protocol may ask for).
pub const MAX_PAGE: usize = 1024;

/// One page of a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    /// Entries in name (byte) order.
    pub entries: Vec<Entry>,
    /// The continuation key: the last name of this page when names may
    /// follow it under the prefix (pass it as `after` for the next page);
    /// `None` when the listing is complete.
    pub next: Option<String>,
}

impl Page {
    /// The page of `limit` entries from `probe`, the first `limit + 1`
    /// entries in order from the page's start: one more than fits says
    /// names follow.
    pub(crate) fn probed(mut probe: Vec<Entry>, limit: usize) -> Self {
        let more = probe.len() > limit;
        probe.truncate(limit);
        let next = if more {
            probe.last().map(|e| e.name.clone())
        } else {
            None
        };
        Self {
            entries: probe,
            next,
        }
    }
}

/// Checks a page request as every backend does: `limit` must be 1 to
/// [`MAX_PAGE`], and a continuation key must be a valid name that starts
/// with `prefix` (it is the last name of a page under `prefix`).
/// [`MetaError::Invalid`] says which is wrong.
pub fn check_page(prefix: &str, after: Option<&str>, limit: usize) -> Result<(), MetaError> {
    if limit == 0 || limit > MAX_PAGE {
        return Err(MetaError::Invalid {
            what: format!("list limit {limit}"),
            why: format!("a page holds 1 to {MAX_PAGE} entries"),
        });
    }
    let Some(after) = after else {
        return Ok(());
    };
    let why = match crate::check_name(after) {
        Err(MetaError::Invalid { why, .. }) => why,
        Err(other) => return Err(other),
        Ok(()) if !after.starts_with(prefix) => {
            "it does not start with the prefix listed (it must be the last name of a page)"
                .to_owned()
        }
        Ok(()) => return Ok(()),
    };
    Err(MetaError::Invalid {
        what: format!("list continuation key {}", brief(after)),
        why,
    })
}

/// `s` quoted, cut to its first 64 characters, so messages stay short.
fn brief(s: &str) -> String {
    match s.char_indices().nth(64) {
        Some((at, _)) => format!("{:?}...", &s[..at]),
        None => format!("{s:?}"),
    }
}

/// Every entry under `prefix` in name order, fetched a page of
/// [`MAX_PAGE`] at a time as the iterator advances. After an error the
/// iterator ends.
pub fn entries<'a>(store: &'a dyn MetaStore, prefix: &str) -> Entries<'a> {
    Entries {
        store,
        prefix: prefix.to_owned(),
        after: None,
        page: Vec::new().into_iter(),
        done: false,
    }
}

/// The iterator [`entries`] returns.
pub struct Entries<'a> {
    store: &'a dyn MetaStore,
    prefix: String,
    after: Option<String>,
    page: std::vec::IntoIter<Entry>,
    done: bool,
}

impl std::fmt::Debug for Entries<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entries")
            .field("prefix", &self.prefix)
            .field("after", &self.after)
            .finish_non_exhaustive()
    }
}

impl Iterator for Entries<'_> {
    type Item = Result<Entry, MetaError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(e) = self.page.next() {
                return Some(Ok(e));
            }
            if self.done {
                return None;
            }
            let page = match self
                .store
                .list(&self.prefix, self.after.as_deref(), MAX_PAGE)
            {
                Ok(page) => page,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            // A key that does not advance would list the same page for
            // ever.
            if let (Some(next), Some(after)) = (&page.next, &self.after) {
                if next <= after {
                    self.done = true;
                    return Some(Err(MetaError::Invalid {
                        what: format!("list continuation key {}", brief(next)),
                        why: format!("it does not sort after the previous one, {}", brief(after)),
                    }));
                }
            }
            self.done = page.next.is_none();
            self.after = page.next;
            self.page = page.entries.into_iter();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_keys_are_checked() {
        assert!(check_page("", None, 1).is_ok());
        assert!(check_page("a/", Some("a/b"), MAX_PAGE).is_ok());
        for limit in [0, MAX_PAGE + 1, usize::MAX] {
            let e = check_page("", None, limit).unwrap_err().to_string();
            assert!(e.contains(&format!("limit {limit}")), "{e}");
            assert!(e.contains(&MAX_PAGE.to_string()), "{e}");
        }
        let long = "a".repeat(crate::MAX_NAME_LEN + 1);
        for (after, why) in [
            ("", "empty"),
            ("a\0", "NUL"),
            (long.as_str(), "more than"),
            ("b/x", "prefix"),
        ] {
            let e = check_page("a", Some(after), 10).unwrap_err().to_string();
            assert!(e.contains("continuation key") && e.contains(why), "{e}");
            assert!(e.len() < 300, "{e}");
        }
    }
}
