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
//! Flags are parsed here and checked by the library (`validate` of each
//! parameter struct) before any output is created; [`PARAMETER_FLAGS`]
//! turns the parameter names of its errors back into flags. A file is
//! written as `<FILE>.partial` beside it and renamed over `FILE` once
//! complete, so a failed run never leaves a truncated or partial `FILE`
//! (a device or FIFO, such as `/dev/null`, is written in place).

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::units::parse_count;
use anyhow::{bail, Context};
use clap::{Subcommand, ValueEnum};
use serde_json::{Map, Value};
use spillway_core::{scratch, Interrupt, RealFs};
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
    /// Bytes per key, 1..=65536 (fixed width: big-endian key number, then '0' padding).
    #[arg(long, value_name = "N", default_value_t = 16)]
    key_bytes: usize,
    /// Bytes per put or merge value, at most 64M.
    #[arg(long, value_name = "N", default_value = "100", value_parser = parse_count)]
    value_bytes: u64,
    /// Key space size (default: --ops).
    #[arg(long, value_name = "N", value_parser = parse_count)]
    keys: Option<u64>,
    /// Key distribution (default: the preset's, sequential for fillseq, else uniform).
    #[arg(long, value_enum)]
    distribution: Option<DistributionArg>,
    /// Zipf exponent (> 0) for --distribution zipfian (default 0.99).
    #[arg(long, value_name = "S", allow_negative_numbers = true, value_parser = parse_number)]
    zipf_s: Option<f64>,
    /// Keep Zipf rank 1 at key 0 instead of scattering hot keys over the key space.
    #[arg(long)]
    no_scramble: bool,
    /// Operation mix overriding the preset's, e.g. put=50,get=50.
    #[arg(long, value_name = "KIND=PERCENT,...", value_parser = parse_mix)]
    mix: Option<OperationMix>,
    /// Compressed/raw size target of values, in (0, 1] (db_bench's compression_ratio).
    #[arg(long, value_name = "R", default_value_t = 0.5, allow_negative_numbers = true, value_parser = parse_number)]
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
    /// Words in the vocabulary, 1..=16M.
    #[arg(long, value_name = "N", default_value = "100000", value_parser = parse_count)]
    vocabulary: u64,
    /// Zipf exponent (> 0) over word ranks.
    #[arg(long, value_name = "S", default_value_t = 1.0, allow_negative_numbers = true, value_parser = parse_number)]
    zipf_s: f64,
    /// Words per line, 1..=65536.
    #[arg(long, value_name = "N", default_value_t = 10)]
    words_per_line: u32,
    /// Worker threads (0 = all cores; at most 256); the output does not depend on it.
    #[arg(long, value_name = "N", default_value_t = 0)]
    threads: usize,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Debug, clap::Args)]
struct RmatArgs {
    /// log2 of the vertex count, 1..=48.
    #[arg(long, value_name = "N", default_value_t = 16)]
    scale: u32,
    /// Edges per vertex.
    #[arg(long, value_name = "N", default_value = "16", value_parser = parse_count)]
    edge_factor: u64,
    /// Probability of the top-left quadrant.
    #[arg(long = "a", value_name = "P", default_value_t = 0.57, allow_negative_numbers = true, value_parser = parse_number)]
    a: f64,
    /// Probability of the top-right quadrant.
    #[arg(long = "b", value_name = "P", default_value_t = 0.19, allow_negative_numbers = true, value_parser = parse_number)]
    b: f64,
    /// Probability of the bottom-left quadrant (d = 1 - a - b - c).
    #[arg(long = "c", value_name = "P", default_value_t = 0.19, allow_negative_numbers = true, value_parser = parse_number)]
    c: f64,
    /// Keep R-MAT's vertex ids (hubs near 0) instead of permuting them.
    #[arg(long)]
    no_permute: bool,
    /// Write little-endian u64 pairs instead of `src\tdst` lines.
    #[arg(long)]
    binary: bool,
    /// Worker threads (0 = all cores; at most 256); the output does not depend on it.
    #[arg(long, value_name = "N", default_value_t = 0)]
    threads: usize,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Debug, clap::Args)]
struct ClickArgs {
    /// Users (ids 0..N), 1..=2^53.
    #[arg(long, value_name = "N", default_value = "100000", value_parser = parse_count)]
    users: u64,
    /// Clicks to generate.
    #[arg(long, value_name = "N", default_value = "1000000", value_parser = parse_count)]
    clicks: u64,
    /// Zipf exponent (> 0) of session arrivals over users.
    #[arg(long, value_name = "S", default_value_t = 1.0, allow_negative_numbers = true, value_parser = parse_number)]
    user_zipf_s: f64,
    /// Keep the most active user at id 0 instead of scattering hot users.
    #[arg(long)]
    no_scramble: bool,
    /// Distinct URLs, 1..=16M-16.
    #[arg(long, value_name = "N", default_value = "10000", value_parser = parse_count)]
    urls: u64,
    /// Zipf exponent (> 0) over URLs.
    #[arg(long, value_name = "S", default_value_t = 1.0, allow_negative_numbers = true, value_parser = parse_number)]
    url_zipf_s: f64,
    /// Mean clicks a session arrival brings (>= 1).
    #[arg(long, value_name = "N", default_value_t = 8.0, allow_negative_numbers = true, value_parser = parse_number)]
    clicks_per_session: f64,
    /// Mean gap (> 0) between a session's clicks, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 20_000.0, allow_negative_numbers = true, value_parser = parse_number)]
    click_gap_ms: f64,
    /// Inactivity (>= 1) that ends a session, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1_800_000)]
    session_timeout_ms: u64,
    /// Mean gap (> 0) between session arrivals over all users, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 100.0, allow_negative_numbers = true, value_parser = parse_number)]
    arrival_gap_ms: f64,
    /// Timestamp of the first click, in milliseconds since the Unix epoch (at most 2^62).
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
    if let Some(report) = summarize(args, &Interrupt::on_signals())? {
        print_report(&report, json);
    }
    Ok(0)
}

/// Runs a generator from the arguments of `spillway gen` (without
/// `spillway gen`, e.g. `["text", "--bytes", "1M", "-o", "words.txt"]`)
/// and returns its summary instead of printing it: the Python package's
/// `spillway.workload` functions call this, so flags, defaults and error
/// messages are the command's, but for errors in the arguments, which
/// name the option as a keyword parameter (`bytes`, not `--bytes`) and
/// list the ones the generator takes. `interrupt` stops the generator.
pub fn generate_with_arguments(
    arguments: Vec<std::ffi::OsString>,
    interrupt: &Interrupt,
) -> anyhow::Result<Report> {
    #[derive(Debug, clap::Parser)]
    #[command(name = "spillway gen", no_binary_name = true)]
    struct Gen {
        #[command(flatten)]
        args: Args,
    }
    let generator = arguments
        .first()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let parsed = <Gen as clap::Parser>::try_parse_from(arguments).map_err(|error| {
        let command = <Gen as clap::CommandFactory>::command();
        anyhow::anyhow!("{}", describe_for_keywords(&command, &generator, &error))
    })?;
    summarize(parsed.args, interrupt)?.context("the generator wrote to standard output, which was closed")
}

/// A clap error about `generator`'s arguments in the words of a caller
/// who passed them as keyword parameters (`zipf_s=1.2` for `--zipf-s 1.2`).
fn describe_for_keywords(command: &clap::Command, generator: &str, error: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let keyword = |flag: &str| {
        flag.trim_start_matches('-')
            .split([' ', '='])
            .next()
            .unwrap_or("")
            .replace('-', "_")
    };
    let context = |kind: ContextKind| match error.get(kind) {
        Some(ContextValue::String(text)) => Some(text.clone()),
        Some(ContextValue::Strings(texts)) => texts.first().cloned(),
        _ => None,
    };
    let options: Vec<String> = command
        .find_subcommand(generator)
        .map(|subcommand| {
            subcommand
                .get_arguments()
                .filter_map(|argument| argument.get_long())
                .filter(|long| !matches!(*long, "output" | "help" | "json"))
                .map(|long| long.replace('-', "_"))
                .collect()
        })
        .unwrap_or_default();
    match error.kind() {
        ErrorKind::UnknownArgument
        | ErrorKind::ArgumentConflict
        | ErrorKind::InvalidValue
        | ErrorKind::ValueValidation
        | ErrorKind::MissingRequiredArgument
            if !options.is_empty() =>
        {
            let argument = context(ContextKind::InvalidArg)
                .map(|flag| keyword(&flag))
                .unwrap_or_default();
            let what = match error.kind() {
                ErrorKind::UnknownArgument => format!("{generator}() takes no option {argument:?}"),
                ErrorKind::ArgumentConflict => {
                    format!("{generator}(): {argument:?} cannot be given with another option given")
                }
                ErrorKind::MissingRequiredArgument => format!("{generator}() needs {argument}"),
                _ => format!(
                    "{generator}(): {argument} cannot be {:?}",
                    context(ContextKind::InvalidValue).unwrap_or_default()
                ),
            };
            let hint = context(ContextKind::SuggestedArg)
                .map(|flag| format!(" (did you mean {:?}?)", keyword(&flag)))
                .unwrap_or_default();
            format!("{what}{hint}; its options are {}", options.join(", "))
        }
        _ => {
            // clap's text ends with a hint to run --help, which a library caller cannot.
            let text = error.to_string();
            let message = text.split("\n\nFor more information").next().unwrap_or(&text);
            message.trim_end().to_string()
        }
    }
}

fn summarize(args: Args, interrupt: &Interrupt) -> anyhow::Result<Option<Report>> {
    match args.generator {
        Generator::Kv(kv) => run_kv(kv, interrupt),
        Generator::Text(text) => run_text(text, interrupt),
        Generator::Rmat(rmat) => run_rmat(rmat, interrupt),
        Generator::Clicks(clicks) => run_clicks(clicks, interrupt),
    }
}

fn run_kv(args: KvArgs, interrupt: &Interrupt) -> anyhow::Result<Option<Report>> {
    let mut params = KvParams::preset(args.preset, args.ops);
    params.key_bytes = args.key_bytes;
    // Past usize (32-bit targets only) is past the library's limit too.
    params.value_bytes = usize::try_from(args.value_bytes).unwrap_or(usize::MAX);
    params.key_count = args.keys.unwrap_or(args.ops.max(1));
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
    // A flag that would be ignored: a mistake in the command line, not in a
    // parameter, so the library cannot see it.
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
    generate("kv", &args.output, params.validate(), interrupt, |writer| {
        Ok(serde_json::to_value(write_kv(&params, format, writer)?)?)
    })
}

fn run_text(args: TextArgs, interrupt: &Interrupt) -> anyhow::Result<Option<Report>> {
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
    generate("text", &args.output, params.validate(), interrupt, |writer| {
        Ok(serde_json::to_value(write_text(&params, writer)?)?)
    })
}

fn run_rmat(args: RmatArgs, interrupt: &Interrupt) -> anyhow::Result<Option<Report>> {
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
    generate("rmat", &args.output, params.validate(), interrupt, |writer| {
        Ok(serde_json::to_value(write_rmat(&params, format, writer)?)?)
    })
}

fn run_clicks(args: ClickArgs, interrupt: &Interrupt) -> anyhow::Result<Option<Report>> {
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
    generate("clicks", &args.output, params.validate(), interrupt, |writer| {
        Ok(serde_json::to_value(write_clicks(&params, writer)?)?)
    })
}

/// The flag that sets each library parameter, per generator: `(generator,
/// parameter, flag)`, where `parameter` is the name (a word or phrase) that
/// the library's `validate` errors use. The one place where the two
/// vocabularies meet; single letters (R-MAT's `a`, `b`, `c`) are safe
/// because only that generator's messages are rewritten with its rows.
const PARAMETER_FLAGS: &[(&str, &str, &str)] = &[
    ("kv", "operations", "--ops"),
    ("kv", "key_bytes", "--key-bytes"),
    ("kv", "value_bytes", "--value-bytes"),
    ("kv", "key_count", "--keys"),
    ("kv", "zipfian exponent", "--zipf-s"),
    ("kv", "mix", "--mix"),
    ("kv", "compression_ratio", "--compression-ratio"),
    ("text", "vocabulary_words", "--vocabulary"),
    ("text", "zipf_exponent", "--zipf-s"),
    ("text", "words_per_line", "--words-per-line"),
    ("rmat", "scale", "--scale"),
    ("rmat", "edge_factor", "--edge-factor"),
    ("rmat", "a", "--a"),
    ("rmat", "b", "--b"),
    ("rmat", "c", "--c"),
    ("clicks", "users", "--users"),
    ("clicks", "urls", "--urls"),
    ("clicks", "user_zipf_exponent", "--user-zipf-s"),
    ("clicks", "url_zipf_exponent", "--url-zipf-s"),
    ("clicks", "mean_clicks_per_session", "--clicks-per-session"),
    ("clicks", "mean_click_gap_ms", "--click-gap-ms"),
    ("clicks", "session_timeout_ms", "--session-timeout-ms"),
    ("clicks", "mean_session_arrival_gap_ms", "--arrival-gap-ms"),
    ("clicks", "start_timestamp_ms", "--start-ms"),
];

/// `message` with each parameter name of `generator` that stands as a whole
/// word (not inside a longer identifier) replaced by its flag, in one pass.
fn name_flags(generator: &str, message: &str) -> String {
    let is_word = |character: char| character.is_ascii_alphanumeric() || character == '_';
    let mut named = String::with_capacity(message.len() + 16);
    let mut rest = message;
    let mut previous: Option<char> = None;
    while let Some(character) = rest.chars().next() {
        if previous.is_none_or(|previous| !is_word(previous)) {
            let parameter = PARAMETER_FLAGS.iter().find(|(owner, parameter, _)| {
                *owner == generator
                    && rest.starts_with(parameter)
                    && !rest[parameter.len()..].starts_with(is_word)
            });
            if let Some((_, parameter, flag)) = parameter {
                named.push_str(flag);
                rest = &rest[parameter.len()..];
                previous = parameter.chars().last();
                continue;
            }
        }
        named.push(character);
        rest = &rest[character.len_utf8()..];
        previous = Some(character);
    }
    named
}

/// A generator's error with its parameter names replaced by flags, when it
/// is about the arguments (`InvalidArgument`); other errors as they are.
fn with_flags(generator: &str, error: anyhow::Error) -> anyhow::Error {
    match error.downcast::<spillway_core::Error>() {
        Ok(spillway_core::Error::InvalidArgument(message)) => {
            spillway_core::Error::InvalidArgument(name_flags(generator, &message)).into()
        }
        Ok(other) => other.into(),
        Err(error) => error,
    }
}

/// A writer that fails once `interrupt` is raised, so that a generator
/// stops at its next write (each is one atomic load more).
struct Interruptible<'a, W: Write> {
    inner: W,
    interrupt: &'a Interrupt,
}

impl<'a, W: Write> Interruptible<'a, W> {
    fn new(inner: W, interrupt: &'a Interrupt) -> Self {
        Interruptible { inner, interrupt }
    }
}

impl<W: Write> Write for Interruptible<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.interrupt.is_raised() {
            // Not ErrorKind::Interrupted: write_all retries those.
            return Err(io::Error::other("interrupted"));
        }
        self.inner.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Where `spillway gen` writes its data.
#[derive(Debug)]
enum Destination {
    /// `-o -`.
    Stdout,
    /// An existing file that is not a regular file (a device such as
    /// `/dev/null`, a FIFO, a directory): opened as it is, since renaming a
    /// file over it would replace the device (or fail).
    InPlace(PathBuf),
    /// A regular file, existing or not: the data goes to `partial` beside it,
    /// which is renamed over `target` once complete.
    Staged {
        /// The file the data ends up in (a symbolic link's target, so the
        /// link stays a link).
        target: PathBuf,
        /// A scratch name beside `target` that names this process
        /// (`spillway_core::scratch`), so that what a run killed outright
        /// leaves is recognised and swept by a later one.
        partial: PathBuf,
    },
}

impl Destination {
    fn of(output: &Path) -> Destination {
        if output.as_os_str() == "-" {
            return Destination::Stdout;
        }
        let target = match fs::symlink_metadata(output) {
            Ok(metadata) if metadata.file_type().is_symlink() => {
                fs::canonicalize(output).unwrap_or_else(|_| output.to_path_buf())
            }
            _ => output.to_path_buf(),
        };
        match fs::metadata(&target) {
            Ok(metadata) if !metadata.is_file() => Destination::InPlace(target),
            _ => {
                let name = target.file_name().unwrap_or_default().to_string_lossy();
                let partial = target.with_file_name(scratch::name("partial", &name));
                Destination::Staged { target, partial }
            }
        }
    }
}

/// Checks the parameters (`validated`), opens the output, runs `write` on
/// it and reports. `write` returns the generator's summary as a JSON object
/// with at least `records` and `bytes`.
///
/// # Algorithm
/// 1. A parameter error (`validated`) fails the run before anything is
///    created, so an existing output file is untouched.
/// 2. A regular file `FILE` is written under a scratch name beside it and
///    renamed over `FILE` on success; on any error (Ctrl-C included: every
///    write checks `interrupt`) the scratch file is removed and `FILE` is
///    untouched. (The data is not fsynced: a crash may leave the scratch
///    file behind, which names its owner and is swept by the next run
///    writing into that directory; never a short `FILE` from a run that
///    reported an error.)
fn generate(
    generator: &str,
    output: &OutputArgs,
    validated: spillway_core::Result<()>,
    interrupt: &Interrupt,
    write: impl FnOnce(&mut dyn Write) -> anyhow::Result<Value>,
) -> anyhow::Result<Option<Report>> {
    let destination = Destination::of(&output.output);
    if matches!(destination, Destination::Stdout) && output.json {
        bail!("--json needs -o FILE: with -o - standard output carries the generated data");
    }
    validated.map_err(|error| with_flags(generator, error.into()))?;
    let started = Instant::now();
    let outcome = match &destination {
        Destination::Stdout => write(&mut Interruptible::new(io::stdout().lock(), interrupt)),
        Destination::InPlace(path) => {
            let file =
                File::create(path).with_context(|| format!("opening output file {}", path.display()))?;
            write(&mut Interruptible::new(file, interrupt))
        }
        Destination::Staged { target, partial } => {
            let directory = spillway_core::fs::parent_directory(target);
            for swept in scratch::sweep(&RealFs::new(), directory).unwrap_or_default() {
                eprintln!("removed {}, left by a run that is gone", swept.display());
            }
            let file = File::create(partial).with_context(|| {
                format!(
                    "creating {} to write output file {}",
                    partial.display(),
                    target.display()
                )
            })?;
            let mut file = Interruptible::new(file, interrupt);
            let outcome = write(&mut file).and_then(|summary| {
                drop(file);
                fs::rename(partial, target)
                    .with_context(|| format!("renaming {} to {}", partial.display(), target.display()))?;
                Ok(summary)
            });
            if outcome.is_err() {
                // Best effort: the error being reported matters more.
                let _ = fs::remove_file(partial);
            }
            outcome
        }
    };
    let outcome = match outcome {
        Err(_) if interrupt.is_raised() => Err(anyhow::Error::new(interrupt.check().unwrap_err())),
        outcome => outcome,
    };
    let summary = match outcome {
        Ok(summary) => summary,
        // A reader that stops early (`| head`) is not an error of ours.
        Err(error) if matches!(destination, Destination::Stdout) && is_broken_pipe(&error) => {
            return Ok(None)
        }
        Err(error) => return Err(with_flags(generator, error)),
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

/// A number; the library checks its range (so that the range is stated once).
fn parse_number(text: &str) -> Result<f64, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("expected a number, got {text:?}"))
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
    fn numbers_parse_and_presets_name_themselves() {
        assert_eq!(parse_number("-1"), Ok(-1.0));
        assert_eq!(parse_number(" 0.99"), Ok(0.99));
        assert!(parse_number("abc").unwrap_err().contains("expected a number"));
        assert!(parse_preset("fillrandom").is_ok());
        assert!(parse_preset("nope").unwrap_err().starts_with("unknown preset"));
    }

    #[test]
    fn parameter_names_become_flags_as_whole_words_only() {
        assert_eq!(
            name_flags(
                "kv",
                "key_count 70000 does not fit in key_bytes 2 (at most 65536 keys)"
            ),
            "--keys 70000 does not fit in --key-bytes 2 (at most 65536 keys)"
        );
        // The article "a" is not R-MAT's parameter a outside R-MAT.
        assert_eq!(
            name_flags(
                "kv",
                "key_count must be at most 2^53 for a zipfian distribution, got 3"
            ),
            "--keys must be at most 2^53 for a zipfian distribution, got 3"
        );
        assert_eq!(
            name_flags("kv", "zipfian exponent must be > 0, got -1"),
            "--zipf-s must be > 0, got -1"
        );
        assert_eq!(
            name_flags("rmat", "a + b + c must be at most 1, got 0.6 + 0.3 + 0.19 = 1.09"),
            "--a + --b + --c must be at most 1, got 0.6 + 0.3 + 0.19 = 1.09"
        );
        // Inside longer identifiers nothing changes: `users` in
        // `user_zipf_exponent` is not the parameter users.
        assert_eq!(
            name_flags(
                "clicks",
                "user_zipf_exponent must be > 0; users must be at least 1"
            ),
            "--user-zipf-s must be > 0; --users must be at least 1"
        );
        assert_eq!(
            name_flags("clicks", "start_timestamp_ms must be at most 2^62"),
            "--start-ms must be at most 2^62"
        );
        assert_eq!(name_flags("text", "nothing to name"), "nothing to name");
    }

    #[test]
    fn every_parameter_error_of_the_library_names_a_flag() {
        let kv = KvParams {
            key_count: 1 << 54,
            distribution: KeyDistribution::Zipfian {
                exponent: 0.99,
                scrambled: true,
            },
            ..KvParams::default()
        };
        let text = TextParams {
            words_per_line: 0,
            ..TextParams::default()
        };
        let rmat = RmatParams {
            edge_factor: 0,
            ..RmatParams::default()
        };
        let clicks = ClickParams {
            mean_session_arrival_gap_ms: 0.0,
            ..ClickParams::default()
        };
        for (generator, error, flag) in [
            ("kv", kv.validate(), "--keys"),
            ("text", text.validate(), "--words-per-line"),
            ("rmat", rmat.validate(), "--edge-factor"),
            ("clicks", clicks.validate(), "--arrival-gap-ms"),
        ] {
            let message = with_flags(generator, error.unwrap_err().into()).to_string();
            assert!(
                message.starts_with(&format!("invalid argument: {flag} must be")),
                "{message}"
            );
        }
    }
}
