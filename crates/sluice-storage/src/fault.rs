//! Error injection: a layer that makes chosen operations of the device
//! beneath it fail with EIO or ENOSPC after N operations, on the Nth
//! only, or at a rate — to show that clients get the right error, the
//! server stays up, and nothing else is affected (nbdkit's error filter
//! plays the same role).
//!
//! Rules are written `OPS:ERRNO:TRIGGER`, e.g. `write:enospc:after=100`,
//! `read+write:eio:rate=0.01`, `flush:eio:nth=2`:
//! - OPS: `read`, `write`, `flush`, `trim`, `zero` (write zeroes) or `all`,
//!   joined with `+`;
//! - ERRNO: `eio` or `enospc`;
//! - TRIGGER: `after=N` (every matching operation after the first N
//!   fails), `nth=N` (only the Nth fails), `rate=P` (each fails with
//!   probability P, 0 < P ≤ 1, from a fixed seed so runs repeat).
//!
//! A flush that failed by injection stays failed: every later flush
//! fails too, as after a real fsync error (see [`crate::FileDevice`]),
//! so an injected failure is never followed by a flush that claims the
//! lost writes are durable.

use std::fmt;
use std::io;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::{BlockDevice, DeviceError, DeviceMetric, IoOp, MetricKind, ZeroMode};

/// Seed of the rate trigger's generator.
const RATE_SEED: u64 = 0x5eed_fa17;

/// Which operations a rule applies to (a set of [`IoOp`]s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultOps(u8);

impl FaultOps {
    const READ: u8 = 1;
    const WRITE: u8 = 2;
    const FLUSH: u8 = 4;
    const TRIM: u8 = 8;
    const ZERO: u8 = 16;
    const ALL: u8 = 31;

    fn bit(op: IoOp) -> u8 {
        match op {
            IoOp::Read => Self::READ,
            IoOp::Write => Self::WRITE,
            IoOp::Flush => Self::FLUSH,
            IoOp::Trim => Self::TRIM,
            IoOp::WriteZeroes => Self::ZERO,
            _ => 0,
        }
    }

    /// Whether `op` is in the set.
    pub fn contains(self, op: IoOp) -> bool {
        self.0 & Self::bit(op) != 0
    }
}

/// The error an injected fault returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InjectedErrno {
    /// EIO: a media error.
    Io,
    /// ENOSPC: the backing store is full.
    NoSpace,
}

impl InjectedErrno {
    fn os_error(self) -> io::Error {
        io::Error::from_raw_os_error(match self {
            Self::Io => rustix::io::Errno::IO.raw_os_error(),
            Self::NoSpace => rustix::io::Errno::NOSPC.raw_os_error(),
        })
    }
}

/// When a rule fires, counting the operations it applies to from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultTrigger {
    /// Every operation after the first N.
    After(u64),
    /// Only the Nth.
    Nth(u64),
    /// Each with this probability, in parts per million.
    RatePpm(u32),
}

/// One error-injection rule. Parse one from `OPS:ERRNO:TRIGGER` (see the
/// module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultRule {
    /// Operations it applies to.
    pub ops: FaultOps,
    /// What they fail with.
    pub errno: InjectedErrno,
    /// When.
    pub trigger: FaultTrigger,
}

/// Why a fault rule could not be parsed.
#[derive(Debug, thiserror::Error)]
#[error("bad fault rule {rule:?}: {reason} (expected OPS:ERRNO:TRIGGER, e.g. write:eio:after=100)")]
pub struct FaultRuleError {
    rule: String,
    reason: String,
}

impl FromStr for FaultRule {
    type Err = FaultRuleError;
    fn from_str(rule: &str) -> Result<Self, Self::Err> {
        let bad = |reason: String| FaultRuleError {
            rule: rule.to_owned(),
            reason,
        };
        let mut parts = rule.split(':');
        let (Some(ops), Some(errno), Some(trigger), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("needs three parts separated by ':'".into()));
        };
        let mut bits = 0;
        for op in ops.split('+') {
            bits |= match op {
                "read" => FaultOps::READ,
                "write" => FaultOps::WRITE,
                "flush" => FaultOps::FLUSH,
                "trim" => FaultOps::TRIM,
                "zero" => FaultOps::ZERO,
                "all" => FaultOps::ALL,
                other => {
                    return Err(bad(format!(
                        "unknown operation {other:?} (read, write, flush, trim, zero, all)"
                    )))
                }
            };
        }
        let errno = match errno {
            "eio" => InjectedErrno::Io,
            "enospc" => InjectedErrno::NoSpace,
            other => return Err(bad(format!("unknown errno {other:?} (eio, enospc)"))),
        };
        let count = |v: &str| {
            v.parse::<u64>()
                .map_err(|e| bad(format!("bad count {v:?}: {e}")))
        };
        let trigger = match trigger.split_once('=') {
            Some(("after", v)) => FaultTrigger::After(count(v)?),
            Some(("nth", v)) => match count(v)? {
                0 => return Err(bad("nth counts from 1".into())),
                n => FaultTrigger::Nth(n),
            },
            Some(("rate", v)) => {
                let p: f64 = v.parse().map_err(|e| bad(format!("bad rate {v:?}: {e}")))?;
                if !(p > 0.0 && p <= 1.0) {
                    return Err(bad(format!("rate {p} is not in (0, 1]")));
                }
                // Rounded so that any positive rate fires sometimes.
                FaultTrigger::RatePpm(((p * 1e6).round() as u32).max(1))
            }
            _ => {
                return Err(bad(format!(
                    "unknown trigger {trigger:?} (after=N, nth=N, rate=P)"
                )))
            }
        };
        Ok(Self {
            ops: FaultOps(bits),
            errno,
            trigger,
        })
    }
}

impl fmt::Display for FaultRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (FaultOps::READ, "read"),
            (FaultOps::WRITE, "write"),
            (FaultOps::FLUSH, "flush"),
            (FaultOps::TRIM, "trim"),
            (FaultOps::ZERO, "zero"),
        ];
        if self.ops.0 == FaultOps::ALL {
            f.write_str("all")?;
        } else {
            let mut first = true;
            for (bit, name) in names {
                if self.ops.0 & bit != 0 {
                    if !first {
                        f.write_str("+")?;
                    }
                    f.write_str(name)?;
                    first = false;
                }
            }
        }
        f.write_str(match self.errno {
            InjectedErrno::Io => ":eio:",
            InjectedErrno::NoSpace => ":enospc:",
        })?;
        match self.trigger {
            FaultTrigger::After(n) => write!(f, "after={n}"),
            FaultTrigger::Nth(n) => write!(f, "nth={n}"),
            FaultTrigger::RatePpm(p) => write!(f, "rate={}", f64::from(p) / 1e6),
        }
    }
}

#[derive(Debug)]
struct ArmedRule {
    rule: FaultRule,
    /// Matching operations seen.
    seen: AtomicU64,
}

/// A device whose operations fail as its [`FaultRule`]s say; everything
/// else passes through to the device beneath.
#[derive(Debug)]
pub struct FaultInjectionDevice {
    inner: Arc<dyn BlockDevice>,
    label: String,
    rules: Vec<ArmedRule>,
    rng: Mutex<fastrand::Rng>,
    injected: AtomicU64,
    /// An injected flush failure happened: every later flush fails.
    flush_failed: AtomicBool,
}

impl FaultInjectionDevice {
    /// Wraps `inner`; `label` names it in errors (e.g. the export name).
    pub fn new(
        inner: Arc<dyn BlockDevice>,
        label: impl Into<String>,
        rules: Vec<FaultRule>,
    ) -> Self {
        Self {
            inner,
            label: label.into(),
            rules: rules
                .into_iter()
                .map(|rule| ArmedRule {
                    rule,
                    seen: AtomicU64::new(0),
                })
                .collect(),
            rng: Mutex::new(fastrand::Rng::with_seed(RATE_SEED)),
            injected: AtomicU64::new(0),
            flush_failed: AtomicBool::new(false),
        }
    }

    /// Errors injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    /// Counts `op` against every rule and returns the error of the first
    /// that fires.
    fn check(&self, op: IoOp, offset: u64, len: u64) -> Result<(), DeviceError> {
        if op == IoOp::Flush && self.flush_failed.load(Ordering::Acquire) {
            return Err(self.error(
                op,
                offset,
                len,
                InjectedErrno::Io,
                "an earlier flush failed",
            ));
        }
        let mut fired = None;
        for armed in &self.rules {
            if !armed.rule.ops.contains(op) {
                continue;
            }
            let n = armed.seen.fetch_add(1, Ordering::Relaxed) + 1;
            let fires = match armed.rule.trigger {
                FaultTrigger::After(after) => n > after,
                FaultTrigger::Nth(nth) => n == nth,
                FaultTrigger::RatePpm(ppm) => {
                    let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
                    rng.u32(0..1_000_000) < ppm
                }
            };
            if fires && fired.is_none() {
                fired = Some(armed.rule);
            }
        }
        let Some(rule) = fired else {
            return Ok(());
        };
        self.injected.fetch_add(1, Ordering::Relaxed);
        if op == IoOp::Flush {
            self.flush_failed.store(true, Ordering::Release);
        }
        Err(self.error(op, offset, len, rule.errno, &rule.to_string()))
    }

    fn error(
        &self,
        op: IoOp,
        offset: u64,
        len: u64,
        errno: InjectedErrno,
        why: &str,
    ) -> DeviceError {
        DeviceError::Io {
            device: format!("{} (injected fault: {why})", self.label),
            op,
            offset,
            len,
            source: errno.os_error(),
        }
    }
}

impl crate::DeviceLayer for FaultInjectionDevice {
    fn inner(&self) -> &dyn BlockDevice {
        self.inner.as_ref()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        self.check(IoOp::Read, offset, buf.len() as u64)?;
        self.inner.read_at(buf, offset)
    }
    fn read_at_nowait(&self, buf: &mut [u8], offset: u64) -> Result<bool, DeviceError> {
        // Counted once, when the read is served (a would-block miss is
        // retried with read_at).
        match self.inner.read_at_nowait(buf, offset)? {
            true => self
                .check(IoOp::Read, offset, buf.len() as u64)
                .map(|()| true),
            false => Ok(false),
        }
    }
    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<(), DeviceError> {
        self.check(IoOp::Write, offset, buf.len() as u64)?;
        self.inner.write_at(buf, offset, fua)
    }
    fn flush(&self) -> Result<(), DeviceError> {
        self.check(IoOp::Flush, 0, self.inner.size())?;
        self.inner.flush()
    }
    fn trim(&self, offset: u64, length: u64, fua: bool) -> Result<(), DeviceError> {
        self.check(IoOp::Trim, offset, length)?;
        self.inner.trim(offset, length, fua)
    }
    fn write_zeroes(&self, offset: u64, length: u64, mode: ZeroMode) -> Result<(), DeviceError> {
        self.check(IoOp::WriteZeroes, offset, length)?;
        self.inner.write_zeroes(offset, length, mode)
    }
    fn metrics(&self) -> Vec<DeviceMetric> {
        let mut m = self.inner.metrics();
        m.push(DeviceMetric {
            name: "faults_injected_total",
            help: "Operations failed on purpose by error injection.",
            kind: MetricKind::Counter,
            value: self.injected() as f64,
            labels: Vec::new(),
        });
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemDevice;

    fn faulty(rules: &[&str]) -> FaultInjectionDevice {
        let rules = rules.iter().map(|r| r.parse().expect("rule")).collect();
        FaultInjectionDevice::new(Arc::new(MemDevice::new(1 << 20, false)), "test", rules)
    }

    fn errno(e: &DeviceError) -> Option<i32> {
        match e {
            DeviceError::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    #[test]
    fn rules_parse_and_print_back() {
        for r in [
            "write:eio:after=10",
            "read+write:enospc:nth=3",
            "all:eio:rate=0.25",
            "flush+trim+zero:eio:after=0",
        ] {
            let rule: FaultRule = r.parse().expect(r);
            assert_eq!(rule.to_string(), r);
        }
        for bad in [
            "",
            "write:eio",
            "write:eio:after=1:x",
            "paint:eio:after=1",
            "write:eperm:after=1",
            "write:eio:nth=0",
            "write:eio:rate=0",
            "write:eio:rate=2",
            "write:eio:rate=x",
            "write:eio:sometimes",
        ] {
            let e = bad.parse::<FaultRule>().expect_err(bad);
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn after_fails_every_later_matching_op_and_nothing_else() {
        let d = faulty(&["write:enospc:after=2"]);
        let mut buf = [0u8; 512];
        d.write_at(&[1; 512], 0, false).expect("1st write");
        d.read_at(&mut buf, 0).expect("reads are not counted");
        d.write_at(&[2; 512], 512, false).expect("2nd write");
        for i in 0..3 {
            let e = d.write_at(&[3; 512], 1024, false).expect_err("3rd+ write");
            assert!(e.is_no_space(), "{e}");
            assert!(
                e.to_string()
                    .contains("injected fault: write:enospc:after=2"),
                "{i}: {e}"
            );
        }
        d.read_at(&mut buf, 512).expect("read");
        assert_eq!(buf, [2; 512]);
        d.read_at(&mut buf, 1024).expect("read");
        assert_eq!(buf, [0; 512], "a failed write changed nothing");
        d.flush().expect("flush is not covered");
        assert_eq!(d.injected(), 3);
    }

    #[test]
    fn nth_fails_once_and_a_failed_flush_stays_failed() {
        let d = faulty(&["read:eio:nth=2", "flush:eio:nth=2"]);
        let mut buf = [0u8; 512];
        d.read_at(&mut buf, 0).expect("1st");
        let e = d.read_at(&mut buf, 0).expect_err("2nd");
        assert_eq!(errno(&e), Some(5));
        d.read_at(&mut buf, 0).expect("3rd");
        d.flush().expect("1st flush");
        d.flush().expect_err("2nd flush");
        let e = d.flush().expect_err("3rd flush: never a false success");
        assert!(e.to_string().contains("an earlier flush failed"), "{e}");
    }

    #[test]
    fn rate_fires_about_as_often_as_asked_and_repeats() {
        let count = || {
            let d = faulty(&["write:eio:rate=0.1"]);
            (0..10_000)
                .filter(|i| d.write_at(&[1], i % 1000, false).is_err())
                .count()
        };
        let n = count();
        assert!((800..1200).contains(&n), "{n} of 10000 failed at rate 0.1");
        assert_eq!(count(), n, "a fixed seed repeats");
    }
}
