#!/usr/bin/env python3
"""Key-value stores: Spillway's WB Tree against RocksDB (leveled and universal
compaction, built from source in release mode) and LevelDB (Debian's
libleveldb-dev, driven natively), side by side.

    python3 bench/kv.py [--bytes 2G] [--batch1-records 10M] [--memory-limit 1G] [--shape 16 ...]
                        [--engine spillway ...] [--dir DIR] [--out docs/benchmarks]
    python3 bench/kv.py --merge PART/kv.json [--out docs/benchmarks]

For every record shape (16 B = 8 B key + 8 B value, 64 B = 16 + 48, 256 B =
16 + 240, and db_bench's 16 B key + 100 B value) and every engine, in its own
process each (bench/kv-driver for Spillway and RocksDB, bench/kv_leveldb.cc for
LevelDB), all inside one cgroup v1 memory limit that counts the page cache:

    fill-b1000   fillrandom of --bytes of records in batches of 1000, the log
                 synced after every batch (group commit of a single writer),
                 after what earlier steps left dirty is written back
    read         readrandom on that store: --reads gets, half of them of keys
                 never written; the page cache dropped first
    rww          readwhilewriting: one thread putting (batches of 1000, log
                 synced), one getting, for --seconds
    fill-b1      fillrandom of --batch1-records records one per write, log on
                 but not synced (a sync per record would measure the disk)

Every engine gets the same key and value stream (kv-driver's module docs),
no compression, two background threads, and the same memory limit; RocksDB
and LevelDB 10-bit Bloom filters, Spillway its default filters (at least 10
bits per key, within 2 bytes of index memory per key). Reported: operations/s, latency p50/p99/p99.9, stall time,
write amplification (device bytes written over bytes of keys and values, from
/proc/<pid>/io), RAM for indexes per key, device reads per GET, peak RSS.
Reports go to docs/benchmarks/kv.{json,md}, rewritten after every shape.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import (  # noqa: E402  (the path is set just above)
    BenchmarkFailure,
    REPO_ROOT,
    Requirement,
    apt_install,
    command_output,
    create_memory_cgroup,
    default_data_dir,
    drop_page_cache,
    ensure_libclang,
    ensure_requirements,
    machine_info,
    parse_size,
    remove_memory_cgroup,
    rocksdb_build_environment,
    run_once,
)

BENCH = Path(__file__).resolve().parent
DEFAULT_OUT = REPO_ROOT / "docs" / "benchmarks"
DRIVER_MANIFEST = BENCH / "kv-driver" / "Cargo.toml"
LEVELDB_SOURCE = BENCH / "kv_leveldb.cc"
DEFAULT_TARGET_DIR = Path(os.environ.get("KV_DRIVER_TARGET", "/tmp/kv-driver-target"))
ENGINES = ["spillway", "rocksdb-leveled", "rocksdb-universal", "leveldb"]
# name: (key bytes, value bytes)
SHAPES = {"16": (8, 8), "64": (16, 48), "256": (16, 240), "16+100": (16, 100)}
BUILD_REQUIREMENTS = [
    Requirement(executable="g++", source="apt", package="g++"),
    Requirement(executable="/usr/bin/time", source="apt", package="time"),
]
# The targets: Spillway's fill-b1000 rate over each peer's, per shape.
INSERT_TARGETS = {
    "16": {"leveldb": 10.0, "rocksdb": 3.0},
    "64": {"rocksdb": 2.0},
    "256": {"rocksdb": 1.0},
}
READS_PER_GET_TARGET = 2.0
INDEX_BYTES_PER_KEY_TARGET = 2.0


def parse_count(text: str) -> int:
    """10M, 1e7, 500k: a count with a decimal suffix."""
    text = text.strip().lower()
    for suffix, factor in (("k", 10**3), ("m", 10**6), ("g", 10**9)):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    return int(float(text))


# ---------------------------------------------------------------------------
# Building


def ensure_leveldb() -> None:
    if Path("/usr/include/leveldb/db.h").exists():
        return
    print("installing libleveldb-dev (apt)", flush=True)
    if not apt_install("libleveldb-dev"):
        raise BenchmarkFailure("could not install libleveldb-dev")


def build(target_dir: Path, engines: list[str]) -> dict[str, Path]:
    """Builds kv-driver (with RocksDB if asked: about 16 minutes the first time on 2 cores) and the LevelDB driver."""
    ensure_requirements(BUILD_REQUIREMENTS)
    rocksdb = any(engine.startswith("rocksdb") for engine in engines)
    if rocksdb:
        ensure_libclang()
    command = ["nice", "cargo", "build", "--release", "--locked", "--manifest-path", str(DRIVER_MANIFEST)]
    if not rocksdb:
        command.append("--no-default-features")
    print(f"building kv-driver: CARGO_TARGET_DIR={target_dir} {' '.join(command)}", flush=True)
    environment = rocksdb_build_environment(target_dir)
    if subprocess.run(command, cwd=REPO_ROOT, env=environment, check=False).returncode != 0:
        raise BenchmarkFailure("cargo build of kv-driver failed")
    drivers = {engine: target_dir / "release" / "kv-driver" for engine in engines if engine != "leveldb"}
    if "leveldb" in engines:
        ensure_leveldb()
        binary = target_dir / "kv_leveldb"
        compile_command = ["g++", "-O2", "-std=c++17", "-o", str(binary), str(LEVELDB_SOURCE), "-lleveldb", "-lpthread"]
        if subprocess.run(compile_command, check=False).returncode != 0:
            raise BenchmarkFailure("g++ of bench/kv_leveldb.cc failed")
        drivers["leveldb"] = binary
    return drivers


# ---------------------------------------------------------------------------
# Running


def driver_argv(driver: Path, engine: str, store: Path, workload: str, records: int, shape: str, batch: int, sync: str,
                reads: int, seconds: float) -> list[str]:
    key_bytes, value_bytes = SHAPES[shape]
    argv = [str(driver)]
    if engine != "leveldb":
        argv += ["--engine", engine]
    return argv + [
        "--dir", str(store), "--workload", workload, "--records", str(records), "--key-bytes", str(key_bytes),
        "--value-bytes", str(value_bytes), "--batch", str(batch), "--sync", sync, "--reads", str(reads),
        "--seconds", str(seconds),
    ]


def run_driver(argv: list[str], work_dir: Path, log_prefix: Path, what: str, cgroup: Path | None) -> dict[str, Any]:
    preexec = None
    if cgroup is not None:
        procs = str(cgroup / "cgroup.procs")

        def preexec() -> None:
            with open(procs, "w") as handle:
                handle.write(str(os.getpid()))

        (cgroup / "memory.max_usage_in_bytes").write_text("0")
    run = run_once(argv, work_dir, log_prefix, preexec)
    lines = [line for line in log_prefix.with_suffix(".stdout").read_text().splitlines() if line.startswith("{")]
    if run["exit_code"] != 0 or not lines:
        killed = " (killed: over the memory limit?)" if run["exit_code"] in (-9, 137) else ""
        raise BenchmarkFailure(f"BENCHMARK FAILED: {what}{killed} (exit {run['exit_code']}): {' '.join(argv)}\n{run['stderr_tail']}")
    result = json.loads(lines[-1])
    result["peak_rss_kib"] = run["peak_rss_kib"]
    result["process_read_bytes"] = run["read_bytes"]
    result["process_write_bytes"] = run["write_bytes"]
    if cgroup is not None:
        result["cgroup_peak_bytes"] = int((cgroup / "memory.max_usage_in_bytes").read_text())
    return result


def dir_bytes(path: Path) -> int:
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())


def run_shape(shape: str, engines: list[str], drivers: dict[str, Path], args: argparse.Namespace, scratch: Path,
              cgroup: Path | None) -> dict[str, Any]:
    key_bytes, value_bytes = SHAPES[shape]
    records = max(1, args.bytes // (key_bytes + value_bytes))
    print(f"shape {shape} B ({key_bytes} B keys, {value_bytes} B values): {records:,} records of fill, "
          f"{args.batch1_records:,} of fill-b1", flush=True)
    results: dict[str, dict[str, Any]] = {}
    logs = scratch / "logs"
    logs.mkdir(exist_ok=True)
    for engine in engines:
        driver = drivers[engine]
        store = scratch / f"{shape}-{engine}"
        shutil.rmtree(store, ignore_errors=True)
        entry: dict[str, Any] = {}
        steps = [
            ("fill-b1000", "fillrandom", records, 1000, "always"),
            ("read", "readrandom", records, 1000, "none"),
            ("rww", "readwhilewriting", records, 1000, "always"),
        ]
        for name, workload, count, batch, sync in steps:
            # A fill starts from a quiet disk (what an earlier step or engine
            # left dirty written back first); reads start cold.
            if name in ("fill-b1000", "read") and not drop_page_cache():
                print("  (could not drop the page cache: reads may be warm)", flush=True)
            argv = driver_argv(driver, engine, store, workload, count, shape, batch, sync, args.reads, args.seconds)
            result = run_driver(argv, REPO_ROOT, logs / f"{shape}-{engine}-{name}", f"{engine} {name} {shape}", cgroup)
            if name == "fill-b1000":
                result["store_bytes"] = dir_bytes(store)
            entry[name] = result
            print(f"  {engine:18} {name:10} {progress(result)}", flush=True)
        shutil.rmtree(store, ignore_errors=True)
        drop_page_cache()
        argv = driver_argv(driver, engine, store, "fillrandom", args.batch1_records, shape, 1, "none", 0, 0)
        entry["fill-b1"] = run_driver(argv, REPO_ROOT, logs / f"{shape}-{engine}-fill-b1", f"{engine} fill-b1 {shape}", cgroup)
        print(f"  {engine:18} {'fill-b1':10} {progress(entry['fill-b1'])}", flush=True)
        shutil.rmtree(store, ignore_errors=True)
        results[engine] = entry
    check_agreement(shape, results)
    pair_with_spillway(results)
    shape_report = {"shape": shape, "key_bytes": key_bytes, "value_bytes": value_bytes, "records": records,
                    "batch1_records": args.batch1_records, "results": results}
    shape_report["targets"] = targets(shape_report)
    return shape_report


def check_agreement(shape: str, results: dict[str, dict[str, Any]]) -> None:
    """Every engine filled the same keys and read the same ones, so readrandoms of as many GETs find as many.

    (Merged runs may have made more GETs for some engines: those are compared among themselves.)
    """
    by_reads: dict[int, dict[str, int]] = {}
    for engine, entry in results.items():
        by_reads.setdefault(entry["read"]["operations"], {})[engine] = entry["read"]["hits"]
    for hits in by_reads.values():
        if len(set(hits.values())) > 1:
            raise BenchmarkFailure(f"RESULTS DISAGREE: readrandom hits of the {shape} B shape differ between engines: {hits}")


def stall(result: dict[str, Any]) -> str:
    """Seconds writers stalled, or '-' for an engine that does not say (LevelDB)."""
    seconds = result.get("stall_seconds")
    return "-" if seconds is None else f"{seconds:.2f}"


def progress(result: dict[str, Any]) -> str:
    latency = result.get("latency_ns", {})
    text = f"{result['operations_per_second'] / 1e3:10.1f} k ops/s  p99 {latency.get('p99', 0) / 1e3:9.1f} us"
    if result["workload"] == "fillrandom":
        text += f"  WA {write_amplification(result):5.2f}  stall {stall(result):>6} s"
    else:
        text += f"  hits {result['hits']:,}  reads/GET {reads_per_get(result):5.2f}"
    return text + f"  RSS {result.get('peak_rss_kib', 0) / 1024:6.0f} MiB"


# ---------------------------------------------------------------------------
# Figures and targets


def write_amplification(result: dict[str, Any]) -> float:
    return result["write_bytes"] / max(1, result["user_bytes"])


def reads_per_get(result: dict[str, Any]) -> float:
    """Device reads per GET: bytes read from the device over 4 KiB (every engine's block), per GET."""
    return result["read_bytes"] / 4096 / max(1, result["operations"])


def index_bytes_per_key(engine: str, result: dict[str, Any]) -> float | None:
    """RAM the indexes (filters, block indexes) take per key, where the engine reports it."""
    stats = result.get("engine_stats")
    if not isinstance(stats, dict):
        return None
    if engine == "spillway":
        return stats["index_memory_bytes"] / max(1, stats["list_records"])
    if engine.startswith("rocksdb"):
        return stats["filter_and_index_bytes"] / max(1, stats["estimate_keys"])
    return None


def pair_with_spillway(results: dict[str, dict[str, Any]]) -> None:
    """Gives each peer measured in one run with Spillway Spillway's rates of that run, so that its ratios stay
    those of one run when a later run's Spillway figures are merged in (runs vary by a fifth)."""
    ours = results.get("spillway")
    if ours is None:
        return
    for engine, entry in results.items():
        if engine != "spillway":
            entry["spillway_same_run"] = {step: ours[step]["operations_per_second"] for step in ("fill-b1000", "read")}


def targets(shape: dict[str, Any]) -> list[dict[str, Any]]:
    results = shape["results"]
    checks = []
    ours = results.get("spillway")
    if ours is None:
        return checks
    rate = lambda engine, step: results[engine][step]["operations_per_second"]  # noqa: E731

    def ratio(peer: str, step: str) -> tuple[float, bool]:
        """Spillway over `peer` at `step`, with Spillway's figure of the peer's run where there is one."""
        same_run = results[peer].get("spillway_same_run", {}).get(step)
        return (same_run if same_run is not None else rate("spillway", step)) / rate(peer, step), same_run is not None

    for peer, target in INSERT_TARGETS.get(shape["shape"], {}).items():
        engines = [engine for engine in results if engine.startswith(peer)]
        if not engines:
            continue
        best = max(engines, key=lambda engine: rate(engine, "fill-b1000"))
        value, same_run = ratio(best, "fill-b1000")
        checks.append({"what": f"fillrandom, batches of 1000, log synced: Spillway vs {best}", "value": value,
                       "unit": "x", "target": target, "met": value >= target, "same_run": same_run})
    rocks = [engine for engine in results if engine.startswith("rocksdb")]
    if rocks:
        best = max(rocks, key=lambda engine: rate(engine, "read"))
        value, same_run = ratio(best, "read")
        checks.append({"what": f"readrandom: Spillway vs {best}", "value": value, "unit": "x", "target": 1.0,
                       "met": value >= 1.0, "same_run": same_run})
    per_get = reads_per_get(ours["read"])
    checks.append({"what": "device reads per GET (Spillway)", "value": per_get, "unit": "", "target": READS_PER_GET_TARGET,
                   "met": per_get <= READS_PER_GET_TARGET, "at_most": True})
    per_key = index_bytes_per_key("spillway", ours["fill-b1000"])
    if per_key is not None:
        checks.append({"what": "index RAM per key (Spillway)", "value": per_key, "unit": "B", "target": INDEX_BYTES_PER_KEY_TARGET,
                       "met": per_key <= INDEX_BYTES_PER_KEY_TARGET, "at_most": True})
    return checks


# ---------------------------------------------------------------------------
# The report


def markdown(report: dict[str, Any]) -> str:
    machine = report["machine"]
    lines = [
        "# Key-value stores: Spillway's WB Tree against RocksDB and LevelDB",
        "",
        f"Measured {report['date']} on {machine['cpu_cores']} cores ({machine['cpu_model']}), "
        f"{machine['memory_bytes'] / 2**30:.0f} GiB, {machine['disk_fstype']} on {machine['disk_device']}, commit {report['commit']}; "
        f"every engine in its own process, all in one cgroup memory limit of {report['memory_limit'] / 2**30:.2f} GiB "
        f"(page cache included). Reproduce with `{report['command']}`.",
        "",
    ]
    for part in report.get("merged", []):
        lines += [f"Merged in from another run on {part['date']} at commit {part['commit']}: the shapes and engines of "
                  f"`{part['command']}`, in place of any figures of that run for them.", ""]
    if report.get("note"):
        lines += [report["note"], ""]
    lines += [
        "Fill: `fillrandom` of the shape's records (keys drawn uniformly from as many indexes as records, so about 63% "
        "of them distinct), batches of 1000, the write-ahead log synced after every batch, started once the page "
        "cache is written back and dropped (since 2026-11-26); fill-b1: one record per write, the log written but "
        "not synced. Read: `readrandom` after the fill, the page cache dropped, half the "
        "keys never written. Rww: `readwhilewriting`, one writer (batches of 1000, synced) and one reader. Every "
        "engine: no compression, two background threads, its default memory sizes; RocksDB and LevelDB with 10-bit "
        "Bloom filters, Spillway with its default of at least 10 bits within 2 bytes of index memory per key (15 bits "
        "per key at 16-byte records, 14 at 64, 13 at 16+100, 11 at 256; the index B/key column shows each engine's "
        "cost). RocksDB 8.10 "
        "(crate `rocksdb` 0.22, release build), LevelDB 1.23 (Debian's libleveldb, its C++ API).",
        "",
        "## Targets",
        "",
        "A ratio against a peer uses Spillway's figure from the peer's own run where both ran in one; otherwise "
        "(marked) the figures of the rows below, which may come from different runs.",
        "",
        "| shape | target | measured | target | met |",
        "|---|---|---|---|---|",
    ]
    for shape in report["shapes"]:
        for check in shape["targets"]:
            bound = "at most" if check.get("at_most") else "at least"
            across = " (across runs)" if check.get("same_run") is False else ""
            lines.append(f"| {shape['shape']} B | {check['what']} | {check['value']:.2f}{check['unit']}{across} | "
                         f"{bound} {check['target']:g}{check['unit']} | {'yes' if check['met'] else '**no**'} |")
    for shape in report["shapes"]:
        lines += ["", f"## {shape['shape']} B records ({shape['key_bytes']} B keys, {shape['value_bytes']} B values)", "",
                  f"{shape['records']:,} records of fill ({shape['records'] * (shape['key_bytes'] + shape['value_bytes']) / 2**30:.2f} GiB "
                  f"of keys and values), {shape['batch1_records']:,} of fill-b1.", "",
                  "| engine | fill k ops/s | fill p99 / p99.9 (batch) | stall s | write amp. | store GiB | index B/key | "
                  "fill-b1 k ops/s | read k ops/s | read p99 | reads/GET | rww reads k/s | rww writes k/s | peak RSS MiB |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for engine, entry in shape["results"].items():
            fill, read, rww, single = entry["fill-b1000"], entry["read"], entry["rww"], entry["fill-b1"]
            per_key = index_bytes_per_key(engine, fill)
            rww_writes = rww["writer_operations"] / max(rww["seconds"], 1e-9)
            peak = max(step.get("peak_rss_kib", 0) for step in entry.values()) / 1024
            lines.append(
                f"| {engine} | {fill['operations_per_second'] / 1e3:.0f} | {fill['latency_ns']['p99'] / 1e3:.0f} / "
                f"{fill['latency_ns']['p999'] / 1e3:.0f} us | {stall(fill)} | {write_amplification(fill):.2f} | "
                f"{fill.get('store_bytes', 0) / 2**30:.2f} | {'-' if per_key is None else f'{per_key:.2f}'} | "
                f"{single['operations_per_second'] / 1e3:.0f} | {read['operations_per_second'] / 1e3:.0f} | "
                f"{read['latency_ns']['p99'] / 1e3:.0f} us | {reads_per_get(read):.2f} | {rww['operations_per_second'] / 1e3:.0f} | "
                f"{rww_writes / 1e3:.0f} | {peak:.0f} |"
            )
    losses = []
    for shape in report["shapes"]:
        results = shape["results"]
        if "spillway" not in results:
            continue
        for engine in results:
            if engine == "spillway":
                continue
            for step, label in (("read", "readrandom"), ("rww", "reads while writing"), ("fill-b1", "single-record writes")):
                ours = results["spillway"][step]["operations_per_second"]
                theirs = results[engine][step]["operations_per_second"]
                if theirs > ours:
                    losses.append(f"- {shape['shape']} B, {label}: {engine} {theirs / 1e3:.0f} k ops/s, Spillway {ours / 1e3:.0f} k "
                                  f"({ours / theirs:.2f}x).")
    lines += ["", "## Where Spillway loses", ""] + (losses or ["- Nowhere in this run."])
    lines += ["", "Write amplification counts every byte the process wrote to the device (log, lists or SSTs, manifest) "
              "over the bytes of keys and values; device reads per GET count the bytes read from the device, in 4 KiB "
              "blocks, over all GETs (hits and misses); index B/key is the filters' and block indexes' memory over "
              "the records in files (Spillway) or RocksDB's table-reader memory estimate over its key estimate. "
              "LevelDB reports neither."]
    return "\n".join(lines) + "\n"


def write_report(report: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "kv.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "kv.md").write_text(markdown(report))


def merge(part_path: Path, out: Path) -> int:
    """Folds the shapes of `part_path` into the report in `out`: engines measured again replace theirs.

    Refused (RESULTS DISAGREE) if a part's reads found other keys than the engines already there.
    """
    report = json.loads((out / "kv.json").read_text())
    part = json.loads(part_path.read_text())
    by_shape = {shape["shape"]: shape for shape in report["shapes"]}
    for incoming in part["shapes"]:
        existing = by_shape.get(incoming["shape"])
        if existing is None:
            report["shapes"].append(incoming)
            continue
        pair_with_spillway(incoming["results"])
        existing["results"].update(incoming["results"])
        check_agreement(existing["shape"], existing["results"])
        existing["targets"] = targets(existing)
    report.setdefault("merged", []).append({key: part[key] for key in ("date", "commit", "command")})
    write_report(report, out)
    print(f"merged {len(part['shapes'])} shape(s) of {part_path} into {out / 'kv.md'}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bytes", type=parse_size, default=parse_size("2G"), help="bytes of keys and values per fill (default 2G)")
    parser.add_argument("--batch1-records", type=parse_count, default=parse_count("10M"), help="records of the batch-1 fill (default 10M)")
    parser.add_argument("--reads", type=parse_count, default=parse_count("1M"), help="gets of readrandom (default 1M)")
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds of readwhilewriting (default 30)")
    parser.add_argument("--memory-limit", type=parse_size, default=parse_size("1G"), help="cgroup memory limit, page cache included (default 1G)")
    parser.add_argument("--shape", action="append", choices=list(SHAPES), help="record shapes (default all)")
    parser.add_argument("--engine", action="append", choices=ENGINES, help="engines (default all)")
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (outside the repository)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where kv.json and kv.md go")
    parser.add_argument("--target-dir", type=Path, default=DEFAULT_TARGET_DIR, help="CARGO_TARGET_DIR of the driver")
    parser.add_argument("--note", default="", help="a sentence for the report")
    parser.add_argument("--merge", type=Path, help="fold this partial kv.json into the report in --out")
    args = parser.parse_args(argv)
    if args.merge:
        try:
            return merge(args.merge, args.out)
        except BenchmarkFailure as failure:
            print(failure, file=sys.stderr)
            return 1
    engines = args.engine or ENGINES
    shapes = args.shape or list(SHAPES)
    try:
        base = (args.dir or default_data_dir()).resolve()
        if base == REPO_ROOT or REPO_ROOT in base.parents:
            raise BenchmarkFailure(f"--dir {base} is inside the repository; benchmark data stays outside it")
        base.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix="kv-", dir=base))
        commit = command_output(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"]) or "unknown"
        dirty = command_output(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--", "crates", "bench"])
        report: dict[str, Any] = {
            "workload": "kv",
            "date": datetime.date.today().isoformat(),
            "commit": commit + ("+local changes" if dirty else ""),
            "machine": machine_info(base),
            "memory_limit": args.memory_limit,
            "command": "python3 bench/kv.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "note": args.note,
            "shapes": [],
        }
        drivers = build(args.target_dir, engines)
        cgroup = create_memory_cgroup(args.memory_limit)
        try:
            for shape in shapes:
                report["shapes"].append(run_shape(shape, engines, drivers, args, scratch, cgroup))
                write_report(report, args.out)
        finally:
            remove_memory_cgroup(cgroup)
            shutil.rmtree(scratch, ignore_errors=True)
        print(f"wrote {args.out / 'kv.md'}", flush=True)
    except BenchmarkFailure as failure:
        print(failure, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
