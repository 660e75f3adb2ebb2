"""Self-test of the declared workloads: each is consistent, and kv, stream, agg and knn run end to end on fake drivers.

Run with `python3 -m pytest bench/test_workloads.py`. The fake drivers print what
the real ones print (bench/kv-driver, bench/stream-driver, bench/agg-driver,
bench/knn-driver and the peers' drivers), with made-up figures, so that every metric, table, target,
agreement and probe the workloads declare is exercised in seconds, without a
build and without a timing that means anything.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run
from declarations import CargoBuild, CxxBuild, Probe, ProbeCommand, Step, Workload, check_workload
from measure import BenchmarkFailure
from workloads import WORKLOADS

FAKE = r'''
import json, os, signal, sys

program, arguments = sys.argv[1], sys.argv[2:]
command = arguments[0] if arguments and not arguments[0].startswith("-") else ""
options = {}
words = arguments[1:] if command else arguments
for index, word in enumerate(words):
    if word.startswith("--"):
        following = words[index + 1] if index + 1 < len(words) else ""
        options[word[2:]] = True if following.startswith("--") or not following else following
say = lambda value: print(json.dumps(value))
latency = lambda ns: {"p50_ns": ns, "p99_ns": 2 * ns, "p999_ns": 3 * ns}
disagree = os.environ.get("FAKE_DISAGREE") == program

if program in ("kv_driver", "kv_leveldb"):
    engine = options.get("engine", "leveldb")
    workload, records = options["workload"], int(options["records"])
    rates = {"spillway": 3e6, "rocksdb-leveled": 0.5e6, "rocksdb-universal": 0.8e6, "leveldb": 0.4e6}
    rate = rates[engine] if workload == "fillrandom" else 2e5 if engine == "spillway" else 1e5
    if workload == "fillrandom":
        os.makedirs(options["dir"], exist_ok=True)
        open(os.path.join(options["dir"], "table"), "wb").write(b"x" * 8192)
    reads = int(options["reads"]) if workload == "readrandom" else 0
    stats = {"index_memory_bytes": records * 1.5, "list_records": records} if engine == "spillway" else (
        {"filter_and_index_bytes": records * 1.3, "estimate_keys": records} if engine != "leveldb" else None)
    operations = records if workload == "fillrandom" else reads or 100
    say({"engine": engine, "workload": workload, "operations": operations, "seconds": operations / rate,
         "operations_per_second": rate, "latency_ns": {"p50": 1e4, "p99": 5e4, "p999": 9e4},
         "hits": reads // 3 + (1 if disagree and engine == "leveldb" else 0), "writer_operations": 500,
         "read_bytes": 4096 * operations, "write_bytes": 3 * 16 * records, "user_bytes": 16 * records,
         "stall_seconds": None if engine == "leveldb" else 0.5, "engine_stats": stats})
elif program == "stream_driver":
    records = int(options["records"])
    template = lambda contender: contender.startswith("template")
    overflow = lambda share: {"leaves": 1000, "percent_1": share, "percent_2": 0.0, "percent_3_plus": 0.0,
                              "percent_any": share, "percent_entries_in_overflow": share / 2}
    if command == "index":
        contender = options["contender"]
        rate = {"template-rebuild": 9e6, "template-fixed": 8e6, "bptree": 4e6, "btreemap": 3e6}[contender]
        say({"experiment": "index", "contender": contender, "insert_records_per_s": rate,
             "total_records_per_s": rate * 0.8, "batch_latency": latency(1e5), "templates": 2,
             "overflow": overflow(2.0) if template(contender) else None, "drained": {"records": records, "sum": "7"}})
    elif command == "overflow":
        for fan_out in str(options.get("fan-outs", "4,10,64,100")).split(","):
            for contender in ("template-fixed", "template-rebuild"):
                say({"experiment": "overflow", "dataset": options["dataset"], "contender": contender,
                     "fan_out": int(fan_out), "leaf_capacity": int(fan_out), "fill": float(options.get("fill", 0.7)),
                     "templates": 3, "overflow": overflow(40.0 if contender == "template-fixed" else 3.0)})
    else:
        engine = options["engine"]
        result = {"experiment": "mixed" if "mixed" in options else "store", "engine": engine}
        if "mixed" in options:
            result["mixed"] = {"operations_per_s": 2e6 if engine == "rocksdb" else 1e6, "records_per_query": 3.0,
                               "query_latency": latency(9e3), "write_latency": latency(1e5)}
        else:
            rate = {"spillway": 5e6, "btreemap": 1.5e6, "rocksdb": 0.8e6}[engine] / (2 if options["policy"] == "none" and engine == "spillway" else 1)
            result["ingest"] = {"records_per_s": rate, "write_latency": latency(5e5)}
            result["stats"] = {"total_overflow": overflow(3.0), "segments": 3, "flush_pause_seconds": 0.1} \
                if engine == "spillway" else {"settle_s": 1.5}
        if "queries" in options:
            found = {"records": 5, "sum": "12" if disagree and engine == "rocksdb" else "11"}
            result["queries"] = [
                {"selectivity": s, "queries": 10, "found": found, "latency": latency(5e5 * (i + 1)),
                 **({"unordered_latency": latency(2e5 * (i + 1))} if engine == "spillway" else {})}
                for i, s in enumerate([0.0001, 0.001, 0.01, 0.1])
            ]
        say(result)
elif "roster" in options and (arguments[2] if command == "check" else options["name"]) not in options["roster"].split(","):
    # A kNN contender left out of its variant (a shell reads kiddo's roster before its driver would start).
    name = arguments[2] if command == "check" else options["name"]
    say({"check" if command == "check" else "engine": name, "skipped": "not in this variant's roster"})
elif program == "knn_peers" and command in ("generate", "truth", "build", "check", "agreement"):
    directory = arguments[1]
    if command == "generate":
        json.dump({"dims": int(options["dims"]), "points": int(options["points"])},
                  open(os.path.join(directory, "meta.json"), "w"))
    elif command == "truth":
        say({"truth": {"queries": 1000, "k": int(options["k"]), "fallbacks": 0, "seconds": 1.5}})
    elif command == "build":
        open(os.path.join(directory, "tree-" + options["build"] + ".sst"), "wb").write(b"SST")
        say({"built": {"build": options["build"], "build_s": 2.5, "peak_rss_kib": 400 * 1024}})
    elif command == "check":
        if disagree and "exact" in options and arguments[2] == "spillway-bnb-kmeans":
            print("CHECK FAILED: spillway-bnb-kmeans: NOT EXACT: 3 of 10000 entries differ", file=sys.stderr)
            sys.exit(1)
        say({"check": arguments[2], "ok": True})
    else:
        for entry in sorted(os.listdir(directory)):
            if entry.endswith((".npz", ".indices.npy")):
                name = entry.split(".")[0]
                exact = 100.0 if name.startswith("spillway") else 0.0
                say({"contender": name, "role": "spillway" if exact else "peer", "queries": 1000,
                     "same_points_percent": 100.0 if exact else 99.5, "exact_percent": exact,
                     "exact_queries_percent": exact, "worst_relative_gap": 0.0 if exact else 1e-5,
                     "accepted": "bit for bit" if exact else "within 0.0001"})
elif program in ("knn_peers", "knn_driver"):  # a kNN contender: it saves its answer and prints its figures
    name = options.get("name", "kiddo")
    if os.environ.get("FAKE_TIMEOUT") == name:
        print(f"{name}: did not finish within the time limit of {options['time-limit']} s", file=sys.stderr)
        sys.exit(124)
    if program == "knn_driver":
        open(options["out"] + ".indices.npy", "wb").write(b"NPY")
    else:
        open(os.path.join(arguments[1], name + ".npz"), "wb").write(b"PK")
    speeds = {"spillway-psb-kmeans": 0.02, "spillway-psb-hilbert": 0.04, "spillway-bnb-kmeans": 0.015,
              "spillway-brute": 0.5, "spillway-auto": 0.01, "sklearn-kdtree": 0.03, "sklearn-balltree": 0.04,
              "faiss-flat": 0.1, "pykdtree": 0.02, "kiddo": 0.005}
    result = {"engine": name, "points": 1000, "dims": int(options.get("dims", 16)), "queries": 1000,
              "k": int(options["k"]), "threads": 2, "build_s": 0.5, "query_s": speeds[name]}
    if command == "spillway":
        assert os.path.exists(os.path.join(arguments[1], "tree-" + options["tree"] + ".sst")), "no tree built"
        result.update(nodes_visited=20000 if options["tree"] == "hilbert" else 10000, leaves_scanned=5000,
                      distances_computed=300000, tree={"bytes": 2**20, "levels": 3, "leaf_fill": 0.7},
                      build_s=2.5, load_s=0.1, peak_rss_kib=400 * 1024, build_peak_rss_kib=400 * 1024,
                      query_peak_rss_kib=100 * 1024)
    if "first" in options:
        result["queries"] = min(int(options["first"]), 1000)
    say(result)
elif program == "agg_driver" and command == "generate":
    directory = arguments[-1]
    json.dump({"records": int(options["records"]), "key_bytes": 10 * int(options["records"])},
              open(os.path.join(directory, "meta.json"), "w"))
elif program == "agg_peers" and command == "to-parquet":
    open(os.path.join(arguments[-1], "keys.parquet"), "wb").write(b"PAR1")
else:  # an aggregation contender
    name = options.get("engine", command or program)
    budget_mib = options.get("memory-mib") or str(options.get("memory", "")).removesuffix("MiB")
    if os.environ.get("FAKE_OOM") == name and budget_mib and int(budget_mib) < 500:
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would under a small cgroup limit
    figures = {"groups": 10, "sum_of_sums": "4950", "sum_of_counts": 100, "count_squares": 1000, "sum_squares": 9}
    if disagree:
        figures["groups"] = 11
    extra = {"insert_s": 1.0, "finalize_s": 0.5} if name == "cbt" else {}
    say({"engine": name, **figures, **extra})
'''


def faked(workload: Workload, directory: Path, variant: str | list[str]) -> Workload:
    """The workload with its builds and peer drivers replaced by the fake above, one variant (or those
    listed), nothing to install."""
    script = directory / "fake.py"
    script.write_text(FAKE)
    params = dict(workload.params)

    def program(name: str) -> str:
        path = directory / name
        path.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {script} {name} \"$@\"\n")
        path.chmod(0o755)
        params[name] = str(path)
        return "{" + name + "}"

    def rewrite(command: list[str]) -> list[str]:
        # A peers script run by the harness's interpreter, or by the one with Spillway's package.
        python = command[:1] == ["{python}"] or command[:1] and command[0].endswith("/python")
        if python and len(command) > 1 and command[1].endswith("_peers.py"):
            return [program(Path(command[1]).stem), *command[2:]]
        return command

    def steps(found: list) -> list:
        return [dataclasses.replace(step, command=rewrite(step.command)) if isinstance(step, Step) else rewrite(step)
                for step in found]

    def probes(found: list[Probe]) -> list[Probe]:
        return [dataclasses.replace(probe, commands=[dataclasses.replace(c, command=rewrite(c.command))
                                                     for c in probe.commands]) for probe in found]

    for build in workload.builds:
        assert isinstance(build, (CargoBuild, CxxBuild))
        program(build.name)
    contenders = [
        dataclasses.replace(c, command=rewrite(c.command), prepare=steps(c.prepare), validate=steps(c.validate),
                            requires=[])
        for c in workload.contenders
    ]
    names = [variant] if isinstance(variant, str) else variant
    chosen = [v for v in workload.variants if v.name in names]
    assert len(chosen) == len(names)
    chart = workload.line_chart
    if chart is not None:
        chart = dataclasses.replace(chart, x_values={name: x for name, x in chart.x_values.items() if name in names})
    return dataclasses.replace(
        workload, builds=[], params=params, contenders=contenders, probes=probes(workload.probes),
        variants=[dataclasses.replace(v, setup=steps(v.setup), probes=probes(v.probes)) for v in chosen],
        line_chart=chart,
    )


def invoke(workload: Workload, tmp_path: Path, size: int, runs: int = 2) -> dict:
    return run.run_workload(workload, run.Invocation(
        sizes=[size], runs=[runs], base_dir=tmp_path / "data", out_dir=tmp_path / "out", drop_cache=False,
    ))


def test_every_workload_is_consistent_and_has_its_page_command():
    for workload in WORKLOADS.values():
        assert check_workload(workload) == []
        assert workload.page_command.startswith(f"python3 bench/run.py {workload.name} ")
        arguments = run.parser().parse_args(shlex.split(workload.page_command)[2:])
        assert arguments.workload == workload.name


def test_kv_end_to_end_on_fake_drivers(tmp_path):
    report = invoke(faked(WORKLOADS["kv"], tmp_path, "16B"), tmp_path, 16 * 1000)
    (part,) = report["parts"]
    assert part["records"] == 1000 and part["label"] == "16B, 15.62 KiB"
    found = {(c["label"], c["peer"]): c for c in part["comparisons"] if c["target"] is not None}
    fill_leveldb = found[("fill", "leveldb fill")]
    assert fill_leveldb["ratio"] == pytest.approx(7.5) and fill_leveldb["target"] == 10 and fill_leveldb["verdict"] == "missed"
    # The better RocksDB is universal: 3.75x, against a target of 3x.
    assert found[("fill", "rocksdb-universal fill")]["verdict"] == "met"
    assert found[("fill", "rocksdb-universal fill")]["peer_chosen_from"] == ["rocksdb-leveled fill", "rocksdb-universal fill"]
    assert found[("read", "rocksdb-leveled read")]["ratio"] == 2.0
    # Every step against every peer too, without a target: where Spillway loses.
    assert len([c for c in part["comparisons"] if c["target"] is None]) == 15
    targets = {t["label"]: t for t in part["targets"]}
    assert targets["device reads per GET"]["median"] == 1.0 and targets["device reads per GET"]["verdict"] == "met"
    assert targets["index RAM per key"]["median"] == 1.5
    summaries = {c["name"]: c["summary"] for c in part["contenders"]}
    assert summaries["spillway fill"]["write_amp"]["median"] == 3.0
    assert summaries["spillway fill"]["store_gib"]["median"] > 0
    assert "stall_s" not in summaries["leveldb fill"]  # LevelDB says nothing: a dash, not a zero
    assert summaries["rocksdb-leveled rww"]["rww_puts"]["median"] > 0
    text = (tmp_path / "out" / "kv.md").read_text()
    for heading in ("## Targets", "## Where Spillway loses", "### fillrandom, batches of 1000, log synced",
                    "### readrandom, page cache dropped", "### readwhilewriting", "**Scale.**"):
        assert heading in text
    assert "| leveldb fill | 400 (400–400) | 50 (50–50) | 90 (90–90) | - |" in text


def test_kv_engines_that_read_different_keys_stop_the_benchmark(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_DISAGREE", "kv_leveldb")
    with pytest.raises(BenchmarkFailure, match="RESULTS DISAGREE on 16B, 15.62 KiB .readrandom hits."):
        invoke(faked(WORKLOADS["kv"], tmp_path, "16B"), tmp_path, 16 * 1000, runs=1)


def test_stream_end_to_end_on_fake_drivers(tmp_path):
    report = invoke(faked(WORKLOADS["stream"], tmp_path, "drifting"), tmp_path, 1000, runs=1)
    (part,) = report["parts"]
    assert len(part["contenders"]) == 35
    found = {(c["contender"], c["peer"]): c for c in part["comparisons"]}
    assert found[("index template-rebuild t1", "index bptree t1")]["ratio"] == pytest.approx(2.25)
    assert found[("store spillway-rebuild t1 b1000 nosync", "store spillway-none t1 b1000 nosync")]["ratio"] == 2.0
    assert found[("mixed spillway-rebuild t1", "mixed rocksdb t1")]["loss"]
    metrics = [c["metric"] for c in part["comparisons"] if c["peer"] == "store rocksdb t1 b1000 nosync"]
    assert metrics == ["ingest_rate"] + [f"query_{share}pct_p50" for share in ("0.01", "0.1", "1", "10")]
    targets = {t["label"]: t for t in part["targets"]}
    assert targets["StreamIndex 1% range query median (in memory)"]["median"] == 1.5e6
    assert targets["StreamIndex 1% range query median (in memory)"]["verdict"] == "missed"
    assert targets["rebuild policy: overflowed leaves (index layer, fan-out 64)"]["verdict"] == "met"
    assert targets["rebuild policy: overflowed leaves (StreamIndex, total_overflow)"]["median"] == 3.0
    # The overflow tables on every fan-out, and the drift sweep: five streams, the fixed rows of the
    # sweeps with another fill left out.
    assert len(part["probes"]["overflow"]) == 8
    assert len(part["probes"]["drift sweep"]) == 3 * 2 + 2
    text = (tmp_path / "out" / "stream.md").read_text()
    for heading in ("## Targets", "### Insert throughput, index layer", "### Ingest, whole stores",
                    "### Range queries: median latency", "### Mixed: 99% inserts, 1% queries",
                    "## Overflow share per template policy", "## Drift speed and the rebuild policy's fill"):
        assert heading in text
    assert "| drifting, 1,000 records | drifting:0.1 | template-rebuild | 64 |" in text
    assert (tmp_path / "out" / "stream.png").exists()


def test_stream_stores_whose_queries_disagree_stop_the_benchmark(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_DISAGREE", "stream_driver")
    with pytest.raises(BenchmarkFailure, match="records found by the range queries"):
        invoke(faked(WORKLOADS["stream"], tmp_path, "uniform"), tmp_path, 1000, runs=1)


def test_agg_end_to_end_on_fake_drivers(tmp_path):
    report = invoke(faked(WORKLOADS["agg"], tmp_path, "word:100M"), tmp_path, 100)
    (part,) = report["parts"]
    assert part["captured"] == {"key_bytes": "1000"}
    labels = [c["label"] for c in part["comparisons"]]
    assert labels == ["peak RSS vs the leanest peer", "throughput vs sparsehash", "throughput vs the fastest peer",
                      "hash engine: throughput vs DuckDB", "hash engine: peak RSS vs DuckDB"]
    hash_vs_duckdb = next(c for c in part["comparisons"] if c["label"] == "hash engine: throughput vs DuckDB")
    assert hash_vs_duckdb["target"] == 0.8, "byte-string keys: 0.8x"
    (finalize,) = part["targets"]
    assert finalize["median"] == 0.5 and finalize["verdict"] == "met"
    cbt = next(c for c in part["contenders"] if c["name"] == "spillway-cbt")
    assert cbt["summary"]["groups"]["median"] == 10 and "rss_per_group" in cbt["summary"]
    saved = json.loads((tmp_path / "out" / "agg.json").read_text())
    assert saved["workload"] == "agg" and saved["invocation"]["size_unit"] == "records"
    assert "| spillway-cbt |" in (tmp_path / "out" / "agg.md").read_text()


def test_agg_contenders_that_disagree_stop_the_benchmark(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_DISAGREE", "agg_sparsehash")
    with pytest.raises(BenchmarkFailure, match="RESULTS DISAGREE on uniform:1M"):
        invoke(faked(WORKLOADS["agg"], tmp_path, "uniform:1M"), tmp_path, 100, runs=1)


def test_agg_python_compares_both_engines_with_duckdb_on_integer_keys(tmp_path):
    assert [variant.name for variant in WORKLOADS["agg-python"].variants] == [
        "uniform:10M", "zipf:10M", "uniform:100M", "zipf:100M", "uniform:1M"]
    report = invoke(faked(WORKLOADS["agg-python"], tmp_path, "uniform:10M"), tmp_path, 100, runs=1)
    (part,) = report["parts"]
    found = {c["label"]: c for c in part["comparisons"]}
    assert found["hash engine: throughput vs DuckDB"]["target"] == 1.0
    assert found["CBT: peak RSS vs DuckDB"]["target"] == 0.35
    assert {c["name"] for c in part["contenders"]} == {"spillway-hash", "spillway-cbt", "duckdb", "polars"}


def test_agg_memory_runs_each_limit_in_its_own_cgroup_and_charts_the_failures(tmp_path, monkeypatch):
    workload = WORKLOADS["agg-memory"]
    assert [(v.name, v.memory_limit) for v in workload.variants] == [
        ("limit-4G", "4G"), ("limit-2G", "2G"), ("limit-1G", "1G"), ("limit-512M", "512M"), ("limit-256M", "256M")]
    assert workload.line_chart.x_values == {"limit-4G": 4096, "limit-2G": 2048, "limit-1G": 1024,
                                            "limit-512M": 512, "limit-256M": 256}
    # An engine that thrashes at its limit instead of being killed is stopped, not waited for.
    assert workload.run_timeout_s == 300
    created = []
    monkeypatch.setattr(run, "create_memory_cgroup", lambda limit, suffix="": created.append(limit) or tmp_path)
    monkeypatch.setattr(run, "remove_memory_cgroup", lambda group: None)
    monkeypatch.setattr(run, "joiner", lambda group: None)
    monkeypatch.setattr(run, "reset_cgroup_peak", lambda group: None)
    monkeypatch.setattr(run, "cgroup_peak_bytes", lambda group: 200 * 2**20)
    monkeypatch.setenv("FAKE_OOM", "duckdb")  # killed when its budget is under 500 MiB
    report = invoke(faked(workload, tmp_path, ["limit-4G", "limit-256M"]), tmp_path, 100, runs=1)
    assert created == [4 * 2**30, 256 * 2**20]
    roomy, tight = report["parts"]
    commands = {c["name"]: c["command"] for c in roomy["contenders"]}
    assert commands["spillway-cbt"][-3:-1] == ["--memory-mib", "3276"]
    assert commands["duckdb"][-2:] == ["--memory", "3276MiB"]
    assert "--memory-mib" not in commands["hashbrown"]
    (comparison,) = roomy["comparisons"]
    assert comparison["label"] == "CBT: time vs DuckDB under this limit" and comparison["metric"] == "wall_s"
    assert comparison["target"] == 1.0 and comparison["better"] == "lower"
    assert roomy["agreements"][0]["value"]["result.groups"] == 10
    # Under 256 MiB DuckDB (budget 204 MiB) is killed: reported failed, the others measured and agreeing.
    (failure,) = tight["failed"]
    assert failure["name"] == "duckdb" and "killed (out of memory under the 256.00 MiB cgroup limit?)" in failure["reason"]
    assert tight["comparisons"] == [] and len(tight["contenders"]) == 5
    assert tight["contenders"][0]["summary"]["cgroup_peak_mib"]["median"] == 200
    markdown = (tmp_path / "out" / "agg-memory.md").read_text()
    assert "| limit-256M, 100 records | CBT: time vs DuckDB under this limit: spillway-cbt / duckdb | duckdb failed " \
           "| 1x | no ratio: the peer failed |" in markdown
    assert "Failed (an x on the chart): duckdb at 256 (cgroup memory limit, MiB)." in markdown
    assert "| contender | M records/s | wall s | peak RSS MiB | cgroup peak MiB |" in markdown
    assert report["run_timeout_s"] == 300 and tight["run_timeout_s"] == 300
    assert "every run is stopped after 300 s without finishing (the run's time limit) and reported failed" in markdown
    # Each limit's budgets, in the commands section.
    assert "- spillway-cbt (limit-256M, 100 records): `" in markdown and "--memory-mib 204 $DIR`" in markdown
    assert (tmp_path / "out" / "agg-memory-lines.png").exists()


def test_knn_end_to_end_on_fake_drivers(tmp_path):
    report = invoke(faked(WORKLOADS["knn"], tmp_path, "clustered40:d16:k10"), tmp_path, 1000, runs=1)
    (part,) = report["parts"]
    assert part["captured"] == {"truth_s": "1.5", "truth_fallbacks": "0"}
    # The setup builds both trees once (the constructions are compared at d = 16); the contenders load them.
    builds = [step["command"] for step in part["setup"] if "build" in step["command"]]
    assert [command[command.index("--build") + 1] for command in builds] == ["kmeans", "hilbert"]
    assert len(part["contenders"]) == 10 and not part["failed"]
    found = {(c["label"], c["peer"]): c for c in part["comparisons"]}
    faiss = found[("d = 16, clustered: vs faiss flat", "faiss-flat")]
    assert faiss["ratio"] == pytest.approx(10.0) and faiss["target"] == 5.0 and faiss["verdict"] == "met"
    nodes = found[("nodes visited per query: k-means over Hilbert construction (PSB)", "spillway-psb-hilbert")]
    assert nodes["metric"] == "nodes_per_query" and nodes["ratio"] == pytest.approx(0.6) and nodes["verdict"] == "met"
    # kiddo answers twice as fast as spillway-auto here: a loss, listed.
    assert found[("queries/s", "kiddo")]["loss"]
    # Exactness: one target per Spillway contender, from the agreement probe's rows.
    exact = [t for t in part["targets"] if t["label"].startswith("exact answers")]
    assert len(exact) == 5 and all(t["verdict"] == "met" and t["median"] == 100.0 for t in exact)
    assert {row["contender"] for row in part["probes"]["agreement"]} == {c["name"] for c in part["contenders"]}
    auto = next(c for c in part["contenders"] if c["name"] == "spillway-auto")
    assert auto["summary"]["queries_per_s"]["median"] == pytest.approx(1e5)
    assert auto["summary"]["nodes_per_query"]["median"] == 15.0
    # Spillway's build comes from the setup, and its peak RSS is the larger of the build's and the query's.
    assert auto["summary"]["build_s"]["median"] == 2.5
    assert auto["summary"]["peak_rss_mib"]["median"] == 400.0 and auto["summary"]["query_rss_mib"]["median"] == 100.0
    assert "nodes_per_query" not in next(c for c in part["contenders"] if c["name"] == "faiss-flat")["summary"]
    text = (tmp_path / "out" / "knn.md").read_text()
    for heading in ("## Targets", "### k nearest neighbours, 2 threads", "### Spillway's searches: work per query",
                    "## Answers against the exact one", "**Scale.**"):
        assert heading in text


def test_knn_roster_leaves_contenders_out_and_a_slow_peer_fails_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_TIMEOUT", "pykdtree")
    report = invoke(faked(WORKLOADS["knn"], tmp_path, "uniform:d64:k100"), tmp_path, 1000, runs=2)
    (part,) = report["parts"]
    (failed,) = part["failed"]
    assert failed["name"] == "pykdtree" and "time limit" in failed["reason"]
    (target,) = [c for c in part["comparisons"] if c["target"] is not None and c["peer"] == "faiss-flat"]
    assert target["label"] == "d >= 64, uniform: within 1.5x of faiss flat" and target["verdict"] == "met"
    # No Hilbert tree at d = 64 with k = 100, and no scikit-learn above d = 32: those processes print no figures
    # and leave no row, no ratio and no answer.
    assert [step["command"][step["command"].index("--build") + 1] for step in part["setup"]
            if "build" in step["command"]] == ["kmeans"]
    left_out = {"spillway-psb-hilbert", "sklearn-kdtree", "sklearn-balltree"}
    summaries = {c["name"]: c["summary"] for c in part["contenders"]}
    assert all(summaries[name] == {} for name in left_out)
    assert all(summaries[name] for name in summaries if name not in left_out)
    named = {c["peer"] for c in part["comparisons"]} | {name for c in part["comparisons"] for name in c.get(
        "peer_chosen_from") or []}
    assert not named & left_out
    assert not {row["contender"] for row in part["probes"]["agreement"]} & left_out
    text = (tmp_path / "out" / "knn.md").read_text()
    assert "not run here: spillway-psb-hilbert, sklearn-kdtree, sklearn-balltree" in text
    assert not any(f"| {name} |" in text for name in left_out)
    # The brute-force contenders answer the batch's first `brute_queries` queries.
    faiss = next(c for c in part["contenders"] if c["name"] == "faiss-flat")
    assert faiss["command"][faiss["command"].index("--first") + 1] == "1000"
    monkeypatch.setenv("FAKE_DISAGREE", "knn_peers")
    again = tmp_path / "again"
    again.mkdir()
    with pytest.raises(BenchmarkFailure, match="OUTPUT DID NOT VALIDATE"):
        invoke(faked(WORKLOADS["knn"], again, "uniform:d8:k1"), again, 1000, runs=1)


def test_knn_peers_checks_a_batch_prefix_and_passes_a_contender_left_out(tmp_path, capsys):
    """knn_peers.py itself (NumPy, no Spillway): the truth, an exact answer to the first queries, the roster."""
    np = pytest.importorskip("numpy")
    import knn_peers

    directory = tmp_path / "part"
    assert knn_peers.main(["generate", str(directory), "--distribution", "uniform", "--dims", "16", "--points", "500",
                           "--queries", "40"]) == 0
    assert knn_peers.main(["truth", str(directory), "--k", "5"]) == 0
    with np.load(directory / "truth.npz") as truth:
        indices, distances = truth["indices"], truth["distances"]
    np.savez(directory / "spillway-brute.npz", indices=indices[:10], distances=distances[:10])
    capsys.readouterr()
    assert knn_peers.main(["check", str(directory), "spillway-brute", "--exact", "--first", "10"]) == 0
    assert json.loads(capsys.readouterr().out)["queries"] == 10
    # Without --first the answer is 10 rows short of the batch: not the canonical answer.
    assert knn_peers.main(["check", str(directory), "spillway-brute", "--exact"]) == 1
    assert "expected (40, 5)" in capsys.readouterr().err
    # One wrong distance, bit for bit, fails the exact check.
    changed = distances[:10].copy()
    changed[3, 2] = np.nextafter(changed[3, 2], np.inf)
    np.savez(directory / "spillway-auto.npz", indices=indices[:10], distances=changed)
    assert knn_peers.main(["check", str(directory), "spillway-auto", "--exact", "--first", "10"]) == 1
    capsys.readouterr()
    assert knn_peers.main(["agreement", str(directory)]) == 0
    rows = {row["contender"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}
    assert rows["spillway-brute"]["queries"] == 10 and rows["spillway-brute"]["exact_queries_percent"] == 100.0
    assert rows["spillway-auto"]["exact_queries_percent"] == 90.0
    # A contender not in the variant's roster runs nothing, and its check passes without an answer.
    for command in (["faiss-flat", str(directory), "--k", "5", "--name", "faiss-flat"],
                    ["check", str(directory), "faiss-flat"]):
        assert knn_peers.main([*command, "--roster", "spillway-auto,kiddo"]) == 0
        assert "skipped" in json.loads(capsys.readouterr().out)
    assert not (directory / "faiss-flat.npz").exists()


def test_probe_commands_keep_only_the_rows_they_ask_for():
    stream = WORKLOADS["stream"]
    drifting = next(v for v in stream.variants if v.name == "drifting")
    (sweep,) = drifting.probes
    assert [c.where for c in sweep.commands].count({"contender": "template-rebuild"}) == 2
    assert all(isinstance(c, ProbeCommand) for c in sweep.commands)
