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
//!
//! Flags are parsed here; the library checks them (`validate` of each
//! parameter struct) before any output is created, writes the file all or
//! nothing ([`generate_to`]) and names the flag of a parameter error
//! ([`with_option_names`]).

use std::path::PathBuf;

use crate::units::{parse_count, parse_text};
use anyhow::{bail, Context};
use clap::Subcommand;
use serde::Serialize;
use serde_json::Value;
use spillway_core::Interrupt;
use spillway_workload::{
    generate_to, with_option_names, write_clicks, write_kv, write_rmat, write_text, ClickParams,
    DistributionName, EdgeFormat, Generated, KvFormat, KvOptions, OperationMix, Preset, RmatParams,
    TextParams, TextSize, Written, DEFAULT_SEED, THREADS_DEFAULT,
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

#[derive(Debug, clap::Args)]
struct KvArgs {
    /// db_bench benchmark to imitate: fillseq, fillrandom, overwrite, readrandom,
    /// readwhilewriting, deleterandom, mergerandom.
    #[arg(long, default_value_t = KvOptions::default().preset, value_parser = parse_text::<Preset>)]
    preset: Preset,
    /// Operations to generate.
    #[arg(long, value_name = "N", default_value_t = KvOptions::default().operations, value_parser = parse_count)]
    ops: u64,
    /// Bytes per key, 1..=65536 (fixed width: big-endian key number, then '0' padding).
    #[arg(long, value_name = "N", default_value_t = KvOptions::default().key_bytes)]
    key_bytes: usize,
    /// Bytes per put or merge value, at most 64M.
    #[arg(long, value_name = "N", default_value_t = KvOptions::default().value_bytes, value_parser = parse_count)]
    value_bytes: u64,
    /// Key space size (default: --ops).
    #[arg(long, value_name = "N", value_parser = parse_count)]
    keys: Option<u64>,
    /// Key distribution: sequential, uniform or zipfian (default: the
    /// preset's, sequential for fillseq, else uniform).
    #[arg(long, value_parser = parse_text::<DistributionName>)]
    distribution: Option<DistributionName>,
    /// Zipf exponent (> 0) for --distribution zipfian (default 0.99).
    #[arg(long, value_name = "S", allow_negative_numbers = true, value_parser = parse_number)]
    zipf_s: Option<f64>,
    /// Keep Zipf rank 1 at key 0 instead of scattering hot keys over the key space.
    #[arg(long)]
    no_scramble: bool,
    /// Operation mix overriding the preset's, e.g. put=50,get=50.
    #[arg(long, value_name = "KIND=PERCENT,...", value_parser = parse_text::<OperationMix>)]
    mix: Option<OperationMix>,
    /// Compressed/raw size target of values, in (0, 1] (db_bench's compression_ratio).
    #[arg(long, value_name = "R", default_value_t = KvOptions::default().compression_ratio, allow_negative_numbers = true, value_parser = parse_number)]
    compression_ratio: f64,
    /// Output format: text (`KIND\t<key hex>[\t<value hex>]` lines) or
    /// binary (per operation: kind u8, key length u32 LE, value length u32
    /// LE, key, value).
    #[arg(long, default_value = "text", value_parser = parse_text::<KvFormat>)]
    format: KvFormat,
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
    /// Words in the vocabulary, 1..=16M.
    #[arg(long, value_name = "N", default_value_t = TextParams::default().vocabulary_words, value_parser = parse_count)]
    vocabulary: u64,
    /// Zipf exponent (> 0) over word ranks.
    #[arg(long, value_name = "S", default_value_t = TextParams::default().zipf_exponent, allow_negative_numbers = true, value_parser = parse_number)]
    zipf_s: f64,
    /// Words per line, 1..=65536.
    #[arg(long, value_name = "N", default_value_t = TextParams::default().words_per_line)]
    words_per_line: u32,
    /// Worker threads (0 = all cores; at most 256); the output does not depend on it.
    #[arg(long, value_name = "N", default_value_t = THREADS_DEFAULT)]
    threads: usize,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Debug, clap::Args)]
struct RmatArgs {
    /// log2 of the vertex count, 1..=48.
    #[arg(long, value_name = "N", default_value_t = RmatParams::default().scale)]
    scale: u32,
    /// Edges per vertex.
    #[arg(long, value_name = "N", default_value_t = RmatParams::default().edge_factor, value_parser = parse_count)]
    edge_factor: u64,
    /// Probability of the top-left quadrant.
    #[arg(long = "a", value_name = "P", default_value_t = RmatParams::default().a, allow_negative_numbers = true, value_parser = parse_number)]
    a: f64,
    /// Probability of the top-right quadrant.
    #[arg(long = "b", value_name = "P", default_value_t = RmatParams::default().b, allow_negative_numbers = true, value_parser = parse_number)]
    b: f64,
    /// Probability of the bottom-left quadrant (d = 1 - a - b - c).
    #[arg(long = "c", value_name = "P", default_value_t = RmatParams::default().c, allow_negative_numbers = true, value_parser = parse_number)]
    c: f64,
    /// Keep R-MAT's vertex ids (hubs near 0) instead of permuting them.
    #[arg(long)]
    no_permute: bool,
    /// Write little-endian u64 pairs instead of `src\tdst` lines.
    #[arg(long)]
    binary: bool,
    /// Worker threads (0 = all cores; at most 256); the output does not depend on it.
    #[arg(long, value_name = "N", default_value_t = THREADS_DEFAULT)]
    threads: usize,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Debug, clap::Args)]
struct ClickArgs {
    /// Users (ids 0..N), 1..=2^53.
    #[arg(long, value_name = "N", default_value_t = ClickParams::default().users, value_parser = parse_count)]
    users: u64,
    /// Clicks to generate.
    #[arg(long, value_name = "N", default_value_t = ClickParams::default().clicks, value_parser = parse_count)]
    clicks: u64,
    /// Zipf exponent (> 0) of session arrivals over users.
    #[arg(long, value_name = "S", default_value_t = ClickParams::default().user_zipf_exponent, allow_negative_numbers = true, value_parser = parse_number)]
    user_zipf_s: f64,
    /// Keep the most active user at id 0 instead of scattering hot users.
    #[arg(long)]
    no_scramble: bool,
    /// Distinct URLs, 1..=16M-16.
    #[arg(long, value_name = "N", default_value_t = ClickParams::default().urls, value_parser = parse_count)]
    urls: u64,
    /// Zipf exponent (> 0) over URLs.
    #[arg(long, value_name = "S", default_value_t = ClickParams::default().url_zipf_exponent, allow_negative_numbers = true, value_parser = parse_number)]
    url_zipf_s: f64,
    /// Mean clicks a session arrival brings (>= 1).
    #[arg(long, value_name = "N", default_value_t = ClickParams::default().clicks_per_session_mean, allow_negative_numbers = true, value_parser = parse_number)]
    clicks_per_session: f64,
    /// Mean gap (> 0) between a session's clicks, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = ClickParams::default().click_gap_ms_mean, allow_negative_numbers = true, value_parser = parse_number)]
    click_gap_ms: f64,
    /// Inactivity (>= 1) that ends a session, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = ClickParams::default().session_timeout_ms)]
    session_timeout_ms: u64,
    /// Mean gap (> 0) between session arrivals over all users, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = ClickParams::default().session_arrival_gap_ms_mean, allow_negative_numbers = true, value_parser = parse_number)]
    arrival_gap_ms: f64,
    /// Timestamp of the first click, in milliseconds since the Unix epoch (at most 2^62).
    #[arg(long, value_name = "MS", default_value_t = ClickParams::default().start_timestamp_ms)]
    start_ms: u64,
    #[command(flatten)]
    output: OutputArgs,
}

/// Runs `spillway gen <generator>` and prints its summary.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let interrupt = Interrupt::on_signals();
    match args.generator {
        Generator::Kv(args) => {
            let options = KvOptions {
                preset: args.preset,
                operations: args.ops,
                key_bytes: args.key_bytes,
                value_bytes: args.value_bytes,
                key_count: args.keys,
                distribution: args.distribution,
                zipf_s: args.zipf_s,
                scrambled: !args.no_scramble,
                mix: args.mix,
                compression_ratio: args.compression_ratio,
                seed: args.output.seed,
            };
            let params = options.params().map_err(|error| with_flags("kv", error))?;
            generate("kv", &args.output, params.validate(), &interrupt, |writer| {
                write_kv(&params, args.format, writer)
            })
        }
        Generator::Text(args) => {
            let params = TextParams {
                size: match (args.bytes, args.lines) {
                    (Some(bytes), _) => TextSize::Bytes(bytes),
                    (None, Some(lines)) => TextSize::Lines(lines),
                    (None, None) => bail!("one of --bytes and --lines is required"),
                },
                vocabulary_words: args.vocabulary,
                zipf_exponent: args.zipf_s,
                words_per_line: args.words_per_line,
                threads: args.threads,
                seed: args.output.seed,
            };
            generate("text", &args.output, params.validate(), &interrupt, |writer| {
                write_text(&params, writer)
            })
        }
        Generator::Rmat(args) => {
            let params = RmatParams {
                scale: args.scale,
                edge_factor: args.edge_factor,
                a: args.a,
                b: args.b,
                c: args.c,
                permute: !args.no_permute,
                threads: args.threads,
                seed: args.output.seed,
            };
            let format = if args.binary {
                EdgeFormat::Binary
            } else {
                EdgeFormat::Text
            };
            generate("rmat", &args.output, params.validate(), &interrupt, |writer| {
                write_rmat(&params, format, writer)
            })
        }
        Generator::Clicks(args) => {
            let params = ClickParams {
                users: args.users,
                clicks: args.clicks,
                user_zipf_exponent: args.user_zipf_s,
                scramble_users: !args.no_scramble,
                urls: args.urls,
                url_zipf_exponent: args.url_zipf_s,
                clicks_per_session_mean: args.clicks_per_session,
                click_gap_ms_mean: args.click_gap_ms,
                session_timeout_ms: args.session_timeout_ms,
                session_arrival_gap_ms_mean: args.arrival_gap_ms,
                start_timestamp_ms: args.start_ms,
                seed: args.output.seed,
            };
            generate("clicks", &args.output, params.validate(), &interrupt, |writer| {
                write_clicks(&params, writer)
            })
        }
    }?;
    Ok(0)
}

/// Runs one generator into `output` through the library and prints its
/// report; the flag of a parameter error is named.
fn generate<S: Written + Serialize>(
    generator: &'static str,
    output: &OutputArgs,
    validated: spillway_core::Result<()>,
    interrupt: &Interrupt,
    write: impl FnOnce(&mut dyn std::io::Write) -> spillway_core::Result<S>,
) -> anyhow::Result<()> {
    if output.output.as_os_str() == "-" && output.json {
        bail!("--json needs -o FILE: with -o - standard output carries the generated data");
    }
    let generated = generate_to(
        generator,
        &output.output,
        output.seed,
        validated,
        interrupt,
        write,
    )
    .map_err(|error| with_flags(generator, error))?;
    if let Some(generated) = generated {
        print_report(&generated, output.json)?;
    }
    Ok(())
}

/// A library error with its parameter names written as flags.
fn with_flags(generator: &str, error: spillway_core::Error) -> anyhow::Error {
    with_option_names(generator, error, |option| {
        format!("--{}", option.replace('_', "-"))
    })
    .into()
}

/// Prints a report: JSON on standard output, or one line on standard error
/// (after the scratch files of vanished runs that were swept).
fn print_report<S: Serialize>(generated: &Generated<S>, json: bool) -> anyhow::Result<()> {
    for swept in &generated.swept {
        eprintln!("removed {}, left by a run that is gone", swept.display());
    }
    let report = serde_json::to_value(generated).context("serializing the report")?;
    if json {
        println!("{report}");
        return Ok(());
    }
    let Value::Object(report) = report else {
        bail!(
            "internal error: the {} report is not a JSON object",
            generated.generator
        );
    };
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
        generated.generator,
        number("records"),
        number("bytes"),
        generated.seconds,
        generated.mb_per_s,
        truths.join(", ")
    );
    Ok(())
}

/// A number; the library checks its range (so that the range is stated once).
fn parse_number(text: &str) -> Result<f64, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("expected a number, got {text:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_parse_and_presets_name_themselves() {
        assert_eq!(parse_number("-1"), Ok(-1.0));
        assert_eq!(parse_number(" 0.99"), Ok(0.99));
        assert!(parse_number("abc").unwrap_err().contains("expected a number"));
        assert!(parse_text::<Preset>("fillrandom").is_ok());
        assert!(parse_text::<Preset>("nope")
            .unwrap_err()
            .starts_with("unknown preset"));
    }
}
