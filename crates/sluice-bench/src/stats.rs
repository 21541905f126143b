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

/// A confidence interval for the median, free of any assumption about
/// the distribution: the order statistics x(k) and x(n+1−k) of the
/// sorted values, with the largest k whose interval still holds the
/// population's median with the asked probability. That probability is
/// 1 − 2·P(B < k) for B ~ Binomial(n, ½): each value falls below the
/// median with probability ½ (the sign test). Few values cannot reach a
/// high confidence (five give at most 93.75 %); the interval is then
/// their whole range and `coverage` says what it is worth.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MedianInterval {
    /// Values.
    pub n: usize,
    /// Their median.
    pub median: f64,
    /// Lower bound.
    pub low: f64,
    /// Upper bound.
    pub high: f64,
    /// Probability that [low, high] holds the population's median.
    pub coverage: f64,
}

impl MedianInterval {
    /// The interval of `values` at `confidence` (0 to 1), or the widest
    /// one they give when that is less; `None` when empty.
    pub fn of(values: &[f64], confidence: f64) -> Option<Self> {
        let median = median(values)?;
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        // below[j] = P(B < j + 1) = P(B <= j), from log-binomial terms so
        // that large n does not underflow 2^-n.
        let ln_total = n as f64 * std::f64::consts::LN_2;
        let mut ln_choose = 0.0f64;
        let mut below = Vec::with_capacity(n.div_ceil(2));
        let mut cumulative = 0.0;
        for i in 0..n.div_ceil(2) {
            cumulative += (ln_choose - ln_total).exp();
            below.push(cumulative);
            ln_choose += ((n - i) as f64).ln() - ((i + 1) as f64).ln();
        }
        // k runs from 1 (the whole range) to (n + 1) / 2 (the median
        // alone); coverage(k) = 1 − 2·P(B ≤ k − 1) falls as k grows.
        let coverage = |k: usize| (1.0 - 2.0 * below[k - 1]).clamp(0.0, 1.0);
        let mut k = 1;
        while k < n.div_ceil(2) && coverage(k + 1) >= confidence {
            k += 1;
        }
        Some(Self {
            n,
            median,
            low: v[k - 1],
            high: v[n - k],
            coverage: coverage(k),
        })
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
    fn median_intervals_follow_the_sign_test() {
        assert!(MedianInterval::of(&[], 0.95).is_none());
        // One value: the interval is the value, worth nothing.
        let one = MedianInterval::of(&[7.0], 0.95).unwrap();
        assert_eq!((one.low, one.high, one.coverage), (7.0, 7.0, 0.0));
        // Five values cannot reach 95 %: their range, at 1 - 2/32.
        let five = MedianInterval::of(&[5.0, 1.0, 4.0, 2.0, 3.0], 0.95).unwrap();
        assert_eq!((five.median, five.low, five.high), (3.0, 1.0, 5.0));
        assert!((five.coverage - 0.9375).abs() < 1e-12);
        // Twelve values: P(B <= 1) = 13/4096 and P(B <= 2) = 79/4096, so
        // k = 3 holds 95 % (1 - 158/4096) and k = 4 does not
        // (P(B <= 3) = 299/4096, coverage 0.854).
        let v: Vec<f64> = (1..=12).map(f64::from).collect();
        let twelve = MedianInterval::of(&v, 0.95).unwrap();
        assert_eq!((twelve.low, twelve.high), (3.0, 10.0));
        assert!((twelve.coverage - (1.0 - 158.0 / 4096.0)).abs() < 1e-12);
        // A lower confidence narrows it.
        let narrow = MedianInterval::of(&v, 0.8).unwrap();
        assert_eq!((narrow.low, narrow.high), (4.0, 9.0));
        // Many values: no underflow, and the interval closes in on the
        // median (n = 2000: about ±44 ranks at 95 %).
        let many: Vec<f64> = (0..2000).map(f64::from).collect();
        let m = MedianInterval::of(&many, 0.95).unwrap();
        assert!(m.coverage >= 0.95 && m.coverage < 0.96, "{m:?}");
        assert!((950.0..=960.0).contains(&m.low), "{m:?}");
        assert!((1040.0..=1050.0).contains(&m.high), "{m:?}");
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
