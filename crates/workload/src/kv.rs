//! db_bench-style key-value operation streams.
//!
//! A stream is `operations` operations, each a kind (put, get, delete, merge),
//! a fixed-width key chosen by a [`KeyDistribution`] from `0..key_count`, and
//! for puts and merges a value of `value_bytes` bytes whose compressibility
//! follows db_bench's `compression_ratio`.
//!
//! # Stream format
//! Draws come from two sub-streams of the seed: stream 0 drives the operations
//! and stream 1 fills the value pool; the scrambled Zipf permutation is seeded
//! with `derive_seed(seed, 2)`. For each operation, in order:
//! 1. If the mix has more than one kind: `r = next_below(100)`; the kind is
//!    put if `r < put%`, else get if `r < put% + get%`, else delete if
//!    `r < put% + get% + delete%`, else merge.
//! 2. The key index: sequential `i mod key_count` (no draw), uniform
//!    `next_below(key_count)`, Zipfian `rank - 1` or `permutation(rank - 1)`
//!    when scrambled (rank 1 is the hottest key).
//! 3. Puts and merges take the next `value_bytes` of the value pool (no
//!    draw; see [`value_pool`]).
//!
//! Keys are [`encode_key`]`(index)`: `key_bytes >= 8` gives the index as
//! 8 big-endian bytes followed by `'0'` (0x30) padding (db_bench's layout);
//! shorter keys are the low `key_bytes` bytes of the big-endian index. Either
//! way, byte order equals numeric order.

use std::fmt;
use std::io::Write;
use std::str::FromStr;

use serde::Serialize;
use spillway_core::{bail, ensure, Error, Result};

use crate::rng::{derive_seed, Rng};
use crate::sink::{push_hex, ChunkedSink};
use crate::zipf::{ScrambledZipf, Zipf, ZIPF_RANKS_MAX};
use crate::DEFAULT_SEED;

/// The longest key a stream may have; keeps the binary format's `u32`
/// lengths and the reused buffers small.
pub const KEY_BYTES_MAX: usize = 1 << 16;
/// The longest value a stream may have.
pub const VALUE_BYTES_MAX: usize = 1 << 26;
/// The largest key space whose distinct keys [`write_kv`] counts exactly
/// (with a bitmap of `key_count / 8` bytes, 128 MiB at this limit).
pub const DISTINCT_KEYS_TRACKED_MAX: u64 = 1 << 30;
/// The size of the value pool values are cut from (db_bench uses 1 MiB too):
/// large enough that consecutive values do not repeat within a block cache.
pub const VALUE_POOL_BYTES: usize = 1 << 20;
/// The value pool is built from chunks of this many bytes, each a random
/// prefix repeated (db_bench's `CompressibleString` of 100 bytes).
pub const VALUE_POOL_CHUNK_BYTES: usize = 100;

const OPERATION_STREAM: u64 = 0;
const VALUE_POOL_STREAM: u64 = 1;
const PERMUTATION_STREAM: u64 = 2;

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OperationKind {
    /// Insert or overwrite the key with the value.
    Put,
    /// Look the key up.
    Get,
    /// Remove the key.
    Delete,
    /// Combine the value into the key's value with the store's merge operator.
    Merge,
}

impl OperationKind {
    /// The upper-case name used in the text format (`PUT`, `GET`, ...).
    pub fn name(self) -> &'static str {
        match self {
            OperationKind::Put => "PUT",
            OperationKind::Get => "GET",
            OperationKind::Delete => "DELETE",
            OperationKind::Merge => "MERGE",
        }
    }

    /// The code used in the binary format: put 0, get 1, delete 2, merge 3.
    pub fn code(self) -> u8 {
        match self {
            OperationKind::Put => 0,
            OperationKind::Get => 1,
            OperationKind::Delete => 2,
            OperationKind::Merge => 3,
        }
    }

    /// Whether the operation carries a value.
    pub fn has_value(self) -> bool {
        matches!(self, OperationKind::Put | OperationKind::Merge)
    }
}

/// How keys are chosen from `0..key_count`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyDistribution {
    /// Operation `i` uses key `i mod key_count` (db_bench's `fillseq`).
    Sequential,
    /// Every key equally likely (db_bench's `fillrandom`, `readrandom`).
    Uniform,
    /// Zipf over ranks with the given exponent; `scrambled` scatters the hot
    /// ranks over the key space (see [`ScrambledZipf`]) instead of putting
    /// them at keys 0, 1, 2, ...
    Zipfian {
        /// The Zipf exponent `s` (> 0; 0.99 is YCSB's default).
        exponent: f64,
        /// Whether ranks are permuted over the key space.
        scrambled: bool,
    },
}

impl KeyDistribution {
    /// The distribution's name as the CLI spells it.
    pub fn name(&self) -> &'static str {
        match self {
            KeyDistribution::Sequential => "sequential",
            KeyDistribution::Uniform => "uniform",
            KeyDistribution::Zipfian { .. } => "zipfian",
        }
    }
}

/// The share of each operation kind, in whole percent summing to 100.
///
/// Parsed from `put=90,get=10` (kinds not named get 0) so that benchmark
/// scripts can spell mixes db_bench has no name for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OperationMix {
    /// Percent of puts.
    pub put_percent: u8,
    /// Percent of gets.
    pub get_percent: u8,
    /// Percent of deletes.
    pub delete_percent: u8,
    /// Percent of merges.
    pub merge_percent: u8,
}

impl OperationMix {
    /// Only puts (the fill benchmarks).
    pub const PUTS: OperationMix = OperationMix::new(100, 0, 0, 0);
    /// Only gets (the read benchmarks).
    pub const GETS: OperationMix = OperationMix::new(0, 100, 0, 0);

    /// A mix from its four percentages (checked by [`KvParams::validate`]).
    pub const fn new(put_percent: u8, get_percent: u8, delete_percent: u8, merge_percent: u8) -> Self {
        OperationMix {
            put_percent,
            get_percent,
            delete_percent,
            merge_percent,
        }
    }

    fn total(&self) -> u32 {
        u32::from(self.put_percent)
            + u32::from(self.get_percent)
            + u32::from(self.delete_percent)
            + u32::from(self.merge_percent)
    }

    /// The only kind in the mix, when there is only one (no draw needed).
    fn single_kind(&self) -> Option<OperationKind> {
        match (
            self.put_percent,
            self.get_percent,
            self.delete_percent,
            self.merge_percent,
        ) {
            (100, 0, 0, 0) => Some(OperationKind::Put),
            (0, 100, 0, 0) => Some(OperationKind::Get),
            (0, 0, 100, 0) => Some(OperationKind::Delete),
            (0, 0, 0, 100) => Some(OperationKind::Merge),
            _ => None,
        }
    }

    #[inline]
    fn kind_of(&self, draw: u64) -> OperationKind {
        let puts = u64::from(self.put_percent);
        let gets = puts + u64::from(self.get_percent);
        let deletes = gets + u64::from(self.delete_percent);
        if draw < puts {
            OperationKind::Put
        } else if draw < gets {
            OperationKind::Get
        } else if draw < deletes {
            OperationKind::Delete
        } else {
            OperationKind::Merge
        }
    }
}

impl fmt::Display for OperationMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "put={},get={},delete={},merge={}",
            self.put_percent, self.get_percent, self.delete_percent, self.merge_percent
        )
    }
}

impl FromStr for OperationMix {
    type Err = Error;

    /// Parses `kind=percent` pairs separated by commas, e.g. `put=50,get=50`.
    fn from_str(text: &str) -> Result<Self> {
        let mut mix = OperationMix::new(0, 0, 0, 0);
        for part in text.split(',').map(str::trim).filter(|part| !part.is_empty()) {
            let Some((kind, percent)) = part.split_once('=') else {
                bail!(
                    InvalidArgument,
                    "operation mix entry {part:?} is not kind=percent"
                );
            };
            let percent: u8 = match percent.trim().parse() {
                Ok(percent) if percent <= 100 => percent,
                _ => bail!(
                    InvalidArgument,
                    "operation mix percent {percent:?} is not an integer 0..=100"
                ),
            };
            let slot = match kind.trim().to_ascii_lowercase().as_str() {
                "put" => &mut mix.put_percent,
                "get" => &mut mix.get_percent,
                "delete" => &mut mix.delete_percent,
                "merge" => &mut mix.merge_percent,
                other => bail!(
                    InvalidArgument,
                    "operation mix kind {other:?} is not one of put, get, delete, merge"
                ),
            };
            *slot = percent;
        }
        ensure!(
            mix.total() == 100,
            InvalidArgument,
            "operation mix percentages must sum to 100, got {} in {text:?}",
            mix.total()
        );
        Ok(mix)
    }
}

/// The db_bench benchmarks a stream can imitate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// Puts of keys `0, 1, 2, ...` in order.
    FillSeq,
    /// Puts of uniformly random keys.
    FillRandom,
    /// Same stream shape as `fillrandom`; run against a filled store it
    /// overwrites existing keys (use another seed for a different order).
    Overwrite,
    /// Gets of uniformly random keys (misses when `key_count` exceeds the
    /// keys loaded).
    ReadRandom,
    /// 90% gets and 10% puts of uniform keys, interleaved: a single-stream
    /// stand-in for db_bench's reader threads beside one writer thread.
    ReadWhileWriting,
    /// Deletes of uniformly random keys.
    DeleteRandom,
    /// Merges of uniformly random keys (db_bench's `mergerandom`).
    MergeRandom,
}

impl Preset {
    /// Every preset, in the order the CLI lists them.
    pub const ALL: [Preset; 7] = [
        Preset::FillSeq,
        Preset::FillRandom,
        Preset::Overwrite,
        Preset::ReadRandom,
        Preset::ReadWhileWriting,
        Preset::DeleteRandom,
        Preset::MergeRandom,
    ];

    /// The db_bench name.
    pub fn name(self) -> &'static str {
        match self {
            Preset::FillSeq => "fillseq",
            Preset::FillRandom => "fillrandom",
            Preset::Overwrite => "overwrite",
            Preset::ReadRandom => "readrandom",
            Preset::ReadWhileWriting => "readwhilewriting",
            Preset::DeleteRandom => "deleterandom",
            Preset::MergeRandom => "mergerandom",
        }
    }

    fn mix(self) -> OperationMix {
        match self {
            Preset::FillSeq | Preset::FillRandom | Preset::Overwrite => OperationMix::PUTS,
            Preset::ReadRandom => OperationMix::GETS,
            Preset::ReadWhileWriting => OperationMix::new(10, 90, 0, 0),
            Preset::DeleteRandom => OperationMix::new(0, 0, 100, 0),
            Preset::MergeRandom => OperationMix::new(0, 0, 0, 100),
        }
    }
}

impl FromStr for Preset {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        match Preset::ALL.into_iter().find(|preset| preset.name() == text) {
            Some(preset) => Ok(preset),
            None => {
                let names: Vec<&str> = Preset::ALL.iter().map(|preset| preset.name()).collect();
                bail!(
                    InvalidArgument,
                    "unknown preset {text:?}; expected one of {}",
                    names.join(", ")
                )
            }
        }
    }
}

/// Everything that determines a key-value stream.
#[derive(Debug, Clone, PartialEq)]
pub struct KvParams {
    /// Operations in the stream.
    pub operations: u64,
    /// Bytes per key, 1..=[`KEY_BYTES_MAX`] (db_bench default 16).
    pub key_bytes: usize,
    /// Bytes per put or merge value, 0..=[`VALUE_BYTES_MAX`] (db_bench default 100).
    pub value_bytes: usize,
    /// Size of the key space `0..key_count`.
    pub key_count: u64,
    /// How keys are chosen.
    pub distribution: KeyDistribution,
    /// The share of each operation kind.
    pub mix: OperationMix,
    /// Target compressed size over raw size of values, in (0, 1]: each
    /// 100-byte chunk of the value pool is `floor(100 * ratio)` random
    /// printable bytes repeated (db_bench's `compression_ratio`, default 0.5).
    pub compression_ratio: f64,
    /// The seed all draws derive from.
    pub seed: u64,
}

impl Default for KvParams {
    /// db_bench's defaults: 10^6 `fillrandom` operations on 16-byte keys and
    /// 100-byte values, compression ratio 0.5.
    fn default() -> Self {
        KvParams::preset(Preset::FillRandom, 1_000_000)
    }
}

impl KvParams {
    /// The stream of the db_bench benchmark `preset` with `operations`
    /// operations over a key space of the same size, and db_bench's other
    /// defaults.
    pub fn preset(preset: Preset, operations: u64) -> Self {
        KvParams {
            operations,
            key_bytes: 16,
            value_bytes: 100,
            key_count: operations.max(1),
            distribution: match preset {
                Preset::FillSeq => KeyDistribution::Sequential,
                _ => KeyDistribution::Uniform,
            },
            mix: preset.mix(),
            compression_ratio: 0.5,
            seed: DEFAULT_SEED,
        }
    }

    /// Checks every parameter; errors name the parameter and its value.
    /// [`KvGenerator::new`] and [`write_kv`] fail only where this does (or
    /// on a write error).
    pub fn validate(&self) -> Result<()> {
        ensure!(
            (1..=KEY_BYTES_MAX).contains(&self.key_bytes),
            InvalidArgument,
            "key_bytes must be in 1..={KEY_BYTES_MAX}, got {}",
            self.key_bytes
        );
        ensure!(
            self.value_bytes <= VALUE_BYTES_MAX,
            InvalidArgument,
            "value_bytes must be at most {VALUE_BYTES_MAX}, got {}",
            self.value_bytes
        );
        ensure!(
            self.key_count >= 1,
            InvalidArgument,
            "key_count must be at least 1, got 0"
        );
        if self.key_bytes < 8 {
            let capacity = 1u64 << (8 * self.key_bytes);
            ensure!(
                self.key_count <= capacity,
                InvalidArgument,
                "key_count {} does not fit in key_bytes {} (at most {capacity} keys)",
                self.key_count,
                self.key_bytes
            );
        }
        if let KeyDistribution::Zipfian { exponent, .. } = self.distribution {
            ensure!(
                exponent.is_finite() && exponent > 0.0,
                InvalidArgument,
                "zipfian exponent must be > 0, got {exponent}"
            );
            ensure!(
                self.key_count <= ZIPF_RANKS_MAX,
                InvalidArgument,
                "key_count must be at most 2^53 for a zipfian distribution, got {}",
                self.key_count
            );
        }
        ensure!(
            self.mix.total() == 100,
            InvalidArgument,
            "mix percentages must sum to 100, got {} ({})",
            self.mix.total(),
            self.mix
        );
        ensure!(
            self.compression_ratio > 0.0 && self.compression_ratio <= 1.0,
            InvalidArgument,
            "compression_ratio must be in (0, 1], got {}",
            self.compression_ratio
        );
        Ok(())
    }
}

/// Writes key `index` into `key` (fixed width, see the module documentation).
#[inline]
pub fn encode_key(index: u64, key: &mut [u8]) {
    let be = index.to_be_bytes();
    if key.len() >= 8 {
        key[..8].copy_from_slice(&be);
        key[8..].fill(b'0');
    } else {
        let width = key.len();
        key.copy_from_slice(&be[8 - width..]);
    }
}

/// The value pool of a stream: `max(VALUE_POOL_BYTES, value_bytes)` bytes in
/// chunks of [`VALUE_POOL_CHUNK_BYTES`]; each chunk is
/// `raw = max(1, floor(chunk_len * compression_ratio))` printable bytes
/// `b' ' + next_below(95)` (drawn from sub-stream 1) repeated to the chunk's
/// length. Values are consecutive slices of it, wrapping to offset 0 when the
/// next value would run past the end.
///
/// Exposed so that a harness can check values or rebuild them.
pub fn value_pool(seed: u64, value_bytes: usize, compression_ratio: f64) -> Vec<u8> {
    let mut rng = Rng::stream(seed, VALUE_POOL_STREAM);
    let length = VALUE_POOL_BYTES.max(value_bytes);
    let mut pool = Vec::with_capacity(length);
    while pool.len() < length {
        let chunk = VALUE_POOL_CHUNK_BYTES.min(length - pool.len());
        let raw = ((chunk as f64 * compression_ratio) as usize).clamp(1, chunk);
        let start = pool.len();
        for _ in 0..raw {
            pool.push(b' ' + rng.next_below(95) as u8);
        }
        for position in raw..chunk {
            let byte = pool[start + position % raw];
            pool.push(byte);
        }
    }
    pool
}

/// An operation borrowed from the generator's buffers: the zero-copy view
/// [`KvGenerator::next_op`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OperationRef<'a> {
    /// What the operation does.
    pub kind: OperationKind,
    /// The key's index in `0..key_count`.
    pub key_index: u64,
    /// The encoded key.
    pub key: &'a [u8],
    /// The value; empty for gets and deletes.
    pub value: &'a [u8],
}

/// An owned operation, reusable across calls of [`KvGenerator::next_into`]
/// so that its buffers are allocated once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    /// What the operation does.
    pub kind: OperationKind,
    /// The key's index in `0..key_count`.
    pub key_index: u64,
    /// The encoded key.
    pub key: Vec<u8>,
    /// The value; empty for gets and deletes.
    pub value: Vec<u8>,
}

impl Default for Operation {
    fn default() -> Self {
        Operation {
            kind: OperationKind::Get,
            key_index: 0,
            key: Vec::new(),
            value: Vec::new(),
        }
    }
}

#[derive(Debug, Clone)]
enum KeySampler {
    Sequential,
    Uniform,
    Zipf(Zipf),
    ScrambledZipf(ScrambledZipf),
}

/// The operation stream of a [`KvParams`].
///
/// Three ways to consume it: [`KvGenerator::next_op`] (zero-copy, the hot
/// path of a benchmark driver), [`KvGenerator::next_into`] (copies into a
/// reused [`Operation`]), and `Iterator<Item = Operation>` (allocates per
/// operation; convenient in tests).
#[derive(Debug, Clone)]
pub struct KvGenerator {
    params: KvParams,
    rng: Rng,
    sampler: KeySampler,
    single_kind: Option<OperationKind>,
    pool: Vec<u8>,
    pool_offset: usize,
    key: Vec<u8>,
    emitted: u64,
}

impl KvGenerator {
    /// A generator for `params`; fails only when [`KvParams::validate`]
    /// does.
    pub fn new(params: &KvParams) -> Result<Self> {
        params.validate()?;
        let sampler = match params.distribution {
            KeyDistribution::Sequential => KeySampler::Sequential,
            KeyDistribution::Uniform => KeySampler::Uniform,
            KeyDistribution::Zipfian {
                exponent,
                scrambled: false,
            } => KeySampler::Zipf(Zipf::new(params.key_count, exponent)?),
            KeyDistribution::Zipfian {
                exponent,
                scrambled: true,
            } => KeySampler::ScrambledZipf(ScrambledZipf::new(
                params.key_count,
                exponent,
                derive_seed(params.seed, PERMUTATION_STREAM),
            )?),
        };
        let has_values = params.mix.put_percent > 0 || params.mix.merge_percent > 0;
        Ok(KvGenerator {
            rng: Rng::stream(params.seed, OPERATION_STREAM),
            sampler,
            single_kind: params.mix.single_kind(),
            pool: if has_values && params.value_bytes > 0 {
                value_pool(params.seed, params.value_bytes, params.compression_ratio)
            } else {
                Vec::new()
            },
            pool_offset: 0,
            key: vec![0; params.key_bytes],
            emitted: 0,
            params: params.clone(),
        })
    }

    /// The parameters of the stream.
    pub fn params(&self) -> &KvParams {
        &self.params
    }

    /// Operations not yet generated.
    pub fn remaining(&self) -> u64 {
        self.params.operations - self.emitted
    }

    /// The next operation, borrowing the key and value from the generator;
    /// `None` after `operations` operations. Allocates nothing.
    #[inline]
    pub fn next_op(&mut self) -> Option<OperationRef<'_>> {
        if self.emitted == self.params.operations {
            return None;
        }
        let kind = match self.single_kind {
            Some(kind) => kind,
            None => self.params.mix.kind_of(self.rng.next_below(100)),
        };
        let key_index = match &self.sampler {
            KeySampler::Sequential => self.emitted % self.params.key_count,
            KeySampler::Uniform => self.rng.next_below(self.params.key_count),
            KeySampler::Zipf(zipf) => zipf.sample(&mut self.rng) - 1,
            KeySampler::ScrambledZipf(zipf) => zipf.sample(&mut self.rng),
        };
        self.emitted += 1;
        encode_key(key_index, &mut self.key);
        let value: &[u8] = if kind.has_value() && self.params.value_bytes > 0 {
            let length = self.params.value_bytes;
            if self.pool_offset + length > self.pool.len() {
                self.pool_offset = 0;
            }
            let start = self.pool_offset;
            self.pool_offset += length;
            &self.pool[start..start + length]
        } else {
            &[]
        };
        Some(OperationRef {
            kind,
            key_index,
            key: &self.key,
            value,
        })
    }

    /// Copies the next operation into `operation`, reusing its buffers;
    /// returns false (leaving `operation` unchanged) at the end.
    pub fn next_into(&mut self, operation: &mut Operation) -> bool {
        match self.next_op() {
            Some(next) => {
                operation.kind = next.kind;
                operation.key_index = next.key_index;
                operation.key.clear();
                operation.key.extend_from_slice(next.key);
                operation.value.clear();
                operation.value.extend_from_slice(next.value);
                true
            }
            None => false,
        }
    }
}

impl Iterator for KvGenerator {
    type Item = Operation;

    fn next(&mut self) -> Option<Operation> {
        let mut operation = Operation::default();
        self.next_into(&mut operation).then_some(operation)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let remaining = usize::try_from(self.remaining()).unwrap_or(usize::MAX);
        (remaining, Some(remaining))
    }
}

/// How [`write_kv`] serializes operations.
///
/// - `Text`: one line per operation, fields separated by tabs, keys and
///   values in lowercase hex: `PUT\t<key>\t<value>\n`,
///   `MERGE\t<key>\t<value>\n`, `GET\t<key>\n`, `DELETE\t<key>\n`.
/// - `Binary`: no header; per operation the kind code (u8: put 0, get 1,
///   delete 2, merge 3), the key length and the value length (u32
///   little-endian each), then the key and value bytes. In Python:
///   `kind, klen, vlen = struct.unpack_from("<BII", data, offset)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvFormat {
    /// Tab-separated lines with hex keys and values.
    Text,
    /// Length-prefixed binary records.
    Binary,
}

impl FromStr for KvFormat {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        match text {
            "text" => Ok(KvFormat::Text),
            "binary" => Ok(KvFormat::Binary),
            _ => bail!(
                InvalidArgument,
                "unknown kv format {text:?}; expected text or binary"
            ),
        }
    }
}

/// What [`write_kv`] produced.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KvSummary {
    /// Operations written.
    pub records: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Put operations.
    pub puts: u64,
    /// Get operations.
    pub gets: u64,
    /// Delete operations.
    pub deletes: u64,
    /// Merge operations.
    pub merges: u64,
    /// Distinct keys among all operations; `None` when the key space exceeds
    /// [`DISTINCT_KEYS_TRACKED_MAX`] (too large to count exactly).
    pub distinct_keys: Option<u64>,
}

/// Writes the stream of `params` to `writer` in `format`, in chunks of about
/// 1 MiB (so `writer` need not be buffered), and returns what was written.
pub fn write_kv(params: &KvParams, format: KvFormat, writer: impl Write) -> Result<KvSummary> {
    let mut generator = KvGenerator::new(params)?;
    let mut sink = ChunkedSink::new(writer, "key-value operations");
    let mut summary = KvSummary::default();
    let mut seen = match params.distribution {
        KeyDistribution::Sequential => None,
        _ if params.key_count <= DISTINCT_KEYS_TRACKED_MAX => {
            Some(vec![0u64; params.key_count.div_ceil(64) as usize])
        }
        _ => None,
    };
    let mut distinct = 0u64;
    while let Some(operation) = generator.next_op() {
        match operation.kind {
            OperationKind::Put => summary.puts += 1,
            OperationKind::Get => summary.gets += 1,
            OperationKind::Delete => summary.deletes += 1,
            OperationKind::Merge => summary.merges += 1,
        }
        if let Some(seen) = &mut seen {
            let word = &mut seen[(operation.key_index / 64) as usize];
            let bit = 1u64 << (operation.key_index % 64);
            distinct += u64::from(*word & bit == 0);
            *word |= bit;
        }
        let buffer = sink.buffer();
        match format {
            KvFormat::Text => {
                buffer.extend_from_slice(operation.kind.name().as_bytes());
                buffer.push(b'\t');
                push_hex(buffer, operation.key);
                if operation.kind.has_value() {
                    buffer.push(b'\t');
                    push_hex(buffer, operation.value);
                }
                buffer.push(b'\n');
            }
            KvFormat::Binary => {
                buffer.push(operation.kind.code());
                buffer.extend_from_slice(&(operation.key.len() as u32).to_le_bytes());
                buffer.extend_from_slice(&(operation.value.len() as u32).to_le_bytes());
                buffer.extend_from_slice(operation.key);
                buffer.extend_from_slice(operation.value);
            }
        }
        summary.records += 1;
        sink.maybe_flush()?;
    }
    summary.bytes = sink.finish()?;
    summary.distinct_keys = match params.distribution {
        KeyDistribution::Sequential => Some(params.operations.min(params.key_count)),
        _ => seen.map(|_| distinct),
    };
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn collect(params: &KvParams) -> Vec<Operation> {
        KvGenerator::new(params).unwrap().collect()
    }

    #[test]
    fn fillseq_puts_keys_in_order_with_db_bench_layout() {
        let operations = collect(&KvParams::preset(Preset::FillSeq, 1000));
        assert_eq!(operations.len(), 1000);
        for (index, operation) in operations.iter().enumerate() {
            assert_eq!(operation.kind, OperationKind::Put);
            assert_eq!(operation.key_index, index as u64);
            assert_eq!(&operation.key[..8], &(index as u64).to_be_bytes());
            assert_eq!(&operation.key[8..], b"00000000");
            assert_eq!(operation.value.len(), 100);
        }
        assert!(operations.windows(2).all(|pair| pair[0].key < pair[1].key));
    }

    #[test]
    fn short_keys_are_big_endian_and_checked_against_the_key_count() {
        let mut key = [0u8; 3];
        encode_key(0x0102_0304, &mut key);
        assert_eq!(key, [0x02, 0x03, 0x04]);
        let params = KvParams {
            key_bytes: 2,
            key_count: 70_000,
            ..KvParams::default()
        };
        let error = params.validate().unwrap_err().to_string();
        assert!(
            error.contains("key_count 70000 does not fit in key_bytes 2"),
            "{error}"
        );
    }

    #[test]
    fn same_seed_same_stream_other_seed_other_stream() {
        let params = KvParams::preset(Preset::ReadWhileWriting, 2000);
        assert_eq!(collect(&params), collect(&params));
        let other = KvParams { seed: 43, ..params };
        assert_ne!(collect(&params), collect(&other));
    }

    #[test]
    fn uniform_keys_cover_the_key_space_evenly() {
        let params = KvParams {
            operations: 100_000,
            key_count: 100,
            ..KvParams::default()
        };
        let mut counts = [0u32; 100];
        for operation in collect(&params) {
            counts[operation.key_index as usize] += 1;
        }
        // Binomial(1e5, 1/100): mean 1000, sd ~ 99.5; 5 sd bounds.
        assert!(
            counts.iter().all(|&count| (500..=1500).contains(&count)),
            "{counts:?}"
        );
    }

    #[test]
    fn zipfian_keys_are_skewed_and_scrambling_moves_the_hot_key() {
        let base = KvParams {
            operations: 50_000,
            key_count: 10_000,
            distribution: KeyDistribution::Zipfian {
                exponent: 0.99,
                scrambled: false,
            },
            ..KvParams::default()
        };
        let hottest = |params: &KvParams| {
            let mut counts = vec![0u32; 10_000];
            for operation in collect(params) {
                counts[operation.key_index as usize] += 1;
            }
            let key = (0..10_000).max_by_key(|&key| counts[key]).unwrap();
            (key as u64, counts[key])
        };
        let (key, count) = hottest(&base);
        assert_eq!(key, 0);
        // P(rank 1) = 1 / H(10^4, 0.99) ~ 0.099: about 4900 of 50000.
        assert!((4_400..5_400).contains(&count), "{count}");
        let scrambled = KvParams {
            distribution: KeyDistribution::Zipfian {
                exponent: 0.99,
                scrambled: true,
            },
            ..base
        };
        let expected_key = ScrambledZipf::new(10_000, 0.99, derive_seed(base.seed, PERMUTATION_STREAM))
            .unwrap()
            .key_of_rank(1);
        let (key, count) = hottest(&scrambled);
        assert_eq!(key, expected_key);
        assert_ne!(key, 0);
        assert!((4_400..5_400).contains(&count), "{count}");
    }

    #[test]
    fn mixes_follow_their_percentages() {
        let params = KvParams {
            operations: 100_000,
            mix: "put=50,get=30,delete=15,merge=5".parse().unwrap(),
            ..KvParams::default()
        };
        let summary = write_kv(&params, KvFormat::Binary, std::io::sink()).unwrap();
        assert_eq!(summary.records, 100_000);
        let within = |count: u64, percent: u64| count.abs_diff(percent * 1000) < 800;
        assert!(within(summary.puts, 50), "{summary:?}");
        assert!(within(summary.gets, 30), "{summary:?}");
        assert!(within(summary.deletes, 15), "{summary:?}");
        assert!(within(summary.merges, 5), "{summary:?}");
        for operation in collect(&params) {
            assert_eq!(
                operation.value.len(),
                if operation.kind.has_value() { 100 } else { 0 }
            );
        }
    }

    #[test]
    fn presets_have_db_bench_shapes() {
        for preset in Preset::ALL {
            assert_eq!(preset.name().parse::<Preset>().unwrap(), preset);
        }
        let kinds = |preset| {
            collect(&KvParams::preset(preset, 500))
                .iter()
                .map(|operation| operation.kind)
                .collect::<HashSet<_>>()
        };
        assert_eq!(kinds(Preset::FillRandom), HashSet::from([OperationKind::Put]));
        assert_eq!(kinds(Preset::Overwrite), HashSet::from([OperationKind::Put]));
        assert_eq!(kinds(Preset::ReadRandom), HashSet::from([OperationKind::Get]));
        assert_eq!(
            kinds(Preset::DeleteRandom),
            HashSet::from([OperationKind::Delete])
        );
        assert_eq!(kinds(Preset::MergeRandom), HashSet::from([OperationKind::Merge]));
        assert_eq!(
            kinds(Preset::ReadWhileWriting),
            HashSet::from([OperationKind::Put, OperationKind::Get])
        );
        let error = "fillrandomly".parse::<Preset>().unwrap_err().to_string();
        assert!(error.contains("unknown preset \"fillrandomly\""), "{error}");
    }

    #[test]
    fn values_have_the_requested_compressibility() {
        // A chunk of 100 bytes holds floor(100 * ratio) distinct random bytes
        // repeated: count the unrepeated prefix of each chunk.
        for (ratio, raw) in [(0.5, 50), (0.25, 25), (1.0, 100)] {
            let pool = value_pool(1, 100, ratio);
            assert_eq!(pool.len(), VALUE_POOL_BYTES);
            for chunk in pool.chunks(VALUE_POOL_CHUNK_BYTES).take(100) {
                assert!(chunk.iter().all(|byte| (b' '..=b'~').contains(byte)));
                if chunk.len() == VALUE_POOL_CHUNK_BYTES && raw < VALUE_POOL_CHUNK_BYTES {
                    assert_eq!(
                        &chunk[raw..2 * raw.min(50)],
                        &chunk[..raw.min(50)],
                        "ratio {ratio}"
                    );
                }
            }
        }
        // Consecutive values are consecutive pool slices.
        let params = KvParams::preset(Preset::FillRandom, 3);
        let pool = value_pool(params.seed, 100, 0.5);
        let operations = collect(&params);
        assert_eq!(operations[0].value, &pool[..100]);
        assert_eq!(operations[1].value, &pool[100..200]);
    }

    #[test]
    fn next_op_next_into_and_iterator_agree() {
        let params = KvParams::preset(Preset::ReadWhileWriting, 300);
        let owned = collect(&params);
        let mut generator = KvGenerator::new(&params).unwrap();
        let mut reused = Operation::default();
        let mut borrowed = KvGenerator::new(&params).unwrap();
        for expected in &owned {
            assert!(generator.next_into(&mut reused));
            assert_eq!(&reused, expected);
            let view = borrowed.next_op().unwrap();
            assert_eq!(
                (view.kind, view.key, view.value),
                (expected.kind, &expected.key[..], &expected.value[..])
            );
        }
        assert!(!generator.next_into(&mut reused));
        assert!(borrowed.next_op().is_none());
    }

    #[test]
    fn text_and_binary_formats_round_trip() {
        let params = KvParams {
            key_bytes: 8,
            value_bytes: 4,
            ..KvParams::preset(Preset::ReadWhileWriting, 200)
        };
        let expected = collect(&params);
        let mut text = Vec::new();
        let summary = write_kv(&params, KvFormat::Text, &mut text).unwrap();
        assert_eq!(summary.bytes, text.len() as u64);
        let hex = |bytes: &[u8]| bytes.iter().map(|byte| format!("{byte:02x}")).collect::<String>();
        let lines: Vec<&str> = std::str::from_utf8(&text).unwrap().lines().collect();
        assert_eq!(lines.len(), 200);
        for (line, operation) in lines.iter().zip(&expected) {
            let mut wanted = format!("{}\t{}", operation.kind.name(), hex(&operation.key));
            if operation.kind.has_value() {
                wanted += &format!("\t{}", hex(&operation.value));
            }
            assert_eq!(*line, wanted);
        }
        let mut binary = Vec::new();
        write_kv(&params, KvFormat::Binary, &mut binary).unwrap();
        let mut offset = 0;
        for operation in &expected {
            assert_eq!(binary[offset], operation.kind.code());
            let key_length = u32::from_le_bytes(binary[offset + 1..offset + 5].try_into().unwrap()) as usize;
            let value_length =
                u32::from_le_bytes(binary[offset + 5..offset + 9].try_into().unwrap()) as usize;
            offset += 9;
            assert_eq!(&binary[offset..offset + key_length], &operation.key[..]);
            offset += key_length;
            assert_eq!(&binary[offset..offset + value_length], &operation.value[..]);
            offset += value_length;
        }
        assert_eq!(offset, binary.len());
    }

    #[test]
    fn summary_counts_distinct_keys() {
        let params = KvParams {
            operations: 5_000,
            key_count: 1_000,
            ..KvParams::default()
        };
        let expected: HashSet<u64> = collect(&params)
            .iter()
            .map(|operation| operation.key_index)
            .collect();
        let summary = write_kv(&params, KvFormat::Binary, std::io::sink()).unwrap();
        assert_eq!(summary.distinct_keys, Some(expected.len() as u64));
        let sequential = write_kv(
            &KvParams::preset(Preset::FillSeq, 700),
            KvFormat::Binary,
            std::io::sink(),
        )
        .unwrap();
        assert_eq!(sequential.distinct_keys, Some(700));
    }

    #[test]
    fn validation_names_the_parameter_and_value() {
        let check = |params: KvParams, wanted: &str| {
            let error = KvGenerator::new(&params).unwrap_err().to_string();
            assert!(error.contains(wanted), "{error} does not contain {wanted}");
        };
        check(
            KvParams {
                key_bytes: 0,
                ..KvParams::default()
            },
            "key_bytes must be in 1..=65536, got 0",
        );
        check(
            KvParams {
                key_count: 0,
                ..KvParams::default()
            },
            "key_count must be at least 1, got 0",
        );
        check(
            KvParams {
                compression_ratio: 1.5,
                ..KvParams::default()
            },
            "compression_ratio must be in (0, 1], got 1.5",
        );
        check(
            KvParams {
                distribution: KeyDistribution::Zipfian {
                    exponent: -1.0,
                    scrambled: true,
                },
                ..KvParams::default()
            },
            "zipfian exponent must be > 0, got -1",
        );
        // Zipf ranks are f64: the limit names the parameter, not the sampler.
        for scrambled in [false, true] {
            check(
                KvParams {
                    key_count: 1 << 54,
                    distribution: KeyDistribution::Zipfian {
                        exponent: 0.99,
                        scrambled,
                    },
                    ..KvParams::default()
                },
                "key_count must be at most 2^53 for a zipfian distribution",
            );
        }
        assert!(KvParams {
            key_count: 1 << 54,
            ..KvParams::default()
        }
        .validate()
        .is_ok());
        check(
            KvParams {
                mix: OperationMix::new(50, 40, 0, 0),
                ..KvParams::default()
            },
            "must sum to 100, got 90",
        );
        let error = "put=50,get=40".parse::<OperationMix>().unwrap_err().to_string();
        assert!(error.contains("sum to 100, got 90"), "{error}");
        let error = "put=50,read=50".parse::<OperationMix>().unwrap_err().to_string();
        assert!(error.contains("kind \"read\""), "{error}");
    }
}
