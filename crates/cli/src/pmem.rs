//! `spillway pmem`: a CCEH persistent hash table in a region file, from the
//! command line.
//!
//! ```text
//! spillway pmem bench [--index cceh|btree|fastfair] --table T.pmem --keys N [--persistence clwb]
//!     [--segment-bytes 16384] [--probe 4] [--page-bytes 4096 (btree) | 512 (fastfair)]
//!     [--region-bytes 1G] [--threads 1] [--distribution uniform|selfsimilar|zipfian] [--seed 1] [--json]
//! spillway pmem crashtest [--index cceh|btree|fastfair] [--operations 200] [--seed 1] [--segment-bytes 256] [--probe 3]
//!     [--page-bytes 512] [--images-per-point 4096] [--json]
//! spillway pmem verify --table T.pmem
//! ```
//!
//! `bench` creates the table (refusing a file that exists) and runs the
//! insert, search, batched-search, negative-search and delete phases; `crashtest` traces a
//! seeded run on a CCEH table, a B3-tree or the sorted-leaf baseline in memory and checks every crash image it allows;
//! `verify` opens a table or a tree (its kind read from the file; recovering it if it was not
//! closed) and checks its invariants.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::Subcommand;
use spillway_core::Interrupt;
use spillway_pmem::cceh::Options;
use spillway_pmem::crash::Limits;
use spillway_pmem::tree::{Family, SortedLeaf, B3};
use spillway_pmem::{b3tree, bench, crashtest, fastfair, Mode, Region, Table, Tree};

use crate::units::{parse_count, parse_text};

/// A CCEH persistent hash table: benchmark it, crash-test it, verify a file.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create a table and time inserts, searches, negative searches and
    /// deletes of --keys keys, with flushes and fences per operation.
    Bench(BenchArgs),
    /// Trace a seeded run of inserts and removes on a table (or a tree) in memory and
    /// recover every crash image the x86 persistency model allows, checking
    /// each against the run; exit 1 naming the first image that fails.
    Crashtest(CrashArgs),
    /// Open a table or a tree (recovering it if it was not closed) and
    /// check its invariants; exit 1 naming what is wrong.
    Verify(VerifyArgs),
}

#[derive(Debug, clap::Args)]
struct BenchArgs {
    /// The index to benchmark.
    #[arg(long, value_enum, default_value = "cceh")]
    index: Index,
    /// The table's (or tree's) region file to create (refused if it exists).
    #[arg(long, value_name = "FILE")]
    table: PathBuf,
    /// Keys to insert, search and delete.
    #[arg(long, value_name = "N")]
    keys: u64,
    /// How writes persist: clwb, clflushopt, clflush, auto, fence, none or
    /// latency:<ns|us> (the best flush plus a wait per line).
    #[arg(long, value_name = "MODE", default_value = "auto", value_parser = parse_text::<Mode>)]
    persistence: Mode,
    /// Bytes per segment (a power of two, at least 256).
    #[arg(long, value_name = "BYTES", default_value_t = Options::default().segment_bytes)]
    segment_bytes: u64,
    /// Buckets an insert probes.
    #[arg(long, value_name = "N", default_value_t = Options::default().probe)]
    probe: u64,
    /// Bytes per B3-tree page or baseline node (a power of two from 512 to
    /// 65536): by default a B3-tree's 4096, the baseline's 512
    /// (FAST&FAIR's own).
    #[arg(long, value_name = "BYTES")]
    page_bytes: Option<u64>,
    /// The region's size (suffixes K, M, G).
    #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = parse_count)]
    region_bytes: u64,
    /// Threads running each phase at once.
    #[arg(long, value_name = "N", default_value_t = 1)]
    threads: usize,
    /// How searches pick their keys: uniform, selfsimilar (80-20) or
    /// zipfian (exponent 0.99).
    #[arg(long, value_name = "NAME", default_value = "uniform", value_parser = parse_text::<bench::Distribution>)]
    distribution: bench::Distribution,
    /// Seed of the keys.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the phases as JSON.
    #[arg(long)]
    json: bool,
}

/// Which index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Index {
    /// CCEH, the persistent hash table.
    Cceh,
    /// The B3-tree, the persistent sorted map.
    Btree,
    /// The sorted-leaf tree in FAST&FAIR's manner, the B3-tree's baseline.
    Fastfair,
}

#[derive(Debug, clap::Args)]
struct CrashArgs {
    /// The index to crash-test.
    #[arg(long, value_enum, default_value = "cceh")]
    index: Index,
    /// Operations in the run (4 in 5 inserts, 1 in 5 removes).
    #[arg(long, value_name = "N", default_value_t = 200)]
    operations: usize,
    /// Seed of the run and of the image sample.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Bytes per segment: small, so that splits and doublings are frequent.
    #[arg(long, value_name = "BYTES", default_value_t = 256)]
    segment_bytes: u64,
    /// Buckets an insert probes.
    #[arg(long, value_name = "N", default_value_t = 3)]
    probe: u64,
    /// Bytes per B3-tree page: small, so that splits and rebuilds are
    /// frequent.
    #[arg(long, value_name = "BYTES", default_value_t = 512)]
    page_bytes: u64,
    /// Images checked per crash point at most (all of them when there are
    /// no more; else the targeted ones and a sample).
    #[arg(long, value_name = "N", default_value_t = Limits::default().images_per_point)]
    images_per_point: usize,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct VerifyArgs {
    /// The table's region file.
    #[arg(long, value_name = "FILE")]
    table: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    match args.command {
        Command::Bench(args) => run_bench(args),
        Command::Crashtest(args) => crash(args),
        Command::Verify(args) => verify(args),
    }
}

fn run_bench(args: BenchArgs) -> anyhow::Result<u8> {
    if args.table.exists() {
        bail!(
            "{} exists: give a new file for the benchmark's table",
            args.table.display()
        );
    }
    let interrupt = Interrupt::on_signals();
    let creating = || format!("creating the index {}", args.table.display());
    let (phases, persistence) = match args.index {
        Index::Cceh => {
            let options = Options {
                segment_bytes: args.segment_bytes,
                probe: args.probe,
                region_bytes: args.region_bytes,
                ..Options::default()
            };
            let table =
                Table::open_or_create(&args.table, args.persistence, options).with_context(creating)?;
            let phases = bench::run(
                &table,
                args.keys,
                args.threads,
                args.distribution,
                args.seed,
                &interrupt,
            )?;
            let persistence = table.stats().persistence;
            table.close()?;
            (phases, persistence)
        }
        Index::Btree => bench_tree::<B3>(&args, &interrupt)?,
        Index::Fastfair => bench_tree::<SortedLeaf>(&args, &interrupt)?,
    };
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "persistence": persistence, "keys": args.keys, "phases": phases })
        );
    } else {
        for phase in &phases {
            println!(
                "{:<16} {:>12.0} ops/s  p50 {} ns  p99 {} ns  p99.9 {} ns  {:.3} flushes/op ({:.3} by merges)  \
                 {:.3} fences/op  ({persistence}, {} threads)",
                phase.name,
                phase.operations_per_s,
                phase.p50_ns,
                phase.p99_ns,
                phase.p999_ns,
                phase.flushes_per_operation,
                phase.merge_flushes_per_operation,
                phase.fences_per_operation,
                phase.threads
            );
        }
    }
    Ok(0)
}

/// The phases of a tree of family `F`, and its persistence's name.
fn bench_tree<F: Family>(
    args: &BenchArgs,
    interrupt: &Interrupt,
) -> anyhow::Result<(Vec<bench::Phase>, String)> {
    let options = b3tree::Options {
        page_bytes: args.page_bytes.unwrap_or(F::PAGE_BYTES),
        region_bytes: args.region_bytes,
        ..b3tree::Options::default()
    };
    let tree = Tree::<F>::open_or_create(&args.table, args.persistence, options)
        .with_context(|| format!("creating the index {}", args.table.display()))?;
    let phases = bench::run(
        &tree,
        args.keys,
        args.threads,
        args.distribution,
        args.seed,
        interrupt,
    )?;
    let persistence = tree.stats()?.persistence;
    tree.close()?;
    Ok((phases, persistence))
}

fn crash(args: CrashArgs) -> anyhow::Result<u8> {
    let options = Options {
        segment_bytes: args.segment_bytes,
        probe: args.probe,
        // Every image is a copy of the region: kept small.
        region_bytes: 256 << 10,
        ..Options::default()
    };
    let operations = crashtest::random_operations(args.operations, args.seed);
    let limits = Limits {
        images_per_point: args.images_per_point,
        seed: args.seed,
    };
    let report = match args.index {
        Index::Cceh => crashtest::crash_test(options, &operations, limits)?,
        Index::Btree | Index::Fastfair => {
            let options = b3tree::Options {
                page_bytes: args.page_bytes,
                region_bytes: 256 << 10,
                ..b3tree::Options::default()
            };
            if args.index == Index::Btree {
                crashtest::tree_crash_test::<B3>(options, &operations, limits)?
            } else {
                crashtest::tree_crash_test::<SortedLeaf>(options, &operations, limits)?
            }
        }
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "{} operations: {} crash points ({} checked in full), {} crash images, every one recovered and correct",
            args.operations, report.points, report.exhaustive_points, report.images
        );
    }
    if !report.dirty_at_end.is_empty() {
        eprintln!("lines dirty at an operation's end: {:?}", report.dirty_at_end);
        return Ok(1);
    }
    Ok(0)
}

fn verify(args: VerifyArgs) -> anyhow::Result<u8> {
    if !args.table.exists() {
        bail!("{} does not exist", args.table.display());
    }
    match Region::kind_of(&args.table)?.as_str() {
        b3tree::KIND => return verify_tree::<B3>(&args.table, "a B3-tree"),
        fastfair::KIND => return verify_tree::<SortedLeaf>(&args.table, "a sorted-leaf tree"),
        _ => {}
    }
    // Recovery, if the table was not closed, persists with the best flush.
    let table = Table::open_or_create(&args.table, "auto".parse()?, Options::default())?;
    table.verify()?;
    let stats = table.stats();
    println!(
        "{}: {} keys, global depth {}, {} bytes: every invariant holds",
        args.table.display(),
        table.len()?,
        stats.global_depth,
        stats.region_bytes
    );
    table.close()?;
    Ok(0)
}

/// `verify` of the tree of family `F` (`what`) at `path`.
fn verify_tree<F: Family>(path: &Path, what: &str) -> anyhow::Result<u8> {
    // Recovery, if the tree was not closed, persists with the best flush.
    let tree = Tree::<F>::open_or_create(path, "auto".parse()?, b3tree::Options::default())?;
    tree.verify()?;
    let stats = tree.stats()?;
    println!(
        "{}: {what} of {} {} keys, {} levels of {}-byte pages: every invariant holds",
        path.display(),
        tree.len()?,
        tree.keys().name(),
        stats.height,
        stats.page_bytes
    );
    tree.close()?;
    Ok(0)
}
