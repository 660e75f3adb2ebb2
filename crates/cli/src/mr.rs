//! `spillway mr`: MapReduce jobs on one node (Themis's phases zero, one
//! and two).

use std::path::PathBuf;
use std::sync::Arc;

use spillway_core::{Interrupt, RealFs};
use spillway_mapreduce::{
    run as run_job, run_pagerank, InputFormat, JobOptions, JobParams, JobReport, JobSpec, OutputFormat,
    PageRankParams, Partitioning,
};

use crate::progress;
use crate::units::parse_count;

/// Run a built-in MapReduce job: every input byte is read once, every
/// intermediate record written and read once, and the output written once.
///
/// Jobs: wordcount, ngram (--n), inverted-index (tsv lines `id<TAB>text`),
/// kmer (--k), grep (--pattern), sort (gensort records), sessionize (tsv
/// lines `user<TAB>time_ms<TAB>url`, --gap), pagerank (edge lines
/// `src<TAB>dst`, --vertices, --iterations).
///
/// The output directory gets one file per partition, `part-NNNNN.tsv`
/// (or `.kv` with `--output-format kv`), in key order across files. A job
/// that fails after its first pass over the input keeps its work in
/// `--tmp`: the same command run again resumes there.
///
/// Example: `spillway mr wordcount corpus/*.txt -o counts --memory 2G`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The job: wordcount, ngram, inverted-index, kmer, grep, sort, sessionize, pagerank.
    job: String,
    /// Input files.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// Output directory (created; must hold no earlier output).
    #[arg(short = 'o', long, value_name = "DIR")]
    output: PathBuf,
    /// Words per n-gram (ngram).
    #[arg(long)]
    n: Option<usize>,
    /// Bytes per k-mer (kmer).
    #[arg(long)]
    k: Option<usize>,
    /// Bytes to look for (grep).
    #[arg(long)]
    pattern: Option<String>,
    /// Longest pause within a session in milliseconds (sessionize).
    #[arg(long, value_name = "MS")]
    gap: Option<u64>,
    /// Vertices in the graph (pagerank).
    #[arg(long)]
    vertices: Option<u64>,
    /// PageRank iterations.
    #[arg(long, default_value_t = 10)]
    iterations: usize,
    /// PageRank damping factor.
    #[arg(long, default_value_t = spillway_mapreduce::DAMPING_DEFAULT)]
    damping: f64,
    /// Input format: text, tsv, csv, gensort or kv (default: the job's).
    #[arg(long, value_name = "FORMAT")]
    format: Option<String>,
    /// Output format: text or kv (binary, readable by `--format kv`).
    #[arg(long, value_name = "FORMAT", default_value = "text")]
    output_format: String,
    /// Memory budget for data buffers (K/M/G suffixes).
    #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = parse_count)]
    memory: u64,
    /// Directory for the partition files (default: beside the output).
    #[arg(long, value_name = "DIR")]
    tmp: Option<PathBuf>,
    /// Partitions (default: chosen from a sample of the input).
    #[arg(long, value_name = "N", default_value_t = 0)]
    partitions: usize,
    /// range (ordered output) or hash.
    #[arg(long, default_value = "range")]
    partitioning: String,
    /// Bytes of input per block (default: a 32nd of --memory, at most 32M).
    #[arg(long, value_name = "SIZE", default_value = "0", value_parser = parse_count)]
    block_size: u64,
    /// Mapper and reducer threads (0 = all cores).
    #[arg(short = 't', long, value_name = "N", default_value_t = 0)]
    threads: usize,
    /// Do not fdatasync the partition files and the output.
    #[arg(long)]
    no_sync: bool,
    /// Print the report as JSON to standard output instead of text to standard error.
    #[arg(long)]
    json: bool,
}

/// The job named on the command line, with its parameters.
fn job_spec(args: &Args) -> spillway_core::Result<JobSpec> {
    let params = JobParams {
        n: args.n,
        k: args.k,
        pattern: args.pattern.clone(),
        gap_ms: args.gap,
        vertices: args.vertices,
        damping: Some(args.damping),
    };
    JobSpec::named(&args.job, &params)
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    let spec = job_spec(&args)?;
    let tmp = args
        .tmp
        .clone()
        .unwrap_or_else(|| spillway_core::fs::parent_directory(&args.output).to_path_buf());
    let options = JobOptions {
        memory_bytes: args.memory,
        threads: args.threads,
        partitions: args.partitions,
        partitioning: Partitioning::parse(&args.partitioning)?,
        input_format: args.format.as_deref().map(InputFormat::parse).transpose()?,
        output_format: OutputFormat::parse(&args.output_format)?,
        block_bytes: args.block_size,
        sync: !args.no_sync,
        interrupt: Interrupt::on_signals(),
        ..JobOptions::new(tmp)
    };
    let bars = progress::PhaseBars::default();
    let progress_bars = bars.clone();
    let progress: spillway_mapreduce::Progress =
        Arc::new(move |phase: &str, done: u64, total: u64| progress_bars.update("mr", phase, done, total));
    let fs = Arc::new(RealFs::new());
    let reports = match spec {
        JobSpec::PageRank { vertices, damping } => {
            let params = PageRankParams {
                vertices,
                damping,
                iterations: args.iterations,
            };
            run_pagerank(fs, &args.inputs, &args.output, params, &options, &progress)?
        }
        spec => vec![run_job(
            fs,
            spec.build()?,
            &args.inputs,
            &args.output,
            &options,
            &progress,
        )?],
    };
    bars.finish();
    if args.json {
        match reports.as_slice() {
            [report] => println!("{}", serde_json::to_string(report)?),
            reports => println!("{}", serde_json::to_string(reports)?),
        }
    } else {
        for report in &reports {
            eprint!("{}", describe(report));
        }
    }
    Ok(0)
}

/// The final report: throughput, the data at each step, what was out of
/// the ordinary, and the stage tables.
fn describe(report: &JobReport) -> String {
    let per_input = |bytes: u64| bytes as f64 / report.input_bytes.max(1) as f64;
    let mut text = progress::swept(&report.swept_files);
    text += &format!(
        "{}: {}; {} partitions ({})\n",
        report.job,
        progress::throughput(report.input_bytes, report.elapsed),
        report.partitions,
        match report.partitioner {
            spillway_mapreduce::Partitioner::Range { .. } => "range",
            spillway_mapreduce::Partitioner::Hash { .. } => "hash",
            spillway_mapreduce::Partitioner::Job { .. } => "the job's own",
        }
    );
    text += &format!(
        "records: {} read, {} mapped, {} shuffled ({} bytes), {} written ({} bytes)\n",
        report.input_records,
        report.map_records,
        report.intermediate_records,
        report.intermediate_bytes,
        report.output_records,
        report.output_bytes
    );
    if let Some(io) = &report.io {
        text += &format!(
            "I/O over input size: read {:.2}, written {:.2} (files)\n",
            per_input(io.rchar),
            per_input(io.wchar)
        );
    }
    if report.resumed {
        text += "resumed at phase two: the partition files of an earlier run were kept\n";
    }
    for note in &report.notes {
        text += &format!("note: {note}\n");
    }
    for phase in &report.phases {
        text += &format!("\n{}", phase.table());
    }
    text
}
