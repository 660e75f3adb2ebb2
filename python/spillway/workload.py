"""Benchmark workload generators, deterministic from a seed.

Each function writes one workload to ``output`` and returns its summary as a
dict: ``records``, ``bytes``, ``seconds``, ``mb_per_s`` and the generator's
ground truth (distinct keys, sessions, ...). Options are the flags of
``spillway gen <kind>`` with underscores (``zipf_s=1.2`` is ``--zipf-s 1.2``,
``binary=True`` is ``--binary``), so the command's defaults, validation and
error messages apply (an unknown option, or a bad value, is an
``InvalidArgumentError`` naming it and listing the options the generator
takes); ``spillway gen <kind> --help`` lists them all. Ctrl-C stops a
generator and leaves no output. Counts
and sizes accept binary suffixes as strings (``bytes="1G"``). Output formats
are described in ``crates/workload/DESIGN.md``.

>>> from spillway import workload
>>> workload.text("words.txt", bytes="64M", vocabulary=100_000, zipf_s=1.0)  # doctest: +SKIP
{'generator': 'text', 'records': ..., 'distinct_words': ..., ...}
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Union

from . import _native
from .errors import InvalidArgumentError

PathLike = Union[str, "os.PathLike[str]"]


def _arguments(kind: str, output: PathLike, options: Dict[str, Any]) -> List[str]:
    arguments = [kind, "-o", os.fspath(output)]
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            arguments.append(flag)
        else:
            arguments += [flag, str(value)]
    return arguments


def _generate(kind: str, output: PathLike, options: Dict[str, Any]) -> Dict[str, Any]:
    if os.fspath(output) == "-":
        raise InvalidArgumentError("output must be a file path; standard output is for the command line")
    return json.loads(_native.generate_workload(_arguments(kind, output, options)))


def kv(output: PathLike, **options: Any) -> Dict[str, Any]:
    """db_bench-style key-value operations (``spillway gen kv``).

    Options: ``preset`` (fillseq, fillrandom, overwrite, readrandom,
    readwhilewriting, deleterandom, mergerandom), ``ops``, ``key_bytes``,
    ``value_bytes``, ``keys``, ``distribution`` (sequential, uniform,
    zipfian), ``zipf_s``, ``no_scramble``, ``mix`` ("put=90,get=10"),
    ``compression_ratio``, ``format`` (text, binary), ``seed``.
    """
    return _generate("kv", output, options)


def text(output: PathLike, **options: Any) -> Dict[str, Any]:
    """Zipf-distributed words in lines (``spillway gen text``).

    Options: ``bytes`` or ``lines``, ``vocabulary``, ``zipf_s``,
    ``words_per_line``, ``threads``, ``seed``.
    """
    return _generate("text", output, options)


def rmat(output: PathLike, **options: Any) -> Dict[str, Any]:
    """R-MAT graph edges (``spillway gen rmat``).

    Options: ``scale``, ``edge_factor``, ``a``, ``b``, ``c``, ``no_permute``,
    ``binary``, ``threads``, ``seed``.
    """
    return _generate("rmat", output, options)


def clicks(output: PathLike, **options: Any) -> Dict[str, Any]:
    """Click logs with a known number of sessions (``spillway gen clicks``).

    Options: ``users``, ``clicks``, ``user_zipf_s``, ``no_scramble``,
    ``urls``, ``url_zipf_s``, ``clicks_per_session``, ``click_gap_ms``,
    ``session_timeout_ms``, ``arrival_gap_ms``, ``start_ms``, ``seed``.
    """
    return _generate("clicks", output, options)


__all__ = ["kv", "text", "rmat", "clicks"]
