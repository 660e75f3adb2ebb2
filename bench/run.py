#!/usr/bin/env python3
"""Run a benchmark workload on Spillway and its peers, side by side, and write its page.

    python3 bench/run.py WORKLOAD [--size SIZE]... [--runs N]... [--variant NAME]... [--only TEXT]...
                                  [--skip TEXT]... [--set NAME=VALUE]... [--memory-limit SIZE|none] [--warm]
                                  [--dir DIR] [--out docs/benchmarks] [--spillway PATH] [--target-dir DIR]
    python3 bench/run.py --list

One invocation makes one report: every (size, variant) pair is a part, run one
after another, each in its own data directory; within a part every contender
runs `--runs` times, alternating between contenders (A B A B ...). Each run is
one child process, measured by measure.run_once (and stopped, if the workload
sets a time limit on a run, when it runs past it). The report (report.py) gives
every metric's median and min-max, ratios of medians from the same part, the
verdict on every target (or that it lies within the noise), the machine, the
builds, the commit and this command. Results go to
docs/benchmarks/<workload>.{json,md,png} and the index docs/benchmarks/README.md.
See bench/README.md for the method.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import analysis  # noqa: E402  (the path is set just above)
import install  # noqa: E402
import report as reports  # noqa: E402
from declarations import (  # noqa: E402
    Contender,
    Probe,
    ProbeTarget,
    Step,
    Variant,
    Workload,
    check_workload,
)
from measure import (  # noqa: E402
    REPO_ROOT,
    BenchmarkFailure,
    cgroup_peak_bytes,
    create_memory_cgroup,
    drop_page_cache,
    joiner,
    machine_info,
    remove_memory_cgroup,
    reset_cgroup_peak,
    run_once,
    source_info,
)
from units import format_bytes, format_count, format_size_arg, parse_count, parse_size, plural  # noqa: E402
from workloads import WORKLOADS  # noqa: E402

DEFAULT_OUT_DIR = REPO_ROOT / "docs" / "benchmarks"


@dataclass
class Invocation:
    """What one run of the harness was asked to do (besides the workload).

    Defaults are resolved by the command line: `memory_limit_bytes` None is no
    limit here, whatever the workload's `memory_limit`; `params` are only the
    `--set` overrides.
    """

    sizes: list[int]
    runs: list[int]
    base_dir: Path
    out_dir: Path
    spillway: str | None = None
    memory_limit_bytes: int | None = None
    drop_cache: bool = True
    variants: list[str] = field(default_factory=list)
    only: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)
    params: dict[str, str] = field(default_factory=dict)
    target_dir: Path = install.DEFAULT_DRIVER_TARGET_DIR
    reproduce: str = ""
    note: str = ""


# ---------------------------------------------------------------------------
# Templates


def fill(template: list[str], params: dict[str, str]) -> list[str]:
    try:
        return [argument.format(**params) for argument in template]
    except KeyError as error:
        raise BenchmarkFailure(f"template {template} uses an unknown placeholder {error}") from error


def as_step(step: list[str] | Step) -> Step:
    return step if isinstance(step, Step) else Step(command=list(step))


def all_commands(workload: Workload, contenders: list[Contender]) -> list[list[str]]:
    """Every command template the run uses: contenders, setup, variants, prepare and validate steps, probes."""
    steps = list(workload.setup) + [step for variant in workload.variants for step in variant.setup]
    for contender in contenders:
        steps += contender.prepare + contender.validate
    probes = workload.probes + [probe for variant in workload.variants for probe in variant.probes]
    return (
        [c.command for c in contenders]
        + [as_step(step).command for step in steps]
        + [command.command for probe in probes for command in probe.commands]
    )


def uses(placeholder: str, commands: list[list[str]]) -> bool:
    return any("{" + placeholder + "}" in argument for command in commands for argument in command)


def size_plan(sizes: int | list[int], runs: int | list[int]) -> list[tuple[int, int]]:
    """Pairs (size, runs): one runs count for every size, or one per size in order."""
    sizes = [sizes] if isinstance(sizes, int) else list(sizes)
    counts = [runs] if isinstance(runs, int) else list(runs)
    if len(counts) == 1:
        counts = counts * len(sizes)
    if not sizes or len(counts) != len(sizes):
        raise BenchmarkFailure("give --runs once, or once for every --size (paired in order)")
    return list(zip(sizes, counts))


def select(workload: Workload, invocation: Invocation) -> tuple[list[Variant | None], list[Contender]]:
    """The variants and contenders this invocation runs (`--variant`, `--only`, `--skip`)."""
    variants: list[Variant | None] = list(workload.variants) or [None]
    if invocation.variants:
        known = [variant.name for variant in workload.variants]
        unknown = [name for name in invocation.variants if name not in known]
        if unknown:
            raise BenchmarkFailure(f"workload {workload.name} has no variant {unknown}; it has {known}")
        variants = [variant for variant in workload.variants if variant.name in invocation.variants]
    contenders = [
        contender
        for contender in workload.contenders
        if (not invocation.only or any(text in contender.name for text in invocation.only))
        and not any(text in contender.name for text in invocation.skip)
    ]
    if not contenders:
        raise BenchmarkFailure(f"--only and --skip leave no contender of {workload.name}")
    return variants, contenders


def workload_params(workload: Workload, overrides: dict[str, str]) -> dict[str, str]:
    """The workload's params with `--set` applied; counts written 50k or 10M become integers."""
    unknown = [name for name in overrides if name not in workload.params]
    if unknown:
        raise BenchmarkFailure(f"workload {workload.name} has no param {unknown}; it has {sorted(workload.params)}")
    params = dict(workload.params, **overrides)
    for name, value in params.items():
        if re.fullmatch(r"\d+(\.\d+)?[kKmMgG]", value):
            params[name] = str(parse_count(value))
    return params


# The placeholders a part under a memory limit fills in (see declarations.py).
MEMORY_PLACEHOLDERS = ("memory_limit_bytes", "memory_limit_mib", "memory_budget_mib")
# A contender's own budget (`{memory_budget_mib}`) as a share of the cgroup's limit: the rest is for what
# the budget does not count (an interpreter and its libraries, the page cache of the input).
MEMORY_BUDGET_SHARE = 0.8


def part_run_timeout(workload: Workload, variant: Variant | None) -> float | None:
    """The time limit of each of a part's measured runs: its variant's own, else the workload's (None: none)."""
    if variant is not None and variant.run_timeout_s is not None:
        return variant.run_timeout_s
    return workload.run_timeout_s


# How the reason of a run stopped by its time limit ends (`failure_reason` finds it by these words).
TIME_LIMIT_WORDS = "(the run's time limit)"


def time_limit_reason(timeout_s: float) -> str:
    """Why a run stopped by its time limit failed: not an OOM kill, though it also ends with SIGKILL."""
    return f"stopped after {timeout_s:g} s without finishing {TIME_LIMIT_WORDS}"


def part_memory_limit(variant: Variant | None, invocation_limit: int | None) -> int | None:
    """The limit a part's runs are under: its variant's own, else the invocation's (None: no limit)."""
    if variant is not None and variant.memory_limit is not None:
        return parse_size(variant.memory_limit)
    return invocation_limit


def memory_params(limit_bytes: int | None) -> dict[str, str]:
    """The memory placeholders of a part under `limit_bytes`; none without a limit, so a template that
    needs them fails instead of running without the budget it was written for."""
    if not limit_bytes:
        return {}
    mib = limit_bytes // 2**20
    return {
        "memory_limit_bytes": str(limit_bytes),
        "memory_limit_mib": str(mib),
        "memory_budget_mib": str(int(mib * MEMORY_BUDGET_SHARE)),
    }


def check_memory_placeholders(
    commands: list[list[str]], variants: list[Variant | None], invocation_limit: int | None
) -> None:
    """Fails before any setup when a template needs a memory limit that some part would run without."""
    needed = [name for name in MEMORY_PLACEHOLDERS if uses(name, commands)]
    unlimited = [variant.name if variant else "(the only part)" for variant in variants
                 if part_memory_limit(variant, invocation_limit) is None]
    if needed and unlimited:
        raise BenchmarkFailure(
            f"templates use {', '.join('{' + name + '}' for name in needed)}, but {', '.join(unlimited)} would run "
            "without a memory limit; give --memory-limit"
        )


# ---------------------------------------------------------------------------
# Running a workload


def run_workload(workload: Workload, invocation: Invocation) -> dict[str, Any]:
    """Run every part of the workload, write the report after each (the last one complete), return it.

    A contender that fails stops the benchmark (unless it `may_fail`): the parts
    finished before it stay in a report marked incomplete; a failure in the first
    part writes no report.
    """
    problems = check_workload(workload)
    if problems:
        raise BenchmarkFailure("; ".join(problems))
    plan = size_plan(invocation.sizes, invocation.runs)
    for size, count in plan:
        if count < 1 or size < 1:
            raise BenchmarkFailure("need a positive size and at least one run")
    variants, contenders = select(workload, invocation)
    params = workload_params(workload, invocation.params)
    base_dir = invocation.base_dir
    if base_dir.resolve().is_relative_to(REPO_ROOT) and (REPO_ROOT / ".git").exists():
        raise BenchmarkFailure(f"data directory {base_dir} is inside the repository; use a scratch directory")
    created_base_dir = not base_dir.exists()
    base_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    parts: list[dict[str, Any]] = []
    part_plan = [(size, count, variant) for size, count in plan for variant in variants]
    try:
        check_disk_space(workload, contenders, variants, plan, base_dir)
        commands = all_commands(workload, contenders)
        check_memory_placeholders(commands, variants, invocation.memory_limit_bytes)
        base_params = {
            **params,
            "dir": "",
            "records": "0",
            "bytes": "0",
            "spillway": "spillway",
            "python": sys.executable,
            "bench": str(Path(__file__).resolve().parent),
        }
        spillway_meta = None
        if uses("spillway", commands):
            spillway_path = install.resolve_spillway(invocation.spillway)
            spillway_meta = install.spillway_info(spillway_path)
            base_params["spillway"] = spillway_meta["path"]
            if spillway_meta["profile"] == "debug":
                install.warn_debug_build(spillway_meta["path"])
        install.ensure_requirements(install.HARNESS_REQUIREMENTS)
        builds = []
        features = {feature for contender in contenders for feature in contender.features}
        for spec in workload.builds:
            if uses(spec.name, commands):
                built = install.build(spec, invocation.target_dir, features)
                builds.append(built)
                base_params[spec.name] = built["path"]
        install.ensure_requirements(workload.requires)
        for contender in contenders:
            install.ensure_requirements(contender.requires)

        cold_contenders = [c.name for c in contenders if (workload.cold if c.cold is None else c.cold)]
        cache_droppable = invocation.drop_cache and drop_page_cache()
        machine = machine_info(base_dir)
        memory_limit = invocation.memory_limit_bytes
        report = {
            "schema": reports.SCHEMA,
            "workload": workload.name,
            "title": workload.title or f"Benchmark: {workload.name}",
            "description": workload.description,
            "notes": workload.notes,
            "scale_note": workload.scale_note,
            "note": invocation.note,
            "page_command": workload.page_command,
            "reproduce": invocation.reproduce or default_reproduce(workload, invocation),
            "invocation": {
                "sizes": [size for size, _ in plan],
                "runs": [count for _, count in plan],
                "size_unit": workload.size_unit,
                "variants": [variant.name for variant in variants if variant],
                "contenders_left_out": [c.name for c in workload.contenders if c not in contenders],
                "params": params,
                "python": sys.executable,
            },
            "cache": "kept" if not cold_contenders else "cold" if cache_droppable else "warm",
            "cold_contenders": cold_contenders,
            "cache_droppable": cache_droppable,
            "memory_limit_bytes": memory_limit,
            "run_timeout_s": workload.run_timeout_s,
            "order": "alternating: every round runs each contender once, in the declared order",
            "machine": machine,
            "source": source_info(),
            "spillway": spillway_meta,
            "builds": builds,
            "metrics": [
                {"name": m.name, "label": m.label, "better": m.better, "scale": m.scale, "digits": m.digits}
                for m in workload.summarized_metrics()
            ],
            "tables": [
                {"title": t.title, "metrics": t.metrics, "group": t.group, "text": t.text, "chart": t.chart}
                for t in workload.all_tables()
            ],
            "probe_tables": probe_tables(workload, variants),
            "line_chart": asdict(workload.line_chart) if workload.line_chart else None,
            "parts": parts,
            "parts_planned": len(part_plan),
            "complete": False,
        }
        print_header(workload, report, plan, base_dir)
        if invocation.drop_cache and not cache_droppable:
            print("warning: cannot drop the page cache here (not root?); runs are cache-WARM", file=sys.stderr)
        cgroup = create_memory_cgroup(memory_limit) if memory_limit else None
        try:
            for index, (size, count, variant) in enumerate(part_plan):
                parts.append(
                    run_limited_part(
                        workload, variant, contenders, size, count, base_dir, base_params, cache_droppable,
                        memory_limit, cgroup, index,
                    )
                )
                report["complete"] = len(parts) == len(part_plan)
                report["generated_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
                report["benchmark_wall_s"] = time.perf_counter() - started
                # After every part, so a long benchmark cut short keeps what it measured (marked incomplete).
                reports.write_reports(report, invocation.out_dir, page_commands())
        finally:
            if cgroup is not None:
                remove_memory_cgroup(cgroup)
    finally:
        if created_base_dir and base_dir.exists() and not any(base_dir.iterdir()):
            base_dir.rmdir()
    return report


def page_commands() -> dict[str, str]:
    return {workload.name: workload.page_command for workload in WORKLOADS.values()}


def default_reproduce(workload: Workload, invocation: Invocation) -> str:
    """The command line of an invocation made from Python (the command line gives its own, as typed)."""
    show = format_size_arg if workload.size_unit == "bytes" else format_count
    words = ["python3", "bench/run.py", workload.name]
    for size, count in size_plan(invocation.sizes, invocation.runs):
        words += ["--size", show(size), "--runs", str(count)]
    return " ".join(words)


def check_disk_space(
    workload: Workload, contenders: list[Contender], variants: list[Variant | None], plan: list[tuple[int, int]],
    base_dir: Path,
) -> None:
    largest = max(part_numbers(workload, variant, size)[1] or 0 for size, _ in plan for variant in variants)
    if workload.scratch_bytes_per_data_byte is not None:
        needed = int(workload.scratch_bytes_per_data_byte * largest) + 2**30
    else:
        needed = sum(1 for contender in contenders if contender.writes) * largest + 2**30
    if shutil.disk_usage(base_dir).free < needed:
        raise BenchmarkFailure(f"{base_dir} has less than {format_bytes(needed)} free")


def part_numbers(workload: Workload, variant: Variant | None, size: int) -> tuple[int, int | None]:
    """(records, bytes) of a part: bytes is None for a workload sized in records without a record size."""
    record_bytes = (variant.record_bytes if variant and variant.record_bytes else None) or workload.record_bytes
    if workload.size_unit == "records":
        return size, size * record_bytes if record_bytes else None
    assert record_bytes
    records = size // record_bytes
    return records, records * record_bytes


def probe_tables(workload: Workload, variants: list[Variant | None]) -> list[dict[str, Any]]:
    """Every probe the run may use, once, with its columns (the report draws one table per probe)."""
    seen: dict[str, dict[str, Any]] = {}
    for probe in workload.probes + [p for variant in variants if variant for p in variant.probes]:
        seen.setdefault(probe.name, {
            "name": probe.name,
            "title": probe.title,
            "text": probe.text,
            "columns": [{"header": c.header, "field": c.field, "digits": c.digits, "suffix": c.suffix}
                        for c in probe.columns],
        })
    return list(seen.values())


def run_limited_part(
    workload: Workload,
    variant: Variant | None,
    contenders: list[Contender],
    size: int,
    runs: int,
    base_dir: Path,
    base_params: dict[str, str],
    cache_droppable: bool,
    invocation_limit: int | None,
    invocation_cgroup: Path | None,
    index: int,
) -> dict[str, Any]:
    """A part in the invocation's cgroup, or, when its variant has a memory limit of its own, in a cgroup
    of that size created for the part and removed after it (also when the part fails)."""
    limit = part_memory_limit(variant, invocation_limit)
    own = variant is not None and variant.memory_limit is not None
    assert limit is not None or not own
    cgroup = create_memory_cgroup(limit, f"part-{index + 1}") if own else invocation_cgroup
    try:
        return run_part(workload, variant, contenders, size, runs, base_dir, base_params, cache_droppable,
                        cgroup, limit)
    finally:
        if own:
            remove_memory_cgroup(cgroup)


def run_part(
    workload: Workload,
    variant: Variant | None,
    contenders: list[Contender],
    size: int,
    runs: int,
    base_dir: Path,
    base_params: dict[str, str],
    cache_droppable: bool,
    cgroup: Path | None,
    memory_limit_bytes: int | None = None,
) -> dict[str, Any]:
    """One size and variant: setup, `runs` rounds of every contender, the probes; its data directory is deleted after.

    Its measured runs go into `cgroup`, whose limit is `memory_limit_bytes` (the memory placeholders'
    value); untimed steps run outside it.
    """
    records, data_bytes = part_numbers(workload, variant, size)
    if records < 1:
        raise BenchmarkFailure(f"a size of {size} makes no record")
    size_text = format_bytes(data_bytes or 0) if workload.size_unit == "bytes" else f"{records:,} records"
    label = f"{variant.name}, {size_text}" if variant else size_text
    prefix = f"{workload.name}-" + (f"{variant.name.replace(':', '-')}-" if variant else "")
    data_dir = Path(tempfile.mkdtemp(prefix=prefix, dir=base_dir))
    params = dict(base_params, dir=str(data_dir), records=str(records), bytes=str(data_bytes or 0))
    params.update(memory_params(memory_limit_bytes))
    if variant:
        params.update(variant.params)
    limited = f"; runs in a cgroup limit of {format_bytes(memory_limit_bytes)}" if memory_limit_bytes else ""
    run_timeout_s = part_run_timeout(workload, variant)
    if run_timeout_s is not None:
        limited += f"; every run stopped after {run_timeout_s:g} s"
    print(
        f"part       {label}: {records:,} records, {plural(runs, 'run')} per contender{limited}; data in {data_dir}",
        flush=True,
    )
    results: dict[str, dict[str, Any]] = {}
    setup_log: list[dict[str, Any]] = []
    probes: dict[str, list[dict[str, Any]]] = {}
    failed: dict[str, str] = {}
    timed_out: set[str] = set()
    loads: list[float] = []
    part_started = time.perf_counter()
    preexec = joiner(cgroup) if cgroup is not None else None
    try:
        steps = list(workload.setup) + (list(variant.setup) if variant else [])
        for index, step in enumerate(steps):
            setup_log.append(run_step(as_step(step), params, data_dir, f"setup-{index}", "setup step"))
        for contender in contenders:
            template = contender.command
            if not cache_droppable and contender.command_warm_cache:
                template = contender.command_warm_cache
            results[contender.name] = {
                "name": contender.name,
                "role": contender.role,
                "group": contender.group,
                "command": fill(template, params),
                "cold": workload.cold if contender.cold is None else contender.cold,
                "runs": [],
            }
        for round_index in range(runs):
            for contender in contenders:
                if contender.name in failed:
                    continue
                entry = results[contender.name]
                try:
                    run = run_contender(
                        contender, entry, params, data_dir, round_index, cache_droppable, cgroup, preexec,
                        run_timeout_s,
                    )
                except BenchmarkFailure as failure:
                    if not contender.may_fail:
                        raise
                    failed[contender.name] = failure_reason(str(failure))
                    if isinstance(failure, TimeLimitExceeded):
                        timed_out.add(contender.name)
                    print(f"[{round_index + 1}/{runs}] {contender.name} FAILED: {failed[contender.name]}", flush=True)
                    continue
                loads.append(run["load_average_1m"])
                entry["runs"].append(run)
                print(progress_line(workload, round_index, runs, entry, run, params), flush=True)
        part_probes = workload.probes + (variant.probes if variant else [])
        for probe in part_probes:
            probes[probe.name] = run_probe(probe, params, data_dir)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)

    numbers = {"records": records, "bytes": data_bytes}
    numbers.update({name: value for name, value in params.items() if re.fullmatch(r"-?\d+(\.\d+)?", value)})
    metrics = workload.summarized_metrics()
    for entry in results.values():
        entry["summary"] = analysis.summarize(metrics, entry["group"], entry["runs"], numbers)
    # A failed peer leaves the tables and ratios; it is listed with its reason.
    measured = {name: entry for name, entry in results.items() if name not in failed}
    agreements = workload.agreements + (variant.agreements if variant else [])
    checked = [analysis.check_agreement(agreement, measured, label) for agreement in agreements]
    comparisons = (variant.comparisons if variant else []) + workload.comparisons
    targets = (variant.targets if variant else []) + workload.targets
    target_checks: list[dict[str, Any]] = []
    for target in targets:
        if isinstance(target, ProbeTarget):
            target_checks += analysis.check_probe_target(target, probes)
        elif (check := analysis.check_target(target, workload, measured)) is not None:
            target_checks.append(check)
    compared = [c for c in (analysis.compare(comparison, workload, measured) for comparison in comparisons) if c]
    return {
        "label": label,
        "variant": None
        if variant is None
        else {"name": variant.name, "description": variant.description, "params": variant.params},
        "size": size,
        "data_dir": str(data_dir),
        "data_bytes": data_bytes,
        "records": records,
        "runs_per_contender": runs,
        "memory_limit_bytes": memory_limit_bytes,
        "run_timeout_s": run_timeout_s,
        "captured": {name: params[name] for step in steps for name in as_step(step).capture},
        "setup": setup_log,
        "part_wall_s": time.perf_counter() - part_started,
        "load_average_1m": {"min": min(loads), "max": max(loads)} if loads else None,
        "contenders": list(measured.values()),
        "comparisons": compared,
        "targets": target_checks,
        "agreements": checked,
        "probes": probes,
        "failed": [
            {
                "name": name,
                "role": results[name]["role"],
                "reason": reason,
                "timed_out": name in timed_out,
                "comparisons": [
                    {"label": c.label, "contender": c.contender, "peer": c.peer, "target": c.target}
                    for c in comparisons
                    if name == c.contender or name == c.peer or (isinstance(c.peer, list) and name in c.peer)
                ],
            }
            for name, reason in failed.items()
        ],
        "disk_bound": analysis.disk_bound(workload.disk_bound, measured, data_bytes or 0),
    }


class TimeLimitExceeded(BenchmarkFailure):
    """A measured run was still going at its time limit and was stopped."""


def failure_reason(message: str) -> str:
    """The line of a contender's failure that says why: the engine's error, else the first line
    with the last line the contender printed to standard error."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if lines and TIME_LIMIT_WORDS in lines[0]:
        return lines[0][:300]
    for line in lines:
        if "Error" in line or "out of memory" in line or "killed" in line:
            return line[:300]
    if not lines:
        return "failed"
    stderr = message.split("\nstderr: ", 1)[1].split("\nstdout: ", 1)[0] if "\nstderr: " in message else ""
    last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "")
    return (lines[0] + (f"; its last words: {last}" if last else "; it printed nothing on standard error"))[:300]


def printed(log_prefix: Path) -> str:
    return "".join(log_prefix.with_suffix(suffix).read_text(errors="replace") for suffix in (".stdout", ".stderr"))


def run_step(step: Step, params: dict[str, str], data_dir: Path, slug: str, what: str) -> dict[str, Any]:
    """An untimed command (setup, prepare, validate): checked, and its captures added to params."""
    argv = fill(step.command, params)
    print(f"{what}: {' '.join(argv)}", flush=True)
    log_prefix = data_dir / slug
    outcome = run_once(argv, data_dir, log_prefix)
    output = printed(log_prefix)
    problem = None
    if outcome["exit_code"] not in step.exit_codes:
        problem = f"exit code {outcome['exit_code']}"
    elif step.expect_output:
        pattern = step.expect_output.format(**params)
        if not re.search(pattern, output):
            problem = f"exit code {outcome['exit_code']} without printing /{pattern}/"
    if problem is None:
        for name, pattern in step.capture.items():
            match = re.search(pattern, output)
            if not match:
                problem = f"no /{pattern}/ in its output to capture {{{name}}}"
                break
            params[name] = match.group(1)
    if problem:
        raise BenchmarkFailure(
            f"{what} failed ({problem}): {' '.join(argv)}\n"
            f"stderr: {outcome['stderr_tail']}\nstdout: {outcome['stdout_tail']}"
        )
    return {"command": argv, "wall_s": outcome["wall_s"], "exit_code": outcome["exit_code"]}


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def directory_bytes(path: Path) -> int:
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())


def json_lines(text: str) -> list[dict[str, Any]]:
    lines = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                lines.append(json.loads(line))
            except ValueError:
                continue
    return lines


def run_contender(
    contender: Contender,
    entry: dict[str, Any],
    params: dict[str, str],
    data_dir: Path,
    round_index: int,
    cache_droppable: bool,
    cgroup: Path | None,
    preexec: Callable[[], None] | None,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """One measured run: prepare, fresh output, synced disk, dropped cache (if cold), the command, validate, clean up.

    A command still running after `timeout_s` seconds is killed (its process group, and whatever is left in
    its cgroup) and fails with `TimeLimitExceeded`.
    """
    slug = re.sub(r"[^a-z0-9]+", "-", contender.name.lower()).strip("-")
    local = dict(params)
    for index, step in enumerate(contender.prepare):
        run_step(step, local, data_dir, f"{slug}-{round_index}-prepare-{index}", f"prepare {contender.name}")
    output = Path(contender.writes.format(**local)) if contender.writes else None
    if output is not None and output.exists():
        output.unlink()
    argv = entry["command"]
    # Sync even when the cache is not dropped, so the previous run's dirty
    # pages (and freed blocks) are not written back during this one.
    if cache_droppable and entry["cold"]:
        cold = drop_page_cache()
    else:
        os.sync()
        cold = False
    if cgroup is not None:
        reset_cgroup_peak(cgroup)
    log_prefix = data_dir / f"{slug}-{round_index}"
    load_average_1m = os.getloadavg()[0]
    run = run_once(argv, data_dir, log_prefix, preexec, timeout_s, cgroup)
    run["round"] = round_index
    run["load_average_1m"] = load_average_1m
    run["cache"] = "cold" if cold else "warm"
    if cgroup is not None:
        run["cgroup_peak_bytes"] = cgroup_peak_bytes(cgroup)
    problem = None
    if run.get("timed_out"):
        assert timeout_s is not None
        raise TimeLimitExceeded(
            f"{contender.name} {time_limit_reason(timeout_s)} in round {round_index + 1}\n"
            f"command: {' '.join(argv)}\nstderr: {run['stderr_tail']}\nstdout: {run['stdout_tail']}"
        )
    if run["exit_code"] not in contender.exit_codes:
        problem = f"failed with exit code {run['exit_code']}"
        if run["exit_code"] in (-9, 137) and cgroup is not None:
            # SIGKILL, seen by GNU time (128 + 9) or as our own child's death: under a limit, the OOM killer.
            limit = int(local.get("memory_limit_bytes", "0"))
            under = f"the {format_bytes(limit)} cgroup limit" if limit else "the cgroup's limit"
            problem += f": killed (out of memory under {under}?)"
    elif contender.expect_output:
        pattern = contender.expect_output.format(**local)
        if not re.search(pattern, printed(log_prefix)):
            problem = f"exited {run['exit_code']} without printing /{pattern}/"
    if problem:
        raise BenchmarkFailure(
            f"{contender.name} {problem} in round {round_index + 1}\n"
            f"command: {' '.join(argv)}\nstderr: {run['stderr_tail']}\nstdout: {run['stdout_tail']}"
        )
    if output is not None:
        size = output.stat().st_size if output.exists() else -1
        expected = int(local["bytes"])
        if contender.output_size_exact and size != expected:
            raise BenchmarkFailure(f"{contender.name} wrote {size} bytes to {output}, expected {expected}")
        if not contender.output_size_exact and size <= 0:
            raise BenchmarkFailure(f"{contender.name} wrote no output to {output}")
        run["output_bytes"] = size
    if contender.output_dir:
        run["output_dir_bytes"] = directory_bytes(Path(contender.output_dir.format(**local)))
    if contender.result:
        stdout = log_prefix.with_suffix(".stdout").read_text(errors="replace")
        try:
            run["result"] = json.loads(stdout) if contender.result == "json" else json_lines(stdout)[-1]
        except (ValueError, IndexError) as error:
            raise BenchmarkFailure(
                f"{contender.name} printed no JSON result in round {round_index + 1}: {error}\n"
                f"command: {' '.join(argv)}\nstdout: {run['stdout_tail']}\nstderr: {run['stderr_tail']}"
            ) from error
    validation = []
    for index, step in enumerate(contender.validate):
        try:
            validation.append(
                run_step(step, local, data_dir, f"{slug}-{round_index}-validate-{index}", f"validate {contender.name}")
            )
        except BenchmarkFailure as failure:
            raise BenchmarkFailure(
                f"OUTPUT DID NOT VALIDATE: {contender.name}, round {round_index + 1}\n{failure}"
            ) from failure
    if validation:
        run["validation"] = validation
    for path in contender.cleanup:
        remove(Path(path.format(**local)))
    return run


def run_probe(probe: Probe, params: dict[str, str], data_dir: Path) -> list[dict[str, Any]]:
    """A probe's commands, untimed: the JSON lines they print that match each command's `where`."""
    rows: list[dict[str, Any]] = []
    slug = re.sub(r"[^a-z0-9]+", "-", probe.name.lower()).strip("-")
    for index, command in enumerate(probe.commands):
        argv = fill(command.command, params)
        print(f"probe {probe.name}: {' '.join(argv)}", flush=True)
        log_prefix = data_dir / f"probe-{slug}-{index}"
        outcome = run_once(argv, data_dir, log_prefix)
        lines = json_lines(log_prefix.with_suffix(".stdout").read_text(errors="replace"))
        if outcome["exit_code"] != 0 or not lines:
            raise BenchmarkFailure(
                f"probe {probe.name} failed (exit code {outcome['exit_code']}): {' '.join(argv)}\n"
                f"stderr: {outcome['stderr_tail']}"
            )
        rows += [
            line for line in lines if all(analysis.lookup(line, key) == value for key, value in command.where.items())
        ]
    return rows


# ---------------------------------------------------------------------------
# Console


def print_header(workload: Workload, report: dict[str, Any], plan: list[tuple[int, int]], base_dir: Path) -> None:
    machine = report["machine"]
    show = format_bytes if workload.size_unit == "bytes" else (lambda size: f"{size:,} records")
    sizes = ", ".join(f"{show(size)} x {plural(count, 'run')}" for size, count in plan)
    variants = ", ".join(report["invocation"]["variants"])
    print(f"workload   {workload.name}: {sizes}" + (f"; variants {variants}" if variants else ""))
    print(
        f"machine    {machine['cpu_model']}, {machine['cpu_cores']} cores, "
        f"{format_bytes(machine['memory_bytes'])} RAM, kernel {machine['kernel']}, load {machine['load_average']}"
    )
    print(
        f"disk       {machine['disk_device']} ({machine['disk_fstype']}, {machine['disk_mount_options']}), "
        f"{format_bytes(machine['disk_free_bytes'])} free; data under {base_dir}"
    )
    print(f"source     commit {report['source']['described']}")
    spillway_meta = report["spillway"]
    if spillway_meta:
        print(
            f"spillway   {spillway_meta['version']}, {spillway_meta['profile']} build, "
            f"{spillway_meta['path']} (modified {spillway_meta['binary_modified']})"
        )
    for built in report["builds"]:
        print(f"built      {built['name']}: {built['path']} ({built['profile']}, {built['build_s']:.0f} s)")
    if report["cache"] == "kept":
        print("cache      kept (the workload's contenders start with what the page cache holds)")
    elif report["cache"] == "cold":
        print(f"cache      dropped before the runs of {len(report['cold_contenders'])} contender(s)")
    else:
        print("cache      NOT dropped: the kernel does not allow it; runs are cache-warm")
    if report["memory_limit_bytes"]:
        print(f"memory     every run in a cgroup v1 memory limit of {format_bytes(report['memory_limit_bytes'])}")
    if report["run_timeout_s"] is not None:
        print(f"time limit every run stopped after {report['run_timeout_s']:g} s without finishing")
    print(flush=True)


def progress_line(
    workload: Workload, round_index: int, runs: int, entry: dict[str, Any], run: dict[str, Any],
    params: dict[str, str],
) -> str:
    """The run's figures as they come: its table's first metrics, time, RSS, CPU, cache."""
    numbers = {"records": int(params["records"]), "bytes": int(params["bytes"])}
    shown = []
    table = next((t for t in workload.all_tables() if t.group in (None, entry["group"])), None)
    for name in (table.metrics[:2] if table else []):
        metric = workload.metric(name)
        value = analysis.metric_value(metric, run, numbers)
        if value is not None and name not in ("wall_s", "peak_rss_mib", "cpu_s"):
            shown.append(f"{value * metric.scale:,.{metric.digits}f} {metric.label}")
    cgroup = f"  cgroup peak {run['cgroup_peak_bytes'] / 2**20:.0f} MiB" if "cgroup_peak_bytes" in run else ""
    return (
        f"[{round_index + 1}/{runs}] {entry['name']:<28} {run['wall_s']:8.3f} s  {'  '.join(shown)}  "
        f"RSS {run['peak_rss_kib'] / 1024:.1f} MiB  cpu {run['cpu_s']:.2f} s  ({run['cache']}){cgroup}"
    )


# ---------------------------------------------------------------------------
# Command line


def default_data_dir() -> Path:
    """$SPILLWAY_BENCH_DIR, else .bench-scratch next to the repository (same disk, outside git)."""
    from_env = os.environ.get("SPILLWAY_BENCH_DIR")
    return Path(from_env) if from_env else REPO_ROOT.parent / ".bench-scratch"


def parse_setting(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"--set {text!r}: use NAME=VALUE")
    return name, value


def parser() -> argparse.ArgumentParser:
    parsed = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parsed.add_argument("workload", nargs="?", help="workload name (see --list)")
    parsed.add_argument("--list", action="store_true", help="list the workloads (and their page commands) and exit")
    parsed.add_argument(
        "--size", action="append",
        help="data size (binary bytes, e.g. 4G) or, for workloads sized in records, a record count (e.g. 10M); "
             "repeat for several sizes, each a part of the report (default: the workload's)",
    )
    parsed.add_argument(
        "--runs", type=int, action="append",
        help="runs per contender; once for every size, or once per --size in the same order (default: the workload's)",
    )
    parsed.add_argument("--variant", action="append", default=[], help="run only this variant (repeatable)")
    parsed.add_argument("--only", action="append", default=[],
                        help="run only contenders whose name contains this (repeatable)")
    parsed.add_argument("--skip", action="append", default=[],
                        help="leave out contenders whose name contains this (repeatable; e.g. rocksdb)")
    parsed.add_argument("--set", type=parse_setting, action="append", default=[], metavar="NAME=VALUE",
                        help="a workload param (see --list); counts may be written 50k or 10M")
    parsed.add_argument("--dir", type=Path, default=None,
                        help="scratch data directory (default $SPILLWAY_BENCH_DIR or ../.bench-scratch)")
    parsed.add_argument("--out", type=Path, default=DEFAULT_OUT_DIR, help="report directory (default docs/benchmarks)")
    parsed.add_argument("--spillway", default=None, help="spillway binary (default target/release/spillway)")
    parsed.add_argument("--memory-limit", default=None,
                        help="run every contender in a cgroup v1 memory limit (default: the workload's; 'none')")
    parsed.add_argument("--warm", action="store_true", help="do not drop the page cache between runs")
    parsed.add_argument("--note", default="", help="a sentence for the page (how quiet the machine was, say)")
    parsed.add_argument("--target-dir", type=Path, default=install.DEFAULT_DRIVER_TARGET_DIR,
                        help=f"where drivers are built (default {install.DEFAULT_DRIVER_TARGET_DIR})")
    return parsed


def list_workloads() -> None:
    for listed in WORKLOADS.values():
        print(f"{listed.name:<13} {listed.title or listed.description.split('. ')[0].rstrip('.') + '.'}")
        if listed.variants:
            print(f"{'':<13} variants: {', '.join(variant.name for variant in listed.variants)}")
        if listed.params:
            print(f"{'':<13} params: {', '.join(f'{k}={v}' for k, v in listed.params.items())}")
        if listed.page_command:
            print(f"{'':<13} page: {listed.page_command}")


def main(argv: list[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(words)
    if args.list or not args.workload:
        list_workloads()
        return 0 if args.list else 2
    if args.workload not in WORKLOADS:
        print(f"unknown workload {args.workload!r}; known: {', '.join(WORKLOADS)}", file=sys.stderr)
        return 2
    workload = WORKLOADS[args.workload]
    try:
        parse = parse_size if workload.size_unit == "bytes" else parse_count
        sizes = [parse(text) for text in (args.size or [workload.default_size])]
        limit_text = args.memory_limit or workload.memory_limit
        memory_limit = None if not limit_text or limit_text == "none" else parse_size(limit_text)
        invocation = Invocation(
            sizes=sizes,
            runs=args.runs or [workload.default_runs],
            base_dir=args.dir or default_data_dir(),
            out_dir=args.out,
            spillway=args.spillway,
            memory_limit_bytes=memory_limit,
            drop_cache=not args.warm,
            variants=args.variant,
            only=args.only,
            skip=args.skip,
            params=dict(args.set),
            target_dir=args.target_dir,
            reproduce=shlex.join(["python3", "bench/run.py", *words]),
            note=args.note,
        )
        size_plan(invocation.sizes, invocation.runs)
    except (BenchmarkFailure, argparse.ArgumentTypeError) as failure:
        print(f"error: {failure}", file=sys.stderr)
        return 2
    try:
        run_workload(workload, invocation)
    except BenchmarkFailure as failure:
        print(f"\nBENCHMARK FAILED: {failure}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
