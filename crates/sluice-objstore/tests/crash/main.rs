#![allow(clippy::unwrap_used)] // helper functions outside #[test] unwrap too
//! Kill -9 at random points: a child process (this test binary run
//! again) appends to objects with attributes riding on each append,
//! flushes now and then and reports what it flushed; the parent kills it
//! with SIGKILL, reopens the store and checks that every flushed byte
//! and attribute is there and that every attribute set is whole. A
//! second child makes durable overwrites, punches and appends over
//! objects that start inline (the journal and the move to a file), held
//! to exactly what it acknowledged. Both also run under a simulated
//! power loss (a loop-mounted image copied at the kill).

mod write_set;

use sluice_testkit::programs::program;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use sluice_objstore::{
    AttrValue, ObjectId, ObjectRef, ObjectStore, PartitionId, Segment, StoreOptions, WriteOptions,
};
use sluice_types::splitmix64;

const OBJECTS: u64 = 4;
const PARTITION: PartitionId = PartitionId(0x5eed);
const COLLECTION: &str = "crash";
const CHILD_ENV: &str = "SLUICE_OBJSTORE_CRASH_CHILD";

/// The byte every object holds at every offset.
fn byte_at(object: ObjectId, offset: u64) -> u8 {
    splitmix64(object.0 ^ (offset / 8).wrapping_mul(0x100_0000_01b3)).to_le_bytes()
        [(offset % 8) as usize]
}

fn int(attrs: &[(String, AttrValue)], key: &str) -> Option<i64> {
    attrs
        .iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| match v {
            AttrValue::Integer(n) => Some(*n),
            _ => None,
        })
}

fn objects(store: &ObjectStore) -> Vec<ObjectRef> {
    let page = store
        .list(PARTITION, None, None, OBJECTS as usize, false)
        .unwrap();
    page.entries
        .iter()
        .map(|e| ObjectRef {
            partition: PARTITION,
            object: e.object,
        })
        .collect()
}

/// The child: appends until killed. Each append carries `count` and
/// `mirror` (equal in every set) and `len` (the length after it).
/// Prints `F i:len:count ...` after each flush and `D i len count`
/// after each durable append, for the parent to hold the store to.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let seed: u64 = std::env::var("SLUICE_OBJSTORE_CRASH_SEED")
        .unwrap()
        .parse()
        .unwrap();
    let store = ObjectStore::open(&dir).unwrap();
    let objs = objects(&store);
    let mut rng = fastrand::Rng::with_seed(seed);
    for step in 0u64.. {
        let i = rng.usize(..objs.len());
        let obj = objs[i];
        let (info, attrs) = store.get_attrs(obj, &[]).unwrap();
        let count = int(&attrs, "count").unwrap_or(0) + 1;
        let n = rng.u64(1..6000);
        let data: Vec<u8> = (info.length..info.length + n)
            .map(|o| byte_at(obj.object, o))
            .collect();
        let durable = rng.u8(..10) == 0;
        let len = (info.length + n) as i64;
        let opts = WriteOptions {
            attrs: vec![
                ("count".into(), AttrValue::Integer(count)),
                ("len".into(), AttrValue::Integer(len)),
                ("mirror".into(), AttrValue::Integer(count)),
            ],
            durable,
        };
        if rng.bool() {
            store.append(obj, &data, &opts).unwrap();
        } else {
            store
                .write(obj, &[Segment::new(info.length, n)], &data, &opts)
                .unwrap();
        }
        if durable {
            println!("D {i} {len} {count}");
        }
        if step % 7 == 6 {
            // Each flush form in turn; the line names what it covered.
            let covered: Vec<usize> = match step / 7 % 3 {
                0 => {
                    store.flush_partition(PARTITION).unwrap();
                    (0..objs.len()).collect()
                }
                1 => {
                    store.flush_collection(PARTITION, COLLECTION).unwrap();
                    (0..objs.len()).collect()
                }
                _ => {
                    store.flush_object(obj).unwrap();
                    vec![i]
                }
            };
            let mut line = String::from("F");
            for j in covered {
                let (info, attrs) = store.get_attrs(objs[j], &["count"]).unwrap();
                line += &format!(" {j}:{}:{}", info.length, int(&attrs, "count").unwrap_or(0));
            }
            println!("{line}");
        }
    }
}

/// Makes the store the child works on.
fn set_up(dir: &Path) {
    let store = ObjectStore::open(dir).unwrap();
    store.create_partition(PARTITION).unwrap();
    store.create_collection(PARTITION, COLLECTION).unwrap();
    let durable = WriteOptions {
        durable: true,
        ..Default::default()
    };
    store
        .create(PARTITION, Some(COLLECTION), OBJECTS as u32, &durable)
        .unwrap();
}

/// Runs the child test `child` on `dir` (the cycle number is its seed)
/// until its first line starting with `first`, then a random moment
/// more, kills it with SIGKILL and returns every line it printed.
fn spawn_and_kill(
    dir: &Path,
    child: &str,
    first: char,
    cycle: u64,
    rng: &mut fastrand::Rng,
) -> Vec<String> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", child, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir)
        .env("SLUICE_OBJSTORE_CRASH_SEED", cycle.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The test harness prints first; wait for the child's own progress,
    // then kill it at a random point.
    let mut seen = Vec::new();
    while !seen.last().is_some_and(|l: &String| l.starts_with(first)) {
        seen.push(
            rx.recv_timeout(Duration::from_secs(60))
                .expect("child reports progress"),
        );
    }
    std::thread::sleep(Duration::from_millis(rng.u64(0..60)));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    reader.join().unwrap();
    seen.extend(rx.try_iter());
    seen
}

/// Runs the append child until a random point, kills it with SIGKILL,
/// and raises `floor` (per object: the length and count the store must
/// keep) by what it reported flushed.
fn run_and_kill(dir: &Path, cycle: u64, rng: &mut fastrand::Rng, floor: &mut [(u64, i64)]) {
    for line in spawn_and_kill(dir, "crash_child", 'F', cycle, rng) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.first() {
            Some(&"F") => {
                for w in &words[1..] {
                    let f: Vec<u64> = w.split(':').map(|x| x.parse().unwrap()).collect();
                    let slot = &mut floor[f[0] as usize];
                    *slot = (slot.0.max(f[1]), slot.1.max(f[2] as i64));
                }
            }
            Some(&"D") => {
                let i: usize = words[1].parse().unwrap();
                let slot = &mut floor[i];
                *slot = (
                    slot.0.max(words[2].parse().unwrap()),
                    slot.1.max(words[3].parse().unwrap()),
                );
            }
            _ => {}
        }
    }
}

/// Reopens the store and holds it to `floor`: flushed bytes and
/// attributes present, every attribute set whole, every byte right.
/// After a kill -9 every byte inside the length is the child's (data is
/// written before the length that shows it). After a power loss an
/// unflushed append may come back with its length and attributes but
/// without its data (zeros), as only fsync orders the two on disk; such
/// bytes are accepted past the flushed length and held to from then on
/// (`accepted`: each object's content at the last check).
fn check(dir: &Path, cycle: u64, floor: &[(u64, i64)], accepted: &mut [Vec<u8>], power_loss: bool) {
    let store = ObjectStore::open(dir).unwrap();
    for (i, obj) in objects(&store).into_iter().enumerate() {
        let (info, attrs) = store.get_attrs(obj, &[]).unwrap();
        let count = int(&attrs, "count").unwrap_or(0);
        assert_eq!(
            Some(count),
            int(&attrs, "mirror").or(Some(0)),
            "cycle {cycle}: {obj}: a torn attribute set"
        );
        assert_eq!(
            info.length as i64,
            int(&attrs, "len").unwrap_or(0),
            "cycle {cycle}: {obj}: length and attributes of one append disagree"
        );
        let (min_len, min_count) = floor[i];
        assert!(
            info.length >= min_len,
            "cycle {cycle}: {obj}: length {} lost flushed bytes (flushed {min_len})",
            info.length
        );
        assert!(
            count >= min_count,
            "cycle {cycle}: {obj}: count {count} lost a flushed set (flushed {min_count})"
        );
        let got = store
            .read(obj, &[Segment::new(0, info.length)], &[])
            .unwrap();
        assert_eq!(got.real, info.length);
        let before = accepted[i].len() as u64;
        assert!(
            info.length >= before,
            "cycle {cycle}: {obj}: shrank from {before} to {}",
            info.length
        );
        let bad = (0..info.length).find(|&o| {
            let b = got.data[o as usize];
            if o < before {
                b != accepted[i][o as usize]
            } else if power_loss && o >= min_len {
                b != byte_at(obj.object, o) && b != 0
            } else {
                b != byte_at(obj.object, o)
            }
        });
        if let Some(bad) = bad {
            panic!(
                "cycle {cycle}: {obj}: wrong byte at offset {bad} of {} (flushed {min_len}, seen before {before})",
                info.length
            );
        }
        accepted[i] = got.data;
    }
}

#[test]
fn flushed_data_and_attributes_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    set_up(dir.path());
    let mut floor = vec![(0u64, 0i64); OBJECTS as usize];
    let mut accepted = vec![Vec::new(); OBJECTS as usize];
    let mut rng = fastrand::Rng::with_seed(0xc0ffee);
    let cycles = 40;
    for cycle in 0..cycles {
        run_and_kill(dir.path(), cycle, &mut rng, &mut floor);
        check(dir.path(), cycle, &floor, &mut accepted, false);
    }
    eprintln!("{cycles} kill -9 cycles; final lengths and counts at least {floor:?}");
}

/// An ext4 file system in an image file, loop-mounted; unmounted on drop.
struct LoopFs {
    image: PathBuf,
    mount: PathBuf,
}

impl LoopFs {
    fn mount(&self) -> bool {
        let loop_opt = "loop";
        Command::new(program("mount"))
            .args(["-o", loop_opt])
            .arg(&self.image)
            .arg(&self.mount)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn unmount(&self) {
        // A moment after a mount, udev may still be probing the device
        // (EBUSY): try again briefly.
        for _ in 0..50 {
            let status = Command::new(program("umount"))
                .arg(&self.mount)
                .stderr(Stdio::null())
                .status()
                .unwrap();
            if status.success() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("umount {} kept failing", self.mount.display());
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        let _ = Command::new(program("umount")).arg(&self.mount).status();
    }
}

/// Power loss: the store lives on a loop-mounted ext4 image; after the
/// kill, a copy of the image is taken at once. The copy holds only what
/// reached the "disk" (the loop device's backing file): pages the
/// kernel still held dirty for the mounted file system are not in it,
/// exactly what a power cut loses, and only fsync puts them there in
/// time. The copy then replaces the image and is mounted (journal
/// recovery) and checked. Needs mkfs.ext4 and root to mount: `None`
/// (and the test says it is skipped) where it cannot, except under
/// scripts/test, where that fails the test.
fn loop_fs(work: &Path) -> Option<LoopFs> {
    let mkfs = sluice_testkit::programs::program_or_skip("mkfs.ext4")?;
    let fs = LoopFs {
        image: work.join("disk.img"),
        mount: work.join("mnt"),
    };
    std::fs::create_dir(&fs.mount).unwrap();
    std::fs::File::create(&fs.image)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let made = Command::new(mkfs)
        .args(["-q", "-F"])
        .arg(&fs.image)
        .status();
    if !made.is_ok_and(|s| s.success()) || !fs.mount() {
        let why = "the power-loss crash test cannot make and loop-mount an ext4 image (root?)";
        assert!(!sluice_testkit::programs::required(), "{why}");
        eprintln!("skipped: {why}");
        return None;
    }
    Some(fs)
}

/// Keeps only what reached the image: copies it at once, unmounts,
/// puts the copy in its place and mounts that.
fn cut_power(fs: &LoopFs) {
    let snapshot = fs.image.with_extension("snapshot");
    std::fs::copy(&fs.image, &snapshot).unwrap();
    fs.unmount();
    std::fs::rename(&snapshot, &fs.image).unwrap();
    assert!(fs.mount(), "mount of the power-cut image failed");
}

#[test]
fn flushed_data_and_attributes_survive_power_loss() {
    let work = tempfile::tempdir().unwrap();
    let Some(fs) = loop_fs(work.path()) else {
        return;
    };
    let dir = fs.mount.join("store");
    set_up(&dir);
    let mut floor = vec![(0u64, 0i64); OBJECTS as usize];
    let mut accepted = vec![Vec::new(); OBJECTS as usize];
    let mut rng = fastrand::Rng::with_seed(0xfee1);
    let cycles = 12;
    for cycle in 0..cycles {
        run_and_kill(&dir, cycle, &mut rng, &mut floor);
        cut_power(&fs);
        check(&dir, cycle, &floor, &mut accepted, true);
    }
    eprintln!("{cycles} power-loss cycles; final lengths and counts at least {floor:?}");
}

// ------------------------------------------------ overwrites and punches
//
// The second workload covers the small-object and durable-small-write
// paths: objects start inline (a small inline limit) and grow past it;
// every change is durable when acknowledged (FUA, or followed by a
// flush), and changes overwrite, punch and append, small ones
// journaled, large ones syncing the file. So after any crash each
// object must hold exactly what its acknowledged changes made, except
// the one change under way at the kill, whose bytes may each be before
// or after it and whose attributes are whole.

const SMALL: StoreOptions = StoreOptions {
    inline_max: 4096,
    journal_max: 8192,
    journal_retire: 256 << 10,
};
const OVERWRITTEN: u64 = 3;
const P2: PartitionId = PartitionId(0x0b1e);
/// Objects stop growing past this, so checks stay quick.
const MAX_LEN: u64 = 160_000;

/// The byte change `generation` writes at `offset` of `object`.
fn gen_byte(object: ObjectId, offset: u64, generation: u64) -> u8 {
    splitmix64(object.0 ^ offset.wrapping_mul(0x9e37_79b9) ^ generation.rotate_left(29))
        .to_le_bytes()[0]
}

/// One change as the child announces it: `W`rite, `P`unch or `A`ppend.
#[derive(Debug, Clone, Copy)]
struct Change {
    object: usize,
    kind: char,
    offset: u64,
    len: u64,
    generation: u64,
}

impl Change {
    fn parse(words: &[&str]) -> Self {
        Self {
            object: words[1].parse().unwrap(),
            kind: words[2].chars().next().unwrap(),
            offset: words[3].parse().unwrap(),
            len: words[4].parse().unwrap(),
            generation: words[5].parse().unwrap(),
        }
    }

    fn apply(&self, id: ObjectId, model: &mut Vec<u8>) {
        let end = (self.offset + self.len) as usize;
        if self.kind == 'P' {
            let end = end.min(model.len());
            let start = (self.offset as usize).min(end);
            model[start..end].fill(0);
        } else {
            if model.len() < end {
                model.resize(end, 0);
            }
            for o in self.offset..self.offset + self.len {
                model[o as usize] = gen_byte(id, o, self.generation);
            }
        }
    }
}

fn set_up_overwrites(dir: &Path) {
    let store = ObjectStore::open_with(dir, SMALL).unwrap();
    store.create_partition(P2).unwrap();
    store.create_collection(P2, COLLECTION).unwrap();
    let durable = WriteOptions {
        durable: true,
        ..Default::default()
    };
    store
        .create(P2, Some(COLLECTION), OVERWRITTEN as u32, &durable)
        .unwrap();
}

fn overwritten(store: &ObjectStore) -> Vec<ObjectRef> {
    let page = store
        .list(P2, None, None, OVERWRITTEN as usize, false)
        .unwrap();
    page.entries
        .iter()
        .map(|e| ObjectRef {
            partition: P2,
            object: e.object,
        })
        .collect()
}

/// The child: announces each change (`C ...`), makes it (durable, or
/// followed by a flush) and acknowledges it (`K`), until killed.
#[test]
fn overwrite_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let seed: u64 = std::env::var("SLUICE_OBJSTORE_CRASH_SEED")
        .unwrap()
        .parse()
        .unwrap();
    let store = ObjectStore::open_with(&dir, SMALL).unwrap();
    let objs = overwritten(&store);
    let mut rng = fastrand::Rng::with_seed(seed);
    // Ends the harness's "test overwrite_child ... " line, so the first
    // change starts a line of its own.
    println!();
    for step in 0u64.. {
        let i = rng.usize(..objs.len());
        let obj = objs[i];
        let length = store.get_attrs(obj, &[]).unwrap().0.length;
        let len = match rng.u8(..4) {
            0 => rng.u64(1..512),
            1 | 2 => rng.u64(1..=SMALL.journal_max),
            _ => rng.u64(SMALL.journal_max + 1..20_000),
        };
        let kind = match rng.u8(..10) {
            0..=4 => 'W',
            5 | 6 => 'P',
            _ if length + len > MAX_LEN => 'W',
            _ => 'A',
        };
        // Writes start inside or at the end: never past it, so no byte
        // between the old end and a write is left to a torn change.
        let offset = match kind {
            'A' => length,
            _ => rng.u64(0..=length.min(MAX_LEN)),
        };
        let change = Change {
            object: i,
            kind,
            offset,
            len,
            generation: ((seed + 1) << 32) | step,
        };
        let durable = rng.u8(..4) != 0;
        println!("C {i} {kind} {offset} {len} {}", change.generation);
        let g = change.generation as i64;
        let opts = WriteOptions {
            attrs: vec![
                ("gen".into(), AttrValue::Integer(g)),
                ("mirror".into(), AttrValue::Integer(g)),
            ],
            durable,
        };
        let bytes: Vec<u8> = (offset..offset + len)
            .map(|o| gen_byte(obj.object, o, change.generation))
            .collect();
        match kind {
            'W' => {
                store
                    .write(obj, &[Segment::new(offset, len)], &bytes, &opts)
                    .unwrap();
            }
            'P' => {
                store
                    .punch(obj, &[Segment::new(offset, len)], &opts)
                    .unwrap();
            }
            _ => {
                assert_eq!(store.append(obj, &bytes, &opts).unwrap(), offset);
            }
        }
        if !durable {
            match rng.u8(..3) {
                0 => store.flush_object(obj).unwrap(),
                1 => store.flush_collection(P2, COLLECTION).unwrap(),
                _ => store.flush_partition(P2).unwrap(),
            }
        }
        println!("K");
    }
}

/// Runs the overwrite child until a random point, kills it, and brings
/// `models` up to its acknowledged changes; returns the change under
/// way at the kill, if any.
fn run_overwrites(
    dir: &Path,
    cycle: u64,
    rng: &mut fastrand::Rng,
    store_ids: &[ObjectId],
    models: &mut [Vec<u8>],
    generations: &mut [i64],
) -> Option<Change> {
    let mut pending = None;
    for line in spawn_and_kill(dir, "overwrite_child", 'K', cycle, rng) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.first() {
            Some(&"C") => pending = Some(Change::parse(&words)),
            Some(&"K") => {
                let c = pending
                    .take()
                    .expect("an acknowledgement follows its change");
                c.apply(store_ids[c.object], &mut models[c.object]);
                generations[c.object] = c.generation as i64;
            }
            _ => {}
        }
    }
    pending
}

/// Reopens the store (replaying its journal) and holds each object to
/// its model exactly, or, for the object of the change under way, each
/// byte to before or after it and its attributes to one of the two.
fn check_overwrites(
    dir: &Path,
    cycle: u64,
    pending: Option<Change>,
    models: &mut [Vec<u8>],
    generations: &mut [i64],
) {
    let store = ObjectStore::open_with(dir, SMALL).unwrap();
    for (i, obj) in overwritten(&store).into_iter().enumerate() {
        let (info, attrs) = store.get_attrs(obj, &[]).unwrap();
        let generation = int(&attrs, "gen").unwrap_or(0);
        assert_eq!(
            Some(generation),
            int(&attrs, "mirror").or(Some(0)),
            "cycle {cycle}: {obj}: a torn attribute set"
        );
        let got = store
            .read(obj, &[Segment::new(0, info.length)], &[])
            .unwrap()
            .data;
        let before = &models[i];
        match pending.filter(|c| c.object == i) {
            None => {
                assert_eq!(
                    generation, generations[i],
                    "cycle {cycle}: {obj}: attributes of the last acknowledged change lost"
                );
                assert_eq!(
                    info.length,
                    before.len() as u64,
                    "cycle {cycle}: {obj}: length"
                );
                if let Some(bad) = (0..got.len()).find(|&o| got[o] != before[o]) {
                    panic!(
                        "cycle {cycle}: {obj}: byte {bad} of {} is {} where the acknowledged changes left {}",
                        got.len(),
                        got[bad],
                        before[bad]
                    );
                }
            }
            Some(c) => {
                let mut after = before.clone();
                c.apply(obj.object, &mut after);
                assert!(
                    generation == generations[i] || generation == c.generation as i64,
                    "cycle {cycle}: {obj}: attributes {generation} from neither side of the change under way"
                );
                assert!(
                    info.length == before.len() as u64 || info.length == after.len() as u64,
                    "cycle {cycle}: {obj}: length {} from neither side of {c:?}",
                    info.length
                );
                let at = |m: &Vec<u8>, o: usize| m.get(o).copied().unwrap_or(0);
                if let Some(bad) =
                    (0..got.len()).find(|&o| got[o] != at(before, o) && got[o] != at(&after, o))
                {
                    panic!("cycle {cycle}: {obj}: byte {bad} from neither side of {c:?}");
                }
                models[i] = got;
                generations[i] = generation;
            }
        }
    }
}

fn overwrite_cycles(dir: &Path, cycles: u64, seed: u64, power: Option<&LoopFs>) {
    set_up_overwrites(dir);
    let ids: Vec<ObjectId> = {
        let store = ObjectStore::open_with(dir, SMALL).unwrap();
        overwritten(&store).iter().map(|o| o.object).collect()
    };
    let mut models = vec![Vec::new(); OVERWRITTEN as usize];
    let mut generations = vec![0i64; OVERWRITTEN as usize];
    let mut rng = fastrand::Rng::with_seed(seed);
    for cycle in 0..cycles {
        let pending = run_overwrites(dir, cycle, &mut rng, &ids, &mut models, &mut generations);
        if let Some(fs) = power {
            cut_power(fs);
        }
        check_overwrites(dir, cycle, pending, &mut models, &mut generations);
    }
    let lens: Vec<usize> = models.iter().map(Vec::len).collect();
    eprintln!("{cycles} cycles; final lengths {lens:?}");
}

#[test]
fn acknowledged_overwrites_and_punches_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    overwrite_cycles(dir.path(), 40, 0x0b1e, None);
}

#[test]
fn acknowledged_overwrites_and_punches_survive_power_loss() {
    let work = tempfile::tempdir().unwrap();
    let Some(fs) = loop_fs(work.path()) else {
        return;
    };
    overwrite_cycles(&fs.mount.join("store"), 16, 0xb1e55, Some(&fs));
}

/// A process killed between a write's data and the commit of its new
/// length leaves the data in the object's file past the committed
/// length. This writes such bytes straight into the file (the object's
/// file is `p<partition>/<object>`, both 16 hex digits), then reopens
/// the store and extends the object past them with a write further out:
/// the gap must read as zeros, as it did before the lost write, and the
/// object's length must be the new write's end.
#[test]
fn bytes_of_a_lost_length_commit_never_show_through_a_later_extension() {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        inline_max: 0,
        ..StoreOptions::default()
    };
    let obj = {
        let store = ObjectStore::open_with(dir.path(), options).unwrap();
        store.create_partition(PARTITION).unwrap();
        let id = store
            .create(PARTITION, None, 1, &WriteOptions::default())
            .unwrap()[0];
        let obj = ObjectRef {
            partition: PARTITION,
            object: id,
        };
        store
            .write(
                obj,
                &[Segment::new(0, 100)],
                &[7; 100],
                &WriteOptions::default(),
            )
            .unwrap();
        store.flush_partition(PARTITION).unwrap();
        obj
    };
    let path = dir
        .path()
        .join(format!("p{:016x}", PARTITION.0))
        .join(format!("{:016x}", obj.object.0));
    {
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        assert_eq!(file.metadata().unwrap().len(), 100, "{}", path.display());
        file.write_all_at(&[0xee; 400], 150).unwrap();
    }
    let store = ObjectStore::open_with(dir.path(), options).unwrap();
    let before = store.read(obj, &[Segment::new(0, 1000)], &[]).unwrap();
    assert_eq!(before.real, 100);
    assert!(before.data[100..].iter().all(|&b| b == 0));
    let info = store
        .write(
            obj,
            &[Segment::new(1000, 10)],
            &[9; 10],
            &WriteOptions::default(),
        )
        .unwrap();
    assert_eq!(info.length, 1010);
    let after = store.read(obj, &[Segment::new(0, 1010)], &[]).unwrap();
    assert_eq!(after.real, 1010);
    assert!(after.data[..100].iter().all(|&b| b == 7));
    let stale = after.data[100..1000].iter().filter(|&&b| b != 0).count();
    assert_eq!(stale, 0, "bytes 100..1000 must read as zeros");
    assert!(after.data[1000..].iter().all(|&b| b == 9));
}
