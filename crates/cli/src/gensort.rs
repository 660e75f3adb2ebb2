//! `spillway gensort`: gensort 1.5's command line, on all cores.

use spillway_core::{Interrupt, RealFs};
use std::path::PathBuf;

use spillway_sort::{
    format_checksum, generate_file, GenerateReport, GenerateSpec, RecordFormat, WriteOptions, RECORD_BYTES,
};

use crate::progress;

/// Generate sort benchmark input, byte-identical to gensort 1.5.
///
/// Example: `spillway gensort -c -b2000 1000 partition2` writes records
/// 2000..3000 to `partition2` and prints their checksum to standard error.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Generate ASCII records (printable keys and payload, CRLF-terminated).
    #[arg(short = 'a')]
    ascii: bool,
    /// Print the sum of the records' CRC-32s to standard error.
    #[arg(short = 'c')]
    checksum: bool,
    /// Number of the first record generated.
    #[arg(short = 'b', value_name = "STARTING_REC_NUM", default_value_t = 0)]
    start: u128,
    /// Generate records with skewed keys.
    #[arg(short = 's')]
    skew: bool,
    /// Worker threads (0 = all cores).
    #[arg(short = 't', value_name = "N", default_value_t = 0)]
    threads: usize,
    /// Do not fdatasync the output before exiting.
    #[arg(long)]
    no_sync: bool,
    /// Print the records written and the throughput to standard error.
    #[arg(long)]
    stats: bool,
    /// Print a JSON report to standard output.
    #[arg(long)]
    json: bool,
    /// The number of sequential records to generate.
    #[arg(value_name = "NUM_RECS")]
    records: u64,
    /// The file to write the records to (`/dev/null` generates without writing).
    #[arg(value_name = "FILE_NAME")]
    file: PathBuf,
}

/// The `--json` report: the library's, and the file written.
#[derive(serde::Serialize)]
struct Report<'a> {
    #[serde(flatten)]
    report: &'a GenerateReport,
    file: std::borrow::Cow<'a, str>,
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    let spec = GenerateSpec {
        format: if args.ascii {
            RecordFormat::Ascii
        } else {
            RecordFormat::Binary
        },
        skewed: args.skew,
        start_record: args.start,
        records: args.records,
    };
    let options = WriteOptions {
        threads: args.threads,
        checksum: args.checksum || args.json,
        sync: !args.no_sync,
        interrupt: Interrupt::on_signals(),
    };
    let bar = progress::bar(spec.bytes()?, "gensort");
    let report = generate_file(&RealFs::new(), &args.file, &spec, &options, &|records| {
        bar.set_position(records * RECORD_BYTES as u64)
    })?;
    bar.finish_and_clear();
    if let (true, Some(checksum)) = (args.checksum, report.checksum) {
        eprintln!("{}", format_checksum(checksum));
    }
    if args.stats {
        eprintln!(
            "gensort: {} records, {}, {} threads",
            report.records,
            progress::throughput(report.bytes, report.elapsed),
            report.threads
        );
    }
    if args.json {
        let json = serde_json::to_value(Report {
            report: &report,
            file: args.file.to_string_lossy(),
        })?;
        println!("{json}");
    }
    Ok(0)
}
