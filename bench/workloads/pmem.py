"""pmem: Spillway's CCEH (persistent-memory extendible hashing) in each persistence mode against hashbrown and
std HashMap in DRAM, PiBench-style, with its recovery figures and a crash-state run.

The driver (bench/pmem-driver) runs spillway_pmem::bench's phases on one contender: inserts of N distinct u64 keys
(8-byte values), positive searches drawn by a distribution, the same searches 256 keys to a call, negative
searches, deletes of every key; each phase
timed on 1 or 2 threads, one operation in 128 timed alone for the percentiles, the persistence mode's flushes and
fences counted. The table is a region file on a tmpfs mounted with `huge=advise` in the run's own mount namespace
(no persistent memory here: the flushes run for real), so that it is mapped in 2 MiB pages as on a DAX mount; the
peers' tables get 2 MiB pages too (the driver's allocator asks for them).
`recovery` fills a table, then leaves it as a crash would and times the open to its first search, the repair and
the full check. The crash run is `spillway pmem crashtest`.
"""

from __future__ import annotations

from declarations import CargoBuild, Comparison, Contender, Metric, Table, Target, Workload

PMEM_DRIVER = CargoBuild(name="pmem_driver", binary="pmem-driver", manifest="bench/pmem-driver/Cargo.toml")
TABLE = "{pmem_dir}/spillway-pmem-bench.table"
# A tmpfs of 2 MiB pages at {pmem_dir}, private to the run's process (the
# mount is gone when it exits): a DAX mount maps persistent memory in 2 MiB
# pages too, and /dev/shm here has none (shmem_enabled is never).
HUGE_TMPFS = ["unshare", "--mount", "sh", "-c",
              'mkdir -p "$0" && mount -t tmpfs -o huge=advise,size=8g spillway-pmem "$0" && exec "$@"', "{pmem_dir}"]
PHASES = ["insert", "search", "batched_search", "negative_search", "delete"]
LABELS = {"insert": "insert", "search": "search", "batched_search": "batched search",
          "negative_search": "negative search", "delete": "delete"}

# The targets.
INSERT_FLUSHES = 1.5
INSERT_FENCES = 1.2
DELETE_FLUSHES = 1.0
LINES_PER_SEARCH = 2.0
INSERT_RATE = 2e6
SEARCH_RATE = 5e6
CRASH_IMAGES = 1e5
OPEN_MS = 1.0
CHECK_MS = 100.0


def phases(name: str, contender: str, threads: int = 1, persistence: str = "clwb",
           distribution: str = "uniform") -> Contender:
    command = ["{pmem_driver}", "phases", "--contender", contender, "--keys", "{records}", "--threads", str(threads),
               "--distribution", distribution]
    if contender == "spillway":
        command = HUGE_TMPFS + command + ["--persistence", persistence, "--table", TABLE]
    return Contender(name=name, role="spillway" if contender == "spillway" else "peer", group="phases",
                     command=command, result="json-line", cleanup=[TABLE] if contender == "spillway" else [])


def contenders() -> list[Contender]:
    plan = [phases(f"spillway {mode} t1", "spillway", persistence=mode)
            for mode in ("clwb", "fence", "none", "latency:300ns")]
    plan.append(phases("spillway clwb t2", "spillway", threads=2))
    plan += [phases(f"spillway clwb t1 {distribution}", "spillway", distribution=distribution)
             for distribution in ("selfsimilar", "zipfian")]
    plan.append(phases("spillway clwb t2 zipfian", "spillway", threads=2, distribution="zipfian"))
    plan += [phases(f"{peer} t1", peer) for peer in ("hashbrown", "std")]
    plan += [phases(f"{peer} t1 zipfian", peer, distribution="zipfian") for peer in ("hashbrown", "std")]
    plan.append(Contender(name="spillway recovery", role="spillway", group="recovery",
                          command=HUGE_TMPFS + ["{pmem_driver}", "recovery", "--keys", "{records}", "--table", TABLE],
                          result="json-line", cleanup=[TABLE]))
    plan.append(Contender(name="spillway crashtest", role="spillway", group="crash",
                          command=["{spillway}", "pmem", "crashtest", "--operations", "{crash_operations}", "--json"],
                          result="json"))
    return plan


def phase_metrics() -> list[Metric]:
    metrics = []
    for phase in PHASES:
        source = f"result.phases.{phase}"
        metrics.append(Metric(f"{phase}_mops", f"{LABELS[phase]} Mops/s", f"{source}.operations_per_s", scale=1e-6,
                              groups=["phases"]))
        for quantile, label in (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9")):
            metrics.append(Metric(f"{phase}_{quantile}", f"{LABELS[phase]} {label} ns", f"{source}.{quantile}_ns",
                                  better="lower", digits=0, groups=["phases"]))
    for phase in ("insert", "delete"):
        source = f"result.phases.{phase}"
        metrics.append(Metric(f"{phase}_flushes", f"{phase} flushes", f"{source}.flushes_per_operation",
                              better="lower", digits=3, groups=["phases"]))
        metrics.append(Metric(f"{phase}_fences", f"{phase} fences", f"{source}.fences_per_operation",
                              better="lower", digits=3, groups=["phases"]))
    metrics.append(Metric("delete_merge_flushes", "of which merges", "result.phases.delete.merge_flushes_per_operation",
                          better="lower", digits=3, groups=["phases"]))
    metrics.append(Metric("delete_own_flushes", "delete's own flushes",
                          "result.phases.delete.flushes_per_operation - result.phases.delete.merge_flushes_per_operation",
                          better="lower", digits=3, groups=["phases"]))
    return metrics


def recovery_metrics() -> list[Metric]:
    recovery = ["recovery"]
    return [
        Metric("load_factor", "load factor", "result.load_factor", digits=3, groups=recovery),
        Metric("segments", "segments", "result.segments", better=None, digits=0, groups=recovery),
        Metric("lines_per_search", "lines per search", "result.lines_per_search", better="lower", digits=3,
               groups=recovery),
        Metric("lines_per_negative", "lines per negative search", "result.lines_per_negative_search",
               better="lower", digits=3, groups=recovery),
        Metric("open_ms", "open to first search ms", "result.recover_to_first_op_ms", better="lower", digits=3,
               groups=recovery),
        Metric("repair_ms", "repair ms", "result.repair_ms", better="lower", digits=1, groups=recovery),
        Metric("check_ms", "full check ms", "result.full_check_ms", better="lower", digits=1, groups=recovery),
        Metric("clean_open_ms", "clean open to first search ms", "result.clean_open_to_first_op_ms",
               better="lower", digits=3, groups=recovery),
    ]


PMEM = Workload(
    name="pmem",
    title="Persistent hashing: CCEH against hashbrown and std HashMap",
    description=(
        "Each contender runs the PiBench-style phases on {records} keys of 8 bytes with 8-byte values in its own "
        "process (bench/pmem-driver): inserts, positive searches (uniform, self-similar 80-20 or Zipfian 0.99), "
        "the same searches 256 keys to a call (Spillway's `get_many`, which asks memory for a group of buckets "
        "before it searches the first; a peer's plain loop of lookups), negative searches, deletes, each phase "
        "on 1 or 2 threads. Spillway's CCEH runs each thread's operations in a session (one epoch pin renewed "
        "every 256 operations) and lives in a region file (4 GiB, 16 KiB segments, probing 4 buckets) on a tmpfs mounted "
        "with `huge=advise` for the run alone, so that it is mapped in 2 MiB pages as persistent memory on a DAX "
        "mount is (the huge-page MiB column says how much was), and persists by `clwb` + `sfence`, by fences only "
        "(`fence`, persistent caches), not at all (`none`), or by `clwb` plus 300 ns per flushed line "
        "(`latency:300ns`, slower media); hashbrown (its default hasher) and std HashMap (SipHash) hold the same "
        "keys in DRAM with no persistence, on one thread (neither is concurrent), their heaps in 2 MiB pages too "
        "(the driver's allocator asks for them on every allocation of 2 MiB or more). Latencies come from every 128th "
        "operation timed alone. The recovery run fills a table, drops it unclosed (as a crash leaves it), times the "
        "open to its first search, the repair (which waits for the first write or scan) and the full check of "
        "every invariant, and samples 10^5 present and 10^5 absent keys for the bucket lines a search reads. The "
        "crash run is `spillway pmem crashtest` over random inserts and removes on 256-byte segments (splits, "
        "doublings and merges throughout), every crash image the x86 model allows up to 4,096 per point, else a "
        "seeded sample and the targeted ones, each recovered and checked."
    ),
    size_unit="records",
    record_bytes=None,
    default_size="10M",
    default_runs=3,
    cold=False,
    params={"pmem_dir": "/tmp/spillway-pmem-huge", "crash_operations": "3000"},
    builds=[PMEM_DRIVER],
    contenders=contenders(),
    metrics=phase_metrics() + recovery_metrics() + [
        Metric("crash_images", "crash images", "result.images", digits=0, groups=["crash"]),
        Metric("crash_points", "crash points", "result.points", better=None, digits=0, groups=["crash"]),
        Metric("peak_rss_mib", "peak RSS MiB", "peak_rss_kib / 1024", better="lower", digits=0),
        Metric("huge_page_mib", "huge-page MiB", "result.huge_page_bytes / 1048576", better=None, digits=0),
        Metric("wall_s", "process s", "wall_s", better="lower"),
    ],
    tables=[
        Table("Throughput, Mops/s", group="phases", metrics=[f"{phase}_mops" for phase in PHASES]),
        Table("Latency, ns", group="phases", chart=False,
              metrics=[f"{phase}_{q}" for phase in ("insert", "search") for q in ("p50", "p99", "p999")]),
        Table("Memory", group="phases", chart=False, metrics=["peak_rss_mib", "huge_page_mib"],
              text=("Huge-page MiB: the table's region (Spillway) or the process's heap (peers) mapped in 2 MiB "
                    "pages at the end of the run.")),
        Table("Persistence per operation", group="phases", chart=False,
              metrics=["insert_flushes", "insert_fences", "delete_flushes", "delete_merge_flushes",
                       "delete_own_flushes", "delete_fences"],
              text=("Flushes count cache lines written back; a delete's own is one, and the merges of emptied "
                    "segments its phase triggers (the published CCEH never merges) are counted apart.")),
        Table("Recovery and shape", group="recovery", chart=False, metrics=[m.name for m in recovery_metrics()] + ["huge_page_mib"],
              text=("Lines per search: the bucket lines a search reads (up to the one holding the key, or the "
                    "whole probe range for an absent one); its directory entry is one line more (the directory holds 1 MiB "
                    "of entries at 10^7 keys, so it misses the nearest caches often).")),
        Table("Crash states", group="crash", chart=False, metrics=["crash_images", "crash_points", "wall_s"]),
    ],
    comparisons=[
        Comparison(label=f"{LABELS[phase]}, 1 thread", contender="spillway clwb t1", peer=peer,
                   metric=f"{phase}_mops")
        for phase in PHASES for peer in ("hashbrown t1", "std t1")
    ] + [
        Comparison(label="search, Zipfian, 1 thread", contender="spillway clwb t1 zipfian", peer=peer,
                   metric="search_mops")
        for peer in ("hashbrown t1 zipfian", "std t1 zipfian")
    ],
    targets=[
        Target(label="flushes per insert", contender="spillway clwb t1", metric="insert_flushes", value=INSERT_FLUSHES),
        Target(label="fences per insert", contender="spillway clwb t1", metric="insert_fences", value=INSERT_FENCES),
        Target(label="flushes per delete (its own)", contender="spillway clwb t1", metric="delete_own_flushes",
               value=DELETE_FLUSHES),
        Target(label="lines read per search", contender="spillway recovery", metric="lines_per_search",
               value=LINES_PER_SEARCH),
        Target(label="inserts per second per thread, clwb (M)", contender="spillway clwb t1", metric="insert_mops",
               value=INSERT_RATE),
        Target(label="searches per second per thread, clwb (M)", contender="spillway clwb t1", metric="search_mops",
               value=SEARCH_RATE),
        Target(label="batched searches per second per thread, clwb (M)", contender="spillway clwb t1",
               metric="batched_search_mops", value=SEARCH_RATE),
        Target(label="crash states checked", contender="spillway crashtest", metric="crash_images",
               value=CRASH_IMAGES),
        Target(label="open to first operation after a crash (ms)", contender="spillway recovery", metric="open_ms",
               value=OPEN_MS),
        Target(label="full check (ms)", contender="spillway recovery", metric="check_ms", value=CHECK_MS),
    ],
    page_command="python3 bench/run.py pmem --size 10M --runs 3",
)
