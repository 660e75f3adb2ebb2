"""What the cluster's jobs share: a job's input blocks, their placement on
holders, reading a block inside a task (its own node's copy when it has a
good one), and waiting for tasks with progress.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, TypeVar

from ..errors import CorruptionError, InvalidArgumentError, SpillwayIOError
from . import fs
from ._ray import ray
from .fs import Members
from .store import key_name


@dataclass(frozen=True)
class Block:
    """One block of a job's input: its file (name, and index among the
    inputs), place in it, ring key and checksum, and its number in the job."""

    file: str
    input: int
    offset: int
    key: int
    length: int
    crc: int
    source: int
    holders: Tuple[str, ...]


def input_blocks(members: Members, inputs: Sequence[str]) -> Tuple[List[Block], str]:
    """Every block of the files ``inputs``, in order, and their format (one
    for all)."""
    if isinstance(inputs, str):
        inputs = [inputs]
    if not inputs:
        raise InvalidArgumentError("a job needs at least one input file")
    blocks: List[Block] = []
    formats = set()
    for input, name in enumerate(inputs):
        record = fs._require(members, name)
        formats.add(record["format"])
        offset = 0
        for _, key, length, crc in record["blocks"]:
            blocks.append(Block(name, input, offset, key, length, crc, len(blocks), tuple(members.holders(key))))
            offset += length
    if len(formats) > 1:
        raise InvalidArgumentError(f"the inputs of one job must have one format; these have {', '.join(sorted(formats))}")
    return blocks, formats.pop()


def assign(members: Members, blocks: List[Block], group_bytes: float) -> List[Tuple[str, List[Block]]]:
    """Blocks given to their least-loaded holder (so every task can read
    where it runs), then grouped per node, in order, into tasks of about
    ``group_bytes`` of input (at least one block each)."""
    load = {node: 0 for node in members.ring.nodes}
    mine: Dict[str, List[Block]] = {node: [] for node in members.ring.nodes}
    for block in sorted(blocks, key=lambda block: -block.length):
        node = min(block.holders, key=lambda holder: (load[holder], block.holders.index(holder)))
        load[node] += block.length
        mine[node].append(block)
    tasks = []
    for node, assigned in mine.items():
        group: List[Block] = []
        size = 0
        for block in sorted(assigned, key=lambda block: block.source):
            group.append(block)
            size += block.length
            if size >= group_bytes:
                tasks.append((node, group))
                group, size = [], 0
        if group:
            tasks.append((node, group))
    return tasks


def live_holder(group: List[Block], alive: Set[str]) -> str:
    """A live node holding the group's first block, for a task that runs
    again after its node was lost (any live node when none holds it: the
    task then reads the block from a holder)."""
    return next((node for node in group[0].holders if node in alive), min(alive))


def near(node: str):
    """Run on ``node`` while it lives, elsewhere when it is gone."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node, soft=True)


def on(node: str):
    """Run on ``node`` only (a task that needs what only that node's disk
    holds); it fails when the node is gone."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node, soft=False)


def unless_lost(call: Any) -> Any:
    """The call's result, or None when it was lost with its node (its actor
    or worker died, or it could not be placed on a node that is gone)."""
    try:
        return ray.get(call)
    except (ray.exceptions.RayActorError, ray.exceptions.ActorUnschedulableError, ray.exceptions.WorkerCrashedError,
            ray.exceptions.NodeDiedError, ray.exceptions.TaskUnschedulableError, ray.exceptions.ObjectLostError):  # fmt: skip
        return None


def gather(calls: List[Any], finished: Callable[[int], None], get: Callable[[Any], Any] = ray.get) -> List[Any]:
    """The calls' results in order (each taken with ``get``), calling
    ``finished`` with the count done as each one ends (so a progress bar, or
    a test, sees the job midway)."""
    return gather_submitted([lambda call=call: call for call in calls], len(calls) or 1, finished, get)


def gather_submitted(
    submit: List[Callable[[], Any]], window: int, finished: Callable[[int], None],
    get: Callable[[Any], Any] = ray.get,
) -> List[Any]:  # fmt: skip
    """Like :func:`gather`, for calls made by ``submit`` with at most
    ``window`` of them running at once: a task that waits inside (and so
    gives its CPU back to Ray) does not let more tasks start, and hold more
    memory, than the window."""
    results: List[Any] = [None] * len(submit)
    position: Dict[Any, int] = {}
    waiting = list(range(len(submit)))[::-1]
    running: List[Any] = []
    done_count = 0
    while waiting or running:
        while waiting and len(running) < window:
            index = waiting.pop()
            call = submit[index]()
            position[call] = index
            running.append(call)
        done, running = ray.wait(running, num_returns=1)
        results[position.pop(done[0])] = get(done[0])
        done_count += 1
        finished(done_count)
    return results


@dataclass
class Fetched:
    """A block inside a task: its bytes, and whether they were this node's
    own copy."""

    data: bytes
    local: bool


def fetch(members: Members, directory: str, block: Block) -> Fetched:
    """Block ``block`` for a task on this node: the node's own copy when it
    holds a good one (read once, checked), else a good copy read from a
    holder (repairing damaged ones)."""
    node = ray.get_runtime_context().get_node_id()
    if node in block.holders:
        try:
            data = (Path(directory) / node / "blocks" / key_name(block.key)).read_bytes()
        except OSError:
            data = b""
        if len(data) == block.length and zlib.crc32(data) == block.crc:
            return Fetched(data, True)
    return Fetched(_read_elsewhere(members, block, node), False)


def _read_elsewhere(members: Members, block: Block, node: str) -> bytes:
    """A good copy of ``block`` from a holder for a task on ``node``, whose
    own copy, when it holds one, was found missing or damaged and is
    repaired."""
    damaged = node if node in block.holders else None
    return fs.read_block(members, block.file, block.key, block.length, block.crc, damaged)


T = TypeVar("T")


def on_block(
    members: Members, directory: str, block: Block, scratch: Path,
    work: Callable[[Path, Optional[Tuple[int, int]]], T],
) -> Tuple[T, bool]:  # fmt: skip
    """``work(path, stored)`` on block ``block`` inside a task on this node,
    and whether the node's own copy served. ``work`` gets the node's own
    copy with ``stored`` (its length and CRC-32), which the Rust task checks
    as it reads it, so the block is read from disk once; when the node holds
    no copy, or its copy fails that check, ``work`` gets a good copy read
    from a holder (damaged copies repaired) in ``scratch``, already checked
    (``stored`` None)."""
    node = ray.get_runtime_context().get_node_id()
    if node in block.holders:
        try:
            return work(Path(directory) / node / "blocks" / key_name(block.key), (block.length, block.crc)), True
        except (CorruptionError, SpillwayIOError):  # damaged or missing: read_block repairs it
            pass
    copy = scratch / key_name(block.key)
    copy.write_bytes(_read_elsewhere(members, block, node))
    try:
        return work(copy, None), False
    finally:
        copy.unlink()
