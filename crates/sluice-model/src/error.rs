//! The one error type of the model crate.
//!
//! Every variant names what is wrong and on what (station, class or
//! parameter), so the binary can print it as is.

use thiserror::Error;

/// Why a model could not be built or solved.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum ModelError {
    /// A closed network needs at least one customer.
    #[error("the number of customers must be at least 1 (got 0)")]
    ZeroCustomers,

    /// A network with no station at all.
    #[error("the network has no stations: give at least one service demand")]
    NoStations,

    /// A service demand that is negative, NaN or infinite.
    #[error("station '{station}': service demand must be a finite number >= 0 (got {value})")]
    BadDemand {
        /// Name of the station.
        station: String,
        /// The offending value.
        value: f64,
    },

    /// A think time that is negative, NaN or infinite.
    #[error("think time must be a finite number >= 0 seconds (got {value})")]
    BadThinkTime {
        /// The offending value.
        value: f64,
    },

    /// Every demand and the think time are zero: the cycle takes no time
    /// and throughput would be infinite.
    #[error("total service demand plus think time is 0: throughput would be infinite; give at least one positive demand or a think time")]
    ZeroCycleTime,

    /// A load-dependent rate that is not finite and positive.
    #[error("station '{station}': load-dependent rate for {customers} customer(s) must be finite and > 0 (got {value})")]
    BadRate {
        /// Name of the station.
        station: String,
        /// Queue length the rate applies to.
        customers: usize,
        /// The offending value.
        value: f64,
    },

    /// A load-dependent station with an empty rate list.
    #[error("station '{station}': a load-dependent station needs at least one rate")]
    NoRates {
        /// Name of the station.
        station: String,
    },

    /// Two stations with the same name.
    #[error("two stations are named '{station}': station names must be unique")]
    DuplicateStation {
        /// The repeated name.
        station: String,
    },

    /// A feature that this solver does not offer for this kind of network.
    #[error("{what} is not supported")]
    Unsupported {
        /// What was asked for.
        what: String,
    },

    /// The problem is larger than the solver agrees to work on.
    #[error("{what} is too large ({size} > limit {limit}); {hint}")]
    TooLarge {
        /// What is too large.
        what: String,
        /// Its size.
        size: u128,
        /// The limit.
        limit: u128,
        /// What to do instead.
        hint: String,
    },

    /// An iterative solver did not converge.
    #[error(
        "{method} did not converge within {iterations} iterations (last change {last_change:e})"
    )]
    NotConverged {
        /// The method.
        method: String,
        /// Iterations done.
        iterations: u32,
        /// Largest change in a queue length at the last iteration.
        last_change: f64,
    },

    /// A multiclass network whose classes do not match its stations.
    #[error("class '{class}' has {got} demand(s) but the network has {expected} station(s)")]
    ClassShape {
        /// Name of the class.
        class: String,
        /// Number of demands given.
        got: usize,
        /// Number of stations.
        expected: usize,
    },

    /// A multiclass network without classes.
    #[error("the network has no customer classes")]
    NoClasses,

    /// A model parameter outside its domain.
    #[error("parameter '{name}' = {value}: {reason}")]
    InvalidParameter {
        /// Parameter name as it appears in the serialized parameters.
        name: String,
        /// The offending value.
        value: f64,
        /// What is expected.
        reason: String,
    },

    /// A measured quantity that cannot be turned into a demand.
    #[error("calibration: {0}")]
    Calibration(String),

    /// Text that is not in the Prometheus exposition format.
    #[error("metrics line {line}: {reason}")]
    Metrics {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },

    /// Measurements that cannot be compared with a model (no runs, a run
    /// without a queue depth, ...).
    #[error("validation: {0}")]
    Validation(String),

    /// Drawing a chart failed.
    #[error("plot: {0}")]
    Plot(String),
}

/// Result with [`ModelError`].
pub type Result<T, E = ModelError> = std::result::Result<T, E>;

/// Checks a parameter, returning [`ModelError::InvalidParameter`] when `ok`
/// is false.
pub(crate) fn check(ok: bool, name: &str, value: f64, reason: &str) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(ModelError::InvalidParameter {
            name: name.to_owned(),
            value,
            reason: reason.to_owned(),
        })
    }
}
