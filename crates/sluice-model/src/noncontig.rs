//! The non-contiguous transfer model of Dalessandro, Devulapalli and
//! Wyckoff, "Non-Contiguous I/O Support for Object-Based Storage" (2008),
//! section 4.1.
//!
//! `n` segments of `x` bytes are sent one request each (iterative), as one
//! request with a scatter/gather list (SGL), or as one strided request:
//!
//! ```text
//! O_iterative = 0            N_iterative = n RTT
//! O_sgl       = 16 n + 16    N_sgl       = RTT
//! O_strided   = 16           N_strided   = RTT
//! S = x n + O,  T = S / BW + N   (+ RTT/2 for a read: the request message)
//! ```
//!
//! The paper's link is shared by both directions ("the same number and
//! size of data transfers happen" for a read). On a full-duplex link
//! ([`NoncontigParams::full_duplex`]) a read's description goes up while
//! data comes down, but a request's data can only come down once its
//! list is up: a list cut into p requests sent back to back (a server
//! takes at most so many segments per request,
//! [`NoncontigParams::max_segments`]) is a two-stage pipeline, and
//! S = (x n + O)/p + (p − 1)/p · max(x n, O): the sum for one request,
//! the larger stream as p grows. Writes are unchanged (list and data
//! share the upward direction).
//!
//! The paper prints three slips, which this code does not copy:
//! `O_strided = x n + 16` (its own `S_strided = x n + 16` shows the
//! overhead is 16 bytes), `T_sgl = (x n + 16 n + 15)/BW + RTT` (15 for 16)
//! and `T_strided = (x n + 16)/BW + 30` (30 being the RTT in microseconds).
//! The header sizes are parameters, so the SGL overhead can also be set to
//! the 8 + 16 n bytes of the paper's figure 6 header.

use serde::{Deserialize, Serialize};

use crate::error::{check, Result};

/// How a non-contiguous request is described on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ddt {
    /// One contiguous request per segment.
    Iterative,
    /// One request carrying a list of (offset, length) pairs.
    Sgl,
    /// One request carrying (stride, length).
    Strided,
}

impl Ddt {
    /// All three, in the paper's order.
    pub const ALL: [Self; 3] = [Self::Iterative, Self::Sgl, Self::Strided];

    /// Name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Iterative => "iterative",
            Self::Sgl => "sgl",
            Self::Strided => "strided",
        }
    }
}

/// Direction of the transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Data goes to the server with the request.
    #[default]
    Write,
    /// One more message (the read request) starts things off: + RTT/2.
    Read,
}

/// Network and header parameters. [`Default`] is the paper's: RTT 30 us,
/// 800 Mb/s, 16-byte SGL entries plus 16 bytes, 16-byte strided header.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NoncontigParams {
    /// Round-trip time, seconds.
    pub rtt: f64,
    /// Bandwidth BW, bytes per second.
    pub bandwidth: f64,
    /// Write or read.
    pub direction: Direction,
    /// SGL overhead independent of the segment count, bytes.
    pub sgl_fixed_bytes: f64,
    /// SGL overhead per segment (offset + length), bytes.
    pub sgl_entry_bytes: f64,
    /// Strided header (stride + length), bytes.
    pub strided_bytes: f64,
    /// Each direction carries `bandwidth` at once (a switched or veth
    /// link): a read's description and its data overlap. `false` is the
    /// paper's model, one stream for both.
    pub full_duplex: bool,
    /// Segments one request carries at most: a longer list is sent as
    /// several requests back to back, whose lists and data overlap on a
    /// full-duplex link. `None`: as many as it takes to overlap them
    /// fully (S = max(x n, O) for a full-duplex read).
    pub max_segments: Option<u64>,
}

impl Default for NoncontigParams {
    fn default() -> Self {
        Self::paper()
    }
}

impl NoncontigParams {
    /// The paper's section 4.1 values.
    pub fn paper() -> Self {
        Self {
            rtt: 30e-6,
            bandwidth: 800e6 / 8.0,
            direction: Direction::Write,
            sgl_fixed_bytes: 16.0,
            sgl_entry_bytes: 16.0,
            strided_bytes: 16.0,
            full_duplex: false,
            max_segments: None,
        }
    }

    /// Checks every parameter's domain.
    pub fn validate(&self) -> Result<()> {
        let nonneg = |v: f64| v.is_finite() && v >= 0.0;
        check(
            nonneg(self.rtt),
            "rtt",
            self.rtt,
            "must be a finite number of seconds >= 0",
        )?;
        check(
            self.bandwidth.is_finite() && self.bandwidth > 0.0,
            "bandwidth",
            self.bandwidth,
            "must be > 0 bytes per second",
        )?;
        if let Some(m) = self.max_segments {
            check(m >= 1, "max_segments", m as f64, "must be at least 1")?;
        }
        for (name, v) in [
            ("sgl_fixed_bytes", self.sgl_fixed_bytes),
            ("sgl_entry_bytes", self.sgl_entry_bytes),
            ("strided_bytes", self.strided_bytes),
        ] {
            check(nonneg(v), name, v, "must be a finite number of bytes >= 0")?;
        }
        Ok(())
    }
}

/// Time to move one non-contiguous transfer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TransferTime {
    /// Description used.
    pub ddt: Ddt,
    /// Payload x n, bytes.
    pub payload_bytes: f64,
    /// Description overhead O, bytes.
    pub overhead_bytes: f64,
    /// Round trips paid.
    pub round_trips: f64,
    /// T = S/BW + N (+ RTT/2 for reads; on a full-duplex link a read's
    /// pieces overlap, see the module's documentation), seconds.
    pub time: f64,
    /// Payload / T, bytes per second.
    pub throughput: f64,
}

/// T for `segments` segments of `segment_bytes` bytes.
pub fn transfer_time(
    params: &NoncontigParams,
    ddt: Ddt,
    segments: u64,
    segment_bytes: u64,
) -> Result<TransferTime> {
    params.validate()?;
    check(
        segments >= 1,
        "segments",
        segments as f64,
        "must be at least 1",
    )?;
    check(
        segment_bytes >= 1,
        "segment_bytes",
        segment_bytes as f64,
        "must be at least 1",
    )?;
    let n = segments as f64;
    let payload = n * segment_bytes as f64;
    let (overhead, round_trips) = match ddt {
        Ddt::Iterative => (0.0, n),
        Ddt::Sgl => (params.sgl_entry_bytes * n + params.sgl_fixed_bytes, 1.0),
        Ddt::Strided => (params.strided_bytes, 1.0),
    };
    let request = match params.direction {
        Direction::Write => 0.0,
        Direction::Read => params.rtt / 2.0,
    };
    let bytes = match (params.direction, params.max_segments) {
        (Direction::Read, None) if params.full_duplex => payload.max(overhead),
        (Direction::Read, Some(most)) if params.full_duplex => {
            let pieces = segments.div_ceil(most) as f64;
            (payload + overhead) / pieces + (pieces - 1.0) / pieces * payload.max(overhead)
        }
        _ => payload + overhead,
    };
    let time = bytes / params.bandwidth + round_trips * params.rtt + request;
    Ok(TransferTime {
        ddt,
        payload_bytes: payload,
        overhead_bytes: overhead,
        round_trips,
        time,
        throughput: payload / time,
    })
}

/// One segment size of figure 8: the three descriptions side by side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SizePoint {
    /// Segment size x, bytes.
    pub segment_bytes: u64,
    /// Segments n = file / x.
    pub segments: u64,
    /// Iterative, SGL and strided, in that order.
    pub transfers: [TransferTime; 3],
}

/// Figure 8: a file of `file_bytes` written (or read) as segments of each
/// size in `sizes` (sizes larger than the file are refused).
pub fn by_segment_size(
    params: &NoncontigParams,
    file_bytes: u64,
    sizes: &[u64],
) -> Result<Vec<SizePoint>> {
    check(
        file_bytes >= 1,
        "file_bytes",
        file_bytes as f64,
        "must be at least 1",
    )?;
    sizes
        .iter()
        .map(|&x| {
            check(
                (1..=file_bytes).contains(&x),
                "segment_bytes",
                x as f64,
                "must be between 1 and the file size",
            )?;
            let n = file_bytes / x;
            let t = |d| transfer_time(params, d, n, x);
            Ok(SizePoint {
                segment_bytes: x,
                segments: n,
                transfers: [t(Ddt::Iterative)?, t(Ddt::Sgl)?, t(Ddt::Strided)?],
            })
        })
        .collect()
}

/// The paper's figure 8 file: 100 MB, read as 100 MiB so that every
/// power-of-two segment size divides it.
pub const FIGURE8_FILE_BYTES: u64 = 100 * 1024 * 1024;

/// Segment sizes of our figure 8: powers of two from 1 B to 1 MiB.
pub fn figure8_sizes() -> Vec<u64> {
    (0..=20).map(|p| 1u64 << p).collect()
}
