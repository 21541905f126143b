//! The conformance checks of paged listing ([`MetaStore::list`]).

use std::collections::{BTreeMap, BTreeSet};

use super::{all, layout, ok};
use crate::{Entry, MetaError, MetaStore, Page, MAX_PAGE};

fn create_all(store: &dyn MetaStore, names: &[&str]) {
    for (i, name) in names.iter().enumerate() {
        ok(
            store.create(name, &layout(1, i as u64), &BTreeMap::new()),
            "create",
        );
    }
}

fn names(entries: &[Entry]) -> Vec<&str> {
    entries.iter().map(|e| e.name.as_str()).collect()
}

/// Every page under `prefix` of at most `limit` entries, following each
/// page's continuation key, checking each page's shape on the way.
fn pages(store: &dyn MetaStore, prefix: &str, limit: usize) -> Vec<Page> {
    let mut out: Vec<Page> = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = ok(store.list(prefix, after.as_deref(), limit), "list a page");
        let what = format!("page {} under {prefix:?} of at most {limit}", out.len());
        assert!(page.entries.len() <= limit, "{what}: {page:?}");
        if let Some(next) = &page.next {
            assert!(!page.entries.is_empty(), "{what}: empty, yet more follow");
            assert_eq!(
                Some(next),
                page.entries.last().map(|e| &e.name),
                "{what}: the key is not its last name"
            );
        }
        after.clone_from(&page.next);
        out.push(page);
        if after.is_none() {
            return out;
        }
        assert!(out.len() <= 10_000, "{what}: the pages never end");
    }
}

/// Pages of several sizes, each following the last one's continuation
/// key, concatenate to the full sorted listing; the last page says
/// nothing follows, also when it ends exactly at the listing's end.
pub fn pages_concatenate_to_the_full_listing(store: &dyn MetaStore) {
    let mut under: Vec<String> = (0..37).map(|i| format!("pg/{i:02}")).collect();
    under.extend(["pg/", "pg/%", "pg/\u{e9}", "pg/a/b", "pg/\u{10ffff}"].map(String::from));
    let under: Vec<&str> = under.iter().map(String::as_str).collect();
    create_all(store, &under);
    create_all(store, &["pg", "pg.", "pg0", "ph", "pf/z", "a"]);
    let mut want = under.clone();
    want.sort_unstable();
    let n = want.len();
    let full = ok(store.list("pg/", None, MAX_PAGE), "list one page");
    assert_eq!(names(&full.entries), want, "one page of everything");
    assert_eq!(full.next, None, "one page of everything says more follow");
    for e in &full.entries {
        assert_eq!(
            e,
            &ok(store.lookup(&e.name), "lookup"),
            "list and lookup differ"
        );
    }
    for limit in [1, 2, 3, 5, 8, 13, n - 1, n, n + 1, MAX_PAGE] {
        let pages = pages(store, "pg/", limit);
        assert_eq!(pages.len(), n.div_ceil(limit), "pages of {limit}");
        let joined: Vec<Entry> = pages.into_iter().flat_map(|p| p.entries).collect();
        assert_eq!(joined, full.entries, "pages of {limit} joined");
    }
    // The same over the whole store, the empty prefix.
    let everything = all(store, "");
    assert_eq!(everything.len(), n + 6);
    for limit in [1, 4, n + 6] {
        let joined: Vec<Entry> = pages(store, "", limit)
            .into_iter()
            .flat_map(|p| p.entries)
            .collect();
        assert_eq!(joined, everything, "pages of {limit} of everything");
    }
}

/// No page holds a name outside its prefix, and the page that ends with
/// the prefix's last name says nothing follows, though other names sort
/// right after it; a key that names no entry (removed meanwhile) still
/// resumes after it.
pub fn a_prefix_bounds_every_page(store: &dyn MetaStore) {
    create_all(
        store,
        &[
            "a/9", "b", "b.", "b/1", "b/2", "b/3", "b/4", "b/5", "b0", "c",
        ],
    );
    let want = ["b/1", "b/2", "b/3", "b/4", "b/5"];
    for limit in 1..=6 {
        let pages = pages(store, "b/", limit);
        assert_eq!(pages.len(), 5usize.div_ceil(limit), "pages of {limit}");
        let joined: Vec<Entry> = pages.into_iter().flat_map(|p| p.entries).collect();
        assert_eq!(names(&joined), want, "pages of {limit} under \"b/\"");
    }
    let page = |after, limit| ok(store.list("b/", Some(after), limit), "list a page");
    let rest = page("b/3", 10);
    assert_eq!(
        (names(&rest.entries), rest.next),
        (vec!["b/4", "b/5"], None)
    );
    let last = page("b/5", 10);
    assert_eq!(last, Page::default(), "after the last name under \"b/\"");
    let between = page("b/25", 1);
    assert_eq!(
        names(&between.entries),
        ["b/3"],
        "after a name no entry has"
    );
    assert_eq!(between.next.as_deref(), Some("b/3"));
}

/// Names created and removed between the pages of a listing: no name
/// comes twice, every name that existed throughout comes once, none
/// created before the key shows, none removed before its page shows.
pub fn changes_between_pages_neither_repeat_nor_skip(store: &dyn MetaStore) {
    let originals: Vec<String> = (0..40).map(|i| format!("c/{i:03}")).collect();
    let refs: Vec<&str> = originals.iter().map(String::as_str).collect();
    create_all(store, &refs);
    let mut removed_unlisted = BTreeSet::new();
    let mut made_before_key = BTreeSet::new();
    let mut got: Vec<String> = Vec::new();
    let mut after: Option<String> = None;
    for round in 0.. {
        assert!(round < 100, "the pages never end");
        let page = ok(store.list("c/", after.as_deref(), 6), "list a page");
        let first = page.entries.first().map(|e| e.name.clone());
        got.extend(page.entries.into_iter().map(|e| e.name));
        let Some(key) = page.next else { break };
        // One name before the key (never to show), one right after it
        // (may show), the page's first name (already listed) and the
        // original after the key (never listed) removed.
        let before = format!("c/000.{round}");
        let just_after = format!("{key}+");
        create_all(store, &[before.as_str(), just_after.as_str()]);
        made_before_key.insert(before);
        if let Some(first) = first {
            ok(store.delete(&first, None), "delete a listed name");
        }
        if let Some(next) = originals.iter().find(|n| **n > just_after) {
            if !removed_unlisted.contains(next) {
                ok(store.delete(next, None), "delete an unlisted name");
                removed_unlisted.insert(next.clone());
            }
        }
        after = Some(key);
    }
    let mut sorted = got.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(got, sorted, "names repeated or out of order");
    for name in &originals {
        let shown = got.contains(name);
        let throughout = !removed_unlisted.contains(name);
        assert_eq!(
            shown, throughout,
            "{name}: listed {shown}, existed throughout {throughout}"
        );
    }
    for name in &made_before_key {
        assert!(!got.contains(name), "{name}, made before the key, listed");
    }
}

/// A limit of 0 or past [`MAX_PAGE`], and a continuation key that is no
/// name or does not start with the prefix, are refused as Invalid naming
/// what is wrong; [`MAX_PAGE`] itself is a valid limit.
pub fn page_requests_out_of_range_are_refused(store: &dyn MetaStore) {
    create_all(store, &["a/1", "a/2"]);
    let full = ok(store.list("a/", None, MAX_PAGE), "list the most");
    assert_eq!(names(&full.entries), ["a/1", "a/2"]);
    let invalid = |r: Result<Page, MetaError>, what: &str, needle: &str| match r {
        Err(e @ MetaError::Invalid { .. }) => {
            let text = e.to_string();
            assert!(text.contains(needle), "{what}: {text}");
            assert!(
                text.len() < 400,
                "{what}: a message of {} bytes",
                text.len()
            );
        }
        other => panic!("{what} gave {other:?}, not Invalid"),
    };
    for limit in [0, MAX_PAGE + 1, usize::MAX] {
        invalid(
            store.list("a/", None, limit),
            &format!("limit {limit}"),
            &format!("{MAX_PAGE}"),
        );
    }
    let long = format!("a/{}", "x".repeat(crate::MAX_NAME_LEN));
    for after in ["", "a/\0", "b/1", "a", long.as_str()] {
        invalid(
            store.list("a/", Some(after), 10),
            &format!("continuation key of {} bytes", after.len()),
            "continuation key",
        );
    }
}
