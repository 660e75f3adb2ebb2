#!/usr/bin/env python3
"""The kNN benchmark's data, its exact answer, Spillway's contenders, the Python peers and the check.

    knn_peers.py generate DIR --distribution uniform|clustered [--sigma S] --dims D --points N --queries Q
    knn_peers.py truth DIR --k K
    knn_peers.py build DIR --build kmeans|hilbert [--threads 2]
    knn_peers.py spillway DIR --k K --method auto|psb|bnb|brute --tree kmeans|hilbert [--threads 2] --name NAME
    knn_peers.py sklearn-kdtree|sklearn-balltree|faiss-flat|pykdtree DIR --k K [--threads 2] --name NAME
    knn_peers.py check DIR NAME [--exact] [--first Q] [--roster NAMES]
    knn_peers.py agreement DIR

(every contender also takes [--first Q] [--roster NAMES] [--time-limit S]; the kiddo peer is
bench/knn-driver, behind a shell that reads the roster)

`generate` writes the part's data (NumPy, fixed seeds): `points.npy` (float32, N x D) and
`queries.npy` (float32, Q x D), the same coordinates as raw little-endian f32 rows in
`points.f32` and `queries.f32` (for bench/knn-driver), and `meta.json`. Uniform data is
uniform in [0, 10^4)^D. Clustered data is a mixture of 100 Gaussians with equal shares of the
points, centres uniform in [0, 10^4)^D, deviation `--sigma` on every axis (the seed's mixture);
the queries come from the same mixture (the same centres) with another seed.

`truth` computes the exact answer, independently of Spillway, and writes `truth.npz` (`indices`,
`distances`, and `d2`, the squared distances): for every query its K nearest points by the
canonical distance, which is the answer every Spillway method must give bit for bit: the squared
distance accumulated in float64 in dimension order, each coordinate widened to float64 first,
every step rounded (acc = 0.0; for j in 0..D: t = q[j] - p[j]; acc += t * t; no fused
multiply-add), ties broken by the smaller point index, distance = sqrt(acc). Computing that for
all N x Q pairs in Python would take hours, so it runs in two steps:

1. Candidates, fast: K + 4 per query, each with a floor, a lower bound on the canonical squared
   distance of every point that is not a candidate.
   - D <= 8: SciPy's exact k-d tree (`cKDTree`, float64 points) gives the K + 4 nearest by its
     own float64 distance; every other point is at least as far as the last of them by that
     distance, and the canonical one differs from it by less than a relative 8 (D + 2) 2^-53
     (each sums D non-negative rounded squares), hence the floor.
   - D > 8: approx = |p|^2 - 2 q.p (one BLAS product, float64, per block of 128 queries and 4096
     points, the points' -2p and |p|^2 packed as one matrix beforehand, 2 threads of query
     blocks); per query the K + 4 smallest approx values so far are kept, and a block's entries
     not below the current (K + 4)-th are dropped unseen, so every dropped point is at least as
     far by approx as the final (K + 4)-th. |approx + |q|^2 - canonical| <= 8 (D + 2) 2^-53
     (|q|^2 + max |p|^2) (the product's, the norms' and the canonical sum's rounding, each at
     most (D + 2) units of 2^-53 of those magnitudes, doubled for safety), hence the floor.
2. Exact: the canonical distance of every candidate by the dimension-order loop above (NumPy, one
   coordinate at a time over all candidates, so each step is rounded as in the loop), then the K
   smallest by (squared distance, index). When a query's floor exceeds the K-th canonical
   distance found, no other point can be in its answer or tie with it. A query for which that
   does not hold (ties or near-ties at the (K + 4)-th: rare, reported as `fallbacks`) is
   recomputed over every point: all points with approx within that bound of the K-th are
   candidates, and step 2 picks its answer.

`build` builds Spillway's tree once per part, in the part's setup (untimed by the harness, timed
here): `spillway.knn.SSTree(points, leaf_size=64, degree=32, build=..., seed=42, threads=T)` over
the points as loaded, `tree.save(DIR/tree-BUILD.sst)`, and `DIR/tree-BUILD.json` with the build's
seconds (time.perf_counter around the constructor alone) and the process's peak resident set
right after it (VmHWM from /proc/self/status: unlike getrusage's ru_maxrss it starts afresh at
exec, so the harness that spawned the process is not counted). Every Spillway contender of the
part then loads that tree instead of building its own: the seed's constructions are
deterministic (the same points, options and seed build the same tree), so a rebuild per run
measured nothing new and cost, at d = 64 and 10^6 points, some 15 s a run.

The contenders each print one JSON line (`engine`, `points`, `dims`, `queries`, `k`,
`threads`, `build_s`, `query_s`, plus, for Spillway, the query's counters and the tree's
statistics) and save their answer as `NAME.npz` (`indices` int64 and `distances` float64, Q x K,
nearest first). Build and query are timed separately inside the process, with
time.perf_counter, from the arrays in memory to the answer in memory; loading the data, the
interpreter's start and saving the answer are not timed (the harness's wall time and peak RSS
include them).

- `spillway`: `spillway.knn.SSTree.load(DIR/tree-BUILD.sst)` (untimed; `load_s`), then
  `tree.query(queries, k, method=..., threads=T, stats=True)`. Its `build_s` is the setup's
  build, the same in every run; its `peak_rss_kib` is the larger of the build's peak and this
  process's (`build_peak_rss_kib`, `query_peak_rss_kib`), so that it counts what a peer's
  process holds while it builds and while it answers.
- `sklearn-kdtree`, `sklearn-balltree`: scikit-learn's `NearestNeighbors(n_neighbors=K,
  algorithm="kd_tree" | "ball_tree", n_jobs=T)`: `fit` is the build (its trees store float64,
  so the points are widened), `kneighbors` the query (T threads, each a share of the queries).
- `faiss-flat`: faiss-cpu's `IndexFlatL2` with `faiss.omp_set_num_threads(T)`: `add` is the
  build, `search` the query (float32, squared distances, whose square roots are saved).
- `pykdtree`: `pykdtree.kdtree.KDTree(points)` (float32, its default leaf size), `query(queries,
  k=K)`; its OpenMP threads come from OMP_NUM_THREADS, which this script sets to T before the
  import. It takes at most 127 dimensions (it fails with its own error beyond).

`--first Q` answers only the batch's first Q queries (all of them when it has fewer): the
brute-force contenders take it where the batch is large (10^4 queries at d <= 8), since every
query costs them a pass over all the points; their queries/s is over the queries they answered.
`--roster NAMES` (comma-separated) is the variant's list of the contenders that run there: a
contender not in it prints `{"engine": NAME, "skipped": ...}` and exits at once, with no answer
and no figures (the page lists it nowhere in that part), and `check` passes it.

`check` compares `NAME.npz` (or `NAME.indices.npy` and `NAME.distances.npy`, as the kiddo
driver writes them) with `truth.npz` (its first Q rows with `--first Q`). With `--exact`
(Spillway's contenders) indices and distances must equal the truth's bit for bit. Without it
(the peers, which compute in float32 or in another order, so may pick another point at a tie or
a near-tie) each returned index must be a distinct valid point, and at every rank the
canonical distance of the point returned must be within 1e-4 (relative) of the truth's distance
at that rank, or within float32 rounding: its canonical squared distance within 4 (D + 2) 2^-24
(|q|^2 + max |p|^2) of the truth's, twice the worst-case error of |q|^2 + |p|^2 - 2 q.p in
float32 (faiss's flat index ranks that way for large batches, and on tight clusters at high
dimension it picks other points than the nearest: |p|^2 is thousands of times the squared
distances there). The distances a peer reports must match the
canonical distance of the point it returned within 1e-3, or within that float32 bound on the
squares (a units slip would not). A check that fails prints what differs and exits 1: the
benchmark stops (OUTPUT DID NOT VALIDATE), or, for a peer, reports it failed.

`agreement` prints one JSON line per answer in DIR (the page's table; an answer to the first Q
queries against the truth's first Q rows): the share of (query, rank) entries naming the
truth's point, the share equal bit for bit, the share of queries answered bit for bit, the worst
relative distance gap and what the check accepted it as.

`--time-limit S` ends a contender after S seconds with exit code 124 (the benchmark reports it
failed with that reason and skips its later runs), so that a peer far too slow at high dimension
does not hold the benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

SEED = 42
QUERY_SEED = 4242
CLUSTERS = 100
SPAN = 10_000.0
# Rows generated at a time (keeps the float64 noise of a large part small).
GENERATE_CHUNK = 1 << 17
# Step 1's blocks: queries and points per BLAS product (QUERY_BLOCK x POINT_BLOCK float64 = 4 MiB).
QUERY_BLOCK = 128
POINT_BLOCK = 4096
# Up to this dimension, step 1 asks SciPy's k-d tree instead of a BLAS product (much faster there).
TREE_DIMS = 8
# Threads of step 1 (the machine's cores: the truth is computed once per part, untimed).
THREADS = 2
TINY = 1e-300
# Candidates each block keeps per query beyond K.
EXTRA = 4
UNIT = 2.0**-53
PEER_TOLERANCE = 1e-4
REPORTED_TOLERANCE = 1e-3


class CheckFailed(Exception):
    """A contender's answer is not the truth (or not close enough, for a peer)."""


# ---------------------------------------------------------------------------
# Data


def generate(directory: Path, distribution: str, sigma: float, dims: int, points: int, queries: int) -> None:
    if distribution not in ("uniform", "clustered"):
        raise SystemExit(f"unknown distribution {distribution!r}: uniform or clustered")
    if dims < 1 or points < 1 or queries < 1:
        raise SystemExit("--dims, --points and --queries must be positive")
    started = time.perf_counter()
    directory.mkdir(parents=True, exist_ok=True)
    centres = np.random.default_rng(SEED).random((CLUSTERS, dims)) * SPAN
    for name, count, seed in (("points", points, SEED), ("queries", queries, QUERY_SEED)):
        rng = np.random.default_rng([seed, 1])
        data = np.empty((count, dims), dtype=np.float32)
        if distribution == "clustered":
            # Equal shares: point i belongs to cluster i mod 100, the rows shuffled. Queries pick a cluster at random.
            labels = np.arange(count) % CLUSTERS if name == "points" else rng.integers(0, CLUSTERS, count)
            labels = rng.permutation(labels) if name == "points" else labels
        for first in range(0, count, GENERATE_CHUNK):
            rows = min(GENERATE_CHUNK, count - first)
            if distribution == "uniform":
                data[first:first + rows] = rng.random((rows, dims), dtype=np.float32) * np.float32(SPAN)
            else:
                chunk = centres[labels[first:first + rows]] + rng.normal(0.0, sigma, (rows, dims))
                data[first:first + rows] = chunk
        np.save(directory / f"{name}.npy", data)
        data.astype("<f4", copy=False).tofile(directory / f"{name}.f32")
        del data
    meta = {"distribution": distribution, "sigma": sigma if distribution == "clustered" else None, "dims": dims,
            "points": points, "queries": queries, "seed": SEED, "query_seed": QUERY_SEED,
            "clusters": CLUSTERS if distribution == "clustered" else None}
    (directory / "meta.json").write_text(json.dumps(meta) + "\n")
    print(json.dumps({"generated": meta, "seconds": round(time.perf_counter() - started, 2)}))


def load(directory: Path, first: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The part's points and queries (the first `first` queries when given)."""
    points = np.load(directory / "points.npy")
    queries = load_queries(directory, first)
    if points.ndim != 2 or queries.ndim != 2 or points.shape[1] != queries.shape[1]:
        raise SystemExit(f"{directory}: points {points.shape} and queries {queries.shape} do not match")
    return points, queries


def load_queries(directory: Path, first: int | None = None) -> np.ndarray:
    queries = np.load(directory / "queries.npy")
    if first is not None:
        if first < 1:
            raise SystemExit(f"--first {first}: must be positive")
        queries = np.ascontiguousarray(queries[:first])
    return queries


# ---------------------------------------------------------------------------
# The exact answer


def canonical_d2(queries: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """The canonical squared distance of each query row to each of its candidate rows.

    queries: (m, d); candidates: (m, c, d). Dimension order, float64, every step rounded
    (NumPy's element-wise subtract, multiply and add are never fused)."""
    acc = np.zeros(candidates.shape[:2], dtype=np.float64)
    for j in range(queries.shape[1]):
        t = queries[:, j, None].astype(np.float64) - candidates[:, :, j].astype(np.float64)
        acc += t * t
    return acc


def pick(d2: np.ndarray, index: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the k smallest by (squared distance, index)."""
    order = np.lexsort((index, d2), axis=-1)[:, :k]
    return np.take_along_axis(d2, order, 1), np.take_along_axis(index, order, 1)


def truth(directory: Path, k: int) -> None:
    points, queries = load(directory)
    n, d = points.shape
    m = queries.shape[0]
    if not 1 <= k <= n:
        raise SystemExit(f"k = {k} must be between 1 and the {n} points")
    started = time.perf_counter()
    keep = min(k + EXTRA, n)
    norms = np.einsum("ij,ij->i", points, points, dtype=np.float64)
    # |q|^2 + max |p|^2 times this bounds |approximate - canonical| (see the module's docstring).
    slack = 8.0 * (d + 2) * UNIT
    max_norm = float(norms.max())
    if d <= TREE_DIMS:
        candidates, floors = tree_candidates(points, queries, keep, slack)
    else:
        candidates, floors = blas_candidates(points, queries, norms, keep, slack, max_norm)
    out_d2 = np.empty((m, k), dtype=np.float64)
    out_index = np.empty((m, k), dtype=np.int64)
    for q0 in range(0, m, QUERY_BLOCK):
        rows = slice(q0, q0 + QUERY_BLOCK)
        d2 = canonical_d2(queries[rows], points[candidates[rows]])
        out_d2[rows], out_index[rows] = pick(d2, candidates[rows], k)
    # A point no candidate list holds has a canonical squared distance of at least its query's floor: when
    # that exceeds the K-th found, it is neither in the answer nor tied with it. Otherwise, every point.
    unsafe = np.nonzero(~(floors > out_d2[:, -1]))[0] if keep < n else np.array([], dtype=np.int64)
    for row in unsafe:
        q_norm = float(np.dot(queries[row].astype(np.float64), queries[row].astype(np.float64)))
        out_d2[row], out_index[row] = exhaustive(points, norms, queries[row], k, out_d2[row, -1],
                                                 slack * (q_norm + max_norm))
    seconds = time.perf_counter() - started
    np.savez(directory / "truth.npz", indices=out_index, distances=np.sqrt(out_d2), d2=out_d2)
    print(json.dumps({"truth": {"points": n, "dims": d, "queries": m, "k": k, "method": "tree" if d <= TREE_DIMS else
                                "blas", "fallbacks": len(unsafe), "seconds": round(seconds, 2)}}))


def tree_candidates(points: np.ndarray, queries: np.ndarray, keep: int, slack: float) -> tuple[np.ndarray, np.ndarray]:
    """Low dimensions: SciPy's exact k-d tree over the points in float64 gives each query's `keep` nearest.

    Every other point is at least as far, by its float64 distance, as the last of them; the
    canonical squared distance differs from that one's square by less than `slack` relative,
    hence the floor."""
    from scipy.spatial import cKDTree

    tree = cKDTree(points.astype(np.float64), leafsize=16, balanced_tree=False, compact_nodes=False)
    distances, indices = tree.query(queries.astype(np.float64), k=keep, workers=THREADS)
    distances, indices = distances.reshape(len(queries), keep), indices.reshape(len(queries), keep)
    return indices.astype(np.int64), distances[:, -1] ** 2 * (1.0 - slack) - TINY


def blas_candidates(points: np.ndarray, queries: np.ndarray, norms: np.ndarray, keep: int, slack: float,
                    max_norm: float) -> tuple[np.ndarray, np.ndarray]:
    """Higher dimensions: approx = |p|^2 - 2 q.p by one BLAS product per block, in THREADS threads
    (a share of the query blocks each, BLAS itself on one thread).

    Per query the `keep` smallest approx values seen so far are kept; a block's entries not below
    the current `keep`-th are dropped unseen, so every dropped point's approx (plus |q|^2) is at
    least the final `keep`-th one: the floor, less the rounding slack."""
    from concurrent.futures import ThreadPoolExecutor

    augmented = np.empty((len(points), points.shape[1] + 1), dtype=np.float64)
    augmented[:, :-1] = points
    augmented[:, :-1] *= -2.0  # exact: a power of two
    augmented[:, -1] = norms
    m = len(queries)
    candidates = np.empty((m, keep), dtype=np.int64)
    floors = np.empty(m, dtype=np.float64)

    def block(q0: int) -> None:
        q = np.ones((min(QUERY_BLOCK, m - q0), augmented.shape[1]), dtype=np.float64)
        q[:, :-1] = queries[q0:q0 + len(q)]
        q_norms = np.einsum("ij,ij->i", q[:, :-1], q[:, :-1])
        first = min(max(POINT_BLOCK, keep), len(points))
        approx = q @ augmented[:first].T
        best = np.argpartition(approx, keep - 1, axis=1)[:, :keep] if first > keep else \
            np.broadcast_to(np.arange(keep), (len(q), keep)).copy()
        best_values = np.take_along_axis(approx, best, 1)
        nothing = np.empty(0, dtype=np.int64)
        best_values, best = smallest(best_values, best, nothing, np.empty(0), nothing, keep)
        product = np.empty((len(q), POINT_BLOCK), dtype=np.float64)
        for p0 in range(first, len(points), POINT_BLOCK):
            width = min(POINT_BLOCK, len(points) - p0)
            out = product[:, :width]
            np.matmul(q, augmented[p0:p0 + width].T, out=out)
            rows, columns = np.nonzero(out < best_values[:, -1:])
            if len(rows):
                best_values, best = smallest(best_values, best, rows, out[rows, columns], columns + p0, keep)
        candidates[q0:q0 + len(q)] = best
        floors[q0:q0 + len(q)] = best_values[:, -1] + q_norms - slack * (q_norms + max_norm)

    with BlasThreads(1), ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(block, range(0, m, QUERY_BLOCK)))
    return candidates, floors


def smallest(values: np.ndarray, indices: np.ndarray, rows: np.ndarray, new_values: np.ndarray,
             new_indices: np.ndarray, keep: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the `keep` smallest (value, index) pairs of the current ones and the new (row, value, index)
    entries, sorted by value."""
    count = len(values)
    all_rows = np.concatenate([np.repeat(np.arange(count), keep), rows])
    all_values = np.concatenate([values.ravel(), new_values])
    all_indices = np.concatenate([indices.ravel(), new_indices])
    order = np.lexsort((all_indices, all_values, all_rows))
    sizes = np.bincount(all_rows, minlength=count)
    starts = np.cumsum(sizes) - sizes
    rank = np.arange(len(order)) - starts[all_rows[order]]
    taken = order[rank < keep]
    return all_values[taken].reshape(count, keep), all_indices[taken].reshape(count, keep)


class BlasThreads:
    """BLAS on `count` threads inside the block, where threadpoolctl is there (it comes with scikit-learn)."""

    def __init__(self, count: int) -> None:
        self.count, self.limiter = count, None

    def __enter__(self) -> None:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:
            return
        self.limiter = threadpool_limits(limits=self.count, user_api="blas")

    def __exit__(self, *_: object) -> None:
        if self.limiter is not None:
            self.limiter.restore_original_limits()


def exhaustive(points: np.ndarray, norms: np.ndarray, query: np.ndarray, k: int, bound: float,
               err: float) -> tuple[np.ndarray, np.ndarray]:
    """One query over every point: all points within bound + err (approximately) are candidates.

    Every point whose canonical squared distance is at most `bound` (the K-th found so far, which
    at least K points reach) has an approximate one at most bound + err."""
    q = query.astype(np.float64)
    approx = np.empty(len(points))
    for p0 in range(0, len(points), POINT_BLOCK):
        p = points[p0:p0 + POINT_BLOCK].astype(np.float64)
        approx[p0:p0 + len(p)] = norms[p0:p0 + len(p)] - 2.0 * (p @ q) + q @ q
    candidates = np.nonzero(approx <= bound + err)[0]
    d2 = canonical_d2(query[None, :], points[candidates][None, :, :])
    best_d2, best_index = pick(d2, candidates[None, :], k)
    return best_d2[0], best_index[0]


# ---------------------------------------------------------------------------
# Contenders


def stop_after(seconds: float, engine: str) -> None:
    """Ends the run after `seconds` (exit code 124, saying why); a hard SIGALRM 30 s later in case
    the library holds the GIL so long that the timer thread cannot run."""

    def expire() -> None:
        print(f"{engine}: did not finish within the time limit of {seconds:.0f} s", file=sys.stderr, flush=True)
        os._exit(124)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(int(seconds) + 30)


def save(directory: Path, name: str, indices: np.ndarray, distances: np.ndarray) -> None:
    np.savez(directory / f"{name}.npz", indices=np.asarray(indices, dtype=np.int64),
             distances=np.asarray(distances, dtype=np.float64))


def report(engine: str, points: np.ndarray, queries: np.ndarray, k: int, threads: int, build_s: float,
           query_s: float, **extra: Any) -> None:
    print(json.dumps({"engine": engine, "points": len(points), "dims": points.shape[1], "queries": len(queries),
                      "k": k, "threads": threads, "build_s": build_s, "query_s": query_s, **extra}))


def peak_rss_kib() -> int | None:
    """This process's peak resident set so far (VmHWM), in KiB; None where /proc does not say.

    getrusage's ru_maxrss would not do: Linux carries it across exec, so a process the harness
    spawned would count the harness's own peak."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def tree_file(directory: Path, build: str) -> Path:
    return directory / f"tree-{build}.sst"


def build_record(directory: Path, build: str) -> Path:
    return directory / f"tree-{build}.json"


def build_tree(directory: Path, build: str, threads: int) -> None:
    """The part's tree, built once (setup) and saved for every Spillway contender, with its build's time and peak RSS."""
    import spillway
    import spillway.knn

    points = np.load(directory / "points.npy")
    started = time.perf_counter()
    tree = spillway.knn.SSTree(points, leaf_size=64, degree=32, build=build, seed=42, threads=threads)
    build_s = time.perf_counter() - started
    # The build's peak: the points as loaded, the tree's copy and what its construction needed.
    rss = peak_rss_kib()
    started = time.perf_counter()
    tree.save(tree_file(directory, build))
    save_s = time.perf_counter() - started
    record = {"build": build, "points": len(points), "dims": points.shape[1], "threads": threads,
              "build_s": build_s, "peak_rss_kib": rss, "save_s": save_s, "tree": tree.stats(),
              "version": getattr(spillway, "__version__", None)}
    build_record(directory, build).write_text(json.dumps(record) + "\n")
    print(json.dumps({"built": record}))


def run_spillway(directory: Path, k: int, method: str, build: str, threads: int, name: str,
                 first: int | None) -> None:
    import spillway
    import spillway.knn

    queries = load_queries(directory, first)
    record_path = build_record(directory, build)
    if not record_path.exists():
        raise SystemExit(f"{record_path}: no {build} tree in this part (the setup's `knn_peers.py build` makes it)")
    built = json.loads(record_path.read_text())
    started = time.perf_counter()
    tree = spillway.knn.SSTree.load(tree_file(directory, build))
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    distances, indices, stats = tree.query(queries, k, method=method, threads=threads, stats=True)
    query_s = time.perf_counter() - started
    save(directory, name, indices, distances)
    count = max(int(stats["queries"]), 1)
    shape = tree.stats()
    own = peak_rss_kib()
    peaks = [value for value in (built.get("peak_rss_kib"), own) if value is not None]
    print(json.dumps({
        "engine": name, "points": shape["points"], "dims": shape["dims"], "queries": len(queries), "k": k,
        "threads": threads, "build_s": built["build_s"], "query_s": query_s, "method": method, "build": build,
        "chosen": stats["method"], "nodes_visited": stats["nodes_visited"], "leaves_scanned": stats["leaves_scanned"],
        "distances_computed": stats["distances_computed"], "nodes_per_query": stats["nodes_visited"] / count,
        "leaves_per_query": stats["leaves_scanned"] / count, "distances_per_query": stats["distances_computed"] / count,
        "engine_query_s": stats["query_s"], "load_s": load_s, "peak_rss_kib": max(peaks) if peaks else None,
        "build_peak_rss_kib": built.get("peak_rss_kib"), "query_peak_rss_kib": own,
        "tree": dict(shape, build_s=built["tree"]["build_s"]), "version": getattr(spillway, "__version__", None),
    }))


def run_sklearn(directory: Path, k: int, algorithm: str, threads: int, name: str, first: int | None) -> None:
    import sklearn
    from sklearn.neighbors import NearestNeighbors

    points, queries = load(directory, first)
    model = NearestNeighbors(n_neighbors=k, algorithm=algorithm, n_jobs=threads)
    started = time.perf_counter()
    model.fit(points)
    build_s = time.perf_counter() - started
    started = time.perf_counter()
    distances, indices = model.kneighbors(queries, n_neighbors=k, return_distance=True)
    query_s = time.perf_counter() - started
    save(directory, name, indices, distances)
    report(f"sklearn-{algorithm.replace('_', '')}", points, queries, k, threads, build_s, query_s,
           leaf_size=model.leaf_size, version=sklearn.__version__)


def run_faiss(directory: Path, k: int, threads: int, name: str, first: int | None) -> None:
    import faiss

    faiss.omp_set_num_threads(threads)
    points, queries = load(directory, first)
    started = time.perf_counter()
    index = faiss.IndexFlatL2(points.shape[1])
    index.add(np.ascontiguousarray(points))
    build_s = time.perf_counter() - started
    started = time.perf_counter()
    squared, indices = index.search(np.ascontiguousarray(queries), k)
    query_s = time.perf_counter() - started
    save(directory, name, indices, np.sqrt(np.maximum(squared.astype(np.float64), 0.0)))
    report("faiss-flat", points, queries, k, threads, build_s, query_s, version=faiss.__version__)


def run_pykdtree(directory: Path, k: int, threads: int, name: str, first: int | None) -> None:
    # OpenMP reads it when the library loads: before the import.
    os.environ["OMP_NUM_THREADS"] = str(threads)
    from importlib.metadata import version

    from pykdtree.kdtree import KDTree

    points, queries = load(directory, first)
    started = time.perf_counter()
    tree = KDTree(points)
    build_s = time.perf_counter() - started
    started = time.perf_counter()
    distances, indices = tree.query(queries, k=k)
    query_s = time.perf_counter() - started
    shape = (len(queries), k)
    save(directory, name, np.asarray(indices).reshape(shape), np.asarray(distances).reshape(shape))
    report("pykdtree", points, queries, k, threads, build_s, query_s, version=version("pykdtree"))


# ---------------------------------------------------------------------------
# The check


def load_answer(directory: Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    packed = directory / f"{name}.npz"
    if packed.exists():
        with np.load(packed) as answer:
            return answer["indices"], answer["distances"]
    indices, distances = directory / f"{name}.indices.npy", directory / f"{name}.distances.npy"
    if indices.exists() and distances.exists():
        return np.load(indices), np.load(distances)
    raise CheckFailed(f"{name}: no answer in {directory} ({packed.name}, or {indices.name} and {distances.name})")


def compare(directory: Path, name: str, points: np.ndarray, queries: np.ndarray, want_index: np.ndarray,
            want_d2: np.ndarray) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """How an answer compares with the truth: its figures, and what makes it unacceptable (empty when
    acceptable) for a Spillway contender (`exact`) and for a peer (`peer`)."""
    got_index, got_distance = load_answer(directory, name)
    m, k = want_index.shape
    if got_index.shape != (m, k) or got_distance.shape != (m, k):
        raise CheckFailed(f"{name}: answer of shape {got_index.shape} / {got_distance.shape}, expected {(m, k)}")
    if got_index.dtype.kind not in "iu":
        raise CheckFailed(f"{name}: indices of type {got_index.dtype}, expected integers")
    got_index = got_index.astype(np.int64)
    got_distance = got_distance.astype(np.float64)
    want_distance = np.sqrt(want_d2)
    n, d = points.shape
    same_index = got_index == want_index
    exact = same_index & (got_distance.view(np.uint64) == want_distance.view(np.uint64))
    figures: dict[str, Any] = {
        "contender": name,
        "role": "spillway" if name.startswith("spillway") else "peer",
        "queries": m,
        "k": k,
        "same_points_percent": 100.0 * same_index.mean(),
        "exact_percent": 100.0 * exact.mean(),
        "exact_queries_percent": 100.0 * exact.all(axis=1).mean(),
    }
    problems: dict[str, list[str]] = {"exact": [], "peer": []}
    wrong = np.argwhere(~exact)
    if len(wrong):
        lines = [f"query {q} rank {r}: got point {got_index[q, r]} at {got_distance[q, r]!r}, "
                 f"expected point {want_index[q, r]} at {want_distance[q, r]!r}" for q, r in wrong[:10]]
        problems["exact"].append(
            f"NOT EXACT: {len(wrong)} of {m * k} (query, rank) entries differ from the canonical answer "
            f"({len(np.unique(wrong[:, 0]))} queries); first:\n  " + "\n  ".join(lines))
    invalid = np.argwhere((got_index < 0) | (got_index >= n))
    if len(invalid):
        q, r = invalid[0]
        problems["peer"].append(f"{len(invalid)} indices outside 0..{n - 1}; first at query {q} rank {r}: "
                                f"{got_index[q, r]}")
        figures["accepted"] = None
        return figures, problems
    ordered = np.sort(got_index, axis=1)
    repeated = np.nonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1))[0]
    if len(repeated):
        problems["peer"].append(f"{len(repeated)} queries list a point twice; first query {repeated[0]}")
    # The canonical squared distance of every point returned, by rank.
    canonical = np.empty((m, k), dtype=np.float64)
    for q0 in range(0, m, QUERY_BLOCK):
        block = got_index[q0:q0 + QUERY_BLOCK]
        canonical[q0:q0 + len(block)] = canonical_d2(queries[q0:q0 + len(block)], points[block])
    gap = np.abs(np.sqrt(canonical) - want_distance)
    relative = gap / np.maximum(want_distance, 1e-300)
    # Twice the worst rounding of |q|^2 + |p|^2 - 2 q.p in float32 (the point returned and the one it displaced).
    q_norms = np.einsum("ij,ij->i", queries, queries, dtype=np.float64)
    allowance = (4.0 * (d + 2) * 2.0**-24 * (q_norms + float(np.einsum("ij,ij->i", points, points,
                                                                            dtype=np.float64).max())))[:, None]
    close = relative <= PEER_TOLERANCE
    rounded = np.abs(canonical - want_d2) <= allowance
    figures["worst_relative_gap"] = float(relative.max())
    figures["within_tolerance_percent"] = 100.0 * close.mean()
    figures["accepted"] = ("bit for bit" if exact.all() else f"within {PEER_TOLERANCE:g}" if close.all() else
                           "within float32 rounding" if (close | rounded).all() else None)
    off = np.argwhere(~(close | rounded))
    if len(off):
        q, r = off[0]
        problems["peer"].append(
            f"not the nearest at {len(off)} of {m * k} (query, rank) entries; first: query {q} rank {r}: point "
            f"{got_index[q, r]} at canonical distance {np.sqrt(canonical[q, r])!r}; the truth there is point "
            f"{want_index[q, r]} at {want_distance[q, r]!r} (tolerance {PEER_TOLERANCE:g} relative, or "
            f"{allowance[q, 0]:.6g} on the squared distance for float32 rounding)")
    reported = np.abs(got_distance - np.sqrt(canonical)) <= REPORTED_TOLERANCE * np.sqrt(canonical) + 1e-9
    reported |= np.abs(got_distance**2 - canonical) <= allowance
    bad = np.argwhere(~reported)
    if len(bad):
        q, r = bad[0]
        problems["peer"].append(
            f"reports a wrong distance at {len(bad)} of {m * k} (query, rank) entries; first: query {q} rank {r}: "
            f"point {got_index[q, r]} reported at {got_distance[q, r]!r}, its canonical distance is "
            f"{np.sqrt(canonical[q, r])!r}")
    return figures, problems


def load_truth(directory: Path) -> tuple[np.ndarray, np.ndarray]:
    with np.load(directory / "truth.npz") as saved:
        return saved["indices"], saved["d2"]


def check(directory: Path, name: str, exact: bool, first: int | None) -> None:
    points, queries = load(directory, first)
    want_index, want_d2 = load_truth(directory)
    figures, problems = compare(directory, name, points, queries, want_index[:len(queries)], want_d2[:len(queries)])
    found = problems["exact"] if exact else problems["peer"]
    if found:
        raise CheckFailed(f"{name}: " + "; ".join(found))
    print(json.dumps({"check": name, "exact": exact, "ok": True, **figures}))


def agreement(directory: Path) -> None:
    """One JSON line per answer in DIR: how it compares with the truth (the page's agreement table).

    An answer with fewer rows than the batch (a brute-force contender's `--first`) is compared with
    the truth's first rows."""
    points, queries = load(directory)
    want_index, want_d2 = load_truth(directory)
    names = sorted({path.name[:-len(".npz")] for path in directory.glob("*.npz") if path.name != "truth.npz"} |
                   {path.name[:-len(".indices.npy")] for path in directory.glob("*.indices.npy")})
    for name in names:
        rows = min(len(load_answer(directory, name)[0]), len(queries))
        figures, _ = compare(directory, name, points, queries[:rows], want_index[:rows], want_d2[:rows])
        print(json.dumps(figures))
    if not names:
        print(json.dumps({"contender": None, "note": "no answers"}))


def skipped(name: str, roster: str | None) -> bool:
    """Whether `name` is left out of its variant's roster (a comma-separated list of names; None: everyone runs)."""
    return roster is not None and name not in roster.split(",")


# ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    command = commands.add_parser("generate", help="the part's points and queries")
    command.add_argument("dir", type=Path)
    command.add_argument("--distribution", required=True, choices=["uniform", "clustered"])
    command.add_argument("--sigma", type=float, default=40.0, help="clustered: the deviation on every axis")
    command.add_argument("--dims", type=int, required=True)
    command.add_argument("--points", type=int, required=True)
    command.add_argument("--queries", type=int, required=True)
    command = commands.add_parser("truth", help="the exact answer, truth.npz")
    command.add_argument("dir", type=Path)
    command.add_argument("--k", type=int, required=True)
    command = commands.add_parser("build", help="Spillway's tree for the part's Spillway contenders (setup)")
    command.add_argument("dir", type=Path)
    command.add_argument("--build", required=True, choices=["kmeans", "hilbert"])
    command.add_argument("--threads", type=int, default=2)
    for engine in ("spillway", "sklearn-kdtree", "sklearn-balltree", "faiss-flat", "pykdtree"):
        command = commands.add_parser(engine, help=f"run {engine}")
        command.add_argument("dir", type=Path)
        command.add_argument("--k", type=int, required=True)
        command.add_argument("--threads", type=int, default=2)
        command.add_argument("--name", required=True, help="the answer goes to DIR/NAME.npz")
        command.add_argument("--time-limit", type=float, help="seconds after which the run fails (exit code 124)")
        command.add_argument("--first", type=int, help="answer only the batch's first FIRST queries")
        command.add_argument("--roster", help="the contenders that run in this variant, comma-separated")
        if engine == "spillway":
            command.add_argument("--method", required=True, choices=["auto", "psb", "bnb", "brute"])
            command.add_argument("--tree", required=True, choices=["kmeans", "hilbert"],
                                 help="the part's tree that `build` saved")
    command = commands.add_parser("agreement", help="every answer in DIR against truth.npz, one JSON line each")
    command.add_argument("dir", type=Path)
    command = commands.add_parser("check", help="an answer against truth.npz")
    command.add_argument("dir", type=Path)
    command.add_argument("name")
    command.add_argument("--exact", action="store_true", help="bit for bit (Spillway's contenders)")
    command.add_argument("--first", type=int, help="the answer is to the batch's first FIRST queries")
    command.add_argument("--roster", help="the contenders that run in this variant: any other passes unchecked")
    args = parser.parse_args(argv)

    if skipped(getattr(args, "name", ""), getattr(args, "roster", None)):
        what = "check" if args.command == "check" else "engine"
        print(json.dumps({what: args.name, "skipped": f"not in this variant's roster ({args.roster})"}))
        return 0
    if getattr(args, "time_limit", None):
        stop_after(args.time_limit, args.command)
    try:
        if args.command == "generate":
            generate(args.dir, args.distribution, args.sigma, args.dims, args.points, args.queries)
        elif args.command == "truth":
            truth(args.dir, args.k)
        elif args.command == "build":
            build_tree(args.dir, args.build, args.threads)
        elif args.command == "check":
            check(args.dir, args.name, args.exact, args.first)
        elif args.command == "agreement":
            agreement(args.dir)
        elif args.command == "spillway":
            run_spillway(args.dir, args.k, args.method, args.tree, args.threads, args.name, args.first)
        elif args.command in ("sklearn-kdtree", "sklearn-balltree"):
            run_sklearn(args.dir, args.k, "kd_tree" if args.command == "sklearn-kdtree" else "ball_tree",
                        args.threads, args.name, args.first)
        elif args.command == "faiss-flat":
            run_faiss(args.dir, args.k, args.threads, args.name, args.first)
        else:
            run_pykdtree(args.dir, args.k, args.threads, args.name, args.first)
    except CheckFailed as failure:
        print(f"CHECK FAILED: {failure}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
