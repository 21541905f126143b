//! The in-memory backend against the same conformance suite as SQLite and
//! etcd.

use sluice_meta::MemoryMetaStore;

sluice_meta::meta_conformance_tests!(((), MemoryMetaStore::new()));
