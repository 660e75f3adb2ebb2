"""sort: spillway sort against GNU sort, DuckDB, Polars and the disk's limit, on uniform and skewed gensort data."""

from __future__ import annotations

from declarations import Comparison, Contender, DiskBound, Step, Variant, Workload, file_metrics
from workloads.disk import dd_read, dd_read_while_writing, dd_write
from workloads.requirements import COREUTILS_SORT, COREUTILS_SYNC, PIP_DUCKDB, PIP_NUMPY, PIP_POLARS, PIP_PYARROW

SORT_BUDGET = "4G"  # Spillway's --memory (binary units), the budget every engine gets
SORT_BUDGET_BYTES = 4 * 2**30
SORT_PEERS = "{bench}/sort_peers.py"
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
    title="sort: spillway sort against GNU sort, DuckDB, Polars and the disk's limit",
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
            result="json",
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
    metrics=file_metrics("GB/s"),
    page_command="python3 bench/run.py sort --size 2G --runs 3 --size 19531250k --runs 1 --memory-limit 5G",
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
