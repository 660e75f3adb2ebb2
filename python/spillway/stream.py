"""The stream index: records (key, time, value) in a directory, queried by key and time range.

>>> import spillway, numpy
>>> with spillway.StreamIndex("ticks", sync=False) as index:    # doctest: +SKIP
...     index.append(7, 1000, 21.5)
...     index.append_batch(numpy.array([3, 7], dtype=numpy.uint64),
...                        numpy.array([1001, 1002], dtype=numpy.uint64),
...                        numpy.array([1.0, 2.0]))
...     index.range(0, 10, values="float")
...     index.aggregate(0, 10)
{'keys': array([3, 7, 7], dtype=uint64), 'times': array([1001, 1000, 1002], dtype=uint64), 'values': array([ 1. , 21.5,  2. ])}
{'count': 3, 'numeric': 3, 'sum': 24.5, 'min': 1.0, 'max': 21.5}

Keys and times are unsigned 64-bit integers; :data:`stream_key` maps
integers, floats, 2-D points and string prefixes onto keys in the same
order. A value is bytes; a float is stored as its 8 little-endian bytes,
and aggregates count every 8-byte value as a float, which must be finite
(NaN and infinities are refused). A damaged index is named by
:meth:`StreamIndex.verify` and mended by :meth:`StreamIndex.repair`. See
``docs/stream.md``.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import warnings
from array import array
from itertools import accumulate
from typing import Any, Dict, Optional, Tuple, Union

from . import _native
from ._args import count, size
from .agg import _from_arrow, _is_numpy
from .errors import InvalidArgumentError

_U64_MAX = 2**64 - 1

# The engine's options, and how each is converted before it goes there
# (the engine checks their values: its errors name the option).
_SIZE_OPTIONS = ("buffer_bytes", "value_bytes_max", "cache_bytes")
_COUNT_OPTIONS = ("leaf_capacity", "fan_out")
_SHARE_OPTIONS = ("rebuild_threshold", "fill")
_FLAG_OPTIONS = ("ordered_time", "sync", "tiers", "read_only")
# In the order of spillway_stream::Options.
OPTIONS = (
    "buffer_bytes",
    "leaf_capacity",
    "fan_out",
    "template",
    "rebuild_threshold",
    "fill",
    "value_bytes_max",
    "ordered_time",
    "sync",
    "cache_bytes",
    "tiers",
    "read_only",
)


def _check_options(options: Dict[str, Any]) -> Dict[str, Any]:
    """The options as the engine takes them, or an error naming one the native layer cannot convert."""
    checked = {}
    for name, value in options.items():
        if name not in OPTIONS:
            raise TypeError(f"StreamIndex has no option {name!r}; the options are {', '.join(OPTIONS)}")
        if value is None:
            continue
        if name in _SIZE_OPTIONS:
            value = size(value, name)
        elif name in _COUNT_OPTIONS:
            value = count(value, name)
        elif name in _SHARE_OPTIONS:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidArgumentError(f"{name} must be a number between 0 and 1, not {value!r}")
            value = float(value)
        elif name in _FLAG_OPTIONS:
            if not isinstance(value, bool):
                raise InvalidArgumentError(f"{name} must be True or False, not {value!r}")
        elif not isinstance(value, str):
            raise InvalidArgumentError(f"template must be 'none', 'fixed' or 'rebuild', not {value!r}")
        checked[name] = value
    return checked


def _u64(value: Any, what: str) -> int:
    """An integer in 0..2**64-1 (a NumPy integer too), or an error naming ``what``."""
    return count(value, what)


def _value_bytes(value: Any, what: str) -> bytes:
    """A value as stored: bytes as they are, a number as 8 little-endian bytes of a float64."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if not isinstance(value, bool):
        if isinstance(value, (int, float)):
            return struct.pack("<d", value)
        if hasattr(value, "dtype") and getattr(value.dtype, "kind", "") in "iuf":  # a NumPy scalar
            return struct.pack("<d", float(value))
    hint = " (encode text, as value.encode())" if isinstance(value, str) else ""
    raise InvalidArgumentError(f"{what} must be bytes or a number, not {type(value).__name__}{hint}")


def _arrow(column: Any) -> Any:
    """Arrow arrays as NumPy (numbers, unsigned ones included) or lists (anything else)."""
    if type(column).__module__.startswith("pyarrow") and str(getattr(column, "type", "")).startswith("uint"):
        return column.to_numpy(zero_copy_only=False)
    return _from_arrow(column)


def _u64_column(column: Any, what: str) -> Tuple[bytes, int]:
    """Keys or times as little-endian u64 bytes, and how many."""
    column = _arrow(column)
    if _is_numpy(column):
        import numpy

        if column.ndim != 1:
            raise InvalidArgumentError(f"{what} must be one-dimensional, not of shape {column.shape}")
        if column.dtype.kind == "i":
            negative = column < 0
            if negative.any():
                at = int(numpy.argmax(negative))
                raise InvalidArgumentError(f"{what}[{at}] is {column[at]}: {what} must not be negative")
        elif column.dtype.kind != "u":
            raise InvalidArgumentError(f"{what} must be a uint64 (or non-negative int64) array, not {column.dtype}")
        return numpy.ascontiguousarray(column, dtype="<u8").tobytes(), len(column)
    items = list(column)
    try:
        packed = array("Q", items)
    except (TypeError, OverflowError):
        for at, item in enumerate(items):
            _u64(item, f"{what}[{at}]")
        raise
    if array("Q").itemsize != 8:  # pragma: no cover - every platform Spillway builds on
        raise InvalidArgumentError("this platform's unsigned long long is not 8 bytes")
    if sys.byteorder == "big":  # pragma: no cover
        packed.byteswap()
    return packed.tobytes(), len(items)


def _value_column(column: Any) -> Tuple[bytes, Optional[bytes], int]:
    """Values as one buffer, with their ends (little-endian u64s) unless all are float64s, and how many."""
    column = _arrow(column)
    if _is_numpy(column):
        import numpy

        if column.ndim != 1:
            raise InvalidArgumentError(f"values must be one-dimensional, not of shape {column.shape}")
        if column.dtype.kind in "iuf":
            return numpy.ascontiguousarray(column, dtype="<f8").tobytes(), None, len(column)
        if column.dtype.kind != "O":
            # Not "S" either: NumPy drops the trailing zero bytes of its items.
            raise InvalidArgumentError(
                f"values must be a float64 array, or a list (or object array) of bytes, not {column.dtype}"
            )
        column = column.tolist()
    items = list(column)
    kinds = {type(item) for item in items}
    if kinds <= {float, int}:
        packed = array("d", items)
        if sys.byteorder == "big":  # pragma: no cover
            packed.byteswap()
        return packed.tobytes(), None, len(items)
    if not kinds <= {bytes}:
        items = [_value_bytes(item, f"values[{at}]") for at, item in enumerate(items)]
    ends = array("Q", accumulate(map(len, items)))
    if sys.byteorder == "big":  # pragma: no cover
        ends.byteswap()
    return b"".join(items), ends.tobytes(), len(items)


def _numpy() -> Any:
    try:
        import numpy
    except ImportError as error:  # pragma: no cover - numpy is installed with the test extra
        raise ImportError("StreamIndex.range and get return NumPy arrays: pip install numpy") from error
    return numpy


class StreamIndex:
    """A stream index in directory ``path`` (created if needed).

    Options (keyword-only; each defaults to the engine's choice):

    - ``buffer_bytes`` (64M): bytes of records a buffer holds before it is
      flushed as a segment file (an int, or a size such as ``"8M"``);
    - ``leaf_capacity`` (64), ``fan_out`` (64): the B+ trees' leaf and
      internal node sizes;
    - ``template`` (``"rebuild"``): how buffers are indexed: ``"none"``
      grows a B+ tree per buffer; ``"fixed"`` reuses the first buffer's
      tree as a template; ``"rebuild"`` starts from a template of one leaf
      and rebuilds the template, within a buffer and between buffers, when
      more than ``rebuild_threshold`` (0.05) of its leaves overflowed;
    - ``fill`` (0.7): the leaf fill a rebuilt template aims at;
    - ``value_bytes_max`` (1M, at most half a buffer): the longest value;
    - ``ordered_time`` (False): refuse times before the latest written;
    - ``sync`` (True): fsync the log before a write returns;
    - ``cache_bytes`` (1G): decoded segments kept in memory;
    - ``tiers`` (True): merge the segments kept in memory into a few larger
      sorted runs in the background, so ranges merge few sources (see
      :meth:`settle`);
    - ``read_only`` (False): open an existing index for queries only:
      nothing in its directory changes, writes are refused, and other
      read-only openers may share it (a writer, in this process or
      another, may not: the directory is locked while open).

    Writes are acknowledged when the call returns; with ``sync`` they have
    then survived an fsync of the log. :meth:`close` (or leaving a
    ``with`` block) flushes the buffer as a segment; an index dropped
    without it replays its log when opened again. Calls release the GIL
    and may come from several threads at once; Ctrl-C stops the long ones
    (:meth:`append_batch` of many records, :meth:`flush`, :meth:`compact`,
    :meth:`verify`, :meth:`repair`) with ``KeyboardInterrupt``.

    Opening checks every file the index needs and fails with
    :class:`spillway.CorruptionError` naming a damaged one (a read-only
    open goes on past a damaged segment: the queries that need it fail,
    the others are answered). Files in the directory that are not part of
    the index are kept, with a warning.
    """

    def __init__(self, path: Union[str, "os.PathLike[str]"], **options: Any) -> None:
        self._path = os.fspath(path)
        self._native = _native.StreamIndex(self._path, **_check_options(options))
        for name, reason in self._native.unaccounted():
            warnings.warn(
                f"{os.path.join(self._path, name)} is not part of the stream index and was kept ({reason}); "
                f"StreamIndex.repair({self._path!r}) moves it into lost/",
                stacklevel=2,
            )
        damaged = json.loads(self._native.stats())["damaged_segments"]
        if damaged:
            warnings.warn(
                f"{damaged} segment(s) of {self._path} could not be opened: queries that need them raise "
                "CorruptionError naming the file; verify() names them, StreamIndex.repair() salvages the rest",
                stacklevel=2,
            )

    # -- lifecycle --

    def __enter__(self) -> "StreamIndex":
        return self

    def __exit__(self, *exception: Any) -> None:
        self.close()

    def close(self) -> None:
        """Flushes the buffer as a segment and closes the index; a second close does nothing."""
        self._native.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._native.closed

    @property
    def path(self) -> str:
        """The index's directory."""
        return self._path

    def options(self) -> Dict[str, Any]:
        """The options in effect (those given, and the engine's defaults for the rest)."""
        return json.loads(self._native.options())

    # -- writes --

    def append(self, key: int, time: int, value: Any) -> None:
        """Adds a record; ``value`` is bytes, or a number (stored as a float64)."""
        self._native.append(_u64(key, "key"), _u64(time, "time"), _value_bytes(value, "value"))

    def append_batch(self, keys: Any, times: Any, values: Any) -> None:
        """Adds ``(keys[i], times[i], values[i])`` for every i.

        ``keys`` and ``times``: NumPy uint64 (or non-negative int64) arrays,
        Arrow integer arrays or lists of ints. ``values``: a NumPy float64
        array, an Arrow float64 or binary array, or a list of bytes or
        numbers (numbers are stored as float64s). Every record is checked
        before any is written, so bad input writes nothing (a float that is
        NaN or infinite is refused, naming its position); a large batch is
        written in parts of about a quarter of a buffer, each acknowledged
        before the next: Ctrl-C stops it between parts with
        ``KeyboardInterrupt``, the parts before staying written.
        """
        keys, count = _u64_column(keys, "keys")
        times, time_count = _u64_column(times, "times")
        values, ends, value_count = _value_column(values)
        if not count == time_count == value_count:
            raise InvalidArgumentError(
                f"{count} keys, {time_count} times and {value_count} values; give one time and one value per key"
            )
        self._native.write_columns("append", keys, times, values, ends)

    def update(self, key: int, time: int, value: Any) -> None:
        """Replaces every record with ``key`` and ``time`` by this one (newest wins)."""
        self._native.update(_u64(key, "key"), _u64(time, "time"), _value_bytes(value, "value"))

    def delete(self, key: int, time: int) -> None:
        """Removes every record with ``key`` and ``time``."""
        self._native.delete(_u64(key, "key"), _u64(time, "time"))

    def flush(self) -> None:
        """Writes the buffer as a segment file."""
        self._native.flush()

    def settle(self) -> None:
        """Waits until the background merges of segments into tiers asked for so far are done."""
        self._native.settle()

    def compact(self) -> int:
        """Merges runs of small segments into one, dropping replaced records; returns the segments merged."""
        return self._native.compact()

    # -- reads --

    def _bounds(
        self, key_low: int, key_high: int, time_low: Optional[int], time_high: Optional[int]
    ) -> Tuple[int, int, int, int]:
        return (
            _u64(key_low, "key_low"),
            _u64(key_high, "key_high"),
            0 if time_low is None else _u64(time_low, "time_low"),
            _U64_MAX if time_high is None else _u64(time_high, "time_high"),
        )

    def range(
        self,
        key_low: int,
        key_high: int,
        time_low: Optional[int] = None,
        time_high: Optional[int] = None,
        values: str = "bytes",
    ) -> Dict[str, Any]:
        """The live records with ``key_low <= key <= key_high`` (and times within the bounds given).

        Returns ``{"keys": uint64 array, "times": uint64 array, "values":
        ...}`` sorted by key, then time, then arrival; values a list of
        bytes, or with ``values="float"`` a float64 array (an error names
        the first record whose value is not 8 bytes).
        """
        if values not in ("bytes", "float"):
            raise InvalidArgumentError(f"values must be 'bytes' or 'float', not {values!r}")
        numpy = _numpy()
        keys, times, found = self._native.range(
            *self._bounds(key_low, key_high, time_low, time_high), values == "float"
        )
        return {
            "keys": numpy.frombuffer(keys, dtype="<u8"),
            "times": numpy.frombuffer(times, dtype="<u8"),
            "values": numpy.frombuffer(found, dtype="<f8") if values == "float" else found,
        }

    def get(self, key: int, values: str = "bytes") -> Dict[str, Any]:
        """The live records with ``key``, as :meth:`range` returns them."""
        return self.range(key, key, values=values)

    def aggregate(
        self, key_low: int, key_high: int, time_low: Optional[int] = None, time_high: Optional[int] = None
    ) -> Dict[str, Any]:
        """``{count, numeric, sum, min, max}`` of the live records in range.

        ``count`` counts every record; the others only 8-byte values, read
        as float64s (``min`` and ``max`` are None when there are none). The
        sum is summed so that no partial sum overflows: it is infinite only
        when the total is beyond a float64's range, and never NaN. Leaves
        wholly inside the range answer from their stored summaries.
        """
        count, numeric, total, low, high = self._native.aggregate(
            *self._bounds(key_low, key_high, time_low, time_high)
        )
        return {"count": count, "numeric": numeric, "sum": total, "min": low, "max": high}

    def stats(self) -> Dict[str, Any]:
        """Counters and sizes: writes, buffer, segments, tiers, flushes, templates, overflow, compactions, cache."""
        return json.loads(self._native.stats())

    def verify(self) -> Dict[str, Any]:
        """Checks the index as opening it does and reads every segment file whole.

        Raises :class:`spillway.CorruptionError` naming a damaged file.
        Returns ``{segments, records, leaves, bytes, logs, log_writes,
        redundant, unaccounted}``: what was checked, the files an open for
        writing removes (leftovers of work a crash cut short), and the
        files that are not part of the index (kept).
        """
        return json.loads(self._native.verify())

    @staticmethod
    def repair(path: Union[str, "os.PathLike[str]"]) -> Dict[str, Any]:
        """Repairs the index in directory ``path`` (it must not be open), as ``spillway stream repair`` does.

        An index that checks clean is left as it is (``changed`` False),
        but for files that are not part of it, moved into ``path/lost/``.
        Otherwise the index is rebuilt from what its files prove: every
        record that reads back is kept, the files that cannot be used are
        moved into ``lost/`` (nothing is deleted). Returns ``{changed,
        rebuilt, segments, records, written, log_writes, lost,
        records_lost}``; each entry of ``lost`` says which file, where it
        went (None: it was missing), why, its unreadable byte ranges and
        about how many writes were lost with it.
        """
        return json.loads(_native.StreamIndex.repair(os.fspath(path)))

    def __repr__(self) -> str:
        if self.closed:
            return f"StreamIndex({self._path!r}, closed)"
        stats = self.stats()
        return (
            f"StreamIndex({self._path!r}, segments={stats['segments']}, "
            f"records={stats['segment_records'] + stats['buffer_records']})"
        )


class _StreamKeys:
    """Order-preserving encodings of keys into the index's unsigned 64-bit keys.

    ``a < b`` exactly when ``encode(a) < encode(b)``, so a range of the
    original values is a key range. ``i64`` and ``f64`` also take NumPy
    arrays.
    """

    @staticmethod
    def i64(value: Any) -> Any:
        """A signed 64-bit integer (or an int64 array) as a key: the sign bit flipped."""
        if _is_numpy(value):
            import numpy

            if value.dtype.kind not in "iu":
                raise InvalidArgumentError(f"i64 keys must be integers, not {value.dtype}")
            if value.dtype.kind == "u" and (value > 2**63 - 1).any():
                raise InvalidArgumentError("i64 keys must be below 2**63; unsigned keys need no encoding")
            return value.astype(numpy.int64).view(numpy.uint64) ^ numpy.uint64(1 << 63)
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise InvalidArgumentError(f"an i64 key must be an integer, not {value!r}")
        number = value.__index__()
        if not -(2**63) <= number < 2**63:
            raise InvalidArgumentError(f"an i64 key must be in -2**63..2**63-1, got {number}")
        return _native.stream_encode_i64(number)

    @staticmethod
    def f64(value: Any) -> Any:
        """A float (or a float array) as a key in numeric order; NaN raises ``InvalidArgumentError`` (a ValueError)."""
        if _is_numpy(value):
            import numpy

            floats = numpy.asarray(value, dtype=numpy.float64)
            nan = numpy.isnan(floats)
            if nan.any():
                raise InvalidArgumentError(
                    f"a NaN key has no order; keys must be numbers (element {int(numpy.argmax(nan))} is NaN)"
                )
            bits = numpy.where(floats == 0.0, 0.0, floats).view(numpy.uint64)
            sign = numpy.uint64(1 << 63)
            return numpy.where(bits & sign == 0, bits | sign, ~bits)
        if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
            raise InvalidArgumentError(f"an f64 key must be a number, not {value!r}")
        return _native.stream_encode_f64(float(value))

    @staticmethod
    def point(x: int, y: int) -> int:
        """A 2-D point of two 32-bit unsigned integers as its Z-order (Morton) code."""
        for name, coordinate in (("x", x), ("y", y)):
            if isinstance(coordinate, bool) or not hasattr(coordinate, "__index__"):
                raise InvalidArgumentError(f"point {name} must be an integer, not {coordinate!r}")
            if not 0 <= coordinate.__index__() < 2**32:
                raise InvalidArgumentError(f"point {name} must be in 0..2**32-1, got {coordinate}")
        return _native.stream_encode_point(x.__index__(), y.__index__())

    @staticmethod
    def prefix(text: Union[bytes, str]) -> int:
        """The first 8 bytes of a string (str as UTF-8), big-endian and zero-padded.

        Strings sharing their first 8 bytes share a key: filter a query's
        records by the full string.
        """
        return _native.stream_encode_prefix(_prefix_bytes(text))

    @staticmethod
    def prefix_range(prefix: Union[bytes, str]) -> Tuple[int, int]:
        """``(key_low, key_high)`` covering every string that starts with ``prefix``."""
        return tuple(_native.stream_prefix_range(_prefix_bytes(prefix)))  # type: ignore[return-value]

    @staticmethod
    def decode_i64(key: int) -> int:
        """The integer :meth:`i64` encoded."""
        return _native.stream_decode_i64(_u64(key, "key"))

    @staticmethod
    def decode_f64(key: int) -> float:
        """The float :meth:`f64` encoded (zero comes back as 0.0)."""
        return _native.stream_decode_f64(_u64(key, "key"))

    @staticmethod
    def decode_point(key: int) -> Tuple[int, int]:
        """The point :meth:`point` encoded."""
        return tuple(_native.stream_decode_point(_u64(key, "key")))  # type: ignore[return-value]


def _prefix_bytes(text: Union[bytes, str]) -> bytes:
    if isinstance(text, str):
        return text.encode()
    if isinstance(text, (bytes, bytearray, memoryview)):
        return bytes(text)
    raise InvalidArgumentError(f"a prefix key must be str or bytes, not {type(text).__name__}")


stream_key = _StreamKeys()
"""Key encodings: ``stream_key.i64(x)``, ``.f64(x)``, ``.point(x, y)``, ``.prefix(s)``, ``.prefix_range(s)``."""

__all__ = ["StreamIndex", "stream_key"]
