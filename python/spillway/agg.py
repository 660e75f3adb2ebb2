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
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from . import _columns, _native
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
    ``approx_distinct(P)``, ``collect_list``, ``collect_set``, ...), several
    joined with ``+`` or given as a list (``["sum", "mean"]``), or an object
    with ``init``, ``merge`` and ``finalize`` methods. ``engine`` is
    ``"cbt"`` (least memory; results after :meth:`finalize`) or ``"hash"``.
    ``memory`` bounds the engine's memory: the CBT compacts as it nears
    it, and inserts beyond it raise
    :class:`spillway.ResourcesExhaustedError`; ``buffer`` (4K to 1G) and
    ``fan_out`` (2 to 4096) shape the CBT; ``threads`` (0 to 256) is the
    number of CBT worker threads, each with a tree of its own (0 empties
    one tree on the inserting thread, as user-defined aggregates always do),
    or the hash engine's threads on its typed path.

    ``keys`` groups by several key columns, as SQL's ``GROUP BY a, b``: their
    number, or their names (which :meth:`to_arrow` uses; one column is
    ``key``, several ``key_0``, ``key_1``... unless named). Several key
    columns, and several value columns (one per function), take the hash
    engine's typed path, with the functions that have a typed form (count,
    sum, min, max, mean, variance, stddev and their population forms).

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
        keys: Union[int, Sequence[str]] = 1,
    ) -> None:
        if isinstance(function, (list, tuple)) and function and all(isinstance(name, str) for name in function):
            function = "+".join(function)
        name, user = (function, None) if isinstance(function, str) else (None, function)
        if not isinstance(engine, str):
            raise InvalidArgumentError(f"engine must be 'cbt' or 'hash', not {engine!r}")
        self._key_kind: Optional[type] = None
        self._text_values = False
        # The typed path: the hash engine over columns, for the functions
        # that have a typed form, chosen by the first insert (a batch of
        # columns) or by several key or value columns; see _typed_batch.
        self._function = name
        self._engine = engine
        self._typed: Optional[Any] = None
        self._typed_key_kinds: List[type] = []
        self._typed_number_types: List[str] = []
        self._typed_threads = max(thread_count(threads), 1)
        self._memory = size(memory, "memory", 1)
        self._inserted = False
        self._typed_epoch = 0
        self._key_names = self._names_of_keys(keys)
        clashes = set(self._key_names) & set(self._column_names())
        if clashes:
            raise InvalidArgumentError(f"key columns and results would share the names {sorted(clashes)}")
        if len(self._key_names) > 1:
            self._check_typed_form(f"grouping by {len(self._key_names)} key columns")
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

    @staticmethod
    def _names_of_keys(keys: Any) -> List[str]:
        if isinstance(keys, int) and not isinstance(keys, bool):
            if not 1 <= keys <= 64:
                raise InvalidArgumentError(f"keys must be from 1 to 64 key columns, not {keys}")
            return ["key"] if keys == 1 else [f"key_{index}" for index in range(keys)]
        if (
            isinstance(keys, (list, tuple))
            and 1 <= len(keys) <= 64
            and all(isinstance(key, str) for key in keys)
            and len(set(keys)) == len(keys)
        ):
            return list(keys)
        raise InvalidArgumentError(
            f"keys must be a number of key columns (1 to 64) or a list of their distinct names, not {keys!r}"
        )

    def _check_typed_form(self, what: str) -> None:
        """Fails unless this aggregator can take the typed path, which ``what`` needs."""
        if self._engine != "hash" or self._function is None:
            raise InvalidArgumentError(
                f"{what} takes engine='hash' and built-in functions with a typed form (count, sum, min, max, "
                "mean, variance, stddev and their population forms)"
            )
        try:
            _native.TypedAggregator(self._function, ["i8"], ["i8"], 1, self._memory)
        except InvalidArgumentError as error:
            raise InvalidArgumentError(f"{what} takes functions with a typed form: {error}") from None

    def _call(self, method: Callable[..., Any], *arguments: Any) -> Any:
        """Calls the engine; its messages name integer keys as the integers they are."""
        try:
            return method(*arguments)
        except (InvalidArgumentError, ResourcesExhaustedError, PoisonedError) as error:
            if self._key_kind is not int or self._typed is not None:
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

        With several key columns ``key`` is a tuple of one key per column;
        with a value column per function ``value`` is a tuple of one value
        per function. A refused value raises :class:`InvalidArgumentError`
        naming the key and changes nothing.
        """
        if self._typed is not None or len(self._key_names) > 1:
            self._typed_pair(key, value)
            return
        self._call(self._native.insert, self._key(key), self._value(value))
        self._inserted = True

    def insert_batch(self, keys: Any, values: Any) -> None:
        """Inserts ``keys[i], values[i]`` for every i.

        Columns may be lists, NumPy arrays, Arrow arrays, pandas or Polars
        Series. With several key columns ``keys`` is a list of them; ``values``
        may be a list of columns, one per function (``["sum", "mean"]`` over
        ``[v1, v3]``). Integer or text keys with numeric values in columns
        take the hash engine's typed path, without a Python object per row.

        All or nothing: a refused pair raises :class:`InvalidArgumentError`
        naming its position (counted from 0) and key, and inserts none of the
        batch. Ctrl-C raises ``KeyboardInterrupt`` (see :class:`Aggregator`).
        """
        if self._typed is not None or len(self._key_names) > 1 or _columns.is_column_list(values):
            self._typed_batch(keys, values, required=True)
            return
        if _columns.is_column(keys) and _columns.is_column(values) and self._typed_batch(keys, values):
            return
        keys, values = _from_arrow(keys), _from_arrow(values)
        if _is_numpy(keys) and _is_numpy(values) and keys.dtype.kind in "iu" and values.dtype.kind in "iuf":
            import numpy

            _columns.check_int_range(keys, "keys")
            _columns.check_int_range(values, "values")
            if len(keys) != len(values):
                raise InvalidArgumentError(f"{len(keys)} keys but {len(values)} values; give one value per key")
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

    def _typed_columns(self, keys: Any, what: str = "keys") -> List[Any]:
        """The key columns of a batch: a list of them for several, else the one."""
        count = len(self._key_names)
        if count == 1:
            return [keys]
        if not isinstance(keys, (list, tuple)) or len(keys) != count:
            raise InvalidArgumentError(f"this aggregator groups by {count} key columns: give {what} as a list of {count}")
        return list(keys)

    def _typed_batch(self, keys: Any, values: Any, required: bool = False) -> bool:
        """Inserts a batch of columns on the typed path, if it is (or becomes) this aggregator's; False if not.

        The typed path takes a hash aggregator whose function has a typed form
        (count, sum, min, max, mean, variance, stddev and their ``+``
        combinations) at its first insert, when that is columns of integer or
        text keys and numeric values, or when there are several key or value
        columns (``required``: then it fails rather than return False). Each
        value column keeps the type of the first batch's: integers may join
        float values (as floats), floats may not join integer values.
        """
        import numpy

        if self._typed is None and not required:
            if self._inserted or self._function is None or self._engine != "hash":
                return False
        key_list = self._typed_columns(keys)
        value_list = list(values) if _columns.is_column_list(values) else [values]
        key_columns = [
            _columns.key_column(column, "keys" if len(key_list) == 1 else f"key column {index}")
            for index, column in enumerate(key_list)
        ]
        numbers = [
            _columns.number_column(column, "values" if len(value_list) == 1 else f"value column {index}")
            for index, column in enumerate(value_list)
        ]
        if self._typed is None:
            if any(column is None for column in key_columns + numbers):
                if not required:
                    return False
                raise InvalidArgumentError(
                    "on the typed path keys are integers or text and values are numbers, in columns "
                    "(lists, NumPy, Arrow, pandas or Polars)"
                )
            if self._inserted:
                raise InvalidArgumentError("pairs inserted one by one took the byte path, which has no several columns")
            if required:
                self._check_typed_form("several key or value columns")
            number_types = ["f8" if column.dtype.kind == "f" else "i8" for column in numbers]
            try:
                self._typed = _native.TypedAggregator(
                    self._function, [column.code for column in key_columns], number_types,
                    self._typed_threads, self._memory,
                )
            except InvalidArgumentError:
                if required:
                    raise
                return False  # no typed form: the byte path takes it
            self._typed_key_kinds = [column.kind for column in key_columns]
            self._typed_number_types = number_types
            if len(key_columns) == 1:
                self._check_key_kind(key_columns[0].kind)
        self._check_typed_kinds(key_list, key_columns, numbers)
        lengths = {column.length for column in key_columns}
        if len(lengths) > 1:
            raise InvalidArgumentError(f"key columns of {sorted(lengths)} keys; give columns of one length")
        for column in numbers:
            if len(column) != key_columns[0].length:
                raise InvalidArgumentError(
                    f"{key_columns[0].length} keys but {len(column)} values; give one value per key"
                )
        self._typed_epoch += 1
        # Read in place by the engine: no copy where a column already is
        # contiguous int64 or float64.
        packed = [
            numpy.ascontiguousarray(column, dtype="<" + number_type)
            for column, number_type in zip(numbers, self._typed_number_types)
        ]
        self._call(self._typed.insert_columns, [(column.data, column.offsets) for column in key_columns], packed)
        return True

    def _check_typed_kinds(self, key_list: list, key_columns: list, numbers: list) -> None:
        """Refuses columns of other kinds than this typed aggregator's."""
        for index, (given, column, kind) in enumerate(zip(key_list, key_columns, self._typed_key_kinds)):
            if column is None or column.kind is not kind:
                found = column.kind.__name__ if column is not None else getattr(given, "dtype", type(given).__name__)
                which = "keys" if len(key_list) == 1 else f"key column {index}"
                raise InvalidArgumentError(
                    f"{which} must be {kind.__name__} (this aggregator's keys are {_KIND_NAMES[kind]}), not {found}"
                )
        if len(numbers) != len(self._typed_number_types):
            raise InvalidArgumentError(
                f"{len(numbers)} value columns given; this aggregator takes {len(self._typed_number_types)}"
            )
        for column, number_type in zip(numbers, self._typed_number_types):
            if column is None:
                raise InvalidArgumentError(f"this aggregator's values are numbers; {self._function} cannot take them")
            if number_type == "i8" and column.dtype.kind == "f":
                raise InvalidArgumentError(
                    "this aggregator's values are integers (its first batch was), so it cannot take floats; "
                    "give floats to an aggregator whose first batch is float"
                )

    def _typed_key_columns(self, key: Any) -> List[Any]:
        """One key (a tuple of them for several key columns) as columns of one row, each checked."""
        parts = key if len(self._key_names) > 1 and isinstance(key, tuple) else (key,)
        if len(parts) != len(self._key_names):
            raise InvalidArgumentError(
                f"this aggregator groups by {len(self._key_names)} key columns: give a key as a tuple of "
                f"{len(self._key_names)}, not {key!r}"
            )
        kinds = self._typed_key_kinds or [type(part) for part in parts]
        columns = []
        for part, kind in zip(parts, kinds):
            if isinstance(part, bool) or not isinstance(part, kind) or kind not in _KIND_NAMES:
                raise InvalidArgumentError(
                    f"keys must be {kind.__name__} (this aggregator's keys are {_KIND_NAMES.get(kind, kind.__name__)}), "
                    f"not {type(part).__name__}"
                )
            if kind is int:
                import numpy

                if not _INT_MIN <= part <= _INT_MAX:
                    raise InvalidArgumentError(
                        f"the integer key {part} is outside the 64-bit range; keys must be from {_INT_MIN} to {_INT_MAX}"
                    )

                columns.append(numpy.array([part], dtype=numpy.int64))
            else:
                import pyarrow

                columns.append(pyarrow.array([part], type=pyarrow.string() if kind is str else pyarrow.binary()))
        return columns

    def _typed_pair(self, key: Any, value: Any) -> None:
        """One pair on the typed path: a batch of one."""
        import numpy

        columns = self._typed_key_columns(key)
        several = len(self._typed_number_types) > 1 or (self._typed is None and isinstance(value, tuple))
        parts = value if several and isinstance(value, tuple) else (value,)
        values = []
        for part in parts:
            if hasattr(part, "item"):  # a NumPy scalar
                part = part.item()
            if isinstance(part, bool) or not isinstance(part, (int, float)):
                raise InvalidArgumentError(
                    f"key {key}: this aggregator's values are numbers; {self._function} cannot take "
                    f"{type(part).__name__} values"
                )
            if isinstance(part, int):
                _check_int_value(part, f"key {key}: ")
            values.append(numpy.array([part]))
        self._typed_batch(columns if len(columns) > 1 else columns[0], values, required=True)

    def _typed_results(self) -> Tuple[List[Any], List[Any]]:
        """Every group: the key columns (NumPy for integers, Arrow for text) and one NumPy array per function."""
        key_parts, columns = self._call(self._typed.results)
        keys = [
            _columns.key_array(kind, code, data, offsets)
            for kind, (code, data, offsets) in zip(self._typed_key_kinds, key_parts)
        ]
        return keys, [_columns.result_array(*column) for column in columns]

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
        """``key``'s result (a tuple of keys for several key columns), or None if nothing was inserted for it."""
        if self._typed is not None:
            columns = [_columns.key_column(column) for column in self._typed_key_columns(key)]
            return self._call(self._typed.lookup, [(column.data, column.offsets) for column in columns])[0]
        if len(self._key_names) > 1:
            return None  # nothing inserted yet
        return self._output(self._call(self._native.get, self._key(key)))

    def __iter__(self) -> Iterator[Tuple[Any, Any]]:
        """(key, result) pairs: the CBT's in hash order, after :meth:`finalize`.

        The results stream: the engine hands them over a page at a time
        (the CBT decompresses one leaf at a time), so reading them takes
        little memory beyond the aggregator's own. Inserting or finalizing
        while a reader is part-way makes its next page raise
        :class:`InvalidArgumentError`. Several key columns give a tuple of
        keys per group.
        """
        if self._typed is not None:
            yield from self._typed_items()
            return
        if len(self._key_names) > 1:
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
        groups = len(columns[0]) if columns else 0
        for start in range(0, groups, _RESULTS_PAGE):
            if self._typed_epoch != epoch:
                raise InvalidArgumentError(
                    "the aggregator changed (an insert or a finalize) while its results were read; read them again"
                )
            end = start + _RESULTS_PAGE
            page = [column[start:end].tolist() for column in columns]
            rows = page[0] if len(page) == 1 else [list(row) for row in zip(*page)]
            key_page = [
                key[start:end].tolist() if hasattr(key, "tolist") else key[start:end].to_pylist() for key in keys
            ]
            key_rows = key_page[0] if len(key_page) == 1 else list(zip(*key_page))
            yield from zip(key_rows, rows)

    def to_dict(self) -> Dict[Any, Any]:
        """Every key's result in a dict."""
        return dict(self)

    def to_arrow(self) -> Any:
        """Every key's result as a ``pyarrow.Table``: columns ``key`` and ``value``.

        Several functions give one column per function instead of
        ``value``, named after it (``sum+count``: ``key``, ``sum``,
        ``count``; a repeated name gets ``_2``, ``_3``...). Several key
        columns are ``key_0``, ``key_1``... or the names given as ``keys``. On
        the typed path the table is made from the engine's columns directly,
        without a Python object per group.
        """
        import pyarrow

        names = self._column_names()
        if self._typed is not None:
            keys, columns = self._typed_results()
            return pyarrow.table({**dict(zip(self._key_names, keys)), **dict(zip(names, columns))})
        keys, values = [], []
        for key, value in self:
            keys.append(key)
            values.append(value)
        if len(self._key_names) > 1:
            return pyarrow.table({name: [] for name in self._key_names + names})
        if len(names) == 1:
            return pyarrow.table({self._key_names[0]: keys, "value": values})
        return pyarrow.table(
            {self._key_names[0]: keys, **{name: [row[i] for row in values] for i, name in enumerate(names)}}
        )

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


_KIND_NAMES = {int: "integers", str: "text", bytes: "bytes"}

__all__ = ["Aggregator"]
