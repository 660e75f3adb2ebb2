"""MapReduce on one node: Themis's phases zero, one and two.

Every input byte is read once, every intermediate record written and read
once, every output record written once. A job writes one file per partition
into its output directory (``part-NNNNN.tsv``, or ``.kv`` for binary
output), in key order across the files with range partitioning.

Built-in jobs are named (``"wordcount"``, ``"ngram"``, ``"inverted_index"``,
``"kmer"``, ``"grep"``, ``"sort"``, ``"sessionize"``, ``"pagerank"``) and run
at full speed:

>>> import spillway.mapreduce as mr
>>> report = mr.run("wordcount", ["corpus.txt"], "counts")     # doctest: +SKIP
>>> report.output_records                                       # doctest: +SKIP
48213

Any other name with ``map`` and ``reduce`` callables runs a Python job:
``map(key, value)`` and ``reduce(key, values)`` return iterables of
``(key, value)`` pairs of bytes. This is the slow path: every call holds the
GIL, so Python jobs run one call at a time.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from . import _native
from ._args import count, size, threads as thread_count

PathLike = Union[str, "os.PathLike[str]"]
Pairs = Optional[Iterable[Tuple[bytes, bytes]]]


@dataclass(frozen=True)
class JobReport:
    """What a job did; ``details`` holds the whole report (stage tables,
    phase zero's sample, the I/O counters)."""

    job: str
    input_bytes: int
    input_records: int
    map_records: int
    intermediate_bytes: int
    intermediate_records: int
    output_records: int
    output_bytes: int
    partitions: int
    resumed: bool
    recovered_partitions: List[int]
    notes: List[str]
    seconds: float
    details: Dict[str, Any] = field(repr=False)

    @classmethod
    def _from_json(cls, report: Dict[str, Any]) -> "JobReport":
        names = [name for name in cls.__dataclass_fields__ if name not in ("seconds", "details")]
        return cls(**{name: report[name] for name in names}, seconds=report["elapsed"], details=report)


def run(
    job: str,
    inputs: Union[PathLike, Sequence[PathLike]],
    output: PathLike,
    *,
    map: Optional[Callable[[bytes, bytes], Pairs]] = None,
    reduce: Optional[Callable[[bytes, List[bytes]], Pairs]] = None,
    n: Optional[int] = None,
    k: Optional[int] = None,
    pattern: Optional[str] = None,
    gap_ms: Optional[int] = None,
    vertices: Optional[int] = None,
    damping: Optional[float] = None,
    iterations: int = 10,
    memory: Union[int, str] = 1 << 30,
    tmp: Optional[PathLike] = None,
    threads: int = 0,
    partitions: int = 0,
    partitioning: str = "range",
    input_format: Optional[str] = None,
    output_format: str = "text",
    block_size: Union[int, str] = 0,
    sync: bool = True,
) -> Union[JobReport, List[JobReport]]:
    """Run ``job`` over ``inputs`` (a path, or a list of paths), writing its
    output files into ``output``.

    Parameters of the built-in jobs: ``n`` (ngram), ``k`` (kmer),
    ``pattern`` (grep), ``gap_ms`` (sessionize), ``vertices``, ``damping`` (0.85)
    and ``iterations`` (pagerank, which returns a list of reports: its
    first job builds the graph, then one per iteration).

    Options: ``memory`` (bytes for data buffers, an int or text such as
    ``"1G"``), ``tmp`` (directory of the
    partition files; default beside the output), ``threads`` (0 = all
    cores), ``partitions`` (0 = chosen from a sample), ``partitioning``
    (``"range"`` or ``"hash"``), ``input_format`` (``text``, ``tsv``,
    ``csv``, ``gensort`` or ``kv``; default the job's, text for Python
    jobs), ``output_format`` (``text`` or ``kv``), ``block_size`` (bytes of
    input per block; 0 = a 32nd of ``memory``, at most 32 MiB),
    ``sync`` (fdatasync the files).

    A job that fails after its first pass over the input can be resumed by
    running it again with the same inputs, output and ``tmp``. Ctrl-C stops
    a job within a fraction of a second: it raises ``KeyboardInterrupt``
    and leaves neither its partition files nor any output. Errors raise
    the exception of their kind (``spillway.InvalidArgumentError`` for bad
    input...); an exception raised by a Python ``map`` or ``reduce`` is
    raised again as it was.
    """
    if isinstance(inputs, (str, bytes, os.PathLike)):
        inputs = [inputs]
    reports = json.loads(
        _native.mapreduce_run(
            job,
            [os.fspath(path) for path in inputs],
            os.fspath(output),
            map=map,
            reduce=reduce,
            n=None if n is None else count(n, "n"),
            k=None if k is None else count(k, "k"),
            pattern=pattern,
            gap_ms=None if gap_ms is None else count(gap_ms, "gap_ms"),
            vertices=None if vertices is None else count(vertices, "vertices"),
            damping=damping,
            iterations=count(iterations, "iterations"),
            memory=size(memory, "memory"),
            tmp=None if tmp is None else os.fspath(tmp),
            threads=thread_count(threads),
            partitions=count(partitions, "partitions"),
            partitioning=partitioning,
            input_format=input_format,
            output_format=output_format,
            block_size=size(block_size, "block_size"),
            sync=sync,
        )
    )
    if isinstance(reports, list):
        return [JobReport._from_json(report) for report in reports]
    return JobReport._from_json(reports)


def output_files(output: PathLike) -> List[str]:
    """The output files a job wrote into ``output``, in partition order."""
    directory = os.fspath(output)
    names = sorted(name for name in os.listdir(directory) if name.startswith("part-") and not name.endswith(".partial"))
    return [os.path.join(directory, name) for name in names]
