//! The key-value benchmark's driver: one engine, one db_bench-style
//! workload, one JSON line of results on standard output.
//!
//! ```text
//! kv-driver --engine spillway|rocksdb-leveled|rocksdb-universal --dir DIR
//!           --workload fillrandom|readrandom|readwhilewriting --records N --key-bytes K --value-bytes V
//!           [--batch 1000] [--sync always|none] [--seed 42] [--reads N] [--seconds T]
//! ```
//!
//! Keys, values and the order of operations are defined so that the
//! LevelDB driver (`bench/kv_leveldb.cc`) produces the very same stream:
//! operation `n` of a fill writes key index `splitmix64(seed *
//! 0x100000001B3 + n) % records`, read `r` looks up index
//! `splitmix64(seed * 0xC2B2AE3D27D4EB4F + r) % (2 * records)` (the upper
//! half never written: misses). A key is its index big-endian, padded
//! with '0' to `key-bytes` (db_bench's layout); a value is successive
//! splitmix64 words of the operation number.

mod engine;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use serde_json::{json, Value};
use spillway_core::IoCounters;

use crate::engine::{Engine, Pending};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum EngineArg {
    /// Spillway's WB Tree.
    Spillway,
    /// RocksDB, leveled compaction (its default).
    RocksdbLeveled,
    /// RocksDB, universal compaction.
    RocksdbUniversal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum WorkloadArg {
    /// Puts of random keys (keys repeat) into a new store.
    Fillrandom,
    /// Gets of random keys, half of them never written, from a filled store.
    Readrandom,
    /// One thread putting and one getting, for `--seconds`.
    Readwhilewriting,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SyncArg {
    /// Sync the log before each write returns.
    Always,
    /// Leave the log to the operating system.
    None,
}

/// One engine, one workload.
#[derive(Debug, Parser)]
#[command(name = "kv-driver")]
struct Args {
    #[arg(long, value_enum)]
    engine: EngineArg,
    #[arg(long)]
    dir: PathBuf,
    #[arg(long, value_enum)]
    workload: WorkloadArg,
    /// Records of the fill (its key space too).
    #[arg(long)]
    records: u64,
    #[arg(long)]
    key_bytes: usize,
    #[arg(long)]
    value_bytes: usize,
    /// Puts per write call.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    #[arg(long, value_enum, default_value = "none")]
    sync: SyncArg,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Gets of readrandom.
    #[arg(long, default_value_t = 1_000_000)]
    reads: u64,
    /// Seconds of readwhilewriting.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Writes the key of `index` into `key` (its length is the key size).
fn key_of(index: u64, key: &mut [u8]) {
    if key.len() >= 8 {
        key[..8].copy_from_slice(&index.to_be_bytes());
        key[8..].fill(b'0');
    } else {
        let bytes = index.to_be_bytes();
        let len = key.len();
        key.copy_from_slice(&bytes[8 - len..]);
    }
}

/// Writes the value of operation `n` into `value`.
fn value_of(n: u64, value: &mut [u8]) {
    let mut word = splitmix64(n ^ 0xA5A5_A5A5_A5A5_A5A5);
    for chunk in value.chunks_mut(8) {
        chunk.copy_from_slice(&word.to_le_bytes()[..chunk.len()]);
        word = splitmix64(word);
    }
}

fn fill_index(seed: u64, n: u64, records: u64) -> u64 {
    splitmix64(seed.wrapping_mul(0x0100_0000_01B3).wrapping_add(n)) % records
}

fn read_index(seed: u64, r: u64, records: u64) -> u64 {
    splitmix64(seed.wrapping_mul(0xC2B2_AE3D_27D4_EB4F).wrapping_add(r)) % (2 * records)
}

/// Latencies in nanoseconds, one per call measured.
#[derive(Debug, Default)]
struct Latencies(Vec<u64>);

impl Latencies {
    fn summary(&mut self) -> Value {
        let samples = &mut self.0;
        if samples.is_empty() {
            return json!({"count": 0});
        }
        samples.sort_unstable();
        let count = samples.len();
        let at = |quantile: f64| samples[(quantile * (count - 1) as f64) as usize];
        let total: u128 = samples.iter().map(|&ns| u128::from(ns)).sum();
        json!({
            "count": count,
            "mean": total as f64 / count as f64,
            "p50": at(0.50),
            "p99": at(0.99),
            "p999": at(0.999),
            "max": samples[count - 1],
        })
    }
}

/// Puts operations `first..end` in batches; returns the write latencies.
fn fill(engine: &dyn Engine, args: &Args, first: u64, end: u64, stop: Option<&AtomicBool>, done: &AtomicU64) -> Result<Latencies> {
    let mut latencies = Latencies(Vec::with_capacity(((end - first) / args.batch as u64 + 1).min(1 << 26) as usize));
    let mut pending = Pending::new(args.key_bytes, args.value_bytes);
    let mut n = first;
    while n < end && !stop.is_some_and(|stop| stop.load(Ordering::Relaxed)) {
        pending.clear();
        let batch_end = (n + args.batch as u64).min(end);
        for operation in n..batch_end {
            let (key, value) = pending.push();
            key_of(fill_index(args.seed, operation, args.records), key);
            value_of(operation, value);
        }
        let started = Instant::now();
        engine.write(&pending)?;
        latencies.0.push(started.elapsed().as_nanos() as u64);
        done.fetch_add(batch_end - n, Ordering::Relaxed);
        n = batch_end;
    }
    Ok(latencies)
}

/// Gets `count` random keys (or until `stop`); returns latencies, hits, misses.
fn read(engine: &dyn Engine, args: &Args, count: u64, stop: Option<&AtomicBool>) -> Result<(Latencies, u64, u64)> {
    let mut latencies = Latencies(Vec::with_capacity(count.min(1 << 26) as usize));
    let mut key = vec![0u8; args.key_bytes];
    let (mut hits, mut misses) = (0, 0);
    for r in 0..count {
        if stop.is_some_and(|stop| stop.load(Ordering::Relaxed)) {
            break;
        }
        key_of(read_index(args.seed, r, args.records), &mut key);
        let started = Instant::now();
        let found = engine.get(&key)?;
        latencies.0.push(started.elapsed().as_nanos() as u64);
        if found {
            hits += 1;
        } else {
            misses += 1;
        }
    }
    Ok((latencies, hits, misses))
}

fn run(args: &Args) -> Result<Value> {
    if args.batch == 0 || args.records == 0 || !(4..=1024).contains(&args.key_bytes) {
        bail!("--batch and --records must be positive and --key-bytes between 4 and 1024");
    }
    let create = args.workload == WorkloadArg::Fillrandom;
    if !create && !args.dir.exists() {
        bail!("{} holds no store: run fillrandom first", args.dir.display());
    }
    let sync = args.sync == SyncArg::Always;
    let io_before = IoCounters::read_self().context("reading /proc/self/io")?;
    let engine = match args.engine {
        EngineArg::Spillway => engine::open_spillway(&args.dir, sync)?,
        EngineArg::RocksdbLeveled => engine::open_rocksdb(&args.dir, sync, false)?,
        EngineArg::RocksdbUniversal => engine::open_rocksdb(&args.dir, sync, true)?,
    };
    let started = Instant::now();
    let done = AtomicU64::new(0);
    let (mut latencies, hits, misses, writer_operations) = match args.workload {
        WorkloadArg::Fillrandom => {
            let latencies = fill(engine.as_ref(), args, 0, args.records, None, &done)?;
            (latencies, 0, 0, args.records)
        }
        WorkloadArg::Readrandom => {
            let (latencies, hits, misses) = read(engine.as_ref(), args, args.reads, None)?;
            (latencies, hits, misses, 0)
        }
        WorkloadArg::Readwhilewriting => {
            let stop = AtomicBool::new(false);
            let engine = engine.as_ref();
            let (reader, writer) = std::thread::scope(|scope| {
                let writer = scope.spawn(|| fill(engine, args, args.records, u64::MAX, Some(&stop), &done));
                let reader = scope.spawn(|| read(engine, args, u64::MAX, Some(&stop)));
                std::thread::sleep(Duration::from_secs_f64(args.seconds));
                stop.store(true, Ordering::Relaxed);
                (reader.join(), writer.join())
            });
            let (latencies, hits, misses) = reader.map_err(|_| anyhow::anyhow!("the reader panicked"))??;
            writer.map_err(|_| anyhow::anyhow!("the writer panicked"))??;
            (latencies, hits, misses, done.load(Ordering::Relaxed))
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    let stall_seconds = engine.stall_seconds();
    let engine_stats = engine.stats();
    engine.close()?;
    let io_after = IoCounters::read_self().context("reading /proc/self/io")?;
    // A fill's latencies are per batch; the reads', per get.
    let operations = match args.workload {
        WorkloadArg::Fillrandom => args.records,
        WorkloadArg::Readrandom | WorkloadArg::Readwhilewriting => latencies.0.len() as u64,
    };
    Ok(json!({
        "engine": match args.engine {
            EngineArg::Spillway => "spillway",
            EngineArg::RocksdbLeveled => "rocksdb-leveled",
            EngineArg::RocksdbUniversal => "rocksdb-universal",
        },
        "workload": match args.workload {
            WorkloadArg::Fillrandom => "fillrandom",
            WorkloadArg::Readrandom => "readrandom",
            WorkloadArg::Readwhilewriting => "readwhilewriting",
        },
        "records": args.records,
        "key_bytes": args.key_bytes,
        "value_bytes": args.value_bytes,
        "batch": args.batch,
        "sync": if sync { "always" } else { "none" },
        "operations": operations,
        "seconds": seconds,
        "operations_per_second": operations as f64 / seconds,
        "latency_ns": latencies.summary(),
        "hits": hits,
        "misses": misses,
        "writer_operations": writer_operations,
        "read_bytes": io_after.read_bytes.saturating_sub(io_before.read_bytes),
        "write_bytes": io_after.write_bytes.saturating_sub(io_before.write_bytes),
        "user_bytes": if args.workload == WorkloadArg::Readrandom { 0 } else { writer_operations * (args.key_bytes + args.value_bytes) as u64 },
        "peak_rss_bytes": engine::peak_rss_bytes(),
        "stall_seconds": stall_seconds,
        "engine_stats": engine_stats,
    }))
}

fn main() {
    let args = Args::parse();
    match run(&args) {
        Ok(report) => println!("{report}"),
        Err(error) => {
            eprintln!("kv-driver: {error:#}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_follow_the_shared_definition() {
        let mut key = [0u8; 16];
        key_of(0x0102_0304_0506_0708, &mut key);
        assert_eq!(&key, b"\x01\x02\x03\x04\x05\x06\x07\x0800000000");
        let mut short = [0u8; 4];
        key_of(0x0102_0304_0506_0708, &mut short);
        assert_eq!(short, [5, 6, 7, 8]);
        // splitmix64(0) from its reference implementation.
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
        let mut value = [0u8; 12];
        value_of(3, &mut value);
        let first = splitmix64(3 ^ 0xA5A5_A5A5_A5A5_A5A5);
        assert_eq!(&value[..8], &first.to_le_bytes());
        assert_eq!(&value[8..], &splitmix64(first).to_le_bytes()[..4]);
    }
}
