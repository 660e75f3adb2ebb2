//! `spillway agg`: GroupBy-Aggregate over a delimited text file, or over
//! generated Zipf-distributed data. With the hash engine and functions
//! that have a typed form, a file is read as columns into the typed engine,
//! which groups by several key columns and takes a value column per
//! function.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use serde::Serialize;
use spillway_agg::{
    aggregate_delimited, aggregate_delimited_columns, parse_delimiter, parse_functions, Aggregator,
    AggregatorOptions, AggregatorStats, CbtOptions, ColumnsOptions, DelimitedOptions, Engine, KeyColumn,
    KeyType, NumberType, Output, TypedHashAggregator, TypedResults, Value, ValueType,
    INTERRUPT_CHECK_RECORDS,
};
use spillway_core::{scratch, Interrupt, IoContext};
use spillway_workload::GroupByGenerator;

use crate::units::{parse_count, parse_text, strip_kind};

/// Aggregate values by key: one result per distinct key.
///
/// Examples: `spillway agg clicks.csv --key 1 --value 3 --function sum`,
/// `spillway agg sales.csv --header --key 1,2 --value 3,4 --function
/// sum+mean --engine hash -o totals.csv`, `spillway agg --generate 10M
/// --keys 1M --function count --engine hash`. Results are written as
/// `key<TAB>result` lines to OUTPUT (or standard output), the CBT's in hash
/// order; several keys or functions give a column each; an OUTPUT ending
/// in `.csv` is comma-separated, quoted where needed, under a header line.
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
    /// Column of the key, counting from 1; several (`1,2`) group by each
    /// distinct combination (hash engine).
    #[arg(long, value_name = "N[,N...]", default_value = "1", value_delimiter = ',')]
    key: Vec<usize>,
    /// Column of the value, counting from 1 (not needed for count);
    /// several (`3,4`, hash engine) give one to each function of `-f
    /// sum+mean`, in order.
    #[arg(long, value_name = "N[,N...]", value_delimiter = ',')]
    value: Vec<usize>,
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
    /// emptied on the reading thread); the hash engine's threads when it
    /// reads a file as columns (at least 1).
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
    let typed = engine == Engine::Hash && args.input.is_some() && parse_functions(&args.function).is_ok();
    if !typed && (args.key.len() > 1 || args.value.len() > 1) {
        bail!(
            "several --key or --value columns take --engine hash and functions with a typed form (count, sum, \
             min, max, mean, variance, stddev and their _pop forms, joined with +)"
        );
    }
    if let Some(path) = args.input.as_deref().filter(|_| typed) {
        return run_typed(path, &args);
    }
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
    check_value_given(args)?;
    let options = DelimitedOptions {
        delimiter: args.delimiter,
        key_column: args.key[0],
        value_column: args.value.first().copied(),
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

/// Fails unless a function other than count has a value column.
fn check_value_given(args: &Args) -> anyhow::Result<()> {
    if args.value.is_empty() && args.function != "count" {
        bail!("--value N is needed for {}", args.function);
    }
    Ok(())
}

/// `spillway agg FILE --engine hash` with typed functions: the file read
/// as columns into the typed engine, the results written a column each.
fn run_typed(path: &Path, args: &Args) -> anyhow::Result<u8> {
    check_value_given(args)?;
    let value_types = value_types(args)?;
    let key_types = vec![KeyType::Bytes; args.key.len()];
    let threads = args.threads.max(1);
    let mut aggregator =
        TypedHashAggregator::with_columns(&args.function, &key_types, &value_types, threads, args.memory)?;
    let interrupt = Interrupt::on_signals();
    aggregator.set_interrupt(interrupt.clone());
    let started = Instant::now();
    let options = ColumnsOptions {
        delimiter: args.delimiter,
        key_columns: args.key.clone(),
        value_columns: args.value.clone(),
        header: args.header,
    };
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let reader = BufReader::with_capacity(1 << 20, file);
    let source = path.display().to_string();
    let records = aggregate_delimited_columns(&mut aggregator, reader, &source, &options, &interrupt)?;
    let aggregated = started.elapsed();
    let results = aggregator.results()?;
    let names = column_names(args);
    let keys = write_output(args.output.as_deref(), |out, name, csv| {
        write_typed(&results, &names, out, name, csv, &interrupt)
    })?;
    let elapsed = started.elapsed();
    let stats = aggregator.stats();
    let rate = records as f64 / aggregated.as_secs_f64();
    if args.json {
        let report = serde_json::json!({
            "records": records,
            "keys": keys,
            "seconds": elapsed.as_secs_f64(),
            "aggregate_seconds": aggregated.as_secs_f64(),
            "records_per_second": rate,
            "stats": {
                "path": "typed",
                "engine": "hash",
                "function": args.function,
                "groups": stats.groups,
                "inserts": stats.inserts,
                "memory_bytes": stats.memory_bytes(),
                "table_bytes": stats.table_bytes,
                "scratch_bytes": stats.scratch_bytes,
                "threads": stats.threads,
            },
        });
        println!("{report}");
    } else {
        eprintln!(
            "agg: {records} records, {keys} keys, {} with the hash engine's typed path on {threads} threads in \
             {:.3} s ({rate:.0} records/s); memory {} bytes (tables {}, scratch {})",
            args.function,
            elapsed.as_secs_f64(),
            stats.memory_bytes(),
            stats.table_bytes,
            stats.scratch_bytes
        );
    }
    Ok(0)
}

/// The value columns' types: integers for `--value-type int` (and when
/// counting), else floats. Auto reads floats: a column's type is fixed
/// before it is read, and a float holds every integer up to 2^53 exactly
/// (sums of floats are compensated), where an integer column would refuse
/// the first fraction it met.
fn value_types(args: &Args) -> anyhow::Result<Vec<NumberType>> {
    let number_type = match args.value_type {
        _ if args.value.is_empty() => NumberType::Int,
        ValueType::Int => NumberType::Int,
        ValueType::Float | ValueType::Auto => NumberType::Float,
        ValueType::Text => {
            bail!("--value-type text has no typed form; the typed path takes int or float values")
        }
    };
    Ok(vec![number_type; args.value.len().max(1)])
}

/// The names of the output's columns, for a CSV header: `key` (or `key_1`,
/// `key_2`...), then each function's (a repeated one `sum_2`...).
fn column_names(args: &Args) -> Vec<String> {
    let mut names: Vec<String> = if args.key.len() == 1 {
        vec!["key".into()]
    } else {
        (1..=args.key.len()).map(|index| format!("key_{index}")).collect()
    };
    let functions: Vec<&str> = args.function.split('+').map(str::trim).collect();
    for (index, function) in functions.iter().enumerate() {
        let before = functions[..index].iter().filter(|name| *name == function).count();
        names.push(if before == 0 {
            function.to_string()
        } else {
            format!("{function}_{}", before + 1)
        });
    }
    names
}

/// Writes the typed results a group per line, a column per key and
/// function: tab-separated, or (`csv`) comma-separated under a header
/// line, fields quoted where they hold a comma, a quote or a line break.
fn write_typed(
    results: &TypedResults,
    names: &[String],
    out: &mut dyn Write,
    name: &str,
    csv: bool,
    interrupt: &Interrupt,
) -> spillway_core::Result<u64> {
    let separator = if csv { b',' } else { b'\t' };
    let mut line = Vec::with_capacity(256);
    let mut field = Vec::with_capacity(64);
    if csv {
        for (index, column) in names.iter().enumerate() {
            if index > 0 {
                line.push(separator);
            }
            put_field(&mut line, column.as_bytes(), csv);
        }
        line.push(b'\n');
        out.write_all(&line).io_context(|| format!("writing {name}"))?;
    }
    let groups = results.columns.first().map_or(0, |column| column.len());
    for group in 0..groups {
        if (group as u64).is_multiple_of(INTERRUPT_CHECK_RECORDS) {
            interrupt.check()?;
        }
        line.clear();
        for (index, keys) in results.keys.iter().enumerate() {
            if index > 0 {
                line.push(separator);
            }
            let KeyColumn::Bytes { offsets, data } = keys else {
                unreachable!("a file's keys are read as byte strings")
            };
            put_field(
                &mut line,
                &data[offsets[group] as usize..offsets[group + 1] as usize],
                csv,
            );
        }
        for column in &results.columns {
            line.push(separator);
            field.clear();
            format_output(&column.get(group), &mut field);
            line.extend_from_slice(&field);
        }
        line.push(b'\n');
        out.write_all(&line).io_context(|| format!("writing {name}"))?;
    }
    out.flush().io_context(|| format!("writing {name}"))?;
    Ok(groups as u64)
}

/// Appends `bytes` as a field: as they are, or for CSV quoted (quotes
/// doubled) when they hold a comma, a quote or a line break.
fn put_field(line: &mut Vec<u8>, bytes: &[u8], csv: bool) {
    if csv
        && bytes
            .iter()
            .any(|&byte| matches!(byte, b',' | b'"' | b'\n' | b'\r'))
    {
        line.push(b'"');
        for &byte in bytes {
            if byte == b'"' {
                line.push(b'"');
            }
            line.push(byte);
        }
        line.push(b'"');
    } else {
        line.extend_from_slice(bytes);
    }
}

/// Writes the output with `emit` (given the writer, its name for errors
/// and whether it is CSV) to `output` (all or nothing, synced:
/// `scratch::write_staged`), to standard output when there is none,
/// nowhere for `-`; returns what `emit` returns, the number of keys.
fn write_output(
    output: Option<&Path>,
    mut emit: impl FnMut(&mut dyn Write, &str, bool) -> spillway_core::Result<u64>,
) -> anyhow::Result<u64> {
    let csv = output.is_some_and(|path| path.extension().is_some_and(|extension| extension == "csv"));
    Ok(match output {
        Some(path) if path == Path::new("-") => emit(&mut std::io::sink(), "nowhere", false)?,
        Some(path) => {
            scratch::write_staged(path, true, |file| {
                emit(
                    &mut BufWriter::with_capacity(1 << 20, file),
                    &path.display().to_string(),
                    csv,
                )
            })?
            .0
        }
        None => emit(
            &mut BufWriter::new(std::io::stdout().lock()),
            "the results to standard output",
            false,
        )?,
    })
}

/// Writes `key<TAB>result` lines (or CSV: see [`write_typed`]) to `output`
/// as [`write_output`] does; returns the number of keys.
fn write_results(
    aggregator: &Aggregator,
    output: Option<&Path>,
    interrupt: &Interrupt,
) -> anyhow::Result<u64> {
    let mut line = Vec::with_capacity(256);
    write_output(output, |out, name, csv| {
        let mut keys = 0u64;
        if csv {
            out.write_all(b"key,value\n")
                .io_context(|| format!("writing {name}"))?;
        }
        for result in aggregator.iter()? {
            if keys.is_multiple_of(INTERRUPT_CHECK_RECORDS) {
                interrupt.check()?;
            }
            let (key, value) = result?;
            line.clear();
            put_field(&mut line, &key, csv);
            line.push(if csv { b',' } else { b'\t' });
            let start = line.len();
            format_output(&value, &mut line);
            if csv && matches!(value, Output::Bytes(_) | Output::List(_)) {
                let text = line.split_off(start);
                put_field(&mut line, &text, csv);
            }
            line.push(b'\n');
            out.write_all(&line).io_context(|| format!("writing {name}"))?;
            keys += 1;
        }
        out.flush().io_context(|| format!("writing {name}"))?;
        Ok(keys)
    })
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
