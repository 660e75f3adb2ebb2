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
//! command exits with 130 or 143. [`stats_json`], [`verify_json`] and
//! [`repair_json`] are shared with the Python binding.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Subcommand, ValueEnum};
use serde_json::{json, Map, Value as Json};
use spillway_agg::{Output, Value};
use spillway_core::HistogramSnapshot;
use spillway_core::Interrupt;
use spillway_kv::{
    AggregateMerge, KvStats, MergeOperator, NodeDescription, Options, RepairReport, Store, SyncMode,
    VerifyReport, WriteBatch,
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
    #[arg(long, value_name = "N", default_value_t = 1000)]
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

/// The aggregate merge operator named by `spec`, if any.
pub fn aggregate(spec: Option<&str>) -> spillway_core::Result<Option<Arc<AggregateMerge>>> {
    spec.map(|spec| AggregateMerge::new(spec).map(Arc::new))
        .transpose()
}

/// The stored operand for `bytes` given to an aggregate: an integer or a
/// number if the bytes read as one, else the bytes.
pub fn operand(merge: &AggregateMerge, bytes: &[u8]) -> spillway_core::Result<Vec<u8>> {
    let text = std::str::from_utf8(bytes).ok().map(str::trim);
    let value = match text {
        Some(text) if text.parse::<i64>().is_ok() => Value::Int(text.parse().expect("checked")),
        Some(text) if text.parse::<f64>().is_ok_and(f64::is_finite) => {
            Value::Float(text.parse().expect("checked"))
        }
        _ => Value::Bytes(bytes),
    };
    merge.operand(value)
}

fn mib(value: u64, flag: &str) -> anyhow::Result<u64> {
    value
        .checked_mul(1 << 20)
        .with_context(|| format!("{flag} {value} is too large"))
}

fn load(args: LoadArgs) -> anyhow::Result<u8> {
    if args.batch == 0 {
        bail!("--batch must be at least 1");
    }
    let merge = aggregate(args.merge.as_deref())?;
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
        merge_operator: merge.clone().map(|merge| merge as Arc<dyn MergeOperator>),
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
    let written = match (input, &args.input) {
        (Some(file), Some(path)) => load_file(&store, file, path, merge.as_deref(), args.batch, &interrupt),
        _ => load_generated(&store, &args, merge.as_deref(), &interrupt),
    };
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
        let report = json!({
            "operations": operations,
            "seconds": elapsed,
            "operations_per_second": per_second,
            "stats": stats_json(&stats),
        });
        println!("{report}");
    } else {
        eprintln!(
            "kv load: {operations} operations in {elapsed:.3} s ({per_second:.0} operations/s) into {}",
            dir.display()
        );
        eprintln!("kv load: {}", stats_line(&stats));
    }
    Ok(0)
}

/// Adds one operation to `batch`.
fn push(
    batch: &mut WriteBatch,
    kind: OperationKind,
    key: &[u8],
    value: &[u8],
    merge: Option<&AggregateMerge>,
) -> spillway_core::Result<()> {
    match (kind, merge) {
        (OperationKind::Get, _) => {}
        (OperationKind::Delete, _) => {
            batch.delete(key);
        }
        (OperationKind::Put | OperationKind::Merge, Some(merge)) => {
            batch.merge(key, &operand(merge, value)?);
        }
        (OperationKind::Put, None) => {
            batch.put(key, value);
        }
        (OperationKind::Merge, None) => {
            batch.merge(key, value);
        }
    }
    Ok(())
}

/// Writes `batch` unless an interrupt came; the batch is then dropped
/// whole (nothing of it reached the log), and the error says how many
/// operations, `written` before it, the store keeps.
fn write_batch(store: &Store, batch: &WriteBatch, interrupt: &Interrupt, written: u64) -> anyhow::Result<()> {
    store.write_interruptible(batch, interrupt).with_context(|| {
        format!(
            "kv load: stopped after {written} operations, which the store in {} keeps",
            store.dir().display()
        )
    })
}

fn load_generated(
    store: &Store,
    args: &LoadArgs,
    merge: Option<&AggregateMerge>,
    interrupt: &Interrupt,
) -> anyhow::Result<u64> {
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
    let mut batch = WriteBatch::new();
    let mut written = 0;
    while let Some(operation) = generator.next_op() {
        push(&mut batch, operation.kind, operation.key, operation.value, merge)?;
        if batch.len() >= args.batch {
            write_batch(store, &batch, interrupt, written)?;
            written += batch.len() as u64;
            batch.clear();
            bar.set_position(written);
        }
    }
    write_batch(store, &batch, interrupt, written)?;
    written += batch.len() as u64;
    bar.finish_and_clear();
    Ok(written)
}

fn hex_decode(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(text.get(at..at + 2)?, 16).ok())
        .collect()
}

fn load_file(
    store: &Store,
    file: File,
    path: &Path,
    merge: Option<&AggregateMerge>,
    batch_len: usize,
    interrupt: &Interrupt,
) -> anyhow::Result<u64> {
    let bar = progress::bar(file.metadata().map(|meta| meta.len()).unwrap_or(0), "load");
    let mut batch = WriteBatch::new();
    let mut written = 0;
    let mut read = 0;
    for (number, line) in BufReader::with_capacity(1 << 20, file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        read += line.len() as u64 + 1;
        let fields: Vec<&str> = line.trim_end_matches('\r').split('\t').collect();
        let parsed = match fields.as_slice() {
            [""] => continue,
            ["PUT", key, value] => Some((OperationKind::Put, *key, *value)),
            ["MERGE", key, value] => Some((OperationKind::Merge, *key, *value)),
            ["DELETE", key] => Some((OperationKind::Delete, *key, "")),
            ["GET", key] => Some((OperationKind::Get, *key, "")),
            _ => None,
        };
        let decoded =
            parsed.and_then(|(kind, key, value)| Some((kind, hex_decode(key)?, hex_decode(value)?)));
        let Some((kind, key, value)) = decoded else {
            // Every line before the bad one is written.
            write_batch(store, &batch, interrupt, written)?;
            written += batch.len() as u64;
            bail!(
                "{} line {}: expected PUT/MERGE<TAB>hex key<TAB>hex value or DELETE/GET<TAB>hex key (the {written} operations before it were written)",
                path.display(),
                number + 1
            );
        };
        push(&mut batch, kind, &key, &value, merge)?;
        if batch.len() >= batch_len {
            write_batch(store, &batch, interrupt, written)?;
            written += batch.len() as u64;
            batch.clear();
            bar.set_position(read);
        }
    }
    write_batch(store, &batch, interrupt, written)?;
    written += batch.len() as u64;
    bar.finish_and_clear();
    Ok(written)
}

/// Opens an existing store read-only, with the merge operator it was
/// written with.
fn open_existing(dir: &Path) -> anyhow::Result<(Store, Option<Arc<AggregateMerge>>)> {
    let Some(name) =
        Store::merge_operator_name(dir).with_context(|| format!("reading the store in {}", dir.display()))?
    else {
        // Store files without CURRENT are a damaged store, which an open
        // names as such.
        if let Err(error) = Store::open_read_only(dir, Options::default()) {
            if error.kind() == spillway_core::ErrorKind::Corruption {
                return Err(anyhow::Error::new(error)
                    .context(format!("opening the key-value store in {}", dir.display())));
            }
        }
        bail!(
            "{} holds no key-value store (no CURRENT file); create one with `spillway kv load --dir {}`",
            dir.display(),
            dir.display()
        );
    };
    let merge = AggregateMerge::from_stored_name(&name)?.map(Arc::new);
    let options = Options {
        merge_operator: merge.clone().map(|merge| merge as Arc<dyn MergeOperator>),
        ..Options::default()
    };
    let store = Store::open_read_only(dir, options)
        .with_context(|| format!("opening the key-value store in {}", dir.display()))?;
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
pub fn escaped(bytes: &[u8]) -> String {
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
pub fn output_text(output: &Output) -> String {
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
                let value = shown(&value, merge.as_deref(), args.hex)?;
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
            let value = shown(&value, merge.as_deref(), args.hex)?;
            writeln!(out, "{}", json!({"key": key, "value": value}))?;
            continue;
        }
        let value = match merge.as_deref() {
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
        println!("{}", stats_json(&stats));
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
        println!("{}", verify_json(&report));
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
        println!("{}", repair_json(&report));
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
        println!("{}", Json::Array(nodes.iter().map(node_json).collect()));
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
            node.hashes.0,
            node.hashes.1,
            node.lists.len(),
            node.children.len(),
            node.fast_splits
        );
        for list in &node.lists {
            println!(
                "{indent}  list file {} blocks {}..{}: {} bytes, {} records",
                list.file, list.blocks.0, list.blocks.1, list.bytes, list.records
            );
        }
    }
    Ok(0)
}

fn node_json(node: &NodeDescription) -> Json {
    json!({
        "id": node.id,
        "depth": node.depth,
        "low": format!("{:016x}", node.hashes.0),
        "high": format!("{:016x}", node.hashes.1),
        "children": node.children,
        "fast_splits": node.fast_splits,
        "lists": node.lists.iter().map(|list| json!({
            "file": list.file,
            "first_block": list.blocks.0,
            "end_block": list.blocks.1,
            "bytes": list.bytes,
            "records": list.records,
        })).collect::<Vec<_>>(),
    })
}

fn histogram_json(histogram: &HistogramSnapshot) -> Json {
    json!({
        "count": histogram.count,
        "mean": histogram.mean,
        "p50": histogram.p50,
        "p99": histogram.p99,
        "p999": histogram.p999,
        "max": histogram.max,
    })
}

/// The statistics as a JSON object (the CLI's `--json` and Python's `stats()`).
pub fn stats_json(stats: &KvStats) -> Json {
    json!({
        "puts": stats.puts,
        "deletes": stats.deletes,
        "merges": stats.merges,
        "write_batches": stats.write_batches,
        "user_bytes": stats.user_bytes,
        "wal_bytes": stats.wal_bytes,
        "gets": stats.gets,
        "get_hits": stats.get_hits,
        "get_block_reads": stats.get_block_reads,
        "get_filter_passes": stats.get_filter_passes,
        "root_records": stats.root_records,
        "root_bytes": stats.root_bytes,
        "root_spills": stats.root_spills,
        "node_spills": stats.node_spills,
        "slow_splits": stats.slow_splits,
        "collapses": stats.collapses,
        "fast_splits": stats.fast_splits,
        "divides": stats.divides,
        "grows": stats.grows,
        "forced": stats.forced,
        "spills_beside_rewrites": stats.spills_beside_rewrites,
        "stall_seconds": stats.stall_seconds,
        "stalls": stats.stalls,
        "height": stats.height,
        "nodes": stats.nodes,
        "leaves": stats.leaves,
        "lists": stats.lists,
        "list_files": stats.list_files,
        "list_file_bytes": stats.list_file_bytes,
        "list_records": stats.list_records,
        "index_memory_bytes": stats.index_memory_bytes,
        "index_bytes_per_record": stats.index_bytes_per_record(),
        "list_bytes_written": stats.list_bytes_written,
        "list_bytes_read": stats.list_bytes_read,
        "records_spilled": stats.records_spilled,
        "write_amplification": stats.write_amplification(),
        "manifest_rewrites": stats.manifest_rewrites,
        "logs_over_spares": stats.logs_over_spares,
        "files_removed": stats.files_removed,
        "file_opens": stats.file_opens,
        "damaged_nodes": stats.damaged_nodes,
        "damage": stats.damage,
        "write_latency_us": histogram_json(&stats.write_latency_us),
        "get_latency_us": histogram_json(&stats.get_latency_us),
        "spill_latency_us": histogram_json(&stats.spill_latency_us),
    })
}

/// A verify report as a JSON object.
pub fn verify_json(report: &VerifyReport) -> Json {
    json!({
        "nodes": report.nodes,
        "leaves": report.leaves,
        "lists": report.lists,
        "files": report.files,
        "records": report.records,
        "root_records": report.root_records,
        "unreferenced_files": report.unreferenced_files,
        "unaccounted_files": report.unaccounted_files,
        "logs": report.logs,
        "damage": report.damage,
    })
}

/// A repair report as a JSON object (the CLI's `--json` and Python's
/// `KV.repair`).
pub fn repair_json(report: &RepairReport) -> Json {
    serde_json::to_value(report).expect("a repair report serializes")
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
        stats.index_bytes_per_record(),
        stats.write_amplification(),
        stats.stall_seconds,
    )
}
