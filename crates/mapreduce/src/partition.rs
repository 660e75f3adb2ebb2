//! Which partition a key goes to, and phase zero, which decides.
//!
//! Phase zero (seed 003 ch. 5) maps a sample of every input before the job
//! proper: the map output it sees estimates the intermediate data's size
//! (map may grow or shrink its input) and the key distribution. The job
//! gets `ceil(estimate / partition target)` partitions, the target sized so
//! that a partition, its sort entries and its reducer's output fit phase
//! two's memory, and
//!
//! - **range** partitioning cuts the sampled keys (a reservoir of them) at
//!   equal-count quantiles: partitions hold ordered key ranges, so the
//!   output files in order are one sorted whole, and skewed keys still
//!   give partitions of about equal size;
//! - **hash** partitioning routes by the persisted hash of the key, scaled
//!   to the partition count; only the count comes from the sample.
//!
//! A job with its own partition function skips phase zero.

use serde::{Deserialize, Serialize};
use spillway_core::range;
use spillway_core::{bail, ensure, hash64, Result};

use crate::sort::prefix_of;

/// How keys are routed to partitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Partitioner {
    /// Key ranges: partition `i` holds the keys from `boundaries[i - 1]`
    /// (inclusive) to `boundaries[i]` (exclusive).
    Range {
        /// The `partitions - 1` boundary keys, strictly increasing.
        boundaries: Boundaries,
    },
    /// The persisted hash of the key, scaled to `partitions`.
    Hash {
        /// The partition count.
        partitions: u32,
    },
    /// The job's own [`Job::partition`](crate::Job::partition).
    Job {
        /// The partition count.
        partitions: u32,
    },
}

/// Range partitioning's boundary keys, with their prefixes laid out flat:
/// phase one routes every record through them, and a search that chases a
/// pointer per boundary and mispredicts a branch per probe costs as much
/// as the map. Serialized as the list of keys alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<Vec<u8>>", into = "Vec<Vec<u8>>")]
pub struct Boundaries {
    keys: range::Boundaries<Vec<u8>>,
    prefixes: Vec<u64>,
}

/// Up to this many boundaries, a key's partition is found by counting the
/// prefixes below its own (no branch to mispredict); past it, by binary
/// search.
const LINEAR_SEARCH_BOUNDARIES: usize = 32;

impl Boundaries {
    /// The number of boundaries whose keys are at most `key`: its partition.
    fn count_at_most(&self, key: &[u8]) -> usize {
        let key_prefix = prefix_of(key);
        let below = if self.prefixes.len() <= LINEAR_SEARCH_BOUNDARIES {
            self.prefixes
                .iter()
                .map(|&prefix| usize::from(prefix < key_prefix))
                .sum()
        } else {
            self.prefixes.partition_point(|&prefix| prefix < key_prefix)
        };
        // Boundaries with the key's prefix are decided by their whole keys.
        below
            + self.prefixes[below..]
                .iter()
                .zip(&self.keys.bounds()[below..])
                .take_while(|&(&prefix, boundary)| prefix == key_prefix && boundary.as_slice() <= key)
                .count()
    }
}

impl From<Vec<Vec<u8>>> for Boundaries {
    fn from(keys: Vec<Vec<u8>>) -> Self {
        let prefixes = keys.iter().map(|key| prefix_of(key)).collect();
        Boundaries {
            keys: range::Boundaries::from_bounds(keys),
            prefixes,
        }
    }
}

impl From<Boundaries> for Vec<Vec<u8>> {
    fn from(boundaries: Boundaries) -> Self {
        boundaries.keys.into_bounds()
    }
}

impl std::ops::Deref for Boundaries {
    type Target = [Vec<u8>];

    fn deref(&self) -> &[Vec<u8>] {
        self.keys.bounds()
    }
}

/// Which partitioning phase zero chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Partitioning {
    /// Range partitioning by sampled keys (ordered output).
    Range,
    /// Hash partitioning.
    Hash,
}

impl Partitioning {
    /// The partitioning named `name` (`range` or `hash`).
    pub fn parse(name: &str) -> Result<Self> {
        Ok(match name {
            "range" => Partitioning::Range,
            "hash" => Partitioning::Hash,
            _ => bail!(
                InvalidArgument,
                "unknown partitioning '{name}'; use range or hash"
            ),
        })
    }
}

impl Partitioner {
    /// The number of partitions.
    pub fn partitions(&self) -> usize {
        match self {
            Partitioner::Range { boundaries } => boundaries.len() + 1,
            Partitioner::Hash { partitions } | Partitioner::Job { partitions } => *partitions as usize,
        }
    }

    /// The partition of `key` by its range or its hash; `None` under
    /// [`Partitioner::Job`], where the job's own partition function
    /// decides (`MapOutput` asks it: see [`Job::partition`](crate::Job::partition)).
    #[inline]
    pub fn partition_of(&self, key: &[u8]) -> Option<usize> {
        match self {
            Partitioner::Range { boundaries } => Some(boundaries.count_at_most(key)),
            Partitioner::Hash { partitions } => {
                Some(((u128::from(hash64(key)) * u128::from(*partitions)) >> 64) as usize)
            }
            Partitioner::Job { .. } => None,
        }
    }

    /// Range partitioning into `partitions` from sampled keys: the keys at
    /// equal-count quantiles, repeated ones dropped (a key heavier than a
    /// partition gets one to itself and fewer partitions are made).
    pub fn range_from_sample(sample: Vec<Vec<u8>>, partitions: usize) -> Self {
        let boundaries = range::Boundaries::from_sample_distinct(sample, partitions).into_bounds();
        Partitioner::Range {
            boundaries: boundaries.into(),
        }
    }

    /// Checks a partitioner read back from a job's manifest.
    pub fn validate(&self) -> Result<()> {
        match self {
            Partitioner::Range { boundaries } => ensure!(
                boundaries.keys.is_strictly_increasing(),
                InvalidArgument,
                "range partition boundaries must increase strictly"
            ),
            Partitioner::Hash { partitions } | Partitioner::Job { partitions } => {
                ensure!(
                    *partitions >= 1,
                    InvalidArgument,
                    "a job needs at least one partition"
                )
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_boundaries_cut_a_skewed_sample_into_even_parts() {
        // Key 0 is half the sample; the rest spread over 1..=100.
        let sample: Vec<Vec<u8>> = (0..2000u32)
            .map(|i| {
                if i % 2 == 0 {
                    vec![0]
                } else {
                    vec![(i % 100 + 1) as u8]
                }
            })
            .collect();
        let partitioner = Partitioner::range_from_sample(sample.clone(), 4);
        partitioner.validate().unwrap();
        let Partitioner::Range { boundaries } = &partitioner else {
            unreachable!()
        };
        assert_eq!(
            boundaries.len(),
            2,
            "the heavy key's quantile is dropped: {boundaries:?}"
        );
        let mut counts = vec![0usize; partitioner.partitions()];
        for key in &sample {
            counts[partitioner.partition_of(key).unwrap()] += 1;
        }
        assert_eq!(counts[0], 1000, "key 0 alone in the first partition: {counts:?}");
        assert!(counts[1].abs_diff(counts[2]) < 100, "{counts:?}");
        // Order: every key of a partition is below every key of the next.
        assert_eq!(partitioner.partition_of(&[0]).unwrap(), 0);
        assert_eq!(partitioner.partition_of(&[255]).unwrap(), 2);
    }

    #[test]
    fn range_partitions_by_prefix_equal_those_by_whole_keys() {
        // Keys around the boundaries: equal prefixes, zero padding, lengths
        // on both sides of 8.
        let alphabet: [&[u8]; 8] = [
            b"",
            b"\0",
            b"a",
            b"b",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefgi",
            b"zz",
        ];
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for first in alphabet {
            for second in alphabet {
                keys.push([first, second].concat());
            }
        }
        keys.sort();
        keys.dedup();
        // Few boundaries (searched linearly) and many (binary search).
        for step in [5, 1] {
            let boundaries: Vec<Vec<u8>> = keys.iter().step_by(step).cloned().collect();
            let partitioner = Partitioner::Range {
                boundaries: boundaries.clone().into(),
            };
            for key in &keys {
                assert_eq!(
                    partitioner.partition_of(key).unwrap(),
                    boundaries.partition_point(|boundary| boundary <= key),
                    "{key:?} among {} boundaries",
                    boundaries.len()
                );
            }
        }
    }

    #[test]
    fn hash_partitioning_routes_into_range() {
        let hash = Partitioner::Hash { partitions: 7 };
        let mut seen = [false; 7];
        for key in 0..1000u32 {
            seen[hash.partition_of(&key.to_le_bytes()).unwrap()] = true;
        }
        assert!(seen.iter().all(|&hit| hit));
        assert_eq!(Partitioner::Job { partitions: 3 }.partition_of(&[5]), None);
        assert!(Partitioner::Hash { partitions: 0 }.validate().is_err());
        assert!(Partitioner::Range {
            boundaries: vec![vec![2], vec![1]].into()
        }
        .validate()
        .is_err());
    }
}
