"""The vocabulary of benchmark workloads: what a workload declares, as data.

A workload (see `bench/workloads/`) is a list of contenders (Spillway and its
peers), each a command-line template run as one process per measured run, plus
what to make of their runs: metrics (numbers read from the harness's
measurement of the process or from the JSON the process printed), tables of
those metrics, comparisons and targets, agreements that every output must meet,
probes (untimed runs whose JSON lines are reported as rows) and the binaries to
build first. `bench/run.py` runs every workload the same way and
`bench/report.py` writes every report the same way, so adding an engine's
benchmark is adding a workload here.

Command templates are argument lists; these placeholders are filled in:

    {spillway}  path of the spillway binary (only resolved when a template uses it)
    {dir}       the part's scratch data directory
    {records}   records in the part: the size over the record size, or the size itself
                for workloads sized in records
    {bytes}     records * record size (when the workload has a record size)
    {python}    the Python interpreter running the harness (pip requirements go into it)
    {bench}     this directory (for driver scripts such as sort_peers.py)
    {NAME}      the path of the binary a `CargoBuild` or `CxxBuild` named NAME built

and, in a part that runs under a memory limit (the variant's `memory_limit`, else
`--memory-limit` or the workload's), so that a contender can set its own budget
below the limit it runs under (templates cannot do arithmetic):

    {memory_limit_bytes}  the cgroup's limit in bytes
    {memory_limit_mib}    the same in MiB (rounded down)
    {memory_budget_mib}   80% of it in MiB (rounded down): room for what a budget
                          does not count (the interpreter, libraries, page cache)

A workload whose templates use them, run where some part has no limit, fails
before any setup, rather than run without the budget it was written for.

plus the workload's `params` (overridable with `--set NAME=VALUE`), a variant's
`params`, and whatever a setup or prepare `Step` captured from its output.
"""

from __future__ import annotations

from argparse import ArgumentTypeError
from dataclasses import dataclass, field
from typing import Any

from units import parse_size

RECORD_BYTES = 100


@dataclass
class Requirement:
    """An executable, Python module or file a contender or build needs, and the registry package that provides it.

    `source` is "apt" (Debian package, installed with apt-get), "pip" (PyPI,
    installed into the running interpreter) or "cargo" (crates.io, `cargo install`).
    A pip package that installs no executable names the `module` to import; a
    package of headers names a `path` it installs.
    """

    executable: str | None
    source: str
    package: str
    module: str | None = None
    path: str | None = None


@dataclass
class Step:
    """An untimed command: a setup step, a contender's preparation, or a validation.

    It must exit with a code in `exit_codes` and, if `expect_output` is set, print
    something that regular expression (a template too) matches on standard output
    or standard error; otherwise the benchmark fails. `capture` maps a placeholder
    name to a regular expression with one group, searched in the step's output; the
    group's text becomes that placeholder for every later template (setup steps
    capture for the whole part, a contender's prepare steps for that contender).
    """

    command: list[str]
    expect_output: str | None = None
    exit_codes: list[int] = field(default_factory=lambda: [0])
    capture: dict[str, str] = field(default_factory=dict)


@dataclass
class Contender:
    """One engine (or tool) running one operation of a workload: one process per run.

    `role` is "spillway" for our own code and "peer" for everything else. `group`
    says which tables list it (see `Table`); `None` is the workload's only group.
    `writes` is the file the contender creates: it is removed before every run
    and its size must equal the data size after the run (any non-zero size with
    `output_size_exact=False`). `output_dir` is a directory whose size after the
    run is recorded (`output_dir_bytes`). A run succeeds when its exit code is in
    `exit_codes` and, if `expect_output` is set, that regular expression matches
    its standard output or error. `command_warm_cache` replaces `command` when the
    page cache cannot be dropped (for example a peer reading with O_DIRECT).

    `cold` (default: the workload's) drops the page cache before every run; a
    contender that must find what the previous one left in memory, or whose input
    is meant to stay cached, says `cold=False` (its runs still start after a sync).

    Around every run, untimed: `prepare` steps run before the page cache is
    dropped; `validate` steps run after it (a failing one stops the benchmark: an
    output that does not validate is a failed run); then the files and directories
    in `cleanup` are deleted. `result` says what the process prints on standard
    output: "json" (one JSON document, such as Spillway's `--json` report: a
    pipeline report's stage tables go into the Markdown report) or "json-line"
    (the last line that starts with "{"); it is kept with the run as `result`,
    where metrics and agreements read it. A contender that `may_fail` (one that
    can run out of memory within the budget) does not stop the benchmark when a
    run fails or does not validate: it is reported as failed, with the reason,
    and its comparisons have no ratio. `features` are the cargo features of its
    driver's build that it needs (see `CargoBuild.optional_features`).
    """

    name: str
    role: str
    command: list[str]
    group: str | None = None
    writes: str | None = None
    output_dir: str | None = None
    exit_codes: list[int] = field(default_factory=lambda: [0])
    expect_output: str | None = None
    command_warm_cache: list[str] | None = None
    requires: list[Requirement] = field(default_factory=list)
    prepare: list[Step] = field(default_factory=list)
    validate: list[Step] = field(default_factory=list)
    cleanup: list[str] = field(default_factory=list)
    output_size_exact: bool = True
    result: str | None = None
    may_fail: bool = False
    cold: bool | None = None
    features: list[str] = field(default_factory=list)


@dataclass
class Metric:
    """A number per run, summarized over the runs as median, min and max.

    `source` is an arithmetic expression (+ - * / and parentheses) over the
    run's fields: the harness's `wall_s`, `cpu_s`, `user_s`, `sys_s`,
    `peak_rss_kib`, `read_bytes`, `write_bytes`, `rchar`, `wchar`,
    `cgroup_peak_bytes`, `output_bytes`, `output_dir_bytes`, the process's
    `result` (`result.latency_ns.p99`, `result.queries[2].found`), then the
    part's `records` and `bytes` and numeric params. A list gives alternatives:
    the first whose fields all exist. A run lacking them has no value.

    `better` is "higher", "lower" or None (a fact with no better side): it picks
    the direction of targets and of "where Spillway loses". Reports show
    value * `scale` with `digits` decimals under `label`. A metric with `groups`
    is summarized only for the contenders of those groups.
    """

    name: str
    label: str
    source: str | list[str]
    better: str | None = "higher"
    scale: float = 1.0
    digits: int = 2
    groups: list[str] | None = None


@dataclass
class Table:
    """A table of the report: the contenders of `group` (all when None) that have any of `metrics`, one row each.

    Every cell is the median with the min-max of the runs. The first metric is
    the table's headline: the summary across parts and the chart show it (the
    chart unless `chart` is False).
    """

    title: str
    metrics: list[str]
    group: str | None = None
    text: str = ""
    chart: bool = True


@dataclass
class Comparison:
    """A ratio of medians: `metric` of `contender` over that of `peer`, from the same invocation.

    `peer` may list several contenders: the best of them by the metric's median
    (the highest when higher is better, else the lowest) is the peer. `metric`
    defaults to the workload's headline (the first table's first metric). A
    `target` is met by a ratio at least that high (or, for a metric where lower
    is better, at most that high); when the per-round ratios fall on both sides
    of it, the result is within the noise and the report says so.
    """

    label: str
    contender: str
    peer: str | list[str]
    metric: str | None = None
    target: float | None = None


@dataclass
class Target:
    """A bound on one contender's metric: its median at least `value` (higher is better) or at most."""

    label: str
    contender: str
    metric: str
    value: float


@dataclass
class Agreement:
    """Outputs that must be equal across every run of `contenders`, or the benchmark fails (RESULTS DISAGREE).

    `fields` are paths into a run (`result.groups`; `*` maps over a list:
    `result.queries.*.found`).
    """

    label: str
    contenders: list[str]
    fields: list[str]


@dataclass
class Column:
    """A column of a probe's table: `field` (a path into a row) shown with `digits` decimals and `suffix`."""

    header: str
    field: str
    digits: int = 2
    suffix: str = ""


@dataclass
class ProbeCommand:
    """One command of a probe; only its JSON lines whose fields equal `where` are kept."""

    command: list[str]
    where: dict[str, Any] = field(default_factory=dict)


@dataclass
class ProbeTarget:
    """A bound on a probe's rows whose fields equal `where`: `field` at least `value` (higher better) or at most."""

    label: str
    probe: str
    where: dict[str, Any]
    field: str
    value: float
    better: str = "lower"


@dataclass
class Probe:
    """Untimed commands run once per part after its rounds; every JSON line they print is a row of one table.

    For figures that do not depend on timing (the share of overflowed leaves of
    an index, for example): deterministic, so one run is the result.
    """

    name: str
    title: str
    commands: list[ProbeCommand]
    columns: list[Column]
    text: str = ""


@dataclass
class CargoBuild:
    """A binary built with cargo in release mode before the runs; `{name}` is its path.

    With a `manifest` (a workspace of its own under bench/, with its own
    Cargo.lock) it builds into the benchmark drivers' target directory, shared by
    every such driver (`--target-dir`, default /tmp/spillway-bench-target);
    with a `package` it builds that package of the main workspace into
    target/release. `rocksdb` compiles RocksDB as its own build would (see
    install.ROCKSDB_CXXFLAGS). `optional_features` are built only when a selected
    contender lists them in its `features` (otherwise `--no-default-features`).
    """

    name: str
    binary: str
    manifest: str | None = None
    package: str | None = None
    rocksdb: bool = False
    optional_features: list[str] = field(default_factory=list)
    requires: list[Requirement] = field(default_factory=list)


@dataclass
class CxxBuild:
    """A C++ driver compiled with g++ into the drivers' target directory; `{name}` is its path."""

    name: str
    source: str
    flags: list[str] = field(default_factory=lambda: ["-O2", "-std=c++17"])
    libraries: list[str] = field(default_factory=list)
    requires: list[Requirement] = field(default_factory=list)


@dataclass
class Variant:
    """One shape of a workload's data (uniform or skewed keys, a record size, a dataset).

    Every variant is run as its own part, at every size, in its own data directory:
    the workload's `setup`, then the variant's `setup`, then the rounds. `params`
    are extra placeholders for every template of the part; `record_bytes`
    replaces the workload's record size. `comparisons`, `targets` (bounds on a
    metric or on a probe's rows), `agreements` and `probes` apply to this
    variant's parts only, on top of the workload's.

    `memory_limit` (a size: "1G", "512M") puts every measured run of this
    variant's parts inside a cgroup v1 memory group of this size (page cache
    included), created for the part and removed after it; it replaces the
    invocation's limit for these parts. So one invocation can measure the same
    data under several limits, one variant each (see `LineChart`).

    `run_timeout_s` replaces the workload's time limit on each measured run
    for this variant's parts (None: the workload's).
    """

    name: str
    setup: list[list[str] | Step] = field(default_factory=list)
    description: str = ""
    params: dict[str, str] = field(default_factory=dict)
    record_bytes: int | None = None
    memory_limit: str | None = None
    run_timeout_s: float | None = None
    comparisons: list[Comparison] = field(default_factory=list)
    targets: list[Target | ProbeTarget] = field(default_factory=list)
    agreements: list[Agreement] = field(default_factory=list)
    probes: list[Probe] = field(default_factory=list)


@dataclass
class DiskBound:
    """The disk-bound limit of an operation that reads and writes its data `passes` times.

    `read` and `write` name the contenders that read and write the data size at
    the disk's speed (cold `dd` read, synced `dd` write). The data is read and
    written once when it fits in `memory_budget_bytes` and twice otherwise; the
    limit is passes * (median read time + median write time), and each contender
    in `contenders` reaches limit / its median time. `targets` (contender name ->
    fraction) apply to the parts whose data does not fit in memory.

    `read_write`, if set, names a contender that reads and writes the data size
    at the same time. Out of memory each pass of a 2-IO sort reads and writes at
    once, so 2 * its median time is a second, tighter limit (the "overlapped
    limit"): no 2-IO sort on this disk can beat it. In memory nothing can be
    written before everything is read, so only the first limit applies.
    """

    read: str
    write: str
    memory_budget_bytes: int
    contenders: list[str]
    targets: dict[str, float] = field(default_factory=dict)
    read_write: str | None = None


@dataclass
class LineChart:
    """A second chart of the report: one metric across the variants, one line per contender.

    For a workload whose variants are points on an axis (the same data under
    several memory limits, say), where bars per part would hide the trend.
    `x_values` maps a variant's name to its position on the x axis (variants
    not named are left out of this chart); `x_label` names that axis, unit
    included. `x_log2` draws the axis in powers of two (memory limits). Each
    point is the metric's median with min-max error bars; a contender that
    failed in a part is drawn as an x at that position in a "failed" band
    above the data, and its legend entry says where it failed.
    """

    metric: str
    x_label: str
    x_values: dict[str, float]
    x_log2: bool = False


# Summarized for every contender of every workload, declared or not: the harness measures them.
HARNESS_METRICS = [
    Metric("wall_s", "time s", "wall_s", better="lower"),
    Metric("cpu_s", "CPU s", "cpu_s", better="lower"),
    Metric("peak_rss_mib", "peak RSS MiB", "peak_rss_kib / 1024", better="lower", digits=1),
    Metric("cgroup_peak_mib", "cgroup peak MiB", "cgroup_peak_bytes / 1048576", better="lower", digits=0),
]


def file_metrics(unit: str = "MB/s") -> list[Metric]:
    """The metrics of a workload that moves its data size through files: time, throughput, CPU, memory, I/O."""
    scale, digits = (1e-3, 2) if unit == "GB/s" else (1.0, 0)
    return [
        Metric("throughput", unit, "bytes / wall_s / 1e6", scale=scale, digits=digits),
        *HARNESS_METRICS,
        Metric("read_per_data", "read / data", "read_bytes / bytes", better="lower"),
        Metric("written_per_data", "written / data", "write_bytes / bytes", better="lower"),
    ]


@dataclass
class Workload:
    """A named benchmark: one invocation of `bench/run.py NAME` makes its whole page.

    `setup` commands run once per part, untimed, in the data directory before the
    first round. Every round runs each contender once, in the declared order (a
    contender may read what an earlier one of the same round wrote); rounds
    alternate (A B A B), so a slow phase of the machine hits every contender.

    Size: with `size_unit` "bytes", `--size` is binary bytes and a part has
    size // record size records; with "records", `--size` counts records
    (decimal suffixes). `default_size` and `default_runs` apply without
    `--size` and `--runs`; `memory_limit` puts every measured run into a cgroup v1
    memory group of that size unless `--memory-limit` says otherwise; `cold`
    drops the page cache before every run (contenders may say otherwise).
    `run_timeout_s` stops a measured run still going after that many seconds
    (SIGKILL to its process group, and to whatever is left in its cgroup): it
    fails with "stopped after N s without finishing (the run's time limit)",
    which stops the benchmark unless the contender `may_fail` (an engine that
    thrashes at a tight memory limit instead of being killed). None: no limit.
    Untimed steps (setup, prepare, validate, probes) have none.

    Reports: `metrics` are summarized for every contender; `tables` lay them out
    (default: one table of every metric); `comparisons`, `targets` and
    `agreements` are checked on every part; `probes` add tables of rows;
    `disk_bound` adds the fraction of the disk's limit (file workloads);
    `line_chart` adds a chart of one metric across the variants.
    `requires` are the packages its setup steps need (a contender's own are
    its `requires`).
    `notes` are paragraphs copied into the report (method choices a reader must
    know); `page_command` is the exact command that makes the committed page in
    docs/benchmarks, and `scale_note` says where that command scales the
    workload down from what it was designed for.
    """

    name: str
    description: str
    contenders: list[Contender]
    comparisons: list[Comparison] = field(default_factory=list)
    title: str = ""
    setup: list[list[str] | Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    variants: list[Variant] = field(default_factory=list)
    metrics: list[Metric] = field(default_factory=file_metrics)
    tables: list[Table] = field(default_factory=list)
    targets: list[Target | ProbeTarget] = field(default_factory=list)
    agreements: list[Agreement] = field(default_factory=list)
    probes: list[Probe] = field(default_factory=list)
    builds: list[CargoBuild | CxxBuild] = field(default_factory=list)
    requires: list[Requirement] = field(default_factory=list)
    params: dict[str, str] = field(default_factory=dict)
    size_unit: str = "bytes"
    record_bytes: int | None = RECORD_BYTES
    default_size: str = "4G"
    default_runs: int = 3
    memory_limit: str | None = None
    run_timeout_s: float | None = None
    cold: bool = True
    disk_bound: DiskBound | None = None
    line_chart: LineChart | None = None
    scratch_bytes_per_data_byte: float | None = None
    page_command: str = ""
    scale_note: str = ""

    def all_tables(self) -> list[Table]:
        """The declared tables, or one table of every metric."""
        return self.tables or [Table(title="Results", metrics=[metric.name for metric in self.metrics])]

    def headline(self) -> str:
        """The metric comparisons use unless they name one: the first table's first metric."""
        return self.all_tables()[0].metrics[0]

    def summarized_metrics(self) -> list[Metric]:
        """The declared metrics, then those of the harness's that the workload does not declare."""
        declared = {metric.name for metric in self.metrics}
        return self.metrics + [metric for metric in HARNESS_METRICS if metric.name not in declared]

    def metric(self, name: str) -> Metric:
        for metric in self.summarized_metrics():
            if metric.name == name:
                return metric
        raise KeyError(f"workload {self.name}: no metric {name!r}")


def check_workload(workload: Workload) -> list[str]:
    """Everything a workload declares that names something it does not have; empty when consistent."""
    problems: list[str] = []
    names = [contender.name for contender in workload.contenders]
    if len(set(names)) != len(names):
        problems.append(f"contender names repeat: {sorted(n for n in names if names.count(n) > 1)}")
    known = set(names)
    metrics = {metric.name for metric in workload.summarized_metrics()}
    if len(metrics) != len(workload.summarized_metrics()):
        problems.append("metric names repeat")
    groups = {contender.group for contender in workload.contenders}
    for table in workload.all_tables():
        problems += [f"table {table.title!r}: unknown metric {m!r}" for m in table.metrics if m not in metrics]
        if table.group is not None and table.group not in groups:
            problems.append(f"table {table.title!r}: no contender is in group {table.group!r}")
    variants = workload.variants or [Variant(name="")]
    for variant in variants:
        for comparison in workload.comparisons + variant.comparisons:
            peers = comparison.peer if isinstance(comparison.peer, list) else [comparison.peer]
            for name in [comparison.contender, *peers]:
                if name not in known:
                    problems.append(f"comparison {comparison.label!r} names unknown contender {name!r}")
            if (comparison.metric or workload.headline()) not in metrics:
                problems.append(f"comparison {comparison.label!r}: unknown metric {comparison.metric!r}")
        probes = {probe.name for probe in workload.probes + variant.probes}
        for target in workload.targets + variant.targets:
            if isinstance(target, ProbeTarget):
                if target.probe not in probes:
                    problems.append(f"target {target.label!r} names unknown probe {target.probe!r}")
                continue
            if target.contender not in known:
                problems.append(f"target {target.label!r} names unknown contender {target.contender!r}")
            if target.metric not in metrics:
                problems.append(f"target {target.label!r}: unknown metric {target.metric!r}")
            elif workload.metric(target.metric).better is None:
                problems.append(f"target {target.label!r}: metric {target.metric!r} has no better side")
        for agreement in workload.agreements + variant.agreements:
            unknown = [name for name in agreement.contenders if name not in known]
            if unknown:
                problems.append(f"agreement {agreement.label!r} names unknown contenders {unknown}")
    if workload.disk_bound is not None:
        spec = workload.disk_bound
        unknown = [name for name in [spec.read, spec.write, *spec.contenders] if name not in known]
        if unknown:
            problems.append(f"disk_bound names unknown contenders {unknown}")
        if "wall_s" not in metrics:
            problems.append("disk_bound needs the wall_s metric")
    if workload.line_chart is not None:
        chart = workload.line_chart
        if chart.metric not in metrics:
            problems.append(f"line_chart: unknown metric {chart.metric!r}")
        unknown = sorted(set(chart.x_values) - {variant.name for variant in workload.variants})
        if unknown:
            problems.append(f"line_chart names unknown variants {unknown}")
        if chart.x_log2 and any(value <= 0 for value in chart.x_values.values()):
            problems.append("line_chart: a log2 axis needs positive x values")
    if workload.run_timeout_s is not None and not workload.run_timeout_s > 0:
        problems.append(f"run_timeout_s {workload.run_timeout_s!r}: give a positive number of seconds, or None")
    for variant in workload.variants:
        if variant.run_timeout_s is not None and not variant.run_timeout_s > 0:
            problems.append(f"variant {variant.name!r}: run_timeout_s {variant.run_timeout_s!r}: give a positive "
                            "number of seconds, or None")
        if variant.memory_limit is not None:
            try:
                parse_size(variant.memory_limit)
            except ArgumentTypeError:
                problems.append(f"variant {variant.name!r}: memory_limit {variant.memory_limit!r} is not a size (1G, 512M)")
    if workload.size_unit not in ("bytes", "records"):
        problems.append(f"size_unit {workload.size_unit!r}: use bytes or records")
    if workload.size_unit == "bytes" and not workload.record_bytes and not all(v.record_bytes for v in variants):
        problems.append("a workload sized in bytes needs a record size")
    builds = [build.name for build in workload.builds]
    if len(set(builds)) != len(builds):
        problems.append("build names repeat")
    for contender in workload.contenders:
        if contender.result not in (None, "json", "json-line"):
            problems.append(f"contender {contender.name!r}: result {contender.result!r}: use json or json-line")
    return [f"workload {workload.name}: {problem}" for problem in problems]
