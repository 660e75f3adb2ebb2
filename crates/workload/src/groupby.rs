//! Keyed values for GroupBy-Aggregate benchmarks (`spillway agg
//! --generate`): keys `key-RANK` with Zipf-distributed ranks, values drawn
//! uniformly below [`GROUPBY_VALUE_BOUND`]. Per record, in order: the rank
//! (`Zipf::sample`), then the value (`next_below`), from one `Rng::new(seed)`.

use std::io::Write;

use spillway_core::Result;

use crate::rng::Rng;
use crate::zipf::Zipf;

/// Values are drawn from `0..GROUPBY_VALUE_BOUND`.
pub const GROUPBY_VALUE_BOUND: u64 = 1000;

/// Yields `records` keyed values over `keys` Zipf-ranked keys.
#[derive(Debug, Clone)]
pub struct GroupByGenerator {
    zipf: Zipf,
    rng: Rng,
    remaining: u64,
    key: Vec<u8>,
}

impl GroupByGenerator {
    /// `records` values over `keys` keys with Zipf `exponent` (0 is
    /// uniform); fails where [`Zipf::new`] does.
    pub fn new(records: u64, keys: u64, exponent: f64, seed: u64) -> Result<Self> {
        Ok(GroupByGenerator {
            zipf: Zipf::new(keys, exponent)?,
            rng: Rng::new(seed),
            remaining: records,
            key: Vec::with_capacity(32),
        })
    }

    /// The next key and value, or `None` after the last.
    #[inline]
    pub fn next_record(&mut self) -> Option<(&[u8], i64)> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        self.key.clear();
        write!(self.key, "key-{}", self.zipf.sample(&mut self.rng)).expect("writing to a Vec");
        let value = self.rng.next_below(GROUPBY_VALUE_BOUND) as i64;
        Some((&self.key, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_counted_and_repeat_with_the_seed() {
        let collect = |seed| {
            let mut generator = GroupByGenerator::new(100, 10, 0.99, seed).unwrap();
            let mut records = Vec::new();
            while let Some((key, value)) = generator.next_record() {
                assert!(key.starts_with(b"key-") && (0..1000).contains(&value));
                records.push((key.to_vec(), value));
            }
            records
        };
        assert_eq!(collect(7).len(), 100);
        assert_eq!(collect(7), collect(7));
        assert_ne!(collect(7), collect(8));
    }
}
