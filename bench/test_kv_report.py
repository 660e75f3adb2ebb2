"""Self-test of bench/kv.py's report code on fake driver results (no driver build, no peers, no timing).

Run with `python3 -m pytest bench/test_kv_report.py`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kv
from run import BenchmarkFailure


def step(engine: str, workload: str, rate: float, **extra) -> dict:
    result = {
        "engine": engine, "workload": workload, "operations": 1000, "seconds": 1000 / rate, "operations_per_second": rate,
        "latency_ns": {"count": 10, "mean": 1e4, "p50": 1e4, "p99": 5e4, "p999": 9e4, "max": 1e5},
        "hits": 300 if workload != "fillrandom" else 0, "misses": 700 if workload != "fillrandom" else 0,
        "writer_operations": 2000 if workload == "readwhilewriting" else 0, "read_bytes": 0, "write_bytes": 0,
        "user_bytes": 16_000, "stall_seconds": None if engine == "leveldb" else 0.5, "peak_rss_kib": 100 * 1024,
    }
    result.update(extra)
    return result


def engine_entry(engine: str, fill: float, read: float, read_bytes_per_get: int) -> dict:
    stats = None
    if engine == "spillway":
        stats = {"index_memory_bytes": 1_350, "list_records": 1000}
    elif engine.startswith("rocksdb"):
        stats = {"filter_and_index_bytes": 2_000, "estimate_keys": 1000}
    return {
        "fill-b1000": step(engine, "fillrandom", fill, write_bytes=48_000, engine_stats=stats),
        "read": step(engine, "readrandom", read, read_bytes=read_bytes_per_get * 1000),
        "rww": step(engine, "readwhilewriting", read / 2),
        "fill-b1": step(engine, "fillrandom", fill / 4),
    }


def fake_shape(shape: str = "16") -> dict:
    results = {
        "spillway": engine_entry("spillway", 3.0e6, 2e5, 4096),
        "rocksdb-leveled": engine_entry("rocksdb-leveled", 0.5e6, 3e5, 8192),
        "rocksdb-universal": engine_entry("rocksdb-universal", 0.8e6, 1e5, 8192),
        "leveldb": engine_entry("leveldb", 0.4e6, 1e5, 8192),
    }
    key_bytes, value_bytes = kv.SHAPES[shape]
    report = {"shape": shape, "key_bytes": key_bytes, "value_bytes": value_bytes, "records": 1000,
              "batch1_records": 500, "results": results}
    kv.pair_with_spillway(results)
    report["targets"] = kv.targets(report)
    return report


def fake_report(commit: str, shapes: list[str]) -> dict:
    return {
        "workload": "kv", "date": "2026-01-01", "commit": commit,
        "machine": {"cpu_cores": 2, "cpu_model": "test", "memory_bytes": 2**34, "disk_fstype": "ext4",
                    "disk_device": "/dev/test"},
        "memory_limit": 2**30, "command": f"python3 bench/kv.py (as of {commit})", "note": "",
        "shapes": [fake_shape(shape) for shape in shapes],
    }


def verdicts(shape: dict) -> dict[str, tuple[float, bool]]:
    return {check["what"]: (check["value"], check["met"]) for check in shape["targets"]}


def test_targets_compare_against_the_better_configuration_of_each_peer():
    found = verdicts(fake_shape("16"))
    value, met = found["fillrandom, batches of 1000, log synced: Spillway vs leveldb"]
    assert value == pytest.approx(7.5) and not met
    # The better RocksDB is universal here (0.8 M/s): 3.75x, against a target of 3x.
    value, met = found["fillrandom, batches of 1000, log synced: Spillway vs rocksdb-universal"]
    assert value == pytest.approx(3.75) and met
    value, met = found["readrandom: Spillway vs rocksdb-leveled"]
    assert value == pytest.approx(2 / 3) and not met
    assert found["device reads per GET (Spillway)"] == (1.0, True)
    assert found["index RAM per key (Spillway)"] == (pytest.approx(1.35), True)
    # The 256 B shape has no LevelDB target and asks only not to be slower than RocksDB.
    found = verdicts(fake_shape("256"))
    assert not any("leveldb" in what for what in found)
    assert found["fillrandom, batches of 1000, log synced: Spillway vs rocksdb-universal"][1]


def test_the_markdown_report_shows_every_engine_and_the_losses():
    text = kv.markdown(fake_report("abc1", ["16", "64"]))
    assert "## Targets" in text and "## 16 B records (8 B keys, 8 B values)" in text
    assert "| 16 B | fillrandom, batches of 1000, log synced: Spillway vs leveldb | 7.50x | at least 10x | **no** |" in text
    assert "| 64 B | device reads per GET (Spillway) | 1.00 | at most 2 | yes |" in text
    # LevelDB reports no stall time and no index memory: a dash, not a made-up zero.
    assert "| leveldb | 400 | 50 / 90 us | - | 3.00 | 0.00 | - | 100 |" in text
    assert "| spillway | 3000 | 50 / 90 us | 0.50 | 3.00 |" in text
    assert "- 16 B, readrandom: rocksdb-leveled 300 k ops/s, Spillway 200 k (0.67x)." in text


def test_engines_that_read_different_keys_stop_the_benchmark():
    results = fake_shape()["results"]
    kv.check_agreement("16", results)
    results["leveldb"]["read"]["hits"] = 301
    with pytest.raises(BenchmarkFailure, match="RESULTS DISAGREE"):
        kv.check_agreement("16", results)
    # A merged run that made ten times the GETs finds other hits: compared only among its own.
    results["leveldb"]["read"]["operations"] = 10_000
    results["leveldb"]["read"]["hits"] = 3_000
    kv.check_agreement("16", results)


def test_a_partial_report_replaces_the_engines_it_measured_again(tmp_path):
    out = tmp_path / "out"
    kv.write_report(fake_report("abc1", ["16"]), out)
    part_report = fake_report("def2", ["16", "256"])
    part_report["shapes"][0]["results"] = {"spillway": engine_entry("spillway", 6.0e6, 4e5, 4096)}
    part = tmp_path / "part.json"
    part.write_text(json.dumps(part_report))
    assert kv.merge(part, out) == 0
    merged = json.loads((out / "kv.json").read_text())
    assert [shape["shape"] for shape in merged["shapes"]] == ["16", "256"]
    sixteen = merged["shapes"][0]
    assert sixteen["results"]["spillway"]["fill-b1000"]["operations_per_second"] == 6.0e6
    assert sixteen["results"]["leveldb"]["fill-b1000"]["operations_per_second"] == 0.4e6  # kept
    # LevelDB ran with the first Spillway: its ratio stays that run's, not the merged Spillway's.
    assert verdicts(sixteen)["fillrandom, batches of 1000, log synced: Spillway vs leveldb"] == (7.5, False)
    assert merged["merged"] == [{"date": "2026-01-01", "commit": "def2", "command": "python3 bench/kv.py (as of def2)"}]
    assert "at commit def2: the shapes and engines of `python3 bench/kv.py (as of def2)`" in (out / "kv.md").read_text()


def test_ratios_use_spillways_figures_of_the_peers_own_run_and_mark_the_others(tmp_path):
    out = tmp_path / "out"
    base = fake_report("abc1", ["16"])
    del base["shapes"][0]["results"]["leveldb"]["spillway_same_run"]  # as written before runs were paired
    kv.write_report(base, out)
    # A later run measures Spillway and RocksDB universal again.
    part_report = fake_report("def2", ["16"])
    part_report["shapes"][0]["results"] = {"spillway": engine_entry("spillway", 4.0e6, 2e5, 4096),
                                           "rocksdb-universal": engine_entry("rocksdb-universal", 1.0e6, 4e5, 8192)}
    part = tmp_path / "part.json"
    part.write_text(json.dumps(part_report))
    assert kv.merge(part, out) == 0
    sixteen = json.loads((out / "kv.json").read_text())["shapes"][0]
    found = {check["what"]: (check["value"], check["met"], check.get("same_run")) for check in sixteen["targets"]}
    assert found["fillrandom, batches of 1000, log synced: Spillway vs rocksdb-universal"] == (4.0, True, True)
    assert found["readrandom: Spillway vs rocksdb-universal"] == (0.5, False, True)
    # LevelDB's entry predates pairing: compared with the merged Spillway, and marked so.
    assert found["fillrandom, batches of 1000, log synced: Spillway vs leveldb"] == (10.0, True, False)
    text = (out / "kv.md").read_text()
    assert "| 16 B | fillrandom, batches of 1000, log synced: Spillway vs leveldb | 10.00x (across runs) |" in text
    assert "| 16 B | readrandom: Spillway vs rocksdb-universal | 0.50x | at least 1x | **no** |" in text


def test_a_part_whose_reads_found_other_keys_is_refused(tmp_path):
    out = tmp_path / "out"
    kv.write_report(fake_report("abc1", ["16"]), out)
    part_report = fake_report("def2", ["16"])
    part_report["shapes"][0]["results"] = {"spillway": engine_entry("spillway", 6.0e6, 4e5, 4096)}
    part_report["shapes"][0]["results"]["spillway"]["read"]["hits"] = 299
    part = tmp_path / "part.json"
    part.write_text(json.dumps(part_report))
    assert kv.main(["--merge", str(part), "--out", str(out)]) == 1
    # The report is left as it was.
    assert json.loads((out / "kv.json").read_text())["shapes"][0]["results"]["spillway"]["read"]["hits"] == 300
