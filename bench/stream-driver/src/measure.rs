//! Latency samples and how they are reported.

use std::time::Instant;

use serde_json::{json, Value};

/// Latencies in nanoseconds, one per call measured.
#[derive(Debug, Default, Clone)]
pub struct Latencies {
    samples: Vec<u64>,
}

impl Latencies {
    /// Room for `capacity` samples, so recording never reallocates on the
    /// clock.
    pub fn with_capacity(capacity: usize) -> Self {
        Latencies {
            samples: Vec::with_capacity(capacity),
        }
    }

    /// Records the time since `started`.
    pub fn record_since(&mut self, started: Instant) {
        self.samples.push(started.elapsed().as_nanos() as u64);
    }

    /// Adds another thread's samples.
    pub fn extend(&mut self, other: Latencies) {
        self.samples.extend(other.samples);
    }

    /// Count, mean, p50, p99, p99.9 and max, in nanoseconds.
    pub fn summary(&mut self) -> Value {
        if self.samples.is_empty() {
            return json!({"count": 0});
        }
        self.samples.sort_unstable();
        let n = self.samples.len();
        // Nearest rank: the smallest sample with at least q of them at or
        // below it.
        let quantile = |q: f64| self.samples[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
        let total: u128 = self.samples.iter().map(|&ns| u128::from(ns)).sum();
        json!({
            "count": n,
            "mean_ns": total as f64 / n as f64,
            "p50_ns": quantile(0.50),
            "p99_ns": quantile(0.99),
            "p999_ns": quantile(0.999),
            "max_ns": self.samples[n - 1],
        })
    }
}

/// Order-independent figures of a set of (key, time) results, which every
/// contender must agree on.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Checksum {
    /// Records.
    pub records: u64,
    /// Wrapping sum of `key * 31 + time` over them.
    pub sum: u64,
}

impl Checksum {
    /// Counts one record.
    #[inline]
    pub fn add(&mut self, key: u64, time: u64) {
        self.records += 1;
        self.sum = self.sum.wrapping_add(key.wrapping_mul(31).wrapping_add(time));
    }

    /// Folds another checksum in.
    pub fn merge(&mut self, other: Checksum) {
        self.records += other.records;
        self.sum = self.sum.wrapping_add(other.sum);
    }

    /// As JSON (the sum as a string: JSON readers may lose bits above 2^53).
    pub fn to_json(self) -> Value {
        json!({"records": self.records, "sum": self.sum.to_string()})
    }
}
