"""GroupBy-Aggregate: one result per key, with the Compressed Buffer Tree or a hash table.

>>> import spillway
>>> totals = spillway.Aggregator("sum")
>>> totals.insert("apples", 3)
>>> totals.insert_batch(["pears", "apples"], [2, 4])
>>> totals.finalize()
>>> totals.to_dict()                                  # doctest: +SKIP
{'apples': 7, 'pears': 2}

Keys may be ``str``, ``bytes`` or ``int`` (one kind per aggregator); values
``int`` (64-bit), ``float`` (finite), ``str`` or ``bytes``. ``insert_batch``
takes lists, NumPy arrays or Arrow arrays; integer keys with numeric NumPy
values go to the engine as two flat buffers, without a Python object per
record. A refused value (NaN, a string given to ``sum``, a string given to
``min`` after numbers) raises :class:`InvalidArgumentError` naming the key, or
its position in the batch, and changes nothing. Ctrl-C stops ``insert_batch``
and ``finalize`` with ``KeyboardInterrupt``; see :class:`Aggregator`.

A function of your own is an object with ``init(value)``, ``merge(a, b)``
and ``finalize(state)`` methods (merge must be commutative and associative).
It is the slow path: every state is pickled into the engine's buffers and
every call takes the GIL. See ``docs/aggregate.md``.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Dict, Iterable, Iterator, Optional, Tuple, Union

from . import _native
from ._args import count, size, threads as thread_count
from .errors import InvalidArgumentError, PoisonedError, ResourcesExhaustedError

_INT_KEY_BYTES = 8
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1

# Results handed over per call to the engine while iterating.
_RESULTS_PAGE = 65536


def _check_int_value(value: int, where: str) -> None:
    if not _INT_MIN <= value <= _INT_MAX:
        raise InvalidArgumentError(
            f"{where}the integer {value} is outside the 64-bit range ({_INT_MIN} to {_INT_MAX}); "
            "values must be 64-bit integers, finite floats, str or bytes"
        )


# Integer keys travel as 8 bytes, which the engine's messages show in hex.
_HEX_KEY = re.compile(r"key 0x([0-9a-f]{16})\b")


def _numpy_range_check(array: Any, what: str) -> None:
    """Unsigned 64-bit integers above the int64 range would wrap: refuse them."""
    if array.dtype.kind == "u" and array.dtype.itemsize == 8 and len(array) > 0:
        import numpy

        too_big = array > numpy.uint64(_INT_MAX)
        if too_big.any():
            position = int(numpy.argmax(too_big))
            raise InvalidArgumentError(
                f"{what}: at position {position} of the batch (counted from 0), {int(array[position])} is "
                f"outside the 64-bit signed range; {what} must fit int64 ({_INT_MIN} to {_INT_MAX})"
            )


def _is_numpy(values: Any) -> bool:
    return type(values).__module__ == "numpy" and hasattr(values, "dtype")


def _from_arrow(values: Any) -> Any:
    """Arrow arrays as NumPy (numbers) or lists (anything else)."""
    if type(values).__module__.startswith("pyarrow") and hasattr(values, "to_pylist"):
        if hasattr(values, "type") and str(values.type) in ("int64", "int32", "double", "float", "int16", "int8"):
            return values.to_numpy(zero_copy_only=False)
        return values.to_pylist()
    return values


class Aggregator:
    """Aggregates values by key with ``function``.

    ``function`` is a built-in name (``count``, ``sum``, ``min``, ``max``,
    ``mean``, ``variance``, ``stddev``, ``first``, ``last``, ``top_k(K)``,
    ``approx_distinct(P)``, ``collect_list``, ``collect_set``, ...) or an
    object with ``init``, ``merge`` and ``finalize`` methods. ``engine`` is
    ``"cbt"`` (least memory; results after :meth:`finalize`) or ``"hash"``.
    ``memory`` bounds the engine's memory: the CBT compacts as it nears
    it, and inserts beyond it raise
    :class:`spillway.ResourcesExhaustedError`; ``buffer`` (4K to 1G) and
    ``fan_out`` (2 to 4096) shape the CBT; ``threads`` (0 to 256) is the
    number of CBT worker threads, each with a tree of its own (0 empties
    one tree on the inserting thread, as user-defined aggregates always do).

    Ctrl-C during :meth:`insert_batch` or :meth:`finalize` raises
    ``KeyboardInterrupt`` within a fraction of a second. An interrupted
    ``finalize`` leaves every value in the aggregator: call it again to
    complete it. An ``insert_batch`` interrupted while it checks its batch
    inserted none of it; interrupted later, it inserted part of its batch,
    so the aggregator then refuses every call with
    :class:`spillway.PoisonedError`; make a new one.
    """

    def __init__(
        self,
        function: Any = "count",
        engine: str = "cbt",
        memory: Union[int, str] = "1G",
        buffer: Union[int, str] = "8M",
        fan_out: int = 16,
        threads: int = 2,
    ) -> None:
        name, user = (function, None) if isinstance(function, str) else (None, function)
        if not isinstance(engine, str):
            raise InvalidArgumentError(f"engine must be 'cbt' or 'hash', not {engine!r}")
        self._key_kind: Optional[type] = None
        self._text_values = False
        # The typed path: the hash engine over columns of numbers, for the
        # functions that have a typed form, chosen by the first insert (a
        # batch of NumPy or Arrow numbers); see _typed_batch.
        self._function = name
        self._engine = engine
        self._typed: Optional[Any] = None
        self._typed_threads = max(thread_count(threads), 1)
        self._memory = size(memory, "memory", 1)
        self._inserted = False
        self._typed_epoch = 0
        self._native = _native.Aggregator(
            name,
            engine,
            self._memory,
            # The engine checks their ranges; here only what converts.
            size(buffer, "buffer"),
            count(fan_out, "fan_out"),
            thread_count(threads),
            user,
        )

    def _call(self, method: Callable[..., Any], *arguments: Any) -> Any:
        """Calls the engine; its messages name integer keys as the integers they are."""
        try:
            return method(*arguments)
        except (InvalidArgumentError, ResourcesExhaustedError, PoisonedError) as error:
            if self._key_kind is not int:
                raise
            message = _HEX_KEY.sub(lambda match: f"key {int(match.group(1), 16) - 2**63}", str(error))
            raise type(error)(message) from None

    # Keys travel as bytes: text as UTF-8, integers as 8 big-endian bytes
    # with the sign bit flipped.
    def _check_key_kind(self, kind: type) -> None:
        if self._key_kind is None:
            self._key_kind = kind
        elif self._key_kind is not kind:
            raise InvalidArgumentError(
                f"keys must all be of one kind: this aggregator has {self._key_kind.__name__} keys, "
                f"not {kind.__name__}"
            )

    def _key(self, key: Any) -> bytes:
        if isinstance(key, bool) or not isinstance(key, (str, bytes, int)):
            raise InvalidArgumentError(f"a key must be str, bytes or int, not {type(key).__name__}")
        kind = int if isinstance(key, int) else type(key)
        self._check_key_kind(kind)
        if kind is str:
            return key.encode()
        if kind is int:
            if not _INT_MIN <= key <= _INT_MAX:
                raise InvalidArgumentError(
                    f"the integer key {key} is outside the 64-bit range; keys must be from {_INT_MIN} to {_INT_MAX}"
                )
            return (key + 2**63).to_bytes(_INT_KEY_BYTES, "big")
        return key

    def _unkey(self, key: bytes) -> Any:
        if self._key_kind is str:
            return key.decode()
        if self._key_kind is int:
            return int.from_bytes(key, "big") - 2**63
        return key

    def _value(self, value: Any, where: str = "") -> Any:
        if isinstance(value, str):
            self._text_values = True
        elif isinstance(value, bool) or not isinstance(value, (int, float, bytes)):
            if hasattr(value, "item"):  # a NumPy scalar
                return self._value(value.item(), where)
            raise InvalidArgumentError(f"{where}a value must be int, float, str or bytes, not {type(value).__name__}")
        elif isinstance(value, int):
            _check_int_value(value, where)
        return value

    def _output(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self._output(item) for item in value]
        if isinstance(value, bytes) and self._text_values:
            return value.decode(errors="replace")
        return value

    def insert(self, key: Any, value: Any = 1) -> None:
        """Folds ``value`` into ``key``'s result (``count`` ignores the value).

        A refused value raises :class:`InvalidArgumentError` naming the key
        and changes nothing.
        """
        if self._typed is not None:
            self._typed_pair(key, value)
            return
        self._call(self._native.insert, self._key(key), self._value(value))
        self._inserted = True

    def insert_batch(self, keys: Iterable[Any], values: Iterable[Any]) -> None:
        """Inserts ``keys[i], values[i]`` for every i: lists, NumPy or Arrow arrays.

        All or nothing: a refused pair raises :class:`InvalidArgumentError`
        naming its position (counted from 0) and key, and inserts none of the
        batch. Ctrl-C raises ``KeyboardInterrupt`` (see :class:`Aggregator`).
        """
        keys, values = _from_arrow(keys), _from_arrow(values)
        numbers = _is_numpy(keys) and _is_numpy(values) and keys.dtype.kind in "iu" and values.dtype.kind in "iuf"
        if numbers or self._typed is not None:
            if not numbers:
                import numpy

                keys, values = numpy.asarray(keys), numpy.asarray(values)
            _numpy_range_check(keys, "keys")
            _numpy_range_check(values, "values")
            if len(keys) != len(values):
                raise InvalidArgumentError(f"{len(keys)} keys but {len(values)} values; give one value per key")
            if self._typed_batch(keys, values):
                return
        if numbers:
            import numpy

            self._check_key_kind(int)
            flipped = keys.astype(">i8").view(numpy.uint8).reshape(-1, _INT_KEY_BYTES).copy()
            flipped[:, 0] ^= 0x80
            kind = "f8" if values.dtype.kind == "f" else "i8"
            packed = numpy.ascontiguousarray(values.astype("<" + kind))
            self._call(self._native.insert_columns, flipped.tobytes(), _INT_KEY_BYTES, packed.tobytes(), kind)
            self._inserted = True
            return
        keys = keys.tolist() if _is_numpy(keys) else list(keys)
        values = values.tolist() if _is_numpy(values) else list(values)
        if len(keys) != len(values):
            raise InvalidArgumentError(f"{len(keys)} keys but {len(values)} values; give one value per key")
        where = "at position {} of the batch (counted from 0), key {!r}; nothing in the batch was inserted: "
        encoded_keys = []
        for position, key in enumerate(keys):
            try:
                encoded_keys.append(self._key(key))
            except InvalidArgumentError as error:
                raise InvalidArgumentError(where.format(position, key) + str(error)) from None
        encoded_values = []
        for position, value in enumerate(values):
            try:
                encoded_values.append(self._value(value))
            except InvalidArgumentError as error:
                raise InvalidArgumentError(where.format(position, keys[position]) + str(error)) from None
        self._call(self._native.insert_lists, encoded_keys, encoded_values)
        self._inserted = True

    def _typed_batch(self, keys: Any, values: Any) -> bool:
        """Inserts a batch of numbers on the typed path, if it is (or becomes) this aggregator's; False if not.

        The typed path takes a hash aggregator whose function has a typed form
        (count, sum, min, max, mean, variance, stddev and their ``+``
        combinations) at its first insert, when that is a batch of integer
        keys and numeric values. Its values keep the type of that first batch:
        integers may join float values (as floats), floats may not join
        integer values.
        """
        import numpy

        if self._typed is None:
            if self._inserted or self._function is None or self._engine != "hash":
                return False
            if keys.dtype.kind not in "iu" or values.dtype.kind not in "iuf":
                return False
            number_type = "f8" if values.dtype.kind == "f" else "i8"
            try:
                self._typed = _native.TypedAggregator(
                    self._function, "i8", number_type, self._typed_threads, self._memory
                )
            except InvalidArgumentError:
                return False  # no typed form: the byte path takes it
            self._check_key_kind(int)
            self._typed_number_type = number_type
        if keys.dtype.kind not in "iu":
            raise InvalidArgumentError(
                f"keys must be int (this aggregator's keys are integers), not {keys.dtype.name}"
            )
        if values.dtype.kind not in "iuf":
            raise InvalidArgumentError(
                f"this aggregator's values are numbers; {self._function} cannot take {values.dtype.name} values"
            )
        if self._typed_number_type == "i8" and values.dtype.kind == "f":
            raise InvalidArgumentError(
                "this aggregator's values are integers (its first batch was), so it cannot take floats; "
                "give floats to an aggregator whose first batch is float"
            )
        self._typed_epoch += 1
        packed_keys = numpy.ascontiguousarray(keys, dtype="<i8")
        packed_values = numpy.ascontiguousarray(values, dtype="<" + self._typed_number_type)
        self._call(self._typed.insert_columns, packed_keys.tobytes(), packed_values.tobytes())
        return True

    def _typed_pair(self, key: Any, value: Any) -> None:
        """One pair on the typed path: a batch of one."""
        import numpy

        self._typed_key(key)
        if hasattr(value, "item"):  # a NumPy scalar
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidArgumentError(
                f"key {key}: this aggregator's values are numbers; {self._function} cannot take "
                f"{type(value).__name__} values"
            )
        if isinstance(value, int):
            _check_int_value(value, f"key {key}: ")
        self._typed_batch(numpy.array([key], dtype=numpy.int64), numpy.array([value]))

    def _typed_key(self, key: Any) -> int:
        """One key on the typed path: an integer in the 64-bit range."""
        if isinstance(key, bool) or not isinstance(key, int):
            raise InvalidArgumentError(
                f"keys must be int (this aggregator's keys are integers), not {type(key).__name__}"
            )
        self._key(key)  # the range check
        return key

    def _typed_results(self) -> Tuple[Any, list]:
        """Every group: the keys as a NumPy array and one array per function.

        Object arrays where a column has nulls or integers wider than 64 bits.
        """
        import numpy

        keys, columns = self._call(self._typed.results)
        arrays = []
        for kind, data, valid in columns:
            if kind == "i16":
                wide = numpy.frombuffer(data, dtype=numpy.uint8).reshape(-1, 16)
                wide_ints = [int.from_bytes(row.tobytes(), "little", signed=True) for row in wide]
                arrays.append(numpy.array(wide_ints, dtype=object))
                continue
            array = numpy.frombuffer(data, dtype="<" + kind)
            if valid is not None:
                present = numpy.frombuffer(valid, dtype=numpy.uint8).astype(bool)
                if not present.all():
                    array = array.astype(object)
                    array[~present] = None
            arrays.append(array)
        return numpy.frombuffer(keys, dtype="<i8"), arrays

    def finalize(self) -> None:
        """Makes the results readable; inserting afterwards needs another finalize.

        Ctrl-C raises ``KeyboardInterrupt`` and leaves every value in the
        aggregator: call ``finalize`` again to complete it.
        """
        if self._typed is not None:
            self._typed_epoch += 1
            self._call(self._typed.finalize)
            return
        self._call(self._native.finalize)

    def get(self, key: Any) -> Any:
        """``key``'s result, or None if nothing was inserted for it."""
        if self._typed is not None:
            import numpy

            key = self._typed_key(key)
            return self._call(self._typed.lookup, numpy.array([key], dtype="<i8").tobytes())[0]
        return self._output(self._call(self._native.get, self._key(key)))

    def __iter__(self) -> Iterator[Tuple[Any, Any]]:
        """(key, result) pairs: the CBT's in hash order, after :meth:`finalize`.

        The results stream: the engine hands them over a page at a time
        (the CBT decompresses one leaf at a time), so reading them takes
        little memory beyond the aggregator's own. Inserting or finalizing
        while a reader is part-way makes its next page raise
        :class:`InvalidArgumentError`.
        """
        if self._typed is not None:
            yield from self._typed_items()
            return
        epoch = self._native.epoch()
        position = 0
        while True:
            page = self._call(self._native.results_page, position, _RESULTS_PAGE, epoch)
            if not page:
                return
            position += len(page)
            for key, value in page:
                yield self._unkey(key), self._output(value)

    items = __iter__

    def _typed_items(self) -> Iterator[Tuple[Any, Any]]:
        """The typed path's results, a page at a time, refusing to go on after a change."""
        epoch = self._typed_epoch
        keys, columns = self._typed_results()
        for start in range(0, len(keys), _RESULTS_PAGE):
            if self._typed_epoch != epoch:
                raise InvalidArgumentError(
                    "the aggregator changed (an insert or a finalize) while its results were read; read them again"
                )
            end = start + _RESULTS_PAGE
            page = [column[start:end].tolist() for column in columns]
            rows = page[0] if len(page) == 1 else [list(row) for row in zip(*page)]
            yield from zip(keys[start:end].tolist(), rows)

    def to_dict(self) -> Dict[Any, Any]:
        """Every key's result in a dict."""
        return dict(self)

    def to_arrow(self) -> Any:
        """Every key's result as a ``pyarrow.Table``: columns ``key`` and ``value``.

        Several functions joined with ``+`` give one column per function
        instead of ``value``, named after it (``sum+count``: ``key``,
        ``sum``, ``count``; a repeated name gets ``_2``, ``_3``...). On the
        typed path the table is made from the engine's columns directly,
        without a Python object per group.
        """
        import pyarrow

        names = self._column_names()
        if self._typed is not None:
            keys, columns = self._typed_results()
            return pyarrow.table({"key": keys, **dict(zip(names, columns))})
        keys, values = [], []
        for key, value in self:
            keys.append(key)
            values.append(value)
        if len(names) == 1:
            return pyarrow.table({"key": keys, "value": values})
        return pyarrow.table({"key": keys, **{name: [row[i] for row in values] for i, name in enumerate(names)}})

    def _column_names(self) -> list:
        """The result columns' names: ``value`` for one function, else each function's name."""
        if self._function is None or "+" not in self._function:
            return ["value"]
        parts = [part.strip() for part in self._function.split("+")]
        return [f"{name}_{parts[:i].count(name) + 1}" if name in parts[:i] else name for i, name in enumerate(parts)]

    def stats(self) -> Dict[str, Any]:
        """Inserts, memory by part, compression ratio, spills, compactions, inserts per second."""
        if self._typed is not None:
            stats = json.loads(self._typed.stats())
            stats.update(function=self._function, engine="hash")
            return stats
        return json.loads(self._native.stats())

    def __repr__(self) -> str:
        stats = self.stats()
        return f"Aggregator({stats['function']!r}, engine={stats['engine']!r}, inserts={stats['inserts']})"


__all__ = ["Aggregator"]
