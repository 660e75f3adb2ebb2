//! `spillway agg`: GroupBy-Aggregate over a delimited text file, or over
//! generated Zipf-distributed data.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use serde::Serialize;
use spillway_agg::{
    aggregate_delimited, parse_delimiter, Aggregator, AggregatorOptions, AggregatorStats, CbtOptions,
    DelimitedOptions, Engine, Output, Value, ValueType, INTERRUPT_CHECK_RECORDS,
};
use spillway_core::{scratch, Interrupt, IoContext};
use spillway_workload::GroupByGenerator;

use crate::units::{parse_count, parse_text, strip_kind};

/// Aggregate values by key: one result per distinct key.
///
/// Examples: `spillway agg clicks.csv --key 1 --value 3 --function sum`,
/// `spillway agg --generate 10M --keys 1M --function count --engine hash`.
/// Results are written as `key<TAB>result` lines to OUTPUT (or standard
/// output), the CBT's in hash order.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Delimited text file to aggregate (one record per line).
    #[arg(required_unless_present = "generate", conflicts_with = "generate")]
    input: Option<PathBuf>,
    /// The aggregate function: count, sum, min, max, mean, variance,
    /// variance_pop, stddev, stddev_pop, first, last, top_k(K),
    /// approx_distinct(P), collect_list, collect_set.
    #[arg(short, long, default_value = "count")]
    function: String,
    /// The engine: cbt (Compressed Buffer Tree, least memory) or hash.
    #[arg(long, default_value = "cbt")]
    engine: String,
    /// Column of the key, counting from 1.
    #[arg(long, value_name = "N", default_value_t = 1)]
    key: usize,
    /// Column of the value, counting from 1 (not needed for count).
    #[arg(long, value_name = "N")]
    value: Option<usize>,
    /// Column separator (one byte; `\t` for tab).
    #[arg(short, long, default_value = ",", value_parser = parse_delimiter_arg)]
    delimiter: u8,
    /// Skip the first line.
    #[arg(long)]
    header: bool,
    /// How values are read: auto (integer, else float, else text), int,
    /// float or text. Integers must fit 64 bits and floats be finite (NaN
    /// and infinities are errors, in auto too).
    #[arg(long, default_value = "auto", value_parser = parse_text::<ValueType>)]
    value_type: ValueType,
    /// Aggregate this many generated records instead of a file.
    #[arg(long, value_name = "N", value_parser = parse_count)]
    generate: Option<u64>,
    /// Distinct keys of the generated records (Zipf-distributed).
    #[arg(long, value_name = "N", default_value = "1M", value_parser = parse_count)]
    keys: u64,
    /// Zipf exponent of the generated keys (0 is uniform).
    #[arg(long, default_value_t = 0.99)]
    zipf: f64,
    /// Seed of the generated records.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Memory the engine may use (K/M/G suffixes).
    #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = parse_count)]
    memory: u64,
    /// The CBT's buffer size (K/M/G suffixes).
    #[arg(long, value_name = "SIZE", default_value = "8M", value_parser = parse_count)]
    buffer: u64,
    /// The CBT's fan-out.
    #[arg(long, value_name = "N", default_value_t = 16)]
    fan_out: usize,
    /// CBT worker threads, each with a tree of its own (0: one tree,
    /// emptied on the reading thread).
    #[arg(long, value_name = "N", default_value_t = 2)]
    threads: usize,
    /// Write the results here (atomically and synced, when complete: an
    /// error or Ctrl-C leaves no FILE and no partial file) instead of to
    /// standard output; `-` discards them (for measuring).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Print the report as JSON to standard output (results need --output).
    #[arg(long)]
    json: bool,
}

/// The `--json` report of a run: its counts and times, and the engine's
/// statistics.
#[derive(Serialize)]
struct Report<'a> {
    records: u64,
    keys: u64,
    seconds: f64,
    aggregate_seconds: f64,
    records_per_second: f64,
    stats: &'a AggregatorStats,
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    let engine: Engine = args.engine.parse()?;
    if args.json && args.output.is_none() {
        bail!(
            "--json prints the report to standard output, so the results need --output FILE (or --output -)"
        );
    }
    if let Some(path) = &args.input {
        if path.is_dir() {
            bail!("{} is a directory; give a delimited text file", path.display());
        }
    }
    if let Some(path) = args.output.as_deref().filter(|path| *path != Path::new("-")) {
        check_output(path)?;
    }
    let options = AggregatorOptions {
        engine,
        memory_bytes: args.memory,
        cbt: CbtOptions {
            buffer_bytes: usize::try_from(args.buffer).context("--buffer is too large")?,
            fan_out: args.fan_out,
            ..CbtOptions::default()
        },
        threads: args.threads,
    };
    let mut aggregator = Aggregator::new(&args.function, options)?;
    // Ctrl-C and SIGTERM stop the reading, the engine's emptying and
    // finalize, and the writing, which removes its partial output.
    let interrupt = Interrupt::on_signals();
    aggregator.set_interrupt(interrupt.clone());
    let started = Instant::now();
    let records = match &args.input {
        Some(path) => aggregate_file(&mut aggregator, path, &args, &interrupt)?,
        None => aggregate_generated(&mut aggregator, &args, &interrupt)?,
    };
    aggregator.finalize()?;
    let aggregated = started.elapsed();
    let keys = write_results(&aggregator, args.output.as_deref(), &interrupt)?;
    let elapsed = started.elapsed();
    let stats = aggregator.stats();
    if args.json {
        let report = Report {
            records,
            keys,
            seconds: elapsed.as_secs_f64(),
            aggregate_seconds: aggregated.as_secs_f64(),
            records_per_second: records as f64 / aggregated.as_secs_f64(),
            stats: &stats,
        };
        let report = serde_json::to_value(&report)?;
        println!("{report}");
    } else {
        eprintln!(
            "agg: {records} records, {keys} keys, {} with the {} engine in {:.3} s ({:.0} records/s); \
             memory {} bytes ({}), compression {:.2}x, {} spills, {} compactions",
            stats.function,
            args.engine,
            elapsed.as_secs_f64(),
            records as f64 / aggregated.as_secs_f64(),
            stats.memory_bytes,
            stats
                .memory
                .iter()
                .map(|(part, bytes)| format!("{part} {bytes}"))
                .collect::<Vec<_>>()
                .join(", "),
            stats.compression_ratio,
            stats.spills,
            stats.compactions
        );
    }
    Ok(0)
}

fn parse_delimiter_arg(text: &str) -> Result<u8, String> {
    parse_delimiter(text).map_err(|error| strip_kind(&error))
}

/// Refuses an output path where the results could not go, before any work:
/// a directory, or a file in a directory that does not exist.
fn check_output(path: &Path) -> anyhow::Result<()> {
    if path.is_dir() {
        bail!("--output {} is a directory; give a file name", path.display());
    }
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        bail!(
            "--output {}: the directory {} does not exist",
            path.display(),
            parent.display()
        );
    }
    Ok(())
}

/// Aggregates every line of `path` with the library's reader of
/// delimited records; returns the number of records.
fn aggregate_file(
    aggregator: &mut Aggregator,
    path: &Path,
    args: &Args,
    interrupt: &Interrupt,
) -> anyhow::Result<u64> {
    if args.value.is_none() && args.function != "count" {
        bail!("--value N is needed for {}", args.function);
    }
    let options = DelimitedOptions {
        delimiter: args.delimiter,
        key_column: args.key,
        value_column: args.value,
        header: args.header,
        value_type: args.value_type,
    };
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let reader = BufReader::with_capacity(1 << 20, file);
    let source = path.display().to_string();
    Ok(aggregate_delimited(
        aggregator, reader, &source, &options, interrupt,
    )?)
}

/// Aggregates the `--generate` records of the workload library (Zipf keys
/// `key-RANK`, values below 1000); returns the number of records.
fn aggregate_generated(
    aggregator: &mut Aggregator,
    args: &Args,
    interrupt: &Interrupt,
) -> anyhow::Result<u64> {
    let mut generator = GroupByGenerator::new(args.generate.unwrap_or(0), args.keys, args.zipf, args.seed)?;
    let mut records = 0u64;
    while let Some((key, value)) = generator.next_record() {
        if records.is_multiple_of(INTERRUPT_CHECK_RECORDS) {
            interrupt.check()?;
        }
        aggregator.insert(key, Value::Int(value))?;
        records += 1;
    }
    Ok(records)
}

/// Writes `key<TAB>result` lines to `output` (all or nothing, synced:
/// `scratch::write_staged`), to standard output when there is none, nowhere
/// for `-`; returns the number of keys.
fn write_results(
    aggregator: &Aggregator,
    output: Option<&Path>,
    interrupt: &Interrupt,
) -> anyhow::Result<u64> {
    let mut keys = 0u64;
    let mut line = Vec::with_capacity(256);
    let mut emit = |out: &mut dyn Write, name: &str| -> spillway_core::Result<()> {
        for result in aggregator.iter()? {
            if keys.is_multiple_of(INTERRUPT_CHECK_RECORDS) {
                interrupt.check()?;
            }
            let (key, value) = result?;
            line.clear();
            line.extend_from_slice(&key);
            line.push(b'\t');
            format_output(&value, &mut line);
            line.push(b'\n');
            out.write_all(&line).io_context(|| format!("writing {name}"))?;
            keys += 1;
        }
        out.flush().io_context(|| format!("writing {name}"))
    };
    match output {
        Some(path) if path == Path::new("-") => emit(&mut std::io::sink(), "nowhere")?,
        Some(path) => {
            scratch::write_staged(path, true, |file| {
                emit(
                    &mut BufWriter::with_capacity(1 << 20, file),
                    &path.display().to_string(),
                )
            })?;
        }
        None => emit(
            &mut BufWriter::new(std::io::stdout().lock()),
            "the results to standard output",
        )?,
    }
    Ok(keys)
}

/// Integers and floats as Rust prints them, text as its bytes, lists in
/// brackets, a missing result as `null`.
fn format_output(output: &Output, line: &mut Vec<u8>) {
    match output {
        Output::Null => line.extend_from_slice(b"null"),
        Output::Int(value) => write!(line, "{value}").expect("writing to a Vec"),
        Output::Int128(value) => write!(line, "{value}").expect("writing to a Vec"),
        Output::Float(value) => write!(line, "{value}").expect("writing to a Vec"),
        Output::Bytes(bytes) => line.extend_from_slice(bytes),
        Output::List(items) => {
            line.push(b'[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    line.push(b',');
                }
                format_output(item, line);
            }
            line.push(b']');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupted_write_leaves_neither_the_output_nor_its_partial_file() {
        let mut aggregator = Aggregator::new("count", AggregatorOptions::default()).unwrap();
        for index in 0..10_000u32 {
            aggregator
                .insert(format!("k{index}").as_bytes(), Value::Int(1))
                .unwrap();
        }
        aggregator.finalize().unwrap();
        let directory = tempfile::tempdir().unwrap();
        let output = directory.path().join("out.tsv");
        let interrupt = Interrupt::new();
        interrupt.raise();
        let error = write_results(&aggregator, Some(&output), &interrupt).unwrap_err();
        assert!(crate::is_interrupted(&error), "{error:#}");
        assert_eq!(std::fs::read_dir(directory.path()).unwrap().count(), 0);
        // Not interrupted, the same call writes every result.
        let keys = write_results(&aggregator, Some(&output), &Interrupt::new()).unwrap();
        assert_eq!(keys, 10_000);
        assert_eq!(std::fs::read_to_string(&output).unwrap().lines().count(), 10_000);
    }
}
