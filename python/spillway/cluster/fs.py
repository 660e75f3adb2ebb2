"""The cluster's file system: files cut into blocks of whole records, each
block on the ring owner of its key and that owner's successors, the file's
record on the owners of its name's key.

Every function here takes :class:`Members`: the ring, one block-store actor
per live node, and the replication factor. A block read tries its holders
in ring order; a copy that fails its checksum is replaced from a good one
(and the read goes on), so one damaged copy costs a retry, not the file.
:func:`rebalance` moves what a membership change displaced: a node that
joined receives the blocks it now holds, a node that left has its copies
made again from the survivors.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from ..errors import CorruptionError, InvalidArgumentError, SpillwayError
from ._ray import ray
from .ring import Ring, block_key, key_hash

# Blocks sent at once by put and rebalance: enough to keep every node
# writing, few enough that the driver holds a bounded amount of data.
IN_FLIGHT_BLOCKS = 4
FORMATS = ("text", "tsv", "csv", "gensort", "kv")
FILE_RECORD_VERSION = 1


@dataclass
class Members:
    """Who holds what now: the ring of live nodes and their stores (actor
    handles, so a task can be given these too)."""

    ring: Ring
    stores: Dict[str, Any]
    factor: int
    # Ray node id -> node-N, for what users read.
    names: Dict[str, str]

    def holders(self, key: int) -> List[str]:
        return self.ring.replicas(key, self.factor)

    def live_holders(self, key: int) -> List[str]:
        """The holders of ``key`` that still have a store (a node that left
        since the ring was made has none)."""
        return [node for node in self.holders(key) if node in self.stores]


@dataclass(frozen=True)
class FileStat:
    """A file of the cluster's file system: its record and where its blocks are."""

    name: str
    size: int
    format: str
    replication: int
    # (index, ring key, length, CRC-32, holders' names in ring order)
    blocks: Tuple[Tuple[int, int, int, int, Tuple[str, ...]], ...]
    record_holders: Tuple[str, ...]


def put(members: Members, local_path: os.PathLike, name: str, format: str, block_bytes: int) -> FileStat:
    """Stores the local file ``local_path`` as ``name``."""
    from .. import _native

    _check_name(name)
    if format not in FORMATS:
        raise InvalidArgumentError(f"unknown format {format!r}; the formats are {', '.join(FORMATS)}")
    path = Path(local_path)
    if read_record(members, name) is not None:
        raise InvalidArgumentError(f"{name} already exists in the cluster's file system; remove it first")
    pieces = _native.mapreduce_whole_record_blocks(str(path), format, block_bytes)
    blocks = []
    pending: List[Tuple[Any, Tuple[int, str]]] = []
    lost: List[Tuple[int, str]] = []
    with open(path, "rb") as source:
        for index, (offset, length) in enumerate(pieces):
            source.seek(offset)
            data = source.read(length)
            if len(data) != length:
                raise SpillwayError(f"{path} changed while it was being stored (block {index} is short)")
            key = block_key(name, index)
            crc = zlib.crc32(data)
            blocks.append([index, key, length, crc])
            reference = ray.put(data)
            pending.extend(
                (members.stores[node].put_block.remote(key, reference, crc), (key, node))
                for node in members.live_holders(key)
            )
            del data, reference
            pending = _drain(pending, IN_FLIGHT_BLOCKS * members.factor, lost)
    _drain(pending, 0, lost)
    for _, key, _, _ in blocks:
        if all((key, node) in lost for node in members.live_holders(key)):
            raise SpillwayError(f"{name}: every holder of block {key:016x} was lost while it was written")
    record = {
        "version": FILE_RECORD_VERSION,
        "name": name,
        "size": sum(length for _, _, length, _ in blocks),
        "format": format,
        "block_bytes": block_bytes,
        "replication": members.factor,
        "blocks": blocks,
    }
    write_record(members, record)
    return stat(members, name)


def get(members: Members, name: str, local_path: os.PathLike) -> FileStat:
    """Writes ``name`` to ``local_path`` (whole or not at all)."""
    record = _require(members, name)
    target = Path(local_path)
    partial = target.with_name(f".{target.name}.spillway-partial")
    try:
        with open(partial, "wb") as out:
            for index, key, length, crc in record["blocks"]:
                data = read_block(members, name, key, length, crc)
                out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, target)
    finally:
        if partial.exists():
            partial.unlink()
    return stat(members, name)


def rm(members: Members, name: str) -> None:
    """Removes ``name``: its blocks, then its record."""
    record = _require(members, name)
    _on_every_store(members, "delete_blocks", [key for _, key, _, _ in record["blocks"]])
    _on_every_store(members, "delete_file", key_hash(name))


def ls(members: Members) -> List[str]:
    """Every file name, sorted."""
    names = set()
    for records in _on_every_store(members, "file_records"):
        names.update(record["name"] for record in records)
    return sorted(names)


def stat(members: Members, name: str) -> FileStat:
    record = _require(members, name)
    return FileStat(
        name=record["name"],
        size=record["size"],
        format=record["format"],
        replication=record["replication"],
        blocks=tuple(
            (index, key, length, crc, _names(members, key)) for index, key, length, crc in record["blocks"]
        ),
        record_holders=_names(members, key_hash(name)),
    )


def read_block(members: Members, name: str, key: int, length: int, crc: int, damaged: Optional[str] = None) -> bytes:
    """Block ``key`` of ``name`` from the first holder with a good copy;
    the live holders whose copy was missing or damaged get it again: those
    found so, and ``damaged``, a holder whose copy its own node found bad
    (it is not read again)."""
    failures: List[Tuple[str, str]] = [(damaged, DAMAGED)] if damaged is not None else []
    for node in members.live_holders(key):
        if node == damaged:
            continue
        try:
            data = ray.get(members.stores[node].get_block.remote(key, crc))
        except Exception as error:  # a damaged or missing copy, or a node gone
            failures.append((node, _reason(error)))
            continue
        ray.get([members.stores[bad].put_block.remote(key, data, crc) for bad, reason in failures if reason != GONE])
        return data
    detail = "; ".join(f"{node}: {reason}" for node, reason in failures)
    raise CorruptionError(f"{name}: no good copy of block {key:016x} ({length} bytes) on any holder ({detail})")


def read_record(members: Members, name: str) -> Optional[Dict[str, Any]]:
    """The record of ``name`` from the first holder with a good one (the
    live others get it again), or None when no live holder has one."""
    key = key_hash(name)
    failures: List[Tuple[str, str]] = []
    for node in members.live_holders(key):
        try:
            record = ray.get(members.stores[node].get_file.remote(key))
        except Exception as error:
            failures.append((node, _reason(error)))
            continue
        if record is None:
            failures.append((node, ABSENT))
            continue
        ray.get([members.stores[bad].put_file.remote(key, record) for bad, reason in failures if reason != GONE])
        return record
    damaged = [f"{node}: {reason}" for node, reason in failures if reason not in (ABSENT, GONE)]
    if damaged:
        raise CorruptionError(f"{name}: no good copy of its file record ({'; '.join(damaged)})")
    return None


def write_record(members: Members, record: Dict[str, Any]) -> None:
    key = key_hash(record["name"])
    holders = members.live_holders(key)
    lost: List[Tuple[int, str]] = []
    _drain([(members.stores[node].put_file.remote(key, record), (key, node)) for node in holders], 0, lost)
    if len(lost) == len(holders):
        raise SpillwayError(f"{record['name']}: every holder of its record was lost while it was written")


# Parts of a rebalance: blocks left with fewer than two live copies, which
# are repaired at once, and the others, which may wait for running jobs.
URGENT, REST, ALL = "urgent", "rest", "all"


def rebalance(members: Members, before: Ring, names: Optional[Set[str]] = None, part: str = ALL) -> int:
    """After a membership change from ``before`` to ``members.ring``: gives
    every block and record (of the files ``names``, when given) to the
    nodes that now hold it (copied from a live node that held it, with a
    good copy) and removes it from live nodes that no longer should. A file
    keeps its records' replication where the cluster still has the nodes,
    and takes the cluster's when it has fewer. ``part`` URGENT does only the
    blocks left with fewer than two live copies, REST the others (records
    in both). A node that dies meanwhile is left to the rebalance of that
    change. Returns the blocks copied."""
    records = {}
    for found in _on_every_store(members, "file_records"):
        for record in found:
            if names is None or record["name"] in names:
                records[record["name"]] = record
    copied = 0
    pending: List[Tuple[Any, Tuple[int, str]]] = []
    gone: List[Tuple[int, str]] = []
    # A copy goes node to node: the target's put_block takes the source's
    # get_block result as its argument, which Ray moves between the nodes
    # (no store waits on another, and nothing passes through this driver).
    copies: Dict[Any, Tuple[str, int, int, str, List[str], List[str]]] = {}

    def copy(name: str, key: int, crc: int, target: str, sources: List[str], failures: Optional[List[str]] = None):
        if not sources:
            raise CorruptionError(f"{name}: block {key:016x} has no surviving holder to replicate from")
        data = members.stores[sources[0]].get_block.remote(key, crc)
        call = members.stores[target].put_block.remote(key, data, crc)
        copies[call] = (name, key, crc, target, sources, failures or [])
        return call, (key, target)

    def retry(call: Any, error: BaseException):
        """The next source for a copy whose source failed (a damaged or
        missing copy, or a node gone); None when none is left."""
        if call not in copies:
            return None
        name, key, crc, target, sources, failures = copies.pop(call)
        failures = [*failures, f"{sources[0]}: {_reason(error)}"]
        if len(sources) > 1:
            return copy(name, key, crc, target, sources[1:], failures)
        if isinstance(error, ray.exceptions.RayActorError):
            return None  # the target's node may be gone: a later rebalance's
        raise CorruptionError(f"{name}: block {key:016x} has no good copy left to replicate from ({'; '.join(failures)})")

    for name, record in sorted(records.items()):
        old_factor = record["replication"]
        record = dict(record, replication=min(old_factor, len(members.ring.nodes)))
        factor = record["replication"]

        def moves(key: int) -> Tuple[List[str], List[str], List[str]]:
            """Live old holders (the sources), nodes to gain a copy, live
            nodes to drop theirs."""
            added, dropped = before.changes(members.ring, key, old_factor, factor)
            live = [node for node in before.replicas(key, old_factor) if node in members.stores]
            return live, added, [node for node in dropped if node in members.stores]

        key = key_hash(name)
        _, added, dropped = moves(key)
        # Every holder gets the record again: its replication may have changed.
        pending.extend((members.stores[node].put_file.remote(key, record), (key, node)) for node in members.ring.replicas(key, factor))
        pending.extend((members.stores[node].delete_file.remote(key), (key, node)) for node in dropped)
        for _, key, length, crc in record["blocks"]:
            live, added, dropped = moves(key)
            urgent = bool(added) and len(live) < 2
            if part != ALL and urgent != (part == URGENT):
                continue
            if added:
                pending.extend(copy(name, key, crc, node, live) for node in added)
                copied += 1
            pending.extend((members.stores[node].delete_block.remote(key), (key, node)) for node in dropped)
            pending = _drain(pending, IN_FLIGHT_BLOCKS * factor, gone, retry)
    _drain(pending, 0, gone, retry)
    return copied


def _names(members: Members, key: int) -> Tuple[str, ...]:
    return tuple(members.names[node] for node in members.holders(key))


def _require(members: Members, name: str) -> Dict[str, Any]:
    _check_name(name)
    record = read_record(members, name)
    if record is None:
        raise InvalidArgumentError(f"no file {name} in the cluster's file system")
    return record


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or "\0" in name:
        raise InvalidArgumentError(f"a file name is a non-empty string without NUL bytes, not {name!r}")


def _drain(
    pending: List[Tuple[Any, Tuple[int, str]]], keep: int, lost: Optional[List[Tuple[int, str]]] = None,
    retry: Optional[Callable[[Any, BaseException], Optional[Tuple[Any, Tuple[int, str]]]]] = None,
):  # fmt: skip
    """Waits until at most ``keep`` of the ``(call, (key, node))`` pairs are
    in flight, raising the first failure; a failed call that ``retry``
    replaces (returning the new pair) goes on as that one, and a call to a
    store whose node is gone is added to ``lost`` instead, when given."""
    while len(pending) > keep:
        done, _ = ray.wait([call for call, _ in pending], num_returns=len(pending) - keep)
        finished = set(done)
        again = []
        for call, what in pending:
            if call not in finished:
                continue
            try:
                ray.get(call)
            except Exception as error:
                replaced = retry(call, error) if retry is not None else None
                if replaced is not None:
                    again.append(replaced)
                elif isinstance(error, ray.exceptions.RayActorError) and lost is not None:
                    lost.append(what)
                else:
                    raise
        pending = [entry for entry in pending if entry[0] not in finished] + again
    return pending


def _on_every_store(members: Members, method: str, *arguments: Any) -> List[Any]:
    """Calls ``method`` on every store whose node lives; their results."""
    results = []
    for call in [getattr(store, method).remote(*arguments) for store in members.stores.values()]:
        try:
            results.append(ray.get(call))
        except ray.exceptions.RayActorError:
            continue
    return results


# Why a holder gave nothing: it holds no copy, or its node is gone.
ABSENT = "absent"
DAMAGED = "damaged or missing, found by its node"
GONE = "its node is gone"


def _reason(error: BaseException) -> str:
    if isinstance(error, ray.exceptions.RayActorError):
        return GONE
    cause = getattr(error, "cause", None) or error
    return f"{type(cause).__name__}: {cause}"
