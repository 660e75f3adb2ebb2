//! `spillway kv`: a WB Tree key-value store in a directory, from the
//! command line.
//!
//! ```text
//! spillway kv load --dir D (--input OPS.txt | --generate N [--key-bytes 16] [--value-bytes 100] [--keys uniform|sequential|zipfian])
//!     [--batch 1000] [--sync always|periodic|none] [--root-mib 64] [--node-mib 256] [--fan-out 64] [--merge FUNC] [--json]
//! spillway kv get --dir D KEY... [--hex] [--json]
//! spillway kv scan --dir D [--limit N] [--hex] [--json]
//! spillway kv stats --dir D [--json]
//! spillway kv verify --dir D [--json]
//! spillway kv dump --dir D [--json]
//! ```
//!
//! The read commands open the store read-only (beside no writer) and with
//! the merge operator it was written with. [`stats_json`] and
//! [`verify_json`] are shared with the Python binding.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Subcommand, ValueEnum};
use serde_json::{json, Map, Value as Json};
use spillway_agg::{Output, Value};
use spillway_core::stats::HistogramSnapshot;
use spillway_kv::{
    AggregateMerge, KvStats, MergeOperator, NodeDescription, Options, Store, SyncMode, VerifyReport,
    WriteBatch,
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
    /// Examples: `spillway kv load --dir db --generate 10M --key-bytes 8 --value-bytes 8`,
    /// `spillway gen kv --preset fillrandom -n 1M -o ops.txt && spillway kv load --dir db --input ops.txt`.
    Load(LoadArgs),
    /// Print the values of keys (exit 1 if any is missing).
    Get(GetArgs),
    /// Print every live key and value, in hash order (the store keeps no key order).
    Scan(ScanArgs),
    /// Print the store's counters and sizes.
    Stats(ReadArgs),
    /// Read every list file whole and check every block, record, index,
    /// filter and sketch; exit 1 with the damaged file named if one fails.
    Verify(ReadArgs),
    /// Print the tree: every node with its hash range and lists.
    Dump(ReadArgs),
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
    #[arg(long)]
    hex: bool,
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
    let dir = &args.dir;
    let store = Store::open(dir, options)
        .with_context(|| format!("opening the key-value store in {}", dir.display()))?;
    let started = Instant::now();
    let written = match &args.input {
        Some(path) => load_file(&store, path, merge.as_deref(), args.batch),
        None => load_generated(&store, &args, merge.as_deref()),
    };
    // What was written before a failure is kept, and made durable.
    let synced = store.sync().context("syncing the log");
    let operations = written?;
    synced?;
    let elapsed = started.elapsed().as_secs_f64();
    let stats = store.stats();
    store.close().context("closing the key-value store")?;
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

fn load_generated(store: &Store, args: &LoadArgs, merge: Option<&AggregateMerge>) -> anyhow::Result<u64> {
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
            store.write(&batch)?;
            written += batch.len() as u64;
            batch.clear();
            bar.set_position(written);
        }
    }
    store.write(&batch)?;
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
    path: &Path,
    merge: Option<&AggregateMerge>,
    batch_len: usize,
) -> anyhow::Result<u64> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
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
            store.write(&batch)?;
            written += batch.len() as u64;
            bail!(
                "{} line {}: expected PUT/MERGE<TAB>hex key<TAB>hex value or DELETE/GET<TAB>hex key (the {written} operations before it were written)",
                path.display(),
                number + 1
            );
        };
        push(&mut batch, kind, &key, &value, merge)?;
        if batch.len() >= batch_len {
            store.write(&batch)?;
            written += batch.len() as u64;
            batch.clear();
            bar.set_position(read);
        }
    }
    store.write(&batch)?;
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
    for entry in store.scan()? {
        let (key, value) = entry?;
        count += 1;
        if args.limit.is_some_and(|limit| count > limit) {
            continue;
        }
        let key = if args.hex {
            hex_encode(&key)
        } else {
            String::from_utf8_lossy(&key).into_owned()
        };
        let value = shown(&value, merge.as_deref(), args.hex)?;
        if args.read.json {
            writeln!(out, "{}", json!({"key": key, "value": value}))?;
        } else {
            writeln!(out, "{key}\t{value}")?;
        }
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
            "kv verify: OK: {} nodes ({} leaves), {} lists in {} files, {} records in lists, {} in the log{}",
            report.nodes,
            report.leaves,
            report.lists,
            report.files,
            report.records,
            report.root_records,
            if report.unreferenced_files.is_empty() {
                String::new()
            } else {
                format!(
                    "; {} unreferenced files (removed at the next open for writing)",
                    report.unreferenced_files.len()
                )
            }
        );
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
    })
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
