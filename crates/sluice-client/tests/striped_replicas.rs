#![allow(clippy::unwrap_used)]
//! Replicated striped objects against real in-process object servers:
//! the copies of each column sit on distinct servers, every copy takes
//! each write, reads spread over the copies, and a read goes on through
//! lost servers for as long as one copy of each column answers, then
//! fails naming every copy's server.

use std::collections::BTreeMap;

use sluice_client::striped::{Pattern, Shape, StripedError, StripedObject, StripedWrite};
use sluice_meta::{Layout, Redundancy};

mod deployment;
use deployment::{bytes, deploy, Deployment, UNIT};

fn all(len: u64) -> Pattern<'static> {
    Pattern::Contiguous {
        offset: 0,
        length: len,
    }
}

fn unit(k: u64) -> Pattern<'static> {
    Pattern::Contiguous {
        offset: k * UNIT,
        length: UNIT,
    }
}

/// The deployment's index of the server `piece` of `layout` is on.
fn server_of(d: &Deployment, layout: &Layout, piece: usize) -> usize {
    let uri = &layout.pieces[piece].server;
    d.uris.iter().position(|u| u == uri).unwrap()
}

/// An object of `units` stripe units in `shape`, written whole.
fn written(d: &Deployment, name: &str, shape: &Shape, units: u64) -> (StripedObject, Vec<u8>) {
    let mut c = d.client();
    let mut o = c.create(name, shape).unwrap();
    let data = bytes(units, units * UNIT);
    c.write(&mut o, &all(units * UNIT), &data, &StripedWrite::default())
        .unwrap();
    (o, data)
}

#[test]
fn copies_of_a_column_are_on_distinct_servers_spread_evenly() {
    let d = deploy(4);
    let mut c = d.client();
    for copies in 1..=4u8 {
        let o = c
            .create(&format!("r{copies}"), &Shape::replicated(UNIT, 4, copies))
            .unwrap();
        let layout = o.layout();
        assert_eq!(layout.redundancy, Redundancy::Replicas(copies));
        assert_eq!(layout.columns(), 4);
        assert_eq!(layout.pieces.len(), 4 * usize::from(copies));
        for column in 0..4 {
            let mut servers: Vec<usize> = layout
                .column_pieces(column)
                .map(|i| server_of(&d, layout, i))
                .collect();
            servers.sort();
            servers.dedup();
            assert_eq!(servers.len(), usize::from(copies), "column {column}");
        }
        let mut per_server = BTreeMap::new();
        for i in 0..layout.pieces.len() {
            *per_server.entry(server_of(&d, layout, i)).or_insert(0) += 1;
        }
        assert!(per_server.values().all(|&n| n == copies), "{per_server:?}");
        // The metadata service has the same layout.
        assert_eq!(c.stat(o.name()).unwrap().layout, *layout);
    }
    // More copies than servers to put them on is refused, naming both.
    match c.create("five", &Shape::replicated(UNIT, 4, 5)) {
        Err(StripedError::TooFewServers { wanted, have, .. }) => assert_eq!((wanted, have), (5, 4)),
        other => panic!("{other:?}"),
    }
    assert!(c.stat("five").is_err());
}

#[test]
fn every_copy_takes_each_write_and_reads_spread_over_them() {
    let d = deploy(3);
    let (o, data) = written(&d, "spread", &Shape::replicated(UNIT, 3, 2), 12);
    // Each piece holds its column whole: read every piece directly.
    let layout = o.layout().clone();
    for column in 0..3 {
        let mut seen = Vec::new();
        for i in layout.column_pieces(column) {
            let piece = &layout.pieces[i];
            let mut s = d.obj_client(server_of(&d, &layout, i));
            let r = s
                .read(piece.object, &[deployment::seg(0, 4 * UNIT)])
                .unwrap();
            seen.push(r.data);
        }
        let want: Vec<u8> = (0..4u64)
            .flat_map(|row| {
                let k = (row * 3 + column as u64) * UNIT;
                data[k as usize..(k + UNIT) as usize].to_vec()
            })
            .collect();
        assert!(seen.iter().all(|s| *s == want), "column {column}");
    }
    // Reads of one unit, again and again, go to both of its copies.
    let before: Vec<u64> = (0..3).map(|i| d.reads_on(i)).collect();
    let mut c = d.client();
    let mut o = c.open("spread").unwrap();
    for _ in 0..8 {
        let r = c.read(&mut o, &unit(0)).unwrap();
        assert_eq!(r.data, data[..UNIT as usize]);
    }
    let copies: Vec<usize> = layout
        .column_pieces(0)
        .map(|i| server_of(&d, &layout, i))
        .collect();
    for s in copies {
        assert!(d.reads_on(s) > before[s], "server {s} never read");
    }
}

#[test]
fn reads_go_on_through_lost_servers_until_a_column_has_no_copy() {
    let mut d = deploy(4);
    let (o2, data2) = written(&d, "two", &Shape::replicated(UNIT, 4, 2), 16);
    let (_, data3) = written(&d, "three", &Shape::replicated(UNIT, 4, 3), 16);
    let layout = o2.layout().clone();
    // Column 0's two copies: lose the first.
    let first = server_of(&d, &layout, layout.column_pieces(0).start);
    let second = server_of(&d, &layout, layout.column_pieces(0).start + 1);
    d.servers[first].take().unwrap().stop().unwrap();
    let mut c = d.client();
    for name in ["two", "three"] {
        let want = if name == "two" { &data2 } else { &data3 };
        let mut o = c.open(name).unwrap();
        for _ in 0..4 {
            let r = c.read(&mut o, &all(16 * UNIT)).unwrap();
            assert!(r.data == *want, "{name}: data differs");
        }
        for k in 0..16 {
            let r = c.read(&mut o, &unit(k)).unwrap();
            assert!(r.data == want[(k * UNIT) as usize..((k + 1) * UNIT) as usize]);
        }
    }
    // A write needs every copy: it fails, naming the lost server.
    let mut o = c.open("two").unwrap();
    let e = c
        .write(
            &mut o,
            &unit(0),
            &vec![1; UNIT as usize],
            &StripedWrite::default(),
        )
        .unwrap_err();
    assert!(e.to_string().contains(&d.uris[first]), "{e}");
    // Lose column 0's other copy too: its units fail, naming both
    // servers; the columns with a copy left still read.
    d.servers[second].take().unwrap().stop().unwrap();
    let mut fresh = d.client();
    let mut o = fresh.open("two").unwrap();
    for k in 0..16u64 {
        let column = (k % 4) as usize;
        let servers: Vec<usize> = layout
            .column_pieces(column)
            .map(|i| server_of(&d, &layout, i))
            .collect();
        let r = fresh.read(&mut o, &unit(k));
        if servers.iter().all(|s| [first, second].contains(s)) {
            match r {
                Err(e @ StripedError::NoCopy { .. }) => {
                    let text = e.to_string();
                    assert!(
                        text.contains(&d.uris[first]) && text.contains(&d.uris[second]),
                        "{text}"
                    );
                }
                other => panic!("unit {k}: {other:?}"),
            }
        } else {
            let r = r.unwrap();
            assert!(r.data == data2[(k * UNIT) as usize..((k + 1) * UNIT) as usize]);
        }
    }
    // Three copies survive two lost servers.
    let mut o = fresh.open("three").unwrap();
    let r = fresh.read(&mut o, &all(16 * UNIT)).unwrap();
    assert!(r.data == data3);
}
