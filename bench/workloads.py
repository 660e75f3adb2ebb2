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
    {python}    the Python interpreter running the harness (pip requirements go into it)
    {bench}     this directory (for driver scripts such as sort_peers.py)

plus whatever a setup or prepare `Step` captured from its output (for example
`{checksum}`, the checksum gensort printed).

Adding a workload: declare a `Workload` below and add it to `WORKLOADS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RECORD_BYTES = 100


@dataclass
class Requirement:
    """An executable (or Python module) a contender needs, and the registry package that provides it.

    `source` is "apt" (Debian package, installed with apt-get), "pip" (PyPI,
    installed into the running interpreter) or "cargo" (crates.io, `cargo install`).
    A pip package that installs no executable names the `module` to import instead.
    """

    executable: str | None
    source: str
    package: str
    module: str | None = None


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
    """One engine (or tool) running one operation of a workload.

    `role` is "spillway" for our own binary and "peer" for everything else.
    `writes` is the file the contender creates: it is removed before every run
    (so each run writes a fresh file) and its size must equal the data size after
    the run. A run succeeds when its exit code is in `exit_codes` and, if
    `expect_output` is set, that regular expression (a template too) matches its
    standard output or standard error. `command_warm_cache` replaces `command` when
    the page cache cannot be dropped (for example a peer reading with O_DIRECT),
    so the run stays cold.

    Around every run, untimed: `prepare` steps run before the page cache is
    dropped (for example generating an input only this contender reads);
    `validate` steps run after it (a failing one stops the benchmark: an output that
    does not validate is a failed run); then the files in `cleanup` are deleted
    (outputs and inputs nobody reads later, so that large runs fit on the disk).
    `output_size_exact` is False for outputs in another format (Parquet), whose
    size only has to be non-zero. `json_report` says the contender prints a JSON
    report on standard output; it is kept with the run, and a Spillway pipeline
    report's stage tables go into the Markdown report. A peer that `may_fail`
    (one that can run out of memory within the budget) does not stop the
    benchmark when a run fails or does not validate: it is reported as failed,
    with the reason, and its comparisons have no ratio.
    """

    name: str
    role: str
    command: list[str]
    writes: str | None = None
    exit_codes: list[int] = field(default_factory=lambda: [0])
    expect_output: str | None = None
    command_warm_cache: list[str] | None = None
    requires: list[Requirement] = field(default_factory=list)
    prepare: list[Step] = field(default_factory=list)
    validate: list[Step] = field(default_factory=list)
    cleanup: list[str] = field(default_factory=list)
    output_size_exact: bool = True
    json_report: bool = False
    may_fail: bool = False


@dataclass
class Comparison:
    """A headline figure: throughput of `contender` over throughput of `peer`."""

    label: str
    contender: str
    peer: str
    target: float | None = None


@dataclass
class Variant:
    """One shape of a workload's data (for example uniform or skewed keys).

    Every variant is run as its own part, at every size, in its own data directory:
    the workload's `setup`, then the variant's `setup`, then the rounds. `params`
    are extra placeholders for every template of the part.
    """

    name: str
    setup: list[list[str] | Step] = field(default_factory=list)
    description: str = ""
    params: dict[str, str] = field(default_factory=dict)


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
class Workload:
    """A named benchmark.

    `setup` commands run once, untimed, in the data directory before the first
    round. Contenders run in the declared order within a round, so a contender
    may read what an earlier one of the same round wrote. `notes` are sentences
    copied into the Markdown report (method choices a reader must know).
    `variants` make one part per variant (and per size); `disk_bound` adds the
    fraction of the disk's limit to the report; `scratch_bytes_per_data_byte` is
    the most disk space the workload needs at once, over the data size (default:
    one data size per contender that writes a file); `throughput_unit` is "MB/s"
    or "GB/s" (10^6 or 10^9 bytes per second) in the reports.
    """

    name: str
    description: str
    contenders: list[Contender]
    comparisons: list[Comparison]
    setup: list[list[str] | Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    variants: list[Variant] = field(default_factory=list)
    disk_bound: DiskBound | None = None
    scratch_bytes_per_data_byte: float | None = None
    throughput_unit: str = "MB/s"


COREUTILS_DD = Requirement(executable="dd", source="apt", package="coreutils")


def dd_write(path: str, cleanup: bool = False) -> Contender:
    """The disk's synced write rate: dd writing {bytes} zeros to `path`."""
    return Contender(
        name="dd write",
        role="peer",
        command=[
            "dd", "if=/dev/zero", f"of={path}", "bs=4M", "count={bytes}", "iflag=count_bytes", "conv=fdatasync",
        ],
        writes=path,
        cleanup=[path] if cleanup else [],
        requires=[COREUTILS_DD],
    )


def dd_read_while_writing(read_path: str, write_path: str) -> Contender:
    """The disk reading `read_path` and writing {bytes} zeros to `write_path` at once (synced)."""
    return Contender(
        name="dd read+write",
        role="peer",
        command=[
            "sh", "-c",
            f"dd if={read_path} of=/dev/null bs=4M 2>/dev/null & reader=$!; "
            f"dd if=/dev/zero of={write_path} bs=4M count={{bytes}} iflag=count_bytes conv=fdatasync "
            "&& wait $reader",
        ],
        writes=write_path,
        cleanup=[write_path],
        requires=[COREUTILS_DD],
    )


def dd_read(path: str) -> Contender:
    """The disk's read rate: dd reading `path` (with iflag=direct when the cache cannot be dropped)."""
    return Contender(
        name="dd read",
        role="peer",
        command=["dd", f"if={path}", "of=/dev/null", "bs=4M"],
        command_warm_cache=["dd", f"if={path}", "of=/dev/null", "bs=4M", "iflag=direct"],
        requires=[COREUTILS_DD],
    )

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
        dd_write("{dir}/dd.dat"),
        Contender(
            name="spillway valsort",
            role="spillway",
            command=["{spillway}", "valsort", "{dir}/gen.dat"],
            # gensort's output is unsorted: valsort reads it all, reports the
            # unordered records and exits 1, like valsort 1.5.
            exit_codes=[0, 1],
            expect_output=r"(?m)^Records: {records}$",
        ),
        dd_read("{dir}/gen.dat"),
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

# ---------------------------------------------------------------------------
# sort: spillway sort against GNU sort, DuckDB, Polars and the disk

SORT_BUDGET = "4G"  # Spillway's --memory (binary units), the budget every engine gets
SORT_BUDGET_BYTES = 4 * 2**30
SORT_PEERS = "{bench}/sort_peers.py"
PIP_PYARROW = Requirement(executable=None, source="pip", package="pyarrow", module="pyarrow")
PIP_NUMPY = Requirement(executable=None, source="pip", package="numpy", module="numpy")
PIP_DUCKDB = Requirement(executable=None, source="pip", package="duckdb", module="duckdb")
PIP_POLARS = Requirement(executable=None, source="pip", package="polars", module="polars")
COREUTILS_SORT = Requirement(executable="sort", source="apt", package="coreutils")
COREUTILS_SYNC = Requirement(executable="sync", source="apt", package="coreutils")
# valsort's report on a sorted file: all records, the input's checksum, in order.
VALSORT_SUCCESS = r"(?m)^Records: {records}$[\s\S]*^Checksum: {checksum_key}$[\s\S]*^SUCCESS"


def valsort_step(path: str, checksum: str) -> Step:
    return Step(
        command=["{spillway}", "valsort", path],
        expect_output=VALSORT_SUCCESS.replace("{checksum_key}", "{" + checksum + "}"),
    )


def parquet_checks(path: str) -> list[Step]:
    """A peer's sorted Parquet back to 100-byte records, then valsort (order, count, checksum)."""
    return [
        Step(command=["{python}", SORT_PEERS, "to-records", path, "{dir}/check.bin", "--records", "{records}"]),
        valsort_step("{dir}/check.bin", "checksum"),
        Step(command=["rm", "-f", "{dir}/check.bin"]),
    ]


def binary_input() -> Step:
    """Regenerates the binary input if an earlier round deleted it (gensort is deterministic)."""
    return Step(
        command=[
            "sh", "-c",
            "test -e {dir}/input.bin || {spillway} gensort {gensort_flags} -c {records} {dir}/input.bin",
        ],
    )


def sort_variant(name: str, flags: list[str], description: str) -> Variant:
    return Variant(
        name=name,
        description=description,
        params={"gensort_flags": " ".join(flags)},
        setup=[
            Step(
                command=["{spillway}", "gensort", *flags, "-c", "{records}", "{dir}/input.bin"],
                capture={"checksum": r"(?m)^([0-9a-f]+)\s*$"},
            ),
        ],
    )


SORT = Workload(
    name="sort",
    description=(
        "Sort gensort 1.5 records (100 bytes, 10-byte key) under a 4 GiB memory budget: "
        "`spillway sort` (2-IO external sort: one read and one write when the data fits the "
        "budget, two of each otherwise) against GNU sort on the same records in gensort's "
        "ASCII form, DuckDB `COPY (... ORDER BY key)` and Polars' streaming sort on the same "
        "records as a Parquet table (key BLOB, payload BLOB), and against the disk: a synced "
        "`dd` write and a cold `dd` read of the same number of bytes give the disk-bound limit "
        "of a 2-IO sort, and both at once its limit when reads and writes overlap. Every output "
        "is validated (order, record count, checksum)."
    ),
    setup=[["mkdir", "-p", "{dir}/tmp-spillway", "{dir}/tmp-gnu", "{dir}/tmp-duckdb", "{dir}/tmp-polars"]],
    variants=[
        sort_variant("uniform", [], "gensort's uniformly random keys"),
        sort_variant("skewed", ["-s"], "gensort -s skewed keys (many duplicates)"),
    ],
    # In each round the binary input is made (if missing), read by Spillway and dd,
    # converted to Parquet and deleted; the Parquet peers run, and the Parquet file is
    # deleted; then GNU sort gets its ASCII input. So at most one copy of the data
    # besides an engine's own files is on the disk at a time.
    contenders=[
        Contender(
            name="spillway sort",
            role="spillway",
            command=[
                "{spillway}", "sort", "{dir}/input.bin", "{dir}/spillway.out",
                "--memory", SORT_BUDGET, "--tmp", "{dir}/tmp-spillway", "--json",
            ],
            writes="{dir}/spillway.out",
            prepare=[binary_input()],
            json_report=True,
            validate=[valsort_step("{dir}/spillway.out", "checksum")],
            cleanup=["{dir}/spillway.out"],
        ),
        dd_read("{dir}/input.bin"),
        dd_read_while_writing("{dir}/input.bin", "{dir}/dd-rw.out"),
        dd_write("{dir}/dd.out", cleanup=True),
        Contender(
            name="Parquet conversion",
            role="peer",
            command=["{python}", SORT_PEERS, "to-parquet", "{dir}/input.bin", "{dir}/input.parquet"],
            writes="{dir}/input.parquet",
            output_size_exact=False,
            # The binary input's last reader in a round: deleted so that the peers
            # after it have the disk to themselves (the next round regenerates it).
            cleanup=["{dir}/input.bin"],
            requires=[PIP_NUMPY, PIP_PYARROW],
        ),
        Contender(
            name="DuckDB sort",
            role="peer",
            command=[
                "{python}", SORT_PEERS, "duckdb", "{dir}/input.parquet", "{dir}/duckdb.parquet",
                "--memory", "4GiB", "--threads", "2", "--tmp", "{dir}/tmp-duckdb",
            ],
            writes="{dir}/duckdb.parquet",
            output_size_exact=False,
            validate=parquet_checks("{dir}/duckdb.parquet"),
            cleanup=["{dir}/duckdb.parquet"],
            requires=[PIP_DUCKDB, PIP_NUMPY, PIP_PYARROW],
        ),
        Contender(
            name="Polars sort",
            role="peer",
            command=[
                "env", "POLARS_MAX_THREADS=2", "POLARS_TEMP_DIR={dir}/tmp-polars",
                "{python}", SORT_PEERS, "polars", "{dir}/input.parquet", "{dir}/polars.parquet",
            ],
            writes="{dir}/polars.parquet",
            output_size_exact=False,
            validate=parquet_checks("{dir}/polars.parquet"),
            # The Parquet input is rebuilt by the conversion row of the next round, so
            # it need not sit on the disk beside GNU sort's files.
            cleanup=["{dir}/polars.parquet", "{dir}/input.parquet"],
            requires=[PIP_POLARS, PIP_NUMPY, PIP_PYARROW],
        ),
        Contender(
            name="GNU sort",
            role="peer",
            command=[
                "sh", "-c",
                "LC_ALL=C sort -S 4G --parallel=2 -T {dir}/tmp-gnu -o {dir}/gnu.out {dir}/input.txt"
                " && sync --data {dir}/gnu.out {dir}",
            ],
            writes="{dir}/gnu.out",
            # GNU sort sorts lines: it gets the same records in gensort's ASCII form,
            # generated before each of its runs and deleted after (disk space).
            prepare=[
                Step(
                    command=["sh", "-c", "{spillway} gensort -a {gensort_flags} -c {records} {dir}/input.txt"],
                    capture={"checksum_ascii": r"(?m)^([0-9a-f]+)\s*$"},
                ),
            ],
            validate=[valsort_step("{dir}/gnu.out", "checksum_ascii")],
            cleanup=["{dir}/gnu.out", "{dir}/input.txt"],
            requires=[COREUTILS_SORT, COREUTILS_SYNC],
        ),
    ],
    comparisons=[
        Comparison(label="sort", contender="spillway sort", peer="GNU sort", target=5.0),
        Comparison(label="sort", contender="spillway sort", peer="DuckDB sort", target=2.0),
        Comparison(label="sort", contender="spillway sort", peer="Polars sort"),
    ],
    disk_bound=DiskBound(
        read="dd read",
        write="dd write",
        memory_budget_bytes=SORT_BUDGET_BYTES,
        contenders=["spillway sort", "GNU sort", "DuckDB sort", "Polars sort"],
        targets={"spillway sort": 0.70},
        read_write="dd read+write",
    ),
    # The peak is DuckDB's validation: input.parquet, its Parquet output and the records
    # read back from it (its spill files are gone by then, but while it sorts they
    # may exceed the data size); Spillway's is input.bin, partition files and output,
    # GNU sort's input.txt, temporary files and output: 3x.
    scratch_bytes_per_data_byte=3.5,
    throughput_unit="GB/s",
    notes=[
        (
            "Memory: Spillway gets `--memory 4G`, GNU sort `-S 4G`, DuckDB `memory_limit='4GiB'`; "
            "Polars has no memory setting for its streaming engine. Every engine runs inside the "
            "same cgroup v1 memory limit (`--memory-limit`, stated at the top), which counts page "
            "cache, so the engines' own budgets bind and none can use the machine's RAM as a cache."
        ),
        (
            "Threads: 2 for every engine (the machine has 2 cores): Spillway uses all cores, "
            "GNU sort `--parallel=2`, DuckDB `SET threads=2`, Polars `POLARS_MAX_THREADS=2`."
        ),
        (
            "Durability: every engine's output is on the device when its clock stops. Spillway "
            "fdatasyncs its output before renaming it into place; GNU sort is followed by "
            "`sync --data` of its output and directory inside the timed command; the DuckDB and "
            "Polars drivers (bench/sort_peers.py) fdatasync their Parquet file and its directory. "
            "dd write uses conv=fdatasync."
        ),
        (
            "Inputs: Spillway sorts gensort's binary records; GNU sort the same number of records "
            "generated with gensort -a (ASCII, 10 printable key bytes, CRLF-terminated 100-byte "
            "lines), which `LC_ALL=C sort` orders by key (ties by the rest of the line); DuckDB "
            "and Polars the binary records as an uncompressed Parquet table (key BLOB of 10 "
            "bytes, payload BLOB of 90 bytes, row groups of 2^20 rows), written from the binary "
            "file by pyarrow in the 'Parquet conversion' row, timed separately from the sorts. "
            "A peer's time in the tables is its sort only; add the conversion for the "
            "end-to-end time from the binary file."
        ),
        (
            "Outputs: DuckDB writes Parquet (uncompressed, no dictionary), its fastest output "
            "here (writing a DuckDB table file was several times slower); Polars writes "
            "uncompressed Parquet with `sink_parquet`. Spillway and GNU sort write records."
        ),
        (
            "Validation, untimed, after every run: `spillway valsort` must print SUCCESS, all "
            "records and the checksum gensort printed for the input (binary or ASCII). DuckDB's "
            "and Polars' Parquet outputs are written back to 100-byte records in file order "
            "(bench/sort_peers.py to-records) and checked the same way, so every engine's "
            "output is fully checked: order, record count and checksum."
        ),
        (
            "Disk-bound limit: data that fits the 4 GiB budget must be read and written once, "
            "larger data twice; the limit time is passes x (median dd read time + median dd write "
            "time) for the same number of bytes, and a contender's fraction is that limit over "
            "its median time. dd writes zeros and reads the binary input with 4 MiB blocks. "
            "Out of memory each pass reads and writes at the same time, which this disk does "
            "faster than one after the other; 'dd read+write' runs the read and the synced "
            "write together, and 2 x its time is the overlapped limit, the least time any 2-IO "
            "sort can take here. In memory every read comes before every write, so the first "
            "limit is the floor there."
        ),
        (
            "Sizes: 2 GiB (fits the 4 GiB budget; 3 runs) and 20 GB (20 x 10^9 bytes, 4.7x the "
            "budget; 1 run, so its min-max ranges are empty and its ratios are single "
            "measurements). To fit 20 GB on a disk with about 75 GB free, each round deletes "
            "the binary input after its last reader (the Parquet conversion) and regenerates "
            "it at the start of the next, and deletes the Parquet input after Polars' run; "
            "GNU sort's ASCII input exists only around its own run."
        ),
        (
            "The virtual disk is backed by the host, which may cache reads and writes below the "
            "guest's page cache, so 'cold' means cold in the guest only, and dd's rates vary "
            "between runs."
        ),
    ],
)

WORKLOADS: dict[str, Workload] = {workload.name: workload for workload in [GENSORT, SORT]}

# ---------------------------------------------------------------------------
# MapReduce: spillway mr against DuckDB, Polars, Spark local mode and a Unix
# pipeline, and against spillway sort on the same number of bytes

MR_BUDGET = "1G"  # Spillway's --memory (binary units), the budget every engine gets
MR_PEERS = "{bench}/mr_peers.py"
PIP_PYSPARK = Requirement(executable=None, source="pip", package="pyspark", module="pyspark")
COREUTILS_TR = Requirement(executable="tr", source="apt", package="coreutils")
MR_PEER_REQUIREMENTS = {"duckdb": [PIP_DUCKDB], "polars": [PIP_POLARS, PIP_DUCKDB], "spark": [PIP_PYSPARK, PIP_DUCKDB]}
MR_PEER_NAMES = {"duckdb": "DuckDB", "polars": "Polars", "spark": "Spark local[2]"}


def mr_digest(job: str, output: str, expect: bool, form: str = "tsv") -> Step:
    """Spillway's output digested and saved, or a peer's checked against it (see mr_peers.py digest)."""
    mode = ["--expect", "{dir}/expected.json"] if expect else ["--save", "{dir}/expected.json"]
    return Step(command=["{python}", MR_PEERS, "digest", job, output, "--format", form, *mode])


def mr_contenders(job: str, spillway_args: list[str], peer_args: list[str], unix: bool) -> list[Contender]:
    """Spillway's job first (its output is the reference), then the sort of the same bytes, then the peers."""
    out = "{dir}/out-spillway"
    contenders = [
        Contender(
            name=f"spillway mr {job}",
            role="spillway",
            command=[
                "{spillway}", "mr", *spillway_args, "{dir}/{input}", "-o", out, "--memory", MR_BUDGET,
                "--tmp", "{dir}/tmp", "--json",
            ],
            prepare=[Step(command=["rm", "-rf", out])],
            json_report=True,
            validate=[mr_digest(job, out, expect=False), Step(command=["rm", "-rf", out])],
        ),
        Contender(
            name="spillway sort (same bytes)",
            role="spillway",
            command=[
                "{spillway}", "sort", "{dir}/sort-input.bin", "{dir}/sort-output.bin", "--memory", MR_BUDGET,
                "--tmp", "{dir}/tmp", "--json",
            ],
            # gensort records as many bytes as the job's input holds (to within a record).
            prepare=[
                Step(command=[
                    "sh", "-c", "{spillway} gensort $(( $(stat -c %s {dir}/{input}) / 100 )) {dir}/sort-input.bin",
                ]),
            ],
            json_report=True,
            cleanup=["{dir}/sort-input.bin", "{dir}/sort-output.bin"],
        ),
    ]
    for engine in ("duckdb", "polars", "spark"):
        output = f"{{dir}}/out-{engine}"
        contenders.append(
            Contender(
                name=f"{MR_PEER_NAMES[engine]} {job}",
                role="peer",
                command=[
                    "{python}", MR_PEERS, engine, job, "{dir}/{input}", output, "--memory", "1GiB",
                    "--spark-memory", "1g", "--threads", "2", "--tmp", "{dir}/tmp", *peer_args,
                ],
                prepare=[Step(command=["rm", "-rf", output])],
                validate=[mr_digest(job, output, expect=True), Step(command=["rm", "-rf", output])],
                requires=MR_PEER_REQUIREMENTS[engine],
                may_fail=True,
            )
        )
    if unix:
        output = "{dir}/out-unix"
        contenders.append(
            Contender(
                name=f"Unix tr, sort, uniq -c {job}",
                role="peer",
                command=[
                    "sh", "-c",
                    "tr -s ' ' '\\n' < {dir}/{input} | LC_ALL=C sort -S " + MR_BUDGET + " --parallel=2 -T {dir}/tmp"
                    f" | uniq -c > {output} && sync --data {output}",
                ],
                validate=[mr_digest(job, output, expect=True, form="uniq"), Step(command=["rm", "-f", output])],
                requires=[COREUTILS_TR, COREUTILS_SORT, COREUTILS_SYNC],
                may_fail=True,
            )
        )
    return contenders


def mr_comparisons(job: str, unix: bool, duckdb_target: float | None = None) -> list[Comparison]:
    ours = f"spillway mr {job}"
    comparisons = [
        Comparison(label=job, contender=ours, peer=f"Spark local[2] {job}", target=5.0),
        Comparison(label=job, contender=ours, peer=f"DuckDB {job}", target=duckdb_target),
        Comparison(label=job, contender=ours, peer=f"Polars {job}"),
        # Themis ran its jobs at nearly TritonSort's speed: within 1.5x of the sort per byte.
        Comparison(label=f"{job} per byte, against the sort", contender=ours, peer="spillway sort (same bytes)",
                   target=0.67),
    ]
    if unix:
        comparisons.append(Comparison(label=job, contender=ours, peer=f"Unix tr, sort, uniq -c {job}", target=10.0))
    return comparisons


MR_NOTES = [
    (
        "Memory: Spillway gets `--memory 1G`, DuckDB `memory_limit='1GiB'`, Spark `spark.driver.memory=1g` "
        "(local mode: the driver runs the tasks), GNU sort `-S 1G`; Polars has no memory setting for its "
        "streaming engine. Every engine runs inside the same cgroup v1 memory limit (`--memory-limit`, "
        "stated at the top), page cache included."
    ),
    (
        "Threads: 2 for every engine (the machine has 2 cores): Spillway all cores, DuckDB `threads=2`, "
        "Polars `POLARS_MAX_THREADS` unset (it uses the 2 cores), Spark `local[2]`, GNU sort `--parallel=2`."
    ),
    (
        "Outputs: every engine writes the same tab-separated lines (Spillway's text output; the peers "
        "through bench/mr_peers.py) and makes them durable (fdatasync of the files and directory) before "
        "its clock stops. After every run an untimed check reduces the output to its line count and an "
        "order-free checksum of its lines (PageRank: the vertex count, the sum of ranks and the 20 "
        "highest-ranked vertices) and fails the benchmark unless it equals Spillway's."
    ),
    (
        "Peak RSS and CPU time come from GNU time around each command: for Spark they count only "
        "its Python driver, not the JVM that pyspark starts (the cgroup peak, which counts every "
        "process of the run and the page cache, includes it)."
    ),
    (
        "The sort row sorts gensort records of the job input's size with `spillway sort` under the same "
        "budget: the job's throughput over it is the job's speed per byte against the sort's (Themis ran "
        "its jobs at nearly TritonSort's speed; the target is within 1.5x)."
    ),
]


def mr_workload(name: str, job: str, description: str, setup: list[list[str] | Step], input_name: str,
                spillway_args: list[str], peer_args: list[str], unix: bool = False,
                duckdb_target: float | None = None) -> Workload:
    return Workload(
        name=name,
        description=description,
        setup=[["mkdir", "-p", "{dir}/tmp"], *setup],
        variants=[Variant(name="generated", params={"input": input_name}, description=description)],
        contenders=mr_contenders(job, spillway_args, peer_args, unix),
        comparisons=mr_comparisons(job, unix, duckdb_target),
        # The input, the sort's input and output, and an engine's intermediate data and output.
        scratch_bytes_per_data_byte=4.0,
        notes=MR_NOTES,
    )


GEN_TEXT = ["{spillway}", "gen", "text", "--bytes", "{bytes}", "-o", "{dir}/input.txt"]

MR_WORDCOUNT = mr_workload(
    "mr-wordcount", "wordcount",
    "Word count over Zipf-distributed text (`spillway gen text`, 100 000 words, exponent 1).",
    [GEN_TEXT], "input.txt", ["wordcount"], [], unix=True, duckdb_target=1.0,
)
MR_NGRAM = mr_workload(
    "mr-ngram", "ngram",
    "5-gram count over Zipf-distributed text: every run of 5 words within a line.",
    [GEN_TEXT], "input.txt", ["ngram", "--n", "5"], ["--n", "5"],
)
MR_INDEX = mr_workload(
    "mr-index", "index",
    "Inverted index: every term of Zipf text and the sorted ids of the lines (documents) it appears in.",
    [
        ["{spillway}", "gen", "text", "--bytes", "{bytes}", "-o", "{dir}/text.txt"],
        ["{python}", MR_PEERS, "docs", "{dir}/text.txt", "{dir}/input.tsv"],
        ["rm", "{dir}/text.txt"],
    ],
    "input.tsv", ["inverted-index"], [],
)
MR_SESSIONS = mr_workload(
    "mr-sessions", "sessions",
    "Click-log sessionization: clicks of 1M Zipf-distributed users (`spillway gen clicks`, about 34 bytes "
    "a click), cut into sessions at 30-minute pauses; one line per session.",
    [["sh", "-c", "{spillway} gen clicks --users 1M --clicks $(( {records} * 3 )) -o {dir}/input.tsv"]],
    "input.tsv", ["sessionize", "--gap", "1800000"], ["--gap", "1800000"],
)
MR_PAGERANK = mr_workload(
    "mr-pagerank", "pagerank",
    "PageRank, 3 iterations, on an R-MAT graph (`spillway gen rmat`, edge factor 16, a scale whose edge "
    "list is about the data size).",
    [
        Step(command=[
            "sh", "-c",
            "scale=$(awk 'BEGIN {{ print int(log({bytes} / 14 / 16) / log(2)) }}'); "
            "{spillway} gen rmat --scale $scale --edge-factor 16 -o {dir}/input.tsv && echo vertices=$((1 << scale))",
        ], capture={"vertices": r"vertices=(\d+)"}),
    ],
    "input.tsv", ["pagerank", "--vertices", "{vertices}", "--iterations", "3"],
    ["--vertices", "{vertices}", "--iterations", "3"],
)

WORKLOADS.update({w.name: w for w in [MR_WORDCOUNT, MR_NGRAM, MR_INDEX, MR_SESSIONS, MR_PAGERANK]})
