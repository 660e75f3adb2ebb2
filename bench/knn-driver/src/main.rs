//! The kNN benchmark's kiddo driver; `bench/run.py knn` runs it.
//!
//! It reads the part's points and queries as `bench/knn_peers.py generate`
//! wrote them (`points.f32` and `queries.f32`: rows of `--dims`
//! little-endian f32 coordinates), builds kiddo's `ImmutableKdTree` over
//! the points (timed: `build_s`), finds the `--k` nearest points of every
//! query with the squared Euclidean distance in f32, the queries split into
//! `--threads` contiguous shares, one `std::thread::scope` thread each
//! (timed: `query_s`), and writes the indices (int64) and distances
//! (float64, the square root of kiddo's f32 squared distance) as
//! `OUT.indices.npy` and `OUT.distances.npy`, rows in query order, nearest
//! first; `knn_peers.py check` reads them. It prints one JSON line:
//!
//! `{"engine": "kiddo", "points": N, "dims": D, "queries": Q, "k": K,
//!   "threads": T, "build_s": B, "query_s": S}`
//!
//! kiddo's trees have the dimension as a const generic: the driver has one
//! instance per dimension the benchmark uses (2, 4, 8, 16, 32, 64, 128) and
//! refuses any other. The tree's build runs on one thread (the crate's
//! parallel construction needs rayon, which the driver leaves out).

#![forbid(unsafe_code)]

use std::fs;
use std::io::Write;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use clap::Parser;
use kiddo::{ImmutableKdTree, SquaredEuclidean};
use serde_json::json;

/// The dimensions the driver is compiled for.
const DIMS: [usize; 7] = [2, 4, 8, 16, 32, 64, 128];

#[derive(Debug, Parser)]
#[command(about = "kiddo's ImmutableKdTree on the kNN benchmark's data")]
struct Cli {
    /// The part's directory: points.f32 and queries.f32.
    #[arg(long)]
    dir: PathBuf,
    /// Coordinates per point (2, 4, 8, 16, 32, 64 or 128).
    #[arg(long)]
    dims: usize,
    /// Neighbours per query.
    #[arg(long)]
    k: usize,
    /// Query threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Results go to OUT.indices.npy and OUT.distances.npy.
    #[arg(long)]
    out: PathBuf,
    /// Seconds after which the run fails (exit code 124), as the Python
    /// peers' --time-limit.
    #[arg(long)]
    time_limit: Option<f64>,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    ensure!(cli.threads >= 1, "--threads must be at least 1");
    let k = NonZeroUsize::new(cli.k).context("--k must be at least 1")?;
    if let Some(seconds) = cli.time_limit {
        stop_after(seconds);
    }
    let points = read_f32(&cli.dir.join("points.f32"), cli.dims)?;
    let queries = read_f32(&cli.dir.join("queries.f32"), cli.dims)?;
    let n = points.len() / cli.dims;
    ensure!(n >= cli.k, "{} points, fewer than k = {}", n, cli.k);
    let found = match cli.dims {
        2 => search::<2>(&points, &queries, k, cli.threads)?,
        4 => search::<4>(&points, &queries, k, cli.threads)?,
        8 => search::<8>(&points, &queries, k, cli.threads)?,
        16 => search::<16>(&points, &queries, k, cli.threads)?,
        32 => search::<32>(&points, &queries, k, cli.threads)?,
        64 => search::<64>(&points, &queries, k, cli.threads)?,
        128 => search::<128>(&points, &queries, k, cli.threads)?,
        other => bail!("kiddo's driver is built for dimensions {DIMS:?}, not {other}"),
    };
    let m = queries.len() / cli.dims;
    write_npy(&with_suffix(&cli.out, ".indices.npy"), "<i8", m, cli.k, |out| {
        for &index in &found.indices {
            out.extend_from_slice(&index.to_le_bytes());
        }
    })?;
    write_npy(&with_suffix(&cli.out, ".distances.npy"), "<f8", m, cli.k, |out| {
        for &distance in &found.distances {
            out.extend_from_slice(&distance.to_le_bytes());
        }
    })?;
    println!(
        "{}",
        json!({
            "engine": "kiddo",
            "points": n,
            "dims": cli.dims,
            "queries": m,
            "k": cli.k,
            "threads": cli.threads,
            "build_s": found.build_s,
            "query_s": found.query_s,
        })
    );
    Ok(())
}

/// What a search found: row-major (query, rank) indices and distances, and its times.
#[derive(Debug)]
struct Found {
    indices: Vec<i64>,
    distances: Vec<f64>,
    build_s: f64,
    query_s: f64,
}

fn search<const D: usize>(points: &[f32], queries: &[f32], k: NonZeroUsize, threads: usize) -> Result<Found> {
    let points = rows::<D>(points);
    let queries = rows::<D>(queries);
    let started = Instant::now();
    let tree: ImmutableKdTree<f32, D> = ImmutableKdTree::new_from_slice(&points)
        .map_err(|error| anyhow::anyhow!("kiddo's build failed: {error:?}"))?;
    let build_s = started.elapsed().as_secs_f64();
    drop(points);

    let k_usize = k.get();
    let mut indices = vec![0i64; queries.len() * k_usize];
    let mut distances = vec![0f64; queries.len() * k_usize];
    let share = queries.len().div_ceil(threads).max(1);
    let started = Instant::now();
    let short = std::thread::scope(|scope| {
        let workers: Vec<_> = queries
            .chunks(share)
            .zip(indices.chunks_mut(share * k_usize))
            .zip(distances.chunks_mut(share * k_usize))
            .map(|((mine, index_rows), distance_rows)| {
                let tree = &tree;
                scope.spawn(move || {
                    for ((query, index_row), distance_row) in mine
                        .iter()
                        .zip(index_rows.chunks_mut(k_usize))
                        .zip(distance_rows.chunks_mut(k_usize))
                    {
                        let nearest = tree.query(query).nearest_n::<SquaredEuclidean<f32>>(k).execute();
                        if nearest.len() != k_usize {
                            return false;
                        }
                        for ((slot, distance), item) in
                            index_row.iter_mut().zip(distance_row.iter_mut()).zip(nearest)
                        {
                            *slot = i64::from(item.item);
                            *distance = f64::from(item.distance).sqrt();
                        }
                    }
                    true
                })
            })
            .collect();
        workers
            .into_iter()
            .any(|worker| !worker.join().expect("a query thread panicked"))
    });
    let query_s = started.elapsed().as_secs_f64();
    ensure!(
        !short,
        "kiddo returned fewer than k = {k_usize} neighbours for a query"
    );
    Ok(Found {
        indices,
        distances,
        build_s,
        query_s,
    })
}

/// Flat coordinates as rows of D.
fn rows<const D: usize>(flat: &[f32]) -> Vec<[f32; D]> {
    flat.chunks_exact(D)
        .map(|row| <[f32; D]>::try_from(row).expect("a row of D"))
        .collect()
}

/// A file of little-endian f32 rows of `dims` coordinates.
fn read_f32(path: &Path, dims: usize) -> Result<Vec<f32>> {
    let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    ensure!(dims >= 1, "--dims must be at least 1");
    ensure!(
        bytes.len() % (4 * dims) == 0,
        "{}: {} bytes is not a whole number of rows of {dims} f32",
        path.display(),
        bytes.len()
    );
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn with_suffix(base: &Path, suffix: &str) -> PathBuf {
    let mut name = base.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// A 2-D array as a NumPy .npy file (format 1.0, C order).
fn write_npy(
    path: &Path,
    descr: &str,
    rows: usize,
    columns: usize,
    fill: impl FnOnce(&mut Vec<u8>),
) -> Result<()> {
    let mut header =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({rows}, {columns}), }}");
    // Magic (6) + version (2) + length (2) + header, padded with spaces and a newline to 64 bytes.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + rows * columns * 8);
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(
        &u16::try_from(header.len())
            .context("npy header too long")?
            .to_le_bytes(),
    );
    out.extend_from_slice(header.as_bytes());
    fill(&mut out);
    let mut file = fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    file.write_all(&out)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Ends the process with exit code 124 after `seconds`: a run that cannot
/// finish in reasonable time fails with that reason instead of holding the
/// benchmark.
fn stop_after(seconds: f64) {
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs_f64(seconds.max(0.0)));
        eprintln!("kiddo: did not finish within the time limit of {seconds:.0} s");
        std::process::exit(124);
    });
}
