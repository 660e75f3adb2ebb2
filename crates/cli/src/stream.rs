//! `spillway stream`: a stream index in a directory, from the command line.
//!
//! ```text
//! spillway stream ingest --dir D (--input FILE.csv | --generate N [--keys uniform|zipf|gauss] [--seed S])
//!     [--buffer-mib N] [--template none|fixed|rebuild] [--no-sync] ...
//! spillway stream query --dir D [--key-low A] [--key-high B] [--time-low T] [--time-high T]
//!     [--aggregate] [--limit N] [--json]
//! spillway stream stats --dir D [--json]
//! spillway stream verify --dir D [--json]
//! spillway stream repair DIR [--json]
//! ```
//!
//! `ingest` stops between batches at SIGINT or SIGTERM: what was written
//! is flushed, the index closed, and the command exits with 130 or 143.
//! The `--json` outputs are the engine's types as they serialize.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use clap::{Subcommand, ValueEnum};
use serde_json::{json, Value};
use spillway_core::Interrupt;
use spillway_stream::{
    ingest, Aggregate, Bounds, IngestBatch, Options, StreamIndex, StreamStats, TemplatePolicy, Unaccounted,
};
use spillway_workload::{StreamGenerator, StreamKeys, StreamParams};

use crate::progress;
use crate::units::parse_count;

/// A stream index: records (key, time, value) in a directory, queried by
/// key and time range.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write records from a CSV file (key,time,value) or generated ones.
    ///
    /// Examples: `spillway stream ingest --dir ticks --input ticks.csv`,
    /// `spillway stream ingest --dir ticks --generate 1M --keys zipf`.
    Ingest(IngestArgs),
    /// Print the live records in a key and time range, or their aggregate.
    Query(QueryArgs),
    /// Print the index's counters and sizes.
    Stats(ReadArgs),
    /// Check the index as opening it does (the manifest, every segment's
    /// footer and index, every log frame as a chain, every other file
    /// accounted for), then read every segment file whole and check its
    /// checksums, order and summaries; exit 1 with the damaged file named
    /// if one fails.
    Verify(ReadArgs),
    /// Rebuild a damaged index from what its files prove: keep every
    /// record that reads back, move the files that cannot be used into
    /// DIR/lost/ (nothing is deleted), and report what was lost. An index
    /// that checks clean is left as it is.
    ///
    /// Example: `spillway stream repair ticks` after `spillway stream
    /// verify --dir ticks` named a damaged file.
    Repair(RepairArgs),
}

#[derive(Debug, clap::Args)]
struct RepairArgs {
    /// The index's directory (it must not be open).
    #[arg(
        value_name = "DIR",
        required_unless_present = "dir_flag",
        conflicts_with = "dir_flag"
    )]
    dir: Option<PathBuf>,
    /// The index's directory, as the other `stream` commands name it.
    #[arg(long = "dir", value_name = "DIR")]
    dir_flag: Option<PathBuf>,
    /// Print the report as JSON to standard output.
    #[arg(long)]
    json: bool,
}

/// The index's directory and what a read needs.
#[derive(Debug, clap::Args)]
struct DirArgs {
    /// The index's directory.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// MiB of decoded segments kept in memory.
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    cache_mib: u64,
}

#[derive(Debug, clap::Args)]
struct ReadArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Print JSON to standard output.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, ValueEnum)]
enum TemplateArg {
    /// Every buffer grows an ordinary B+ tree (the baseline).
    None,
    /// The first buffer's tree is the template of every later one.
    Fixed,
    /// A template from the keys seen (from one leaf at the start), rebuilt when too many leaves overflow.
    Rebuild,
}

/// How generated keys are drawn from `0..key-space` (the workload's
/// record streams; see crates/workload/DESIGN.md).
#[derive(Debug, Clone, Copy, PartialEq, ValueEnum)]
enum KeysArg {
    /// Every key equally likely.
    Uniform,
    /// Zipf (exponent 0.99), the hot keys scattered over the key space.
    Zipf,
    /// A mixture of three Gaussians that stays put.
    Gauss,
    /// The same mixture, its means moving once through the key space.
    Drifting,
}

#[derive(Debug, clap::Args)]
struct IngestArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// CSV file of `key,time,value` lines: key and time unsigned integers,
    /// value a number (stored as 8 bytes, little-endian f64) or text
    /// (stored as its bytes; quote it, "like this", to keep a number as text).
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "generate",
        conflicts_with = "generate"
    )]
    input: Option<PathBuf>,
    /// Skip the first line of the input.
    #[arg(long, requires = "input")]
    header: bool,
    /// Write this many generated records (K/M/G suffixes) instead of a file:
    /// times near-sorted (record i at 1.6e15 + i, up to 64 late), values
    /// numbers in 0..1000.
    #[arg(long, value_name = "N", value_parser = parse_count)]
    generate: Option<u64>,
    /// How the generated keys are distributed.
    #[arg(long, value_enum, default_value = "uniform")]
    keys: KeysArg,
    /// Distinct keys of the generated records (K/M/G suffixes).
    #[arg(long, value_name = "N", default_value = "1M", value_parser = parse_count)]
    key_space: u64,
    /// Seed of the generated records.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// MiB of records a buffer holds before it is flushed as a segment.
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    buffer_mib: u64,
    /// Entries per leaf.
    #[arg(long, value_name = "N", default_value_t = 64)]
    leaf_capacity: usize,
    /// Children per internal node.
    #[arg(long, value_name = "N", default_value_t = 64)]
    fan_out: usize,
    /// How each buffer is indexed.
    #[arg(long, value_enum, default_value = "rebuild")]
    template: TemplateArg,
    /// Share of overflowed leaves (0 to 1) above which `rebuild` makes a
    /// new template [default: 0.05].
    #[arg(long, value_name = "SHARE")]
    rebuild_threshold: Option<f64>,
    /// Leaf fill (0 to 1] a rebuilt template aims at.
    #[arg(long, value_name = "SHARE", default_value_t = 0.7)]
    fill: f64,
    /// The longest value accepted, in bytes, at most half a buffer
    /// [default: 1 MiB, or half a buffer if that is less].
    #[arg(long, value_name = "BYTES")]
    value_bytes_max: Option<usize>,
    /// Refuse records whose time is before the latest time written.
    #[arg(long)]
    ordered_time: bool,
    /// Do not fsync the log before each batch is acknowledged (a machine
    /// crash may then lose the last batches; a process crash does not).
    #[arg(long)]
    no_sync: bool,
    /// Do not merge the segments held in memory into tiers in the
    /// background (range queries then merge one source per segment).
    #[arg(long)]
    no_tiers: bool,
    /// Records per write (each write is logged, and with sync fsynced, once).
    #[arg(long, value_name = "N", default_value_t = 4096)]
    batch: usize,
    /// Print the report as JSON to standard output.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, ValueEnum)]
enum ValuesArg {
    /// 8-byte values as numbers, others as text.
    Auto,
    /// Every value as a number (an error names a record whose value is not 8 bytes).
    Float,
    /// Every value as text (invalid UTF-8 replaced).
    Text,
    /// Every value in hexadecimal.
    Hex,
}

#[derive(Debug, clap::Args)]
struct QueryArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Lowest key (inclusive).
    #[arg(long, value_name = "KEY", default_value_t = 0)]
    key_low: u64,
    /// Highest key (inclusive).
    #[arg(long, value_name = "KEY", default_value_t = u64::MAX)]
    key_high: u64,
    /// Earliest time (inclusive).
    #[arg(long, value_name = "TIME", default_value_t = 0)]
    time_low: u64,
    /// Latest time (inclusive).
    #[arg(long, value_name = "TIME", default_value_t = u64::MAX)]
    time_high: u64,
    /// Print count, sum, min and max of the records instead of the records.
    #[arg(long)]
    aggregate: bool,
    /// Print at most this many records (the count of all goes to standard error).
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// How values are printed.
    #[arg(long, value_enum, default_value = "auto")]
    values: ValuesArg,
    /// Print JSON: one object per record (JSON Lines), or one for --aggregate.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    match args.command {
        Command::Ingest(args) => ingest(args),
        Command::Query(args) => query(args),
        Command::Stats(args) => stats(args),
        Command::Verify(args) => verify(args),
        Command::Repair(args) => repair(args),
    }
}

fn mib(value: u64, flag: &str) -> anyhow::Result<usize> {
    value
        .checked_mul(1 << 20)
        .and_then(|bytes| usize::try_from(bytes).ok())
        .with_context(|| format!("{flag} {value} is too large"))
}

/// Opens an existing index for reading (a directory without one is
/// refused, not made an empty index).
fn open_existing(dir: &DirArgs) -> anyhow::Result<StreamIndex> {
    let options = Options {
        cache_bytes: mib(dir.cache_mib, "--cache-mib")?,
        ..Options::default()
    };
    let index = StreamIndex::open_read_only(&dir.dir, options)
        .with_context(|| format!("opening the stream index in {}", dir.dir.display()))?;
    warn_of_damage(&index);
    Ok(index)
}

/// Says on standard error what an open found amiss but could go on past:
/// files that are not part of the index (kept), listed segments that
/// could not be opened (queries that need them fail).
fn warn_of_damage(index: &StreamIndex) {
    let dir = index.path().display();
    for Unaccounted { file, reason } in index.unaccounted() {
        eprintln!(
            "spillway: warning: {dir}/{file} is not part of the stream index and was kept ({reason}); \
             `spillway stream repair {dir}` moves it into {dir}/lost/"
        );
    }
    let damaged = index.stats().damaged_segments;
    if damaged > 0 {
        eprintln!(
            "spillway: warning: {damaged} segment(s) of {dir} could not be opened: queries that need them \
             fail naming the file, the others are answered; `spillway stream verify --dir {dir}` names \
             them, `spillway stream repair {dir}` salvages the rest"
        );
    }
}

/// What `stream ingest --json` prints.
#[derive(serde::Serialize)]
struct IngestReport {
    records: u64,
    seconds: f64,
    records_per_second: f64,
    stats: StreamStats,
}

fn ingest(args: IngestArgs) -> anyhow::Result<u8> {
    if args.batch == 0 {
        bail!("--batch must be at least 1");
    }
    let template = match args.template {
        TemplateArg::None => TemplatePolicy::None,
        TemplateArg::Fixed => TemplatePolicy::Fixed,
        TemplateArg::Rebuild => TemplatePolicy::Rebuild {
            threshold: spillway_stream::REBUILD_THRESHOLD_DEFAULT,
        },
    }
    .with_threshold(args.rebuild_threshold)?;
    let buffer_bytes = mib(args.buffer_mib, "--buffer-mib")?;
    let options = Options {
        buffer_bytes,
        leaf_capacity: args.leaf_capacity,
        fan_out: args.fan_out,
        template,
        fill: args.fill,
        value_bytes_max: args.value_bytes_max.unwrap_or(Options::default().value_bytes_max),
        ordered_time: args.ordered_time,
        sync: !args.no_sync,
        cache_bytes: mib(args.dir.cache_mib, "--cache-mib")?,
        tiers: !args.no_tiers,
    };
    let dir = &args.dir.dir;
    let index = StreamIndex::open(dir, options)
        .with_context(|| format!("opening the stream index in {}", dir.display()))?;
    warn_of_damage(&index);
    let started = Instant::now();
    // Ctrl-C or SIGTERM stops the ingest between batches; the batches
    // written stay written.
    let interrupt = Interrupt::on_signals();
    let written = match &args.input {
        Some(path) => ingest_csv(&index, path, &args, &interrupt),
        None => ingest_generated(&index, &args, &interrupt),
    };
    // What was written before a failure (or an interrupt) is kept: flush
    // it as a segment either way, so the log does not have to be
    // replayed, and close the index cleanly.
    let flushed = index.flush().context("flushing the last buffer");
    let records = written?;
    flushed?;
    let elapsed = started.elapsed().as_secs_f64();
    let stats = index.stats();
    index.close().context("closing the stream index")?;
    let per_second = if elapsed > 0.0 {
        records as f64 / elapsed
    } else {
        f64::INFINITY
    };
    if args.json {
        let report = IngestReport {
            records,
            seconds: elapsed,
            records_per_second: per_second,
            stats,
        };
        println!("{}", serde_json::to_string(&report)?);
    } else {
        eprintln!(
            "stream ingest: {records} records in {elapsed:.3} s ({per_second:.0} records/s) into {}",
            dir.display()
        );
        eprintln!("stream ingest: {}", stats_line(&stats));
    }
    Ok(0)
}

/// Ingests every line of a CSV file; returns the records written.
fn ingest_csv(
    index: &StreamIndex,
    path: &Path,
    args: &IngestArgs,
    interrupt: &Interrupt,
) -> anyhow::Result<u64> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let total = file.metadata().map(|meta| meta.len()).unwrap_or(0);
    let bar = progress::bar(total, "ingest");
    let records = ingest::ingest_csv(
        index,
        BufReader::with_capacity(1 << 20, file),
        &path.display().to_string(),
        args.header,
        args.batch,
        interrupt,
        |read| bar.set_position(read),
    );
    bar.finish_and_clear();
    Ok(records?)
}

/// Writes `--generate` records from the workload's stream generator;
/// returns how many.
fn ingest_generated(index: &StreamIndex, args: &IngestArgs, interrupt: &Interrupt) -> anyhow::Result<u64> {
    let records = args.generate.unwrap_or(0);
    let defaults = StreamParams::default();
    let params = StreamParams {
        records,
        keys: match args.keys {
            KeysArg::Uniform => StreamKeys::Uniform,
            KeysArg::Zipf => StreamKeys::Zipf { exponent: 0.99 },
            KeysArg::Gauss => StreamKeys::Gaussians,
            KeysArg::Drifting => StreamKeys::Drifting { travel: 1.0 },
        },
        key_space: args.key_space,
        // With ordered times no record may be late.
        time_jitter: if args.ordered_time {
            0
        } else {
            defaults.time_jitter
        },
        seed: args.seed,
        ..defaults
    };
    let generator = StreamGenerator::new(&params)?;
    let bar = progress::records_bar(records, "ingest");
    let mut batch = IngestBatch::new("generated", "record");
    for (number, record) in (1..).zip(generator) {
        batch.push(record.key, record.time, &record.value.to_le_bytes(), number);
        if batch.len() >= args.batch {
            batch.write(index, interrupt)?;
            bar.set_position(number);
        }
    }
    batch.write(index, interrupt)?;
    bar.finish_and_clear();
    Ok(records)
}

fn query(args: QueryArgs) -> anyhow::Result<u8> {
    if args.key_low > args.key_high {
        bail!("--key-low {} is above --key-high {}", args.key_low, args.key_high);
    }
    if args.time_low > args.time_high {
        bail!(
            "--time-low {} is above --time-high {}",
            args.time_low,
            args.time_high
        );
    }
    let index = open_existing(&args.dir)?;
    let bounds = Bounds::keys(args.key_low, args.key_high).times(args.time_low, args.time_high);
    let started = Instant::now();
    if args.aggregate {
        let aggregate = index.aggregate(bounds)?;
        let elapsed = started.elapsed().as_secs_f64();
        if args.json {
            println!("{}", json!(aggregate));
        } else {
            let number = |value: f64| {
                if aggregate.numeric == 0 {
                    "-".to_string()
                } else {
                    value.to_string()
                }
            };
            println!(
                "count {}\nnumeric {}\nsum {}\nmin {}\nmax {}",
                aggregate.count,
                aggregate.numeric,
                aggregate.sum(),
                number(aggregate.min),
                number(aggregate.max)
            );
            eprintln!(
                "stream query: aggregated {} records in {elapsed:.3} s",
                aggregate.count
            );
        }
        return Ok(0);
    }
    let records = index.range(bounds)?;
    let elapsed = started.elapsed().as_secs_f64();
    let shown = args.limit.unwrap_or(usize::MAX).min(records.len());
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut line = String::with_capacity(256);
    for i in 0..shown {
        let value = records.value(i);
        line.clear();
        let (key, time) = (records.keys[i], records.times[i]);
        if args.json {
            let value = match args.values {
                ValuesArg::Auto => match Aggregate::number(value) {
                    Some(number) => json!(number),
                    None => json!(String::from_utf8_lossy(value)),
                },
                ValuesArg::Float => json!(records.number(i).context(FLOAT_HINT)?),
                ValuesArg::Text => json!(String::from_utf8_lossy(value)),
                ValuesArg::Hex => json!(hex(value)),
            };
            line.push_str(&json!({"key": key, "time": time, "value": value}).to_string());
        } else {
            let value = match args.values {
                ValuesArg::Auto => match Aggregate::number(value) {
                    Some(number) => number.to_string(),
                    None => String::from_utf8_lossy(value).into_owned(),
                },
                ValuesArg::Float => records.number(i).context(FLOAT_HINT)?.to_string(),
                ValuesArg::Text => String::from_utf8_lossy(value).into_owned(),
                ValuesArg::Hex => hex(value),
            };
            line.push_str(&format!("{key}\t{time}\t{value}"));
        }
        line.push('\n');
        out.write_all(line.as_bytes())
            .context("writing the records to standard output")?;
    }
    out.flush().context("writing the records to standard output")?;
    if !args.json || shown < records.len() {
        eprintln!(
            "stream query: {} records in {elapsed:.3} s{}",
            records.len(),
            if shown < records.len() {
                format!(", the first {shown} printed")
            } else {
                String::new()
            }
        );
    }
    Ok(0)
}

/// What `--values float` needs of every value.
const FLOAT_HINT: &str =
    "--values float prints every value as a number (print others with --values text or hex)";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn stats(args: ReadArgs) -> anyhow::Result<u8> {
    let index = open_existing(&args.dir)?;
    let stats = serde_json::to_value(index.stats())?;
    if args.json {
        println!("{stats}");
    } else {
        let mut lines = Vec::new();
        flatten("", &stats, &mut lines);
        println!("{}", lines.join("\n"));
    }
    Ok(0)
}

/// `name value` lines of a JSON object, nested names joined with dots.
fn flatten(prefix: &str, value: &Value, lines: &mut Vec<String>) {
    match value {
        Value::Object(fields) => {
            for (name, field) in fields {
                let name = if prefix.is_empty() {
                    name.clone()
                } else {
                    format!("{prefix}.{name}")
                };
                flatten(&name, field, lines);
            }
        }
        other => lines.push(format!("{prefix} {other}")),
    }
}

fn verify(args: ReadArgs) -> anyhow::Result<u8> {
    let index = open_existing(&args.dir)?;
    let report = index
        .verify()
        .with_context(|| format!("verifying the stream index in {}", args.dir.dir.display()))?;
    if args.json {
        println!("{}", json!(report));
    } else {
        for name in &report.redundant {
            eprintln!(
                "stream verify: {} is a leftover of work a crash cut short; the next open for writing \
                 removes it",
                name
            );
        }
        println!(
            "stream verify: {}: {} segments, {} records, {} leaves, {} bytes, {} logs ({} writes) checked: ok",
            args.dir.dir.display(),
            report.segments,
            report.records,
            report.leaves,
            report.bytes,
            report.logs,
            report.log_writes
        );
    }
    Ok(0)
}

fn repair(args: RepairArgs) -> anyhow::Result<u8> {
    let dir = args.dir.or(args.dir_flag).expect("clap requires one");
    let report = StreamIndex::repair_interruptible(&dir, &Interrupt::on_signals())
        .with_context(|| format!("repairing the stream index in {}", dir.display()))?;
    if args.json {
        println!("{}", json!(report));
        return Ok(0);
    }
    let dir = dir.display();
    if !report.changed {
        println!(
            "stream repair: {dir}: checks clean ({} segments, {} records); nothing to repair",
            report.segments, report.records
        );
        return Ok(0);
    }
    if report.rebuilt {
        println!(
            "stream repair: {dir}: rebuilt from its files: {} segments, {} records ({} writes read back from \
             logs; new segments {})",
            report.segments,
            report.records,
            report.log_writes,
            if report.written.is_empty() {
                "none".to_string()
            } else {
                report.written.join(", ")
            }
        );
    }
    for lost in &report.lost {
        let place = match &lost.moved_to {
            Some(moved_to) => format!("kept as {dir}/{moved_to}"),
            None => "missing".to_string(),
        };
        let damaged: Vec<String> = lost
            .damaged
            .iter()
            .map(|range| format!("{}..{}", range.offset, range.offset + range.len))
            .collect();
        println!(
            "stream repair: {}: {place}: {}{}{}",
            lost.file,
            lost.reason,
            if damaged.is_empty() {
                String::new()
            } else {
                format!("; unreadable bytes {}", damaged.join(", "))
            },
            if lost.records_lost > 0 {
                format!("; about {} writes lost", lost.records_lost)
            } else {
                String::new()
            }
        );
    }
    println!(
        "stream repair: {dir}: {}",
        if report.records_lost > 0 {
            format!("about {} writes lost in all", report.records_lost)
        } else {
            "no write lost".to_string()
        }
    );
    Ok(0)
}

/// One line of the stats that say how an ingest went.
fn stats_line(stats: &StreamStats) -> String {
    let overflow = &stats.total_overflow;
    format!(
        "{} segments ({} records, {} bytes), {} flushes (writers paused {:.3} s), {} templates, \
         overflowed leaves {}/{} ({:.1}%)",
        stats.segments,
        stats.segment_records,
        stats.segment_bytes,
        stats.flushes,
        stats.flush_pause_seconds,
        stats.templates,
        overflow.overflowed_leaves(),
        overflow.leaves,
        overflow.overflowed_share() * 100.0
    )
}
