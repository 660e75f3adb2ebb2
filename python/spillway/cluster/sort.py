"""TritonSort's 2-IO sort across the cluster's nodes, on gensort data in
the cluster's file system.

1. **Sample.** Sample tasks take evenly spaced keys from up to
   ``SAMPLE_BLOCKS`` blocks; the driver cuts one key range per node from
   them (the sort crate's ``boundaries_from_sample``).
2. **Partition** (read 1, write 1). Range ``r`` has a receiver on live node
   ``r``: an actor holding the sort crate's ``RangeReceiver``, whose
   logical disks cut the range into sub-ranges from the sampled keys that
   fell in it. One task per group of blocks, on a node that holds them,
   reads its blocks, splits their records by range (the sort crate's
   ``Split``) and sends each range's piece to its receiver, which
   routes every record to its logical disk as it arrives; the task returns
   once its pieces are written. So pieces flow to the disks while the phase
   runs, and the object stores hold only the pieces in flight.
3. **Sort** (read 2, write 2). Each receiver sorts its logical disks into
   the range's partitioned output with valsort summaries (the single-node
   engine's phase two).

A node lost midway loses the ranges whose receiver it held. As soon as the
driver sees the node gone, each such range gets a new receiver on the live
node with the fewest: groups partitioned from then on go to it, and the
groups it lacks (those partitioned before, or in flight then) are
partitioned again for it alone at the end of the phase, on live holders of
their blocks. A receiver ignores a group it has written already, so a
partition task retried by Ray after its node died writes nothing twice.
Nothing waits on Ray's lineage reconstruction.

The output stays on the nodes that sorted it (``NODEDIR/sorted/OUTPUT/``);
the report lists its files in key order, and the concatenation of their
summaries validates as one sorted file with the input's checksum. Every
task and receiver measures its own process's I/O (``/proc/self/io``), so
the report can show the bytes each node read and wrote.
"""

from __future__ import annotations

import bisect
import os
import pickle
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, Union

from .. import _native, sortbench
from .._args import size
from ..errors import InvalidArgumentError, SpillwayError
from ._ray import ray
from .fs import Members
from .store import key_name
from .tasks import Block, assign, fetch, gather, gather_submitted, input_blocks, live_holder, near, on, unless_lost

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
    # Partition tasks that read every block from their own node.
    local_share: float = 1.0
    # Key ranges made again after their node was lost.
    ranges_made_again: int = 0
    # Bytes of pieces sent to a receiver on another node.
    bytes_moved: int = 0

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
        sampled = ray.get([_sample.options(scheduling_strategy=near(block.holders[0])).remote(members, directory, block) for block in picks])
        keys = [key for found, _ in sampled for key in found]
        boundaries = _native.sort_boundaries(keys, len(nodes))
        ranges = len(boundaries) + 1
        report.ranges = ranges
        report.phases["sample"] = time.monotonic() - started

        groups = assign(members, blocks, GROUP_BYTES)
        budget = size(memory, "memory")
        samples = _range_samples(keys, boundaries)
        expected = [report.input_bytes * len(sample) // max(1, len(keys)) for sample in samples]
        results: List[Optional[Dict[str, Any]]] = [None] * ranges
        partitioned: List[Dict[str, Any]] = []
        receivers: Dict[int, Any] = {}
        placed: Dict[int, str] = {}

        def alive() -> Set[str]:
            """The nodes alive now."""
            return set(cluster._current_ring().nodes)

        def home(number: int) -> str:
            """Where group ``number`` is partitioned: the node it was given,
            or while that node is gone a live holder of its blocks."""
            node, group = groups[number]
            live = alive()
            return node if node in live else live_holder(group, live)

        def receive(index: int) -> None:
            """A new, empty receiver for range ``index``, on the live node
            that has the fewest."""
            live = sorted(alive())
            load = {node: sum(1 for other in placed.values() if other == node) for node in live}
            placed[index] = min(live, key=lambda node: load[node])
            receivers[index] = _Receiver.options(scheduling_strategy=on(placed[index])).remote(
                directory, output, index, samples[index], expected[index], budget, sync
            )

        def replace(index: int) -> None:
            """A new receiver for range ``index``, whose receiver was lost
            (so many times at most, then the sort fails)."""
            report.ranges_made_again += 1
            if report.ranges_made_again > ranges * len(nodes):
                raise SpillwayError(f"sorting {input}: receivers were lost {report.ranges_made_again} times; giving up")
            receive(index)

        def replace_lost() -> None:
            """New receivers for the unfinished ranges whose node is gone:
            groups partitioned from now on go to them."""
            live = alive()
            for index in range(ranges):
                if results[index] is None and placed[index] not in live:
                    replace(index)

        for index in range(ranges):
            receive(index)
        # Each attempt partitions until every unfinished range's receiver has
        # every group, then sorts them. A receiver lost with its node is
        # replaced as soon as the driver sees the node gone, and gets the
        # groups it lacks: those partitioned after the loss go to it at once,
        # the earlier ones again at the end of the phase.
        for _attempt in range(len(nodes) + 1):
            mark = time.monotonic()
            while True:
                replace_lost()
                lacking = {}
                for index in range(ranges):
                    if results[index] is None:
                        written = unless_lost(receivers[index].written.remote())
                        if written is None:  # its actor died, with its node or alone
                            replace(index)
                            written = set()
                        lacking[index] = set(range(len(groups))) - written
                wanted = sorted({number for need in lacking.values() for number in need})
                if not wanted:
                    break
                # Two partition tasks per node at most: each waits for its
                # pieces to be written, and holds its group meanwhile.
                submit = [
                    lambda number=number: _partition.options(scheduling_strategy=near(home(number))).remote(
                        members, directory, number, groups[number][1], boundaries,
                        {index: (placed[index], receivers[index]) for index, need in lacking.items() if number in need},
                    )
                    for number in wanted
                ]  # fmt: skip

                def finished(done: int) -> None:
                    progress("partition", done, len(wanted))
                    replace_lost()

                partitioned += gather_submitted(submit, 2 * len(alive()), finished)
            report.phases["partition"] = report.phases.get("partition", 0.0) + time.monotonic() - mark

            mark = time.monotonic()
            todo = [index for index in range(ranges) if results[index] is None]
            sorted_ranges = gather([receivers[index].finish.remote() for index in todo], lambda done: progress("sort", done, len(todo)), unless_lost)
            live = alive()
            for index, result in zip(todo, sorted_ranges):
                # A range sorted on a node lost since was lost with it.
                if result is not None and result["groups"] == len(groups) and result["node"] in live:
                    results[index] = result
                else:
                    replace(index)
            report.phases["sort"] = report.phases.get("sort", 0.0) + time.monotonic() - mark
            if all(result is not None for result in results):
                break
        missing = [index for index in range(ranges) if results[index] is None]
        if missing:
            raise SpillwayError(f"sorting {input}: key ranges {missing} were lost with a node in each of {len(nodes) + 1} attempts")
        report.local_share = sum(stat["local"] for stat in partitioned) / len(partitioned) if partitioned else 1.0
        report.bytes_moved = sum(stat["moved"] for stat in partitioned)

        io: Dict[str, NodeIO] = {}
        for stat in [*(stat for _, stat in sampled), *partitioned, *results]:
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
def _sample(members: Members, directory: str, block: Block) -> Tuple[List[bytes], Dict[str, Any]]:
    """Evenly spaced keys of ``block``: read one by one from this node's
    copy (a sample needs no checksum: a damaged copy only skews the ranges,
    and the partition phase checks what it reads), else from a holder's."""
    before = _io()
    node = ray.get_runtime_context().get_node_id()
    records = block.length // RECORD_BYTES
    offsets = [index * RECORD_BYTES for index in range(0, records, max(1, records // SAMPLE_KEYS_PER_BLOCK))]
    keys = None
    if node in block.holders:
        try:
            with open(Path(directory) / node / "blocks" / key_name(block.key), "rb") as file:
                if os.fstat(file.fileno()).st_size == block.length:
                    keys = [os.pread(file.fileno(), KEY_BYTES, offset) for offset in offsets]
        except OSError:
            keys = None
    if keys is None:
        data = fetch(members, directory, block).data
        keys = [data[offset : offset + KEY_BYTES] for offset in offsets]
    return keys, {"node": node, "io": _since(before)}


@ray.remote(max_retries=3, retry_exceptions=True)
def _partition(
    members: Members, directory: str, number: int, group: List[Block], boundaries: List[bytes],
    receivers: Dict[int, Tuple[str, Any]],
):  # fmt: skip
    """Partitions group ``number`` and sends each range's piece to its
    receiver in ``receivers`` (range: its node and its actor), returning
    once they are written (a receiver lost with its node is skipped: the
    driver makes its range again)."""
    before = _io()
    node = ray.get_runtime_context().get_node_id()
    # Each range's pieces, one per block, as views of the block's split
    # records: Ray writes such a buffer straight into the object store,
    # where pickling a bytes object would copy it once more, and so would
    # joining the pieces.
    pieces: List[List[pickle.PickleBuffer]] = [[] for _ in range(len(boundaries) + 1)]
    local = True
    for block in group:
        fetched = fetch(members, directory, block)
        local = local and fetched.local
        records, ends = _native.sort_split_records(fetched.data, boundaries)
        del fetched
        view = memoryview(records)
        for index, (start, end) in enumerate(zip([0, *ends], ends)):
            pieces[index].append(pickle.PickleBuffer(view[start:end]))
    sent = [receiver.append.remote(number, pieces[index]) for index, (_, receiver) in receivers.items()]
    moved = sum(piece.raw().nbytes for index, (there, _) in receivers.items() if there != node for piece in pieces[index])
    del pieces
    for call in sent:
        unless_lost(call)
    return {"node": node, "local": local, "moved": moved, "io": _since(before)}


@ray.remote(num_cpus=0, max_restarts=0)
class _Receiver:
    """Range ``index`` on this node: TritonSort's receiver. The pieces every
    group sends are routed to the node's logical disks as they arrive
    (write 1; each group once), then sorted into the range's output (read 2,
    write 2) by the sort crate's ``RangeReceiver``."""

    def __init__(self, directory: str, output: str, index: int, sample: List[bytes], expected_bytes: int, memory: int, sync: bool) -> None:
        self.before = _io()
        self.node = ray.get_runtime_context().get_node_id()
        base = Path(directory) / self.node / "sorted" / output
        self.target = base / f"range-{index:05}"
        shutil.rmtree(self.target, ignore_errors=True)
        self.disks = base / f"disks-{index:05}"
        self.disks.mkdir(parents=True, exist_ok=True)
        self.receiver = _native.SortReceiver(sample, expected_bytes, memory=memory, tmp=str(self.disks), threads=1, sync=sync)
        self.groups: set = set()

    def append(self, group: int, pieces: List[Any]) -> None:
        """Writes group ``group``'s pieces (buffers in the object store)
        unless it was written before."""
        if group not in self.groups:
            for piece in pieces:
                self.receiver.append(bytes(piece))
            self.groups.add(group)

    def written(self) -> set:
        """The groups whose pieces this receiver has written."""
        return set(self.groups)

    def finish(self) -> Dict[str, Any]:
        self.receiver.finish(str(self.target))
        files = sorted(str(part) for part in self.target.glob("part-*.dat"))
        summary = (self.target / "all.sum").read_bytes()
        shutil.rmtree(self.disks, ignore_errors=True)
        return {"node": self.node, "directory": str(self.target), "files": files, "summary": summary,
                "groups": len(self.groups), "io": _since(self.before)}  # fmt: skip


def _range_samples(keys: List[bytes], boundaries: List[bytes]) -> List[List[bytes]]:
    """The sampled keys of each range (a receiver cuts its logical disks
    from them)."""
    samples: List[List[bytes]] = [[] for _ in range(len(boundaries) + 1)]
    for key in keys:
        samples[bisect.bisect_right(boundaries, key)].append(key)
    return samples
