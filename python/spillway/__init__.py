"""Spillway: write-heavy analytics on data larger than memory.

The engines are written in Rust (``spillway._native``); this package gives
them a Pythonic face. See ``docs/`` in the repository for one page per engine.
"""

from ._native import __version__
from .errors import (
    CorruptionError,
    InternalError,
    InvalidArgumentError,
    PoisonedError,
    ResourcesExhaustedError,
    SpillwayError,
    SpillwayIOError,
    UnavailableError,
)
from . import knn, mapreduce, pmem, workload
from .agg import Aggregator
from .kv import KV
from .sortbench import GensortReport, SortReport, ValsortReport, gensort, sort, valsort
from .stream import StreamIndex, stream_key

__all__ = [
    "__version__",
    "Aggregator",
    "KV",
    "knn",
    "mapreduce",
    "pmem",
    "StreamIndex",
    "stream_key",
    "gensort",
    "valsort",
    "sort",
    "SortReport",
    "workload",
    "GensortReport",
    "ValsortReport",
    "SpillwayError",
    "InvalidArgumentError",
    "CorruptionError",
    "SpillwayIOError",
    "ResourcesExhaustedError",
    "PoisonedError",
    "UnavailableError",
    "InternalError",
]
