"""TritonSort's 2-IO sort across the cluster's nodes, on gensort data in
the cluster's file system.

1. **Sample.** Sample tasks take evenly spaced keys from up to
   ``SAMPLE_BLOCKS`` blocks; the driver cuts one key range per node from
   them (the sort crate's ``boundaries_from_sample``).
2. **Partition** (read 1). One task per group of blocks, on a node that
   holds them, reads its blocks and splits their records by range (the sort
   crate's ``split_records``), returning one Ray object per range.
3. **Sort** (write 1, read 2, write 2). Range ``r`` belongs to live node
   ``r`` (a group whose pieces were lost with a node is partitioned again
   first). Its task there writes the pieces of its range, one at a
   time, into a run file (the "logical disk"), then sorts the run with the
   single-node engine (``spillway.sort``, partitioned output with valsort
   summaries), which reads it once and writes it once when it fits the
   memory given, and removes the run.

The output stays on the nodes that sorted it (``NODEDIR/sorted/OUTPUT/``);
the report lists its files in key order, and the concatenation of their
summaries validates as one sorted file with the input's checksum. Every
task measures its own process's I/O (``/proc/self/io``) around its work, so
the report can show the bytes each node read and wrote.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Union

from .. import _native, sortbench
from ..errors import InvalidArgumentError
from ._ray import ray
from .fs import Members
from .tasks import Block, assign, fetch, gather, input_blocks, near

SAMPLE_BLOCKS = 16
SAMPLE_KEYS_PER_BLOCK = 2_000
RECORD_BYTES = 100
KEY_BYTES = 10
GROUP_BYTES = 64 << 20


@dataclass
class NodeIO:
    """What one node's tasks read and wrote (``/proc/self/io``): bytes
    passed to read and write calls, and bytes that reached the device."""

    node: str
    read_bytes: int = 0
    write_bytes: int = 0
    device_read_bytes: int = 0
    device_write_bytes: int = 0


@dataclass
class ClusterSortReport:
    """What a cluster sort did."""

    input: str
    records: int
    input_bytes: int
    ranges: int
    # (node, directory) of each range's output, in key order.
    outputs: List[Dict[str, Any]]
    # valsort of the concatenated summaries: sorted, records, checksum.
    valsort: Any
    seconds: float
    phases: Dict[str, float] = field(default_factory=dict)
    io: List[NodeIO] = field(default_factory=list)
    # Map tasks that read every block from their own node.
    local_share: float = 1.0

    @property
    def reads_per_byte(self) -> float:
        return sum(node.read_bytes for node in self.io) / self.input_bytes if self.input_bytes else 0.0

    @property
    def writes_per_byte(self) -> float:
        return sum(node.write_bytes for node in self.io) / self.input_bytes if self.input_bytes else 0.0


def run(
    cluster,
    input: str,
    output: str,
    *,
    memory: Union[int, str] = "1G",
    sync: bool = True,
    progress: Optional[Callable[[str, int, int], None]] = None,
) -> ClusterSortReport:
    """Sorts the gensort file ``input`` of the cluster's file system; see
    :meth:`spillway.cluster.Cluster.sort`."""
    started = time.monotonic()
    progress = progress or (lambda phase, done, total: None)
    with cluster._job() as members:
        blocks, format = input_blocks(members, [input])
        if format != "gensort":
            raise InvalidArgumentError(f"{input} was stored as {format}; the sort takes gensort records (put it with format='gensort')")
        directory = str(cluster.directory)
        nodes = list(members.ring.nodes)
        report = ClusterSortReport(input, sum(block.length for block in blocks) // RECORD_BYTES, sum(block.length for block in blocks), 0, [], None, 0.0)

        picks = [blocks[index * len(blocks) // min(SAMPLE_BLOCKS, len(blocks))] for index in range(min(SAMPLE_BLOCKS, len(blocks)))]
        keys = [key for found in ray.get([_sample.options(scheduling_strategy=near(block.holders[0])).remote(members, directory, block) for block in picks]) for key in found]
        boundaries = _native.sort_boundaries(keys, len(nodes))
        ranges = len(boundaries) + 1
        report.ranges = ranges
        report.phases["sample"] = time.monotonic() - started

        mark = time.monotonic()
        groups = assign(members, blocks, GROUP_BYTES)
        pieces, stats = _partition_groups(members, directory, groups, boundaries, lambda done: progress("partition", done, len(groups)))
        # A node lost during the partition phase took its tasks' pieces with
        # it: their groups are partitioned again on live nodes, and the
        # ranges are sorted on live nodes, before any range task starts, so
        # no range task waits on a piece that only Ray's lineage
        # reconstruction could bring back (seen to wait forever when range
        # tasks already held the object store).
        alive = set(cluster._current_ring().nodes)
        lost = [index for index, stat in enumerate(stats) if stat["node"] not in alive]
        if lost:
            again = [(_live_holder(group, alive), group) for _, group in (groups[index] for index in lost)]
            redone, restats = _partition_groups(members, directory, again, boundaries, lambda done: None)
            for position, index in enumerate(lost):
                stats[index] = restats[position]
                for range_pieces, range_redone in zip(pieces, redone):
                    range_pieces[index] = range_redone[position]
        report.local_share = sum(stat["local"] for stat in stats) / len(stats) if stats else 1.0
        report.phases["partition"] = time.monotonic() - mark

        mark = time.monotonic()
        placed = sorted(alive)
        calls = [
            _sort_range.options(scheduling_strategy=near(placed[index % len(placed)])).remote(
                directory, output, index, pieces[index], memory, sync
            )
            for index in range(ranges)
        ]
        del pieces
        results = gather(calls, lambda done: progress("sort", done, ranges))
        report.phases["sort"] = time.monotonic() - mark

        io: Dict[str, NodeIO] = {}
        for stat in [*stats, *results]:
            node = io.setdefault(stat["node"], NodeIO(members.names.get(stat["node"], stat["node"][:8])))
            node.read_bytes += stat["io"]["rchar"]
            node.write_bytes += stat["io"]["wchar"]
            node.device_read_bytes += stat["io"]["read_bytes"]
            node.device_write_bytes += stat["io"]["write_bytes"]
        report.io = sorted(io.values(), key=lambda node: node.node)
        report.outputs = [{"node": members.names.get(result["node"], result["node"]), "directory": result["directory"], "files": result["files"]} for result in results]
        scratch = Path(tempfile.mkdtemp(prefix="spillway-sort-summary-"))
        try:
            summary = scratch / "all.sum"
            summary.write_bytes(b"".join(result["summary"] for result in results))
            report.valsort = sortbench.valsort(summary, summaries=True)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        report.seconds = time.monotonic() - started
        cluster.settle(members.ring, [])
        return report


def _partition_groups(members: Members, directory: str, groups, boundaries: List[bytes], finished: Callable[[int], None]):
    """Runs one partition task per ``(node, group)``: the pieces of each
    range (one Ray object per task) and each task's statistics."""
    pieces: List[List[Any]] = [[] for _ in range(len(boundaries) + 1)]
    stats = []
    for node, group in groups:
        returned = _partition.options(num_returns=len(pieces) + 1, scheduling_strategy=near(node)).remote(members, directory, group, boundaries)
        for index, range_pieces in enumerate(pieces):
            range_pieces.append(returned[index])
        stats.append(returned[-1])
    return pieces, gather(stats, finished)


def _live_holder(group: List[Block], alive: set) -> str:
    """A live node holding the group's first block (any live node when none
    does: the task then reads the block from a holder)."""
    return next((node for node in group[0].holders if node in alive), min(alive))


def _io() -> Dict[str, int]:
    """This process's I/O counters."""
    counters = {}
    with open("/proc/self/io") as lines:
        for line in lines:
            name, value = line.split(":")
            counters[name] = int(value)
    return counters


def _since(before: Dict[str, int]) -> Dict[str, int]:
    after = _io()
    return {name: after[name] - before[name] for name in ("rchar", "wchar", "read_bytes", "write_bytes")}


@ray.remote(max_retries=3, retry_exceptions=True)
def _sample(members: Members, directory: str, block: Block) -> List[bytes]:
    data = fetch(members, directory, block).data
    records = len(data) // RECORD_BYTES
    step = max(1, records // SAMPLE_KEYS_PER_BLOCK)
    return [data[index * RECORD_BYTES : index * RECORD_BYTES + KEY_BYTES] for index in range(0, records, step)]


@ray.remote(max_retries=3, retry_exceptions=True)
def _partition(members: Members, directory: str, group: List[Block], boundaries: List[bytes]):
    before = _io()
    pieces: List[List[bytes]] = [[] for _ in range(len(boundaries) + 1)]
    local = True
    for block in group:
        fetched = fetch(members, directory, block)
        local = local and fetched.local
        for index, piece in enumerate(_native.sort_split_records(fetched.data, boundaries)):
            pieces[index].append(piece)
    stat = {"node": ray.get_runtime_context().get_node_id(), "local": local, "io": _since(before)}
    return (*[b"".join(parts) for parts in pieces], stat)


@ray.remote(max_retries=3, retry_exceptions=True)
def _sort_range(directory: str, output: str, index: int, pieces: List[Any], memory, sync: bool):
    before = _io()
    node = ray.get_runtime_context().get_node_id()
    base = Path(directory) / node / "sorted" / output
    run = base / f"run-{index:05}.dat"
    target = base / f"range-{index:05}"
    base.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(target, ignore_errors=True)
    try:
        with open(run, "wb") as file:
            # One piece at a time: the range never sits whole in memory.
            for piece in pieces:
                file.write(ray.get(piece))
            if sync:
                file.flush()
                os.fsync(file.fileno())
        sortbench.sort(run, target, memory=memory, partitioned=True, sync=sync, threads=1)
    finally:
        run.unlink(missing_ok=True)
    files = sorted(str(path) for path in target.glob("part-*.dat"))
    summary = (target / "all.sum").read_bytes()
    return {"node": node, "directory": str(target), "files": files, "summary": summary, "io": _since(before)}
