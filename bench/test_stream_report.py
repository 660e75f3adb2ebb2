"""Self-test of bench/stream.py's report code on a tiny fake result (no driver build, no RocksDB, no timing).

Run with `python3 -m pytest bench/test_stream_report.py`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import stream
from run import BenchmarkFailure


def latency(p50: float, p99: float) -> dict:
    return {"count": 10, "mean_ns": p50, "p50_ns": p50, "p99_ns": p99, "p999_ns": p99, "max_ns": p99}


def overflow(percent_any: float) -> dict:
    return {"leaves": 1000, "entries": 50_000, "overflowed": [int(percent_any * 10), 0, 0],
            "percent_1": percent_any, "percent_2": 0.0, "percent_3_plus": 0.0, "percent_any": percent_any}


def index_line(contender: str, threads: int, insert_rate: float, drained_sum: str = "7") -> dict:
    template = contender.startswith("template")
    return {
        "experiment": "index", "contender": contender, "threads": threads, "insert_records_per_s": insert_rate,
        "total_records_per_s": insert_rate * 0.9, "batch_latency": latency(1e5, 2e5),
        "overflow": overflow(2.0) if template else None, "templates": 2 if template else 0,
        "drained": {"records": 100, "sum": drained_sum},
    }


def store_line(engine: str, rate: float, query_p50: float | None, found_sum: str = "11") -> dict:
    line = {
        "experiment": "store", "engine": engine, "ingest": {"records_per_s": rate, "write_latency": latency(5e5, 9e5)},
        "stats": {"total_overflow": overflow(3.0), "segments": 3, "flush_pause_seconds": 0.1}
        if engine == "spillway" else {"settle_s": 1.5} if engine == "rocksdb" else {},
    }
    if query_p50 is not None:
        line["queries"] = [
            {"selectivity": s, "queries": 10, "records_per_query": 1e7 * s, "found": {"records": 5, "sum": found_sum},
             "latency": latency(query_p50 * (i + 1), query_p50 * (i + 2))}
            for i, s in enumerate(stream.SELECTIVITIES)
        ]
        if engine == "spillway":
            for i, query in enumerate(line["queries"]):
                query["unordered_latency"] = latency(query_p50 * (i + 1) / 3, query_p50 * (i + 2) / 3)
    return line


def mixed_line(rate: float) -> dict:
    return {"experiment": "mixed", "mixed": {"operations_per_s": rate, "records_per_query": 3.0,
                                            "query_latency": latency(9e3, 2e4), "write_latency": latency(1e5, 3e5)}}


def fake_dataset(name: str) -> dict:
    lines = {
        "index template-rebuild t1": index_line("template-rebuild", 1, 3e6),
        "index bptree t1": index_line("bptree", 1, 1.5e6),
        "index btreemap t1": index_line("btreemap", 1, 2.5e6),
        "store spillway-rebuild t1 b1000 nosync": store_line("spillway", 1e6, 1.5e6),
        "store spillway-none t1 b1000 nosync": store_line("spillway", 0.5e6, None),
        "store btreemap t1 b1000 nosync": store_line("btreemap", 2e6, 2e5),
        "store rocksdb t1 b1000 nosync": store_line("rocksdb", 0.8e6, 3e5),
        "store spillway-rebuild t2 b1000 nosync": store_line("spillway", 1.6e6, None),
        "mixed spillway-rebuild t1": mixed_line(1e6),
        "mixed rocksdb t1": mixed_line(2e6),
    }
    runs = {}
    for key, line in lines.items():
        line.update(peak_rss_bytes=2**30, cpu_s=1.0, process_wall_s=2.0, dataset=name)
        runs[key] = [line]
    dataset = {
        "name": name, "records": 100, "buffer": 50, "runs": runs,
        "parts": [{"date": "2026-01-01", "commit": "abc1", "command": "python3 bench/stream.py (as of abc1)",
                   "configurations": list(runs), "overflow": True, "load_average_before": [0.1, 0.1, 0.1],
                   "load_average_after": [0.2, 0.1, 0.1]}],
        "summary": {key: stream.summarize(results) for key, results in runs.items()},
        "overflow": [
            {"dataset": name, "policy": policy, "fan_out": 64, "leaf_capacity": 64, "buffers": 2, "templates": 1,
             "leaves": 1000, "percent_1": share, "percent_2": 0.0, "percent_3_plus": 0.0, "percent_any": share,
             "percent_any_per_buffer": [share]}
            for policy, share in (("fixed", 40.0), ("rebuild", 6.5))
        ],
    }
    dataset["targets"] = stream.targets(dataset)
    return dataset


def fake_report(commit: str, names: list[str]) -> dict:
    return {
        "workload": "stream", "date": "2026-01-0" + commit[-1], "commit": commit,
        "machine": {"cpu_cores": 2, "cpu_model": "test", "memory_bytes": 2**30}, "records": 100, "buffer": 50,
        "runs": 1, "command": f"python3 bench/stream.py (as of {commit})", "note": "",
        "datasets": [fake_dataset(name) for name in names], "drift_sweep": [],
    }


def verdicts(dataset: dict) -> dict[str, tuple[float, bool]]:
    return {check["what"]: (check["value"], check["met"]) for check in dataset["targets"]}


def test_targets_give_the_ratio_and_an_honest_verdict():
    found = verdicts(fake_dataset("drifting"))
    assert found["index insert, 1 thread: template (rebuild) vs the B+ tree rebuilt per buffer"] == (2.0, True)
    value, met = found["index insert, 1 thread: template (rebuild) vs BTreeMap per buffer"]
    assert value == pytest.approx(1.2) and not met
    assert found["store ingest, 1 thread: StreamIndex rebuild vs policy none"] == (2.0, True)
    assert found["store ingest, 1 thread: StreamIndex rebuild vs BTreeMap store"] == (0.5, False)
    assert found["StreamIndex ingest on 2 threads (batch 1000, no fsync)"] == (1.6e6, True)
    # The 1% query is the third selectivity: p50 = 3 x 1.5 ms.
    assert found["StreamIndex 1% range query median (in memory)"] == (4.5e6, False)
    assert found["rebuild policy: overflowed leaves (index layer, fan-out 64)"] == (6.5, False)
    assert found["rebuild policy: overflowed leaves (StreamIndex, total_overflow)"] == (3.0, True)
    # Targets whose contenders did not run are left out, not invented.
    assert not any("2 threads: template" in what for what in found)
    # The overflow target applies to drifting datasets only.
    assert not any("overflowed" in check["what"] for check in fake_dataset("uniform")["targets"])


def test_the_markdown_report_has_every_section_and_names_the_losses():
    text = stream.markdown(fake_report("abc1", ["uniform", "drifting"]))
    for heading in ("## Targets", "## Insert throughput, index layer", "## Ingest, whole stores", "## Range queries",
                    "## Mixed: 99% inserts, 1% queries", "## Overflow share per template policy", "## Memory"):
        assert heading in text
    assert "| uniform | index insert, 1 thread: template (rebuild) vs the B+ tree rebuilt per buffer | 2.00x |" in text
    assert "| drifting | rebuild policy: overflowed leaves (index layer, fan-out 64) | 6.50% |" in text
    assert "| at least 1.5x | yes |" in text and "| below 5% | **no** |" in text
    assert "StreamIndex ingests at 0.50x btreemap's rate on 1 thread(s)" in text
    assert "the 99/1 mix runs at 0.50x rocksdb's rate on 1 thread(s)" in text
    assert "| template-rebuild | 1 | 3.00 M / 2.70 M |" in text
    assert "| spillway-rebuild unordered scan p50 / p99 |" in text
    assert "| 1% | 100,000 | 4.50 ms / 6.00 ms | 600.0 us / 800.0 us | 900.0 us / 1.20 ms | 1.50 ms / 2.00 ms |" in text
    assert "buffers of 50 records" in text
    assert "| 100 | 1 / 0.03 / 0 | 2.98 / 0.88 / 0 | 0.37 / 0.01 / 0 |" in text  # the seed's table


def test_disagreeing_results_stop_the_benchmark():
    dataset = fake_dataset("uniform")
    stream.check_agreement("uniform", dataset["runs"])
    dataset["runs"]["index bptree t1"][0]["drained"]["sum"] = "8"
    with pytest.raises(BenchmarkFailure, match="RESULTS DISAGREE"):
        stream.check_agreement("uniform", dataset["runs"])
    dataset = fake_dataset("uniform")
    dataset["runs"]["store rocksdb t1 b1000 nosync"][0]["queries"][2]["found"]["sum"] = "12"
    with pytest.raises(BenchmarkFailure, match="selectivity 0.01"):
        stream.check_agreement("uniform", dataset["runs"])


def test_a_partial_report_replaces_configurations_and_keeps_where_each_came_from(tmp_path):
    out = tmp_path / "out"
    stream.write_report(fake_report("abc1", ["uniform", "zipf"]), out)
    part_report = fake_report("def2", ["zipf", "drifting"])
    # The part measured one configuration of zipf again (faster), with the same results.
    zipf = part_report["datasets"][0]
    zipf["runs"] = {"index bptree t1": [index_line("bptree", 1, 0.5e6)]}
    zipf["runs"]["index bptree t1"][0].update(peak_rss_bytes=2**20, cpu_s=1.0)
    zipf["overflow"] = []
    zipf["parts"] = [dict(zipf["parts"][0], date="2026-01-02", commit="def2", command="python3 bench/stream.py --only index",
                          configurations=["index bptree t1"], overflow=False)]
    part = tmp_path / "part.json"
    part.write_text(json.dumps(part_report))
    assert stream.merge(part, out) == 0
    merged = json.loads((out / "stream.json").read_text())
    assert [d["name"] for d in merged["datasets"]] == ["uniform", "zipf", "drifting"]
    zipf = merged["datasets"][1]
    assert zipf["summary"]["index bptree t1"]["insert_records_per_s"] == 0.5e6
    assert zipf["summary"]["index btreemap t1"]["insert_records_per_s"] == 2.5e6  # kept
    assert len(zipf["overflow"]) == 2  # kept: the part had no overflow tables
    found = verdicts(zipf)
    assert found["index insert, 1 thread: template (rebuild) vs the B+ tree rebuilt per buffer"] == (6.0, True)
    text = (out / "stream.md").read_text()
    assert "- zipf: 1 configuration(s), 2026-01-02, commit def2, `python3 bench/stream.py --only index`" in text
    # Merged again, the part replaces itself rather than being listed twice; a part whose every
    # configuration was measured again is no longer listed.
    assert stream.merge(part, out) == 0
    merged = json.loads((out / "stream.json").read_text())
    assert [p["commit"] for p in merged["datasets"][1]["parts"]] == ["abc1", "def2"]
    assert stream.superseded({"configurations": ["index bptree t1"], "overflow": False}, zipf["parts"][-1:])
    assert not stream.superseded({"configurations": ["index bptree t1"], "overflow": True}, zipf["parts"][-1:])
    assert not stream.superseded({"configurations": ["index btreemap t1"]}, zipf["parts"][-1:])
    # Results that disagree with what is there are refused; so is another record count.
    zipf_again = fake_report("ghi3", ["zipf"])
    zipf_again["datasets"][0]["runs"]["index bptree t1"][0]["drained"]["sum"] = "9"
    part.write_text(json.dumps(zipf_again))
    assert stream.merge(part, out) == 1
    other = fake_report("ghi3", ["gaussians"])
    other["records"] = 1000
    part.write_text(json.dumps(other))
    assert stream.merge(part, out) == 1


def test_every_configuration_has_a_distinct_key_and_a_driver_command():
    plan = stream.specs(rocksdb=True)
    keys = [spec.key for spec in plan]
    assert len(keys) == len(set(keys))
    assert "store spillway-rebuild t2 b1000 nosync" in keys and "mixed rocksdb t2" in keys
    # One ingest per engine is queried, and StreamIndex's once more without tiers.
    assert sum(spec.queries for spec in plan) == 4
    assert "store spillway-rebuild-notiers t1 b1000 nosync" in keys
    assert not any("rocksdb" in key for key in (spec.key for spec in stream.specs(rocksdb=False)))
    argv = plan[0].argv(Path("/driver"), "zipf", 10, 5, Path("/scratch"))
    assert argv[:2] == ["/driver", "index"] and "--buffer" in argv and "zipf" in argv
    store = next(spec for spec in plan if spec.key == "store rocksdb t1 b1000 sync")
    assert store.argv(Path("/d"), "zipf", 10, 5, Path("/s"))[-1] == "--sync"
    assert stream.parse_count("10M") == 10_000_000 and stream.parse_count("500k") == 500_000
