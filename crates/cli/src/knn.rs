//! `spillway knn`: an SS-tree kNN index in a file, from the command line.
//!
//! ```text
//! spillway knn build --points P.npy --index T.sst [--build kmeans|hilbert] [--leaf-size 64]
//!     [--degree 32] [--seed 42] [--threads 0] [--json]
//! spillway knn query --index T.sst --queries Q.npy --k K [--method auto|psb|bnb|brute] [--threads 0]
//!     [--device cpu|cuda|auto] [--distances D.npy] [--indices I.npy] [--json]
//! spillway knn verify --index T.sst
//! spillway knn stats --index T.sst [--json]
//! ```
//!
//! Points and queries are 2-D `.npy` arrays of float32 or float64 (queries
//! are widened to float64, exactly); integer arrays are refused with a hint
//! to convert them, since an int64 beyond 2^53 has no exact float64. The
//! outputs are written all or nothing (`scratch::write_staged`), the index
//! by the engine's own atomic save. `build` and `query` stop at SIGINT or
//! SIGTERM and exit with 130 or 143, leaving no output. `--json` prints the
//! engine's statistics as they serialize.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::Subcommand;
use serde_json::Value;
use spillway_core::{scratch, Interrupt, IoContext, RealFs};
use spillway_knn::npy::{self, NpyArray, NpyData};
use spillway_knn::{Build, BuildOptions, Device, Method, Neighbours, Points, QueryOptions, SsTree};

/// An SS-tree kNN index: build it from points, query it exactly.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Build an index over the points of a .npy file (float32 or float64,
    /// one row per point) and save it.
    ///
    /// Example: `spillway knn build --points points.npy --index points.sst`.
    Build(BuildArgs),
    /// Find the k nearest indexed points of each query (a row of a .npy
    /// file), exactly: nearest first, ties by the point's row.
    ///
    /// Without --distances or --indices the neighbours are printed as
    /// `query<TAB>rank<TAB>index<TAB>distance` lines.
    Query(QueryArgs),
    /// Load the index (every checksum and invariant is checked) and check
    /// its invariants again; exit 1 naming what is wrong.
    Verify(IndexArgs),
    /// Print the index's shape and build cost.
    Stats(StatsArgs),
}

/// `--build`'s names are the engine's.
fn parse_build(name: &str) -> Result<Build, String> {
    name.parse()
        .map_err(|error: spillway_core::Error| error.to_string())
}

/// `--method`'s names are the engine's.
fn parse_method(name: &str) -> Result<Method, String> {
    name.parse()
        .map_err(|error: spillway_core::Error| error.to_string())
}

/// `--device`'s names are the engine's.
fn parse_device(name: &str) -> Result<Device, String> {
    name.parse()
        .map_err(|error: spillway_core::Error| error.to_string())
}

#[derive(Debug, clap::Args)]
struct BuildArgs {
    /// The points: a 2-D .npy array of float32 or float64, one row per point.
    #[arg(long, value_name = "FILE")]
    points: PathBuf,
    /// The index file to write (replaced if it exists).
    #[arg(long, value_name = "FILE")]
    index: PathBuf,
    /// How points are grouped into leaves and nodes: kmeans (fewer nodes
    /// visited per query) or hilbert (a faster build).
    #[arg(long, value_name = "NAME", default_value = "kmeans", value_parser = parse_build)]
    build: Build,
    /// Points per leaf.
    #[arg(long, value_name = "N", default_value_t = BuildOptions::default().leaf_size)]
    leaf_size: usize,
    /// Children per internal node.
    #[arg(long, value_name = "N", default_value_t = BuildOptions::default().degree)]
    degree: usize,
    /// Seed of the k-means seeding: the same seed builds the same tree.
    #[arg(long, default_value_t = BuildOptions::default().seed)]
    seed: u64,
    /// Worker threads (0: every core).
    #[arg(long, value_name = "N", default_value_t = 0)]
    threads: usize,
    /// Print the tree's statistics as JSON to standard output.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct QueryArgs {
    /// The index file.
    #[arg(long, value_name = "FILE")]
    index: PathBuf,
    /// The queries: a 2-D .npy array of float32 or float64, one row per
    /// query, as many columns as the points have.
    #[arg(long, value_name = "FILE")]
    queries: PathBuf,
    /// Neighbours per query.
    #[arg(long, value_name = "K")]
    k: usize,
    /// The search: auto, psb, bnb or brute (every one gives the same answer).
    #[arg(long, value_name = "NAME", default_value = "auto", value_parser = parse_method)]
    method: Method,
    /// Worker threads (0: every core).
    #[arg(long, value_name = "N", default_value_t = 0)]
    threads: usize,
    /// Where the queries run: cpu, cuda (GPU 0; psb, brute or auto) or
    /// auto (the GPU when one can be used here).
    #[arg(long, value_name = "NAME", default_value = "cpu", value_parser = parse_device)]
    device: Device,
    /// Write the distances here: a float64 .npy array, one row of k per query.
    #[arg(long, value_name = "FILE")]
    distances: Option<PathBuf>,
    /// Write the neighbours' rows here: an int64 .npy array, one row of k per query.
    #[arg(long, value_name = "FILE")]
    indices: Option<PathBuf>,
    /// Print the batch's statistics as JSON to standard output (the
    /// neighbours then go only to --distances and --indices).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct IndexArgs {
    /// The index file.
    #[arg(long, value_name = "FILE")]
    index: PathBuf,
}

#[derive(Debug, clap::Args)]
struct StatsArgs {
    #[command(flatten)]
    index: IndexArgs,
    /// Print JSON to standard output.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    match args.command {
        Command::Build(args) => build(args),
        Command::Query(args) => query(args),
        Command::Verify(args) => verify(args),
        Command::Stats(args) => stats(args),
    }
}

/// Refuses an integer array, naming the file, what it holds and the fix.
fn integer_refused(path: &Path, what: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{}: int64 {what} are not accepted: {what} must be float32 or float64 \
         (convert them with NumPy, x.astype('float64'))",
        path.display()
    )
}

fn load(path: &Path) -> anyhow::Result<SsTree> {
    SsTree::load(&RealFs::new(), path).with_context(|| format!("loading the kNN index {}", path.display()))
}

fn build(args: BuildArgs) -> anyhow::Result<u8> {
    let NpyArray { cols, data, .. } = npy::read(&args.points)?;
    let options = BuildOptions {
        leaf_size: args.leaf_size,
        degree: args.degree,
        build: args.build,
        seed: args.seed,
        threads: args.threads,
        ..BuildOptions::default()
    };
    let interrupt = Interrupt::on_signals();
    let points = match &data {
        NpyData::F32(values) => Points::f32(values, cols),
        NpyData::F64(values) => Points::f64(values, cols),
        NpyData::I64(_) => return Err(integer_refused(&args.points, "points")),
    }
    .with_context(|| format!("reading the points of {}", args.points.display()))?;
    let tree = SsTree::build(points, &options, &interrupt)?;
    drop(data);
    tree.save(&RealFs::new(), &args.index)
        .with_context(|| format!("saving the kNN index {}", args.index.display()))?;
    let stats = tree.stats();
    if args.json {
        println!("{}", serde_json::to_string(&stats)?);
    } else {
        println!(
            "knn build: {}: {} points of {} dimensions ({}), {} leaves, {} levels, built in {:.3} s",
            args.index.display(),
            stats.points,
            stats.dims,
            stats.dtype,
            stats.leaves,
            stats.levels,
            stats.build_s
        );
    }
    Ok(0)
}

/// The queries of `path` as float64s, row by row, and how many.
fn read_queries(path: &Path, dims: usize) -> anyhow::Result<(Vec<f64>, usize)> {
    let NpyArray { rows, cols, data } = npy::read(path)?;
    if cols != dims {
        bail!(
            "{}: the queries have {cols} coordinates each, the index's points {dims}",
            path.display()
        );
    }
    let queries = match data {
        NpyData::F32(values) => values.into_iter().map(f64::from).collect(),
        NpyData::F64(values) => values,
        NpyData::I64(_) => return Err(integer_refused(path, "queries")),
    };
    Ok((queries, rows))
}

/// Writes `bytes` to `path` all or nothing.
fn write_output(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    scratch::write_staged(path, true, |file| {
        file.write_all(bytes)
            .io_context(|| format!("writing {}", path.display()))
    })?;
    Ok(())
}

fn query(args: QueryArgs) -> anyhow::Result<u8> {
    let tree = load(&args.index)?;
    let (queries, rows) = read_queries(&args.queries, tree.dims())?;
    let options = QueryOptions {
        method: args.method,
        threads: args.threads,
        device: args.device,
    };
    let interrupt = Interrupt::on_signals();
    let found = tree.query(&queries, args.k, &options, &interrupt)?;
    let Neighbours {
        k,
        distances,
        indices,
        stats,
    } = &found;
    if let Some(path) = &args.distances {
        write_output(path, &npy::encode_f64(rows, *k, distances))?;
    }
    if let Some(path) = &args.indices {
        write_output(path, &npy::encode_i64(rows, *k, indices))?;
    }
    if args.json {
        println!("{}", serde_json::to_string(stats)?);
        return Ok(0);
    }
    if args.distances.is_none() && args.indices.is_none() {
        print_neighbours(&found)?;
    }
    let per_query = |count: u64| count as f64 / stats.queries.max(1) as f64;
    eprintln!(
        "knn query: {} queries, k {}, {} on the {}: {:.1} nodes visited, {:.1} leaves scanned, {:.0} distances per \
         query, {:.3} s",
        stats.queries,
        stats.k,
        stats.method,
        stats.device,
        per_query(stats.nodes_visited),
        per_query(stats.leaves_scanned),
        per_query(stats.distances_computed),
        stats.query_s
    );
    Ok(0)
}

/// `query<TAB>rank<TAB>index<TAB>distance` lines on standard output.
fn print_neighbours(found: &Neighbours) -> anyhow::Result<()> {
    const WHERE: &str = "writing the neighbours to standard output";
    let mut out = BufWriter::new(std::io::stdout().lock());
    let k = found.k.max(1);
    for (at, (index, distance)) in found.indices.iter().zip(&found.distances).enumerate() {
        writeln!(out, "{}\t{}\t{index}\t{distance}", at / k, at % k).context(WHERE)?;
    }
    out.flush().context(WHERE)
}

fn verify(args: IndexArgs) -> anyhow::Result<u8> {
    let tree = load(&args.index)?;
    tree.check_invariants()
        .with_context(|| format!("verifying the kNN index {}", args.index.display()))?;
    let stats = tree.stats();
    println!(
        "knn verify: {}: {} points, {} nodes, {} levels checked: ok",
        args.index.display(),
        stats.points,
        stats.nodes,
        stats.levels
    );
    Ok(0)
}

fn stats(args: StatsArgs) -> anyhow::Result<u8> {
    let stats = serde_json::to_value(load(&args.index.index)?.stats())?;
    if args.json {
        println!("{stats}");
    } else if let Value::Object(fields) = &stats {
        for (name, value) in fields {
            match value {
                Value::String(text) => println!("{name} {text}"),
                other => println!("{name} {other}"),
            }
        }
    }
    Ok(0)
}
