"""gensort and valsort, compatible with gensort 1.5 and valsort 1.5.

>>> import spillway
>>> spillway.gensort("/tmp/input.dat", 1000).checksum     # doctest: +SKIP
'1ea6370b955'
>>> spillway.valsort("/tmp/input.dat").sorted             # doctest: +SKIP
False
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Union

from . import _native

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
    report: str
    seconds: float


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
    return GensortReport(
        **_native.gensort(
            os.fspath(path),
            records,
            start=start,
            ascii=ascii,
            skew=skew,
            checksum=checksum,
            threads=threads,
            sync=sync,
        )
    )


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
    return ValsortReport(
        **_native.valsort(
            os.fspath(path),
            summaries=summaries,
            summary_file=None if summary_file is None else os.fspath(summary_file),
            case_insensitive=case_insensitive,
            threads=threads,
        )
    )
