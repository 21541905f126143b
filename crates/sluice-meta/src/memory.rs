//! [`MemoryMetaStore`]: the metadata service held in this process, for
//! single-process deployments and tests. It keeps the semantics every
//! backend keeps (see [`MetaStore`]), and nothing survives the process.
//!
//! One mutex guards the whole state: every method is one short critical
//! section over in-memory maps, so the lock is never held across I/O and
//! each method is atomic as the trait requires.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard};

use crate::{Entry, EntryState, Layout, MetaError, MetaStore, Page, Redundancy, Update};

/// A complete metadata service in memory.
#[derive(Debug)]
pub struct MemoryMetaStore {
    state: Mutex<State>,
    deployment: String,
}

impl Default for MemoryMetaStore {
    fn default() -> Self {
        Self {
            state: Mutex::default(),
            deployment: crate::new_deployment_id(),
        }
    }
}

#[derive(Debug, Default)]
struct State {
    /// Object servers in the order they were added.
    servers: Vec<String>,
    /// The next value [`MetaStore::next_placement`] returns.
    placement: u64,
    /// [`MetaStore::default_redundancy`].
    redundancy: Redundancy,
    entries: BTreeMap<String, Entry>,
    /// The last revision given to any entry. Revisions are unique across
    /// the store (as etcd's are), so a name removed and made again never
    /// reuses a revision a writer may still hold.
    revision: u64,
}

impl State {
    fn next_revision(&mut self) -> u64 {
        self.revision += 1;
        self.revision
    }

    /// The entry of `name`, checked against `expected` if given.
    fn entry_at(&mut self, name: &str, expected: Option<u64>) -> Result<&mut Entry, MetaError> {
        let entry = self
            .entries
            .get_mut(name)
            .ok_or_else(|| MetaError::NotFound { name: name.into() })?;
        match expected {
            Some(expected) if expected != entry.revision => Err(MetaError::Conflict {
                name: name.into(),
                expected,
                found: entry.revision,
            }),
            _ => Ok(entry),
        }
    }
}

impl MemoryMetaStore {
    /// An empty store: no servers, no entries.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // No method leaves the state half changed before it could panic,
        // so a poisoned lock still guards consistent maps.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Checks what every backend refuses: a bad name, and layouts that break
/// [`Layout`]'s rules.
fn check_new(name: &str, layout: &Layout) -> Result<(), MetaError> {
    crate::check_name(name)?;
    layout.check()
}

impl MetaStore for MemoryMetaStore {
    fn add_server(&self, uri: &str) -> Result<(), MetaError> {
        if uri.is_empty() {
            return Err(MetaError::Invalid {
                what: "object server URI".into(),
                why: "it is empty".into(),
            });
        }
        let mut s = self.state();
        if !s.servers.iter().any(|have| have == uri) {
            s.servers.push(uri.to_owned());
        }
        Ok(())
    }

    fn remove_server(&self, uri: &str) -> Result<(), MetaError> {
        let mut s = self.state();
        let mut users = s.entries.values().filter(|e| e.uses_server(uri));
        if let Some(first) = users.next() {
            return Err(MetaError::ServerInUse {
                server: uri.to_owned(),
                objects: 1 + users.count() as u64,
                example: first.name.clone(),
            });
        }
        // Removing a server that is not there is not an error, as adding
        // one that is there is not.
        s.servers.retain(|have| have != uri);
        Ok(())
    }

    fn servers(&self) -> Result<Vec<String>, MetaError> {
        Ok(self.state().servers.clone())
    }

    fn deployment(&self) -> Result<String, MetaError> {
        Ok(self.deployment.clone())
    }

    fn default_redundancy(&self) -> Result<Redundancy, MetaError> {
        Ok(self.state().redundancy)
    }

    fn set_default_redundancy(&self, redundancy: Redundancy) -> Result<(), MetaError> {
        redundancy.check()?;
        self.state().redundancy = redundancy;
        Ok(())
    }

    fn next_placement(&self) -> Result<u64, MetaError> {
        let mut s = self.state();
        let at = s.placement;
        s.placement = s.placement.wrapping_add(1);
        Ok(at)
    }

    fn create(
        &self,
        name: &str,
        layout: &Layout,
        attrs: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Entry, MetaError> {
        check_new(name, layout)?;
        let mut s = self.state();
        if s.entries.contains_key(name) {
            return Err(MetaError::Exists { name: name.into() });
        }
        let entry = Entry {
            name: name.to_owned(),
            layout: layout.clone(),
            state: EntryState::Creating,
            size: 0,
            attrs: attrs.clone(),
            pending: None,
            revision: s.next_revision(),
        };
        s.entries.insert(name.to_owned(), entry.clone());
        Ok(entry)
    }

    fn lookup(&self, name: &str) -> Result<Entry, MetaError> {
        self.state()
            .entries
            .get(name)
            .cloned()
            .ok_or_else(|| MetaError::NotFound { name: name.into() })
    }

    fn list(&self, prefix: &str, after: Option<&str>, limit: usize) -> Result<Page, MetaError> {
        crate::check_page(prefix, after, limit)?;
        // `after` starts with `prefix`, so it is the later start.
        let start = after.map_or(Bound::Included(prefix), Bound::Excluded);
        let s = self.state();
        let probe = s
            .entries
            .range::<str, _>((start, Bound::Unbounded))
            .take_while(|(name, _)| name.starts_with(prefix))
            .take(limit + 1)
            .map(|(_, e)| e.clone())
            .collect();
        Ok(Page::probed(probe, limit))
    }

    fn update(
        &self,
        name: &str,
        expected_revision: Option<u64>,
        update: &Update,
    ) -> Result<Entry, MetaError> {
        update.check()?;
        let mut s = self.state();
        let revision = s.revision + 1;
        let entry = s.entry_at(name, expected_revision)?;
        update.apply(entry);
        entry.revision = revision;
        let out = entry.clone();
        s.revision = revision;
        Ok(out)
    }

    fn delete(&self, name: &str, expected_revision: Option<u64>) -> Result<(), MetaError> {
        let mut s = self.state();
        s.entry_at(name, expected_revision)?;
        s.entries.remove(name);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier};

    use super::*;
    use crate::Piece;

    fn layout(servers: &[&str]) -> Layout {
        Layout {
            stripe_unit: 64 << 10,
            redundancy: Default::default(),
            pieces: servers
                .iter()
                .enumerate()
                .map(|(i, s)| Piece {
                    server: (*s).to_owned(),
                    partition: 1,
                    object: 100 + i as u64,
                })
                .collect(),
        }
    }

    fn no_attrs() -> BTreeMap<String, Vec<u8>> {
        BTreeMap::new()
    }

    #[test]
    fn create_lookup_and_exists() {
        let m = MemoryMetaStore::new();
        let l = layout(&["sluice://a:1", "sluice://b:1"]);
        let e = m.create("dir/x", &l, &no_attrs()).unwrap();
        assert_eq!(e.state, EntryState::Creating);
        assert_eq!(e.size, 0);
        assert_eq!(m.lookup("dir/x").unwrap(), e);
        assert!(matches!(
            m.create("dir/x", &l, &no_attrs()),
            Err(MetaError::Exists { name }) if name == "dir/x"
        ));
        assert!(matches!(m.lookup("dir/y"), Err(MetaError::NotFound { .. })));
    }

    #[test]
    fn bad_layouts_and_names_are_refused() {
        let m = MemoryMetaStore::new();
        let mut l = layout(&["sluice://a:1"]);
        l.stripe_unit = 1000;
        let e = m.create("x", &l, &no_attrs()).unwrap_err();
        assert!(e.to_string().contains("stripe unit 1000"), "{e}");
        l.stripe_unit = 2048;
        assert!(matches!(
            m.create("x", &l, &no_attrs()),
            Err(MetaError::Invalid { .. })
        ));
        let l = layout(&[]);
        let e = m.create("x", &l, &no_attrs()).unwrap_err();
        assert!(e.to_string().contains("no pieces"), "{e}");
        let e = m
            .create("", &layout(&["sluice://a:1"]), &no_attrs())
            .unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");
        assert!(m.list("", None, 10).unwrap().entries.is_empty());
    }

    #[test]
    fn updates_compare_revisions_and_compose() {
        let m = MemoryMetaStore::new();
        let e = m
            .create("x", &layout(&["sluice://a:1"]), &no_attrs())
            .unwrap();
        let grow = Update {
            size_at_least: Some(100),
            ..Update::default()
        };
        let e1 = m.update("x", Some(e.revision), &grow).unwrap();
        assert_eq!(e1.size, 100);
        assert!(e1.revision > e.revision);
        // A stale revision loses, and changes nothing.
        let ready = Update {
            state: Some(EntryState::Ready),
            ..Update::default()
        };
        match m.update("x", Some(e.revision), &ready) {
            Err(MetaError::Conflict {
                expected, found, ..
            }) => assert_eq!((expected, found), (e.revision, e1.revision)),
            other => panic!("{other:?}"),
        }
        assert_eq!(m.lookup("x").unwrap(), e1);
        // Without a revision, size-at-least never shrinks.
        let smaller = Update {
            size_at_least: Some(50),
            set_attrs: [("k".to_owned(), b"v".to_vec())].into(),
            ..Update::default()
        };
        let e2 = m.update("x", None, &smaller).unwrap();
        assert_eq!(e2.size, 100);
        assert_eq!(e2.attrs.get("k").map(Vec::as_slice), Some(&b"v"[..]));
        // An exact size truncates; attributes are removed.
        let cut = Update {
            size: Some(10),
            remove_attrs: vec!["k".to_owned()],
            ..Update::default()
        };
        let e3 = m.update("x", None, &cut).unwrap();
        assert_eq!(e3.size, 10);
        assert!(e3.attrs.is_empty());
        assert!(matches!(
            m.update("nope", None, &cut),
            Err(MetaError::NotFound { .. })
        ));
    }

    #[test]
    fn delete_checks_the_revision() {
        let m = MemoryMetaStore::new();
        let e = m
            .create("x", &layout(&["sluice://a:1"]), &no_attrs())
            .unwrap();
        let e1 = m.update("x", None, &Update::default()).unwrap();
        assert!(matches!(
            m.delete("x", Some(e.revision)),
            Err(MetaError::Conflict { .. })
        ));
        m.delete("x", Some(e1.revision)).unwrap();
        assert!(matches!(
            m.delete("x", None),
            Err(MetaError::NotFound { .. })
        ));
        // A name made again gets a revision never seen before.
        let again = m
            .create("x", &layout(&["sluice://a:1"]), &no_attrs())
            .unwrap();
        assert!(again.revision > e1.revision);
    }

    #[test]
    fn list_by_prefix_is_sorted_and_exact() {
        let m = MemoryMetaStore::new();
        let l = layout(&["sluice://a:1"]);
        for n in ["b/2", "a", "b/1", "b", "ba/1", "c"] {
            m.create(n, &l, &no_attrs()).unwrap();
        }
        let names =
            |p: &str| -> Vec<String> { crate::entries(&m, p).map(|e| e.unwrap().name).collect() };
        assert_eq!(names("b/"), ["b/1", "b/2"]);
        assert_eq!(names("b"), ["b", "b/1", "b/2", "ba/1"]);
        assert_eq!(names(""), ["a", "b", "b/1", "b/2", "ba/1", "c"]);
        assert!(names("d").is_empty());
    }

    #[test]
    fn servers_in_order_and_refused_while_in_use() {
        let m = MemoryMetaStore::new();
        m.add_server("sluice://b:1").unwrap();
        m.add_server("sluice://a:1").unwrap();
        m.add_server("sluice://b:1").unwrap();
        assert_eq!(m.servers().unwrap(), ["sluice://b:1", "sluice://a:1"]);
        m.create("x", &layout(&["sluice://a:1"]), &no_attrs())
            .unwrap();
        m.create("y", &layout(&["sluice://a:1"]), &no_attrs())
            .unwrap();
        match m.remove_server("sluice://a:1") {
            Err(MetaError::ServerInUse {
                server,
                objects,
                example,
            }) => {
                assert_eq!((server.as_str(), objects), ("sluice://a:1", 2));
                assert_eq!(example, "x");
            }
            other => panic!("{other:?}"),
        }
        m.remove_server("sluice://b:1").unwrap();
        assert_eq!(m.servers().unwrap(), ["sluice://a:1"]);
        m.delete("x", None).unwrap();
        m.delete("y", None).unwrap();
        m.remove_server("sluice://a:1").unwrap();
        assert!(m.servers().unwrap().is_empty());
    }

    #[test]
    fn placement_counts_up_across_threads() {
        let m = Arc::new(MemoryMetaStore::new());
        let got: Vec<u64> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    let m = Arc::clone(&m);
                    s.spawn(move || {
                        (0..50)
                            .map(|_| m.next_placement().unwrap())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        let mut got = got;
        got.sort_unstable();
        assert_eq!(got, (0..200).collect::<Vec<_>>());
    }

    #[test]
    fn one_of_many_concurrent_creators_wins() {
        let m = Arc::new(MemoryMetaStore::new());
        let start = Arc::new(Barrier::new(8));
        let wins = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let (m, start) = (Arc::clone(&m), Arc::clone(&start));
                    s.spawn(move || {
                        let server = format!("sluice://s{i}:1");
                        start.wait();
                        match m.create("race", &layout(&[&server]), &no_attrs()) {
                            Ok(_) => 1,
                            Err(MetaError::Exists { .. }) => 0,
                            Err(e) => panic!("{e}"),
                        }
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum::<u32>()
        });
        assert_eq!(wins, 1);
    }
}
