//! Analytical performance models for sluice. Pure: parameters in (plain
//! structs, serde), numbers out; no I/O, no threads, no clock.
//!
//! - [`network`], [`mva`], [`multiclass`], [`mod@bounds`]: closed queueing
//!   networks with queueing, delay and load-dependent stations and think
//!   time; exact and approximate (Schweitzer, Bard) mean value analysis,
//!   single and multiclass; asymptotic and balanced job bounds.
//! - [`calibration`]: demands from measured busy times, D = U / X, and the
//!   single-server model from two snapshots of a sluice server's metrics
//!   ([`prometheus`] parses them).
//! - [`validation`]: a `sluice bench` concurrency sweep against exact MVA
//!   and the bounds, with relative errors.
//! - [`raid`]: the networked RAID 5 model of "Study on I/O response time bounds of networked storage systems", equations (2)-(10),
//!   with the paper's setting as [`raid::RaidParams::paper`] and the sweeps
//!   of its figures 3-8.
//! - [`noncontig`]: the non-contiguous transfer model of "Non-Contiguous I/O Support for Object-Based Storage"
//!   section 4.1 (iterative, SGL, strided) and its figure 8.
//! - [`report`]: what `sluice model` prints, as JSON and as text tables;
//!   [`text`]: the one table formatter and number formats (`sluice bench`
//!   prints its tables with them too).
//! - `plot` (feature `plot`): charts and grids of charts rendered to SVG
//!   or PNG bytes, for the model and the bench.
//!
//! See docs/MODEL.md for the equations, the bounds variant and how the
//! papers' figures compare.

pub mod bounds;
pub mod calibration;
pub mod error;
pub mod multiclass;
pub mod mva;
pub mod network;
pub mod noncontig;
#[cfg(feature = "plot")]
pub mod plot;
pub mod prometheus;
pub mod raid;
pub mod report;
pub mod text;
pub mod validation;

pub use bounds::{bounds, fork_join_bounds, Bounds, PerfBounds};
pub use calibration::{
    server_calibration, CalibratedDemand, Calibration, ClientStation, ServerCalibration,
    ServerLayout, ServerModelOptions, StationObservation,
};
pub use error::{ModelError, Result};
pub use multiclass::{
    approximate_mva_multiclass, exact_mva_multiclass, CustomerClass, MulticlassNetwork,
    MulticlassSolution, MulticlassStation,
};
pub use mva::{
    approximate_mva, exact_mva, exact_mva_curve, exact_mva_points, fork_join_mva_points,
    ApproxOptions, Approximation, ForkJoinSolution, Solution, StationResult,
};
pub use network::{ClosedNetwork, Station, StationKind};
pub use prometheus::ServerCounters;
pub use report::{
    mva_report, CountersReport, MvaReport, NoncontigReport, ServerCalibrationReport,
    ValidationReport,
};
pub use validation::{
    measured_points, validate, validate_each, with_client, Aggregate, BenchDocument,
    ClientPlacement, MeasuredPoint, Validation,
};
