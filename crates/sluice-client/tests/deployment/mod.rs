//! What the striped-object tests share: object servers in this process,
//! each with its own store, and a metadata service naming them.
#![allow(dead_code)] // each test binary uses its own part

use std::sync::Arc;
use std::time::Duration;

use sluice_client::obj::{ObjClient, ObjOptions, Segment, Value};
use sluice_client::striped::{StripedClient, PIECE_COLLECTION, PIECE_OF_ATTR};
use sluice_client::ObjUri;
use sluice_meta::{EntryState, MemoryMetaStore, MetaStore};
use sluice_testkit::test_server::TestServer;
use tempfile::TempDir;

/// The smallest stripe unit a layout may have.
pub(crate) const UNIT: u64 = 4096;

/// Object servers, each with its own store, and the metadata service
/// naming them.
pub(crate) struct Deployment {
    pub(crate) servers: Vec<Option<TestServer>>,
    pub(crate) uris: Vec<String>,
    pub(crate) meta: Arc<dyn MetaStore>,
    _dirs: Vec<TempDir>,
}

pub(crate) fn options() -> ObjOptions {
    ObjOptions {
        connect_timeout: Duration::from_secs(5),
        request_timeout: Some(Duration::from_secs(10)),
        ..ObjOptions::default()
    }
}

pub(crate) fn deploy(n: usize) -> Deployment {
    deploy_with(n, Arc::new(MemoryMetaStore::new()))
}

/// `n` object servers named in `meta`.
pub(crate) fn deploy_with(n: usize, meta: Arc<dyn MetaStore>) -> Deployment {
    let mut servers = Vec::new();
    let mut uris = Vec::new();
    let mut dirs = Vec::new();
    for _ in 0..n {
        let dir = tempfile::tempdir().unwrap();
        let server = TestServer::builder()
            .objects(dir.path().join("objects"))
            .metrics()
            .start();
        let uri = server.obj_uri();
        meta.add_server(&uri).unwrap();
        uris.push(uri);
        servers.push(Some(server));
        dirs.push(dir);
    }
    Deployment {
        servers,
        uris,
        meta,
        _dirs: dirs,
    }
}

impl Deployment {
    pub(crate) fn client(&self) -> StripedClient {
        StripedClient::new(Arc::clone(&self.meta), options())
    }

    pub(crate) fn obj_client(&self, i: usize) -> ObjClient {
        let uri: ObjUri = self.uris[i].parse().unwrap();
        ObjClient::connect(&uri, &options()).unwrap()
    }

    /// The pieces (objects marked as one) on server `i`, with the striped
    /// object each was made for.
    pub(crate) fn pieces_on(&self, i: usize) -> Vec<(u64, String)> {
        match self
            .obj_client(i)
            .list(PIECE_COLLECTION, Some(&[PIECE_OF_ATTR]))
        {
            Ok(members) => members
                .into_iter()
                .filter_map(|m| match m.attrs.get(PIECE_OF_ATTR) {
                    Some(Value::Text(of)) => Some((m.object, of.clone())),
                    _ => None,
                })
                .collect(),
            Err(e) if e.is_not_found() => Vec::new(),
            Err(e) => panic!("{e}"),
        }
    }

    /// Asserts every piece on every server belongs to an entry that
    /// names it, every entry's pieces exist, and every entry is ready.
    pub(crate) fn assert_consistent(&self) {
        let entries = all_entries(&*self.meta, "");
        for e in &entries {
            assert_eq!(e.state, EntryState::Ready, "{e:?}");
        }
        for (i, uri) in self.uris.iter().enumerate() {
            let on_server = self.pieces_on(i);
            for (object, of) in &on_server {
                let named = entries.iter().any(|e| {
                    e.name == *of
                        && e.layout
                            .pieces
                            .iter()
                            .any(|p| p.server == *uri && p.object == *object)
                });
                assert!(named, "orphan piece {object} of {of:?} on {uri}");
            }
            for e in &entries {
                for p in e.layout.pieces.iter().filter(|p| p.server == *uri) {
                    assert!(
                        on_server.iter().any(|(o, _)| *o == p.object),
                        "{:?} names piece {} on {uri}, which is missing",
                        e.name,
                        p.object
                    );
                }
            }
        }
    }

    /// Sum of the object write requests server `i` has answered.
    pub(crate) fn writes_on(&self, i: usize) -> u64 {
        self.requests_on(i, "write")
    }

    /// Sum of the object read requests server `i` has answered.
    pub(crate) fn reads_on(&self, i: usize) -> u64 {
        self.requests_on(i, "read")
    }

    fn requests_on(&self, i: usize, command: &str) -> u64 {
        let text = self.servers[i].as_ref().unwrap().scrape();
        let prefix = format!("sluice_obj_requests_total{{command=\"{command}\"");
        text.lines()
            .filter(|l| l.starts_with(&prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }
}

pub(crate) fn seg(offset: u64, length: u64) -> Segment {
    Segment { offset, length }
}

/// `len` bytes that differ with `seed`.
pub(crate) fn bytes(seed: u64, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (sluice_types::splitmix64(seed.wrapping_mul(0x1_0000_0001) ^ i) & 0xff) as u8)
        .collect()
}

/// Every entry under `prefix`, paged through.
pub(crate) fn all_entries(meta: &dyn MetaStore, prefix: &str) -> Vec<sluice_meta::Entry> {
    sluice_meta::entries(meta, prefix)
        .collect::<Result<_, _>>()
        .unwrap()
}
