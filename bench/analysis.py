"""What a part's runs mean: metrics per run, their median and spread, ratios, targets, agreement, the disk's limit.

Every figure of a report comes from one invocation of the harness: a ratio is
of two medians of the same part, and its per-round ratios (contender of round
i over peer of round i) give its spread. A verdict on a target is "met" or
"missed" only when every run (or every round's ratio) is on the same side of
it; otherwise the result is within the noise of the target, and says so.
"""

from __future__ import annotations

import ast
import operator
import statistics
from typing import Any

from declarations import Agreement, Comparison, DiskBound, Metric, ProbeTarget, Target, Workload
from measure import BenchmarkFailure

MEGABYTE = 1_000_000
MET, MISSED, NOISE = "met", "missed", "within noise"
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


class _Missing(Exception):
    """A field the expression reads is absent (or not a number) in this run."""


# ---------------------------------------------------------------------------
# Reading runs


def lookup(value: Any, path: str) -> Any:
    """The value at a dotted path: `result.queries.2.found`; `*` maps over a list. None when absent."""
    parts = path.split(".")
    for index, part in enumerate(parts):
        if part == "*":
            if not isinstance(value, list):
                return None
            rest = ".".join(parts[index + 1 :])
            return [lookup(item, rest) if rest else item for item in value]
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def evaluate(source: str, names: dict[str, Any]) -> float | None:
    """An arithmetic expression over run fields (`result.latency_ns.p99 / 1000`); None when a field is missing."""
    try:
        value = _evaluate(ast.parse(source, mode="eval").body, names)
    except (_Missing, ZeroDivisionError):
        return None
    return float(value)


def _evaluate(node: ast.AST, names: dict[str, Any]) -> Any:
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left, names), _evaluate(node.right, names))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand, names)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    value = _field(node, names)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise _Missing from None
        raise _Missing
    return value


def _field(node: ast.AST, names: dict[str, Any]) -> Any:
    if isinstance(node, ast.Name):
        if node.id not in names or names[node.id] is None:
            raise _Missing
        return names[node.id]
    if isinstance(node, ast.Attribute):
        parent = _field(node.value, names)
        if not isinstance(parent, dict) or parent.get(node.attr) is None:
            raise _Missing
        return parent[node.attr]
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        parent = _field(node.value, names)
        key = node.slice.value
        try:
            value = parent[key]
        except (KeyError, IndexError, TypeError):
            raise _Missing from None
        if value is None:
            raise _Missing
        return value
    raise ValueError(f"not allowed in a metric: {ast.dump(node)}")


def metric_value(metric: Metric, run: dict[str, Any], part_numbers: dict[str, Any]) -> float | None:
    """The metric's value in one run: the first of its sources whose fields all exist."""
    names = {**part_numbers, **run}
    for source in [metric.source] if isinstance(metric.source, str) else metric.source:
        value = evaluate(source, names)
        if value is not None:
            return value
    return None


def spread(values: list[float]) -> dict[str, Any]:
    """Median, min and max of the runs' values (and the values, in round order)."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "values": values}


def summarize(
    metrics: list[Metric], group: str | None, runs: list[dict[str, Any]], part_numbers: dict[str, Any]
) -> dict[str, Any]:
    """Each metric's spread over the runs that have it (for a contender of `group`); every run gets its `metrics`."""
    metrics = [metric for metric in metrics if metric.groups is None or group in metric.groups]
    summary: dict[str, Any] = {}
    for run in runs:
        run["metrics"] = {}
        for metric in metrics:
            value = metric_value(metric, run, part_numbers)
            if value is not None:
                run["metrics"][metric.name] = value
    for metric in metrics:
        values = [run["metrics"][metric.name] for run in runs if metric.name in run["metrics"]]
        if values:
            summary[metric.name] = spread(values)
    return summary


# ---------------------------------------------------------------------------
# Verdicts


def meets(value: float, target: float, better: str) -> bool:
    return value >= target if better == "higher" else value <= target


def verdict(values: list[float], median: float, target: float, better: str) -> str:
    """Met or missed when every value is on one side of the target; within the noise when they straddle it."""
    sides = {meets(value, target, better) for value in values}
    if len(sides) > 1:
        return NOISE
    return MET if meets(median, target, better) else MISSED


def is_loss(ratio: float, better: str | None) -> bool:
    """Whether a ratio (Spillway's over a peer's) says Spillway does worse."""
    if better == "higher":
        return ratio < 1
    if better == "lower":
        return ratio > 1
    return False


def compare(
    comparison: Comparison, workload: Workload, contenders: dict[str, dict[str, Any]]
) -> dict[str, Any] | None:
    """The ratio of medians and the per-round ratios; None when a contender has no value (it failed or was left out)."""
    name = comparison.metric or workload.headline()
    metric = workload.metric(name)
    ours = contenders.get(comparison.contender)
    candidates = comparison.peer if isinstance(comparison.peer, list) else [comparison.peer]
    peers = [contenders[peer] for peer in candidates if peer in contenders and name in contenders[peer]["summary"]]
    if ours is None or name not in ours["summary"] or not peers:
        return None
    pick = max if metric.better != "lower" else min
    theirs = pick(peers, key=lambda peer: peer["summary"][name]["median"])
    ours_median = ours["summary"][name]["median"]
    theirs_median = theirs["summary"][name]["median"]
    if theirs_median == 0:
        return None
    by_round = {run["round"]: run["metrics"].get(name) for run in theirs["runs"]}
    per_round = [
        run["metrics"][name] / by_round[run["round"]]
        for run in ours["runs"]
        if name in run["metrics"] and by_round.get(run["round"])
    ]
    ratio = ours_median / theirs_median
    result = {
        "label": comparison.label,
        "metric": name,
        "better": metric.better,
        "contender": comparison.contender,
        "peer": theirs["name"],
        "peer_chosen_from": candidates if len(candidates) > 1 else None,
        "contender_median": ours_median,
        "peer_median": theirs_median,
        "ratio": ratio,
        "per_round_ratios": per_round,
        "target": comparison.target,
        "verdict": None,
        "loss": is_loss(ratio, metric.better),
    }
    if comparison.target is not None:
        result["verdict"] = verdict(per_round or [ratio], ratio, comparison.target, metric.better or "higher")
    return result


def check_target(target: Target, workload: Workload, contenders: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    metric = workload.metric(target.metric)
    contender = contenders.get(target.contender)
    if contender is None or target.metric not in contender["summary"]:
        return None
    figures = contender["summary"][target.metric]
    better = metric.better or "higher"
    return {
        "label": target.label,
        "contender": target.contender,
        "metric": target.metric,
        "better": better,
        "median": figures["median"],
        "min": figures["min"],
        "max": figures["max"],
        "values": figures["values"],
        "target": target.value,
        "verdict": verdict(figures["values"], figures["median"], target.value, better),
    }


def check_probe_target(target: ProbeTarget, probes: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One verdict per probe row that matches: a probe runs once, so its figures have no spread."""
    checks = []
    for row in probes.get(target.probe, []):
        if all(lookup(row, key) == value for key, value in target.where.items()):
            value = lookup(row, target.field)
            if isinstance(value, (int, float)):
                checks.append({
                    "label": target.label,
                    "probe": target.probe,
                    "better": target.better,
                    "median": value,
                    "min": value,
                    "max": value,
                    "values": [value],
                    "target": target.value,
                    "verdict": MET if meets(value, target.value, target.better) else MISSED,
                })
    return checks


def check_agreement(agreement: Agreement, contenders: dict[str, dict[str, Any]], part_label: str) -> dict[str, Any]:
    """Raises RESULTS DISAGREE unless every run of the agreement's contenders has the same fields."""
    reference: tuple[str, int, Any] | None = None
    for name in agreement.contenders:
        entry = contenders.get(name)
        if entry is None:
            continue
        for run in entry["runs"]:
            found = {path: lookup(run, path) for path in agreement.fields}
            if reference is None:
                reference = (name, run["round"], found)
            elif found != reference[2]:
                raise BenchmarkFailure(
                    f"RESULTS DISAGREE on {part_label} ({agreement.label}): {name} (round {run['round'] + 1}) found "
                    f"{found}, {reference[0]} (round {reference[1] + 1}) found {reference[2]}"
                )
    return {"label": agreement.label, "contenders": agreement.contenders, "value": reference[2] if reference else None}


# ---------------------------------------------------------------------------
# The disk's limit


def disk_bound(spec: DiskBound | None, contenders: dict[str, dict[str, Any]], data_bytes: int) -> dict[str, Any] | None:
    """The disk-bound limit of a 2-IO operation on this data and each contender's fraction of it."""
    if spec is None:
        return None
    needed = [spec.read, spec.write, *spec.contenders] + ([spec.read_write] if spec.read_write else [])
    if any(name not in contenders for name in needed):
        return None

    def median_s(name: str) -> float:
        return contenders[name]["summary"]["wall_s"]["median"]

    read_s, write_s = median_s(spec.read), median_s(spec.write)
    passes = 1 if data_bytes <= spec.memory_budget_bytes else 2
    limit_s = passes * (read_s + write_s)
    fractions = {name: limit_s / median_s(name) for name in spec.contenders}
    targets = {}
    if passes == 2:
        for name, target in spec.targets.items():
            targets[name] = {"target": target, "fraction": fractions[name], "met": fractions[name] >= target}
    # Out of memory each pass reads and writes at once: the disk doing both
    # together is the tighter limit. In memory every read precedes every write.
    overlapped = None
    if spec.read_write and passes == 2:
        read_write_s = median_s(spec.read_write)
        overlapped_s = passes * read_write_s
        overlapped = {
            "contender": spec.read_write,
            "mb_s": data_bytes / read_write_s / MEGABYTE,
            "limit_s": overlapped_s,
            "fractions": {name: overlapped_s / median_s(name) for name in spec.contenders},
        }
    return {
        "read_contender": spec.read,
        "write_contender": spec.write,
        "read_mb_s": data_bytes / read_s / MEGABYTE,
        "write_mb_s": data_bytes / write_s / MEGABYTE,
        "memory_budget_bytes": spec.memory_budget_bytes,
        "in_memory": passes == 1,
        "passes": passes,
        "limit_s": limit_s,
        "fractions": fractions,
        "targets": targets,
        "overlapped": overlapped,
        # The least time a 2-IO sort can take on this disk, as measured here.
        "floor_s": overlapped["limit_s"] if overlapped else limit_s,
    }
