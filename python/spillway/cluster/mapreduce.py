"""MapReduce across the cluster's nodes: the built-in jobs of
:mod:`spillway.mapreduce`, their map and reduce done by the same Rust code
(``map_task``, ``reduce_task`` of the mapreduce crate), placed by the ring.

1. **Sample.** Sample tasks map the start of up to ``SAMPLE_BLOCKS`` evenly
   spaced blocks (as phase zero samples) and return the keys they emit; the
   driver cuts range boundaries from them, so the output is in key order
   across partitions, and estimates the map output per input byte.
2. **Map.** Each block is given to one of its holders (the least loaded),
   and a node's blocks are grouped into tasks large enough that each task's
   piece for a partition is about ``piece_bytes_min`` or more. A map task
   runs on that node (soft affinity: Ray places it elsewhere if the node is
   gone), reads its blocks from the node's own store when it holds them
   (from a holder otherwise), and returns one Ray object per partition.
3. **Reduce.** Partition ``p`` belongs to the ring owner of its key; its
   reduce task runs there, Ray moves the pieces to it, and it writes the
   partition's output file into the cluster's file system
   (``OUTPUT/part-PPPPP.tsv``) or into a directory on its node.

Shuffle data travels only as task results (objects Ray can rebuild from
lineage when a node dies: the map task runs again elsewhere, reading a
replica); nothing of a job lives in an actor. A node lost midway costs the
tasks that ran there, and the output is the same.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence, Tuple

from .. import _native
from ..errors import InvalidArgumentError
from . import fs
from ._ray import ray
from .fs import Members
from .ring import key_hash
from .tasks import Block, assign, gather, input_blocks, live_holder, near, on_block

SAMPLE_BLOCKS = 16
SAMPLE_KEYS_PER_BLOCK = 10_000
PIECE_BYTES_MIN = 1 << 20
OUTPUT_BLOCK_BYTES = 64 << 20
_EXTENSIONS = {"text": "tsv", "binary": "kv"}


@dataclass
class PhaseReport:
    """One phase of a cluster job."""

    name: str
    tasks: int = 0
    seconds: float = 0.0
    bytes_read: int = 0
    # Piece bytes a reduce received from a map task on another node.
    bytes_moved: int = 0
    # Map tasks that read every block from their own node.
    local_tasks: int = 0


@dataclass
class ClusterJobReport:
    """What a cluster job did."""

    job: str
    partitions: int
    input_bytes: int
    input_records: int
    map_records: int
    output_records: int
    outputs: List[str]
    seconds: float
    phases: List[PhaseReport] = field(default_factory=list)

    @property
    def locality(self) -> float:
        """The share of map tasks that read all their blocks where they ran."""
        mapped = next(phase for phase in self.phases if phase.name == "map")
        return mapped.local_tasks / mapped.tasks if mapped.tasks else 1.0


def run(
    cluster,
    job: str,
    inputs: Sequence[str],
    output: str,
    *,
    partitions: Optional[int] = None,
    output_format: str = "text",
    output_dir: Optional[os.PathLike] = None,
    input_format: Optional[str] = None,
    piece_bytes_min: int = PIECE_BYTES_MIN,
    progress: Optional[Callable[[str, int, int], None]] = None,
    **params: Any,
) -> ClusterJobReport:
    """Runs built-in job ``job`` over the files ``inputs`` of the cluster's
    file system; see :meth:`spillway.cluster.Cluster.mapreduce`."""
    started = time.monotonic()
    spec, job_format = _native.mapreduce_job_spec(job, **params)
    if output_format not in _EXTENSIONS:
        raise InvalidArgumentError(f"unknown output format {output_format!r}; the formats are text and binary")
    with cluster._job() as members:
        blocks, stored = input_blocks(members, inputs)
        # Records are read as the job reads them (as mapreduce.run does), from
        # blocks cut as the files were stored: lines either way, or one of the
        # binary formats, which must then be the job's.
        format = input_format or job_format
        lines = {"text", "tsv", "csv", "delimited"}
        if format != stored and not (format in lines and stored in lines):
            raise InvalidArgumentError(f"{', '.join(inputs)} was stored as {stored}, which job {job} cannot read as {format}")
        report = ClusterJobReport(job, 0, sum(block.length for block in blocks), 0, 0, 0, [], 0.0)
        progress = progress or (lambda phase, done, total: None)
        directory = str(cluster.directory)

        # Sample.
        phase = PhaseReport("sample")
        picks = [blocks[index * len(blocks) // min(SAMPLE_BLOCKS, len(blocks))] for index in range(min(SAMPLE_BLOCKS, len(blocks)))] if blocks else []
        calls = [
            _sample.options(scheduling_strategy=near(block.holders[0])).remote(spec, members, directory, block, format)
            for block in picks
        ]
        keys: List[bytes] = []
        sampled_in = sampled_out = 0
        for found, input_bytes, output_bytes in gather(calls, lambda done: progress("sample", done, len(calls))):
            keys.extend(found)
            sampled_in += input_bytes
            sampled_out += output_bytes
        phase.tasks, phase.bytes_read = len(picks), sampled_in
        wanted = partitions if partitions is not None else max(1, len(members.ring.nodes))
        partitioner = _native.mapreduce_range_partitioner(keys, max(1, wanted))
        count = len(json.loads(partitioner).get("boundaries", [])) + 1
        report.partitions = count
        phase.seconds = time.monotonic() - started
        report.phases.append(phase)

        # Map.
        phase = PhaseReport("map")
        mark = time.monotonic()
        ratio = sampled_out / sampled_in if sampled_in else 1.0
        tasks = assign(members, blocks, count * piece_bytes_min / max(ratio, 1e-6))

        def map_tasks(tasks: List[Tuple[str, List[Block]]], finished: Callable[[int], None]):
            pieces: List[List[Any]] = [[] for _ in range(count)]
            map_nodes: List[Any] = []
            for node, group in tasks:
                returned = _map.options(num_returns=count + 1, scheduling_strategy=near(node)).remote(
                    spec, members, directory, group, format, partitioner
                )
                for partition in range(count):
                    pieces[partition].append(returned[partition])
                map_nodes.append(returned[count])
            return pieces, gather(map_nodes, finished)

        pieces, stats = map_tasks(tasks, lambda done: progress("map", done, len(tasks)))
        # A node lost during the map phase took the pieces of its finished
        # tasks with it: those tasks run again on live holders before any
        # reduce starts. (Left to Ray's lineage reconstruction, a reduce
        # waited on such a piece for tens of seconds, or for ever.)
        alive = set(cluster._current_ring().nodes)
        lost = [index for index, stat in enumerate(stats) if stat["node"] not in alive]
        if lost:
            again, restats = map_tasks([(live_holder(tasks[index][1], alive), tasks[index][1]) for index in lost], lambda done: None)
            for position, index in enumerate(lost):
                stats[index] = restats[position]
                for partition in range(count):
                    pieces[partition][index] = again[partition][position]
        phase.tasks = len(tasks)
        phase.bytes_read = sum(stat["bytes_read"] for stat in stats)
        phase.local_tasks = sum(stat["local"] for stat in stats)
        report.input_records = sum(stat["records_in"] for stat in stats)
        report.map_records = sum(stat["records_emitted"] for stat in stats)
        phase.seconds = time.monotonic() - mark
        report.phases.append(phase)

        # Reduce.
        phase = PhaseReport("reduce")
        mark = time.monotonic()
        extension = _EXTENSIONS[output_format]
        ring = cluster._current_ring()
        calls = []
        for partition in range(count):
            owner = ring.owner(key_hash(f"{output}\0partition\0{partition}"))
            target = f"{output}/part-{partition:05}.{extension}"
            calls.append(
                _reduce.options(scheduling_strategy=near(owner)).remote(
                    spec, members, partition, target, output_format, None if output_dir is None else str(output_dir),
                    [stat["node"] for stat in stats], *pieces[partition],
                )
            )  # fmt: skip
        for result in gather(calls, lambda done: progress("reduce", done, count)):
            report.output_records += result["records_out"]
            report.outputs.append(result["output"])
            phase.bytes_moved += result["bytes_moved"]
        phase.tasks = count
        phase.seconds = time.monotonic() - mark
        report.phases.append(phase)
        report.seconds = time.monotonic() - started
        # Outputs written while a node left or joined go where the ring now says.
        cluster.settle(members.ring, report.outputs if output_dir is None else [])
        return report


@ray.remote(max_retries=3, retry_exceptions=True)
def _sample(spec: str, members: Members, directory: str, block: Block, format: str):
    scratch = Path(tempfile.mkdtemp(prefix="spillway-sample-"))
    try:
        (keys, input_bytes, output_bytes, _), _ = on_block(
            members, directory, block, scratch,
            lambda path, stored: _native.mapreduce_sample_task(spec, str(path), format, SAMPLE_KEYS_PER_BLOCK, stored),
        )  # fmt: skip
        return keys, input_bytes, output_bytes
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@ray.remote(max_retries=3, retry_exceptions=True)
def _map(spec: str, members: Members, directory: str, group: List[Block], format: str, partitioner: str):
    scratch = Path(tempfile.mkdtemp(prefix="spillway-map-"))
    try:
        count = len(json.loads(partitioner).get("boundaries", [])) + 1
        pieces = [bytearray() for _ in range(count)]
        stat = {"node": ray.get_runtime_context().get_node_id(), "bytes_read": 0, "local": True, "records_in": 0, "records_emitted": 0}
        for block in group:
            (mapped, records_in, emitted), local = on_block(
                members, directory, block, scratch,
                lambda path, stored: _native.mapreduce_map_task(
                    spec, str(path), format, block.input, block.offset, block.source, partitioner, stored
                ),
            )  # fmt: skip
            stat["local"] = stat["local"] and local
            for partition, piece in enumerate(mapped):
                pieces[partition] += piece
            stat["bytes_read"] += block.length
            stat["records_in"] += records_in
            stat["records_emitted"] += emitted
        return (*[bytes(piece) for piece in pieces], stat)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@ray.remote(max_retries=3, retry_exceptions=True)
def _reduce(spec, members, partition, target, output_format, output_dir, map_nodes, *pieces):
    node = ray.get_runtime_context().get_node_id()
    moved = sum(len(piece) for piece, origin in zip(pieces, map_nodes) if origin != node)
    scratch = Path(tempfile.mkdtemp(prefix="spillway-reduce-"))
    try:
        directory = Path(output_dir) if output_dir is not None else scratch
        directory.mkdir(parents=True, exist_ok=True)
        counts = json.loads(_native.mapreduce_reduce_task(spec, partition, list(pieces), str(directory), output_format))
        written = directory / f"part-{partition:05}.{_EXTENSIONS[output_format]}"
        if output_dir is None:
            # A retried task replaces what an earlier try stored.
            if fs.read_record(members, target) is not None:
                fs.rm(members, target)
            fs.put(members, written, target, "kv" if output_format == "binary" else "text", OUTPUT_BLOCK_BYTES)
            where = target
        else:
            where = str(written)
        return {"records_out": counts["records_out"], "output": where, "bytes_moved": moved}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
