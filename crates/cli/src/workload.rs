//! `spillway gen`: the benchmark workload generators of `spillway-workload`.
//!
//! ```text
//! spillway gen kv --preset fillrandom --ops 1M --key-bytes 16 --value-bytes 100 --keys 1M \
//!     --distribution uniform|zipfian|sequential [--zipf-s 0.99] [--mix put=90,get=10] \
//!     [--format text|binary] --seed 42 -o ops.txt
//! spillway gen text --bytes 1G --vocabulary 100000 --zipf-s 1.0 --seed 42 -o words.txt
//! spillway gen rmat --scale 20 --edge-factor 16 [--binary] --seed 42 -o graph.tsv
//! spillway gen clicks --users 100K --clicks 10M --seed 42 -o clicks.tsv
//! ```
//!
//! Counts and sizes take binary suffixes: `K` = 2^10, `M` = 2^20, `G` = 2^30,
//! `T` = 2^40 (`1M` operations are 1 048 576). `-o -` writes to standard
//! output. At the end a one-line summary (records, bytes, seconds, MB/s with
//! MB = 10^6 bytes, and the generator's ground truth) goes to standard error,
//! or, with `--json`, a JSON object with the same fields to standard output.
//! Output formats are documented in `crates/workload/DESIGN.md`.

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Instant;

use crate::units::parse_count;
use anyhow::{bail, Context};
use clap::{Subcommand, ValueEnum};
use serde_json::{Map, Value};
use spillway_workload::{
    write_clicks, write_kv, write_rmat, write_text, ClickParams, EdgeFormat, KeyDistribution, KvFormat,
    KvParams, OperationMix, Preset, RmatParams, TextParams, TextSize, DEFAULT_SEED,
};

/// Generate benchmark workloads: key-value operations, Zipf text, R-MAT
/// graphs and click logs, deterministic from `--seed`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    generator: Generator,
}

#[derive(Debug, Subcommand)]
enum Generator {
    /// db_bench-style key-value operations (text: `PUT\t<key hex>\t<value hex>` lines).
    Kv(KvArgs),
    /// Zipf-distributed words in lines, for word count and n-gram benchmarks.
    Text(TextArgs),
    /// R-MAT graph edges (`src\tdst` lines, or little-endian u64 pairs).
    Rmat(RmatArgs),
    /// Click logs (`user\ttimestamp_ms\turl` lines) with a known session count.
    Clicks(ClickArgs),
}

/// Where the data goes and how the run is reported; shared by every generator.
#[derive(Debug, clap::Args)]
struct OutputArgs {
    /// File to write; `-` writes to standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: PathBuf,
    /// Seed of every random draw: the same seed and flags give the same bytes.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    seed: u64,
    /// Print the summary as JSON to standard output (needs `-o FILE`).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum DistributionArg {
    Sequential,
    Uniform,
    Zipfian,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum KvFormatArg {
    /// `KIND\t<key hex>[\t<value hex>]` lines.
    Text,
    /// Per operation: kind u8, key length u32 LE, value length u32 LE, key, value.
    Binary,
}

#[derive(Debug, clap::Args)]
struct KvArgs {
    /// db_bench benchmark to imitate: fillseq, fillrandom, overwrite, readrandom,
    /// readwhilewriting, deleterandom, mergerandom.
    #[arg(long, default_value = "fillrandom", value_parser = parse_preset)]
    preset: Preset,
    /// Operations to generate.
    #[arg(long, value_name = "N", default_value = "1000000", value_parser = parse_count)]
    ops: u64,
    /// Bytes per key (fixed width: big-endian key number, then '0' padding).
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=65536))]
    key_bytes: u64,
    /// Bytes per put or merge value.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = parse_value_bytes)]
    value_bytes: u64,
    /// Key space size (default: --ops).
    #[arg(long, value_name = "N", value_parser = parse_count)]
    keys: Option<u64>,
    /// Key distribution (default: the preset's, sequential for fillseq, else uniform).
    #[arg(long, value_enum)]
    distribution: Option<DistributionArg>,
    /// Zipf exponent for --distribution zipfian (default 0.99).
    #[arg(long, value_name = "S", allow_negative_numbers = true, value_parser = parse_positive)]
    zipf_s: Option<f64>,
    /// Keep Zipf rank 1 at key 0 instead of scattering hot keys over the key space.
    #[arg(long)]
    no_scramble: bool,
    /// Operation mix overriding the preset's, e.g. put=50,get=50.
    #[arg(long, value_name = "KIND=PERCENT,...", value_parser = parse_mix)]
    mix: Option<OperationMix>,
    /// Compressed/raw size target of values, in (0, 1] (db_bench's compression_ratio).
    #[arg(long, value_name = "R", default_value_t = 0.5, allow_negative_numbers = true, value_parser = parse_ratio)]
    compression_ratio: f64,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: KvFormatArg,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("size").required(true).args(["bytes", "lines"])))]
struct TextArgs {
    /// Bytes to generate (at least; output ends at the next line end).
    #[arg(long, value_name = "SIZE", value_parser = parse_count)]
    bytes: Option<u64>,
    /// Lines to generate (exactly).
    #[arg(long, value_name = "N", value_parser = parse_count)]
    lines: Option<u64>,
    /// Words in the vocabulary.
    #[arg(long, value_name = "N", default_value = "100000", value_parser = parse_count)]
    vocabulary: u64,
    /// Zipf exponent over word ranks.
    #[arg(long, value_name = "S", default_value_t = 1.0, allow_negative_numbers = true, value_parser = parse_positive)]
    zipf_s: f64,
    /// Words per line.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=65536))]
    words_per_line: u32,
    /// Worker threads (0 = all cores); the output does not depend on it.
    #[arg(long, value_name = "N", default_value_t = 0)]
    threads: usize,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Debug, clap::Args)]
struct RmatArgs {
    /// log2 of the vertex count.
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=48))]
    scale: u32,
    /// Edges per vertex.
    #[arg(long, value_name = "N", default_value = "16", value_parser = parse_count)]
    edge_factor: u64,
    /// Probability of the top-left quadrant.
    #[arg(long = "a", value_name = "P", default_value_t = 0.57, allow_negative_numbers = true, value_parser = parse_probability)]
    a: f64,
    /// Probability of the top-right quadrant.
    #[arg(long = "b", value_name = "P", default_value_t = 0.19, allow_negative_numbers = true, value_parser = parse_probability)]
    b: f64,
    /// Probability of the bottom-left quadrant (d = 1 - a - b - c).
    #[arg(long = "c", value_name = "P", default_value_t = 0.19, allow_negative_numbers = true, value_parser = parse_probability)]
    c: f64,
    /// Keep R-MAT's vertex ids (hubs near 0) instead of permuting them.
    #[arg(long)]
    no_permute: bool,
    /// Write little-endian u64 pairs instead of `src\tdst` lines.
    #[arg(long)]
    binary: bool,
    /// Worker threads (0 = all cores); the output does not depend on it.
    #[arg(long, value_name = "N", default_value_t = 0)]
    threads: usize,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Debug, clap::Args)]
struct ClickArgs {
    /// Users (ids 0..N).
    #[arg(long, value_name = "N", default_value = "100000", value_parser = parse_count)]
    users: u64,
    /// Clicks to generate.
    #[arg(long, value_name = "N", default_value = "1000000", value_parser = parse_count)]
    clicks: u64,
    /// Zipf exponent of session arrivals over users.
    #[arg(long, value_name = "S", default_value_t = 1.0, allow_negative_numbers = true, value_parser = parse_positive)]
    user_zipf_s: f64,
    /// Keep the most active user at id 0 instead of scattering hot users.
    #[arg(long)]
    no_scramble: bool,
    /// Distinct URLs.
    #[arg(long, value_name = "N", default_value = "10000", value_parser = parse_count)]
    urls: u64,
    /// Zipf exponent over URLs.
    #[arg(long, value_name = "S", default_value_t = 1.0, allow_negative_numbers = true, value_parser = parse_positive)]
    url_zipf_s: f64,
    /// Mean clicks a session arrival brings (>= 1).
    #[arg(long, value_name = "N", default_value_t = 8.0, allow_negative_numbers = true, value_parser = parse_at_least_one)]
    clicks_per_session: f64,
    /// Mean gap between a session's clicks, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 20_000.0, allow_negative_numbers = true, value_parser = parse_positive)]
    click_gap_ms: f64,
    /// Inactivity that ends a session, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1_800_000, value_parser = clap::value_parser!(u64).range(1..))]
    session_timeout_ms: u64,
    /// Mean gap between session arrivals over all users, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 100.0, allow_negative_numbers = true, value_parser = parse_positive)]
    arrival_gap_ms: f64,
    /// Timestamp of the first click, in milliseconds since the Unix epoch.
    #[arg(long, value_name = "MS", default_value_t = 1_600_000_000_000)]
    start_ms: u64,
    #[command(flatten)]
    output: OutputArgs,
}

/// The summary of one generator run: what was generated and the generator's
/// ground truth (see [`generate`]).
pub type Report = Map<String, Value>;

/// Runs `spillway gen <generator>` and prints its summary.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let json = match &args.generator {
        Generator::Kv(kv) => kv.output.json,
        Generator::Text(text) => text.output.json,
        Generator::Rmat(rmat) => rmat.output.json,
        Generator::Clicks(clicks) => clicks.output.json,
    };
    if let Some(report) = summarize(args)? {
        print_report(&report, json);
    }
    Ok(0)
}

/// Runs a generator from the arguments of `spillway gen` (without
/// `spillway gen`, e.g. `["text", "--bytes", "1M", "-o", "words.txt"]`)
/// and returns its summary instead of printing it: the Python package's
/// `spillway.workload` functions call this, so flags, defaults and error
/// messages are the command's.
pub fn generate_with_arguments(arguments: Vec<std::ffi::OsString>) -> anyhow::Result<Report> {
    #[derive(Debug, clap::Parser)]
    #[command(name = "spillway gen", no_binary_name = true)]
    struct Gen {
        #[command(flatten)]
        args: Args,
    }
    let parsed = <Gen as clap::Parser>::try_parse_from(arguments).map_err(|error| {
        // clap's text ends with a hint to run --help, which a library caller cannot.
        let text = error.to_string();
        let message = text.split("\n\nFor more information").next().unwrap_or(&text);
        anyhow::anyhow!("{}", message.trim_end())
    })?;
    summarize(parsed.args)?.context("the generator wrote to standard output, which was closed")
}

fn summarize(args: Args) -> anyhow::Result<Option<Report>> {
    match args.generator {
        Generator::Kv(kv) => run_kv(kv),
        Generator::Text(text) => run_text(text),
        Generator::Rmat(rmat) => run_rmat(rmat),
        Generator::Clicks(clicks) => run_clicks(clicks),
    }
}

fn run_kv(args: KvArgs) -> anyhow::Result<Option<Report>> {
    let mut params = KvParams::preset(args.preset, args.ops);
    params.key_bytes = args.key_bytes as usize;
    params.value_bytes = args.value_bytes as usize;
    params.key_count = args.keys.unwrap_or(args.ops.max(1));
    if params.key_count == 0 {
        bail!("--keys must be at least 1, got 0");
    }
    if params.key_bytes < 8 && params.key_count > 1u64 << (8 * params.key_bytes) {
        bail!(
            "--keys {} does not fit in --key-bytes {} (at most {} keys)",
            params.key_count,
            params.key_bytes,
            1u64 << (8 * params.key_bytes)
        );
    }
    let scrambled = !args.no_scramble;
    params.distribution = match args.distribution {
        Some(DistributionArg::Sequential) => KeyDistribution::Sequential,
        Some(DistributionArg::Uniform) => KeyDistribution::Uniform,
        Some(DistributionArg::Zipfian) => KeyDistribution::Zipfian {
            exponent: args.zipf_s.unwrap_or(0.99),
            scrambled,
        },
        None => params.distribution,
    };
    if args.zipf_s.is_some() && !matches!(params.distribution, KeyDistribution::Zipfian { .. }) {
        bail!(
            "--zipf-s applies to --distribution zipfian, but the distribution is {}",
            params.distribution.name()
        );
    }
    if let Some(mix) = args.mix {
        params.mix = mix;
    }
    params.compression_ratio = args.compression_ratio;
    params.seed = args.output.seed;
    let format = match args.format {
        KvFormatArg::Text => KvFormat::Text,
        KvFormatArg::Binary => KvFormat::Binary,
    };
    generate("kv", &args.output, |writer| {
        Ok(serde_json::to_value(write_kv(&params, format, writer)?)?)
    })
}

fn run_text(args: TextArgs) -> anyhow::Result<Option<Report>> {
    let params = TextParams {
        size: match (args.bytes, args.lines) {
            (Some(bytes), _) => TextSize::Bytes(bytes),
            (None, Some(lines)) => TextSize::Lines(lines),
            (None, None) => bail!("one of --bytes and --lines is required"),
        },
        vocabulary_words: args.vocabulary,
        zipf_exponent: args.zipf_s,
        words_per_line: args.words_per_line,
        threads: spillway_core::worker_threads(args.threads),
        seed: args.output.seed,
    };
    if !(1..=spillway_workload::text::VOCABULARY_WORDS_MAX).contains(&params.vocabulary_words) {
        bail!(
            "--vocabulary must be in 1..={}, got {}",
            spillway_workload::text::VOCABULARY_WORDS_MAX,
            params.vocabulary_words
        );
    }
    generate("text", &args.output, |writer| {
        Ok(serde_json::to_value(write_text(&params, writer)?)?)
    })
}

fn run_rmat(args: RmatArgs) -> anyhow::Result<Option<Report>> {
    let params = RmatParams {
        scale: args.scale,
        edge_factor: args.edge_factor,
        a: args.a,
        b: args.b,
        c: args.c,
        permute: !args.no_permute,
        threads: spillway_core::worker_threads(args.threads),
        seed: args.output.seed,
    };
    if params.edge_factor == 0 {
        bail!("--edge-factor must be at least 1, got 0");
    }
    if params.a + params.b + params.c > 1.0 + 1e-9 {
        bail!(
            "--a + --b + --c must be at most 1 (d = 1 - a - b - c), got {} + {} + {} = {:.6}",
            params.a,
            params.b,
            params.c,
            params.a + params.b + params.c
        );
    }
    let format = if args.binary {
        EdgeFormat::Binary
    } else {
        EdgeFormat::Text
    };
    generate("rmat", &args.output, |writer| {
        Ok(serde_json::to_value(write_rmat(&params, format, writer)?)?)
    })
}

fn run_clicks(args: ClickArgs) -> anyhow::Result<Option<Report>> {
    let params = ClickParams {
        users: args.users,
        clicks: args.clicks,
        user_zipf_exponent: args.user_zipf_s,
        scramble_users: !args.no_scramble,
        urls: args.urls,
        url_zipf_exponent: args.url_zipf_s,
        mean_clicks_per_session: args.clicks_per_session,
        mean_click_gap_ms: args.click_gap_ms,
        session_timeout_ms: args.session_timeout_ms,
        mean_session_arrival_gap_ms: args.arrival_gap_ms,
        start_timestamp_ms: args.start_ms,
        seed: args.output.seed,
    };
    if params.users == 0 {
        bail!("--users must be at least 1, got 0");
    }
    if !(1..=spillway_workload::clicks::URLS_MAX).contains(&params.urls) {
        bail!(
            "--urls must be in 1..={}, got {}",
            spillway_workload::clicks::URLS_MAX,
            params.urls
        );
    }
    generate("clicks", &args.output, |writer| {
        Ok(serde_json::to_value(write_clicks(&params, writer)?)?)
    })
}

/// Opens the output, runs `write` on it and reports. `write` returns the
/// generator's summary as a JSON object with at least `records` and `bytes`.
fn generate(
    generator: &str,
    output: &OutputArgs,
    write: impl FnOnce(&mut dyn Write) -> anyhow::Result<Value>,
) -> anyhow::Result<Option<Report>> {
    let to_stdout = output.output.as_os_str() == "-";
    if to_stdout && output.json {
        bail!("--json needs -o FILE: with -o - standard output carries the generated data");
    }
    let started = Instant::now();
    let outcome = if to_stdout {
        write(&mut io::stdout().lock())
    } else {
        let mut file = File::create(&output.output)
            .with_context(|| format!("creating output file {}", output.output.display()))?;
        write(&mut file)
    };
    let summary = match outcome {
        Ok(summary) => summary,
        // A reader that stops early (`| head`) is not an error of ours.
        Err(error) if to_stdout && is_broken_pipe(&error) => return Ok(None),
        Err(error) => return Err(error),
    };
    let seconds = started.elapsed().as_secs_f64();
    let Value::Object(fields) = summary else {
        bail!("internal error: the {generator} summary is not a JSON object");
    };
    let bytes = fields.get("bytes").and_then(Value::as_u64).unwrap_or(0);
    let megabytes_per_second = if seconds > 0.0 {
        bytes as f64 / seconds / 1e6
    } else {
        0.0
    };
    let mut report = Map::new();
    report.insert("generator".into(), generator.into());
    report.insert("output".into(), output.output.display().to_string().into());
    report.insert("seed".into(), output.seed.into());
    report.extend(fields);
    report.insert("seconds".into(), seconds.into());
    report.insert("mb_per_s".into(), megabytes_per_second.into());
    Ok(Some(report))
}

/// Prints a report: JSON on standard output, or one line on standard error.
fn print_report(report: &Report, json: bool) {
    if json {
        println!("{}", Value::Object(report.clone()));
        return;
    }
    let number = |name: &str| report.get(name).and_then(Value::as_f64).unwrap_or(0.0);
    let truths: Vec<String> = report
        .iter()
        .filter(|(name, _)| {
            ![
                "generator",
                "output",
                "seed",
                "records",
                "bytes",
                "seconds",
                "mb_per_s",
            ]
            .contains(&name.as_str())
        })
        .map(|(name, value)| format!("{name} {value}"))
        .collect();
    eprintln!(
        "gen {}: {} records, {} bytes in {:.3} s ({:.1} MB/s); {}",
        report.get("generator").and_then(Value::as_str).unwrap_or("?"),
        number("records"),
        number("bytes"),
        number("seconds"),
        number("mb_per_s"),
        truths.join(", ")
    );
}

fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error
        .chain()
        .any(|cause| match cause.downcast_ref::<spillway_core::Error>() {
            Some(spillway_core::Error::Io { source, .. }) => source.kind() == io::ErrorKind::BrokenPipe,
            _ => cause
                .downcast_ref::<io::Error>()
                .is_some_and(|error| error.kind() == io::ErrorKind::BrokenPipe),
        })
}

fn parse_value_bytes(text: &str) -> Result<u64, String> {
    let value = parse_count(text)?;
    let max = spillway_workload::kv::VALUE_BYTES_MAX as u64;
    if value > max {
        return Err(format!("must be at most {max}, got {value}"));
    }
    Ok(value)
}

fn parse_float(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("expected a number, got {text:?}"))?;
    if !value.is_finite() {
        return Err(format!("must be a finite number, got {text}"));
    }
    Ok(value)
}

fn parse_positive(text: &str) -> Result<f64, String> {
    let value = parse_float(text)?;
    if value <= 0.0 {
        return Err(format!("must be > 0, got {value}"));
    }
    Ok(value)
}

fn parse_at_least_one(text: &str) -> Result<f64, String> {
    let value = parse_float(text)?;
    if value < 1.0 {
        return Err(format!("must be >= 1, got {value}"));
    }
    Ok(value)
}

fn parse_ratio(text: &str) -> Result<f64, String> {
    let value = parse_float(text)?;
    if !(value > 0.0 && value <= 1.0) {
        return Err(format!("must be in (0, 1], got {value}"));
    }
    Ok(value)
}

fn parse_probability(text: &str) -> Result<f64, String> {
    let value = parse_float(text)?;
    if !(0.0..=1.0).contains(&value) {
        return Err(format!("must be in [0, 1], got {value}"));
    }
    Ok(value)
}

fn parse_preset(text: &str) -> Result<Preset, String> {
    text.parse()
        .map_err(|error: spillway_core::Error| strip_kind(&error))
}

fn parse_mix(text: &str) -> Result<OperationMix, String> {
    text.parse()
        .map_err(|error: spillway_core::Error| strip_kind(&error))
}

/// The library's message without the "invalid argument: " prefix, which
/// clap's own "invalid value" wording already says.
fn strip_kind(error: &spillway_core::Error) -> String {
    let message = error.to_string();
    message
        .strip_prefix("invalid argument: ")
        .map_or(message.clone(), str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_flags_check_their_ranges() {
        assert_eq!(parse_positive("-1"), Err("must be > 0, got -1".to_string()));
        assert_eq!(parse_positive("0.99"), Ok(0.99));
        assert!(parse_positive("nan").is_err());
        assert!(parse_ratio("0").is_err() && parse_ratio("1").is_ok());
        assert!(parse_probability("1.01").is_err() && parse_probability("0").is_ok());
        assert!(parse_at_least_one("0.5").is_err());
        assert!(parse_preset("fillrandom").is_ok());
        assert!(parse_preset("nope").unwrap_err().starts_with("unknown preset"));
    }
}
