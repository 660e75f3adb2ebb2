//! Latency histograms, the distributions engines report in `stats()`.
//!
//! A [`Histogram`] is a handle: hot paths keep it and record with four
//! relaxed atomic operations, no lookup, no lock and no allocation;
//! [`Histogram::snapshot`] reads it into a plain, serializable
//! [`HistogramSnapshot`]. Each engine's statistics are a typed struct of its
//! own that holds its counters and histograms (the key-value store's write,
//! GET and spill latencies), so their names are field names, checked by the
//! compiler, and their units are in those names (`spill_latency_us`).
//!
//! ```
//! use spillway_core::Histogram;
//! let latency_us = Histogram::new();
//! {
//!     let _timer = latency_us.start_timer();
//! }
//! latency_us.record_us(250);
//! let snapshot = latency_us.snapshot();
//! assert_eq!(snapshot.count, 2);
//! assert_eq!(snapshot.max, 250);
//! ```
//!
//! # Histogram buckets
//! Log-linear, as in HdrHistogram: values 0 to 15 each have their own
//! bucket; above that every power-of-two range `[2^k, 2^(k+1))` is split into
//! 16 equal buckets. 976 buckets cover all of `u64`. A bucket's width is at
//! most 1/16 of its lower bound, and a percentile is reported as the middle of
//! its bucket (clamped to the observed min and max), so **a reported
//! percentile is within 1/32 (3.125 %) of the true value of that rank**.
//! Count, sum, min and max are exact, and so are p0 and p100.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Values 0..16 are exact; each power of two above is split in 16.
const SUB_BUCKET_BITS: u32 = 4;
const SUB_BUCKETS: usize = 1 << SUB_BUCKET_BITS;
/// One group of 16 for 0..16 and one per exponent 4..=63.
const BUCKETS: usize = (64 - SUB_BUCKET_BITS as usize + 1) * SUB_BUCKETS;
const _: () = assert!(BUCKETS == 976);

/// The bucket of `value` (see the [module docs](self)).
fn bucket_index(value: u64) -> usize {
    if value < SUB_BUCKETS as u64 {
        return value as usize;
    }
    let highest_bit = 63 - value.leading_zeros();
    let exponent = highest_bit - SUB_BUCKET_BITS + 1;
    // The top five bits of value: 16..=31.
    let mantissa = (value >> (exponent - 1)) as usize;
    exponent as usize * SUB_BUCKETS + (mantissa - SUB_BUCKETS)
}

/// The smallest and largest value of bucket `index`.
fn bucket_bounds(index: usize) -> (u64, u64) {
    if index < SUB_BUCKETS {
        return (index as u64, index as u64);
    }
    let exponent = (index / SUB_BUCKETS) as u32;
    let mantissa = (index % SUB_BUCKETS + SUB_BUCKETS) as u64;
    let width = 1u64 << (exponent - 1);
    let low = mantissa << (exponent - 1);
    (low, low + (width - 1))
}

struct HistogramCells {
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
    min: AtomicU64,
    max: AtomicU64,
}

/// A distribution of latencies (or any other non-negative integer quantity,
/// named with its unit), with percentiles of bounded relative error (module
/// docs).
///
/// # Thread safety
/// Clones share the same buckets. Recording is lock-free and allocation-free:
/// four relaxed atomic operations. A read that races with records may see
/// some of a record's effects and not others (a bucket counted before the
/// sum includes it); each field is still exact once recording stops.
#[derive(Clone)]
pub struct Histogram {
    cells: Arc<HistogramCells>,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Histogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Histogram")
            .field("count", &self.count())
            .field("sum", &self.sum())
            .field("max", &self.max())
            .finish()
    }
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Histogram {
            cells: Arc::new(HistogramCells {
                buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
                sum: AtomicU64::new(0),
                min: AtomicU64::new(u64::MAX),
                max: AtomicU64::new(0),
            }),
        }
    }

    /// Records `value`, in the unit the histogram's name gives. The sum
    /// wraps at `u64::MAX`.
    pub fn record_value(&self, value: u64) {
        let cells = &*self.cells;
        cells.buckets[bucket_index(value)].fetch_add(1, Ordering::Relaxed);
        cells.sum.fetch_add(value, Ordering::Relaxed);
        cells.min.fetch_min(value, Ordering::Relaxed);
        cells.max.fetch_max(value, Ordering::Relaxed);
    }

    /// Records a latency in microseconds.
    pub fn record_us(&self, latency_us: u64) {
        self.record_value(latency_us);
    }

    /// Records a latency, in whole microseconds (saturating for durations
    /// beyond `u64::MAX` microseconds).
    pub fn record(&self, latency: Duration) {
        self.record_us(u64::try_from(latency.as_micros()).unwrap_or(u64::MAX));
    }

    /// Starts timing an operation; the returned guard records the elapsed
    /// time when it is dropped (also on early return or `?`).
    pub fn start_timer(&self) -> Timer<'_> {
        Timer {
            histogram: self,
            start: Instant::now(),
            armed: true,
        }
    }

    /// Number of values recorded.
    pub fn count(&self) -> u64 {
        self.cells
            .buckets
            .iter()
            .map(|bucket| bucket.load(Ordering::Relaxed))
            .sum()
    }

    /// Sum of the values recorded.
    pub fn sum(&self) -> u64 {
        self.cells.sum.load(Ordering::Relaxed)
    }

    /// Largest value recorded, 0 if none.
    pub fn max(&self) -> u64 {
        self.cells.max.load(Ordering::Relaxed)
    }

    /// Smallest value recorded, 0 if none.
    pub fn min(&self) -> u64 {
        match self.cells.min.load(Ordering::Relaxed) {
            u64::MAX if self.count() == 0 => 0,
            min => min,
        }
    }

    /// Mean of the values recorded, 0 if none.
    pub fn mean(&self) -> f64 {
        self.snapshot().mean
    }

    /// The value at percentile `percent` (0 to 100; 99.9 for p99.9) by the
    /// nearest-rank method, within 1/32 of the true value; 0 if empty.
    pub fn percentile(&self, percent: f64) -> u64 {
        let counts = self.bucket_counts();
        let total = counts.iter().sum();
        percentile_of(&counts, total, percent, self.min(), self.max())
    }

    /// Count, sum, mean, min, p50, p99, p99.9 and max, read together.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let counts = self.bucket_counts();
        let count: u64 = counts.iter().sum();
        if count == 0 {
            return HistogramSnapshot::default();
        }
        let (sum, min, max) = (self.sum(), self.min(), self.max());
        HistogramSnapshot {
            count,
            sum,
            mean: sum as f64 / count as f64,
            min,
            p50: percentile_of(&counts, count, 50.0, min, max),
            p99: percentile_of(&counts, count, 99.0, min, max),
            p999: percentile_of(&counts, count, 99.9, min, max),
            max,
        }
    }

    fn bucket_counts(&self) -> Vec<u64> {
        self.cells
            .buckets
            .iter()
            .map(|bucket| bucket.load(Ordering::Relaxed))
            .collect()
    }
}

fn percentile_of(counts: &[u64], total: u64, percent: f64, min: u64, max: u64) -> u64 {
    if total == 0 {
        return 0;
    }
    let percent = percent.clamp(0.0, 100.0);
    // The epsilon keeps 99.9 % of 1000 at rank 999 despite rounding in f64.
    let rank = ((percent * total as f64 / 100.0) - 1e-9).ceil() as u64;
    let rank = rank.clamp(1, total);
    // The extremes are known exactly.
    if rank == 1 {
        return min;
    }
    if rank == total {
        return max;
    }
    let mut seen = 0;
    for (index, &count) in counts.iter().enumerate() {
        seen += count;
        if seen >= rank {
            let (low, high) = bucket_bounds(index);
            let middle = low + (high - low) / 2;
            return middle.clamp(min, max.max(min));
        }
    }
    max
}

/// Records the time from [`Histogram::start_timer`] until it is dropped or
/// stopped.
#[must_use = "a timer records when it is dropped; binding it to `_` drops it at once"]
#[derive(Debug)]
pub struct Timer<'a> {
    histogram: &'a Histogram,
    start: Instant,
    armed: bool,
}

impl Timer<'_> {
    /// Records now and returns the elapsed time.
    pub fn stop(mut self) -> Duration {
        let elapsed = self.start.elapsed();
        self.histogram.record(elapsed);
        self.armed = false;
        elapsed
    }

    /// Drops the timer without recording (the operation was abandoned and
    /// would distort the distribution).
    pub fn cancel(mut self) {
        self.armed = false;
    }
}

impl Drop for Timer<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.histogram.record(self.start.elapsed());
        }
    }
}

/// A histogram read at one moment, in the unit of its name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct HistogramSnapshot {
    /// Number of values recorded.
    pub count: u64,
    /// Sum of the values.
    pub sum: u64,
    /// Mean of the values.
    pub mean: f64,
    /// Smallest value (exact).
    pub min: u64,
    /// Median, within 1/32.
    pub p50: u64,
    /// 99th percentile, within 1/32.
    pub p99: u64,
    /// 99.9th percentile, within 1/32.
    pub p999: u64,
    /// Largest value (exact).
    pub max: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    #[test]
    fn bucket_scheme_is_contiguous_and_bounded() {
        assert_eq!(bucket_index(0), 0);
        assert_eq!(bucket_index(15), 15);
        assert_eq!(bucket_index(16), 16);
        assert_eq!(bucket_index(31), 31);
        assert_eq!(bucket_index(32), 32);
        assert_eq!(bucket_index(33), 32);
        assert_eq!(bucket_index(u64::MAX), BUCKETS - 1);
        let mut expected_low = 0;
        for index in 0..BUCKETS {
            let (low, high) = bucket_bounds(index);
            assert_eq!(low, expected_low, "bucket {index} starts where the last ended");
            assert_eq!(bucket_index(low), index);
            assert_eq!(bucket_index(high), index);
            // Width at most 1/16 of the lower bound.
            assert!((high - low) <= low / 16, "bucket {index}: {low}..={high}");
            expected_low = high.wrapping_add(1);
        }
        assert_eq!(expected_low, 0, "the last bucket ends at u64::MAX");
    }

    fn within_bound(reported: u64, exact: u64) -> bool {
        reported.abs_diff(exact) as f64 <= exact as f64 / 32.0
    }

    #[test]
    fn percentiles_of_a_uniform_distribution_are_within_the_bound() {
        let histogram = Histogram::new();
        for value in 1..=100_000u64 {
            histogram.record_us(value);
        }
        let snapshot = histogram.snapshot();
        assert_eq!(snapshot.count, 100_000);
        assert_eq!(snapshot.sum, 100_000 * 100_001 / 2);
        assert_eq!(snapshot.min, 1);
        assert_eq!(snapshot.max, 100_000);
        assert!((snapshot.mean - 50_000.5).abs() < 1e-9);
        for (reported, exact) in [
            (snapshot.p50, 50_000),
            (snapshot.p99, 99_000),
            (snapshot.p999, 99_900),
            (histogram.percentile(25.0), 25_000),
            (histogram.percentile(100.0), 100_000),
            (histogram.percentile(0.0), 1),
        ] {
            assert!(
                within_bound(reported, exact),
                "reported {reported}, exact {exact}"
            );
        }
    }

    #[test]
    fn percentiles_of_a_skewed_distribution_match_exact_ranks() {
        // Values from 1 us to 1 s, most of them small, like real latencies.
        let histogram = Histogram::new();
        let mut values = Vec::new();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..50_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let value = (state % 1_000_000 + 1) >> ((state >> 60) & 15);
            values.push(value);
            histogram.record_us(value);
        }
        values.sort_unstable();
        for percent in [1.0, 10.0, 50.0, 90.0, 99.0, 99.9, 99.99] {
            let rank = ((percent / 100.0 * values.len() as f64).ceil() as usize).max(1);
            let exact = values[rank - 1];
            let reported = histogram.percentile(percent);
            assert!(
                within_bound(reported, exact),
                "p{percent}: reported {reported}, exact {exact}"
            );
        }
    }

    #[test]
    fn small_values_are_exact() {
        let histogram = Histogram::new();
        for value in [3, 3, 3, 7] {
            histogram.record_us(value);
        }
        assert_eq!(histogram.percentile(50.0), 3);
        assert_eq!(histogram.percentile(100.0), 7);
        assert_eq!(histogram.min(), 3);
    }

    #[test]
    fn empty_histogram_reads_as_zero() {
        let histogram = Histogram::new();
        assert_eq!(histogram.snapshot(), HistogramSnapshot::default());
        assert_eq!(histogram.percentile(99.0), 0);
        assert_eq!(histogram.min(), 0);
        assert_eq!(histogram.mean(), 0.0);
    }

    #[test]
    fn extreme_values_do_not_overflow() {
        let histogram = Histogram::new();
        histogram.record_us(0);
        histogram.record_us(u64::MAX);
        histogram.record(Duration::MAX);
        assert_eq!(histogram.count(), 3);
        assert_eq!(histogram.max(), u64::MAX);
        assert_eq!(histogram.percentile(100.0), u64::MAX);
        assert_eq!(histogram.percentile(1.0), 0);
    }

    #[test]
    fn histogram_records_from_several_threads() {
        let histogram = Histogram::new();
        thread::scope(|scope| {
            for thread in 0..4u64 {
                let histogram = &histogram;
                scope.spawn(move || {
                    for value in 0..1000 {
                        histogram.record_us(thread * 1000 + value);
                    }
                });
            }
        });
        assert_eq!(histogram.count(), 4000);
        assert_eq!(histogram.sum(), (0..4000).sum::<u64>());
        assert_eq!(histogram.max(), 3999);
    }

    #[test]
    fn timer_records_on_drop_and_on_stop_but_not_when_cancelled() {
        let histogram = Histogram::new();
        {
            let _timer = histogram.start_timer();
            thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(histogram.count(), 1);
        assert!(histogram.max() >= 2000, "{}", histogram.max());
        let elapsed = histogram.start_timer().stop();
        assert_eq!(histogram.count(), 2);
        assert!(elapsed < Duration::from_secs(60));
        histogram.start_timer().cancel();
        assert_eq!(histogram.count(), 2);
        // Clones share the buckets.
        let clone = histogram.clone();
        clone.record_us(1);
        assert_eq!(histogram.count(), 3);
    }
}
