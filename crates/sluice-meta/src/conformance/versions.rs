//! Checks of a put's new version: the pending layout an entry carries
//! while a put writes it, and the one update that switches to it.

use super::{attrs, layout, ok};
use crate::{EntryState, Layout, MetaError, MetaStore, PendingChange, Piece, Redundancy, Update};

/// A layout of one piece on `server`.
fn on(server: &str, object: u64) -> Layout {
    Layout {
        stripe_unit: 4096,
        redundancy: Default::default(),
        pieces: vec![Piece {
            server: server.to_owned(),
            partition: 1,
            object,
        }],
    }
}

/// A pending layout is kept beside the current one (readers' layout
/// unchanged, its server counted as in use), and one update switches to
/// it: layout, size, attributes and state at once, the pending layout
/// forgotten; a stale revision cannot switch, and layouts in updates are
/// checked like those of creates.
pub fn a_pending_version_switches_in_one_update(store: &dyn MetaStore) {
    let old = layout(2, 1);
    let new = on("sluice://pending.test:1", 7);
    for s in old.pieces.iter().chain(&new.pieces) {
        ok(store.add_server(&s.server), "add_server");
    }
    let created = ok(
        store.create("v", &old, &attrs(&[("a", b"1"), ("b", b"2")])),
        "create",
    );
    let ready = Update {
        state: Some(EntryState::Ready),
        size: Some(10),
        ..Update::default()
    };
    let ready = ok(store.update("v", Some(created.revision), &ready), "ready");
    let mark = Update {
        pending: PendingChange::Set(new.clone()),
        ..Update::default()
    };
    let marked = ok(store.update("v", Some(ready.revision), &mark), "mark");
    let seen = ok(store.lookup("v"), "lookup");
    assert_eq!(seen, marked);
    assert_eq!(
        (&seen.layout, seen.pending.as_ref(), seen.size),
        (&old, Some(&new), 10)
    );
    assert!(matches!(
        store.remove_server("sluice://pending.test:1"),
        Err(MetaError::ServerInUse { objects: 1, .. })
    ));
    let mut bad = new.clone();
    bad.stripe_unit = 1000;
    let bad_switch = Update {
        layout: Some(bad.clone()),
        ..Update::default()
    };
    assert!(matches!(
        store.update("v", None, &bad_switch),
        Err(MetaError::Invalid { .. })
    ));
    let bad_mark = Update {
        pending: PendingChange::Set(bad),
        ..Update::default()
    };
    assert!(matches!(
        store.update("v", None, &bad_mark),
        Err(MetaError::Invalid { .. })
    ));
    let switch = Update {
        layout: Some(new.clone()),
        pending: PendingChange::Clear,
        state: Some(EntryState::Ready),
        size: Some(3),
        set_attrs: attrs(&[("c", b"3")]),
        remove_attrs: vec!["a".into(), "b".into()],
        ..Update::default()
    };
    assert!(matches!(
        store.update("v", Some(ready.revision), &switch),
        Err(MetaError::Conflict { .. })
    ));
    let switched = ok(store.update("v", Some(marked.revision), &switch), "switch");
    let seen = ok(store.lookup("v"), "lookup");
    assert_eq!(seen, switched);
    assert_eq!(
        (&seen.layout, seen.pending.as_ref(), seen.size, &seen.attrs),
        (&new, None, 3, &attrs(&[("c", b"3")]))
    );
    // The old version's servers are free; the new one's is not.
    for p in &old.pieces {
        ok(
            store.remove_server(&p.server),
            "remove an old version's server",
        );
    }
    assert!(matches!(
        store.remove_server("sluice://pending.test:1"),
        Err(MetaError::ServerInUse { .. })
    ));
    // Listings carry the pending layout too.
    let remark = Update {
        pending: PendingChange::Set(on("sluice://pending.test:1", 8)),
        ..Update::default()
    };
    ok(store.update("v", None, &remark), "mark again");
    let page = ok(store.list("", None, 10), "list");
    assert_eq!(
        page.entries[0].pending,
        Some(on("sluice://pending.test:1", 8))
    );
    let cleared = Update {
        pending: PendingChange::Clear,
        ..Update::default()
    };
    let e = ok(store.update("v", None, &cleared), "clear");
    assert_eq!((e.pending, e.layout), (None, new));
}

/// `pieces` pieces on the `n` servers `sluice://r-I.test:1` in turn.
fn spread(n: usize, pieces: usize, redundancy: Redundancy) -> Layout {
    Layout {
        stripe_unit: 4096,
        redundancy,
        pieces: (0..pieces)
            .map(|i| Piece {
                server: format!("sluice://r-{}.test:1", i % n),
                partition: 1,
                object: i as u64,
            })
            .collect(),
    }
}

/// Replicated and erasure-coded layouts are kept as they were given, in
/// the current and the pending layout; layouts whose pieces do not fit
/// their redundancy, or whose pieces that stand in for each other share a
/// server, are refused in creates and in updates.
pub fn redundancy_is_kept_and_checked(store: &dyn MetaStore) {
    for i in 0..6 {
        ok(
            store.add_server(&format!("sluice://r-{i}.test:1")),
            "add_server",
        );
    }
    // Copy j of column c on server c + j: four columns of three copies
    // over six servers.
    let mut replicated = spread(6, 12, Redundancy::Replicas(3));
    for (k, p) in replicated.pieces.iter_mut().enumerate() {
        p.server = format!("sluice://r-{}.test:1", (k / 3 + k % 3) % 6);
    }
    let erasure = spread(6, 6, Redundancy::Erasure { data: 4, parity: 2 });
    let created = ok(store.create("rep", &replicated, &attrs(&[])), "create");
    assert_eq!(created.layout, replicated);
    assert_eq!(ok(store.lookup("rep"), "lookup").layout, replicated);
    let mark = Update {
        pending: PendingChange::Set(erasure.clone()),
        ..Update::default()
    };
    let marked = ok(store.update("rep", Some(created.revision), &mark), "mark");
    assert_eq!(marked.pending.as_ref(), Some(&erasure));
    let switch = Update {
        layout: Some(erasure.clone()),
        pending: PendingChange::Clear,
        ..Update::default()
    };
    let switched = ok(
        store.update("rep", Some(marked.revision), &switch),
        "switch",
    );
    assert_eq!(ok(store.lookup("rep"), "lookup"), switched);
    assert_eq!(
        switched.layout.redundancy,
        Redundancy::Erasure { data: 4, parity: 2 }
    );
    let page = ok(store.list("rep", None, 10), "list");
    assert_eq!(page.entries[0].layout, erasure);

    let bad = [
        // Not whole columns of copies.
        spread(6, 5, Redundancy::Replicas(2)),
        spread(6, 4, Redundancy::Replicas(0)),
        // Two copies of column 0 on one server.
        spread(1, 4, Redundancy::Replicas(2)),
        // The wrong number of pieces for 4+2, parts of 0, a shared server.
        spread(6, 5, Redundancy::Erasure { data: 4, parity: 2 }),
        spread(6, 4, Redundancy::Erasure { data: 4, parity: 0 }),
        spread(5, 6, Redundancy::Erasure { data: 4, parity: 2 }),
    ];
    for layout in bad {
        assert!(
            matches!(
                store.create("bad", &layout, &attrs(&[])),
                Err(MetaError::Invalid { .. })
            ),
            "created {layout:?}"
        );
        let update = Update {
            pending: PendingChange::Set(layout.clone()),
            ..Update::default()
        };
        assert!(
            matches!(
                store.update("rep", None, &update),
                Err(MetaError::Invalid { .. })
            ),
            "updated to {layout:?}"
        );
    }
    assert!(matches!(
        store.lookup("bad"),
        Err(MetaError::NotFound { .. })
    ));
    assert_eq!(ok(store.lookup("rep"), "lookup"), switched);
}

/// The default redundancy is none until set, then what was set last;
/// a bad one is refused and changes nothing.
pub fn the_default_redundancy_is_kept(store: &dyn MetaStore) {
    assert_eq!(
        ok(store.default_redundancy(), "default"),
        Redundancy::Replicas(1)
    );
    for r in [
        Redundancy::Replicas(2),
        Redundancy::Erasure { data: 4, parity: 2 },
        Redundancy::Replicas(3),
    ] {
        ok(store.set_default_redundancy(r), "set");
        assert_eq!(ok(store.default_redundancy(), "default"), r);
    }
    for bad in [
        Redundancy::Replicas(0),
        Redundancy::Erasure { data: 0, parity: 2 },
        Redundancy::Erasure {
            data: 200,
            parity: 100,
        },
    ] {
        assert!(
            matches!(
                store.set_default_redundancy(bad),
                Err(MetaError::Invalid { .. })
            ),
            "{bad:?}"
        );
    }
    assert_eq!(
        ok(store.default_redundancy(), "default"),
        Redundancy::Replicas(3)
    );
}
