//! The behaviour every [`MetaStore`] backend must show, one function per
//! property, each given a fresh, empty store. A backend's tests run them
//! all with [`meta_conformance_tests!`](crate::meta_conformance_tests) (one
//! `#[test]` each) or with [`run_all`] (one test, for a backend whose
//! stores share an expensive fixture such as an etcd cluster).
//!
//! The checks panic with a message naming what differed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Barrier;

use crate::{Entry, EntryState, Layout, MetaError, MetaStore, Piece, Update};

mod paging;
mod versions;
pub use paging::{
    a_prefix_bounds_every_page, changes_between_pages_neither_repeat_nor_skip,
    page_requests_out_of_range_are_refused, pages_concatenate_to_the_full_listing,
};
pub use versions::{
    a_pending_version_switches_in_one_update, redundancy_is_kept_and_checked,
    the_default_redundancy_is_kept,
};

/// One property, checked on a fresh store.
pub type Check = fn(&dyn MetaStore);

/// Every check, by name.
pub const CHECKS: &[(&str, Check)] = &[
    ("create_then_lookup", create_then_lookup),
    ("deployment_is_drawn_once", deployment_is_drawn_once),
    (
        "create_of_an_existing_name_fails",
        create_of_an_existing_name_fails,
    ),
    ("missing_names_are_not_found", missing_names_are_not_found),
    (
        "bad_names_and_layouts_are_refused",
        bad_names_and_layouts_are_refused,
    ),
    ("updates_apply_in_order", updates_apply_in_order),
    ("stale_revisions_conflict", stale_revisions_conflict),
    ("revisions_never_repeat", revisions_never_repeat),
    (
        "list_matches_prefixes_exactly",
        list_matches_prefixes_exactly,
    ),
    (
        "list_returns_every_name_of_many",
        list_returns_every_name_of_many,
    ),
    (
        "pages_concatenate_to_the_full_listing",
        pages_concatenate_to_the_full_listing,
    ),
    ("a_prefix_bounds_every_page", a_prefix_bounds_every_page),
    (
        "changes_between_pages_neither_repeat_nor_skip",
        changes_between_pages_neither_repeat_nor_skip,
    ),
    (
        "page_requests_out_of_range_are_refused",
        page_requests_out_of_range_are_refused,
    ),
    ("servers_keep_their_order", servers_keep_their_order),
    ("servers_in_use_stay", servers_in_use_stay),
    (
        "a_pending_version_switches_in_one_update",
        a_pending_version_switches_in_one_update,
    ),
    (
        "redundancy_is_kept_and_checked",
        redundancy_is_kept_and_checked,
    ),
    (
        "the_default_redundancy_is_kept",
        the_default_redundancy_is_kept,
    ),
    ("placements_count_by_one", placements_count_by_one),
    (
        "concurrent_creates_have_one_winner",
        concurrent_creates_have_one_winner,
    ),
    (
        "concurrent_size_at_least_keeps_the_largest",
        concurrent_size_at_least_keeps_the_largest,
    ),
    (
        "concurrent_revision_checked_updates_lose_none",
        concurrent_revision_checked_updates_lose_none,
    ),
];

/// Runs every check, each on a store `make` returns, and names the check
/// that failed.
pub fn run_all(make: &dyn Fn() -> Box<dyn MetaStore>) {
    for (name, check) in CHECKS {
        let store = make();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&*store)));
        if let Err(cause) = r {
            eprintln!("conformance check {name} failed");
            std::panic::resume_unwind(cause);
        }
    }
}

/// One `#[test]` per conformance check. `$make` is evaluated once per
/// test and gives `(keep, store)`: the store, and what must live as long
/// as it (a temporary directory; `()` if nothing).
#[macro_export]
macro_rules! meta_conformance_tests {
    ($make:expr) => {
        $crate::meta_conformance_tests!(@checks $make,
            create_then_lookup,
            deployment_is_drawn_once,
            create_of_an_existing_name_fails,
            missing_names_are_not_found,
            bad_names_and_layouts_are_refused,
            updates_apply_in_order,
            stale_revisions_conflict,
            revisions_never_repeat,
            list_matches_prefixes_exactly,
            list_returns_every_name_of_many,
            pages_concatenate_to_the_full_listing,
            a_prefix_bounds_every_page,
            changes_between_pages_neither_repeat_nor_skip,
            page_requests_out_of_range_are_refused,
            servers_keep_their_order,
            servers_in_use_stay,
            a_pending_version_switches_in_one_update,
            redundancy_is_kept_and_checked,
            the_default_redundancy_is_kept,
            placements_count_by_one,
            concurrent_creates_have_one_winner,
            concurrent_size_at_least_keeps_the_largest,
            concurrent_revision_checked_updates_lose_none,
        );
    };
    (@checks $make:expr, $($check:ident),+ $(,)?) => {
        $(
            #[test]
            fn $check() {
                let (_keep, store) = $make;
                $crate::conformance::$check(&store);
            }
        )+
    };
}

/// A layout of `n` pieces with a 64 KiB stripe unit, on servers
/// `sluice://server-I.test:10810`, object ids from `seed`.
pub fn layout(n: usize, seed: u64) -> Layout {
    Layout {
        stripe_unit: 64 << 10,
        redundancy: Default::default(),
        pieces: (0..n)
            .map(|i| Piece {
                server: format!("sluice://server-{i}.test:10810"),
                partition: 1,
                object: seed * 100 + i as u64,
            })
            .collect(),
    }
}

fn attrs(pairs: &[(&str, &[u8])]) -> BTreeMap<String, Vec<u8>> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.to_vec()))
        .collect()
}

fn ok<T>(r: Result<T, MetaError>, what: &str) -> T {
    r.unwrap_or_else(|e| panic!("{what} failed: {e} ({e:?})"))
}

/// Every entry under `prefix`, paged through with [`crate::entries`].
fn all(store: &dyn MetaStore, prefix: &str) -> Vec<Entry> {
    ok(
        crate::entries(store, prefix).collect(),
        &format!("listing everything under {prefix:?}"),
    )
}

/// A created entry has the layout and attributes given, state Creating, size 0, and reads back the same.
pub fn create_then_lookup(store: &dyn MetaStore) {
    let a = attrs(&[("owner", b"ann"), ("bin", &[0, 255, 10, 13])]);
    let created = ok(store.create("dir/obj", &layout(3, 1), &a), "create");
    assert_eq!(created.name, "dir/obj");
    assert_eq!(created.layout, layout(3, 1));
    assert_eq!(created.state, EntryState::Creating);
    assert_eq!(created.size, 0);
    assert_eq!(created.attrs, a);
    assert!(created.revision > 0, "revision 0 on create");
    assert_eq!(ok(store.lookup("dir/obj"), "lookup"), created);
}

/// A second create of a name fails with Exists and changes nothing.
pub fn create_of_an_existing_name_fails(store: &dyn MetaStore) {
    let first = ok(store.create("x", &layout(1, 1), &BTreeMap::new()), "create");
    match store.create("x", &layout(2, 2), &BTreeMap::new()) {
        Err(MetaError::Exists { name }) => assert_eq!(name, "x"),
        other => panic!("second create of x gave {other:?}"),
    }
    assert_eq!(
        ok(store.lookup("x"), "lookup"),
        first,
        "the loser changed the entry"
    );
}

/// Every operation on a missing name fails with NotFound, also on a
/// name too long for any entry to have; listing under such a prefix
/// finds nothing.
pub fn missing_names_are_not_found(store: &dyn MetaStore) {
    let long = "n".repeat(crate::MAX_NAME_LEN + 1);
    for missing in ["nope", long.as_str()] {
        let not_found = |r: Result<(), MetaError>, what: &str| match r {
            Err(MetaError::NotFound { name }) => assert_eq!(name, missing),
            other => panic!("{what} of a missing name gave {other:?}"),
        };
        not_found(store.lookup(missing).map(drop), "lookup");
        not_found(
            store.update(missing, None, &Update::default()).map(drop),
            "update",
        );
        not_found(
            store.update(missing, Some(1), &Update::default()).map(drop),
            "update at a revision",
        );
        not_found(store.delete(missing, None), "delete");
        not_found(store.delete(missing, Some(1)), "delete at a revision");
    }
    ok(store.create("n", &layout(1, 1), &BTreeMap::new()), "create");
    let found = ok(store.list(&long, None, 10), "list under a too long prefix");
    assert_eq!(
        found,
        crate::Page::default(),
        "list under a too long prefix gave {found:?}"
    );
}

/// Empty, over-long and NUL-holding names, and layouts without pieces or with a bad stripe unit, are refused as Invalid and leave nothing behind.
pub fn bad_names_and_layouts_are_refused(store: &dyn MetaStore) {
    let long = "n".repeat(crate::MAX_NAME_LEN + 1);
    for name in ["", "a\0b", long.as_str()] {
        match store.create(name, &layout(1, 1), &BTreeMap::new()) {
            Err(MetaError::Invalid { .. }) => {}
            other => panic!("name {name:?} gave {other:?}, not Invalid"),
        }
    }
    let mut bad = vec![layout(0, 1)];
    for unit in [0, 1000, 2048, (64 << 10) + 1] {
        let mut l = layout(2, 1);
        l.stripe_unit = unit;
        bad.push(l);
    }
    for l in bad {
        match store.create("ok", &l, &BTreeMap::new()) {
            Err(MetaError::Invalid { .. }) => {}
            other => panic!("layout {l:?} gave {other:?}, not Invalid"),
        }
    }
    assert!(
        matches!(store.lookup("ok"), Err(MetaError::NotFound { .. })),
        "a refused create left an entry"
    );
}

/// An update applies state, exact size, size-at-least, set and removed attributes in that order, and raises the revision.
pub fn updates_apply_in_order(store: &dyn MetaStore) {
    let e0 = ok(
        store.create("u", &layout(2, 1), &attrs(&[("a", b"1"), ("b", b"2")])),
        "create",
    );
    let e1 = ok(
        store.update(
            "u",
            Some(e0.revision),
            &Update {
                state: Some(EntryState::Ready),
                size_at_least: Some(100),
                set_attrs: attrs(&[("c", b"3"), ("a", b"9")]),
                remove_attrs: vec!["b".to_owned(), "c".to_owned(), "absent".to_owned()],
                ..Update::default()
            },
        ),
        "update",
    );
    assert!(e1.revision > e0.revision, "revision did not grow");
    assert_eq!(e1.state, EntryState::Ready);
    assert_eq!(e1.size, 100);
    assert_eq!(e1.attrs, attrs(&[("a", b"9")]));
    assert_eq!(e1.layout, e0.layout);
    assert_eq!(ok(store.lookup("u"), "lookup"), e1);
    // A smaller size-at-least keeps the size; an exact size sets it, and
    // a size-at-least in the same update then raises it.
    let e2 = ok(
        store.update(
            "u",
            None,
            &Update {
                size_at_least: Some(50),
                ..Update::default()
            },
        ),
        "update",
    );
    assert_eq!(e2.size, 100);
    let e3 = ok(
        store.update(
            "u",
            Some(e2.revision),
            &Update {
                size: Some(10),
                size_at_least: Some(20),
                state: Some(EntryState::Removing),
                ..Update::default()
            },
        ),
        "update",
    );
    assert_eq!((e3.size, e3.state), (20, EntryState::Removing));
    assert_eq!(ok(store.lookup("u"), "lookup"), e3);
    ok(store.delete("u", Some(e3.revision)), "delete");
    assert!(matches!(store.lookup("u"), Err(MetaError::NotFound { .. })));
}

/// An update or delete at an old revision fails with Conflict naming both revisions, and changes nothing.
pub fn stale_revisions_conflict(store: &dyn MetaStore) {
    let e0 = ok(store.create("s", &layout(1, 1), &BTreeMap::new()), "create");
    let e1 = ok(
        store.update(
            "s",
            None,
            &Update {
                size: Some(5),
                ..Update::default()
            },
        ),
        "update",
    );
    let grow = Update {
        size: Some(9),
        ..Update::default()
    };
    match store.update("s", Some(e0.revision), &grow) {
        Err(MetaError::Conflict {
            name,
            expected,
            found,
        }) => {
            assert_eq!(
                (name.as_str(), expected, found),
                ("s", e0.revision, e1.revision)
            );
        }
        other => panic!("update at a stale revision gave {other:?}"),
    }
    match store.delete("s", Some(e0.revision)) {
        Err(MetaError::Conflict {
            expected, found, ..
        }) => {
            assert_eq!((expected, found), (e0.revision, e1.revision));
        }
        other => panic!("delete at a stale revision gave {other:?}"),
    }
    assert_eq!(
        ok(store.lookup("s"), "lookup"),
        e1,
        "a refused change applied"
    );
}

/// A name deleted and created again never gets a revision it had before.
pub fn revisions_never_repeat(store: &dyn MetaStore) {
    let mut seen = BTreeSet::new();
    for round in 0..3 {
        let e = ok(
            store.create("r", &layout(1, round), &BTreeMap::new()),
            "create",
        );
        assert!(seen.insert(e.revision), "revision {} repeated", e.revision);
        let u = ok(store.update("r", None, &Update::default()), "update");
        assert!(seen.insert(u.revision), "revision {} repeated", u.revision);
        // A revision of the entry before it was deleted never matches the
        // new one.
        if round > 0 {
            assert!(matches!(
                store.update("r", Some(*seen.first().expect("seen")), &Update::default()),
                Err(MetaError::Conflict { .. })
            ));
        }
        ok(store.delete("r", Some(u.revision)), "delete");
    }
}

/// Listing by prefix returns exactly the names that start with it, in byte order, with names that share prefixes and hold `%`, `_`, `/` and non-ASCII characters (the wildcards of SQL LIKE must not act as wildcards).
pub fn list_matches_prefixes_exactly(store: &dyn MetaStore) {
    let names = [
        "a",
        "a/b",
        "a/b/c",
        "a/bc",
        "a%",
        "a_",
        "ab",
        "a/%x",
        "a/_y",
        "a//z",
        "b",
        "%",
        "_",
        "a\u{e9}",
        "a\u{e9}/x",
        "a\u{7f}",
        "\u{10ffff}",
        "x%y_z",
    ];
    for (i, name) in names.iter().enumerate() {
        ok(
            store.create(name, &layout(1, i as u64), &BTreeMap::new()),
            "create",
        );
    }
    for prefix in [
        "",
        "a",
        "a/",
        "a/b",
        "a/b/",
        "a%",
        "a_",
        "%",
        "_",
        "a/%",
        "a/_",
        "a\u{e9}",
        "x%",
        "x%y_",
        "\u{10ffff}",
        "zz",
        "a/b/c/d",
    ] {
        let mut want: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| n.starts_with(prefix))
            .collect();
        want.sort_unstable();
        let got = all(store, prefix);
        let got: Vec<&str> = got.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(got, want, "list({prefix:?})");
    }
    for e in &all(store, "") {
        assert_eq!(
            e,
            &ok(store.lookup(&e.name), "lookup"),
            "list and lookup differ"
        );
    }
}

/// A listing of 640 names (more than a backend may fetch in one request)
/// returns every one, in order, and nothing beside the prefix.
pub fn list_returns_every_name_of_many(store: &dyn MetaStore) {
    for outside in ["big", "big0", "bif/x"] {
        ok(
            store.create(outside, &layout(1, 0), &BTreeMap::new()),
            "create",
        );
    }
    let mut want: Vec<String> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..16)
            .map(|t| {
                s.spawn(move || {
                    (0..40)
                        .map(|i| {
                            let name = format!("big/{t}/{i}");
                            ok(
                                store.create(&name, &layout(2, t), &BTreeMap::new()),
                                "create",
                            );
                            name
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().expect("create thread"))
            .collect()
    });
    want.sort_unstable();
    let got: Vec<String> = all(store, "big/").into_iter().map(|e| e.name).collect();
    assert_eq!(
        got.len(),
        want.len(),
        "list returned {} of {} names",
        got.len(),
        want.len()
    );
    assert_eq!(got, want);
    assert_eq!(all(store, "").len(), want.len() + 3);
}

/// Servers list in the order first added; adding one twice changes nothing.
pub fn servers_keep_their_order(store: &dyn MetaStore) {
    assert!(ok(store.servers(), "servers").is_empty());
    for s in [
        "sluice://b:1",
        "sluice://a:1",
        "sluice://b:1",
        "sluice://c:1",
    ] {
        ok(store.add_server(s), "add_server");
    }
    assert_eq!(
        ok(store.servers(), "servers"),
        ["sluice://b:1", "sluice://a:1", "sluice://c:1"]
    );
    ok(store.remove_server("sluice://a:1"), "remove_server");
    assert_eq!(
        ok(store.servers(), "servers"),
        ["sluice://b:1", "sluice://c:1"]
    );
}

/// A server holding pieces cannot be removed (the error counts the objects and names the first); once they are gone it can.
pub fn servers_in_use_stay(store: &dyn MetaStore) {
    let l = layout(3, 1);
    let busy = l.pieces[1].server.clone();
    for p in &l.pieces {
        ok(store.add_server(&p.server), "add_server");
    }
    let e1 = ok(store.create("m/2", &l, &BTreeMap::new()), "create");
    let e2 = ok(store.create("m/1", &l, &BTreeMap::new()), "create");
    match store.remove_server(&busy) {
        Err(MetaError::ServerInUse {
            server,
            objects,
            example,
        }) => {
            assert_eq!(
                (server.as_str(), objects, example.as_str()),
                (busy.as_str(), 2, "m/1")
            );
        }
        other => panic!("removing a server in use gave {other:?}"),
    }
    assert_eq!(ok(store.servers(), "servers").len(), 3);
    ok(store.delete("m/2", Some(e1.revision)), "delete");
    match store.remove_server(&busy) {
        Err(MetaError::ServerInUse {
            objects: 1,
            example,
            ..
        }) => assert_eq!(example, "m/1"),
        other => panic!("removing a server in use gave {other:?}"),
    }
    ok(store.delete("m/1", Some(e2.revision)), "delete");
    ok(store.remove_server(&busy), "remove_server");
    let left = ok(store.servers(), "servers");
    assert_eq!(
        left,
        [l.pieces[0].server.clone(), l.pieces[2].server.clone()]
    );
}

/// The placement counter grows by one per call, also across 8 threads (no number given twice or skipped).
pub fn placements_count_by_one(store: &dyn MetaStore) {
    let first = ok(store.next_placement(), "next_placement");
    assert_eq!(ok(store.next_placement(), "next_placement"), first + 1);
    let mut all: Vec<u64> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    (0..20)
                        .map(|_| ok(store.next_placement(), "next_placement"))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().expect("placement thread"))
            .collect()
    });
    all.sort_unstable();
    let want: Vec<u64> = (first + 2..first + 2 + 160).collect();
    assert_eq!(all, want, "concurrent placements are not each counted once");
}

/// The deployment's identity is 32 hex digits and the same for every
/// call, however many ask at once the first time.
pub fn deployment_is_drawn_once(store: &dyn MetaStore) {
    let ids: Vec<String> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..8)
            .map(|_| s.spawn(|| ok(store.deployment(), "deployment")))
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("deployment thread"))
            .collect()
    });
    let first = &ids[0];
    assert!(
        first.len() == 32 && first.bytes().all(|b| b.is_ascii_hexdigit()),
        "deployment identity {first:?}"
    );
    assert!(ids.iter().all(|id| id == first), "{ids:?}");
    assert_eq!(&ok(store.deployment(), "deployment"), first);
}

/// 16 threads create one name at once, several rounds: exactly one wins,
/// and the entry is the winner's.
pub fn concurrent_creates_have_one_winner(store: &dyn MetaStore) {
    const THREADS: u64 = 16;
    for round in 0..5 {
        let name = format!("race/{round}");
        let barrier = Barrier::new(THREADS as usize);
        let results: Vec<(u64, Result<Entry, MetaError>)> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (name, barrier) = (&name, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        (t, store.create(name, &layout(2, t), &BTreeMap::new()))
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().expect("create thread"))
                .collect()
        });
        let mut winners = Vec::new();
        for (t, r) in results {
            match r {
                Ok(e) => winners.push((t, e)),
                Err(MetaError::Exists { .. }) => {}
                Err(e) => panic!("a racing create failed otherwise: {e}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        let (t, won) = winners.remove(0);
        assert_eq!(won.layout, layout(2, t));
        assert_eq!(ok(store.lookup(&name), "lookup"), won, "round {round}");
    }
}

/// 16 threads grow one entry with size-at-least updates (no revision) and
/// each sets its own attribute: the size ends at the largest, every
/// attribute is there.
pub fn concurrent_size_at_least_keeps_the_largest(store: &dyn MetaStore) {
    ok(
        store.create("grow", &layout(4, 1), &BTreeMap::new()),
        "create",
    );
    let mut rng = fastrand::Rng::with_seed(7);
    let sizes: Vec<Vec<u64>> = (0..16)
        .map(|_| (0..10).map(|_| rng.u64(1..1 << 40)).collect())
        .collect();
    std::thread::scope(|s| {
        for (t, sizes) in sizes.iter().enumerate() {
            s.spawn(move || {
                for (i, &size) in sizes.iter().enumerate() {
                    let u = Update {
                        size_at_least: Some(size),
                        set_attrs: attrs(&[(&format!("t{t}"), &[i as u8])]),
                        ..Update::default()
                    };
                    let e = ok(store.update("grow", None, &u), "update");
                    assert!(e.size >= size, "update returned size {} < {size}", e.size);
                }
            });
        }
    });
    let e = ok(store.lookup("grow"), "lookup");
    let max = sizes.iter().flatten().max().copied();
    assert_eq!(Some(e.size), max);
    let want: BTreeMap<String, Vec<u8>> = (0..16).map(|t| (format!("t{t}"), vec![9])).collect();
    assert_eq!(e.attrs, want);
}

/// 8 threads increment a counter attribute by read, then update at the
/// read revision, retrying on conflict: no increment is lost.
pub fn concurrent_revision_checked_updates_lose_none(store: &dyn MetaStore) {
    const THREADS: u64 = 8;
    const EACH: u64 = 15;
    ok(
        store.create("count", &layout(1, 1), &attrs(&[("n", b"0")])),
        "create",
    );
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for _ in 0..EACH {
                    loop {
                        let e = ok(store.lookup("count"), "lookup");
                        let n: u64 = String::from_utf8_lossy(&e.attrs["n"])
                            .parse()
                            .expect("a number");
                        let u = Update {
                            set_attrs: attrs(&[("n", (n + 1).to_string().as_bytes())]),
                            ..Update::default()
                        };
                        match store.update("count", Some(e.revision), &u) {
                            Ok(_) => break,
                            Err(MetaError::Conflict { .. }) => continue,
                            Err(e) => panic!("update failed: {e}"),
                        }
                    }
                }
            });
        }
    });
    let e = ok(store.lookup("count"), "lookup");
    assert_eq!(e.attrs["n"], (THREADS * EACH).to_string().into_bytes());
}
