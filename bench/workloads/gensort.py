"""gensort: Spillway's record generator and validator against dd writing and reading the same bytes."""

from __future__ import annotations

from declarations import Comparison, Contender, Workload
from workloads.disk import dd_read, dd_write

GENSORT = Workload(
    name="gensort",
    title="gensort: Spillway's record generator and validator against dd",
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
    page_command="python3 bench/run.py gensort --size 4G --runs 5",
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
