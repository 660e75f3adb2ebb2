//! `spillway valsort`: valsort 1.5's command line, on all cores.

use std::path::PathBuf;
use std::time::Instant;

use spillway_core::{Interrupt, RealFs};
use spillway_sort::{validate_path, KeyOrder, ValidateOptions, ValidationReport};

use crate::progress;

/// Validate sorted records (or partition summaries) like valsort 1.5.
///
/// Prints the record count, checksum and duplicate keys to standard error and
/// exits with status 1 when any record is out of order. For partitioned
/// output, write one summary per partition with `-o` and validate their
/// concatenation with `-s`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Compare keys without regard to ASCII case.
    #[arg(short = 'i')]
    case_insensitive: bool,
    /// Quiet: print no diagnostic text.
    #[arg(short = 'q')]
    quiet: bool,
    /// Write a 280-byte partition summary of the validated records to this file.
    #[arg(short = 'o', value_name = "SUMMARY_FILE")]
    summary_file: Option<PathBuf>,
    /// The file holds concatenated partition summaries instead of records.
    #[arg(short = 's')]
    summaries: bool,
    /// Worker threads (0 = all cores).
    #[arg(short = 't', value_name = "N", default_value_t = 0)]
    threads: usize,
    /// Print the bytes validated and the throughput to standard error.
    #[arg(long)]
    stats: bool,
    /// Print a JSON report to standard output.
    #[arg(long)]
    json: bool,
    /// The sort output file or the partition summaries file to validate.
    #[arg(value_name = "FILE_NAME")]
    file: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    let order = if args.case_insensitive {
        KeyOrder::CaseInsensitive
    } else {
        KeyOrder::Bytes
    };
    let started = Instant::now();
    // The bar only shows for records; summary files are small.
    let bytes = if args.summaries {
        0
    } else {
        std::fs::metadata(&args.file).map_or(0, |metadata| metadata.len())
    };
    let bar = progress::bar(bytes, "valsort");
    let options = ValidateOptions {
        threads: args.threads,
        order,
        interrupt: Interrupt::on_signals(),
    };
    let summary = validate_path(
        &RealFs::new(),
        &args.file,
        args.summaries,
        args.summary_file.as_deref(),
        &options,
        &|done| bar.set_position(done),
    )?;
    bar.finish_and_clear();
    let elapsed = started.elapsed();
    if !args.quiet {
        eprint!("{}", summary.report());
    }
    let report = ValidationReport::new(&summary, args.summaries, elapsed.as_secs_f64());
    if args.stats && !args.summaries {
        eprintln!("valsort: {}", progress::throughput(report.bytes, elapsed));
    }
    if args.json {
        println!("{}", serde_json::to_value(&report)?);
    }
    Ok(u8::from(!summary.is_sorted()))
}
