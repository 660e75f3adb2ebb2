//! The `spillway` command line. Each subcommand lives in its own module,
//! translates arguments into an engine call and prints the result; no engine
//! logic lives here. It is a library so that the Python package can expose the
//! same command (`spillway` installed by pip runs [`main_with_args`]).

use std::ffi::OsString;

use clap::{Parser, Subcommand};
use spillway_core::interrupt;

mod agg;
mod gensort;
mod knn;
mod kv;
mod mr;
mod pmem;
mod progress;
mod sort;
mod stream;
mod units;
mod valsort;
mod workload;

/// Spillway: write-heavy analytics on one machine and on a cluster.
#[derive(Debug, Parser)]
#[command(name = "spillway", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate sort benchmark input, byte-identical to gensort 1.5.
    Gensort(gensort::Args),
    /// Validate sorted records or partition summaries like valsort 1.5.
    Valsort(valsort::Args),
    /// Sort gensort records in two passes over the disk (one when they fit in memory).
    Sort(sort::Args),
    /// Generate benchmark workloads (key-value operations, text, graphs, click logs).
    Gen(workload::Args),
    /// Aggregate values by key (GroupBy-Aggregate) with the CBT or a hash table.
    Agg(agg::Args),
    /// A stream index: ingest (key, time, value) records, query key and time ranges.
    Stream(stream::Args),
    /// A WB Tree key-value store: load, get, scan, stats, verify, dump.
    Kv(kv::Args),
    /// An exact kNN index (SS-tree) over .npy points: build, query, verify, stats.
    Knn(knn::Args),
    /// Run a MapReduce job (word count, n-grams, inverted index, PageRank, ...).
    Mr(mr::Args),
    /// A CCEH persistent hash table in a region file: bench, crashtest, verify.
    Pmem(pmem::Args),
}

/// Runs the command line `arguments` (the first is the program name) and
/// returns the process exit status: 0 on success, 1 on failure (valsort's
/// unordered records included), 2 for a command line clap rejects, 130 or
/// 143 for work stopped by SIGINT (Ctrl-C) or SIGTERM, after it removed its
/// temporary files and partial outputs.
pub fn main_with_args(arguments: impl IntoIterator<Item = OsString>) -> u8 {
    let cli = match Cli::try_parse_from(arguments) {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return error.exit_code() as u8;
        }
    };
    if let Err(error) = interrupt::install_signal_handlers() {
        eprintln!("spillway: {error}");
        return 1;
    }
    let outcome = match cli.command {
        Command::Gensort(args) => gensort::run(args),
        Command::Valsort(args) => valsort::run(args),
        Command::Sort(args) => sort::run(args),
        Command::Gen(args) => workload::run(args),
        Command::Agg(args) => agg::run(args),
        Command::Stream(args) => stream::run(args),
        Command::Kv(args) => kv::run(args),
        Command::Knn(args) => knn::run(args),
        Command::Mr(args) => mr::run(args),
        Command::Pmem(args) => pmem::run(args),
    };
    match outcome {
        Ok(code) => code,
        Err(error) => {
            eprintln!("spillway: {}", describe_error(&error));
            match interrupt::received_signal() {
                Some(signal) if is_interrupted(&error) => interrupt::exit_status(signal),
                _ => 1,
            }
        }
    }
}

/// Whether `error` is work stopped by an interrupt.
fn is_interrupted(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<spillway_core::Error>()
            .is_some_and(|error| error.kind() == spillway_core::ErrorKind::Interrupted)
    })
}

/// The error and its causes on one line, each cause once: engine errors
/// already include their operating-system cause in their own message.
fn describe_error(error: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if !message.contains(&text) {
            if !message.is_empty() {
                message.push_str(": ");
            }
            message.push_str(&text);
        }
    }
    message
}
