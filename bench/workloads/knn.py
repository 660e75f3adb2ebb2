"""knn: exact k-nearest-neighbour search, Spillway's SS-tree against scikit-learn, faiss, pykdtree and kiddo.

Every variant is one (distribution, dimension d, k): N points (the size, 10^6 on the page) and a
batch of queries from `knn_peers.py generate` (NumPy, fixed seeds), then the exact answer
(`knn_peers.py truth`, computed independently of Spillway: see its docstring), then Spillway's
trees (`knn_peers.py build`: the k-means tree, and the Hilbert tree where it is compared), all
untimed in the part's setup. Every contender is one process per run that answers the whole batch
with 2 threads (timed: query s; queries/s, the headline, is queries over that time), saves its
answer and prints one JSON line; after every run the answer is checked against the truth,
untimed: Spillway's bit for bit (else the benchmark stops), the peers' within 1e-4 of the exact
distance at every rank, or within float32 rounding. A peer's process also loads the points and
builds its index (timed: build s). A Spillway process loads the tree the setup built and saved
(`SSTree.load`, untimed), and reports that build's time as its build s (the same in every run)
and the larger of the build's and its own peak RSS as its peak RSS. The seed's builds are
deterministic (same points, options and seed, same tree), so rebuilding it in each of five
contenders' runs measured nothing new and cost the most at high d: a k-means build at d = 64 and
10^6 points is some 15 s, 5 contenders x 3 runs over.

The matrix. The issue's is 7 dimensions x 3 distributions x 3 k = 63 variants of 10^4 queries
over 10^6 points, every peer everywhere. On 2 cores the brute-force contenders take minutes per
variant at 10^4 queries, and on uniform data at d >= 16 every tree degrades to about a brute
force (10^9 to 10^10 query-point distances per batch), so the page, 3 runs of each contender
(medians and their spread), runs a subset sized to take about 80 minutes:

- 33 variants: k = 10 at every d (2, 4, 8, 16, 32, 64, 128) and every distribution (21); k = 1
  and k = 100 at d = 8 and d = 64, every distribution (12);
- the distributions: uniform in [0, 10^4)^d, and the seed's mixture of 100 Gaussians (centres
  uniform in the same cube, equal shares) with sigma 40 (`clustered40`) and 640 (`clustered640`).
  The seed swept sigma from 40 to 10240 in powers of 4; 40 is its tightest (well-separated
  clusters, where a tree should prune most and k-means construction should help most) and 640 the
  middle of its sweep (at d = 2 the clusters overlap into a lumpy plane; at d >= 16 they stay
  apart but each is a 10^4-point Gaussian ball, hard inside). Wider spreads blur towards the
  uniform case, which is there already;
- queries per batch (params; `--set` changes them): 10^4 at d <= 8 (`queries`, the issue's
  batch: a tree answers it in 0.02 to 1 s at k = 10), 1000 at d = 16 (`mid_d_queries`) and 250 at d >= 32
  (`high_d_queries`): the work of the brute-force contenders, and of every tree on uniform data,
  grows with d, and 250 queries still take the fastest of them about a second on uniform data at
  10^6 points (spillway-brute some 0.75 s at d = 32, 1.4 s at d = 64). The brute-force contenders (spillway-brute,
  faiss-flat) answer the batch's first `brute_queries` (1000): at d <= 8 faiss would take about
  36 s a run for 10^4 (3.6 ms a query at 10^6 points) to say what 1000 say;
- who runs where (each variant's `roster` param; a contender left out prints so at once and leaves
  no figures): Spillway's psb-kmeans, bnb-kmeans, brute and auto, faiss-flat, pykdtree and kiddo
  everywhere; spillway-psb-hilbert (and the Hilbert tree's build) where the seed's comparison of
  the constructions is made, k = 10 at d = 2, 8, 16 and 64, every distribution (12 variants);
  scikit-learn's KDTree and BallTree up to d = 32 (21 variants): at d = 64 and 10^6 points their
  build alone is about 20 s a run (40 s at d = 128), and KDTree took 177 s for 1000 uniform
  queries (a trial run); at d = 16 and 32 they already show how they degrade;
- every contender gets `time_limit` seconds (120, three times the slowest run expected, about 40
  s: pykdtree on uniform data at d = 64, k = 100) per run: a peer still going is stopped and
  reported failed, its later runs skipped; a Spillway contender still going stops the benchmark,
  as any Spillway failure does. pykdtree refuses d = 128 and fails at once there.

Estimated time of the page's command (`--size 1M --runs 3`, a quiet machine): about 81 minutes,
plus kiddo's driver's build (a minute) when it is not built yet. Of it: untimed setup about 10
minutes (generation, truth, the trees' builds and saves: some 7 s a part at d = 2 to 45 s at
d = 128, the k-means build itself about 2 s at d = 2, 14 s at d = 64, 32 s at d = 128); the runs
and their checks about 67 minutes; the agreement probes and the page, rewritten after every part,
about 4 minutes. By group: k = 10 at d <= 8, 12.5 minutes; at d = 16 and 32, 18.6; at d = 64
and 128, 20.1; the k sweep at d = 8, 13.9, and at d = 64, 15.7.

How: a run is its fixed part plus its batch at a per-query time. The per-query times at 10^6
points are measured ones where trials measured them (single runs of some contenders on 10
variants at 10^6 points, the machine otherwise quiet, with the former design's batches):
on uniform data at d = 16 and 64, auto 2.7 and 7.9 ms, bnb 2.7 and 18.4, brute 1.7 and 5.7,
scikit-learn's KDTree 13.5 and 177.5, faiss 5.0 and 15.8; on clustered40 at d = 16, auto 0.11,
bnb 0.13, brute 1.5, KDTree 0.61, faiss 4.2; faiss 3.6 and brute 0.8 at d = 4; the trees at
d <= 8 from 0.004 ms (auto, d = 2) to 0.12 ms (KDTree, clustered640, d = 8). The others (psb,
BallTree, pykdtree, kiddo; d = 32 and 128; k = 1 and 100) are their ratio, in runs at 10^5
points (one run of 21 variants of the former design, and one of this design's uniform variants
from d = 16 to 128, both while the machine was shared), to a contender measured at 10^6 points
(Spillway's searches to auto, the peers to KDTree; at d = 32 and 128 auto's own time
interpolated by the same runs): on uniform data at d = 64, for instance, psb-kmeans 3.4 times
auto's time, psb-hilbert 2.1, pykdtree 0.64 times KDTree's, kiddo 0.29. The clustered data above
d = 16 is the least grounded: the former design's 10^5-point figures times 4 to 17 for ten times
the points. The fixed parts, from the same trials: scikit-learn 2 s + 0.3 s x d (import, the
float64 copy and the build: 21.8 s at d = 64), faiss 0.5 s, pykdtree and kiddo 0.1 to 3 s,
Spillway 0.4 s + the tree's load (0.8 s at d = 64), each check 0.4 to 1.1 s. For example
uniform:d64:k10: 3 rounds of psb-kmeans 8.7 s, psb-hilbert 6.0, bnb 6.3, brute 3.3, auto 4.0,
faiss 5.3, pykdtree 31, kiddo 15 (run and check) are 4.0 minutes, plus 28 s of setup and 7 s of
probe and page: 4.6 minutes. The extrapolated figures are the uncertain part (the 10^5-point runs
shared the machine, and some ran older code): a quarter more than estimated is about 100 minutes.

The peers, each with 2 threads: scikit-learn's `NearestNeighbors(algorithm="kd_tree" |
"ball_tree", n_jobs=2)` (the query batch split over 2 threads by joblib; the build has one),
faiss-cpu's `IndexFlatL2` (`faiss.omp_set_num_threads(2)`), pykdtree (`OMP_NUM_THREADS=2`; it
takes at most 127 dimensions, so at d = 128 it fails at once and is reported so), and kiddo 6
(`ImmutableKdTree<f32, D>`, bench/knn-driver, the batch split over 2 `std::thread::scope`
threads; its build has one; a shell reads the roster, then execs the driver).
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
# The seed's comparison of its constructions (spillway-psb-hilbert, and the Hilbert tree it needs) at these
# dimensions, k = 10, every distribution.
HILBERT_DIMS = [2, 8, 16, 64]
# Batches: `queries` up to this dimension, `mid_d_queries` up to HIGH_D, `high_d_queries` from HIGH_D on.
LOW_D = 8
HIGH_D = 32
# Spillway's contenders, in the order they run: name -> (method, the part's tree it loads).
SPILLWAY = {
    "spillway-psb-kmeans": ("psb", "kmeans"),
    "spillway-psb-hilbert": ("psb", "hilbert"),
    "spillway-bnb-kmeans": ("bnb", "kmeans"),
    "spillway-brute": ("brute", "kmeans"),
    "spillway-auto": ("auto", "kmeans"),
}
PYTHON_PEERS = {
    "sklearn-kdtree": [PIP_SCIKIT_LEARN],
    "sklearn-balltree": [PIP_SCIKIT_LEARN],
    "faiss-flat": [PIP_FAISS_CPU],
    "pykdtree": [PIP_PYKDTREE],
}
PEERS = [*PYTHON_PEERS, "kiddo"]
# A pass over every point per query: they answer the batch's first `brute_queries` queries.
BRUTE_FORCE = ["spillway-brute", "faiss-flat"]
# scikit-learn's trees run up to this dimension (see the module's docstring for why not beyond).
SKLEARN = ["sklearn-kdtree", "sklearn-balltree"]
SKLEARN_MAX_D = 32
# The targets.
LOW_D_KDTREE_TARGET = 1.5
CLUSTERED_16_FAISS_TARGET = 5.0
UNIFORM_16_FAISS_TARGET = 1.0
HIGH_D_FAISS_TARGET = 1 / 1.5

# `sh -c KIDDO_GATE kiddo ROSTER DRIVER ARGS...`: the driver when kiddo is in the roster, else what a left-out
# contender prints (str.format fills every template: the braces are doubled).
KIDDO_GATE = (
    'case ",$1," in *,kiddo,*) shift; exec "$@";; '
    '*) echo \'{{"engine": "kiddo", "skipped": "not in the roster of this variant"}}\';; esac'
)
KNN_DRIVER = CargoBuild(name="knn_driver", binary="knn-driver", manifest="bench/knn-driver/Cargo.toml")


def answer(name: str) -> list[str]:
    """The files a contender's answer may leave (knn_peers.py saves NAME.npz; the kiddo driver two .npy)."""
    return [f"{{dir}}/{name}.npz", f"{{dir}}/{name}.indices.npy", f"{{dir}}/{name}.distances.npy"]


def contender(
    name: str, command: list[str], spillway: bool = False, requires: list[Requirement] | None = None
) -> Contender:
    # The answer stays after the run (the agreement probe reads the last one); a stale one is removed first.
    first = ["--first", "{brute_queries}"] if name in BRUTE_FORCE else []
    return Contender(
        name=name,
        role="spillway" if spillway else "peer",
        command=command if name == "kiddo" else [*command, *first, "--roster", "{roster}"],
        result="json-line",
        prepare=[Step(command=["rm", "-f", *answer(name)])],
        validate=[Step(command=["{python}", KNN_PEERS, "check", "{dir}", name, *(["--exact"] if spillway else []),
                                *first, "--roster", "{roster}"])],
        requires=requires or [],
        may_fail=not spillway,
    )


def contenders() -> list[Contender]:
    common = ["{dir}", "--k", "{k}", "--threads", "{threads}", "--time-limit", "{time_limit}"]
    found = [
        contender(name, [VENV_PYTHON, KNN_PEERS, "spillway", *common, "--method", method, "--tree", tree,
                         "--name", name], spillway=True)
        for name, (method, tree) in SPILLWAY.items()
    ]
    found += [
        contender(name, ["{python}", KNN_PEERS, name, *common, "--name", name], requires=[*requires, PIP_NUMPY])
        for name, requires in PYTHON_PEERS.items()
    ]
    # The driver takes no roster: a shell reads it, then execs the driver (GNU time measures the driver itself).
    found.append(contender("kiddo", ["sh", "-c", KIDDO_GATE, "kiddo", "{roster}", "{knn_driver}", "--dir", "{dir}",
                                     "--dims", "{dims}", "--k", "{k}", "--threads", "{threads}", "--out", "{dir}/kiddo",
                                     "--time-limit", "{time_limit}"]))
    return found


def queries_param(dims: int) -> str:
    return "{queries}" if dims <= LOW_D else "{mid_d_queries}" if dims < HIGH_D else "{high_d_queries}"


def roster(distribution: str, dims: int, k: int) -> list[str]:
    """The contenders that run in a variant, in the declared order."""
    names = [*SPILLWAY, *PEERS]
    if not (k == 10 and dims in HILBERT_DIMS):
        names.remove("spillway-psb-hilbert")
    if dims > SKLEARN_MAX_D:
        names = [name for name in names if name not in SKLEARN]
    return names


def variant_comparisons(distribution: str, dims: int, k: int) -> list[Comparison]:
    """The issue's targets where they apply, then Spillway against every peer and its own constructions."""
    running = roster(distribution, dims, k)
    found = []
    targeted: set[str] = set()
    if dims <= LOW_D and k == 10:
        found.append(Comparison(label="d <= 8, k = 10: vs scikit-learn's KDTree", contender="spillway-auto",
                                peer="sklearn-kdtree", target=LOW_D_KDTREE_TARGET))
        targeted.add("sklearn-kdtree")
    if dims == 16 and k == 10:
        clustered = distribution != "uniform"
        found.append(Comparison(label=f"d = 16, {'clustered' if clustered else 'uniform'}: vs faiss flat",
                                contender="spillway-auto", peer="faiss-flat",
                                target=CLUSTERED_16_FAISS_TARGET if clustered else UNIFORM_16_FAISS_TARGET))
        targeted.add("faiss-flat")
    if dims >= 64 and distribution == "uniform":
        found.append(Comparison(label="d >= 64, uniform: within 1.5x of faiss flat", contender="spillway-auto",
                                peer="faiss-flat", target=HIGH_D_FAISS_TARGET))
        targeted.add("faiss-flat")
    if "spillway-psb-hilbert" in running:
        found.append(Comparison(label="nodes visited per query: k-means over Hilbert construction (PSB)",
                                contender="spillway-psb-kmeans", peer="spillway-psb-hilbert",
                                metric="nodes_per_query", target=1.0))
        found.append(Comparison(label="queries/s: k-means over Hilbert construction (PSB)",
                                contender="spillway-psb-kmeans", peer="spillway-psb-hilbert"))
    peers = [peer for peer in PEERS if peer in running]
    found += [Comparison(label="queries/s", contender="spillway-auto", peer=peer)
              for peer in peers if peer not in targeted]
    found.append(Comparison(label="peak RSS: vs the leanest peer", contender="spillway-auto", peer=peers,
                            metric="peak_rss_mib"))
    return found


def variant(distribution: str, dims: int, k: int) -> Variant:
    kind, sigma = DISTRIBUTIONS[distribution]
    spread = "uniform in [0, 10^4)^d" if kind == "uniform" else f"100 Gaussian clusters, sigma {sigma}"
    running = roster(distribution, dims, k)
    left_out = [name for name in [*SPILLWAY, *PEERS] if name not in running]
    builds = ["kmeans"] + (["hilbert"] if "spillway-psb-hilbert" in running else [])
    return Variant(
        name=f"{distribution}:d{dims}:k{k}",
        description=f"{spread}, d = {dims}, k = {k}" + (f"; not run here: {', '.join(left_out)}" if left_out else ""),
        params={"distribution": distribution, "dims": str(dims), "k": str(k), "roster": ",".join(running)},
        setup=[
            Step(command=["{python}", KNN_PEERS, "generate", "{dir}", "--distribution", kind, "--sigma", sigma,
                          "--dims", str(dims), "--points", "{records}", "--queries", queries_param(dims)]),
            Step(command=["{python}", KNN_PEERS, "truth", "{dir}", "--k", str(k)],
                 capture={"truth_s": r'"seconds": ([0-9.]+)', "truth_fallbacks": r'"fallbacks": (\d+)'}),
            *[Step(command=[VENV_PYTHON, KNN_PEERS, "build", "{dir}", "--build", build, "--threads", "{threads}"])
              for build in builds],
        ],
        comparisons=variant_comparisons(distribution, dims, k),
    )


def variants() -> list[Variant]:
    """k = 10 at every dimension and distribution, dimension by dimension; then the k sweep."""
    found = [variant(distribution, dims, 10) for dims in DIMS for distribution in DISTRIBUTIONS]
    found += [variant(distribution, dims, k)
              for dims in K_SWEEP_DIMS for k in (1, 100) for distribution in DISTRIBUTIONS]
    return found


def answered(source: str) -> str:
    """A harness figure, for a run that answered: a contender left out of a variant's roster prints no
    result figures, and its process (milliseconds) must leave no row in that part's tables."""
    return f"{source} + 0 * result.query_s"


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
        "its own process, and saves the answer, which is checked after the run, untimed. A peer loads the points "
        "and queries (.npy, or raw f32 for kiddo), builds its index (build s) and answers the batch (query s). "
        "Spillway's trees are built once per part, in its setup (`spillway.knn.SSTree(points, leaf_size=64, "
        "degree=32, build=\"kmeans\" | \"hilbert\", seed=42, threads=2)`, deterministic, then `tree.save`), with "
        "their build's time and peak memory recorded; each Spillway run loads its tree (`SSTree.load`, untimed) "
        "and answers the batch (`tree.query(queries, k, method=..., threads=2, stats=True)`), and reports that "
        "build as its build s. Queries/s is the batch over the query time alone; the process's wall time adds "
        "the interpreter's start, loading and saving (and, for Spillway, not the build); peak RSS counts the "
        "points as loaded (N x d x 4 bytes) and, for the Python contenders, the interpreter and its libraries "
        "(scikit-learn's trees hold a float64 copy of the points): GNU time's of the whole process for a peer, "
        "for Spillway the larger of its build's process and its query's. Every Spillway answer must be the "
        "canonical one bit for bit. Not every contender runs in every variant: each part says which did not."
    ),
    size_unit="records",
    record_bytes=None,
    default_size="1M",
    default_runs=3,
    cold=False,
    params={"threads": "2", "queries": "10000", "mid_d_queries": "1000", "high_d_queries": "250",
            "brute_queries": "1000", "time_limit": "120"},
    builds=[KNN_DRIVER],
    # The setup's generation and truth, and the checks.
    requires=[PIP_NUMPY, PIP_SCIPY, PIP_THREADPOOLCTL],
    variants=variants(),
    contenders=contenders(),
    metrics=[
        Metric("queries_per_s", "queries/s", "result.queries / result.query_s", digits=0),
        Metric("query_s", "query s", "result.query_s", better="lower", digits=3),
        Metric("build_s", "build s", "result.build_s", better="lower", digits=2),
        # Spillway's: the larger of its build's process (setup) and its query's; a peer's: GNU time's.
        Metric("peak_rss_mib", "peak RSS MiB", ["result.peak_rss_kib / 1024", answered("peak_rss_kib / 1024")],
               better="lower", digits=0),
        Metric("wall_s", "process s", answered("wall_s"), better="lower"),
        Metric("cpu_s", "CPU s", answered("cpu_s"), better="lower"),
        # Internal nodes evaluated and leaves scanned: every node a search
        # touches, as the seed counts them.
        Metric("nodes_per_query", "nodes visited per query",
               "(result.nodes_visited + result.leaves_scanned) / result.queries",
               better="lower", digits=1),
        Metric("leaves_per_query", "leaves scanned per query", "result.leaves_scanned / result.queries",
               better="lower", digits=1),
        Metric("distances_per_query", "distances per query", "result.distances_computed / result.queries",
               better="lower", digits=0),
        Metric("index_mib", "tree MiB", "result.tree.bytes / 1048576", better="lower", digits=1),
        Metric("load_s", "tree load s", "result.load_s", better="lower", digits=2),
        Metric("build_rss_mib", "build peak RSS MiB", "result.build_peak_rss_kib / 1024", better="lower", digits=0),
        Metric("query_rss_mib", "query peak RSS MiB", "result.query_peak_rss_kib / 1024", better="lower", digits=0),
        Metric("tree_levels", "levels", "result.tree.levels", better=None, digits=0),
        Metric("leaf_fill", "leaf fill", "result.tree.leaf_fill", better=None, digits=2),
    ],
    tables=[
        Table("k nearest neighbours, 2 threads",
              metrics=["queries_per_s", "query_s", "build_s", "peak_rss_mib", "wall_s", "cpu_s"],
              text=(
                  "Queries/s over the batch's query time alone (`time.perf_counter` around the query call, or "
                  "`Instant` in kiddo's driver), over the queries answered (the brute-force contenders, "
                  "spillway-brute and faiss-flat, answer the batch's first 1000 where it is larger); build s is "
                  "the index's construction from the points in memory (faiss's flat index only copies them; "
                  "Spillway's tree is built once in the part's setup, so its build s is that one build in every "
                  "run, and its process s leaves it out)."
              )),
        Table("Spillway's searches: work per query", chart=False,
              metrics=["nodes_per_query", "leaves_per_query", "distances_per_query", "index_mib", "tree_levels",
                       "leaf_fill", "load_s", "build_rss_mib", "query_rss_mib"],
              text=(
                  "The engine's counters (`stats=True`): nodes visited (internal nodes whose children's bounds were "
                  "evaluated plus leaves scanned: every node a search touches, the seed's measure), leaves scanned, "
                  "distances computed (by the f32 filter or canonically), each over the "
                  "queries; and the tree's own statistics (`tree.stats()`). `auto` picks one search per batch "
                  "(none of nodes and leaves when it picks brute force). The seed compared its two constructions "
                  "by nodes visited per query: k-means should visit fewer than Hilbert packing (Spillway's k-means "
                  "build is bisecting 2-means with cuts at multiples of the leaf size, see crates/knn/DESIGN.md). Tree load s: `SSTree.load` of the part's saved tree (checksums and invariants "
                  "verified; untimed). Build and query peak RSS: VmHWM of the setup's build process, right after "
                  "the build, and of the run's process; the first table's peak RSS is the larger."
              )),
    ],
    targets=[
        ProbeTarget(label=f"exact answers: {name}'s queries answered bit for bit (%)", probe="agreement",
                    where={"contender": name}, field="exact_queries_percent", value=100.0, better="higher")
        for name in SPILLWAY
    ],
    probes=[AGREEMENT],
    page_command="python3 bench/run.py knn --size 1M --runs 3",
    scale_note=(
        "The issue's benchmark is 63 variants (7 dimensions x 3 distributions x k = 1, 10, 100), each a batch of "
        "10^4 queries over 10^6 points, every peer everywhere. On this machine's 2 cores the brute-force "
        "contenders, and every tree on uniform data at d >= 16, compute 10^9 to 10^10 query-point distances per "
        "batch: one run of that matrix would take about 18 hours. The page runs 33 of the variants (k = 10 "
        "everywhere, k = 1 and 100 at d = 8 and 64), 3 runs of each contender, in about 80 minutes (estimated "
        "from runs at 10^6 points of some contenders and variants and at 10^5 points of the rest; see "
        "bench/workloads/knn.py): batches of 10^4 queries at d <= 8, 1000 at d = 16 and 250 at d >= 32, of which "
        "the brute-force contenders (spillway-brute, faiss-flat) answer the first 1000; Spillway's trees built "
        "once per part, in its setup; spillway-psb-hilbert only where the constructions are compared (k = 10, "
        "d = 2, 8, 16, 64); scikit-learn's trees only up to d = 32 (at d = 64, 10^6 points, their build alone "
        "takes about 20 s a run, and KDTree took 177 s for 1000 uniform queries in one trial run); every "
        "contender stopped after 120 s (three times the slowest run expected; a peer that is stopped is reported "
        "failed). Queries/s is over a batch's time: a smaller batch makes a shorter measurement (the shortest, "
        "the trees' at d = 2 and on the tight clusters at d >= 32, take some 20 to 100 ms), and a brute "
        "force, which gains from large batches (faiss's BLAS path), may rate a little lower on 250 or 1000 "
        "queries than on 10^4."
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
            "both trees). Every Spillway contender but `spillway-psb-hilbert` answers on the part's k-means tree "
            "(brute force scans every leaf: the tree's shape does not change its work)."
        ),
        (
            "Who runs where (each variant's `roster`; a contender left out prints that it was and leaves no "
            "figures, and the part's line names it): every variant runs spillway-psb-kmeans, spillway-bnb-kmeans, "
            "spillway-brute, spillway-auto, faiss-flat, pykdtree and kiddo; spillway-psb-hilbert (and the Hilbert "
            "tree's build) runs at k = 10 and d = 2, 8, 16 and 64, where the seed's comparison of the constructions "
            "is made; scikit-learn's KDTree and BallTree run up to d = 32. The brute-force contenders answer the "
            "batch's first `brute_queries` (1000) queries: at d <= 8 a batch of 10^4 would take faiss about 36 s "
            "a run at 10^6 points, and its rate per query is what is compared."
        ),
        (
            "Fairness: every contender answers the same batch (or its first 1000 queries) with 2 threads. The "
            "builds: Spillway's with 2 threads, once per part (a deterministic build: every run would rebuild the "
            "same tree); scikit-learn's, pykdtree's and kiddo's with one, in every run (none offers more through "
            "these APIs; kiddo's "
            "parallel construction needs rayon, which its driver leaves out). kiddo is compiled for the dimensions "
            "of the matrix only (a const generic: `ImmutableKdTree<f32, D>` for D in 2, 4, 8, 16, 32, 64, 128); "
            "pykdtree refuses more than 127 dimensions, so it is reported failed at d = 128."
        ),
    ],
)
