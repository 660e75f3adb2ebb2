"""Benchmark workload generators, deterministic from a seed.

Each function writes one workload to ``output`` and returns its summary as a
dict: ``generator``, ``output``, ``seed``, ``records``, ``bytes``, the
generator's ground truth (distinct keys, sessions, ...), ``seconds`` and
``mb_per_s``. Options are the flags of ``spillway gen <kind>`` with
underscores (``zipf_s=1.2`` is ``--zipf-s 1.2``, ``binary=True`` is
``--binary``), with the command's defaults and checks: an unknown option,
or a bad value, is an ``InvalidArgumentError`` naming it (an unknown one
with the options the generator takes); ``spillway gen <kind> --help``
describes them all. Ctrl-C stops a generator and leaves no output. Counts
and sizes accept binary suffixes as strings (``bytes="1G"``). Output formats
are described in ``crates/workload/DESIGN.md``.

>>> from spillway import workload
>>> workload.text("words.txt", bytes="64M", vocabulary=100_000, zipf_s=1.0)  # doctest: +SKIP
{'generator': 'text', 'records': ..., 'distinct_words': ..., ...}
"""

from __future__ import annotations

import difflib
import json
import numbers
import os
from typing import Any, Callable, Dict, Union

from . import _args, _native
from .errors import InvalidArgumentError

PathLike = Union[str, "os.PathLike[str]"]


def _number(value: Any, parameter: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError(f"{parameter} must be a number, not {type(value).__name__} {value!r}")
    return float(value)


def _flag(value: Any, parameter: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{parameter} must be True or False, not {value!r}")
    return value


def _text(value: Any, parameter: str) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{parameter} must be text, not {type(value).__name__} {value!r}")
    return value


# Each generator's options and how a Python value becomes what the engine
# takes; the engine checks ranges and fills in the defaults.
_COUNT: Callable[[Any, str], int] = _args.size


def _count32(value: Any, parameter: str) -> int:
    return _args.size(value, parameter, high=(1 << 32) - 1)


_OPTIONS: Dict[str, Dict[str, Callable[[Any, str], Any]]] = {
    "kv": {
        "preset": _text,
        "ops": _COUNT,
        "key_bytes": _COUNT,
        "value_bytes": _COUNT,
        "keys": _COUNT,
        "distribution": _text,
        "zipf_s": _number,
        "no_scramble": _flag,
        "mix": _text,
        "compression_ratio": _number,
        "format": _text,
        "seed": _args.count,
    },
    "text": {
        "bytes": _COUNT,
        "lines": _COUNT,
        "vocabulary": _COUNT,
        "zipf_s": _number,
        "words_per_line": _count32,
        "threads": _args.threads,
        "seed": _args.count,
    },
    "rmat": {
        "scale": _count32,
        "edge_factor": _COUNT,
        "a": _number,
        "b": _number,
        "c": _number,
        "no_permute": _flag,
        "binary": _flag,
        "threads": _args.threads,
        "seed": _args.count,
    },
    "clicks": {
        "users": _COUNT,
        "clicks": _COUNT,
        "user_zipf_s": _number,
        "no_scramble": _flag,
        "urls": _COUNT,
        "url_zipf_s": _number,
        "clicks_per_session": _number,
        "click_gap_ms": _number,
        "session_timeout_ms": _COUNT,
        "arrival_gap_ms": _number,
        "start_ms": _COUNT,
        "seed": _args.count,
    },
}


def _generate(kind: str, output: PathLike, options: Dict[str, Any]) -> Dict[str, Any]:
    if os.fspath(output) == "-":
        raise InvalidArgumentError("output must be a file path; standard output is for the command line")
    taken = _OPTIONS[kind]
    converted = {}
    for name, value in options.items():
        if name not in taken:
            close = difflib.get_close_matches(name, taken, n=1)
            hint = f' (did you mean "{close[0]}"?)' if close else ""
            raise InvalidArgumentError(
                f"{kind}() takes no option {name!r}{hint}; its options are {', '.join(taken)}"
            )
        if value is not None:
            converted[name] = taken[name](value, name)
    generate = getattr(_native, f"workload_{kind}")
    return json.loads(generate(os.fspath(output), **converted))


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
