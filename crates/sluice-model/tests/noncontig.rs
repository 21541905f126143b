//! The non-contiguous transfer model (section 4.1 and figure 8 of "Non-Contiguous I/O Support for Object-Based Storage").

use sluice_model::noncontig::{
    by_segment_size, figure8_sizes, transfer_time, Ddt, Direction, NoncontigParams,
    FIGURE8_FILE_BYTES,
};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * b.abs().max(1e-12)
}

#[test]
fn formulas_at_one_point() {
    // n = 1000 segments of x = 100 bytes, RTT 30 us, BW 800 Mb/s = 1e8 B/s.
    let p = NoncontigParams::paper();
    let it = transfer_time(&p, Ddt::Iterative, 1000, 100).unwrap();
    assert!(close(it.time, 100_000.0 / 1e8 + 1000.0 * 30e-6));
    let sgl = transfer_time(&p, Ddt::Sgl, 1000, 100).unwrap();
    assert!(close(sgl.time, (100_000.0 + 16_000.0 + 16.0) / 1e8 + 30e-6));
    let st = transfer_time(&p, Ddt::Strided, 1000, 100).unwrap();
    assert!(close(st.time, (100_000.0 + 16.0) / 1e8 + 30e-6));
    assert!(close(st.throughput, 100_000.0 / st.time));
    // A read pays half a round trip more, whatever the DDT.
    let rp = NoncontigParams {
        direction: Direction::Read,
        ..p
    };
    for d in Ddt::ALL {
        let w = transfer_time(&p, d, 1000, 100).unwrap();
        let r = transfer_time(&rp, d, 1000, 100).unwrap();
        assert!(close(r.time - w.time, 15e-6));
    }
}

/// On a full-duplex link a read's list goes up while its data comes down:
/// the larger stream counts, not their sum; writes are unchanged.
#[test]
fn full_duplex_reads_overlap_the_list_with_the_data() {
    let paper = NoncontigParams::paper();
    let duplex = NoncontigParams {
        full_duplex: true,
        ..paper
    };
    let read = |p: NoncontigParams| NoncontigParams {
        direction: Direction::Read,
        ..p
    };
    // 8-byte segments: the 16-byte entries outweigh the data.
    let sgl = transfer_time(&read(duplex), Ddt::Sgl, 1000, 8).unwrap();
    assert!(close(sgl.time, (16_000.0 + 16.0) / 1e8 + 30e-6 + 15e-6));
    let shared = transfer_time(&read(paper), Ddt::Sgl, 1000, 8).unwrap();
    assert!(close(shared.time, (8_000.0 + 16_016.0) / 1e8 + 45e-6));
    // 4 KiB segments: the data outweighs the list.
    let sgl = transfer_time(&read(duplex), Ddt::Sgl, 10, 4096).unwrap();
    assert!(close(sgl.time, 40_960.0 / 1e8 + 45e-6));
    for d in Ddt::ALL {
        let a = transfer_time(&paper, d, 1000, 8).unwrap();
        let b = transfer_time(&duplex, d, 1000, 8).unwrap();
        assert_eq!(a, b, "writes do not change");
    }
}

/// A list cut into requests of at most `max_segments` is a two-stage
/// pipeline on a full-duplex link: one request moves list then data (the
/// sum), p requests overlap all but 1/p of the smaller stream.
#[test]
fn full_duplex_reads_overlap_only_between_requests() {
    let read = |max_segments| NoncontigParams {
        full_duplex: true,
        direction: Direction::Read,
        max_segments,
        ..NoncontigParams::paper()
    };
    let (list, data) = (16.0 * 1000.0 + 16.0, 8_000.0);
    let extra = 30e-6 + 15e-6;
    // One request: nothing overlaps.
    let one = transfer_time(&read(Some(1000)), Ddt::Sgl, 1000, 8).unwrap();
    assert!(close(one.time, (list + data) / 1e8 + extra));
    // Four requests: a quarter of the sum, then three quarters of the
    // larger stream.
    let four = transfer_time(&read(Some(250)), Ddt::Sgl, 1000, 8).unwrap();
    assert!(close(
        four.time,
        ((list + data) / 4.0 + 0.75 * list) / 1e8 + extra
    ));
    // No limit: the larger stream alone.
    let all = transfer_time(&read(None), Ddt::Sgl, 1000, 8).unwrap();
    assert!(close(all.time, list / 1e8 + extra));
    assert!(one.time > four.time && four.time > all.time);
    // One request per segment has no list to overlap.
    let it = transfer_time(&read(Some(1)), Ddt::Iterative, 1000, 8).unwrap();
    assert!(close(it.time, data / 1e8 + 1000.0 * 30e-6 + 15e-6));
    assert!(NoncontigParams {
        max_segments: Some(0),
        ..read(None)
    }
    .validate()
    .is_err());
}

/// Figure 8's findings: strided is best at every segment size, throughput
/// grows with segment size and all three approach the link rate.
#[test]
fn figure8_shape() {
    let p = NoncontigParams::paper();
    let pts = by_segment_size(&p, FIGURE8_FILE_BYTES, &figure8_sizes()).unwrap();
    assert_eq!(pts.len(), 21);
    for w in pts.windows(2) {
        for d in 0..3 {
            assert!(w[1].transfers[d].throughput >= w[0].transfers[d].throughput);
        }
    }
    for pt in &pts {
        let [it, sgl, st] = pt.transfers;
        assert_eq!(pt.segments * pt.segment_bytes, FIGURE8_FILE_BYTES);
        assert!(st.throughput >= sgl.throughput && st.throughput >= it.throughput);
    }
    let last = &pts[pts.len() - 1];
    for t in last.transfers {
        assert!(t.throughput > 0.99 * p.bandwidth, "{t:?}");
    }
    // SGL beats iterative once a segment's round trip (3000 bytes' worth at
    // 1e8 B/s) outweighs its 16-byte entry.
    assert!(pts
        .iter()
        .all(|pt| pt.transfers[1].throughput > pt.transfers[0].throughput));
}

#[test]
fn bad_inputs_are_errors() {
    let p = NoncontigParams::paper();
    assert!(transfer_time(&p, Ddt::Sgl, 0, 10).is_err());
    assert!(transfer_time(&p, Ddt::Sgl, 10, 0).is_err());
    let bad = NoncontigParams {
        bandwidth: 0.0,
        ..p
    };
    let e = transfer_time(&bad, Ddt::Sgl, 1, 1).unwrap_err();
    assert!(e.to_string().contains("bandwidth"), "{e}");
    assert!(by_segment_size(&p, 100, &[200]).is_err());
    assert!(by_segment_size(&p, 0, &[1]).is_err());
}
