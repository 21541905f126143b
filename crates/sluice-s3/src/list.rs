//! ListObjects (V1 and V2) over the metadata service's paged listing:
//! one page of at most [`MAX_PAGE`] entries at a time, never the whole
//! bucket. With a delimiter, the keys under one common prefix are
//! skipped by starting the next page past them rather than by reading
//! them all.

use sluice_meta::{Entry, EntryState, MetaStore, MAX_NAME_LEN, MAX_PAGE};

use crate::error::GatewayError;
use crate::names::bucket_prefix;

/// What to list: the keys of `bucket` starting with `prefix` that sort
/// after `after` (V1's marker, V2's start-after or continuation token),
/// at most `max_keys` keys and common prefixes together.
#[derive(Debug, Clone)]
pub(crate) struct Query {
    pub(crate) bucket: String,
    pub(crate) prefix: String,
    pub(crate) delimiter: Option<String>,
    pub(crate) after: Option<String>,
    pub(crate) max_keys: usize,
}

/// One page of a listing.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    /// Keys and their entries, in key order.
    pub(crate) objects: Vec<(String, Entry)>,
    pub(crate) prefixes: Vec<String>,
    /// More keys or prefixes follow.
    pub(crate) truncated: bool,
    /// The last key or common prefix returned: where the next page
    /// starts after.
    pub(crate) last: Option<String>,
}

/// The metadata service's continuation key for the start of a listing of
/// `full_prefix` after the name `after`: `Ok(None)` from the start,
/// `Err(())` when nothing under the prefix sorts after it.
fn start_key(full_prefix: &str, after: Option<&str>) -> Result<Option<String>, ()> {
    match after {
        None => Ok(None),
        Some(a) if a.starts_with(full_prefix) => Ok(Some(a.to_owned())),
        Some(a) if a < full_prefix => Ok(None),
        Some(_) => Err(()),
    }
}

/// A name past every name that starts with `prefix` but a handful (those
/// continuing with U+10FFFF itself, which the listing then folds into
/// the same common prefix as it meets them): where to resume after a
/// common prefix. `None` if that name would be too long.
fn past(prefix: &str) -> Option<String> {
    let name = format!("{prefix}\u{10FFFF}");
    (name.len() <= MAX_NAME_LEN).then_some(name)
}

/// One page of `query`.
pub(crate) fn list(meta: &dyn MetaStore, query: &Query) -> Result<Listing, GatewayError> {
    let base = bucket_prefix(&query.bucket);
    let full_prefix = format!("{base}{}", query.prefix);
    let mut listing = Listing::default();
    let Ok(mut after) = start_key(
        &full_prefix,
        query
            .after
            .as_ref()
            .map(|a| format!("{base}{a}"))
            .as_deref(),
    ) else {
        return Ok(listing);
    };
    let mut count = 0;
    'pages: loop {
        let limit = (query.max_keys.saturating_sub(count) + 1).min(MAX_PAGE);
        let page = meta.list(&full_prefix, after.as_deref(), limit)?;
        let more = page.next.is_some();
        for entry in page.entries {
            after = Some(entry.name.clone());
            if entry.state != EntryState::Ready {
                continue;
            }
            let key = entry.name[base.len()..].to_owned();
            let cp = query.delimiter.as_deref().and_then(|d| {
                key[query.prefix.len()..]
                    .find(d)
                    .map(|i| key[..query.prefix.len() + i + d.len()].to_owned())
            });
            let Some(cp) = cp else {
                if count == query.max_keys {
                    listing.truncated = true;
                    break 'pages;
                }
                listing.last = Some(key.clone());
                listing.objects.push((key, entry));
                count += 1;
                continue;
            };
            let seen = listing.prefixes.last() == Some(&cp)
                || query.after.as_ref().is_some_and(|a| cp <= *a);
            if !seen {
                if count == query.max_keys {
                    listing.truncated = true;
                    break 'pages;
                }
                listing.last = Some(cp.clone());
                listing.prefixes.push(cp.clone());
                count += 1;
            }
            // Skip the rest of this common prefix with a new page.
            if let Some(skip) = past(&format!("{base}{cp}")) {
                after = Some(skip);
                continue 'pages;
            }
        }
        if !more {
            break;
        }
    }
    Ok(listing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_meta::{Layout, MemoryMetaStore, Piece, Update};
    use std::collections::BTreeMap;

    fn store(keys: &[&str]) -> MemoryMetaStore {
        let meta = MemoryMetaStore::default();
        let layout = Layout {
            stripe_unit: 4096,
            redundancy: Default::default(),
            pieces: vec![Piece {
                server: "sluice://127.0.0.1:1".into(),
                partition: 0,
                object: 1,
            }],
        };
        for k in keys {
            let name = format!("bkt/{k}");
            meta.create(&name, &layout, &BTreeMap::new())
                .expect("create");
            if !k.starts_with("unready") {
                let ready = Update {
                    state: Some(EntryState::Ready),
                    ..Update::default()
                };
                meta.update(&name, None, &ready).expect("ready");
            }
        }
        meta
    }

    fn query(prefix: &str, delimiter: Option<&str>, after: Option<&str>, max: usize) -> Query {
        Query {
            bucket: "bkt".into(),
            prefix: prefix.into(),
            delimiter: delimiter.map(Into::into),
            after: after.map(Into::into),
            max_keys: max,
        }
    }

    fn keys(l: &Listing) -> Vec<&str> {
        l.objects.iter().map(|(k, _)| k.as_str()).collect()
    }

    #[test]
    fn prefixes_fold_and_pages_resume_after_them() {
        let meta = store(&["a", "d/1", "d/2", "d/x/3", "e/1", "f", "unready"]);
        let l = list(&meta, &query("", Some("/"), None, 1000)).expect("list");
        assert_eq!(keys(&l), ["a", "f"]);
        assert_eq!(l.prefixes, ["d/", "e/"]);
        assert!(!l.truncated);
        let l = list(&meta, &query("", Some("/"), None, 2)).expect("list");
        assert_eq!(
            (keys(&l), l.prefixes.clone(), l.truncated),
            (vec!["a"], vec!["d/".to_owned()], true)
        );
        let l = list(&meta, &query("", Some("/"), l.last.as_deref(), 2)).expect("list");
        assert_eq!(
            (keys(&l), l.prefixes.clone(), l.truncated),
            (vec!["f"], vec!["e/".to_owned()], false)
        );
        let l = list(&meta, &query("d/", Some("/"), None, 10)).expect("list");
        assert_eq!(
            (keys(&l), l.prefixes.clone()),
            (vec!["d/1", "d/2"], vec!["d/x/".to_owned()])
        );
    }

    #[test]
    fn plain_listing_pages_by_max_keys_and_skips_unready() {
        let names: Vec<String> = (0..2100).map(|i| format!("k{i:05}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let meta = store(&refs);
        let mut after = None;
        let mut seen = Vec::new();
        loop {
            let l = list(&meta, &query("k", None, after.as_deref(), 1000)).expect("list");
            seen.extend(keys(&l).iter().map(|k| k.to_string()));
            if !l.truncated {
                break;
            }
            after = l.last;
        }
        assert_eq!(seen, names);
        let l = list(&meta, &query("", None, Some("k02098"), 5)).expect("list");
        assert_eq!(keys(&l), ["k02099"]);
        let l = list(&meta, &query("j", None, Some("zz"), 5)).expect("list");
        assert!(l.objects.is_empty());
    }
}
