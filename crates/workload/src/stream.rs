//! Timestamped record streams for the stream index benchmark (seed 004).
//!
//! A stream is `records` records `(key, time, value)`: keys from one of
//! four [`StreamKeys`] shapes over `0..key_space`, times near-sorted
//! (increasing, with a little random jitter, as sensor readings and call
//! records arrive), and a value that stands for the reading.
//!
//! The shapes are those the template B+ tree is judged on: uniform keys,
//! scrambled Zipf keys (hot keys scattered over the key space), the seed's
//! synthetic data set (a mixture of three Gaussians, which does not drift),
//! and a drifting variant of that mixture whose means move steadily through
//! the key space, so that a template made from early keys fits later ones
//! less and less (the seed's Building and Teleco data drift; its synthetic
//! data does not).
//!
//! # Stream format
//! Every draw comes from sub-stream 0 of the seed, in this order per record
//! `i` (0-based):
//! 1. The key:
//!    - uniform: `next_below(key_space)`;
//!    - Zipf: one [`ScrambledZipf`] draw over `key_space` keys (its
//!      permutation seeded with `derive_seed(seed, 1)`);
//!    - Gaussians and drifting: the component `c` is the first whose
//!      cumulative weight exceeds `u = next_f64()`; then a standard normal
//!      `z` by Box-Muller from two more draws, `u1 = next_f64()` and
//!      `u2 = next_f64()`: `z = sqrt(-2 ln(1 - u1)) cos(2 pi u2)`;
//!      `x = mean_c + sd_c * z`, where for the drifting shape
//!      `mean_c = mean_c(0) + travel * i / records`. Gaussians redraw
//!      (from the component draw on) while `x` is outside `[0, 1)`; the
//!      drifting shape wraps `x` into `[0, 1)` instead, so a component that
//!      moves past the top of the key space comes back at the bottom. The
//!      key is `floor(x * key_space)`, at most `key_space - 1`.
//! 2. The time: `start_time + i * time_step + next_below(time_jitter + 1)`.
//!    Record `i`'s time lies in `[start_time + i * time_step, ... +
//!    time_jitter]`, so two records are out of order only when they are
//!    less than `time_jitter / time_step` records apart.
//! 3. The value: `next_f64() * 1000`.
//!
//! The mixture is [`GAUSSIAN_COMPONENTS`]: weights, means and standard
//! deviations as fractions of the key space.

use spillway_core::{ensure, Result};

use crate::rng::{derive_seed, Rng};
use crate::zipf::{ScrambledZipf, ZIPF_RANKS_MAX};
use crate::DEFAULT_SEED;

const RECORD_STREAM: u64 = 0;
const PERMUTATION_STREAM: u64 = 1;

/// The mixture of the Gaussian shapes, as `(weight, mean, standard
/// deviation)` with means and deviations in fractions of the key space:
/// three clusters of different spread and weight, so a template sees dense
/// and sparse regions side by side. Weights sum to 1.
pub const GAUSSIAN_COMPONENTS: [(f64, f64, f64); 3] = [(0.3, 0.2, 0.04), (0.5, 0.5, 0.08), (0.2, 0.8, 0.03)];

/// How keys are drawn from `0..key_space`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StreamKeys {
    /// Every key equally likely.
    Uniform,
    /// Zipf over `key_space` keys, the ranks scattered over the key space
    /// by a permutation (hot keys are not neighbours).
    Zipf {
        /// The Zipf exponent `s` (> 0).
        exponent: f64,
    },
    /// The seed's synthetic data: a mixture of three Gaussians
    /// ([`GAUSSIAN_COMPONENTS`]) that stays put.
    Gaussians,
    /// The same mixture with every mean moving up by `travel` key spaces
    /// over the stream, at a steady pace, wrapping around.
    Drifting {
        /// How far each mean moves over the whole stream, in key spaces
        /// (1.0: once through the key space), >= 0.
        travel: f64,
    },
}

impl StreamKeys {
    /// The shape's name as the benchmark spells it.
    pub fn name(&self) -> &'static str {
        match self {
            StreamKeys::Uniform => "uniform",
            StreamKeys::Zipf { .. } => "zipf",
            StreamKeys::Gaussians => "gaussians",
            StreamKeys::Drifting { .. } => "drifting",
        }
    }
}

/// Everything that determines a record stream.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamParams {
    /// Records to generate (default 10^6).
    pub records: u64,
    /// How keys are drawn (default uniform).
    pub keys: StreamKeys,
    /// Keys lie in `0..key_space`, >= 1, at most 2^53 for Zipf (default 2^40).
    pub key_space: u64,
    /// The first record's earliest time (default 1.6 * 10^15, microseconds
    /// in September 2020).
    pub start_time: u64,
    /// Time between consecutive records before jitter (default 1).
    pub time_step: u64,
    /// The most a record's time is late, in `0..=time_jitter` (default 64).
    pub time_jitter: u64,
    /// The seed all draws derive from.
    pub seed: u64,
}

impl Default for StreamParams {
    fn default() -> Self {
        StreamParams {
            records: 1_000_000,
            keys: StreamKeys::Uniform,
            key_space: 1 << 40,
            start_time: 1_600_000_000_000_000,
            time_step: 1,
            time_jitter: 64,
            seed: DEFAULT_SEED,
        }
    }
}

impl StreamParams {
    /// Checks every parameter; errors name the parameter and its value.
    /// [`StreamGenerator::new`] fails only where this does.
    pub fn validate(&self) -> Result<()> {
        ensure!(
            self.key_space >= 1,
            InvalidArgument,
            "key_space must be at least 1, got 0"
        );
        match self.keys {
            StreamKeys::Uniform | StreamKeys::Gaussians => {}
            StreamKeys::Zipf { exponent } => {
                ensure!(
                    exponent.is_finite() && exponent > 0.0,
                    InvalidArgument,
                    "the zipf exponent must be > 0, got {exponent}"
                );
                ensure!(
                    self.key_space <= ZIPF_RANKS_MAX,
                    InvalidArgument,
                    "key_space must be at most 2^53 for zipf keys, got {}",
                    self.key_space
                );
            }
            StreamKeys::Drifting { travel } => ensure!(
                travel.is_finite() && travel >= 0.0,
                InvalidArgument,
                "the drift travel must be a number >= 0, got {travel}"
            ),
        }
        let span = self
            .records
            .checked_mul(self.time_step)
            .and_then(|span| span.checked_add(self.time_jitter))
            .and_then(|span| span.checked_add(self.start_time));
        ensure!(
            span.is_some(),
            InvalidArgument,
            "start_time ({}) + records ({}) * time_step ({}) + time_jitter ({}) must fit in 64 bits",
            self.start_time,
            self.records,
            self.time_step,
            self.time_jitter
        );
        Ok(())
    }
}

/// One record of a stream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamRecord {
    /// The key, in `0..key_space`.
    pub key: u64,
    /// The time (near-sorted over the stream).
    pub time: u64,
    /// The reading, in `[0, 1000)`.
    pub value: f64,
}

/// The records of a [`StreamParams`], as an iterator in stream order.
#[derive(Debug, Clone)]
pub struct StreamGenerator {
    params: StreamParams,
    rng: Rng,
    zipf: Option<ScrambledZipf>,
    /// Cumulative weights of [`GAUSSIAN_COMPONENTS`].
    cumulative: [f64; 3],
    emitted: u64,
}

impl StreamGenerator {
    /// A generator for `params`. Fails only when [`StreamParams::validate`]
    /// does.
    pub fn new(params: &StreamParams) -> Result<Self> {
        params.validate()?;
        let zipf = match params.keys {
            StreamKeys::Zipf { exponent } => Some(ScrambledZipf::new(
                params.key_space,
                exponent,
                derive_seed(params.seed, PERMUTATION_STREAM),
            )?),
            _ => None,
        };
        let mut cumulative = [0.0; 3];
        let mut total = 0.0;
        for (slot, (weight, _, _)) in cumulative.iter_mut().zip(GAUSSIAN_COMPONENTS) {
            total += weight;
            *slot = total;
        }
        Ok(StreamGenerator {
            rng: Rng::stream(params.seed, RECORD_STREAM),
            zipf,
            cumulative,
            emitted: 0,
            params: params.clone(),
        })
    }

    /// Records generated so far.
    pub fn emitted(&self) -> u64 {
        self.emitted
    }

    /// A point of the mixture, in fractions of the key space, with the
    /// means moved up by `shift` (0 without drift). Not yet folded into
    /// `[0, 1)`.
    fn mixture_point(&mut self, shift: f64) -> f64 {
        let pick = self.rng.next_f64();
        let component = self.cumulative.iter().position(|&c| pick < c).unwrap_or(2);
        let (_, mean, deviation) = GAUSSIAN_COMPONENTS[component];
        let u1 = self.rng.next_f64();
        let u2 = self.rng.next_f64();
        let normal = (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        mean + shift + deviation * normal
    }

    fn key_of_fraction(&self, fraction: f64) -> u64 {
        debug_assert!((0.0..1.0).contains(&fraction));
        ((fraction * self.params.key_space as f64) as u64).min(self.params.key_space - 1)
    }

    fn next_key(&mut self) -> u64 {
        match self.params.keys {
            StreamKeys::Uniform => self.rng.next_below(self.params.key_space),
            StreamKeys::Zipf { .. } => {
                let zipf = self.zipf.as_ref().expect("made for zipf keys");
                zipf.sample(&mut self.rng)
            }
            StreamKeys::Gaussians => loop {
                let point = self.mixture_point(0.0);
                if (0.0..1.0).contains(&point) {
                    break self.key_of_fraction(point);
                }
            },
            StreamKeys::Drifting { travel } => {
                let progress = self.emitted as f64 / self.params.records as f64;
                let point = self.mixture_point(travel * progress);
                // rem_euclid can round up to exactly 1.0 for a tiny
                // negative point.
                let folded = point.rem_euclid(1.0);
                self.key_of_fraction(if folded < 1.0 { folded } else { 0.0 })
            }
        }
    }
}

impl Iterator for StreamGenerator {
    type Item = StreamRecord;

    fn next(&mut self) -> Option<StreamRecord> {
        if self.emitted == self.params.records {
            return None;
        }
        let key = self.next_key();
        // Validation made sure these sums fit.
        let time = self.params.start_time
            + self.emitted * self.params.time_step
            + self.rng.next_below(self.params.time_jitter + 1);
        let value = self.rng.next_f64() * 1000.0;
        self.emitted += 1;
        Some(StreamRecord { key, time, value })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.params.records - self.emitted).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}

/// Every record of `params`, in stream order (24 bytes per record in
/// memory).
pub fn generate_stream(params: &StreamParams) -> Result<Vec<StreamRecord>> {
    let generator = StreamGenerator::new(params)?;
    Ok(generator.collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(keys: StreamKeys, records: u64) -> StreamParams {
        StreamParams {
            records,
            keys,
            ..StreamParams::default()
        }
    }

    fn fractions(records: &[StreamRecord], key_space: u64) -> Vec<f64> {
        records
            .iter()
            .map(|record| record.key as f64 / key_space as f64)
            .collect()
    }

    /// The share of `points` within `width` of `center`, on the circle
    /// `[0, 1)`.
    fn share_near(points: &[f64], center: f64, width: f64) -> f64 {
        let near = points
            .iter()
            .filter(|&&point| {
                let distance = (point - center.rem_euclid(1.0)).abs();
                distance.min(1.0 - distance) <= width
            })
            .count();
        near as f64 / points.len() as f64
    }

    #[test]
    fn the_same_seed_gives_the_same_stream_and_another_seed_another() {
        for keys in [
            StreamKeys::Uniform,
            StreamKeys::Zipf { exponent: 0.99 },
            StreamKeys::Gaussians,
            StreamKeys::Drifting { travel: 1.0 },
        ] {
            let first = generate_stream(&params(keys, 5_000)).unwrap();
            assert_eq!(first.len(), 5_000);
            assert_eq!(first, generate_stream(&params(keys, 5_000)).unwrap(), "{keys:?}");
            let other = StreamParams {
                seed: 7,
                ..params(keys, 5_000)
            };
            assert_ne!(first, generate_stream(&other).unwrap(), "{keys:?}");
        }
    }

    #[test]
    fn the_stream_is_pinned() {
        // These values define the stream format: if this test fails, every
        // stream benchmark data set has changed.
        let records = generate_stream(&params(StreamKeys::Gaussians, 3)).unwrap();
        let keys: Vec<u64> = records.iter().map(|record| record.key).collect();
        let times: Vec<u64> = records.iter().map(|record| record.time).collect();
        assert_eq!(keys, PINNED_GAUSSIAN_KEYS);
        assert_eq!(times, PINNED_GAUSSIAN_TIMES);
    }

    const PINNED_GAUSSIAN_KEYS: [u64; 3] = [567726855850, 721151584118, 566218491355];
    const PINNED_GAUSSIAN_TIMES: [u64; 3] = [
        1_600_000_000_000_060,
        1_600_000_000_000_016,
        1_600_000_000_000_012,
    ];

    #[test]
    fn times_are_near_sorted_within_the_jitter() {
        let p = params(StreamKeys::Uniform, 20_000);
        let records = generate_stream(&p).unwrap();
        let mut inversions = 0;
        for (i, record) in records.iter().enumerate() {
            let earliest = p.start_time + i as u64 * p.time_step;
            assert!((earliest..=earliest + p.time_jitter).contains(&record.time));
            assert!((0.0..1000.0).contains(&record.value));
        }
        for pair in records.windows(2) {
            if pair[1].time < pair[0].time {
                inversions += 1;
            }
        }
        // Jitter of up to 64 steps: many neighbours swap, none by more
        // than the jitter.
        assert!(inversions > 1_000, "{inversions}");
        let mut sorted: Vec<u64> = records.iter().map(|record| record.time).collect();
        sorted.sort_unstable();
        for (i, record) in records.iter().enumerate() {
            let rank = sorted.partition_point(|&time| time < record.time);
            assert!(
                rank.abs_diff(i) <= p.time_jitter as usize,
                "record {i} at rank {rank}"
            );
        }
    }

    #[test]
    fn uniform_keys_fill_the_key_space_evenly() {
        let p = StreamParams {
            key_space: 1_000,
            ..params(StreamKeys::Uniform, 100_000)
        };
        let records = generate_stream(&p).unwrap();
        let mut deciles = [0u32; 10];
        for record in &records {
            assert!(record.key < 1_000);
            deciles[(record.key / 100) as usize] += 1;
        }
        // Binomial(10^5, 0.1): sd ~ 95.
        for count in deciles {
            assert!((9_500..=10_500).contains(&count), "{deciles:?}");
        }
    }

    #[test]
    fn zipf_keys_have_a_hot_head_scattered_over_the_key_space() {
        let p = StreamParams {
            key_space: 1_000_000,
            ..params(StreamKeys::Zipf { exponent: 0.99 }, 200_000)
        };
        let records = generate_stream(&p).unwrap();
        let zipf = ScrambledZipf::new(1_000_000, 0.99, derive_seed(p.seed, PERMUTATION_STREAM)).unwrap();
        let hottest = zipf.key_of_rank(1);
        let second = zipf.key_of_rank(2);
        let count = |key: u64| records.iter().filter(|record| record.key == key).count() as f64;
        // P(rank 1) = 1 / H(10^6, 0.99), about 0.068; rank 2 about half of it.
        let share = count(hottest) / records.len() as f64;
        assert!((0.06..0.077).contains(&share), "{share}");
        let ratio = count(hottest) / count(second);
        assert!((1.8..2.2).contains(&ratio), "{ratio}");
        // Scattered: the hottest keys are not the smallest.
        assert!(hottest.abs_diff(second) > 1_000, "{hottest} {second}");
        assert!(records.iter().all(|record| record.key < 1_000_000));
    }

    #[test]
    fn gaussian_keys_form_the_three_clusters_of_the_mixture() {
        let p = params(StreamKeys::Gaussians, 200_000);
        let points = fractions(&generate_stream(&p).unwrap(), p.key_space);
        assert!(points.iter().all(|point| (0.0..1.0).contains(point)));
        for (weight, mean, deviation) in GAUSSIAN_COMPONENTS {
            // Within two deviations: 95.4% of the component, plus a little
            // of its neighbours.
            let share = share_near(&points, mean, 2.0 * deviation);
            assert!(
                (weight * 0.94..weight * 0.954 + 0.03).contains(&share),
                "{mean}: {share}"
            );
        }
        // And little between the clusters.
        assert!(share_near(&points, 0.05, 0.02) < 0.005);
        assert!(share_near(&points, 0.95, 0.02) < 0.005);
        // The same stream without drift is the Gaussian shape.
        let still = generate_stream(&params(StreamKeys::Drifting { travel: 0.0 }, 1_000)).unwrap();
        let gaussians = generate_stream(&params(StreamKeys::Gaussians, 1_000)).unwrap();
        assert_eq!(still.len(), gaussians.len());
        let same = still
            .iter()
            .zip(&gaussians)
            .filter(|(a, b)| a.key == b.key)
            .count();
        assert!(
            same > 990,
            "{same} of 1000 keys agree (redraws at the edges differ)"
        );
    }

    #[test]
    fn drifting_keys_move_their_means_through_the_key_space() {
        let travel = 0.25;
        let p = params(StreamKeys::Drifting { travel }, 200_000);
        let records = generate_stream(&p).unwrap();
        let points = fractions(&records, p.key_space);
        assert!(points.iter().all(|point| (0.0..1.0).contains(point)));
        // The first and last 5% of the stream, taken back by the drift at
        // their middles (2.5% and 97.5% of the way), look like the mixture.
        let head = &points[..10_000];
        let tail = &points[190_000..];
        let back = |window: &[f64], progress: f64| -> Vec<f64> {
            window
                .iter()
                .map(|point| (point - travel * progress).rem_euclid(1.0))
                .collect()
        };
        for (weight, mean, deviation) in GAUSSIAN_COMPONENTS {
            for (window, progress) in [(head, 0.025), (tail, 0.975)] {
                let share = share_near(&back(window, progress), mean, 2.0 * deviation);
                assert!(
                    (weight * 0.9..weight * 0.954 + 0.03).contains(&share),
                    "{mean} at {progress}: {share}"
                );
            }
        }
        // The narrow top cluster ends past the top of the key space, back
        // in at the bottom.
        let (weight, mean, deviation) = GAUSSIAN_COMPONENTS[2];
        assert!(share_near(tail, mean + travel * 0.975, 2.0 * deviation) > weight * 0.9);
        assert!(tail.iter().filter(|&&point| point < 0.1).count() > 1_000);
        assert!(head.iter().filter(|&&point| point < 0.1).count() < 500);
    }

    #[test]
    fn bad_parameters_are_refused_by_name() {
        let refused = |p: StreamParams, name: &str| {
            let error = p.validate().unwrap_err().to_string();
            assert!(error.contains(name), "{error}");
            assert!(StreamGenerator::new(&p).is_err());
        };
        refused(
            StreamParams {
                key_space: 0,
                ..StreamParams::default()
            },
            "key_space",
        );
        refused(params(StreamKeys::Zipf { exponent: 0.0 }, 10), "exponent");
        refused(
            StreamParams {
                key_space: u64::MAX,
                ..params(StreamKeys::Zipf { exponent: 1.0 }, 10)
            },
            "key_space",
        );
        refused(params(StreamKeys::Drifting { travel: f64::NAN }, 10), "travel");
        refused(
            StreamParams {
                time_step: u64::MAX,
                ..StreamParams::default()
            },
            "time_step",
        );
        assert!(StreamParams::default().validate().is_ok());
    }
}
