"""The one report writer: every workload's results as <workload>.json, .md and .png, and the index README.md.

The JSON is the run as `bench/run.py` assembled it (schema "spillway-bench/2":
machine, source, builds, the command, and per part every run of every
contender with its metrics' median and min-max, the comparisons, targets,
agreements and probe rows). The Markdown page and the chart are drawn from it
alone, the same way for every workload: its declared tables, the verdict on
every target (or that the result lies within the noise), the ratios where
Spillway loses, the method notes and the commands. The chart shows each
charted table's headline metric per part as bars of the median with min-max
whiskers, Spillway in blue and its peers in grey. A workload with a line chart
(one metric across its variants, such as memory limits) gets a second one,
<workload>-lines.png: a line per contender, an x where it failed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analysis import MEGABYTE, lookup
from install import import_pyplot
from measure import REPO_ROOT
from units import format_bytes, plural

SCHEMA = "spillway-bench/2"
ROLE_COLORS = {"spillway": "#1f77b4", "peer": "#999999"}


def write_reports(report: dict[str, Any], out_dir: Path, page_commands: dict[str, str] | None = None) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    name = report["workload"]
    (out_dir / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
    (out_dir / f"{name}.md").write_text(markdown_report(report))
    write_chart(report, out_dir / f"{name}.png")
    charts = ".png"
    if report.get("line_chart"):
        write_line_chart(report, out_dir / f"{name}-lines.png")
        charts += ", -lines.png"
    write_index(out_dir, page_commands)
    print(f"\nwrote {out_dir / name}.json, .md, {charts} and {out_dir / 'README.md'}", flush=True)


# ---------------------------------------------------------------------------
# Figures


def metric_info(report: dict[str, Any], name: str) -> dict[str, Any]:
    for metric in report["metrics"]:
        if metric["name"] == name:
            return metric
    return {"name": name, "label": name, "better": None, "scale": 1.0, "digits": 2}


def number(value: float, digits: int) -> str:
    return f"{value:,.{digits}f}"


def figure(report: dict[str, Any], name: str, value: float) -> str:
    metric = metric_info(report, name)
    return number(value * metric["scale"], metric["digits"])


def cell(report: dict[str, Any], name: str, summary: dict[str, Any] | None) -> str:
    """A metric's median with its min-max over the runs (the median alone for one run)."""
    if not summary:
        return "-"
    shown = figure(report, name, summary["median"])
    if len(summary["values"]) > 1:
        shown += f" ({figure(report, name, summary['min'])}–{figure(report, name, summary['max'])})"
    return shown


def ratio_range(values: list[float]) -> str:
    """The spread of the per-round ratios, as a parenthesis's text."""
    if len(values) < 2:
        return "one round"
    return f"per round {min(values):.2f}–{max(values):.2f}"


def direction(better: str | None) -> str:
    return "at most" if better == "lower" else "at least"


def verdict_text(report: dict[str, Any], check: dict[str, Any]) -> str:
    """Met, missed (in bold) or within noise, with what straddled the target."""
    verdict = check["verdict"]
    single = len(check.get("per_round_ratios", check.get("values", []))) == 1 and "probe" not in check
    if verdict in ("met", "missed"):
        shown = "met" if verdict == "met" else "**missed**"
        return shown + (" (one run: its noise is not measured)" if single else "")
    if "per_round_ratios" in check:
        return f"within noise ({ratio_range(check['per_round_ratios'])} straddle {check['target']:g})"
    name = check["metric"]
    return (
        f"within noise (runs {figure(report, name, check['min'])}–{figure(report, name, check['max'])} "
        f"straddle {figure(report, name, check['target'])})"
    )


def part_data_line(report: dict[str, Any], part: dict[str, Any]) -> str:
    variant = part.get("variant")
    text = f"{part['records']:,} records"
    if part.get("data_bytes"):
        text += f" ({format_bytes(part['data_bytes'])})"
    if variant and variant.get("description"):
        text += f"; {variant['description']}"
    text += f". {plural(part['runs_per_contender'], 'run')} per contender, alternating between contenders"
    if part_has_own_limit(report, part):
        text += (f"; every run inside a cgroup v1 memory limit of {format_bytes(part['memory_limit_bytes'])} "
                 "(page cache included)")
    if part_has_own_timeout(report, part):
        text += f"; every run stopped after {part['run_timeout_s']:g} s without finishing (the run's time limit)"
    if part.get("captured"):
        text += "; setup found " + ", ".join(f"{name} = {value}" for name, value in part["captured"].items())
    load = part.get("load_average_1m")
    if load:
        text += f"; 1-minute load average {load['min']:.2f}–{load['max']:.2f} at the runs' starts"
    return text + f"; the part took {part['part_wall_s'] / 60:.1f} minutes."


def part_has_own_limit(report: dict[str, Any], part: dict[str, Any]) -> bool:
    """Whether the part ran under a memory limit other than the invocation's (its variant's own)."""
    return bool(part.get("memory_limit_bytes")) and part["memory_limit_bytes"] != report["memory_limit_bytes"]


def part_has_own_timeout(report: dict[str, Any], part: dict[str, Any]) -> bool:
    """Whether the part's runs had a time limit other than the workload's (its variant's own)."""
    return part.get("run_timeout_s") is not None and part["run_timeout_s"] != report.get("run_timeout_s")


def cache_line(report: dict[str, Any]) -> str:
    """Which runs started with the page cache dropped, and the memory limit."""
    contenders = {c["name"]: c.get("cold", True) for part in report["parts"] for c in part["contenders"]}
    warm = sorted(name for name, cold in contenders.items() if not cold)
    if not any(contenders.values()):
        text = "Page cache kept: by the workload's design every run starts with what it holds, after a sync"
    elif not report.get("cache_droppable", True):
        text = "**Page cache NOT dropped (cache-warm)**: the kernel did not allow it"
    else:
        text = "Page cache dropped before every run"
        if warm:
            text += " except those of " + ", ".join(warm) + " (which start with what it holds, after a sync)"
    own_limits = any(part_has_own_limit(report, part) for part in report["parts"])
    if report["memory_limit_bytes"]:
        text += f"; every run inside a cgroup v1 memory limit of {format_bytes(report['memory_limit_bytes'])} (page cache included)"
        if own_limits:
            text += ", except in the parts that name a limit of their own"
    elif own_limits:
        text += "; each part's runs inside the cgroup v1 memory limit its line names (page cache included)"
    own_timeouts = any(part_has_own_timeout(report, part) for part in report["parts"])
    if report.get("run_timeout_s") is not None:
        text += (f"; every run is stopped after {report['run_timeout_s']:g} s without finishing (the run's time "
                 "limit) and reported failed")
        if own_timeouts:
            text += ", except in the parts that name a time limit of their own"
    elif own_timeouts:
        text += "; each part's runs are stopped after the time limit its line names"
    return text + ". Figures are medians with the (min–max) of the runs."


# ---------------------------------------------------------------------------
# The Markdown page


def markdown_report(report: dict[str, Any]) -> str:
    machine = report["machine"]
    source = report["source"]
    lines = [f"# {report['title']}", "", report["description"], ""]
    if not report.get("complete", True):
        lines += [
            f"**INCOMPLETE: the benchmark stopped after {len(report['parts'])} of its {report['parts_planned']} "
            "parts; the parts below are all it measured.**",
            "",
        ]
    lines += [
        f"Measured {report.get('generated_at', '')[:16].replace('T', ' ')} UTC on {machine['cpu_model']}, "
        f"{machine['cpu_cores']} cores, {format_bytes(machine['memory_bytes'])} RAM, kernel {machine['kernel']}, "
        f"{machine['disk_fstype']} on {machine['disk_device']} (load average {machine['load_average']} at the start). "
        f"Source: commit {source['described']}"
        + (f" (changed: {', '.join(source['changed_files'])})" if source.get("dirty") else "")
        + "."
    ]
    spillway_meta = report.get("spillway")
    if spillway_meta:
        lines.append(
            f"Spillway: `{spillway_meta['version']}`, {spillway_meta['profile']} build (binary modified "
            f"{spillway_meta['binary_modified']})."
        )
        if spillway_meta["profile"] == "debug":
            lines.append("**WARNING: debug build; these numbers do not describe Spillway's speed.**")
    for built in report.get("builds", []):
        lines.append(
            f"Built {built['name']} ({built['profile']}, {built['toolchain']}): `{built['command']}`."
        )
        if built["profile"] == "debug":
            lines.append(f"**WARNING: {built['name']} is a debug build; its numbers mean nothing.**")
    lines += ["", cache_line(report)]
    if report.get("benchmark_wall_s"):
        lines[-1] += f" The whole benchmark took {report['benchmark_wall_s'] / 60:.1f} minutes."
    left_out = report["invocation"].get("contenders_left_out")
    if left_out:
        lines += ["", "Left out of this run: " + ", ".join(left_out) + "."]
    params = report["invocation"].get("params")
    if params:
        lines += ["", "Params: " + ", ".join(f"`{name}={value}`" for name, value in params.items()) + "."]
    if report.get("note"):
        lines += ["", report["note"]]
    if report.get("scale_note"):
        lines += ["", f"**Scale.** {report['scale_note']}"]
    lines += ["", "Reproduce (this page is this one command's output):", "", "```", report["reproduce"], "```", ""]
    lines += targets_section(report)
    lines += losses_section(report)
    if len(report["parts"]) > 1:
        lines += summary_section(report)
    lines += line_chart_section(report)
    for part in report["parts"]:
        lines += part_section(report, part)
    lines += probe_sections(report)
    if report["notes"]:
        lines += ["## Method", ""] + [f"- {note}" for note in report["notes"]] + [""]
    lines += commands_section(report)
    lines += ["", f"![median with min–max of the runs]({report['workload']}.png)", ""]
    return "\n".join(lines)


def targets_section(report: dict[str, Any]) -> list[str]:
    rows = []
    for part in report["parts"]:
        for comparison in part["comparisons"]:
            if comparison["target"] is None:
                continue
            metric = metric_info(report, comparison["metric"])
            peer = comparison["peer"]
            if comparison.get("peer_chosen_from"):
                peer += " (the best of " + ", ".join(comparison["peer_chosen_from"]) + ")"
            rows.append(
                f"| {part['label']} | {comparison['label']}: {comparison['contender']} / {peer}, {metric['label']} "
                f"| **{comparison['ratio']:.2f}x** ({ratio_range(comparison['per_round_ratios'])}) "
                f"| {direction(comparison['better'])} {comparison['target']:g}x | {verdict_text(report, comparison)} |"
            )
        for target in part["targets"]:
            if "probe" in target:
                what = f"{target['label']} (probe {target['probe']}, one deterministic run)"
                measured = f"{target['median']:.4g}"
            else:
                metric = metric_info(report, target["metric"])
                what = f"{target['label']}: {target['contender']}, {metric['label']}"
                measured = cell(report, target["metric"], target)
            shown_target = (
                f"{target['target']:g}" if "probe" in target
                else figure(report, target["metric"], target["target"])
            )
            rows.append(
                f"| {part['label']} | {what} | **{measured}** | {direction(target['better'])} {shown_target} "
                f"| {verdict_text(report, target)} |"
            )
    for part in report["parts"]:
        for failure in part.get("failed", []):
            for comparison in failure["comparisons"]:
                if comparison["target"] is not None:
                    who = "it" if failure["name"] == comparison["contender"] else "the peer"
                    rows.append(
                        f"| {part['label']} | {comparison['label']}: {comparison['contender']} / {comparison['peer']} "
                        f"| {failure['name']} failed | {comparison['target']:g}x | no ratio: {who} failed |"
                    )
    if not rows:
        return []
    return [
        "## Targets",
        "",
        "A verdict is met or missed only when every run (for a ratio, every round's ratio) falls on the same "
        "side of the target; otherwise it is within the noise, and no run is picked to decide it.",
        "",
        "| part | target | measured | target | verdict |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ]


def losses_section(report: dict[str, Any]) -> list[str]:
    lines = []
    for part in report["parts"]:
        for comparison in part["comparisons"]:
            if not comparison["loss"]:
                continue
            metric = metric_info(report, comparison["metric"])
            rounds = comparison["per_round_ratios"]
            noisy = len(rounds) > 1 and min(rounds) <= 1 <= max(rounds)
            lines.append(
                f"- {part['label']}, {comparison['label']}: {comparison['contender']} "
                f"{figure(report, comparison['metric'], comparison['contender_median'])} against {comparison['peer']}'s "
                f"{figure(report, comparison['metric'], comparison['peer_median'])} {metric['label']} "
                f"({comparison['ratio']:.2f}x; {ratio_range(rounds)})"
                + ("; within the noise of parity." if noisy else ".")
            )
    if not any(part["comparisons"] for part in report["parts"]):
        return []
    return ["## Where Spillway loses", ""] + (lines or ["- Nowhere among this page's comparisons."]) + [""]


def table_rows(report: dict[str, Any], part: dict[str, Any], table: dict[str, Any]) -> list[dict[str, Any]]:
    """The contenders a table lists in a part: its group's, with a value for at least one of its metrics."""
    return [
        contender for contender in part["contenders"]
        if (table["group"] is None or contender.get("group") == table["group"])
        and any(name in contender["summary"] for name in table["metrics"])
    ]


def summary_section(report: dict[str, Any]) -> list[str]:
    """Each table's headline metric across the parts: one row per contender, one column per part."""
    lines = ["## Summary", ""]
    for table in report["tables"]:
        name = table["metrics"][0]
        metric = metric_info(report, name)
        names: list[str] = []
        for part in report["parts"]:
            names += [c["name"] for c in table_rows(report, part, table) if c["name"] not in names]
        if not names:
            continue
        lines += [
            f"{table['title']}, {metric['label']} (median of each part):",
            "",
            "| contender | " + " | ".join(part["label"] for part in report["parts"]) + " |",
            "|---|" + "---|" * len(report["parts"]),
        ]
        for contender_name in names:
            cells = []
            for part in report["parts"]:
                entry = next((c for c in part["contenders"] if c["name"] == contender_name), None)
                summary = entry["summary"].get(name) if entry else None
                cells.append(figure(report, name, summary["median"]) if summary else "-")
            lines.append(f"| {contender_name} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def line_chart_section(report: dict[str, Any]) -> list[str]:
    """The line chart's image, and where each contender failed (the chart's x marks), in words."""
    chart = report.get("line_chart")
    if not chart:
        return []
    metric = metric_info(report, chart["metric"])
    lines = [
        f"![{metric['label']} against {chart['x_label']}: one line per contender, median with min–max of the runs; "
        f"an x where it failed]({report['workload']}-lines.png)",
        "",
    ]
    failures = line_failures(report)
    if failures:
        lines += [
            "Failed (an x on the chart): "
            + "; ".join(f"{name} at {', '.join(f'{x:g}' for x in xs)} ({chart['x_label']})" for name, xs in failures.items())
            + ".",
            "",
        ]
    return lines


def part_section(report: dict[str, Any], part: dict[str, Any]) -> list[str]:
    lines = [f"## {part['label']}", "", part_data_line(report, part), ""]
    for table in report["tables"]:
        rows = table_rows(report, part, table)
        if not rows:
            continue
        columns = [name for name in table["metrics"] if any(name in c["summary"] for c in rows)]
        if len(report["tables"]) > 1:
            lines += [f"### {table['title']}", ""]
        if table.get("text"):
            lines += [table["text"], ""]
        bound = part.get("disk_bound") if table is report["tables"][0] else None
        header = "| contender | " + " | ".join(metric_info(report, name)["label"] for name in columns) + " |"
        rule = "|---|" + "---|" * len(columns)
        if bound:
            header += " of disk-bound limit |"
            rule += "---|"
        lines += [header, rule]
        for contender in rows:
            row = f"| {contender['name']} | " + " | ".join(
                cell(report, name, contender["summary"].get(name)) for name in columns
            ) + " |"
            if bound:
                fraction = bound["fractions"].get(contender["name"])
                row += f" {'' if fraction is None else f'{fraction:.0%}'} |"
            lines.append(row)
        lines.append("")
    if part["comparisons"]:
        lines += [
            "| comparison | Spillway / peer (ratio of medians) | per-round ratios | target |",
            "|---|---|---|---|",
        ]
        for comparison in part["comparisons"]:
            metric = metric_info(report, comparison["metric"])
            per_round = ", ".join(f"{value:.2f}" for value in comparison["per_round_ratios"])
            target = ""
            if comparison["target"] is not None:
                target = f"{direction(comparison['better'])} {comparison['target']:g}x: {verdict_text(report, comparison)}"
            lines.append(
                f"| {comparison['label']}: {comparison['contender']} / {comparison['peer']} ({metric['label']}) "
                f"| **{comparison['ratio']:.2f}** | {per_round} | {target} |"
            )
        lines.append("")
    for failure in part.get("failed", []):
        lines.append(f"{failure['name']} failed, so it has no ratio: {failure['reason']}")
    if part.get("failed"):
        lines.append("")
    lines += disk_bound_lines(report, part)
    lines += stage_tables(part)
    return lines


def disk_bound_lines(report: dict[str, Any], part: dict[str, Any]) -> list[str]:
    bound = part.get("disk_bound")
    if not bound:
        return []
    data_bytes = part["data_bytes"]
    unit = metric_info(report, "throughput")
    scale, digits = unit["scale"], max(unit["digits"], 1)
    mode = "fits" if bound["in_memory"] else "does not fit"
    lines = [
        (
            f"Disk-bound limit: the data {mode} in the {format_bytes(bound['memory_budget_bytes'])} budget, so a "
            f"2-IO sort reads and writes it {'once' if bound['passes'] == 1 else 'twice'}: "
            f"{bound['passes']} x {format_bytes(data_bytes)} at {bound['read_mb_s'] * scale:.{digits}f} {unit['label']} "
            f"({bound['read_contender']}) + {bound['passes']} x {format_bytes(data_bytes)} at "
            f"{bound['write_mb_s'] * scale:.{digits}f} {unit['label']} ({bound['write_contender']}) = "
            f"**{bound['limit_s']:.1f} s**."
        ),
    ]
    for name, verdict in bound["targets"].items():
        lines.append(
            f"{name} reaches **{verdict['fraction']:.0%}** of it (target at least {verdict['target']:.0%}: "
            f"{'met' if verdict['met'] else 'missed'})."
        )
    overlapped = bound.get("overlapped")
    if overlapped:
        reached = "; ".join(f"{name} {fraction:.0%}" for name, fraction in overlapped["fractions"].items())
        lines += [
            "",
            (
                f"Overlapped limit: each pass of a 2-IO sort reads and writes at once. The disk read and wrote "
                f"{format_bytes(data_bytes)} each at the same time in {overlapped['limit_s'] / bound['passes']:.1f} s "
                f"({overlapped['contender']}, {overlapped['mb_s'] * scale:.{digits}f} {unit['label']} each way), so "
                f"no 2-IO sort of this data takes less than {bound['passes']} x that = "
                f"**{overlapped['limit_s']:.1f} s** here. Reached: {reached}."
            ),
        ]
    for comparison in part["comparisons"]:
        target = comparison["target"]
        if target is None or target <= 1 or comparison["verdict"] == "met":
            continue
        if comparison["contender"] not in bound["fractions"]:
            continue
        peer = next(c for c in part["contenders"] if c["name"] == comparison["peer"])
        needed_s = peer["summary"]["wall_s"]["median"] / target
        floor_s = bound["floor_s"]
        lines.append(
            f"{comparison['contender']} / {comparison['peer']} at {target:g}x would take {needed_s:.2f} s, "
            + (
                f"less than the {floor_s:.2f} s the disk needs for a 2-IO sort here, so no 2-IO sort reaches it on this disk."
                if needed_s < floor_s
                else f"{floor_s / needed_s:.0%} of the disk's limit ({floor_s:.2f} s)."
            )
        )
    return lines + [""]


def median_run(contender: dict[str, Any]) -> dict[str, Any]:
    """The run with the median wall time (the lower middle one for an even count)."""
    ordered = sorted(contender["runs"], key=lambda run: run["wall_s"])
    return ordered[(len(ordered) - 1) // 2]


def stage_tables(part: dict[str, Any]) -> list[str]:
    """Spillway's pipeline report (phases of stages) of each JSON-reporting contender's median run."""
    lines: list[str] = []
    for contender in part["contenders"]:
        if not contender["runs"]:
            continue
        run = median_run(contender)
        pipeline = run.get("result")
        # A pipeline report's phases are a list of stage tables (a cluster
        # driver's result may name its own phases otherwise).
        if not isinstance(pipeline, dict) or not isinstance(pipeline.get("phases"), list) or not pipeline["phases"]:
            continue
        facts = []
        if "mode" in pipeline:
            facts.append(f"mode `{pipeline['mode']}`")
        if "partitions" in pipeline:
            facts.append(f"{pipeline['partitions']} partitions")
        if "elapsed" in pipeline:
            facts.append(f"{pipeline['elapsed']:.2f} s by its own clock")
        input_bytes = pipeline.get("input_bytes")
        if input_bytes and "device_read_bytes" in pipeline:
            facts.append(
                f"device read {pipeline['device_read_bytes'] / input_bytes:.2f} and written "
                f"{pipeline.get('device_write_bytes', 0) / input_bytes:.2f} x the input"
            )
        lines += [
            f"Where {contender['name']}'s time goes (its own report, median run: round {run['round'] + 1}, "
            f"{run['wall_s']:.2f} s; {', '.join(facts)}):",
            "",
        ]
        for phase in pipeline["phases"]:
            elapsed = phase.get("elapsed", 0.0)
            phase_bytes = phase.get("bytes_in", 0)
            rate = f", {phase_bytes / elapsed / MEGABYTE:.0f} MB/s" if elapsed else ""
            lines += [
                f"*{phase.get('name', 'phase')}*: {elapsed:.2f} s{rate}",
                "",
                "| stage | workers | MB in | MB out | busy s | blocked in s | blocked out s | blocked mem s | MB/s busy |",
                "|---|---|---|---|---|---|---|---|---|",
            ]
            rates = []
            for stage in phase.get("stages", []):
                busy = stage.get("busy", 0.0)
                workers = max(1, stage.get("workers", 1))
                # Like Spillway's own table: no rate for under a millisecond of work per worker.
                rates.append(
                    stage.get("bytes_in", 0) / (busy / workers) / MEGABYTE if busy / workers >= 1e-3 else float("inf")
                )
            slowest = rates.index(min(rates)) if rates and min(rates) != float("inf") else -1
            for index, (stage, stage_rate) in enumerate(zip(phase.get("stages", []), rates)):
                shown = "" if stage_rate == float("inf") else f"{stage_rate:.0f}"
                if index == slowest:
                    shown = f"**{shown}** (bottleneck)"
                lines.append(
                    f"| {stage.get('name')} | {stage.get('workers')} | {stage.get('bytes_in', 0) / MEGABYTE:.0f} "
                    f"| {stage.get('bytes_out', 0) / MEGABYTE:.0f} | {stage.get('busy', 0):.2f} "
                    f"| {stage.get('blocked_input', 0):.2f} | {stage.get('blocked_output', 0):.2f} "
                    f"| {stage.get('blocked_memory', 0):.2f} | {shown} |"
                )
            queues = phase.get("queues", [])
            if queues:
                lines += [
                    "",
                    "Queues: "
                    + "; ".join(f"{q.get('name')} capacity {q.get('capacity')}, max depth {q.get('depth_max')}" for q in queues)
                    + ".",
                ]
            lines.append("")
    return lines


def probe_sections(report: dict[str, Any]) -> list[str]:
    """Each probe's rows from every part, in one table."""
    lines: list[str] = []
    for probe in report.get("probe_tables", []):
        rows = [(part, row) for part in report["parts"] for row in part.get("probes", {}).get(probe["name"], [])]
        if not rows:
            continue
        lines += [f"## {probe['title']}", ""]
        if probe.get("text"):
            lines += [probe["text"], ""]
        lines += [
            "| part | " + " | ".join(column["header"] for column in probe["columns"]) + " |",
            "|---|" + "---|" * len(probe["columns"]),
        ]
        for part, row in rows:
            cells = []
            for column in probe["columns"]:
                value = lookup(row, column["field"])
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    cells.append(f"{value:,.{column['digits']}f}{column['suffix']}")
                else:
                    cells.append("-" if value is None else str(value))
            lines.append(f"| {part['label']} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def commands_section(report: dict[str, Any]) -> list[str]:
    """The commands of the first part (and every variant's setup), with $DIR for its scratch directory."""
    if not report["parts"]:
        return []
    lines = ["## Commands", "", "`$DIR` is the part's scratch directory, deleted afterwards.", ""]

    python = report["invocation"].get("python")

    def shown(command: list[str], data_dir: str) -> str:
        words = ["python3" if python and word == python else word for word in command]
        text = " ".join(words).replace(data_dir, "$DIR").replace(f"{REPO_ROOT}/", "")
        return f"`{text}`"

    seen_setup: set[str] = set()
    for part in report["parts"]:
        for step in part.get("setup", []):
            text = shown(step["command"], part["data_dir"])
            if text not in seen_setup:
                seen_setup.add(text)
                lines.append(f"- setup ({part['label']}): {text}")
    first = report["parts"][0]
    listed = {}
    for contender in first["contenders"]:
        listed[contender["name"]] = shown(contender["command"], first["data_dir"])
        lines.append(f"- {contender['name']}: {listed[contender['name']]}")
        run = contender["runs"][0] if contender["runs"] else {}
        for step in run.get("validation", []):
            lines.append(f"  - then, untimed: {shown(step['command'], first['data_dir'])}")
    # A later part under a limit of its own gives its contenders budgets of their own: those commands too.
    for part in report["parts"][1:]:
        if not part_has_own_limit(report, part):
            continue
        for contender in part["contenders"]:
            text = shown(contender["command"], part["data_dir"])
            if listed.get(contender["name"]) != text:
                lines.append(f"- {contender['name']} ({part['label']}): {text}")
    return lines


# ---------------------------------------------------------------------------
# The chart


def write_chart(report: dict[str, Any], path: Path) -> None:
    """One panel per part and charted table: the headline metric's median with min-max whiskers."""
    panels = [
        (part, table, table_rows(report, part, table))
        for part in report["parts"]
        for table in report["tables"]
        if table.get("chart", True)
    ]
    panels = [(part, table, rows) for part, table, rows in panels if rows]
    if not panels:
        return
    pyplot = import_pyplot()
    columns = min(2, len(panels))
    rows_count = (len(panels) + columns - 1) // columns
    widest = max(len(rows) for _, _, rows in panels)
    width = max(5.0, 0.9 * widest + 1.5) * columns
    figure_, axes_grid = pyplot.subplots(rows_count, columns, figsize=(width, 4.2 * rows_count), squeeze=False)
    for index, (part, table, contenders) in enumerate(panels):
        axes = axes_grid[index // columns][index % columns]
        name = table["metrics"][0]
        metric = metric_info(report, name)
        scale = metric["scale"]
        summaries = [contender["summary"].get(name) for contender in contenders]
        medians = [s["median"] * scale if s else 0.0 for s in summaries]
        lows = [m - s["min"] * scale if s else 0.0 for m, s in zip(medians, summaries)]
        highs = [s["max"] * scale - m if s else 0.0 for m, s in zip(medians, summaries)]
        colors = [ROLE_COLORS.get(contender["role"], ROLE_COLORS["peer"]) for contender in contenders]
        bars = axes.bar(range(len(contenders)), medians, yerr=[lows, highs], capsize=4, color=colors)
        axes.set_xticks(range(len(contenders)))
        axes.set_xticklabels([contender["name"] for contender in contenders], fontsize=7, rotation=25, ha="right")
        for bar, median in zip(bars, medians):
            axes.annotate(
                f"{median:,.{metric['digits']}f}",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                xytext=(0, 3),
                textcoords="offset points",
                ha="center",
                fontsize=7,
            )
        axes.legend(
            handles=[pyplot.Rectangle((0, 0), 1, 1, color=color) for color in ROLE_COLORS.values()],
            labels=["Spillway", "peer"],
            loc="best",
            fontsize=7,
        )
        better = {"higher": ", higher is better", "lower": ", lower is better"}.get(metric["better"] or "", "")
        axes.set_ylabel(f"{metric['label']}{better}", fontsize=8)
        runs = plural(part["runs_per_contender"], "run")
        title = f"{report['workload']}: {part['label']}"
        if len(report["tables"]) > 1:
            title += f"\n{table['title']}"
        axes.set_title(f"{title} ({runs}; median, min–max)", fontsize=8)
    for index in range(len(panels), rows_count * columns):
        axes_grid[index // columns][index % columns].axis("off")
    figure_.tight_layout()
    figure_.savefig(path, dpi=90)
    pyplot.close(figure_)


def line_series(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per line (a contender, and its part's size when the report has several): role, points and failures.

    Points are (x, median, min, max) of the chart's metric, scaled, in the order of x; failures are the x of
    the parts it failed in. Parts whose variant has no x are left out.
    """
    chart = report["line_chart"]
    name = chart["metric"]
    scale = metric_info(report, name)["scale"]
    several_sizes = len({part["size"] for part in report["parts"]}) > 1
    series: dict[str, dict[str, Any]] = {}
    for part in report["parts"]:
        variant = (part.get("variant") or {}).get("name")
        if variant not in chart["x_values"]:
            continue
        x = chart["x_values"][variant]
        size = f" ({part['label'].split(', ', 1)[-1]})" if several_sizes else ""
        for contender in part["contenders"]:
            summary = contender["summary"].get(name)
            line = series.setdefault(contender["name"] + size, {"role": contender["role"], "points": [], "failed": []})
            if summary:
                line["points"].append((x, summary["median"] * scale, summary["min"] * scale, summary["max"] * scale))
        for failure in part.get("failed", []):
            line = series.setdefault(failure["name"] + size, {"role": failure.get("role", "peer"), "points": [],
                                                               "failed": []})
            line["failed"].append(x)
    for line in series.values():
        line["points"].sort()
        line["failed"].sort()
    return series


def line_failures(report: dict[str, Any]) -> dict[str, list[float]]:
    return {name: line["failed"] for name, line in line_series(report).items() if line["failed"]}


# Lines of Spillway's contenders in blues (the bar chart's Spillway blue first), the peers' in other colours.
SPILLWAY_LINE_COLORS = ["#1f77b4", "#17becf", "#08306b", "#6baed6"]
PEER_LINE_COLORS = ["#7f7f7f", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#bcbd22"]


def write_line_chart(report: dict[str, Any], path: Path) -> None:
    """The line chart: the metric's median (min-max error bars) against the variants' x, one line per
    contender; an x in a band above the data where a contender failed, named in the legend."""
    chart = report["line_chart"]
    series = line_series(report)
    if not series:
        return
    pyplot = import_pyplot()
    metric = metric_info(report, chart["metric"])
    figure_, axes = pyplot.subplots(figsize=(8.0, 5.0))
    highest = max((high for line in series.values() for _, _, _, high in line["points"]), default=0.0) or 1.0
    # The failed band: above every error bar, so an x is never read as a value.
    band_low, top = highest * 1.08, highest * 1.3
    failing = [name for name, line in series.items() if line["failed"]]
    colors = {"spillway": iter(SPILLWAY_LINE_COLORS), "peer": iter(PEER_LINE_COLORS)}
    for name, line in series.items():
        color = next(colors[line["role"]], ROLE_COLORS[line["role"]])
        style = "-" if line["role"] == "spillway" else "--"
        label = name
        if line["failed"]:
            label += f" (failed at {', '.join(f'{x:g}' for x in line['failed'])})"
        if line["points"]:
            xs = [x for x, _, _, _ in line["points"]]
            medians = [median for _, median, _, _ in line["points"]]
            errors = [[median - low for _, median, low, _ in line["points"]],
                      [high - median for _, median, _, high in line["points"]]]
            axes.errorbar(xs, medians, yerr=errors, color=color, linestyle=style, marker="o", markersize=4,
                          capsize=3, linewidth=1.5, label=label)
            label = None
        if line["failed"]:
            row = failing.index(name)
            y = band_low + (top - band_low) * (row + 1) / (len(failing) + 1)
            axes.scatter(line["failed"], [y] * len(line["failed"]), marker="x", s=50, color=color, zorder=3,
                         label=label)
    axes.set_ylim(0, top if failing else highest * 1.1)
    if failing:
        axes.axhspan(band_low, top, color="#f2dede", zorder=0)
        # The band's name where a value would be read: a tick of the y axis, above the values' ticks.
        ticks = [tick for tick in axes.get_yticks() if 0 <= tick < band_low]
        labels = axes.yaxis.get_major_formatter().format_ticks(ticks)
        axes.set_yticks([*ticks, (band_low + top) / 2], [*labels, "failed"])
        axes.get_yticklabels()[-1].set_color("#a94442")
    xs = sorted({x for line in series.values() for x in [p[0] for p in line["points"]] + line["failed"]})
    if chart.get("x_log2"):
        axes.set_xscale("log", base=2)
    axes.set_xticks(xs)
    axes.set_xticklabels([f"{x:g}" for x in xs], fontsize=8)
    axes.minorticks_off()
    axes.set_xlabel(chart["x_label"], fontsize=9)
    better = {"higher": ", higher is better", "lower": ", lower is better"}.get(metric["better"] or "", "")
    axes.set_ylabel(f"{metric['label']}{better}", fontsize=9)
    runs = sorted({part["runs_per_contender"] for part in report["parts"]})
    shown_runs = plural(runs[0], "run") if len(runs) == 1 else f"{runs[0]}–{runs[-1]} runs"
    axes.set_title(f"{report['workload']}: {metric['label']} against {chart['x_label']} ({shown_runs}; median, min–max)",
                   fontsize=9)
    axes.grid(True, alpha=0.3)
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    figure_.tight_layout()
    figure_.savefig(path, dpi=90)
    pyplot.close(figure_)


# ---------------------------------------------------------------------------
# The index


# The script that writes the pages measured on a GPU machine (its JSON names it).
GPU_HARNESS = "bench/knn_gpu.py"


def gpu_line(name: str, report: dict[str, Any]) -> str:
    """The index row of a page of GPU_HARNESS: its first k = 10 row's PSB / brute-force ratio, and its
    targets (the verdicts its own page states)."""
    from knn_gpu import targets

    rows = report["results"]
    first = next((row for row in rows if row["k"] == 10), rows[0])
    rate = {n: c["queries_per_s"] for n, c in first["contenders"].items()}
    headline = (f"spillway-psb / spillway-brute ({first['distribution']}, d = {first['dims']}, k = {first['k']}): "
                f"**{rate['spillway-psb'] / rate['spillway-brute']:.2f}**")
    verdicts = " ".join(targets(rows))
    counts = f"{verdicts.count(': met)')} met, {verdicts.count(': not met)')} missed"
    return (f"| [{name}]({name}.md) | {report['machine']['gpu']} | {headline} | {counts} | {report['args']['runs']} "
            f"| {report.get('generated_at', '')[:10]} | {report.get('source', '')} |")


def write_index(out_dir: Path, page_commands: dict[str, str] | None = None) -> None:
    """docs/benchmarks/README.md, regenerated from every <workload>.json present.

    `page_commands` (workload name -> the command that makes its page) are listed
    for the pages written before this schema, which that command regenerates.
    """
    page_commands = page_commands or {}
    lines = [
        "# Benchmarks",
        "",
        (
            "Spillway against its peers on the same machine in the same run. Every page is the output of one "
            "invocation of `bench/run.py` (see `bench/README.md`), which the page names; the figures are medians "
            "over the page's runs, a ratio is Spillway's median over the peer's (for a rate, higher is better), "
            "and a target whose runs fall on both sides of it is reported as within the noise. Do not edit by hand."
        ),
        "",
        "| page | part | headline | targets | runs | measured | commit |",
        "|---|---|---|---|---|---|---|",
    ]
    former: list[str] = []
    gpu: list[str] = []
    for json_path in sorted(out_dir.glob("*.json")):
        try:
            report = json.loads(json_path.read_text())
            if report.get("harness") == GPU_HARNESS:
                gpu.append(gpu_line(json_path.stem, report))
                continue
            name = report["workload"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if report.get("schema") != SCHEMA:
            former.append(former_line(name, report, page_commands.get(name)))
            continue
        status = "" if report.get("complete", True) else " (**incomplete**)"
        for part in report["parts"]:
            with_target = [c for c in part["comparisons"] if c["target"] is not None] or part["comparisons"]
            headline = ""
            if with_target:
                first = with_target[0]
                headline = f"{first['contender']} / {first['peer']}: **{first['ratio']:.2f}**"
                if first["verdict"]:
                    headline += f" ({first['verdict']})"
            verdicts = [c["verdict"] for c in part["comparisons"] if c["verdict"]] + [
                t["verdict"] for t in part["targets"]
            ]
            counts = ", ".join(
                f"{verdicts.count(kind)} {kind}" for kind in ("met", "missed", "within noise") if verdicts.count(kind)
            )
            lines.append(
                f"| [{name}]({name}.md){status} | {part['label']} | {headline} | {counts} "
                f"| {part['runs_per_contender']} | {report.get('generated_at', '')[:10]} | {report['source']['described']} |"
            )
    if gpu:
        lines += [
            "",
            f"Pages measured on a GPU machine: each is one run of `{GPU_HARNESS}` there (by `scripts/gpu-check`), "
            "its peers on the same GPU in the same run:",
            "",
            "| page | measured on | headline | targets | runs | measured | commit |",
            "|---|---|---|---|---|---|---|",
            *gpu,
        ]
    if former:
        lines += [
            "",
            "Pages written before every workload ran under this harness and schema; each is to be regenerated with "
            "its command, on a quiet machine:",
            "",
            *former,
        ]
    (out_dir / "README.md").write_text("\n".join(lines) + "\n")


def former_line(name: str, report: dict[str, Any], command: str | None) -> str:
    """A page of the former schema: when it was measured, its first ratio if it has one, its command now."""
    measured = str(report.get("generated_at") or report.get("date") or "")[:10]
    line = f"- [{name}]({name}.md), measured {measured}"
    parts = report.get("parts") if isinstance(report.get("parts"), list) else [report]
    comparisons = [c for part in parts for c in (part.get("comparisons") or []) if isinstance(c, dict) and "ratio" in c]
    if comparisons:
        first = comparisons[0]
        line += f" ({first.get('contender')} / {first.get('peer')}: {first['ratio']:.2f}, one of {len(comparisons)} ratios)"
    elif "merged" in report or any(
        isinstance(dataset, dict) and ("parts" in dataset or "command" in dataset)
        for dataset in report.get("datasets", [])
    ):
        line += " (assembled from several runs by the former runner's `--merge`)"
    return line + (f": `{command}`" if command else "")
