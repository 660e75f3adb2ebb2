"""gensort and valsort, compatible with gensort 1.5 and valsort 1.5.

>>> import spillway
>>> spillway.gensort("/tmp/input.dat", 1000).checksum     # doctest: +SKIP
'1ea6370b955'
>>> spillway.valsort("/tmp/input.dat").sorted             # doctest: +SKIP
False
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Union

from . import _native
from ._args import count, size, threads as thread_count

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class GensortReport:
    """What :func:`gensort` wrote."""

    records: int
    bytes: int
    checksum: Optional[str]
    seconds: float
    threads: int

    @property
    def megabytes_per_second(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else float("inf")


@dataclass(frozen=True)
class ValsortReport:
    """What :func:`valsort` found; ``report`` is valsort's text."""

    records: int
    checksum: str
    duplicates: int
    unordered: int
    first_unordered: Optional[int]
    sorted: bool
    bytes: int
    seconds: float
    report: str


def gensort(
    path: PathLike,
    records: int,
    *,
    start: int = 0,
    ascii: bool = False,
    skew: bool = False,
    checksum: bool = True,
    threads: int = 0,
    sync: bool = True,
) -> GensortReport:
    """Write ``records`` gensort 1.5 records, numbered from ``start``, to ``path``.

    ``ascii`` makes printable records (gensort ``-a``), ``skew`` skewed keys
    (``-s``). Generation runs on ``threads`` cores (0 = all) and the file is
    synced to disk unless ``sync`` is false. The checksum is the lower-case
    hex sum of the records' CRC-32s, as gensort ``-c`` prints it.
    """
    report = _native.gensort(
        os.fspath(path),
        count(records, "records"),
        start=count(start, "start", high=(1 << 128) - 1),
        ascii=ascii,
        skew=skew,
        checksum=checksum,
        threads=thread_count(threads),
        sync=sync,
    )
    return GensortReport(**json.loads(report))


def valsort(
    path: PathLike,
    *,
    summaries: bool = False,
    summary_file: Optional[PathLike] = None,
    case_insensitive: bool = False,
    threads: int = 0,
) -> ValsortReport:
    """Validate the order of the records in ``path`` like valsort 1.5.

    Unordered records are reported, not raised: check ``.sorted``. With
    ``summary_file`` a 280-byte partition summary is written; with
    ``summaries`` the file is a concatenation of such summaries.
    """
    report = json.loads(
        _native.valsort(
            os.fspath(path),
            summaries=summaries,
            summary_file=None if summary_file is None else os.fspath(summary_file),
            case_insensitive=case_insensitive,
            threads=thread_count(threads),
        )
    )
    # 128-bit counts cross as decimal text (as the command's --json has them).
    for name in ("records", "duplicates", "unordered", "first_unordered"):
        if report[name] is not None:
            report[name] = int(report[name])
    return ValsortReport(**report)


@dataclass(frozen=True)
class SortReport:
    """What :func:`sort` did. ``phases`` holds each pipeline phase's stage
    table as a dict (``name``, ``elapsed``, ``stages``); ``swept_files`` the
    files that sorts killed outright had left in the temporary or output
    directory, removed before this one began."""

    records: int
    input_bytes: int
    mode: str
    partitions: int
    partition_bytes_max: int
    elapsed: float
    device_read_bytes: int
    device_write_bytes: int
    logical_read_bytes: int
    logical_write_bytes: int
    phases: List[Dict[str, Any]]
    output_files: List[str]
    swept_files: List[str]

    @property
    def megabytes_per_second(self) -> float:
        return self.input_bytes / self.elapsed / 1e6 if self.elapsed > 0 else float("inf")


def sort(
    input: PathLike,
    output: PathLike,
    *,
    memory: Union[int, str] = "4G",
    tmp: Optional[PathLike] = None,
    partitions: int = 0,
    threads: int = 0,
    ascii: bool = False,
    sync: bool = True,
    partitioned: bool = False,
    direct: bool = False,
) -> SortReport:
    """Sort the 100-byte records of ``input`` by key into ``output``.

    Two passes over the disk when the input exceeds ``memory`` (partitions
    go to ``tmp``, default the output's directory), one when it fits. The
    output appears only when complete. Validate it with :func:`valsort`.
    With ``partitioned``, ``output`` is a directory of ordered partition
    files (``output_files``), each with a ``.sum`` summary, and ``all.sum``
    for ``valsort(..., summaries=True)``. ``direct`` reads the input and the
    partitions with O_DIRECT, bypassing the page cache.
    """
    report = _native.sort(
        os.fspath(input),
        os.fspath(output),
        memory=size(memory, "memory"),
        tmp=None if tmp is None else os.fspath(tmp),
        partitions=count(partitions, "partitions"),
        threads=thread_count(threads),
        ascii=ascii,
        sync=sync,
        partitioned=partitioned,
        direct=direct,
    )
    return SortReport(**json.loads(report))
