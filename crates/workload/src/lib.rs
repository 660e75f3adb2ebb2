#![forbid(unsafe_code)]
#![warn(missing_docs)]
//! Deterministic workload generators for Spillway's benchmarks.
//!
//! A benchmark is only comparable when every engine sees the same data, so
//! every generator here is a pure function of a `u64` seed and its
//! parameters: the same inputs give the same bytes on every machine, in every
//! run, for any thread count, and across dependency upgrades (the random
//! number generator is implemented and pinned here, not borrowed).
//!
//! - [`Rng`]: xoshiro256** seeded by SplitMix64, with sub-streams
//!   ([`Rng::stream`]) for parallel blocks; [`Permutation`]: a seeded
//!   bijection of `0..n`.
//! - [`Zipf`] / [`ScrambledZipf`]: O(1) Zipf sampling by rejection-inversion.
//! - [`kv`]: db_bench-style operation streams ([`KvGenerator`], [`write_kv`]).
//! - [`text`]: Zipf-distributed text over a synthetic vocabulary ([`write_text`]).
//! - [`rmat`]: R-MAT graph edges ([`RmatGenerator`], [`write_rmat`]).
//! - [`clicks`]: click logs with a known number of sessions ([`ClickGenerator`],
//!   [`write_clicks`]).
//! - [`GroupByGenerator`]: Zipf-keyed values for GroupBy-Aggregate.
//! - [`stream`]: timestamped records with near-sorted times and uniform, Zipf,
//!   Gaussian-mixture or drifting keys, for the stream index
//!   ([`StreamGenerator`], [`generate_stream`]).
//!
//! - [`generate_to`]: a generator's data into a file, all or nothing, timed
//!   ([`Generated`]); [`KvOptions`], [`OPTION_NAMES`]: the options of
//!   `spillway gen` and `spillway.workload`, their defaults, and the option
//!   each parameter error is about ([`with_option_names`]).
//!
//! Each `write_*` function takes any [`std::io::Write`] (it writes in chunks
//! of about 1 MiB, so the writer need not be buffered) and returns a summary
//! with the records and bytes written and the generator's ground truth
//! (distinct keys, distinct words, self loops, sessions). Each parameter
//! struct has a `validate` method that checks every parameter (errors name
//! the parameter); a generator's `new` and the `write_*` functions fail on
//! bad parameters only where `validate` does, so a caller can check before it
//! creates any output. Text and R-MAT build blocks on `threads` worker threads
//! (0 = every core, capped by [`worker_count`]). Algorithms, stream formats
//! and defaults are in the crate's [DESIGN.md](../DESIGN.md).
//!
//! ```
//! use spillway_workload::{write_clicks, write_kv, ClickParams, KvFormat, KvParams, Preset};
//!
//! // 1000 db_bench `fillrandom` puts, as text lines "PUT\t<key hex>\t<value hex>".
//! let params = KvParams::preset(Preset::FillRandom, 1000);
//! let mut output = Vec::new();
//! let summary = write_kv(&params, KvFormat::Text, &mut output)?;
//! assert_eq!(summary.records, 1000);
//! assert_eq!(summary.puts, 1000);
//! assert!(output.starts_with(b"PUT\t"));
//!
//! // The same seed gives the same bytes.
//! let mut again = Vec::new();
//! write_kv(&params, KvFormat::Text, &mut again)?;
//! assert_eq!(output, again);
//!
//! // A click log and the number of sessions a sessionizer must find in it.
//! let clicks = ClickParams { users: 100, clicks: 2000, ..ClickParams::default() };
//! let summary = write_clicks(&clicks, std::io::sink())?;
//! assert!(summary.sessions >= summary.distinct_users);
//! # Ok::<(), spillway_core::Error>(())
//! ```

mod blocks;
pub mod clicks;
mod groupby;
pub mod kv;
mod options;
mod output;
mod permutation;
pub mod rmat;
mod rng;
mod sink;
pub mod stream;
pub mod text;
mod zipf;

pub use blocks::{worker_count, THREADS_MAX};
pub use clicks::{write_clicks, Click, ClickGenerator, ClickParams, ClickSummary};
pub use groupby::{GroupByGenerator, GROUPBY_VALUE_BOUND};
pub use kv::{
    encode_key, write_kv, KeyDistribution, KvFormat, KvGenerator, KvParams, KvSummary, Operation,
    OperationKind, OperationMix, OperationRef, Preset,
};
pub use options::{
    name_options, with_option_names, DistributionName, KvOptions, KV_ZIPF_S_DEFAULT, OPTION_NAMES,
    THREADS_DEFAULT,
};
pub use output::{generate_to, Generated, Written};
pub use permutation::Permutation;
pub use rmat::{write_rmat, EdgeFormat, RmatGenerator, RmatParams, RmatSummary};
pub use rng::{derive_seed, mix64, Rng, SplitMix64};
pub use stream::{
    generate_stream, StreamGenerator, StreamKeys, StreamParams, StreamRecord, GAUSSIAN_COMPONENTS,
};
pub use text::{write_text, TextGenerator, TextParams, TextSize, TextSummary, Vocabulary};
pub use zipf::{ScrambledZipf, Zipf, ZIPF_RANKS_MAX};

/// The seed of every generator's `Default` parameters (and of `spillway gen`
/// when `--seed` is not given), so that "the default workload" is one data set.
pub const DEFAULT_SEED: u64 = 42;
