"""The WB Tree key-value store: a durable, write-optimized store in a directory.

>>> import spillway
>>> with spillway.KV("db") as db:                       # doctest: +SKIP
...     db[b"apple"] = b"3"
...     db["pear"] = "5"                                 # text is stored as UTF-8
...     with db.batch() as batch:                        # all or nothing
...         batch.put(b"plum", b"7")
...         batch.delete(b"apple")
...     db.get(b"apple"), db[b"pear"], sorted(db.keys())
(None, b'5', [b'pear', b'plum'])

In merge mode the store aggregates values by key (the external online
aggregator): ``spillway.KV("counts", merge="sum")`` then ``db.merge(word, 1)``,
and ``db[word]`` is the sum so far, while writes go on. Keys and values are
bytes (text is encoded as UTF-8); iteration is in hash order, since the
store keeps no key order. A damaged store is rebuilt by ``KV.repair(path)``.
See ``docs/kv.md``.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from . import _native
from ._args import U64_MAX, count, size
from .errors import InvalidArgumentError

Key = Union[bytes, bytearray, memoryview, str]

_PUT, _DELETE, _MERGE = 0, 1, 2
# Pairs a scan reads from the engine per call.
_SCAN_PAGE = 4096
# Sizes, as text ("64M") or whole numbers.
_SIZE_OPTIONS = ("root_bytes", "node_bytes", "key_bytes_max", "value_bytes_max")
# Whole numbers, and the largest the native types hold (u32 or u64).
_U32_MAX = (1 << 32) - 1
_COUNT_OPTIONS = {"fan_out": U64_MAX, "block_bytes": _U32_MAX, "bloom_bits_per_key": _U32_MAX,
                  "index_bits_per_key": _U32_MAX, "fast_splits_per_slow_split": _U32_MAX, "lists_max": U64_MAX,
                  "spill_threads": U64_MAX}
_NUMBER_OPTIONS = ("unique_ratio_min", "false_positives_max")
OPTIONS = _SIZE_OPTIONS + tuple(_COUNT_OPTIONS) + _NUMBER_OPTIONS + ("sync", "merge", "read_only")


def _key(key: Any) -> bytes:
    if isinstance(key, bytes):
        return key
    if isinstance(key, (bytearray, memoryview)):
        return bytes(key)
    if isinstance(key, str):
        return key.encode()
    raise InvalidArgumentError(f"a key must be bytes or text, not {type(key).__name__}")


def _value(value: Any) -> Any:
    """A value the engine takes: bytes, text, an int or a float (numbers in merge mode)."""
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, bool) or not isinstance(value, (bytes, str, int, float)):
        raise InvalidArgumentError(f"a value must be bytes, text or a number, not {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidArgumentError(f"a value must be a finite number, not {value}")
    return value


def _path(path: Any) -> str:
    """The store's directory as text, or an error naming what is allowed."""
    if isinstance(path, bool) or not isinstance(path, (str, bytes, os.PathLike)):
        raise InvalidArgumentError(
            f"path must be a str or os.PathLike naming the store's directory, not {type(path).__name__} ({path!r})")
    text = os.fsdecode(os.fspath(path))
    if not text:
        raise InvalidArgumentError("path must name the store's directory, not be empty")
    return text


def _check_options(options: Dict[str, Any]) -> Dict[str, Any]:
    """The options as the native types take them (the engine checks their values)."""
    settings: Dict[str, Any] = {name: None for name in OPTIONS}
    settings["read_only"] = False
    for name, value in options.items():
        if name not in OPTIONS:
            raise TypeError(f"KV has no option {name!r}; the options are {', '.join(OPTIONS)}")
        if value is None:
            continue
        if name in _SIZE_OPTIONS:
            value = size(value, name)
        elif name in _COUNT_OPTIONS:
            value = count(value, name, 0, _COUNT_OPTIONS[name])
        elif name in _NUMBER_OPTIONS:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidArgumentError(f"{name} must be a number, not {value!r}")
            value = float(value)
        elif name == "sync":
            # True / "always": before every write returns; False / "none": never;
            # a number: every that many seconds, in the background.
            if value is True or value is False:
                value = "always" if value else "none"
            elif isinstance(value, (int, float)):
                value = repr(float(value))
            elif not isinstance(value, str):
                raise InvalidArgumentError(f"sync must be True, False, 'always', 'none' or seconds above zero, not {value!r}")
        elif name == "merge" and not isinstance(value, str):
            raise InvalidArgumentError(f"merge must be the name of an aggregate function such as 'sum', not {value!r}")
        elif name == "read_only" and not isinstance(value, bool):
            raise InvalidArgumentError(f"read_only must be True or False, not {value!r}")
        settings[name] = value
    return settings


class Batch:
    """Writes applied together by :meth:`KV.write`, or on leaving ``with db.batch()``."""

    def __init__(self, store: Optional["KV"] = None) -> None:
        self._writes: List[Tuple[int, bytes, Any]] = []
        self._store = store

    def put(self, key: Key, value: Any) -> "Batch":
        self._writes.append((_PUT, _key(key), _value(value)))
        return self

    def delete(self, key: Key) -> "Batch":
        self._writes.append((_DELETE, _key(key), None))
        return self

    def merge(self, key: Key, value: Any) -> "Batch":
        self._writes.append((_MERGE, _key(key), _value(value)))
        return self

    def __len__(self) -> int:
        return len(self._writes)

    def __enter__(self) -> "Batch":
        return self

    def __exit__(self, kind, error, traceback) -> None:
        # Written only if the block finished: a failed block writes nothing.
        if error is None and self._store is not None:
            self._store.write(self)


class KV:
    """A WB Tree key-value store in the directory ``path`` (created if need be).

    Options (all optional): ``root_bytes`` (64M), ``node_bytes`` (256M),
    ``fan_out`` (64), ``block_bytes`` (4096), ``bloom_bits_per_key`` (10: the
    least a list's filter gets), ``index_bits_per_key`` (16: a list's filter
    gets what its other indexes leave of this), ``fast_splits_per_slow_split``
    (8), ``unique_ratio_min`` (0.75), ``lists_max`` (64: a node with more lists
    is spilled or rewritten), ``false_positives_max`` (0.15: so is a node whose
    filters expect more false-positive reads per GET), ``spill_threads`` (0:
    every core; the threads a root spill or a slow split works on), ``sync``
    (True: sync the log before each write returns; False: never; seconds: in
    the background), ``merge`` (an aggregate function: ``sum``, ``count``,
    ``sum+count``, ``max``, ...), ``key_bytes_max``, ``value_bytes_max``,
    ``read_only`` (share the store with other readers; writes refused; list
    files that are missing or damaged fail only the reads that need them).
    Sizes take suffixes: ``"64M"``. An open that fails leaves nothing it
    created. Long calls (``flush``, ``settle``, ``verify``, a large batch,
    ``repair``) stop on Ctrl-C with ``KeyboardInterrupt``.
    """

    def __init__(self, path: Any, **options: Any) -> None:
        self._path = _path(path)
        self._merge = options.get("merge")
        self._native = _native.KV(self._path, _check_options(options))

    @staticmethod
    def repair(path: Any) -> Dict[str, Any]:
        """Repairs the damaged store in ``path`` (not open anywhere), as LevelDB's ``RepairDB`` does.

        A store that passes every check is left as it is (``repaired`` is False). Otherwise its
        metadata is rebuilt from what its files' footers and checksums prove, every record that
        can be read is kept, what cannot be used is moved into ``path/lost/`` (never deleted), and
        the report says what was lost: ``lost`` (file, byte ranges, estimated records, why),
        ``records_lost``, ``moved_to_lost``, ``problem`` (what an open reported).
        """
        return json.loads(_native.KV.repair(_path(path)))

    # Writes ----------------------------------------------------------------

    def put(self, key: Key, value: Any) -> None:
        """Sets ``key`` to ``value`` (in merge mode: to the aggregate of ``value`` alone)."""
        self._native.put(_key(key), _value(value))

    def __setitem__(self, key: Key, value: Any) -> None:
        self.put(key, value)

    def delete(self, key: Key) -> None:
        """Removes ``key``. A blind write: the store does not read the key first."""
        self._native.delete(_key(key))

    def __delitem__(self, key: Key) -> None:
        self.delete(key)

    def merge(self, key: Key, value: Any) -> None:
        """Folds ``value`` into the aggregate of ``key`` (merge mode)."""
        self._native.merge(_key(key), _value(value))

    def batch(self) -> Batch:
        """A batch written atomically when its ``with`` block ends without an error."""
        return Batch(self)

    def write(self, batch: Batch) -> None:
        """Applies ``batch`` atomically: after a crash, all of it or none."""
        self._native.write_batch(batch._writes)

    # Reads -----------------------------------------------------------------

    def get(self, key: Key, default: Any = None) -> Any:
        """The value of ``key`` (bytes, or the aggregate in merge mode), or ``default``."""
        value = self._native.get(_key(key))
        return default if value is None else value

    def __getitem__(self, key: Key) -> Any:
        value = self._native.get(_key(key))
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key: Key) -> bool:
        return self._native.get(_key(key)) is not None

    def items(self) -> Iterator[Tuple[bytes, Any]]:
        """Every live key and value, in hash order, as of the call."""
        scan = self._native.scan()
        while True:
            page = scan.next_page(_SCAN_PAGE)
            if not page:
                return
            yield from page

    def keys(self) -> Iterator[bytes]:
        return (key for key, _ in self.items())

    def values(self) -> Iterator[Any]:
        return (value for _, value in self.items())

    def __iter__(self) -> Iterator[bytes]:
        return self.keys()

    # Maintenance -----------------------------------------------------------

    def flush(self) -> None:
        """Spills what the root buffer holds into the tree (the log can then go)."""
        self._native.flush()

    def settle(self) -> None:
        """Flushes, then waits until the background spills and splits are done."""
        self._native.settle()

    def sync(self) -> None:
        """Makes every write so far durable, whatever ``sync`` is."""
        self._native.sync()

    def stats(self) -> Dict[str, Any]:
        """Counters and sizes: spills, splits, memory per key, write amplification, latencies."""
        return json.loads(self._native.stats())

    def verify(self) -> Dict[str, Any]:
        """Runs the checks an open runs, then reads every list file whole; raises CorruptionError naming a damaged file.

        The report lists ``unreferenced_files`` (redundant; the next open for writing removes them),
        ``unaccounted_files`` (kept), the chain of ``logs``, and ``damage`` found by background work.
        """
        return json.loads(self._native.verify())

    def close(self) -> None:
        """Closes the store; records still in memory are in the log and come back on reopening."""
        self._native.close()

    @property
    def closed(self) -> bool:
        return self._native.closed

    @property
    def path(self) -> str:
        return self._path

    def __enter__(self) -> "KV":
        return self

    def __exit__(self, kind, error, traceback) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        merge = f", merge={self._merge!r}" if self._merge else ""
        return f"KV({self._path!r}{merge}) [{state}]"
