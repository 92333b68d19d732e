//! Number conversions that may not fit, each saturating or approximating in one stated way.
//!
//! Owns the conversions the host makes between integer widths, signedness and `f64`: a count
//! read as `i64` from PostgreSQL or Redis that must not be negative, a length bound as an `i64`
//! parameter, a duration in whole milliseconds, a count shown as a gauge or a percentage. The
//! workspace forbids lossy `as` casts (Cargo.toml's lints); code converts through these or with
//! `try_from` and its own error. It imports nothing of the crate. The only lossy one is
//! [`figure`] and its kin: above 2^53 a count loses its last digits as an `f64`, which a gauge or
//! a page can afford; an id, an attempt or an amount that must stay exact never goes through it.

use std::time::Duration;

/// `n` as a figure for a gauge or a page (exact up to 2^53, the nearest `f64` beyond).
#[allow(
    clippy::cast_precision_loss,
    reason = "a figure for a gauge or a page, never read back as a count"
)]
pub fn figure(n: u64) -> f64 {
    n as f64
}

/// A signed count as a figure (exact up to ±2^53, the nearest `f64` beyond).
#[allow(
    clippy::cast_precision_loss,
    reason = "a figure for a gauge or a page, never read back as a count"
)]
pub fn signed_figure(n: i64) -> f64 {
    n as f64
}

/// A length or size as a figure.
pub fn len_figure(n: usize) -> f64 {
    figure(u64::try_from(n).unwrap_or(u64::MAX))
}

/// A count that cannot be negative, read as `i64` (PostgreSQL's `bigint`, a Redis integer):
/// a negative one counts as 0.
pub fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// A length bound as an `i64` parameter (saturating; no slice is that long).
pub fn len_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A `u64` bound as an `i64` parameter (saturating at `i64::MAX`).
pub fn u64_as_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `d` in whole milliseconds (saturating at `u64::MAX`, some 584 million years).
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `d` in whole milliseconds as an `i64` (saturating at `i64::MAX`).
pub fn millis_i64(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_exact_up_to_two_to_the_53() {
        assert_eq!(figure(0), 0.0);
        assert_eq!(figure(1 << 53), 9_007_199_254_740_992.0);
        assert_eq!(signed_figure(-(1 << 53)), -9_007_199_254_740_992.0);
        assert_eq!(len_figure(42), 42.0);
    }

    #[test]
    fn conversions_saturate_instead_of_wrapping() {
        assert_eq!(count(-5), 0);
        assert_eq!(count(7), 7);
        assert_eq!(u64_as_i64(u64::MAX), i64::MAX);
        assert_eq!(len_i64(3), 3);
        assert_eq!(millis(Duration::from_secs(2)), 2000);
        assert_eq!(millis(Duration::MAX), u64::MAX);
        assert_eq!(millis_i64(Duration::MAX), i64::MAX);
    }
}
