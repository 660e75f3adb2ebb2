#!/usr/bin/env python3
"""Stream index: Spillway's template B+ tree and StreamIndex against the same tree
without a template, std BTreeMap and RocksDB, side by side.

    python3 bench/stream.py [--records 10M] [--runs 1] [--dataset uniform ...] [--dir DIR] [--out docs/benchmarks]
    python3 bench/stream.py --merge PART/stream.json [--out docs/benchmarks]

Every dataset is a stream of --records records (key u64, near-sorted time u64,
8-byte value) from spillway-workload's StreamGenerator (seed 42): uniform keys,
scrambled Zipf keys (exponent 0.99), the seed's mixture of three Gaussians, and
the drifting mixture (means move once through the key space over the stream).
The driver (bench/stream-driver, a cargo workspace of its own so that CI never
compiles RocksDB) generates it in memory in every process, untimed, then runs one
experiment:

    index     the index layer alone, buffers of 10^6 records, batches of 1000:
              template B+ tree (fixed and rebuild policies) vs BPlusTree rebuilt
              per buffer vs std BTreeMap per buffer; 1 and 2 threads
    overflow  share of leaves with 1, 2, 3+ overflow nodes (the seed's Tables
              4.1-4.3), both policies, fan-out 4, 10, 64 and 100
    store     StreamIndex (policies rebuild, fixed, none; WAL synced or not;
              batches of 1000 and 1), an in-memory BTreeMap store, RocksDB
              (WAL on, synced or not); 1 and 2 writer threads; then range queries
              at 0.01%, 0.1%, 1% and 10% selectivity
    mixed     batches of 99 records, each followed by a 0.01% range query

Each run is one process, measured by bench/run.py's run_once (wall time, CPU
time, peak RSS from GNU time). The benchmark fails unless every index-layer
contender drained the same entries and every store's queries found the same
records. Reports go to docs/benchmarks/stream.{json,md}, rewritten after every
dataset. See bench/README.md.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import (  # noqa: E402  (the path is set just above)
    BenchmarkFailure,
    REPO_ROOT,
    Requirement,
    command_output,
    default_data_dir,
    ensure_libclang,
    ensure_requirements,
    machine_info,
    rocksdb_build_environment,
    run_once,
)

BENCH = Path(__file__).resolve().parent
DEFAULT_OUT = REPO_ROOT / "docs" / "benchmarks"
DRIVER_MANIFEST = BENCH / "stream-driver" / "Cargo.toml"
# Outside the repository: RocksDB's build is about 1 GB of objects.
DEFAULT_TARGET_DIR = Path(os.environ.get("STREAM_DRIVER_TARGET", "/tmp/stream-driver-target"))
DEFAULT_DATASETS = ["uniform", "zipf", "gaussians", "drifting"]
# Extra drifting streams for the overflow table only: TRAVEL (key spaces each mean moves over the
# stream) or TRAVEL:FILL (the rebuild policy aiming at another leaf fill than 0.7).
DEFAULT_DRIFT_SWEEP = "0.1,0.3,3,1:0.5,0.1:0.5"
SELECTIVITIES = [0.0001, 0.001, 0.01, 0.1]
# cargo itself comes from rustup, as for the rest of the repository; GNU time measures peak RSS.
BUILD_REQUIREMENTS = [
    Requirement(executable="g++", source="apt", package="g++"),
    Requirement(executable="/usr/bin/time", source="apt", package="time"),
]
# The seed's Tables 4.1-4.3 (500k tuples per tree; percent of leaves with 1 / 2 / 3 overflow nodes).
SEED_TABLES = {
    4: {"Teleco": (11.68, 2.70, 0.0), "Building": (10.58, 8.44, 0.10), "Synthetic": (7.55, 0.45, 0.0)},
    10: {"Teleco": (1.18, 0.25, 0.0), "Building": (3.00, 0.94, 0.01), "Synthetic": (0.76, 0.08, 0.0)},
    100: {"Teleco": (1.00, 0.03, 0.0), "Building": (2.98, 0.88, 0.0), "Synthetic": (0.37, 0.01, 0.0)},
}
# The targets.
INSERT_RATIO_TARGET = 1.5
TWO_THREAD_RATE_TARGET = 1.5e6
QUERY_MEDIAN_TARGET_NS = 1e6
OVERFLOW_SHARE_TARGET = 5.0


@dataclass(frozen=True)
class Spec:
    """One configuration of one contender: a process per run."""

    kind: str  # index, store or mixed
    contender: str  # index contender, or store engine
    threads: int
    batch: int = 1000
    sync: bool = False
    policy: str = "rebuild"  # StreamIndex only
    queries: bool = False
    extra: tuple[str, ...] = field(default_factory=tuple)

    @property
    def key(self) -> str:
        """Stable and readable: the report's tables look runs up by it."""
        parts = [self.kind, self.label, f"t{self.threads}"]
        if self.kind == "store":
            parts += [f"b{self.batch}", "sync" if self.sync else "nosync"]
        return " ".join(parts)

    @property
    def label(self) -> str:
        if self.kind != "index" and self.contender == "spillway":
            return f"spillway-{self.policy}" + ("-notiers" if "--no-tiers" in self.extra else "")
        return self.contender

    def argv(self, driver: Path, dataset: str, records: int, buffer: int, scratch: Path) -> list[str]:
        common = ["--dataset", dataset, "--records", str(records), "--buffer", str(buffer)]
        if self.kind == "index":
            return [str(driver), "index", *common, "--contender", self.contender, "--threads", str(self.threads),
                    "--batch", str(self.batch), *self.extra]
        argv = [str(driver), "store", *common, "--engine", self.contender, "--threads", str(self.threads),
                "--batch", str(self.batch), "--policy", self.policy, "--dir", str(scratch)]
        if self.sync:
            argv.append("--sync")
        if self.queries:
            argv.append("--queries")
        if self.kind == "mixed":
            argv.append("--mixed")
        return argv + list(self.extra)


def specs(rocksdb: bool) -> list[Spec]:
    """Every configuration run on every dataset, in run order."""
    plan: list[Spec] = []
    for threads in (1, 2):
        for contender in ("template-rebuild", "template-fixed", "bptree", "btreemap"):
            plan.append(Spec("index", contender, threads))
    engines = ["spillway", "btreemap"] + (["rocksdb"] if rocksdb else [])
    for threads in (1, 2):
        for engine in engines:
            # Queries once per engine, after the single-threaded unsynced ingest.
            plan.append(Spec("store", engine, threads, queries=threads == 1))
        if threads == 1:
            # What tiers do for queries (and cost the ingest): the same store without them.
            plan.append(Spec("store", "spillway", threads, queries=True, extra=("--no-tiers",)))
        plan.append(Spec("store", "spillway", threads, policy="fixed"))
        plan.append(Spec("store", "spillway", threads, policy="none"))
        for engine in engines:
            if engine != "btreemap":  # nothing to sync
                plan.append(Spec("store", engine, threads, sync=True))
            plan.append(Spec("store", engine, threads, batch=1))
        for engine in engines:
            plan.append(Spec("mixed", engine, threads, batch=99))
    return plan


def parse_count(text: str) -> int:
    """10M, 1e7, 500k: a count with a decimal suffix."""
    text = text.strip().lower()
    for suffix, factor in (("k", 10**3), ("m", 10**6), ("g", 10**9)):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    return int(float(text))


# ---------------------------------------------------------------------------
# Building and running


def build(target_dir: Path, rocksdb: bool) -> Path:
    """Builds stream-driver in release mode (RocksDB from source: about 16 minutes the first time on 2 cores)."""
    ensure_requirements(BUILD_REQUIREMENTS)
    if rocksdb:
        ensure_libclang()
    command = ["nice", "cargo", "build", "--release", "--locked", "--manifest-path", str(DRIVER_MANIFEST)]
    if not rocksdb:
        command.append("--no-default-features")
    print(f"building stream-driver: CARGO_TARGET_DIR={target_dir} {' '.join(command)}", flush=True)
    environment = rocksdb_build_environment(target_dir)
    if subprocess.run(command, cwd=REPO_ROOT, env=environment, check=False).returncode != 0:
        raise BenchmarkFailure("cargo build of stream-driver failed")
    return target_dir / "release" / "stream-driver"


def json_lines(path: Path) -> list[dict[str, Any]]:
    lines = []
    try:
        for line in path.read_text().splitlines():
            line = line.strip()
            if line.startswith("{"):
                lines.append(json.loads(line))
    except (OSError, ValueError):
        return []
    return lines


def run_driver(argv: list[str], work_dir: Path, log_prefix: Path, what: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    run = run_once(argv, work_dir, log_prefix)
    results = json_lines(log_prefix.with_suffix(".stdout"))
    if run["exit_code"] != 0 or not results:
        raise BenchmarkFailure(
            f"BENCHMARK FAILED: {what} (exit {run['exit_code']}): {' '.join(argv)}\n{run['stderr_tail']}"
        )
    return run, results


def load_average() -> list[float]:
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return []


def check_agreement(dataset: str, runs: dict[str, list[dict[str, Any]]]) -> None:
    """Index contenders drained the same entries; stores' queries found the same records."""
    drained: dict[str, Any] = {}
    found: dict[float, tuple[str, Any]] = {}
    for key, results in runs.items():
        for result in results:
            if result["experiment"] == "index":
                figures = result["drained"]
                reference = drained.setdefault("figures", (key, figures))
                if reference[1] != figures:
                    raise BenchmarkFailure(
                        f"RESULTS DISAGREE on {dataset}: {key} drained {figures}, {reference[0]} {reference[1]}"
                    )
            for query in result.get("queries") or []:
                reference = found.setdefault(query["selectivity"], (key, query["found"]))
                if reference[1] != query["found"]:
                    raise BenchmarkFailure(
                        f"RESULTS DISAGREE on {dataset} at selectivity {query['selectivity']}: {key} found "
                        f"{query['found']}, {reference[0]} found {reference[1]}"
                    )


def run_dataset(
    name: str,
    records: int,
    buffer: int,
    runs: int,
    plan: list[Spec],
    with_overflow: bool,
    measured: dict[str, Any],
    driver: Path,
    scratch: Path,
    logs: Path,
) -> dict[str, Any]:
    """Runs every configuration of `plan` (and the overflow tables) on one dataset; `measured` says when and how."""
    print(f"dataset    {name}: {records:,} records, {len(plan)} configurations x {runs} run(s)", flush=True)
    load_before = load_average()
    results: dict[str, list[dict[str, Any]]] = {spec.key: [] for spec in plan}
    for round_index in range(runs):
        for number, spec in enumerate(plan):
            argv = spec.argv(driver, name, records, buffer, scratch)
            log = logs / f"{name.replace(':', '-')}-{number}-{round_index}"
            run, lines = run_driver(argv, scratch, log, f"{spec.key} on {name}")
            result = lines[-1]
            result["peak_rss_bytes"] = run["peak_rss_kib"] * 1024
            result["process_wall_s"] = run["wall_s"]
            result["cpu_s"] = run["user_s"] + run["sys_s"]
            results[spec.key].append(result)
            print(f"  round {round_index + 1}/{runs}  {spec.key:42} {progress(result)}", flush=True)
    check_agreement(name, results)
    overflow_lines: list[dict[str, Any]] = []
    if with_overflow:
        overflow_run, overflow_lines = run_driver(
            [str(driver), "overflow", "--dataset", name, "--records", str(records), "--buffer", str(buffer)],
            scratch, logs / f"{name.replace(':', '-')}-overflow", f"overflow on {name}",
        )
        print(f"  overflow tables ({overflow_run['wall_s']:.1f} s)", flush=True)
    dataset = {
        "name": name,
        "records": records,
        "buffer": buffer,
        "parts": [{
            **measured,
            "configurations": list(results),
            "overflow": with_overflow,
            "load_average_before": load_before,
            "load_average_after": load_average(),
        }],
        "runs": results,
        "summary": {key: summarize(runs_of) for key, runs_of in results.items()},
        "overflow": [overflow_row(line) for line in overflow_lines],
    }
    dataset["targets"] = targets(dataset)
    return dataset


def progress(result: dict[str, Any]) -> str:
    rss = f"RSS {result['peak_rss_bytes'] / 2**20:7.0f} MiB"
    if result["experiment"] == "index":
        return f"{result['insert_records_per_s'] / 1e6:6.2f} M inserts/s  {result['total_records_per_s'] / 1e6:6.2f} M/s with drain  {rss}"
    if result["experiment"] == "mixed":
        mixed = result["mixed"]
        return f"{mixed['operations_per_s'] / 1e6:6.2f} M ops/s  query p50 {mixed['query_latency']['p50_ns'] / 1e3:8.1f} us  {rss}"
    text = f"{result['ingest']['records_per_s'] / 1e6:6.2f} M records/s  {rss}"
    for query in result.get("queries") or []:
        text += f"  {query['selectivity'] * 100:g}%: {query['latency']['p50_ns'] / 1e6:.2f} ms"
    return text


def overflow_row(line: dict[str, Any]) -> dict[str, Any]:
    return {
        "dataset": line["dataset"],
        "policy": line["contender"].removeprefix("template-"),
        "fan_out": line["fan_out"],
        "leaf_capacity": line["leaf_capacity"],
        "fill": line.get("fill"),
        "buffers": line["buffers"],
        "templates": line["templates"],
        **{
            key: line["overflow"].get(key)
            for key in ("leaves", "percent_1", "percent_2", "percent_3_plus", "percent_any", "percent_entries_in_overflow")
        },
        "percent_any_per_buffer": [buffer["percent_any"] for buffer in line["overflow_per_buffer"]],
    }


# ---------------------------------------------------------------------------
# Summaries and targets


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the runs of one configuration."""
    first = results[0]
    summary: dict[str, Any] = {
        "peak_rss_bytes": median([r["peak_rss_bytes"] for r in results]),
        "cpu_s": median([r["cpu_s"] for r in results]),
    }
    if first["experiment"] == "index":
        summary.update(
            insert_records_per_s=median([r["insert_records_per_s"] for r in results]),
            total_records_per_s=median([r["total_records_per_s"] for r in results]),
            batch_p50_ns=median([r["batch_latency"]["p50_ns"] for r in results]),
            batch_p99_ns=median([r["batch_latency"]["p99_ns"] for r in results]),
            overflow_percent_any=first["overflow"]["percent_any"] if first.get("overflow") else None,
            templates=first["templates"],
        )
    elif first["experiment"] == "mixed":
        summary.update(
            operations_per_s=median([r["mixed"]["operations_per_s"] for r in results]),
            records_per_query=median([r["mixed"]["records_per_query"] for r in results]),
            query_p50_ns=median([r["mixed"]["query_latency"]["p50_ns"] for r in results]),
            query_p99_ns=median([r["mixed"]["query_latency"]["p99_ns"] for r in results]),
            write_p99_ns=median([r["mixed"]["write_latency"]["p99_ns"] for r in results]),
        )
    else:
        summary.update(
            records_per_s=median([r["ingest"]["records_per_s"] for r in results]),
            write_p50_ns=median([r["ingest"]["write_latency"]["p50_ns"] for r in results]),
            write_p99_ns=median([r["ingest"]["write_latency"]["p99_ns"] for r in results]),
            write_p999_ns=median([r["ingest"]["write_latency"]["p999_ns"] for r in results]),
        )
        stats = first.get("stats") or {}
        if "total_overflow" in stats:
            summary["overflow_percent_any"] = stats["total_overflow"]["percent_any"]
            summary["segments"] = stats["segments"]
            summary["flush_pause_seconds"] = median([r["stats"]["flush_pause_seconds"] for r in results])
        if "settle_s" in stats:
            summary["settle_s"] = median([r["stats"]["settle_s"] for r in results])
        if first.get("queries"):
            summary["queries"] = [
                {
                    "selectivity": query["selectivity"],
                    "queries": query["queries"],
                    "records_per_query": query["records_per_query"],
                    "p50_ns": median([r["queries"][i]["latency"]["p50_ns"] for r in results]),
                    "p99_ns": median([r["queries"][i]["latency"]["p99_ns"] for r in results]),
                    **(
                        {
                            "unordered_p50_ns": median([r["queries"][i]["unordered_latency"]["p50_ns"] for r in results]),
                            "unordered_p99_ns": median([r["queries"][i]["unordered_latency"]["p99_ns"] for r in results]),
                        }
                        if all("unordered_latency" in r["queries"][i] for r in results)
                        else {}
                    ),
                }
                for i, query in enumerate(first["queries"])
            ]
    return summary


def figure(dataset: dict[str, Any], key: str, name: str) -> float | None:
    value = dataset["summary"].get(key, {}).get(name)
    return value if isinstance(value, (int, float)) else None


def query_p50(dataset: dict[str, Any], key: str, selectivity: float) -> float | None:
    for query in dataset["summary"].get(key, {}).get("queries", []):
        if query["selectivity"] == selectivity:
            return query["p50_ns"]
    return None


def targets(dataset: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets on this dataset: each with what was measured, against what, and a verdict."""
    checks: list[dict[str, Any]] = []

    def ratio_check(what: str, ours_key: str, theirs_key: str, field_name: str) -> None:
        ours, theirs = figure(dataset, ours_key, field_name), figure(dataset, theirs_key, field_name)
        if ours is None or theirs is None:
            return
        ratio = ours / theirs
        checks.append({
            "what": what, "ours": ours, "against": theirs_key, "theirs": theirs, "value": ratio,
            "target": INSERT_RATIO_TARGET, "direction": "at least", "unit": "x", "met": ratio >= INSERT_RATIO_TARGET,
        })

    for threads in (1, 2):
        for peer, peer_name in (("bptree", "the B+ tree rebuilt per buffer"), ("btreemap", "BTreeMap per buffer")):
            ratio_check(
                f"index insert, {threads} thread{'s' if threads > 1 else ''}: template (rebuild) vs {peer_name}",
                f"index template-rebuild t{threads}", f"index {peer} t{threads}", "insert_records_per_s",
            )
    for threads in (1, 2):
        ratio_check(
            f"store ingest, {threads} thread{'s' if threads > 1 else ''}: StreamIndex rebuild vs policy none",
            f"store spillway-rebuild t{threads} b1000 nosync", f"store spillway-none t{threads} b1000 nosync",
            "records_per_s",
        )
        ratio_check(
            f"store ingest, {threads} thread{'s' if threads > 1 else ''}: StreamIndex rebuild vs BTreeMap store",
            f"store spillway-rebuild t{threads} b1000 nosync", f"store btreemap t{threads} b1000 nosync",
            "records_per_s",
        )
    rate = figure(dataset, "store spillway-rebuild t2 b1000 nosync", "records_per_s")
    if rate is not None:
        checks.append({
            "what": "StreamIndex ingest on 2 threads (batch 1000, no fsync)", "ours": rate, "against": None,
            "theirs": None, "value": rate, "target": TWO_THREAD_RATE_TARGET, "direction": "at least",
            "unit": "records/s", "met": rate >= TWO_THREAD_RATE_TARGET,
        })
    latency = query_p50(dataset, "store spillway-rebuild t1 b1000 nosync", 0.01)
    if latency is not None:
        checks.append({
            "what": "StreamIndex 1% range query median (in memory)", "ours": latency, "against": None,
            "theirs": None, "value": latency, "target": QUERY_MEDIAN_TARGET_NS, "direction": "below",
            "unit": "ns", "met": latency < QUERY_MEDIAN_TARGET_NS,
        })
    if dataset["name"].startswith("drifting"):
        for row in dataset.get("overflow", []):
            if row["policy"] == "rebuild" and row["fan_out"] == 64:
                checks.append({
                    "what": "rebuild policy: overflowed leaves (index layer, fan-out 64)", "ours": row["percent_any"],
                    "against": None, "theirs": None, "value": row["percent_any"], "target": OVERFLOW_SHARE_TARGET,
                    "direction": "below", "unit": "%", "met": row["percent_any"] < OVERFLOW_SHARE_TARGET,
                })
        share = figure(dataset, "store spillway-rebuild t1 b1000 nosync", "overflow_percent_any")
        if share is not None:
            checks.append({
                "what": "rebuild policy: overflowed leaves (StreamIndex, total_overflow)", "ours": share,
                "against": None, "theirs": None, "value": share, "target": OVERFLOW_SHARE_TARGET,
                "direction": "below", "unit": "%", "met": share < OVERFLOW_SHARE_TARGET,
            })
    return checks


# ---------------------------------------------------------------------------
# The Markdown report


def rate(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:.2f} M"


def micros(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1e6:
        return f"{value / 1e6:.2f} ms"
    return f"{value / 1e3:.1f} us"


def value_text(check: dict[str, Any]) -> str:
    unit = check["unit"]
    if unit == "x":
        return f"{check['value']:.2f}x"
    if unit == "records/s":
        return f"{check['value'] / 1e6:.2f} M/s"
    if unit == "ns":
        return micros(check["value"])
    return f"{check['value']:.2f}%"


def target_text(check: dict[str, Any]) -> str:
    unit = check["unit"]
    target = check["target"]
    if unit == "x":
        shown = f"{target:g}x"
    elif unit == "records/s":
        shown = f"{target / 1e6:g} M/s"
    elif unit == "ns":
        shown = micros(target)
    else:
        shown = f"{target:g}%"
    return f"{check['direction']} {shown}"


def index_table(datasets: list[dict[str, Any]]) -> list[str]:
    names = [d["name"] for d in datasets]
    lines = [
        "| contender | threads | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for threads in (1, 2):
        for contender in ("template-rebuild", "template-fixed", "bptree", "btreemap"):
            key = f"index {contender} t{threads}"
            cells = [
                f"{rate(figure(d, key, 'insert_records_per_s'))} / {rate(figure(d, key, 'total_records_per_s'))}"
                for d in datasets
            ]
            lines.append(f"| {contender} | {threads} | " + " | ".join(cells) + " |")
    return lines


def store_table(datasets: list[dict[str, Any]]) -> list[str]:
    names = [d["name"] for d in datasets]
    lines = [
        "| store | threads | batch | WAL | " + " | ".join(names) + " |",
        "|---|---|---|---|" + "---|" * len(names),
    ]
    keys: list[str] = []
    for dataset in datasets:
        for key in dataset["summary"]:
            if key.startswith("store ") and key not in keys:
                keys.append(key)
    for key in keys:
        _, label, threads, batch, sync = key.split()
        cells = []
        for dataset in datasets:
            records_per_s = figure(dataset, key, "records_per_s")
            p99 = figure(dataset, key, "write_p99_ns")
            cells.append(f"{rate(records_per_s)} (p50 {micros(figure(dataset, key, 'write_p50_ns'))}, p99 {micros(p99)})"
                         if records_per_s is not None else "-")
        wal = "fsync per write" if sync == "sync" else "no fsync"
        if label == "btreemap":
            wal = "none (memory)"
        lines.append(f"| {label} | {threads[1:]} | {batch[1:]} | {wal} | " + " | ".join(cells) + " |")
    return lines


def query_tables(dataset: dict[str, Any]) -> list[str]:
    engines = [key for key in dataset["summary"] if dataset["summary"][key].get("queries")]
    if not engines:
        return []
    # Columns: each engine's range query, then (Spillway) the same ranges scanned unordered.
    columns = [(key, "p50_ns", "p99_ns", f"{key.split()[1]} p50 / p99") for key in engines]
    columns += [
        (key, "unordered_p50_ns", "unordered_p99_ns", f"{key.split()[1]} unordered scan p50 / p99")
        for key in engines
        if any("unordered_p50_ns" in query for query in dataset["summary"][key]["queries"])
    ]
    lines = [
        "| selectivity | records per query | " + " | ".join(column[3] for column in columns) + " |",
        "|---|---|" + "---|" * len(columns),
    ]
    for i, selectivity in enumerate(SELECTIVITIES):
        cells = []
        records_per_query = None
        for key, p50, p99, _ in columns:
            queries = dataset["summary"][key]["queries"]
            if i < len(queries) and p50 in queries[i]:
                records_per_query = queries[i]["records_per_query"]
                cells.append(f"{micros(queries[i][p50])} / {micros(queries[i][p99])}")
            else:
                cells.append("-")
        count = f"{records_per_query:,.0f}" if records_per_query is not None else "-"
        lines.append(f"| {selectivity * 100:g}% | {count} | " + " | ".join(cells) + " |")
    return lines


def mixed_table(datasets: list[dict[str, Any]]) -> list[str]:
    names = [d["name"] for d in datasets]
    lines = [
        "| store | threads | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    keys: list[str] = []
    for dataset in datasets:
        keys += [key for key in dataset["summary"] if key.startswith("mixed ") and key not in keys]
    for key in keys:
        _, label, threads = key.split()
        cells = []
        for dataset in datasets:
            ops = figure(dataset, key, "operations_per_s")
            cells.append(
                f"{rate(ops)} ops/s (query p50 {micros(figure(dataset, key, 'query_p50_ns'))}, "
                f"p99 {micros(figure(dataset, key, 'query_p99_ns'))})" if ops is not None else "-"
            )
        lines.append(f"| {label} | {threads[1:]} | " + " | ".join(cells) + " |")
    return lines


def overflow_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| dataset | policy | fan-out = leaf capacity | leaves (all buffers) | templates made | leaves with 1 overflow "
        "node | 2 | 3+ | any | entries in overflow nodes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        policy = row["policy"]
        if policy == "rebuild" and row.get("fill") not in (None, 0.7):
            policy = f"rebuild (fill {row['fill']:g})"
        entries = row.get("percent_entries_in_overflow")
        lines.append(
            f"| {row['dataset']} | {policy} | {row['fan_out']} | {row['leaves']:,} | {row['templates']} "
            f"| {row['percent_1']:.2f}% | {row['percent_2']:.2f}% | {row['percent_3_plus']:.2f}% "
            f"| {row['percent_any']:.2f}% | {'-' if entries is None else f'{entries:.2f}%'} |"
        )
    return lines


def losses(report: dict[str, Any]) -> list[str]:
    """Sentences naming every place a Spillway figure is worse than a peer's."""
    sentences = []
    for dataset in report["datasets"]:
        name = dataset["name"]
        for threads in (1, 2):
            ours_key = f"store spillway-rebuild t{threads} b1000 nosync"
            for peer in ("rocksdb", "btreemap"):
                peer_key = f"store {peer} t{threads} b1000 nosync"
                ours, theirs = figure(dataset, ours_key, "records_per_s"), figure(dataset, peer_key, "records_per_s")
                if ours and theirs and ours < theirs:
                    sentences.append(
                        f"{name}: StreamIndex ingests at {ours / theirs:.2f}x {peer}'s rate on {threads} thread(s) "
                        f"(batch 1000, no fsync)."
                    )
            for contender in ("bptree", "btreemap"):
                ours = figure(dataset, f"index template-rebuild t{threads}", "total_records_per_s")
                theirs = figure(dataset, f"index {contender} t{threads}", "total_records_per_s")
                if ours and theirs and ours < theirs:
                    sentences.append(
                        f"{name}: with its drain (sorting the leaves at flush) the template is slower than "
                        f"{contender} on {threads} thread(s) ({ours / theirs:.2f}x)."
                    )
        spillway_key = "store spillway-rebuild t1 b1000 nosync"
        for peer in ("rocksdb", "btreemap"):
            peer_key = f"store {peer} t1 b1000 nosync"
            for selectivity in SELECTIVITIES:
                ours, theirs = query_p50(dataset, spillway_key, selectivity), query_p50(dataset, peer_key, selectivity)
                if ours and theirs and ours > theirs:
                    sentences.append(
                        f"{name}: {selectivity * 100:g}% range queries take {ours / theirs:.2f}x {peer}'s median time."
                    )
        ours = figure(dataset, "store spillway-rebuild t2 b1000 nosync", "peak_rss_bytes")
        theirs = figure(dataset, "store rocksdb t2 b1000 nosync", "peak_rss_bytes")
        if ours and theirs and ours > theirs:
            sentences.append(
                f"{name}: ingesting on 2 threads StreamIndex peaks at {ours / 2**20:,.0f} MiB RSS, {ours / theirs:.1f}x "
                f"RocksDB's {theirs / 2**20:,.0f} MiB (its segment cache keeps every flushed record in memory, and a background merge into a tier holds its inputs and its output at once)."
            )
        for threads in (1, 2):
            ours = figure(dataset, f"mixed spillway-rebuild t{threads}", "operations_per_s")
            for peer in ("rocksdb", "btreemap"):
                theirs = figure(dataset, f"mixed {peer} t{threads}", "operations_per_s")
                if ours and theirs and ours < theirs:
                    sentences.append(
                        f"{name}: the 99/1 mix runs at {ours / theirs:.2f}x {peer}'s rate on {threads} thread(s)."
                    )
    return sentences


def markdown(report: dict[str, Any]) -> str:
    machine = report["machine"]
    datasets = report["datasets"]
    buffer = "10^6" if report.get("buffer", 10**6) == 10**6 else f"{report['buffer']:,}"
    lines = [
        "# Stream index: template B+ tree and StreamIndex against their peers",
        "",
        f"Measured {report['date']} on {machine['cpu_cores']} cores ({machine['cpu_model']}), "
        f"{machine['memory_bytes'] / 2**30:.0f} GiB, commit {report['commit']}; {report['records']:,} records per "
        f"dataset, {report['runs']} run(s) per configuration (medians). Reproduce with `{report['command']}`.",
        "",
    ]
    if report.get("note"):
        lines += [report["note"], ""]
    merged = [
        (dataset["name"], part) for dataset in datasets for part in dataset.get("parts", [])
        if (part["date"], part["commit"], part["command"]) != (report["date"], report["commit"], report["command"])
    ]
    if merged:
        lines += ["Some configurations were measured (or measured again) in other runs, merged in with `--merge`:", ""]
        for name, part in merged:
            what = f"{len(part['configurations'])} configuration(s)" + (" and the overflow tables" if part["overflow"] else "")
            lines.append(f"- {name}: {what}, {part['date']}, commit {part['commit']}, `{part['command']}`")
        lines.append("")
    lines += [
        "Each dataset is a stream of records (key u64, time u64, an 8-byte value) from spillway-workload's "
        "`StreamGenerator` (seed 42): keys uniform over 2^40, scrambled Zipf (exponent 0.99), the seed's mixture "
        "of three Gaussians, or that mixture drifting (every mean moves once through the key space over the "
        "stream); times near-sorted (increasing, each late by up to 64 steps). Every configuration runs in its own "
        "process (`bench/stream-driver`), which generates the stream in memory first (untimed). Every index "
        "contender drained the same entries and every store's queries found the same records.",
        "",
        "## Targets",
        "",
        "| dataset | target | measured | against | target | met |",
        "|---|---|---|---|---|---|",
    ]
    for dataset in datasets:
        for check in dataset["targets"]:
            against = check["against"] or "-"
            if check["theirs"] is not None:
                against = f"{against} ({rate(check['theirs'])}/s; ours {rate(check['ours'])}/s)"
            lines.append(
                f"| {dataset['name']} | {check['what']} | {value_text(check)} | {against} | {target_text(check)} "
                f"| {'yes' if check['met'] else '**no**'} |"
            )
    sentences = losses(report)
    if sentences:
        lines += ["", "Where Spillway loses:", ""] + [f"- {sentence}" for sentence in sentences]
    lines += [
        "",
        "## Insert throughput, index layer",
        "",
        f"Records/s inserting / including the drain. The stream is cut into buffers of {buffer} records; each buffer's "
        "entries (key, time, location) are inserted in batches of 1000, then drained in key order as a flush "
        "does (and the next buffer's tree made: the template's empty copy, a rebuilt template, or a new tree). "
        "Fan-out and leaf capacity 64. The fixed template's first buffer grows a B+ tree, as the seed makes its "
        "template; the rebuild policy starts from a template of one leaf, cut within the buffer. On 2 threads the template takes per-leaf locks; the B+ tree and `BTreeMap` are single-writer "
        "and take a `Mutex` per batch (they cannot insert in parallel).",
        "",
    ]
    lines += index_table(datasets)
    lines += [
        "",
        "## Ingest, whole stores",
        "",
        "Records/s over the ingest's wall time, and the latency of a write call. StreamIndex: buffers of "
        f"{buffer} records ({report.get('buffer', 10**6) * 56 / 1e6:g} MB), fan-out and leaf capacity 64, its 1 GiB segment cache, WAL with or without an fsync "
        "per write (group commit); the flush (sort, write a segment) runs in the writer whose batch fills a "
        "buffer. `btreemap`: records appended to in-memory columns and indexed by `BTreeMap<(key, seq), "
        "location>` under one `RwLock`. RocksDB 8.10 (crate `rocksdb` 0.22, release build): key "
        "key|time|seq (24 bytes, big-endian), 8-byte value, `WriteBatch` per write call, WAL on, default "
        "leveled compaction and 64 MB memtables, 2 background jobs (its flushes and compactions run on its own "
        "threads, beside the writers), no compression, 1 GiB block cache.",
        "",
    ]
    lines += store_table(datasets)
    for dataset in datasets:
        settle = figure(dataset, "store rocksdb t1 b1000 nosync", "settle_s")
        if settle is not None:
            lines += ["", f"{dataset['name']}: RocksDB needed {settle:.1f} s more after the single-threaded ingest to "
                          "flush its memtable and finish compactions (not in its rate)."]
        settle = figure(dataset, "store spillway-rebuild t1 b1000 nosync", "settle_s")
        if settle is not None:
            lines += ["", f"{dataset['name']}: StreamIndex's background merges into tiers needed {settle:.2f} s more "
                          "after the single-threaded ingest (not in its rate)."]
    lines += [
        "",
        "## Range queries",
        "",
        "After the single-threaded ingest (batch 1000, no fsync): random key ranges each holding the given share "
        "of the records (chosen from the sorted keys, so a range in a dense region is narrow), run one at a time "
        "after a warm-up (one scan of everything, then 10 ranges); every result is materialized (key, time, value). StreamIndex holds the data in "
        f"its segment cache plus the live buffer (up to {buffer} records in a template tree); RocksDB after its "
        "memtable flush and compactions, in its block cache and the page cache; `btreemap` in memory. Every engine "
        "reuses the memory of its last result (StreamIndex through `range_into`). StreamIndex merges its sources "
        "(its tiers, the segments not yet in one, and the buffer; `spillway-rebuild-notiers` is the same store "
        "without tiers, a segment per flushed buffer) into key order, on two threads once a result holds 2^15 "
        "records or more (the machine's second core is idle during the queries). It also reads the same ranges "
        "with `scan` (records visited in place, each source in key order, nothing copied): the difference is what "
        "its range query spends merging the sources into one key order and copying.",
        "",
    ]
    for dataset in datasets:
        tables = query_tables(dataset)
        if tables:
            lines += [f"### {dataset['name']}", ""] + tables + [""]
    lines += [
        "## Mixed: 99% inserts, 1% queries",
        "",
        "Each thread writes batches of 99 records and runs one 0.01%-selectivity range query after each (the "
        "ranges of the whole dataset, so early queries find less). Operations/s counts records and queries.",
        "",
    ]
    lines += mixed_table(datasets)
    lines += [
        "",
        "## Overflow share per template policy (the seed's Tables 4.1-4.3)",
        "",
        "Percent of leaves with 1, 2 and 3 or more overflow nodes, summed over every buffer indexed by a "
        f"template (buffers of {buffer} records; the seed used 500k tuples per tree). Fixed: the first buffer's "
        "grown tree is the template for ever. Rebuild: the first buffer starts from a template of one leaf (and counts "
        "here). A buffer with more than 5% of its leaves overflowed "
        "(or more than 5% of its entries in overflow nodes) gets a template rebuilt from its own keys at 70% "
        "fill for the next buffer; and within a buffer, once the template's overflowed share passes 5% beyond "
        "what its sample implies when full (keys repeated past a leaf), it is rebuilt at once from the keys so far, its leaves sized for the whole buffer "
        "(templates made counts both). Leaf capacity equals the fan-out here, as in the seed. The last column is the "
        "share of entries that went to overflow nodes: a template the stream has left behind can have few "
        "overflowed leaves holding very long chains.",
        "",
    ]
    rows = [row for dataset in datasets for row in dataset.get("overflow", [])]
    lines += overflow_table(rows)
    sweep = report.get("drift_sweep") or []
    if sweep:
        lines += [
            "",
            "Drift speed and the rebuild policy's fill (fan-out 64; `drifting:TRAVEL`: every mean moves TRAVEL key "
            "spaces over the whole stream, so 1 is the `drifting` dataset and 0.1 moves each mean 0.01 key spaces, "
            "a third of the narrowest cluster's deviation, per buffer; a rebuilt template aims at 70% leaf fill "
            "unless the row says otherwise):",
            "",
        ]
        lines += overflow_table(sweep)
    lines += [
        "",
        "The seed's tables for comparison (percent of leaves with 1 / 2 / 3 overflow nodes):",
        "",
        "| fan-out | Teleco | Building | Synthetic (3 Gaussians) |",
        "|---|---|---|---|",
    ]
    for fan_out, sets in SEED_TABLES.items():
        cells = [" / ".join(f"{value:g}" for value in sets[name]) for name in ("Teleco", "Building", "Synthetic")]
        lines.append(f"| {fan_out} | " + " | ".join(cells) + " |")
    lines += ["", "## Memory", "", "Peak RSS of each process (GNU time), generated stream included (24 bytes per record).", ""]
    lines += [
        "| configuration | " + " | ".join(d["name"] for d in datasets) + " |",
        "|---|" + "---|" * len(datasets),
    ]
    keys: list[str] = []
    for dataset in datasets:
        keys += [key for key in dataset["summary"] if key not in keys]
    for key in keys:
        cells = [
            f"{dataset['summary'][key]['peak_rss_bytes'] / 2**20:,.0f} MiB" if key in dataset["summary"] else "-"
            for dataset in datasets
        ]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    loads = [
        f"{d['name']} {part['load_average_before']} -> {part['load_average_after']}"
        for d in datasets for part in d.get("parts", [])
    ]
    lines += ["", "Load average (1, 5, 15 min) before and after each dataset's runs: " + "; ".join(loads) + "."]
    return "\n".join(lines) + "\n"


def write_report(report: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "stream.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "stream.md").write_text(markdown(report))


def superseded(old: dict[str, Any], parts: list[dict[str, Any]]) -> bool:
    """Whether nothing of `old` is left once `parts` are merged: each of its configurations (and its overflow
    tables, if it had them) measured again by them. A part merged twice supersedes itself."""
    measured = {key for part in parts for key in part.get("configurations", [])}
    overflow = any(part.get("overflow") for part in parts)
    return set(old.get("configurations", [])) <= measured and (overflow or not old.get("overflow"))


def merge(part_path: Path, out: Path) -> int:
    """Folds the report at `part_path` into the one in `out`, configuration by configuration.

    A dataset new to the report is added whole; for one it has, the part's configurations replace
    those of the same key (the others stay), its overflow tables replace the old ones if it has
    them, and the dataset lists both parts (date, commit, command, configurations). Drift sweep rows
    replace those of the same dataset, policy and fan-out.
    """
    report = json.loads((out / "stream.json").read_text())
    part = json.loads(part_path.read_text())
    if (part["records"], part.get("buffer")) != (report["records"], report.get("buffer")):
        print(
            f"{part_path} has {part['records']:,} records per dataset (buffer {part.get('buffer')}), {out} "
            f"{report['records']:,} (buffer {report.get('buffer')})",
            file=sys.stderr,
        )
        return 1
    by_name = {dataset["name"]: dataset for dataset in report["datasets"]}
    for incoming in part["datasets"]:
        existing = by_name.get(incoming["name"])
        if existing is None:
            report["datasets"].append(incoming)
            by_name[incoming["name"]] = incoming
            continue
        existing["runs"].update(incoming["runs"])
        if incoming.get("overflow"):
            existing["overflow"] = incoming["overflow"]
        existing["parts"] = [
            old for old in existing.get("parts", []) if not superseded(old, incoming.get("parts", []))
        ] + incoming.get("parts", [])
        existing["summary"] = {key: summarize(runs) for key, runs in existing["runs"].items()}
        try:
            check_agreement(existing["name"], existing["runs"])
        except BenchmarkFailure as failure:
            print(f"not merged: {failure}", file=sys.stderr)
            return 1
        existing["targets"] = targets(existing)
    def sweep_key(row: dict[str, Any]) -> tuple[Any, ...]:
        return row["dataset"], row["policy"], row["fan_out"], row.get("fill")

    sweep = {sweep_key(row): row for row in report.get("drift_sweep", [])}
    sweep.update({sweep_key(row): row for row in part.get("drift_sweep", [])})
    report["drift_sweep"] = list(sweep.values())
    write_report(report, out)
    print(f"merged {len(part['datasets'])} dataset(s) of {part_path} into {out / 'stream.md'}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", default="10M", help="records per dataset (default 10M)")
    parser.add_argument("--runs", type=int, default=1, help="runs per configuration (default 1)")
    parser.add_argument("--buffer", default="1M", help="records per buffer, every engine (default 1M)")
    parser.add_argument("--dataset", action="append", help="repeatable (default: " + " ".join(DEFAULT_DATASETS) + ")")
    parser.add_argument("--drift-sweep", default=DEFAULT_DRIFT_SWEEP,
                        help="extra drift travels for the overflow table, comma-separated ('' for none)")
    parser.add_argument("--no-rocksdb", action="store_true", help="skip RocksDB (and its long build)")
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (outside the repository)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where stream.json and stream.md go")
    parser.add_argument("--target-dir", type=Path, default=DEFAULT_TARGET_DIR, help="CARGO_TARGET_DIR of the driver")
    parser.add_argument("--note", default="", help="a sentence for the report (e.g. how busy the machine was)")
    parser.add_argument("--merge", type=Path, help="fold this partial stream.json into the report in --out")
    parser.add_argument(
        "--only", action="append",
        help="run only configurations whose key starts with this (e.g. 'index', 'store spillway', 'mixed'), "
             "'overflow' for the overflow tables, 'sweep' for the drift sweep; repeatable (default: everything)",
    )
    args = parser.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.out)
    try:
        records = parse_count(args.records)
        buffer = parse_count(args.buffer)
        names = args.dataset or DEFAULT_DATASETS
        base = (args.dir or default_data_dir()).resolve()
        if base == REPO_ROOT or REPO_ROOT in base.parents:
            raise BenchmarkFailure(f"--dir {base} is inside the repository; benchmark data stays outside it")
        base.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix="stream-", dir=base))
        commit = command_output(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"]) or "unknown"
        dirty = command_output(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--", "crates", "bench"])
        report: dict[str, Any] = {
            "workload": "stream",
            "date": datetime.date.today().isoformat(),
            "commit": commit + ("+local changes" if dirty else ""),
            "machine": machine_info(base),
            "records": records,
            "buffer": buffer,
            "runs": args.runs,
            "command": "python3 bench/stream.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "note": args.note,
            "datasets": [],
            "drift_sweep": [],
        }
        only = args.only or []
        plan = [spec for spec in specs(rocksdb=not args.no_rocksdb) if not only or spec.key.startswith(tuple(only))]
        with_overflow = not only or "overflow" in only
        sweep = [text.strip() for text in args.drift_sweep.split(",") if text.strip()]
        if only and "sweep" not in only:
            sweep = []
        measured = {key: report[key] for key in ("date", "commit", "command")}
        try:
            driver = build(args.target_dir, rocksdb=not args.no_rocksdb and any("rocksdb" in s.key for s in plan))
            logs = scratch / "logs"
            logs.mkdir()
            for name in names:
                report["datasets"].append(
                    run_dataset(name, records, buffer, args.runs, plan, with_overflow, measured, driver, scratch, logs)
                )
                # After every dataset, so a long benchmark cut short keeps what it measured.
                write_report(report, args.out)
            for item in sweep:
                travel, _, fill = item.partition(":")
                name = f"drifting:{travel}"
                argv = [str(driver), "overflow", "--dataset", name, "--records", str(records), "--buffer", str(buffer),
                        "--fan-outs", "64"] + (["--fill", fill] if fill else [])
                _, lines = run_driver(argv, scratch, logs / f"sweep-{travel}-{fill}", f"overflow on {name}")
                rows = [overflow_row(line) for line in lines]
                if fill:  # the fixed policy does not depend on the fill: its row is in the sweep already
                    rows = [row for row in rows if row["policy"] == "rebuild"]
                report["drift_sweep"] += rows
                print(f"drift sweep {item}: rebuild {rows[-1]['percent_any']:.2f}% overflowed", flush=True)
            write_report(report, args.out)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    except BenchmarkFailure as failure:
        print(f"\n{failure}", file=sys.stderr)
        return 1
    print(f"wrote {args.out / 'stream.md'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
