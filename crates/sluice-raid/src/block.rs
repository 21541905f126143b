//! [`RaidDevice`] as a [`BlockDevice`]: each request checked, then
//! handed to its path (read, write, zero).

use sluice_storage::{
    BlockDevice, Capability, DeviceError, DeviceMetric, Extent, IoOp, MetricKind, ZeroMode,
};

use crate::device::{Outcome, RaidDevice};
use crate::fan_out::{MemberIo, MemberOp};
use crate::layout::RaidLevel;
use crate::metrics::member_metrics;

impl BlockDevice for RaidDevice {
    fn size(&self) -> u64 {
        self.size
    }

    fn capability(&self) -> Capability {
        self.capability
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        let len = buf.len() as u64;
        self.check_range(IoOp::Read, offset, len)?;
        self.retrying(IoOp::Read, offset, len, || self.read_attempt(buf, offset))
    }

    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<(), DeviceError> {
        self.check_writable(IoOp::Write)?;
        self.check_range(IoOp::Write, offset, buf.len() as u64)?;
        match self.geometry.level() {
            RaidLevel::Raid0 => self.write_raid0(buf, offset, fua),
            RaidLevel::Raid1 | RaidLevel::Raid10 { .. } => self.write_raid1(buf, offset, fua),
            RaidLevel::Raid5 | RaidLevel::Raid6 => self.write_parity(buf, offset, fua),
        }
    }

    fn flush(&self) -> Result<(), DeviceError> {
        self.check_writable(IoOp::Flush)?;
        self.retrying(IoOp::Flush, 0, 0, || {
            let mut step: Vec<MemberIo<'_>> = (0..self.counters.len())
                .filter(|&m| self.alive(m))
                .map(|m| MemberIo::new(m, MemberOp::Flush))
                .collect();
            // A member whose flush failed is marked failed: what it holds
            // is no longer used, so the others' flushes are enough
            // (checked below: unless that was one failure too many).
            self.run(&mut step).map(|_| Outcome::Done)
        })?;
        self.check_survives(IoOp::Flush, 0, 0)
    }

    fn trim(&self, offset: u64, length: u64, fua: bool) -> Result<(), DeviceError> {
        self.trim_range(offset, length, fua)
    }

    fn write_zeroes(&self, offset: u64, length: u64, mode: ZeroMode) -> Result<(), DeviceError> {
        self.zero_range(offset, length, mode)
    }

    fn extents(
        &self,
        offset: u64,
        length: u64,
        max_extents: usize,
    ) -> Result<Vec<Extent>, DeviceError> {
        self.member_extents(offset, length, max_extents)
    }

    fn cache(&self, offset: u64, length: u64) -> Result<(), DeviceError> {
        self.cache_range(offset, length)
    }

    fn metrics(&self) -> Vec<DeviceMetric> {
        let mut out = vec![DeviceMetric {
            name: "raid_members_failed",
            help: "Members missing or marked failed",
            kind: MetricKind::Gauge,
            value: self.failed_count() as f64,
            labels: Vec::new(),
        }];
        let set = self.members.load();
        for (index, c) in self.counters.iter().enumerate() {
            out.extend(member_metrics(
                index,
                &set.names[index],
                c,
                self.last_answer_unix(index),
            ));
        }
        out.extend(self.progress_metrics());
        if let Some(journal) = &self.journal {
            out.extend(journal.metrics());
        }
        out
    }
}
