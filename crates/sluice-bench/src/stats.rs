//! Statistics over repeated rounds: medians, spread and ratios.

use serde::Serialize;

/// The median of `values` (mean of the two middle values for an even
/// count); `None` when empty. NaNs sort last and so rarely matter.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Median and range of one measurement over several rounds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// Rounds measured.
    pub n: usize,
    /// Median.
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    /// Summarises `values`; `None` when empty.
    pub fn of(values: &[f64]) -> Option<Self> {
        let median = median(values)?;
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some(Self {
            n: values.len(),
            median,
            min,
            max,
        })
    }

    /// (max − min) / median, the relative width of the range; 0 when the
    /// median is 0.
    pub fn relative_range(&self) -> f64 {
        if self.median == 0.0 {
            0.0
        } else {
            (self.max - self.min) / self.median
        }
    }
}

/// `value / baseline`, or `None` when the baseline is missing, zero or not
/// finite (a ratio to nothing is not a number to print).
pub fn ratio(value: f64, baseline: f64) -> Option<f64> {
    if baseline == 0.0 || !baseline.is_finite() || !value.is_finite() {
        None
    } else {
        Some(value / baseline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_odd_even_empty() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[1.0, 1.0, 100.0]), Some(1.0));
    }

    #[test]
    fn spread_keeps_min_and_max() {
        let s = Spread::of(&[10.0, 30.0, 20.0]).unwrap();
        assert_eq!((s.n, s.median, s.min, s.max), (3, 20.0, 10.0, 30.0));
        assert!((s.relative_range() - 1.0).abs() < 1e-12);
        assert!(Spread::of(&[]).is_none());
        assert_eq!(Spread::of(&[0.0]).unwrap().relative_range(), 0.0);
    }

    #[test]
    fn ratios_refuse_a_zero_baseline() {
        assert_eq!(ratio(50.0, 100.0), Some(0.5));
        assert_eq!(ratio(300.0, 100.0), Some(3.0));
        assert_eq!(ratio(1.0, 0.0), None);
        assert_eq!(ratio(f64::NAN, 1.0), None);
        assert_eq!(ratio(1.0, f64::INFINITY), None);
    }
}
