//! The stream benchmark's driver; `bench/run.py stream` runs it.
//!
//! Every subcommand generates its dataset in memory first (untimed, from
//! the workload crate's `StreamGenerator` with seed 42), runs one
//! experiment and prints one JSON line per result on standard output:
//!
//! - `index`: the index layer alone (template B+ tree with the fixed or
//!   rebuild policy, the B+ tree rebuilt per buffer, std `BTreeMap` per
//!   buffer) fed the stream buffer by buffer; insert and drain times,
//!   batch latency, and the template's overflow per buffer.
//! - `overflow`: the seed's Tables 4.1-4.3 (share of leaves with 1, 2, 3+
//!   overflow nodes) for both template policies over several fan-outs.
//! - `store`: a whole store (`StreamIndex`, an in-memory `BTreeMap`
//!   store, or RocksDB) ingesting the stream from 1 or more threads, then
//!   optionally range queries at 0.01%..10% selectivity; or, with
//!   `--mixed`, 99 inserts then 1 query, over and over.
//!
//! Built without the default `rocksdb` feature, the driver has every
//! contender but RocksDB.

#![forbid(unsafe_code)]

mod data;
mod index;
mod measure;
#[cfg(feature = "rocksdb")]
mod rocks;
mod store;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use serde_json::{json, Value};
use spillway_stream::TemplatePolicy;

use data::{query_ranges, sorted_keys, Dataset, SELECTIVITIES};
use index::{IndexContender, IndexOptions};
use store::Engine;

/// Records per buffer: the stream index's buffer of 64 MB holds about
/// 1.2 M records of 8-byte values; a round 10^6 keeps buffers equal in
/// every contender (and batches of 1000 divide it).
const BUFFER_RECORDS: usize = 1_000_000;
/// Queries per selectivity, from the most selective to the least: fewer
/// where each query returns more.
const QUERY_COUNTS: &str = "1000,500,200,30";

#[derive(Debug, Parser)]
#[command(about = "Data and contenders of Spillway's stream benchmark")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Args)]
struct DataArgs {
    /// uniform, zipf, gaussians, drifting or drifting:TRAVEL.
    #[arg(long)]
    dataset: String,
    /// Records in the stream.
    #[arg(long, default_value_t = 10_000_000)]
    records: u64,
}

#[derive(Debug, clap::Args)]
struct TreeArgs {
    /// Records per buffer.
    #[arg(long, default_value_t = BUFFER_RECORDS)]
    buffer: usize,
    /// Children per internal node.
    #[arg(long, default_value_t = 64)]
    fan_out: usize,
    /// Entries per leaf.
    #[arg(long, default_value_t = 64)]
    leaf_capacity: usize,
    /// Share of overflowed leaves above which the rebuild policy rebuilds.
    #[arg(long, default_value_t = 0.05)]
    threshold: f64,
    /// Leaf fill a rebuilt template aims at.
    #[arg(long, default_value_t = 0.7)]
    fill: f64,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The index layer alone, fed the stream buffer by buffer.
    Index {
        #[command(flatten)]
        data: DataArgs,
        #[command(flatten)]
        tree: TreeArgs,
        #[arg(long, value_enum)]
        contender: IndexContender,
        /// Inserting threads.
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Entries per insert call.
        #[arg(long, default_value_t = 1000)]
        batch: usize,
    },
    /// Overflow shares of both template policies at several fan-outs
    /// (leaf capacity = fan-out, as the seed's tables), one thread.
    Overflow {
        #[command(flatten)]
        data: DataArgs,
        #[command(flatten)]
        tree: TreeArgs,
        /// Fan-outs to run, comma-separated.
        #[arg(long, default_value = "4,10,64,100")]
        fan_outs: String,
    },
    /// A whole store: ingest (then queries), or the 99/1 mix.
    Store {
        #[command(flatten)]
        data: DataArgs,
        #[arg(long, value_enum)]
        engine: EngineName,
        /// Writing threads.
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Records per write call.
        #[arg(long, default_value_t = 1000)]
        batch: usize,
        /// Sync the write-ahead log on every write.
        #[arg(long)]
        sync: bool,
        /// Spillway's template policy: rebuild, fixed or none.
        #[arg(long, default_value = "rebuild")]
        policy: String,
        /// Spillway's rebuild threshold.
        #[arg(long, default_value_t = 0.05)]
        threshold: f64,
        /// Spillway without tiers (resident segments merged in the
        /// background for queries).
        #[arg(long)]
        no_tiers: bool,
        /// Spillway's records per buffer.
        #[arg(long, default_value_t = BUFFER_RECORDS)]
        buffer: usize,
        /// After the ingest, run range queries at each selectivity.
        #[arg(long)]
        queries: bool,
        /// Queries per selectivity (0.01%, 0.1%, 1%, 10%), comma-separated.
        #[arg(long, default_value = QUERY_COUNTS)]
        query_counts: String,
        /// Instead of an ingest: batches of 99 records, each followed by
        /// one 0.01%-selectivity range query.
        #[arg(long)]
        mixed: bool,
        /// A scratch directory for the store's files (outside the
        /// repository); a fresh subdirectory is made and removed.
        #[arg(long)]
        dir: PathBuf,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum EngineName {
    /// Spillway's `StreamIndex`.
    Spillway,
    /// Records in memory indexed by std `BTreeMap<(key, seq), location>`.
    Btreemap,
    /// RocksDB 8.10 (crate `rocksdb` 0.22, built in release mode).
    Rocksdb,
}

fn parse_counts(text: &str, what: &str) -> Result<Vec<usize>> {
    text.split(',')
        .map(|part| {
            part.trim()
                .parse()
                .with_context(|| format!("{what}: {part:?} is not a count"))
        })
        .collect()
}

fn parse_policy(policy: &str, threshold: f64) -> Result<TemplatePolicy> {
    Ok(match policy {
        "rebuild" => TemplatePolicy::Rebuild { threshold },
        "fixed" => TemplatePolicy::Fixed,
        "none" => TemplatePolicy::None,
        _ => bail!("--policy {policy:?}: use rebuild, fixed or none"),
    })
}

/// Generates the dataset; returns it, its records and the seconds taken.
fn load(data: &DataArgs) -> Result<(Dataset, Vec<spillway_workload::StreamRecord>, f64)> {
    let dataset = Dataset::parse(&data.dataset, data.records)?;
    let started = Instant::now();
    let records = dataset.generate()?;
    Ok((dataset, records, started.elapsed().as_secs_f64()))
}

fn emit(mut report: Value, dataset: &Dataset, generate_s: f64) {
    report["dataset"] = json!(dataset.name);
    report["generate_s"] = json!(generate_s);
    report["profile"] = json!(if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    });
    println!("{report}");
}

fn main() -> Result<()> {
    if cfg!(debug_assertions) {
        eprintln!("WARNING: stream-driver is a debug build; its timings mean nothing (build with --release)");
    }
    match Cli::parse().command {
        Command::Index {
            data,
            tree,
            contender,
            threads,
            batch,
        } => {
            let (dataset, records, generate_s) = load(&data)?;
            let options = IndexOptions {
                buffer: tree.buffer,
                batch,
                threads,
                fan_out: tree.fan_out,
                leaf_capacity: tree.leaf_capacity,
                threshold: tree.threshold,
                fill: tree.fill,
            };
            emit(index::run(&records, contender, &options)?, &dataset, generate_s);
        }
        Command::Overflow { data, tree, fan_outs } => {
            let (dataset, records, generate_s) = load(&data)?;
            for fan_out in parse_counts(&fan_outs, "--fan-outs")? {
                for contender in [IndexContender::TemplateFixed, IndexContender::TemplateRebuild] {
                    let options = IndexOptions {
                        buffer: tree.buffer,
                        batch: 1000,
                        threads: 1,
                        fan_out,
                        leaf_capacity: fan_out,
                        threshold: tree.threshold,
                        fill: tree.fill,
                    };
                    let mut report = index::run(&records, contender, &options)?;
                    report["experiment"] = json!("overflow");
                    emit(report, &dataset, generate_s);
                }
            }
        }
        Command::Store {
            data,
            engine,
            threads,
            batch,
            sync,
            policy,
            threshold,
            no_tiers,
            buffer,
            queries,
            query_counts,
            mixed,
            dir,
        } => {
            let (dataset, records, generate_s) = load(&data)?;
            let counts = parse_counts(&query_counts, "--query-counts")?;
            if counts.len() != SELECTIVITIES.len() {
                bail!(
                    "--query-counts needs {} counts, one per selectivity",
                    SELECTIVITIES.len()
                );
            }
            let keys = sorted_keys(&records);
            let sets: Vec<(f64, Vec<(u64, u64)>)> = SELECTIVITIES
                .iter()
                .zip(&counts)
                .map(|(&selectivity, &count)| (selectivity, query_ranges(&keys, selectivity, count, 0)))
                .collect();
            drop(keys);
            let policy = parse_policy(&policy, threshold)?;
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let store_dir = dir.join(format!("{engine:?}-{}", std::process::id()).to_lowercase());
            if store_dir.exists() {
                std::fs::remove_dir_all(&store_dir)?;
            }
            let engine_box: Box<dyn Engine> = match engine {
                EngineName::Spillway => Box::new(store::Spillway::open(
                    &store_dir, policy, sync, !no_tiers, buffer,
                )?),
                EngineName::Btreemap => Box::new(store::Memory::default()),
                #[cfg(feature = "rocksdb")]
                EngineName::Rocksdb => Box::new(rocks::Rocks::open(&store_dir, sync)?),
                #[cfg(not(feature = "rocksdb"))]
                EngineName::Rocksdb => bail!("this stream-driver was built without the rocksdb feature"),
            };
            let engine_ref: &dyn Engine = engine_box.as_ref();
            let mut report = json!({
                "experiment": if mixed { "mixed" } else { "store" },
                "engine": format!("{engine:?}").to_lowercase(),
                "policy": if engine == EngineName::Spillway { json!(format!("{policy:?}")) } else { Value::Null },
                "records": records.len(),
                "threads": threads,
                "batch": if mixed { 99 } else { batch },
                "sync": sync,
                "tiers": engine == EngineName::Spillway && !no_tiers,
            });
            if mixed {
                let ranges = &sets[0].1;
                report["mixed"] = store::mixed(engine_ref, &records, ranges, 99, threads)?;
            } else {
                report["ingest"] = store::ingest(engine_ref, &records, batch, threads)?;
                engine_ref.settle()?;
                if queries {
                    report["queries"] = json!(store::queries(engine_ref, &sets)?);
                }
            }
            report["stats"] = engine_ref.stats();
            drop(engine_box);
            if store_dir.exists() {
                std::fs::remove_dir_all(&store_dir)
                    .with_context(|| format!("removing {}", store_dir.display()))?;
            }
            emit(report, &dataset, generate_s);
        }
    }
    Ok(())
}
