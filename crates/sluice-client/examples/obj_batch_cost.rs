//! Drives an object server with 4 KiB writes, eight at a time, either as
//! one batch frame of eight (`ObjClient::batch`) or as eight requests
//! pipelined one frame each (`ObjClient::pipeline`, merging off): the
//! client half of `scripts/batch-cost`, which counts the server's
//! instructions per write under callgrind for the two.
//!
//!     obj_batch_cost URI batch|single ROUNDS
//!
//! Each round writes eight objects (made first), each at an offset of its
//! own 4 MiB that moves with the round.

use sluice_client::obj::{DataOptions, MergePolicy, ObjClient, ObjOptions, ObjRequest, Segment};
use sluice_client::Durability;
use sluice_client::ObjUri;

const BLOCK: u64 = 4096;
const MEMBERS: usize = 8;
const SPAN_BLOCKS: u64 = 1024;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: obj_batch_cost URI batch|single ROUNDS";
    let uri: ObjUri = args.next().ok_or(usage)?.parse()?;
    let batch = match args.next().as_deref() {
        Some("batch") => true,
        Some("single") => false,
        _ => return Err(usage.into()),
    };
    let rounds: u64 = args.next().ok_or(usage)?.parse()?;
    let options = ObjOptions {
        merge: MergePolicy::Off,
        max_in_flight: MEMBERS,
        ..ObjOptions::default()
    };
    let mut client = ObjClient::connect(&uri.with_merge(MergePolicy::Off), &options)?;
    let objects = client.create("batch-cost", MEMBERS as u32, Durability::Buffered)?;
    let data = vec![0x5au8; BLOCK as usize];
    let opts = DataOptions::default();
    for round in 0..rounds {
        let segments: Vec<[Segment; 1]> = (0..MEMBERS as u64)
            .map(|k| {
                let block = sluice_types::splitmix64(round * MEMBERS as u64 + k) % SPAN_BLOCKS;
                [Segment {
                    offset: block * BLOCK,
                    length: BLOCK,
                }]
            })
            .collect();
        let requests: Vec<ObjRequest<'_>> = objects
            .iter()
            .zip(&segments)
            .map(|(&object, segments)| ObjRequest::Write {
                object,
                segments,
                data: &data,
                options: &opts,
            })
            .collect();
        let results = if batch {
            client.batch(&requests)
        } else {
            client.pipeline(&requests)
        };
        for r in results {
            r?;
        }
    }
    Ok(())
}
