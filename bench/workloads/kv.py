"""kv: Spillway's WB Tree against RocksDB (leveled and universal compaction) and LevelDB, db_bench style.

For every record shape (a variant) and engine, in this order within a round:
`fill` (fillrandom of the part's records in batches of 1000, the log synced
per batch), `read` (readrandom on that store, half the keys never written,
the page cache dropped first), `rww` (readwhilewriting on that store: one
writer, batches of 1000 synced, one reader, for `seconds`), and `fill-b1`
(fillrandom of `batch1_records` records one per write, the log not synced).
Every process runs inside the workload's cgroup memory limit, which counts
the page cache. The drivers (bench/kv-driver for Spillway and RocksDB,
bench/kv_leveldb.cc for LevelDB) print one JSON line each; they make the
same operations from the same definition (kv-driver's module docs).
"""

from __future__ import annotations

from declarations import (
    Agreement,
    CargoBuild,
    Comparison,
    Contender,
    CxxBuild,
    Metric,
    Requirement,
    Step,
    Table,
    Target,
    Variant,
    Workload,
)

ENGINES = ["spillway", "rocksdb-leveled", "rocksdb-universal", "leveldb"]
ROCKSDB = ["rocksdb-leveled", "rocksdb-universal"]
PEERS = ROCKSDB + ["leveldb"]
# name: (key bytes, value bytes)
SHAPES = {"16B": (8, 8), "64B": (16, 48), "256B": (16, 240), "16+100B": (16, 100)}
# The targets: Spillway's fill rate over each peer's (the better RocksDB), per shape.
FILL_TARGETS = {
    "16B": {"leveldb": 10.0, "rocksdb": 3.0},
    "64B": {"rocksdb": 2.0},
    "256B": {"rocksdb": 1.0},
}
READS_PER_GET_TARGET = 2.0
INDEX_BYTES_PER_KEY_TARGET = 2.0

KV_DRIVER = CargoBuild(
    name="kv_driver",
    binary="kv-driver",
    manifest="bench/kv-driver/Cargo.toml",
    rocksdb=True,
    optional_features=["rocksdb"],
)
KV_LEVELDB = CxxBuild(
    name="kv_leveldb",
    source="bench/kv_leveldb.cc",
    libraries=["-lleveldb", "-lpthread"],
    requires=[Requirement(executable=None, source="apt", package="libleveldb-dev", path="/usr/include/leveldb/db.h")],
)

# (group, driver workload, records placeholder, batch, sync, page cache dropped first)
STEPS = [
    ("fill", "fillrandom", "{records}", "1000", "always", True),
    ("read", "readrandom", "{records}", "1000", "none", True),
    ("rww", "readwhilewriting", "{records}", "1000", "always", False),
    ("fill-b1", "fillrandom", "{batch1_records}", "1", "none", True),
]


def driver_command(engine: str, store: str, workload: str, records: str, batch: str, sync: str) -> list[str]:
    driver = ["{kv_leveldb}"] if engine == "leveldb" else ["{kv_driver}", "--engine", engine]
    return driver + [
        "--dir", store, "--workload", workload, "--records", records, "--key-bytes", "{key_bytes}",
        "--value-bytes", "{value_bytes}", "--batch", batch, "--sync", sync, "--reads", "{reads}",
        "--seconds", "{seconds}",
    ]


def engine_contenders(engine: str) -> list[Contender]:
    """The four steps of one engine; fill, read and rww share a store, fill-b1 makes its own."""
    store = f"{{dir}}/store-{engine}"
    single = f"{{dir}}/store-{engine}-b1"
    contenders = []
    for group, workload, records, batch, sync, cold in STEPS:
        directory = single if group == "fill-b1" else store
        fresh = group in ("fill", "fill-b1")
        contenders.append(
            Contender(
                name=f"{engine} {group}",
                role="spillway" if engine == "spillway" else "peer",
                group=group,
                command=driver_command(engine, directory, workload, records, batch, sync),
                result="json-line",
                cold=cold,
                prepare=[Step(command=["rm", "-rf", directory])] if fresh else [],
                output_dir=directory if group == "fill" else None,
                # The store lives from its fill to the reads while writing.
                cleanup=[directory] if group in ("rww", "fill-b1") else [],
                features=["rocksdb"] if engine.startswith("rocksdb") else [],
            )
        )
    return contenders


def shape_variant(name: str) -> Variant:
    key_bytes, value_bytes = SHAPES[name]
    comparisons = []
    for peer, target in FILL_TARGETS.get(name, {}).items():
        peers = ROCKSDB if peer == "rocksdb" else [peer]
        comparisons.append(
            Comparison(label="fill", contender="spillway fill", peer=[f"{p} fill" for p in peers], metric="ops",
                       target=target)
        )
    return Variant(
        name=name,
        description=f"{key_bytes}-byte keys, {value_bytes}-byte values",
        params={"key_bytes": str(key_bytes), "value_bytes": str(value_bytes)},
        record_bytes=key_bytes + value_bytes,
        comparisons=comparisons,
    )


def step_comparisons() -> list[Comparison]:
    """Readrandom against the better RocksDB (a target), and every step against every peer (where Spillway loses)."""
    comparisons = [
        Comparison(label="read", contender="spillway read", peer=[f"{p} read" for p in ROCKSDB], metric="ops",
                   target=1.0),
    ]
    for group, metric in (("fill", "ops"), ("read", "ops"), ("rww", "rww_gets"), ("rww", "rww_puts"),
                          ("fill-b1", "ops")):
        for peer in PEERS:
            comparisons.append(
                Comparison(label=group, contender=f"spillway {group}", peer=f"{peer} {group}", metric=metric)
            )
    return comparisons


KV = Workload(
    name="kv",
    title="Key-value stores: Spillway's WB Tree against RocksDB and LevelDB",
    description=(
        "db_bench-style workloads on four record shapes, every engine in its own process per step, all inside one "
        "cgroup v1 memory limit that counts the page cache: fillrandom in batches of 1000 with the write-ahead log "
        "synced per batch, readrandom on the filled store with the page cache dropped (half the keys never "
        "written), readwhilewriting (one synced writer, one reader), and fillrandom one record per write with the "
        "log not synced."
    ),
    size_unit="bytes",
    record_bytes=None,
    default_size="1G",
    default_runs=3,
    memory_limit="1G",
    params={"reads": "50000", "seconds": "10", "batch1_records": "1000000"},
    builds=[KV_DRIVER, KV_LEVELDB],
    variants=[shape_variant(name) for name in SHAPES],
    contenders=[contender for engine in ENGINES for contender in engine_contenders(engine)],
    metrics=[
        Metric("ops", "k ops/s", "result.operations_per_second", scale=1e-3, digits=0,
               groups=["fill", "read", "fill-b1"]),
        Metric("rww_gets", "GETs k/s", "result.operations_per_second", scale=1e-3, digits=1, groups=["rww"]),
        Metric("rww_puts", "puts k/s", "result.writer_operations / result.seconds", scale=1e-3, digits=0,
               groups=["rww"]),
        Metric("p50_us", "p50 us", "result.latency_ns.p50", better="lower", scale=1e-3, digits=0),
        Metric("p99_us", "p99 us", "result.latency_ns.p99", better="lower", scale=1e-3, digits=0),
        Metric("p999_us", "p99.9 us", "result.latency_ns.p999", better="lower", scale=1e-3, digits=0),
        Metric("stall_s", "stall s", "result.stall_seconds", better="lower", groups=["fill", "fill-b1"]),
        Metric("write_amp", "write amp.", "result.write_bytes / result.user_bytes", better="lower",
               groups=["fill", "fill-b1", "rww"]),
        Metric("store_gib", "store GiB", "output_dir_bytes / 1073741824", better="lower", groups=["fill"]),
        Metric(
            "index_bytes_per_key", "index B/key",
            [
                "result.engine_stats.index_memory_bytes / result.engine_stats.list_records",
                "result.engine_stats.filter_and_index_bytes / result.engine_stats.estimate_keys",
            ],
            better="lower", groups=["fill"],
        ),
        Metric("reads_per_get", "reads/GET", "result.read_bytes / 4096 / result.operations", better="lower",
               groups=["read", "rww"]),
        Metric("hits", "hits", "result.hits", better=None, digits=0, groups=["read"]),
        Metric("peak_rss_mib", "peak RSS MiB", "peak_rss_kib / 1024", better="lower", digits=0),
        Metric("cgroup_peak_mib", "cgroup peak MiB", "cgroup_peak_bytes / 1048576", better="lower", digits=0),
    ],
    tables=[
        Table("fillrandom, batches of 1000, log synced", group="fill",
              metrics=["ops", "p99_us", "p999_us", "stall_s", "write_amp", "store_gib", "index_bytes_per_key",
                       "peak_rss_mib", "cgroup_peak_mib"],
              text="Latencies are per batch of 1000."),
        Table("readrandom, page cache dropped", group="read",
              metrics=["ops", "p50_us", "p99_us", "reads_per_get", "hits", "peak_rss_mib"]),
        Table("readwhilewriting", group="rww",
              metrics=["rww_gets", "rww_puts", "p99_us", "reads_per_get", "write_amp", "peak_rss_mib"],
              text="One thread putting (batches of 1000, log synced), one getting; latencies are the GETs'."),
        Table("fillrandom, one record per write, log not synced", group="fill-b1",
              metrics=["ops", "p99_us", "write_amp", "peak_rss_mib"]),
    ],
    comparisons=step_comparisons(),
    targets=[
        Target(label="device reads per GET", contender="spillway read", metric="reads_per_get",
               value=READS_PER_GET_TARGET),
        Target(label="index RAM per key", contender="spillway fill", metric="index_bytes_per_key",
               value=INDEX_BYTES_PER_KEY_TARGET),
    ],
    # Every engine filled the same keys and reads the same ones: as many GETs find as many.
    agreements=[
        Agreement(label="readrandom hits", contenders=[f"{engine} read" for engine in ENGINES],
                  fields=["result.operations", "result.hits"]),
    ],
    page_command="python3 bench/run.py kv --size 1G --runs 3",
    scale_note=(
        "The workload was designed for 2 GiB of keys and values per shape in a 1 GiB memory limit, 1 M GETs, "
        "30 s of reads while writing and 10 M single-record writes, one run each: well over an hour for one run "
        "on 2 cores (RocksDB and LevelDB fill 2 GiB of 16-byte records in about 6-7 minutes each). To give three "
        "runs of everything within about an hour, the page's command halves the data (1 GiB per shape) and runs "
        "50 k GETs, 10 s of reads while writing and 1 M single-record writes (params `reads`, `seconds`, "
        "`batch1_records`). The limit stays 1 GiB: the engines' own memory does not shrink with the data "
        "(Spillway's two 64 MiB roots and its node spills, RocksDB's memtables), so a smaller limit would measure "
        "them starved, not the data larger than memory. The stores (1.2-1.4x the data on disk) still exceed what "
        "the limit leaves the page cache beside the engines, but by less than at 2 GiB, and the trees and LSMs are "
        "a level shallower: absolute rates are higher than at 2 GiB, and the ratios may differ."
    ),
    notes=[
        (
            "Keys and values: fill operation n writes key index splitmix64(seed * 0x100000001B3 + n) mod records "
            "(keys drawn uniformly from as many indexes as records, so about 63% of them distinct), read r looks "
            "up splitmix64(seed * 0xC2B2AE3D27D4EB4F + r) mod (2 x records) (half the reads miss); keys are "
            "big-endian indexes padded with '0', values splitmix64 words (bench/kv-driver's module docs)."
        ),
        (
            "Engines: no compression, two background threads, the write-ahead log on, their default memory sizes; "
            "RocksDB and LevelDB with 10-bit Bloom filters, Spillway with its default of at least 10 bits within 2 "
            "bytes of index memory per key (15 bits per key at 16-byte records, 14 at 64, 13 at 16+100, 11 at 256; "
            "the index B/key column shows each engine's cost). RocksDB 8.10 (crate `rocksdb` 0.22, release build, "
            "compiled with `ROCKSDB_SCHED_GETCPU_PRESENT`, SSE4.2 and carry-less multiply as its own build sets "
            "them), LevelDB (Debian's libleveldb, its C++ API). The RocksDB binding takes a write batch by value, so "
            "its driver builds a new batch per write, where the LevelDB and Spillway drivers empty and refill theirs."
        ),
        (
            "Order: within a round each engine runs fill, read, rww and fill-b1 one after another (read and rww on "
            "the store its fill made, deleted after rww); rounds alternate between engines. A fill starts once the "
            "page cache is written back and dropped; so does a read; rww starts with what the read left in memory."
        ),
        (
            "Write amplification counts every byte the process wrote to the device (log, lists or SSTs, manifest) "
            "over the bytes of keys and values (Spillway's counts the zeros of its spare logs, about 1.25x the log "
            "bytes); device reads per GET count the bytes the process read from the device, in 4 KiB blocks, over "
            "all GETs (hits and misses), the open and background work included; index B/key is the filters' and "
            "block indexes' memory over the records in files (Spillway) or RocksDB's table-reader memory estimate "
            "over its key estimate. LevelDB reports neither, nor its stall time."
        ),
        (
            "LevelDB maps its tables into memory (its default on 64-bit machines), so its index and filter blocks "
            "live in the page cache; in the memory limit they are evicted, and its GETs read tens of pages each, "
            "which we take to be why its reads are far slower than the others' here."
        ),
        "Every engine's readrandom must find the same keys (they filled the same ones), or the benchmark stops.",
    ],
)
