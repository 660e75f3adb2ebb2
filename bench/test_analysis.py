"""Self-test of the figures a report is made of: metrics, spreads, ratios, verdicts, agreement (no process runs).

Run with `python3 -m pytest bench/test_analysis.py`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import analysis
from declarations import Agreement, Comparison, Contender, Metric, ProbeTarget, Target, Workload
from measure import BenchmarkFailure
from units import format_count, format_size_arg, parse_count, parse_size


def test_metric_expressions_read_runs_results_and_part_numbers():
    run = {"wall_s": 2.0, "result": {"latency_ns": {"p99": 5000}, "queries": [{"found": 3}, {"found": 7}]}}
    numbers = {"records": 100, "bytes": 10_000}
    assert analysis.evaluate("bytes / wall_s / 1e6", {**numbers, **run}) == pytest.approx(0.005)
    assert analysis.evaluate("result.latency_ns.p99 / 1000", run) == 5.0
    assert analysis.evaluate("result.queries[1].found - result.queries[0].found", run) == 4.0
    assert analysis.evaluate("result.missing / 2", run) is None
    assert analysis.evaluate("wall_s / 0", run) is None
    # Alternatives: the first whose fields exist.
    metric = Metric("per_key", "B/key", ["result.a / result.b", "result.c / result.d"])
    assert analysis.metric_value(metric, {"result": {"c": 6, "d": 3}}, {}) == 2.0
    assert analysis.metric_value(metric, {"result": {}}, {}) is None
    with pytest.raises(ValueError):
        analysis.evaluate("__import__('os')", {})


def test_lookup_maps_over_lists():
    run = {"result": {"queries": [{"found": {"n": 1}}, {"found": {"n": 2}}]}}
    assert analysis.lookup(run, "result.queries.*.found.n") == [1, 2]
    assert analysis.lookup(run, "result.queries.1.found") == {"n": 2}
    assert analysis.lookup(run, "result.nothing.here") is None


def test_summaries_keep_median_spread_and_values_and_respect_groups():
    metrics = [Metric("rate", "ops/s", "result.ops"), Metric("puts", "puts", "result.puts", groups=["rww"])]
    runs = [{"round": i, "result": {"ops": ops, "puts": 1}} for i, ops in enumerate([3.0, 1.0, 2.0])]
    summary = analysis.summarize(metrics, "fill", runs, {})
    assert summary == {"rate": {"median": 2.0, "min": 1.0, "max": 3.0, "values": [3.0, 1.0, 2.0]}}
    assert runs[0]["metrics"] == {"rate": 3.0}
    assert "puts" in analysis.summarize(metrics, "rww", runs, {})


def test_a_verdict_straddling_its_target_is_within_noise():
    assert analysis.verdict([1.6, 1.7], 1.65, 1.5, "higher") == analysis.MET
    assert analysis.verdict([1.2, 1.3], 1.25, 1.5, "higher") == analysis.MISSED
    assert analysis.verdict([1.4, 1.6, 1.7], 1.6, 1.5, "higher") == analysis.NOISE
    assert analysis.verdict([0.5, 0.7], 0.6, 0.8, "lower") == analysis.MET


def entry(name: str, values: list[float], metric: str = "rate") -> dict:
    runs = [{"round": i, "metrics": {metric: value}} for i, value in enumerate(values)]
    return {"name": name, "runs": runs, "summary": {metric: analysis.spread(values)}}


def workload(*metrics: Metric) -> Workload:
    return Workload(name="w", description="", contenders=[Contender(name="x", role="peer", command=["true"])],
                    metrics=list(metrics) or [Metric("rate", "ops/s", "result.ops")])


def test_ratios_are_of_medians_with_per_round_ratios_and_pick_the_best_peer():
    contenders = {"ours": entry("ours", [10, 12, 11]), "a": entry("a", [5, 6, 5]), "b": entry("b", [8, 4, 9])}
    found = analysis.compare(Comparison("go", "ours", ["a", "b"], target=1.2), workload(), contenders)
    assert found["peer"] == "b" and found["peer_chosen_from"] == ["a", "b"]
    assert found["ratio"] == pytest.approx(11 / 8)
    assert found["per_round_ratios"] == pytest.approx([10 / 8, 12 / 4, 11 / 9])
    assert found["verdict"] == analysis.MET and not found["loss"]
    # A metric where lower is better: the best peer is the lowest, a ratio above 1 a loss.
    rss = workload(Metric("rss", "MiB", "x", better="lower"))
    contenders = {"ours": entry("ours", [3, 3], "rss"), "a": entry("a", [2, 2], "rss"), "b": entry("b", [9, 9], "rss")}
    found = analysis.compare(Comparison("memory", "ours", ["a", "b"], metric="rss", target=0.6), rss, contenders)
    assert found["peer"] == "a" and found["ratio"] == 1.5 and found["loss"] and found["verdict"] == analysis.MISSED
    # A peer that did not run (left out or failed): no comparison.
    assert analysis.compare(Comparison("go", "ours", "gone"), workload(), contenders) is None


def test_targets_on_a_metric_and_on_probe_rows():
    contenders = {"ours": entry("ours", [0.9, 1.1, 1.3])}
    check = analysis.check_target(Target("reads", "ours", "rate", 1.0), workload(), contenders)
    assert check["verdict"] == analysis.NOISE and check["median"] == 1.1
    rows = {"overflow": [{"policy": "rebuild", "fan_out": 64, "share": 3.0}, {"policy": "fixed", "fan_out": 64,
                                                                              "share": 40.0}]}
    (found,) = analysis.check_probe_target(
        ProbeTarget("share", "overflow", {"policy": "rebuild", "fan_out": 64}, "share", 5.0), rows
    )
    assert found["verdict"] == analysis.MET and found["median"] == 3.0


def test_disagreeing_outputs_stop_the_benchmark():
    def results(*hits: int) -> dict:
        return {"runs": [{"round": i, "result": {"hits": h}} for i, h in enumerate(hits)]}

    agreement = Agreement("hits", ["a", "b"], ["result.hits"])
    assert analysis.check_agreement(agreement, {"a": results(3, 3), "b": results(3)}, "p")["value"] == {
        "result.hits": 3
    }
    with pytest.raises(BenchmarkFailure, match=r"RESULTS DISAGREE on p \(hits\): b \(round 2\)"):
        analysis.check_agreement(agreement, {"a": results(3, 3), "b": results(3, 4)}, "p")


def test_units():
    assert parse_size("4G") == 4 * 2**30 and parse_size("100M") == 100 * 2**20 and parse_size("12345") == 12345
    assert format_size_arg(4 * 2**30) == "4G"
    assert parse_count("10M") == 10**7 and parse_count("50k") == 50_000 and parse_count("1e8") == 10**8
    assert format_count(40_000_000) == "40M" and format_count(1234) == "1234"
