"""knn: exact k-nearest-neighbour search, Spillway's SS-tree against scikit-learn, faiss, pykdtree and kiddo.

Every variant is one (distribution, dimension d, k): N points (the size, 10^6 on the page) and a
batch of queries from `knn_peers.py generate` (NumPy, fixed seeds), then the exact answer
(`knn_peers.py truth`, computed independently of Spillway: see its docstring), both untimed in the
part's setup. Every contender is one process that loads the points and queries, builds its index
(timed: build s), answers the whole batch with 2 threads (timed: query s; queries/s, the headline,
is queries over that time), saves its answer, and prints one JSON line; after every run the answer
is checked against the truth, untimed: Spillway's bit for bit (else the benchmark stops), the
peers' within 1e-4 of the exact distance at every rank, or within float32 rounding.

The matrix. The issue's is 7 dimensions x 3 distributions x 3 k = 63 variants of 10^4 queries
over 10^6 points. On 2 cores the brute-force contenders (faiss, `spillway-brute`) take minutes per
variant at 10^4 queries, and on uniform data at d >= 16 every tree degrades to about a brute
force (10^9 to 10^10 query-point distances per batch), so the page runs a subset (33 variants),
sized to take about 2 hours in one run:

- k = 10 at every d (2, 4, 8, 16, 32, 64, 128) and every distribution (21 variants);
- k = 1 and k = 100 at d = 8 and d = 64 only, every distribution (12 variants);
- the distributions: uniform in [0, 10^4)^d, and the seed's mixture of 100 Gaussians (centres
  uniform in the same cube, equal shares) with sigma 40 (`clustered40`) and 640 (`clustered640`).
  The seed swept sigma from 40 to 10240 in powers of 4; 40 is its tightest (well-separated
  clusters, where a tree should prune most and k-means construction should help most) and 640 the
  middle of its sweep (at d = 2 the clusters overlap into a lumpy plane; at d >= 16 they stay
  apart but each is a 10^4-point Gaussian ball, hard inside). Wider spreads blur towards the
  uniform case, which is there already;
- queries per batch (params, `--set` changes them): 10^4 at d <= 8 (`queries`, the issue's batch: a tree answers it in a fraction of a second), 1000 at d >= 16
  (`high_d_queries`): the work of the brute-force contenders and of every tree on uniform data
  grows with d, so the batch shrinks;
- every contender gets `time_limit` seconds (300) per run: a peer still going is stopped and
  reported failed, its later runs skipped (a peer `may_fail`: scikit-learn's trees on uniform
  data at d >= 64 may be); a Spillway contender still going stops the benchmark, as any Spillway
  failure does.

Estimated time of the page's command (one run of the 33 variants at 10^6 points), extrapolated
from one run of 21 of the variants at 10^5 points (query times x 10 for the brute-force
contenders and the trees on uniform data, builds x 12): about 2.6 hours of runs plus 7 minutes
of untimed setup as measured, while another build shared the 2 cores (load 3 to 5, many
two-thread runs getting about one core); about 1.75 hours on a quiet machine if they get both.
The uniform variants at d >= 64 take over a third of it.

The peers, each with 2 threads: scikit-learn's `NearestNeighbors(algorithm="kd_tree" |
"ball_tree", n_jobs=2)` (the query batch split over 2 threads by joblib; the build has one),
faiss-cpu's `IndexFlatL2` (`faiss.omp_set_num_threads(2)`), pykdtree (`OMP_NUM_THREADS=2`; it
takes at most 127 dimensions, so at d = 128 it fails at once and is reported so), and kiddo 6
(`ImmutableKdTree<f32, D>`, bench/knn-driver, the batch split over 2 `std::thread::scope`
threads; its build has one).
"""

from __future__ import annotations

from declarations import (
    CargoBuild,
    Column,
    Comparison,
    Contender,
    Metric,
    Probe,
    ProbeCommand,
    ProbeTarget,
    Requirement,
    Step,
    Table,
    Variant,
    Workload,
)
from workloads.requirements import (
    PIP_FAISS_CPU,
    PIP_NUMPY,
    PIP_PYKDTREE,
    PIP_SCIKIT_LEARN,
    PIP_SCIPY,
    PIP_THREADPOOLCTL,
)

KNN_PEERS = "{bench}/knn_peers.py"
# Spillway's Python package, as scripts/install.sh installs it (the harness's interpreter has none).
VENV_PYTHON = "{bench}/../.venv/bin/python"
DIMS = [2, 4, 8, 16, 32, 64, 128]
# Distribution name -> (generator's distribution, sigma).
DISTRIBUTIONS = {"uniform": ("uniform", "0"), "clustered40": ("clustered", "40"), "clustered640": ("clustered", "640")}
# k = 1 and 100 at these dimensions only; k = 10 everywhere.
K_SWEEP_DIMS = [8, 64]
# From this dimension on, batches of `high_d_queries`.
HIGH_D = 16
# Spillway's contenders: name -> (method, build). Brute force ignores the tree: it is built the cheap way.
SPILLWAY = {
    "spillway-psb-kmeans": ("psb", "kmeans"),
    "spillway-psb-hilbert": ("psb", "hilbert"),
    "spillway-bnb-kmeans": ("bnb", "kmeans"),
    "spillway-brute": ("brute", "hilbert"),
    "spillway-auto": ("auto", "kmeans"),
}
PYTHON_PEERS = {
    "sklearn-kdtree": [PIP_SCIKIT_LEARN],
    "sklearn-balltree": [PIP_SCIKIT_LEARN],
    "faiss-flat": [PIP_FAISS_CPU],
    "pykdtree": [PIP_PYKDTREE],
}
PEERS = [*PYTHON_PEERS, "kiddo"]
# The targets.
LOW_D_KDTREE_TARGET = 1.5
CLUSTERED_16_FAISS_TARGET = 5.0
UNIFORM_16_FAISS_TARGET = 1.0
HIGH_D_FAISS_TARGET = 1 / 1.5

KNN_DRIVER = CargoBuild(name="knn_driver", binary="knn-driver", manifest="bench/knn-driver/Cargo.toml")


def answer(name: str) -> list[str]:
    """The files a contender's answer may leave (knn_peers.py saves NAME.npz; the kiddo driver two .npy)."""
    return [f"{{dir}}/{name}.npz", f"{{dir}}/{name}.indices.npy", f"{{dir}}/{name}.distances.npy"]


def contender(
    name: str, command: list[str], spillway: bool = False, requires: list[Requirement] | None = None
) -> Contender:
    # The answer stays after the run (the agreement probe reads the last one); a stale one is removed first.
    return Contender(
        name=name,
        role="spillway" if spillway else "peer",
        command=command,
        result="json-line",
        prepare=[Step(command=["rm", "-f", *answer(name)])],
        validate=[Step(command=["{python}", KNN_PEERS, "check", "{dir}", name, *(["--exact"] if spillway else [])])],
        requires=requires or [],
        may_fail=not spillway,
    )


def contenders() -> list[Contender]:
    common = ["{dir}", "--k", "{k}", "--threads", "{threads}", "--time-limit", "{time_limit}"]
    found = [
        contender(name, [VENV_PYTHON, KNN_PEERS, "spillway", *common, "--method", method, "--build", build,
                         "--name", name], spillway=True)
        for name, (method, build) in SPILLWAY.items()
    ]
    found += [
        contender(name, ["{python}", KNN_PEERS, name, *common, "--name", name], requires=[*requires, PIP_NUMPY])
        for name, requires in PYTHON_PEERS.items()
    ]
    found.append(contender("kiddo", ["{knn_driver}", "--dir", "{dir}", "--dims", "{dims}", "--k", "{k}", "--threads",
                                     "{threads}", "--out", "{dir}/kiddo", "--time-limit", "{time_limit}"]))
    return found


def queries_param(dims: int) -> str:
    return "{high_d_queries}" if dims >= HIGH_D else "{queries}"


def variant_comparisons(distribution: str, dims: int, k: int) -> list[Comparison]:
    """The issue's targets where they apply, then Spillway against every peer and its own constructions."""
    found = []
    if dims <= 8 and k == 10:
        found.append(Comparison(label="d <= 8, k = 10: vs scikit-learn's KDTree", contender="spillway-auto",
                                peer="sklearn-kdtree", target=LOW_D_KDTREE_TARGET))
    if dims == 16 and k == 10:
        clustered = distribution != "uniform"
        found.append(Comparison(label=f"d = 16, {'clustered' if clustered else 'uniform'}: vs faiss flat",
                                contender="spillway-auto", peer="faiss-flat",
                                target=CLUSTERED_16_FAISS_TARGET if clustered else UNIFORM_16_FAISS_TARGET))
    if dims >= 64 and distribution == "uniform":
        found.append(Comparison(label="d >= 64, uniform: within 1.5x of faiss flat", contender="spillway-auto",
                                peer="faiss-flat", target=HIGH_D_FAISS_TARGET))
    found.append(Comparison(label="nodes visited per query: k-means over Hilbert construction (PSB)",
                            contender="spillway-psb-kmeans", peer="spillway-psb-hilbert", metric="nodes_per_query",
                            target=1.0))
    found.append(Comparison(label="queries/s: k-means over Hilbert construction (PSB)",
                            contender="spillway-psb-kmeans", peer="spillway-psb-hilbert"))
    found += [Comparison(label="queries/s", contender="spillway-auto", peer=peer)
              for peer in PEERS if not (peer == "sklearn-kdtree" and dims <= 8 and k == 10)
              and not (peer == "faiss-flat" and (dims == 16 and k == 10 or dims >= 64 and distribution == "uniform"))]
    found.append(Comparison(label="peak RSS: vs the leanest peer", contender="spillway-auto", peer=PEERS,
                            metric="peak_rss_mib"))
    return found


def variant(distribution: str, dims: int, k: int) -> Variant:
    kind, sigma = DISTRIBUTIONS[distribution]
    spread = "uniform in [0, 10^4)^d" if kind == "uniform" else f"100 Gaussian clusters, sigma {sigma}"
    return Variant(
        name=f"{distribution}:d{dims}:k{k}",
        description=f"{spread}, d = {dims}, k = {k}",
        params={"distribution": distribution, "dims": str(dims), "k": str(k)},
        setup=[
            Step(command=["{python}", KNN_PEERS, "generate", "{dir}", "--distribution", kind, "--sigma", sigma,
                          "--dims", str(dims), "--points", "{records}", "--queries", queries_param(dims)]),
            Step(command=["{python}", KNN_PEERS, "truth", "{dir}", "--k", str(k)],
                 capture={"truth_s": r'"seconds": ([0-9.]+)', "truth_fallbacks": r'"fallbacks": (\d+)'}),
        ],
        comparisons=variant_comparisons(distribution, dims, k),
    )


def variants() -> list[Variant]:
    """k = 10 at every dimension and distribution, dimension by dimension; then the k sweep."""
    found = [variant(distribution, dims, 10) for dims in DIMS for distribution in DISTRIBUTIONS]
    found += [variant(distribution, dims, k)
              for dims in K_SWEEP_DIMS for k in (1, 100) for distribution in DISTRIBUTIONS]
    return found


AGREEMENT = Probe(
    name="agreement",
    title="Answers against the exact one",
    commands=[ProbeCommand(["{python}", KNN_PEERS, "agreement", "{dir}"])],
    columns=[
        Column("contender", "contender", 0),
        Column("queries", "queries", 0),
        Column("same points", "same_points_percent", 2, "%"),
        Column("bit for bit", "exact_percent", 2, "%"),
        Column("queries bit for bit", "exact_queries_percent", 2, "%"),
        Column("worst relative distance gap", "worst_relative_gap", 6),
        Column("accepted as", "accepted", 0),
    ],
    text=(
        "Each contender's last answer against the canonical one (`knn_peers.py truth`): the share of (query, rank) "
        "entries naming the same point, the share equal bit for bit (point and float64 distance: Spillway's "
        "contract; a float32 peer reports float32 distances, so its share is near 0 even when its points are all "
        "right), and the worst gap between the exact distance of the point returned and the truth's at that rank, "
        "relative. A peer is accepted within 1e-4 relative at every rank, or within float32 rounding: twice the "
        "worst-case error of |q|^2 + |p|^2 - 2 q.p in float32, 4 (d + 2) 2^-24 (|q|^2 + max |p|^2), on the squared "
        "distance. faiss's flat index ranks by that expansion in float32 (a BLAS product) for large batches, so on "
        "the tight clusters at d >= 16, where |p|^2 is 10^4 times the squared distances or more, it returns some "
        "other points than the nearest."
    ),
)

KNN = Workload(
    name="knn",
    title="Exact k-nearest neighbours: the SS-tree against scikit-learn, faiss, pykdtree and kiddo",
    description=(
        "Every contender finds the k nearest of N points (float32) for every query of a batch, with 2 threads, in "
        "its own process: it loads the points and queries (.npy, or raw f32 for kiddo), builds its index (build "
        "s), answers the batch (query s) and saves the answer, which is checked after the run, untimed. Queries/s "
        "is the batch over the query time alone; the process's wall time adds the interpreter's start, loading "
        "and saving; peak RSS (GNU time's, of the whole process) counts the points as loaded (N x d x 4 bytes) "
        "and, for the Python contenders, the interpreter and its libraries (scikit-learn's trees hold a float64 "
        "copy of the points). Spillway's contenders are `spillway.knn.SSTree(points, leaf_size=64, degree=32, "
        "build=..., seed=42, threads=2)` and `tree.query(queries, k, method=..., threads=2, stats=True)`; every "
        "one must return the canonical answer bit for bit."
    ),
    size_unit="records",
    record_bytes=None,
    default_size="1M",
    default_runs=1,
    cold=False,
    params={"threads": "2", "queries": "10000", "high_d_queries": "1000", "time_limit": "300"},
    builds=[KNN_DRIVER],
    # The setup's generation and truth, and the checks.
    requires=[PIP_NUMPY, PIP_SCIPY, PIP_THREADPOOLCTL],
    variants=variants(),
    contenders=contenders(),
    metrics=[
        Metric("queries_per_s", "queries/s", "result.queries / result.query_s", digits=0),
        Metric("query_s", "query s", "result.query_s", better="lower", digits=3),
        Metric("build_s", "build s", "result.build_s", better="lower", digits=2),
        Metric("peak_rss_mib", "peak RSS MiB", "peak_rss_kib / 1024", better="lower", digits=0),
        Metric("wall_s", "process s", "wall_s", better="lower"),
        Metric("cpu_s", "CPU s", "cpu_s", better="lower"),
        Metric("nodes_per_query", "nodes visited per query", "result.nodes_visited / result.queries",
               better="lower", digits=1),
        Metric("leaves_per_query", "leaves scanned per query", "result.leaves_scanned / result.queries",
               better="lower", digits=1),
        Metric("distances_per_query", "distances per query", "result.distances_computed / result.queries",
               better="lower", digits=0),
        Metric("index_mib", "tree MiB", "result.tree.bytes / 1048576", better="lower", digits=1),
        Metric("tree_levels", "levels", "result.tree.levels", better=None, digits=0),
        Metric("leaf_fill", "leaf fill", "result.tree.leaf_fill", better=None, digits=2),
    ],
    tables=[
        Table("k nearest neighbours, 2 threads",
              metrics=["queries_per_s", "query_s", "build_s", "peak_rss_mib", "wall_s", "cpu_s"],
              text=(
                  "Queries/s over the batch's query time alone (`time.perf_counter` around the query call, or "
                  "`Instant` in kiddo's driver); build s is the index's construction from the points in memory "
                  "(faiss's flat index only copies them)."
              )),
        Table("Spillway's searches: work per query", chart=False,
              metrics=["nodes_per_query", "leaves_per_query", "distances_per_query", "index_mib", "tree_levels",
                       "leaf_fill"],
              text=(
                  "The engine's counters (`stats=True`): internal nodes whose children's bounds were evaluated (the "
                  "seed's measure), leaves whose points were scanned, canonical distances computed, each over the "
                  "queries; and the tree's own statistics (`tree.stats()`). `auto` picks one search per batch "
                  "(none of nodes and leaves when it picks brute force). The seed compared its two constructions "
                  "by nodes visited per query: k-means (Lloyd's algorithm per level) should visit fewer than "
                  "Hilbert packing."
              )),
    ],
    targets=[
        ProbeTarget(label=f"exact answers: {name}'s queries answered bit for bit (%)", probe="agreement",
                    where={"contender": name}, field="exact_queries_percent", value=100.0, better="higher")
        for name in SPILLWAY
    ],
    probes=[AGREEMENT],
    page_command="python3 bench/run.py knn --size 1M --runs 1",
    scale_note=(
        "The issue's benchmark is 63 variants (7 dimensions x 3 distributions x k = 1, 10, 100), each a batch of "
        "10^4 queries over 10^6 points. On this machine's 2 cores the brute-force contenders, and every tree on "
        "uniform data at d >= 16, compute 10^9 to 10^10 query-point distances per batch: one run of that matrix "
        "would take about 18 hours (extrapolated from runs at 10^5 points). The page runs 33 of the variants "
        "(k = 10 everywhere, k = 1 and 100 at d = 8 and 64) with batches of 10^4 queries at d <= 8 and 1000 at "
        "d >= 16, one run each, every contender stopped after 300 s: about 1.75 hours plus 7 minutes of untimed "
        "setup (estimated the same way). Queries/s is the batch over its time: a smaller batch makes a shorter "
        "measurement, and a brute force, which gains from large batches (faiss's BLAS path), may rate a little "
        "lower. With one run there is no spread: each figure is one measurement."
    ),
    notes=[
        (
            "Data: `knn_peers.py generate` (NumPy, seed 42 for the points and the clusters' centres, another seed "
            "for the queries). Uniform: every coordinate uniform in [0, 10^4). Clustered: the seed's mixture of 100 "
            "Gaussian clusters, centres uniform in [0, 10^4)^d, the same deviation sigma on every axis, equal shares "
            "of the points (the rows shuffled); the queries come from the same mixture. Points and queries are "
            "float32, as every contender takes them."
        ),
        (
            "The exact answer (setup, untimed; `truth_s` on each part): the canonical distance is the squared "
            "difference summed in float64 in dimension order, each coordinate widened first, no fused multiply-add, "
            "ties to the smaller index, distance its square root. Candidates come from SciPy's exact k-d tree in "
            "float64 (d <= 8) or from float64 BLAS products of blocks (d >= 16), k + 4 per query; the canonical "
            "distance of every candidate is then computed by the dimension-order loop and the k smallest by "
            "(distance, index) kept. A rounding bound on the candidates' distances proves per query that no other "
            "point can be in the answer or tie with it; a query it cannot prove (`truth_fallbacks`) is recomputed "
            "over every point."
        ),
        (
            "Checks (after every run, untimed): Spillway's contenders must return the canonical answer bit for bit "
            "(points and float64 distances), else the benchmark stops with OUTPUT DID NOT VALIDATE. A peer, which "
            "computes in float32 (faiss, pykdtree, kiddo) or in float64 in its own order (scikit-learn), passes when "
            "every index is a distinct point and at every rank the exact distance of the point it returned is within "
            "1e-4 (relative) of the truth's, or within float32 rounding (see the agreement table); a peer that does "
            "not is reported failed."
        ),
        (
            "Targets (the issue's): exact answers in every case; at d <= 8 and k = 10, `spillway-auto` at least "
            "1.5x scikit-learn's KDTree; at d = 16, at least 5x faiss's flat index on the clustered data and at "
            "least its speed on uniform data; at d >= 64 on uniform data, within 1.5x of faiss flat (a ratio of "
            "at least 0.67); k-means construction visiting fewer nodes per query than Hilbert construction (PSB on "
            "both trees). `spillway-brute` runs on the Hilbert tree (its build is the cheaper one, and brute force "
            "does not use it); `spillway-auto` on the k-means tree."
        ),
        (
            "Fairness: every contender answers the same batch with 2 threads. The builds: Spillway's with 2 "
            "threads; scikit-learn's, pykdtree's and kiddo's with one (none offers more through these APIs; kiddo's "
            "parallel construction needs rayon, which its driver leaves out). kiddo is compiled for the dimensions "
            "of the matrix only (a const generic: `ImmutableKdTree<f32, D>` for D in 2, 4, 8, 16, 32, 64, 128); "
            "pykdtree refuses more than 127 dimensions, so it is reported failed at d = 128."
        ),
    ],
)
