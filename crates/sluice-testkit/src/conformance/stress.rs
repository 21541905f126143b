//! The checks that go beyond one request at a time: threads writing at
//! once, a crash after flushes and FUA writes, and generated operation
//! sequences against a model of the device.

use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};
use sluice_storage::ZeroMode;
use sluice_types::splitmix64;

use super::{
    align_of, extents_agree_with_reads, fail, op, pattern, verify, writable, write_pattern, Access,
    CheckResult, Factory, Failure, Model, Outcome,
};
use crate::crash::{DurabilityModel, SECTOR};

/// Threads write disjoint regions at once, each reading its writes back
/// as it goes; afterwards every region holds exactly its thread's last
/// writes.
pub fn disjoint_concurrent_writers(factory: Factory<'_>) -> CheckResult {
    const THREADS: u64 = 4;
    const REGION: u64 = 512 * 1024;
    let subject = factory(Access::ReadWrite);
    writable(&subject)?;
    let dev = subject.device.as_ref();
    let a = align_of(dev);
    let flush = dev.capability().flush;
    let results: Vec<Result<Model, Failure>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                scope.spawn(move || {
                    let base = t * REGION;
                    // A model of the whole device; only this region is used.
                    let mut model = Model::new(base + REGION);
                    let mut x = splitmix64(t + 1);
                    for i in 0..60u64 {
                        x = splitmix64(x);
                        let units = REGION / a;
                        let off = base + (x % units) * a;
                        let len = ((x >> 24) % (units.min(70_000 / a + 1)) + 1) * a;
                        let len = len.min(base + REGION - off);
                        write_pattern(dev, &mut model, off, len, x, i % 7 == 0, i % 2 == 0)?;
                        verify(
                            dev,
                            &model,
                            off,
                            len,
                            i % 3 == 0,
                            &format!("thread {t} reading its write {i}"),
                        )?;
                        if flush && i % 13 == 0 {
                            op("flush", dev.flush())?;
                        }
                    }
                    Ok(model)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| fail("a writer thread panicked"))
            })
            .collect()
    });
    for (t, model) in results.into_iter().enumerate() {
        let model = model?;
        let base = t as u64 * REGION;
        verify(
            dev,
            &model,
            base,
            REGION,
            false,
            &format!("region of thread {t} after all writers finished"),
        )?;
    }
    Ok(Outcome::Passed)
}

/// On a stack that can lose unflushed writes: random writes, FUA writes
/// and flushes, then a crash; what survives is checked against the
/// [`DurabilityModel`]: every write acknowledged by a flush, and every
/// FUA write, is there.
pub fn flush_and_fua_survive_a_crash(factory: Factory<'_>) -> CheckResult {
    let mut subject = factory(Access::ReadWrite);
    writable(&subject)?;
    let Some(crash) = subject.crash.take() else {
        return Ok(Outcome::Skipped("the stack cannot lose unflushed writes"));
    };
    let dev = Arc::clone(&subject.device);
    let cap = dev.capability();
    if !cap.flush || !cap.fua {
        return fail("a stack that can lose writes must offer flush and FUA");
    }
    let unit = align_of(dev.as_ref()).div_ceil(SECTOR as u64).max(1);
    let sectors = (1 << 20) / SECTOR as u64;
    let mut model = DurabilityModel::new(sectors);
    let mut x = 0x0d15_ea5e_u64;
    let mut buf = vec![0u8; 64 * SECTOR];
    let ops = 400;
    for i in 0..ops {
        x = splitmix64(x);
        if x.is_multiple_of(10) && i < ops - 8 {
            let f = model.begin_flush();
            op("flush", dev.flush())?;
            model.flush_acked(f);
            continue;
        }
        let count = ((x >> 8) % (64 / unit) + 1) * unit;
        let sector = (x >> 20) % ((sectors - count) / unit) * unit;
        // The last writes are FUA with no flush after them.
        let fua = (x >> 40).is_multiple_of(4) || i >= ops - 8;
        let data = &mut buf[..count as usize * SECTOR];
        let w = model.begin_write(sector, count, data);
        op(
            format_args!("write of {count} sectors at sector {sector} (fua {fua})"),
            dev.write_at(data, sector * SECTOR as u64, fua),
        )?;
        model.write_acked(w, fua);
    }
    drop(dev);
    let survivor = crash();
    let mut image = vec![0u8; sectors as usize * SECTOR];
    op(
        "reading back after the crash",
        survivor.read_at(&mut image, 0),
    )?;
    let report = model.check_after_crash(&image);
    if !report.violations.is_empty() {
        let first: Vec<String> = report
            .violations
            .iter()
            .take(3)
            .map(ToString::to_string)
            .collect();
        return fail(format!(
            "{} sectors broke the durability rules ({} bytes of flushed or FUA data lost), e.g. {}",
            report.violations.len(),
            report.lost_durable_bytes(),
            first.join("; ")
        ));
    }
    Ok(Outcome::Passed)
}

/// One step of a generated operation sequence; offsets and lengths are
/// in units of the device's minimum block.
#[derive(Debug, Clone)]
enum Step {
    Write {
        at: u64,
        units: u64,
        seed: u64,
        fua: bool,
    },
    Read {
        at: u64,
        units: u64,
    },
    /// One `write_pieces` call: (at, units) pieces in order, overlaps
    /// allowed (the later wins).
    WritePieces {
        pieces: Vec<(u64, u64)>,
        seed: u64,
        fua: bool,
    },
    Zero {
        at: u64,
        units: u64,
        may_trim: bool,
    },
    Trim {
        at: u64,
        units: u64,
    },
    Flush,
    Extents {
        at: u64,
        units: u64,
        max: usize,
    },
}

fn steps(total: u64, max_len: u64) -> impl Strategy<Value = Vec<Step>> {
    let range = (0..total).prop_flat_map(move |at| (Just(at), 1..=(total - at).min(max_len)));
    let step = prop_oneof![
        4 => (range.clone(), any::<u64>(), any::<bool>())
            .prop_map(|((at, units), seed, fua)| Step::Write { at, units, seed, fua }),
        3 => range.clone().prop_map(|(at, units)| Step::Read { at, units }),
        2 => (proptest::collection::vec(range.clone(), 1..40), any::<u64>(), any::<bool>())
            .prop_map(|(pieces, seed, fua)| Step::WritePieces { pieces, seed, fua }),
        1 => (range.clone(), any::<bool>())
            .prop_map(|((at, units), may_trim)| Step::Zero { at, units, may_trim }),
        1 => range.clone().prop_map(|(at, units)| Step::Trim { at, units }),
        1 => Just(Step::Flush),
        1 => (range, 1..8usize).prop_map(|((at, units), max)| Step::Extents { at, units, max }),
    ];
    proptest::collection::vec(step, 1..40)
}

/// Runs one generated sequence on a fresh device against the model.
fn run_steps(factory: Factory<'_>, steps: &[Step]) -> Result<(), Failure> {
    let subject = factory(Access::ReadWrite);
    writable(&subject)?;
    let dev = subject.device.as_ref();
    let cap = dev.capability();
    let a = align_of(dev);
    let mut model = Model::new(dev.size());
    for (i, step) in steps.iter().enumerate() {
        let what = format!("step {i} {step:?}");
        match *step {
            Step::Write {
                at,
                units,
                seed,
                fua,
            } => write_pattern(dev, &mut model, at * a, units * a, seed, fua, seed % 2 == 0)?,
            Step::Read { at, units } => verify(dev, &model, at * a, units * a, at % 2 == 1, &what)?,
            Step::WritePieces {
                ref pieces,
                seed,
                fua,
            } => {
                let total: u64 = pieces.iter().map(|&(_, units)| units * a).sum();
                let data = pattern(seed, total as usize);
                let mut rest = data.as_slice();
                let mut list = Vec::with_capacity(pieces.len());
                for &(at, units) in pieces {
                    let (bytes, tail) = rest.split_at((units * a) as usize);
                    list.push((at * a, bytes));
                    rest = tail;
                }
                op(&what, dev.write_pieces(&list, fua))?;
                for (offset, bytes) in list {
                    model.write(offset, bytes);
                }
            }
            Step::Zero {
                at,
                units,
                may_trim,
            } => {
                let mode = ZeroMode {
                    may_trim,
                    fast: false,
                    fua: false,
                };
                op(&what, dev.write_zeroes(at * a, units * a, mode))?;
                model.zero(at * a, units * a);
            }
            Step::Trim { at, units } if cap.trim => {
                op(&what, dev.trim(at * a, units * a, false))?;
                model.trim(at * a, units * a);
            }
            Step::Trim { .. } => {}
            Step::Flush if cap.flush => op(&what, dev.flush())?,
            Step::Flush => {}
            Step::Extents { at, units, max } => {
                extents_agree_with_reads(dev, at * a, units * a, max)
                    .map_err(|f| Failure(format!("{what}: {f}")))?;
            }
        }
    }
    verify(dev, &model, 0, 512 * 1024, false, "the end of the sequence")
}

/// Property-based: random sequences of writes (one range, or many pieces
/// in one call), reads, zeroing, trims, flushes and block-status queries over the first 512 KiB behave like an
/// in-memory model (proptest shrinks a failure to a short sequence).
pub fn operation_sequences_match_a_model(factory: Factory<'_>) -> CheckResult {
    let a = {
        let subject = factory(Access::ReadWrite);
        writable(&subject)?;
        align_of(subject.device.as_ref())
    };
    let total = 512 * 1024 / a;
    let max_len = (150_000 / a).max(1);
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 24,
        max_shrink_iters: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    runner
        .run(&steps(total, max_len), |steps| {
            run_steps(factory, &steps).map_err(|f| TestCaseError::fail(f.0))
        })
        .map_err(|e| Failure(format!("operation sequence: {e}")))?;
    Ok(Outcome::Passed)
}
