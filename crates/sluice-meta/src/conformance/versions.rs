//! Checks of a put's new version: the pending layout an entry carries
//! while a put writes it, and the one update that switches to it.

use super::{attrs, layout, ok};
use crate::{EntryState, Layout, MetaError, MetaStore, PendingChange, Piece, Update};

/// A layout of one piece on `server`.
fn on(server: &str, object: u64) -> Layout {
    Layout {
        stripe_unit: 4096,
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
