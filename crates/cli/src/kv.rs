//! `spillway kv`: a WB Tree key-value store in a directory, from the
//! command line.
//!
//! ```text
//! spillway kv load --dir D (--input OPS.txt | --generate N [--key-bytes 16] [--value-bytes 100] [--keys uniform|sequential|zipfian])
//!     [--batch 1000] [--sync always|periodic|none] [--root-mib 64] [--node-mib 256] [--fan-out 64] [--merge FUNC] [--json]
//! spillway kv get --dir D KEY... [--hex] [--json]
//! spillway kv scan --dir D [--limit N] [--hex | --raw] [--json]
//! spillway kv stats --dir D [--json]
//! spillway kv verify --dir D [--json]
//! spillway kv dump --dir D [--json]
//! spillway kv repair [--dir] D [--json]
//! ```
//!
//! The read commands open the store read-only (beside no writer) and with
//! the merge operator it was written with. `load` stops between batches on
//! SIGINT or SIGTERM: what it wrote is a store, closed cleanly, and the
//! command exits with 130 or 143. `--json` prints the engine's own
//! reports (their `Serialize`), the same JSON Python's `spillway.KV` reads.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Subcommand, ValueEnum};
use serde::Serialize;
use serde_json::{json, Map, Value as Json};
use spillway_agg::Output;
use spillway_core::Interrupt;
use spillway_kv::{
    hex_decode, AggregateMerge, Kind, KvStats, Loader, MergeOperator, Operation, Options, Store, SyncMode,
};
use spillway_workload::{KeyDistribution, KvGenerator, KvParams, OperationKind, Preset};

use crate::progress;
use crate::units::parse_count;

/// A WB Tree key-value store: load, read and inspect a store in a directory.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write operations from a file (`spillway gen kv` text format) or generated ones.
    ///
    /// Examples: `spillway kv load --dir db --generate 1M --key-bytes 8 --value-bytes 8`,
    /// `spillway gen kv --preset fillrandom --ops 1M --output ops.txt && spillway kv load --dir db --input ops.txt`.
    /// SIGINT or SIGTERM stops it between batches: what it wrote is kept, the
    /// store closed cleanly, and the exit status is 130 or 143.
    Load(LoadArgs),
    /// Print the values of keys (exit 1 if any is missing).
    Get(GetArgs),
    /// Print every live key and value, in hash order (the store keeps no key order).
    Scan(ScanArgs),
    /// Print the store's counters and sizes.
    Stats(ReadArgs),
    /// Run the checks an open runs (the manifest, the list files it names,
    /// the chain of logs, every file accounted for), then read every list
    /// file whole and check every block, record, index, filter and sketch;
    /// exit 1 with the damaged file named if one fails.
    Verify(ReadArgs),
    /// Print the tree: every node with its hash range and lists.
    Dump(ReadArgs),
    /// Rebuild a damaged store from what its files prove: keep every record
    /// that can be read, move what cannot be used into DIR/lost/, and report
    /// what was lost. A store that passes every check is left as it is.
    Repair(RepairArgs),
}

#[derive(Debug, clap::Args)]
struct RepairArgs {
    /// The store's directory.
    #[arg(value_name = "DIR", required_unless_present = "dir_flag")]
    dir: Option<PathBuf>,
    /// The store's directory (as the other commands take it).
    #[arg(long = "dir", value_name = "DIR", conflicts_with = "dir")]
    dir_flag: Option<PathBuf>,
    /// Print the report as JSON to standard output.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, ValueEnum)]
enum SyncArg {
    /// Sync the log before each write returns (writers waiting together share a sync).
    Always,
    /// Sync the log every 100 ms in the background.
    Periodic,
    /// Never sync the log (a machine crash may lose the last writes; a process crash does not).
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, ValueEnum)]
enum KeysArg {
    /// Keys 0, 1, 2, ... in order (db_bench fillseq).
    Sequential,
    /// Every key equally likely (db_bench fillrandom).
    Uniform,
    /// Zipf (exponent 0.99), the hot keys scattered over the key space.
    Zipfian,
}

#[derive(Debug, clap::Args)]
struct LoadArgs {
    /// The store's directory (created if need be).
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// Operations in `spillway gen kv`'s text format: `PUT<TAB>hex key<TAB>hex value`,
    /// `DELETE<TAB>hex key`, `MERGE<TAB>hex key<TAB>hex value`; GET lines are skipped.
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "generate",
        conflicts_with = "generate"
    )]
    input: Option<PathBuf>,
    /// Write this many generated puts (K/M/G suffixes) instead of a file.
    #[arg(long, value_name = "N", value_parser = parse_count)]
    generate: Option<u64>,
    /// Bytes per generated key.
    #[arg(long, value_name = "BYTES", default_value_t = 16)]
    key_bytes: usize,
    /// Bytes per generated value.
    #[arg(long, value_name = "BYTES", default_value_t = 100)]
    value_bytes: usize,
    /// How generated keys are drawn.
    #[arg(long, value_enum, default_value = "uniform")]
    keys: KeysArg,
    /// Distinct generated keys [default: as many as records].
    #[arg(long, value_name = "N", value_parser = parse_count)]
    key_space: Option<u64>,
    /// Seed of the generated operations.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Operations per write batch (each batch is logged, and synced, once).
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    batch: usize,
    /// When the log is synced.
    #[arg(long, value_enum, default_value = "always")]
    sync: SyncArg,
    /// MiB of the root buffer.
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    root_mib: u64,
    /// MiB of lists a node holds before it spills or splits.
    #[arg(long, value_name = "MIB", default_value_t = 256)]
    node_mib: u64,
    /// Children per node.
    #[arg(long, value_name = "N", default_value_t = 64)]
    fan_out: usize,
    /// Fast splits per slow split.
    #[arg(long, value_name = "N", default_value_t = 8)]
    fast_splits: u32,
    /// Lists a node holds before it is spilled or rewritten (0: no limit).
    #[arg(long, value_name = "N", default_value_t = 64)]
    lists_max: usize,
    /// Aggregate values by key with this function instead of overwriting
    /// them (`sum`, `count`, `sum+count`, `max`, ...): every write is a
    /// MERGE; values that read as numbers are numbers, others text.
    #[arg(long, value_name = "FUNC")]
    merge: Option<String>,
    /// Print the report as JSON to standard output.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct ReadArgs {
    /// The store's directory.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// Print JSON to standard output.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct GetArgs {
    #[command(flatten)]
    read: ReadArgs,
    /// Keys read in hexadecimal instead of as text.
    #[arg(long)]
    hex: bool,
    /// The keys.
    #[arg(required = true)]
    keys: Vec<String>,
}

#[derive(Debug, clap::Args)]
struct ScanArgs {
    #[command(flatten)]
    read: ReadArgs,
    /// Keys and values printed in hexadecimal instead of as text.
    #[arg(long, conflicts_with = "raw")]
    hex: bool,
    /// Keys and values written as their raw bytes even to a terminal (on a
    /// terminal they are printed with bytes that are not printable text
    /// escaped as \xNN; piped, they are raw).
    #[arg(long)]
    raw: bool,
    /// Print at most this many entries (the count of all goes to standard error).
    #[arg(long, value_name = "N")]
    limit: Option<u64>,
}

/// Runs `spillway kv`.
pub fn run(args: Args) -> anyhow::Result<u8> {
    match args.command {
        Command::Load(args) => load(args),
        Command::Get(args) => get(args),
        Command::Scan(args) => scan(args),
        Command::Stats(args) => stats(args),
        Command::Verify(args) => verify(args),
        Command::Dump(args) => dump(args),
        Command::Repair(args) => repair(args),
    }
}

fn mib(value: u64, flag: &str) -> anyhow::Result<u64> {
    value
        .checked_mul(1 << 20)
        .with_context(|| format!("{flag} {value} is too large"))
}

/// What `kv load --json` prints.
#[derive(Serialize)]
struct LoadReport {
    operations: u64,
    seconds: f64,
    operations_per_second: f64,
    stats: KvStats,
}

fn load(args: LoadArgs) -> anyhow::Result<u8> {
    let merge = args
        .merge
        .as_deref()
        .map(AggregateMerge::new)
        .transpose()?
        .map(|merge| Arc::new(merge) as Arc<dyn MergeOperator>);
    let root_bytes = usize::try_from(mib(args.root_mib, "--root-mib")?)?;
    let node_bytes = mib(args.node_mib, "--node-mib")?;
    let options = Options {
        root_bytes,
        node_bytes,
        limits: Options::default_limits(root_bytes, node_bytes),
        fan_out: args.fan_out,
        fast_splits_per_slow_split: args.fast_splits,
        lists_max: args.lists_max,
        sync: match args.sync {
            SyncArg::Always => SyncMode::Always,
            SyncArg::Periodic => SyncMode::Periodic(Duration::from_millis(100)),
            SyncArg::None => SyncMode::None,
        },
        merge_operator: merge,
        ..Options::default()
    };
    // A missing or unreadable input is refused before a store is created.
    let input = match &args.input {
        Some(path) => {
            if path.is_dir() {
                bail!("{} is a directory, not a file of operations", path.display());
            }
            Some(File::open(path).with_context(|| format!("opening {}", path.display()))?)
        }
        None => None,
    };
    let dir = &args.dir;
    let store = Store::open(dir, options)
        .with_context(|| format!("opening the key-value store in {}", dir.display()))?;
    let interrupt = Interrupt::on_signals();
    let started = Instant::now();
    let written = Loader::new(&store, args.batch)
        .map_err(anyhow::Error::new)
        .and_then(|mut loader| match (input, &args.input) {
            (Some(file), Some(path)) => load_file(&mut loader, file, path, &interrupt),
            _ => load_generated(&mut loader, &args, &interrupt),
        });
    // What was written before a failure or an interrupt is kept, made
    // durable and closed cleanly: a valid store.
    let synced = store.sync().context("syncing the log");
    let closed = store.close().context("closing the key-value store");
    let operations = written?;
    synced?;
    closed?;
    let elapsed = started.elapsed().as_secs_f64();
    let stats = store.stats();
    let per_second = operations as f64 / elapsed.max(1e-9);
    if args.json {
        let report = LoadReport {
            operations,
            seconds: elapsed,
            operations_per_second: per_second,
            stats,
        };
        println!("{}", serde_json::to_string(&report)?);
    } else {
        eprintln!(
            "kv load: {operations} operations in {elapsed:.3} s ({per_second:.0} operations/s) into {}",
            dir.display()
        );
        eprintln!("kv load: {}", stats_line(&stats));
    }
    Ok(0)
}

/// The context of a write that failed or was interrupted: how many
/// operations the store keeps.
fn stopped(loader: &Loader<'_>) -> String {
    format!(
        "kv load: stopped after {} operations, which the store in {} keeps",
        loader.written(),
        loader.store().dir().display()
    )
}

fn load_generated(loader: &mut Loader<'_>, args: &LoadArgs, interrupt: &Interrupt) -> anyhow::Result<u64> {
    let operations = args.generate.expect("clap requires --input or --generate");
    let mut params = KvParams::preset(Preset::FillRandom, operations);
    params.key_bytes = args.key_bytes;
    params.value_bytes = args.value_bytes;
    params.key_count = args.key_space.unwrap_or(operations).max(1);
    params.seed = args.seed;
    params.distribution = match args.keys {
        KeysArg::Sequential => KeyDistribution::Sequential,
        KeysArg::Uniform => KeyDistribution::Uniform,
        KeysArg::Zipfian => KeyDistribution::Zipfian {
            exponent: 0.99,
            scrambled: true,
        },
    };
    let mut generator = KvGenerator::new(&params)?;
    let bar = progress::records_bar(operations, "load");
    while let Some(operation) = generator.next_op() {
        let kind = match operation.kind {
            OperationKind::Get => continue,
            OperationKind::Put => Kind::Put,
            OperationKind::Delete => Kind::Delete,
            OperationKind::Merge => Kind::Merge,
        };
        if loader
            .push(kind, operation.key, operation.value, interrupt)
            .with_context(|| stopped(loader))?
        {
            bar.set_position(loader.written());
        }
    }
    let written = loader.finish(interrupt).with_context(|| stopped(loader))?;
    bar.finish_and_clear();
    Ok(written)
}

fn load_file(loader: &mut Loader<'_>, file: File, path: &Path, interrupt: &Interrupt) -> anyhow::Result<u64> {
    let bar = progress::bar(file.metadata().map(|meta| meta.len()).unwrap_or(0), "load");
    let mut read = 0;
    for (number, line) in BufReader::with_capacity(1 << 20, file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        read += line.len() as u64 + 1;
        let operation = match Operation::parse(&line) {
            Ok(Some(operation)) => operation,
            Ok(None) => continue,
            Err(error) => {
                // Every line before the bad one is written.
                let written = loader.finish(interrupt).with_context(|| stopped(loader))?;
                bail!(
                    "{} line {}: {error} (the {written} operations before it were written)",
                    path.display(),
                    number + 1
                );
            }
        };
        if loader
            .push(operation.kind, &operation.key, &operation.value, interrupt)
            .with_context(|| stopped(loader))?
        {
            bar.set_position(read);
        }
    }
    let written = loader.finish(interrupt).with_context(|| stopped(loader))?;
    bar.finish_and_clear();
    Ok(written)
}

/// Opens an existing store read-only, with the merge operator it was
/// written with, and that operator if it is an aggregate.
fn open_existing(dir: &Path) -> anyhow::Result<(Store, Option<AggregateMerge>)> {
    let store = Store::open_read_only(dir, Options::default())
        .with_context(|| format!("opening the key-value store in {}", dir.display()))?;
    let merge = store.aggregate().cloned();
    Ok((store, merge))
}

/// A value as the commands print it: an aggregate's result, or the bytes
/// as text (or hex).
fn shown(value: &[u8], merge: Option<&AggregateMerge>, hex: bool) -> anyhow::Result<String> {
    Ok(match merge {
        Some(merge) => output_text(&merge.finalize(value)?),
        None if hex => hex_encode(value),
        None => String::from_utf8_lossy(value).into_owned(),
    })
}

/// `bytes` as text a terminal shows as it is: printable ASCII and valid
/// UTF-8 text stay, a backslash is doubled, every other byte (control
/// characters, NUL, bytes of no character) is `\xNN`.
fn escaped(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for character in chunk.valid().chars() {
            match character {
                '\\' => text.push_str("\\\\"),
                character if character.is_control() => {
                    let mut buffer = [0u8; 4];
                    for byte in character.encode_utf8(&mut buffer).bytes() {
                        text.push_str(&format!("\\x{byte:02x}"));
                    }
                }
                character => text.push(character),
            }
        }
        for byte in chunk.invalid() {
            text.push_str(&format!("\\x{byte:02x}"));
        }
    }
    text
}

fn hex_encode(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// An aggregate's result as text: numbers, text, lists in brackets.
fn output_text(output: &Output) -> String {
    match output {
        Output::Null => "null".into(),
        Output::Int(value) => value.to_string(),
        Output::Int128(value) => value.to_string(),
        Output::Float(value) => value.to_string(),
        Output::Bytes(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Output::List(items) => format!(
            "[{}]",
            items.iter().map(output_text).collect::<Vec<_>>().join(", ")
        ),
    }
}

fn get(args: GetArgs) -> anyhow::Result<u8> {
    let (store, merge) = open_existing(&args.read.dir)?;
    let mut missing = 0;
    let mut found = Map::new();
    for text in &args.keys {
        let key = if args.hex {
            hex_decode(text).with_context(|| format!("{text:?} is not hexadecimal"))?
        } else {
            text.as_bytes().to_vec()
        };
        match store.get(&key)? {
            Some(value) => {
                let value = shown(&value, merge.as_ref(), args.hex)?;
                if args.read.json {
                    found.insert(text.clone(), json!(value));
                } else if std::io::stdout().is_terminal() {
                    println!("{text}\t{}", escaped(value.as_bytes()));
                } else {
                    println!("{text}\t{value}");
                }
            }
            None => {
                missing += 1;
                if args.read.json {
                    found.insert(text.clone(), Json::Null);
                } else {
                    eprintln!("kv get: {text}: not found");
                }
            }
        }
    }
    if args.read.json {
        println!("{}", Json::Object(found));
    }
    Ok(u8::from(missing > 0))
}

fn scan(args: ScanArgs) -> anyhow::Result<u8> {
    let (store, merge) = open_existing(&args.read.dir)?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut count = 0u64;
    // Binary keys and values reach a terminal escaped (a NUL or an escape
    // sequence would garble it); piped, or with --raw, they are written as
    // they are.
    let escape = !args.raw && std::io::stdout().is_terminal();
    for entry in store.scan()? {
        let (key, value) = entry?;
        count += 1;
        if args.limit.is_some_and(|limit| count > limit) {
            continue;
        }
        if args.read.json {
            let key = if args.hex {
                hex_encode(&key)
            } else {
                String::from_utf8_lossy(&key).into_owned()
            };
            let value = shown(&value, merge.as_ref(), args.hex)?;
            writeln!(out, "{}", json!({"key": key, "value": value}))?;
            continue;
        }
        let value = match merge.as_ref() {
            Some(merge) => output_text(&merge.finalize(&value)?).into_bytes(),
            None => value,
        };
        for (index, bytes) in [key, value].iter().enumerate() {
            if index == 1 {
                out.write_all(b"\t")?;
            }
            if args.hex {
                out.write_all(hex_encode(bytes).as_bytes())?;
            } else if escape {
                out.write_all(escaped(bytes).as_bytes())?;
            } else {
                out.write_all(bytes)?;
            }
        }
        out.write_all(b"\n")?;
    }
    out.flush()?;
    eprintln!("kv scan: {count} keys");
    Ok(0)
}

fn stats(args: ReadArgs) -> anyhow::Result<u8> {
    let (store, _) = open_existing(&args.dir)?;
    let stats = store.stats();
    if args.json {
        println!("{}", serde_json::to_string(&stats)?);
    } else {
        println!("{}", stats_line(&stats));
    }
    Ok(0)
}

fn verify(args: ReadArgs) -> anyhow::Result<u8> {
    let (store, _) = open_existing(&args.dir)?;
    let report = store
        .verify()
        .with_context(|| format!("verifying the key-value store in {}", args.dir.display()))?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "kv verify: OK: {} nodes ({} leaves), {} lists in {} files, {} records in lists, {} in {} logs{}",
            report.nodes,
            report.leaves,
            report.lists,
            report.files,
            report.records,
            report.root_records,
            report.logs.len(),
            if report.unreferenced_files.is_empty() {
                String::new()
            } else {
                format!(
                    "; {} files the store no longer needs (removed at the next open for writing)",
                    report.unreferenced_files.len()
                )
            }
        );
        for file in &report.unaccounted_files {
            eprintln!("kv verify: kept, not accounted for: {file}");
        }
    }
    Ok(0)
}

fn repair(args: RepairArgs) -> anyhow::Result<u8> {
    let dir = args.dir.or(args.dir_flag).expect("clap requires a directory");
    let report = Store::repair_interruptible(&dir, &Interrupt::on_signals())
        .with_context(|| format!("repairing the key-value store in {}", dir.display()))?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
        return Ok(0);
    }
    if !report.repaired {
        println!(
            "kv repair: {} passed every check ({} records in {} list files): nothing changed",
            dir.display(),
            report.records,
            report.lists_kept.len()
        );
    } else {
        println!(
            "kv repair: rebuilt {}: {} records in lists ({} files kept, {} salvaged, {} written from logs); {} records lost",
            dir.display(),
            report.records,
            report.lists_kept.len(),
            report.lists_salvaged.len(),
            report.lists_written.len(),
            report.records_lost
        );
        if let Some(problem) = &report.problem {
            println!("kv repair: it was: {problem}");
        }
        for loss in &report.lost {
            let ranges: Vec<String> = loss
                .ranges
                .iter()
                .map(|(start, end)| format!("{start}..{end}"))
                .collect();
            println!(
                "kv repair: lost: {}{}: {} records ({})",
                if loss.file.is_empty() {
                    "(no file)"
                } else {
                    &loss.file
                },
                if ranges.is_empty() {
                    String::new()
                } else {
                    format!(" bytes {}", ranges.join(", "))
                },
                loss.records,
                loss.what
            );
        }
        if !report.moved_to_lost.is_empty() {
            println!(
                "kv repair: moved into {}: {}",
                dir.join(spillway_kv::LOST_DIR).display(),
                report.moved_to_lost.join(", ")
            );
        }
    }
    for file in &report.unaccounted {
        println!("kv repair: left alone: {file}");
    }
    Ok(0)
}

fn dump(args: ReadArgs) -> anyhow::Result<u8> {
    let (store, _) = open_existing(&args.dir)?;
    let nodes = store.describe();
    if args.json {
        println!("{}", serde_json::to_string(&nodes)?);
        return Ok(0);
    }
    for node in &nodes {
        let indent = "  ".repeat(node.depth as usize);
        let kind = if node.id == 0 {
            "root"
        } else if node.children.is_empty() {
            "leaf"
        } else {
            "node"
        };
        let bytes: u64 = node.lists.iter().map(|list| list.bytes).sum();
        println!(
            "{indent}{kind} {} hashes {:016x}..={:016x}: {} lists, {bytes} bytes, {} children, {} fast splits",
            node.id,
            node.low,
            node.high,
            node.lists.len(),
            node.children.len(),
            node.fast_splits
        );
        for list in &node.lists {
            println!(
                "{indent}  list file {} blocks {}..{}: {} bytes, {} records",
                list.file, list.block_first, list.block_end, list.bytes, list.records
            );
        }
    }
    Ok(0)
}

/// One line of the main statistics.
fn stats_line(stats: &KvStats) -> String {
    format!(
        "height {}, {} nodes ({} leaves), {} lists in {} files ({} records, {:.1} MB); {} root spills, {} node spills, {} fast and {} slow splits; \
         index memory {:.2} B per record; write amplification {:.2}; stalls {:.3} s",
        stats.height,
        stats.nodes,
        stats.leaves,
        stats.lists,
        stats.list_files,
        stats.list_records,
        stats.list_file_bytes as f64 / 1e6,
        stats.root_spills,
        stats.node_spills,
        stats.fast_splits,
        stats.slow_splits + stats.collapses,
        stats.index_bytes_per_record,
        stats.write_amplification,
        stats.stall_seconds,
    )
}
