#![allow(clippy::unwrap_used)] // helper functions outside #[test] unwrap too
//! Kill -9 at random points: a child process (this test binary run
//! again) appends to objects with attributes riding on each append,
//! flushes now and then and reports what it flushed; the parent kills it
//! with SIGKILL, reopens the store and checks that every flushed byte
//! and attribute is there and that every attribute set is whole.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use sluice_objstore::{
    AttrValue, ObjectId, ObjectRef, ObjectStore, PartitionId, Segment, WriteOptions,
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

/// Runs the child on `dir` until a random point, kills it with SIGKILL,
/// and raises `floor` (per object: the length and count the store must
/// keep) by what it reported flushed.
fn run_and_kill(dir: &Path, cycle: u64, rng: &mut fastrand::Rng, floor: &mut [(u64, i64)]) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
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
    // Wait for the child to start working, then kill it at a random
    // point.
    // The test harness prints first; wait for the child's first flush.
    let mut seen = Vec::new();
    while !seen.last().is_some_and(|l: &String| l.starts_with('F')) {
        seen.push(
            rx.recv_timeout(Duration::from_secs(60))
                .expect("child reports progress"),
        );
    }
    std::thread::sleep(Duration::from_millis(rng.u64(0..60)));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    reader.join().unwrap();
    for line in seen.into_iter().chain(rx.try_iter()) {
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
        Command::new("mount")
            .args(["-o", loop_opt])
            .arg(&self.image)
            .arg(&self.mount)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn unmount(&self) {
        let status = Command::new("umount").arg(&self.mount).status().unwrap();
        assert!(status.success(), "umount {}", self.mount.display());
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status();
    }
}

/// Power loss: the store lives on a loop-mounted ext4 image; after the
/// kill, a copy of the image is taken at once. The copy holds only what
/// reached the "disk" (the loop device's backing file): pages the
/// kernel still held dirty for the mounted file system are not in it,
/// exactly what a power cut loses, and only fsync puts them there in
/// time. The copy then replaces the image and is mounted (journal
/// recovery) and checked. Needs root to mount; says so and passes
/// trivially where it cannot.
#[test]
fn flushed_data_and_attributes_survive_power_loss() {
    let work = tempfile::tempdir().unwrap();
    let fs = LoopFs {
        image: work.path().join("disk.img"),
        mount: work.path().join("mnt"),
    };
    let snapshot = work.path().join("snapshot.img");
    std::fs::create_dir(&fs.mount).unwrap();
    std::fs::File::create(&fs.image)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let mkfs = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(&fs.image)
        .status();
    if !mkfs.is_ok_and(|s| s.success()) || !fs.mount() {
        eprintln!("SKIPPED: power-loss crash test needs mkfs.ext4 and loop mounts (root)");
        return;
    }
    let dir = fs.mount.join("store");
    set_up(&dir);
    let mut floor = vec![(0u64, 0i64); OBJECTS as usize];
    let mut accepted = vec![Vec::new(); OBJECTS as usize];
    let mut rng = fastrand::Rng::with_seed(0xfee1);
    let cycles = 12;
    for cycle in 0..cycles {
        run_and_kill(&dir, cycle, &mut rng, &mut floor);
        std::fs::copy(&fs.image, &snapshot).unwrap();
        fs.unmount();
        std::fs::rename(&snapshot, &fs.image).unwrap();
        assert!(fs.mount(), "mount of the power-cut image failed");
        check(&dir, cycle, &floor, &mut accepted, true);
    }
    eprintln!("{cycles} power-loss cycles; final lengths and counts at least {floor:?}");
}
