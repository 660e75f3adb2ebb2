//! The benchmark's datasets and query ranges: both pure functions of a
//! seed, so every contender sees the same records and the same queries.

use anyhow::{bail, Context, Result};
use spillway_workload::{generate_stream, Rng, StreamKeys, StreamParams, StreamRecord};

/// The Zipf exponent of the `zipf` dataset (YCSB's default).
pub const ZIPF_EXPONENT: f64 = 0.99;
/// How far the drifting dataset's means travel over the stream, in key
/// spaces: once through the whole key space, the plain reading of "means
/// that move steadily through the key space". `drifting:X` picks another.
pub const DRIFT_TRAVEL: f64 = 1.0;
/// The seed of every dataset (the workload crate's default).
pub const SEED: u64 = spillway_workload::DEFAULT_SEED;
/// The seed of the query ranges.
const QUERY_SEED: u64 = 0x5175_6572_7921;

/// Query selectivities: the share of the records a range query returns.
pub const SELECTIVITIES: [f64; 4] = [0.0001, 0.001, 0.01, 0.1];

/// A named stream of records.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// `uniform`, `zipf`, `gaussians`, `drifting` or `drifting:X`.
    pub name: String,
    /// What generates it.
    pub params: StreamParams,
}

impl Dataset {
    /// The dataset called `name`, `records` long.
    pub fn parse(name: &str, records: u64) -> Result<Dataset> {
        let keys = match name.split_once(':') {
            None => match name {
                "uniform" => StreamKeys::Uniform,
                "zipf" => StreamKeys::Zipf {
                    exponent: ZIPF_EXPONENT,
                },
                "gaussians" => StreamKeys::Gaussians,
                "drifting" => StreamKeys::Drifting { travel: DRIFT_TRAVEL },
                _ => bail!(
                    "unknown dataset {name:?}: use uniform, zipf, gaussians, drifting or drifting:TRAVEL"
                ),
            },
            Some(("drifting", travel)) => StreamKeys::Drifting {
                travel: travel
                    .parse()
                    .with_context(|| format!("dataset {name:?}: the travel must be a number"))?,
            },
            Some(_) => {
                bail!("unknown dataset {name:?}: use uniform, zipf, gaussians, drifting or drifting:TRAVEL")
            }
        };
        let params = StreamParams {
            records,
            keys,
            seed: SEED,
            ..StreamParams::default()
        };
        params.validate()?;
        Ok(Dataset {
            name: name.to_string(),
            params,
        })
    }

    /// Its records, in stream order.
    pub fn generate(&self) -> Result<Vec<StreamRecord>> {
        Ok(generate_stream(&self.params)?)
    }
}

/// `count` random key ranges that each hold `selectivity` of the records
/// (by count, so a range in a dense region is narrow and one in a sparse
/// region wide): a range starts at a random record's key in key order and
/// ends `selectivity * records` records later. Keys repeated past its end
/// (Zipf) are included too, by every contender alike.
pub fn query_ranges(
    sorted_keys: &[u64],
    selectivity: f64,
    count: usize,
    seed_offset: u64,
) -> Vec<(u64, u64)> {
    let n = sorted_keys.len();
    if n == 0 {
        return Vec::new();
    }
    let width = ((n as f64 * selectivity).round() as usize).clamp(1, n);
    let mut rng = Rng::stream(QUERY_SEED, seed_offset ^ selectivity.to_bits());
    (0..count)
        .map(|_| {
            let start = rng.next_below((n - width + 1) as u64) as usize;
            (sorted_keys[start], sorted_keys[start + width - 1])
        })
        .collect()
}

/// The keys of `records`, sorted.
pub fn sorted_keys(records: &[StreamRecord]) -> Vec<u64> {
    let mut keys: Vec<u64> = records.iter().map(|record| record.key).collect();
    keys.sort_unstable();
    keys
}
