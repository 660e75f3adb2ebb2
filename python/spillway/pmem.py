"""Persistent indexes in a region file: a hash table (CCEH, cacheline-conscious extendible hashing) and a sorted
map (the B3-tree, a B+-tree of in-page binary search trees).

>>> from spillway.pmem import HashTable
>>> with HashTable("/dev/shm/counts.pmem", persistence="clwb") as table:   # doctest: +SKIP
...     table[42] = 7
...     table[42]
7

Keys and values are whole numbers from 0 to 2^64 - 1, or, in a table
created with ``keys="bytes"``, byte strings (keys up to 4 KiB, values up to
1 MiB, each pair stored out of line with a checksum). Every change is
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
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from . import _native
from . import _args
from ._args import count
from .errors import InvalidArgumentError

PathLike = Union[str, "os.PathLike[str]"]


_BYTES = (bytes, bytearray, memoryview)


def _bytes(value: Any, what: str) -> bytes:
    if not isinstance(value, _BYTES):
        raise InvalidArgumentError(f"{what} of this index is bytes, not {type(value).__name__}: {value!r:.60}")
    return bytes(value)


class _RegionFile:
    """What a structure in a region file shares: its path, ``close()``, and the ``with`` block that closes it."""

    _path: str
    _native: Any

    def close(self) -> None:
        """Marks the file closed and makes it durable, so that the next open needs no recovery. Idempotent."""
        self._native.close()

    @property
    def closed(self) -> bool:
        return self._native.closed

    @property
    def path(self) -> str:
        return self._path

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._path!r}) [{'closed' if self.closed else 'open'}]"


class HashTable(_RegionFile):
    """A CCEH table in the region file ``path``: opened if it exists, else created.

    ``segment_bytes`` (a power of two, at least 256), ``probe`` (buckets an
    insert looks at) and ``size`` (the region's bytes, a number or text such
    as ``"1G"``) apply when the table is created; an existing table keeps
    its own, and so does ``keys`` (``"u64"`` or ``"bytes"``; None takes the
    file's kind, or ``"u64"`` when creating; a kind other than the file's
    is refused). Behaves as a mapping of ints to ints, or of bytes to
    bytes; ``close()`` (or the
    ``with`` block's end) marks it closed so that the next open needs no
    recovery.
    """

    def __init__(self, path: PathLike, persistence: str = "auto", *, keys: Optional[str] = None,
                 segment_bytes: int = 16384, probe: int = 4, size: Union[int, str] = "64M") -> None:
        if not isinstance(persistence, str):
            raise InvalidArgumentError(f"persistence must be a name such as 'clwb', not {persistence!r}")
        if keys is not None and not isinstance(keys, str):
            raise InvalidArgumentError(f"keys must be 'u64' or 'bytes', not {keys!r}")
        self._path = os.fspath(path)
        self._native = _native.HashTable(self._path, persistence, count(segment_bytes, "segment_bytes"),
                                         count(probe, "probe"), _args.size(size, "size"), keys)
        self._bytes = self._native.keys == "bytes"

    @property
    def keys_kind(self) -> str:
        """``"u64"`` or ``"bytes"``: what the table maps."""
        return "bytes" if self._bytes else "u64"

    def _get(self, key: Any) -> Any:
        if self._bytes:
            return self._native.get_bytes(_bytes(key, "a key"))
        return self._native.get(count(key, "a key"))

    def _remove(self, key: Any) -> Any:
        """The value removed, or None."""
        if self._bytes:
            return self._native.remove_bytes(_bytes(key, "a key"))
        return self._native.remove(count(key, "a key"))

    def __getitem__(self, key: Any) -> Any:
        found = self._get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __setitem__(self, key: Any, value: Any) -> None:
        if self._bytes:
            self._native.insert_bytes(_bytes(key, "a key"), _bytes(value, "a value"))
        else:
            self._native.insert(count(key, "a key"), count(value, "a value"))

    def __delitem__(self, key: Any) -> None:
        if self._remove(key) is None:
            raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        try:
            return self._get(key) is not None
        except InvalidArgumentError:
            return False

    def __len__(self) -> int:
        return self._native.len()

    def __iter__(self) -> Iterator[Any]:
        return iter([key for key, _ in self.items()])

    def get(self, key: Any, default: Any = None) -> Any:
        found = self._get(key)
        return default if found is None else found

    def pop(self, key: Any, *default: Any) -> Any:
        found = self._remove(key)
        if found is None:
            if default:
                return default[0]
            raise KeyError(key)
        return found

    def get_many(self, keys: Iterable[Any]) -> List[Optional[int]]:
        """The value of each of ``keys`` (None where absent), in order, in one call: its keys' buckets are asked
        of memory a group at a time, so that their latencies overlap. For a u64 table."""
        if self._bytes:
            raise InvalidArgumentError("get_many() takes the keys of a u64 table; this table maps bytes")
        return self._native.get_many([count(key, f"key {i}") for i, key in enumerate(keys)])

    def items(self) -> List[Tuple[Any, Any]]:
        """Every (key, value) pair, in no particular order."""
        return self._native.items_bytes() if self._bytes else self._native.items()

    def stats(self) -> Dict[str, Any]:
        """``{persistence, flushes, fences, merges, merge_flushes, global_depth, region_bytes, keys, segments,
        slots, huge_page_bytes}``: the flushes and fences made so far, the table's shape (``len(table) / slots`` is
        its load factor), and how much of its region the kernel maps in 2 MiB pages (see docs/pmem.md)."""
        return json.loads(self._native.stats())

    def verify(self) -> None:
        """Checks every invariant; raises ``CorruptionError`` naming what is wrong."""
        self._native.verify()




class BTree(_RegionFile):
    """A B3-tree in the region file ``path``: opened (and recovered, if it was not closed) if it exists, else
    created; a sorted mapping of ints (0 to 2^64 - 1) to ints, or, in a tree created with ``keys="bytes"``, of
    byte strings to byte strings (keys up to 4 KiB, values up to 1 MiB, each pair stored out of line with a
    checksum; keys in bytewise order).

    >>> from spillway.pmem import BTree
    >>> with BTree("/dev/shm/sorted.pmem", persistence="clwb") as tree:   # doctest: +SKIP
    ...     tree[20] = 2; tree[10] = 1
    ...     list(tree.items())
    [(10, 1), (20, 2)]

    ``page_bytes`` (a power of two from 512 to 65536) and ``size`` (the region's bytes, a number or text such as
    ``"1G"``) apply when the tree is created; so does ``keys`` (``"u64"`` or ``"bytes"``; None takes the file's
    kind, or ``"u64"`` when creating; a kind other than the file's is refused). Iteration, ``items()`` and
    ``range(low, high)`` run in key order. Every change is durable when the call returns; ``close()`` (or the
    ``with`` block's end) marks the file closed.
    """

    def __init__(self, path: PathLike, persistence: str = "auto", *, keys: Optional[str] = None,
                 page_bytes: int = 4096, size: Union[int, str] = "64M") -> None:
        if not isinstance(persistence, str):
            raise InvalidArgumentError(f"persistence must be a name such as 'clwb', not {persistence!r}")
        if keys is not None and not isinstance(keys, str):
            raise InvalidArgumentError(f"keys must be 'u64' or 'bytes', not {keys!r}")
        self._path = os.fspath(path)
        self._native = _native.BTree(self._path, persistence, count(page_bytes, "page_bytes"),
                                     _args.size(size, "size"), keys)
        self._bytes = self._native.keys == "bytes"

    @property
    def keys_kind(self) -> str:
        """``"u64"`` or ``"bytes"``: what the tree maps."""
        return "bytes" if self._bytes else "u64"

    def _key(self, key: Any, what: str = "a key") -> Any:
        return _bytes(key, what) if self._bytes else count(key, what)

    def _get(self, key: Any) -> Any:
        if self._bytes:
            return self._native.get_bytes(self._key(key))
        return self._native.get(self._key(key))

    def _remove(self, key: Any) -> Any:
        """The value removed, or None."""
        if self._bytes:
            return self._native.remove_bytes(self._key(key))
        return self._native.remove(self._key(key))

    def __getitem__(self, key: Any) -> Any:
        found = self._get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __setitem__(self, key: Any, value: Any) -> None:
        if self._bytes:
            self._native.insert_bytes(self._key(key), _bytes(value, "a value"))
        else:
            self._native.insert(self._key(key), count(value, "a value"))

    def __delitem__(self, key: Any) -> None:
        if self._remove(key) is None:
            raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        try:
            return self._get(key) is not None
        except InvalidArgumentError:
            return False

    def __len__(self) -> int:
        return self._native.len()

    def __iter__(self) -> Iterator[Any]:
        return (key for key, _ in self.items())

    def get(self, key: Any, default: Any = None) -> Any:
        found = self._get(key)
        return default if found is None else found

    def pop(self, key: Any, *default: Any) -> Any:
        found = self._remove(key)
        if found is None:
            if default:
                return default[0]
            raise KeyError(key)
        return found

    def items(self) -> Iterator[Tuple[Any, Any]]:
        """Every (key, value) pair, in key order."""
        return self.range()

    def range(self, low: Any = None, high: Any = None, *, reverse: bool = False,
              batch: int = 4096) -> Iterator[Tuple[Any, Any]]:
        """The (key, value) pairs with keys from ``low`` (None: the least) up to ``high`` (excluded; None: no end),
        in key order, or in reverse order from the end when ``reverse``; read ``batch`` pairs a call."""
        start = None if low is None else self._key(low, "low")
        end = None if high is None else self._key(high, "high")
        size = count(batch, "batch")
        if size == 0:
            raise InvalidArgumentError("batch must be at least 1")
        if self._bytes:
            yield from self._range_bytes(start, end, size, bool(reverse))
            return
        while True:
            pairs = self._native.range(start, end, size, bool(reverse))
            yield from pairs
            if len(pairs) < size:
                return
            last = pairs[-1][0]
            if reverse:
                if last == 0:
                    return
                end = last
            else:
                if last == (1 << 64) - 1:
                    return
                start = last + 1

    def _range_bytes(self, start: Optional[bytes], end: Optional[bytes], size: int,
                     reverse: bool) -> Iterator[Tuple[bytes, bytes]]:
        after = False
        while True:
            pairs = self._native.range_bytes(start, end, size, reverse, after)
            yield from pairs
            if len(pairs) < size:
                return
            if reverse:
                end = pairs[-1][0]
            else:
                start, after = pairs[-1][0], True

    def __reversed__(self) -> Iterator[Any]:
        return (key for key, _ in self.range(reverse=True))

    def stats(self) -> Dict[str, Any]:
        """``{persistence, flushes, fences, page_bytes, height, region_bytes, huge_page_bytes, splits, rebuilds,
        merges, merge_flushes}`` (splits, rebuilds and merges since the open)."""
        return json.loads(self._native.stats())

    def verify(self) -> None:
        """Checks every invariant (and, in a tree of bytes keys, every record's checksum); raises
        ``CorruptionError`` naming what is wrong."""
        self._native.verify()
