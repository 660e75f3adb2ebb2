//! `spillway sort`: the 2-IO external sort of gensort records.

use std::path::PathBuf;
use std::sync::Arc;

use spillway_core::fs::parent_directory;
use spillway_core::{Interrupt, RealFs};
use spillway_sort::{sort_file, SortMode, SortOptions, SortReport};

use crate::progress;
use crate::units::parse_count;

/// Sort 100-byte gensort records by their 10-byte keys, in exactly two passes
/// over the disk (one when the input fits in memory).
///
/// Example: `spillway sort input.dat sorted.dat --memory 4G --tmp /scratch`,
/// then `spillway valsort sorted.dat`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// File of 100-byte records (gensort binary or ASCII).
    input: PathBuf,
    /// Where to write the sorted records (replaced only when complete).
    output: PathBuf,
    /// Memory budget for data buffers (K/M/G/T suffixes, binary units).
    #[arg(long, value_name = "SIZE", default_value = "4G", value_parser = parse_count)]
    memory: u64,
    /// Directory for intermediate partition files (default: beside the output).
    #[arg(long, value_name = "DIR")]
    tmp: Option<PathBuf>,
    /// The input is gensort ASCII (-a) data: check that every record ends with CRLF.
    #[arg(long)]
    ascii: bool,
    /// Write OUTPUT as a directory of ordered partition files (part-NNNNN.dat),
    /// each with its valsort summary (.sum), and all.sum written last for
    /// `spillway valsort -s`.
    #[arg(long)]
    partitioned: bool,
    /// Read the input and the partition files with O_DIRECT (bypassing the page cache).
    #[arg(long)]
    direct: bool,
    /// Number of partitions (default: chosen from the memory budget).
    #[arg(long, value_name = "N", default_value_t = 0)]
    partitions: usize,
    /// Worker threads (0 = all cores).
    #[arg(short = 't', long, value_name = "N", default_value_t = 0)]
    threads: usize,
    /// Do not fdatasync the output before renaming it into place.
    #[arg(long)]
    no_sync: bool,
    /// Print the report as JSON to standard output instead of text to standard error.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    let tmp = args
        .tmp
        .clone()
        .unwrap_or_else(|| parent_directory(&args.output).to_path_buf());
    let options = SortOptions {
        memory_bytes: args.memory,
        tmp_dir: tmp,
        partitions: args.partitions,
        threads: args.threads,
        sync: !args.no_sync,
        partitioned_output: args.partitioned,
        direct_io: args.direct,
        ascii: args.ascii,
        interrupt: Interrupt::on_signals(),
    };
    let bars = progress::PhaseBars::default();
    let progress_bars = bars.clone();
    let report = sort_file(
        Arc::new(RealFs::new()),
        &args.input,
        &args.output,
        &options,
        Arc::new(move |phase: &str, done: u64, total: u64| progress_bars.update("sort", phase, done, total)),
    )?;
    bars.finish();
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        eprint!("{}", describe(&report));
    }
    Ok(0)
}

/// The final report: throughput, the passes over the disk, and the stage tables.
fn describe(report: &SortReport) -> String {
    let mode = match report.mode {
        SortMode::InMemory => "in memory (one read, one write)",
        SortMode::TwoPass => "two passes through temporary partitions",
    };
    let per_input = |bytes: u64| bytes as f64 / report.input_bytes.max(1) as f64;
    let mut text = progress::swept(&report.swept_files);
    text += &format!(
        "sort: {} records, {}; {mode}, {} partitions (largest {} bytes)\n",
        report.records,
        progress::throughput(report.input_bytes, report.elapsed),
        report.partitions,
        report.partition_bytes_max,
    );
    text += &format!(
        "I/O over input size: read {:.2}, written {:.2} (files); device read {:.2}, device written {:.2}\n",
        per_input(report.logical_read_bytes),
        per_input(report.logical_write_bytes),
        per_input(report.device_read_bytes),
        per_input(report.device_write_bytes),
    );
    if !report.output_files.is_empty() {
        text += &format!(
            "output: {} partition files with summaries; validate with `spillway valsort -s {}`\n",
            report.output_files.len(),
            report.output_files[0].with_file_name("all.sum").display()
        );
    }
    for phase in &report.phases {
        text += &format!("\n{}", phase.table());
    }
    text
}
