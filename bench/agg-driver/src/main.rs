//! The aggregation benchmark's own programs; `bench/run.py agg` runs them.
//!
//! - `agg-driver generate --shape S --records N --keys K DIR` writes a
//!   dataset: N records whose keys are drawn from K possible keys.
//! - `agg-driver run --engine cbt|hash|hashbrown DIR` groups a dataset by
//!   key with `sum+count`, reading it as a stream of 1M-record chunks, and
//!   prints one JSON line that every contender of the benchmark prints
//!   alike, so their results can be checked against each other.
//!
//! A dataset directory holds `meta.json`, `values.i64` (N little-endian
//! i64 in 0..1000) and either `keys.u64` (N little-endian u64: the integer
//! shapes) or `keys.off` (N + 1 little-endian u64 offsets) with `keys.dat`
//! (the key bytes: the byte-string shapes). Every contender treats a key
//! as bytes except DuckDB and Polars, which get integer keys as integers.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use serde_json::json;
use spillway_agg::{
    Aggregator, AggregatorOptions, CbtOptions, Engine, KeyType, Keys, NumberType, Output, ResultColumn,
    TypedHashAggregator, Value, Values,
};
use spillway_workload::{mix64, Permutation, Rng, ScrambledZipf, Zipf};

/// Records per chunk read from a dataset.
const CHUNK_RECORDS: usize = 1 << 20;

#[derive(Debug, Parser)]
#[command(about = "Data and contenders of Spillway's aggregation benchmark")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Writes a dataset into DIR.
    Generate {
        #[arg(long, value_enum)]
        shape: Shape,
        /// Records in the stream.
        #[arg(long)]
        records: u64,
        /// Possible keys (distinct keys seen are fewer when records are few).
        #[arg(long)]
        keys: u64,
        /// Zipf exponent of the `zipf` shape.
        #[arg(long, default_value_t = 0.99)]
        zipf: f64,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        dir: PathBuf,
    },
    /// Groups the dataset in DIR by key with sum and count.
    Run {
        #[arg(long, value_enum)]
        engine: Contender,
        /// Spillway's memory budget, in MiB.
        #[arg(long, default_value_t = 8192)]
        memory_mib: u64,
        /// Spillway's CBT buffer, in KiB.
        #[arg(long, default_value_t = 8192)]
        buffer_kib: usize,
        /// Spillway's CBT fan-out.
        #[arg(long, default_value_t = 16)]
        fan_out: usize,
        /// Threads: CBT workers, or hashbrown partitions.
        #[arg(long, default_value_t = 2)]
        threads: usize,
        dir: PathBuf,
    },
}

/// The key distributions of the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Shape {
    /// Integer keys, uniform.
    Uniform,
    /// Integer keys, Zipf-distributed (scrambled, so frequent keys are not
    /// adjacent).
    Zipf,
    /// Word count: random words of binomial length (n = 64, p = 0.15,
    /// clamped to 6..60 bytes, mean about 10), uniform.
    Word,
    /// Word pairs "w1 w2" over a vocabulary of about sqrt(K) words,
    /// Zipf-distributed (exponent 1), as n-grams of text are.
    Ngram,
    /// DNA 25-mers (ACGT), uniform.
    Kmer,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Contender {
    /// Spillway's Compressed Buffer Tree.
    Cbt,
    /// Spillway's hash engine on the typed path (`TypedHashAggregator`,
    /// on `--threads` threads): integer keys as a u64 column, byte-string
    /// keys as offsets and bytes.
    Hash,
    /// hashbrown `HashMap<Vec<u8>, (i64, u64)>`, keys hash-partitioned over
    /// the threads.
    Hashbrown,
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Generate {
            shape,
            records,
            keys,
            zipf,
            seed,
            dir,
        } => generate(shape, records, keys, zipf, seed, &dir),
        Command::Run {
            engine,
            memory_mib,
            buffer_kib,
            fan_out,
            threads,
            dir,
        } => {
            let report = match engine {
                Contender::Hash => run_typed(threads, memory_mib << 20, &dir)?,
                Contender::Cbt => {
                    let cbt = CbtOptions {
                        buffer_bytes: buffer_kib << 10,
                        fan_out,
                        ..CbtOptions::default()
                    };
                    run_cbt(memory_mib << 20, cbt, threads, &dir)?
                }
                Contender::Hashbrown => run_hashbrown(threads, &dir)?,
            };
            println!("{report}");
            Ok(())
        }
    }
}

// ---------------------------------------------------------------------------
// Generating

/// The letters of the 6-letter code that makes every word distinct.
const CODE_LETTERS: u64 = 26;
const CODE_SPACE: u64 = 26 * 26 * 26 * 26 * 26 * 26;
const KMER: usize = 25;

/// Word lengths: binomial(64, 0.15), clamped to 6..=60.
struct WordLengths {
    cdf: Vec<f64>,
}

impl WordLengths {
    fn new() -> Self {
        let (n, p) = (64u32, 0.15f64);
        let mut pmf = (1.0 - p).powi(n as i32);
        let mut total = 0.0;
        let mut cdf = Vec::new();
        for k in 0..=n {
            total += pmf;
            cdf.push(total);
            pmf *= f64::from(n - k) / f64::from(k + 1) * p / (1.0 - p);
        }
        WordLengths { cdf }
    }

    fn length(&self, uniform: f64) -> usize {
        self.cdf.partition_point(|&c| c < uniform).clamp(6, 60)
    }
}

/// Word `id`'s bytes: a bijective scramble of the id in six letters, then
/// letters drawn from the id's hash up to its length.
fn word(id: u64, lengths: &WordLengths, out: &mut Vec<u8>) {
    debug_assert!(id < CODE_SPACE);
    let hash = mix64(id ^ 0x5744_4f52_445f_4b45);
    let length = lengths.length((hash >> 11) as f64 / (1u64 << 53) as f64);
    // 1_000_003 is coprime with 26^6 = 2^6 * 13^6, so this is a bijection.
    let mut code = (u128::from(id) * 1_000_003 % u128::from(CODE_SPACE)) as u64;
    for _ in 0..6 {
        out.push(b'a' + (code % CODE_LETTERS) as u8);
        code /= CODE_LETTERS;
    }
    let mut filler = Rng::new(hash);
    for _ in 6..length {
        out.push(b'a' + filler.next_below(CODE_LETTERS) as u8);
    }
}

/// A bijection of 63-bit integers that spreads ids over the whole range
/// (odd multipliers and xor-shifts are each invertible modulo 2^63), so
/// integer keys look like user ids, not a dense range, and stay below 2^63
/// for DuckDB and Polars.
fn scramble63(id: u64) -> u64 {
    const MASK: u64 = (1 << 63) - 1;
    let mut x = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) & MASK;
    x ^= x >> 29;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9) & MASK;
    x ^ (x >> 32)
}

struct KeyWriter {
    keys: BufWriter<File>,
    offsets: Option<BufWriter<File>>,
    offset: u64,
}

fn create(path: &Path) -> Result<BufWriter<File>> {
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    Ok(BufWriter::with_capacity(1 << 20, file))
}

fn generate(shape: Shape, records: u64, keys: u64, zipf: f64, seed: u64, dir: &Path) -> Result<()> {
    ensure!(keys >= 1, "--keys must be at least 1");
    ensure!(
        keys <= CODE_SPACE,
        "--keys must be at most {CODE_SPACE} (distinct 6-letter codes)"
    );
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let integer = matches!(shape, Shape::Uniform | Shape::Zipf);
    let mut out = KeyWriter {
        keys: create(&dir.join(if integer { "keys.u64" } else { "keys.dat" }))?,
        offsets: if integer {
            None
        } else {
            Some(create(&dir.join("keys.off"))?)
        },
        offset: 0,
    };
    if let Some(offsets) = &mut out.offsets {
        offsets.write_all(&0u64.to_le_bytes())?;
    }
    let mut values = create(&dir.join("values.i64"))?;
    let mut rng = Rng::new(seed);
    let permutation = Permutation::new(keys, seed ^ 0x7065_726d)?;
    let scrambled = ScrambledZipf::new(keys, zipf, seed ^ 0x7a69_7066)?;
    let pairs = Zipf::new(keys, 1.0)?;
    let vocabulary = (keys as f64).sqrt().ceil() as u64;
    let lengths = WordLengths::new();
    let mut key = Vec::with_capacity(128);
    for _ in 0..records {
        key.clear();
        match shape {
            Shape::Uniform => key.extend_from_slice(&scramble63(rng.next_below(keys)).to_le_bytes()),
            Shape::Zipf => key.extend_from_slice(&scramble63(scrambled.sample(&mut rng)).to_le_bytes()),
            Shape::Word => word(permutation.apply(rng.next_below(keys)), &lengths, &mut key),
            Shape::Ngram => {
                let pair = permutation.apply(pairs.sample(&mut rng).min(keys - 1));
                word(pair / vocabulary, &lengths, &mut key);
                key.push(b' ');
                word(pair % vocabulary, &lengths, &mut key);
            }
            Shape::Kmer => {
                let id = permutation.apply(rng.next_below(keys));
                // An odd multiplier is a bijection modulo 2^50.
                let code = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) & ((1 << (2 * KMER)) - 1);
                key.extend((0..KMER).map(|base| b"ACGT"[(code >> (2 * base) & 3) as usize]));
            }
        }
        out.keys.write_all(&key)?;
        if let Some(offsets) = &mut out.offsets {
            out.offset += key.len() as u64;
            offsets.write_all(&out.offset.to_le_bytes())?;
        }
        values.write_all(&(rng.next_below(1000) as i64).to_le_bytes())?;
    }
    out.keys.flush()?;
    if let Some(offsets) = &mut out.offsets {
        offsets.flush()?;
    }
    values.flush()?;
    let meta = json!({
        "shape": if integer { "int" } else { "bytes" },
        "distribution": format!("{shape:?}").to_lowercase(),
        "records": records,
        "keys": keys,
        "zipf": zipf,
        "seed": seed,
        "key_bytes": if integer { 8 * records } else { out.offset },
    });
    std::fs::write(dir.join("meta.json"), meta.to_string())?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Reading

/// A dataset read as a stream of chunks into reused buffers.
struct Reader {
    keys: File,
    offsets: Option<File>,
    values: File,
    remaining: u64,
    /// The start of the next chunk's keys in `keys.dat`.
    next_offset: u64,
    key_bytes: Vec<u8>,
    /// Key boundaries within `key_bytes` (byte-string shapes).
    bounds: Vec<usize>,
    value_bytes: Vec<u8>,
    raw_offsets: Vec<u8>,
    /// Time spent reading.
    read_time: Duration,
}

fn open(path: &Path) -> Result<File> {
    File::open(path).with_context(|| format!("opening {}", path.display()))
}

impl Reader {
    fn new(dir: &Path) -> Result<Reader> {
        let meta_path = dir.join("meta.json");
        let meta: serde_json::Value = serde_json::from_slice(
            &std::fs::read(&meta_path).with_context(|| format!("reading {}", meta_path.display()))?,
        )
        .with_context(|| format!("{} is not JSON", meta_path.display()))?;
        let records = meta["records"].as_u64().context("meta.json has no records")?;
        let integer = match meta["shape"].as_str() {
            Some("int") => true,
            Some("bytes") => false,
            other => bail!("meta.json: unknown shape {other:?}"),
        };
        let values = open(&dir.join("values.i64"))?;
        ensure!(
            values.metadata()?.len() == 8 * records,
            "values.i64 does not hold {records} values"
        );
        let (keys, mut offsets) = if integer {
            (open(&dir.join("keys.u64"))?, None)
        } else {
            (open(&dir.join("keys.dat"))?, Some(open(&dir.join("keys.off"))?))
        };
        if let Some(offsets) = &mut offsets {
            ensure!(
                offsets.metadata()?.len() == 8 * (records + 1),
                "keys.off does not hold {} offsets",
                records + 1
            );
            let mut first = [0; 8];
            offsets.read_exact(&mut first)?;
            ensure!(u64::from_le_bytes(first) == 0, "keys.off does not start at 0");
        }
        Ok(Reader {
            keys,
            offsets,
            values,
            remaining: records,
            next_offset: 0,
            key_bytes: Vec::new(),
            bounds: Vec::new(),
            value_bytes: Vec::new(),
            raw_offsets: Vec::new(),
            read_time: Duration::ZERO,
        })
    }

    /// Reads the next chunk; false at the end.
    fn next_chunk(&mut self) -> Result<bool> {
        let count = self.remaining.min(CHUNK_RECORDS as u64) as usize;
        if count == 0 {
            return Ok(false);
        }
        let started = Instant::now();
        fill(&mut self.values, &mut self.value_bytes, 8 * count, "values.i64")?;
        match &mut self.offsets {
            None => fill(&mut self.keys, &mut self.key_bytes, 8 * count, "keys.u64")?,
            Some(offsets) => {
                fill(offsets, &mut self.raw_offsets, 8 * count, "keys.off")?;
                let start = self.next_offset;
                self.bounds.clear();
                self.bounds.push(0);
                for end in self.raw_offsets.chunks_exact(8) {
                    let end = u64::from_le_bytes(end.try_into().expect("8 bytes"));
                    ensure!(end >= start, "keys.off goes backwards");
                    self.bounds.push((end - start) as usize);
                }
                let length = *self.bounds.last().expect("one bound");
                self.next_offset = start + length as u64;
                fill(&mut self.keys, &mut self.key_bytes, length, "keys.dat")?;
            }
        }
        self.remaining -= count as u64;
        self.read_time += started.elapsed();
        Ok(true)
    }

    fn len(&self) -> usize {
        self.value_bytes.len() / 8
    }

    fn key(&self, index: usize) -> &[u8] {
        match self.offsets {
            None => &self.key_bytes[8 * index..8 * index + 8],
            Some(_) => &self.key_bytes[self.bounds[index]..self.bounds[index + 1]],
        }
    }

    fn value(&self, index: usize) -> i64 {
        i64::from_le_bytes(
            self.value_bytes[8 * index..8 * index + 8]
                .try_into()
                .expect("8 bytes"),
        )
    }
}

fn fill(file: &mut File, buffer: &mut Vec<u8>, length: usize, name: &str) -> Result<()> {
    buffer.resize(length, 0);
    file.read_exact(buffer)
        .with_context(|| format!("{name} ends early"))
}

// ---------------------------------------------------------------------------
// Running

/// The figures every contender prints, to check their results agree.
#[derive(Default)]
struct Check {
    groups: u64,
    sum_of_sums: i128,
    sum_of_counts: u64,
    count_squares: u64,
    sum_squares: u64,
}

impl Check {
    fn add(&mut self, sum: i64, count: u64) {
        self.groups += 1;
        self.sum_of_sums += i128::from(sum);
        self.sum_of_counts += count;
        self.count_squares = self.count_squares.wrapping_add(count.wrapping_mul(count));
        self.sum_squares = self
            .sum_squares
            .wrapping_add((sum as u64).wrapping_mul(sum as u64));
    }

    fn merge(&mut self, other: Check) {
        self.groups += other.groups;
        self.sum_of_sums += other.sum_of_sums;
        self.sum_of_counts += other.sum_of_counts;
        self.count_squares = self.count_squares.wrapping_add(other.count_squares);
        self.sum_squares = self.sum_squares.wrapping_add(other.sum_squares);
    }

    fn report(&self, engine: &str, load: Duration, aggregate: Duration) -> serde_json::Value {
        json!({
            "engine": engine,
            "groups": self.groups,
            "sum_of_sums": self.sum_of_sums.to_string().parse::<serde_json::Number>().ok(),
            "sum_of_counts": self.sum_of_counts,
            "count_squares": self.count_squares,
            "sum_squares": self.sum_squares,
            "load_s": load.as_secs_f64(),
            "aggregate_s": aggregate.as_secs_f64(),
        })
    }
}

/// The CBT through `Aggregator`, pairs in.
fn run_cbt(memory: u64, cbt: CbtOptions, threads: usize, dir: &Path) -> Result<serde_json::Value> {
    let options = AggregatorOptions {
        engine: Engine::Cbt,
        memory_bytes: memory,
        cbt,
        threads,
    };
    let started = Instant::now();
    let mut aggregator = Aggregator::new("sum+count", options)?;
    let mut reader = Reader::new(dir)?;
    while reader.next_chunk()? {
        aggregator.insert_batch(
            (0..reader.len()).map(|index| (reader.key(index), Value::Int(reader.value(index)))),
        )?;
    }
    let inserted = started.elapsed();
    aggregator.finalize()?;
    let finalized = started.elapsed();
    let mut check = Check::default();
    for item in aggregator.iter()? {
        let (_, output) = item?;
        let Output::List(parts) = output else {
            bail!("sum+count gave {output:?}, not a list")
        };
        let [Output::Int(sum), Output::Int(count)] = parts[..] else {
            bail!("sum+count gave {parts:?}, not two integers")
        };
        check.add(sum, count as u64);
    }
    let total = started.elapsed();
    let mut report = check.report("spillway-cbt", reader.read_time, total - reader.read_time);
    report["insert_s"] = json!(inserted.as_secs_f64());
    report["finalize_s"] = json!((finalized - inserted).as_secs_f64());
    report["results_s"] = json!((total - finalized).as_secs_f64());
    report["stats"] = serde_json::to_value(aggregator.stats())?;
    Ok(report)
}

/// The hash engine on the typed path: keys and values as columns.
fn run_typed(threads: usize, memory: u64, dir: &Path) -> Result<serde_json::Value> {
    let started = Instant::now();
    let mut reader = Reader::new(dir)?;
    let integers = reader.offsets.is_none();
    let key_type = if integers { KeyType::U64 } else { KeyType::Bytes };
    let mut aggregator = TypedHashAggregator::new("sum+count", key_type, NumberType::Int, threads, memory)?;
    // Integer keys as a column of u64; byte strings as offsets into the
    // chunk's key bytes.
    let (mut keys, mut values) = (Vec::new(), Vec::new());
    while reader.next_chunk()? {
        keys.clear();
        if integers {
            keys.extend(
                reader
                    .key_bytes
                    .chunks_exact(8)
                    .map(|key| u64::from_le_bytes(key.try_into().expect("8 bytes"))),
            );
        } else {
            keys.extend(reader.bounds.iter().map(|&bound| bound as u64));
        }
        values.clear();
        values.extend((0..reader.len()).map(|index| reader.value(index)));
        let column = if integers {
            Keys::U64(&keys)
        } else {
            Keys::Bytes {
                offsets: &keys,
                data: &reader.key_bytes,
            }
        };
        aggregator.insert_batch(column, Values::Int(&values))?;
    }
    let inserted = started.elapsed();
    let results = aggregator.results()?;
    let finalized = started.elapsed();
    let [ResultColumn::Int(sums), ResultColumn::Int(counts)] = &results.columns[..] else {
        bail!("sum+count gave other columns than two of 64-bit integers");
    };
    let mut check = Check::default();
    for (&sum, &count) in sums.iter().zip(counts) {
        check.add(sum, count as u64);
    }
    let total = started.elapsed();
    let mut report = check.report("spillway-hash", reader.read_time, total - reader.read_time);
    report["insert_s"] = json!(inserted.as_secs_f64());
    report["finalize_s"] = json!((finalized - inserted).as_secs_f64());
    report["results_s"] = json!((total - finalized).as_secs_f64());
    let stats = aggregator.stats();
    report["stats"] = json!({
        "path": "typed",
        "groups": stats.groups,
        "inserts": stats.inserts,
        "table_bytes": stats.table_bytes,
        "scratch_bytes": stats.scratch_bytes,
        "threads": stats.threads,
    });
    Ok(report)
}

fn run_hashbrown(threads: usize, dir: &Path) -> Result<serde_json::Value> {
    ensure!((1..=64).contains(&threads), "--threads must be from 1 to 64");
    let started = Instant::now();
    let parts = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|part| scope.spawn(move || hashbrown_part(part, threads, dir)))
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().expect("a hashbrown thread panicked"))
            .collect::<Result<Vec<_>>>()
    })?;
    let mut check = Check::default();
    let mut load = Duration::ZERO;
    for (part, read_time) in parts {
        check.merge(part);
        load = load.max(read_time);
    }
    let total = started.elapsed();
    Ok(check.report("hashbrown", load, total - load))
}

/// One thread of the hashbrown contender: reads the whole stream, keeps the
/// keys of its hash partition.
fn hashbrown_part(part: usize, parts: usize, dir: &Path) -> Result<(Check, Duration)> {
    let mut map: hashbrown::HashMap<Vec<u8>, (i64, u64)> = hashbrown::HashMap::new();
    let mut reader = Reader::new(dir)?;
    while reader.next_chunk()? {
        for index in 0..reader.len() {
            let key = reader.key(index);
            if parts > 1 && spillway_core::hash64(key) % parts as u64 != part as u64 {
                continue;
            }
            let state = map.entry_ref(key).or_insert((0, 0));
            state.0 += reader.value(index);
            state.1 += 1;
        }
    }
    let mut check = Check::default();
    for &(sum, count) in map.values() {
        check.add(sum, count);
    }
    Ok((check, reader.read_time))
}
