"""pmem-tree: Spillway's B3-tree (persistent B+-tree of in-page binary search trees) in each persistence mode against
its sorted-leaf baseline in FAST&FAIR's manner on the same primitive, and std BTreeMap in DRAM, PiBench-style, with
its recovery figures and a crash-state run.

The driver (bench/pmem-driver) runs spillway_pmem::bench's phases on one contender: inserts of N distinct u64 keys
(8-byte values), positive searches drawn by a distribution, scans of 100 keys from a drawn key (one per ten keys),
negative searches, deletes of every key; each phase timed on 1 or 2 threads, one operation in 128 timed alone for
the percentiles, the persistence mode's flushes and fences counted. The trees live in region files on the same
huge-page tmpfs as the pmem workload's table. `tree-recovery` fills a B3-tree, leaves it as a crash would and times
the open to its first search, the recovery its first write makes, and the full check. The crash run is
`spillway pmem crashtest --index btree`.
"""

from __future__ import annotations

from declarations import Comparison, Contender, Metric, Table, Target, Workload
from workloads.pmem import HUGE_TMPFS, PMEM_DRIVER

TREE = "{pmem_dir}/spillway-pmem-tree.table"
PHASES = ["insert", "search", "scan", "negative_search", "delete"]
LABELS = {"insert": "insert", "search": "search", "scan": "scan", "negative_search": "negative search",
          "delete": "delete"}
# Page bytes: the B3-tree's 4 KiB (the seed's leaves are 8x FAST&FAIR's), the baseline's 512 (FAST&FAIR's own).
PAGE_BYTES = {"b3tree": 4096, "fastfair": 512}

# The targets.
INSERT_FLUSHES = 2.5
DELETE_FLUSHES = 2.5
INSERT_RATIO = 1.3
SCAN_RATIO = 1.0
SEARCH_RATIO = 0.8
CRASH_IMAGES = 1e5
OPEN_MS = 1.0


def phases(name: str, contender: str, threads: int = 1, persistence: str = "clwb",
           distribution: str = "uniform") -> Contender:
    command = ["{pmem_driver}", "phases", "--contender", contender, "--keys", "{records}", "--threads", str(threads),
               "--distribution", distribution]
    spillway = contender in PAGE_BYTES
    if spillway:
        command = HUGE_TMPFS + command + ["--page-bytes", str(PAGE_BYTES[contender]), "--persistence", persistence,
                                          "--table", TREE]
    return Contender(name=name, role="spillway" if spillway else "peer", group="phases", command=command,
                     result="json-line", cleanup=[TREE] if spillway else [])


def contenders() -> list[Contender]:
    plan = [phases(f"b3 {mode} t1", "b3tree", persistence=mode) for mode in ("clwb", "fence", "none", "latency:300ns")]
    plan.append(phases("b3 clwb t2", "b3tree", threads=2))
    plan.append(phases("b3 clwb t1 zipfian", "b3tree", distribution="zipfian"))
    plan += [phases(f"fastfair {mode} t1", "fastfair", persistence=mode) for mode in ("clwb", "latency:300ns")]
    plan.append(phases("fastfair clwb t2", "fastfair", threads=2))
    plan.append(phases("fastfair clwb t1 zipfian", "fastfair", distribution="zipfian"))
    plan.append(phases("btreemap t1", "btreemap"))
    plan.append(phases("btreemap t1 zipfian", "btreemap", distribution="zipfian"))
    plan.append(Contender(name="b3 recovery", role="spillway", group="recovery",
                          command=HUGE_TMPFS + ["{pmem_driver}", "tree-recovery", "--contender", "b3tree",
                                                "--page-bytes", str(PAGE_BYTES["b3tree"]), "--keys", "{records}",
                                                "--table", TREE],
                          result="json-line", cleanup=[TREE]))
    plan.append(Contender(name="b3 crashtest", role="spillway", group="crash",
                          command=["{spillway}", "pmem", "crashtest", "--index", "btree", "--operations",
                                   "{crash_operations}", "--json"],
                          result="json"))
    return plan


def phase_metrics() -> list[Metric]:
    metrics = []
    for phase in PHASES:
        source = f"result.phases.{phase}"
        metrics.append(Metric(f"{phase}_mops", f"{LABELS[phase]} Mops/s", f"{source}.operations_per_s", scale=1e-6,
                              groups=["phases"]))
        for quantile, label in (("p50", "p50"), ("p99", "p99")):
            metrics.append(Metric(f"{phase}_{quantile}", f"{LABELS[phase]} {label} ns", f"{source}.{quantile}_ns",
                                  better="lower", digits=0, groups=["phases"]))
    for phase in ("insert", "delete"):
        source = f"result.phases.{phase}"
        metrics.append(Metric(f"{phase}_flushes", f"{phase} flushes", f"{source}.flushes_per_operation",
                              better="lower", digits=3, groups=["phases"]))
        metrics.append(Metric(f"{phase}_fences", f"{phase} fences", f"{source}.fences_per_operation",
                              better="lower", digits=3, groups=["phases"]))
    return metrics


def recovery_metrics() -> list[Metric]:
    recovery = ["recovery"]
    return [
        Metric("height", "levels", "result.height", better=None, digits=0, groups=recovery),
        Metric("open_ms", "open to first search ms", "result.recover_to_first_op_ms", better="lower", digits=3,
               groups=recovery),
        Metric("repair_ms", "recovery at the first write ms", "result.repair_ms", better="lower", digits=1,
               groups=recovery),
        Metric("check_ms", "full check ms", "result.full_check_ms", better="lower", digits=1, groups=recovery),
        Metric("clean_open_ms", "clean open to first search ms", "result.clean_open_to_first_op_ms",
               better="lower", digits=3, groups=recovery),
    ]


def ratio(label: str, phase: str, b3: str, peer: str, target: float | None = None) -> Comparison:
    return Comparison(label=label, contender=b3, peer=peer, metric=f"{phase}_mops", target=target)


PMEM_TREE = Workload(
    name="pmem-tree",
    title="Persistent B+-trees: the B3-tree against its sorted-leaf baseline and std BTreeMap",
    description=(
        "Each contender runs the PiBench-style phases on {records} keys of 8 bytes with 8-byte values in its own "
        "process (bench/pmem-driver): inserts, positive searches (uniform or Zipfian 0.99), scans of 100 keys in "
        "order from a key drawn as the searches draw (one scan per ten keys), negative searches, deletes, each "
        "phase on 1 or 2 threads. Spillway's B3-tree (4 KiB pages of in-page binary search trees) and the "
        "sorted-leaf baseline (512-byte nodes of sorted records shifted in place, in the manner of FAST&FAIR, on "
        "the same region, allocator and persistence primitive) each live in a region file (4 GiB) on a tmpfs "
        "mounted with `huge=advise` for the run alone (2 MiB pages, as on a DAX mount), and persist by `clwb` + "
        "`sfence`, by fences only (`fence`), not at all (`none`), or by `clwb` plus 300 ns per flushed line "
        "(`latency:300ns`, slower media). The B3-tree's searches and scans take no lock and its inserts and "
        "deletes in different leaves run at once (splits and merges run alone); the baseline runs one operation "
        "at a time (a mutex), so its two threads take turns. std BTreeMap holds the same keys in DRAM with no "
        "persistence, on one thread. "
        "Latencies come from every 128th operation timed alone. The recovery run fills a B3-tree, drops it "
        "unclosed (as a crash leaves it), and times the open to its first search, the recovery its first write "
        "makes, and the full check of every invariant. The crash run is `spillway pmem crashtest --index btree` "
        "over random inserts, updates and removes on 512-byte pages (splits, rebuilds and merges throughout), every crash "
        "image the x86 model allows up to 4,096 per point, else a seeded sample and the targeted ones, each "
        "searched, recovered and checked."
    ),
    size_unit="records",
    record_bytes=None,
    default_size="10M",
    default_runs=3,
    cold=False,
    params={"pmem_dir": "/tmp/spillway-pmem-huge", "crash_operations": "1000"},
    builds=[PMEM_DRIVER],
    contenders=contenders(),
    metrics=phase_metrics() + recovery_metrics() + [
        Metric("crash_images", "crash images", "result.images", digits=0, groups=["crash"]),
        Metric("crash_points", "crash points", "result.points", better=None, digits=0, groups=["crash"]),
        Metric("peak_rss_mib", "peak RSS MiB", "peak_rss_kib / 1024", better="lower", digits=0),
        Metric("wall_s", "process s", "wall_s", better="lower"),
    ],
    tables=[
        Table("Throughput, Mops/s", group="phases", metrics=[f"{phase}_mops" for phase in PHASES],
              text="A scan's figure counts scans of 100 keys."),
        Table("Latency, ns", group="phases", chart=False,
              metrics=[f"{phase}_{q}" for phase in ("insert", "search", "scan") for q in ("p50", "p99")]),
        Table("Persistence per operation", group="phases", chart=False,
              metrics=["insert_flushes", "insert_fences", "delete_flushes", "delete_fences", "peak_rss_mib"],
              text="Flushes count cache lines written back, the lines of pages a split or rebuild writes whole "
                   "included."),
        Table("Recovery", group="recovery", chart=False, metrics=[m.name for m in recovery_metrics()]),
        Table("Crash states", group="crash", chart=False, metrics=["crash_images", "crash_points", "wall_s"]),
    ],
    comparisons=[
        ratio("insert, clwb", "insert", "b3 clwb t1", "fastfair clwb t1", INSERT_RATIO),
        ratio("insert, 300 ns per line", "insert", "b3 latency:300ns t1", "fastfair latency:300ns t1", INSERT_RATIO),
        ratio("scan of 100 keys, clwb", "scan", "b3 clwb t1", "fastfair clwb t1", SCAN_RATIO),
        ratio("search, clwb", "search", "b3 clwb t1", "fastfair clwb t1", SEARCH_RATIO),
        ratio("negative search, clwb", "negative_search", "b3 clwb t1", "fastfair clwb t1"),
        ratio("delete, clwb", "delete", "b3 clwb t1", "fastfair clwb t1"),
        ratio("search, Zipfian, clwb", "search", "b3 clwb t1 zipfian", "fastfair clwb t1 zipfian"),
        ratio("insert, 2 threads, clwb", "insert", "b3 clwb t2", "fastfair clwb t2"),
    ] + [
        ratio(f"{LABELS[phase]}, against DRAM", phase, "b3 clwb t1", "btreemap t1")
        for phase in ("insert", "search", "scan")
    ],
    targets=[
        Target(label="flushes per insert, amortized", contender="b3 clwb t1", metric="insert_flushes",
               value=INSERT_FLUSHES),
        Target(label="flushes per delete", contender="b3 clwb t1", metric="delete_flushes", value=DELETE_FLUSHES),
        Target(label="crash states checked", contender="b3 crashtest", metric="crash_images", value=CRASH_IMAGES),
        Target(label="open to first operation after a crash (ms)", contender="b3 recovery", metric="open_ms",
               value=OPEN_MS),
    ],
    page_command="python3 bench/run.py pmem-tree --size 10M --runs 3",
)
