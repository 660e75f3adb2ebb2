"""A persistent hash table (CCEH, cacheline-conscious extendible hashing) in a region file.

>>> from spillway.pmem import HashTable
>>> with HashTable("/dev/shm/counts.pmem", persistence="clwb") as table:   # doctest: +SKIP
...     table[42] = 7
...     table[42]
7

Keys and values are whole numbers from 0 to 2^64 - 1. Every change is
durable when the call returns: the table's writes go through cache-line
flushes and fences (``persistence``: ``"clwb"``, ``"clflushopt"``,
``"clflush"``, ``"auto"``, ``"fence"`` for persistent caches, ``"none"``, or
``"latency:300ns"`` to emulate slower media), and a crash at any point
leaves a table that the next open recovers with every completed change.
See ``docs/pmem.md``.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from . import _native
from . import _args
from ._args import count
from .errors import InvalidArgumentError

PathLike = Union[str, "os.PathLike[str]"]


def _key(value: Any) -> int:
    return count(value, "a key")


def _value(value: Any) -> int:
    return count(value, "a value")


class HashTable:
    """A CCEH table in the region file ``path``: opened if it exists, else created.

    ``segment_bytes`` (a power of two, at least 256), ``probe`` (buckets an
    insert looks at) and ``size`` (the region's bytes, a number or text such
    as ``"1G"``) apply when the table is created; an existing table keeps
    its own. Behaves as a mapping of ints to ints; ``close()`` (or the
    ``with`` block's end) marks it closed so that the next open needs no
    recovery.
    """

    def __init__(self, path: PathLike, persistence: str = "auto", *, segment_bytes: int = 16384,
                 probe: int = 4, size: Union[int, str] = "64M") -> None:
        if not isinstance(persistence, str):
            raise InvalidArgumentError(f"persistence must be a name such as 'clwb', not {persistence!r}")
        self._path = os.fspath(path)
        self._native = _native.HashTable(self._path, persistence, count(segment_bytes, "segment_bytes"),
                                         count(probe, "probe"), _args.size(size, "size"))

    def __getitem__(self, key: int) -> int:
        found = self._native.get(_key(key))
        if found is None:
            raise KeyError(key)
        return found

    def __setitem__(self, key: int, value: int) -> None:
        self._native.insert(_key(key), _value(value))

    def __delitem__(self, key: int) -> None:
        if self._native.remove(_key(key)) is None:
            raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        try:
            return self._native.get(_key(key)) is not None
        except InvalidArgumentError:
            return False

    def __len__(self) -> int:
        return self._native.len()

    def __iter__(self) -> Iterator[int]:
        return iter([key for key, _ in self._native.items()])

    def get(self, key: int, default: Optional[int] = None) -> Optional[int]:
        found = self._native.get(_key(key))
        return default if found is None else found

    def pop(self, key: int, *default: int) -> int:
        found = self._native.remove(_key(key))
        if found is None:
            if default:
                return default[0]
            raise KeyError(key)
        return found

    def items(self) -> List[Tuple[int, int]]:
        """Every (key, value) pair, in no particular order."""
        return self._native.items()

    def stats(self) -> Dict[str, Any]:
        """``{persistence, flushes, fences, global_depth, region_bytes}``: the flushes and fences made so far."""
        return json.loads(self._native.stats())

    def verify(self) -> None:
        """Checks every invariant; raises ``CorruptionError`` naming what is wrong."""
        self._native.verify()

    def close(self) -> None:
        """Marks the table closed and makes its file durable. Idempotent."""
        self._native.close()

    @property
    def closed(self) -> bool:
        return self._native.closed

    @property
    def path(self) -> str:
        return self._path

    def __enter__(self) -> "HashTable":
        return self

    def __exit__(self, kind, error, traceback) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"HashTable({self._path!r}) [{'closed' if self.closed else 'open'}]"

