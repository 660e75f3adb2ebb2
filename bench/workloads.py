"""Benchmark workloads, declared as data.

A workload is a list of contenders (Spillway and its peers), each a command-line
template, plus the pairs of contenders whose throughput ratio is the result.
`bench/run.py` runs every contender of a workload the same way, alternating
between them (A B A B ...), and reports medians and ratios.

Command templates are argument lists; these placeholders are filled in:

    {spillway}  path of the spillway binary (only resolved when a template uses it)
    {dir}       scratch data directory for this run of the benchmark
    {records}   data size in 100-byte records
    {bytes}     data size in bytes (records * 100)

Adding a workload: declare a `Workload` below and add it to `WORKLOADS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RECORD_BYTES = 100


@dataclass
class Requirement:
    """An executable a contender needs, and the registry package that provides it.

    `source` is "apt" (Debian package, installed with apt-get), "pip" (PyPI,
    installed into the running interpreter) or "cargo" (crates.io, `cargo install`).
    """

    executable: str
    source: str
    package: str


@dataclass
class Contender:
    """One engine (or tool) running one operation of a workload.

    `role` is "spillway" for our own binary and "peer" for everything else.
    `writes` is the file the contender creates: it is removed before every run
    (so each run writes a fresh file) and its size must equal the data size after
    the run. A run succeeds when its exit code is in `exit_codes` and, if
    `expect_output` is set, that regular expression (a template too) matches its
    standard output or standard error. `command_warm_cache` replaces `command` when
    the page cache cannot be dropped (for example a peer reading with O_DIRECT),
    so the run stays cold.
    """

    name: str
    role: str
    command: list[str]
    writes: str | None = None
    exit_codes: list[int] = field(default_factory=lambda: [0])
    expect_output: str | None = None
    command_warm_cache: list[str] | None = None
    requires: list[Requirement] = field(default_factory=list)


@dataclass
class Comparison:
    """A headline figure: throughput of `contender` over throughput of `peer`."""

    label: str
    contender: str
    peer: str
    target: float | None = None


@dataclass
class Workload:
    """A named benchmark.

    `setup` commands run once, untimed, in the data directory before the first
    round. Contenders run in the declared order within a round, so a contender
    may read what an earlier one of the same round wrote. `notes` are sentences
    copied into the Markdown report (method choices a reader must know).
    """

    name: str
    description: str
    contenders: list[Contender]
    comparisons: list[Comparison]
    setup: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


COREUTILS_DD = Requirement(executable="dd", source="apt", package="coreutils")

GENSORT = Workload(
    name="gensort",
    description=(
        "Generate gensort 1.5 binary records into a file and sync it to disk, then read "
        "the file back with the page cache dropped and validate it. dd moving the same "
        "number of bytes (synced writes, cold reads, 4 MiB blocks) is the disk's limit."
    ),
    contenders=[
        Contender(
            name="spillway gensort",
            role="spillway",
            command=["{spillway}", "gensort", "-c", "{records}", "{dir}/gen.dat"],
            writes="{dir}/gen.dat",
        ),
        Contender(
            name="dd write",
            role="peer",
            command=[
                "dd",
                "if=/dev/zero",
                "of={dir}/dd.dat",
                "bs=4M",
                "count={bytes}",
                "iflag=count_bytes",
                "conv=fdatasync",
            ],
            writes="{dir}/dd.dat",
            requires=[COREUTILS_DD],
        ),
        Contender(
            name="spillway valsort",
            role="spillway",
            command=["{spillway}", "valsort", "{dir}/gen.dat"],
            # gensort's output is unsorted: valsort reads it all, reports the
            # unordered records and exits 1, like valsort 1.5.
            exit_codes=[0, 1],
            expect_output=r"(?m)^Records: {records}$",
        ),
        Contender(
            name="dd read",
            role="peer",
            command=["dd", "if={dir}/gen.dat", "of=/dev/null", "bs=4M"],
            command_warm_cache=["dd", "if={dir}/gen.dat", "of=/dev/null", "bs=4M", "iflag=direct"],
            requires=[COREUTILS_DD],
        ),
    ],
    comparisons=[
        Comparison(label="generate (synced write)", contender="spillway gensort", peer="dd write", target=0.80),
        Comparison(label="validate (cold read)", contender="spillway valsort", peer="dd read"),
    ],
    notes=[
        (
            "Both writers sync their file before exiting (gensort at the end, dd with "
            "conv=fdatasync), and each run writes a fresh file: the previous one is deleted "
            "and the deletion synced before the clock starts."
        ),
        (
            "gensort's records are unsorted, so valsort reads and checks every record, reports "
            "them unordered and exits 1; a run counts only if it printed `Records: N` for all N."
        ),
        (
            "dd writes zeros from /dev/zero; gensort writes random records. The virtual disk "
            "is backed by the host, which may cache reads and writes below the guest's page "
            "cache, so 'cold' means cold in the guest only."
        ),
    ],
)

WORKLOADS: dict[str, Workload] = {workload.name: workload for workload in [GENSORT]}
